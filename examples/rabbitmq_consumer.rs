//! A RabbitMQ consumer that survives crashes, outages and poison, writing into PostgreSQL.
//!
//!     cargo run --features lapin --example rabbitmq_consumer
//!
//! Env: `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `DATABASE_URL` (default
//! `postgres://postgres@127.0.0.1:5432/test`), `QUEUE` (default `orders`), `DELIVERY_LIMIT`
//! (default 5), `PREFETCH` (default 32, or twice `BATCH_SIZE` when that is more), `CONCURRENCY`
//! (default 16: units, or batches, handled at once), `EFFECT_DELAY_MS` (a pause between the
//! effect's commit and the acknowledgement, for crash tests; default 0), `ACKS` (`coalesced`,
//! the default: one `basic.ack(multiple)` for many units; or `per-unit`), `BATCH_SIZE` (unset or
//! 1: one unit per transaction; N > 1: up to N units per transaction, `apply_orders`),
//! `BATCH_WAIT_MS` (how long a partial batch waits to fill before it runs; default 20). In
//! batches, give `PREFETCH` at least twice `BATCH_SIZE`: the units of a batch being applied stay
//! unacknowledged, and the next batch fills from what the channel may still deliver meanwhile.
//!
//! On start it declares the quorum queue `$QUEUE` with the limit and the dead letter `$QUEUE.dlq`,
//! and creates the tables of `support/orders.rs` (`orders`, `balances`, `latest_orders`, `confirmations`, the inbox). Each unit is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}`: in one transaction the order is
//! inserted (nothing if its id exists) and, only if inserted, its amount is added to the
//! customer's balance, so a redelivery changes nothing; and the customer's latest order is
//! replaced only by a unit with a newer stamp (rule 4). RabbitMQ keeps no order of its own, so
//! each unit carries its producer's stamp in the `x-delivery-stamp` header
//! (`delivery::rabbitmq::properties_of` publishes a unit with it); a unit without one is
//! malformed. Malformed units and negative amounts go to the dead letter directly; a database outage is retried with backoff. In batches,
//! each unit is still acknowledged only after the transaction that applied it committed, a
//! negative amount sends its unit alone to the dead letter, and a failed batch is retried in
//! halves. Runs until SIGINT or SIGTERM, then shuts down gracefully.

use std::time::Duration;

use delivery::Consumer;
use delivery::dead_letter::DeadLetters;
use delivery::rabbitmq::{AckMode, RabbitDeadLetters, RabbitSource, RabbitTopology};
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
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let queue = env_or("QUEUE", "orders");
    let concurrency: usize = env_num("CONCURRENCY", 16);
    let batching = Batching::from_env();
    let prefetch = u16::try_from(batching.size.saturating_mul(2)).unwrap_or(u16::MAX);
    let topology = RabbitTopology::new(&queue)
        .delivery_limit(env_num("DELIVERY_LIMIT", 5))
        .prefetch(env_num("PREFETCH", prefetch.max(32)));

    delivery::rabbitmq::declare(&amqp_url, &topology).await?;
    let db = PgPoolOptions::new()
        .max_connections(u32::try_from(concurrency).unwrap_or(u32::MAX).max(1))
        // Fail fast while the database is unreachable: the unit is returned and redelivered
        // after the runtime's backoff, instead of a handler holding its slot for long.
        .acquire_timeout(Duration::from_secs(2))
        .connect(&database_url)
        .await?;
    orders::create_tables(&db).await?;

    let depth =
        RabbitDeadLetters::new(amqp_url.as_str(), &topology).watch_depth(Duration::from_secs(15));
    let ack_mode = match env_or("ACKS", "coalesced").as_str() {
        "per-unit" => AckMode::PerUnit,
        "coalesced" => AckMode::coalesced(),
        other => return Err(format!("ACKS is `coalesced` or `per-unit`, not `{other}`").into()),
    };
    let source = RabbitSource::connect(amqp_url.as_str(), topology)
        .await?
        .ack_mode(ack_mode);
    tracing::info!(queue, concurrency, batch_size = batching.size, "consuming");
    let consumer = Consumer::new(source)
        .state(App {
            db,
            effect_delay: Duration::from_millis(env_num("EFFECT_DELAY_MS", 0)),
        })
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown);
    let report = batching.run(consumer, apply_order, apply_orders).await;
    depth.abort();
    tracing::info!(?report, "stopped");
    Ok(())
}
