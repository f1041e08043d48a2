//! The receive loop: [`Loop`], one struct with a method per event — a unit received, a unit's
//! run done, a lane's wait expired, a receive failed, the shutdown signal, the drain deadline.
//! Concurrency 1 is the same loop with a capacity of 1. Acknowledgement happens in the
//! [`Settler`], strictly after the handler's future resolved; a panic is a failure; shutdown
//! drains, then returns what is left.
//!
//! The common case — a unit already waiting, a handler that completes on its first poll — goes
//! through no `select!`, no allocation and no cancellation bookkeeping: each is only set up when
//! something has to wait (`benches/README.md` says what each of these choices measured).

use std::collections::VecDeque;
use std::future::Future;
use std::pin::{Pin, pin};
use std::task::{Context, Poll};
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::{FuturesUnordered, StreamExt};
use tokio_util::sync::CancellationToken;

use super::builder::Consumer;
use super::handover::{Done, Settled, count, far_future};
use super::keeping::Keeping;
use super::order::{self, Admitted, Lanes};
use super::pacing::{Pace, PollOnce, UnlessShutdown, sleep_unless_shutdown};
use super::report::Report;
use super::settle::Settler;
use crate::disposition::{Disposition, Outcome};
use crate::handler::Handler;
use crate::runtime::{Guarded, Run, Shutdown, place_for};
use crate::source::{KeepAlive, Settle, Source};
use crate::trace::{self, Messaging};
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// After the drain deadline, how long the settles it started (units given back, released) may
/// still take before they are dropped unsettled.
const SETTLE_GRACE: Duration = Duration::from_secs(5);

/// What a unit's run needs besides the unit, shared by every unit of a run.
struct Env<'a, S, H> {
    handler: &'a H,
    state: &'a S,
    settler: &'a Settler,
    messaging: &'a Messaging,
    keep_alive: Option<KeepAlive>,
    /// Whether the runtime has worker threads: a handler that works in the unit's transaction
    /// then runs on a task of its own ([`Run`]).
    workers: bool,
    /// Cancelled at the drain deadline: the runs still waiting give their units back.
    abandon: &'a CancellationToken,
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
    tracing::info!(
        source = source.name(),
        max_deliveries = policy.max_deliveries.get(),
        concurrency,
        "consumer started"
    );
    let settler = Settler::new(source.name(), running.health(), source.keep_alive(), policy);
    let messaging = source.messaging();
    let abandon = CancellationToken::new();
    let env = Env {
        handler: &handler,
        state: &state,
        settler: &settler,
        messaging: &messaging,
        keep_alive: source.keep_alive(),
        workers: crate::runtime::has_workers(),
        abandon: &abandon,
    };
    let lanes = order::lanes(order.as_ref(), env.keep_alive);
    let mut report = Report::default();
    let work = async {
        let mut receiving = Loop {
            source: &mut source,
            process: |unit, handle, key, stamp| process(unit, handle, &env, key, stamp),
            idle: || env.handler.source_idle(),
            capacity: concurrency,
            lanes,
            ready: VecDeque::new(),
            inflight: FuturesUnordered::new(),
            slot: Box::pin(None),
            pace: Pace::new(),
            shutdown: &mut shutdown,
            settler: &settler,
            report: &mut report,
            drain_deadline,
            abandon: &abandon,
            stopped: false,
        };
        receiving.until_shutdown().await;
        receiving.drain().await;
        settler.release_held(&mut report).await;
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

/// The receive loop's state. Up to `capacity` units run at once (1: one at a time). A unit's run
/// is first polled in place, in a box kept from one unit to the next (`slot`): one that completes
/// on that poll (every malformed one, many fast ones) costs no allocation and never joins the set
/// in flight. One that has to wait moves, in its box, to the set, which polls it with a real
/// waker, and the next unit gets a new box.
///
/// Ordered by key (`lanes`), a unit whose key has one running waits in its lane instead
/// (`order.rs`), counted against the capacity, kept alive as a running one is, and runs as soon
/// as that one settled (`ready`).
struct Loop<'a, Src: Source, P, I, F> {
    source: &'a mut Src,
    /// A unit's run: `process`, with the run's [`Env`].
    process: P,
    /// Told that the source has no unit waiting ([`Handler::source_idle`]), while units run.
    idle: I,
    capacity: usize,
    lanes: Option<Lanes<Src::Handle>>,
    /// Units their keys' lanes handed over (the unit before settled, or a lane gave up waiting
    /// for its returned unit): run before receiving.
    ready: VecDeque<Admitted<Src::Handle>>,
    inflight: FuturesUnordered<InFlight<F>>,
    slot: Pin<Box<Option<F>>>,
    pace: Pace,
    shutdown: &'a mut Shutdown,
    settler: &'a Settler,
    report: &'a mut Report,
    drain_deadline: Duration,
    /// Cancelled at the drain deadline: each run still waiting releases its unit.
    abandon: &'a CancellationToken,
    /// The source was stopped (by a run awaited in place, at the shutdown signal).
    stopped: bool,
}

