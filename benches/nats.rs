//! Consumer throughput over NATS JetStream with a no-op handler: `delivery`'s runtime over
//! `NatsSource` against a hand-written loop with the raw async-nats client — same pull batch,
//! `+ACK` per message on both sides, same run. Prints both rates and their ratio (target ≥ 0.9).
//! The runtime runs twice per round: with its default unconfirmed `+ACK` (as `Message::ack`, the
//! raw loop's), and with [`NatsTopology::confirm_acks`] (each `+ACK` waits for JetStream's reply,
//! as `Message::double_ack`), whose cost is printed as its own ratio.
//!
//!     cargo bench --features nats --bench nats
//!
//! Needs NATS on 127.0.0.1:4222 (or `NATS_URL`). `UNITS` sets the units per side (default 50000).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use async_nats::jetstream::{self, consumer::PullConsumer};
use delivery::nats::{NatsSource, NatsTopology};
use delivery::{Consumer, HandlerError, State, consumer};
use futures_util::StreamExt;

const BATCH: usize = 128;

#[derive(Clone)]
struct Counter {
    seen: Arc<AtomicU64>,
    target: u64,
    done: Arc<tokio::sync::Notify>,
}

/// Handlers run at once by the runtime (`BENCH_CONCURRENCY`, default the runtime's own, 16). At
/// 1 the runtime acks one at a time as the hand-written loop does; measured slower here.
fn concurrency() -> usize {
    std::env::var("BENCH_CONCURRENCY")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16)
}

#[consumer]
async fn no_op(State(counter): State<Counter>) -> Result<(), HandlerError> {
    if counter.seen.fetch_add(1, Ordering::Relaxed) + 1 == counter.target {
        counter.done.notify_one();
    }
    Ok(())
}

async fn prepare(context: &jetstream::Context, name: &str, units: u64) -> NatsTopology {
    let topology = NatsTopology::new(name)
        .subjects([name.to_owned()])
        .batch(BATCH)
        .max_deliver(5);
    for s in [
        &topology.stream,
        &topology.dead_letter_stream_name(),
        &topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(s).await;
    }
    topology.declare(context).await.unwrap();
    let mut acks = Vec::with_capacity(1024);
    for i in 0..units {
        acks.push(
            context
                .publish(name.to_owned(), format!(r#"{{"n":{i}}}"#).into())
                .await
                .unwrap(),
        );
        if acks.len() == 1024 {
            for ack in acks.drain(..) {
                ack.await.unwrap();
            }
        }
    }
    for ack in acks {
        ack.await.unwrap();
    }
    topology
}

/// Deletes the topology's streams: the stream, its dead letter and its advisories.
async fn delete(context: &jetstream::Context, topology: &NatsTopology) {
    for stream in [
        topology.stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(stream).await;
    }
}

async fn raw(context: &jetstream::Context, topology: &NatsTopology, units: u64) -> f64 {
    let consumer: PullConsumer = context
        .get_consumer_from_stream(&topology.durable, &topology.stream)
        .await
        .unwrap();
    let started = Instant::now();
    let mut messages = consumer
        .stream()
        .max_messages_per_batch(BATCH)
        .messages()
        .await
        .unwrap();
    let mut seen = 0;
    while seen < units {
        let message = messages.next().await.unwrap().unwrap();
        message.ack().await.unwrap();
        seen += 1;
    }
    units as f64 / started.elapsed().as_secs_f64()
}

async fn runtime(client: &async_nats::Client, topology: &NatsTopology, units: u64) -> f64 {
    let counter = Counter {
        seen: Arc::new(AtomicU64::new(0)),
        target: units,
        done: Arc::new(tokio::sync::Notify::new()),
    };
    let done = counter.done.clone();
    let started = Instant::now();
    let source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    let report = Consumer::new(source)
        .concurrency(concurrency())
        .state(counter)
        .shutdown_on(async move { done.notified().await })
        .drain_deadline(Duration::from_secs(5))
        .run(no_op)
        .await;
    let elapsed = started.elapsed();
    assert!(report.acked >= units, "{report:?}");
    units as f64 / elapsed.as_secs_f64()
}

fn main() {
    let units: u64 = std::env::var("UNITS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(50_000);
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
        let client = async_nats::connect(&url).await.expect("NATS reachable");
        let context = jetstream::new(client.clone());
        let pid = std::process::id();
        let mut raw_rates = Vec::new();
        let mut ours = Vec::new();
        let mut confirmed = Vec::new();
        // The sides in turn, twice, each on a fresh stream of the same units.
        for round in 0..2 {
            let name = format!("bench-raw-{pid}-{round}");
            let topology = prepare(&context, &name, units).await;
            raw_rates.push(raw(&context, &topology, units).await);
            delete(&context, &topology).await;

            for (confirm, rates) in [(false, &mut ours), (true, &mut confirmed)] {
                let name = format!("bench-delivery-{pid}-{round}-{confirm}");
                let topology = prepare(&context, &name, units)
                    .await
                    .confirm_acks(confirm);
                rates.push(runtime(&client, &topology, units).await);
                delete(&context, &topology).await;
            }
        }
        let best = |v: &[f64]| v.iter().copied().fold(0.0, f64::max);
        let (raw_best, ours_best, confirmed_best) =
            (best(&raw_rates), best(&ours), best(&confirmed));
        println!(
            "nats: {units} units per side, pull batch {BATCH}, +ACK per unit, runtime concurrency {}",
            concurrency()
        );
        println!("  raw async-nats loop : {raw_best:>10.0} units/s  (runs: {raw_rates:.0?})");
        println!("  delivery NatsSource : {ours_best:>10.0} units/s  (runs: {ours:.0?})");
        println!("  ratio               : {:.3}", ours_best / raw_best);
        println!("  delivery, confirm_acks : {confirmed_best:>7.0} units/s  (runs: {confirmed:.0?})");
        println!(
            "  ratio, confirm_acks : {:.3}",
            confirmed_best / raw_best
        );
    });
}
