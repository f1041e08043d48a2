//! A consumer of one in-memory queue, and the handle that settles each unit it received.

use std::collections::VecDeque;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::queue::Entry;
use super::shared::Shared;
use crate::disposition::DeadLetterReason;
use crate::source::{Settle, Source};
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// A consumer of one queue of a [`MemoryBroker`](super::MemoryBroker).
///
/// It takes up to `prefetch` units from the queue at a time (default 32); each counts as
/// delivered when taken. Dropping the source returns the units it took and has not handed out;
/// dropping a [`MemoryHandle`] unsettled returns its unit — both are redelivered, with the
/// delivery counted, as a broker does for a consumer that went away.
pub struct MemorySource {
    shared: Arc<Shared>,
    queue: Arc<str>,
    consumer: u64,
    prefetch: usize,
    bound: NonZeroU32,
    buffer: VecDeque<(Unit, u64)>,
    changed: Arc<Notify>,
}

impl MemorySource {
    pub(super) fn new(shared: Arc<Shared>, queue: Arc<str>, consumer: u64) -> Self {
        let (changed, bound) = {
            let mut state = shared.lock();
            let q = state.queue(&queue);
            (q.changed(), q.config().delivery_bound())
        };
        MemorySource {
            shared,
            queue,
            consumer,
            prefetch: 32,
            bound,
            buffer: VecDeque::new(),
            changed,
        }
    }

    /// How many units to take from the queue at once (at least 1).
    pub fn prefetch(mut self, n: usize) -> Self {
        self.prefetch = n.max(1);
        self
    }

    fn handle(&self, tag: u64) -> MemoryHandle {
        MemoryHandle {
            shared: self.shared.clone(),
            queue: self.queue.clone(),
            tag,
            settled: false,
        }
    }
}

impl Source for MemorySource {
    type Handle = MemoryHandle;

    async fn receive(&mut self) -> Result<Option<(Unit, MemoryHandle)>, TransportError> {
        loop {
            if let Some((unit, tag)) = self.buffer.pop_front() {
                return Ok(Some((unit, self.handle(tag))));
            }
            let changed = self.changed.clone();
            let notified = changed.notified();
            let mut notified = std::pin::pin!(notified);
            // Registered before looking, so a publish between the look and the wait wakes us.
            notified.as_mut().enable();
            let next_due = {
                let mut state = self.shared.lock();
                let q = state.queue(&self.queue);
                let next_due = q.promote_due(Instant::now());
                q.take(self.consumer, self.prefetch, &mut self.buffer);
                next_due
            };
            if !self.buffer.is_empty() {
                continue;
            }
            match next_due {
                Some(due) => {
                    tokio::select! {
                        _ = notified => {}
                        _ = tokio::time::sleep_until(due) => {}
                    }
                }
                None => notified.await,
            }
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.bound)
    }

    fn name(&self) -> &str {
        &self.queue
    }

    fn messaging(&self) -> crate::trace::Messaging {
        crate::trace::Messaging::new("memory", &*self.queue)
    }
}

impl Drop for MemorySource {
    fn drop(&mut self) {
        if self.buffer.is_empty() {
            return;
        }
        let mut state = self.shared.lock();
        for (_, tag) in self.buffer.drain(..) {
            let q = state.queue(&self.queue);
            if let Some(entry) = q.release(tag) {
                requeue(&mut state, &self.queue, entry, None);
            }
        }
    }
}

/// The handle of one unit delivered by a [`MemorySource`]. Only the runtime holds it.
pub struct MemoryHandle {
    shared: Arc<Shared>,
    queue: Arc<str>,
    tag: u64,
    settled: bool,
}

impl std::fmt::Debug for MemoryHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MemoryHandle")
            .field("queue", &self.queue)
            .field("tag", &self.tag)
            .finish()
    }
}

impl crate::marker::AckHandle for MemoryHandle {}

fn requeue(state: &mut super::shared::State, queue: &str, entry: Entry, due: Option<Instant>) {
    if let Some(dead) = state.queue(queue).requeue(entry, due) {
        move_to_dead_letter(state, queue, dead);
    }
}

fn move_to_dead_letter(state: &mut super::shared::State, queue: &str, dead: Entry) {
    let dlq = state.dead_letter_queue(queue);
    dlq.push_ready(dead);
    crate::dead_letter::depth::record(dlq.name(), dlq.depth() as u64);
}

impl MemoryHandle {
    /// Takes the unit out of this consumer's hands: from now on it is settled.
    fn take_out(
        &mut self,
    ) -> (
        std::sync::MutexGuard<'_, super::shared::State>,
        Result<Entry, TransportError>,
    ) {
        self.settled = true;
        let mut state = self.shared.lock();
        let entry = state.queue(&self.queue).release(self.tag).ok_or_else(gone);
        (state, entry)
    }
}

fn gone() -> TransportError {
    TransportError::msg(
        "settling a unit",
        "the unit is no longer held by this consumer; the broker will redeliver it",
    )
}

impl Settle for MemoryHandle {
    async fn ack(mut self, _unit: &Unit) -> Result<(), TransportError> {
        self.take_out().1.map(drop)
    }

    async fn give_back(mut self, _unit: &Unit, after: Duration) -> Result<(), TransportError> {
        let queue = self.queue.clone();
        let (mut state, entry) = self.take_out();
        let entry = entry?;
        let due = (!after.is_zero()).then(|| Instant::now() + after);
        requeue(&mut state, &queue, entry, due);
        Ok(())
    }

    /// Back at the head of the queue, this delivery not counted.
    async fn release(mut self, _unit: &Unit) -> Result<(), TransportError> {
        let queue = self.queue.clone();
        let (mut state, entry) = self.take_out();
        let mut entry = entry?;
        entry.deliveries = entry.deliveries.saturating_sub(1);
        requeue(&mut state, &queue, entry, None);
        Ok(())
    }

    async fn copy_to_dead_letter(
        &mut self,
        _unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        let mut state = self.shared.lock();
        let entry = state
            .queue(&self.queue)
            .held(self.tag)
            .cloned()
            .ok_or_else(gone)?;
        let dead = entry.into_dead(self.queue.clone(), reason.clone());
        move_to_dead_letter(&mut state, &self.queue, dead);
        Ok(())
    }
}

impl Drop for MemoryHandle {
    fn drop(&mut self) {
        if self.settled {
            return;
        }
        let mut state = self.shared.lock();
        if let Some(entry) = state.queue(&self.queue).release(self.tag) {
            requeue(&mut state, &self.queue, entry, None);
        }
    }
}
