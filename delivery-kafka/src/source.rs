//! A consumer of one topic (and its retry topic) through a consumer group, the handle that settles
//! each unit, and the commit book: the watermarks, and the one place offsets are committed.

use std::cmp::Reverse;
use std::collections::{BTreeMap, BinaryHeap, HashMap};
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

use super::attempts::{Attempt, Attempts};
use super::book::{Book, BookState};
use super::codec::{Origin, Read};
use super::keeper::{self, Admitted, Keeper};
use super::settle::KafkaHandle;
use super::topology::KafkaTopology;
use delivery_core::transport::Retry;
use delivery_core::transport::{Source, TransportError};
use delivery_core::unit::{DeliveryCount, Stamp, Unit, UnitId};

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
    /// The topic and group, for the unit's span.
    messaging: delivery_core::trace::Messaging,
    /// Returned units waiting out their backoff, earliest first.
    waiting: BinaryHeap<Reverse<Waiting>>,
    /// Assigns each waiting unit a place, so equal due times keep their arrival order.
    arrivals: u64,
    /// At this many units waiting, the retry topic's partitions are paused.
    max_waiting: usize,
    /// `delivery_retry_waiting{source}`: how many units are waiting.
    waiting_gauge: metrics::Gauge,
    /// Each partition's run since it was assigned: whether it is read one unit at a time.
    runs: HashMap<Partition, Run>,
    /// A unit received whose placing (the broker calls of the crash-loop count) a cancelled
    /// `receive` left unfinished: the next call finishes it first.
    placing: Option<Placing>,
}

/// A unit received and not placed yet (see [`KafkaSource::place`]).
struct Placing {
    unit: Unit,
    handle: KafkaHandle,
    due: Option<Instant>,
    /// The partition's last recorded delivery, once read: a call resumed after a cancellation
    /// does not read it again (it may be the record the cancelled call wrote).
    last: Option<Option<Attempt>>,
}

/// After a run that did not finish its partition's first unit (it crashed, or lost the partition
/// while handling it), this many units of the partition are handed out one at a time.
const ALONE_AFTER_A_CRASH: usize = 100;

/// A partition's units since it was assigned to this source (one generation of the book).
struct Run {
    generation: u64,
    /// `Some` while the partition is read one unit at a time.
    alone: Option<Alone>,
}

