//! A Redis Streams consumer that survives crashes, outages and poison, recording its effect in
//! Redis hashes.
//!
//!     cargo run --features redis --example redis_consumer
//!
//! Env: `REDIS_URL` (default `redis://127.0.0.1:6379`), `STREAM` (default `orders`), `GROUP`
//! (default `billing`), `CONSUMER` (this consumer's name in the group; default generated),
//! `DELIVERY_LIMIT` (the most deliveries a unit gets, counted by Redis; default 5),
//! `CLAIM_IDLE_MS` (how long a failed or abandoned entry stays pending before it is claimed back;
//! default 5000), `BATCH` (default 32), `CONCURRENCY` (default 16), `EFFECT_DELAY_MS` (a pause
//! after the effect and before the acknowledgement, to widen the window a crash can hit;
//! default 0).
//!
//! On start it creates the group `$GROUP` on `$STREAM` (and the stream); the dead letter is
//! `$STREAM.dlq`. Each unit is an entry whose `payload` field is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}` (and whose `id` field is its unit
//! id; see `delivery::redis::publish`). In one atomic script the order is recorded in the hash
//! `$STREAM:orders` (nothing if its id is there) and, only if recorded, its amount is added to the
//! customer's total in `$STREAM:balances`, so a redelivery changes nothing. Malformed units and
//! negative amounts go to the dead letter directly; a Redis error is retried after the claim idle
//! time. Runs until SIGINT or SIGTERM, then shuts down gracefully.

use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::redis::{RedisDeadLetters, RedisSource, RedisTopology};
use delivery::{Consumer, HandlerError, Json, State, consumer};
use redis::aio::ConnectionManager;
use serde::Deserialize;

#[path = "support/env.rs"]
mod env;
use env::{env_num, env_or, shutdown_signal};

#[derive(Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer_id: String,
    amount_cents: i64,
}

#[derive(Clone)]
struct App {
    /// Reconnects by itself after Redis drops the connection (a restart, a failover).
    redis: ConnectionManager,
    orders: String,
    balances: String,
    effect_delay: Duration,
}

/// Records the order once, and only then counts its amount: one script, so Redis runs it whole.
const APPLY: &str = r"
if redis.call('HSETNX', KEYS[1], ARGV[1], ARGV[2] .. ':' .. ARGV[3]) == 1 then
  redis.call('HINCRBY', KEYS[2], ARGV[2], ARGV[3])
  return 1
end
return 0
";

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
    let mut redis = app.redis.clone();
    let _applied: i64 = redis::cmd("EVAL")
        .arg(APPLY)
        .arg(2)
        .arg(&app.orders)
        .arg(&app.balances)
        .arg(&order.order_id)
        .arg(&order.customer_id)
        .arg(order.amount_cents)
        .query_async(&mut redis)
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
    let url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
    let stream = env_or("STREAM", "orders");
    let concurrency: usize = env_num("CONCURRENCY", 16);
    let mut topology = RedisTopology::new(&stream, env_or("GROUP", "billing"))
        .max_deliveries(env_num("DELIVERY_LIMIT", 5))
        .claim_idle(Duration::from_millis(env_num("CLAIM_IDLE_MS", 5000)))
        .batch(env_num("BATCH", 32));
    if let Ok(name) = std::env::var("CONSUMER") {
        topology = topology.consumer(name);
    }

    delivery::redis::declare(&url, &topology).await?;
    let app = App {
        redis: delivery::redis::connect(&url).await?,
        orders: format!("{stream}:orders"),
        balances: format!("{stream}:balances"),
        effect_delay: Duration::from_millis(env_num("EFFECT_DELAY_MS", 0)),
    };
    let depth = RedisDeadLetters::new(&url, &topology)?.watch_depth(Duration::from_secs(15));
    let source = RedisSource::connect(&url, topology).await?;
    tracing::info!(
        stream,
        consumer = source.consumer(),
        concurrency,
        "consuming"
    );
    let report = Consumer::new(source)
        .state(app)
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown)
        .run(apply_order)
        .await;
    depth.abort();
    tracing::info!(?report, "stopped");
    Ok(())
}
