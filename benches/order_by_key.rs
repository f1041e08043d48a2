//! Per-key order under concurrency (`Consumer::order_by_key`) on the in-memory broker: units over
//! 1000 keys, each handler waiting on simulated I/O (a 1 ms timer), consumed
//!
//! - at concurrency 1 (what keeping a key's order costs without `order_by_key`),
//! - at concurrency 32 ordered by key,
//! - at concurrency 32 unordered (the ceiling: no key waits for another),
//!
//! in the same run, rounds interleaved; prints units per second (medians) and the ratios of the
//! ordered run to the other two.
//!
//!     cargo bench --bench order_by_key
//!
//! `BENCH_UNITS` (default 4000) units per run, `BENCH_ROUNDS` (default 3) rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Headers, Json, State, Unit, consumer};
use serde::Deserialize;

mod support;
use support::{env_or, median};

const KEYS: u64 = 1000;

#[derive(Deserialize)]
struct Step {
    seq: u64,
}

#[derive(Default)]
struct Applied {
    done: AtomicU64,
    target: u64,
    finished: tokio::sync::Notify,
}

#[consumer]
async fn apply(
    Json(step): Json<Step>,
    State(applied): State<Arc<Applied>>,
) -> Result<(), HandlerError> {
    // The effect's I/O: a database round trip, a call to another service.
    tokio::time::sleep(Duration::from_millis(1)).await;
    std::hint::black_box(step.seq);
    if applied.done.fetch_add(1, Ordering::Relaxed) + 1 == applied.target {
        applied.finished.notify_one();
    }
    Ok(())
}

/// Units per second of `units` units over [`KEYS`] keys at `concurrency`, ordered by key or not.
async fn run(units: u64, concurrency: usize, ordered: bool) -> f64 {
    let broker = MemoryBroker::new();
    for seq in 0..units {
        let key = (seq % KEYS).to_string();
        let unit = Unit::new(format!("u-{seq}"), format!(r#"{{"seq":{seq}}}"#))
            .with_headers(Headers::from_pairs([(delivery::headers::KEY, key)]));
        broker.publish("steps", unit);
    }
    let applied = Arc::new(Applied {
        target: units,
        ..Applied::default()
    });
    let consumer = Consumer::new(broker.consume("steps"))
        .state(applied.clone())
        .concurrency(concurrency);
    let consumer = if ordered {
        consumer.order_by_key()
    } else {
        consumer
    };
    let start = Instant::now();
    let finished = {
        let applied = applied.clone();
        async move { applied.finished.notified().await }
    };
    let report = consumer.shutdown_on(finished).run(apply).await;
    let elapsed = start.elapsed();
    assert_eq!(report.acked, units, "every unit applied once");
    units as f64 / elapsed.as_secs_f64()
}

fn main() {
    let units: u64 = env_or("BENCH_UNITS", 4000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let (mut one, mut ordered, mut unordered) = (Vec::new(), Vec::new(), Vec::new());
    let (mut to_one, mut to_unordered) = (Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (a, b, c) = runtime.block_on(async {
            (
                run(units, 1, false).await,
                run(units, 32, true).await,
                run(units, 32, false).await,
            )
        });
        one.push(a);
        ordered.push(b);
        unordered.push(c);
        to_one.push(b / a);
        to_unordered.push(b / c);
    }
    println!(
        "in-memory broker, {units} units over {KEYS} keys, 1 ms of I/O per unit, {rounds} rounds; medians:"
    );
    println!(
        "  concurrency 1                   {:>10.0} units/s",
        median(one)
    );
    println!(
        "  concurrency 32, ordered by key  {:>10.0} units/s",
        median(ordered)
    );
    println!(
        "  concurrency 32, unordered       {:>10.0} units/s",
        median(unordered)
    );
    println!(
        "  ordered / concurrency 1: {:.1}x   ordered / unordered: {:.2}",
        median(to_one),
        median(to_unordered)
    );
}
