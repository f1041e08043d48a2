//! The orders contract the queue and log consumer examples share: one transaction per unit,
//! keyed by the order's own id, so a redelivery changes nothing (rule 3); and each customer's
//! latest order, guarded by the unit's stamp, so an older order arriving late never replaces a
//! newer one (rule 4). And a side effect with no natural key — a confirmation counted per
//! customer — guarded by the inbox, in the same transaction, so a redelivery of the unit counts
//! nothing (rule 3). `examples/sql_consumer.rs` applies the same effect ([`apply`], [`confirm`])
//! in the unit's own transaction, where the acknowledgement commits with it and no inbox is
//! needed, in PostgreSQL or SQLite: the statements are the same in both ([`Contract`]).
//!
//! [`apply_orders`] applies the same contract to a batch of units in one transaction, with one
//! set-based statement per table (the examples' `BATCH_SIZE`): the same tables end in the same
//! state as if each unit of the batch had been applied on its own, in the batch's order.
#![allow(dead_code)] // each example uses part of it

use std::collections::{BTreeMap, HashSet, btree_map::Entry};
use std::time::Duration;

use delivery::inbox::Inbox;
use delivery::store::postgres;
use delivery::{Batch, BatchOutcome, HandlerError, Json, Stamp, State, UnitId, consumer};
use serde::Deserialize;
use sqlx::encode::Encode;
use sqlx::{Database, Executor, IntoArguments, PgPool, Pool, Postgres, Type};

/// A database the orders contract runs in, PostgreSQL or SQLite: its statements are the same in
/// both (`$N` parameters, `INSERT … ON CONFLICT … DO UPDATE … EXCLUDED`, `RETURNING`); only the
/// stamp guard is each database's own function.
pub trait Contract: Database {
    /// Creates the stamp guard's table if it is missing (`delivery::store::<database>::migrate`).
    fn migrate_guard(conn: &mut Self::Connection) -> impl Future<Output = sqlx::Result<()>> + Send;

    /// Moves `key`'s stamp in `scope` forward if `stamp` is newer, in the caller's transaction
    /// (`delivery::store::<database>::advance`): whether it moved.
    fn advance(
        conn: &mut Self::Connection,
        scope: &str,
        key: &str,
        stamp: Stamp,
    ) -> impl Future<Output = sqlx::Result<bool>> + Send;
}

impl Contract for Postgres {
    async fn migrate_guard(conn: &mut Self::Connection) -> sqlx::Result<()> {
        postgres::migrate(conn).await
    }

    async fn advance(
        conn: &mut Self::Connection,
        scope: &str,
        key: &str,
        stamp: Stamp,
    ) -> sqlx::Result<bool> {
        postgres::advance(conn, scope, key, stamp).await
    }
}

#[cfg(feature = "sqlite")]
impl Contract for sqlx::Sqlite {
    async fn migrate_guard(conn: &mut Self::Connection) -> sqlx::Result<()> {
        delivery::store::sqlite::migrate(conn).await
    }

    async fn advance(
        conn: &mut Self::Connection,
        scope: &str,
        key: &str,
        stamp: Stamp,
    ) -> sqlx::Result<bool> {
        delivery::store::sqlite::advance(conn, scope, key, stamp).await
    }
}

/// Creates the `orders`, `balances`, `latest_orders` and `confirmations` tables, the stamp
/// guard's and the inbox's, if they are missing.
pub async fn create_tables(db: &PgPool) -> sqlx::Result<()> {
    create_contract_tables(db).await?;
    confirmations().postgres(db.clone()).migrate().await
}

/// Creates the `orders`, `balances`, `latest_orders` and `confirmations` tables and the stamp
/// guard's, if they are missing.
pub async fn create_contract_tables<DB: Contract>(db: &Pool<DB>) -> sqlx::Result<()>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
{
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, customer_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS balances (customer_id text PRIMARY KEY, total_cents bigint);
         CREATE TABLE IF NOT EXISTS latest_orders (customer_id text PRIMARY KEY, order_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS confirmations (customer_id text PRIMARY KEY, sent bigint NOT NULL);",
    )
    .execute(db)
    .await?;
    let mut connection = db.acquire().await?;
    DB::migrate_guard(&mut connection).await
}

