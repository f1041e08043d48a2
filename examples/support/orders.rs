//! The orders contract the queue and log consumer examples share: one PostgreSQL transaction per
//! unit, keyed by the order's own id, so a redelivery changes nothing (rule 3); and each
//! customer's latest order, guarded by the unit's stamp, so an older order arriving late never
//! replaces a newer one (rule 4). And a side effect with no natural key — a confirmation counted
//! per customer — guarded by the inbox, in the same transaction, so a redelivery of the unit
//! counts nothing (rule 3).

use std::time::Duration;

use delivery::inbox::Inbox;
use delivery::store::postgres;
use delivery::{HandlerError, Json, Stamp, State, UnitId, consumer};
use serde::Deserialize;
use sqlx::PgPool;

/// Creates the `orders`, `balances`, `latest_orders` and `confirmations` tables, the stamp
/// guard's and the inbox's, if they are missing.
pub async fn create_tables(db: &PgPool) -> sqlx::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, customer_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS balances (customer_id text PRIMARY KEY, total_cents bigint);
         CREATE TABLE IF NOT EXISTS latest_orders (customer_id text PRIMARY KEY, order_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS confirmations (customer_id text PRIMARY KEY, sent bigint NOT NULL);",
    )
    .execute(db)
    .await?;
    confirmations().postgres(db.clone()).migrate().await?;
    let mut connection = db.acquire().await?;
    postgres::migrate(&mut connection).await
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
    if order.amount_cents < 0 {
        return Err(HandlerError::reject(format!(
            "order {} has a negative amount ({} cents)",
            order.order_id, order.amount_cents
        )));
    }
    let mut tx = app.db.begin().await?;
    let inserted = sqlx::query(
        "INSERT INTO orders (order_id, customer_id, amount_cents) VALUES ($1, $2, $3) \
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(&order.order_id)
    .bind(&order.customer_id)
    .bind(order.amount_cents)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 1 {
        sqlx::query(
            "INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2) \
             ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents",
        )
        .bind(&order.customer_id)
        .bind(order.amount_cents)
        .execute(&mut *tx)
        .await?;
        // The customer's latest order: only if this unit is newer than the one stored (rule 4).
        if postgres::advance(&mut tx, "latest_orders", &order.customer_id, stamp).await? {
            sqlx::query(
                "INSERT INTO latest_orders (customer_id, order_id, amount_cents) VALUES ($1, $2, $3) \
                 ON CONFLICT (customer_id) DO UPDATE \
                 SET order_id = EXCLUDED.order_id, amount_cents = EXCLUDED.amount_cents",
            )
            .bind(&order.customer_id)
            .bind(&order.order_id)
            .bind(order.amount_cents)
            .execute(&mut *tx)
            .await?;
        }
    }
    // A confirmation counted for the customer: `sent + 1` has no key a redelivery could collide
    // with, so the inbox records the unit in this transaction and the count moves only the first
    // time. (Two publishes of one order under two message ids are two units: each is counted.)
    if confirmations().first_time(&mut tx, &id).await? {
        sqlx::query(
            "INSERT INTO confirmations (customer_id, sent) VALUES ($1, 1) \
             ON CONFLICT (customer_id) DO UPDATE SET sent = confirmations.sent + 1",
        )
        .bind(&order.customer_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await?;
    if !app.effect_delay.is_zero() {
        tokio::time::sleep(app.effect_delay).await;
    }
    Ok(())
}
