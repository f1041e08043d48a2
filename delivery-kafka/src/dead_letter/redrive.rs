//! Redriving and removing: a unit published back to the group's retry topic, and the records of
//! the dead letters removed (redriven or purged).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};

use super::read::KafkaDeadLetters;
use super::stored::{Position, Stored, is_own};
use delivery_core::dead_letter::{DeadLetter, Page, RedriveLog, Republished};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

impl KafkaDeadLetters {
    /// A confirmed producer, one record per batch (see `publish.rs`).
    pub(super) fn producer(&self) -> Result<FutureProducer, TransportError> {
        crate::publish::one_record_per_batch(self.reader.config.clone())
    }

    /// Fails unless the removed topic exists: nothing is redriven or purged that cannot be
    /// recorded removed.
    pub(super) async fn removed_topic_exists(&self) -> Result<(), TransportError> {
        let exists = self
            .reading(|reader| reader.exists(&reader.removed_topic))
            .await?;
        if !exists {
            return Err(TransportError::msg(
                "removing from the dead letter",
                format!(
                    "the topic `{}` that records the dead letters removed does not exist; \
                     `KafkaTopology::declare` creates it",
                    self.reader.removed_topic
                ),
            ));
        }
        Ok(())
    }

    /// Records the dead letter at `position`, holding `id`, as removed (`how`: `redriven` or
    /// `purged`), acknowledged by the broker.
    pub(super) async fn mark_removed(
        &self,
        producer: &FutureProducer,
        position: Position,
        id: &UnitId,
        how: &str,
    ) -> Result<(), TransportError> {
        let key = position.to_string();
        let value = serde_json::json!({ "id": id.as_str(), "removed": how }).to_string();
        producer
            .send(
                FutureRecord::to(&self.reader.removed_topic)
                    .key(key.as_bytes())
                    .payload(value.as_bytes()),
                Duration::from_secs(10),
            )
            .await
            .map(drop)
            .map_err(|(e, _)| crate::error::RDKAFKA.error("recording a dead letter removed", e))
    }

    /// Publishes the unit of `stored` (`record`) to the group's retry topic, due now — key,
    /// payload, every value of its own headers in order, its id as `message-id`, its stamp, where
    /// it was first read — acknowledged by the broker; edited to `edit`, if given: that payload,
    /// and the edit's headers in place of any earlier edit's.
    async fn publish_back(
        &self,
        producer: &FutureProducer,
        stored: &Stored,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> Result<(), TransportError> {
        let mut out = OwnedHeaders::new_with_capacity(stored.headers.len() + 7);
        let kept =
            |name: &str| is_own(name) && !(edit.is_some() && delivery_core::headers::is_edit(name));
        for (name, value) in stored.headers.iter().filter(|(name, _)| kept(name)) {
            out = out.insert(Header {
                key: name.as_str(),
                value: Some(value.as_ref()),
            });
        }
        let edited = edit.map(|_| delivery_core::transport::edit_headers(record.unit.payload()));
        for (name, value) in edited.iter().flatten() {
            out = out.insert(Header {
                key: name,
                value: Some(value.as_str()),
            });
        }
        out = out.insert(Header {
            key: delivery_core::headers::MESSAGE_ID,
            value: Some(record.id().as_str()),
        });
        // Its stamp from its first read: a redrive is not a newer unit (rule 4).
        let stamp = record.unit.stamp().map(|stamp| stamp.0.to_string());
        if let Some(stamp) = &stamp {
            out = out.insert(Header {
                key: delivery_core::headers::STAMP,
                value: Some(stamp.as_str()),
            });
        }
        // Where it was first read, so a dead letter again records the same source.
        let origin = [
            (
                delivery_core::headers::DEAD_LETTER_SOURCE_TOPIC,
                delivery_core::headers::ORIGIN_TOPIC,
            ),
            (
                delivery_core::headers::DEAD_LETTER_SOURCE_PARTITION,
                delivery_core::headers::ORIGIN_PARTITION,
            ),
            (
                delivery_core::headers::DEAD_LETTER_SOURCE_OFFSET,
                delivery_core::headers::ORIGIN_OFFSET,
            ),
        ];
        for (recorded, carried) in origin {
            let value = stored
                .headers
                .iter()
                .rev()
                .find(|(name, _)| name == recorded);
            if let Some((_, value)) = value {
                out = out.insert(Header {
                    key: carried,
                    value: Some(value.as_ref()),
                });
            }
        }
        // Due now: the source hands it out as soon as it reads it.
        let now_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
            .to_string();
        out = out.insert(Header {
            key: delivery_core::headers::DUE_MS,
            value: Some(now_ms.as_str()),
        });
        let mut message = FutureRecord::<[u8], [u8]>::to(&self.retry_topic)
            .payload(edit.unwrap_or(record.unit.payload()).as_ref())
            .headers(out);
        if let Some(key) = &stored.key {
            message = message.key(key.as_ref());
        }
        producer
            .send(message, Duration::from_secs(10))
            .await
            .map(drop)
            .map_err(|(e, _)| crate::error::RDKAFKA.error("redriving a dead letter", e))
    }
}

/// What a redrive holds: its confirmed producer.
pub struct Redrive {
    producer: FutureProducer,
}

/// A redrive's primitives: the dead letter read through, each unit published to the group's retry
/// topic under `acks=all`, and only then recorded removed.
impl RedriveLog for KafkaDeadLetters {
    type Pass = Redrive;
    type Entry = Stored;

    async fn open(&self) -> Result<Redrive, TransportError> {
        self.removed_topic_exists().await?;
        Ok(Redrive {
            producer: self.producer()?,
        })
    }

    /// The whole dead letter at once.
    async fn next_page(&self, _: &mut Redrive) -> Result<Page<Stored>, TransportError> {
        Ok((self.all().await?, false))
    }

    async fn republish(
        &self,
        redrive: &mut Redrive,
        stored: &Stored,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> Result<Republished, TransportError> {
        self.publish_back(&redrive.producer, stored, record, edit)
            .await?;
        Ok(Republished::Confirmed)
    }

    async fn remove(&self, redrive: &mut Redrive, stored: Stored) -> Result<(), TransportError> {
        let id = stored.id(&self.reader.dead_letter_topic);
        self.mark_removed(&redrive.producer, stored.position, &id, "redriven")
            .await
    }
}
