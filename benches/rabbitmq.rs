//! The RabbitMQ transport against a hand-written lapin loop, on the real broker.
//!
//!     cargo bench --features lapin --bench rabbitmq
//!
//! Publishes `BENCH_N` units (default 20000) to a fresh quorum queue and consumes them through
//! `RabbitSource` + `Consumer` with a no-op handler, then the same through a hand-written lapin
//! loop (manual ack after the same no-op, same prefetch); then both again with a 1 ms async effect
//! at concurrency 32. Prints both rates and the ratio.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delivery::lapin::options::{
    BasicAckOptions, BasicConsumeOptions, BasicPublishOptions, BasicQosOptions,
    ConfirmSelectOptions, QueueDeleteOptions,
};
use delivery::lapin::types::FieldTable;
use delivery::lapin::{BasicProperties, Connection};
use delivery::rabbitmq::{RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, State, consumer};
use futures_util::StreamExt;

#[derive(Clone)]
struct Bench {
    done: Arc<AtomicU64>,
    effect: Duration,
}

#[consumer]
async fn handle(State(bench): State<Bench>) -> Result<(), HandlerError> {
    if !bench.effect.is_zero() {
        tokio::time::sleep(bench.effect).await;
    }
    bench.done.fetch_add(1, Ordering::Relaxed);
    Ok(())
}

fn url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

async fn fresh(topology: &RabbitTopology, n: u64) {
    let connection = Connection::connect(&url(), Default::default())
        .await
        .expect("RabbitMQ unreachable");
    for q in [topology.queue.clone(), topology.dead_letter_queue_name()] {
        let ch = connection.create_channel().await.unwrap();
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    delivery::rabbitmq::declare(&url(), topology).await.unwrap();
    let ch = connection.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    let body = br#"{"order_id":"o","customer_id":"c","amount_cents":1}"#;
    for i in 0..n {
        // Confirms are collected in batches by `wait_for_confirms` below.
        drop(
            ch.basic_publish(
                "".into(),
                topology.queue.as_str().into(),
                BasicPublishOptions::default(),
                body,
                BasicProperties::default().with_message_id(format!("b-{i}").into()),
            )
            .await
            .unwrap(),
        );
        if i % 1000 == 999 {
            ch.wait_for_confirms().await.unwrap();
        }
    }
    ch.wait_for_confirms().await.unwrap();
    let _ = connection.close(200, "ok".into()).await;
}

async fn through_transport(
    topology: &RabbitTopology,
    n: u64,
    concurrency: usize,
    effect: Duration,
) -> f64 {
    fresh(topology, n).await;
    let done = Arc::new(AtomicU64::new(0));
    let source = RabbitSource::connect(url(), topology.clone())
        .await
        .unwrap();
    let start = Instant::now();
    let watch = done.clone();
    Consumer::new(source)
        .state(Bench {
            done: done.clone(),
            effect,
        })
        .concurrency(concurrency)
        .shutdown_on(async move {
            while watch.load(Ordering::Relaxed) < n {
                tokio::time::sleep(Duration::from_millis(1)).await;
            }
        })
        .run(handle)
        .await;
    n as f64 / start.elapsed().as_secs_f64()
}

async fn hand_written(
    topology: &RabbitTopology,
    n: u64,
    concurrency: usize,
    effect: Duration,
) -> f64 {
    fresh(topology, n).await;
    let connection = Connection::connect(&url(), Default::default())
        .await
        .unwrap();
    let ch = connection.create_channel().await.unwrap();
    ch.basic_qos(topology.prefetch, BasicQosOptions::default())
        .await
        .unwrap();
    let consumer = ch
        .basic_consume(
            topology.queue.as_str().into(),
            "hand".into(),
            BasicConsumeOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    let start = Instant::now();
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
    let rate = n as f64 / start.elapsed().as_secs_f64();
    let _ = connection.close(200, "ok".into()).await;
    rate
}

#[tokio::main]
async fn main() {
    let n: u64 = std::env::var("BENCH_N")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(20_000);
    let topology = RabbitTopology::new(format!("bench-{}", std::process::id())).prefetch(64);
    for (label, concurrency, effect) in [
        ("no-op, concurrency 1", 1, Duration::ZERO),
        ("1 ms effect, concurrency 32", 32, Duration::from_millis(1)),
    ] {
        let units = if effect.is_zero() { n } else { n / 4 };
        let hand = hand_written(&topology, units, concurrency, effect).await;
        let ours = through_transport(&topology, units, concurrency, effect).await;
        println!(
            "{label}: {units} units; hand-written lapin {hand:.0}/s, delivery {ours:.0}/s, ratio {:.3}",
            ours / hand
        );
    }
    let connection = Connection::connect(&url(), Default::default())
        .await
        .unwrap();
    for q in [topology.queue.clone(), topology.dead_letter_queue_name()] {
        let ch = connection.create_channel().await.unwrap();
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
}
