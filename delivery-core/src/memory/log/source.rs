//! A member of a consumer group reading a log, and the handle that settles each unit it received.

use std::fmt;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::state::{Delivered, Lane, Next, SettleError};
use crate::disposition::DeadLetterReason;
use crate::memory::shared::Shared;
use crate::source::{Settle, Source};
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// A consumer of a log of a [`MemoryBroker`](crate::memory::MemoryBroker), as one member of a
/// consumer group: made by [`MemoryBroker::consume_log`](crate::memory::MemoryBroker::consume_log).
///
/// It reads the partitions the group assigned it — and their retry partitions — from the
/// group's committed offset, in offset order per partition, taking turns between partitions.
/// Each unit it hands out is tracked in its commit [watermark](crate::offset::Watermarks); the
/// group's offset advances as units become final, never past one that is not. Dropping the
/// source leaves the group: its partitions go to the other members, which read them from the
/// committed offset, so every unit it had not finished is delivered again.
///
/// ```
/// use delivery::memory::{LogConfig, MemoryBroker};
/// use delivery::{transport::Settle, transport::Source, Unit};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let broker = MemoryBroker::new();
/// broker.declare_log("orders", LogConfig::default().max_deliveries(3)).unwrap();
/// broker.append("orders", Unit::new("o-1", "{}"));
/// let mut source = broker.consume_log("orders", "billing");
/// assert_eq!(source.max_deliveries().map(|n| n.get()), Some(3));
/// let (unit, handle) = source.receive().await.unwrap().unwrap();
/// assert_eq!(unit.id().as_str(), "o-1");
/// handle.ack(&unit).await.unwrap();
/// assert_eq!(broker.committed("orders", "billing", 0), Some(1));
/// # }
/// ```
pub struct MemoryLogSource {
    shared: Arc<Shared>,
    topic: Arc<str>,
    group: Arc<str>,
    member: u64,
    bound: NonZeroU32,
    changed: Arc<Notify>,
}

impl MemoryLogSource {
    pub(super) fn join(shared: Arc<Shared>, topic: Arc<str>, group: Arc<str>) -> Self {
        let (member, bound, changed) = {
            let mut state = shared.lock();
            state.next_consumer += 1;
            let member = state.next_consumer;
            let log = state.log(&topic);
            log.join(&group, member);
            (member, log.config().delivery_bound(), log.changed())
        };
        MemoryLogSource {
            shared,
            topic,
            group,
            member,
            bound,
            changed,
        }
    }

    /// The partitions the group currently assigns to this member, in order. They change when a
    /// member joins or leaves the group.
    ///
    /// ```
    /// use delivery::memory::{LogConfig, MemoryBroker};
    ///
    /// let broker = MemoryBroker::new();
    /// broker.declare_log("orders", LogConfig::default().partitions(4)).unwrap();
    /// let first = broker.consume_log("orders", "billing");
    /// assert_eq!(first.assignment(), [0, 1, 2, 3]);
    /// let second = broker.consume_log("orders", "billing");
    /// assert_eq!(first.assignment(), [0, 2]);
    /// assert_eq!(second.assignment(), [1, 3]);
    /// drop(first);
    /// assert_eq!(second.assignment(), [0, 1, 2, 3]);
    /// ```
    pub fn assignment(&self) -> Vec<u32> {
        self.shared
            .lock()
            .log(&self.topic)
            .assignment(&self.group, self.member)
    }

    /// The consumer group this source is a member of.
    ///
    /// ```
    /// use delivery::memory::MemoryBroker;
    ///
    /// let broker = MemoryBroker::new();
    /// assert_eq!(broker.consume_log("orders", "billing").group(), "billing");
    /// ```
    pub fn group(&self) -> &str {
        &self.group
    }
}

impl fmt::Debug for MemoryLogSource {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryLogSource")
            .field("topic", &self.topic)
            .field("group", &self.group)
            .field("member", &self.member)
            .finish()
    }
}

impl Source for MemoryLogSource {
    type Handle = MemoryLogHandle;

