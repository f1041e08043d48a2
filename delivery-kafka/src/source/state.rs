//! What the source holds between calls: units waiting out their backoff, each partition's run
//! (read one unit at a time after a crash, or not), and a unit whose placing a cancelled call left
//! unfinished.

use std::collections::BTreeMap;

use tokio::time::Instant;

use crate::attempts::Attempt;
use crate::settle::KafkaHandle;
use delivery_core::unit::Unit;

/// A unit received and not placed yet (see [`KafkaSource::place`](super::KafkaSource::place)).
pub(super) struct Placing {
    pub(super) unit: Unit,
    pub(super) handle: KafkaHandle,
    pub(super) due: Option<Instant>,
    /// The partition's last recorded delivery, once read: a call resumed after a cancellation
    /// does not read it again (it may be the record the cancelled call wrote).
    pub(super) last: Option<Option<Attempt>>,
}

/// After a run that did not finish its partition's first unit (it crashed, or lost the partition
/// while handling it), this many units of the partition are handed out one at a time.
pub(super) const ALONE_AFTER_A_CRASH: usize = 100;

/// A partition's units since it was assigned to this source (one generation of the book).
pub(super) struct Run {
    pub(super) generation: u64,
    /// `Some` while the partition is read one unit at a time.
    pub(super) alone: Option<Alone>,
}

/// A partition read one unit at a time: each is handed out once the one before it is final, its
/// partition's offset committed up to it and its delivery recorded in the attempts topic.
pub(super) struct Alone {
    /// Units still to hand out alone before the partition's units run concurrently again.
    pub(super) left: usize,
    /// Units received and not handed out yet, by offset.
    pub(super) queue: BTreeMap<u64, Waiting>,
    /// The last delivery recorded for the partition.
    pub(super) last: Option<Attempt>,
    /// The partition is paused: the queue holds more than the units left to hand out alone.
    pub(super) paused: bool,
}

pub(super) struct Waiting {
    pub(super) due: Instant,
    pub(super) arrival: u64,
    pub(super) unit: Unit,
    pub(super) handle: KafkaHandle,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.arrival) == (other.due, other.arrival)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.arrival).cmp(&(other.due, other.arrival))
    }
}
