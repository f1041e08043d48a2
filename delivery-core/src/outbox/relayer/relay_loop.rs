//! A relayer's run as a state machine: [`RelayLoop`] holds what the run knows, one method handles
//! each event (a claim came back, an attempt ended, marks were written or not, a wake-up, the
//! shutdown signal, the drain deadline), and [`RelayLoop::run`] only starts the work that is due
//! and selects the next event.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use metrics::Counter;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::super::backlog::RelayGauges;
use super::super::record::{Record, Relay};
use super::super::store::{Claim, Mark, Store, Wakeups};
use super::attempt::{Attempts, BoxFuture, Finished, start};
use super::settings::{RelayReport, Relayer};
use crate::disposition::{Backoff, ReasonKind, RedeliveryPolicy};
use crate::health::Health;
use crate::pace::Retry;
use crate::runtime::Shutdown;
use crate::transport_error::TransportError;

/// A claim in progress: how many were asked for, and what came back.
type Claiming = BoxFuture<(usize, Result<Vec<Record>, TransportError>)>;
/// A write of marks in progress: the marks, and how it went.
type Flushing = BoxFuture<(Vec<Finished>, Result<u64, TransportError>)>;

/// The longest a mark waits for others to join its batch. Marks are written one statement per
/// batch; a batch goes as soon as it holds a claim's worth of marks, when nothing else is in
/// flight, or at the latest this long after its first mark. Delay costs nothing rule 6 cares
/// about: a record is marked delivered only after its receipt either way, and a crash before the
/// write means it is relayed again under its own id.
const MARK_DELAY: Duration = Duration::from_millis(10);

/// After the drain deadline, how long the run may still wait on the store — a claim or a write of
/// marks under way, the marks of the attempts given back — before it stops regardless: a
/// statement blocked in the store (a lock held by another session, a server that stopped
/// answering) cannot hold the process up. As the consumer's grace for its settles.
const STOP_GRACE: Duration = Duration::from_secs(5);

/// Counters registered once per run, so the hot path only increments.
struct Counters {
    relayed: Counter,
    failed: Counter,
    malformed: Counter,
    rejected: Counter,
    exhausted: Counter,
}

impl Counters {
    fn new(outbox: &str) -> Self {
        let dead = |reason: ReasonKind| metrics::counter!(crate::observe::RELAY_DEAD, "outbox" => outbox.to_owned(), "reason" => reason.as_str());
        Counters {
            relayed: metrics::counter!(crate::observe::RELAYED, "outbox" => outbox.to_owned()),
            failed: metrics::counter!(crate::observe::RELAY_FAILED, "outbox" => outbox.to_owned()),
            malformed: dead(ReasonKind::Malformed),
            rejected: dead(ReasonKind::Rejected),
            exhausted: dead(ReasonKind::Exhausted),
        }
    }
}

/// One run of a relayer: its settings, and the state the events change.
pub(super) struct RelayLoop<St, S, R> {
    store: St,
    state: S,
    relay: R,
    name: Arc<str>,
    owner: Arc<str>,
    batch: usize,
    window: usize,
    lease: Duration,
    poll_interval: Duration,
    ordered: bool,
    drain_deadline: Duration,
    attempts: Arc<Attempts>,
    counters: Counters,
    health: Health,
    gauges: RelayGauges,
    shutdown: Shutdown,
    report: RelayReport,

    /// Claim again once no more than this many claimed records wait for the window (and a claim
    /// of at least this many fits): claims stay batched, and the next batch is on its way before
    /// the window runs dry.
    refill: usize,
    inflight: FuturesUnordered<BoxFuture<Finished>>,
    /// Records claimed ahead, waiting for a slot in the window (at most a batch beyond it), with
    /// the time by which their attempt must start to end within the lease: a slot freed by a
    /// receipt is filled at once, not after a claim's round trip.
    claimed: VecDeque<(Instant, Record)>,
    /// Attempts ended, waiting to be written back.
    marks: Vec<Finished>,
    /// When the marks waiting are written even if their batch is not full.
    marks_due: Instant,
    claiming: Option<Claiming>,
    /// When the claim under way (or the last one) was sent.
    claim_sent: Instant,
    flushing: Option<Flushing>,
    /// How many marks the write under way carries.
    flushing_marks: usize,
    wakeups: Option<Wakeups>,
    listening: bool,
    /// Whether to claim now; false once a claim came back short, until a wake-up or the poll.
    eager: bool,
    poll_at: Instant,
    claim_retry: Retry,
    claim_retry_at: Instant,
    flush_retry: Retry,
    flush_retry_at: Instant,
    stopping: bool,
    drain_until: Instant,
    abandoned: bool,
    /// The grace after the drain deadline ended: the run stops with whatever is still under way.
    halted: bool,
}

