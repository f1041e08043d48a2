//! Batch handlers (`Consumer::batch`) on the in-memory broker and its log: each unit settled by its
//! own outcome, a failed batch halved down to the unit that fails, a failure that is the effect's
//! given up on without running every half, sizing, per-key order inside and across batches, and
//! the log's commits. (Every transport runs the conformance suite's batch checks against its real
//! server; these are what the runtime decides, the same on each.)

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::disposition::Backoff;
use delivery::memory::{LogConfig, MemoryBroker, QueueConfig};
use delivery::{Batch, BatchOutcome, Consumer, HandlerError, Headers, Json, State, Unit, consumer};
use serde::Deserialize;

#[derive(Deserialize)]
struct Step {
    key: String,
    seq: u32,
    /// Fails every batch it is in (a poison unit).
    #[serde(default)]
    poison: bool,
    /// Fails alone, by name, in a `BatchOutcome`, on its first delivery.
    #[serde(default)]
    fail_once: bool,
    /// Panics the batch.
    #[serde(default)]
    panics: bool,
}

fn step(key: &str, seq: u32) -> String {
    format!(r#"{{"key":"{key}","seq":{seq}}}"#)
}

/// Every run: the (key, seq, delivery count) of each of its units, in order; and what was applied.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Book>>);

#[derive(Default)]
struct Book {
    runs: Vec<Vec<(String, u32, u32)>>,
    applied: HashMap<String, Vec<u32>>,
    /// Every run fails while set (the database down).
    down: bool,
}

impl Seen {
    fn runs(&self) -> Vec<Vec<(String, u32, u32)>> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .runs
            .clone()
    }
    fn applied(&self, key: &str) -> Vec<u32> {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .applied
            .get(key)
            .cloned()
            .unwrap_or_default()
    }
    fn applied_total(&self) -> usize {
        self.0
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .applied
            .values()
            .map(Vec::len)
            .sum()
    }
}

/// One transaction per batch: everything applied, or nothing.
#[consumer]
async fn apply(
    steps: Batch<Json<Step>>,
    State(seen): State<Seen>,
) -> Result<BatchOutcome, HandlerError> {
    // A panic below poisons the lock: the next run reads through it.
    let mut book = seen.0.lock().unwrap_or_else(|e| e.into_inner());
    let run = steps
        .iter()
        .map(|s| (s.key.clone(), s.seq, s.delivery_count().get()))
        .collect();
    book.runs.push(run);
    if book.down {
        return Err(HandlerError::retry("the database is down"));
    }
    if steps.iter().any(|s| s.panics) {
        panic!("a unit the handler cannot take");
    }
    if steps.iter().any(|s| s.poison) {
        return Err(HandlerError::retry(
            "a constraint failed; the transaction rolled back",
        ));
    }
    let mut outcome = BatchOutcome::applied();
    for s in &steps {
        if s.fail_once && s.delivery_count().get() == 1 {
            outcome.fail(s.id(), HandlerError::retry("not this time"));
            continue;
        }
        book.applied.entry(s.key.clone()).or_default().push(s.seq);
    }
    Ok(outcome)
}

