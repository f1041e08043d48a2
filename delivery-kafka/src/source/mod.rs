//! A consumer of one topic (and its retry topic) through a consumer group: connecting, and
//! receiving. The units it holds back are [`hold`]'s (the retry topic's, until due) and
//! [`alone`]'s (a partition read one unit at a time after a crash); [`state`] holds their types.

mod alone;
mod hold;
mod state;

use std::cmp::Reverse;
use std::collections::{BinaryHeap, HashMap};
use std::num::NonZeroU32;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rdkafka::consumer::{Consumer, StreamConsumer};
use tokio::sync::mpsc::UnboundedReceiver;
use tokio::time::Instant;

use self::state::{Placing, Run, Waiting};
use crate::admit::{Admitted, admit};
use crate::attempts::Attempts;
use crate::book::{Book, BookState, Context};
use crate::keeper::Keeper;
use crate::keeper_task;
use crate::partition::Partition;
use crate::settle::KafkaHandle;
use crate::shared::Shared;
use crate::topology::KafkaTopology;
use delivery_core::transport::{Source, TransportError};
use delivery_core::unit::Unit;

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
    /// Units the keeper received while it held the partitions paused, in order (see
    /// [`crate::keeper`]): handed out before anything polled after them.
    stash: UnboundedReceiver<Admitted>,
}

impl KafkaSource {
    /// A consumer of `topology`'s topic and retry topic at `brokers` (a bootstrap list such as
    /// `127.0.0.1:9092`), in its group. The topics must exist
    /// ([`KafkaTopology::declare`]). A group without a committed offset starts at the earliest
    /// unit. Await it within a Tokio runtime: the periodic commit runs as a task of its own.
    ///
    /// The clients are created here and reach the brokers in the background, on librdkafka's own
    /// threads: `connect` does not wait on the network, and an unreachable cluster is not an
    /// error here.
    pub async fn connect(brokers: &str, topology: KafkaTopology) -> Result<Self, TransportError> {
        Self::connect_with(brokers, topology, |_| {}).await
    }

    /// Like [`connect`](Self::connect), with `configure` given the consumer's configuration to
    /// add or change properties of the consumer alone. Properties every client needs (security,
    /// SASL, TLS, timeouts) belong in the topology's [`client`](KafkaTopology::client), which the
    /// consumer, the producer of returns and dead letters and the attempts reader are all built
    /// from; `configure` runs after it. The properties this transport relies on —
    /// `group.id`, `enable.auto.commit=false`, `enable.auto.offset.store=false` — are set after
    /// it and cannot be changed.
    pub async fn connect_with(
        brokers: &str,
        topology: KafkaTopology,
        configure: impl FnOnce(&mut rdkafka::ClientConfig),
    ) -> Result<Self, TransportError> {
        let topic: Arc<str> = topology.topic.as_str().into();
        let retry_topic: Arc<str> = topology.retry_topic_name().into();
        let common = topology.client_config(brokers);
        let producer = crate::publish::one_record_per_batch(common.clone())?;
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
            .map_err(|e| crate::error::RDKAFKA.error("creating the Kafka consumer", e))?;
        consumer
            .subscribe(&[&topic, &retry_topic])
            .map_err(|e| crate::error::RDKAFKA.error("subscribing to the Kafka topics", e))?;
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
            crate::error::RDKAFKA.error(
                "starting the Kafka commit task (call within a Tokio runtime)",
                e,
            )
        })?;
        runtime.spawn(commit_periodically(
            Arc::downgrade(&shared),
            topology.commit_interval_time(),
        ));
        let (stash_sender, stash) = tokio::sync::mpsc::unbounded_channel();
        runtime.spawn(keeper_task::keep_polling(
            Arc::downgrade(&shared),
            shared.keeper.after(),
            stash_sender,
        ));
        let waiting_gauge = metrics::gauge!(delivery_core::observe::RETRY_WAITING, "source" => topology.topic.clone());
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
            stash,
        })
    }

    /// Commits now every partition whose watermark advanced. The source does this on its own
    /// every commit interval, on revocation and when dropped.
    pub async fn commit(&self) -> Result<(), TransportError> {
        let shared = self.shared.clone();
        tokio::task::spawn_blocking(move || shared.book.commit_owed(&shared.consumer))
            .await
            .map_err(|e| crate::error::RDKAFKA.error("committing offsets", e))?
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
            if let Ok((unit, handle, due)) = self.stash.try_recv() {
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
            let message =
                message.map_err(|e| crate::error::RDKAFKA.error("receiving from Kafka", e))?;
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
