//! The crash-loop count: which delivery of a partition's first unit not final is running,
//! recorded in the group's attempts topic before any handler runs, so a unit whose handling kills
//! its consumer every time is still counted, and reaches the dead letter (rule 2). See the
//! [module docs](super) for the whole design.
//!
//! The attempts topic has one partition for each partition of the topic and of the retry topic
//! (`2p` and `2p + 1`), and each record says `<offset>:<attempts>`: "the unit at `offset` is
//! being delivered for the `attempts`-th time without settling". Only the last record of a
//! partition is ever read.

use std::sync::Mutex;
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::producer::{FutureProducer, FutureRecord, Producer};
use rdkafka::{ClientConfig, Message, Offset, TopicPartitionList};

use crate::lock::lock;
use crate::partition::{Log, Partition};
use delivery_core::transport::TransportError;

/// How long reading the last record waits for the brokers before it fails.
const TIMEOUT: Duration = Duration::from_secs(10);

/// The record of one delivery: the unit at `offset` is being delivered the `attempts`-th time.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) struct Attempt {
    pub(super) offset: u64,
    pub(super) attempts: u32,
}

impl Attempt {
    fn encode(self) -> String {
        format!("{}:{}", self.offset, self.attempts)
    }

    fn decode(payload: &[u8]) -> Option<Attempt> {
        let text = std::str::from_utf8(payload).ok()?;
        let (offset, attempts) = text.split_once(':')?;
        Some(Attempt {
            offset: offset.parse().ok()?,
            attempts: attempts.parse().ok()?,
        })
    }
}

/// The attempts topic of one source: its writer (the source's confirmed producer) and a reader
/// of a partition's last record, which consumes nothing and commits nothing.
pub(super) struct Attempts {
    topic: String,
    reader: Mutex<BaseConsumer>,
}

impl Attempts {
    pub(super) fn new(topic: String, mut config: ClientConfig) -> Result<Self, TransportError> {
        let reader = config
            .set("group.id", "delivery-attempts-reader")
            .set("enable.auto.commit", "false")
            .set("auto.offset.reset", "earliest")
            .set("fetch.wait.max.ms", "10")
            .create()
            .map_err(|e| crate::error::RDKAFKA.error("creating the Kafka attempts reader", e))?;
        Ok(Attempts {
            topic,
            reader: Mutex::new(reader),
        })
    }

    /// The attempts topic's partition of `partition`.
    fn place((log, partition): Partition) -> i32 {
        partition.saturating_mul(2) + i32::from(log == Log::Retry)
    }

    /// The last record of `partition`, if any: blocking (a watermark query and a fetch).
    pub(super) fn last(&self, partition: Partition) -> Result<Option<Attempt>, TransportError> {
        let place = Self::place(partition);
        let reader = lock(&self.reader);
        let (low, high) = reader
            .fetch_watermarks(&self.topic, place, TIMEOUT)
            .map_err(|e| crate::error::RDKAFKA.error("reading the attempts topic's end", e))?;
        if high <= low {
            return Ok(None);
        }
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&self.topic, place, Offset::Offset(high - 1))
            .map_err(|e| crate::error::RDKAFKA.error("reading the attempts topic", e))?;
        reader
            .assign(&list)
            .map_err(|e| crate::error::RDKAFKA.error("reading the attempts topic", e))?;
        let deadline = Instant::now() + TIMEOUT;
        let found = loop {
            match reader.poll(Duration::from_millis(100)) {
                Some(Ok(message)) if message.offset() == high - 1 => {
                    break Ok(message.payload().and_then(Attempt::decode));
                }
                Some(Ok(_)) => {}
                Some(Err(e)) => {
                    break Err(crate::error::RDKAFKA.error("reading the attempts topic", e));
                }
                None if Instant::now() >= deadline => {
                    break Err(TransportError::msg(
                        "reading the attempts topic",
                        format!("no record at offset {} of partition {place}", high - 1),
                    ));
                }
                None => {}
            }
        };
        let _ = reader.unassign();
        found
    }

    /// Records, best effort, that the runs of `partitions` ended cleanly: every unit they handed
    /// out is final and committed (a revocation, a shutdown). The next run of each then reads its
    /// units concurrently from the start. Blocking: waits for the records at most 5 s. Missing,
    /// the next run reads the partition one unit at a time for a while, nothing worse.
    pub(super) fn ended_cleanly(&self, producer: &FutureProducer, partitions: &[Partition]) {
        if partitions.is_empty() {
            return;
        }
        let payload = Attempt {
            offset: 0,
            attempts: 0,
        }
        .encode();
        for &partition in partitions {
            let key = format!("{:?}:{}", partition.0, partition.1);
            let record = FutureRecord::<str, str>::to(&self.topic)
                .partition(Self::place(partition))
                .key(&key)
                .payload(&payload);
            if let Err((error, _)) = producer.send_result(record) {
                tracing::debug!(%error, ?partition, "recording a clean end failed");
            }
        }
        if let Err(error) = producer.flush(Duration::from_secs(5)) {
            tracing::debug!(%error, "recording clean ends timed out");
        }
    }

    /// Records `attempt` for `partition` and waits for the broker's acknowledgement (`acks=all`).
    pub(super) async fn record(
        &self,
        producer: &FutureProducer,
        partition: Partition,
        attempt: Attempt,
    ) -> Result<(), TransportError> {
        let key = format!("{:?}:{}", partition.0, partition.1);
        let payload = attempt.encode();
        let record = FutureRecord::<str, str>::to(&self.topic)
            .partition(Self::place(partition))
            .key(&key)
            .payload(&payload);
        producer
            .send(record, Duration::from_secs(10))
            .await
            .map(|_| ())
            .map_err(|(e, _)| {
                crate::error::RDKAFKA.error("recording a delivery in the attempts topic", e)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_reads_back_and_garbage_is_none() {
        let attempt = Attempt {
            offset: 42,
            attempts: 3,
        };
        assert_eq!(Attempt::decode(attempt.encode().as_bytes()), Some(attempt));
        assert_eq!(Attempt::decode(b"42"), None);
        assert_eq!(Attempt::decode(b"x:1"), None);
        assert_eq!(Attempts::place((Log::Source, 2)), 4);
        assert_eq!(Attempts::place((Log::Retry, 2)), 5);
    }
}
