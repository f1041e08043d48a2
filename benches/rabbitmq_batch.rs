//! Batch handlers with a real effect: RabbitMQ → PostgreSQL orders (`examples/support/orders.rs`)
//! in batches of `BENCH_BATCH` (default 100), against the per-unit handler and against
//! hand-written lapin + sqlx loops, on the real broker and database.
//!
//!     cargo bench --features lapin,postgres --bench rabbitmq_batch
//!
//! Publishes `BENCH_N` orders (default 20000), stamped, with message ids, to a fresh quorum queue
//! (the example's topology: delivery limit 5, a dead letter), prefetch `BENCH_PREFETCH` (default
//! 400) on every side; empties the effect tables; and drains them:
//!
//! - **delivery, per unit**: `Consumer` at concurrency 32, the example's `apply_order` (six
//!   statements, one transaction per unit), coalesced acks;
//! - **hand-written, per unit**: lapin's stream, `for_each_concurrent(32)`, the same transaction
//!   by hand per delivery, then its `basic.ack`;
//! - **delivery, batches**: `Consumer::batch(BENCH_BATCH, 20 ms)` at concurrency
//!   `BENCH_BATCH_CONCURRENCY` (default 2), the example's `apply_orders` (one transaction per
//!   batch, one statement per table), coalesced acks;
//! - **hand-written, batches**: lapin's stream in chunks of up to `BENCH_BATCH` deliveries ready
//!   (`ready_chunks`), one at a time: the same set-based statements in one transaction, then one
//!   `basic.ack(multiple)` of the chunk's last tag after the commit.
//!
//! Each side is timed from its consumer's start to its last acknowledgement; `BENCH_ROUNDS`
//! rounds (default 3), interleaved; prints every run, the medians and the ratios. Then the added
//! latency at a low rate: `BENCH_LATENCY_N` orders (default 500) published at 50 a second to a
//! consumer already running, per unit and in batches, each order's latency from its publish to
//! its handler's return; p50, p99 and max, against `max_wait`.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delivery::batch::{Batch, BatchHandler, BatchOutcome};
use delivery::disposition::Outcome;
use delivery::extract::Malformed;
use delivery::handler::Handler;
use delivery::lapin::options::BasicAckOptions;
use delivery::rabbitmq::{AckMode, RabbitSource, RabbitTopology};
use delivery::{Consumer, Stamp, Unit, UnitId};
use futures_util::StreamExt;
use tokio::sync::Notify;

mod support;
use support::{Run, env_or, interleaved, measure, median, report};
#[path = "support/rabbitmq.rs"]
mod rabbitmq;
use rabbitmq::{fresh, subscribe, url};
#[path = "support/orders_pg.rs"]
mod orders_pg;
use orders_pg::{OrderPlaced, Schema, app, apply_by_hand, check, order_unit, orders};

const CONCURRENCY: usize = 32;
const MAX_WAIT: Duration = Duration::from_millis(20);

struct Bench {
    topology: RabbitTopology,
    pg: Schema,
    n: u64,
    batch: usize,
    batch_concurrency: usize,
}

impl Bench {
    /// A fresh queue holding `n` orders, and empty effect tables.
    async fn fresh(&self, n: u64) {
        self.pg.empty().await;
        fresh(&self.topology, n, |i| {
            let unit = order_unit(i);
            (
                unit.payload().to_vec(),
                delivery::rabbitmq::properties_of(&unit),
            )
        })
        .await;
    }

    async fn source(&self) -> RabbitSource {
        RabbitSource::connect(url(), self.topology.clone())
            .await
            .unwrap()
            .ack_mode(AckMode::coalesced())
    }

    async fn per_unit(&self) -> Run {
        self.fresh(self.n).await;
        orders_pg::drain(self.source().await, &self.pg, self.n, CONCURRENCY).await
    }

    async fn batches(&self) -> Run {
        self.fresh(self.n).await;
        let source = self.source().await;
        orders_pg::drain_batches(source, &self.pg, self.n, self.batch, self.batch_concurrency).await
    }

    async fn hand_per_unit(&self) -> Run {
        self.fresh(self.n).await;
        let db = &self.pg.db;
        let (connection, _channel, consumer) = subscribe(&self.topology).await;
        let run = measure(self.n, async {
            consumer
                .take(self.n as usize)
                .for_each_concurrent(CONCURRENCY, |delivery| async move {
                    let delivery = delivery.unwrap();
                    let (id, stamp, _) = decoded(&delivery);
                    let order: OrderPlaced = serde_json::from_slice(&delivery.data).unwrap();
                    apply_by_hand(db, &id, stamp, &order).await.unwrap();
                    assert!(delivery.ack(BasicAckOptions::default()).await.unwrap());
                })
                .await;
        })
        .await;
        let _ = connection.close(200, "ok".into()).await;
        check(db, self.n).await;
        run
    }

