//! A NATS JetStream consumer that survives crashes, outages and poison, writing into PostgreSQL.
//!
//!     cargo run --features nats --example nats_consumer
//!
//! Env: `NATS_URL` (default `nats://127.0.0.1:4222`), `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `STREAM` (default `ORDERS`, subjects
//! `$STREAM.>`), `DELIVERY_LIMIT` (the consumer's `max_deliver`, default 5), `ACK_WAIT_SECS`
//! (default 30), `BATCH` (how many messages one pull asks for; default 64), `CONCURRENCY`
//! (default 16: units, or batches, handled at once), `SWEEP_SECS` (how often the consumer sweeps
//! units stranded on their last delivery into the dead letter; default 30), `EFFECT_DELAY_MS` (a
//! pause between the effect's commit and the acknowledgement, so a crash test can land its kills
//! in between; default 0), `BATCH_SIZE` (unset or 1: one unit per transaction; N > 1: up to N
//! units per transaction, `apply_orders`), `BATCH_WAIT_MS` (how long a partial batch waits to
//! fill before it runs; default 20).
//!
//! On start it declares the stream, its durable consumer `delivery` and the dead-letter stream
//! `$STREAM_DLQ`, and creates the tables of `support/orders.rs` (`orders`, `balances`, `latest_orders`, `confirmations`, the inbox). Each unit is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}`: in one transaction the order is
//! inserted (nothing if its id exists) and, only if inserted, its amount is added to the
//! customer's balance, so a redelivery changes nothing; the customer's latest order is replaced
//! only by a unit with a newer stamp, its stream sequence (rule 4). Malformed units and negative amounts go
//! to the dead letter directly; a database outage is retried with backoff. In batches, each unit
//! is still acknowledged only after the transaction that applied it committed, a negative amount
//! sends its unit alone to the dead letter, and a failed batch is retried in halves. Runs until
//! SIGINT or SIGTERM, then shuts down gracefully.

use std::time::Duration;

use delivery::Consumer;
use delivery::dead_letter::DeadLetters;
use delivery::nats::{NatsDeadLetters, NatsSource, NatsTopology};
use sqlx::postgres::PgPoolOptions;

#[path = "support/env.rs"]
mod env;
use env::{Batching, env_num, env_or, shutdown_signal};
#[path = "support/orders.rs"]
mod orders;
use orders::{App, apply_order, apply_orders};

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let shutdown = shutdown_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let nats_url = env_or("NATS_URL", "nats://127.0.0.1:4222");
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let stream = env_or("STREAM", "ORDERS");
    let concurrency: usize = env_num("CONCURRENCY", 16);
    let batching = Batching::from_env();
    let topology = NatsTopology::new(&stream)
        .max_deliver(env_num("DELIVERY_LIMIT", 5))
        .ack_wait(Duration::from_secs_f64(env_num("ACK_WAIT_SECS", 30.0)))
        .batch(env_num("BATCH", 64))
        .sweep_every(Duration::from_secs_f64(env_num("SWEEP_SECS", 30.0)));
    let effect_delay = Duration::from_millis(env_num("EFFECT_DELAY_MS", 0));

    delivery::nats::declare(&nats_url, &topology).await?;
    let db = PgPoolOptions::new()
        .max_connections(u32::try_from(concurrency).unwrap_or(u32::MAX).max(1))
        .acquire_timeout(Duration::from_secs(30))
        .connect(&database_url)
        .await?;
    orders::create_tables(&db).await?;

    let client = delivery::nats::connect(&nats_url).await?;
    let depth =
        NatsDeadLetters::new(client.clone(), &topology).watch_depth(Duration::from_secs(15));
    let source = NatsSource::with_client(client, topology).await?;
    tracing::info!(stream, concurrency, batch_size = batching.size, "consuming");
    let consumer = Consumer::new(source)
        .state(App { db, effect_delay })
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown);
    let report = batching.run(consumer, apply_order, apply_orders).await;
    depth.abort();
    tracing::info!(?report, "stopped");
    Ok(())
}
