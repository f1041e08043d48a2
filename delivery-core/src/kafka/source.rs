//! A consumer of one topic (and its retry topic) through a consumer group, the handle that settles
//! each unit, and the commit book: the watermarks, and the one place offsets are committed.

use std::cmp::Reverse;
use std::collections::BinaryHeap;
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext, Rebalance, StreamConsumer};
use rdkafka::message::BorrowedMessage;
use rdkafka::producer::FutureProducer;
use rdkafka::{ClientContext, Message};
use tokio::time::Instant;

use super::book::{Book, BookState};
use super::codec::{Origin, Read};
use super::settle::KafkaHandle;
use super::topology::KafkaTopology;
use crate::transport::{Source, TransportError};
use crate::unit::{DeliveryCount, Stamp, Unit, UnitId};

/// Which of the consumer's two logs a partition belongs to.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub(super) enum Log {
    Source,
    Retry,
}

/// A partition of one of the two logs: the watermarks' key.
pub(super) type Partition = (Log, i32);

/// A consumer of one Kafka topic and its retry topic through a consumer group (see the
/// [module docs](super)).
///
/// Units of the retry topic that are not due yet are held here, not handed to a handler, until
/// their backoff has passed; they hold their partition's watermark meanwhile. If the source is
/// dropped, or the partition revoked, they are read again from the committed offset. At most
/// [`max_waiting`](KafkaTopology::max_waiting) are held: at that many the retry topic's partitions
/// are paused, so the rest wait in the broker, and they are resumed at half as many.
pub struct KafkaSource {
    shared: Arc<Shared>,
    /// Returned units waiting out their backoff, earliest first.
    waiting: BinaryHeap<Reverse<Waiting>>,
    /// Assigns each waiting unit a place, so equal due times keep their arrival order.
    arrivals: u64,
    /// At this many units waiting, the retry topic's partitions are paused.
    max_waiting: usize,
    /// `delivery_retry_waiting{source}`: how many units are waiting.
    waiting_gauge: metrics::Gauge,
}

struct Waiting {
    due: Instant,
    arrival: u64,
    unit: Unit,
    handle: KafkaHandle,
}

impl PartialEq for Waiting {
    fn eq(&self, other: &Self) -> bool {
        (self.due, self.arrival) == (other.due, other.arrival)
    }
}
impl Eq for Waiting {}
impl PartialOrd for Waiting {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiting {
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        (self.due, self.arrival).cmp(&(other.due, other.arrival))
    }
}

/// What the source, its handles and its commit task share.
pub(super) struct Shared {
    pub(super) consumer: StreamConsumer<Context>,
    pub(super) producer: FutureProducer,
    pub(super) book: Arc<Book>,
    pub(super) retry_topic: Arc<str>,
    pub(super) dead_letter_topic: Arc<str>,
    pub(super) bound: NonZeroU32,
}

/// The consumer's context: commits on revocation, and keeps newly assigned retry-topic partitions
/// paused or running as the source wants them.
///
/// Its callbacks run inside the consumer's poll, so within [`KafkaSource::receive`] (or when the
/// consumer is dropped), never concurrently with the source's own pausing and resuming.
pub(super) struct Context {
    book: Arc<Book>,
    /// The source holds its retry-topic partitions paused (it holds `max_waiting` units).
    retry_paused: AtomicBool,
    /// Partitions were revoked since the source last looked: units it holds of them are stale.
    revoked: AtomicBool,
}

impl ClientContext for Context {}

impl ConsumerContext for Context {
    fn pre_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        match rebalance {
            Rebalance::Revoke(list) => {
                self.book.revoke(consumer, list);
                self.revoked.store(true, Ordering::Relaxed);
            }
            Rebalance::Assign(list) => {
                tracing::info!(assigned = list.count(), "partitions assigned")
            }
            Rebalance::Error(error) => tracing::warn!(%error, "rebalance failed"),
        }
    }

    fn post_rebalance(&self, consumer: &BaseConsumer<Self>, rebalance: &Rebalance<'_>) {
        let Rebalance::Assign(list) = rebalance else {
            return;
        };
        let retry = self.book.retry_partitions(list);
        if retry.count() == 0 {
            return;
        }
        // A partition assigned while the source holds back the retry topic is paused before it is
        // fetched. Otherwise it is resumed: librdkafka keeps an application's pause on a partition
        // across its revocation and a later assignment, and nothing else would lift it.
        let paused = self.retry_paused.load(Ordering::Relaxed);
        let done = if paused {
            consumer.pause(&retry)
        } else {
            consumer.resume(&retry)
        };
        if let Err(error) = done {
            tracing::warn!(%error, paused, "pausing or resuming newly assigned retry partitions failed");
        }
    }
}

impl KafkaSource {
    /// A consumer of `topology`'s topic and retry topic at `brokers` (a bootstrap list such as
    /// `127.0.0.1:9092`), in its group. The topics must exist
    /// ([`KafkaTopology::declare`]). A group without a committed offset starts at the earliest
    /// unit. Call it within a Tokio runtime: the periodic commit runs as a task of its own.
    pub fn connect(brokers: &str, topology: KafkaTopology) -> Result<Self, TransportError> {
        Self::connect_with(brokers, topology, |_| {})
    }

