//! The pull behind a [`NatsSource`](super::NatsSource): units asked for at most `batch` at a
//! time, kept in a buffer until the runtime takes them, and **kept in progress while they wait
//! there**.
//!
//! JetStream counts a unit delivered, and starts its `ack_wait`, when it sends it — not when the
//! runtime takes it. A unit pulled in a batch behind slow handlers can wait in the buffer longer
//! than `ack_wait`; without more, JetStream then delivers it again (to another consumer of the
//! durable, or to this one) while this consumer still holds it and will run it too, and a slow
//! handler runs twice. So:
//!
//! - **One task pulls.** It asks for at most what the buffer has room for (`batch` less what is
//!   buffered), with one pull request at a time, and asks again once the buffer is at most half
//!   full: what is delivered to this consumer and not yet taken never exceeds `batch`, and every
//!   such unit is in the buffer, where it is seen — none waits unseen in a client's queue.
//! - **Buffered units are kept in progress.** Every sixth of `ack_wait` the task sends `+WPI` for
//!   each unit not kept (or received) within the last sixth, so JetStream restarts its `ack_wait`;
//!   from the moment the runtime takes a unit, the runtime keeps it
//!   ([`Source::keep_alive`](delivery_core::Source::keep_alive)). A unit is kept in the buffer for at most
//!   `in_progress_limit`, as the runtime keeps a running one.
//! - **A unit not kept is let go, never handed out.** A buffered unit neither received nor kept
//!   in progress within half of `ack_wait` (its `+WPI`s could not be sent, or `in_progress_limit`
//!   passed) may be JetStream's to deliver again by the time its handler would start: it is
//!   dropped from the buffer, logged, and JetStream delivers it again after its `ack_wait`
//!   (counting the delivery) rather than it running twice at once. Half of `ack_wait`, then the
//!   runtime's first `+WPI` a third of `ack_wait` after the handler started, leaves a sixth of
//!   `ack_wait` to spare.
//! - **A pull lost with its connection is asked again.** A pull request is the server's until it
//!   expires (5 s); one sent before a reconnect (a server restart forgets it) is dropped and asked
//!   again as soon as the client has reconnected, rather than waited out. A failed pull is
//!   reported once through [`Source::receive`](delivery_core::Source::receive) and tried again after the
//!   reconnect backoff.
//!
//! The pull starts with the source's first `receive` (a source never run holds no unit) and ends
//! with [`Source::stop`](delivery_core::Source::stop) or the source's drop. Units still buffered then are
//! left unsettled: JetStream delivers them again after their `ack_wait`.

use std::collections::VecDeque;
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::Duration;

use async_nats::jetstream;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{AckKind, consumer::pull::Batch};
use futures_util::StreamExt;
use tokio::sync::Notify;
use tokio::task::JoinHandle;
use tokio::time::Instant;

use super::shared::Shared;
use delivery_core::transport::Retry;
use delivery_core::transport::TransportError;

/// How long one pull request waits on the server for units before it expires (and is sent
/// again while the buffer has room).
const PULL_EXPIRES: Duration = Duration::from_secs(5);

/// How long sending a pull request may take before it counts as failed.
const PULL_SEND_TIMEOUT: Duration = Duration::from_secs(5);

/// The pull's settings, from the topology and the durable consumer's `ack_wait`.
#[derive(Clone, Debug)]
pub(super) struct Settings {
    pub(super) stream: String,
    pub(super) batch: usize,
    pub(super) ack_wait: Duration,
    pub(super) in_progress_limit: Duration,
}

impl Settings {
    /// How often buffered units are looked at, and how long one may go without a `+WPI`.
    fn every(&self) -> Duration {
        (self.ack_wait / 6).max(Duration::from_millis(10))
    }

    /// A buffered unit not kept within this long is let go.
    fn let_go(&self) -> Duration {
        self.ack_wait / 2
    }
}

/// One delivered unit waiting in the buffer.
struct Waiting {
    message: jetstream::Message,
    received: Instant,
    /// When it was last known in progress on the server's side: received, or `+WPI` sent.
    kept: Instant,
}

#[derive(Default)]
struct Buffered {
    waiting: VecDeque<Waiting>,
    /// A failed pull not yet reported (one at a time).
    failure: Option<TransportError>,
}

#[derive(Default)]
struct Buffer {
    state: Mutex<Buffered>,
    /// The pull → `next`: a unit or a failure is there.
    arrived: Notify,
    /// `next` → the pull: a unit was taken, there may be room.
    taken: Notify,
}

impl Buffer {
    fn lock(&self) -> MutexGuard<'_, Buffered> {
        // Nothing panics while holding it; a poisoned buffer is still consistent.
        self.state
            .lock()
            .unwrap_or_else(|poisoned| poisoned.into_inner())
    }

    fn fail(&self, error: TransportError) {
        self.lock().failure = Some(error);
        self.arrived.notify_one();
    }
}

/// The running pull of one source: its task and its buffer.
pub(super) struct Pull {
    buffer: Arc<Buffer>,
    settings: Settings,
    task: JoinHandle<()>,
}

impl Drop for Pull {
    fn drop(&mut self) {
        self.task.abort();
    }
}

impl Pull {
    /// Starts pulling from `consumer`.
    pub(super) fn start(consumer: PullConsumer, shared: Arc<Shared>, settings: Settings) -> Pull {
        let buffer = Arc::new(Buffer::default());
        let task = tokio::spawn(pull(consumer, buffer.clone(), shared, settings.clone()));
        Pull {
            buffer,
            settings,
            task,
        }
    }