impl<St, S, R> RelayLoop<St, S, R>
where
    St: Store,
    S: Send + Sync + 'static,
    R: Relay<S>,
{
    pub(super) fn new(relayer: Relayer<St, S>, relay: R) -> Self {
        let Relayer {
            store,
            state,
            batch,
            window,
            max_attempts,
            backoff,
            lease,
            attempt_timeout,
            poll_interval,
            ordered,
            stop,
            health,
            ..
        } = relayer;
        let (shutdown, drain_deadline) = stop.into_parts();
        let name: Arc<str> = store.name().into();
        let owner: Arc<str> = format!("relay-{}", uuid::Uuid::now_v7()).into();
        let attempts = Arc::new(Attempts {
            policy: RedeliveryPolicy {
                max_deliveries: max_attempts,
                backoff,
            },
            timeout: attempt_timeout.min(lease / 2),
            abandon: CancellationToken::new(),
            outbox: name.clone(),
        });
        let counters = Counters::new(&name);
        let gauges = RelayGauges::new(&name);
        let now = Instant::now();
        RelayLoop {
            store,
            state,
            relay,
            name,
            owner,
            batch,
            window,
            lease,
            poll_interval,
            ordered,
            drain_deadline,
            attempts,
            counters,
            gauges,
            health,
            shutdown,
            report: RelayReport::default(),
            refill: batch.min(window).div_ceil(4),
            inflight: FuturesUnordered::new(),
            claimed: VecDeque::new(),
            marks: Vec::new(),
            marks_due: now,
            claiming: None,
            claim_sent: now,
            flushing: None,
            flushing_marks: 0,
            wakeups: None,
            listening: false,
            eager: true,
            poll_at: now,
            claim_retry: Retry::reconnect(),
            claim_retry_at: now,
            flush_retry: Retry::new(Backoff::exponential(
                Duration::from_millis(50),
                Duration::from_millis(3200),
            )),
            flush_retry_at: now,
            stopping: false,
            drain_until: now,
            abandoned: false,
            halted: false,
        }
    }

    /// Starts what is due, waits for the next event, hands it to its method; until stopped.
    pub(super) async fn run(mut self) -> RelayReport {
        self.on_start();
        loop {
            if self.halted {
                self.give_up();
                break;
            }
            let now = Instant::now();
            if !self.listening && !self.stopping {
                self.listening = true;
                self.wakeups = self.store.wakeups().await;
            }
            self.start_claimed(now);
            self.claim_if_due(now);
            self.flush_if_due(now);
            self.observe_in_flight();
            if self.stopping && self.is_drained(now) {
                break;
            }
            let waiting_claim = !self.stopping && !self.eager;
            let retry_at = self.retry_at(now);
            tokio::select! {
                biased;
                () = &mut self.shutdown, if !self.stopping => self.on_shutdown(),
                Some(done) = self.inflight.next(), if !self.inflight.is_empty() => {
                    self.on_attempt_done(done);
                }
                (limit, claimed) = poll_slot(&mut self.claiming), if self.claiming.is_some() => {
                    self.claiming = None;
                    match claimed {
                        Ok(records) => self.on_claimed(limit, records),
                        Err(error) => self.on_claim_failed(error),
                    }
                }
                (batch, result) = poll_slot(&mut self.flushing), if self.flushing.is_some() => {
                    self.flushing = None;
                    match result {
                        Ok(changed) => self.on_marks_written(batch, changed),
                        Err(error) => self.on_marks_failed(batch, error),
                    }
                }
                woke = next_wakeup(&mut self.wakeups), if waiting_claim && self.wakeups.is_some() => {
                    self.on_wakeup(woke);
                }
                () = tokio::time::sleep_until(self.poll_at), if waiting_claim => self.on_poll_due(),
                // A claim's or a write's retry wait ended: the top of the loop starts it again.
                () = tokio::time::sleep_until(retry_at.unwrap_or(now)), if retry_at.is_some() => {}
                () = tokio::time::sleep_until(self.drain_until), if self.stopping && !self.abandoned => {
                    self.on_drain_deadline();
                }
                () = tokio::time::sleep_until(self.drain_until + STOP_GRACE), if self.abandoned => {
                    self.halted = true;
                }
            }
        }
        tracing::info!(outbox = &*self.name, relay = &*self.owner, report = ?self.report, "relay stopped");
        self.report
    }

    /// The signal is polled once before anything: a signal future such as `ctrl_c()` installs its
    /// handler on its first poll.
    fn on_start(&mut self) {
        if (&mut self.shutdown).now_or_never().is_some() {
            self.stopping = true;
            self.drain_until = Instant::now() + self.drain_deadline;
        }
        tracing::info!(
            outbox = &*self.name,
            relay = &*self.owner,
            batch = self.batch,
            window = self.window,
            ordered = self.ordered,
            max_attempts = self.attempts.policy.max_deliveries.get(),
            lease_ms = self.lease.as_millis() as u64,
            "relay started"
        );
    }

    /// Starts the attempts of claimed records while the window has room. A record whose lease
    /// would end before its attempt could time out, and every record once stopping, is given
    /// back instead (nothing counted against it): no attempt outlives its lease.
    fn start_claimed(&mut self, now: Instant) {
        while self.stopping || self.inflight.len() < self.window {
            let Some((start_by, record)) = self.claimed.pop_front() else {
                break;
            };
            if self.stopping || now > start_by {
                let attempt = record.attempts().saturating_add(1);
                let mark = Mark::Release(record.id().clone());
                self.marks.push(Finished { mark, attempt });
                continue;
            }
            self.inflight
                .push(start(&self.relay, record, &self.state, &self.attempts));
        }
    }

    /// Starts a claim when none is under way, the last one did not come back short (or something
    /// woke the relay since), its retry wait is over, and few claimed records are left waiting
    /// while a batch's worth fits in the window and the batch ahead of it.
    fn claim_if_due(&mut self, now: Instant) {
        let held = self.inflight.len() + self.claimed.len();
        let room = (self.window + self.batch).saturating_sub(held);
        if !self.stopping
            && self.claiming.is_none()
            && self.eager
            && now >= self.claim_retry_at
            && (held == 0 || (self.claimed.len() <= self.refill && room >= self.refill))
        {
            let limit = room.min(self.batch);
            self.claim_sent = now;
            let (store, owner) = (self.store.clone(), self.owner.clone());
            let (lease, ordered) = (self.lease, self.ordered);
            self.claiming = Some(Box::pin(async move {
                let claim = Claim {
                    owner: &owner,
                    limit,
                    lease,
                    ordered,
                };
                (limit, store.claim(claim).await)
            }));
        }
    }

    /// Starts writing every mark waiting, in one statement, when no write is under way, its retry
    /// wait is over and the batch is due (see [`MARK_DELAY`]).
    fn flush_if_due(&mut self, now: Instant) {
        if self.flushing.is_none()
            && !self.marks.is_empty()
            && now >= self.flush_retry_at
            && self.marks_due(now)
        {
            let batch = std::mem::take(&mut self.marks);
            self.flushing_marks = batch.len();
            let (store, owner) = (self.store.clone(), self.owner.clone());
            self.flushing = Some(Box::pin(async move {
                let list: Vec<Mark> = batch.iter().map(|f| f.mark.clone()).collect();
                let result = store.mark(&owner, &list).await;
                (batch, result)
            }));
        }
    }

    /// Whether the marks waiting make a batch: a claim's worth, nothing else in flight to join
    /// them, stopping, or the first has waited [`MARK_DELAY`].
    fn marks_due(&self, now: Instant) -> bool {
        self.marks.len() >= self.refill
            || self.inflight.is_empty()
            || self.stopping
            || now >= self.marks_due
    }

    /// Stopping: whether the run is over — nothing in flight, being claimed or written, and no
    /// mark waiting; or marks waiting that could not be written by the drain deadline, given up
    /// (their records are claimed again after the lease).
    fn is_drained(&mut self, now: Instant) -> bool {
        if !self.inflight.is_empty()
            || !self.claimed.is_empty()
            || self.claiming.is_some()
            || self.flushing.is_some()
        {
            return false;
        }
        if self.marks.is_empty() {
            return true;
        }
        if self.abandoned && now >= self.drain_until && self.flush_retry.failures() > 0 {
            self.report.mark_failed += self.marks.len() as u64;
            tracing::error!(
                outbox = &*self.name,
                marks = self.marks.len(),
                "could not write marks before stopping; the records are claimed again after their lease"
            );
            return true;
        }
        false
    }

    /// When to wake for a retry: a failed write of marks waiting, else a failed claim's wait.
    fn retry_at(&self, now: Instant) -> Option<Instant> {
        if !self.marks.is_empty() && self.flushing.is_none() {
            Some(self.flush_retry_at.max(self.marks_due))
        } else if !self.stopping
            && self.eager
            && self.claiming.is_none()
            && self.claim_retry_at > now
        {
            Some(self.claim_retry_at)
        } else {
            None
        }
    }

    /// The shutdown signal: nothing new is claimed; what is in flight has the drain deadline.
    fn on_shutdown(&mut self) {
        self.stopping = true;
        self.drain_until = Instant::now() + self.drain_deadline;
        tracing::info!(
            outbox = &*self.name,
            in_flight = self.inflight.len(),
            "relay stopping"
        );
    }

    /// An attempt ended: its mark waits to be written.
    fn on_attempt_done(&mut self, done: Finished) {
        if self.marks.is_empty() {
            self.marks_due = Instant::now() + MARK_DELAY;
        }
        self.marks.push(done);
        // Whatever else finished meanwhile joins the same batch of marks.
        while let Some(Some(done)) = self.inflight.next().now_or_never() {
            self.marks.push(done);
        }
    }

    /// A claim came back: its records wait for the window (`start_claimed`). A short batch means
    /// nothing more is pending now, so the next claim waits for a wake-up or the poll.
    fn on_claimed(&mut self, limit: usize, records: Vec<Record>) {
        self.claim_retry.succeeded();
        self.health.succeeded(Instant::now());
        if records.len() < limit {
            self.eager = false;
            self.poll_at = Instant::now() + self.poll_interval;
        }
        // The lease began after the claim was sent: counted from then, with the attempt timeout.
        let start_by = self.claim_sent + self.lease.saturating_sub(self.attempts.timeout);
        self.claimed
            .extend(records.into_iter().map(|record| (start_by, record)));
    }

    #[cold]
    fn on_claim_failed(&mut self, error: TransportError) {
        let wait = self.claim_retry.failed();
        self.health.failed(&error, None);
        self.claim_retry_at = Instant::now() + wait;
        tracing::warn!(outbox = &*self.name, %error, retry_in_ms = wait.as_millis() as u64,
            "claiming records failed");
    }

    /// Marks were written: each is counted and logged, once.
    fn on_marks_written(&mut self, batch: Vec<Finished>, changed: u64) {
        self.flush_retry.succeeded();
        if changed < batch.len() as u64 {
            tracing::debug!(
                outbox = &*self.name,
                marks = batch.len(),
                changed,
                "some marks found their record no longer leased to this relay"
            );
        }
        for done in &batch {
            count(&mut self.report, &self.counters, &self.name, done);
            if let Mark::Dead { .. } = done.mark {
                self.health.dead_lettered();
            }
        }
        // Ordered: a key whose record was just marked may have its next one claimable now,
        // without waiting for the poll.
        if self.ordered && !self.stopping {
            self.eager = true;
        }
    }

    /// Marks could not be written: they go back in front of the ones waiting, for the retry.
    #[cold]
    fn on_marks_failed(&mut self, mut batch: Vec<Finished>, error: TransportError) {
        let wait = self.flush_retry.failed();
        self.flush_retry_at = Instant::now() + wait;
        tracing::warn!(outbox = &*self.name, %error, marks = batch.len(),
            retry_in_ms = wait.as_millis() as u64, "writing marks failed");
        batch.append(&mut self.marks);
        self.marks = batch;
    }

    /// The store said something was written (or its wake-ups ended): claim now.
    fn on_wakeup(&mut self, woke: Option<()>) {
        if woke.is_none() {
            self.wakeups = None;
        }
        self.eager = true;
    }

    /// The poll interval passed since a short claim: claim now.
    fn on_poll_due(&mut self) {
        self.eager = true;
    }

    /// Records in flight, into the gauge and the health.
    fn observe_in_flight(&self) {
        let n = self.inflight.len();
        self.gauges.in_flight.set(n as f64);
        self.health.set_in_flight(n);
    }

    /// The grace after the drain deadline ended with the store still not answering (a claim or a
    /// write of marks blocked, marks not written): the run stops here. What it drops is what a
    /// crash would: marks not written (counted in [`RelayReport::mark_failed`]; their records,
    /// still leased to this relay, are claimed again after the lease, and a record delivered is
    /// relayed again under its own id), a claim under way (its records, if it completes, wait
    /// for their lease to end). Nothing is marked that was not: a record is marked delivered
    /// only by a write carrying its receipt's mark.
    #[cold]
    fn give_up(&mut self) {
        let unwritten = self.marks.len()
            + self.claimed.len()
            + if self.flushing.is_some() {
                self.flushing_marks
            } else {
                0
            };
        self.report.mark_failed += unwritten as u64;
        tracing::error!(
            outbox = &*self.name,
            relay = &*self.owner,
            marks = unwritten,
            in_flight = self.inflight.len(),
            claiming = self.claiming.is_some(),
            writing = self.flushing.is_some(),
            grace_ms = STOP_GRACE.as_millis() as u64,
            "the store did not answer within the drain deadline and its grace; stopping without \
             it: the records not marked are claimed again after their lease"
        );
    }

    /// The drain deadline passed: attempts still in flight are given back.
    fn on_drain_deadline(&mut self) {
        self.abandoned = true;
        if !self.inflight.is_empty() {
            tracing::warn!(
                outbox = &*self.name,
                in_flight = self.inflight.len(),
                "drain deadline passed; giving back the records still in flight"
            );
        }
        self.attempts.abandon.cancel();
    }
}