    /// Like [`connect`](Self::connect), with `configure` given the consumer's configuration to
    /// add or change properties (security, timeouts). The properties this transport relies on —
    /// `group.id`, `enable.auto.commit=false`, `enable.auto.offset.store=false` — are set after
    /// it and cannot be changed.
    pub fn connect_with(
        brokers: &str,
        topology: KafkaTopology,
        configure: impl FnOnce(&mut rdkafka::ClientConfig),
    ) -> Result<Self, TransportError> {
        let topic: Arc<str> = topology.topic.as_str().into();
        let retry_topic: Arc<str> = topology.retry_topic_name().into();
        let book = Arc::new(Book {
            state: Mutex::new(BookState::default()),
            committing: Mutex::new(()),
            topic: topic.clone(),
            retry_topic: retry_topic.clone(),
        });
        let mut config = super::config(brokers);
        config
            .set("auto.offset.reset", "earliest")
            .set(
                "session.timeout.ms",
                topology.session_timeout_ms.to_string(),
            )
            .set("heartbeat.interval.ms", "1000");
        configure(&mut config);
        config
            .set("group.id", &topology.group)
            .set("enable.auto.commit", "false")
            .set("enable.auto.offset.store", "false");
        let consumer: StreamConsumer<Context> = config
            .create_with_context(Context {
                book: book.clone(),
                retry_paused: AtomicBool::new(false),
                revoked: AtomicBool::new(false),
            })
            .map_err(|e| TransportError::new("creating the Kafka consumer", e))?;
        consumer
            .subscribe(&[&topic, &retry_topic])
            .map_err(|e| TransportError::new("subscribing to the Kafka topics", e))?;
        let producer = super::publish::one_record_per_batch(brokers)?;
        let shared = Arc::new(Shared {
            consumer,
            producer,
            book,
            retry_topic,
            dead_letter_topic: topology.dead_letter_topic_name().into(),
            bound: topology.delivery_bound(),
        });
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            TransportError::new(
                "starting the Kafka commit task (call within a Tokio runtime)",
                e,
            )
        })?;
        runtime.spawn(commit_periodically(
            Arc::downgrade(&shared),
            topology.commit_interval_time(),
        ));
        let waiting_gauge =
            metrics::gauge!("delivery_retry_waiting", "source" => topology.topic.clone());
        Ok(KafkaSource {
            waiting_gauge,
            shared,
            waiting: BinaryHeap::new(),
            arrivals: 0,
            max_waiting: topology.waiting_limit(),
        })
    }

    /// Commits now every partition whose watermark advanced. The source does this on its own
    /// every commit interval, on revocation and when dropped.
    pub async fn commit(&self) -> Result<(), TransportError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.book.commit_owed(&shared.consumer))
            .await
            .map_err(|e| TransportError::new("committing offsets", e))?
    }

    /// The number of units waiting changed (`arrived`: by one more): keeps the gauge current, and
    /// pauses the retry topic's partitions at `max_waiting` units, resumes them at half as many.
    ///
    /// An arrival at or past the limit pauses the current assignment again even if the source
    /// already holds it paused: that unit came from a partition the pause did not cover.
    fn waiting_changed(&mut self, arrived: bool) {
        let held = self.waiting.len();
        self.waiting_gauge.set(held as f64);
        let paused = self
            .shared
            .consumer
            .context()
            .retry_paused
            .load(Ordering::Relaxed);
        if arrived && held >= self.max_waiting {
            self.pause_retry(true, held);
        } else if paused && held <= self.max_waiting / 2 {
            self.pause_retry(false, held);
        }
    }

    /// Pauses (or resumes) the retry topic's partitions currently assigned. librdkafka pauses
    /// synchronously: once this returns, what it had fetched of them and not handed out is
    /// discarded, and fetching resumes after the last unit handed out, so nothing is skipped.
    fn pause_retry(&self, pause: bool, held: usize) {
        let consumer = &self.shared.consumer;
        // Waits for librdkafka's threads to apply it: a short wait, not I/O with the broker.
        let done = consumer.assignment().and_then(|assigned| {
            let retry = self.shared.book.retry_partitions(&assigned);
            if retry.count() == 0 {
                return Ok(0);
            }
            if pause {
                consumer.pause(&retry)?;
            } else {
                consumer.resume(&retry)?;
            }
            Ok(retry.count())
        });
        match done {
            Ok(partitions) => {
                // Partitions assigned from now on follow suit (`Context::post_rebalance`).
                consumer
                    .context()
                    .retry_paused
                    .store(pause, Ordering::Relaxed);
                if pause {
                    tracing::info!(
                        held,
                        partitions,
                        "retry topic paused: the most returned units are held"
                    );
                } else {
                    tracing::info!(held, partitions, "retry topic resumed");
                }
            }
            // Tried again the next time the count changes.
            Err(error) => {
                tracing::warn!(%error, pause, "pausing or resuming the retry topic failed")
            }
        }
    }

    /// The unit and handle of one message, and when it is due if it came from the retry topic.
    fn admit(&self, message: &BorrowedMessage<'_>) -> (Unit, KafkaHandle, Option<Instant>) {
        let topic = message.topic();
        let partition = message.partition();
        let offset = u64::try_from(message.offset()).unwrap_or(0);
        let log = self.shared.book.log(topic).unwrap_or(Log::Source);
        let read = Read::of(message);
        let id = read
            .id
            .clone()
            .unwrap_or_else(|| UnitId::new(format!("{topic}:{partition}:{offset}")));
        let count = DeliveryCount::new(read.count.unwrap_or(1));
        let origin = read.origin.clone().unwrap_or_else(|| Origin {
            topic: topic.into(),
            partition,
            offset: message.offset(),
        });
        let mut unit = Unit::new(id, read.payload)
            .with_delivery_count(count)
            .with_headers(read.headers);
        if log == Log::Source {
            unit = unit.with_stamp(Stamp(offset));
        }
        let at = self
            .shared
            .book
            .track((log, partition), offset)
            .map(|generation| Tracked {
                partition: (log, partition),
                offset,
                generation,
            });
        let due = match (log, read.due_ms) {
            (Log::Retry, Some(due_ms)) => {
                let now_ms = SystemTime::now()
                    .duration_since(UNIX_EPOCH)
                    .map_or(0, |d| d.as_millis() as u64);
                Some(Instant::now() + Duration::from_millis(due_ms.saturating_sub(now_ms)))
            }
            _ => None,
        };
        let handle = KafkaHandle {
            shared: self.shared.clone(),
            at,
            key: message.key().map(Bytes::copy_from_slice),
            origin,
        };
        (unit, handle, due)
    }
}

