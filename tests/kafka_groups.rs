//! Two consumer groups reading one topic, against a real Kafka-protocol broker (tansu on
//! 127.0.0.1:9092, or `KAFKA_BROKERS`): a unit that keeps failing in group A is retried through A's
//! retry topic and dead-lettered in A's dead letter only; group B applies it once, and its retry
//! topic and dead letter stay empty; a redrive from A's dead letter reaches A alone. Fails, never
//! skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;
#[path = "support/two_groups.rs"]
mod two_groups;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::kafka::client::message::OwnedHeaders;
use delivery::kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
use delivery::{Consumer, HandlerError, State, UnitId, consumer, disposition::ReasonKind};
use kafka_support::{brokers, declare, end_of, producer, record, send, unique_name};

#[derive(Clone, Default)]
struct Applied(Arc<Mutex<BTreeMap<String, u32>>>);

impl Applied {
    fn of(&self, id: &str) -> u32 {
        self.0.lock().unwrap().get(id).copied().unwrap_or(0)
    }
}

/// Group A: `bad` fails every time (a transient failure, so it is retried until the bound).
#[consumer]
async fn fails_bad(id: UnitId, State(applied): State<Applied>) -> Result<(), HandlerError> {
    if id.as_str() == "bad" {
        return Err(HandlerError::retry(std::io::Error::other("group A cannot")));
    }
    *applied.0.lock().unwrap().entry(id.to_string()).or_default() += 1;
    Ok(())
}

/// Group B: applies everything.
#[consumer]
async fn applies(id: UnitId, State(applied): State<Applied>) -> Result<(), HandlerError> {
    *applied.0.lock().unwrap().entry(id.to_string()).or_default() += 1;
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_in_one_group_is_that_groups_alone() {
    let topic = unique_name("kafka-groups");
    let topology = |group: &str| {
        KafkaTopology::new(&topic, format!("{topic}-{group}"))
            .partitions(1)
            .max_deliveries(2)
            .commit_interval(Duration::from_millis(100))
    };
    let (a, b) = (topology("a"), topology("b"));
    declare(&a).await;
    declare(&b).await;
    let producer = producer();
    for id in ["ok-1", "bad", "ok-2"] {
        send(&producer, record(&topic, id, id, OwnedHeaders::new())).await;
    }

    let (applied_a, applied_b) = (Applied::default(), Applied::default());
    let (dead_a, dead_b) = (
        KafkaDeadLetters::new(&brokers(), &a),
        KafkaDeadLetters::new(&brokers(), &b),
    );
    let run = |topology: &KafkaTopology, applied: &Applied, fails: bool| {
        let (topology, applied) = (topology.clone(), applied.clone());
        let (dead_a, applied_a, applied_b) = (dead_a.clone(), applied_a.clone(), applied_b.clone());
        let done = async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            loop {
                let a_done = dead_a.count().await.unwrap() >= 1 && applied_a.of("ok-2") >= 1;
                let b_done = ["ok-1", "bad", "ok-2"]
                    .iter()
                    .all(|id| applied_b.of(id) >= 1);
                if a_done && b_done {
                    return;
                }
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "not settled within 60 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        };
        async move {
            let source = KafkaSource::connect(&brokers(), topology).await.unwrap();
            let consumer = Consumer::new(source).state(applied).shutdown_on(done);
            if fails {
                consumer.run(fails_bad).await;
            } else {
                consumer.run(applies).await;
            }
        }
    };
    tokio::join!(run(&a, &applied_a, true), run(&b, &applied_b, false));

    let letters = dead_a.list(10, None).await.unwrap().records;
    assert_eq!(letters.len(), 1, "group A dead-lettered `bad` once");
    assert_eq!(letters[0].id().as_str(), "bad");
    assert_eq!(letters[0].reason, Some(ReasonKind::Exhausted));
    assert_eq!(
        dead_b.count().await.unwrap(),
        0,
        "group B dead-lettered nothing"
    );
    assert!(
        end_of(&a.retry_topic_name(), 0).await >= 1,
        "group A retried `bad` through its own retry topic"
    );
    assert_eq!(
        end_of(&b.retry_topic_name(), 0).await,
        0,
        "group B's retry topic holds nothing"
    );
    for id in ["ok-1", "bad", "ok-2"] {
        assert_eq!(applied_b.of(id), 1, "group B applied {id} once");
    }
    assert_eq!(applied_a.of("bad"), 0);
    assert_ne!(a.retry_topic_name(), b.retry_topic_name());
    assert_ne!(a.dead_letter_topic_name(), b.dead_letter_topic_name());
}

/// A redrive from group A's dead letter reaches group A alone: group B, which applied the unit
/// when it was first published, does not run it again ("per group", `kafka/mod.rs`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_reaches_only_the_group_that_dead_lettered_it() {
    let topic = unique_name("kafka-redrive-groups");
    let topology = |group: &str| {
        KafkaTopology::new(&topic, format!("{topic}-{group}"))
            .partitions(1)
            .commit_interval(Duration::from_millis(100))
    };
    let (a, b) = (topology("a"), topology("b"));
    declare(&a).await;
    declare(&b).await;
    let producer = producer();
    two_groups::a_redrive_reaches_only_its_group(
        KafkaSource::connect(&brokers(), a.clone()).await.unwrap(),
        KafkaSource::connect(&brokers(), b).await.unwrap(),
        &KafkaDeadLetters::new(&brokers(), &a),
        async |id: &str| send(&producer, record(&topic, id, id, OwnedHeaders::new())).await,
    )
    .await;
}