/// The inbox of the units whose confirmation was counted (in the table `delivery_inbox`).
fn confirmations() -> Inbox {
    Inbox::new("orders.confirmations")
}

/// One unit: `{"order_id": str, "customer_id": str, "amount_cents": int}`.
#[derive(Deserialize)]
pub struct OrderPlaced {
    pub order_id: String,
    pub customer_id: String,
    pub amount_cents: i64,
}

/// The handler's state.
#[derive(Clone)]
pub struct App {
    /// Where the effects go.
    pub db: PgPool,
    /// A pause between the effect's commit and the handler's return (0 in production), so a
    /// crash test can kill the consumer while effects are committed and not acknowledged.
    pub effect_delay: Duration,
}

/// Applies one order. Everything written comes from the unit, keyed by the order's own id — but
/// the confirmation counter, which has no key and is guarded by the unit's id in the inbox.
#[consumer]
pub async fn apply_order(
    State(app): State<App>,
    id: UnitId,
    stamp: Stamp,
    Json(order): Json<OrderPlaced>,
) -> Result<(), HandlerError> {
    refuse_negative(&order)?;
    let mut tx = app.db.begin().await?;
    apply::<Postgres>(&mut tx, &order, stamp).await?;
    // A confirmation counted for the customer: `sent + 1` has no key a redelivery could collide
    // with, so the inbox records the unit in this transaction and the count moves only the first
    // time. (Two publishes of one order under two message ids are two units: each is counted.)
    if confirmations().first_time(&mut tx, &id).await? {
        confirm::<Postgres>(&mut tx, &order).await?;
    }
    tx.commit().await?;
    if !app.effect_delay.is_zero() {
        tokio::time::sleep(app.effect_delay).await;
    }
    Ok(())
}

/// Applies a batch of orders in one transaction, with the guarantees of [`apply_order`], each
/// table written by one statement over arrays (`unnest`), never a statement per order:
///
/// - a negative amount is refused unit by unit: that unit alone goes to the dead letter, the
///   others are applied (a [`BatchOutcome`]);
/// - the orders are inserted keyed by their own id (`ON CONFLICT DO NOTHING RETURNING`): an order
///   already stored, or given twice in the batch, is inserted once, by the batch's first unit
///   carrying it, as units applied one by one would;
/// - the balances move by the orders actually inserted, summed per customer;
/// - each customer's stamp guard moves once, to the highest stamp among its inserted orders
///   ([`postgres::advance_all`]), and its latest order is replaced by that order only where the
///   guard moved (rule 4);
/// - a confirmation is counted once per unit recorded now in the inbox
///   ([`Inbox::first_times`]), summed per customer (rule 3).
///
/// Every statement writes its keys in sorted order (orders by id, the other tables by
/// customer), so two batches running at once lock the keys they share in the same order and
/// wait for each other rather than deadlock. A unit without a stamp is malformed before it enters
/// the batch, as with [`apply_order`].
#[consumer]
pub async fn apply_orders(
    State(app): State<App>,
    orders: Batch<(Json<OrderPlaced>, Stamp)>,
) -> Result<BatchOutcome, HandlerError> {
    let mut outcome = BatchOutcome::applied();
    let mut valid = Vec::with_capacity(orders.len());
    for item in &orders {
        let (Json(order), stamp) = item.value();
        match refuse_negative(order) {
            Ok(()) => valid.push(Placed {
                id: item.id(),
                order,
                stamp: *stamp,
            }),
            Err(refused) => {
                outcome.fail(item.id(), refused);
            }
        }
    }
    if valid.is_empty() {
        return Ok(outcome);
    }
    let mut tx = app.db.begin().await?;
    apply_all(&mut tx, &valid).await?;
    let ids: Vec<UnitId> = valid.iter().map(|placed| placed.id.clone()).collect();
    let mut first = confirmations().first_times(&mut tx, &ids).await?;
    // One confirmation per unit recorded now (a unit given twice is recorded, and counted, once).
    let confirmed = valid
        .iter()
        .filter(|placed| first.remove(placed.id))
        .map(|placed| placed.order.customer_id.as_str());
    confirm_all(&mut tx, confirmed).await?;
    tx.commit().await?;
    if !app.effect_delay.is_zero() {
        tokio::time::sleep(app.effect_delay).await;
    }
    Ok(outcome)
}

