//! The receive loop's pace: how often the shutdown signal is looked at, the wait after a failed
//! receive, when an arrival goes into the health, and the small futures the loops poll with.

use std::future::Future;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use futures_util::FutureExt;

use super::observer::ConsumerObserver;
use crate::pace::Retry;
use crate::runtime::Shutdown;
use crate::source::Source;
use crate::transport_error::TransportError;

/// While units keep coming, the shutdown signal is looked at once every this many of them; when
/// the loop waits, it watches the signal.
pub(super) const SHUTDOWN_CHECK_EVERY: u32 = 32;

/// Both loops' pace between units: the shutdown signal is looked at once every
/// [`SHUTDOWN_CHECK_EVERY`] units (and watched whenever the loop waits), a failed receive is
/// followed by a wait growing with the failures in a row, and a unit's arrival goes into the
/// consumer's health after any wait (a clock read per unit is a sixth of the in-memory broker's
/// cost of a unit).
pub(super) struct Pace {
    pub(super) since_shutdown_check: u32,
    /// The loop waited (a receive, a handler, a retry) since the last arrival it stamped.
    pub(super) waited: bool,
    pub(super) receive: Retry,
    /// After a failed receive, the wait before the next one. (Waited at the top of the loop, so
    /// that no received value is held across it: the loop's state stays small. Awaited by the
    /// loop itself, not in a method of this: an `async fn` here was not inlined.)
    pub(super) retry_in: Option<Duration>,
}

impl Pace {
    pub(super) fn new() -> Self {
        Pace {
            // The first iteration looks at the shutdown signal at once: a signal future such as
            // `tokio::signal::ctrl_c()` installs its handler on its first poll, and a signal
            // arriving before that would kill the process instead of stopping it.
            since_shutdown_check: SHUTDOWN_CHECK_EVERY - 1,
            waited: true,
            receive: Retry::reconnect(),
            retry_in: None,
        }
    }

    /// Whether this unit's arrival goes into the health ([`ConsumerObserver::received`]): the
    /// first after any wait, and otherwise one in every [`SHUTDOWN_CHECK_EVERY`] — units that
    /// arrive and complete without waiting come microseconds apart, so the health's
    /// "last receive" is never staler than a few of them. (Time, paused or not, only moves while
    /// the loop waits.)
    #[inline(always)]
    pub(super) fn stamp_arrival(&mut self) -> bool {
        std::mem::take(&mut self.waited) || self.since_shutdown_check == 0
    }

    /// Whether the shutdown signal came, looked at once every [`SHUTDOWN_CHECK_EVERY`] calls.
    #[inline(always)]
    pub(super) fn signalled(&mut self, shutdown: &mut Shutdown) -> bool {
        self.since_shutdown_check += 1;
        if self.since_shutdown_check < SHUTDOWN_CHECK_EVERY {
            return false;
        }
        self.since_shutdown_check = 0;
        (&mut *shutdown).now_or_never().is_some()
    }

    /// Logs a failed receive and sets the wait before the next: [`Retry::reconnect`]'s, from
    /// 100 ms doubling to 6.4 s, jittered per process. The one wait after a failed receive: a
    /// source does not wait again before reconnecting.
    #[cold]
    pub(super) fn receive_failed<Src: Source>(
        &mut self,
        source: &Src,
        error: &TransportError,
        observe: &ConsumerObserver,
    ) {
        let wait = self.receive.failed();
        observe.receive_failed(error, wait);
        tracing::warn!(source = source.name(), %error, retry_in_ms = wait.as_millis() as u64,
            "receiving failed");
        self.retry_in = Some(wait);
        // The next success recovers the health.
        self.waited = true;
    }
}

/// Sleeps `wait`; `false` when the shutdown signal came first.
pub(super) async fn sleep_unless_shutdown(wait: Duration, shutdown: &mut Shutdown) -> bool {
    tokio::select! {
        () = &mut *shutdown => false,
        () = tokio::time::sleep(wait) => true,
    }
}

/// Polls a future once with the task's own waker: `Pending` leaves it registered, as any poll
/// does. A plain future with an always-inlined `poll` (as [`Guarded`]), so that the loop's own
/// state machine polls the inner future directly, with no layer set up and torn down per unit.
pub(super) struct PollOnce<'a, F>(pub(super) Pin<&'a mut F>);

impl<F: Future> Future for PollOnce<'_, F> {
    type Output = Poll<F::Output>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Poll<F::Output>> {
        Poll::Ready(self.0.as_mut().poll(cx))
    }
}

/// A future (`receive`), unless the shutdown signal comes first: `None` then. The future is polled
/// first, so the signal is only looked at while it waits; the third field is set if it waited.
pub(super) struct UnlessShutdown<'a, F>(
    pub(super) Pin<&'a mut F>,
    pub(super) &'a mut Shutdown,
    pub(super) &'a mut bool,
);

impl<F: Future> Future for UnlessShutdown<'_, F> {
    type Output = Option<F::Output>;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<F::Output>> {
        if let Poll::Ready(output) = self.0.as_mut().poll(cx) {
            return Poll::Ready(Some(output));
        }
        *self.2 = true;
        self.1.as_mut().poll(cx).map(|()| None)
    }
}
