//! A handler slower than `max.poll.interval.ms`, against a real Kafka-protocol broker (tansu on
//! 127.0.0.1:9092, or `KAFKA_BROKERS`): two members of one group, one unit at a time each. While
//! a member's only handler runs, nothing asks its source for a unit; librdkafka still has to be
//! polled within `max.poll.interval.ms`, or it counts the member as wedged and leaves the group,
//! and the other member is handed the partition and runs the unit a second time (rules 1 and 3:
//! a unit in the middle of its handling is not redelivered because its consumer was busy). Fails,
//! never skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::kafka::client::message::OwnedHeaders;
use delivery::kafka::{KafkaSource, KafkaTopology};
use delivery::{Consumer, HandlerError, State, UnitId, consumer, consumer::Report};
use kafka_support::{brokers, committed, declare, end_of, producer, record, send, unique_name};
use process::wait_for;

const SESSION_TIMEOUT_MS: u64 = 6000;
/// librdkafka requires it to be at least the session timeout.
const MAX_POLL_INTERVAL_MS: u64 = 7000;
/// The slow unit's handler: three times `max.poll.interval.ms`.
const SLOW: Duration = Duration::from_millis(3 * MAX_POLL_INTERVAL_MS);
const PARTITIONS: i32 = 2;

/// A handler's start (`end: false`) or end for unit `id` in member `member`.
type Event = (&'static str, String, bool);

/// What the handlers of both members saw: each start and each end, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Event>>>);

impl Seen {
    fn starts(&self, id: &str) -> Vec<&'static str> {
        let seen = self.0.lock().unwrap();
        seen.iter()
            .filter(|(_, i, end)| i == id && !end)
            .map(|(member, ..)| *member)
            .collect()
    }

    fn ends(&self, id: &str) -> usize {
        let seen = self.0.lock().unwrap();
        seen.iter().filter(|(_, i, end)| i == id && *end).count()
    }

    fn member_of(&self, id: &str) -> Option<&'static str> {
        self.starts(id).first().copied()
    }
}

#[derive(Clone)]
struct Member {
    name: &'static str,
    seen: Seen,
}

/// Records its start, takes [`SLOW`] over a unit whose id starts with `slow`, records its end.
#[consumer]
async fn record_and_maybe_sleep(
    id: UnitId,
    State(member): State<Member>,
) -> Result<(), HandlerError> {
    let id = id.as_str().to_owned();
    member
        .seen
        .0
        .lock()
        .unwrap()
        .push((member.name, id.clone(), false));
    if id.starts_with("slow") {
        tokio::time::sleep(SLOW).await;
    }
    member.seen.0.lock().unwrap().push((member.name, id, true));
    Ok(())
}

