//! A RabbitMQ consumer that survives crashes, outages and poison, writing into PostgreSQL.
//!
//!     cargo run --features lapin --example rabbitmq_consumer
//!
//! Env: `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `QUEUE` (default `orders`), `DELIVERY_LIMIT`
//! (default 5), `PREFETCH` (default 32), `CONCURRENCY` (default 16).
//!
//! On start it declares the quorum queue `$QUEUE` with the limit and the dead letter `$QUEUE.dlq`,
//! and creates the `orders` and `balances` tables. Each unit is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}`: in one transaction the order is
//! inserted (nothing if its id exists) and, only if inserted, its amount is added to the
//! customer's balance, so a redelivery changes nothing. Malformed units and negative amounts go
//! to the dead letter directly; a database outage is retried with backoff. Runs until SIGINT or
//! SIGTERM, then shuts down gracefully.

use std::time::Duration;

use delivery::rabbitmq::{RabbitDeadLetters, RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, Json, State, consumer};
use serde::Deserialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

#[derive(Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer_id: String,
    amount_cents: i64,
}

#[derive(Clone)]
struct App {
    db: PgPool,
}

/// Applies one order. Everything written comes from the unit, keyed by the order's own id.
#[consumer]
async fn apply_order(
    State(app): State<App>,
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
    }
    tx.commit().await?;
    Ok(())
}

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v
            .parse()
            .unwrap_or_else(|_| panic!("{name}={v} is not a number")),
        Err(_) => default,
    }
}

/// SIGTERM or SIGINT. The handlers are installed here, at startup, not when the future is first
/// polled: a signal arriving before that would otherwise kill the process mid-effect.
fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received; shutting down");
    }
}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    // First of all, so a signal during start-up stops the consumer as soon as it starts.
    let shutdown = shutdown_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let queue = env_or("QUEUE", "orders");
    let concurrency: usize = env_num("CONCURRENCY", 16);
    let topology = RabbitTopology::new(&queue)
        .delivery_limit(env_num("DELIVERY_LIMIT", 5))
        .prefetch(env_num("PREFETCH", 32));

    delivery::rabbitmq::declare(&amqp_url, &topology).await?;
    let db = PgPoolOptions::new()
        .max_connections(u32::try_from(concurrency).unwrap_or(u32::MAX).max(1))
        // Fail fast while the database is unreachable: the unit is returned and redelivered
        // after the runtime's backoff, instead of a handler holding its slot for long.
        .acquire_timeout(Duration::from_secs(2))
        .connect(&database_url)
        .await?;
    sqlx::raw_sql(
        "CREATE TABLE IF NOT EXISTS orders (order_id text PRIMARY KEY, customer_id text, amount_cents bigint);
         CREATE TABLE IF NOT EXISTS balances (customer_id text PRIMARY KEY, total_cents bigint);",
    )
    .execute(&db)
    .await?;

    let depth =
        RabbitDeadLetters::new(amqp_url.as_str(), &topology).watch_depth(Duration::from_secs(15));
    let source = RabbitSource::connect(amqp_url.as_str(), topology).await?;
    tracing::info!(queue, concurrency, "consuming");
    let report = Consumer::new(source)
        .state(App { db })
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown)
        .run(apply_order)
        .await;
    depth.abort();
    tracing::info!(?report, "stopped");
    Ok(())
}
