//! The operator's view of a dead-letter topic: read it without consuming it (no group, no commit),
//! and redrive units back to their source topic under the same id.

use std::time::Duration;

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::message::{Header, Headers as _, OwnedHeaders};
use rdkafka::producer::{FutureProducer, FutureRecord};
use rdkafka::{Message, Offset, TopicPartitionList};

use super::is_bookkeeping_header;
use super::topology::KafkaTopology;
use crate::disposition::ReasonKind;
use crate::transport::TransportError;
use crate::unit::{Headers, UnitId};

/// One unit in a dead-letter topic, as an operator reads it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct KafkaDeadLetter {
    /// The unit's id (its `message-id`).
    pub id: UnitId,
    /// The partition of the dead-letter topic holding it.
    pub partition: i32,
    /// Its offset there.
    pub offset: i64,
    /// The key it was published with.
    pub key: Option<Bytes>,
    /// The payload, intact.
    pub payload: Bytes,
    /// The unit's own headers (without this transport's bookkeeping and dead-letter headers).
    pub headers: Headers,
    /// Why it was dead-lettered, if recorded.
    pub reason: Option<ReasonKind>,
    /// The reason's detail.
    pub detail: Option<String>,
    /// The topic it was first read from.
    pub source_topic: Option<String>,
    /// The partition it was first read from.
    pub source_partition: Option<i32>,
    /// The offset it was first read at.
    pub source_offset: Option<i64>,
    /// The delivery on which it was dead-lettered.
    pub delivery_count: Option<u32>,
}

/// The dead-letter topic of a [`KafkaTopology`], for an operator.
///
/// ```no_run
/// # async fn run() -> Result<(), delivery_core::TransportError> {
/// use delivery_core::kafka::{KafkaDeadLetters, KafkaTopology};
///
/// let topology = KafkaTopology::new("orders", "billing");
/// let dead_letters = KafkaDeadLetters::new("127.0.0.1:9092", &topology);
/// for dead in dead_letters.list().await? {
///     println!("{} {:?} from {:?}:{:?}@{:?}", dead.id, dead.reason,
///         dead.source_topic, dead.source_partition, dead.source_offset);
/// }
/// dead_letters.redrive(&["o-42".into()]).await?;
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct KafkaDeadLetters {
    brokers: String,
    topic: String,
    dead_letter_topic: String,
}

impl KafkaDeadLetters {
    /// The dead letter of `topology` at `brokers`.
    pub fn new(brokers: &str, topology: &KafkaTopology) -> Self {
        KafkaDeadLetters {
            brokers: brokers.to_owned(),
            topic: topology.topic.clone(),
            dead_letter_topic: topology.dead_letter_topic_name(),
        }
    }

    /// How many units the dead-letter topic holds (each partition's high watermark less its low
    /// one), also set as the `delivery_dead_letter_depth{dead_letter}` gauge. A topic never
    /// trimmed only grows: compare it with what the operator has redriven.
    pub async fn count(&self) -> Result<u64, TransportError> {
        let brokers = self.brokers.clone();
        let topic = self.dead_letter_topic.clone();
        let depth = tokio::task::spawn_blocking(move || depth(&brokers, &topic))
            .await
            .map_err(|e| TransportError::new("reading the dead letter's depth", e))??;
        crate::dead_letter::depth::record(&self.dead_letter_topic, depth);
        Ok(depth)
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        crate::dead_letter::depth::watch(self.dead_letter_topic.clone(), every, move || {
            let this = this.clone();
            async move { this.count().await }
        })
    }

    /// Every unit in the dead-letter topic, in partition then offset order. Reads from the start
    /// of each partition to its end as it is now; consumes nothing and commits nothing.
    pub async fn list(&self) -> Result<Vec<KafkaDeadLetter>, TransportError> {
        let brokers = self.brokers.clone();
        let topic = self.dead_letter_topic.clone();
        tokio::task::spawn_blocking(move || read_all(&brokers, &topic))
            .await
            .map_err(|e| TransportError::new("reading the dead-letter topic", e))?
    }

    /// Publishes the dead letters with the given ids back to the source topic — payload, key
    /// and the unit's own headers, under the same `message-id` — each acknowledged by the broker
    /// (`acks=all`). Kafka cannot remove a message from a topic: the dead letter keeps its copy,
    /// and the handler's idempotence makes a second redrive harmless. Returns how many were
    /// redriven.
    pub async fn redrive(&self, ids: &[UnitId]) -> Result<usize, TransportError> {
        let producer: FutureProducer = super::config(&self.brokers)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("message.timeout.ms", "30000")
            .create()
            .map_err(|e| TransportError::new("creating the Kafka producer", e))?;
        let mut moved = 0;
        for dead in self.list().await? {
            if !ids.contains(&dead.id) {
                continue;
            }
            let mut headers = OwnedHeaders::new_with_capacity(dead.headers.len() + 1);
            for (name, value) in dead.headers.iter() {
                headers = headers.insert(Header {
                    key: name,
                    value: Some(value.as_ref()),
                });
            }
            headers = headers.insert(Header {
                key: crate::headers::MESSAGE_ID,
                value: Some(dead.id.as_str()),
            });
            let mut record = FutureRecord::<[u8], [u8]>::to(&self.topic)
                .payload(dead.payload.as_ref())
                .headers(headers);
            if let Some(key) = &dead.key {
                record = record.key(key.as_ref());
            }
            producer
                .send(record, Duration::from_secs(10))
                .await
                .map_err(|(e, _)| TransportError::new("redriving a dead letter", e))?;
            moved += 1;
        }
        Ok(moved)
    }
}

