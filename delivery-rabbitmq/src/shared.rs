//! The state a [`RabbitSource`](crate::RabbitSource) shares with the handles it gives out: its
//! queues, its publisher, and the deliveries whose handle was dropped unsettled.

use std::sync::Arc;

use lapin::Acker;

use crate::acks::ChannelAcks;
use crate::publish::ConfirmedPublisher;

pub(crate) struct Shared {
    pub(crate) queue: String,
    pub(crate) dead_letter_queue: String,
    pub(crate) publisher: ConfirmedPublisher,
    /// A classic queue: the count travels with the unit, and a return is a confirmed copy.
    pub(crate) classic: bool,
    /// Deliveries whose handle was dropped unsettled: returned by the source's next `receive`,
    /// so a source being dropped with them (a crash) leaves them to the connection's close and
    /// the broker counts the return once.
    pub(crate) dropped: std::sync::Mutex<Vec<Dropped>>,
    /// Whether `dropped` may hold any, so `receive` takes the lock only then.
    pub(crate) any_dropped: std::sync::atomic::AtomicBool,
}

/// A delivery whose handle was dropped unsettled, with its coalesced acks if any.
pub(crate) type Dropped = (Acker, Option<(Arc<ChannelAcks>, u64)>);
