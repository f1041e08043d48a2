//! The consumer runtime on the in-memory broker, one test per rule it enforces.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::memory::{MemoryBroker, QueueConfig};
use delivery::{
    Consumer, DeliveryCount, HandlerError, Json, State, Unit, UnitId, consumer, consumer::Report,
    disposition::Backoff, disposition::ReasonKind,
};
use serde::Deserialize;
use tokio::sync::Notify;

#[derive(Deserialize)]
struct Payment {
    payment_id: String,
    amount: i64,
}

/// The effect store of these tests: rows keyed by the unit's own id, plus a log of every call.
#[derive(Clone, Default)]
struct App {
    rows: Arc<Mutex<HashMap<String, i64>>>,
    calls: Arc<Mutex<Vec<(String, u32)>>>,
    /// Units that fail until their delivery count reaches the value here.
    fail_until: Arc<Mutex<HashMap<String, u32>>>,
    panic_once: Arc<Mutex<Vec<String>>>,
    /// Units whose first delivery hangs forever.
    hang_once: Arc<Mutex<Vec<String>>>,
    gate: Arc<Gate>,
}

#[derive(Default)]
struct Gate {
    closed: std::sync::atomic::AtomicBool,
    open: Notify,
    entered: Notify,
}

impl App {
    fn rows(&self) -> HashMap<String, i64> {
        self.rows.lock().unwrap().clone()
    }
    fn calls(&self) -> Vec<(String, u32)> {
        self.calls.lock().unwrap().clone()
    }
}

#[derive(Debug)]
struct Transient;
impl std::fmt::Display for Transient {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("the ledger is unavailable")
    }
}
impl std::error::Error for Transient {}

#[consumer]
async fn record_payment(
    State(app): State<App>,
    Json(p): Json<Payment>,
    count: DeliveryCount,
) -> Result<(), HandlerError> {
    app.calls
        .lock()
        .unwrap()
        .push((p.payment_id.clone(), count.get()));
    if app.gate.closed.load(Ordering::SeqCst) {
        app.gate.entered.notify_one();
        app.gate.open.notified().await;
    }
    // A downstream that never answers, a call without a timeout of its own: once.
    if count.get() == 1 && app.hang_once.lock().unwrap().contains(&p.payment_id) {
        std::future::pending::<()>().await;
    }
    let must_fail = app
        .fail_until
        .lock()
        .unwrap()
        .get(&p.payment_id)
        .is_some_and(|n| count.get() < *n);
    if must_fail {
        return Err(Transient.into());
    }
    let panics = {
        let mut once = app.panic_once.lock().unwrap();
        let hit = once.contains(&p.payment_id);
        once.retain(|id| *id != p.payment_id);
        hit
    };
    if panics {
        panic!("handler bug on {}", p.payment_id);
    }
    if p.amount < 0 {
        return Err(HandlerError::reject(format!(
            "negative amount {}",
            p.amount
        )));
    }
    // Keyed by the payment's id and writing only values from the unit: idempotent (rule 3).
    app.rows.lock().unwrap().insert(p.payment_id, p.amount);
    Ok(())
}

