//! The receive loop. Acknowledgement happens in `settle::apply`, strictly after the handler's
//! future resolved; a panic is a failure; shutdown drains, then returns what is left.
//!
//! The common case — a unit already waiting, a handler that completes — goes through no `select!`,
//! no allocation and no cancellation bookkeeping: each is only set up when something has to wait.

use std::future::{Future, poll_fn};
use std::panic::AssertUnwindSafe;
use std::pin::{Pin, pin};
use std::task::Poll;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::future::CatchUnwind;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::settle::{self, Counters, Settled};
use super::{Consumer, Report};
use crate::disposition::{Disposition, Outcome, RedeliveryPolicy, decide};
use crate::handler::Handler;
use crate::transport::{Settle, Source, TransportError};
use crate::unit::Unit;

/// What woke the loop.
enum Event<H> {
    Received(Result<Option<(Unit, H)>, TransportError>),
    Settled(Settled),
    Shutdown,
}

pub(super) async fn run<Src, S, H>(consumer: Consumer<Src, S>, handler: H) -> Report
where
    Src: Source,
    S: Send + Sync + 'static,
    H: Handler<S>,
{
    let policy = consumer.policy();
    let Consumer {
        mut source,
        state,
        concurrency,
        shutdown,
        drain_deadline,
        ..
    } = consumer;
    let counters = Counters::new(source.name());
    let abandon = CancellationToken::new();
    let mut shutdown = shutdown.unwrap_or_else(|| Box::pin(std::future::pending()));
    let mut report = Report::default();
    let mut inflight = FuturesUnordered::new();
    let mut receive_failures = 0u32;
    // The first iteration looks at the shutdown signal at once: a signal future such as
    // `tokio::signal::ctrl_c()` installs its handler on its first poll, and a signal arriving before
    // that would kill the process instead of stopping it.
    let mut since_shutdown_check = 31u32;

    tracing::info!(
        source = source.name(),
        max_deliveries = policy.max_deliveries.get(),
        concurrency,
        "consumer started"
    );
    loop {
        // While units keep coming the shutdown signal is looked at every 32 of them; when the loop
        // waits, the `select!` below watches it.
        since_shutdown_check += 1;
        if since_shutdown_check >= 32 {
            since_shutdown_check = 0;
            if (&mut shutdown).now_or_never().is_some() {
                break;
            }
        }
        let ready = if inflight.is_empty() {
            poll_once(pin!(source.receive())).await
        } else {
            Poll::Pending
        };
        let received = match ready {
            Poll::Ready(received) => received,
            Poll::Pending => match tokio::select! {
                biased;
                Some(settled) = inflight.next(), if !inflight.is_empty() => Event::Settled(settled),
                received = source.receive(), if inflight.len() < concurrency => Event::Received(received),
                () = &mut shutdown => Event::Shutdown,
            } {
                Event::Received(received) => received,
                Event::Settled(settled) => {
                    count(&mut report, settled);
                    continue;
                }
                Event::Shutdown => break,
            },
        };
        let (unit, handle) = match received {
            Ok(Some(received)) => received,
            Ok(None) => break,
            Err(error) => {
                receive_failures = receive_failures.saturating_add(1);
                let wait = Duration::from_millis(100u64 << receive_failures.min(6));
                tracing::warn!(source = source.name(), %error, retry_in_ms = wait.as_millis() as u64,
                    "receiving failed");
                tokio::select! {
                    () = &mut shutdown => break,
                    () = tokio::time::sleep(wait) => continue,
                }
            }
        };
        receive_failures = 0;
        if concurrency == 1 {
            // One unit at a time, run right here without a future of its own. The shutdown signal
            // still starts the drain deadline for a handler that is waiting.
            let mut stopping = false;
            let outcome = match start(&handler, &unit, &state) {
                Err(panicked) => panicked,
                Ok(call) => {
                    let mut call = pin!(call);
                    let result = match poll_once(call.as_mut()).await {
                        Poll::Ready(result) => Some(result),
                        Poll::Pending => tokio::select! {
                            biased;
                            result = &mut call => Some(result),
                            () = &mut shutdown => {
                                stopping = true;
                                tokio::select! {
                                    result = &mut call => Some(result),
                                    () = tokio::time::sleep(drain_deadline) => None,
                                }
                            }
                        },
                    };
                    match result {
                        Some(result) => outcome_of(result),
                        None => {
                            let settled = abandoned(handle, &unit, &counters).await;
                            count(&mut report, settled);
                            break;
                        }
                    }
                }
            };
            let disposition = decide(&outcome, unit.delivery_count(), &policy, unit.id());
            count(
                &mut report,
                settle::apply(handle, &unit, &outcome, &disposition, &counters).await,
            );
            if stopping {
                break;
            }
            continue;
        }
        // Several at once: a unit whose handler completes on the first poll (every malformed one,
        // many fast ones) never joins the set in flight; the rest are polled there with a real
        // waker.
        let mut unit_run = Box::pin(process(
            unit, handle, &handler, &state, &policy, &abandon, &counters,
        ));
        match poll_once(unit_run.as_mut()).await {
            Poll::Ready(settled) => count(&mut report, settled),
            Poll::Pending => inflight.push(unit_run),
        }
    }

    // Shutdown: nothing new is received; what is in flight gets the drain deadline, then is
    // returned (each `process` settles its own unit when abandoned).
    tracing::info!(
        source = source.name(),
        in_flight = inflight.len(),
        "consumer stopping"
    );
    let deadline = tokio::time::sleep(drain_deadline);
    let mut deadline = pin!(deadline);
    let mut abandoned = false;
    loop {
        tokio::select! {
            next = inflight.next() => match next {
                Some(settled) => count(&mut report, settled),
                None => break,
            },
            () = &mut deadline, if !abandoned => {
                abandoned = true;
                tracing::warn!(source = source.name(), in_flight = inflight.len(),
                    "drain deadline passed; returning the units still in flight");
                abandon.cancel();
            }
        }
    }
    tracing::info!(source = source.name(), ?report, "consumer stopped");
    report
}

