//! Per-key order under concurrency (`Consumer::order_by_key`) on the in-memory broker: units over
//! 1000 keys, each handler waiting on simulated I/O (a 1 ms timer), consumed
//!
//! - at concurrency 1 (what keeping a key's order costs without `order_by_key`),
//! - at concurrency 32 ordered by key,
//! - at concurrency 32 unordered (the ceiling: no key waits for another),
//! - by a hand-written per-key loop on the broker's own client (`Source::receive`, `Settle::ack`):
//!   a task per key fed by a channel, 32 units at once under a semaphore — what users write today
//!   to keep a key's order under concurrency,
//!
//! in the same run, rounds interleaved; prints units per second (medians) and the ratios of the
//! ordered run to the others.
//!
//!     cargo bench --bench order_by_key
//!
//! `BENCH_UNITS` (default 4000) units per run, `BENCH_ROUNDS` (default 3) rounds.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use std::collections::HashMap;

use delivery::memory::{MemoryBroker, MemoryHandle};
use delivery::{
    Consumer, HandlerError, Headers, Json, State, Unit, consumer, transport::Settle,
    transport::Source,
};
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

/// A broker holding `units` units over [`KEYS`] keys.
fn seeded(units: u64) -> MemoryBroker {
    let broker = MemoryBroker::new();
    for seq in 0..units {
        let key = (seq % KEYS).to_string();
        let unit = Unit::new(format!("u-{seq}"), format!(r#"{{"seq":{seq}}}"#))
            .with_headers(Headers::from_pairs([(delivery::headers::KEY, key)]));
        broker.publish("steps", unit);
    }
    broker
}

/// Units per second of the hand-written per-key loop: one task per key, fed in arrival order by a
/// channel, applying and acknowledging its units one at a time; at most 32 units received and not
/// yet acknowledged (a semaphore's permits), as the runtime's concurrency.
async fn hand_written(units: u64) -> f64 {
    let broker = seeded(units);
    let mut source = broker.consume("steps");
    let permits = Arc::new(tokio::sync::Semaphore::new(32));
    let (done, mut finished) = tokio::sync::mpsc::unbounded_channel::<()>();
    let mut lanes: HashMap<String, tokio::sync::mpsc::UnboundedSender<_>> = HashMap::new();
    let start = Instant::now();
    for _ in 0..units {
        let permit = permits.clone().acquire_owned().await.expect("never closed");
        let (unit, handle) = source.receive().await.expect("received").expect("a unit");
        let key =
            std::str::from_utf8(&unit.headers().get(delivery::headers::KEY).expect("keyed")[..])
                .expect("a UTF-8 key")
                .to_owned();
        let lane = lanes.entry(key).or_insert_with(|| {
            let (send, mut units) = tokio::sync::mpsc::unbounded_channel::<(
                Unit,
                MemoryHandle,
                tokio::sync::OwnedSemaphorePermit,
            )>();
            let done = done.clone();
            tokio::spawn(async move {
                while let Some((unit, handle, permit)) = units.recv().await {
                    let step: Step = serde_json::from_slice(unit.payload()).expect("a step");
                    tokio::time::sleep(Duration::from_millis(1)).await;
                    std::hint::black_box(step.seq);
                    handle.ack(&unit).await.expect("acknowledged");
                    drop(permit);
                    let _ = done.send(());
                }
            });
            send
        });
        lane.send((unit, handle, permit)).expect("the lane runs");
    }
    for _ in 0..units {
        finished.recv().await.expect("every unit acknowledged");
    }
    let elapsed = start.elapsed();
    source.stop().await;
    units as f64 / elapsed.as_secs_f64()
}

/// Units per second of `units` units over [`KEYS`] keys at `concurrency`, ordered by key or not.
async fn run(units: u64, concurrency: usize, ordered: bool) -> f64 {
    let broker = seeded(units);
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
    let (mut one, mut ordered, mut unordered, mut by_hand) =
        (Vec::new(), Vec::new(), Vec::new(), Vec::new());
    let (mut to_one, mut to_unordered, mut to_hand) = (Vec::new(), Vec::new(), Vec::new());
    for _ in 0..rounds {
        let (a, b, c, d) = runtime.block_on(async {
            (
                run(units, 1, false).await,
                run(units, 32, true).await,
                run(units, 32, false).await,
                hand_written(units).await,
            )
        });
        one.push(a);
        ordered.push(b);
        unordered.push(c);
        by_hand.push(d);
        to_one.push(b / a);
        to_unordered.push(b / c);
        to_hand.push(b / d);
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
        "  hand-written per-key loop, 32   {:>10.0} units/s",
        median(by_hand)
    );
    println!(
        "  ordered / concurrency 1: {:.1}x   ordered / unordered: {:.2}   ordered / hand-written: {:.2}",
        median(to_one),
        median(to_unordered),
        median(to_hand)
    );
}