    async fn hand_batches(&self) -> Run {
        self.fresh(self.n).await;
        let db = &self.pg.db;
        let (connection, channel, consumer) = subscribe(&self.topology).await;
        let mut chunks = consumer.ready_chunks(self.batch);
        let run = measure(self.n, async {
            let mut done = 0;
            while done < self.n {
                let chunk = chunks.next().await.expect("the consumer ended");
                let deliveries: Vec<_> = chunk.into_iter().map(Result::unwrap).collect();
                let decoded: Vec<_> = deliveries.iter().map(decoded).collect();
                apply_batch_by_hand(db, &decoded).await.unwrap();
                let last = deliveries.last().expect("a chunk is never empty");
                channel
                    .basic_ack(last.delivery_tag, BasicAckOptions { multiple: true })
                    .await
                    .unwrap();
                done += deliveries.len() as u64;
            }
        })
        .await;
        let _ = connection.close(200, "ok".into()).await;
        check(db, self.n).await;
        run
    }

    /// Each order's latency, publish to handler's return, at 50 orders a second.
    async fn latency(&self, n: u64, batch: Option<usize>) -> Vec<Duration> {
        self.fresh(0).await;
        let published: Arc<Mutex<HashMap<UnitId, Instant>>> = Arc::default();
        let applied: Arc<Mutex<HashMap<UnitId, Instant>>> = Arc::default();
        let source = self.source().await;
        let stop = Arc::new(Notify::new());
        let consumer = {
            let stop = stop.clone();
            let consumer = Consumer::new(source)
                .state(app(&self.pg.db))
                .shutdown_on(async move { stop.notified().await });
            let applied = applied.clone();
            match batch {
                None => tokio::spawn(consumer.concurrency(CONCURRENCY).run(Timed {
                    handler: orders::apply_order,
                    applied,
                })),
                Some(size) => tokio::spawn(
                    consumer
                        .concurrency(self.batch_concurrency)
                        .batch(size, MAX_WAIT)
                        .run(Timed {
                            handler: orders::apply_orders,
                            applied,
                        }),
                ),
            }
        };
        let publisher = delivery::rabbitmq::ConfirmedPublisher::new(url());
        let mut tick = tokio::time::interval(Duration::from_millis(20));
        for i in 0..n {
            tick.tick().await;
            let unit = order_unit(1_000_000 + i);
            published
                .lock()
                .unwrap()
                .insert(unit.id().clone(), Instant::now());
            let properties = delivery::rabbitmq::properties_of(&unit);
            publisher
                .publish(&self.topology.queue, unit.payload(), properties)
                .await
                .unwrap();
        }
        while applied.lock().unwrap().len() < n as usize {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop.notify_one();
        consumer.await.unwrap();
        let published = published.lock().unwrap();
        let applied = applied.lock().unwrap();
        let mut latencies: Vec<Duration> = applied
            .iter()
            .map(|(id, at)| at.duration_since(published[id]))
            .collect();
        latencies.sort_unstable();
        latencies
    }
}

/// The id, stamp and order of a delivery, as the example's producer published them.
fn decoded(delivery: &delivery::lapin::message::Delivery) -> (String, i64, orders::OrderPlaced) {
    let id = delivery
        .properties
        .message_id()
        .as_ref()
        .unwrap()
        .to_string();
    let stamp = rabbitmq::stamp_of(delivery);
    (id, stamp, serde_json::from_slice(&delivery.data).unwrap())
}

/// The example's batch transaction, by hand: its set-based statements (`orders::apply_all`,
/// `orders::confirm_all`) and the inbox's insert in one statement.
async fn apply_batch_by_hand(
    db: &sqlx::PgPool,
    batch: &[(String, i64, orders::OrderPlaced)],
) -> sqlx::Result<()> {
    let ids: Vec<UnitId> = batch
        .iter()
        .map(|(id, ..)| UnitId::from(id.as_str()))
        .collect();
    let placed: Vec<orders::Placed<'_>> = batch
        .iter()
        .zip(&ids)
        .map(|((_, stamp, order), id)| orders::Placed {
            id,
            order,
            stamp: Stamp(*stamp as u64),
        })
        .collect();
    let mut tx = db.begin().await?;
    orders::apply_all(&mut tx, &placed).await?;
    let mut sorted: Vec<&str> = ids.iter().map(UnitId::as_str).collect();
    sorted.sort_unstable();
    sorted.dedup();
    let first: std::collections::HashSet<String> = sqlx::query_scalar(
        "INSERT INTO delivery_inbox (consumer, unit_id) \
         SELECT 'orders.confirmations', unnest($1::text[]) \
         ON CONFLICT (consumer, unit_id) DO NOTHING RETURNING unit_id",
    )
    .bind(&sorted)
    .fetch_all(&mut *tx)
    .await?
    .into_iter()
    .collect();
    let confirmed = placed
        .iter()
        .filter(|p| first.contains(p.id.as_str()))
        .map(|p| p.order.customer_id.as_str());
    orders::confirm_all(&mut tx, confirmed).await?;
    tx.commit().await
}

/// A handler recording when each unit's run returned.
struct Timed<H> {
    handler: H,
    applied: Arc<Mutex<HashMap<UnitId, Instant>>>,
}

impl<H: Handler<orders::App>> Handler<orders::App> for Timed<H> {
    fn call(
        &self,
        unit: &Unit,
        state: &orders::App,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        let run = self.handler.call(unit, state);
        let (applied, id) = (self.applied.clone(), unit.id().clone());
        async move {
            let outcome = run.await;
            applied.lock().unwrap().insert(id, Instant::now());
            outcome
        }
    }
}

impl<H: BatchHandler<orders::App>> BatchHandler<orders::App> for Timed<H> {
    type Item = H::Item;

