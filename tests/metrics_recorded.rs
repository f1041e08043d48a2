//! What the runtime records beyond the disposition counters (tests/observability.rs): the handler
//! duration histogram and the in-flight gauge of a consumer, and webhook deliveries by status.

use std::time::Duration;

use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, Unit, consumer};
use metrics_util::CompositeKey;
use metrics_util::debugging::{DebugValue, DebuggingRecorder, Snapshotter};

/// What a debugging recorder's snapshot holds.
type Samples = Vec<(
    CompositeKey,
    Option<metrics::Unit>,
    Option<metrics::SharedString>,
    DebugValue,
)>;

/// A snapshot. (It drains what it reads: counters and gauges start again from zero, histograms
/// empty.)
fn samples(snapshotter: &Snapshotter) -> Samples {
    snapshotter.snapshot().into_vec()
}

#[consumer]
async fn slow_square(Json(n): Json<u64>) -> Result<(), HandlerError> {
    // 20 ms of real time (the handler duration is measured in real time, whatever tokio's clock
    // does), then 250 ms of tokio's clock, paused in these tests.
    std::thread::sleep(Duration::from_millis(20));
    tokio::time::sleep(Duration::from_millis(250)).await;
    let _ = n * n;
    Ok(())
}

/// The value of `name` with exactly `labels` in `samples`.
fn value<'a>(samples: &'a Samples, name: &str, labels: &[(&str, &str)]) -> Option<&'a DebugValue> {
    samples
        .iter()
        .find(|(key, ..)| {
            let key = key.key();
            key.name() == name
                && key.labels().count() == labels.len()
                && labels
                    .iter()
                    .all(|(k, v)| key.labels().any(|l| l.key() == *k && l.value() == *v))
        })
        .map(|(.., value)| value)
}

#[tokio::test(start_paused = true)]
async fn a_consumer_records_handler_durations_and_units_in_flight() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    let broker = MemoryBroker::new();
    for (id, body) in [("n-1", "3"), ("n-2", "4"), ("n-3", "five")] {
        broker.publish("numbers", Unit::new(id, body));
    }
    let consumer = Consumer::new(broker.consume("numbers")).shutdown_on(broker.idle("numbers"));
    let health = consumer.health();
    let run = tokio::spawn(consumer.run(slow_square));

    // Both numbers are being handled (the third was malformed and is already dead-lettered).
    tokio::time::sleep(Duration::from_millis(100)).await;
    let source = [("source", "numbers")];
    assert_eq!(
        value(&samples(&snapshotter), "delivery_in_flight", &source),
        Some(&DebugValue::Gauge(2.0.into()))
    );
    assert_eq!(health.snapshot().in_flight, 2);

    let report = run.await.unwrap();
    assert_eq!((report.acked, report.dead_lettered), (2, 1));
    let after = samples(&snapshotter);
    // Both settled since the snapshot above read 2 (and drained the gauge).
    assert_eq!(
        value(&after, "delivery_in_flight", &source),
        Some(&DebugValue::Gauge((-2.0).into()))
    );
    let Some(DebugValue::Histogram(seconds)) =
        value(&after, "delivery_handler_duration_seconds", &source)
    else {
        panic!("no handler duration recorded");
    };
    // The two handlers' durations, each at least its 20 ms of real time. (The malformed unit's
    // sample went with the snapshot above.)
    let seconds: Vec<f64> = seconds.iter().map(|s| s.into_inner()).collect();
    assert_eq!(seconds.len(), 2, "{seconds:?}");
    assert!(seconds.iter().all(|&s| s >= 0.02), "{seconds:?}");
    let snapshot = health.snapshot();
    assert_eq!((snapshot.in_flight, snapshot.dead_lettered), (0, 1));
}

#[consumer]
async fn square(Json(n): Json<u64>) -> Result<(), HandlerError> {
    let _ = n * n;
    Ok(())
}

/// Units that arrive and complete without the consumer waiting are stamped in its health one in
/// 32; a unit that arrives after the consumer waited is stamped at once, whatever came before it.
#[tokio::test(start_paused = true)]
async fn a_unit_after_an_idle_spell_is_stamped_on_arrival() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        for i in 0..40 {
            broker.publish("numbers", Unit::new(format!("n-{i}"), "3"));
        }
        let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
        let consumer = Consumer::new(broker.consume("numbers"))
            .concurrency(concurrency)
            .shutdown_on(async move {
                let _ = stopped.await;
            });
        let health = consumer.health();
        let run = tokio::spawn(consumer.run(square));

        // The 40 are applied at once, back to back; then the queue is empty for 10 s.
        tokio::time::sleep(Duration::from_secs(10)).await;
        let idle = health.snapshot().last_receive_age_seconds.unwrap();
        assert!(idle >= 9.9, "concurrency {concurrency}: {idle} s");

        broker.publish("numbers", Unit::new("n-40", "3"));
        tokio::time::sleep(Duration::from_millis(1)).await;
        let age = health.snapshot().last_receive_age_seconds.unwrap();
        assert!(
            age < 0.5,
            "concurrency {concurrency}: the 41st unit arrived {age} s ago"
        );

        stop.send(()).unwrap();
        assert_eq!(run.await.unwrap().acked, 41);
    }
}

