//! The in-memory broker's offset-log mode: partitioned logs read by consumer groups, with the
//! semantics of Kafka, so offset consumers can be tested without Kafka.
//!
//! - **A log of partitions.** [`MemoryBroker::append`] adds a unit to the partition its key
//!   hashes to (the unit id, or an explicit key with [`MemoryBroker::append_keyed`]), chosen by
//!   Kafka's own default partitioner, and returns its [`LogPosition`]. Records are kept; reading
//!   one does not remove it.
//! - **Consumer groups.** [`MemoryBroker::consume_log`] makes a member of a group
//!   ([`MemoryLogSource`]). The members of one group split the partitions — partition `p` goes to
//!   the `p mod n`th member in joining order — and split them again whenever a member joins or is
//!   dropped. A member starts each partition it is given at the group's committed offset. A unit
//!   still in flight on a partition taken from its member can no longer be settled by it (the
//!   settle fails, and the runtime logs it): the new owner receives it again, as in Kafka.
//! - **Acknowledgement is an offset commit**, and an offset confirms every unit before it
//!   (rule 1). Each source tracks the units it handed out in its commit
//!   [watermark](crate::offset::Watermarks); a settled unit's offset is finished there, and the
//!   watermark's committable offset is committed to the group at once. A unit whose disposition
//!   is not final — its handler still running, its handle dropped, its consumer gone — holds its
//!   partition's committed offset however many units after it finished, so a restarted consumer
//!   receives it again ([`MemoryBroker::committed`] shows where the group stands).
//! - **The count travels with the unit.** The log keeps no delivery count. A returned unit
//!   ([`Disposition::Return`](crate::Disposition::Return)) is re-appended, intact (id, payload,
//!   headers, key), to the topic's retry log with its count + 1, not delivered before its backoff
//!   has passed; the same group reads the retry log with the same sources, and the original offset
//!   is then final. A retry partition delivers in offset order too: a record not yet due holds
//!   the ones behind it, as a Kafka consumer pausing a retry topic does. A unit delivered again
//!   because a consumer went away before it was final counts that delivery: the group keeps, beside
//!   its committed offset, how often each offset past it was handed out (what a Kafka consumer
//!   can keep in its offset commit's metadata), so a crash loop reaches the bound too.
//! - **The bound and the dead letter** are declared with the log ([`LogConfig`]); the source
//!   reports the bound as [`Source::max_deliveries`](crate::Source::max_deliveries). A unit
//!   dead-lettered — malformed, rejected, or failed on its last allowed delivery — is moved
//!   intact to the topic's dead letter with the reason, source and count recorded, and only then
//!   is its offset final. A unit already delivered as often as the bound allows, to consumers that
//!   went away before settling it, is moved there by the source as exhausted rather than handed
//!   to a handler again (as the queue mode's broker does). The operator reads it with the queue mode's view,
//!   [`MemoryBroker::dead_letters`] (list, peek, redrive); a redrive appends the unit back to the
//!   log under the same id (and key), with a fresh count.
//!
//! A log's name is also a queue's name: [`MemoryBroker::publish`] to a log appends to it (keyed
//! by the unit id), and [`MemoryBroker::depth`] and [`MemoryBroker::idle`] do not see a log's
//! units — use [`MemoryBroker::committed`] and [`MemoryBroker::caught_up`].
//!
//! ```
//! use delivery::memory::{LogConfig, MemoryBroker};
//! use delivery::{consumer, Consumer, HandlerError, Json, State, Unit};
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//!
//! #[derive(serde::Deserialize)]
//! struct Shipped { order_id: String, status: String }
//!
//! #[derive(Clone, Default)]
//! struct App { status: Arc<Mutex<HashMap<String, String>>> }
//!
//! #[consumer]
//! async fn record(State(app): State<App>, Json(e): Json<Shipped>) -> Result<(), HandlerError> {
//!     app.status.lock().unwrap().insert(e.order_id, e.status); // keyed by the unit: rule 3
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let broker = MemoryBroker::new();
//! broker.declare_log("shipments", LogConfig::default().partitions(3)).unwrap();
//! for n in 0..6 {
//!     let event = format!(r#"{{"order_id":"o-{n}","status":"shipped"}}"#);
//!     broker.append_keyed("shipments", format!("o-{n}"), Unit::new(format!("e-{n}"), event));
//! }
//! let app = App::default();
//! let report = Consumer::new(broker.consume_log("shipments", "billing"))
//!     .state(app.clone())
//!     .shutdown_on(broker.caught_up("shipments", "billing"))
//!     .run(record)
//!     .await;
//! assert_eq!(report.acked, 6);
//! assert_eq!(app.status.lock().unwrap().len(), 6);
//! for partition in 0..3 {
//!     let end = broker.end_offset("shipments", partition);
//!     assert_eq!(broker.committed("shipments", "billing", partition).or(Some(0)), end);
//! }
//! # }
//! ```

