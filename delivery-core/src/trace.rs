//! Traces that follow a unit from the write to the effect: one `tracing` span per unit a consumer
//! runs, per webhook request and per relay attempt, and (feature `opentelemetry`) the W3C trace
//! context carried from the outbox write, through the relay and the broker, to the consumer.
//!
//! Propagation lives in this module alone; transports only call it.
//!
//! # Spans
//!
//! | span | where | around |
//! |---|---|---|
//! | `delivery.unit` | the consumer runtime, once per delivered unit | extraction, the handler, the settle (ack / return / dead letter) |
//! | `delivery.unit` | a `#[webhook]` route, once per verified request | extraction, the handler, the response |
//! | `delivery.relay` | the relay, once per attempt at a record | the relay function, the sink's send and its receipt |
//!
//! Everything a handler or a relay function logs is inside its span, so its log lines carry the
//! unit's id, its source and its delivery count without the handler naming them.
//!
//! # Fields
//!
//! Named after the OpenTelemetry messaging semantic conventions:
//!
//! | field | `delivery.unit` | `delivery.relay` |
//! |---|---|---|
//! | `messaging.system` | the source's mechanism: `rabbitmq`, `kafka`, `nats`, `redis`, `memory`, `webhook` ([`Messaging`]) | the sink's (`rabbitmq`, `kafka`, `http`, `memory`), recorded when it sends |
//! | `messaging.destination.name` | the queue, stream or topic (`Source::name`), the webhook's name | the record's topic |
//! | `messaging.consumer.group.name` | the consumer group or durable consumer, where there is one | — |
//! | `messaging.message.id` | the unit's id | the record's id |
//! | `messaging.operation.type` | `process` | `send` |
//! | `messaging.delivery_count` | the unit's [`DeliveryCount`](crate::unit::DeliveryCount), from 1 | the attempt, from 1 |
//! | `delivery.outbox` | — | the outbox table |
//! | `otel.name`, `otel.kind` | `process {destination}`, `consumer` | `send {topic}`, `producer` |
//!
//! `messaging.delivery_count` is this crate's name: the conventions have no attribute for it yet
//! (only per-system ones such as `messaging.rabbitmq.*`). `otel.name` and `otel.kind` are read by
//! `tracing-opentelemetry` as the exported span's name and kind.
//!
//! # Trace context (feature `opentelemetry`)
//!
//! With the feature, the W3C headers [`TRACEPARENT`] and [`TRACESTATE`] travel with each unit:
//! - `Outbox::write` records the current span's context with the record (the outbox table's
//!   `headers` column, added to existing tables by `migrate`); [`Record::headers`] exposes it;
//! - the relay's `delivery.relay` span takes it as its parent, and each sink writes the context of
//!   the span it sends in: AMQP headers (RabbitMQ), Kafka headers, an HTTP `traceparent` header;
//! - each source reads it from the unit's headers as the parent of the unit's `delivery.unit` span,
//!   and a `#[webhook]` route from the sender's `traceparent`.
//!
//! So a trace started around the write is the ancestor of the consumer's span, in another
//! process. Without the feature nothing of OpenTelemetry is compiled; the spans are the same, and
//! sinks pass on whatever trace headers a record already carries.
//!
//! To export the spans, install `tracing-opentelemetry`'s layer over an OpenTelemetry tracer, the
//! versions this crate was built with (opentelemetry 0.31, tracing-opentelemetry 0.32):
//!
//! ```ignore
//! use opentelemetry::trace::TracerProvider as _;
//! use tracing_subscriber::layer::SubscriberExt;
//! use tracing_subscriber::util::SubscriberInitExt;
//!
//! let provider = opentelemetry_sdk::trace::SdkTracerProvider::builder()
//!     .with_batch_exporter(exporter) // OTLP, stdout, ...
//!     .build();
//! tracing_subscriber::registry()
//!     .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("my-service")))
//!     .with(tracing_subscriber::fmt::layer())
//!     .init();
//! ```
//!
//! Without the layer, the context in the headers is still passed on, unchanged, by the relay.
//!
//! [`Record::headers`]: crate::outbox::Record::headers