    /// The next buffered unit still kept in progress, waiting for one; a failed pull (reported
    /// once, when nothing is buffered). Cancel safe: a unit leaves the buffer only when returned.
    pub(super) async fn next(&self) -> Result<jetstream::Message, TransportError> {
        loop {
            {
                let mut state = self.buffer.lock();
                let now = Instant::now();
                let mut let_go = 0;
                let mut next = None;
                while let Some(waiting) = state.waiting.pop_front() {
                    if now.duration_since(waiting.kept) < self.settings.let_go() {
                        next = Some(waiting.message);
                        break;
                    }
                    let_go += 1;
                }
                let failure = if next.is_none() {
                    state.failure.take()
                } else {
                    None
                };
                drop(state);
                log_let_go(&self.settings, let_go);
                if let Some(message) = next {
                    self.buffer.taken.notify_one();
                    return Ok(message);
                }
                if let Some(failure) = failure {
                    return Err(failure);
                }
            }
            self.buffer.arrived.notified().await;
        }
    }

    /// Stops pulling; what is buffered is left unsettled.
    pub(super) fn stop(&self) {
        self.task.abort();
    }
}

fn log_let_go(s: &Settings, units: usize) {
    if units > 0 {
        tracing::warn!(stream = %s.stream, units,
            let_go_after_ms = s.let_go().as_millis() as u64,
            "buffered units could not be kept in progress; left for JetStream to deliver again \
             rather than run while it may deliver them elsewhere");
    }
}

/// The pull task: requests while there is room, buffers what arrives, keeps it in progress.
async fn pull(consumer: PullConsumer, buffer: Arc<Buffer>, shared: Arc<Shared>, s: Settings) {
    let connects = || shared.client.statistics().connects.load(Ordering::Relaxed);
    let mut tick = tokio::time::interval(s.every());
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut retry = Retry::reconnect();
    let mut paused = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
    let mut pausing = false;
    // The pull request in flight, and the client's connect count when it was sent.
    let mut batch: Option<(Batch, u64)> = None;
    loop {
        if batch.as_ref().is_some_and(|(_, at)| *at != connects()) {
            // Sent before a reconnect: the server may have forgotten it (a restart does).
            batch = None;
        }
        let room = s.batch.saturating_sub(buffer.lock().waiting.len());
        if batch.is_none() && !pausing && room > 0 && room >= s.batch.div_ceil(2) {
            let at = connects();
            let request = consumer
                .batch()
                .max_messages(room)
                .expires(PULL_EXPIRES)
                .messages();
            match tokio::time::timeout(PULL_SEND_TIMEOUT, request).await {
                Ok(Ok(requested)) => batch = Some((requested, at)),
                Ok(Err(error)) => {
                    buffer.fail(crate::error::NATS.error("requesting units (pull)", error));
                    pausing = true;
                    paused.as_mut().reset(Instant::now() + retry.failed());
                }
                Err(_) => {
                    buffer.fail(TransportError::msg(
                        "requesting units (pull)",
                        format!("not sent within {PULL_SEND_TIMEOUT:?}"),
                    ));
                    pausing = true;
                    paused.as_mut().reset(Instant::now() + retry.failed());
                }
            }
        }
        tokio::select! {
            biased;
            _ = tick.tick() => keep(&buffer, &shared, &s).await,
            next = async { batch.as_mut().expect("checked").0.next().await }, if batch.is_some() => {
                match next {
                    Some(Ok(message)) => {
                        retry.succeeded();
                        let now = Instant::now();
                        buffer.lock().waiting.push_back(Waiting { message, received: now, kept: now });
                        buffer.arrived.notify_one();
                    }
                    Some(Err(error)) => {
                        batch = None;
                        buffer.fail(TransportError::msg("pulling", error.to_string()));
                        pausing = true;
                        paused.as_mut().reset(Instant::now() + retry.failed());
                    }
                    // Every unit asked for came, or the request expired.
                    None => batch = None,
                }
            }
            () = &mut paused, if pausing => pausing = false,
            () = buffer.taken.notified(), if batch.is_none() => {}
        }
    }
}

/// Lets go of buffered units not kept within [`Settings::let_go`], and sends `+WPI` for those not
/// kept within [`Settings::every`] (up to `in_progress_limit` after they were received).
async fn keep(buffer: &Buffer, shared: &Shared, s: &Settings) {
    let now = Instant::now();
    let (due, let_go) = {
        let mut state = buffer.lock();
        let before = state.waiting.len();
        state
            .waiting
            .retain(|w| now.duration_since(w.kept) < s.let_go());
        let let_go = before - state.waiting.len();
        let due: Vec<_> = state
            .waiting
            .iter()
            .filter(|w| {
                now.duration_since(w.kept) >= s.every()
                    && now.duration_since(w.received) < s.in_progress_limit
            })
            .filter_map(|w| w.message.reply.clone())
            .collect();
        (due, let_go)
    };
    log_let_go(s, let_go);
    if due.is_empty() {
        return;
    }
    let mut kept = Vec::with_capacity(due.len());
    let mut failed = None;
    for reply in due {
        let sent = tokio::time::timeout(
            s.every(),
            shared.send(
                reply.clone(),
                AckKind::Progress,
                "marking in progress (+WPI)",
            ),
        )
        .await;
        match sent {
            Ok(Ok(())) => kept.push(reply),
            Ok(Err(error)) => failed = Some(error.to_string()),
            Err(_) => {
                failed = Some(format!("not sent within {:?}", s.every()));
                break;
            }
        }
    }
    if let Some(error) = failed {
        tracing::warn!(stream = %s.stream, %error,
            "could not keep buffered units in progress; JetStream may deliver them again");
    }
    let mut state = buffer.lock();
    for waiting in state.waiting.iter_mut() {
        if waiting
            .message
            .reply
            .as_ref()
            .is_some_and(|reply| kept.contains(reply))
        {
            waiting.kept = now;
        }
    }
}
