//! Keeping the consumer in its group while every handler is busy: librdkafka counts a consumer
//! that has not polled for `max.poll.interval.ms` as wedged and leaves the group, and the unit
//! its handler is still running is then handed to another member and run a second time.
//!
//! The source polls the consumer only while the runtime asks it for a unit
//! ([`Source::receive`](delivery_core::Source::receive)). Whoever polls holds [`Keeper::polling`]: the
//! source for as long as a `receive` call lasts, the keeper task otherwise. Once the source has
//! not polled for a third of `max.poll.interval.ms` (the runtime is not asking: every handler
//! place is busy), the keeper takes the poll over:
//!
//! - it pauses every assigned partition (and [`Context::post_rebalance`] pauses every partition
//!   assigned meanwhile), so polling fetches no unit that nobody asked for: librdkafka pauses
//!   synchronously and discards what it had fetched of a paused partition and not handed out,
//!   and fetches again after the last unit handed out, so nothing is skipped;
//! - it polls the consumer, at least every sixth of `max.poll.interval.ms`, which keeps the
//!   member in its group and serves the group's events: a rebalance's revocation commits what is
//!   final and forgets the partitions, as it does during a `receive`;
//! - a unit that still arrives (fetched before the pause) is tracked in the book as any other and
//!   stashed, in order; the next `receive` hands the stash out first;
//! - the next `receive` wakes it, takes the poll back and resumes the partitions, except those the
//!   source holds paused for its own reasons (the retry topic at its limit of waiting units, a
//!   partition read one unit at a time).
//!
//! A runtime that keeps asking never meets the keeper: no pause and no refetch on the hot path,
//! only an uncontended lock per `receive`.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, Weak};
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::Instant;

use super::book::lock;
use super::settle::KafkaHandle;
use super::source::{Shared, admit};
use delivery_core::unit::Unit;

/// A unit received and tracked in the book, and when it is due if it came from the retry topic.
pub(super) type Admitted = (Unit, KafkaHandle, Option<Instant>);

/// The keeper's side of the shared state.
pub(super) struct Keeper {
    /// Held by whoever polls the consumer; holds when the source last stopped polling.
    polling: Arc<tokio::sync::Mutex<Instant>>,
    /// The source wants the poll back.
    wanted: Notify,
    /// Units the keeper received while it held the partitions paused, in order.
    stash: Mutex<VecDeque<Admitted>>,
    /// The source is gone: the keeper stops.
    closed: AtomicBool,
    /// How long the source may go without polling before the keeper takes over: a third of
    /// `max.poll.interval.ms`.
    after: Duration,
}

/// The poll, held by a `receive` call: it records when the source stopped polling.
pub(super) struct Polling(OwnedMutexGuard<Instant>);

impl Drop for Polling {
    fn drop(&mut self) {
        *self.0 = Instant::now();
    }
}

impl Keeper {
    /// A keeper for a consumer configured with `max.poll.interval.ms` = `max_poll_interval`.
    pub(super) fn new(max_poll_interval: Duration) -> Keeper {
        Keeper {
            polling: Arc::new(tokio::sync::Mutex::new(Instant::now())),
            wanted: Notify::new(),
            stash: Mutex::new(VecDeque::new()),
            closed: AtomicBool::new(false),
            after: (max_poll_interval / 3).max(Duration::from_millis(10)),
        }
    }

    /// `max.poll.interval.ms` of a consumer configuration (librdkafka's default, 300 000, when
    /// unset).
    pub(super) fn max_poll_interval(config: &rdkafka::ClientConfig) -> Duration {
        let ms = config
            .get("max.poll.interval.ms")
            .and_then(|ms| ms.trim().parse().ok())
            .unwrap_or(300_000);
        Duration::from_millis(ms)
    }

    /// How long the source may go without polling before the keeper takes over.
    pub(super) fn after(&self) -> Duration {
        self.after
    }

    /// Takes the poll for a `receive` call, from the keeper if it holds it (it lets go at once).
    pub(super) async fn take(&self) -> Polling {
        match self.polling.clone().try_lock_owned() {
            Ok(guard) => Polling(guard),
            Err(_) => {
                self.wanted.notify_one();
                Polling(self.polling.clone().lock_owned().await)
            }
        }
    }

