//! The commit watermark against a real Kafka-protocol broker (tansu on 127.0.0.1:9092, or
//! `KAFKA_BROKERS`): a failed unit at offset k holds the group's committed offset at k while the
//! units after it succeed, and once it is moved to the retry topic the offset jumps past them
//! (rule 1: no offset is committed past a unit whose disposition is not final). Fails, never
//! skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/kafka.rs"]
mod kafka_support;

use std::sync::Arc;
use std::sync::Mutex;
use std::time::Duration;

use delivery::kafka::{KafkaSource, KafkaTopology};
use delivery::{Consumer, DeliveryCount, HandlerError, Json, State, consumer};
use kafka_support::{brokers, committed_at, declare, end_of, produce, produce_to, unique_name};
use serde::Deserialize;

#[derive(Deserialize)]
struct Step {
    n: u32,
}

#[derive(Clone, Default)]
struct Log {
    /// Every run: the unit's number and its delivery count.
    runs: Arc<Mutex<Vec<(u32, u32)>>>,
    /// Released once the test has seen the committed offset held.
    release: Arc<tokio::sync::Notify>,
}

/// Unit 3 waits for the test's word on its first delivery, then fails; everything else succeeds.
#[consumer]
async fn handle(
    Json(step): Json<Step>,
    count: DeliveryCount,
    State(log): State<Log>,
) -> Result<(), HandlerError> {
    log.runs.lock().unwrap().push((step.n, count.get()));
    if step.n == 3 && count.get() == 1 {
        log.release.notified().await;
        return Err(HandlerError::retry(std::io::Error::other(
            "unit 3 fails its first delivery",
        )));
    }
    Ok(())
}

async fn wait_committed(topic: &str, group: &str, want: i64) -> Option<i64> {
    wait_committed_at(topic, group, 0, want).await
}

