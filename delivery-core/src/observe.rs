//! Every metric the runtime exports, named and described in one place.
//!
//! The runtime records through the [`metrics`](https://docs.rs/metrics) facade: install any
//! recorder (`metrics-exporter-prometheus`, say), then call [`describe`] once so that each metric
//! carries its help text and unit. Consumers and relays call it again when they start, which is
//! harmless; a recorder installed after them gets the descriptions from your own call.
//!
//! Names follow Prometheus' conventions: counters end in `_total`, durations and ages are in
//! seconds and end in `_seconds`.
//!
//! | metric | type | labels | what |
//! |---|---|---|---|
//! | `delivery_acked_total` | counter | `source` | units acknowledged after their effect |
//! | `delivery_returned_total` | counter | `source` | units returned for redelivery |
//! | `delivery_dead_lettered_total` | counter | `source`, `reason` | units moved to the dead letter (`malformed`, `rejected`, `exhausted`) |
//! | `delivery_settle_failed_total` | counter | `source` | dispositions the transport could not carry out |
//! | `delivery_handler_duration_seconds` | histogram | `source` | how long a handler ran, from the unit's receipt to its outcome, in real time (tokio's paused test clock does not move it) |
//! | `delivery_in_flight` | gauge | `source` | units received and not yet settled |
//! | `delivery_dead_letter_depth` | gauge | `dead_letter` | units waiting in a dead letter, as last read |
//! | `delivery_retry_waiting` | gauge | `source` | Kafka: units waiting out their backoff in the retry topic |
//! | `delivery_pending_deleted_total` | counter | `source` | Redis: pending entries whose stream entry was deleted |
//! | `delivery_webhook_requests_total` | counter | `webhook`, `scheme`, `status` | webhook deliveries by the HTTP status answered |
//! | `delivery_relayed_total` | counter | `outbox` | outbox records delivered (the receiver confirmed) |
//! | `delivery_relay_failed_total` | counter | `outbox` | failed relay attempts, retried after a backoff |
//! | `delivery_relay_dead_total` | counter | `outbox`, `reason` | outbox records marked dead |
//! | `delivery_relay_in_flight` | gauge | `outbox` | records being relayed |
//! | `delivery_relay_pending` | gauge | `outbox` | records not yet delivered nor dead, as last read |
//! | `delivery_relay_oldest_pending_age_seconds` | gauge | `outbox` | age of the oldest pending record (0 when none), as last read |
//!
//! ```
//! // After installing a recorder (here: none, so every call is a no-op):
//! delivery::observe::describe();
//! assert!(delivery::observe::METRICS.iter().all(|m| m.name.starts_with("delivery_")));
//! ```

use metrics::Unit;

/// `delivery_acked_total{source}`.
pub const ACKED: &str = "delivery_acked_total";
/// `delivery_returned_total{source}`.
pub const RETURNED: &str = "delivery_returned_total";
/// `delivery_dead_lettered_total{source, reason}`.
pub const DEAD_LETTERED: &str = "delivery_dead_lettered_total";
/// `delivery_settle_failed_total{source}`.
pub const SETTLE_FAILED: &str = "delivery_settle_failed_total";
/// `delivery_handler_duration_seconds{source}`.
pub const HANDLER_DURATION: &str = "delivery_handler_duration_seconds";
/// `delivery_in_flight{source}`.
pub const IN_FLIGHT: &str = "delivery_in_flight";
/// `delivery_dead_letter_depth{dead_letter}`.
pub const DEAD_LETTER_DEPTH: &str = "delivery_dead_letter_depth";
/// `delivery_retry_waiting{source}` (Kafka).
pub const RETRY_WAITING: &str = "delivery_retry_waiting";
/// `delivery_pending_deleted_total{source}` (Redis Streams).
pub const PENDING_DELETED: &str = "delivery_pending_deleted_total";
/// `delivery_webhook_requests_total{webhook, scheme, status}`.
pub const WEBHOOK_REQUESTS: &str = "delivery_webhook_requests_total";
/// `delivery_relayed_total{outbox}`.
pub const RELAYED: &str = "delivery_relayed_total";
/// `delivery_relay_failed_total{outbox}`.
pub const RELAY_FAILED: &str = "delivery_relay_failed_total";
/// `delivery_relay_dead_total{outbox, reason}`.
pub const RELAY_DEAD: &str = "delivery_relay_dead_total";
/// `delivery_relay_in_flight{outbox}`.
pub const RELAY_IN_FLIGHT: &str = "delivery_relay_in_flight";
/// `delivery_relay_pending{outbox}`.
pub const RELAY_PENDING: &str = "delivery_relay_pending";
/// `delivery_relay_oldest_pending_age_seconds{outbox}`.
pub const RELAY_OLDEST_PENDING_AGE: &str = "delivery_relay_oldest_pending_age_seconds";

/// What kind of metric a [`Metric`] is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// Only goes up.
    Counter,
    /// Goes up and down.
    Gauge,
    /// A distribution of samples.
    Histogram,
}

