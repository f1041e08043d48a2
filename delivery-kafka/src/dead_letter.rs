//! The operator's view of a dead-letter topic — the [`DeadLetters`] API — read without consuming
//! it (no group, no commit), with the records an operator removed kept in a topic of their own.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Header, Headers as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::topology::KafkaTopology;
use delivery_core::dead_letter::{
    Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection,
};
use delivery_core::disposition::ReasonKind;
use delivery_core::transport::TransportError;
use delivery_core::unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// The dead-letter topic of a [`KafkaTopology`], for an operator: its [`DeadLetters`], and
/// [`watch_depth`](Self::watch_depth).
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
///   [`watch_depth`](Self::watch_depth) at a longer interval.
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
/// use delivery_core::kafka::{KafkaDeadLetters, KafkaTopology};
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
    topic: String,
    /// Where a redrive sends a unit: the group's own retry topic, so no other group sees it.
    retry_topic: String,
    reader: Reader,
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

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        delivery_core::transport::watch_depth(
            self.reader.dead_letter_topic.clone(),
            every,
            move || {
                let this = this.clone();
                async move { DeadLetters::count(&this).await }
            },
        )
    }

    /// Runs `read` with a reader of the brokers, off the async runtime.
    async fn reading<T: Send + 'static>(
        &self,
        read: impl FnOnce(&Reader) -> Result<T, TransportError> + Send + 'static,
    ) -> Result<T, TransportError> {
        let reader = self.reader.clone();
        tokio::task::spawn_blocking(move || read(&reader))
            .await
            .map_err(|e| crate::error::transport_error("reading the dead-letter topic", e))?
    }

    /// The record of a stored dead letter.
    fn record(&self, stored: &Stored) -> DeadLetter {
        let mut count = None;
        let mut carried_count = None;
        let mut source = None;
        let mut origin_offset = None;
        let mut kept = None;
        let mut reason = None;
        let mut detail = String::new();
        let mut own = Vec::new();
        for (name, value) in &stored.headers {
            let text = std::str::from_utf8(value).ok();
            match name.as_str() {
                delivery_core::headers::DELIVERY_COUNT => {
                    carried_count = text.and_then(|t| t.parse::<u32>().ok());
                }
                delivery_core::headers::DEAD_LETTER_REASON => {
                    reason = text.and_then(ReasonKind::parse)
                }
                delivery_core::headers::DEAD_LETTER_DETAIL => {
                    detail = String::from_utf8_lossy(value).into_owned();
                }
                delivery_core::headers::DEAD_LETTER_SOURCE_TOPIC => {
                    source = text.map(str::to_owned)
                }
                delivery_core::headers::DEAD_LETTER_SOURCE_OFFSET => {
                    origin_offset = text.and_then(|t| t.parse::<u64>().ok());
                }
                delivery_core::headers::STAMP => kept = delivery_core::headers::parse_stamp(value),
                delivery_core::headers::DEAD_LETTER_DELIVERY_COUNT => {
                    count = text.and_then(|t| t.parse::<u32>().ok());
                }
                name if is_own(name) => own.push((name.to_owned(), value.clone())),
                _ => {}
            }
        }
        let mut unit = Unit::new(
            stored.id(&self.reader.dead_letter_topic),
            stored.payload.clone(),
        )
        .with_headers(Headers::from_pairs(own))
        .with_delivery_count(DeliveryCount::new(count.or(carried_count).unwrap_or(1)));
        if let Some(stamp) = kept.or(origin_offset.map(Stamp)) {
            unit = unit.with_stamp(stamp);
        }
        let source = source.unwrap_or_else(|| self.topic.clone());
        let mut record = DeadLetter::new(unit, source, stored.position.to_string());
        record.reason = reason;
        record.detail = detail;
        record.dead_lettered_at = stored.timestamp;
        record
    }

    /// Every dead letter (not removed) with its record, in partition then offset order.
    async fn all(&self) -> Result<Vec<(Stored, DeadLetter)>, TransportError> {
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

    /// A confirmed producer, one record per batch (see `publish.rs`).
    fn producer(&self) -> Result<FutureProducer, TransportError> {
        super::publish::one_record_per_batch(self.reader.config.clone())
    }

    /// Fails unless the removed topic exists: nothing is redriven or purged that cannot be
    /// recorded removed.
    async fn removed_topic_exists(&self) -> Result<(), TransportError> {
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
    async fn mark_removed(
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
            .map_err(|(e, _)| crate::error::transport_error("recording a dead letter removed", e))
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
            .map_err(|(e, _)| crate::error::transport_error("redriving a dead letter", e))
    }
}

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
        self.redrive_selected(selection, None).await
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        let selection = Selection::Ids(std::slice::from_ref(id));
        let report = self.redrive_selected(selection, Some(&payload)).await?;
        Ok(!report.redriven.is_empty())
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
}

