//! The receive loop. Acknowledgement happens in `settle`, strictly after the handler's future
//! resolved; a panic is a failure; shutdown drains, then returns what is left.
//!
//! The common case — a unit already waiting, a handler that completes on its first poll — goes
//! through no `select!`, no allocation and no cancellation bookkeeping: each is only set up when
//! something has to wait. One unit at a time (concurrency 1) has a loop of its own, without a set
//! in flight at all.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::builder::Consumer;
use super::handover::{Done, count, far_future, hand_over};
use super::keeping::Keeping;
use super::order::{self, Admitted, Lanes, WhenReturned};
use super::pacing::{Pace, PollOnce, UnlessShutdown, sleep_unless_shutdown};
use super::report::Report;
use super::settle::{self, Counters, Holds, Settled};
use crate::disposition::{Disposition, Outcome, RedeliveryPolicy};
use crate::handler::Handler;
use crate::runtime::{Guarded, Shutdown, place_for};
use crate::source::{KeepAlive, Settle, Source};
use crate::trace::{self, Messaging};
use crate::unit::Unit;

/// After the drain deadline, how long the settles it started (units given back, released) may
/// still take before they are dropped unsettled.
const SETTLE_GRACE: Duration = Duration::from_secs(5);

/// What a unit's run needs besides the unit, shared by every unit of a run.
struct Env<'a, S, H> {
    handler: &'a H,
    state: &'a S,
    policy: &'a RedeliveryPolicy,
    counters: &'a Counters,
    holds: &'a Holds,
    messaging: &'a Messaging,
    keep_alive: Option<KeepAlive>,
    drain_deadline: Duration,
}

pub(super) async fn run<Src, S, H>(consumer: Consumer<Src, S>, handler: H) -> Report
where
    Src: Source,
    S: Send + Sync + 'static,
    H: Handler<S>,
{
    let policy = consumer.policy();
    let running = consumer.health.running();
    let Consumer {
        mut source,
        state,
        concurrency,
        stop,
        order,
        ..
    } = consumer;
    let (signal, drain_deadline) = stop.into_parts();
    // Seen by the loop as its shutdown signal; seen here, it starts the hard stop below.
    let stopping = CancellationToken::new();
    let mut shutdown: Shutdown = Box::pin({
        let stopping = stopping.clone();
        async move {
            signal.await;
            stopping.cancel();
        }
    });
    let counters = Counters::new(source.name(), running.health());
    let holds = Holds::new(source.keep_alive());
    let messaging = source.messaging();
    let mut report = Report::default();
    let env = Env {
        handler: &handler,
        state: &state,
        policy: &policy,
        counters: &counters,
        holds: &holds,
        messaging: &messaging,
        keep_alive: source.keep_alive(),
        drain_deadline,
    };

    tracing::info!(
        source = source.name(),
        max_deliveries = policy.max_deliveries.get(),
        concurrency,
        "consumer started"
    );
    // Holding a key for its returned unit takes the lanes, even one unit at a time.
    let holds_keys = order
        .as_ref()
        .is_some_and(|order| order.when_returned == WhenReturned::Hold);
    let work = async {
        if concurrency == 1 && !holds_keys {
            one_at_a_time(&mut source, &env, &mut shutdown, &mut report).await;
        } else {
            let lanes = order::lanes(order.as_ref(), env.keep_alive);
            several_at_once(
                &mut source,
                &env,
                concurrency,
                lanes,
                &mut shutdown,
                &mut report,
            )
            .await;
        }
        holds.release(&mut report).await;
    };
    // The drain deadline bounds everything after the signal, settles included: past it and a
    // grace for the settles it started, whatever is still settling (a broker that stopped
    // answering) is dropped unsettled, and the mechanism delivers those units again.
    let hard_stop = async {
        stopping.cancelled().await;
        tokio::time::sleep(drain_deadline + SETTLE_GRACE).await;
    };
    tokio::select! {
        biased;
        () = work => {}
        () = hard_stop => tracing::warn!(
            grace_ms = SETTLE_GRACE.as_millis() as u64,
            "settles still waiting on the broker past the drain deadline and its grace; \
             their units are left unsettled, for the broker to deliver again"
        ),
    }
    tracing::info!(source = source.name(), ?report, "consumer stopped");
    report
}

