//! The operator's view of a stream's dead letter — the [`DeadLetters`] API over the dead-letter
//! stream — and the sweep that moves units stranded on their last delivery into it.
//!
//! [`read`] holds the handle and reads the stored units; [`redrive`] publishes them back;
//! [`sweep`] moves stranded units in. This file ties them into [`DeadLetters`].

mod read;
mod redrive;
mod sweep;

pub use read::NatsDeadLetters;
pub use sweep::SweepReport;

use bytes::Bytes;

use delivery_core::dead_letter::{
    self, Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection,
};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

impl DeadLetters for NatsDeadLetters {
    fn name(&self) -> &str {
        &self.dead_letter_stream
    }

    /// The dead-letter stream's message count.
    async fn count(&self) -> Result<u64, TransportError> {
        let stream = self
            .context
            .get_stream(&self.dead_letter_stream)
            .await
            .map_err(|e| crate::error::NATS.error("reading the dead-letter stream", e))?;
        let depth = stream.cached_info().state.messages;
        delivery_core::transport::record_depth(&self.dead_letter_stream, depth);
        Ok(depth)
    }

    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let mut from = match after {
            None => 1,
            Some(cursor) => {
                delivery_core::transport::parse_cursor::<u64>(cursor)?.saturating_add(1)
            }
        };
        let mut records = Vec::new();
        while let Some(stored) = self.next_from(from).await? {
            if records.len() == limit {
                return Ok(Listing::page(records, true));
            }
            from = stored.sequence + 1;
            records.push(self.record(&stored));
        }
        Ok(Listing::page(records, false))
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        let mut from = 1;
        while let Some(stored) = self.next_from(from).await? {
            from = stored.sequence + 1;
            let record = self.record(&stored);
            if record.id() == id {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        dead_letter::redrive(self, selection).await
    }

    /// Deletes every record of each of `ids` from the dead-letter stream, by sequence.
    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        let mut removed = 0;
        for stored in self.all().await? {
            if ids.contains(self.record(&stored).id()) {
                self.delete(stored.sequence).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        dead_letter::redrive_edited(self, id, payload).await
    }
}

impl From<NatsDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: NatsDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
