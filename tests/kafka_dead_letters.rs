//! The operator's side of the Kafka dead letter through `DeadLetters`, against a real
//! Kafka-protocol broker (tansu on 127.0.0.1:9092, or `KAFKA_BROKERS`): units refused by the
//! consumer listed a page at a time across partitions, peeked, purged and redriven to the
//! group's retry topic — Kafka removes no record, so the view records what it removed — and a view whose removed topic was
//! never declared refusing to remove anything. Fails, never skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/kafka.rs"]
mod kafka_support;

use std::collections::BTreeSet;
use std::time::{Duration, SystemTime};

use dead_letters::strict;
use delivery::dead_letter::{DeadLetters, Selection};
use delivery::kafka::client::message::{Header, OwnedHeaders};
use delivery::kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
use delivery::{Consumer, UnitId, disposition::ReasonKind};
use kafka_support::{brokers, declare, end_of, headers_at, producer, record, send, unique_name};

/// Consumes until the dead letter holds `n` units.
async fn consume_until_dead(topology: &KafkaTopology, dead: &KafkaDeadLetters, n: u64) {
    let source = KafkaSource::connect(&brokers(), topology.clone())
        .await
        .unwrap();
    let dead = dead.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    Consumer::new(source)
        .shutdown_on(async move {
            while dead.count().await.unwrap() < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{n} dead letters not reached within 60 s"
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        })
        .run(strict)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_across_partitions_purge_and_redrive_under_the_same_id() {
    let started = SystemTime::now();
    let topic = unique_name("kafka-dlq");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group"))
        .partitions(3)
        .commit_interval(Duration::from_millis(100));
    declare(&topology).await;
    let producer = producer();
    for n in 0..6 {
        let headers = OwnedHeaders::new()
            .insert(Header {
                key: "tenant",
                value: Some("acme"),
            })
            .insert(Header {
                key: "trace",
                value: Some("t-1"),
            });
        let id = format!("u-{n}");
        send(
            &producer,
            record(&topic, &id, r#"{"amount_cents":-5}"#, headers),
        )
        .await;
    }
    let dead = KafkaDeadLetters::new(&brokers(), &topology);
    assert_eq!(dead.name(), format!("{topic}.{topic}-group.dlq"));
    consume_until_dead(&topology, &dead, 6).await;
    assert_eq!(dead.count().await.unwrap(), 6);

    // Pages of four, in partition then offset order, each unit once.
    let first = dead.list(4, None).await.unwrap();
    assert_eq!(first.records.len(), 4);
    let second = dead.list(4, first.next.as_ref()).await.unwrap();
    assert!(second.next.is_none(), "no page after the last");
    let records: Vec<_> = first.records.iter().chain(&second.records).collect();
    let positions: Vec<(i32, i64)> = records
        .iter()
        .map(|d| {
            let (p, o) = d.position.split_once(':').unwrap();
            (p.parse().unwrap(), o.parse().unwrap())
        })
        .collect();
    let mut sorted = positions.clone();
    sorted.sort();
    assert_eq!(positions, sorted, "partition then offset order");
    let ids: BTreeSet<&str> = records.iter().map(|d| d.id().as_str()).collect();
    assert_eq!(ids.len(), 6, "{ids:?}");
    assert!(
        dead.list(1, Some(&delivery::dead_letter::Cursor::new("x")))
            .await
            .is_err()
    );
    for d in &records {
        assert_eq!(d.source, topic);
        assert_eq!(d.reason, Some(ReasonKind::Rejected));
        assert_eq!(d.detail, "negative amount");
        assert_eq!(d.delivery_count().get(), 1);
        assert_eq!(d.unit.headers().get_str("tenant"), Some("acme"));
        assert!(
            d.unit
                .headers()
                .iter()
                .all(|(name, _)| !delivery::headers::is_dead_letter(name)
                    && !delivery::headers::is_bookkeeping(name)),
            "the unit's own headers: {:?}",
            d.unit.headers()
        );
        let at = d.dead_lettered_at.expect("the record's timestamp");
        assert!(at >= started - Duration::from_secs(5), "{at:?}");
    }
    let peeked = dead.peek(&UnitId::new("u-3")).await.unwrap().unwrap();
    assert_eq!(peeked.unit.payload().as_ref(), br#"{"amount_cents":-5}"#);
    assert!(dead.peek(&UnitId::new("none")).await.unwrap().is_none());

    // Purged: no longer listed, counted or found; its bytes stay in the topic.
    assert_eq!(dead.purge(&[UnitId::new("u-0")]).await.unwrap(), 1);
    assert_eq!(dead.count().await.unwrap(), 5);
    assert!(dead.peek(&UnitId::new("u-0")).await.unwrap().is_none());
    assert_eq!(dead.purge(&[UnitId::new("u-0")]).await.unwrap(), 0);

    // Redriven: to the group's own retry topic (not the source topic every group reads), due
    // now, under its id and key, with its own headers, where it was first read and no delivery
    // count; no longer in the dead letter.
    let mut source_ends_before = Vec::new();
    for partition in 0..3 {
        source_ends_before.push(end_of(&topic, partition).await);
    }
    let report = dead
        .redrive(Selection::Ids(&[UnitId::new("u-1"), UnitId::new("none")]))
        .await
        .unwrap();
    let redriven_by = SystemTime::now();
    assert_eq!(report.redriven, [UnitId::new("u-1")]);
    assert_eq!(report.not_found, [UnitId::new("none")]);
    assert_eq!(dead.count().await.unwrap(), 4);
    let retry = topology.retry_topic_name();
    let mut republished = None;
    for partition in 0..3 {
        let end = end_of(&retry, partition).await;
        if end == 0 {
            continue;
        }
        let headers = headers_at(&retry, partition, end - 1).await;
        if headers.contains(&("message-id".to_owned(), "u-1".to_owned())) {
            republished = Some(headers);
        }
    }
    let mut headers = republished.expect("u-1 at the end of a retry topic partition");
    let mut taken = |name: &str| {
        let at = headers.iter().position(|(n, _)| n == name).expect(name);
        headers.remove(at).1
    };
    let due_ms: u64 = taken("x-delivery-due-ms").parse().unwrap();
    let now_ms = redriven_by
        .duration_since(SystemTime::UNIX_EPOCH)
        .unwrap()
        .as_millis() as u64;
    assert!(due_ms <= now_ms, "due at once: {due_ms} > {now_ms}");
    let partition: i32 = taken("x-delivery-origin-partition").parse().unwrap();
    assert!((0..3).contains(&partition), "{partition}");
    assert_eq!(
        headers,
        [
            ("tenant".to_owned(), "acme".to_owned()),
            ("trace".to_owned(), "t-1".to_owned()),
            // Its record key, kept as its ordering key (`Consumer::order_by_key`).
            ("x-delivery-key".to_owned(), "u-1".to_owned()),
            ("message-id".to_owned(), "u-1".to_owned()),
            // Its stamp, the offset it was first read at: a redrive is not a newer unit.
            ("x-delivery-stamp".to_owned(), "0".to_owned()),
            // Where it was first read, recorded again if it is dead-lettered again.
            ("x-delivery-origin-topic".to_owned(), topic.clone()),
            ("x-delivery-origin-offset".to_owned(), "0".to_owned()),
        ]
    );
    let mut source_ends = Vec::new();
    for partition in 0..3 {
        source_ends.push(end_of(&topic, partition).await);
    }
    assert_eq!(
        source_ends, source_ends_before,
        "nothing was written to the source topic, which every group reads"
    );

    // Refused again, it comes back to the dead letter counted afresh: one copy of it listed.
    consume_until_dead(&topology, &dead, 5).await;
    let all = dead_letters::all(&dead).await;
    let again: Vec<_> = all.iter().filter(|d| d.id().as_str() == "u-1").collect();
    assert_eq!(again.len(), 1, "{all:?}");
    assert_eq!(again[0].delivery_count().get(), 1);

    let report = dead.redrive(Selection::All).await.unwrap();
    assert_eq!(report.redriven.len(), 5);
    assert_eq!(dead.count().await.unwrap(), 0);
    assert!(dead.list(10, None).await.unwrap().records.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_removed_without_a_removed_topic() {
    let topic = unique_name("kafka-dlq-undeclared");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group")).partitions(1);
    declare(&topology).await;
    let producer = producer();
    send(
        &producer,
        record(
            &topology.dead_letter_topic_name(),
            "d-1",
            "{}",
            OwnedHeaders::new(),
        ),
    )
    .await;
    let dead = KafkaDeadLetters::new(
        &brokers(),
        &topology
            .clone()
            .removed_topic(format!("{topic}.never-declared")),
    );
    assert_eq!(dead.count().await.unwrap(), 1);
    let error = dead.purge(&[UnitId::new("d-1")]).await.unwrap_err();
    assert!(error.to_string().contains("declare"), "{error}");
    let error = dead.redrive(Selection::All).await.unwrap_err();
    assert!(error.to_string().contains("declare"), "{error}");
    assert_eq!(
        end_of(&topology.retry_topic_name(), 0).await,
        0,
        "nothing redriven"
    );
    assert_eq!(dead.count().await.unwrap(), 1);
}
