//! The redrive's primitives: a snapshot, each selected unit published back to its source under a
//! confirm, and its dead-letter copy acknowledged once the broker confirmed it.

use bytes::Bytes;

use crate::codec;
use crate::publish::ConfirmedPublisher;
use delivery_core::dead_letter::{DeadLetter, Page, RedriveLog, Republished};
use delivery_core::transport::TransportError;

use super::pass::Pass;
use super::queue::RabbitDeadLetters;

/// What a redrive holds: a snapshot of the dead letter, and the publisher that sends its units
/// back under a confirm.
pub struct Redrive {
    pass: Pass,
    publisher: ConfirmedPublisher,
}

/// A redrive over a snapshot (see the [type docs](RabbitDeadLetters)): the units listed in the
/// snapshot's order, each published back under a confirm — edited, under its own `message_id` —
/// and acknowledged once the broker confirmed it; the others handed back at the end.
impl RedriveLog for RabbitDeadLetters {
    type Pass = Redrive;
    /// The unit's place in the snapshot.
    type Entry = usize;

    async fn open(&self) -> Result<Redrive, TransportError> {
        Ok(Redrive {
            pass: self.open_pass().await?,
            publisher: ConfirmedPublisher::new(self.connector.clone()),
        })
    }

    /// The whole snapshot at once.
    async fn next_page(&self, redrive: &mut Redrive) -> Result<Page<usize>, TransportError> {
        let units = &mut redrive.pass.units;
        let all = (0..units.len()).map(|index| (index, self.record(&mut units[index])));
        Ok((all.collect(), false))
    }

    async fn republish(
        &self,
        redrive: &mut Redrive,
        index: &usize,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> Result<Republished, TransportError> {
        let taken = &redrive.pass.units[*index];
        let table = taken.properties.headers().as_ref();
        let (payload, headers, properties) = match edit {
            None => (
                record.unit.payload(),
                codec::rewrite(table, []),
                taken.properties.clone(),
            ),
            // An edited unit keeps its id even where it was a digest of its body.
            Some(payload) => (
                payload,
                codec::rewrite_edited(table, record.unit.payload()),
                taken
                    .properties
                    .clone()
                    .with_message_id(record.id().as_str().into()),
            ),
        };
        redrive
            .publisher
            .publish(&record.source, payload, properties.with_headers(headers))
            .await?;
        Ok(Republished::Confirmed)
    }

    async fn remove(&self, redrive: &mut Redrive, index: usize) -> Result<(), TransportError> {
        redrive.pass.remove(self, index).await
    }

    async fn close(&self, redrive: Redrive) {
        redrive.pass.end(self).await;
        redrive.publisher.close().await;
    }
}
