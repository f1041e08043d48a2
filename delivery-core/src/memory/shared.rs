//! The broker's shared state: [`MemoryBroker`] is a handle on a [`Shared`], the lock over every
//! queue and log ([`State`]).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};

use super::config::QueueConfig;
use super::log::state::Log;
use super::queue::{Entry, Queue};
use crate::unit::Unit;

/// An in-memory broker, shared by cloning. See the [module docs](super).
#[derive(Clone, Default)]
pub struct MemoryBroker {
    pub(super) inner: Arc<Shared>,
}

#[derive(Default)]
pub(crate) struct Shared {
    state: Mutex<State>,
}

#[derive(Default)]
pub(crate) struct State {
    pub(super) queues: HashMap<Arc<str>, Queue>,
    /// The offset-log mode's logs; each also has a queue under its name (see [`log`](super::log)).
    pub(super) logs: HashMap<Arc<str>, Log>,
    pub(super) next_consumer: u64,
    /// The stamp of the last unit published to a queue (rule 4): the broker's publish sequence.
    pub(super) last_stamp: u64,
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
                self.queue(name).push_ready(Entry::fresh(unit))
            }
        }
    }

    /// The dead-letter queue of `source` (declared on first use).
    pub(crate) fn dead_letter_queue(&mut self, source: &str) -> &mut Queue {
        let name = self.queue(source).dead_letter_name();
        self.queue(&name)
    }
}