fn consumer_of(broker: &MemoryBroker, queue: &str) -> Consumer<delivery::memory::MemorySource> {
    Consumer::new(broker.consume(queue))
        .backoff(Backoff::exponential(
            Duration::from_millis(5),
            Duration::from_millis(20),
        ))
        .shutdown_on(broker.idle(queue))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_unit_is_found_by_halving_and_its_neighbours_are_applied_once() {
    let broker = MemoryBroker::new();
    broker
        .declare("steps", QueueConfig::default().max_deliveries(3))
        .unwrap();
    for seq in 0..32 {
        let payload = if seq == 21 {
            r#"{"key":"k21","seq":21,"poison":true}"#.to_owned()
        } else {
            step(&format!("k{seq}"), seq)
        };
        broker.publish("steps", Unit::new(format!("u-{seq}"), payload));
    }
    let seen = Seen::default();
    let report = consumer_of(&broker, "steps")
        .state(seen.clone())
        .concurrency(1)
        .batch(32, Duration::from_millis(50))
        .run(apply)
        .await;
    assert_eq!((report.acked, report.dead_lettered), (31, 1), "{report:?}");
    let dead = broker.dead_letters("steps").list();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].unit.id().as_str(), "u-21");
    assert_eq!(dead[0].unit.delivery_count().get(), 3, "on its own count");
    for seq in (0..32).filter(|&s| s != 21) {
        assert_eq!(
            seen.applied(&format!("k{seq}")),
            [seq],
            "k{seq} applied once"
        );
    }
    let runs = seen.runs();
    // The first delivery: the whole batch, then each failed part halved, each half in turn,
    // down to the poison unit (u-21): 0-31 fails, 0-15 ok, 16-31 fails, 16-23 fails, 16-19 ok,
    // 20-23 fails, 20-21 fails, 20 ok, 21 fails (returned), 22-23 ok, 24-31 ok.
    let first: Vec<usize> = runs.iter().take(11).map(Vec::len).collect();
    assert_eq!(first, [32, 16, 16, 8, 4, 4, 2, 1, 1, 2, 8], "{runs:?}");
    assert_eq!(runs[8], [("k21".to_owned(), 21, 1)], "{runs:?}");
    assert!(
        runs.iter()
            .flatten()
            .all(|(key, _, count)| key == "k21" || *count == 1),
        "no neighbour was ever returned: {runs:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_panicking_batch_is_halved_like_a_failed_one() {
    let broker = MemoryBroker::new();
    broker
        .declare("panics", QueueConfig::default().max_deliveries(2))
        .unwrap();
    for seq in 0..8 {
        let payload = if seq == 3 {
            r#"{"key":"k3","seq":3,"panics":true}"#.to_owned()
        } else {
            step(&format!("k{seq}"), seq)
        };
        broker.publish("panics", Unit::new(format!("u-{seq}"), payload));
    }
    let seen = Seen::default();
    let report = consumer_of(&broker, "panics")
        .state(seen.clone())
        .concurrency(1)
        .batch(8, Duration::from_millis(50))
        .run(apply)
        .await;
    assert_eq!((report.acked, report.dead_lettered), (7, 1), "{report:?}");
    let dead = broker.dead_letters("panics").list();
    assert_eq!(dead[0].unit.id().as_str(), "u-3");
    assert!(
        dead[0].detail.contains("panicked"),
        "the panic is the recorded failure: {}",
        dead[0].detail
    );
    assert_eq!(seen.applied_total(), 7);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_outcome_settles_each_unit_by_its_own_and_reruns_no_neighbour() {
    let broker = MemoryBroker::new();
    for seq in 0..10 {
        let payload = if seq % 4 == 1 {
            format!(r#"{{"key":"k{seq}","seq":{seq},"fail_once":true}}"#)
        } else {
            step(&format!("k{seq}"), seq)
        };
        broker.publish("outcomes", Unit::new(format!("u-{seq}"), payload));
    }
    let seen = Seen::default();
    let report = consumer_of(&broker, "outcomes")
        .state(seen.clone())
        .concurrency(1)
        .batch(10, Duration::from_millis(50))
        .run(apply)
        .await;
    // u-1, u-5 and u-9 returned once each, applied on their second delivery.
    assert_eq!((report.acked, report.returned), (10, 3), "{report:?}");
    let runs = seen.runs();
    assert_eq!(runs[0].len(), 10, "one run of the whole batch: {runs:?}");
    let again: Vec<u32> = runs[1..].iter().flatten().map(|(_, seq, _)| *seq).collect();
    let mut again_sorted = again.clone();
    again_sorted.sort_unstable();
    assert_eq!(
        again_sorted,
        [1, 5, 9],
        "only the failed units came back: {runs:?}"
    );
    assert!(runs[1..].iter().flatten().all(|(_, _, count)| *count == 2));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_of_the_effect_itself_returns_the_batch_after_a_few_runs() {
    let broker = MemoryBroker::new();
    broker
        .declare("down", QueueConfig::default().max_deliveries(10))
        .unwrap();
    for seq in 0..64 {
        broker.publish(
            "down",
            Unit::new(format!("u-{seq}"), step(&format!("k{seq}"), seq)),
        );
    }
    let seen = Seen::default();
    seen.0.lock().unwrap().down = true;
    let consumer = consumer_of(&broker, "down")
        .state(seen.clone())
        .concurrency(1)
        .batch(64, Duration::from_millis(50));
    let watcher = {
        let seen = seen.clone();
        tokio::spawn(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(5)).await;
                let mut book = seen.0.lock().unwrap();
                if book
                    .runs
                    .iter()
                    .any(|run| run.iter().any(|(_, _, c)| *c == 2))
                {
                    book.down = false;
                    return;
                }
            }
        })
    };
    let report = consumer.run(apply).await;
    watcher.await.unwrap();
    assert_eq!((report.acked, report.dead_lettered), (64, 0), "{report:?}");
    let runs = seen.runs();
    let first_delivery = runs
        .iter()
        .take_while(|run| run.iter().all(|(_, _, c)| *c == 1))
        .count();
    // 64 units: the whole, then halves down to one unit (7 runs), then its neighbour: 8 runs,
    // not the 127 of every half.
    assert_eq!(
        first_delivery,
        8,
        "{:?}",
        runs.iter().map(Vec::len).collect::<Vec<_>>()
    );
    for seq in 0..64 {
        assert_eq!(seen.applied(&format!("k{seq}")), [seq]);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_hold_at_most_max_size_and_a_partial_one_runs_when_no_unit_waits() {
    let broker = MemoryBroker::new();
    for seq in 0..25 {
        broker.publish(
            "sizes",
            Unit::new(format!("u-{seq}"), step(&format!("k{seq}"), seq)),
        );
    }
    let seen = Seen::default();
    let report = consumer_of(&broker, "sizes")
        .state(seen.clone())
        .concurrency(2)
        .batch(10, Duration::from_millis(30))
        .run(apply)
        .await;
    assert_eq!(report.acked, 25);
    let sizes: Vec<usize> = seen.runs().iter().map(Vec::len).collect();
    assert!(sizes.iter().all(|&n| n <= 10), "{sizes:?}");
    assert_eq!(sizes.iter().sum::<usize>(), 25, "{sizes:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ordered_by_key_a_batch_holds_one_unit_of_a_key_and_keys_keep_their_order() {
    let broker = MemoryBroker::new();
    for seq in 0..60 {
        let key = format!("acct-{}", seq % 3);
        let headers = Headers::from_pairs([(delivery::headers::KEY, key.clone())]);
        broker.publish(
            "ordered",
            Unit::new(format!("u-{seq}"), step(&key, seq)).with_headers(headers),
        );
    }
    let seen = Seen::default();
    let report = consumer_of(&broker, "ordered")
        .state(seen.clone())
        .concurrency(4)
        .order_by_key()
        .batch(10, Duration::from_millis(10))
        .run(apply)
        .await;
    assert_eq!(report.acked, 60);
    for run in seen.runs() {
        let mut keys: Vec<&String> = run.iter().map(|(k, _, _)| k).collect();
        keys.sort_unstable();
        keys.dedup();
        assert_eq!(
            keys.len(),
            run.len(),
            "one unit per key in a batch: {run:?}"
        );
    }
    for k in 0..3 {
        let applied = seen.applied(&format!("acct-{k}"));
        let expected: Vec<u32> = (0..60).filter(|s| s % 3 == k).collect();
        assert_eq!(applied, expected, "acct-{k} in publish order");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn on_a_log_every_offset_is_committed_once_its_batch_settled() {
    let broker = MemoryBroker::new();
    broker
        .declare_log("events", LogConfig::default().partitions(2))
        .unwrap();
    for seq in 0..50u32 {
        let key = format!("k{}", seq % 5);
        broker.append_keyed(
            "events",
            &key,
            Unit::new(format!("e-{seq}"), step(&key, seq)),
        );
    }
    let seen = Seen::default();
    let report = Consumer::new(broker.consume_log("events", "g"))
        .state(seen.clone())
        .order_by_key()
        .shutdown_on(broker.caught_up("events", "g"))
        .batch(16, Duration::from_millis(10))
        .run(apply)
        .await;
    assert_eq!(report.acked, 50);
    for partition in 0..2 {
        assert_eq!(
            broker.committed("events", "g", partition),
            broker.end_offset("events", partition),
            "partition {partition} committed to its end"
        );
    }
}

#[tokio::test(flavor = "current_thread", start_paused = true)]
async fn at_a_low_rate_a_unit_runs_at_once_not_after_max_wait() {
    let broker = MemoryBroker::new();
    let seen = Seen::default();
    let consumer = consumer_of(&broker, "trickle")
        .state(seen.clone())
        .batch(100, Duration::from_secs(3600));
    let start = tokio::time::Instant::now();
    broker.publish("trickle", Unit::new("u-1", step("k1", 1)));
    let report = consumer.run(apply).await;
    assert_eq!(report.acked, 1);
    // The clock is paused: had the unit waited out `max_wait`, an hour would have passed.
    assert!(
        start.elapsed() < Duration::from_secs(3600),
        "ran after {:?}",
        start.elapsed()
    );
    assert_eq!(seen.runs().len(), 1);
}