    /// A unit the keeper received, to hand out before anything polled after it.
    pub(super) fn stashed(&self) -> Option<Admitted> {
        let mut stash = lock(&self.stash);
        stash.pop_front()
    }

    /// The source is gone: the keeper lets go of the consumer and stops.
    pub(super) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.wanted.notify_one();
        lock(&self.stash).clear();
    }
}

/// The keeper task: takes the poll over whenever the source has not polled for
/// [`Keeper::after`], until the source is gone.
pub(super) async fn keep_polling(shared: Weak<Shared>, after: Duration) {
    let mut wait = after;
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let keeper = &shared.keeper;
        if keeper.closed.load(Ordering::Relaxed) {
            return;
        }
        wait = match keeper.polling.clone().try_lock_owned() {
            // The source is polling.
            Err(_) => after,
            Ok(guard) => {
                let away = guard.elapsed();
                if away >= after {
                    hold(&shared, after).await;
                    drop(guard);
                    // Looked at again at once: if the source did not take the poll (it woke the
                    // keeper after all), the keeper holds it again.
                    Duration::ZERO
                } else {
                    after - away
                }
            }
        };
    }
}

/// Holds every assigned partition paused and polls the consumer until the source wants the poll
/// back (or is gone).
async fn hold(shared: &Arc<Shared>, after: Duration) {
    let consumer = &shared.consumer;
    let context = consumer.context();
    // Before pausing: a rebalance is served only by this task's polls, below, and pauses what it
    // assigns from now on.
    context.held.store(true, Ordering::Relaxed);
    match consumer.assignment() {
        Ok(assigned) => {
            if let Err(error) = consumer.pause(&assigned) {
                tracing::warn!(%error, "pausing the partitions while the handlers are busy failed");
            }
            tracing::info!(
                partitions = assigned.count(),
                "every handler busy: partitions paused, the consumer polled meanwhile to keep its place in the group"
            );
        }
        Err(error) => tracing::warn!(%error, "reading the assignment to pause it failed"),
    }
    let every = after / 2;
    loop {
        tokio::select! {
            biased;
            () = shared.keeper.wanted.notified() => return,
            message = consumer.recv() => match message {
                Ok(message) => {
                    let admitted = admit(shared, &message);
                    drop(message);
                    tracing::debug!(unit.id = admitted.0.id().as_str(), "received while paused: stashed");
                    lock(&shared.keeper.stash).push_back(admitted);
                }
                Err(error) => tracing::warn!(%error, "polling Kafka while the handlers are busy failed"),
            },
            // Polled again: each poll is what librdkafka watches.
            () = tokio::time::sleep(every) => {}
        }
        if shared.keeper.closed.load(Ordering::Relaxed) {
            return;
        }
    }
}

/// The source took the poll back: resumes every assigned partition the keeper paused, except
/// those `keep_paused` names (paused by the source itself). Nothing to do unless the keeper held
/// them.
pub(super) fn resume_held(shared: &Shared, keep_paused: impl Fn(&str, i32) -> bool) {
    let consumer = &shared.consumer;
    let context = consumer.context();
    if !context.held.load(Ordering::Relaxed) {
        return;
    }
    // Held until the resume went through: tried again by the next `receive`.
    let assigned = match consumer.assignment() {
        Ok(assigned) => assigned,
        Err(error) => {
            tracing::warn!(%error, "reading the assignment to resume it failed");
            return;
        }
    };
    let mut resume = TopicPartitionList::new();
    for element in assigned.elements() {
        if !keep_paused(element.topic(), element.partition()) {
            resume.add_partition(element.topic(), element.partition());
        }
    }
    match consumer.resume(&resume) {
        Ok(()) => {
            context.held.store(false, Ordering::Relaxed);
            tracing::info!(
                partitions = resume.count(),
                "a handler free: partitions resumed"
            );
        }
        Err(error) => {
            tracing::warn!(%error, "resuming the partitions paused while the handlers were busy failed")
        }
    }
}
