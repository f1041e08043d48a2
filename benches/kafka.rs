//! Consumer throughput over Kafka with a no-op handler: `delivery`'s runtime over `KafkaSource`
//! (offsets committed through the watermark, batched) against two hand-written rdkafka loops in
//! the same run, over the same units:
//!
//! - **per-unit commit**: the safe hand-written loop, committing each offset synchronously after
//!   its effect (target: the runtime at least 3x this);
//! - **auto-commit**: `enable.auto.commit=true`, the unsafe upper bound rule 1 corrects (offsets
//!   committed on a timer, past units whose effect is not done; target: at least 0.8 of it).
//!
//!     cargo bench --features kafka --bench kafka
//!
//! Needs a Kafka-protocol broker on 127.0.0.1:9092 (or `KAFKA_BROKERS`; `scripts/services.sh`
//! starts tansu). `UNITS` sets the units per side (default 400000; the per-unit commit loop,
//! about 5000 units/s, reads the first 20000 of them: its rate is the round trip of a commit,
//! not the join), `ROUNDS` the rounds (default 3, each side going first once). Each side reads the same topic with a group of its own and is
//! timed from creating its consumer to handling its last unit, joining the group included (the
//! join is a fixed cost; more units make it smaller).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delivery::kafka::client::ClientConfig;
use delivery::kafka::client::consumer::{CommitMode, Consumer as _, StreamConsumer};
use delivery::kafka::client::producer::{FutureProducer, FutureRecord};
use delivery::kafka::{KafkaSource, KafkaTopology};
use delivery::{Consumer, HandlerError, State, consumer};

const PARTITIONS: i32 = 3;

#[derive(Clone)]
struct Counter {
    seen: Arc<AtomicU64>,
    target: u64,
    last: Arc<std::sync::OnceLock<Instant>>,
    done: Arc<tokio::sync::Notify>,
}

impl Counter {
    fn new(target: u64) -> Self {
        Counter {
            seen: Arc::new(AtomicU64::new(0)),
            target,
            last: Arc::default(),
            done: Arc::new(tokio::sync::Notify::new()),
        }
    }
}

#[consumer(allow_clock = "the benchmark times its last unit; nothing is written")]
async fn no_op(State(counter): State<Counter>) -> Result<(), HandlerError> {
    let seen = counter.seen.fetch_add(1, Ordering::Relaxed) + 1;
    if seen == counter.target {
        let _ = counter.last.set(Instant::now());
        counter.done.notify_one();
    }
    Ok(())
}

fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

async fn prepare(topology: &KafkaTopology, units: u64) {
    topology.declare(&brokers()).await.expect("Kafka reachable");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut sends = Vec::with_capacity(1024);
    for i in 0..units {
        let key = format!("k-{i}");
        let payload = format!(r#"{{"n":{i}}}"#);
        let producer = producer.clone();
        sends.push(async move {
            producer
                .send(
                    FutureRecord::to(&topology.topic)
                        .key(&key)
                        .payload(&payload),
                    Duration::from_secs(30),
                )
                .await
                .map_err(|(e, _)| e)
                .unwrap();
        });
        if sends.len() == 1024 {
            futures_util::future::join_all(sends.drain(..)).await;
        }
    }
    futures_util::future::join_all(sends).await;
}

fn raw_consumer(group: &str, auto_commit: bool) -> StreamConsumer {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set(
            "enable.auto.commit",
            if auto_commit { "true" } else { "false" },
        )
        .create()
        .unwrap()
}

/// The hand-written loops: receive, the (no-op) effect, then a synchronous commit of the unit's
/// offset — or nothing, when auto-commit commits on a timer.
async fn raw(topic: &str, group: &str, units: u64, auto_commit: bool) -> f64 {
    let consumer = raw_consumer(group, auto_commit);
    consumer.subscribe(&[topic]).unwrap();
    let started = Instant::now();
    for _ in 0..units {
        let message = consumer.recv().await.unwrap();
        std::hint::black_box(&message);
        if !auto_commit {
            consumer.commit_message(&message, CommitMode::Sync).unwrap();
        }
    }
    units as f64 / started.elapsed().as_secs_f64()
}

async fn runtime(topology: &KafkaTopology, units: u64) -> f64 {
    let counter = Counter::new(units);
    let done = counter.done.clone();
    let started = Instant::now();
    let source = KafkaSource::connect(&brokers(), topology.clone())
        .await
        .unwrap();
    let report = Consumer::new(source)
        .state(counter.clone())
        .shutdown_on(async move { done.notified().await })
        .drain_deadline(Duration::from_secs(5))
        .run(no_op)
        .await;
    assert!(report.acked >= units, "{report:?}");
    units as f64 / (*counter.last.get().unwrap() - started).as_secs_f64()
}

fn main() {
    let env = |name: &str, default: u64| {
        std::env::var(name)
            .ok()
            .and_then(|v| v.parse().ok())
            .unwrap_or(default)
    };
    let units = env("UNITS", 400_000);
    let per_unit_units = units.min(20_000);
    let rounds = env("ROUNDS", 3);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let stamp = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_millis();
        let topic = format!("bench-{}-{stamp}", std::process::id());
        let base = KafkaTopology::new(&topic, "unused").partitions(PARTITIONS);
        prepare(&base, units).await;
        let (mut per_unit, mut auto, mut ours) = (Vec::new(), Vec::new(), Vec::new());
        // The sides take turns going first: the broker serves a topic read before faster.
        for round in 0..rounds {
            for side in 0..3 {
                match (side + round) % 3 {
                    0 => per_unit.push(
                        raw(&topic, &format!("{topic}-sync-{round}"), per_unit_units, false).await,
                    ),
                    1 => auto.push(raw(&topic, &format!("{topic}-auto-{round}"), units, true).await),
                    _ => {
                        let topology =
                            KafkaTopology::new(&topic, format!("{topic}-delivery-{round}"))
                                .partitions(PARTITIONS);
                        // The group's own retry, dead-letter and attempts topics (not timed).
                        topology.declare(&brokers()).await.unwrap();
                        ours.push(runtime(&topology, units).await);
                    }
                }
            }
        }
        let median = |v: &mut Vec<f64>| {
            v.sort_by(f64::total_cmp);
            v[v.len() / 2]
        };
        let (p, a, o) = (
            median(&mut per_unit.clone()),
            median(&mut auto.clone()),
            median(&mut ours.clone()),
        );
        println!(
            "kafka: {units} units per side ({per_unit_units} for the per-unit commit loop) over {PARTITIONS} partitions, {rounds} rounds, no-op handler"
        );
        println!("  rdkafka, commit per unit (sync) : {p:>10.0} units/s  (runs: {per_unit:.0?})");
        println!("  rdkafka, auto-commit (unsafe)   : {a:>10.0} units/s  (runs: {auto:.0?})");
        println!("  delivery KafkaSource            : {o:>10.0} units/s  (runs: {ours:.0?})");
        println!("  ratio to per-unit commit        : {:.2}x (target >= 3)", o / p);
        println!("  ratio to auto-commit            : {:.3} (target >= 0.8)", o / a);
    });
}
