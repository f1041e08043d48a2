//! The handle of one Kafka record and its primitives: finishing its offset (the commit
//! watermark), a republish to the retry topic with the carried count, and a confirmed copy to the
//! dead-letter topic. `consumer::settle` decides when each runs.

use bytes::Bytes;
use delivery_core::dead_letter::DeadLetterStamp;
use delivery_core::disposition::DeadLetterReason;
use delivery_core::transport::Retry;
use delivery_core::transport::{Settle, TransportError};
use delivery_core::unit::{DeliveryCount, Unit};
use rdkafka::message::{Header, OwnedHeaders};
use rdkafka::producer::FutureRecord;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use crate::codec::Origin;
use crate::partition::Tracked;
use crate::shared::Shared;

/// The handle of one unit delivered by a [`KafkaSource`](super::KafkaSource). Only the runtime holds it.
///
/// Dropped unsettled, it finishes nothing: its offset holds the watermark, and the unit is read
/// again from the committed offset after a restart or a rebalance.
pub struct KafkaHandle {
    pub(super) shared: Arc<Shared>,
    /// `None` for a unit read again without a revocation: the first delivery holds its offset.
    pub(super) at: Option<Tracked>,
    pub(super) key: Option<Bytes>,
    pub(super) origin: Origin,
}

impl std::fmt::Debug for KafkaHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KafkaHandle")
            .field("at", &self.at)
            .field("origin", &self.origin)
            .finish()
    }
}

impl delivery_core::marker::AckHandle for KafkaHandle {}

impl KafkaHandle {
    pub(super) fn is_current(&self) -> bool {
        self.at
            .is_none_or(|at| self.shared.book.is_current(at.partition, at.generation))
    }

    fn finish(&self) {
        if let Some(at) = self.at {
            self.shared
                .book
                .finish(at.partition, at.offset, at.generation);
        }
    }

    /// The unit's own headers and id, and where it was first read.
    fn carried(&self, unit: &Unit) -> OwnedHeaders {
        let mut headers = OwnedHeaders::new_with_capacity(unit.headers().len() + 8);
        for (name, value) in unit.headers().iter() {
            headers = headers.insert(Header {
                key: name,
                value: Some(value.as_ref()),
            });
        }
        // Its stamp, kept through the retry topic and the dead letter (rule 4).
        if let Some(stamp) = unit.stamp() {
            headers = headers.insert(text(delivery_core::headers::STAMP, &stamp.0.to_string()));
        }
        headers
            .insert(text(delivery_core::headers::MESSAGE_ID, unit.id().as_str()))
            .insert(text(
                delivery_core::headers::ORIGIN_TOPIC,
                &self.origin.topic,
            ))
            .insert(text(
                delivery_core::headers::ORIGIN_PARTITION,
                &self.origin.partition.to_string(),
            ))
            .insert(text(
                delivery_core::headers::ORIGIN_OFFSET,
                &self.origin.offset.to_string(),
            ))
    }

    /// Publishes `payload` to `topic` under the unit's key and waits for the broker's
    /// acknowledgement (`acks=all`), trying again with a growing pause while the partition is
    /// still this consumer's. Gives up once it is revoked: the new owner reads the unit again.
    async fn publish(
        &self,
        topic: &str,
        payload: &[u8],
        headers: OwnedHeaders,
    ) -> Result<(), TransportError> {
        let mut retry = Retry::reconnect();
        loop {
            let mut record = FutureRecord::<[u8], [u8]>::to(topic)
                .payload(payload)
                .headers(headers.clone());
            if let Some(key) = &self.key {
                record = record.key(key.as_ref());
            }
            match self
                .shared
                .producer
                .send(record, Duration::from_secs(5))
                .await
            {
                Ok(_) => return Ok(()),
                Err((error, _)) => {
                    if !self.is_current() {
                        return Err(crate::error::RDKAFKA
                            .error("publishing to Kafka (partition revoked meanwhile)", error));
                    }
                    let pause = retry.failed();
                    tracing::warn!(topic, %error, retry_in_ms = pause.as_millis() as u64,
                        "publishing failed; the unit's offset holds until it succeeds");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }
}

fn text<'a>(key: &'a str, value: &'a str) -> Header<'a, &'a str> {
    Header {
        key,
        value: Some(value),
    }
}

impl KafkaHandle {
    /// The unit's own headers, where it was first read, and the count it carries.
    fn carrying(&self, unit: &Unit, count: DeliveryCount) -> OwnedHeaders {
        self.carried(unit).insert(text(
            delivery_core::headers::DELIVERY_COUNT,
            &count.get().to_string(),
        ))
    }
}

impl Settle for KafkaHandle {
    async fn ack(self, _unit: &Unit) -> Result<(), TransportError> {
        self.finish();
        Ok(())
    }

    /// Republished to the retry topic with the count of its next delivery and when it is due;
    /// only then is its offset final.
    async fn give_back(self, unit: &Unit, after: Duration) -> Result<(), TransportError> {
        let due_ms = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.as_millis() as u64)
            .saturating_add(after.as_millis() as u64);
        let headers = self
            .carrying(unit, unit.delivery_count().next())
            .insert(text(delivery_core::headers::DUE_MS, &due_ms.to_string()));
        let topic = self.shared.retry_topic.clone();
        self.publish(&topic, unit.payload(), headers).await?;
        self.finish();
        Ok(())
    }

    /// To the retry topic, due now, with the count it had: this delivery not counted.
    async fn release(self, unit: &Unit) -> Result<(), TransportError> {
        let headers = self.carrying(unit, unit.delivery_count());
        let topic = self.shared.retry_topic.clone();
        self.publish(&topic, unit.payload(), headers).await?;
        self.finish();
        Ok(())
    }

    async fn copy_to_dead_letter(
        &mut self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        // Where it came from is in the three source headers below, not the stamp's one.
        let stamp = DeadLetterStamp::new(reason, None, unit.delivery_count()).headers();
        let headers = stamp
            .iter()
            .fold(
                self.carrying(unit, unit.delivery_count()),
                |headers, (name, value)| headers.insert(text(name, value)),
            )
            .insert(text(
                delivery_core::headers::DEAD_LETTER_SOURCE_TOPIC,
                &self.origin.topic,
            ))
            .insert(text(
                delivery_core::headers::DEAD_LETTER_SOURCE_PARTITION,
                &self.origin.partition.to_string(),
            ))
            .insert(text(
                delivery_core::headers::DEAD_LETTER_SOURCE_OFFSET,
                &self.origin.offset.to_string(),
            ));
        let topic = self.shared.dead_letter_topic.clone();
        self.publish(&topic, unit.payload(), headers).await
    }
}