/// The in-memory broker's source behind a connection that refuses the first `refusals` receives.
struct Flaky {
    inner: delivery::memory::MemorySource,
    refusals: u32,
}

impl delivery::transport::Source for Flaky {
    type Handle = delivery::memory::MemoryHandle;

    async fn receive(
        &mut self,
    ) -> Result<Option<(Unit, Self::Handle)>, delivery::transport::TransportError> {
        if self.refusals > 0 {
            self.refusals -= 1;
            return Err(delivery::transport::TransportError::msg(
                "connecting",
                "connection refused",
            ));
        }
        self.inner.receive().await
    }

    fn name(&self) -> &str {
        self.inner.name()
    }
}

#[tokio::test(start_paused = true)]
async fn a_consumer_is_down_while_its_receives_fail_and_up_once_one_waits_past_the_grace() {
    use delivery::health::{HealthStatus, RECONNECT_GRACE};

    let broker = MemoryBroker::new();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let source = Flaky {
        inner: broker.consume("numbers"),
        refusals: 3,
    };
    let consumer = Consumer::new(source).shutdown_on(async move {
        let _ = stopped.await;
    });
    let health = consumer.health();
    let run = tokio::spawn(consumer.run(slow_square));

    // The first refusals: down, with the error; the waits between them are 100 ms to 400 ms.
    tokio::time::sleep(Duration::from_millis(50)).await;
    let snapshot = health.snapshot();
    assert_eq!(snapshot.status, HealthStatus::Down);
    assert!(!snapshot.connected && !snapshot.healthy);
    assert!(snapshot.last_error.unwrap().contains("connection refused"));

    // The fourth receive waits on an empty queue: connected again once it waited the grace.
    tokio::time::sleep(Duration::from_secs(2) + RECONNECT_GRACE).await;
    let snapshot = health.snapshot();
    assert_eq!(snapshot.status, HealthStatus::Up, "{snapshot:?}");
    assert_eq!(snapshot.consecutive_failures, 3);
    assert_eq!(snapshot.last_receive_age_seconds, None, "no unit came yet");

    // A unit arrives: the failures are over.
    broker.publish("numbers", Unit::new("n-1", "3"));
    tokio::time::sleep(Duration::from_millis(300)).await;
    let snapshot = health.snapshot();
    assert_eq!(
        (snapshot.consecutive_failures, snapshot.last_error),
        (0, None)
    );
    assert!(snapshot.last_receive_age_seconds.is_some());

    stop.send(()).unwrap();
    assert_eq!(run.await.unwrap().acked, 1);
    assert_eq!(health.snapshot().status, HealthStatus::Stopped);
}

#[cfg(feature = "axum")]
mod webhooks {
    use std::time::SystemTime;

    use axum::Router;
    use axum::body::Body;
    use axum::http::Request;
    use delivery::webhook::Scheme;
    use delivery::{HandlerError, Json, State, webhook};
    use metrics_util::debugging::{DebugValue, DebuggingRecorder};
    use tower::ServiceExt as _;

    const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";

    #[derive(Clone)]
    struct App {
        secret: String,
    }

    #[webhook(scheme = standard_webhooks, secret = |app: &App| app.secret.clone())]
    async fn order_paid(
        State(_app): State<App>,
        Json(order): Json<serde_json::Value>,
    ) -> Result<(), HandlerError> {
        if order["order_id"].is_null() {
            return Err(HandlerError::reject("no order id"));
        }
        Ok(())
    }

    #[tokio::test]
    async fn webhook_deliveries_are_counted_by_status() {
        let recorder = DebuggingRecorder::new();
        let snapshotter = recorder.snapshotter();
        let _metrics = metrics::set_default_local_recorder(&recorder);

        let app = App {
            secret: SECRET.into(),
        };
        let router = Router::new()
            .route("/paid", delivery::webhook::route(order_paid, &app).unwrap())
            .with_state(app);
        let send = |body: &'static str, forged: bool| {
            let mut headers =
                delivery::testing::sign(&Scheme::StandardWebhooks, SECRET, body, SystemTime::now());
            if forged {
                headers.insert("webhook-signature", "v1,AAAA".parse().unwrap());
            }
            let mut request = Request::post("/paid").body(Body::from(body)).unwrap();
            *request.headers_mut() = headers;
            router.clone().oneshot(request)
        };
        let ok = r#"{"order_id":"o-1"}"#;
        assert_eq!(send(ok, false).await.unwrap().status(), 200);
        assert_eq!(send(ok, false).await.unwrap().status(), 200);
        assert_eq!(send(ok, true).await.unwrap().status(), 401);
        assert_eq!(send("{}", false).await.unwrap().status(), 422);

        let snapshot = super::samples(&snapshotter);
        let counted = |status: &str| {
            super::value(
                &snapshot,
                "delivery_webhook_requests_total",
                &[
                    ("webhook", "order_paid"),
                    ("scheme", "standard_webhooks"),
                    ("status", status),
                ],
            )
        };
        assert_eq!(counted("200"), Some(&DebugValue::Counter(2)));
        assert_eq!(counted("401"), Some(&DebugValue::Counter(1)));
        assert_eq!(counted("422"), Some(&DebugValue::Counter(1)));
    }
}
