//! A Redis Streams consumer that survives crashes, outages and poison, recording its effect in
//! Redis hashes.
//!
//!     cargo run --features redis --example redis_consumer
//!
//! Env: `REDIS_URL` (default `redis://127.0.0.1:6379`), `STREAM` (default `orders`), `GROUP`
//! (default `billing`), `CONSUMER` (this consumer's name in the group; default generated),
//! `DELIVERY_LIMIT` (the most deliveries a unit gets, counted by Redis; default 5),
//! `CLAIM_IDLE_MS` (how long a failed or abandoned entry stays pending before it is claimed back;
//! default 5000), `BATCH` (how many entries one read asks for; default 32), `CONCURRENCY`
//! (default 16: units, or batches, handled at once), `EFFECT_DELAY_MS` (a pause after the effect
//! and before the acknowledgement, to widen the window a crash can hit; default 0), `BATCH_SIZE`
//! (unset or 1: one unit per script; N > 1: up to N units per script, `apply_orders`),
//! `BATCH_WAIT_MS` (how long a partial batch waits to fill before it runs; default 20).
//!
//! On start it creates the group `$GROUP` on `$STREAM` (and the stream); the dead letter is
//! `$STREAM.dlq`. Each unit is an entry whose `payload` field is
//! `{"order_id": str, "customer_id": str, "amount_cents": int}` (and whose `id` field is its unit
//! id; see `delivery::redis::publish`). In one atomic script the order is recorded in the hash
//! `$STREAM:orders` (nothing if its id is there) and, only if recorded, its amount is added to the
//! customer's total in `$STREAM:balances`, so a redelivery changes nothing. Malformed units and
//! negative amounts go to the dead letter directly; a Redis error is retried after the claim idle
//! time. In batches, one script applies every order of the batch the same way, each unit is
//! still acknowledged only after it ran, a negative amount sends its unit alone to the dead
//! letter, and a failed batch is retried in halves. Runs until SIGINT or SIGTERM, then shuts down
//! gracefully.

use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::redis::{RedisDeadLetters, RedisSource, RedisTopology};
use delivery::{Batch, BatchOutcome, Consumer, HandlerError, Json, State, consumer};
use redis::aio::ConnectionManager;
use serde::Deserialize;

#[path = "support/env.rs"]
mod env;
use env::{Batching, env_num, env_or, shutdown_signal};

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

/// Records each order (the arguments, in threes: order id, customer, amount) once, and only then
/// counts its amount: one script, so Redis runs it whole, for one order or a batch.
const APPLY: &str = r"
for i = 1, #ARGV, 3 do
  if redis.call('HSETNX', KEYS[1], ARGV[i], ARGV[i + 1] .. ':' .. ARGV[i + 2]) == 1 then
    redis.call('HINCRBY', KEYS[2], ARGV[i + 1], ARGV[i + 2])
  end
end
return 0
";

impl App {
    /// The script that applies orders, before its orders' arguments.
    fn script(&self) -> redis::Cmd {
        let mut script = redis::cmd("EVAL");
        script
            .arg(APPLY)
            .arg(2)
            .arg(&self.orders)
            .arg(&self.balances);
        script
    }

    /// Runs `script`, then pauses for `EFFECT_DELAY_MS`.
    async fn apply(&self, script: redis::Cmd) -> Result<(), HandlerError> {
        let mut redis = self.redis.clone();
        let _: i64 = script.query_async(&mut redis).await?;
        if !self.effect_delay.is_zero() {
            tokio::time::sleep(self.effect_delay).await;
        }
        Ok(())
    }
}

/// `order`'s arguments to the script.
fn order_args(script: &mut redis::Cmd, order: &OrderPlaced) {
    script
        .arg(&order.order_id)
        .arg(&order.customer_id)
        .arg(order.amount_cents);
}

/// A negative amount is refused for good: the unit goes to the dead letter.
fn refuse_negative(order: &OrderPlaced) -> Result<(), HandlerError> {
    if order.amount_cents < 0 {
        return Err(HandlerError::reject(format!(
            "order {} has a negative amount ({} cents)",
            order.order_id, order.amount_cents
        )));
    }
    Ok(())
}

/// Applies one order. Everything written comes from the unit, keyed by the order's own id.
#[consumer]
async fn apply_order(
    State(app): State<App>,
    Json(order): Json<OrderPlaced>,
) -> Result<(), HandlerError> {
    refuse_negative(&order)?;
    let mut script = app.script();
    order_args(&mut script, &order);
    app.apply(script).await
}

/// Applies a batch of orders in one script, as [`apply_order`] applies each: an order already
/// recorded (or given twice in the batch) counts once; a negative amount sends its unit alone to
/// the dead letter, the others are applied.
#[consumer]
async fn apply_orders(
    State(app): State<App>,
    orders: Batch<Json<OrderPlaced>>,
) -> Result<BatchOutcome, HandlerError> {
    let mut outcome = BatchOutcome::applied();
    let mut script = app.script();
    let mut any = false;
    for order in &orders {
        match refuse_negative(order) {
            Ok(()) => {
                order_args(&mut script, order);
                any = true;
            }
            Err(refused) => {
                outcome.fail(order.id(), refused);
            }
        }
    }
    if any {
        app.apply(script).await?;
    }
    Ok(outcome)
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
    let batching = Batching::from_env();
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
        batch_size = batching.size,
        "consuming"
    );
    let consumer = Consumer::new(source)
        .state(app)
        .concurrency(concurrency)
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(shutdown);
    let report = batching.run(consumer, apply_order, apply_orders).await;
    depth.abort();
    tracing::info!(?report, "stopped");
    Ok(())
}
