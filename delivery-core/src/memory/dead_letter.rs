//! The operator's side of the in-memory broker's dead letter: the [`DeadLetters`] API, and the
//! same operations synchronously for a test's assertions.

use std::fmt;
use std::sync::Arc;

use super::queue::Entry;
use super::shared::Shared;
use crate::dead_letter::{Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection};
use crate::transport_error::TransportError;
use crate::unit::UnitId;

fn read(position: usize, entry: &Entry) -> Option<DeadLetter> {
    let dead = entry.dead.as_ref()?;
    let unit = entry
        .unit
        .clone()
        .with_headers(dead.original_headers.clone())
        .with_delivery_count(dead.delivery_count);
    let mut record = DeadLetter::new(unit, dead.source.to_string(), position.to_string());
    record.reason = Some(dead.reason.kind());
    record.detail = dead.reason.detail().to_owned();
    Some(record)
}

/// The dead letter of one queue (or log) of a [`MemoryBroker`](super::MemoryBroker).
///
/// It implements [`DeadLetters`]; its own methods do the same synchronously, for tests. A
/// record's position is its place in the dead letter, oldest first (it moves as older records
/// leave).
#[derive(Clone)]
pub struct MemoryDeadLetters {
    shared: Arc<Shared>,
    source: Arc<str>,
    name: String,
}

impl MemoryDeadLetters {
    pub(super) fn new(shared: Arc<Shared>, source: Arc<str>) -> Self {
        let name = shared.lock().queue(&source).dead_letter_name();
        MemoryDeadLetters {
            shared,
            source,
            name,
        }
    }

    /// The dead-letter queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Every unit in the dead letter, oldest first.
    pub fn list(&self) -> Vec<DeadLetter> {
        let mut state = self.shared.lock();
        state
            .dead_letter_queue(&self.source)
            .ready_entries()
            .enumerate()
            .filter_map(|(i, e)| read(i, e))
            .collect()
    }

    /// How many units the dead letter holds.
    pub fn len(&self) -> usize {
        let mut state = self.shared.lock();
        let dlq = state.dead_letter_queue(&self.source);
        let depth = dlq.depth();
        crate::dead_letter::depth::record(dlq.name(), depth as u64);
        depth
    }

    /// Whether the dead letter is empty.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The dead-lettered unit with `id`, without removing it.
    pub fn peek(&self, id: &str) -> Option<DeadLetter> {
        self.list().into_iter().find(|d| d.id().as_str() == id)
    }

    /// Moves the units with `id` back to the queue they came from, under the same id, with their
    /// published headers and a fresh delivery count. Returns how many moved.
    pub fn redrive(&self, id: &UnitId) -> usize {
        self.redrive_selected(Selection::Ids(std::slice::from_ref(id)), None)
            .len()
    }

    /// Moves every unit back to the queue it came from. Returns how many moved.
    pub fn redrive_all(&self) -> usize {
        self.redrive_selected(Selection::All, None).len()
    }

    /// Removes the units with `ids` for good. Returns how many were removed.
    pub fn purge(&self, ids: &[UnitId]) -> usize {
        let mut state = self.shared.lock();
        let dlq = state.dead_letter_queue(&self.source);
        let removed = dlq
            .remove_ready(|entry| ids.contains(entry.unit.id()))
            .len();
        crate::dead_letter::depth::record(dlq.name(), dlq.depth() as u64);
        removed
    }

    /// Moves the units with `id` back to the queue they came from as
    /// [`redrive`](Self::redrive) does, with `payload` in place of their own and the edit
    /// recorded in their headers ([`DeadLetters::redrive_edited`]). Returns how many moved.
    pub fn redrive_edited(&self, id: &UnitId, payload: bytes::Bytes) -> usize {
        self.redrive_selected(Selection::Ids(std::slice::from_ref(id)), Some(&payload))
            .len()
    }

    /// Moves the selected units back to their source, each edited to `edit` if given.
    fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&bytes::Bytes>,
    ) -> Vec<UnitId> {
        let mut state = self.shared.lock();
        let taken = state
            .dead_letter_queue(&self.source)
            .remove_ready(|entry| entry.dead.is_some() && selection.contains(entry.unit.id()));
        let mut moved = Vec::with_capacity(taken.len());
        for entry in taken {
            let dead = entry.dead.expect("only dead entries are taken");
            let unit = entry.unit.with_headers(dead.original_headers);
            let unit = match edit {
                Some(payload) => crate::dead_letter::edited(&unit, payload.clone()),
                None => unit,
            };
            moved.push(unit.id().clone());
            state.put(&dead.source, unit);
        }
        let dlq = state.dead_letter_queue(&self.source);
        crate::dead_letter::depth::record(dlq.name(), dlq.depth() as u64);
        moved
    }
}

impl DeadLetters for MemoryDeadLetters {
    fn name(&self) -> &str {
        &self.name
    }

    async fn count(&self) -> Result<u64, TransportError> {
        Ok(self.len() as u64)
    }

    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let start = match after {
            None => 0,
            Some(cursor) => {
                cursor.as_str().parse::<usize>().map_err(|_| {
                    TransportError::msg(
                        "listing the dead letter",
                        "not a cursor of this dead letter",
                    )
                })? + 1
            }
        };
        let all = MemoryDeadLetters::list(self);
        let more = all.len() > start.saturating_add(limit);
        let records = all.into_iter().skip(start).take(limit).collect();
        Ok(Listing::page(records, more))
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        Ok(MemoryDeadLetters::peek(self, id.as_str()))
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        Ok(RedriveReport::of(
            selection,
            self.redrive_selected(selection, None),
        ))
    }

    async fn redrive_edited(
        &self,
        id: &UnitId,
        payload: bytes::Bytes,
    ) -> Result<bool, TransportError> {
        Ok(MemoryDeadLetters::redrive_edited(self, id, payload) > 0)
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        Ok(MemoryDeadLetters::purge(self, ids) as u64)
    }
}

impl fmt::Debug for MemoryDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("MemoryDeadLetters")
            .field("source", &self.source)
            .field("name", &self.name)
            .finish()
    }
}

impl From<MemoryDeadLetters> for crate::dead_letter::AnyDeadLetters {
    fn from(dead_letters: MemoryDeadLetters) -> Self {
        crate::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
