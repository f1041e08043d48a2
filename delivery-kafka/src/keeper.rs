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
//! - it pauses every assigned partition (and [`Context::post_rebalance`](crate::book::Context) pauses every partition
//!   assigned meanwhile), so polling fetches no unit that nobody asked for: librdkafka pauses
//!   synchronously and discards what it had fetched of a paused partition and not handed out,
//!   and fetches again after the last unit handed out, so nothing is skipped;
//! - it polls the consumer, at least every sixth of `max.poll.interval.ms`, which keeps the
//!   member in its group and serves the group's events: a rebalance's revocation commits what is
//!   final and forgets the partitions, as it does during a `receive`;
//! - a unit that still arrives (fetched before the pause) is tracked in the book as any other and
//!   stashed, in order: handed to the source over a channel, whose receiving end the source
//!   holds (and drops with itself); the next `receive` hands the stash out first;
//! - the next `receive` wakes it, takes the poll back and resumes the partitions, except those the
//!   source holds paused for its own reasons (the retry topic at its limit of waiting units, a
//!   partition read one unit at a time).
//!
//! A runtime that keeps asking never meets the keeper: no pause and no refetch on the hot path,
//! only an uncontended lock per `receive`.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use tokio::sync::{Notify, OwnedMutexGuard};
use tokio::time::Instant;

/// The keeper's side of the shared state.
pub(crate) struct Keeper {
    /// Held by whoever polls the consumer; holds when the source last stopped polling.
    pub(crate) polling: Arc<tokio::sync::Mutex<Instant>>,
    /// The source wants the poll back.
    pub(crate) wanted: Notify,
    /// The source is gone: the keeper stops.
    pub(crate) closed: AtomicBool,
    /// How long the source may go without polling before the keeper takes over: a third of
    /// `max.poll.interval.ms`.
    after: Duration,
}

/// The poll, held by a `receive` call: it records when the source stopped polling.
pub(crate) struct Polling(OwnedMutexGuard<Instant>);

impl Drop for Polling {
    fn drop(&mut self) {
        *self.0 = Instant::now();
    }
}

impl Keeper {
    /// A keeper for a consumer configured with `max.poll.interval.ms` = `max_poll_interval`.
    pub(crate) fn new(max_poll_interval: Duration) -> Keeper {
        Keeper {
            polling: Arc::new(tokio::sync::Mutex::new(Instant::now())),
            wanted: Notify::new(),
            closed: AtomicBool::new(false),
            after: (max_poll_interval / 3).max(Duration::from_millis(10)),
        }
    }

    /// `max.poll.interval.ms` of a consumer configuration (librdkafka's default, 300 000, when
    /// unset).
    pub(crate) fn max_poll_interval(config: &rdkafka::ClientConfig) -> Duration {
        let ms = config
            .get("max.poll.interval.ms")
            .and_then(|ms| ms.trim().parse().ok())
            .unwrap_or(300_000);
        Duration::from_millis(ms)
    }

    /// How long the source may go without polling before the keeper takes over.
    pub(crate) fn after(&self) -> Duration {
        self.after
    }

    /// Takes the poll for a `receive` call, from the keeper if it holds it (it lets go at once).
    pub(crate) async fn take(&self) -> Polling {
        match self.polling.clone().try_lock_owned() {
            Ok(guard) => Polling(guard),
            Err(_) => {
                self.wanted.notify_one();
                Polling(self.polling.clone().lock_owned().await)
            }
        }
    }

    /// The source is gone: the keeper lets go of the consumer and stops.
    pub(crate) fn close(&self) {
        self.closed.store(true, Ordering::Relaxed);
        self.wanted.notify_one();
    }
}
