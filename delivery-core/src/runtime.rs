//! What the consumer runtime and the relay runtime share: how a run stops (the shutdown signal
//! and the drain deadline, set the same way on [`Consumer`](crate::Consumer) and
//! [`Relayer`](crate::outbox::Relayer)) and the guard that makes a panic in user code (a
//! handler, an extractor, a relay function) the failed outcome of its run.

use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::task::{Context, Poll};
use std::time::Duration;

use crate::disposition::Outcome;

/// A run's shutdown signal.
pub(crate) type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;

/// How a run stops: when its signal completes (never, unless one is set), nothing new is taken,
/// work in flight gets the drain deadline, and what is left is given back.
pub(crate) struct Stop {
    signal: Option<Shutdown>,
    drain_deadline: Duration,
}

impl Stop {
    /// No signal yet, and `drain_deadline` as the default deadline.
    pub(crate) fn new(drain_deadline: Duration) -> Self {
        Stop {
            signal: None,
            drain_deadline,
        }
    }

    /// The builders' `shutdown_on`.
    pub(crate) fn on(&mut self, signal: impl Future<Output = ()> + Send + 'static) {
        self.signal = Some(Box::pin(signal));
    }

    /// The builders' `drain_deadline`.
    pub(crate) fn drain_within(&mut self, deadline: Duration) {
        self.drain_deadline = deadline;
    }

    /// The signal (one that never completes if none was set) and the drain deadline.
    pub(crate) fn into_parts(self) -> (Shutdown, Duration) {
        let signal = self
            .signal
            .unwrap_or_else(|| Box::pin(std::future::pending()));
        (signal, self.drain_deadline)
    }
}

/// Runs `run` as a task of its own when the runtime has worker threads, and in place otherwise.
///
/// A consumer's loop polls every handler in flight, and the clients it drives (lapin's reader,
/// sqlx's connections) run as tasks on the workers. Awaited from `#[tokio::main]`'s own thread,
/// the loop would be woken across threads for every unit; on a worker it runs where the tasks
/// that wake it run. The task carries the caller's span and `tracing` subscriber (a subscriber
/// set as the thread's default included); it is aborted when the returned future is dropped, so
/// the units it holds are given back as when the loop is dropped in place; its panic is resumed
/// in the caller.
pub(crate) async fn on_a_worker<F>(run: F) -> F::Output
where
    F: Future + Send + 'static,
    F::Output: Send + 'static,
{
    use tracing::Instrument;
    use tracing::instrument::WithSubscriber;

    if !has_workers() {
        return run.await;
    }
    let task = tokio_util::task::AbortOnDropHandle::new(tokio::spawn(
        run.in_current_span().with_current_subscriber(),
    ));
    match task.await {
        Ok(output) => output,
        Err(ended) => match ended.try_into_panic() {
            Ok(panic) => std::panic::resume_unwind(panic),
            // Only its handle aborts the task, and the handle is this future's.
            Err(ended) => unreachable!("the consumer's task was cancelled: {ended}"),
        },
    }
}

/// Whether the current runtime has worker threads for tasks of their own.
pub(crate) fn has_workers() -> bool {
    use tokio::runtime::{Handle, RuntimeFlavor};
    Handle::try_current()
        .is_ok_and(|runtime| runtime.runtime_flavor() == RuntimeFlavor::MultiThread)
}

pin_project_lite::pin_project! {
    /// A handler's future, polled in the consumer's loop (`Here`) or run on a task of its own
    /// (`Apart`): a handler that works in the unit's transaction spends its run driving its
    /// connection, and on a task of its own that work spreads over the worker threads instead of
    /// queueing on the loop's (the database queue's drain, `benches/sql_queue.rs`). Its panic is
    /// its outcome either way; the task is aborted if the run is dropped (a unit abandoned at
    /// the drain deadline), which drops its transaction.
    #[project = RunProj]
    pub(crate) enum Run<F> {
        Here { #[pin] call: F },
        Apart { task: tokio_util::task::AbortOnDropHandle<Outcome> },
    }
}

impl<F> Run<F>
where
    F: Future<Output = Outcome> + Send + 'static,
{
    /// `call`, on a task of its own if `apart`.
    #[inline(always)]
    pub(crate) fn new(call: F, apart: bool) -> Self {
        if !apart {
            return Run::Here { call };
        }
        use tracing::Instrument;
        use tracing::instrument::WithSubscriber;
        let run = async move { guarded(call).await.unwrap_or_else(|panicked| panicked) };
        let task = tokio::spawn(run.in_current_span().with_current_subscriber());
        Run::Apart {
            task: tokio_util::task::AbortOnDropHandle::new(task),
        }
    }
}

impl<F: Future<Output = Outcome>> Future for Run<F> {
    type Output = Outcome;

    #[inline(always)]
    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        match self.project() {
            RunProj::Here { call } => call.poll(cx),
            RunProj::Apart { task } => Pin::new(task).poll(cx).map(|ended| match ended {
                Ok(outcome) => outcome,
                Err(ended) => Outcome::Failed(format!("the handler's task ended: {ended}")),
            }),
        }
    }
}

/// Runs user code: a panic in it becomes the [failed outcome](Outcome::panicked) of its run.
#[inline(always)]
pub(crate) fn guard<T>(user_code: impl FnOnce() -> T) -> Result<T, Outcome> {
    std::panic::catch_unwind(AssertUnwindSafe(user_code))
        .map_err(|panic| Outcome::panicked(&*panic))
}

/// A future of user code whose every poll is [guarded](guard).
pub(crate) fn guarded<F: Future>(run: F) -> impl Future<Output = Result<F::Output, Outcome>> {
    use futures_util::FutureExt;
    AssertUnwindSafe(run)
        .catch_unwind()
        .map(|caught| caught.map_err(|panic| Outcome::panicked(&*panic)))
}

/// A handler's run in a place the consumer loop pinned for it. Its first poll resolves the
/// parameters (extractors are user code too) and makes the handler's future right in that place;
/// every poll is [guarded](guard), so a panic anywhere in the run is its outcome. (A place of the
/// caller's rather than a future of its own, so that the loop's state machine polls the handler's
/// future directly, with no layer set up and torn down per unit.)
pub(crate) struct Guarded<'a, F, M> {
    make: Option<M>,
    call: Pin<&'a mut Option<F>>,
}

impl<'a, F, M: FnOnce() -> F> Guarded<'a, F, M> {
    #[inline(always)]
    pub(crate) fn new(make: M, call: Pin<&'a mut Option<F>>) -> Self {
        Guarded {
            make: Some(make),
            call,
        }
    }
}

impl<F, M> Future for Guarded<'_, F, M>
where
    F: Future<Output = Outcome>,
    M: FnOnce() -> F + Unpin,
{
    type Output = Outcome;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Outcome> {
        let this = &mut *self;
        let polled = guard(|| {
            if let Some(make) = this.make.take() {
                this.call.set(Some(make()));
            }
            match this.call.as_mut().as_pin_mut() {
                Some(call) => call.poll(cx),
                None => unreachable!("the handler's future is made on the first poll"),
            }
        });
        match polled {
            Ok(poll) => poll,
            Err(panicked) => Poll::Ready(panicked),
        }
    }
}

/// An empty place for the future `make` returns (`make` is not called): a handler's future has no
/// type the loop can name.
#[inline(always)]
pub(crate) fn place_for<F>(_make: &impl FnOnce() -> F) -> Option<F> {
    None
}