    fn decode(&self, unit: &Unit, state: &orders::App) -> Result<H::Item, Malformed> {
        self.handler.decode(unit, state)
    }

    fn call(
        &self,
        batch: Batch<H::Item>,
        state: &orders::App,
    ) -> impl Future<Output = BatchOutcome> + Send + 'static {
        let ids: Vec<UnitId> = batch.iter().map(|item| item.id().clone()).collect();
        let run = self.handler.call(batch, state);
        let applied = self.applied.clone();
        async move {
            let outcome = run.await;
            let now = Instant::now();
            let mut applied = applied.lock().unwrap();
            for id in ids {
                applied.insert(id, now);
            }
            outcome
        }
    }
}

fn percentile(sorted: &[Duration], p: f64) -> f64 {
    let i = ((sorted.len() as f64 - 1.0) * p).round() as usize;
    sorted[i].as_secs_f64() * 1000.0
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let batch: usize = env_or("BENCH_BATCH", 100);
    let prefetch: u16 = env_or("BENCH_PREFETCH", 400);
    let name = format!("bench_rmq_batch_{}", std::process::id());
    let bench = Bench {
        topology: RabbitTopology::new(name.replace('_', "-"))
            .delivery_limit(5)
            .prefetch(prefetch),
        pg: Schema::create(&name, CONCURRENCY as u32).await,
        n,
        batch,
        batch_concurrency: env_or("BENCH_BATCH_CONCURRENCY", 2),
    };
    let what = format!("{n} units, prefetch {prefetch}");

    // `BENCH_CASE=batches` runs the batch comparison alone (for profiling).
    let only_batches = std::env::var("BENCH_CASE").is_ok_and(|case| case == "batches");
    let mut rates: HashMap<&str, Vec<f64>> = HashMap::new();
    let (hand, ours) = interleaved(
        rounds,
        async || bench.hand_batches().await,
        async || bench.batches().await,
    )
    .await;
    report(
        &format!(
            "orders in batches of {batch} (concurrency {})",
            bench.batch_concurrency
        ),
        &what,
        "lapin + sqlx, one transaction and one basic.ack(multiple) per chunk",
        &hand,
        &ours,
    );
    rates.insert("batches", ours.iter().map(|r| r.rate).collect());
    if only_batches {
        bench.pg.remove().await;
        rabbitmq::delete(&bench.topology).await;
        return;
    }
    let (hand, ours) = interleaved(
        rounds,
        async || bench.hand_per_unit().await,
        async || bench.per_unit().await,
    )
    .await;
    report(
        &format!("orders one unit per transaction (concurrency {CONCURRENCY})"),
        &what,
        "lapin + sqlx, one transaction per unit",
        &hand,
        &ours,
    );
    rates.insert("per-unit", ours.iter().map(|r| r.rate).collect());
    rates.insert("hand per-unit", hand.iter().map(|r| r.rate).collect());
    let batches = median(rates["batches"].clone());
    println!(
        "batches of {batch} against one unit per transaction: delivery {:.2}x delivery's per-unit, {:.2}x the hand-written per-unit loop",
        batches / median(rates["per-unit"].clone()),
        batches / median(rates["hand per-unit"].clone()),
    );

    let low: u64 = env_or("BENCH_LATENCY_N", 500);
    if low > 0 {
        let per_unit = bench.latency(low, None).await;
        let batched = bench.latency(low, Some(batch)).await;
        for (label, l) in [("per unit", &per_unit), ("batches", &batched)] {
            println!(
                "latency at 50 units/s, {label}: p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms ({} units)",
                percentile(l, 0.5),
                percentile(l, 0.99),
                percentile(l, 1.0),
                l.len()
            );
        }
        println!(
            "added latency of batches at 50 units/s: p50 {:.1} ms, p99 {:.1} ms; max_wait {} ms",
            percentile(&batched, 0.5) - percentile(&per_unit, 0.5),
            percentile(&batched, 0.99) - percentile(&per_unit, 0.99),
            MAX_WAIT.as_millis()
        );
    }

    bench.pg.remove().await;
    rabbitmq::delete(&bench.topology).await;
}
