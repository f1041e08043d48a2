//! A consumer of a durable queue in PostgreSQL itself: the orders contract, with each unit's
//! acknowledgement committed in the same transaction as its effect.
//!
//!     cargo run --features postgres --example sql_consumer
//!
//! Env: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), `QUEUE` (default
//! `orders`: the table `delivery_queue_orders`), `DELIVERY_LIMIT` (default 5), `BATCH` (units a
//! claim takes; default 32), `CONCURRENCY` (default 16), `VISIBILITY_MS` (how long a claimed unit
//! stays invisible to other consumers; kept alive while its handler runs; default 30000),
//! `EFFECT_DELAY_MS` (a pause after the effect and before the commit, to widen the window a crash
//! can hit; default 0).
//!
//! On start it creates the queue's table and the tables of the orders contract (`orders`,
//! `balances`, `latest_orders`, `confirmations`). Each unit is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}`, published with
//! `Queue::publish` in the producer's transaction (or a plain `INSERT`; see `delivery::queue`).
//! In the unit's own transaction (`PgTx`) the order is inserted (nothing if its id exists) and,
//! only if inserted, its amount is added to the customer's balance; the customer's latest order
//! is replaced only by a unit with a newer stamp (rule 4: the row's sequence); and a confirmation
//! is counted for the customer — an effect with no natural key, applied exactly once per unit
//! with no inbox, because the unit's acknowledgement commits in that same transaction: a crash,
//! a failure or a database outage before the commit rolls back both. Malformed units and
//! negative amounts go to the dead letter (the queue table's `dead` rows) directly. Runs until
//! SIGINT or SIGTERM, then shuts down gracefully.

use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::queue::{PgTx, Queue};
use delivery::store::postgres;
use delivery::{Consumer, HandlerError, Json, Stamp, State, consumer};
use serde::Deserialize;
use sqlx::postgres::PgPoolOptions;

#[path = "support/env.rs"]
mod env;
use env::{env_num, env_or, shutdown_signal};

/// One unit: `{"order_id": str, "customer_id": str, "amount_cents": int}`.
#[derive(Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer_id: String,
    amount_cents: i64,
}

#[derive(Clone)]
struct App {
    /// A pause after the effect, before the commit (0 in production).
    effect_delay: Duration,
}

/// Applies one order in the unit's transaction: the runtime commits it with the unit's
/// acknowledgement once this returns `Ok`, and rolls it back otherwise.
#[consumer]
async fn apply_order(
    State(app): State<App>,
    stamp: Stamp,
    Json(order): Json<OrderPlaced>,
    mut tx: PgTx,
) -> Result<(), HandlerError> {
    if order.amount_cents < 0 {
        return Err(HandlerError::reject(format!(
            "order {} has a negative amount ({} cents)",
            order.order_id, order.amount_cents
        )));
    }
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
    // A confirmation counted per unit: `sent + 1` has no key a redelivery could collide with,
    // and needs none — it commits with the acknowledgement, so it is counted once.
    sqlx::query(
        "INSERT INTO confirmations (customer_id, sent) VALUES ($1, 1) \
         ON CONFLICT (customer_id) DO UPDATE SET sent = confirmations.sent + 1",
    )
    .bind(&order.customer_id)
    .execute(&mut *tx)
    .await?;
    if !app.effect_delay.is_zero() {
        tokio::time::sleep(app.effect_delay).await;
    }
    Ok(())
}

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // First of all, so a signal during start-up stops the consumer as soon as it starts.
    let shutdown = shutdown_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let concurrency: usize = env_num("CONCURRENCY", 16);
    // A connection for each unit's transaction, one for the claims, one for `LISTEN`.
    let db = PgPoolOptions::new()
        .max_connections(
            u32::try_from(concurrency)
                .unwrap_or(u32::MAX)
                .saturating_add(4),
        )
        .connect(&url)
        .await
        .map_err(|e| format!("connecting to PostgreSQL at {url}: {e}"))?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, customer_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS balances (customer_id text PRIMARY KEY, total_cents bigint);
         CREATE TABLE IF NOT EXISTS latest_orders (customer_id text PRIMARY KEY, order_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS confirmations (customer_id text PRIMARY KEY, sent bigint NOT NULL);",
    )
    .execute(&db)
    .await?;
    postgres::migrate(&mut *db.acquire().await?).await?;

    let name = env_or("QUEUE", "orders");
    let queue = Queue::new(&name)
        .postgres(db.clone())
        .max_deliveries(env_num("DELIVERY_LIMIT", 5))
        .batch(env_num("BATCH", 32))
        .visibility_timeout(
            Duration::from_millis(env_num("VISIBILITY_MS", 30_000)),
            Duration::from_secs(30 * 60),
        );
    queue.migrate().await?;
    let depth = queue.store().clone().watch_depth(Duration::from_secs(15));
    // Delivered rows are kept a day, then deleted.
    let retention = {
        let store = queue.store().clone();
        tokio::spawn(async move {
            loop {
                if let Err(error) = store.retain(Duration::from_secs(86_400)).await {
                    tracing::warn!(%error, "retention failed; retrying in a minute");
                }
                tokio::time::sleep(Duration::from_secs(60)).await;
            }
        })
    };
    tracing::info!(
        queue = name,
        table = queue.queue().table_name(),
        concurrency,
        "consuming"
    );
    let report = Consumer::new(queue.source())
        .state(App {
            effect_delay: Duration::from_millis(env_num("EFFECT_DELAY_MS", 0)),
        })
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown)
        .run(apply_order)
        .await;
    depth.abort();
    retention.abort();
    tracing::info!(?report, "stopped");
    Ok(())
}
