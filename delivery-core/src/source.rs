//! The two traits a transport implements for the consumer runtime: a [`Source`] of units, and
//! for each unit a [`Settle`] handle (re-exported, with what else a transport is written with, in
//! [`transport`](crate::transport)).

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use crate::disposition::DeadLetterReason;
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// A stream of delivered units: a queue consumer, a stream read by a consumer group, the in-memory
/// broker.
pub trait Source: Send + 'static {
    /// The handle that settles one delivered unit.
    type Handle: Settle;

    /// The next delivered unit, waiting for one; `Ok(None)` once the source has ended.
    ///
    /// Must be cancel safe: the runtime polls it in a `select!` beside handlers in flight, and a
    /// cancelled call must lose no unit (keep received units in the source until returned).
    fn receive(
        &mut self,
    ) -> impl Future<Output = Result<Option<(Unit, Self::Handle)>, TransportError>> + Send;

    /// The delivery bound the mechanism itself enforces, declared with the deployment (a quorum
    /// queue's `x-delivery-limit + 1`, a JetStream consumer's `max_deliver`), if it keeps one.
    /// The runtime never allows more deliveries than this.
    fn max_deliveries(&self) -> Option<NonZeroU32> {
        None
    }

    /// A name for logs and metrics: the queue, stream or topic.
    fn name(&self) -> &str;

    /// What the spans of this source's units say about it (see [`crate::trace`]): its mechanism,
    /// the destination read ([`name`](Source::name) by default) and its consumer group. Asked
    /// once per run. By default the mechanism is `unknown`.
    fn messaging(&self) -> crate::trace::Messaging {
        crate::trace::Messaging::new("unknown", self.name())
    }

    /// Whether a unit still being handled must be kept alive, so that the mechanism does not hand
    /// it to another consumer while its first run may still succeed (rules 1 and 3): the runtime
    /// then calls [`Settle::still_handling`] on its handle at this pace while the handler runs.
    /// `None` (the default): the mechanism waits for the settle however long the handler takes.
    fn keep_alive(&self) -> Option<KeepAlive> {
        None
    }

    /// Stops taking deliveries (a broker subscription is cancelled), called once by the runtime
    /// at shutdown, after its last `receive` and before it gives back the units it still holds
    /// (see [`Settle::DELAYS_REDELIVERY`]): they then go to another consumer, not back to this
    /// one on its way out. Units already delivered and not yet received stay the source's to hand
    /// back when it is dropped. Nothing by default.
    fn stop(&mut self) -> impl Future<Output = ()> + Send {
        async {}
    }
}

/// The handle of one delivered unit: the only thing that can acknowledge it. The runtime holds it
/// while the handler runs and settles the unit through it; handlers never see it.
///
/// A transport provides **primitives** only — acknowledge, give back, copy to the dead letter.
/// The order they run in (a dead-letter copy confirmed before the original is acknowledged; a
/// unit whose copy failed given back, never dropped), the log line and the metrics are the
/// runtime's, written once for every transport in `consumer::settle`.
///
/// Dropping a handle without settling it must leave the unit to be redelivered, as a broker does
/// with the units of a consumer that went away.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a handle that settles a delivered unit",
    note = "a transport's handle implements `Settle` with its primitives: `ack`, `give_back`, `copy_to_dead_letter`"
)]
pub trait Settle: Sized + Send + 'static {
    /// Whether [`give_back`](Settle::give_back) delays the redelivery itself (a stream's pending
    /// entry left to idle, JetStream's `NAK` with a delay, the in-memory broker). A mechanism
    /// that cannot says `false` (RabbitMQ has no delayed requeue): the runtime then holds the
    /// unit for the wait itself — its handle kept, no place of the consumer's concurrency taken —
    /// and calls `give_back` with a zero wait when it is over, or at once at shutdown. The unit
    /// is counted returned only then, once it was.
    const DELAYS_REDELIVERY: bool = true;

    /// Acknowledges the unit: its effect is committed, and the mechanism forgets it.
    fn ack(self, unit: &Unit) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Tells the mechanism the unit is still being handled (JetStream's `+WPI`, a stream entry
    /// claimed again by its own consumer), at the pace of [`Source::keep_alive`]. Nothing by
    /// default.
    fn still_handling(
        &mut self,
        unit: &Unit,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        let _ = unit;
        async { Ok(()) }
    }

    /// Begins the transaction the unit's acknowledgement will commit in, for a handler that takes
    /// it ([`Handler::IN_TRANSACTION`](crate::Handler::IN_TRANSACTION)): called once, before
    /// the run. A database queue begins it in the slot it attached to the unit for its `Tx` extractor;
    /// [`ack`](Settle::ack) then writes the acknowledgement in it and commits the effect and the
    /// acknowledgement at once, and any other settle rolls it back. Where the mechanism has no
    /// such transaction (every broker), nothing: the handler's `Tx` then finds none, and the unit
    /// is malformed for it.
    ///
    /// A failure (the database unreachable) is the run's failure: the unit is returned, counted.
    fn begin(&mut self, unit: &Unit) -> impl Future<Output = Result<(), TransportError>> + Send {
        let _ = unit;
        async { Ok(()) }
    }

    /// Hands the unit back so the mechanism delivers it again no sooner than `after` (as near
    /// as the mechanism allows), counting the delivery. `after` is always zero where
    /// [`DELAYS_REDELIVERY`](Settle::DELAYS_REDELIVERY) is `false`.
    fn give_back(
        self,
        unit: &Unit,
        after: Duration,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Hands back a unit whose run was cut short at shutdown — it did not fail — so that the
    /// mechanism delivers it again, without counting this delivery where the mechanism allows
    /// (the in-memory queue; a RabbitMQ classic queue and Kafka, where the count travels with the
    /// unit). Where it does not (a quorum queue, a stream's pending entry, a JetStream consumer),
    /// this delivery counts like any other: a unit cut short on its last allowed delivery arrives
    /// past the bound and is dead-lettered as exhausted. By default, [`give_back`](Settle::give_back)
    /// with no wait.
    fn release(self, unit: &Unit) -> impl Future<Output = Result<(), TransportError>> + Send {
        self.give_back(unit, Duration::ZERO)
    }

    /// Puts an intact copy of the unit — payload, id and headers — in the dead letter, recording
    /// `reason`, the source and the delivery count (the names in [`crate::headers`]), and
    /// returns once the mechanism confirmed it holds the copy. The original stays unsettled: the
    /// runtime then [finishes](Settle::finish_dead_lettered) it, or gives it back if this failed.
    fn copy_to_dead_letter(
        &mut self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Settles the original once its copy is confirmed in the dead letter. By default it is
    /// acknowledged; a mechanism that must be told the unit is not to be delivered again in
    /// another way says so here (JetStream's `+TERM`).
    fn finish_dead_lettered(
        self,
        unit: &Unit,
    ) -> impl Future<Output = Result<(), TransportError>> + Send {
        self.ack(unit)
    }
}

/// How a source's units are kept alive while their handler runs ([`Source::keep_alive`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepAlive {
    /// How often: well inside the mechanism's redelivery timer (a third of it, say).
    pub every: Duration,
    /// For how long at most: past it, a handler that never ends (hung) no longer holds its unit,
    /// and the mechanism delivers it again.
    pub at_most: Duration,
}

impl KeepAlive {
    /// Every third of `timer` (the mechanism's redelivery timer; at least 10 ms), for at most
    /// `at_most`.
    pub fn within(timer: Duration, at_most: Duration) -> Self {
        KeepAlive {
            every: (timer / 3).max(Duration::from_millis(10)),
            at_most,
        }
    }
}