    /// Cancel safe: a unit is taken from the log and handed out in one step under the broker's
    /// lock, with no wait in between.
    async fn receive(&mut self) -> Result<Option<(Unit, MemoryLogHandle)>, TransportError> {
        loop {
            let changed = self.changed.clone();
            let notified = changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before looking, so an append between the look and the wait wakes us.
            notified.as_mut().enable();
            let next = {
                let mut state = self.shared.lock();
                // A unit delivered past the bound already (a crash loop) is handed out too: the
                // runtime dead-letters it before any handler runs.
                state
                    .log(&self.topic)
                    .next(&self.group, self.member, Instant::now())
            };
            match next {
                Next::Deliver(unit, delivered) => {
                    let handle = MemoryLogHandle {
                        shared: self.shared.clone(),
                        topic: self.topic.clone(),
                        group: self.group.clone(),
                        member: self.member,
                        delivered,
                        settled: false,
                    };
                    return Ok(Some((unit, handle)));
                }
                Next::Wait(Some(due)) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(due) => {}
                    }
                }
                Next::Wait(None) => notified.await,
                Next::Broken(error) => {
                    return Err(TransportError::new("tracking a received offset", error));
                }
            }
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.bound)
    }

    fn name(&self) -> &str {
        &self.topic
    }

    fn messaging(&self) -> crate::trace::Messaging {
        crate::trace::Messaging::new("memory", &*self.topic).consumer_group(&*self.group)
    }
}

impl Drop for MemoryLogSource {
    fn drop(&mut self) {
        self.shared
            .lock()
            .log(&self.topic)
            .leave(&self.group, self.member);
    }
}

/// The handle of one unit delivered by a [`MemoryLogSource`]. Only the runtime holds it.
///
/// Settling it carries out the disposition and only then makes the unit's offset final, which
/// lets the group's committed offset move past it. Dropping it unsettled commits nothing past
/// the unit: its member reads the partition again from the committed offset.
///
/// ```
/// use delivery::memory::MemoryBroker;
/// use delivery::{transport::Settle, transport::Source, Unit};
/// use std::time::Duration;
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() {
/// let broker = MemoryBroker::new();
/// broker.append("orders", Unit::new("o-1", "{}"));
/// let mut source = broker.consume_log("orders", "billing");
/// let (unit, handle) = source.receive().await.unwrap().unwrap();
/// drop(handle); // unsettled: nothing is committed, the unit comes again
/// assert_eq!(broker.committed("orders", "billing", 0), None);
/// let (again, handle) = source.receive().await.unwrap().unwrap();
/// assert_eq!((again.id(), again.delivery_count().get()), (unit.id(), 2));
/// // Returned: re-appended to the retry log with its count; offset 0 is final.
/// handle.give_back(&again, Duration::ZERO).await.unwrap();
/// assert_eq!(broker.committed("orders", "billing", 0), Some(1));
/// let (retried, _handle) = source.receive().await.unwrap().unwrap();
/// assert_eq!(retried.delivery_count().get(), 3);
/// # }
/// ```
pub struct MemoryLogHandle {
    shared: Arc<Shared>,
    topic: Arc<str>,
    group: Arc<str>,
    member: u64,
    delivered: Delivered,
    settled: bool,
}

impl fmt::Debug for MemoryLogHandle {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (lane, partition) = self.delivered.key;
        f.debug_struct("MemoryLogHandle")
            .field("topic", &self.topic)
            .field("retry_log", &(lane == Lane::Retry))
            .field("partition", &partition)
            .field("offset", &self.delivered.offset)
            .finish()
    }
}

impl crate::marker::AckHandle for MemoryLogHandle {}

impl MemoryLogHandle {
    fn settle(&mut self, returned_after: Option<Duration>) -> Result<(), TransportError> {
        self.settled = true;
        let result = self.shared.lock().settle_log(
            &self.topic,
            &self.group,
            self.member,
            &self.delivered,
            returned_after,
        );
        result.map_err(settle_error)
    }
}

fn settle_error(error: SettleError) -> TransportError {
    match error {
        SettleError::NotOwned => TransportError::msg(
            "settling a unit",
            "its partition is no longer this consumer's (it left the group, or a rebalance \
             moved the partition); the group delivers the unit again from the committed offset",
        ),
        SettleError::Offset(error) => TransportError::new("finishing the unit's offset", error),
    }
}

impl Settle for MemoryLogHandle {
    async fn ack(mut self, _unit: &Unit) -> Result<(), TransportError> {
        self.settle(None)
    }

    async fn give_back(mut self, _unit: &Unit, after: Duration) -> Result<(), TransportError> {
        self.settle(Some(after))
    }

    async fn copy_to_dead_letter(
        &mut self,
        _unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        let copied = self.shared.lock().copy_log_to_dead_letter(
            &self.topic,
            &self.group,
            self.member,
            &self.delivered,
            reason,
        );
        copied.map_err(settle_error)
    }
}

impl Drop for MemoryLogHandle {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        self.shared
            .lock()
            .log(&self.topic)
            .rewind(&self.group, self.member, &self.delivered);
    }
}