/// A partition read one unit at a time: each is handed out once the one before it is final, its
/// partition's offset committed up to it and its delivery recorded in the attempts topic.
struct Alone {
    /// Units still to hand out alone before the partition's units run concurrently again.
    left: usize,
    /// Units received and not handed out yet, by offset.
    queue: BTreeMap<u64, Waiting>,
    /// The last delivery recorded for the partition.
    last: Option<Attempt>,
    /// The partition is paused: the queue holds more than the units left to hand out alone.
    paused: bool,
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
    /// Polls the consumer while the runtime is not asking for units (see [`super::keeper`]).
    pub(super) keeper: Keeper,
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
    /// The keeper holds every assigned partition paused (see [`super::keeper`]).
    pub(super) held: AtomicBool,
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
        // Assigned while the keeper holds every partition paused: paused before it is fetched,
        // and resumed with the rest when the source takes the poll back.
        if self.held.load(Ordering::Relaxed) {
            if let Err(error) = consumer.pause(list) {
                tracing::warn!(%error, "pausing newly assigned partitions failed");
            }
            return;
        }
        // A partition assigned while the source holds back the retry topic is paused before it is
        // fetched. Every other one is resumed: librdkafka keeps an application's pause on a
        // partition across its revocation and a later assignment (the keeper's, the retry
        // topic's, a partition read alone), and nothing else would lift it.
        let paused = self.retry_paused.load(Ordering::Relaxed);
        let retry = self.book.retry_partitions(list);
        if paused
            && retry.count() > 0
            && let Err(error) = consumer.pause(&retry)
        {
            tracing::warn!(%error, "pausing newly assigned retry partitions failed");
        }
        let mut running = rdkafka::TopicPartitionList::new();
        for element in list.elements() {
            if !(paused && element.topic() == &*self.book.retry_topic) {
                running.add_partition(element.topic(), element.partition());
            }
        }
        if let Err(error) = consumer.resume(&running) {
            tracing::warn!(%error, "resuming newly assigned partitions failed");
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
    /// add or change properties of the consumer alone. Properties every client needs (security,
    /// SASL, TLS, timeouts) belong in the topology's [`client`](KafkaTopology::client), which the
    /// consumer, the producer of returns and dead letters and the attempts reader are all built
    /// from; `configure` runs after it. The properties this transport relies on —
    /// `group.id`, `enable.auto.commit=false`, `enable.auto.offset.store=false` — are set after
    /// it and cannot be changed.
    pub fn connect_with(
        brokers: &str,
        topology: KafkaTopology,
        configure: impl FnOnce(&mut rdkafka::ClientConfig),
    ) -> Result<Self, TransportError> {
        let topic: Arc<str> = topology.topic.as_str().into();
        let retry_topic: Arc<str> = topology.retry_topic_name().into();
        let common = topology.client_config(brokers);
        let producer = super::publish::one_record_per_batch(common.clone())?;
        let book = Arc::new(Book {
            state: Mutex::new(BookState::default()),
            committing: Mutex::new(()),
            topic: topic.clone(),
            retry_topic: retry_topic.clone(),
            attempts: Attempts::new(topology.attempts_topic_name(), common.clone())?,
            producer: producer.clone(),
            alone_done: tokio::sync::Notify::new(),
        });
        let mut config = common;
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
        let max_poll_interval = Keeper::max_poll_interval(&config);
        let consumer: StreamConsumer<Context> = config
            .create_with_context(Context {
                book: book.clone(),
                retry_paused: AtomicBool::new(false),
                revoked: AtomicBool::new(false),
                held: AtomicBool::new(false),
            })
            .map_err(|e| crate::error::transport_error("creating the Kafka consumer", e))?;
        consumer
            .subscribe(&[&topic, &retry_topic])
            .map_err(|e| crate::error::transport_error("subscribing to the Kafka topics", e))?;
        let shared = Arc::new(Shared {
            consumer,
            producer,
            book,
            retry_topic,
            dead_letter_topic: topology.dead_letter_topic_name().into(),
            bound: topology.delivery_bound(),
            keeper: Keeper::new(max_poll_interval),
        });
        let runtime = tokio::runtime::Handle::try_current().map_err(|e| {
            crate::error::transport_error(
                "starting the Kafka commit task (call within a Tokio runtime)",
                e,
            )
        })?;
        runtime.spawn(commit_periodically(
            Arc::downgrade(&shared),
            topology.commit_interval_time(),
        ));
        runtime.spawn(keeper::keep_polling(
            Arc::downgrade(&shared),
            shared.keeper.after(),
        ));
        let waiting_gauge =
            metrics::gauge!(delivery_core::observe::RETRY_WAITING, "source" => topology.topic.clone());
        Ok(KafkaSource {
            messaging: delivery_core::trace::Messaging::new("kafka", topology.topic.clone())
                .consumer_group(topology.group.clone()),
            waiting_gauge,
            shared,
            waiting: BinaryHeap::new(),
            arrivals: 0,
            max_waiting: topology.waiting_limit(),
            runs: HashMap::new(),
            placing: None,
        })
    }

    /// Commits now every partition whose watermark advanced. The source does this on its own
    /// every commit interval, on revocation and when dropped.
    pub async fn commit(&self) -> Result<(), TransportError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.book.commit_owed(&shared.consumer))
            .await
            .map_err(|e| crate::error::transport_error("committing offsets", e))?
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
}

/// The unit and handle of one message, tracked in the book, and when it is due if it came from
/// the retry topic.
pub(super) fn admit(shared: &Arc<Shared>, message: &BorrowedMessage<'_>) -> Admitted {
    let topic = message.topic();
    let partition = message.partition();
    let offset = u64::try_from(message.offset()).unwrap_or(0);
    let log = shared.book.log(topic).unwrap_or(Log::Source);
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
    // The stamp its producer set or a retry kept, else its offset in the source topic.
    let stamp = read
        .stamp
        .unwrap_or_else(|| u64::try_from(origin.offset).ok().map(Stamp));
    if let Some(stamp) = stamp {
        unit = unit.with_stamp(stamp);
    }
    let at = shared
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
        shared: shared.clone(),
        at,
        key: message.key().map(Bytes::copy_from_slice),
        origin,
    };
    (unit, handle, due)
}