impl KafkaDeadLetters {
    /// Publishes each selected unit to the group's retry topic — edited to `edit`, if given — and
    /// only then records it removed.
    async fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<RedriveReport, TransportError> {
        self.removed_topic_exists().await?;
        let producer = self.producer()?;
        let mut redriven = Vec::new();
        for (stored, record) in self.all().await? {
            if !selection.contains(record.id()) {
                continue;
            }
            self.publish_back(&producer, &stored, &record, edit).await?;
            self.mark_removed(&producer, stored.position, record.id(), "redriven")
                .await
                .map_err(|e| {
                    TransportError::msg(
                        "redriving",
                        format!(
                            "{} is back in `{}` but was not recorded removed ({e}); it is in both",
                            record.id(),
                            self.retry_topic
                        ),
                    )
                })?;
            redriven.push(record.id().clone());
        }
        Ok(RedriveReport::of(selection, redriven))
    }
}

/// Whether a header is one of the unit's own, not this transport's bookkeeping or the dead
/// letter's.
fn is_own(name: &str) -> bool {
    !delivery_core::headers::is_bookkeeping(name) && !delivery_core::headers::is_dead_letter(name)
}

/// Where a record stands in a topic: `<partition>:<offset>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
struct Position {
    partition: i32,
    offset: i64,
}

impl Position {
    /// The position right after this one in its partition.
    fn next(self) -> Position {
        Position {
            offset: self.offset.saturating_add(1),
            ..self
        }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}:{}", self.partition, self.offset)
    }
}

impl FromStr for Position {
    type Err = std::num::ParseIntError;

    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let (partition, offset) = s.split_once(':').unwrap_or((s, ""));
        Ok(Position {
            partition: partition.parse()?,
            offset: offset.parse()?,
        })
    }
}

/// A record of the dead-letter topic as stored: every header, in order.
struct Stored {
    position: Position,
    key: Option<Bytes>,
    payload: Bytes,
    headers: Vec<(String, Bytes)>,
    timestamp: Option<SystemTime>,
}

impl Stored {
    fn of(message: &BorrowedMessage<'_>) -> Stored {
        let headers = message
            .headers()
            .map(|headers| {
                headers
                    .iter()
                    .map(|h| {
                        (
                            h.key.to_owned(),
                            Bytes::copy_from_slice(h.value.unwrap_or_default()),
                        )
                    })
                    .collect()
            })
            .unwrap_or_default();
        Stored {
            position: Position {
                partition: message.partition(),
                offset: message.offset(),
            },
            key: message.key().map(Bytes::copy_from_slice),
            payload: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
            headers,
            timestamp: message
                .timestamp()
                .to_millis()
                .and_then(|ms| u64::try_from(ms).ok())
                .map(|ms| UNIX_EPOCH + Duration::from_millis(ms)),
        }
    }

    /// The unit's id: its `message-id` header, else `<dead-letter topic>:<partition>:<offset>`.
    fn id(&self, dead_letter_topic: &str) -> UnitId {
        self.headers
            .iter()
            .rev()
            .find(|(name, _)| name == delivery_core::headers::MESSAGE_ID)
            .and_then(|(_, value)| std::str::from_utf8(value).ok())
            .filter(|id| !id.is_empty())
            .map_or_else(
                || UnitId::new(format!("{dead_letter_topic}:{}", self.position)),
                UnitId::from,
            )
    }
}

/// The dead letters removed, by position: the unit each held.
type Removed = HashMap<Position, String>;

/// What a removal record holds.
#[derive(serde::Deserialize)]
struct Removal {
    id: String,
}

/// Reads the dead-letter and removed topics, consuming nothing and committing nothing.
#[derive(Clone, Debug)]
struct Reader {
    /// The common client configuration (the topology's client properties).
    config: rdkafka::ClientConfig,
    dead_letter_topic: String,
    removed_topic: String,
}

/// How long a read waits for the brokers before it fails.
const TIMEOUT: Duration = Duration::from_secs(10);

impl Reader {
    /// A consumer that reports the end of each partition it reads, and starts a partition whose
    /// earlier records are gone at the earliest one left.
    fn consumer(&self) -> Result<BaseConsumer, TransportError> {
        self.config
            .clone()
            .set("group.id", "delivery-dead-letter-reader")
            .set("enable.auto.commit", "false")
            .set("enable.partition.eof", "true")
            .set("auto.offset.reset", "earliest")
            // A fetch at a partition's end returns at once: the read stops there.
            .set("fetch.wait.max.ms", "10")
            .create()
            .map_err(|e| crate::error::transport_error("creating the Kafka reader", e))
    }

