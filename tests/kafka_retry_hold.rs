//! The Kafka source holds at most `max_waiting` returned units in memory, against a real
//! Kafka-protocol broker (tansu on 127.0.0.1:9092, or `KAFKA_BROKERS`): in a storm of failures
//! with a long backoff it pauses its retry-topic partitions at the limit, so the rest wait in the
//! broker, and resumes them once it has handed out half. Nothing is lost or run twice on the
//! way, the group's offsets end past every unit of both topics, and a rebalance leaves no retry
//! partition paused. Fails, never skips, when the broker is unreachable.
//!
//! In a file of their own: these tests install a process-global metrics recorder (`peaks`).
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;

use std::collections::{BTreeMap, HashMap};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::Duration;

use delivery::disposition::Backoff;
use delivery::kafka::client::ClientConfig;
use delivery::kafka::client::consumer::{BaseConsumer, Consumer as _};
use delivery::kafka::{KafkaSource, KafkaTopology};
use delivery::{Consumer, DeliveryCount, HandlerError, State, UnitId, consumer, consumer::Report};
use kafka_support::{brokers, declare, end_of, produce, unique_name};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use tokio::sync::Notify;
use tokio::task::JoinHandle;

const UNITS: usize = 40;
const PARTITIONS: i32 = 2;
const MAX_WAITING: usize = 5;
/// How far past the limit the held count may go. librdkafka's pause is synchronous
/// (`rd_kafka_pause_partitions` waits until the partition's thread applied it) and bumps the
/// partition's version barrier first, so whatever it had fetched of the partition and not handed
/// out is dropped when polled and fetched again on resume, from after the last message handed out
/// (librdkafka 2.12.1: `rd_kafka_toppar_op_pause_resume`, `rd_kafka_toppar_pause_resume` in
/// rdkafka_partition.c; `rd_kafka_op_filter` in rdkafka_queue.c). Partitions assigned while the
/// source is paused are paused as they are assigned. So nothing should arrive past the limit;
/// one unit of slack tolerates a straggler (held, never dropped) without hiding a missing pause,
/// which lets every returned unit in.
const SLACK: usize = 1;
/// The consumer's backoff after a unit's first delivery fails: long enough that, without the
/// limit, every returned unit would be read and held at once.
const BACKOFF: Duration = Duration::from_secs(4);

/// Every run of the handler: the unit's id and its delivery count.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<(String, u32)>>>);

/// Fails each unit's first delivery, applies its second.
#[consumer]
async fn apply(
    id: UnitId,
    count: DeliveryCount,
    State(runs): State<Runs>,
) -> Result<(), HandlerError> {
    runs.0.lock().unwrap().push((id.to_string(), count.get()));
    if count.get() == 1 {
        return Err(HandlerError::retry(std::io::Error::other(
            "the database is down",
        )));
    }
    Ok(())
}