/// Polls `future` once with the task's own waker: `Pending` leaves it registered, as any poll does.
async fn poll_once<F: Future>(mut future: Pin<&mut F>) -> Poll<F::Output> {
    poll_fn(|cx| Poll::Ready(future.as_mut().poll(cx))).await
}

fn count(report: &mut Report, settled: Settled) {
    match settled {
        Settled::Acked => report.acked += 1,
        Settled::Returned => report.returned += 1,
        Settled::DeadLettered => report.dead_lettered += 1,
        Settled::Failed => report.settle_failed += 1,
    }
}

/// The handler's future, or the outcome of a panic while resolving its parameters (extractors
/// are user code too). Its own panics are caught by the `CatchUnwind` around it.
#[allow(clippy::type_complexity)]
#[inline]
fn start<S, H: Handler<S>>(
    handler: &H,
    unit: &Unit,
    state: &S,
) -> Result<CatchUnwind<AssertUnwindSafe<impl Future<Output = Outcome>>>, Outcome> {
    match std::panic::catch_unwind(AssertUnwindSafe(|| handler.call(unit, state))) {
        Ok(call) => Ok(AssertUnwindSafe(call).catch_unwind()),
        Err(panic) => Err(Outcome::panicked(&*panic)),
    }
}

#[inline]
fn outcome_of(result: std::thread::Result<Outcome>) -> Outcome {
    result.unwrap_or_else(|panic| Outcome::panicked(&*panic))
}

/// A unit whose handler was still running at the drain deadline: returned at once, never
/// acknowledged.
async fn abandoned<L: Settle>(handle: L, unit: &Unit, counters: &Counters) -> Settled {
    let outcome = Outcome::Failed("unfinished at shutdown".into());
    let returned = Disposition::Return {
        after: Duration::ZERO,
    };
    settle::apply(handle, unit, &outcome, &returned, counters).await
}

/// One unit of a consumer running several at once: run the handler (a panic is a failure),
/// decide, settle.
async fn process<S, H, L>(
    unit: Unit,
    handle: L,
    handler: &H,
    state: &S,
    policy: &RedeliveryPolicy,
    abandon: &CancellationToken,
    counters: &Counters,
) -> Settled
where
    H: Handler<S>,
    L: Settle,
{
    let outcome = match start(handler, &unit, state) {
        Err(panicked) => panicked,
        Ok(call) => {
            let mut call = pin!(call);
            let result = match poll_once(call.as_mut()).await {
                Poll::Ready(result) => result,
                // Still running: from now on the drain deadline may abandon it.
                Poll::Pending => tokio::select! {
                    biased;
                    result = call => result,
                    () = abandon.cancelled() => return abandoned(handle, &unit, counters).await,
                },
            };
            outcome_of(result)
        }
    };
    let disposition = decide(&outcome, unit.delivery_count(), policy, unit.id());
    settle::apply(handle, &unit, &outcome, &disposition, counters).await
}