impl<Src, P, I, F> Loop<'_, Src, P, I, F>
where
    Src: Source,
    P: FnMut(Unit, Src::Handle, Option<Bytes>, bool) -> F,
    I: Fn(),
    F: Future<Output = Done>,
{
    /// Receives and runs units until the shutdown signal or the end of the source.
    async fn until_shutdown(&mut self) {
        loop {
            let (unit, handle, key) = match self.ready.pop_front() {
                Some(next) => next,
                None => {
                    if let Some(wait) = self.pace.retry_in.take()
                        && !sleep_unless_shutdown(wait, self.shutdown).await
                    {
                        return;
                    }
                    if self.pace.signalled(self.shutdown) {
                        return;
                    }
                    let waiting = self.lanes.as_ref().map_or(0, Lanes::waiting);
                    if self.inflight.is_empty() && waiting >= self.capacity {
                        self.make_room().await;
                        continue;
                    }
                    // A lane giving up on its unit away, or the waiting units due to be kept alive.
                    let expiry = self.lanes.as_ref().and_then(Lanes::next_due);
                    // With nothing in flight, the receive is polled first, directly; otherwise
                    // units in flight finishing come first.
                    let received = if self.inflight.is_empty() && expiry.is_none() {
                        let receive = pin!(self.source.receive());
                        match UnlessShutdown(receive, self.shutdown, &mut self.pace.waited).await {
                            Some(received) => received,
                            None => return,
                        }
                    } else {
                        // Units in flight wait: time passes here.
                        self.pace.waited = true;
                        let room = self.inflight.len() + waiting < self.capacity;
                        tokio::select! {
                            biased;
                            Some(done) = self.inflight.next() => {
                                self.done(done);
                                continue;
                            }
                            received = Idle(pin!(self.source.receive()), &self.idle), if room => received,
                            () = tokio::time::sleep_until(expiry.unwrap_or_else(far_future)), if expiry.is_some() => {
                                self.lane_expired().await;
                                continue;
                            }
                            () = &mut *self.shutdown => return,
                        }
                    };
                    match received {
                        Ok(Some((unit, handle))) => match self.received(unit, handle) {
                            Some(admitted) => admitted,
                            None => continue,
                        },
                        Ok(None) => return,
                        Err(error) => {
                            self.receive_failed(&error);
                            continue;
                        }
                    }
                }
            };
            let stamp_health = self.pace.stamp_arrival();
            if self.capacity == 1 && self.lanes.is_none() {
                // One at a time: nothing runs beside the unit, so its run never has to move to
                // the set, and is awaited in place, in the loop's own state, rather than copied
                // into the slot (`runtime`, concurrency 1: `benches/README.md`).
                let mut run = pin!((self.process)(unit, handle, key, stamp_health));
                let done = match PollOnce(run.as_mut()).await {
                    Poll::Ready(done) => done,
                    Poll::Pending => Box::pin(self.wait_in_place(run)).await,
                };
                self.done(done);
                if self.stopped {
                    return;
                }
                continue;
            }
            // The unit's run, polled once in the slot: done at once, or moved to the set in
            // flight. (Here rather than in a method of its own: an `async fn` would move the
            // unit once more.)
            self.slot
                .set(Some((self.process)(unit, handle, key, stamp_health)));
            let run = self
                .slot
                .as_mut()
                .as_pin_mut()
                .expect("the slot was just filled");
            match PollOnce(run).await {
                Poll::Ready(done) => {
                    self.slot.set(None);
                    self.done(done);
                }
                Poll::Pending => {
                    let run = std::mem::replace(&mut self.slot, Box::pin(None));
                    self.inflight.push(InFlight(run));
                }
            }
        }
    }

    /// A unit received: admitted to run now, or waiting in its key's lane (`None`).
    #[inline(always)]
    fn received(&mut self, unit: Unit, handle: Src::Handle) -> Option<Admitted<Src::Handle>> {
        self.pace.receive.succeeded();
        match &mut self.lanes {
            None => Some((unit, handle, None)),
            Some(lanes) => lanes.admit(unit, handle),
        }
    }

    /// A run awaited in place (one at a time) that did not complete on its first poll: awaited
    /// until it completes, or until the shutdown signal, which stops the source and starts the
    /// drain deadline, past which the run is abandoned (and releases its unit).
    async fn wait_in_place(&mut self, mut run: Pin<&mut F>) -> Done {
        self.pace.waited = true;
        tokio::select! {
            done = run.as_mut() => return done,
            () = &mut *self.shutdown => {}
        }
        self.stopped = true;
        tracing::info!(
            source = self.source.name(),
            in_flight = 1,
            "consumer stopping"
        );
        self.source.stop().await;
        let deadline = tokio::time::sleep(self.drain_deadline);
        tokio::select! {
            done = run.as_mut() => return done,
            () = deadline => self.drain_deadline_passed(),
        }
        run.await
    }

    /// A unit's run done: counted, and the next unit of its key (if one waits) made ready.
    #[inline(always)]
    fn done(&mut self, done: Done) {
        count(self.report, done.settled);
        if let (Some(lanes), Some(key)) = (&mut self.lanes, done.key)
            && let Some(next) = lanes.settled(key, done.returned)
        {
            self.ready.push_back(next);
        }
    }

    /// A receive failed: logged, and the next one waits (`Pace::retry_in`).
    #[cold]
    fn receive_failed(&mut self, error: &TransportError) {
        self.pace
            .receive_failed(self.source, error, self.settler.observe());
    }

    /// A lane's wait ran out: the units its returned unit held back run, and the waiting units
    /// due are kept alive, while the units in flight go on.
    #[cold]
    async fn lane_expired(&mut self) {
        let Some(lanes) = self.lanes.as_mut() else {
            return;
        };
        self.ready.extend(lanes.expired());
        let finished = Box::pin(keep_waiting_alive(lanes, &mut self.inflight)).await;
        for done in finished {
            self.done(done);
        }
    }

    /// Only units waiting behind returned ones, and the capacity full of them: one is given back,
    /// or the returned units could never be received again.
    #[cold]
    async fn make_room(&mut self) {
        if let Some((unit, handle, after)) = self.lanes.as_mut().and_then(Lanes::make_room) {
            let why = "given back unstarted, to make room behind its key's returned unit";
            let settled = self.settler.release(handle, &unit, after, why).await;
            count(self.report, settled);
        }
    }

    /// After the shutdown signal (or the end of the source): nothing new is received; what is in
    /// flight gets `drain_deadline`, then is returned (each `process` releases its own unit when
    /// abandoned). Units waiting in a lane were never started: released once the source stopped,
    /// so that they go to another consumer and not back to this one on its way out (counted
    /// twice).
    async fn drain(&mut self) {
        let waiting = self.lanes.as_mut().map(Lanes::drain).unwrap_or_default();
        if !self.stopped {
            tracing::info!(
                source = self.source.name(),
                in_flight = self.inflight.len(),
                waiting = waiting.len(),
                "consumer stopping"
            );
            self.source.stop().await;
        }
        for (unit, handle) in waiting {
            let settled = self
                .settler
                .release(
                    handle,
                    &unit,
                    Duration::ZERO,
                    "waiting in its key's lane at shutdown",
                )
                .await;
            count(self.report, settled);
        }
        let mut deadline = pin!(tokio::time::sleep(self.drain_deadline));
        let mut abandoned = false;
        loop {
            // Nothing more comes from the stopped source.
            (self.idle)();
            tokio::select! {
                next = self.inflight.next() => match next {
                    Some(done) => count(self.report, done.settled),
                    None => break,
                },
                () = &mut deadline, if !abandoned => {
                    abandoned = true;
                    self.drain_deadline_passed();
                }
            }
        }
    }

    /// The drain deadline passed: the units still in flight are abandoned, each released by its
    /// own run.
    #[cold]
    fn drain_deadline_passed(&self) {
        tracing::warn!(
            source = self.source.name(),
            in_flight = self.inflight.len().max(1),
            "drain deadline passed; returning the units still in flight"
        );
        self.abandon.cancel();
    }
}

