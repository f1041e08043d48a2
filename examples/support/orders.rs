//! The orders contract the queue and log consumer examples share: one PostgreSQL transaction per
//! unit, keyed by the order's own id, so a redelivery changes nothing (rule 3); and each
//! customer's latest order, guarded by the unit's stamp, so an older order arriving late never
//! replaces a newer one (rule 4).

use std::time::Duration;

use delivery::store::postgres;
use delivery::{HandlerError, Json, Stamp, State, consumer};
use serde::Deserialize;
use sqlx::PgPool;

/// Creates the `orders`, `balances` and `latest_orders` tables, and the stamp guard's, if they
/// are missing.
pub async fn create_tables(db: &PgPool) -> sqlx::Result<()> {
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, customer_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS balances (customer_id text PRIMARY KEY, total_cents bigint);
         CREATE TABLE IF NOT EXISTS latest_orders (customer_id text PRIMARY KEY, order_id text, amount_cents bigint);",
    )
    .execute(db)
    .await?;
    let mut connection = db.acquire().await?;
    postgres::migrate(&mut connection).await
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

/// Applies one order. Everything written comes from the unit, keyed by the order's own id.
#[consumer]
pub async fn apply_order(
    State(app): State<App>,
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
    tx.commit().await?;
    if !app.effect_delay.is_zero() {
        tokio::time::sleep(app.effect_delay).await;
    }
    Ok(())
}
