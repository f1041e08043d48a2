//! The operator's view of a queue's dead letter: [`DeadLetters`] over the dead-letter queue,
//! read as a snapshot held unacknowledged on one channel, and the depth gauge.

mod lock;
mod pass;
mod queue;
mod record;
mod redrive;

pub use queue::RabbitDeadLetters;

use bytes::Bytes;

use delivery_core::dead_letter::{
    self, Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection,
};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

use record::{Key, Taken};

impl DeadLetters for RabbitDeadLetters {
    /// The dead-letter queue's name.
    fn name(&self) -> &str {
        &self.dead_letter_queue
    }

    /// The units in the dead-letter queue (a passive `queue.declare`, under the dead letter's
    /// lock, so no other reader holds any at that moment).
    async fn count(&self) -> Result<u64, TransportError> {
        let reading = self.hold().await?;
        let ready = self.ready(&reading.control).await;
        reading.release().await;
        let depth = ready?;
        delivery_core::transport::record_depth(&self.dead_letter_queue, depth);
        Ok(depth)
    }

    /// A snapshot of every unit, keeping the page's.
    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let start = match after {
            None => None,
            Some(cursor) => Some(Key::parse(cursor.as_str()).ok_or_else(|| {
                TransportError::msg(
                    "listing the dead letter",
                    format!(
                        "`{}` is not a cursor of a RabbitMQ dead letter (a record's position)",
                        cursor.as_str()
                    ),
                )
            })?),
        };
        self.with_pass(async |pass| {
            let mut records = Vec::new();
            let mut more = false;
            let after = |t: &&mut Taken| start.as_ref().is_none_or(|s| t.key > *s);
            for taken in pass.units.iter_mut().filter(after) {
                if records.len() == limit {
                    more = true;
                    break;
                }
                records.push(self.record(taken));
            }
            Ok(Listing::page(records, more))
        })
        .await
    }

    /// A snapshot of every unit, keeping the first with `id`.
    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        self.with_pass(async |pass| {
            Ok(pass
                .units
                .iter_mut()
                .find(|t| t.key.id == *id)
                .map(|taken| self.record(taken)))
        })
        .await
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        dead_letter::redrive(self, selection).await
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.with_pass(async |pass| {
            let mut purged = 0;
            for index in 0..pass.units.len() {
                if ids.contains(&pass.units[index].key.id) {
                    pass.remove(self, index).await.map_err(|e| {
                        TransportError::msg(
                            "purging",
                            format!("{e} ({purged} units were purged before it)"),
                        )
                    })?;
                    purged += 1;
                }
            }
            Ok(purged)
        })
        .await
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        dead_letter::redrive_edited(self, id, payload).await
    }
}

impl From<RabbitDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: RabbitDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