/// Commits the watermarks' advance every `interval` until the source is gone.
async fn commit_periodically(shared: Weak<Shared>, interval: Duration) {
    let mut ticks = tokio::time::interval(interval);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    ticks.tick().await;
    loop {
        ticks.tick().await;
        let Some(strong) = shared.upgrade() else {
            return;
        };
        let committed =
            tokio::task::spawn_blocking(move || strong.book.commit_owed(&strong.consumer)).await;
        match committed {
            Ok(Ok(())) => {}
            // Left uncommitted: the next interval carries it again.
            Ok(Err(error)) => tracing::warn!(%error, "committing offsets failed"),
            Err(error) => tracing::warn!(%error, "the commit task failed"),
        }
    }
}

impl Source for KafkaSource {
    type Handle = KafkaHandle;

    async fn receive(&mut self) -> Result<Option<(Unit, KafkaHandle)>, TransportError> {
        loop {
            // Read first, swapped only when set: no locked write on every receive.
            let revoked = &self.shared.consumer.context().revoked;
            if revoked.load(Ordering::Relaxed) && revoked.swap(false, Ordering::Relaxed) {
                // Units of revoked partitions are the new owner's: they hold no place in the limit.
                self.waiting.retain(|Reverse(w)| w.handle.is_current());
                self.waiting_changed(false);
            }
            if let Some(Reverse(first)) = self.waiting.peek()
                && first.due <= Instant::now()
            {
                let Some(Reverse(Waiting { unit, handle, .. })) = self.waiting.pop() else {
                    continue;
                };
                self.waiting_changed(false);
                if handle.is_current() {
                    return Ok(Some((unit, handle)));
                }
                continue; // revoked while it waited: the new owner reads it again
            }
            // While the retry topic is paused, units of the source topic still arrive here, and
            // the earliest due time still wakes the source.
            let message = match self.waiting.peek() {
                Some(Reverse(first)) => {
                    let due = first.due;
                    tokio::select! {
                        message = self.shared.consumer.recv() => message,
                        () = tokio::time::sleep_until(due) => continue,
                    }
                }
                None => self.shared.consumer.recv().await,
            };
            let message = message.map_err(|e| TransportError::new("receiving from Kafka", e))?;
            let (unit, handle, due) = self.admit(&message);
            drop(message);
            match due {
                Some(due) if due > Instant::now() => {
                    self.arrivals += 1;
                    let arrival = self.arrivals;
                    self.waiting.push(Reverse(Waiting {
                        due,
                        arrival,
                        unit,
                        handle,
                    }));
                    self.waiting_changed(true);
                }
                _ => return Ok(Some((unit, handle))),
            }
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.shared.bound)
    }

    fn name(&self) -> &str {
        &self.shared.book.topic
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // The runtime drops the source once its handlers are settled: commit what they finished.
        // Units still waiting are not final; they are read again from the committed offset.
        self.waiting_gauge.set(0.0);
        if let Err(error) = self.shared.book.commit_owed(&self.shared.consumer) {
            tracing::warn!(%error, "committing offsets at shutdown failed; those units are read again");
        }
    }
}

/// Where a handle's unit sits in the watermarks.
#[derive(Clone, Copy, Debug)]
pub(super) struct Tracked {
    pub(super) partition: Partition,
    pub(super) offset: u64,
    pub(super) generation: u64,
}
