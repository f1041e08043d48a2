//! The user's client configuration, given once in the topology, reaches every client the Kafka
//! transport makes: an invalid `security.protocol` makes each one fail with librdkafka's
//! configuration error — the admin client of `declare`, the consumer, `KafkaDeadLetters`' reader
//! and producer, and the relay's `KafkaSink` built from the topology — while the same topology
//! without it works against the real broker (tansu on 127.0.0.1:9092, or `KAFKA_BROKERS`). The
//! source's own producer and attempts reader are checked by the crate's unit tests
//! (`kafka::tests`). Fails, never skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;

use delivery::dead_letter::DeadLetters;
use delivery::kafka::{KafkaDeadLetters, KafkaSink, KafkaSource, KafkaTopology};
use kafka_support::{brokers, declare, unique_name};

fn refused(what: &str, error: impl std::fmt::Display) {
    let error = error.to_string();
    assert!(
        error.contains("security.protocol"),
        "{what}: failed, but not on the common setting: {error}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_setting_given_once_reaches_every_client() {
    let topic = unique_name("kafka-client-config");
    let good = KafkaTopology::new(&topic, format!("{topic}-group"))
        .partitions(1)
        .client_property("client.id", "delivery-test");
    declare(&good).await;
    // Every client works with the topology's valid common settings.
    let source = KafkaSource::connect(&brokers(), good.clone())
        .await
        .expect("a consumer");
    drop(source);
    assert_eq!(
        KafkaDeadLetters::new(&brokers(), &good)
            .count()
            .await
            .unwrap(),
        0
    );
    KafkaSink::from_topology(&brokers(), &good).expect("a sink");

    let bad = good.client_property("security.protocol", "carrier-pigeon");
    refused("declare", bad.declare(&brokers()).await.unwrap_err());
    refused(
        "the consumer",
        KafkaSource::connect(&brokers(), bad.clone())
            .await
            .err()
            .expect("the consumer refuses the setting"),
    );
    let dead = KafkaDeadLetters::new(&brokers(), &bad);
    refused("the dead letter's reader", dead.count().await.unwrap_err());
    refused(
        "the relay's sink",
        KafkaSink::from_topology(&brokers(), &bad).expect_err("the sink refuses the setting"),
    );
}
