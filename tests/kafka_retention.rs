//! The retention of a group's retry and dead-letter topics, against a real Kafka-protocol broker
//! (tansu on 127.0.0.1:9092, or `KAFKA_BROKERS`), read back with `describe_configs`: the dead
//! letter is kept until an operator removes it (`retention.ms=-1`, `retention.bytes=-1`), the
//! retry topic for 30 days, both settable, and a topic that already exists with a shorter
//! retention is refused at declare. Fails, never skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;

use std::time::Duration;

use delivery::kafka::KafkaTopology;
use delivery::kafka::client::ClientConfig;
use delivery::kafka::client::admin::{
    AdminClient, AdminOptions, NewTopic, ResourceSpecifier, TopicReplication,
};
use delivery::kafka::client::client::DefaultClientContext;
use delivery::transport::TransportErrorKind;
use kafka_support::{brokers, declare, unique_name};

fn admin() -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .expect("an admin client")
}

fn options() -> AdminOptions {
    AdminOptions::new().operation_timeout(Some(Duration::from_secs(10)))
}

/// `retention.ms` and `retention.bytes` of `topic`, as `describe_configs` answers.
async fn retention(topic: &str) -> (Option<String>, Option<String>) {
    let described = admin()
        .describe_configs(&[ResourceSpecifier::Topic(topic)], &options())
        .await
        .expect("describe_configs answered");
    let config = described
        .into_iter()
        .next()
        .expect("one resource")
        .unwrap_or_else(|code| panic!("describing `{topic}`: {code}"));
    let value = |key: &str| config.get(key).and_then(|entry| entry.value.clone());
    (value("retention.ms"), value("retention.bytes"))
}

const THIRTY_DAYS_MS: &str = "2592000000";

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_dead_letter_is_kept_forever_and_the_retry_topic_thirty_days() {
    let topic = unique_name("kafka-retention");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group")).partitions(1);
    declare(&topology).await;

    assert_eq!(
        retention(&topology.dead_letter_topic_name()).await,
        (Some("-1".into()), Some("-1".into())),
        "the dead letter stays until an operator removes it"
    );
    assert_eq!(
        retention(&topology.retry_topic_name()).await,
        (Some(THIRTY_DAYS_MS.into()), Some("-1".into())),
        "returned units wait 30 days for their group"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_topic_that_exists_with_a_shorter_retention_is_refused() {
    let topic = unique_name("kafka-retention-short");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group")).partitions(1);
    let dead_letter = topology.dead_letter_topic_name();
    // Created earlier by hand (or by an older `declare`) with one hour.
    let created = admin()
        .create_topics(
            &[NewTopic::new(&dead_letter, 1, TopicReplication::Fixed(1))
                .set("retention.ms", "3600000")],
            &options(),
        )
        .await
        .expect("create_topics answered");
    assert!(created[0].is_ok(), "{created:?}");

    let error = topology
        .declare(&brokers())
        .await
        .expect_err("a dead letter that keeps its records one hour is refused");
    let text = error.to_string();
    eprintln!("refused: {text}");
    assert_eq!(error.kind(), TransportErrorKind::Misconfigured, "{text}");
    assert!(
        text.contains(&dead_letter) && text.contains("retention.ms") && text.contains("3600000"),
        "the error names the topic, the setting and its value: {text}"
    );
    // Left as it was: declare changes no existing topic.
    assert_eq!(retention(&dead_letter).await.0.as_deref(), Some("3600000"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_retention_is_set_from_the_topology_and_an_equal_one_is_accepted() {
    let topic = unique_name("kafka-retention-set");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group"))
        .partitions(1)
        .dead_letter_retention(Some(Duration::from_secs(90 * 24 * 3600)))
        .retry_retention(None);
    declare(&topology).await;
    assert_eq!(
        retention(&topology.dead_letter_topic_name()).await,
        (Some("7776000000".into()), Some("-1".into()))
    );
    assert_eq!(
        retention(&topology.retry_topic_name()).await,
        (Some("-1".into()), Some("-1".into()))
    );
    // Declared again (a second consumer starting): the topics exist with what is declared.
    declare(&topology).await;
    // A topology asking for more than the existing dead letter keeps is refused.
    let longer = topology.clone().dead_letter_retention(None);
    let error = longer
        .declare(&brokers())
        .await
        .expect_err("a dead letter kept 90 days is shorter than one kept forever");
    assert!(
        error
            .to_string()
            .contains(&topology.dead_letter_topic_name()),
        "{error}"
    );
}