fn topology(topic: &str) -> KafkaTopology {
    KafkaTopology::new(topic, format!("{topic}-group"))
        .partitions(PARTITIONS)
        .session_timeout(Duration::from_millis(SESSION_TIMEOUT_MS))
        // Every client is built from these, the attempts reader (a consumer too) included: it
        // refuses a poll interval below its session timeout, so both are set here.
        .client_property("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
        .client_property("max.poll.interval.ms", MAX_POLL_INTERVAL_MS.to_string())
        .commit_interval(Duration::from_millis(100))
}

/// A member of the group, one unit at a time, until `stop` fires.
async fn member(
    name: &'static str,
    topic: &str,
    seen: &Seen,
    stop: tokio::sync::oneshot::Receiver<()>,
) -> tokio::task::JoinHandle<Report> {
    let source = KafkaSource::connect(&brokers(), topology(topic))
        .await
        .unwrap();
    let state = Member {
        name,
        seen: seen.clone(),
    };
    tokio::spawn(
        Consumer::new(source)
            .state(state)
            .concurrency(1)
            .drain_deadline(Duration::from_secs(1))
            .shutdown_on(async {
                let _ = stop.await;
            })
            .run(record_and_maybe_sleep),
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_the_poll_interval_runs_once() {
    // `RUST_LOG=delivery_core=info` shows the members' partitions paused and resumed.
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "warn".into()),
        )
        .try_init();
    let topic = unique_name("kafka-slow-handler");
    declare(&topology(&topic)).await;
    let producer = producer();
    let seen = Seen::default();
    let (stop_a, stopped_a) = tokio::sync::oneshot::channel();
    let (stop_b, stopped_b) = tokio::sync::oneshot::channel();
    let a = member("a", &topic, &seen, stopped_a).await;
    let b = member("b", &topic, &seen, stopped_b).await;

    // Both members in the group, one partition each: a unit on each partition per round, until
    // one round's two units were handled by the two members.
    let mut round = 0;
    wait_for(
        "both members hold a partition",
        Duration::from_secs(90),
        async || {
            round += 1;
            let ids = [format!("warm-{round}-0"), format!("warm-{round}-1")];
            for (partition, id) in ids.iter().enumerate() {
                let unit = record(&topic, id, id.as_str(), OwnedHeaders::new());
                send(&producer, unit.partition(partition as i32)).await;
            }
            let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
            while ids.iter().any(|id| seen.ends(id) == 0) && tokio::time::Instant::now() < deadline
            {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            let members: Vec<_> = ids.iter().map(|id| seen.member_of(id)).collect();
            members[0].is_some() && members[1].is_some() && members[0] != members[1]
        },
    )
    .await;

    // The slow unit on partition 0; units on partition 1 while it runs, and one after it on
    // partition 0.
    let mut ids = vec!["slow".to_owned()];
    send(
        &producer,
        record(&topic, "slow", "slow", OwnedHeaders::new()).partition(0),
    )
    .await;
    wait_for(
        "the slow unit started",
        Duration::from_secs(30),
        async || !seen.starts("slow").is_empty(),
    )
    .await;
    let owner = seen.member_of("slow").unwrap();
    send(
        &producer,
        record(&topic, "after-slow", "after-slow", OwnedHeaders::new()).partition(0),
    )
    .await;
    ids.push("after-slow".into());
    for n in 0..5 {
        let id = format!("fast-{n}");
        send(
            &producer,
            record(&topic, &id, id.as_str(), OwnedHeaders::new()).partition(1),
        )
        .await;
        ids.push(id);
    }
    let group = format!("{topic}-group");
    let mut ends = Vec::new();
    for partition in 0..PARTITIONS {
        ends.push(Some(end_of(&topic, partition).await));
    }
    // A second run of the slow unit, if any, starts while the first runs: the other member is
    // handed its partition once the owner left the group.
    wait_for(
        "every unit handled and committed, or a unit run twice",
        SLOW * 4,
        async || {
            let done = ids.iter().all(|id| seen.ends(id) >= 1)
                && committed(&topic, &group, 0..PARTITIONS).await == ends;
            done || ids.iter().any(|id| seen.starts(id).len() > 1)
        },
    )
    .await;
    let _ = stop_a.send(());
    let _ = stop_b.send(());
    let (a, b) = (a.await.unwrap(), b.await.unwrap());

    for id in &ids {
        assert_eq!(
            seen.starts(id).len(),
            1,
            "{id} handled once: started by {:?} (the slow unit first by {owner})",
            seen.starts(id)
        );
        assert_eq!(seen.ends(id), 1, "{id} finished once");
    }
    let handled = {
        let seen = seen.0.lock().unwrap();
        let mut by_id: BTreeMap<&str, u32> = BTreeMap::new();
        for (_, id, end) in seen.iter() {
            if *end {
                *by_id.entry(id.as_str()).or_default() += 1;
            }
        }
        by_id.values().sum::<u32>() as u64
    };
    assert_eq!(
        a.acked + b.acked,
        handled,
        "each handled unit acked once: {a:?} {b:?}"
    );
    assert_eq!(
        (a.returned, b.returned, a.dead_lettered, b.dead_lettered),
        (0, 0, 0, 0),
        "nothing returned or dead-lettered: {a:?} {b:?}"
    );
    eprintln!("slow unit run once by {owner}; reports {a:?} {b:?}");
}
