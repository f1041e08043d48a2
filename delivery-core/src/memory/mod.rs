//! The in-memory broker: the embedded default for the quickstart and for your own tests.
//!
//! It is not a stand-in that acknowledges whatever it is told; it has the semantics real brokers
//! have, so code tested against it meets no surprise in production:
//!
//! - the broker counts each unit's deliveries (a restarted consumer continues the count);
//! - a returned unit is delivered again after its backoff, **behind** the units queued meanwhile;
//! - units held by a consumer that goes away (dropped, crashed task) are redelivered;
//! - each queue declares its delivery bound and dead-letter queue: a unit returned after its last
//!   allowed delivery is moved there by the broker itself, as a quorum queue does;
//! - the dead letter is readable by an operator: list, peek, and redrive to the source under the
//!   same id ([`MemoryDeadLetters`]).
//!
//! Besides queues it keeps partitioned logs read by consumer groups, acknowledged by committing
//! offsets, as Kafka does: see [the offset-log mode](log) ([`MemoryBroker::declare_log`],
//! [`MemoryBroker::append`], [`MemoryBroker::consume_log`]).
//!
//! ```
//! use delivery_core::memory::{MemoryBroker, QueueConfig};
//! use delivery_core::Unit;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let broker = MemoryBroker::new();
//! broker.declare("orders", QueueConfig::default().max_deliveries(3)).unwrap();
//! broker.publish("orders", Unit::new("o-1", r#"{"sku":"A"}"#));
//! assert_eq!(broker.depth("orders"), 1);
//! # }
//! ```

mod dead_letter;
pub mod log;
mod queue;
mod source;

use std::collections::HashMap;
use std::fmt;
use std::num::NonZeroU32;
use std::sync::{Arc, Mutex, MutexGuard};

pub use dead_letter::MemoryDeadLetters;
pub use log::{LogConfig, LogDeclareError, LogPosition, MemoryLogHandle, MemoryLogSource};
pub use source::{MemoryHandle, MemorySource};

use crate::unit::Unit;
use queue::Queue;

/// A queue's declaration: its delivery bound and its dead-letter queue.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QueueConfig {
    max_deliveries: NonZeroU32,
    dead_letter: Option<String>,
}

impl QueueConfig {
    /// Units are delivered at most `n` times (`0` is read as 1); a unit returned after its `n`th
    /// delivery is dead-lettered by the broker.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        self
    }

    /// The dead-letter queue's name. Defaults to `<queue>.dead-letter`.
    pub fn dead_letter(mut self, queue: impl Into<String>) -> Self {
        self.dead_letter = Some(queue.into());
        self
    }

    /// The declared bound.
    pub fn delivery_bound(&self) -> NonZeroU32 {
        self.max_deliveries
    }
}

impl Default for QueueConfig {
    /// Five deliveries, dead letter `<queue>.dead-letter`.
    fn default() -> Self {
        QueueConfig {
            max_deliveries: crate::disposition::RedeliveryPolicy::DEFAULT_MAX_DELIVERIES,
            dead_letter: None,
        }
    }
}

/// A queue was declared again with a different configuration.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "queue `{queue}` is already declared with {existing:?}, not {requested:?}; a queue's bound and dead letter are fixed once declared"
)]
pub struct DeclareError {
    queue: String,
    existing: QueueConfig,
    requested: QueueConfig,
}

/// An in-memory broker, shared by cloning. See the [module docs](self).
#[derive(Clone, Default)]
pub struct MemoryBroker {
    inner: Arc<Shared>,
}

#[derive(Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
pub(crate) struct State {
    queues: HashMap<Arc<str>, Queue>,
    /// The offset-log mode's logs; each also has a queue under its name (see [`log`]).
    logs: HashMap<Arc<str>, log::Log>,
    next_consumer: u64,
    /// The stamp of the last unit published to a queue (rule 4): the broker's publish sequence.
    last_stamp: u64,
}

impl Shared {
    pub(crate) fn lock(&self) -> MutexGuard<'_, State> {
        // A panic while holding the lock leaves the queues consistent (every mutation is a single
        // move), so a poisoned lock is still safe to use.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }
}