/// A unit of a batch to apply: its id, its order and its stamp.
pub struct Placed<'a> {
    pub id: &'a UnitId,
    pub order: &'a OrderPlaced,
    pub stamp: Stamp,
}

/// The keyed effect of [`apply`] for a batch, in the caller's transaction: one statement per
/// table, over arrays, the keys of each in sorted order.
pub async fn apply_all(tx: &mut sqlx::PgConnection, batch: &[Placed<'_>]) -> sqlx::Result<()> {
    // Each order once, as the batch's first unit carrying it gives it, sorted by id.
    let mut distinct: BTreeMap<&str, (usize, &Placed<'_>)> = BTreeMap::new();
    for (position, placed) in batch.iter().enumerate() {
        distinct
            .entry(placed.order.order_id.as_str())
            .or_insert((position, placed));
    }
    let (mut ids, mut customers, mut amounts) = (vec![], vec![], vec![]);
    for placed in distinct.values().map(|(_, placed)| placed) {
        ids.push(placed.order.order_id.as_str());
        customers.push(placed.order.customer_id.as_str());
        amounts.push(placed.order.amount_cents);
    }
    // `unnest` yields the rows in the arrays' order, and the insert takes them in that order.
    let inserted: HashSet<String> = sqlx::query_scalar(
        "INSERT INTO orders (order_id, customer_id, amount_cents) \
         SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) \
         ON CONFLICT (order_id) DO NOTHING RETURNING order_id",
    )
    .bind(&ids)
    .bind(&customers)
    .bind(&amounts)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    if inserted.is_empty() {
        return Ok(());
    }
    // Per customer, from the orders inserted now: the sum of their amounts, and the newest
    // (highest stamp; between equal stamps the first in the batch, as one by one).
    let mut balances: BTreeMap<&str, i64> = BTreeMap::new();
    let mut newest: BTreeMap<&str, (usize, &Placed<'_>)> = BTreeMap::new();
    for (position, placed) in distinct.into_values() {
        if !inserted.contains(&placed.order.order_id) {
            continue;
        }
        let customer = placed.order.customer_id.as_str();
        *balances.entry(customer).or_default() += placed.order.amount_cents;
        match newest.entry(customer) {
            Entry::Vacant(slot) => {
                slot.insert((position, placed));
            }
            Entry::Occupied(mut slot) => {
                let (kept_position, kept) = *slot.get();
                if (placed.stamp, std::cmp::Reverse(position))
                    > (kept.stamp, std::cmp::Reverse(kept_position))
                {
                    slot.insert((position, placed));
                }
            }
        }
    }
    add_per_customer(&mut *tx, "balances", "total_cents", balances).await?;
    let stamps: Vec<(&str, Stamp)> = newest
        .iter()
        .map(|(customer, (_, placed))| (*customer, placed.stamp))
        .collect();
    let moved = postgres::advance_all(tx, "latest_orders", &stamps).await?;
    let (mut customers, mut ids, mut amounts) = (vec![], vec![], vec![]);
    for (customer, (_, placed)) in newest.iter().filter(|(c, _)| moved.contains(**c)) {
        customers.push(*customer);
        ids.push(placed.order.order_id.as_str());
        amounts.push(placed.order.amount_cents);
    }
    if !customers.is_empty() {
        sqlx::query(
            "INSERT INTO latest_orders (customer_id, order_id, amount_cents) \
             SELECT * FROM unnest($1::text[], $2::text[], $3::bigint[]) \
             ON CONFLICT (customer_id) DO UPDATE \
             SET order_id = EXCLUDED.order_id, amount_cents = EXCLUDED.amount_cents",
        )
        .bind(&customers)
        .bind(&ids)
        .bind(&amounts)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// One confirmation counted per customer named in `customers` (once per time named), in one
/// statement, sorted by customer: what [`confirm`] does for each unit of a batch the inbox
/// recorded now.
pub async fn confirm_all<'a>(
    tx: &mut sqlx::PgConnection,
    customers: impl IntoIterator<Item = &'a str>,
) -> sqlx::Result<()> {
    let mut sent: BTreeMap<&str, i64> = BTreeMap::new();
    for customer in customers {
        *sent.entry(customer).or_default() += 1;
    }
    if sent.is_empty() {
        return Ok(());
    }
    add_per_customer(tx, "confirmations", "sent", sent).await
}

/// Adds each customer's amount in `added` to its `column` of `table` (a row made for a customer
/// without one), in one statement, in the customers' sorted order.
async fn add_per_customer(
    tx: &mut sqlx::PgConnection,
    table: &str,
    column: &str,
    added: BTreeMap<&str, i64>,
) -> sqlx::Result<()> {
    let (customers, amounts): (Vec<&str>, Vec<i64>) = added.into_iter().unzip();
    // `table` and `column` are this file's own names, never input.
    sqlx::query(sqlx::AssertSqlSafe(format!(
        "INSERT INTO {table} (customer_id, {column}) \
         SELECT * FROM unnest($1::text[], $2::bigint[]) \
         ON CONFLICT (customer_id) DO UPDATE SET {column} = {table}.{column} + EXCLUDED.{column}"
    )))
    .bind(&customers)
    .bind(&amounts)
    .execute(tx)
    .await?;
    Ok(())
}

/// A negative amount is refused for good: the unit goes to the dead letter.
pub fn refuse_negative(order: &OrderPlaced) -> Result<(), HandlerError> {
    if order.amount_cents < 0 {
        return Err(HandlerError::reject(format!(
            "order {} has a negative amount ({} cents)",
            order.order_id, order.amount_cents
        )));
    }
    Ok(())
}

/// The keyed effect, in the caller's transaction: the order inserted (nothing if its id is
/// there) and, only if inserted, its amount added to the customer's balance, so a redelivery
/// changes nothing; the customer's latest order replaced only by a unit with a newer stamp
/// (rule 4).
pub async fn apply<DB: Contract>(
    tx: &mut DB::Connection,
    order: &OrderPlaced,
    stamp: Stamp,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
    for<'t> i64: Encode<'t, DB> + Type<DB>,
{
    let inserted = sqlx::query(
        "INSERT INTO orders (order_id, customer_id, amount_cents) VALUES ($1, $2, $3) \
         ON CONFLICT (order_id) DO NOTHING RETURNING 1",
    )
    .bind(order.order_id.as_str())
    .bind(order.customer_id.as_str())
    .bind(order.amount_cents)
    .fetch_optional(&mut *tx)
    .await?
    .is_some();
    if !inserted {
        return Ok(());
    }
    sqlx::query(
        "INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2) \
         ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents",
    )
    .bind(order.customer_id.as_str())
    .bind(order.amount_cents)
    .execute(&mut *tx)
    .await?;
    if DB::advance(tx, "latest_orders", &order.customer_id, stamp).await? {
        sqlx::query(
            "INSERT INTO latest_orders (customer_id, order_id, amount_cents) VALUES ($1, $2, $3) \
             ON CONFLICT (customer_id) DO UPDATE \
             SET order_id = EXCLUDED.order_id, amount_cents = EXCLUDED.amount_cents",
        )
        .bind(order.customer_id.as_str())
        .bind(order.order_id.as_str())
        .bind(order.amount_cents)
        .execute(&mut *tx)
        .await?;
    }
    Ok(())
}

/// One confirmation counted for the order's customer. It has no natural key, so it must run once
/// per unit: guarded by the inbox, or committed with the unit's acknowledgement.
pub async fn confirm<DB: Contract>(
    tx: &mut DB::Connection,
    order: &OrderPlaced,
) -> Result<(), sqlx::Error>
where
    for<'c> &'c mut DB::Connection: Executor<'c, Database = DB>,
    DB::Arguments: IntoArguments<DB>,
    for<'t> &'t str: Encode<'t, DB> + Type<DB>,
{
    sqlx::query(
        "INSERT INTO confirmations (customer_id, sent) VALUES ($1, 1) \
         ON CONFLICT (customer_id) DO UPDATE SET sent = confirmations.sent + 1",
    )
    .bind(order.customer_id.as_str())
    .execute(tx)
    .await?;
    Ok(())
}
