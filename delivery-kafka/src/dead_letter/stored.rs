//! The dead letter as stored: a record's position and contents, the removals recorded, and the
//! reader that scans both topics without consuming them.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::error::KafkaError;
use rdkafka::message::{BorrowedMessage, Headers as _};
use rdkafka::{Message, Offset, TopicPartitionList};

use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

/// Whether a header is one of the unit's own, not this transport's bookkeeping or the dead
/// letter's.
pub(super) fn is_own(name: &str) -> bool {
    !delivery_core::headers::is_bookkeeping(name) && !delivery_core::headers::is_dead_letter(name)
}

/// Where a record stands in a topic: `<partition>:<offset>`.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub(super) struct Position {
    pub(super) partition: i32,
    pub(super) offset: i64,
}

impl Position {
    /// The position right after this one in its partition.
    pub(super) fn next(self) -> Position {
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
pub struct Stored {
    pub(super) position: Position,
    pub(super) key: Option<Bytes>,
    pub(super) payload: Bytes,
    pub(super) headers: Vec<(String, Bytes)>,
    pub(super) timestamp: Option<SystemTime>,
}

impl Stored {
    pub(super) fn of(message: &BorrowedMessage<'_>) -> Stored {
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
    pub(super) fn id(&self, dead_letter_topic: &str) -> UnitId {
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
pub(super) struct Reader {
    /// The common client configuration (the topology's client properties).
    pub(super) config: rdkafka::ClientConfig,
    pub(super) dead_letter_topic: String,
    pub(super) removed_topic: String,
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
            .map_err(|e| crate::error::RDKAFKA.error("creating the Kafka reader", e))
    }

    /// The partitions of `topic`, in order; none if the topic does not exist.
    fn partitions(&self, consumer: &BaseConsumer, topic: &str) -> Result<Vec<i32>, TransportError> {
        let metadata = consumer
            .fetch_metadata(Some(topic), TIMEOUT)
            .map_err(|e| crate::error::RDKAFKA.error("reading a topic's metadata", e))?;
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
    pub(super) fn exists(&self, topic: &str) -> Result<bool, TransportError> {
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
                .map_err(|e| crate::error::RDKAFKA.error("assigning a partition", e))?;
            consumer
                .assign(&list)
                .map_err(|e| crate::error::RDKAFKA.error("assigning a partition", e))?;
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
    pub(super) fn removed(&self) -> Result<Removed, TransportError> {
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
    pub(super) fn scan(
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
    use delivery_core::dead_letter::Cursor;

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