impl State {
    pub(crate) fn queue(&mut self, name: &str) -> &mut Queue {
        if !self.queues.contains_key(name) {
            let name: Arc<str> = name.into();
            self.queues
                .insert(name.clone(), Queue::new(name, QueueConfig::default()));
        }
        self.queues.get_mut(name).expect("declared above")
    }

    /// Puts `unit` into `name` afresh: appended to the log of that name if there is one (a
    /// redrive, a `publish`), otherwise queued.
    ///
    /// A unit without a [`Stamp`](crate::unit::Stamp) gets the broker's next publish sequence (a log's
    /// unit, its offset); one that has one (set by its producer, or kept from its first
    /// publish through a dead letter and a redrive) keeps it.
    pub(crate) fn put(&mut self, name: &str, unit: Unit) {
        match self.logs.get_mut(name) {
            Some(log) => log.put(unit),
            None => {
                let unit = match unit.stamp() {
                    Some(_) => unit,
                    None => {
                        self.last_stamp += 1;
                        unit.with_stamp(crate::unit::Stamp(self.last_stamp))
                    }
                };
                self.queue(name).push_ready(queue::Entry::fresh(unit))
            }
        }
    }

    /// The dead-letter queue of `source` (declared on first use).
    pub(crate) fn dead_letter_queue(&mut self, source: &str) -> &mut Queue {
        let name = self.queue(source).dead_letter_name();
        self.queue(&name)
    }
}

impl fmt::Debug for MemoryBroker {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let state = self.inner.lock();
        let mut map = f.debug_map();
        for (name, queue) in &state.queues {
            map.entry(name, &queue.depth());
        }
        map.finish()
    }
}

impl MemoryBroker {
    /// An empty broker.
    pub fn new() -> Self {
        MemoryBroker::default()
    }

    /// Declares `queue` with `config`. Declaring again with the same configuration is a no-op;
    /// with a different one, an error (as a real broker refuses it). Queues used before being
    /// declared get [`QueueConfig::default`].
    pub fn declare(&self, queue: &str, config: QueueConfig) -> Result<(), DeclareError> {
        let mut state = self.inner.lock();
        if let Some(existing) = state.queues.get(queue) {
            if existing.config() != &config {
                return Err(DeclareError {
                    queue: queue.to_owned(),
                    existing: existing.config().clone(),
                    requested: config,
                });
            }
            return Ok(());
        }
        let name: Arc<str> = queue.into();
        state.queues.insert(name.clone(), Queue::new(name, config));
        Ok(())
    }

    /// Publishes `unit` to `queue`. Its delivery count starts afresh; publishing the same id twice
    /// delivers it twice, as any broker does.
    pub fn publish(&self, queue: &str, unit: Unit) {
        self.inner.lock().put(queue, unit);
    }

    /// A consumer of `queue`, taking up to `prefetch` units at a time (see [`MemorySource`]).
    pub fn consume(&self, queue: &str) -> MemorySource {
        let consumer = {
            let mut state = self.inner.lock();
            state.queue(queue);
            state.next_consumer += 1;
            state.next_consumer
        };
        MemorySource::new(self.inner.clone(), queue.into(), consumer)
    }

    /// The operator's view of `queue`'s dead letter.
    pub fn dead_letters(&self, queue: &str) -> MemoryDeadLetters {
        MemoryDeadLetters::new(self.inner.clone(), queue.into())
    }

    /// Units in `queue` not yet settled: ready, waiting out a backoff, or held by a consumer.
    pub fn depth(&self, queue: &str) -> usize {
        self.inner.lock().queue(queue).depth()
    }

    /// Completes once `queue` holds no unit at all: everything acknowledged or dead-lettered.
    /// Handy as a consumer's shutdown signal in tests: `.shutdown_on(broker.idle("orders"))`.
    pub fn idle(&self, queue: &str) -> impl std::future::Future<Output = ()> + Send + 'static {
        let shared = self.inner.clone();
        let queue = queue.to_owned();
        async move {
            let changed = shared.lock().queue(&queue).changed();
            loop {
                // Registered before looking, so a change between the look and the wait is not missed.
                let notified = changed.notified();
                let mut notified = std::pin::pin!(notified);
                notified.as_mut().enable();
                if shared.lock().queue(&queue).depth() == 0 {
                    return;
                }
                notified.await;
            }
        }
    }
}
