//! Each disposition is logged once, by the runtime, and counted through the `metrics` facade; the
//! dead letter's depth is a gauge.

use std::io::Write;
use std::sync::{Arc, Mutex};

use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, Unit, consumer};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use serde::Deserialize;

#[derive(Deserialize)]
struct Job {
    fail: bool,
}

#[consumer]
async fn run_job(Json(job): Json<Job>) -> Result<(), HandlerError> {
    if job.fail {
        return Err(HandlerError::retry("the worker pool is saturated"));
    }
    Ok(())
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

/// Debug logs into a buffer, through a subscriber set as this thread's default.
fn capture_logs() -> (Captured, tracing::subscriber::DefaultGuard) {
    let logs = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .with_writer({
            let logs = logs.clone();
            move || logs.clone()
        })
        .finish();
    (logs, tracing::subscriber::set_default(subscriber))
}

#[tokio::test(start_paused = true)]
async fn dispositions_are_logged_once_and_counted() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);
    let (logs, _tracing) = capture_logs();

    let broker = MemoryBroker::new();
    broker
        .declare(
            "jobs",
            delivery::memory::QueueConfig::default().max_deliveries(2),
        )
        .unwrap();
    broker.publish("jobs", Unit::new("ok-1", r#"{"fail":false}"#));
    broker.publish("jobs", Unit::new("bad-1", r#"{"fail":true}"#));
    broker.publish("jobs", Unit::new("poison-1", "not json"));
    let report = Consumer::new(broker.consume("jobs"))
        .concurrency(1)
        .shutdown_on(broker.idle("jobs"))
        .run(run_job)
        .await;
    assert_eq!(
        (report.acked, report.returned, report.dead_lettered),
        (1, 1, 2)
    );

    // Logs: one line per disposition, each naming the unit, its delivery count and the outcome.
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let dispositions: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("disposition="))
        .collect();
    assert_eq!(dispositions.len(), 4, "{logs}");
    let line = |needle: &str| dispositions.iter().filter(|l| l.contains(needle)).count();
    assert_eq!(
        line(r#"unit.id="ok-1" delivery_count=1 disposition="ack""#),
        1,
        "{logs}"
    );
    assert_eq!(
        line(r#"unit.id="bad-1" delivery_count=1 disposition="return""#),
        1,
        "{logs}"
    );
    assert_eq!(
        line(r#"unit.id="bad-1" delivery_count=2 disposition="dead-letter" reason="exhausted""#),
        1,
        "{logs}"
    );
    assert_eq!(
        line(r#"unit.id="poison-1" delivery_count=1 disposition="dead-letter" reason="malformed""#),
        1,
        "{logs}"
    );

    // Metrics: counters by outcome and reason, and the dead letter's depth.
    let snapshot = snapshotter.snapshot().into_vec();
    let value = |name: &str, label: Option<(&str, &str)>| {
        snapshot
            .iter()
            .find(|(key, _, _, _)| {
                key.key().name() == name
                    && label.is_none_or(|(k, v)| {
                        key.key().labels().any(|l| l.key() == k && l.value() == v)
                    })
            })
            .map(|(_, _, _, value)| value)
            .unwrap_or_else(|| panic!("no metric {name} {label:?}"))
    };
    assert!(matches!(
        value("delivery_acked_total", None),
        DebugValue::Counter(1)
    ));
    assert!(matches!(
        value("delivery_returned_total", None),
        DebugValue::Counter(1)
    ));
    assert!(matches!(
        value(
            "delivery_dead_lettered_total",
            Some(("reason", "exhausted"))
        ),
        DebugValue::Counter(1)
    ));
    assert!(matches!(
        value(
            "delivery_dead_lettered_total",
            Some(("reason", "malformed"))
        ),
        DebugValue::Counter(1)
    ));
    assert!(matches!(
        value("delivery_dead_lettered_total", Some(("reason", "rejected"))),
        DebugValue::Counter(0)
    ));
    match value(
        "delivery_dead_letter_depth",
        Some(("dead_letter", "jobs.dead-letter")),
    ) {
        DebugValue::Gauge(depth) => assert_eq!(depth.into_inner(), 2.0),
        other => panic!("{other:?}"),
    }
}

/// On a multi-threaded runtime the consumer's loop runs on a worker thread; a subscriber set as
/// the calling thread's default still sees its dispositions.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_callers_thread_default_subscriber_sees_the_dispositions_on_a_worker() {
    let (logs, _tracing) = capture_logs();

    let broker = MemoryBroker::new();
    for n in 0..8 {
        broker.publish("jobs", Unit::new(format!("ok-{n}"), r#"{"fail":false}"#));
    }
    let report = Consumer::new(broker.consume("jobs"))
        .concurrency(4)
        .shutdown_on(broker.idle("jobs"))
        .run(run_job)
        .await;
    assert_eq!(report.acked, 8);
    let logs = String::from_utf8(logs.0.lock().unwrap().clone()).unwrap();
    let acked = logs
        .lines()
        .filter(|l| l.contains(r#"disposition="ack""#))
        .count();
    assert_eq!(acked, 8, "{logs}");
}