/// One metric the runtime exports: its name, kind, unit, labels and help text.
#[derive(Clone, Copy, Debug)]
#[non_exhaustive]
pub struct Metric {
    /// The name, as exported.
    pub name: &'static str,
    /// Counter, gauge or histogram.
    pub kind: Kind,
    /// The unit, as the `metrics` facade names it.
    pub unit: Unit,
    /// The labels it is recorded with.
    pub labels: &'static [&'static str],
    /// The help text.
    pub help: &'static str,
}

const fn metric(
    name: &'static str,
    kind: Kind,
    unit: Unit,
    labels: &'static [&'static str],
    help: &'static str,
) -> Metric {
    Metric {
        name,
        kind,
        unit,
        labels,
        help,
    }
}

/// Every metric the runtime exports, in the order of the table above.
pub const METRICS: &[Metric] = &[
    metric(
        ACKED,
        Kind::Counter,
        Unit::Count,
        &["source"],
        "Units acknowledged after their handler's effect.",
    ),
    metric(
        RETURNED,
        Kind::Counter,
        Unit::Count,
        &["source"],
        "Units returned for redelivery: failed, panicked, or unfinished at shutdown.",
    ),
    metric(
        DEAD_LETTERED,
        Kind::Counter,
        Unit::Count,
        &["source", "reason"],
        "Units moved, intact, to the dead letter, by reason (malformed, rejected, exhausted).",
    ),
    metric(
        SETTLE_FAILED,
        Kind::Counter,
        Unit::Count,
        &["source"],
        "Dispositions the transport could not carry out; the broker delivers those units again.",
    ),
    metric(
        HANDLER_DURATION,
        Kind::Histogram,
        Unit::Seconds,
        &["source"],
        "How long a unit's handler ran, from its receipt to its outcome, in seconds.",
    ),
    metric(
        IN_FLIGHT,
        Kind::Gauge,
        Unit::Count,
        &["source"],
        "Units received by a consumer and not yet settled.",
    ),
    metric(
        DEAD_LETTER_DEPTH,
        Kind::Gauge,
        Unit::Count,
        &["dead_letter"],
        "Units waiting in a dead letter, as last read.",
    ),
    metric(
        RETRY_WAITING,
        Kind::Gauge,
        Unit::Count,
        &["source"],
        "Kafka: units waiting out their backoff in the retry topic.",
    ),
    metric(
        PENDING_DELETED,
        Kind::Counter,
        Unit::Count,
        &["source"],
        "Redis Streams: pending entries whose stream entry was deleted before they were handled.",
    ),
    metric(
        WEBHOOK_REQUESTS,
        Kind::Counter,
        Unit::Count,
        &["webhook", "scheme", "status"],
        "Webhook deliveries received, by the HTTP status they were answered with.",
    ),
    metric(
        RELAYED,
        Kind::Counter,
        Unit::Count,
        &["outbox"],
        "Outbox records marked delivered once the receiver confirmed them.",
    ),
    metric(
        RELAY_FAILED,
        Kind::Counter,
        Unit::Count,
        &["outbox"],
        "Failed relay attempts; the record is attempted again after its backoff.",
    ),
    metric(
        RELAY_DEAD,
        Kind::Counter,
        Unit::Count,
        &["outbox", "reason"],
        "Outbox records marked dead, by reason (malformed, rejected, exhausted).",
    ),
    metric(
        RELAY_IN_FLIGHT,
        Kind::Gauge,
        Unit::Count,
        &["outbox"],
        "Outbox records being relayed by this process.",
    ),
    metric(
        RELAY_PENDING,
        Kind::Gauge,
        Unit::Count,
        &["outbox"],
        "Outbox records neither delivered nor dead, as last read from the store.",
    ),
    metric(
        RELAY_OLDEST_PENDING_AGE,
        Kind::Gauge,
        Unit::Seconds,
        &["outbox"],
        "Age of the oldest pending outbox record in seconds (0 when none is pending), as last read from the store.",
    ),
];

/// Describes every metric of [`METRICS`] to the installed recorder: its help text and unit. Call
/// it once after installing your recorder (a recorder keeps a description per name, so a second
/// call changes nothing).
///
/// ```
/// # fn install_your_recorder() {}
/// install_your_recorder(); // e.g. metrics_exporter_prometheus::PrometheusBuilder::new().install_recorder()
/// delivery::observe::describe();
/// ```
pub fn describe() {
    for m in METRICS {
        match m.kind {
            Kind::Counter => metrics::describe_counter!(m.name, m.unit, m.help),
            Kind::Gauge => metrics::describe_gauge!(m.name, m.unit, m.help),
            Kind::Histogram => metrics::describe_histogram!(m.name, m.unit, m.help),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_follow_prometheus_conventions_and_are_unique() {
        let mut seen = std::collections::HashSet::new();
        for m in METRICS {
            assert!(seen.insert(m.name), "{} listed twice", m.name);
            assert!(m.name.starts_with("delivery_"), "{}", m.name);
            assert_eq!(
                m.kind == Kind::Counter,
                m.name.ends_with("_total"),
                "{}",
                m.name
            );
            assert_eq!(
                m.unit == Unit::Seconds,
                m.name.ends_with("_seconds"),
                "{}",
                m.name
            );
            assert!(!m.help.is_empty() && !m.labels.is_empty());
        }
    }
}
