//! The RabbitMQ transport against a hand-written lapin loop, on the real broker.
//!
//!     cargo bench --features lapin --bench rabbitmq
//!
//! Publishes `BENCH_N` units (default 20000) to a fresh quorum queue and consumes them through
//! `RabbitSource` + `Consumer` with a no-op handler, and the same through a hand-written lapin
//! loop (manual ack after the same no-op, same prefetch); then both again with a 1 ms async
//! effect at concurrency 32 (a quarter of the units). Each side is timed from its consumer's
//! start (connected, `basic.consume` answered) to its last acknowledgement; the last unit's
//! handler wakes the runtime's shutdown (no timer polls meanwhile).
//!
//! Each side runs `BENCH_ROUNDS` times (default 5), interleaved, the first side alternating;
//! prints every run, the median rates and their ratio, the median of each round's ratio, and
//! the median CPU time the bench process spent per unit (the broker's not included).
//! `BENCH_ONLY=hand|delivery` runs one side, `BENCH_CONCURRENCY=1|32` one case (for profiling).
//! The transport runs in each ack mode, each against its own hand-written runs (per-unit acks):
//! coalesced, then per unit; `BENCH_ACKS=coalesced|per-unit` runs one.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery::lapin::BasicProperties;
use delivery::lapin::options::BasicAckOptions;
use delivery::rabbitmq::{AckMode, RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, State, consumer};
use futures_util::StreamExt;
use tokio::sync::Notify;

mod support;
use support::{Run, env_or, interleaved, measure, report, selected};
#[path = "support/rabbitmq.rs"]
mod rabbitmq;
use rabbitmq::{ack_modes, fresh, subscribe, url};

#[derive(Clone)]
struct Bench {
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<Notify>,
    effect: Duration,
}

#[consumer]
async fn handle(State(bench): State<Bench>) -> Result<(), HandlerError> {
    if !bench.effect.is_zero() {
        tokio::time::sleep(bench.effect).await;
    }
    if bench.done.fetch_add(1, Ordering::Relaxed) + 1 == bench.target {
        bench.finished.notify_one();
    }
    Ok(())
}

/// The `i`th unit: the same small order each time, under its own message id.
fn message(i: u64) -> (Vec<u8>, BasicProperties) {
    let body = br#"{"order_id":"o","customer_id":"c","amount_cents":1}"#;
    (
        body.to_vec(),
        BasicProperties::default().with_message_id(format!("b-{i}").into()),
    )
}

async fn through_transport(
    topology: &RabbitTopology,
    n: u64,
    concurrency: usize,
    effect: Duration,
    mode: AckMode,
) -> Run {
    fresh(topology, n, message).await;
    let bench = Bench {
        done: Arc::new(AtomicU64::new(0)),
        target: n,
        finished: Arc::new(Notify::new()),
        effect,
    };
    let finished = bench.finished.clone();
    let source = RabbitSource::connect(url(), topology.clone())
        .await
        .unwrap()
        .ack_mode(mode);
    measure(n, async {
        let report = Consumer::new(source)
            .state(bench)
            .concurrency(concurrency)
            .shutdown_on(async move { finished.notified().await })
            .run(handle)
            .await;
        assert_eq!(report.acked, n);
    })
    .await
}

async fn hand_written(
    topology: &RabbitTopology,
    n: u64,
    concurrency: usize,
    effect: Duration,
) -> Run {
    fresh(topology, n, message).await;
    let (connection, _channel, consumer) = subscribe(topology).await;
    let run = measure(n, async {
        consumer
            .take(n as usize)
            .for_each_concurrent(concurrency, |delivery| async move {
                let delivery = delivery.unwrap();
                if !effect.is_zero() {
                    tokio::time::sleep(effect).await;
                }
                assert!(delivery.ack(BasicAckOptions::default()).await.unwrap());
            })
            .await;
    })
    .await;
    let _ = connection.close(200, "ok".into()).await;
    run
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 5).max(1);
    let topology = RabbitTopology::new(format!("bench-{}", std::process::id())).prefetch(64);
    for (label, concurrency, effect) in [
        ("no-op, concurrency 1", 1, Duration::ZERO),
        ("1 ms effect, concurrency 32", 32, Duration::from_millis(1)),
    ] {
        if !selected(concurrency) {
            continue;
        }
        let units = if effect.is_zero() { n } else { n / 4 };
        for (acks, mode) in ack_modes() {
            let (hand, ours) = interleaved(
                rounds,
                async || hand_written(&topology, units, concurrency, effect).await,
                async || through_transport(&topology, units, concurrency, effect, mode).await,
            )
            .await;
            let label = format!("{label}, {acks}");
            report(&label, &format!("{units} units"), "lapin", &hand, &ours);
        }
    }
    rabbitmq::delete(&topology).await;
}
