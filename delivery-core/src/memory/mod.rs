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

mod config;
mod dead_letter;
pub mod log;
mod queue;
mod shared;
mod source;

use std::fmt;
use std::sync::Arc;

pub use config::QueueConfig;
pub use dead_letter::MemoryDeadLetters;
pub use log::{LogConfig, LogDeclareError, LogPosition, MemoryLogHandle, MemoryLogSource};
pub use shared::MemoryBroker;
pub use source::{MemoryHandle, MemorySource};

use crate::unit::Unit;
use queue::Queue;

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