/// The highest `delivery_retry_waiting` of each source (topic) seen so far, read every
/// millisecond by one thread from a process-global `DebuggingRecorder`.
///
/// A snapshot swaps every gauge to 0, so one reader serves every test of this file (two would
/// steal each other's values), and a read gives the last value set since the previous read. The
/// source sets the gauge whenever it holds one more or one fewer unit, and a unit is held for
/// seconds, so the highest value read is the most units held (a value overwritten within a
/// millisecond could be missed, which only lowers the peak seen, never raises it).
fn peaks() -> &'static Mutex<HashMap<String, f64>> {
    static PEAKS: OnceLock<&'static Mutex<HashMap<String, f64>>> = OnceLock::new();
    PEAKS.get_or_init(|| {
        let peaks: &'static Mutex<HashMap<String, f64>> = Box::leak(Box::default());
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        recorder
            .install()
            .expect("the only recorder of this test binary");
        std::thread::spawn(move || {
            loop {
                for (key, _, _, value) in snapshotter.snapshot().into_vec() {
                    let (DebugValue::Gauge(held), "delivery_retry_waiting") =
                        (value, key.key().name())
                    else {
                        continue;
                    };
                    for label in key.key().labels().filter(|l| l.key() == "source") {
                        let mut peaks = peaks.lock().unwrap();
                        let peak = peaks.entry(label.value().to_owned()).or_default();
                        *peak = peak.max(held.into_inner());
                    }
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        });
        peaks
    })
}

/// The most units the source of `topic` was seen holding.
fn peak(topic: &str) -> f64 {
    peaks().lock().unwrap().get(topic).copied().unwrap_or(0.0)
}

/// A fresh topic (and its retry and dead-letter topics) of `PARTITIONS` partitions, holding
/// `UNITS` units `u-0`.. published one at a time.
async fn fresh_topic(
    name: &str,
    configure: impl FnOnce(KafkaTopology) -> KafkaTopology,
) -> KafkaTopology {
    let topic = unique_name(name);
    let topology = configure(
        KafkaTopology::new(&topic, format!("{topic}-group"))
            .partitions(PARTITIONS)
            .max_waiting(MAX_WAITING)
            .commit_interval(Duration::from_millis(100)),
    );
    assert_eq!(topology.waiting_limit(), MAX_WAITING);
    declare(&topology).await;
    // One unit per record batch, one at a time: tansu serves nothing for a fetch starting inside
    // a batch, and reports the high watermark right only after unpipelined produces.
    produce(&topic, "u", UNITS, |_| "{}".to_owned()).await;
    topology
}

/// Consumes `topology` with `apply` until `stop` is notified: 16 at once, each failed unit
/// returned with the backoff `BACKOFF`, every run recorded in `runs`.
async fn start(topology: &KafkaTopology, runs: &Runs, stop: &Arc<Notify>) -> JoinHandle<Report> {
    let source = KafkaSource::connect(&brokers(), topology.clone())
        .await
        .unwrap();
    let (runs, stop) = (runs.clone(), stop.clone());
    tokio::spawn(async move {
        Consumer::new(source)
            .state(runs)
            .concurrency(16)
            .backoff(Backoff::exponential(BACKOFF, BACKOFF).without_jitter())
            .shutdown_on(async move { stop.notified().await })
            .run(apply)
            .await
    })
}

/// The group's committed offset of each partition of `topic`, as the broker has it.
async fn committed(topic: &str, group: &str) -> Vec<Option<i64>> {
    kafka_support::committed(topic, group, 0..PARTITIONS).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_holds_at_most_max_waiting_returned_units_and_the_rest_wait_in_the_broker() {
    let topology = fresh_topic("retry-hold", |t| t).await;
    let (topic, group) = (topology.topic.clone(), topology.group.clone());
    peaks(); // recording before the source registers its gauge

    let runs = Runs::default();
    let stop = Arc::new(Notify::new());
    let consumer = start(&topology, &runs, &stop).await;

    let second_runs = || {
        runs.0
            .lock()
            .unwrap()
            .iter()
            .filter(|(_, count)| *count == 2)
            .count()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(120);
    while second_runs() < UNITS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every unit came back from the retry topic: {:?}",
            runs.0.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The group's offsets reach the end of both topics. Each topic got exactly UNITS units, at
    // dense offsets from 0, and a committed offset is never past a partition's end: committed
    // offsets summing to UNITS mean every partition is committed to its end. (The retry topic was
    // written by pipelined produces, whose high watermark tansu under-reports, so it is not read.)
    let retry_topic = topology.retry_topic_name();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let (mut source_committed, mut retry_committed);
    loop {
        source_committed = committed(&topic, &group).await;
        retry_committed = committed(&retry_topic, &group).await;
        let sum = |c: &[Option<i64>]| c.iter().map(|o| o.unwrap_or(0)).sum::<i64>();
        if (sum(&source_committed), sum(&retry_committed)) == (UNITS as i64, UNITS as i64)
            || tokio::time::Instant::now() > deadline
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.notify_one();
    let report = consumer.await.unwrap();
    let peak = peak(&topic);
    eprintln!(
        "retry hold: peak {peak} held (limit {MAX_WAITING}); committed {source_committed:?} of \
         {topic}, {retry_committed:?} of the retry topic; {report:?}"
    );

    // The limit held, and was reached: without the pause every returned unit would be held.
    assert!(
        peak <= (MAX_WAITING + SLACK) as f64,
        "the source held {peak} returned units, past the limit {MAX_WAITING} (+{SLACK})"
    );
    assert!(
        peak >= MAX_WAITING as f64,
        "the source never held {MAX_WAITING} units ({peak} at most): the limit was not exercised"
    );

    // Every unit ran twice: failed once, applied once on its second delivery.
    let mut by_id: BTreeMap<String, Vec<u32>> = BTreeMap::new();
    for (id, count) in runs.0.lock().unwrap().iter() {
        by_id.entry(id.clone()).or_default().push(*count);
    }
    assert_eq!(by_id.len(), UNITS, "{by_id:?}");
    for (id, mut counts) in by_id {
        counts.sort();
        assert_eq!(counts, [1, 2], "unit {id}: one failed run, one applied run");
    }
    assert_eq!(
        (report.acked, report.returned, report.dead_lettered),
        (UNITS as u64, UNITS as u64, 0),
        "{report:?}"
    );
    let ends: Vec<Option<i64>> = {
        let mut ends = Vec::new();
        for partition in 0..PARTITIONS {
            ends.push(Some(end_of(&topic, partition).await));
        }
        ends
    };
    assert_eq!(source_committed, ends, "{topic}: committed to its end");
    assert_eq!(
        retry_committed.iter().map(|o| o.unwrap_or(0)).sum::<i64>(),
        UNITS as i64,
        "the retry topic committed to its end: {retry_committed:?}"
    );
}

/// A retry partition taken away while the source held it paused, and given back once the source
/// has resumed, is fetched again: librdkafka keeps an application's pause on a partition across
/// its revocation and a later assignment, so the source resumes the retry partitions it is
/// assigned unless it holds the retry topic back.
///
/// A holds the limit with both retry partitions paused; B (a bare member of the group that reads
/// and commits nothing) joins, so A keeps one retry partition and lets the other go while paused;
/// A drains what it holds and resumes; B leaves, and A gets the other retry partition back. Every
/// unit is then applied and the group's offsets reach the end of both topics.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_partition_given_back_after_a_pause_is_fetched_again() {
    let topology = fresh_topic("retry-hold-rebalance", |t| {
        t.session_timeout(Duration::from_secs(6))
    })
    .await;
    let (topic, group) = (topology.topic.clone(), topology.group.clone());
    peaks(); // recording before the source registers its gauge

    let runs = Runs::default();
    let stop = Arc::new(Notify::new());
    let consumer = start(&topology, &runs, &stop).await;
    // A reads every unit, fails it, and holds the limit: both retry partitions paused. (Each unit
    // has failed once by then; the limit is reached within a second, far before BACKOFF.)
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while runs.0.lock().unwrap().len() < UNITS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A did not run every unit"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Until A holds the limit (its retry partitions paused), with a deadline.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while peak(&topic) < MAX_WAITING as f64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A never held {MAX_WAITING} returned units: peak {}",
            peak(&topic)
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // B joins, holds its share of the partitions until A has drained what it held and resumed
    // (its units are due after BACKOFF), then leaves.
    let member = tokio::task::spawn_blocking({
        let (topic, group, retry_topic) =
            (topic.clone(), group.clone(), topology.retry_topic_name());
        move || {
            let b: BaseConsumer = ClientConfig::new()
                .set("bootstrap.servers", brokers())
                .set("group.id", &group)
                .set("auto.offset.reset", "earliest")
                .set("enable.auto.commit", "false")
                .set("session.timeout.ms", "6000")
                .set("heartbeat.interval.ms", "1000")
                .create()
                .unwrap();
            b.subscribe(&[&topic, &retry_topic]).unwrap();
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            let mut assigned = Vec::new();
            while assigned.is_empty() {
                assert!(
                    std::time::Instant::now() < deadline,
                    "B was never assigned a partition"
                );
                let _ = b.poll(Duration::from_millis(100));
                assigned = b
                    .assignment()
                    .unwrap()
                    .elements_for_topic(&retry_topic)
                    .iter()
                    .map(|e| e.partition())
                    .collect();
            }
            let until = std::time::Instant::now() + BACKOFF * 2;
            while std::time::Instant::now() < until {
                let _ = b.poll(Duration::from_millis(100));
            }
            b.unsubscribe();
            assigned
        }
    });
    let b_retry = member.await.unwrap();
    assert!(!b_retry.is_empty(), "B held no retry partition");

    let applied = || {
        let runs = runs.0.lock().unwrap();
        let mut ids: Vec<&String> = runs
            .iter()
            .filter(|(_, count)| *count >= 2)
            .map(|(id, _)| id)
            .collect();
        ids.sort();
        ids.dedup();
        ids.len()
    };
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while applied() < UNITS {
        assert!(
            tokio::time::Instant::now() < deadline,
            "units of retry partition(s) {b_retry:?}, given back to A, never came: {} of {UNITS} \
             applied",
            applied()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // Until the periodic commit has passed every unit of the topic, with a deadline.
    let sum = |c: &[Option<i64>]| c.iter().map(|o| o.unwrap_or(0)).sum::<i64>();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while sum(&committed(&topic, &group).await) < UNITS as i64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the topic's offsets were not committed to its end: {:?}",
            committed(&topic, &group).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop.notify_one();
    let report = consumer.await.unwrap();
    let peak = peak(&topic);
    // Each returned unit is one record of the retry topic; A finished them all.
    let retry_topic = topology.retry_topic_name();
    let source_committed = committed(&topic, &group).await;
    let retry_committed = committed(&retry_topic, &group).await;
    eprintln!(
        "retry hold across a rebalance: B held retry partition(s) {b_retry:?}; peak {peak} held; \
         committed {source_committed:?} of {topic}, {retry_committed:?} of the retry topic; \
         {report:?}"
    );
    assert!(
        (MAX_WAITING as f64..=(MAX_WAITING + SLACK) as f64).contains(&peak),
        "A held {peak} returned units at most; the limit is {MAX_WAITING} (+{SLACK})"
    );
    assert_eq!(sum(&source_committed), UNITS as i64, "{source_committed:?}");
    assert_eq!(
        sum(&retry_committed),
        report.returned as i64,
        "{retry_committed:?}, {report:?}"
    );
    assert_eq!(report.dead_lettered, 0, "{report:?}");
}