/// Until `partition`'s committed offset is `want`, at most 30 s: the offset then.
async fn wait_committed_at(topic: &str, group: &str, partition: i32, want: i64) -> Option<i64> {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    loop {
        let now = committed_at(topic, group, partition).await;
        if now == Some(want) || tokio::time::Instant::now() > deadline {
            return now;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_unit_holds_the_committed_offset_until_it_is_moved_then_it_jumps_past_the_successes()
 {
    let topic = unique_name("offsets");
    let group = format!("{topic}-group");
    // Partition 0 holds the units; partition 1 a sentinel, whose commit shows a commit happened.
    let topology = KafkaTopology::new(&topic, &group)
        .partitions(2)
        .commit_interval(Duration::from_millis(100));
    declare(&topology).await;
    // One at a time, so offset n is unit n.
    produce_to(&topic, 0, "u", 10, |n| format!(r#"{{"n":{n}}}"#)).await;

    let log = Log::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let consumer = tokio::spawn({
        let (log, stop) = (log.clone(), stop.clone());
        let source = KafkaSource::connect(&brokers(), topology.clone())
            .await
            .unwrap();
        async move {
            Consumer::new(source)
                .state(log)
                .concurrency(8)
                .backoff(delivery::disposition::Backoff::exponential(
                    Duration::from_millis(200),
                    Duration::from_millis(200),
                ))
                .shutdown_on(async move { stop.notified().await })
                .run(handle)
                .await
        }
    });

    // Units 0..=2 and 4..=9 succeed; unit 3 is still running. The committed offset is 3.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while log.runs.lock().unwrap().len() < 10 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every unit was delivered: {:?}",
            log.runs.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(wait_committed(&topic, &group, 3).await, Some(3));
    // Units 4..=9 are final now. A sentinel on partition 1, published only now, is committed by
    // a batch made after them, which holds every partition that advanced: once it is committed,
    // partition 0 has had its chance to move, and has not moved past the unit that is not final.
    produce_to(&topic, 1, "sentinel", 1, |_| r#"{"n":100}"#.to_owned()).await;
    assert_eq!(wait_committed_at(&topic, &group, 1, 1).await, Some(1));
    assert_eq!(
        committed_at(&topic, &group, 0).await,
        Some(3),
        "the committed offset passed a unit whose disposition is not final"
    );

    // Unit 3 fails: it is republished to the retry topic, its offset is final, and the
    // committed offset jumps past the successes after it.
    log.release.notify_one();
    assert_eq!(wait_committed(&topic, &group, 10).await, Some(10));
    // It comes back from the retry topic, counted, and succeeds.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while !log.runs.lock().unwrap().contains(&(3, 2)) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "unit 3 never came back from the retry topic: {:?}",
            log.runs.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    stop.notify_one();
    let report = consumer.await.unwrap();
    assert_eq!(report.acked, 11, "{report:?}");
    assert_eq!(report.returned, 1, "{report:?}");
    let mut runs = log.runs.lock().unwrap().clone();
    runs.sort();
    let mut expected: Vec<(u32, u32)> = (0..10).map(|n| (n, 1)).collect();
    expected.push((3, 2));
    expected.push((100, 1));
    expected.sort();
    assert_eq!(
        runs, expected,
        "each unit once, unit 3 twice (and the sentinel once)"
    );
}

/// What one consumer of the rebalance test ran: unit ids, each time its handler finished.
#[derive(Clone)]
struct Member {
    /// Units handed to the handler.
    seen: Arc<Mutex<Vec<String>>>,
    /// Units whose handler finished.
    ran: Arc<Mutex<Vec<String>>>,
    /// While closed, the handler holds every unit (in flight across the rebalance).
    gate: Arc<tokio::sync::Semaphore>,
}

impl Member {
    /// A member whose gate is closed: it holds every unit it is handed.
    fn holding() -> Member {
        Member {
            seen: Arc::default(),
            ran: Arc::default(),
            gate: Arc::new(tokio::sync::Semaphore::new(0)),
        }
    }
}

#[consumer]
async fn hold(id: delivery::UnitId, State(member): State<Member>) -> Result<(), HandlerError> {
    member.seen.lock().unwrap().push(id.to_string());
    let _open = member.gate.acquire().await;
    member.ran.lock().unwrap().push(id.to_string());
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_in_flight_on_a_revoked_partition_are_not_committed_and_the_new_owner_gets_them() {
    let topic = unique_name("rebalance");
    let group = format!("{topic}-group");
    let topology = KafkaTopology::new(&topic, &group)
        .partitions(2)
        .session_timeout(Duration::from_secs(6))
        .commit_interval(Duration::from_millis(100));
    declare(&topology).await;
    produce(&topic, "r", 20, |_| "{}".to_owned()).await;

    let run = |member: Member, stop: Arc<tokio::sync::Notify>| {
        let topology = topology.clone();
        tokio::spawn(async move {
            let source = KafkaSource::connect(&brokers(), topology).await.unwrap();
            Consumer::new(source)
                .state(member)
                .concurrency(64)
                .drain_deadline(Duration::from_secs(10))
                .shutdown_on(async move { stop.notified().await })
                .run(hold)
                .await
        })
    };
    // A takes every unit and holds them all.
    let a = Member::holding();
    let stop_a = Arc::new(tokio::sync::Notify::new());
    let consumer_a = run(a.clone(), stop_a.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while a.seen.lock().unwrap().len() < 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A was not handed every unit: {:?}",
            a.seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(a.ran.lock().unwrap().is_empty());

    // B joins: the group takes partitions from A while A's units are in flight.
    let b = Member::holding();
    let stop_b = Arc::new(tokio::sync::Notify::new());
    let consumer_b = run(b.clone(), stop_b.clone());
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while b.seen.lock().unwrap().is_empty() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "B never received a unit: the rebalance did not happen"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A's held units finish now, after the rebalance: the handler applied them, but their
    // offsets belong to an assignment A no longer has. A then reads its new partition again
    // and finishes it; B still holds its own. (Both partitions were revoked with units running,
    // so no run ended cleanly: each new owner reads its partition one unit at a time for a while,
    // as after a crash, and B holds the first it is handed.)
    a.gate.add_permits(1000);
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while a.ran.lock().unwrap().len() <= 20 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A did not finish its units: ran {:?}, B holds {:?}",
            a.ran.lock().unwrap(),
            b.seen.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    // A's partition is committed to its end once a commit follows A's last unit. Then a sentinel
    // published to it now is committed by a batch made after every stale unit A finished: by then
    // A has had its chance to commit B's partition.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    let a_partition = loop {
        let mut at_end = None;
        for partition in 0..2 {
            if committed_at(&topic, &group, partition).await
                == Some(end_of(&topic, partition).await)
            {
                at_end = Some(partition);
            }
        }
        if let Some(partition) = at_end {
            break partition;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's partition was never committed to its end"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    produce_to(&topic, a_partition, "sentinel", 1, |_| "{}".to_owned()).await;
    let end = end_of(&topic, a_partition).await;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(30);
    while committed_at(&topic, &group, a_partition).await != Some(end) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "A's sentinel was never committed"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let offsets = [
        committed_at(&topic, &group, 0).await,
        committed_at(&topic, &group, 1).await,
    ];
    let ends = [end_of(&topic, 0).await, end_of(&topic, 1).await];
    eprintln!(
        "rebalance: committed {offsets:?}, ends {ends:?}, B holds {}",
        b.seen.lock().unwrap().len()
    );
    assert!(
        offsets.iter().zip(&ends).any(|(o, e)| *o == Some(*e))
            && offsets.iter().zip(&ends).any(|(o, e)| *o != Some(*e)),
        "A's partition is committed to its end, B's is not (its units are held by B, and A's \
         finished runs of them committed nothing): committed {offsets:?}, ends {ends:?}"
    );
    // B reads its partition one unit at a time after the rebalance (no run of it ended
    // cleanly), so it is finished once its partition is committed to its end, not once B ran
    // what it holds now.
    b.gate.add_permits(1000);
    let b_partition = 1 - a_partition;
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while committed_at(&topic, &group, b_partition).await != Some(end_of(&topic, b_partition).await)
    {
        assert!(
            tokio::time::Instant::now() < deadline,
            "B did not finish its partition: ran {:?}",
            b.ran.lock().unwrap()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    stop_a.notify_one();
    stop_b.notify_one();
    consumer_a.await.unwrap();
    consumer_b.await.unwrap();

    // Every unit B ran had been held by A across the rebalance and finished by A after it.
    let ran_a = a.ran.lock().unwrap().clone();
    let ran_b = b.ran.lock().unwrap().clone();
    let again: Vec<&String> = ran_b.iter().filter(|id| ran_a.contains(id)).collect();
    eprintln!(
        "rebalance: A ran {} units, B ran {} units, {} of them also run by A",
        ran_a.len(),
        ran_b.len(),
        again.len()
    );
    assert!(
        !ran_b.is_empty() && again.len() == ran_b.len(),
        "the new owner received again the units A held across the rebalance"
    );
    // The group's offsets end past every unit of both partitions (the consumers commit what is
    // final as they stop).
    for partition in 0..2 {
        assert_eq!(
            committed_at(&topic, &group, partition).await,
            Some(end_of(&topic, partition).await),
            "partition {partition}: committed to its end"
        );
    }
}
