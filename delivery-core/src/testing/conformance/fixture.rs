//! What a transport supplies to the suite: a [`Fixture`] over its mechanism, and, for the
//! console's check, a [`WebConsole`].

use std::future::Future;
use std::time::Duration;

use bytes::Bytes;

use crate::dead_letter::DeadLetters;
use crate::source::Source;
use crate::unit::Unit;

/// What the suite needs from a mechanism: declare a queue with a bound and a dead letter, publish,
/// consume, read the dead letter.
pub trait Fixture: Send + Sync + 'static {
    /// The transport under test.
    type Source: Source;

    /// Declares an empty queue `name` whose units get at most `max_deliveries` deliveries, with its
    /// dead letter; removes whatever a previous run left under that name.
    fn declare(&self, name: &str, max_deliveries: u32) -> impl Future<Output = ()> + Send;

    /// Publishes `unit` (id, payload, headers) to `name`, confirmed by the mechanism.
    fn publish(&self, name: &str, unit: Unit) -> impl Future<Output = ()> + Send;

    /// A consumer of `name`.
    fn consume(&self, name: &str) -> impl Future<Output = Self::Source> + Send;

    /// The transport's operator view of a dead letter.
    type DeadLetters: DeadLetters + 'static;

    /// The operator view of `name`'s dead letter: every check reads the dead letter through it,
    /// and [`operates_the_dead_letter`](super::operates_the_dead_letter) checks the whole API.
    fn dead_letter(&self, name: &str) -> impl Future<Output = Self::DeadLetters> + Send;

    /// The mechanism's redelivery timer, if it has one: how long a delivery may stay unsettled
    /// before the mechanism hands the unit to another consumer (JetStream's `ack_wait`, a
    /// stream's claim idle time). [`a_slow_handler_runs_once`](super::a_slow_handler_runs_once) runs a handler three times as
    /// long. `None` (the default): the mechanism waits for the settle, and the check does not
    /// apply.
    fn redelivery_timer(&self) -> Option<Duration> {
        None
    }

    /// Whether a unit released at shutdown (its run cut short by the drain deadline) has that
    /// delivery counted: `true` where the mechanism counts every return (a quorum queue, a
    /// stream's pending entry, JetStream); `false` where the runtime can hand it back uncounted
    /// ([`Settle::release`](crate::Settle::release): the in-memory queue, a classic queue, Kafka).
    fn counts_released_deliveries(&self) -> bool {
        true
    }

    /// Whether a unit released after the source stopped ([`Source::stop`]) may still be
    /// delivered to the stopping consumer, and so counted once more before another consumer gets
    /// it: `true` where the stop does not withdraw what was already asked for (a JetStream pull
    /// request stays the server's until it expires); `false` (the default) where the stop ends
    /// the subscription (RabbitMQ's `basic.cancel`) or nothing is delivered unasked (a stream or a
    /// log read on demand). [`units_waiting_at_shutdown_are_released_after_the_stop`](super::units_waiting_at_shutdown_are_released_after_the_stop) and
    /// [`a_shutdown_with_lanes_loses_nothing`](super::a_shutdown_with_lanes_loses_nothing) then check only that they are not lost and not
    /// acknowledged unrun (they may run more than once, and on a later delivery).
    fn may_deliver_released_units_to_a_stopped_source(&self) -> bool {
        false
    }

    /// Whether a delivery cut short by a crash counts: `true` where the mechanism keeps the count
    /// (a quorum queue, a stream's pending entry, a JetStream consumer, Kafka's attempts topic,
    /// where a delivery not ended cleanly is recorded); `false` where the count travels with the
    /// unit alone, because the count moves only when the unit is handed back (rule 2), and a
    /// crashed consumer hands nothing back: the unit is read again with the count it had.
    fn counts_crashed_deliveries(&self) -> bool {
        true
    }

    /// Whether the mechanism stamps a unit its producer did not (rule 4): `true` where it keeps
    /// an order of its own (a stream's sequence, a log's offset, an entry id, the in-memory
    /// broker's publish sequence); `false` where it keeps none (RabbitMQ), and only the
    /// producer's stamp ([`Unit::with_stamp`], published as [`crate::headers::STAMP`]) orders
    /// units. [`Fixture::publish`] must carry a unit's stamp either way.
    fn stamps_units(&self) -> bool {
        true
    }

    /// Whether publishing a unit whose id the mechanism still holds changes nothing (a database
    /// queue keyed by the unit's id): [`a_second_delivery_changes_nothing`](super::a_second_delivery_changes_nothing) then expects one run
    /// of a unit published twice. `false` (the default): the mechanism delivers each publish.
    fn deduplicates_publishes(&self) -> bool {
        false
    }
}

/// A web console under test, answering one request at a time (the `admin` console of
/// delivery-axum implements it under its `testing` feature).
pub trait WebConsole: Clone {
    /// The console's answer to `request`, its body read whole.
    fn answer(
        &self,
        request: http::Request<Bytes>,
    ) -> impl std::future::Future<Output = http::Response<Bytes>> + Send;
}