use tracing::Span;

use crate::unit::{Headers, Unit};

/// The W3C Trace Context header that names a unit's parent span.
pub const TRACEPARENT: &str = "traceparent";
/// The W3C Trace Context header with vendors' state beside [`TRACEPARENT`].
pub const TRACESTATE: &str = "tracestate";

/// What a source says about itself for the spans of its units: the mechanism
/// (`messaging.system`), the destination read (`messaging.destination.name`) and the consumer
/// group, if any ([`Source::messaging`](crate::Source::messaging)).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Messaging {
    system: &'static str,
    destination: String,
    consumer_group: Option<String>,
    /// `process {destination}`, the exported span's name: made once per consumer run.
    span_name: String,
}

impl Messaging {
    /// Units of `system` (`rabbitmq`, `kafka`, ...; lowercase, as the conventions spell it) read
    /// from `destination`.
    pub fn new(system: &'static str, destination: impl Into<String>) -> Self {
        let destination = destination.into();
        Messaging {
            system,
            span_name: format!("process {destination}"),
            destination,
            consumer_group: None,
        }
    }

    /// Read through the consumer group (or durable consumer) `group`.
    pub fn consumer_group(mut self, group: impl Into<String>) -> Self {
        self.consumer_group = Some(group.into());
        self
    }

    /// `messaging.system`.
    pub fn system(&self) -> &'static str {
        self.system
    }

    /// `messaging.destination.name`.
    pub fn destination(&self) -> &str {
        &self.destination
    }

    /// `messaging.consumer.group.name`, if there is one.
    pub fn group(&self) -> Option<&str> {
        self.consumer_group.as_deref()
    }
}

/// The `delivery.unit` span of one unit about to be run, its parent the trace context the unit
/// carries (feature `opentelemetry`); `None` when no subscriber takes it.
pub(crate) fn unit_span(messaging: &Messaging, unit: &Unit) -> Option<Span> {
    if !tracing::dispatcher::has_been_set() {
        return None;
    }
    let span = tracing::info_span!(
        "delivery.unit",
        otel.name = messaging.span_name.as_str(),
        otel.kind = "consumer",
        messaging.system = messaging.system,
        messaging.destination.name = messaging.destination.as_str(),
        messaging.consumer.group.name = messaging.group(),
        messaging.message.id = unit.id().as_str(),
        messaging.operation.type = "process",
        messaging.delivery_count = unit.delivery_count().get(),
    );
    otel::continue_from(&span, unit.headers());
    taken(span)
}

/// The `delivery.unit` span of a verified request to the `#[webhook]` route `webhook`, its parent
/// the sender's `traceparent` (feature `opentelemetry`).
pub fn webhook_span(webhook: &'static str, unit: &Unit) -> Span {
    unit_span(&Messaging::new("webhook", webhook), unit).unwrap_or_else(Span::none)
}

/// The `delivery.relay` span of one attempt at a record from `outbox` (its `topic`, `id` and
/// `headers`), its parent the trace context recorded with the record (feature `opentelemetry`).
pub(crate) fn relay_span(
    outbox: &str,
    topic: &str,
    id: &str,
    headers: &Headers,
    attempt: u32,
) -> Span {
    if !tracing::dispatcher::has_been_set() {
        return Span::none();
    }
    // `send {topic}`, or `send` for the default exchange (`""`), as the conventions name it.
    let name = format!("send {topic}");
    let span = tracing::info_span!(
        "delivery.relay",
        otel.name = name.trim_end(),
        otel.kind = "producer",
        messaging.system = tracing::field::Empty,
        messaging.destination.name = topic,
        messaging.message.id = id,
        messaging.operation.type = "send",
        messaging.delivery_count = attempt,
        delivery.outbox = outbox,
    );
    otel::continue_from(&span, headers);
    taken(span).unwrap_or_else(Span::none)
}

