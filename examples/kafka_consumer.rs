//! A Kafka consumer that survives crashes, outages and poison, writing into PostgreSQL: offsets
//! are committed only through the commit watermark, failed units go through the retry topic with
//! their count, poison to the dead-letter topic.
//!
//!     cargo run --features kafka --example kafka_consumer
//!
//! Env: `KAFKA_BROKERS` (default `127.0.0.1:9092`), `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `TOPIC` (default `orders`), `GROUP` (default
//! `orders-consumer`), `SESSION_TIMEOUT_MS` (how soon the group hands a crashed consumer's
//! partitions to another; default 10000), `PARTITIONS` (default 3, for topics it creates),
//! `MAX_DELIVERIES` (default 5), `MAX_WAITING` (the most returned units held in memory until due;
//! default 10000), `CONCURRENCY` (default 16: units, or batches, handled at once),
//! `EFFECT_DELAY_MS` (a pause between the effect's commit and the handler's return, so a crash
//! test can kill the consumer while effects are committed and their offsets are not; default 0),
//! `BATCH_SIZE` (unset or 1: one unit per transaction; N > 1: up to N units per transaction,
//! `apply_orders`), `BATCH_WAIT_MS` (how long a partial batch waits to fill before it runs;
//! default 20).
//!
//! On start it creates the topics `$TOPIC`, `$TOPIC.$GROUP.retry`, `$TOPIC.$GROUP.dlq` and
//! `$TOPIC.$GROUP.attempts` (the group's own, so other groups never handle its failures) if
//! missing, and the tables of `support/orders.rs` (`orders`, `balances`, `latest_orders`, `confirmations`, the inbox). Each unit is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}`: in one transaction the order is
//! inserted (nothing if its id exists) and, only if inserted, its amount is added to the
//! customer's balance, so a redelivery changes nothing; the customer's latest order is replaced
//! only by a unit with a newer stamp, its offset (rule 4: key a customer's orders by the
//! customer, so they share a partition and their offsets order them). Malformed units and negative amounts go
//! to the dead letter directly; a database outage is retried with backoff through the retry
//! topic. In batches, each unit's offset is still committed only after the transaction that
//! applied it committed, a negative amount sends its unit alone to the dead letter, and a failed
//! batch is retried in halves. Runs until SIGINT or SIGTERM, then shuts down gracefully and
//! commits what is final.

use std::time::Duration;

use delivery::Consumer;
use delivery::dead_letter::DeadLetters;
use delivery::kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
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
    // First of all, so a signal during start-up stops the consumer as soon as it starts.
    let shutdown = shutdown_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let brokers = env_or("KAFKA_BROKERS", "127.0.0.1:9092");
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let topic = env_or("TOPIC", "orders");
    let group = env_or("GROUP", "orders-consumer");
    let concurrency: usize = env_num("CONCURRENCY", 16);
    let batching = Batching::from_env();
    let effect_delay = Duration::from_millis(env_num("EFFECT_DELAY_MS", 0));
    let topology = KafkaTopology::new(&topic, group)
        .partitions(env_num("PARTITIONS", 3))
        .max_deliveries(env_num("MAX_DELIVERIES", 5))
        .max_waiting(env_num("MAX_WAITING", 10_000))
        .session_timeout(Duration::from_millis(env_num("SESSION_TIMEOUT_MS", 10_000)));

    topology.declare(&brokers).await?;
    let db = PgPoolOptions::new()
        .max_connections(u32::try_from(concurrency).unwrap_or(u32::MAX).max(1))
        // Fail fast while the database is unreachable: the unit goes to the retry topic and comes
        // back after the runtime's backoff, instead of a handler holding its slot for long.
        .acquire_timeout(Duration::from_secs(2))
        .connect(&database_url)
        .await?;
    orders::create_tables(&db).await?;

    let depth = KafkaDeadLetters::new(&brokers, &topology).watch_depth(Duration::from_secs(15));
    let source = KafkaSource::connect_with(&brokers, topology, |config| {
        // librdkafka's own debug contexts (`consumer,cgrp,fetch`, ...), logged as `librdkafka`.
        if let Ok(contexts) = std::env::var("KAFKA_DEBUG") {
            config.set("debug", contexts);
        }
    })
    .await?;
    tracing::info!(topic, concurrency, batch_size = batching.size, "consuming");
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