fn payment(id: &str, amount: i64) -> Unit {
    Unit::new(
        format!("m-{id}"),
        format!(r#"{{"payment_id":"{id}","amount":{amount}}}"#),
    )
}

async fn run_until_idle(broker: &MemoryBroker, queue: &str, app: &App) -> Report {
    Consumer::new(broker.consume(queue))
        .state(app.clone())
        .concurrency(1)
        .shutdown_on(broker.idle(queue))
        .run(record_payment)
        .await
}

/// With the handler let through, the unit held by a consumer that died is applied once, on its
/// second delivery.
async fn applied_on_redelivery(broker: &MemoryBroker, app: &App) {
    app.gate.closed.store(false, Ordering::SeqCst);
    let report = run_until_idle(broker, "payments", app).await;
    assert_eq!(report.acked, 1);
    assert_eq!(app.rows()["p1"], 10);
    assert_eq!(
        app.calls(),
        vec![("p1".into(), 1), ("p1".into(), 2)],
        "redelivered with the broker's count"
    );
}

#[tokio::test]
async fn acknowledges_only_after_the_effect() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.gate.closed.store(true, Ordering::SeqCst);
    broker.publish("payments", payment("p1", 10));
    let run = tokio::spawn({
        let (broker, app) = (broker.clone(), app.clone());
        async move { run_until_idle(&broker, "payments", &app).await }
    });
    app.gate.entered.notified().await;
    // The handler is running and has not committed its effect: the unit is still held, unacked.
    assert_eq!(broker.depth("payments"), 1);
    assert!(app.rows().is_empty());
    app.gate.closed.store(false, Ordering::SeqCst);
    app.gate.open.notify_one();
    let report = run.await.unwrap();
    assert_eq!(report.acked, 1);
    assert_eq!(app.rows()["p1"], 10);
    assert_eq!(broker.depth("payments"), 0);
}

#[tokio::test]
async fn a_consumer_that_dies_mid_handler_loses_nothing() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.gate.closed.store(true, Ordering::SeqCst);
    broker.publish("payments", payment("p1", 10));
    let run = tokio::spawn({
        let (broker, app) = (broker.clone(), app.clone());
        async move { run_until_idle(&broker, "payments", &app).await }
    });
    app.gate.entered.notified().await;
    // The consumer's task dies between receipt and effect.
    run.abort();
    assert!(run.await.unwrap_err().is_cancelled());
    assert!(app.rows().is_empty());
    assert_eq!(broker.depth("payments"), 1, "the unit is back in the queue");

    applied_on_redelivery(&broker, &app).await;
}

/// On a multi-threaded runtime the loop runs as a task of its own on a worker: dropping the
/// future that awaits it still stops it and gives back the unit its handler was running.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_run_on_a_multi_threaded_runtime_gives_the_unit_back() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.gate.closed.store(true, Ordering::SeqCst);
    broker.publish("payments", payment("p1", 10));
    let mut run = Box::pin(run_until_idle(&broker, "payments", &app));
    tokio::select! {
        _ = &mut run => panic!("the run ended while its handler was held"),
        () = app.gate.entered.notified() => {}
    }
    drop(run);
    assert!(app.rows().is_empty());

    applied_on_redelivery(&broker, &app).await;
}

#[tokio::test(start_paused = true)]
async fn a_failed_unit_is_returned_and_applied_on_redelivery() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.fail_until.lock().unwrap().insert("p1".into(), 3);
    broker.publish("payments", payment("p1", 10));
    let report = run_until_idle(&broker, "payments", &app).await;
    assert_eq!(
        (
            report.acked,
            report.returned,
            report.dead_lettered,
            report.settle_failed
        ),
        (1, 2, 0, 0)
    );
    assert_eq!(app.rows()["p1"], 10);
    let counts: Vec<u32> = app.calls().iter().map(|(_, c)| *c).collect();
    assert_eq!(counts, [1, 2, 3]);
}

#[tokio::test(start_paused = true)]
async fn returning_waits_a_backoff_that_grows_with_the_count() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.fail_until.lock().unwrap().insert("p1".into(), 4);
    broker.publish("payments", payment("p1", 10));
    let started = tokio::time::Instant::now();
    Consumer::new(broker.consume("payments"))
        .state(app.clone())
        .backoff(
            Backoff::exponential(Duration::from_secs(1), Duration::from_secs(60)).without_jitter(),
        )
        .shutdown_on(broker.idle("payments"))
        .run(record_payment)
        .await;
    // 1 s + 2 s + 4 s of backoff before the fourth delivery (time is paused: this is exact).
    assert_eq!(started.elapsed().as_secs(), 7);
}