async fn poll_slot<T>(slot: &mut Option<BoxFuture<T>>) -> T {
    match slot {
        Some(future) => future.await,
        None => std::future::pending().await,
    }
}

async fn next_wakeup(wakeups: &mut Option<Wakeups>) -> Option<()> {
    match wakeups {
        Some(stream) => stream.next().await,
        None => std::future::pending().await,
    }
}

/// Logs a written mark once and counts it: the one place a relay's outcomes are reported.
fn count(report: &mut RelayReport, counters: &Counters, outbox: &str, done: &Finished) {
    let attempt = done.attempt;
    match &done.mark {
        Mark::Delivered(id) => {
            report.delivered += 1;
            counters.relayed.increment(1);
            tracing::debug!(outbox, record.id = %id, attempt, "record delivered");
        }
        Mark::Retry { id, error, after } => {
            report.retried += 1;
            counters.failed.increment(1);
            tracing::warn!(outbox, record.id = %id, attempt, error = error.as_str(),
                backoff_ms = after.as_millis() as u64, "relaying the record failed; it is attempted again after the backoff");
        }
        Mark::Dead { id, reason } => {
            report.dead += 1;
            match reason.kind() {
                ReasonKind::Malformed => &counters.malformed,
                ReasonKind::Rejected => &counters.rejected,
                ReasonKind::Exhausted => &counters.exhausted,
            }
            .increment(1);
            tracing::error!(outbox, record.id = %id, attempt, reason = reason.kind().as_str(),
                detail = reason.detail(), "record marked dead");
        }
        Mark::Release(id) => {
            report.released += 1;
            tracing::debug!(outbox, record.id = %id, "record given back unfinished at shutdown");
        }
    }
}
