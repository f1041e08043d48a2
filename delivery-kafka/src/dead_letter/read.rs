//! Reading the dead letter: the [`KafkaDeadLetters`] handle, and each stored record as the
//! operator sees it.

use super::stored::{Reader, Stored, is_own};
use crate::topology::KafkaTopology;
#[cfg(doc)]
use delivery_core::dead_letter::DeadLetters;
use delivery_core::dead_letter::{DeadLetter, DeadLetterStamp};
use delivery_core::transport::TransportError;
use delivery_core::unit::{DeliveryCount, Headers, Stamp, Unit};

/// The dead-letter topic of a [`KafkaTopology`], for an operator: its [`DeadLetters`] (its
/// [`watch_depth`](DeadLetters::watch_depth) too).
///
/// Kafka cannot remove one record from a topic, so the dead letter is the dead-letter topic
/// **less the records an operator removed**, which this view keeps in the topology's
/// [removed topic](KafkaTopology::removed_topic_name) (default `<topic>.<group>.dlq.removed`, created by
/// [`KafkaTopology::declare`] with `cleanup.policy=compact`): one small record per removed
/// dead letter, keyed by its position, holding its unit id and whether it was redriven or
/// purged. A removal applies to the record at that position only while it holds that unit, so a
/// dead-letter topic deleted and created again is not hidden by the removals of the old one.
///
/// - **Records** are read from the dead-letter topic by partition and offset, consuming nothing
///   and committing nothing. A record's [`position`](DeadLetter::position) is
///   `<partition>:<offset>` in the dead-letter topic, its
///   [`dead_lettered_at`](DeadLetter::dead_lettered_at) the record's timestamp, its
///   [`source`](DeadLetter::source) the topic the unit was first read from; its unit has its
///   `message-id` as id, the offset it was first read at as its stamp, and its own headers only
///   (without this transport's bookkeeping and the `x-dead-letter-*` ones). Records are listed in
///   partition then offset order.
/// - **[`count`](DeadLetters::count)** reads the dead letter through, as a listing does: the
///   brokers' offsets cannot tell which records were removed (and tansu 0.6 under-reports a
///   partition's end in them). A dead letter is meant to stay small; where one is large,
///   [`watch_depth`](DeadLetters::watch_depth) at a longer interval.
/// - **[`redrive`](DeadLetters::redrive)** publishes each selected unit to the group's own
///   [retry topic](KafkaTopology::retry_topic_name), due at once — key, payload and its own
///   headers, with its id as `message-id`, its stamp, where it was first read and no delivery
///   count, so the consumer counts its deliveries afresh — acknowledged by the broker
///   (`acks=all`), and only then records it removed. Only the group that dead-lettered the unit
///   reads it again: other groups of the source topic, which applied it already, never see the
///   redrive (the source topic, which every group reads, is not written). If that record fails,
///   the unit is in both; a second redrive sends it
///   again, which the handler's idempotence makes harmless. An edited redrive publishes the
///   operator's payload with the edit's headers.
/// - **[`purge`](DeadLetters::purge)** records the units removed: they are listed, counted and
///   redriven no more. Their bytes stay in the dead-letter topic until its retention removes them
///   (Kafka deletes no single record); set the topic's retention for that.
///
/// ```no_run
/// # async fn run() -> Result<(), delivery_core::TransportError> {
/// use delivery_core::dead_letter::{DeadLetters, Selection};
/// use delivery::kafka::{KafkaDeadLetters, KafkaTopology};
///
/// let topology = KafkaTopology::new("orders", "billing");
/// let dead_letters = KafkaDeadLetters::new("127.0.0.1:9092", &topology);
/// for dead in dead_letters.list(50, None).await?.records {
///     println!("{dead}");
/// }
/// dead_letters.redrive(Selection::Ids(&["o-42".into()])).await?;
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct KafkaDeadLetters {
    pub(super) topic: String,
    /// Where a redrive sends a unit: the group's own retry topic, so no other group sees it.
    pub(super) retry_topic: String,
    pub(super) reader: Reader,
}

impl KafkaDeadLetters {
    /// The dead letter of `topology` at `brokers`.
    pub fn new(brokers: &str, topology: &KafkaTopology) -> Self {
        KafkaDeadLetters {
            topic: topology.topic.clone(),
            retry_topic: topology.retry_topic_name(),
            reader: Reader {
                config: topology.client_config(brokers),
                dead_letter_topic: topology.dead_letter_topic_name(),
                removed_topic: topology.removed_topic_name(),
            },
        }
    }

    /// Runs `read` with a reader of the brokers, off the async runtime.
    pub(super) async fn reading<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Reader) -> Result<T, TransportError> + Send + 'static,
    ) -> Result<T, TransportError> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || read(&reader))
            .await
            .map_err(|e| crate::error::RDKAFKA.error("reading the dead-letter topic", e))?
    }

    /// The record of a stored dead letter.
    pub(super) fn record(&self, stored: &Stored) -> DeadLetter {
        let mut carried_count = None;
        let mut source = None;
        let mut origin_offset = None;
        let mut kept = None;
        let written = DeadLetterStamp::read(|name| {
            let (_, value) = stored.headers.iter().rev().find(|(n, _)| n == name)?;
            Some(String::from_utf8_lossy(value))
        });
        let mut own = Vec::new();
        for (name, value) in &stored.headers {
            let text = std::str::from_utf8(value).ok();
            match name.as_str() {
                delivery_core::headers::DELIVERY_COUNT => {
                    carried_count = text.and_then(|t| t.parse::<u32>().ok());
                }
                delivery_core::headers::DEAD_LETTER_SOURCE_TOPIC => {
                    source = text.map(str::to_owned)
                }
                delivery_core::headers::DEAD_LETTER_SOURCE_OFFSET => {
                    origin_offset = text.and_then(|t| t.parse::<u64>().ok());
                }
                delivery_core::headers::STAMP => kept = delivery_core::headers::parse_stamp(value),
                name if is_own(name) => own.push((name.to_owned(), value.clone())),
                _ => {}
            }
        }
        let mut unit = Unit::new(
            stored.id(&self.reader.dead_letter_topic),
            stored.payload.clone(),
        )
        .with_headers(Headers::from_pairs(own))
        .with_delivery_count(
            written
                .delivery_count
                .or(carried_count.map(DeliveryCount::new))
                .unwrap_or(DeliveryCount::FIRST),
        );
        if let Some(stamp) = kept.or(origin_offset.map(Stamp)) {
            unit = unit.with_stamp(stamp);
        }
        let source = source
            .or(written.source)
            .unwrap_or_else(|| self.topic.clone());
        let mut record = DeadLetter::new(unit, source, stored.position.to_string());
        record.reason = written.reason;
        record.detail = written.detail.unwrap_or_default();
        record.dead_lettered_at = stored.timestamp;
        record
    }

    /// Every dead letter (not removed) with its record, in partition then offset order.
    pub(super) async fn all(&self) -> Result<Vec<(Stored, DeadLetter)>, TransportError> {
        let stored = self
            .reading(|reader| {
                let removed = reader.removed()?;
                let mut all = Vec::new();
                reader.scan(None, &removed, |stored| {
                    all.push(stored);
                    true
                })?;
                Ok(all)
            })
            .await?;
        Ok(stored
            .into_iter()
            .map(|s| {
                let record = self.record(&s);
                (s, record)
            })
            .collect())
    }
}