/// Concurrency 1: each unit is run and settled right here, before the next is received. The
/// shutdown signal still starts the drain deadline for a handler that is waiting.
async fn one_at_a_time<Src, S, H>(
    source: &mut Src,
    env: &Env<'_, S, H>,
    shutdown: &mut Shutdown,
    report: &mut Report,
) where
    Src: Source,
    S: Sync,
    H: Handler<S>,
{
    let mut pace = Pace::new();
    loop {
        if let Some(wait) = pace.retry_in.take()
            && !sleep_unless_shutdown(wait, shutdown).await
        {
            break;
        }
        if pace.signalled(shutdown) {
            break;
        }
        // The receive is polled first, directly; only when it waits is the signal watched. (The
        // block ends the received value's scope before the next wait, so the loop's state does
        // not keep a copy of it.)
        let (unit, mut handle) = {
            let received = {
                let receive = pin!(source.receive());
                match UnlessShutdown(receive, shutdown, &mut pace.waited).await {
                    Some(received) => received,
                    None => break,
                }
            };
            match received {
                Ok(Some(received)) => received,
                Ok(None) => break,
                Err(error) => {
                    pace.receive_failed(source, &error, &env.counters.observe);
                    continue;
                }
            }
        };
        pace.receive.succeeded();
        // The unit's span, entered while its run and its settle are polled.
        let span = trace::unit_span(env.messaging, &unit);
        let flight = env.counters.observe.received(pace.stamp_arrival());
        if unit.delivery_count().get() > env.policy.max_deliveries.get() {
            let settled = Box::pin(past_the_bound(handle, &unit, env));
            count(report, trace::within(settled, span).await);
            continue;
        }

        let mut stopping = false;
        let make = || env.handler.call(&unit, env.state);
        let mut call = pin!(place_for(&make));
        let mut run = trace::within(Guarded::new(make, call.as_mut()), span.clone());
        let outcome = match PollOnce(Pin::new(&mut run)).await {
            Poll::Ready(outcome) => outcome,
            Poll::Pending => {
                pace.waited = true;
                // Waiting: the shutdown signal starts the drain deadline, past which the unit is
                // returned unfinished.
                let drain_deadline = env.drain_deadline;
                let drain = async {
                    (&mut *shutdown).await;
                    stopping = true;
                    tokio::time::sleep(drain_deadline).await;
                };
                let waited = waiting(Pin::new(&mut run), &mut handle, &unit, env, drain).await;
                match waited {
                    Some(outcome) => outcome,
                    None => {
                        tracing::info!(source = source.name(), in_flight = 1, "consumer stopping");
                        // Stopped first: the unit released goes to another consumer, not back
                        // to this one on its way out (counted twice).
                        Box::pin(source.stop()).await;
                        let settled = Box::pin(abandoned(handle, &unit, env.counters));
                        count(report, trace::within(settled, span).await);
                        return;
                    }
                }
            }
        };
        flight.handled();
        let disposition = settle::disposition(&outcome, &unit, env.policy);
        let settled = async {
            settle::apply!(
                handle,
                &unit,
                &outcome,
                &disposition,
                env.counters,
                env.holds
            )
        };
        count(report, trace::within(settled, span).await);
        if stopping {
            break;
        }
    }
    tracing::info!(source = source.name(), in_flight = 0, "consumer stopping");
    source.stop().await;
}

