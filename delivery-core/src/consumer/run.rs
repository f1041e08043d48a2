//! The receive loop. Acknowledgement happens in `settle::apply`, strictly after the handler's
//! future resolved; a panic is a failure; shutdown drains, then returns what is left.

use std::any::Any;
use std::panic::AssertUnwindSafe;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::settle::{self, Counters, Settled};
use super::{Consumer, Report};
use crate::disposition::{Disposition, Outcome, RedeliveryPolicy, decide};
use crate::handler::Handler;
use crate::transport::{Settle, Source};
use crate::unit::Unit;

pub(super) async fn run<Src, S, H>(consumer: Consumer<Src, S>, handler: H) -> Report
where
    Src: Source,
    S: Send + Sync + 'static,
    H: Handler<S>,
{
    let policy = consumer.policy();
    let Consumer { mut source, state, concurrency, shutdown, drain_deadline, .. } = consumer;
    let counters = Counters::new(source.name());
    let abandon = CancellationToken::new();
    let mut shutdown = shutdown.unwrap_or_else(|| Box::pin(std::future::pending()));
    let mut report = Report::default();
    let mut inflight = FuturesUnordered::new();
    let mut receive_failures = 0u32;

    tracing::info!(source = source.name(), max_deliveries = policy.max_deliveries.get(), concurrency,
        "consumer started");
    let mut received_since_check = 0u32;
    loop {
        // Units finishing come first, then new ones. The shutdown signal is looked at whenever
        // nothing is ready, and every 32 units while the source stays busy.
        received_since_check += 1;
        if received_since_check >= 32 {
            received_since_check = 0;
            if (&mut shutdown).now_or_never().is_some() {
                break;
            }
        }
        tokio::select! {
            biased;
            Some(settled) = inflight.next(), if !inflight.is_empty() => count(&mut report, settled),
            received = source.receive(), if inflight.len() < concurrency => match received {
                Ok(Some((unit, handle))) => {
                    receive_failures = 0;
                    let unit_run = process(unit, handle, &handler, &state, &policy, &abandon, &counters);
                    if concurrency == 1 {
                        // One unit at a time: run it right here. The shutdown signal still
                        // starts the drain deadline for it.
                        let mut unit_run = std::pin::pin!(unit_run);
                        let mut stopping = false;
                        let settled = tokio::select! {
                            biased;
                            settled = &mut unit_run => settled,
                            () = &mut shutdown => {
                                stopping = true;
                                drain_one(unit_run, drain_deadline, &abandon).await
                            }
                        };
                        count(&mut report, settled);
                        if stopping {
                            break;
                        }
                        continue;
                    }
                    let mut unit_run = Box::pin(unit_run);
                    // Most handlers that complete without waiting (and every malformed unit) finish
                    // on the first poll; only the ones still waiting join the set in flight. The
                    // set polls them again with a real waker.
                    match (&mut unit_run).now_or_never() {
                        Some(settled) => count(&mut report, settled),
                        None => inflight.push(unit_run),
                    }
                }
                Ok(None) => break,
                Err(error) => {
                    receive_failures = receive_failures.saturating_add(1);
                    let wait = Duration::from_millis(100u64 << receive_failures.min(6));
                    tracing::warn!(source = source.name(), %error, retry_in_ms = wait.as_millis() as u64,
                        "receiving failed");
                    tokio::select! {
                        () = &mut shutdown => break,
                        () = tokio::time::sleep(wait) => {}
                    }
                }
            },
            () = &mut shutdown => break,
        }
    }

    // Shutdown: nothing new is received; what is in flight gets the drain deadline, then is
    // returned (each `process` settles its own unit when abandoned).
    tracing::info!(source = source.name(), in_flight = inflight.len(), "consumer stopping");
    let deadline = tokio::time::sleep(drain_deadline);
    let mut deadline = std::pin::pin!(deadline);
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

/// The drain of the one unit a consumer of concurrency 1 holds at shutdown.
async fn drain_one(
    mut unit_run: std::pin::Pin<&mut impl std::future::Future<Output = Settled>>,
    deadline: Duration,
    abandon: &CancellationToken,
) -> Settled {
    tokio::select! {
        settled = &mut unit_run => settled,
        () = tokio::time::sleep(deadline) => {
            abandon.cancel();
            unit_run.await
        }
    }
}

fn count(report: &mut Report, settled: Settled) {
    match settled {
        Settled::Acked => report.acked += 1,
        Settled::Returned => report.returned += 1,
        Settled::DeadLettered => report.dead_lettered += 1,
        Settled::Failed => report.settle_failed += 1,
    }
}

/// One unit: run the handler (a panic is a failure), decide, settle.
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
    let run = AssertUnwindSafe(async { handler.call(&unit, state).await }).catch_unwind();
    let outcome = tokio::select! {
        // The handler first: a unit that completes is never checked against the deadline, which
        // keeps the common path free of the cancellation token's bookkeeping.
        biased;
        result = run => result.unwrap_or_else(|panic| Outcome::Panicked(panic_message(&*panic))),
        () = abandon.cancelled() => {
            // Unfinished at the drain deadline: returned at once, never acknowledged.
            let outcome = Outcome::Failed("unfinished at shutdown".into());
            let returned = Disposition::Return { after: Duration::ZERO };
            return settle::apply(handle, &unit, &outcome, &returned, counters).await;
        }
    };
    let disposition = decide(&outcome, unit.delivery_count(), policy, unit.id());
    settle::apply(handle, &unit, &outcome, &disposition, counters).await
}

fn panic_message(panic: &(dyn Any + Send)) -> String {
    let text = panic
        .downcast_ref::<&str>()
        .copied()
        .or_else(|| panic.downcast_ref::<String>().map(String::as_str))
        .unwrap_or("a non-text payload");
    format!("handler panicked: {text}")
}
