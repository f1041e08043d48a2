//! The dead letter of one queue as the operator holds it: [`RabbitDeadLetters`].

use std::num::NonZeroU32;

use crate::connector::RabbitConnector;
use crate::topology::RabbitTopology;
#[cfg(doc)]
use delivery_core::dead_letter::DeadLetters;

/// The dead letter of one queue, for an operator: it implements [`DeadLetters`].
///
/// A RabbitMQ queue (quorum or classic) has no read that leaves a message where it is, so every
/// operation reads a **snapshot**: on a channel of its own — on a connection of its own when made
/// from a URL, or on your connection ([`RabbitConnector`]), left open — it takes every unit the
/// dead-letter queue holds, with a consumer that acknowledges nothing, and holds them all until
/// the operation is done; those removed (redriven or purged) are acknowledged, and the others are
/// handed back at once with one `basic.nack(multiple, requeue)`. Nothing is lost if an operation
/// dies: the broker hands back whatever it had not acknowledged.
///
/// - **Order and cursors do not depend on the queue's order** (a quorum queue puts handed-back
///   units back in an order of its own): the records are sorted by a key read from the unit
///   itself — when it was dead-lettered ([`dead_lettered_at`](delivery_core::dead_letter::DeadLetter::dead_lettered_at);
///   units without a recorded time, dead-lettered by an earlier version, come first), then its
///   id, then a digest
///   of its body and headers, then its place among identical copies. A record's
///   [`position`](delivery_core::dead_letter::DeadLetter::position) is that key as text, and a [`Cursor`](delivery_core::dead_letter::Cursor) points after it:
///   pages follow one another exactly across reads, and a unit removed between two pages does
///   not shift the next page. A cursor of another version (a place from the head) is refused.
/// - **One reader at a time**: every operation, [`count`](DeadLetters::count) included, first
///   takes the dead letter's lock — the exclusive consumer of the queue
///   `<dead-letter queue>.reader` (declared where missing, not durable, dropped by the broker an
///   hour after its last use; the broker refuses a second exclusive consumer, and ends it with
///   its connection if the reader dies), and a lock in the process — and releases it once the
///   units it handed back are ready again. So a count is exact, and a bulk action sees every
///   unit: none is held by another reader at that moment. An operation waits up to a minute for
///   another reader before it fails. Credentials without the permissions on that name read
///   without the broker's lock (with a warning).
/// - The unit is the message as published: its `message_id` (or the digest the source uses for a
///   unit without one), body, and own headers — without this crate's `x-dead-letter-*` and
///   `x-delivery-count`, and the broker's `x-acquired-count`, `x-death`, `x-first-death-*`,
///   `x-last-death-*`.
/// - Its [`reason`](delivery_core::dead_letter::DeadLetter::reason), [`detail`](delivery_core::dead_letter::DeadLetter::detail),
///   [`source`](delivery_core::dead_letter::DeadLetter::source) and delivery count are the `x-dead-letter-*` headers the
///   consumer recorded. A unit the broker dead-lettered itself (past the quorum queue's
///   `x-delivery-limit`) is read from its `x-death` header: `exhausted`, on the topology's last
///   delivery, from the queue named there; for the broker's other reasons (`rejected`, `expired`,
///   `maxlen`) the reason is `None` and the detail names the broker's reason.
/// - [`dead_lettered_at`](delivery_core::dead_letter::DeadLetter::dead_lettered_at) is the consumer's `x-dead-letter-at`
///   header (milliseconds since the epoch, written when it dead-letters a unit), else the latest
///   `x-death` entry's time when the broker dead-lettered the unit, else the message's
///   `timestamp` property if its publisher set one, else `None` (a unit dead-lettered by a
///   version before the header). The broker's and the publisher's are whole seconds.
/// - A redrive publishes each selected unit, in the listing's order, to its source queue under a
///   publisher confirm (same `message_id`, body and properties, without the headers above, so
///   the source counts its deliveries afresh) and acknowledges the dead-letter copy only once the
///   broker confirmed it; if the acknowledgement is lost, the unit is in both, never in neither.
///   An edited redrive does the same with the operator's body and the edit's headers, and sets
///   the `message_id` to the unit's id (a unit published without one keeps the id its first body
///   gave it). If a publish fails, the error names the unit and how many were redriven before it.
/// - A purge acknowledges the matching units: they are gone for good.
///
/// **Deliveries.** A quorum queue counts a handed-back unit: on RabbitMQ 3.x its
/// `x-delivery-count` header grows by one with every read (the record leaves it out, and the topology
/// declares the dead-letter queue without a delivery limit, so nothing comes of it). RabbitMQ 4.3
/// and later count only failed deliveries, and a `basic.nack` with requeue is not one. RabbitMQ
/// 4.0 to 4.2 give every quorum queue a delivery limit of 20 by default and count every hand-back
/// against it: there, set the dead-letter queue's limit off with a policy
/// (`rabbitmqctl set_policy dlq-unlimited '\.dlq$' '{"delivery-limit": -1}' --apply-to quorum_queues`),
/// or the 21st read drops its units.
///
/// **Cost.** Every operation holds the whole dead letter in memory for its duration, and every
/// page is a read of the whole dead letter (the broker delivers it at once: a list of 1 000
/// units took 0.12-0.40 s on a local RabbitMQ 3.10, quorum or classic, and ten pages of 100
/// 1.4-4.6 s, on a loaded two-core machine).
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::transport::TransportError> {
/// use delivery::dead_letter::{DeadLetters, Selection};
/// use delivery::rabbitmq::{RabbitDeadLetters, RabbitTopology};
/// use delivery::UnitId;
///
/// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// let dead = RabbitDeadLetters::new(url, &RabbitTopology::new("orders"));
/// for record in dead.list(10, None).await?.records {
///     println!("{record}");
/// }
/// let report = dead.redrive(Selection::Ids(&[UnitId::new("order-42")])).await?;
///
/// // The same through a connection of yours (reads open channels on it; it stays open):
/// let connection = delivery::rabbitmq::connect(url).await?; // or `lapin::Connection::connect`
/// let yours = RabbitDeadLetters::new(connection, &RabbitTopology::new("orders"));
/// println!("{} dead", yours.count().await?);
/// # let _ = report; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RabbitDeadLetters {
    pub(super) connector: RabbitConnector,
    pub(super) queue: String,
    pub(super) dead_letter_queue: String,
    /// The most deliveries the topology allows: the delivery on which the broker dead-letters a
    /// unit past its `x-delivery-limit`.
    pub(super) max_deliveries: NonZeroU32,
}

impl RabbitDeadLetters {
    /// The dead letter of `topology.queue` through `connector`: a URL, your own lapin
    /// `Connection` or a factory ([`RabbitConnector`]).
    pub fn new(connector: impl Into<RabbitConnector>, topology: &RabbitTopology) -> Self {
        RabbitDeadLetters {
            connector: connector.into(),
            queue: topology.queue.clone(),
            dead_letter_queue: topology.dead_letter_queue_name(),
            max_deliveries: topology.max_deliveries(),
        }
    }
}
