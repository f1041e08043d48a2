//! The operator's view of a dead-letter topic — the [`DeadLetters`] API — read without consuming
//! it (no group, no commit), with the records an operator removed kept in a topic of their own.
//!
//! [`read`] holds the handle and reads the records; [`redrive`] publishes them back and records
//! them removed; [`stored`] is the storage underneath. This file ties them into [`DeadLetters`].

mod read;
mod redrive;
mod stored;

pub use read::KafkaDeadLetters;

use bytes::Bytes;

use self::stored::Position;
use delivery_core::dead_letter::{
    self, Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection,
};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

impl DeadLetters for KafkaDeadLetters {
    fn name(&self) -> &str {
        &self.reader.dead_letter_topic
    }

    /// Reads the whole dead letter to count it (see the [type docs](KafkaDeadLetters)).
    async fn count(&self) -> Result<u64, TransportError> {
        let depth = self
            .reading(|reader| {
                let removed = reader.removed()?;
                let mut depth = 0u64;
                reader.scan(None, &removed, |_| {
                    depth += 1;
                    true
                })?;
                Ok(depth)
            })
            .await?;
        delivery_core::transport::record_depth(&self.reader.dead_letter_topic, depth);
        Ok(depth)
    }

    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let from = match after {
            None => None,
            Some(cursor) => {
                Some(delivery_core::transport::parse_cursor::<Position>(cursor)?.next())
            }
        };
        let (stored, more) = self
            .reading(move |reader| {
                let removed = reader.removed()?;
                let mut page = Vec::new();
                let mut more = false;
                reader.scan(from, &removed, |stored| {
                    if page.len() == limit {
                        more = true;
                        return false;
                    }
                    page.push(stored);
                    true
                })?;
                Ok((page, more))
            })
            .await?;
        let records = stored.iter().map(|s| self.record(s)).collect();
        Ok(Listing::page(records, more))
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        let wanted = id.clone();
        let found = self
            .reading(move |reader| {
                let removed = reader.removed()?;
                let mut found = None;
                reader.scan(None, &removed, |stored| {
                    if stored.id(&reader.dead_letter_topic) == wanted {
                        found = Some(stored);
                        return false;
                    }
                    true
                })?;
                Ok(found)
            })
            .await?;
        Ok(found.map(|s| self.record(&s)))
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        dead_letter::redrive(self, selection).await
    }

    /// Records every dead letter of each of `ids` removed (see the [type docs](KafkaDeadLetters)).
    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        self.removed_topic_exists().await?;
        let producer = self.producer()?;
        let mut removed = 0;
        for (stored, record) in self.all().await? {
            if ids.contains(record.id()) {
                self.mark_removed(&producer, stored.position, record.id(), "purged")
                    .await?;
                removed += 1;
            }
        }
        Ok(removed)
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        dead_letter::redrive_edited(self, id, payload).await
    }
}

impl From<KafkaDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: KafkaDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
