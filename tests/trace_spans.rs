//! The consumer runtime's span per unit (`delivery.unit`, see `delivery::trace`): its fields follow
//! the OpenTelemetry messaging conventions, and what a handler logs is inside it.

use std::collections::BTreeMap;
use std::sync::{Arc, Mutex};

use delivery::memory::MemoryBroker;
use delivery::{Consumer, DeliveryCount, HandlerError, Unit};
use tracing::field::{Field, Visit};
use tracing::span::{Attributes, Id};
use tracing::{Event, Subscriber};
use tracing_subscriber::Layer;
use tracing_subscriber::layer::{Context, SubscriberExt};
use tracing_subscriber::registry::LookupSpan;

type Fields = BTreeMap<String, String>;

/// Every span's name and fields, and for each event the name of the span it was logged in.
#[derive(Clone, Default)]
struct Capture {
    spans: Arc<Mutex<Vec<(String, Fields)>>>,
    events_in: Arc<Mutex<Vec<Option<String>>>>,
}

struct Recorder<'a>(&'a mut Fields);

impl Visit for Recorder<'_> {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        self.0.insert(field.name().to_owned(), format!("{value:?}"));
    }

    fn record_str(&mut self, field: &Field, value: &str) {
        self.0.insert(field.name().to_owned(), value.to_owned());
    }
}

impl<S: Subscriber + for<'a> LookupSpan<'a>> Layer<S> for Capture {
    fn on_new_span(&self, attrs: &Attributes<'_>, _: &Id, _: Context<'_, S>) {
        let mut fields = Fields::new();
        attrs.record(&mut Recorder(&mut fields));
        self.spans
            .lock()
            .unwrap()
            .push((attrs.metadata().name().to_owned(), fields));
    }

    fn on_event(&self, event: &Event<'_>, ctx: Context<'_, S>) {
        let mut fields = Fields::new();
        event.record(&mut Recorder(&mut fields));
        if fields.get("message").map(String::as_str) == Some("handled") {
            let span = ctx.event_span(event).map(|span| span.name().to_owned());
            self.events_in.lock().unwrap().push(span);
        }
    }
}

#[delivery::consumer]
async fn handle(unit: delivery::UnitId) -> Result<(), HandlerError> {
    tracing::info!(%unit, "handled");
    Ok(())
}

/// `m-2` fails its first delivery, so it comes again as the second.
#[delivery::consumer]
async fn flaky(unit: delivery::UnitId, count: DeliveryCount) -> Result<(), HandlerError> {
    tracing::info!(%unit, "handled");
    if unit.as_str() == "m-2" && count.get() == 1 {
        return Err(HandlerError::retry(
            "the first delivery of m-2 fails (scripted)",
        ));
    }
    Ok(())
}

#[tokio::test]
async fn each_unit_runs_in_a_span_with_the_messaging_fields() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let broker = MemoryBroker::new();
    broker.publish("orders", Unit::new("m-1", "{}"));
    broker.publish("orders", Unit::new("m-2", "{}"));
    let report = Consumer::new(broker.consume("orders"))
        .concurrency(1)
        .backoff(delivery::disposition::Backoff::none())
        .shutdown_on(broker.idle("orders"))
        .run(flaky)
        .await;
    assert_eq!((report.acked, report.returned), (2, 1));

    let spans = capture.spans.lock().unwrap().clone();
    let units: Vec<&Fields> = spans
        .iter()
        .filter(|(name, _)| name == "delivery.unit")
        .map(|(_, fields)| fields)
        .collect();
    assert_eq!(units.len(), 3, "{spans:#?}");
    for (fields, (id, count)) in units.iter().zip([("m-1", "1"), ("m-2", "1"), ("m-2", "2")]) {
        let expected: Fields = [
            ("messaging.system", "memory"),
            ("messaging.destination.name", "orders"),
            ("messaging.message.id", id),
            ("messaging.operation.type", "process"),
            ("messaging.delivery_count", count),
            ("otel.name", "process orders"),
            ("otel.kind", "consumer"),
        ]
        .into_iter()
        .map(|(k, v)| (k.to_owned(), v.to_owned()))
        .collect();
        assert_eq!(*fields, &expected);
    }
    // The handler's own log lines are inside the unit's span.
    assert_eq!(
        *capture.events_in.lock().unwrap(),
        vec![Some("delivery.unit".to_owned()); 3]
    );
}

#[tokio::test]
async fn several_at_once_each_unit_has_its_span() {
    let capture = Capture::default();
    let subscriber = tracing_subscriber::registry().with(capture.clone());
    let _guard = tracing::subscriber::set_default(subscriber);

    let broker = MemoryBroker::new();
    for i in 0..5 {
        broker.publish("orders", Unit::new(format!("m-{i}"), "{}"));
    }
    let report = Consumer::new(broker.consume("orders"))
        .concurrency(4)
        .shutdown_on(broker.idle("orders"))
        .run(handle)
        .await;
    assert_eq!(report.acked, 5);
    let mut ids: Vec<String> = capture
        .spans
        .lock()
        .unwrap()
        .iter()
        .filter(|(name, _)| name == "delivery.unit")
        .map(|(_, fields)| fields["messaging.message.id"].clone())
        .collect();
    ids.sort();
    assert_eq!(ids, ["m-0", "m-1", "m-2", "m-3", "m-4"]);
    assert!(
        capture
            .events_in
            .lock()
            .unwrap()
            .iter()
            .all(|span| span.as_deref() == Some("delivery.unit"))
    );
}
