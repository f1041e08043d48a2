//! The consumer loop on the paths the other runtime tests do not reach: one unit at a time with a
//! waiting handler at the drain deadline, panics after a wait and in an extractor, several handlers
//! waiting at once, a shutdown signal given before the first unit, failed receives.
use std::sync::Arc;
use std::sync::atomic::{AtomicU32, Ordering};
use std::time::Duration;

use delivery::memory::{MemoryBroker, MemoryHandle, MemorySource};
use delivery::{
    Consumer, HandlerError, Json, State, Unit, consumer, extract::FromUnit, extract::Malformed,
    transport::Source, transport::TransportError,
};
use tokio::sync::Notify;

#[derive(Default)]
struct App {
    gate: Notify,
    entered: Notify,
    polls: AtomicU32,
    applied: AtomicU32,
}

#[consumer]
async fn gated(State(app): State<Arc<App>>, Json(n): Json<u32>) -> Result<(), HandlerError> {
    app.entered.notify_one();
    app.gate.notified().await;
    app.applied.fetch_add(n, Ordering::SeqCst);
    Ok(())
}

/// Panics on its second poll: after waiting once.
#[consumer]
async fn panics_later(State(app): State<Arc<App>>, Json(n): Json<u32>) -> Result<(), HandlerError> {
    app.polls.fetch_add(1, Ordering::SeqCst);
    tokio::task::yield_now().await;
    if n == 1 {
        panic!("second poll");
    }
    app.applied.fetch_add(n, Ordering::SeqCst);
    Ok(())
}

struct Exploding;
impl<S> FromUnit<S> for Exploding {
    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        if unit.payload().as_ref() == b"1" {
            panic!("extractor panicked");
        }
        Ok(Exploding)
    }
}

#[consumer]
async fn extractor_panics(_e: Exploding, State(app): State<Arc<App>>) -> Result<(), HandlerError> {
    app.applied.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// Two units queued for a consumer of concurrency 1 with a 5 s drain deadline, whose handler waits
/// at its gate: returned once the first unit's handler is waiting and the shutdown signal given.
async fn gated_one_at_a_time_then_stopped() -> (
    MemoryBroker,
    Arc<App>,
    tokio::task::JoinHandle<delivery::consumer::Report>,
) {
    let broker = MemoryBroker::new();
    broker.publish("q", Unit::new("a", "5"));
    broker.publish("q", Unit::new("b", "7"));
    let app = Arc::new(App::default());
    let stop = Arc::new(Notify::new());
    let run = tokio::spawn({
        let (broker, app, stop) = (broker.clone(), app.clone(), stop.clone());
        async move {
            Consumer::new(broker.consume("q"))
                .state(app)
                .concurrency(1)
                .drain_deadline(Duration::from_secs(5))
                .shutdown_on(async move { stop.notified().await })
                .run(gated)
                .await
        }
    });
    app.entered.notified().await;
    stop.notify_one();
    (broker, app, run)
}

#[tokio::test(start_paused = true)]
async fn one_at_a_time_waiting_handler_is_returned_at_the_drain_deadline() {
    let (broker, app, run) = gated_one_at_a_time_then_stopped().await;
    let report = run.await.unwrap();
    assert_eq!(report.acked, 0);
    assert_eq!(report.returned, 1);
    assert_eq!(app.applied.load(Ordering::SeqCst), 0);
    assert_eq!(broker.depth("q"), 2, "nothing lost");
}

#[tokio::test(start_paused = true)]
async fn one_at_a_time_waiting_handler_finishing_within_the_deadline_is_acked_and_the_loop_stops() {
    let (broker, app, run) = gated_one_at_a_time_then_stopped().await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    app.gate.notify_one();
    let report = run.await.unwrap();
    assert_eq!(report.acked, 1);
    assert_eq!(report.returned, 0);
    assert_eq!(app.applied.load(Ordering::SeqCst), 5);
    assert_eq!(broker.depth("q"), 1, "the second unit is still queued");
}

async fn run_until_idle<H: delivery::handler::Handler<Arc<App>>>(
    broker: &MemoryBroker,
    app: &Arc<App>,
    concurrency: usize,
    h: H,
) -> delivery::consumer::Report {
    Consumer::new(broker.consume("q"))
        .state(app.clone())
        .concurrency(concurrency)
        .backoff(delivery::disposition::Backoff::none())
        .shutdown_on(broker.idle("q"))
        .run(h)
        .await
}

#[tokio::test(start_paused = true)]
async fn a_panic_after_a_wait_returns_the_unit_both_ways() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        broker.publish("q", Unit::new("a", "1"));
        broker.publish("q", Unit::new("b", "2"));
        let app = Arc::new(App::default());
        let report = run_until_idle(&broker, &app, concurrency, panics_later).await;
        assert_eq!(report.acked, 1, "concurrency {concurrency}");
        assert!(
            report.returned >= 1,
            "concurrency {concurrency}: {report:?}"
        );
        assert_eq!(app.applied.load(Ordering::SeqCst), 2);
        assert_eq!(
            broker.dead_letters("q").len(),
            1,
            "exhausted after its deliveries"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_panicking_extractor_returns_the_unit_both_ways() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        broker.publish("q", Unit::new("a", "1"));
        broker.publish("q", Unit::new("b", "2"));
        let app = Arc::new(App::default());
        let report = run_until_idle(&broker, &app, concurrency, extractor_panics).await;
        assert_eq!(report.acked, 1, "concurrency {concurrency}");
        assert!(report.returned >= 1);
        assert_eq!(app.applied.load(Ordering::SeqCst), 1);
        assert_eq!(broker.dead_letters("q").len(), 1);
    }
}

