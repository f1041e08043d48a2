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
use delivery::{Consumer, HandlerError, Json, Stamp, State, consumer};
use sqlx::postgres::PgPoolOptions;

#[path = "support/env.rs"]
mod env;
use env::{env_num, env_or, shutdown_signal};
#[path = "support/orders.rs"]
mod orders;
use orders::OrderPlaced;

#[derive(Clone)]
struct App {
    /// A pause after the effect, before the commit (0 in production).
    effect_delay: Duration,
}

/// Applies one order in the unit's transaction (the effect of `support/orders.rs`): the runtime
/// commits it with the unit's acknowledgement once this returns `Ok`, and rolls it back
/// otherwise. The confirmation, with no natural key, needs no inbox: it commits with the
/// acknowledgement, so it is counted once per unit.
#[consumer]
async fn apply_order(
    State(app): State<App>,
    stamp: Stamp,
    Json(order): Json<OrderPlaced>,
    mut tx: PgTx,
) -> Result<(), HandlerError> {
    orders::refuse_negative(&order)?;
    orders::apply(&mut tx, &order, stamp).await?;
    orders::confirm(&mut tx, &order).await?;
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
    orders::create_contract_tables(&db).await?;

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