/// The units waiting in their keys' lanes whose keep-alive is due, kept alive
/// ([`Settle::still_handling`]) all at once; the units in flight meanwhile go on, and those that
/// finish are answered for the loop to hand over.
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

/// A receive that tells `idle` each time it finds no unit waiting.
struct Idle<'a, R, I>(Pin<&'a mut R>, &'a I);

impl<R: Future, I: Fn()> Future for Idle<'_, R, I> {
    type Output = R::Output;

    #[inline(always)]
    fn poll(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<R::Output> {
        let polled = self.0.as_mut().poll(cx);
        if polled.is_pending() {
            (self.1)();
        }
        polled
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

/// One unit's run: the handler (a panic is a failure), then the settle. Answers with the key it
/// ran under (and, if it was returned, its id and backoff), for its lane to hand over or hold the
/// next.
///
/// An `async` block rather than an `async fn`: an `async fn` moves its arguments once more, into
/// its body's own locals, and a unit is large.
#[allow(clippy::manual_async_fn)]
#[inline(always)]
fn process<'a, S, H, L>(
    unit: Unit,
    mut handle: L,
    env: &'a Env<'_, S, H>,
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
        let settler = env.settler;
        let flight = settler.observe().received(stamp_health);
        if settler.is_past_the_bound(&unit) {
            let settled = Box::pin(settler.past_the_bound(handle, &unit)).await;
            return Done::new(settled, key);
        }
        // A handler that takes the unit's transaction: begun first (a failure is the run's).
        let began = if H::IN_TRANSACTION {
            Box::pin(begin(&mut handle, &unit)).await
        } else {
            Ok(())
        };
        let outcome = match began {
            Err(outcome) => outcome,
            Ok(()) => {
                let make = || {
                    Run::new(
                        env.handler.call(&unit, env.state),
                        H::IN_TRANSACTION && env.workers,
                    )
                };
                let mut call = pin!(place_for(&make));
                let mut run = Guarded::new(make, call.as_mut());
                match PollOnce(Pin::new(&mut run)).await {
                    Poll::Ready(outcome) => outcome,
                    // Still running: from now on the drain deadline may abandon it.
                    Poll::Pending => {
                        match waiting(Pin::new(&mut run), &mut handle, &unit, env).await {
                            Some(outcome) => outcome,
                            None => {
                                let why = "unfinished at the drain deadline";
                                let released = settler.release(handle, &unit, Duration::ZERO, why);
                                return Done::new(Box::pin(released).await, key);
                            }
                        }
                    }
                }
            }
        };
        flight.handled();
        let disposition = settler.disposition(&outcome, &unit);
        let settled = settler.settle(handle, &unit, &outcome, &disposition).await;
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

/// Begins the unit's transaction for a handler that takes it ([`Settle::begin`]); a failure is
/// the run's.
#[cold]
async fn begin<L: Settle>(handle: &mut L, unit: &Unit) -> Result<(), Outcome> {
    handle.begin(unit).await.map_err(|error| {
        Outcome::Failed(format!("could not begin the unit's transaction: {error}"))
    })
}

/// A handler's run that did not complete on its first poll, awaited with its unit kept alive
/// ([`Source::keep_alive`]) until it completes, or until the drain deadline abandons it: `None`
/// then.
///
/// Boxed and out of line, so that a unit's state stays as small as the common case needs (a
/// handler that completes on its first poll, which never comes here). A `dyn` future: an opaque
/// one here defeats the compiler's proof that the consumer's future is `Send` for every lifetime.
fn waiting<'a, F, L, S, H>(
    mut run: Pin<&'a mut F>,
    handle: &'a mut L,
    unit: &'a Unit,
    env: &'a Env<'_, S, H>,
) -> Pin<Box<dyn Future<Output = Option<F::Output>> + Send + 'a>>
where
    F: Future + Send,
    F::Output: Send,
    L: Settle,
{
    let mut keeping = Keeping::new(env.keep_alive);
    let abandon = env.abandon;
    Box::pin(async move {
        loop {
            tokio::select! {
                biased;
                outcome = &mut run => return Some(outcome),
                () = keeping.due() => keeping.kept(handle.still_handling(unit).await, unit),
                () = abandon.cancelled() => return None,
            }
        }
    })
}
