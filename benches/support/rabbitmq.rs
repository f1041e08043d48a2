//! What the RabbitMQ benchmarks share: the broker's URL, a fresh queue holding the units to
//! drain, the hand-written loop's subscription, and the clean-up.
#![allow(dead_code)] // each benchmark uses part of it

use delivery::lapin::options::{
    BasicConsumeOptions, BasicPublishOptions, BasicQosOptions, ConfirmSelectOptions,
    QueueDeleteOptions,
};
use delivery::lapin::types::FieldTable;
use delivery::lapin::{BasicProperties, Channel, Connection};
use delivery::rabbitmq::RabbitTopology;

pub fn url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

async fn connect() -> Connection {
    Connection::connect(&url(), Default::default())
        .await
        .expect("RabbitMQ unreachable")
}

async fn delete_queues(connection: &Connection, topology: &RabbitTopology) {
    for q in [topology.queue.clone(), topology.dead_letter_queue_name()] {
        let ch = connection.create_channel().await.unwrap();
        let _ = ch
            .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
}

/// The topology declared afresh, its queue holding `n` messages, `message(i)` each, published
/// under confirms collected in batches of a thousand.
pub async fn fresh(
    topology: &RabbitTopology,
    n: u64,
    message: impl Fn(u64) -> (Vec<u8>, BasicProperties),
) {
    let connection = connect().await;
    delete_queues(&connection, topology).await;
    delivery::rabbitmq::declare(url(), topology).await.unwrap();
    let ch = connection.create_channel().await.unwrap();
    ch.confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    for i in 0..n {
        let (body, properties) = message(i);
        // Confirms are collected in batches by `wait_for_confirms` below.
        drop(
            ch.basic_publish(
                "".into(),
                topology.queue.as_str().into(),
                BasicPublishOptions::default(),
                &body,
                properties,
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

/// The hand-written loop's consumer of the topology's queue, with its prefetch, on a channel and
/// connection of its own: keep the channel (dropping it closes it), close the connection when done.
pub async fn subscribe(
    topology: &RabbitTopology,
) -> (Connection, Channel, delivery::lapin::Consumer) {
    let connection = connect().await;
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
    (connection, ch, consumer)
}

/// Deletes the topology's queues.
pub async fn delete(topology: &RabbitTopology) {
    let connection = connect().await;
    delete_queues(&connection, topology).await;
    let _ = connection.close(200, "ok".into()).await;
}

/// The ack modes to run the transport in: both (coalesced first), or the one `BENCH_ACKS` names
/// (`coalesced` or `per-unit`). Coalesced acks are flushed every `BENCH_FLUSH_MS` if set (the
/// default's 5 ms otherwise).
pub fn ack_modes() -> Vec<(&'static str, delivery::rabbitmq::AckMode)> {
    let only = std::env::var("BENCH_ACKS").unwrap_or_default();
    let coalesced = match std::env::var("BENCH_FLUSH_MS")
        .ok()
        .and_then(|ms| ms.parse().ok())
    {
        Some(ms) => delivery::rabbitmq::AckMode::Coalesced {
            flush_every: std::time::Duration::from_millis(ms),
            hold_for: std::time::Duration::from_millis(100),
        },
        None => delivery::rabbitmq::AckMode::coalesced(),
    };
    [
        ("coalesced acks", coalesced),
        ("per-unit acks", delivery::rabbitmq::AckMode::PerUnit),
    ]
    .into_iter()
    .filter(|(label, _)| only.is_empty() || label.starts_with(only.as_str()))
    .collect()
}

/// The stamp its producer published a delivery with (`x-delivery-stamp`, an integer).
pub fn stamp_of(delivery: &delivery::lapin::message::Delivery) -> i64 {
    match delivery
        .properties
        .headers()
        .as_ref()
        .and_then(|h| h.inner().get("x-delivery-stamp"))
    {
        Some(delivery::lapin::types::AMQPValue::LongLongInt(stamp)) => *stamp,
        other => panic!("a stamp: {other:?}"),
    }
}
