//! `TransportError::kind` and the topology errors' kinds, read off what the real servers answer:
//! a port nobody listens on is a lost connection, a publish the broker returns unconfirmed, a
//! queue or stream redeclared with other settings and a bad client property misconfigured, a
//! command the server refuses refused.
#![cfg(all(
    feature = "lapin",
    feature = "redis",
    feature = "nats",
    feature = "kafka"
))]

#[path = "support/process.rs"]
mod process;

use std::error::Error as _;

use delivery::lapin::BasicProperties;
use delivery::rabbitmq::{ConfirmedPublisher, RabbitTopology, TopologyError};
use delivery::transport::TransportErrorKind;
use process::amqp_url;

/// A loopback port with no server behind it.
const CLOSED: &str = "127.0.0.1:9";

#[tokio::test]
async fn a_server_nobody_answers_is_a_lost_connection() {
    let rabbit = delivery::rabbitmq::connect(&format!("amqp://guest:guest@{CLOSED}/%2f"))
        .await
        .unwrap_err();
    assert_eq!(
        rabbit.kind(),
        TransportErrorKind::ConnectionLost,
        "{rabbit}"
    );
    assert!(rabbit.is_transient());

    let Err(redis) = delivery::redis::connect(&format!("redis://{CLOSED}")).await else {
        panic!("no Redis on that port");
    };
    assert_eq!(redis.kind(), TransportErrorKind::ConnectionLost, "{redis}");

    let nats = delivery::nats::connect(&format!("nats://{CLOSED}"))
        .await
        .unwrap_err();
    assert_eq!(nats.kind(), TransportErrorKind::ConnectionLost, "{nats}");
}

#[tokio::test]
async fn a_publish_the_broker_returns_is_not_confirmed() {
    let publisher = ConfirmedPublisher::new(amqp_url());
    let error = publisher
        .publish(
            "error-kinds.no-such-queue",
            b"{}",
            BasicProperties::default(),
        )
        .await
        .unwrap_err();
    assert_eq!(error.kind(), TransportErrorKind::NotConfirmed, "{error}");
    assert!(error.is_transient());
    publisher.close().await;
}

#[tokio::test]
async fn a_queue_redeclared_with_other_arguments_is_misconfigured() {
    let topology = RabbitTopology::new("error-kinds.redeclared").delivery_limit(3);
    let connection = delivery::rabbitmq::connect(&amqp_url()).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    for queue in [topology.queue.clone(), topology.dead_letter_queue_name()] {
        let _ = channel
            .queue_delete(queue.as_str().into(), Default::default())
            .await;
    }
    delivery::rabbitmq::declare(&amqp_url(), &topology)
        .await
        .unwrap();
    let error = delivery::rabbitmq::declare(&amqp_url(), &topology.clone().delivery_limit(5))
        .await
        .unwrap_err();
    let error = error
        .downcast_ref::<TopologyError>()
        .expect("a topology error");
    assert_eq!(error.kind(), TransportErrorKind::Misconfigured, "{error}");
    assert!(
        error.source().is_some(),
        "the broker's answer is kept as the source"
    );
}

#[tokio::test]
async fn a_command_the_server_refuses_is_refused() {
    // A consumer group on a key that holds a string, not a stream: Redis answers WRONGTYPE.
    let url = "redis://127.0.0.1:6379";
    let mut connection = delivery::redis::connect(url).await.unwrap();
    let key = "error-kinds:not-a-stream";
    redis::cmd("SET")
        .arg(key)
        .arg("x")
        .exec_async(&mut connection)
        .await
        .unwrap();
    let error = delivery::redis::declare(url, &delivery::redis::RedisTopology::new(key, "g"))
        .await
        .unwrap_err();
    assert_eq!(error.kind(), TransportErrorKind::Refused, "{error}");
    assert!(!error.is_transient());
}

#[test]
fn a_client_property_the_producer_cannot_take_is_misconfigured() {
    let mut config = delivery::kafka::client::ClientConfig::new();
    config
        .set("bootstrap.servers", "127.0.0.1:9092")
        .set("message.timeout.ms", "0");
    let Err(error) = delivery::kafka::KafkaSink::with_config(config) else {
        panic!("a zero delivery timeout is refused");
    };
    assert_eq!(error.kind(), TransportErrorKind::Misconfigured, "{error}");
}