mod broker;
mod config;
mod partitioner;
mod source;
pub(in crate::memory) mod state;

use std::future::Future;
use std::sync::Arc;

use bytes::Bytes;

pub use config::{LogConfig, LogPosition};
pub use source::{MemoryLogHandle, MemoryLogSource};
pub(crate) use state::Log;

use super::config::QueueConfig;
use super::shared::MemoryBroker;
use crate::unit::Unit;
use state::Lane;

/// A log was declared again with a different configuration, or under the name of a queue
/// declared with a different bound or dead letter.
///
/// ```
/// use delivery::memory::{LogConfig, MemoryBroker};
///
/// let broker = MemoryBroker::new();
/// broker.declare_log("orders", LogConfig::default().partitions(3)).unwrap();
/// let error = broker.declare_log("orders", LogConfig::default()).unwrap_err();
/// assert!(error.to_string().contains("already declared"));
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{}", self.describe())]
pub struct LogDeclareError {
    topic: String,
    requested: LogConfig,
    existing: Existing,
}

#[derive(Debug, Clone, PartialEq, Eq)]
enum Existing {
    Log(LogConfig),
    Queue(QueueConfig),
}

impl LogDeclareError {
    fn describe(&self) -> String {
        match &self.existing {
            Existing::Log(existing) => format!(
                "log `{}` is already declared with {existing:?}, not {:?}; a log's partitions, bound and dead letter are fixed once declared",
                self.topic, self.requested
            ),
            Existing::Queue(existing) => format!(
                "`{}` is already declared as a queue with {existing:?}, which conflicts with the log's {:?}",
                self.topic, self.requested
            ),
        }
    }
}

impl MemoryBroker {
    /// Declares the log `topic` with `config`. Declaring again with the same configuration is a
    /// no-op; with a different one, an error, as for a queue. A log used before being declared
    /// gets [`LogConfig::default`], so declare it first.
    ///
    /// ```
    /// use delivery::memory::{LogConfig, MemoryBroker};
    ///
    /// let broker = MemoryBroker::new();
    /// let config = LogConfig::default().partitions(3).max_deliveries(4);
    /// broker.declare_log("orders", config.clone()).unwrap();
    /// broker.declare_log("orders", config).unwrap();
    /// assert!(broker.declare_log("orders", LogConfig::default()).is_err());
    /// ```
    pub fn declare_log(&self, topic: &str, config: LogConfig) -> Result<(), LogDeclareError> {
        let mut state = self.inner.lock();
        if let Some(existing) = state.logs.get(topic) {
            if existing.config() != &config {
                return Err(LogDeclareError {
                    topic: topic.to_owned(),
                    requested: config,
                    existing: Existing::Log(existing.config().clone()),
                });
            }
            return Ok(());
        }
        let queue = config.queue();
        let name: Arc<str> = topic.into();
        match state.queues.get(topic) {
            Some(existing) if existing.config() != &queue => {
                return Err(LogDeclareError {
                    topic: topic.to_owned(),
                    requested: config,
                    existing: Existing::Queue(existing.config().clone()),
                });
            }
            Some(_) => {}
            None => {
                state
                    .queues
                    .insert(name.clone(), super::queue::Queue::new(name.clone(), queue));
            }
        }
        state.logs.insert(name.clone(), Log::new(name, config));
        Ok(())
    }

    /// Appends `unit` to the log `topic`, on the partition its id hashes to (Kafka's default
    /// partitioner, with the id as the key), and returns where it landed. Its delivery count
    /// starts afresh; appending the same id twice delivers it twice, as any broker does.
    ///
    /// ```
    /// use delivery::memory::{LogConfig, MemoryBroker};
    /// use delivery::Unit;
    ///
    /// let broker = MemoryBroker::new();
    /// broker.declare_log("orders", LogConfig::default().partitions(4)).unwrap();
    /// let first = broker.append("orders", Unit::new("o-1", "{}"));
    /// let again = broker.append("orders", Unit::new("o-1", "{}"));
    /// assert_eq!(first.partition, again.partition); // same id, same partition
    /// assert_eq!(again.offset, first.offset + 1);
    /// ```
    pub fn append(&self, topic: &str, unit: Unit) -> LogPosition {
        self.inner.lock().log(topic).append(None, unit)
    }

    /// Appends `unit` to the log `topic` on the partition `key` hashes to, as a Kafka producer
    /// does for a keyed record: units with one key keep their order. A return or a redrive keeps
    /// the key.
    ///
    /// ```
    /// use delivery::memory::{LogConfig, MemoryBroker};
    /// use delivery::Unit;
    ///
    /// let broker = MemoryBroker::new();
    /// broker.declare_log("orders", LogConfig::default().partitions(8)).unwrap();
    /// let placed = broker.append_keyed("orders", "order-42", Unit::new("e-1", "{}"));
    /// let shipped = broker.append_keyed("orders", "order-42", Unit::new("e-2", "{}"));
    /// assert_eq!(placed.partition, shipped.partition);
    /// assert!(placed.offset < shipped.offset);
    /// ```
    pub fn append_keyed(&self, topic: &str, key: impl AsRef<[u8]>, unit: Unit) -> LogPosition {
        let key = Bytes::copy_from_slice(key.as_ref());
        self.inner.lock().log(topic).append(Some(key), unit)
    }