/// `span`, or `None` when no subscriber takes it (as the spans above are when no subscriber was
/// ever set). A disabled span still carries its metadata, and where `tracing`'s
/// `log` feature is on (a dependency turns it on) making, entering, leaving and dropping it go
/// through `log`'s checks: with no subscriber that was the largest part of the runtime's own
/// cost per unit (`benches/runtime.rs`).
#[inline]
fn taken(span: Span) -> Option<Span> {
    (!span.is_disabled()).then_some(span)
}

/// `future`, entered in `span` while it is polled, or `future` as it is without one: a unit
/// nobody traces pays no span enter, exit and drop on each poll.
#[inline]
pub(crate) fn within<F: std::future::Future>(
    future: F,
    span: Option<Span>,
) -> futures_util::future::Either<tracing::instrument::Instrumented<F>, F> {
    use futures_util::future::Either;
    use tracing::Instrument;
    match span {
        Some(span) => Either::Left(future.instrument(span)),
        None => Either::Right(future),
    }
}

/// What a sink of `system` sends with a record whose headers are `headers`
/// ([`Record::headers`](crate::outbox::Record::headers)): those headers, with the trace context replaced by the current span's
/// (the relay attempt's) where there is one (feature `opentelemetry`). Records `system` as the
/// current span's `messaging.system`.
pub fn outgoing(system: &'static str, headers: &Headers) -> Headers {
    Span::current().record("messaging.system", system);
    otel::current_into(headers)
}

/// `headers` with the trace context of the current span, for a record being written (feature
/// `opentelemetry`; `headers` as they are without it).
pub fn with_current(headers: &Headers) -> Headers {
    otel::current_into(headers)
}

#[cfg(feature = "opentelemetry")]
mod otel {
    use opentelemetry::propagation::{Extractor, Injector, TextMapPropagator};
    use opentelemetry::trace::TraceContextExt;
    use opentelemetry_sdk::propagation::TraceContextPropagator;
    use tracing::Span;
    use tracing_opentelemetry::OpenTelemetrySpanExt;

    use super::{TRACEPARENT, TRACESTATE};
    use crate::unit::Headers;

    struct Reading<'a>(&'a Headers);

    impl Extractor for Reading<'_> {
        fn get(&self, key: &str) -> Option<&str> {
            self.0.get_str(key)
        }

        fn keys(&self) -> Vec<&str> {
            self.0.iter().map(|(name, _)| name).collect()
        }
    }

    struct Writing(Headers);

    impl Injector for Writing {
        fn set(&mut self, key: &str, value: String) {
            // An empty `tracestate` says nothing: it is not sent.
            if !value.is_empty() {
                self.0 = self.0.with(key, value);
            }
        }
    }

    /// Makes the context `headers` carry the parent of `span`, if they carry a valid one.
    pub(super) fn continue_from(span: &Span, headers: &Headers) {
        if headers.get(TRACEPARENT).is_none() {
            return;
        }
        let parent = TraceContextPropagator::new().extract(&Reading(headers));
        if parent.span().span_context().is_valid() {
            // Fails only without the OpenTelemetry layer, or for a disabled span: nothing to do.
            let _ = span.set_parent(parent);
        }
    }

    /// `headers` with the current span's trace context in place of theirs, if it has one.
    #[allow(dead_code)] // the outbox's and the sinks', behind their features
    pub(super) fn current_into(headers: &Headers) -> Headers {
        let context = Span::current().context();
        if !context.span().span_context().is_valid() {
            return headers.clone();
        }
        let kept = headers
            .iter()
            .filter(|(name, _)| *name != TRACEPARENT && *name != TRACESTATE)
            .map(|(name, value)| (name.to_owned(), value.clone()));
        let mut writing = Writing(Headers::from_pairs(kept));
        TraceContextPropagator::new().inject_context(&context, &mut writing);
        writing.0
    }
}

#[cfg(not(feature = "opentelemetry"))]
mod otel {
    use tracing::Span;

    use crate::unit::Headers;

    pub(super) fn continue_from(_: &Span, _: &Headers) {}

    #[allow(dead_code)] // the outbox's and the sinks', behind their features
    pub(super) fn current_into(headers: &Headers) -> Headers {
        headers.clone()
    }
}
