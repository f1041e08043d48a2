//! The orders contract the queue and log consumer examples share: one transaction per unit,
//! keyed by the order's own id, so a redelivery changes nothing (rule 3); and each customer's
//! latest order, guarded by the unit's stamp, so an older order arriving late never replaces a
//! newer one (rule 4). And a side effect with no natural key — a confirmation counted per
//! customer — guarded by the inbox, in the same transaction, so a redelivery of the unit counts
//! nothing (rule 3). `examples/sql_consumer.rs` applies the same effect ([`apply`], [`confirm`])
//! in the unit's own transaction, where the acknowledgement commits with it and no inbox is
//! needed, in PostgreSQL or SQLite: the statements are the same in both ([`Contract`]).
#![allow(dead_code)] // each example uses part of it

use std::time::Duration;

use delivery::inbox::Inbox;
use delivery::store::postgres;
use delivery::{HandlerError, Json, Stamp, State, UnitId, consumer};
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
    order_id: String,
    customer_id: String,
    amount_cents: i64,
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
