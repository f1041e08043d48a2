//! The Kafka transport with a real effect — `examples/kafka_consumer.rs`'s orders transaction in
//! PostgreSQL — against a hand-written rdkafka + sqlx loop doing the same transaction, on the
//! real broker and database.
//!
//!     cargo bench --features kafka,postgres --bench kafka_postgres
//!
//! Needs a Kafka-protocol broker on 127.0.0.1:9092 (or `KAFKA_BROKERS`; `scripts/services.sh`
//! starts tansu). Produces `BENCH_N` orders (default 20000) once, to a fresh topic of 3
//! partitions (the example's), keyed by customer (so a customer's orders share a partition), each
//! with its unit id as `message-id` and its stamp as `x-delivery-stamp`
//! (`delivery::kafka::headers_of`). Each run reads the whole topic with a group of its own, after
//! the effect tables are emptied, with a pool of 32 connections:
//!
//! - **delivery**: `KafkaSource` (delivery limit 5; offsets committed through the watermark) +
//!   `Consumer` running the example's own handler (`apply_order`) at concurrency 32
//!   (`BENCH_CONCURRENCY` sets another);
//! - **hand-written**: the safe loop as `benches/kafka.rs` writes it — a `StreamConsumer`
//!   (`enable.auto.commit=false`), one record at a time: `recv`, the same statements in one sqlx
//!   transaction, then a synchronous commit of that record's offset. (Running records at once
//!   by hand needs the offset bookkeeping the transport is: a committed offset confirms every
//!   record before it.)
//!
//! Each side is timed from its consumer's start, the group's join included (a fixed cost: more
//! units make it smaller), to its last commit (the transport's, at shutdown). `BENCH_ROUNDS`
//! rounds (default 3), interleaved, the first side alternating; prints every run, the median
//! rates and their ratio, and the median CPU time the bench process spent per unit (PostgreSQL's
//! and the broker's not included). `BENCH_ONLY=hand` or `BENCH_ONLY=delivery` runs one side.

use std::cell::Cell;
use std::time::Duration;

use delivery::kafka::client::ClientConfig;
use delivery::kafka::client::Message as _;
use delivery::kafka::client::consumer::{CommitMode, Consumer as _, StreamConsumer};
use delivery::kafka::client::message::Headers as _;
use delivery::kafka::client::producer::{FutureProducer, FutureRecord};
use delivery::kafka::{KafkaSource, KafkaTopology};

mod support;
use support::{Run, batch_against_per_unit, env_or, interleaved, measure, report};
#[path = "support/orders_pg.rs"]
mod orders_pg;
use orders_pg::{OrderPlaced, Schema, apply_by_hand, check, customer_of, order_unit};

/// The pool's connections, and the transport's concurrency unless `BENCH_CONCURRENCY` says.
const POOL: usize = 32;
const PARTITIONS: i32 = 3;

fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// The topic, created with `n` orders.
async fn produce(topic: &str, n: u64) {
    KafkaTopology::new(topic, "unused")
        .partitions(PARTITIONS)
        .declare(&brokers())
        .await
        .expect("Kafka reachable");
    let producer: FutureProducer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let mut sends = Vec::with_capacity(1024);
    for i in 0..n {
        let (unit, key) = (order_unit(i), customer_of(i));
        let producer = producer.clone();
        sends.push(async move {
            producer
                .send(
                    FutureRecord::to(topic)
                        .key(&key)
                        .payload(unit.payload().as_ref())
                        .headers(delivery::kafka::headers_of(&unit)),
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

async fn through_transport(
    topic: &str,
    group: String,
    pg: &Schema,
    n: u64,
    concurrency: usize,
    batch: Option<usize>,
) -> Run {
    pg.empty().await;
    let topology = KafkaTopology::new(topic, group)
        .partitions(PARTITIONS)
        .max_deliveries(5);
    // The group's own retry, dead-letter and attempts topics (not timed).
    topology.declare(&brokers()).await.unwrap();
    let source = KafkaSource::connect(&brokers(), topology).await.unwrap();
    match batch {
        None => orders_pg::drain(source, pg, n, concurrency).await,
        Some(batch) => orders_pg::drain_batches(source, pg, n, batch, concurrency).await,
    }
}

async fn hand_written(topic: &str, group: String, pg: &Schema, n: u64) -> Run {
    pg.empty().await;
    let db = &pg.db;
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", group)
        .set("auto.offset.reset", "earliest")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[topic]).unwrap();
    let run = measure(n, async {
        for _ in 0..n {
            let message = consumer.recv().await.unwrap();
            let (mut id, mut stamp) = (None, None);
            for header in message.headers().expect("headers").iter() {
                let value = || std::str::from_utf8(header.value.unwrap()).unwrap();
                match header.key {
                    "message-id" => id = Some(value()),
                    "x-delivery-stamp" => stamp = Some(value().parse::<i64>().unwrap()),
                    _ => {}
                }
            }
            let order: OrderPlaced = serde_json::from_slice(message.payload().unwrap()).unwrap();
            apply_by_hand(db, id.expect("an id"), stamp.expect("a stamp"), &order)
                .await
                .unwrap();
            consumer.commit_message(&message, CommitMode::Sync).unwrap();
        }
    })
    .await;
    drop(consumer);
    check(db, n).await;
    run
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let concurrency: usize = env_or("BENCH_CONCURRENCY", POOL).max(1);
    let millis = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    let topic = format!("bench-pg-{}-{millis}", std::process::id());
    let pg = Schema::create(
        &format!("bench_kafka_pg_{}", std::process::id()),
        POOL as u32,
    )
    .await;
    produce(&topic, n).await;

    // Each run's group is new: it reads the topic from its start.
    let runs = Cell::new(0);
    let group = |side: &str| {
        runs.set(runs.get() + 1);
        format!("{topic}-{side}-{}", runs.get())
    };
    let (hand, ours) = interleaved(
        rounds,
        async || hand_written(&topic, group("hand"), &pg, n).await,
        async || through_transport(&topic, group("delivery"), &pg, n, concurrency, None).await,
    )
    .await;
    report(
        &format!(
            "orders into PostgreSQL, hand-written one at a time, delivery concurrency {concurrency}"
        ),
        &format!("{n} units, {PARTITIONS} partitions, pool {POOL}"),
        "rdkafka + sqlx",
        &hand,
        &ours,
    );

    // The example's batch handler (`BATCH_SIZE`), against the same hand-written loop.
    let batch: usize = env_or("BENCH_BATCH", 100);
    if batch > 1 {
        let (hand_again, batches) = interleaved(
            rounds,
            async || hand_written(&topic, group("hand"), &pg, n).await,
            async || through_transport(&topic, group("batches"), &pg, n, 2, Some(batch)).await,
        )
        .await;
        report(
            &format!(
                "orders into PostgreSQL in batches of {batch}, 2 at once, against one at a time by hand"
            ),
            &format!("{n} units, {PARTITIONS} partitions, pool {POOL}"),
            "rdkafka + sqlx, one at a time",
            &hand_again,
            &batches,
        );
        batch_against_per_unit(&ours, &batches);
    }

    pg.remove().await;
}