    /// The partitions of `topic`, in order; none if the topic does not exist.
    fn partitions(&self, consumer: &BaseConsumer, topic: &str) -> Result<Vec<i32>, TransportError> {
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| crate::error::transport_error("reading a topic's metadata", e))?;
        let mut partitions: Vec<i32> = metadata
            .topics()
            .iter()
            .filter(|t| t.name() == topic && t.error().is_none())
            .flat_map(|t| t.partitions().iter().map(|p| p.id()))
            .collect();
        partitions.sort_unstable();
        Ok(partitions)
    }

    /// Whether `topic` exists.
    fn exists(&self, topic: &str) -> Result<bool, TransportError> {
        Ok(!self.partitions(&self.consumer()?, topic)?.is_empty())
    }

    /// Every record of `topic` from `from` on (from the start when `None`), in partition then
    /// offset order, handed to `visit` until it returns `false`.
    ///
    /// Each partition is read to the end its fetches report (the broker's high watermark when it
    /// answers the fetch), not to the end a `ListOffsets` request reports, which tansu 0.6
    /// under-reports after pipelined writes.
    fn read(
        &self,
        topic: &str,
        from: Option<Position>,
        mut visit: impl FnMut(&BorrowedMessage<'_>) -> bool,
    ) -> Result<(), TransportError> {
        let consumer = self.consumer()?;
        for partition in self.partitions(&consumer, topic)? {
            let start = match from {
                Some(from) if partition < from.partition => continue,
                Some(from) if partition == from.partition => Offset::Offset(from.offset),
                _ => Offset::Beginning,
            };
            let mut list = TopicPartitionList::new();
            list.add_partition_offset(topic, partition, start)
                .map_err(|e| crate::error::transport_error("assigning a partition", e))?;
            consumer
                .assign(&list)
                .map_err(|e| crate::error::transport_error("assigning a partition", e))?;
            let deadline = std::time::Instant::now() + Duration::from_secs(60);
            loop {
                if std::time::Instant::now() > deadline {
                    return Err(TransportError::msg(
                        "reading a topic",
                        format!(
                            "the end of `{topic}` partition {partition} was not reached within 60 s"
                        ),
                    ));
                }
                let message = match consumer.poll(Duration::from_millis(100)) {
                    None => continue,
                    Some(Ok(message)) => message,
                    Some(Err(KafkaError::PartitionEOF(p))) if p == partition => break,
                    // A connection the client re-establishes on its own: read on until the
                    // deadline.
                    Some(Err(error)) => {
                        tracing::debug!(%error, topic, "reading a topic");
                        continue;
                    }
                };
                if message.topic() != topic || message.partition() != partition {
                    continue;
                }
                if !visit(&message) {
                    return Ok(());
                }
            }
        }
        Ok(())
    }

    /// The dead letters removed, as the removed topic records them.
    fn removed(&self) -> Result<Removed, TransportError> {
        let mut removed = Removed::new();
        self.read(&self.removed_topic, None, |message| {
            let position = message
                .key()
                .and_then(|k| std::str::from_utf8(k).ok())
                .and_then(|k| k.parse::<Position>().ok());
            let removal = message
                .payload()
                .and_then(|p| serde_json::from_slice::<Removal>(p).ok());
            if let (Some(position), Some(removal)) = (position, removal) {
                removed.insert(position, removal.id);
            }
            true
        })?;
        Ok(removed)
    }

    /// The dead letters from `from` on that are not `removed`, handed to `visit` until it returns
    /// `false`.
    fn scan(
        &self,
        from: Option<Position>,
        removed: &Removed,
        mut visit: impl FnMut(Stored) -> bool,
    ) -> Result<(), TransportError> {
        self.read(&self.dead_letter_topic, from, |message| {
            let stored = Stored::of(message);
            if removed
                .get(&stored.position)
                .is_some_and(|id| stored.id(&self.dead_letter_topic).as_str() == id)
            {
                return true;
            }
            visit(stored)
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_position_is_written_and_read_back_as_partition_and_offset() {
        let position = Position {
            partition: 2,
            offset: 17,
        };
        assert_eq!(position.to_string(), "2:17");
        assert_eq!("2:17".parse::<Position>(), Ok(position));
        assert_eq!(position.next().to_string(), "2:18");
        for bad in ["", "2", "2:", ":17", "a:1", "1:b", "1:2:3"] {
            assert!(bad.parse::<Position>().is_err(), "{bad}");
        }
        let cursor = Cursor::new("x");
        assert!(delivery_core::transport::parse_cursor::<Position>(&cursor).is_err());
    }
}

impl From<KafkaDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: KafkaDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