fn reader(brokers: &str) -> Result<BaseConsumer, TransportError> {
    super::config(brokers)
        .set("group.id", "delivery-dead-letter-reader")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .create()
        .map_err(|e| TransportError::new("creating the Kafka reader", e))
}

/// The partitions of `topic` and, for each, its low and high watermarks.
fn extent(
    consumer: &BaseConsumer,
    topic: &str,
    timeout: Duration,
) -> Result<Vec<(i32, i64, i64)>, TransportError> {
    let metadata = consumer
        .fetch_metadata(Some(topic), timeout)
        .map_err(|e| TransportError::new("reading the dead-letter topic's metadata", e))?;
    let partitions: Vec<i32> = metadata
        .topics()
        .iter()
        .filter(|t| t.name() == topic)
        .flat_map(|t| t.partitions().iter().map(|p| p.id()))
        .collect();
    partitions
        .into_iter()
        .map(|partition| {
            let (low, high) = consumer
                .fetch_watermarks(topic, partition, timeout)
                .map_err(|e| TransportError::new("reading the dead-letter topic's offsets", e))?;
            Ok((partition, low, high))
        })
        .collect()
}

fn depth(brokers: &str, topic: &str) -> Result<u64, TransportError> {
    let consumer = reader(brokers)?;
    let extent = extent(&consumer, topic, Duration::from_secs(10))?;
    Ok(extent
        .into_iter()
        .map(|(_, low, high)| u64::try_from(high - low).unwrap_or(0))
        .sum())
}

fn read_all(brokers: &str, topic: &str) -> Result<Vec<KafkaDeadLetter>, TransportError> {
    let consumer = reader(brokers)?;
    let timeout = Duration::from_secs(10);
    let mut list = TopicPartitionList::new();
    let mut ends = Vec::new();
    for (partition, low, high) in extent(&consumer, topic, timeout)? {
        if high > low {
            list.add_partition_offset(topic, partition, Offset::Offset(low))
                .map_err(|e| TransportError::new("listing partitions", e))?;
            ends.push((partition, high));
        }
    }
    if ends.is_empty() {
        return Ok(Vec::new());
    }
    consumer
        .assign(&list)
        .map_err(|e| TransportError::new("assigning the dead-letter partitions", e))?;
    // Read to each partition's end as the broker reports it, then on until nothing more arrives
    // for a moment: a unit dead-lettered while reading is included, and a broker that
    // under-reports its high watermark after pipelined writes (tansu 0.6 does) loses no unit.
    const QUIET: Duration = Duration::from_millis(500);
    let mut found = Vec::new();
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    let mut reached = vec![false; ends.len()];
    let mut last_message = std::time::Instant::now();
    loop {
        let now = std::time::Instant::now();
        if reached.iter().all(|&r| r) && now.duration_since(last_message) >= QUIET {
            break;
        }
        if now > deadline {
            return Err(TransportError::msg(
                "reading the dead-letter topic",
                "the end of the topic was not reached within 60 s",
            ));
        }
        let Some(message) = consumer.poll(Duration::from_millis(100)) else {
            continue;
        };
        let message = match message {
            Ok(message) => message,
            // A connection the client re-establishes on its own: keep reading until the deadline.
            Err(error) => {
                tracing::debug!(%error, "reading the dead-letter topic");
                continue;
            }
        };
        last_message = std::time::Instant::now();
        if let Some(at) = ends.iter().position(|&(p, _)| p == message.partition())
            && message.offset() + 1 >= ends[at].1
        {
            reached[at] = true;
        }
        found.push(dead_letter(&message));
    }
    found.sort_by_key(|d| (d.partition, d.offset));
    Ok(found)
}

fn dead_letter(message: &rdkafka::message::BorrowedMessage<'_>) -> KafkaDeadLetter {
    let mut dead = KafkaDeadLetter {
        id: UnitId::new(format!(
            "{}:{}:{}",
            message.topic(),
            message.partition(),
            message.offset()
        )),
        partition: message.partition(),
        offset: message.offset(),
        key: message.key().map(Bytes::copy_from_slice),
        payload: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
        headers: Headers::default(),
        reason: None,
        detail: None,
        source_topic: None,
        source_partition: None,
        source_offset: None,
        delivery_count: None,
    };
    let mut own = Vec::new();
    if let Some(headers) = message.headers() {
        for header in headers.iter() {
            let value = header.value.unwrap_or_default();
            let text = std::str::from_utf8(value).ok();
            match header.key {
                crate::headers::MESSAGE_ID => {
                    if let Some(id) = text.filter(|t| !t.is_empty()) {
                        dead.id = UnitId::from(id);
                    }
                }
                crate::headers::DEAD_LETTER_REASON => {
                    dead.reason = text.and_then(ReasonKind::parse)
                }
                crate::headers::DEAD_LETTER_DETAIL => dead.detail = text.map(str::to_owned),
                crate::headers::DEAD_LETTER_SOURCE_TOPIC => {
                    dead.source_topic = text.map(str::to_owned)
                }
                crate::headers::DEAD_LETTER_SOURCE_PARTITION => {
                    dead.source_partition = text.and_then(|t| t.parse().ok())
                }
                crate::headers::DEAD_LETTER_SOURCE_OFFSET => {
                    dead.source_offset = text.and_then(|t| t.parse().ok())
                }
                crate::headers::DEAD_LETTER_DELIVERY_COUNT => {
                    dead.delivery_count = text.and_then(|t| t.parse().ok())
                }
                name if is_bookkeeping_header(name) || name.starts_with("x-dead-letter-") => {}
                name => own.push((name.to_owned(), Bytes::copy_from_slice(value))),
            }
        }
    }
    if !own.is_empty() {
        dead.headers = Headers::from_pairs(own);
    }
    dead
}