/// The crash-loop count (see the [module docs](super)): each partition's run starts by recording
/// its first unit's delivery, and after a run that did not finish that unit its partition is read
/// one unit at a time for a while.
impl KafkaSource {
    /// A unit not yet due is held until it is (`None`); any other is handed out.
    fn hold_or_hand_out(
        &mut self,
        unit: Unit,
        handle: KafkaHandle,
        due: Option<Instant>,
    ) -> Option<(Unit, KafkaHandle)> {
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
                None
            }
            _ => Some((unit, handle)),
        }
    }

    /// The earliest time a held unit is due: the waiting returns', and the first unit queued of
    /// each partition read alone with nothing of it handed out.
    fn next_due(&self) -> Option<Instant> {
        let waiting = self.waiting.peek().map(|Reverse(first)| first.due);
        let alone = self
            .runs
            .iter()
            .filter_map(|(partition, run)| {
                let (_, first) = run.alone.as_ref()?.queue.first_key_value()?;
                (!self.shared.book.alone_out(*partition)).then_some(first.due)
            })
            .min();
        waiting.into_iter().chain(alone).min()
    }

    /// Runs `step` (a broker call the crash-loop count needs before a unit is handed out) until it
    /// succeeds, pausing longer each time; `None` once the unit at `at` is no longer current (its
    /// partition revoked meanwhile).
    async fn until_done<T, F: Future<Output = Result<T, TransportError>>>(
        book: &Book,
        at: Tracked,
        what: &'static str,
        mut step: impl FnMut() -> F,
    ) -> Option<T> {
        let mut retry = Retry::reconnect();
        loop {
            match step().await {
                Ok(done) => return Some(done),
                Err(error) => {
                    if !book.is_current(at.partition, at.generation) {
                        return None;
                    }
                    let pause = retry.failed();
                    tracing::warn!(%error, what, retry_in_ms = pause.as_millis() as u64,
                        "recording a delivery failed; the partition waits until it succeeds");
                    tokio::time::sleep(pause).await;
                }
            }
        }
    }

    /// Where the unit just admitted (`self.placing`) goes: `Some` to hand out (or hold until due)
    /// as usual, `None` when it was queued to be handed out alone, or its partition was revoked
    /// meanwhile. Cancel safe: the unit stays in `self.placing` until its broker calls are done,
    /// and a cancelled call is done again by the next.
    ///
    /// The first unit of a partition's run reads the partition's last recorded delivery. If it is
    /// not a clean end, an earlier run died (or lost the partition) with a unit unfinished —
    /// maybe this one, maybe one after it: the partition is read alone from here. Otherwise this
    /// delivery is recorded as the first, confirmed, before anything of the partition is handed
    /// out.
    async fn place(&mut self) -> Option<(Unit, KafkaHandle, Option<Instant>)> {
        let at = self.placing.as_ref()?.handle.at;
        let Some(at) = at else {
            return self
                .placing
                .take()
                .map(|placing| (placing.unit, placing.handle, placing.due));
        };
        let partition = at.partition;
        let known = self
            .runs
            .get(&partition)
            .is_some_and(|run| run.generation == at.generation);
        if !known {
            let shared = self.shared.clone();
            let book = &shared.book;
            let read = self.placing.as_ref()?.last;
            let last = match read {
                Some(last) => last,
                None => {
                    let read =
                        Self::until_done(book, at, "reading the last delivery recorded", || {
                            let shared = shared.clone();
                            async move {
                                tokio::task::spawn_blocking(move || {
                                    shared.book.attempts.last(partition)
                                })
                                .await
                                .map_err(|e| crate::error::transport_error("reading the attempts topic", e))?
                            }
                        })
                        .await;
                    let Some(last) = read else {
                        self.placing = None;
                        return None;
                    };
                    self.placing.as_mut()?.last = Some(last);
                    last
                }
            };
            // A run that ended cleanly records so (attempts 0); any other record is a run that
            // died with a unit unfinished: maybe this one, maybe one after it.
            let unfinished = last.filter(|last| last.attempts > 0);
            let alone = match unfinished {
                Some(last) => {
                    tracing::warn!(
                        ?partition,
                        offset = at.offset,
                        attempts = last.attempts,
                        "an earlier consumer of this partition died with a unit unfinished: the partition is read one unit at a time for a while"
                    );
                    Some(Alone {
                        left: ALONE_AFTER_A_CRASH,
                        queue: BTreeMap::new(),
                        last: Some(last),
                        paused: false,
                    })
                }
                None => {
                    let first = Attempt {
                        offset: at.offset,
                        attempts: 1,
                    };
                    let recorded = Self::until_done(book, at, "recording a delivery", || {
                        book.attempts.record(&shared.producer, partition, first)
                    })
                    .await;
                    if recorded.is_none() {
                        self.placing = None;
                        return None;
                    }
                    None
                }
            };
            self.runs.insert(
                partition,
                Run {
                    generation: at.generation,
                    alone,
                },
            );
        }
        let Placing {
            unit, handle, due, ..
        } = self.placing.take()?;
        let Some(alone) = self
            .runs
            .get_mut(&partition)
            .and_then(|run| run.alone.as_mut())
        else {
            return Some((unit, handle, due));
        };
        self.arrivals += 1;
        let over = alone.queue.len() > alone.left;
        alone.queue.insert(
            at.offset,
            Waiting {
                due: due.unwrap_or_else(Instant::now),
                arrival: self.arrivals,
                unit,
                handle,
            },
        );
        if over {
            // More than the units left to hand out alone: the rest wait in the broker.
            alone.paused = true;
            self.pause_partition(partition, true);
        }
        None
    }

    /// Pauses (or resumes) one partition of the consumer's assignment.
    fn pause_partition(&self, (log, partition): Partition, pause: bool) {
        let mut list = rdkafka::TopicPartitionList::new();
        list.add_partition(self.shared.book.topic(log), partition);
        let consumer = &self.shared.consumer;
        let done = if pause {
            consumer.pause(&list)
        } else {
            consumer.resume(&list)
        };
        if let Err(error) = done {
            tracing::warn!(%error, pause, ?log, partition, "pausing or resuming a partition read alone failed");
        }
    }

    /// Takes the partitions back from the keeper, if it held them paused: resumes them all but
    /// those the source holds paused itself (the retry topic at its limit, a partition read alone
    /// with more queued than it hands out).
    fn resume_held(&self) {
        let retry_paused = self
            .shared
            .consumer
            .context()
            .retry_paused
            .load(Ordering::Relaxed);
        let book = &self.shared.book;
        keeper::resume_held(&self.shared, |topic, partition| {
            let Some(log) = book.log(topic) else {
                return false;
            };
            (log == Log::Retry && retry_paused)
                || self
                    .runs
                    .get(&(log, partition))
                    .and_then(|run| run.alone.as_ref())
                    .is_some_and(|alone| alone.paused)
        });
    }

    /// The next unit to hand out alone, if one is due and nothing else of its partition is out:
    /// its partition's offset is committed up to it, and its delivery recorded, first. A
    /// partition done being read alone hands its queue to the usual path.
    async fn next_alone(&mut self) -> Option<(Unit, KafkaHandle)> {
        if self.runs.values().all(|run| run.alone.is_none()) {
            return None;
        }
        let shared = self.shared.clone();
        let book = &shared.book;
        let done: Vec<Partition> = self
            .runs
            .iter()
            .filter(|(partition, run)| {
                run.alone.as_ref().is_some_and(|alone| alone.left == 0)
                    && !book.alone_out(**partition)
            })
            .map(|(partition, _)| *partition)
            .collect();
        for partition in done {
            let Some(alone) = self
                .runs
                .get_mut(&partition)
                .and_then(|run| run.alone.take())
            else {
                continue;
            };
            tracing::info!(?partition, "partition read concurrently again");
            for (_, waiting) in alone.queue {
                self.waiting.push(Reverse(waiting));
            }
            self.waiting_changed(false);
            if alone.paused {
                self.pause_partition(partition, false);
            }
        }
        let now = Instant::now();
        let ready = self.runs.iter().find_map(|(partition, run)| {
            let (_, first) = run.alone.as_ref()?.queue.first_key_value()?;
            (first.due <= now && !book.alone_out(*partition)).then_some(*partition)
        })?;
        // Cancel safe: the unit stays queued until its broker calls are done; a cancelled call
        // does them again (the same commit, the same record).
        let alone = self.runs.get(&ready)?.alone.as_ref()?;
        let (&offset, first) = alone.queue.first_key_value()?;
        let at = first.handle.at?;
        let attempt = Attempt {
            offset,
            attempts: match alone.last {
                Some(last) if last.offset == offset => last.attempts.saturating_add(1),
                _ => 1,
            },
        };
        let book = &shared.book;
        // Everything before it is final: commit up to it, so the record names the committed
        // position, where the next run starts if this one dies.
        let committed = Self::until_done(
            book,
            at,
            "committing before a unit handed out alone",
            || {
                let shared = shared.clone();
                async move {
                    tokio::task::spawn_blocking(move || {
                        shared.book.commit_owed_of(&shared.consumer, ready)
                    })
                    .await
                    .map_err(|e| crate::error::transport_error("committing offsets", e))?
                }
            },
        )
        .await;
        let recorded = match committed {
            Some(()) => {
                Self::until_done(book, at, "recording a delivery", || {
                    book.attempts.record(&shared.producer, ready, attempt)
                })
                .await
            }
            None => None,
        };
        let alone = self.runs.get_mut(&ready)?.alone.as_mut()?;
        let (_, Waiting { unit, handle, .. }) = alone.queue.pop_first()?;
        // Revoked meanwhile: the new owner reads it again.
        if recorded.is_none() || !handle.is_current() {
            return None;
        }
        book.hand_out_alone(ready, offset);
        alone.last = Some(attempt);
        alone.left = alone.left.saturating_sub(1);
        if alone.paused && alone.queue.len() <= alone.left {
            alone.paused = false;
            self.pause_partition(ready, false);
        }
        // Each run that handed it out and never finished it was a delivery.
        let count = unit
            .delivery_count()
            .get()
            .saturating_add(attempt.attempts - 1);
        Some((unit.with_delivery_count(DeliveryCount::new(count)), handle))
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
        // The poll is the source's while the runtime asks; the keeper's otherwise.
        let _polling = self.shared.keeper.take().await;
        self.resume_held();
        loop {
            // Read first, swapped only when set: no locked write on every receive.
            let revoked = &self.shared.consumer.context().revoked;
            if revoked.load(Ordering::Relaxed) && revoked.swap(false, Ordering::Relaxed) {
                // Units of revoked partitions are the new owner's: they hold no place in the limit.
                self.waiting.retain(|Reverse(w)| w.handle.is_current());
                self.waiting_changed(false);
                let book = &self.shared.book;
                self.runs
                    .retain(|partition, run| book.is_current(*partition, run.generation));
            }
            // A unit whose placing a cancelled call left unfinished comes first.
            if self.placing.is_some() {
                match self.place().await {
                    Some((unit, handle, due)) => match self.hold_or_hand_out(unit, handle, due) {
                        Some(out) => return Ok(Some(out)),
                        None => continue,
                    },
                    None => continue,
                }
            }
            if let Some(alone) = self.next_alone().await {
                return Ok(Some(alone));
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
            // Units the keeper received while the handlers were busy come first, in order.
            if let Some((unit, handle, due)) = self.shared.keeper.stashed() {
                if !handle.is_current() {
                    continue; // revoked since: the new owner reads it again
                }
                self.placing = Some(Placing {
                    unit,
                    handle,
                    due,
                    last: None,
                });
                continue;
            }
            // While the retry topic is paused, units of the source topic still arrive here, and
            // the earliest due time still wakes the source, as does a unit handed out alone
            // becoming final.
            let due = self.next_due();
            let alone = self.runs.values().any(|run| run.alone.is_some());
            let message = if due.is_none() && !alone {
                self.shared.consumer.recv().await
            } else {
                let far = Instant::now() + Duration::from_secs(3600);
                tokio::select! {
                    message = self.shared.consumer.recv() => message,
                    () = tokio::time::sleep_until(due.unwrap_or(far)), if due.is_some() => continue,
                    () = self.shared.book.alone_done.notified(), if alone => continue,
                }
            };
            let message = message.map_err(|e| crate::error::transport_error("receiving from Kafka", e))?;
            let (unit, handle, due) = admit(&self.shared, &message);
            drop(message);
            self.placing = Some(Placing {
                unit,
                handle,
                due,
                last: None,
            });
            let Some((unit, handle, due)) = self.place().await else {
                continue;
            };
            if let Some(out) = self.hold_or_hand_out(unit, handle, due) {
                return Ok(Some(out));
            }
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.shared.bound)
    }

    fn name(&self) -> &str {
        &self.shared.book.topic
    }

    fn messaging(&self) -> delivery_core::trace::Messaging {
        self.messaging.clone()
    }
}

impl Drop for KafkaSource {
    fn drop(&mut self) {
        // The runtime drops the source once its handlers are settled: commit what they finished.
        // Units still waiting are not final; they are read again from the committed offset.
        self.waiting_gauge.set(0.0);
        self.shared.keeper.close();
        match self.shared.book.commit_owed(&self.shared.consumer) {
            Ok(()) => self.shared.book.end_cleanly(self.runs.keys().copied()),
            Err(error) => {
                tracing::warn!(%error, "committing offsets at shutdown failed; those units are read again")
            }
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
