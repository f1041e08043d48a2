//! The operator's side of the in-memory broker's dead letter: list, peek, redrive.

use std::fmt;
use std::sync::Arc;

use super::Shared;
use super::queue::Entry;
use crate::disposition::DeadLetterReason;
use crate::unit::{DeliveryCount, Unit, UnitId};

/// A unit in a dead letter, as an operator reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetter {
    /// The unit exactly as it was published: same id, payload and headers.
    pub unit: Unit,
    /// Why it was dead-lettered.
    pub reason: DeadLetterReason,
    /// The queue it came from, where a redrive sends it back.
    pub source: String,
    /// How many deliveries it had had.
    pub delivery_count: DeliveryCount,
}

impl fmt::Display for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{id}  from {source}  after {count} deliver{ies}  {reason}  payload: {payload}",
            id = self.unit.id(),
            source = self.source,
            count = self.delivery_count,
            ies = if self.delivery_count.get() == 1 {
                "y"
            } else {
                "ies"
            },
            reason = self.reason,
            payload = String::from_utf8_lossy(self.unit.payload()),
        )
    }
}

fn read(entry: &Entry) -> Option<DeadLetter> {
    let dead = entry.dead.as_ref()?;
    Some(DeadLetter {
        unit: entry
            .unit
            .clone()
            .with_headers(dead.original_headers.clone()),
        reason: dead.reason.clone(),
        source: dead.source.to_string(),
        delivery_count: dead.delivery_count,
    })
}

/// The dead letter of one queue of a [`MemoryBroker`](super::MemoryBroker).
#[derive(Clone)]
pub struct DeadLetters {
    shared: Arc<Shared>,
    source: Arc<str>,
}

impl DeadLetters {
    pub(super) fn new(shared: Arc<Shared>, source: Arc<str>) -> Self {
        DeadLetters { shared, source }
    }

    /// The dead-letter queue's name.
    pub fn name(&self) -> String {
        self.shared.lock().queue(&self.source).dead_letter_name()
    }

    /// Every unit in the dead letter, oldest first.
    pub fn list(&self) -> Vec<DeadLetter> {
        let mut state = self.shared.lock();
        state
            .dead_letter_queue(&self.source)
            .ready_entries()
            .filter_map(read)
            .collect()
    }

    /// How many units the dead letter holds.
    pub fn len(&self) -> usize {
        self.shared.lock().dead_letter_queue(&self.source).depth()
    }

    /// Whether the dead letter is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dead-lettered unit with `id`, without removing it.
    pub fn peek(&self, id: &str) -> Option<DeadLetter> {
        let mut state = self.shared.lock();
        state
            .dead_letter_queue(&self.source)
            .ready_entries()
            .filter_map(read)
            .find(|d| d.unit.id().as_str() == id)
    }

    /// Moves the units with `id` back to the queue they came from, under the same id, with their
    /// published headers and a fresh delivery count. Returns how many moved.
    pub fn redrive(&self, id: &UnitId) -> usize {
        self.redrive_where(|d| d.unit.id() == id)
    }

    /// Moves every unit back to the queue it came from. Returns how many moved.
    pub fn redrive_all(&self) -> usize {
        self.redrive_where(|_| true)
    }

    fn redrive_where(&self, pred: impl Fn(&DeadLetter) -> bool) -> usize {
        let mut state = self.shared.lock();
        let taken = state
            .dead_letter_queue(&self.source)
            .remove_ready(|entry| read(entry).is_some_and(|d| pred(&d)));
        let moved = taken.len();
        for entry in taken {
            let dead = entry.dead.expect("only dead entries are taken");
            let unit = entry.unit.with_headers(dead.original_headers);
            state.put(&dead.source, unit);
        }
        let dlq = state.dead_letter_queue(&self.source);
        crate::dead_letter_depth::record(dlq.name(), dlq.depth() as u64);
        moved
    }
}

impl fmt::Debug for DeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("DeadLetters")
            .field("source", &self.source)
            .finish()
    }
}
