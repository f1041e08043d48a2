//! Per-unit overhead of the consumer runtime on the in-memory broker, against a hand-written loop
//! over the same broker doing the same work: receive, decode JSON, call the function, acknowledge.
//!
//!     cargo bench --bench runtime
//!
//! Prints units per second for both, interleaved over several rounds, and the ratio of medians.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use delivery::memory::MemoryBroker;
use delivery::{Consumer, Disposition, HandlerError, Json, Settle, Source, State, Unit, consumer};
use serde::Deserialize;
use tokio::sync::Notify;

const DEFAULT_UNITS: u64 = 200_000;

fn units() -> u64 {
    std::env::var("BENCH_UNITS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_UNITS)
}
const ROUNDS: usize = 7;

#[derive(Deserialize)]
struct Tick {
    id: u64,
    value: u64,
}

/// Shared state the usual way: one `Arc` around what the handlers share.
#[derive(Clone)]
struct Counter(Arc<CounterInner>);

struct CounterInner {
    target: u64,
    done: AtomicU64,
    finished: Notify,
}

async fn effect(tick: &Tick) {
    black_box((tick.id, tick.value));
}

#[consumer]
async fn apply(State(counter): State<Counter>, Json(tick): Json<Tick>) -> Result<(), HandlerError> {
    effect(&tick).await;
    if counter.0.done.fetch_add(1, Ordering::Relaxed) + 1 == counter.0.target {
        counter.0.finished.notify_one();
    }
    Ok(())
}

fn fill(broker: &MemoryBroker, queue: &str) {
    for i in 0..units() {
        broker.publish(
            queue,
            Unit::new(
                format!("u-{i}"),
                format!(r#"{{"id":{i},"value":{}}}"#, i * 7),
            ),
        );
    }
}

async fn hand_written(broker: &MemoryBroker) -> f64 {
    fill(broker, "bench");
    let mut source = broker.consume("bench").prefetch(32);
    let started = Instant::now();
    for _ in 0..units() {
        let (unit, handle) = source.receive().await.unwrap().expect("a unit");
        match serde_json::from_slice::<Tick>(unit.payload()) {
            Ok(tick) => effect(&tick).await,
            Err(_) => unreachable!("the bench publishes valid JSON"),
        }
        handle.settle(&unit, &Disposition::Ack).await.unwrap();
    }
    let rate = units() as f64 / started.elapsed().as_secs_f64();
    assert_eq!(broker.depth("bench"), 0);
    rate
}

async fn runtime(broker: &MemoryBroker, concurrency: usize) -> f64 {
    fill(broker, "bench");
    let counter = Counter(Arc::new(CounterInner {
        target: units(),
        done: AtomicU64::new(0),
        finished: Notify::new(),
    }));
    let signal = counter.clone();
    let started = Instant::now();
    let report = Consumer::new(broker.consume("bench").prefetch(32))
        .state(counter)
        .concurrency(concurrency)
        .shutdown_on(async move { signal.0.finished.notified().await })
        .run(apply)
        .await;
    let rate = units() as f64 / started.elapsed().as_secs_f64();
    assert_eq!(report.acked, units());
    assert_eq!(broker.depth("bench"), 0);
    rate
}

fn median(mut v: Vec<f64>) -> f64 {
    v.sort_by(|a, b| a.partial_cmp(b).unwrap());
    v[v.len() / 2]
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // For instruction counts under callgrind: one side only, e.g. BENCH_ONLY=runtime BENCH_UNITS=20000.
    match std::env::var("BENCH_ONLY").as_deref() {
        Ok("hand") => {
            rt.block_on(hand_written(&MemoryBroker::new()));
            return;
        }
        Ok("runtime") => {
            rt.block_on(runtime(&MemoryBroker::new(), 1));
            return;
        }
        _ => {}
    }
    let (mut hand, mut one, mut many) = (Vec::new(), Vec::new(), Vec::new());
    rt.block_on(async {
        for round in 0..ROUNDS {
            hand.push(hand_written(&MemoryBroker::new()).await);
            one.push(runtime(&MemoryBroker::new(), 1).await);
            many.push(runtime(&MemoryBroker::new(), 16).await);
            eprintln!(
                "round {round}: hand {:.0}/s, runtime(1) {:.0}/s, runtime(16) {:.0}/s",
                hand[round], one[round], many[round]
            );
        }
    });
    let (hand, one, many) = (median(hand), median(one), median(many));
    println!(
        "in-memory broker, {} units x {ROUNDS} rounds, medians:",
        units()
    );
    println!("  hand-written loop         {hand:>12.0} units/s");
    println!(
        "  runtime, concurrency 1    {one:>12.0} units/s   ratio {:.2}",
        one / hand
    );
    println!(
        "  runtime, concurrency 16   {many:>12.0} units/s   ratio {:.2}",
        many / hand
    );
}
