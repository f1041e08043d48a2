//! One queue of the in-memory broker: ready units, units waiting out a backoff, units held by
//! consumers, and the bound past which the broker dead-letters a returned unit itself.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;

use tokio::sync::Notify;
use tokio::time::Instant;

use super::config::QueueConfig;
use crate::dead_letter::DeadLetterStamp;
use crate::disposition::{DeadLetterReason, ReasonKind};
use crate::unit::{DeliveryCount, Headers, Unit};

/// A unit in the broker, with the broker's own count of its deliveries.
#[derive(Clone, Debug)]
pub(crate) struct Entry {
    pub(crate) unit: Unit,
    pub(crate) deliveries: u32,
    pub(crate) dead: Option<Dead>,
}

/// What the broker records about a dead-lettered unit.
#[derive(Clone, Debug)]
pub(crate) struct Dead {
    pub(crate) reason: DeadLetterReason,
    pub(crate) source: Arc<str>,
    pub(crate) delivery_count: DeliveryCount,
    /// The headers as published, restored on redrive.
    pub(crate) original_headers: Headers,
}

impl Entry {
    pub(crate) fn fresh(unit: Unit) -> Self {
        Entry {
            unit: unit.with_delivery_count(DeliveryCount::FIRST),
            deliveries: 0,
            dead: None,
        }
    }

    /// The same unit, moved to a dead letter: payload and id intact, reason recorded.
    pub(crate) fn into_dead(self, source: Arc<str>, reason: DeadLetterReason) -> Entry {
        let count = DeliveryCount::new(self.deliveries);
        let original_headers = self.unit.headers().clone();
        let headers = DeadLetterStamp::new(&reason, Some(&*source), count)
            .headers()
            .into_iter()
            .fold(original_headers.clone(), |headers, (name, value)| {
                headers.with(name, value)
            });
        let unit = self.unit.with_headers(headers);
        Entry {
            unit,
            deliveries: 0,
            dead: Some(Dead {
                reason,
                source,
                delivery_count: count,
                original_headers,
            }),
        }
    }
}

pub(crate) struct Queue {
    name: Arc<str>,
    config: QueueConfig,
    ready: VecDeque<Entry>,
    /// Returned units waiting out their backoff, in no particular order.
    delayed: Vec<(Instant, Entry)>,
    /// Units handed to a consumer and not yet settled, by delivery tag.
    held: HashMap<u64, (u64, Entry)>,
    next_tag: u64,
    changed: Arc<Notify>,
}

impl Queue {
    pub(crate) fn new(name: Arc<str>, config: QueueConfig) -> Self {
        Queue {
            name,
            config,
            ready: VecDeque::new(),
            delayed: Vec::new(),
            held: HashMap::new(),
            next_tag: 0,
            changed: Arc::new(Notify::new()),
        }
    }

    pub(crate) fn name(&self) -> &Arc<str> {
        &self.name
    }

    pub(crate) fn config(&self) -> &QueueConfig {
        &self.config
    }

    pub(crate) fn dead_letter_name(&self) -> String {
        match &self.config.dead_letter {
            Some(name) => name.clone(),
            None => format!("{}.dead-letter", self.name),
        }
    }

    pub(crate) fn changed(&self) -> Arc<Notify> {
        self.changed.clone()
    }

    pub(crate) fn depth(&self) -> usize {
        self.ready.len() + self.delayed.len() + self.held.len()
    }

    pub(crate) fn ready_entries(&self) -> impl Iterator<Item = &Entry> {
        self.ready.iter().chain(self.delayed.iter().map(|(_, e)| e))
    }

    pub(crate) fn push_ready(&mut self, entry: Entry) {
        self.ready.push_back(entry);
        self.changed.notify_waiters();
    }

    /// Moves units whose backoff has passed to the back of the ready queue; returns the earliest
    /// time a still-waiting unit becomes due.
    pub(crate) fn promote_due(&mut self, now: Instant) -> Option<Instant> {
        let mut next = None;
        let mut i = 0;
        while i < self.delayed.len() {
            if self.delayed[i].0 <= now {
                let (_, entry) = self.delayed.swap_remove(i);
                self.ready.push_back(entry);
            } else {
                next = Some(next.map_or(self.delayed[i].0, |n: Instant| n.min(self.delayed[i].0)));
                i += 1;
            }
        }
        next
    }

    /// Hands up to `max` ready units to `consumer`, counting each delivery.
    pub(crate) fn take(&mut self, consumer: u64, max: usize, out: &mut VecDeque<(Unit, u64)>) {
        while out.len() < max {
            let Some(mut entry) = self.ready.pop_front() else {
                break;
            };
            entry.deliveries += 1;
            entry.unit = entry
                .unit
                .with_delivery_count(DeliveryCount::new(entry.deliveries));
            self.next_tag += 1;
            let tag = self.next_tag;
            out.push_back((entry.unit.clone(), tag));
            self.held.insert(tag, (consumer, entry));
        }
    }

    /// Removes a held unit, if `consumer` still holds it.
    /// The unit held under `tag`, still held.
    pub(crate) fn held(&self, tag: u64) -> Option<&Entry> {
        self.held.get(&tag).map(|(_, e)| e)
    }

    pub(crate) fn release(&mut self, tag: u64) -> Option<Entry> {
        let entry = self.held.remove(&tag).map(|(_, e)| e);
        if entry.is_some() {
            self.changed.notify_waiters();
        }
        entry
    }

    /// Returns a unit for redelivery after `delay`. Past the declared bound the broker
    /// dead-letters it instead, and hands it back to the caller to move.
    pub(crate) fn requeue(&mut self, entry: Entry, due: Option<Instant>) -> Option<Entry> {
        if entry.deliveries >= self.config.max_deliveries.get() {
            let reason = DeadLetterReason::new(
                ReasonKind::Exhausted,
                format!(
                    "returned after delivery {} of {}: the queue's delivery bound",
                    entry.deliveries, self.config.max_deliveries
                ),
            );
            return Some(entry.into_dead(self.name.clone(), reason));
        }
        match due {
            Some(due) => self.delayed.push((due, entry)),
            None => self.ready.push_back(entry),
        }
        self.changed.notify_waiters();
        None
    }

    pub(crate) fn remove_ready(&mut self, pred: impl Fn(&Entry) -> bool) -> Vec<Entry> {
        let mut taken = Vec::new();
        let mut kept = VecDeque::with_capacity(self.ready.len());
        for entry in self.ready.drain(..) {
            if pred(&entry) {
                taken.push(entry)
            } else {
                kept.push_back(entry)
            }
        }
        self.ready = kept;
        if !taken.is_empty() {
            self.changed.notify_waiters();
        }
        taken
    }
}