/// Fails its first delivery asking for no new attempt within 5 s (a downstream's 429 with
/// `Retry-After: 5`), applies the second.
#[consumer]
async fn rate_limited(
    State(app): State<App>,
    count: DeliveryCount,
    Json(p): Json<Payment>,
) -> Result<(), HandlerError> {
    app.calls
        .lock()
        .unwrap()
        .push((p.payment_id.clone(), count.get()));
    if count.get() == 1 {
        return Err(HandlerError::retry("429 from the ledger").after(Duration::from_secs(5)));
    }
    app.rows.lock().unwrap().insert(p.payment_id, p.amount);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn a_failure_asking_for_a_wait_is_returned_after_the_longer_of_it_and_the_backoff() {
    for (backoff_s, waited_s) in [(1, 5), (8, 8)] {
        let broker = MemoryBroker::new();
        let app = App::default();
        broker.publish("payments", payment("p1", 10));
        let started = tokio::time::Instant::now();
        let report = Consumer::new(broker.consume("payments"))
            .state(app.clone())
            .backoff(
                Backoff::exponential(
                    Duration::from_secs(backoff_s),
                    Duration::from_secs(backoff_s),
                )
                .without_jitter(),
            )
            .shutdown_on(broker.idle("payments"))
            .run(rate_limited)
            .await;
        assert_eq!((report.acked, report.returned), (1, 1));
        assert_eq!(app.rows()["p1"], 10);
        // Time is paused: the wait before the second delivery is exact.
        assert_eq!(
            started.elapsed().as_secs(),
            waited_s,
            "backoff {backoff_s} s, asked 5 s"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_returned_unit_comes_back_behind_the_units_queued_after_it() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.fail_until.lock().unwrap().insert("a".into(), 2);
    for id in ["a", "b", "c"] {
        broker.publish("payments", payment(id, 1));
    }
    Consumer::new(broker.consume("payments").prefetch(1))
        .state(app.clone())
        .concurrency(1)
        .backoff(Backoff::none())
        .shutdown_on(broker.idle("payments"))
        .run(record_payment)
        .await;
    let order: Vec<String> = app.calls().into_iter().map(|(id, _)| id).collect();
    assert_eq!(order, ["a", "b", "c", "a"]);
}

#[tokio::test(start_paused = true)]
async fn redelivery_is_bounded_by_the_brokers_count_across_consumer_restarts() {
    let broker = MemoryBroker::new();
    broker
        .declare("payments", QueueConfig::default().max_deliveries(3))
        .unwrap();
    let app = App::default();
    app.fail_until.lock().unwrap().insert("p1".into(), u32::MAX);
    broker.publish("payments", payment("p1", 10));

    // First consumer: two failed deliveries, then it is stopped (a deploy, a crash).
    let seen = Arc::new(AtomicU32::new(0));
    let stop = Arc::new(Notify::new());
    let first = tokio::spawn({
        let (broker, app, stop) = (broker.clone(), app.clone(), stop.clone());
        async move {
            Consumer::new(broker.consume("payments"))
                .state(app)
                .concurrency(1)
                .shutdown_on(async move { stop.notified().await })
                .run(record_payment)
                .await
        }
    });
    while app.calls().len() < 2 {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    seen.store(app.calls().len() as u32, Ordering::SeqCst);
    stop.notify_one();
    first.await.unwrap();

    // A new consumer — a new process, with no memory of the first — continues the broker's count.
    run_until_idle(&broker, "payments", &app).await;
    let counts: Vec<u32> = app.calls().iter().map(|(_, c)| *c).collect();
    assert_eq!(
        counts,
        [1, 2, 3],
        "the count is the broker's, not the process's"
    );
    let dead = broker.dead_letters("payments").list();
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].reason.unwrap(), ReasonKind::Exhausted);
    assert_eq!(dead[0].delivery_count().get(), 3);
    assert!(app.rows().is_empty());
}

#[tokio::test]
async fn malformed_units_go_straight_to_the_dead_letter_intact() {
    let broker = MemoryBroker::new();
    let app = App::default();
    let poison: Vec<(&str, Vec<u8>)> = vec![
        ("invalid-json", b"{\"payment_id\": ".to_vec()),
        (
            "wrong-shape",
            br#"{"payment_id": 7, "amount": "ten"}"#.to_vec(),
        ),
        ("not-utf8", vec![0xff, 0xfe, b'{', b'}']),
        ("empty", Vec::new()),
    ];
    for (id, bytes) in &poison {
        broker.publish("payments", Unit::new(*id, bytes.clone()));
    }
    let report = run_until_idle(&broker, "payments", &app).await;
    assert_eq!(report.dead_lettered, 4);
    assert_eq!(
        report.returned, 0,
        "never through redeliveries it cannot pass"
    );
    assert!(
        app.calls().is_empty(),
        "a malformed unit never reaches the handler"
    );
    let dead = broker.dead_letters("payments");
    for (id, bytes) in &poison {
        let letter = dead
            .peek(id)
            .unwrap_or_else(|| panic!("{id} is not in the dead letter"));
        assert_eq!(
            letter.unit.payload().as_ref(),
            &bytes[..],
            "{id} payload intact"
        );
        assert_eq!(letter.reason.unwrap(), ReasonKind::Malformed);
        assert_eq!(letter.delivery_count().get(), 1);
        assert_eq!(letter.source, "payments");
    }
}

#[tokio::test]
async fn a_rejected_unit_goes_to_the_dead_letter_without_redelivery() {
    let broker = MemoryBroker::new();
    let app = App::default();
    broker.publish(
        "payments",
        payment("p1", -5).with_headers(delivery::Headers::from_pairs([("tenant", "acme")])),
    );
    let report = run_until_idle(&broker, "payments", &app).await;
    assert_eq!(report.dead_lettered, 1);
    let letter = broker.dead_letters("payments").peek("m-p1").unwrap();
    assert_eq!(letter.reason.unwrap(), ReasonKind::Rejected);
    assert_eq!(letter.detail, "negative amount -5");
    assert_eq!(
        letter.unit.headers().get_str("tenant"),
        Some("acme"),
        "headers intact"
    );
    assert_eq!(app.calls().len(), 1);
}

#[tokio::test(start_paused = true)]
async fn a_panicking_handler_returns_the_unit_and_the_runtime_keeps_running() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.panic_once.lock().unwrap().push("p1".into());
    broker.publish("payments", payment("p1", 10));
    broker.publish("payments", payment("p2", 20));
    let report = run_until_idle(&broker, "payments", &app).await;
    assert_eq!(report.acked, 2);
    assert_eq!(report.returned, 1);
    assert_eq!(
        app.rows(),
        HashMap::from([("p1".into(), 10), ("p2".into(), 20)])
    );
}

#[tokio::test]
async fn a_second_delivery_of_an_applied_unit_changes_nothing() {
    let app = App::default();
    delivery::testing::assert_redelivery_changes_nothing(
        record_payment,
        &app,
        payment("p1", 10),
        || {
            let rows = app.rows();
            async move { rows }
        },
    )
    .await;

    // And through the broker: the same unit published twice, one effect.
    let broker = MemoryBroker::new();
    let app = App::default();
    broker.publish("payments", payment("p1", 10));
    broker.publish("payments", payment("p1", 10));
    let report = run_until_idle(&broker, "payments", &app).await;
    assert_eq!(report.acked, 2);
    assert_eq!(app.rows(), HashMap::from([("p1".into(), 10)]));
}

#[tokio::test(start_paused = true)]
async fn graceful_shutdown_finishes_in_flight_work_and_returns_the_rest() {
    let broker = MemoryBroker::new();
    let app = App::default();
    app.gate.closed.store(true, Ordering::SeqCst);
    for i in 0..10 {
        broker.publish("payments", payment(&format!("p{i}"), i));
    }
    let stop = Arc::new(Notify::new());
    let run = tokio::spawn({
        let (broker, app, stop) = (broker.clone(), app.clone(), stop.clone());
        async move {
            Consumer::new(broker.consume("payments").prefetch(4))
                .state(app)
                .concurrency(4)
                .drain_deadline(Duration::from_secs(5))
                .shutdown_on(async move { stop.notified().await })
                .run(record_payment)
                .await
        }
    });
    while app.calls().len() < 4 {
        app.gate.entered.notified().await;
    }
    stop.notify_one();
    // Two handlers finish within the drain deadline; two never do.
    tokio::time::sleep(Duration::from_millis(10)).await;
    app.gate.open.notify_one();
    app.gate.open.notify_one();
    let report = run.await.unwrap();
    assert_eq!(report.acked, 2);
    assert_eq!(
        report.returned, 2,
        "unfinished at the deadline: returned, never acknowledged"
    );
    assert_eq!(app.rows().len(), 2);
    assert_eq!(broker.depth("payments"), 8, "nothing lost");

    // The next consumer applies everything.
    app.gate.closed.store(false, Ordering::SeqCst);
    app.gate.open.notify_waiters();
    run_until_idle(&broker, "payments", &app).await;
    assert_eq!(app.rows().len(), 10);
    assert!(broker.dead_letters("payments").is_empty());
}

/// `handler_timeout`: a handler that hangs is stopped when the timeout ends, its unit returned
/// (a failure, after its backoff), and applied on its next delivery; the other unit is applied
/// meanwhile. One at a time and several at once.
#[tokio::test(start_paused = true)]
async fn a_hung_handler_is_returned_at_the_handler_timeout_and_applied_on_redelivery() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        let app = App::default();
        app.hang_once.lock().unwrap().push("p1".into());
        broker.publish("payments", payment("p1", 10));
        broker.publish("payments", payment("p2", 20));
        let started = tokio::time::Instant::now();
        let report = Consumer::new(broker.consume("payments"))
            .state(app.clone())
            .concurrency(concurrency)
            .handler_timeout(Duration::from_secs(30))
            .backoff(
                Backoff::exponential(Duration::from_secs(1), Duration::from_secs(1))
                    .without_jitter(),
            )
            .shutdown_on(broker.idle("payments"))
            .run(record_payment)
            .await;
        assert_eq!(
            (
                report.acked,
                report.returned,
                report.dead_lettered,
                report.settle_failed
            ),
            (2, 1, 0, 0),
            "concurrency {concurrency}"
        );
        assert_eq!(
            app.rows(),
            HashMap::from([("p1".into(), 10), ("p2".into(), 20)])
        );
        let p1: Vec<u32> = app
            .calls()
            .iter()
            .filter(|(id, _)| id == "p1")
            .map(|(_, count)| *count)
            .collect();
        assert_eq!(p1, [1, 2], "stopped once, applied on its second delivery");
        assert!(
            started.elapsed() >= Duration::from_secs(30),
            "not stopped before its timeout"
        );
        assert!(broker.dead_letters("payments").is_empty());
    }
}

#[tokio::test]
async fn an_operator_reads_and_redrives_the_dead_letter_under_the_same_id() {
    let broker = MemoryBroker::new();
    let app = App::default();
    broker.publish("payments", Unit::new("m-bad", r#"{"payment_id":"p9"}"#));
    run_until_idle(&broker, "payments", &app).await;
    let dead = broker.dead_letters("payments");
    assert_eq!(dead.len(), 1);
    assert_eq!(dead.name(), "payments.dead-letter");
    assert!(dead.list()[0].to_string().contains("malformed"));

    // The operator fixes the producer... and redrives. Same id, fresh count.
    assert_eq!(dead.redrive(&UnitId::new("m-bad")), 1);
    assert!(dead.is_empty());
    assert_eq!(broker.depth("payments"), 1);
    let mut source = broker.consume("payments");
    let (unit, _handle) = delivery::transport::Source::receive(&mut source)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(unit.id().as_str(), "m-bad");
    assert_eq!(unit.delivery_count().get(), 1);
    assert!(
        unit.headers().is_empty(),
        "the dead letter's own headers are gone after a redrive"
    );
}
