//! The NATS JetStream transport with a real effect — `examples/nats_consumer.rs`'s orders
//! transaction in PostgreSQL — against a hand-written async-nats + sqlx loop doing the same
//! transaction, on the real server and database.
//!
//!     cargo bench --features nats,postgres --bench nats_postgres
//!
//! Publishes `BENCH_N` orders (default 20000) to a fresh stream (the example's topology: subjects
//! `<stream>.>`, durable consumer `delivery`, `max_deliver` 5, a dead-letter stream), each with
//! its unit id as `Nats-Msg-Id` and its stamp as `x-delivery-stamp`
//! (`delivery::nats::headers_of`); empties the effect tables; and drains them at concurrency 32
//! with a pool of 32 connections, pulling 64 messages at a time (the example's batch):
//!
//! - **delivery**: `NatsSource` + `Consumer` running the example's own handler (`apply_order`),
//!   with the transport's default unconfirmed `+ACK` (`confirm_acks` false), as the example runs;
//! - **hand-written**: the durable pull consumer's message stream (`max_messages_per_batch(64)`),
//!   `for_each_concurrent(32)`, the same statements in one sqlx transaction per message, then
//!   `Message::ack` (an unconfirmed `+ACK`).
//!
//! Each side is timed from its consumer's start to its last acknowledgement. `BENCH_ROUNDS`
//! rounds (default 3), interleaved, the first side alternating; prints every run, the median
//! rates and their ratio, and the median CPU time the bench process spent per unit (PostgreSQL's
//! and NATS's not included). `BENCH_ONLY=hand` or `BENCH_ONLY=delivery` runs one side.

use async_nats::jetstream::{self, consumer::PullConsumer};
use delivery::nats::{NatsSource, NatsTopology};
use futures_util::StreamExt;

mod support;
use support::{Run, batch_against_per_unit, env_or, interleaved, measure, report};
#[path = "support/orders_pg.rs"]
mod orders_pg;
use orders_pg::{OrderPlaced, Schema, apply_by_hand, check, order_unit};

const CONCURRENCY: usize = 32;
const BATCH: usize = 64;

fn url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
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

/// A fresh stream and durable consumer holding `n` orders, and empty effect tables.
async fn fresh_orders(context: &jetstream::Context, topology: &NatsTopology, pg: &Schema, n: u64) {
    pg.empty().await;
    delete(context, topology).await;
    topology.declare(context).await.unwrap();
    let subject = format!("{}.orders", topology.stream);
    let mut acks = Vec::with_capacity(1024);
    for i in 0..n {
        let unit = order_unit(i);
        acks.push(
            context
                .publish_with_headers(
                    subject.clone(),
                    delivery::nats::headers_of(&unit),
                    unit.payload().clone(),
                )
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
}

async fn through_transport(
    client: &async_nats::Client,
    context: &jetstream::Context,
    topology: &NatsTopology,
    pg: &Schema,
    n: u64,
    batch: Option<usize>,
) -> Run {
    fresh_orders(context, topology, pg, n).await;
    let source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    match batch {
        None => orders_pg::drain(source, pg, n, CONCURRENCY).await,
        Some(batch) => orders_pg::drain_batches(source, pg, n, batch, 2).await,
    }
}

async fn hand_written(
    context: &jetstream::Context,
    topology: &NatsTopology,
    pg: &Schema,
    n: u64,
) -> Run {
    fresh_orders(context, topology, pg, n).await;
    let consumer: PullConsumer = context
        .get_consumer_from_stream(&topology.durable, &topology.stream)
        .await
        .unwrap();
    let db = &pg.db;
    let run = measure(n, async {
        consumer
            .stream()
            .max_messages_per_batch(BATCH)
            .messages()
            .await
            .unwrap()
            .take(n as usize)
            .for_each_concurrent(CONCURRENCY, |message| async move {
                let message = message.unwrap();
                let headers = message.headers.as_ref().expect("headers");
                let id = headers.get("Nats-Msg-Id").expect("an id").as_str();
                let stamp: i64 = headers
                    .get("x-delivery-stamp")
                    .expect("a stamp")
                    .as_str()
                    .parse()
                    .unwrap();
                let order: OrderPlaced = serde_json::from_slice(&message.payload).unwrap();
                apply_by_hand(db, id, stamp, &order).await.unwrap();
                message.ack().await.unwrap();
            })
            .await;
    })
    .await;
    check(db, n).await;
    run
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let name = format!("bench_nats_pg_{}", std::process::id());
    let topology = NatsTopology::new(name.replace('_', "-"))
        .max_deliver(5)
        .batch(BATCH);
    let client = async_nats::connect(url()).await.expect("NATS unreachable");
    let context = jetstream::new(client.clone());
    let pg = Schema::create(&name, CONCURRENCY as u32).await;

    let (hand, ours) = interleaved(
        rounds,
        async || hand_written(&context, &topology, &pg, n).await,
        async || through_transport(&client, &context, &topology, &pg, n, None).await,
    )
    .await;
    report(
        &format!("orders into PostgreSQL, concurrency {CONCURRENCY}, unconfirmed acks"),
        &format!("{n} units, pull batch {BATCH}, pool {CONCURRENCY}"),
        "async-nats + sqlx",
        &hand,
        &ours,
    );

    // The example's batch handler (`BATCH_SIZE`), against the same hand-written loop.
    let batch: usize = env_or("BENCH_BATCH", 100);
    if batch > 1 {
        let topology = topology.clone().batch(batch.max(BATCH));
        let (hand_again, batches) = interleaved(
            rounds,
            async || hand_written(&context, &topology, &pg, n).await,
            async || through_transport(&client, &context, &topology, &pg, n, Some(batch)).await,
        )
        .await;
        report(
            &format!(
                "orders into PostgreSQL in batches of {batch}, 2 at once, against one at a time by hand"
            ),
            &format!(
                "{n} units, pull batch {}, pool {CONCURRENCY}",
                batch.max(BATCH)
            ),
            "async-nats + sqlx, concurrency 32, one transaction per unit",
            &hand_again,
            &batches,
        );
        batch_against_per_unit(&ours, &batches);
    }

    pg.remove().await;
    delete(&context, &topology).await;
}