    /// A member of the consumer group `group` reading the log `topic` (see [`MemoryLogSource`]).
    /// The group's partitions are split again at once; the new member reads its partitions from
    /// the group's committed offset, from the start for a group that never committed.
    ///
    /// ```
    /// use delivery::memory::MemoryBroker;
    /// use delivery::{transport::Source, Unit};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let broker = MemoryBroker::new();
    /// broker.append("orders", Unit::new("o-1", "{}"));
    /// let mut billing = broker.consume_log("orders", "billing");
    /// let mut audit = broker.consume_log("orders", "audit"); // another group reads it all too
    /// let (a, _) = billing.receive().await.unwrap().unwrap();
    /// let (b, _) = audit.receive().await.unwrap().unwrap();
    /// assert_eq!(a.id(), b.id());
    /// # }
    /// ```
    pub fn consume_log(&self, topic: &str, group: &str) -> MemoryLogSource {
        MemoryLogSource::join(self.inner.clone(), topic.into(), group.into())
    }

    /// The offset `group` committed for `partition` of the log `topic`: the next one to read,
    /// one past the last unit of the run whose disposition is final (Kafka's convention). `None`
    /// until the group commits there, or for an unknown log or partition.
    ///
    /// ```
    /// use delivery::memory::MemoryBroker;
    /// use delivery::{transport::Settle, transport::Source, Unit};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let broker = MemoryBroker::new();
    /// broker.append("orders", Unit::new("o-1", "{}"));
    /// broker.append("orders", Unit::new("o-2", "{}"));
    /// let mut source = broker.consume_log("orders", "billing");
    /// let (first, held) = source.receive().await.unwrap().unwrap();
    /// let (second, done) = source.receive().await.unwrap().unwrap();
    /// done.ack(&second).await.unwrap();
    /// assert_eq!(broker.committed("orders", "billing", 0), None); // o-1 is not final
    /// held.ack(&first).await.unwrap();
    /// assert_eq!(broker.committed("orders", "billing", 0), Some(2));
    /// # }
    /// ```
    pub fn committed(&self, topic: &str, group: &str, partition: u32) -> Option<u64> {
        self.inner
            .lock()
            .logs
            .get(topic)?
            .committed(group, (Lane::Main, partition))
    }

    /// The offset the next unit appended to `partition` of the log `topic` gets (the log end);
    /// `None` for an unknown log or partition. With [`committed`](Self::committed), a group's lag.
    ///
    /// ```
    /// use delivery::memory::MemoryBroker;
    /// use delivery::Unit;
    ///
    /// let broker = MemoryBroker::new();
    /// assert_eq!(broker.end_offset("orders", 0), None);
    /// broker.append("orders", Unit::new("o-1", "{}"));
    /// assert_eq!(broker.end_offset("orders", 0), Some(1));
    /// assert_eq!(broker.end_offset("orders", 1), None); // one partition by default
    /// ```
    pub fn end_offset(&self, topic: &str, partition: u32) -> Option<u64> {
        self.inner.lock().logs.get(topic)?.end_offset(partition)
    }

    /// Completes once `group` has committed every unit of the log `topic` and of its retry log:
    /// each one acknowledged or dead-lettered, none waiting for a retry. Handy as a consumer's
    /// shutdown signal in tests: `.shutdown_on(broker.caught_up("orders", "billing"))`.
    ///
    /// ```
    /// use delivery::memory::MemoryBroker;
    /// use delivery::{transport::Settle, transport::Source, Unit};
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let broker = MemoryBroker::new();
    /// broker.append("orders", Unit::new("o-1", "{}"));
    /// let caught_up = tokio::spawn(broker.caught_up("orders", "billing"));
    /// let mut source = broker.consume_log("orders", "billing");
    /// let (unit, handle) = source.receive().await.unwrap().unwrap();
    /// assert!(!caught_up.is_finished());
    /// handle.ack(&unit).await.unwrap();
    /// caught_up.await.unwrap();
    /// # }
    /// ```
    pub fn caught_up(&self, topic: &str, group: &str) -> impl Future<Output = ()> + Send + 'static {
        let shared = self.inner.clone();
        let (topic, group) = (topic.to_owned(), group.to_owned());
        async move {
            let changed = shared.lock().log(&topic).changed();
            loop {
                // Registered before looking, so a commit between the look and the wait wakes us.
                let notified = changed.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                if shared.lock().log(&topic).caught_up(&group) {
                    return;
                }
                notified.await;
            }
        }
    }
}
