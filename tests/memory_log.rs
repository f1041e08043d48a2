//! The in-memory broker's offset-log mode: the conformance suite, the commit watermark held by a
//! failed unit, a restart from the committed offset, and a consumer group splitting partitions.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::memory::{LogConfig, LogPosition, MemoryBroker, MemoryDeadLetters, MemoryLogSource};
use delivery::testing::conformance::{self, Fixture};
use delivery::{
    Consumer, DeliveryCount, HandlerError, Json, State, Unit, UnitId, consumer,
    disposition::Backoff, disposition::ReasonKind,
};
use serde::Deserialize;
use tokio::sync::Notify;

/// The conformance suite's mechanism: a log with one partition, read by one group.
struct MemoryLog(MemoryBroker);

impl Fixture for MemoryLog {
    type Source = MemoryLogSource;
    type DeadLetters = MemoryDeadLetters;

    async fn declare(&self, name: &str, max_deliveries: u32) {
        self.0
            .declare_log(name, LogConfig::default().max_deliveries(max_deliveries))
            .unwrap();
    }

    async fn publish(&self, name: &str, unit: Unit) {
        self.0.append(name, unit);
    }

    async fn consume(&self, name: &str) -> MemoryLogSource {
        self.0.consume_log(name, "conformance")
    }