/// Concurrency above 1. A unit's run is first polled in place, in a box kept from one unit to the
/// next: one that completes on that poll (every malformed one, many fast ones) costs no allocation
/// and never joins the set in flight. One that has to wait moves, in its box, to the set, which
/// polls it with a real waker, and the next unit gets a new box.
///
/// Ordered by key (`lanes`), a unit whose key has one running waits in its lane instead
/// (`order.rs`), counted against the concurrency, kept alive as a running one is, and runs as
/// soon as that one settled.
async fn several_at_once<Src, S, H>(
    source: &mut Src,
    env: &Env<'_, S, H>,
    concurrency: usize,
    mut lanes: Option<Lanes<Src::Handle>>,
    shutdown: &mut Shutdown,
    report: &mut Report,
) where
    Src: Source,
    S: Sync,
    H: Handler<S>,
{
    let abandon = CancellationToken::new();
    let mut inflight = FuturesUnordered::new();
    let mut slot = Box::pin(None);
    let mut pace = Pace::new();
    // Units their keys' lanes handed over (the unit before settled, or a lane gave up waiting for
    // its returned unit): run before receiving.
    let mut ready: VecDeque<Admitted<Src::Handle>> = VecDeque::new();
    loop {
        let (unit, handle, key) = match ready.pop_front() {
            Some(next) => next,
            None => {
                if let Some(wait) = pace.retry_in.take()
                    && !sleep_unless_shutdown(wait, shutdown).await
                {
                    break;
                }
                if pace.signalled(shutdown) {
                    break;
                }
                let waiting = lanes.as_ref().map_or(0, Lanes::waiting);
                if inflight.is_empty() && waiting >= concurrency {
                    // Only units waiting behind returned ones: one is given back, or the
                    // returned units could never be received again.
                    if let Some((unit, handle, after)) = lanes.as_mut().and_then(Lanes::make_room) {
                        env.holds.make_room(handle, &unit, after, env.counters);
                        continue;
                    }
                }
                // A lane giving up on its unit away, or the waiting units due to be kept alive.
                let expiry = lanes.as_ref().and_then(Lanes::next_due);
                // With nothing in flight, the receive is polled first, directly, as one at a
                // time does; otherwise units in flight finishing come first.
                let received = if inflight.is_empty() && expiry.is_none() {
                    let receive = pin!(source.receive());
                    match UnlessShutdown(receive, shutdown, &mut pace.waited).await {
                        Some(received) => received,
                        None => break,
                    }
                } else {
                    // Units in flight wait: time passes here.
                    pace.waited = true;
                    tokio::select! {
                        biased;
                        Some(done) = inflight.next() => {
                            hand_over(report, &mut lanes, done, &mut ready);
                            continue;
                        }
                        received = source.receive(), if inflight.len() + waiting < concurrency => received,
                        () = tokio::time::sleep_until(expiry.unwrap_or_else(far_future)), if expiry.is_some() => {
                            let finished = match lanes.as_mut() {
                                Some(lanes) => {
                                    ready.extend(lanes.expired());
                                    Box::pin(keep_waiting_alive(lanes, &mut inflight)).await
                                }
                                None => Vec::new(),
                            };
                            for done in finished {
                                hand_over(report, &mut lanes, done, &mut ready);
                            }
                            continue;
                        }
                        () = &mut *shutdown => break,
                    }
                };
                let (unit, handle) = match received {
                    Ok(Some(received)) => received,
                    Ok(None) => break,
                    Err(error) => {
                        pace.receive_failed(source, &error, &env.counters.observe);
                        continue;
                    }
                };
                pace.receive.succeeded();
                match &mut lanes {
                    None => (unit, handle, None),
                    Some(lanes) => match lanes.admit(unit, handle) {
                        Some(admitted) => admitted,
                        None => continue,
                    },
                }
            }
        };
        let stamp_health = pace.stamp_arrival();
        slot.set(Some(process(
            unit,
            handle,
            env,
            &abandon,
            key,
            stamp_health,
        )));
        let run = slot
            .as_mut()
            .as_pin_mut()
            .expect("the slot was just filled");
        match PollOnce(run).await {
            Poll::Ready(done) => {
                slot.set(None);
                hand_over(report, &mut lanes, done, &mut ready);
            }
            Poll::Pending => {
                inflight.push(InFlight(std::mem::replace(&mut slot, Box::pin(None))));
            }
        }
    }

    // Shutdown: nothing new is received; what is in flight gets the drain deadline, then is
    // returned (each `process` settles its own unit when abandoned). Units waiting in a lane were
    // never started: released once the source stopped, so that they go to another consumer and
    // not back to this one on its way out (counted twice).
    let waiting = lanes.as_mut().map(Lanes::drain).unwrap_or_default();
    tracing::info!(
        source = source.name(),
        in_flight = inflight.len(),
        waiting = waiting.len(),
        "consumer stopping"
    );
    source.stop().await;
    for (unit, handle) in waiting {
        count(report, abandoned(handle, &unit, env.counters).await);
    }
    let deadline = tokio::time::sleep(env.drain_deadline);
    let mut deadline = pin!(deadline);
    let mut abandoned = false;
    loop {
        tokio::select! {
            next = inflight.next() => match next {
                Some(done) => count(report, done.settled),
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
}

/// A handler's run that did not complete on its first poll, awaited with its unit kept alive
/// ([`Source::keep_alive`]) until it completes, or until `abandon` does: `None` then.
///
/// Boxed and out of line, so that both loops' state stays as small as the common case needs (a
/// handler that completes on its first poll, which never comes here). A `dyn` future: an opaque
/// one here defeats the compiler's proof that the consumer's future is `Send` for every lifetime.
#[inline(never)]
fn waiting<'a, F, L, S, H>(
    mut run: Pin<&'a mut F>,
    handle: &'a mut L,
    unit: &'a Unit,
    env: &Env<'_, S, H>,
    abandon: impl Future<Output = ()> + Send + 'a,
) -> Pin<Box<dyn Future<Output = Option<F::Output>> + Send + 'a>>
where
    F: Future + Send,
    F::Output: Send,
    L: Settle,
{
    let mut keeping = Keeping::new(env.keep_alive);
    Box::pin(async move {
        let mut abandon = pin!(abandon);
        loop {
            tokio::select! {
                biased;
                outcome = &mut run => return Some(outcome),
                () = keeping.due() => keeping.kept(handle.still_handling(unit).await, unit),
                () = &mut abandon => return None,
            }
        }
    })
}

/// The units waiting in their keys' lanes whose keep-alive is due, kept alive
/// ([`Settle::still_handling`]) all at once; the units in flight meanwhile go on, and those that
/// finish are answered for the loop to hand over.
#[cold]
async fn keep_waiting_alive<L, F>(
    lanes: &mut Lanes<L>,
    inflight: &mut FuturesUnordered<F>,
) -> Vec<Done>
where
    L: Settle,
    F: Future<Output = Done>,
{
    let mut finished = Vec::new();
    let due = lanes.keep_alive_due();
    if due.is_empty() {
        return finished;
    }
    let sweep = futures_util::future::join_all(due.into_iter().map(|(unit, handle)| async move {
        if let Err(error) = handle.still_handling(unit).await {
            tracing::warn!(unit.id = unit.id().as_str(), %error,
                "could not keep alive a unit waiting in its key's lane; the mechanism may deliver it again meanwhile");
        }
    }));
    let mut sweep = pin!(sweep);
    loop {
        tokio::select! {
            biased;
            _ = &mut sweep => return finished,
            Some(done) = inflight.next() => finished.push(done),
        }
    }
}

/// A unit's run that had to wait, in the box it was first polled in.
struct InFlight<F>(Pin<Box<Option<F>>>);

impl<F: Future> Future for InFlight<F> {
    type Output = F::Output;

    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        match self.0.as_mut().as_pin_mut() {
            Some(run) => run.poll(cx),
            None => unreachable!("only a filled slot goes in flight"),
        }
    }
}

/// A unit whose handler was still running at the drain deadline, or that waited in its key's
/// lane at shutdown: released at once (without counting the delivery where the mechanism allows:
/// it did not fail), never acknowledged.
async fn abandoned<L: Settle>(handle: L, unit: &Unit, counters: &Counters) -> Settled {
    let outcome = Outcome::Failed("unfinished at shutdown".into());
    let returned = Disposition::Return {
        after: Duration::ZERO,
    };
    let result = handle.release(unit).await;
    settle::record(result, unit, &outcome, &returned, counters)
}

/// One unit of a consumer running several at once: run the handler (a panic is a failure), then
/// decide and settle. Answers with the key it ran under (and, if it was returned, its id and
/// backoff), for its lane to hand over or hold the next.
///
/// An `async` block rather than an `async fn`: an `async fn` moves its arguments once more, into
/// its body's own locals, and a unit is large.
#[allow(clippy::manual_async_fn)]
#[inline(always)]
fn process<'a, S, H, L>(
    unit: Unit,
    mut handle: L,
    env: &'a Env<'_, S, H>,
    abandon: &'a CancellationToken,
    key: Option<Bytes>,
    stamp_health: bool,
) -> impl Future<Output = Done> + 'a
where
    S: Sync,
    H: Handler<S>,
    L: Settle,
{
    let span = trace::unit_span(env.messaging, &unit);
    let run = async move {
        let flight = env.counters.observe.received(stamp_health);
        if unit.delivery_count().get() > env.policy.max_deliveries.get() {
            let settled = Box::pin(past_the_bound(handle, &unit, env)).await;
            return Done::new(settled, key);
        }
        let make = || env.handler.call(&unit, env.state);
        let mut call = pin!(place_for(&make));
        let mut run = Guarded::new(make, call.as_mut());
        let outcome = match PollOnce(Pin::new(&mut run)).await {
            Poll::Ready(outcome) => outcome,
            // Still running: from now on the drain deadline may abandon it.
            Poll::Pending => {
                let waited = waiting(
                    Pin::new(&mut run),
                    &mut handle,
                    &unit,
                    env,
                    abandon.cancelled(),
                )
                .await;
                match waited {
                    Some(outcome) => outcome,
                    None => {
                        let settled = Box::pin(abandoned(handle, &unit, env.counters)).await;
                        return Done::new(settled, key);
                    }
                }
            }
        };
        flight.handled();
        let disposition = settle::disposition(&outcome, &unit, env.policy);
        let settled = settle::apply!(
            handle,
            &unit,
            &outcome,
            &disposition,
            env.counters,
            env.holds
        );
        let returned = match (&key, &disposition, settled) {
            (Some(_), Disposition::Return { after }, Settled::Returned | Settled::Held) => {
                Some((unit.id().clone(), *after))
            }
            _ => None,
        };
        Done {
            settled,
            key,
            returned,
        }
    };
    trace::within(run, span)
}

/// A unit delivered more often than the bound allows, never run: to the dead letter (rule 2).
/// Called boxed, as every rare path of a unit is: a unit's future is moved once into its slot and
/// dropped once, so every byte a rare path adds to it is paid by every unit.
async fn past_the_bound<S, H, L: Settle>(handle: L, unit: &Unit, env: &Env<'_, S, H>) -> Settled {
    let (outcome, disposition) = settle::past_the_bound(unit, env.policy);
    settle::apply!(
        handle,
        unit,
        &outcome,
        &disposition,
        env.counters,
        env.holds
    )
}