#[tokio::test(start_paused = true)]
async fn several_at_once_with_waiting_handlers_all_acked() {
    let broker = MemoryBroker::new();
    for i in 0..50u32 {
        broker.publish("q", Unit::new(format!("u{i}"), i.to_string()));
    }
    let app = Arc::new(App::default());
    let opener = tokio::spawn({
        let app = app.clone();
        async move {
            loop {
                tokio::time::sleep(Duration::from_millis(1)).await;
                app.gate.notify_waiters();
            }
        }
    });
    let report = run_until_idle(&broker, &app, 4, gated).await;
    opener.abort();
    assert_eq!(report.acked, 50);
    assert_eq!(app.applied.load(Ordering::SeqCst), (0..50).sum::<u32>());
}

#[tokio::test]
async fn a_signal_already_given_stops_before_any_unit() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        broker.publish("q", Unit::new("a", "1"));
        let app = Arc::new(App::default());
        let report = Consumer::new(broker.consume("q"))
            .state(app.clone())
            .concurrency(concurrency)
            .shutdown_on(async {})
            .run(gated)
            .await;
        assert_eq!(report, delivery::consumer::Report::default());
        assert_eq!(broker.depth("q"), 1);
    }
}

/// The in-memory queue behind a connection that fails its first `failures` receives.
struct Flaky {
    inner: MemorySource,
    failures: u32,
}

impl Source for Flaky {
    type Handle = MemoryHandle;

    async fn receive(&mut self) -> Result<Option<(Unit, MemoryHandle)>, TransportError> {
        if self.failures > 0 {
            self.failures -= 1;
            return Err(TransportError::msg("receiving", "connection refused"));
        }
        self.inner.receive().await
    }

    fn name(&self) -> &str {
        "flaky"
    }
}

#[consumer]
async fn add(State(app): State<Arc<App>>, Json(n): Json<u32>) -> Result<(), HandlerError> {
    app.applied.fetch_add(n, Ordering::SeqCst);
    Ok(())
}

#[tokio::test(start_paused = true)]
async fn failed_receives_are_waited_out_with_a_growing_backoff_both_ways() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        broker.publish("q", Unit::new("a", "5"));
        broker.publish("q", Unit::new("b", "7"));
        let app = Arc::new(App::default());
        let started = tokio::time::Instant::now();
        let report = Consumer::new(Flaky {
            inner: broker.consume("q"),
            failures: 3,
        })
        .state(app.clone())
        .concurrency(concurrency)
        .shutdown_on(broker.idle("q"))
        .run(add)
        .await;
        assert_eq!(report.acked, 2, "concurrency {concurrency}");
        assert_eq!(app.applied.load(Ordering::SeqCst), 12);
        // Up to 100, 200 and 400 ms after the three failures in a row, each jittered down to
        // half at most: growing, and never a hot loop.
        let waited = started.elapsed();
        assert!(
            waited >= Duration::from_millis(350) && waited <= Duration::from_millis(700),
            "concurrency {concurrency}: waited {waited:?}"
        );
    }
}

#[tokio::test(start_paused = true)]
async fn a_signal_during_a_failed_receive_s_wait_stops_the_loop_both_ways() {
    for concurrency in [1, 4] {
        let broker = MemoryBroker::new();
        broker.publish("q", Unit::new("a", "5"));
        let app = Arc::new(App::default());
        let started = tokio::time::Instant::now();
        let report = Consumer::new(Flaky {
            inner: broker.consume("q"),
            failures: u32::MAX,
        })
        .state(app.clone())
        .concurrency(concurrency)
        .shutdown_on(tokio::time::sleep(Duration::from_millis(250)))
        .run(add)
        .await;
        assert_eq!(report, delivery::consumer::Report::default());
        assert_eq!(
            started.elapsed(),
            Duration::from_millis(250),
            "concurrency {concurrency}"
        );
        assert_eq!(broker.depth("q"), 1, "the unit stays queued");
    }
}