    async fn dead_letter(&self, name: &str) -> MemoryDeadLetters {
        self.0.dead_letters(name)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_offset_log_passes_the_conformance_suite() {
    conformance::run_all(&MemoryLog(MemoryBroker::new())).await;
}

#[derive(Deserialize)]
struct Event {
    key: String,
    value: i64,
}

/// One delivery as the handler saw it: the member, the unit id, the delivery count.
type Delivery = (&'static str, String, u32);

/// The effect store: rows keyed by the event's own key (idempotent, rule 3), and a log of every
/// delivery. `member` tells the consumers of one group apart.
#[derive(Clone, Default)]
struct App {
    member: &'static str,
    rows: Arc<Mutex<HashMap<String, i64>>>,
    deliveries: Arc<Mutex<Vec<Delivery>>>,
    /// Units whose handler waits for `gate` before going on.
    held: Arc<Mutex<HashSet<String>>>,
    gate: Arc<Notify>,
    /// Units that fail on their first delivery.
    fail_first: Arc<Mutex<HashSet<String>>>,
    /// Units refused for good.
    refused: Arc<Mutex<HashSet<String>>>,
}

impl App {
    fn as_member(&self, member: &'static str) -> App {
        App {
            member,
            ..self.clone()
        }
    }
    fn rows(&self) -> HashMap<String, i64> {
        self.rows.lock().unwrap().clone()
    }
    fn deliveries(&self) -> Vec<Delivery> {
        self.deliveries.lock().unwrap().clone()
    }
    fn delivered_to(&self, member: &str) -> Vec<(String, u32)> {
        self.deliveries()
            .into_iter()
            .filter(|(m, _, _)| *m == member)
            .map(|(_, id, count)| (id, count))
            .collect()
    }
}

#[consumer]
async fn apply_event(
    State(app): State<App>,
    Json(event): Json<Event>,
    id: UnitId,
    count: DeliveryCount,
) -> Result<(), HandlerError> {
    app.deliveries
        .lock()
        .unwrap()
        .push((app.member, id.to_string(), count.get()));
    let held = app.held.lock().unwrap().contains(id.as_str());
    if held {
        app.gate.notified().await;
    }
    if app.refused.lock().unwrap().contains(id.as_str()) {
        return Err(HandlerError::reject("the event names no known account"));
    }
    if count.get() == 1 && app.fail_first.lock().unwrap().contains(id.as_str()) {
        return Err(HandlerError::retry("the ledger is unavailable"));
    }
    app.rows.lock().unwrap().insert(event.key, event.value);
    Ok(())
}

fn event(n: usize) -> Unit {
    Unit::new(format!("u-{n}"), format!(r#"{{"key":"k{n}","value":{n}}}"#))
}

/// Appends `n` events keyed by their ids and returns where each landed, by id.
fn append_events(broker: &MemoryBroker, topic: &str, n: usize) -> BTreeMap<String, LogPosition> {
    (0..n)
        .map(|i| (format!("u-{i}"), broker.append(topic, event(i))))
        .collect()
}

/// Lets every task run until all of them wait: time is paused, so the sleep only ends once
/// nothing else can make progress.
async fn settle_down() {
    tokio::time::sleep(Duration::from_millis(100)).await;
}

/// The group `ledger` reading `payments`, four at a time, returned units back after 1 s, until
/// caught up; with a handler timeout if given.
fn ledger(
    broker: &MemoryBroker,
    app: &App,
    handler_timeout: Option<Duration>,
) -> tokio::task::JoinHandle<delivery::consumer::Report> {
    let consumer = Consumer::new(broker.consume_log("payments", "ledger"))
        .state(app.clone())
        .concurrency(4)
        .backoff(
            Backoff::exponential(Duration::from_secs(1), Duration::from_secs(1)).without_jitter(),
        )
        .shutdown_on(broker.caught_up("payments", "ledger"));
    let consumer = match handler_timeout {
        Some(limit) => consumer.handler_timeout(limit),
        None => consumer,
    };
    tokio::spawn(consumer.run(apply_event))
}

/// Rule 1 on an offset: a failed unit holds its partition's committed offset, however many units
/// after it succeeded, until its disposition is final; then the offset jumps past them all.
async fn a_failed_unit_holds_the_committed_offset(refuse: bool) {
    let broker = MemoryBroker::new();
    broker
        .declare_log("payments", LogConfig::default().max_deliveries(3))
        .unwrap();
    let positions = append_events(&broker, "payments", 10);
    assert!(
        positions.values().all(|p| p.partition == 0),
        "one partition"
    );
    let app = App::default();
    app.held.lock().unwrap().insert("u-3".into());
    if refuse {
        app.refused.lock().unwrap().insert("u-3".into());
    } else {
        app.fail_first.lock().unwrap().insert("u-3".into());
    }
    let run = ledger(&broker, &app, None);
    settle_down().await;
    // Offsets 0..=2 and 4..=9 are applied and acknowledged; offset 3's handler is still running.
    assert_eq!(app.rows().len(), 9);
    assert!(!app.rows().contains_key("k3"));
    assert_eq!(
        broker.committed("payments", "ledger", 0),
        Some(3),
        "the unit at offset 3 is not final: nothing is committed past it"
    );

    // Its handler fails (or refuses it): returned to the retry log, or dead-lettered. Either
    // way its offset is final, and the committed offset jumps past the successes after it.
    app.held.lock().unwrap().clear();
    app.gate.notify_waiters();
    tokio::time::sleep(Duration::from_millis(500)).await;
    assert_eq!(broker.committed("payments", "ledger", 0), Some(10));
    assert_eq!(broker.end_offset("payments", 0), Some(10));
    assert!(
        !app.rows().contains_key("k3"),
        "the retry is not due before its backoff"
    );

    let report = run.await.unwrap();
    let dead = broker.dead_letters("payments").list();
    if refuse {
        assert_eq!(
            (
                report.acked,
                report.returned,
                report.dead_lettered,
                report.settle_failed
            ),
            (9, 0, 1, 0)
        );
        assert_eq!(dead.len(), 1);
        assert_eq!(dead[0].unit.id().as_str(), "u-3");
        assert_eq!(dead[0].unit.payload(), event(3).payload(), "intact");
        assert_eq!(dead[0].reason.unwrap(), ReasonKind::Rejected);
        assert_eq!(dead[0].source, "payments");
    } else {
        assert_eq!(
            (
                report.acked,
                report.returned,
                report.dead_lettered,
                report.settle_failed
            ),
            (10, 1, 0, 0)
        );
        assert!(dead.is_empty());
        assert_eq!(app.rows()["k3"], 3);
        let runs: Vec<u32> = app
            .delivered_to("")
            .into_iter()
            .filter(|(id, _)| id == "u-3")
            .map(|(_, count)| count)
            .collect();
        assert_eq!(runs, [1, 2], "the retry carries the count");
    }
}

#[tokio::test(start_paused = true)]
async fn a_returned_unit_holds_the_committed_offset_until_it_is_in_the_retry_log() {
    a_failed_unit_holds_the_committed_offset(false).await;
}

#[tokio::test(start_paused = true)]
async fn a_refused_unit_holds_the_committed_offset_until_it_is_dead_lettered() {
    a_failed_unit_holds_the_committed_offset(true).await;
}

/// `Consumer::handler_timeout`: a handler that hangs holds its partition's committed offset only
/// until its timeout; then its unit is returned (to the retry log, final) and the offset jumps
/// past the units after it. The unit is applied on its next delivery.
#[tokio::test(start_paused = true)]
async fn a_hung_handler_holds_the_committed_offset_only_until_its_timeout() {
    let broker = MemoryBroker::new();
    broker
        .declare_log("payments", LogConfig::default().max_deliveries(3))
        .unwrap();
    append_events(&broker, "payments", 10);
    let app = App::default();
    app.held.lock().unwrap().insert("u-3".into()); // its gate is never opened
    let run = ledger(&broker, &app, Some(Duration::from_secs(30)));
    settle_down().await;
    assert_eq!(broker.committed("payments", "ledger", 0), Some(3));
    // Its next delivery goes through; the hung one is still waiting on its gate.
    app.held.lock().unwrap().clear();
    tokio::time::sleep(Duration::from_secs(30)).await;
    assert_eq!(
        broker.committed("payments", "ledger", 0),
        Some(10),
        "past the timeout the unit is returned, final, and holds nothing"
    );
    let report = run.await.unwrap();
    assert_eq!(
        (report.acked, report.returned, report.dead_lettered),
        (10, 1, 0)
    );
    assert_eq!(app.rows().len(), 10);
    let u3: Vec<u32> = app
        .deliveries()
        .into_iter()
        .filter(|(_, id, _)| id == "u-3")
        .map(|(_, _, count)| count)
        .collect();
    assert_eq!(u3, [1, 2]);
}

#[tokio::test(start_paused = true)]
async fn a_restarted_consumer_resumes_from_the_committed_offset_and_loses_nothing() {
    let broker = MemoryBroker::new();
    broker
        .declare_log("payments", LogConfig::default().partitions(3))
        .unwrap();
    let positions = append_events(&broker, "payments", 30);
    let app = App::default();
    // Four units hang in the first consumer's handler: it is killed with them unsettled.
    for id in ["u-3", "u-10", "u-17", "u-24"] {
        app.held.lock().unwrap().insert(id.into());
    }
    let first = tokio::spawn({
        let (broker, app) = (broker.clone(), app.as_member("first"));
        async move {
            Consumer::new(broker.consume_log("payments", "ledger"))
                .state(app)
                .concurrency(4)
                .run(apply_event)
                .await
        }
    });
    settle_down().await;
    first.abort();
    assert!(first.await.unwrap_err().is_cancelled());
    let committed: Vec<u64> = (0..3)
        .map(|p| broker.committed("payments", "ledger", p).unwrap_or(0))
        .collect();
    let first_seen: HashSet<String> = app
        .delivered_to("first")
        .into_iter()
        .map(|(id, _)| id)
        .collect();
    let applied_by_first = app.rows().len();
    assert!(
        applied_by_first > 0 && applied_by_first < 30,
        "killed mid-way: {applied_by_first} applied"
    );
    for id in ["u-3", "u-10", "u-17", "u-24"] {
        if first_seen.contains(id) {
            let at = positions[id];
            assert!(
                committed[at.partition as usize] <= at.offset,
                "{id} at {at} was never settled, yet the group committed {committed:?}"
            );
        }
    }

    // The second consumer — a new process — finds every unit not final again.
    app.held.lock().unwrap().clear();
    Consumer::new(broker.consume_log("payments", "ledger"))
        .state(app.as_member("second"))
        .concurrency(4)
        .shutdown_on(broker.caught_up("payments", "ledger"))
        .run(apply_event)
        .await;
    let expected: HashMap<String, i64> = (0..30).map(|n| (format!("k{n}"), n as i64)).collect();
    assert_eq!(app.rows(), expected, "every unit applied, none lost");
    let second: Vec<(String, u32)> = app.delivered_to("second");
    let second_ids: HashSet<String> = second.iter().map(|(id, _)| id.clone()).collect();
    for (id, at) in &positions {
        let after_commit = at.offset >= committed[at.partition as usize];
        assert_eq!(
            second_ids.contains(id),
            after_commit,
            "{id} at {at}, committed {committed:?}: delivered again exactly when past the committed offset"
        );
    }
    for (id, count) in &second {
        let expected = if first_seen.contains(id) { 2 } else { 1 };
        assert_eq!(
            *count, expected,
            "{id}: a delivery to the killed consumer counts"
        );
    }
    for p in 0..3 {
        assert_eq!(
            broker.committed("payments", "ledger", p),
            broker.end_offset("payments", p).filter(|&end| end > 0)
        );
    }
}

#[tokio::test(start_paused = true)]
async fn members_of_a_group_split_partitions_and_take_over_a_dropped_members_partitions() {
    let broker = MemoryBroker::new();
    broker
        .declare_log("payments", LogConfig::default().partitions(4))
        .unwrap();
    let positions = append_events(&broker, "payments", 40);
    let partition_of = |id: &str| positions[id].partition;
    for p in 0..4 {
        assert!(
            broker.end_offset("payments", p).unwrap() >= 3,
            "partition {p} holds a few units"
        );
    }
    let a = broker.consume_log("payments", "ledger");
    let b = broker.consume_log("payments", "ledger");
    assert_eq!(a.assignment(), [0, 2]);
    assert_eq!(b.assignment(), [1, 3]);

    // Member a hangs on the third unit of partition 0; everything else it reads is applied.
    let stuck = positions
        .iter()
        .find(|(_, at)| {
            **at == LogPosition {
                partition: 0,
                offset: 2,
            }
        })
        .map(|(id, _)| id.clone())
        .unwrap();
    let app = App::default();
    app.held.lock().unwrap().insert(stuck.clone());
    let member_a = tokio::spawn({
        let app = app.as_member("a");
        async move {
            Consumer::new(a)
                .state(app)
                .concurrency(2)
                .run(apply_event)
                .await
        }
    });
    let member_b = tokio::spawn({
        let (broker, app) = (broker.clone(), app.as_member("b"));
        async move {
            Consumer::new(b)
                .state(app)
                .concurrency(2)
                .shutdown_on(broker.caught_up("payments", "ledger"))
                .run(apply_event)
                .await
        }
    });
    settle_down().await;
    for (id, _) in app.delivered_to("a") {
        assert!([0, 2].contains(&partition_of(&id)), "a read {id}");
    }
    for (id, _) in app.delivered_to("b") {
        assert!([1, 3].contains(&partition_of(&id)), "b read {id}");
    }
    assert_eq!(
        broker.committed("payments", "ledger", 0),
        Some(2),
        "held by {stuck}"
    );
    let committed_2 = broker.committed("payments", "ledger", 2);
    assert_eq!(committed_2, broker.end_offset("payments", 2));
    for p in [1, 3] {
        assert_eq!(
            broker.committed("payments", "ledger", p),
            broker.end_offset("payments", p)
        );
    }
    let before_drop = app.delivered_to("b").len();

    // Member a goes away with its unit unsettled: b takes partitions 0 and 2 from the committed
    // offsets and reads exactly what was not final.
    app.held.lock().unwrap().clear();
    member_a.abort();
    assert!(member_a.await.unwrap_err().is_cancelled());
    member_b.await.unwrap();
    let expected: HashMap<String, i64> = (0..40).map(|n| (format!("k{n}"), n as i64)).collect();
    assert_eq!(app.rows(), expected, "every unit applied");
    let taken_over: Vec<(String, u32)> = app.delivered_to("b")[before_drop..].to_vec();
    let mut resumed: Vec<LogPosition> = taken_over.iter().map(|(id, _)| positions[id]).collect();
    resumed.sort();
    let end_0 = broker.end_offset("payments", 0).unwrap();
    let expected: Vec<LogPosition> = (2..end_0)
        .map(|offset| LogPosition {
            partition: 0,
            offset,
        })
        .collect();
    assert_eq!(
        resumed, expected,
        "b resumed partition 0 at the committed offset and partition 2 had nothing left"
    );
    let stuck_count = taken_over
        .iter()
        .find(|(id, _)| *id == stuck)
        .map(|(_, count)| *count);
    assert_eq!(stuck_count, Some(2), "its delivery to a counts");
}

#[tokio::test(start_paused = true)]
async fn a_redrive_appends_the_unit_back_to_the_log_under_the_same_id_and_key() {
    let broker = MemoryBroker::new();
    broker
        .declare_log("payments", LogConfig::default().partitions(4))
        .unwrap();
    let at = broker.append_keyed(
        "payments",
        "account-7",
        event(1).with_headers(delivery::Headers::from_pairs([("tenant", "acme")])),
    );
    let app = App::default();
    app.refused.lock().unwrap().insert("u-1".into());
    let report = Consumer::new(broker.consume_log("payments", "ledger"))
        .state(app.clone())
        .shutdown_on(broker.caught_up("payments", "ledger"))
        .run(apply_event)
        .await;
    assert_eq!(report.dead_lettered, 1);
    let dead = broker.dead_letters("payments");
    let letter = dead.peek("u-1").unwrap();
    assert_eq!(letter.unit.headers().get_str("tenant"), Some("acme"));
    assert_eq!(letter.delivery_count().get(), 1);

    // The operator fixes the account and redrives: appended to the same partition (the key's),
    // under the same id, with a fresh count.
    app.refused.lock().unwrap().clear();
    assert_eq!(dead.redrive(&UnitId::new("u-1")), 1);
    assert!(dead.is_empty());
    assert_eq!(
        broker.end_offset("payments", at.partition),
        Some(at.offset + 2)
    );
    Consumer::new(broker.consume_log("payments", "ledger"))
        .state(app.clone())
        .shutdown_on(broker.caught_up("payments", "ledger"))
        .run(apply_event)
        .await;
    assert_eq!(app.rows()["k1"], 1);
    assert_eq!(
        app.delivered_to(""),
        [("u-1".to_string(), 1), ("u-1".to_string(), 1)]
    );
}

#[tokio::test(start_paused = true)]
async fn a_unit_failing_every_delivery_is_dead_lettered_at_the_logs_bound() {
    let broker = MemoryBroker::new();
    broker
        .declare_log("payments", LogConfig::default().max_deliveries(3))
        .unwrap();
    broker.append("payments", event(1));
    let app = App::default();
    // Held forever: every consumer that receives it is killed before settling it.
    app.held.lock().unwrap().insert("u-1".into());
    for _ in 0..3 {
        let run = tokio::spawn({
            let (broker, app) = (broker.clone(), app.clone());
            async move {
                Consumer::new(broker.consume_log("payments", "ledger"))
                    .state(app)
                    .run(apply_event)
                    .await
            }
        });
        settle_down().await;
        run.abort();
        let _ = run.await;
    }
    let counts: Vec<u32> = app.delivered_to("").into_iter().map(|(_, c)| c).collect();
    assert_eq!(counts, [1, 2, 3], "a crash loop counts its deliveries");
    assert_eq!(broker.committed("payments", "ledger", 0), None);

    // The next delivery is past the bound: the runtime dead-letters the unit before any handler
    // runs.
    app.held.lock().unwrap().clear();
    Consumer::new(broker.consume_log("payments", "ledger"))
        .state(app.clone())
        .shutdown_on(broker.caught_up("payments", "ledger"))
        .run(apply_event)
        .await;
    assert_eq!(
        app.delivered_to("").len(),
        3,
        "never delivered past the bound"
    );
    let letter = broker.dead_letters("payments").peek("u-1").unwrap();
    assert_eq!(letter.reason.unwrap(), ReasonKind::Exhausted);
    assert_eq!(
        letter.delivery_count().get(),
        4,
        "recorded on the delivery past the bound, which no handler saw"
    );
    assert_eq!(letter.unit.payload(), event(1).payload(), "intact");
    assert_eq!(broker.committed("payments", "ledger", 0), Some(1));
}
