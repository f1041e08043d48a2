//! Per-unit overhead of the consumer runtime on the in-memory broker, against a hand-written loop
//! over the same broker doing the same work: receive, decode JSON, apply the same effect to the
//! same shared state, acknowledge.
//!
//!     cargo bench --bench runtime
//!
//! Prints units per second for each (medians over interleaved rounds) and the median of the
//! per-round ratios to the hand-written loop.
//! The hand-written loop reads its state by reference; the runtime's main figure does the same
//! (`State<&'static Shared>`, a `Copy` state), so the ratio is the runtime's own overhead. A second
//! figure uses the common `State<Arc<..>>`, whose clone per unit (two atomic operations) is the
//! state type's cost, not the runtime's.

use std::hint::black_box;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Instant;

use delivery::memory::MemoryBroker;
use delivery::{
    Consumer, HandlerError, Json, State, Unit, consumer, disposition::Disposition,
    transport::Source,
};
use serde::Deserialize;
use tokio::sync::Notify;

mod support;
use support::median;

const DEFAULT_UNITS: u64 = 200_000;
const ROUNDS: usize = 11;

fn units() -> u64 {
    std::env::var("BENCH_UNITS")
        .ok()
        .and_then(|n| n.parse().ok())
        .unwrap_or(DEFAULT_UNITS)
}

#[derive(Deserialize)]
struct Tick {
    id: u64,
    value: u64,
}

/// What the handlers share: a count of units applied, and a signal once all are.
struct Shared {
    target: u64,
    done: AtomicU64,
    finished: Notify,
}

impl Shared {
    fn new() -> Self {
        Shared {
            target: units(),
            done: AtomicU64::new(0),
            finished: Notify::new(),
        }
    }
}

/// The effect every loop applies per unit.
async fn effect(shared: &Shared, tick: &Tick) {
    black_box((tick.id, tick.value));
    if shared.done.fetch_add(1, Ordering::Relaxed) + 1 == shared.target {
        shared.finished.notify_one();
    }
}

#[consumer]
async fn apply(
    State(shared): State<&'static Shared>,
    Json(tick): Json<Tick>,
) -> Result<(), HandlerError> {
    effect(shared, &tick).await;
    Ok(())
}

#[consumer]
async fn apply_arc(
    State(shared): State<Arc<Shared>>,
    Json(tick): Json<Tick>,
) -> Result<(), HandlerError> {
    effect(&shared, &tick).await;
    Ok(())
}

fn fill(broker: &MemoryBroker) {
    for i in 0..units() {
        broker.publish(
            "bench",
            Unit::new(
                format!("u-{i}"),
                format!(r#"{{"id":{i},"value":{}}}"#, i * 7),
            ),
        );
    }
}

async fn hand_written() -> f64 {
    let broker = MemoryBroker::new();
    fill(&broker);
    let shared = Shared::new();
    let started = Instant::now();
    // The runtime's `run` makes and ends its consumer inside its timed window; so does this loop.
    let mut source = broker.consume("bench").prefetch(32);
    for _ in 0..units() {
        let (unit, handle) = source.receive().await.unwrap().expect("a unit");
        match serde_json::from_slice::<Tick>(unit.payload()) {
            Ok(tick) => effect(&shared, &tick).await,
            Err(_) => unreachable!("the bench publishes valid JSON"),
        }
        delivery::testing::settle(handle, &unit, &Disposition::Ack)
            .await
            .unwrap();
    }
    drop(source);
    let rate = units() as f64 / started.elapsed().as_secs_f64();
    assert_eq!(shared.done.load(Ordering::Relaxed), units());
    assert_eq!(broker.depth("bench"), 0);
    rate
}

async fn runtime(concurrency: usize) -> f64 {
    let broker = MemoryBroker::new();
    fill(&broker);
    // Leaked once per run: a few bytes, so the state is a plain `&'static` reference.
    let shared: &'static Shared = Box::leak(Box::new(Shared::new()));
    let started = Instant::now();
    let report = Consumer::new(broker.consume("bench").prefetch(32))
        .state(shared)
        .concurrency(concurrency)
        .shutdown_on(async move { shared.finished.notified().await })
        .run(apply)
        .await;
    let rate = units() as f64 / started.elapsed().as_secs_f64();
    assert_eq!(report.acked, units());
    assert_eq!(broker.depth("bench"), 0);
    rate
}

async fn runtime_arc() -> f64 {
    let broker = MemoryBroker::new();
    fill(&broker);
    let shared = Arc::new(Shared::new());
    let signal = shared.clone();
    let started = Instant::now();
    let report = Consumer::new(broker.consume("bench").prefetch(32))
        .state(shared)
        .concurrency(1)
        .shutdown_on(async move { signal.finished.notified().await })
        .run(apply_arc)
        .await;
    let rate = units() as f64 / started.elapsed().as_secs_f64();
    assert_eq!(report.acked, units());
    rate
}

fn main() {
    let rt = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap();
    // For instruction counts under callgrind, one side only:
    // BENCH_ONLY=hand|runtime|runtime16|arc BENCH_UNITS=20000.
    match std::env::var("BENCH_ONLY").as_deref() {
        Ok("hand") => return drop(rt.block_on(hand_written()).to_string()),
        Ok("runtime") => return drop(rt.block_on(runtime(1)).to_string()),
        Ok("runtime16") => return drop(rt.block_on(runtime(16)).to_string()),
        Ok("arc") => return drop(rt.block_on(runtime_arc()).to_string()),
        _ => {}
    }
    let mut rates = [const { Vec::new() }; 4];
    rt.block_on(async {
        for round in 0..ROUNDS {
            let this = [hand_written().await, runtime(1).await, runtime(16).await, runtime_arc().await];
            eprintln!(
                "round {round}: hand {:.0}/s, runtime(1) {:.0}/s, runtime(16) {:.0}/s, runtime(1, Arc state) {:.0}/s",
                this[0], this[1], this[2], this[3]
            );
            for (all, rate) in rates.iter_mut().zip(this) {
                all.push(rate);
            }
        }
    });
    // Each round runs the four back to back, so a round's ratios share the machine's state at that
    // moment; the median of those paired ratios is steadier on a noisy machine than a ratio of
    // medians taken from different moments.
    let paired = |i: usize| median(rates[i].iter().zip(&rates[0]).map(|(r, h)| r / h).collect());
    let (one_ratio, many_ratio, arc_ratio) = (paired(1), paired(2), paired(3));
    let [hand, one, many, arc] = rates.map(median);
    println!(
        "in-memory broker, {} units x {ROUNDS} rounds; medians, and the median of each round's ratio:",
        units()
    );
    println!("  hand-written loop                     {hand:>12.0} units/s");
    println!("  runtime, concurrency 1                {one:>12.0} units/s   ratio {one_ratio:.2}");
    println!(
        "  runtime, concurrency 16               {many:>12.0} units/s   ratio {many_ratio:.2}"
    );
    println!("  runtime, concurrency 1, Arc state     {arc:>12.0} units/s   ratio {arc_ratio:.2}");
}
