//! The relay runtime: claim pending records in batches, hand each to the relay function (up to a
//! window at once, so a sink's confirms are pipelined), and write back how each attempt ended —
//! delivered only for a [`Receipt`](super::Receipt) naming the record — in one statement per
//! batch of marks.

use std::future::Future;
use std::num::NonZeroU32;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use futures_util::FutureExt;
use futures_util::stream::{FuturesUnordered, StreamExt};
use metrics::Counter;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;

use super::record::{Attempt, Record, Relay};
use super::store::{Claim, Mark, Store, Wakeups};
use crate::disposition::{Backoff, Disposition, Outcome, ReasonKind, RedeliveryPolicy, decide};
use crate::pace::Retry;
use crate::unit::{DeliveryCount, UnitId};

type Shutdown = Pin<Box<dyn Future<Output = ()> + Send>>;
type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;
/// A claim in progress: how many were asked for, and what came back.
type Claiming = BoxFuture<(usize, Result<Vec<Record>, sqlx::Error>)>;
/// A write of marks in progress: the marks, and how it went.
type Flushing = BoxFuture<(Vec<Finished>, Result<u64, sqlx::Error>)>;

/// Runs a relay function over an outbox [`Store`]. Settings have defaults; see each method.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::future::Future;
/// use delivery_core::outbox::sink::MemorySink;
/// use delivery_core::outbox::{Attempt, IntoAttempt, NewRecord, Outbox, Record, Relay, Relayer};
///
/// // What `#[relay]` generates around `async fn publish(record: Record, State(sink): State<MemorySink>)`.
/// struct Publish;
/// impl Relay<MemorySink> for Publish {
///     fn call(&self, record: &Record, sink: &MemorySink) -> impl Future<Output = Attempt> + Send + 'static {
///         let (record, sink) = (record.clone(), sink.clone());
///         async move { sink.send(&record).await.into_attempt() }
///     }
/// }
///
/// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// let outbox = Outbox::new();
/// let store = outbox.sqlite(pool.clone());
/// store.migrate().await?;
/// let mut tx = pool.begin().await?;
/// outbox.write(&mut tx, NewRecord::new("orders.events", "o-1 placed").id("order-o-1")).await?;
/// tx.commit().await?;
///
/// let sink = MemorySink::new();
/// let report = Relayer::new(store.clone())
///     .state(sink.clone())
///     .shutdown_on(store.idle())
///     .run(Publish)
///     .await;
/// assert_eq!(report.delivered, 1);
/// assert_eq!(sink.sent()[0].id.as_str(), "order-o-1");
/// # Ok(()) }
/// # #[cfg(not(feature = "sqlite"))] fn main() {}
/// ```
#[must_use = "a relayer does nothing until `.run(relay)` is awaited"]
pub struct Relayer<St, S = ()> {
    store: St,
    state: S,
    batch: usize,
    window: usize,
    max_attempts: NonZeroU32,
    backoff: Backoff,
    lease: Duration,
    attempt_timeout: Duration,
    poll_interval: Duration,
    ordered: bool,
    shutdown: Option<Shutdown>,
    drain_deadline: Duration,
}

/// What a run of a relayer did, counted when it stops (marks written to the store).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct RelayReport {
    /// Records marked delivered after the receiver's receipt.
    pub delivered: u64,
    /// Failed attempts, the record left pending for a later attempt after its backoff.
    pub retried: u64,
    /// Records marked dead (rejected, malformed, or failed `max_attempts` times).
    pub dead: u64,
    /// Records given back unfinished at shutdown (nothing counted against them).
    pub released: u64,
    /// Marks that could not be written (the store was unreachable until the run stopped); those
    /// records are claimed again once their lease expires.
    pub mark_failed: u64,
}

impl<St: Store> Relayer<St, ()> {
    /// A relayer over `store`, with no shared state.
    pub fn new(store: St) -> Self {
        Relayer {
            store,
            state: (),
            batch: 100,
            window: 64,
            max_attempts: NonZeroU32::new(10).unwrap(),
            backoff: Backoff::exponential(Duration::from_millis(500), Duration::from_secs(300)),
            lease: Duration::from_secs(60),
            attempt_timeout: Duration::from_secs(30),
            poll_interval: Duration::from_secs(1),
            ordered: false,
            shutdown: None,
            drain_deadline: Duration::from_secs(10),
        }
    }
}

impl<St: Store, S> Relayer<St, S> {
    /// The shared state relay functions take as `State<S>` (a sink, a client).
    pub fn state<S2>(self, state: S2) -> Relayer<St, S2> {
        Relayer {
            store: self.store,
            state,
            batch: self.batch,
            window: self.window,
            max_attempts: self.max_attempts,
            backoff: self.backoff,
            lease: self.lease,
            attempt_timeout: self.attempt_timeout,
            poll_interval: self.poll_interval,
            ordered: self.ordered,
            shutdown: self.shutdown,
            drain_deadline: self.drain_deadline,
        }
    }

    /// The most records claimed by one statement (default 100; at least 1).
    pub fn batch(mut self, n: usize) -> Self {
        self.batch = n.max(1);
        self
    }

    /// The most records being relayed at once (default 64; at least 1). A sink that pipelines
    /// confirms (RabbitMQ) has this many publishes outstanding.
    pub fn window(mut self, n: usize) -> Self {
        self.window = n.max(1);
        self
    }

    /// A record whose attempt fails for the `n`th time is marked dead (default 10; `0` is read as
    /// 1). Counted in the record, so a restarted relay continues the count.
    pub fn max_attempts(mut self, n: u32) -> Self {
        self.max_attempts = NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN);
        self
    }

    /// The wait before a failed record is attempted again (default: 500 ms doubling to 5 min). A
    /// failure asking for longer ([`HandlerError::after`](crate::HandlerError::after), a
    /// receiver's `Retry-After`) waits that long instead.
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// How long a claim holds a record (default 60 s). A relay that dies leaves its records to the
    /// others once the lease expires; it must exceed the [attempt timeout](Self::attempt_timeout),
    /// which is what keeps two relays from relaying one record at the same time.
    pub fn lease(mut self, lease: Duration) -> Self {
        self.lease = lease.max(Duration::from_millis(10));
        self
    }

    /// How long one attempt may take before it counts as failed (default 30 s). Kept under half
    /// the lease: a longer setting is lowered to that.
    pub fn attempt_timeout(mut self, timeout: Duration) -> Self {
        self.attempt_timeout = timeout;
        self
    }

    /// How often the store is polled when nothing woke the relay (default 1 s). PostgreSQL's
    /// `LISTEN/NOTIFY` wakes it at once after a commit; polling also finds records whose backoff
    /// ended and leases that expired.
    pub fn poll_interval(mut self, interval: Duration) -> Self {
        self.poll_interval = interval.max(Duration::from_millis(1));
        self
    }

    /// Holds a key's later records back behind its earliest pending one: one record per key is
    /// relayed at a time, oldest first, and a failed one blocks its key (not the others) until it
    /// is delivered or dead. Records without a key are never held. Off by default: without it the
    /// relay promises no order between records.
    pub fn ordered(mut self, ordered: bool) -> Self {
        self.ordered = ordered;
        self
    }

    /// Stops the relayer when `signal` completes: nothing new is claimed, attempts in flight
    /// finish within the [drain deadline](Self::drain_deadline), the rest are given back.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.shutdown = Some(Box::pin(signal));
        self
    }

    /// How long attempts in flight may run after shutdown before they are given back (default
    /// 10 s).
    pub fn drain_deadline(mut self, deadline: Duration) -> Self {
        self.drain_deadline = deadline;
        self
    }

    /// Runs `relay` until the shutdown signal, and reports what it did.
    pub async fn run<R>(self, relay: R) -> RelayReport
    where
        R: Relay<S>,
        S: Send + Sync + 'static,
    {
        run(self, relay).await
    }
}

/// One attempt's end, waiting to be written back.
struct Finished {
    mark: Mark,
    /// Which attempt this was (1 for the first).
    attempt: u32,
}

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
        let dead = |reason: ReasonKind| metrics::counter!("delivery_relay_dead_total", "outbox" => outbox.to_owned(), "reason" => reason.as_str());
        Counters {
            relayed: metrics::counter!("delivery_relayed_total", "outbox" => outbox.to_owned()),
            failed: metrics::counter!("delivery_relay_failed_total", "outbox" => outbox.to_owned()),
            malformed: dead(ReasonKind::Malformed),
            rejected: dead(ReasonKind::Rejected),
            exhausted: dead(ReasonKind::Exhausted),
        }
    }
}

/// Settings every attempt reads.
struct Attempts {
    policy: RedeliveryPolicy,
    timeout: Duration,
    abandon: CancellationToken,
}

async fn run<St, S, R>(relayer: Relayer<St, S>, relay: R) -> RelayReport
where
    St: Store,
    S: Send + Sync + 'static,
    R: Relay<S>,
{
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
        shutdown,
        drain_deadline,
    } = relayer;
    let name: Arc<str> = store.name().into();
    let owner: Arc<str> = format!("relay-{}", uuid::Uuid::now_v7()).into();
    let attempts = Arc::new(Attempts {
        policy: RedeliveryPolicy {
            max_deliveries: max_attempts,
            backoff,
        },
        timeout: attempt_timeout.min(lease / 2),
        abandon: CancellationToken::new(),
    });
    let counters = Counters::new(&name);
    let mut shutdown = shutdown.unwrap_or_else(|| Box::pin(std::future::pending()));
    let mut report = RelayReport::default();

    // Claim again once this many slots are free (or when nothing is in flight): claims stay
    // batched, and the next batch is on its way before the window runs dry.
    let refill = batch.min(window).div_ceil(4);
    let mut inflight: FuturesUnordered<BoxFuture<Finished>> = FuturesUnordered::new();
    let mut marks: Vec<Finished> = Vec::new();
    let mut claiming: Option<Claiming> = None;
    let mut flushing: Option<Flushing> = None;
    let mut wakeups: Option<Wakeups> = None;
    let mut listening = false;
    // Whether to claim now; false once a claim came back short, until a wake-up or the poll.
    let mut eager = true;
    let mut poll_at = Instant::now();
    let mut claim_retry = Retry::reconnect();
    let mut claim_retry_at = Instant::now();
    let mut flush_retry = Retry::new(Backoff::exponential(
        Duration::from_millis(50),
        Duration::from_millis(3200),
    ));
    let mut flush_retry_at = Instant::now();
    let mut stopping = false;
    let mut drain_until = Instant::now();
    let mut abandoned = false;
    // The signal is polled once before anything: a signal future such as `ctrl_c()` installs its
    // handler on its first poll.
    if (&mut shutdown).now_or_never().is_some() {
        stopping = true;
        drain_until = Instant::now() + drain_deadline;
    }

    tracing::info!(
        outbox = &*name,
        relay = &*owner,
        batch,
        window,
        ordered,
        max_attempts = max_attempts.get(),
        lease_ms = lease.as_millis() as u64,
        "relay started"
    );
    loop {
        let now = Instant::now();
        if !listening && !stopping {
            listening = true;
            wakeups = store.wakeups().await;
        }
        let room = window.saturating_sub(inflight.len());
        if !stopping
            && claiming.is_none()
            && eager
            && now >= claim_retry_at
            && (inflight.is_empty() || room >= refill)
        {
            let limit = room.min(batch);
            let (store, owner) = (store.clone(), owner.clone());
            claiming = Some(Box::pin(async move {
                let claim = Claim {
                    owner: &owner,
                    limit,
                    lease,
                    ordered,
                };
                (limit, store.claim(claim).await)
            }));
        }
        if flushing.is_none() && !marks.is_empty() && now >= flush_retry_at {
            let batch = std::mem::take(&mut marks);
            let (store, owner) = (store.clone(), owner.clone());
            flushing = Some(Box::pin(async move {
                let list: Vec<Mark> = batch.iter().map(|f| f.mark.clone()).collect();
                let result = store.mark(&owner, &list).await;
                (batch, result)
            }));
        }
        if stopping && inflight.is_empty() && claiming.is_none() && flushing.is_none() {
            if marks.is_empty() {
                break;
            }
            if abandoned && now >= drain_until && flush_retry.failures() > 0 {
                report.mark_failed += marks.len() as u64;
                tracing::error!(
                    outbox = &*name,
                    marks = marks.len(),
                    "could not write marks before stopping; the records are claimed again after their lease"
                );
                break;
            }
        }
        let waiting_claim = !stopping && !eager;
        let retry_at = if !marks.is_empty() && flushing.is_none() {
            Some(flush_retry_at)
        } else if !stopping && eager && claiming.is_none() && claim_retry_at > now {
            Some(claim_retry_at)
        } else {
            None
        };
        tokio::select! {
            biased;
            () = &mut shutdown, if !stopping => {
                stopping = true;
                drain_until = Instant::now() + drain_deadline;
                tracing::info!(outbox = &*name, in_flight = inflight.len(), "relay stopping");
            }
            Some(done) = inflight.next(), if !inflight.is_empty() => {
                marks.push(done);
                // Whatever else finished meanwhile joins the same batch of marks.
                while let Some(Some(done)) = inflight.next().now_or_never() {
                    marks.push(done);
                }
            }
            (limit, claimed) = poll_slot(&mut claiming), if claiming.is_some() => {
                claiming = None;
                match claimed {
                    Ok(records) => {
                        claim_retry.succeeded();
                        if records.len() < limit {
                            eager = false;
                            poll_at = Instant::now() + poll_interval;
                        }
                        for record in records {
                            inflight.push(start(&relay, record, &state, &attempts));
                        }
                    }
                    Err(error) => {
                        let wait = claim_retry.failed();
                        claim_retry_at = Instant::now() + wait;
                        tracing::warn!(outbox = &*name, %error, retry_in_ms = wait.as_millis() as u64,
                            "claiming records failed");
                    }
                }
            }
            (batch, result) = poll_slot(&mut flushing), if flushing.is_some() => {
                flushing = None;
                match result {
                    Ok(changed) => {
                        flush_retry.succeeded();
                        if changed < batch.len() as u64 {
                            tracing::debug!(outbox = &*name, marks = batch.len(), changed,
                                "some marks found their record no longer leased to this relay");
                        }
                        for done in &batch {
                            count(&mut report, &counters, &name, done);
                        }
                        // Ordered: a key whose record was just marked may have its next one
                        // claimable now, without waiting for the poll.
                        if ordered && !stopping {
                            eager = true;
                        }
                    }
                    Err(error) => {
                        let wait = flush_retry.failed();
                        flush_retry_at = Instant::now() + wait;
                        tracing::warn!(outbox = &*name, %error, marks = batch.len(),
                            retry_in_ms = wait.as_millis() as u64, "writing marks failed");
                        let mut batch = batch;
                        batch.append(&mut marks);
                        marks = batch;
                    }
                }
            }
            woke = next_wakeup(&mut wakeups), if waiting_claim && wakeups.is_some() => {
                if woke.is_none() {
                    wakeups = None;
                }
                eager = true;
            }
            () = tokio::time::sleep_until(poll_at), if waiting_claim => eager = true,
            () = tokio::time::sleep_until(retry_at.unwrap_or(now)), if retry_at.is_some() => {}
            () = tokio::time::sleep_until(drain_until), if stopping && !abandoned => {
                abandoned = true;
                if !inflight.is_empty() {
                    tracing::warn!(outbox = &*name, in_flight = inflight.len(),
                        "drain deadline passed; giving back the records still in flight");
                }
                attempts.abandon.cancel();
            }
        }
    }
    tracing::info!(outbox = &*name, relay = &*owner, ?report, "relay stopped");
    report
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

/// Starts one attempt: the relay function's future (a panic while resolving its parameters is a
/// failure too), bounded by the attempt timeout, decided into a mark.
fn start<S, R: Relay<S>>(
    relay: &R,
    record: Record,
    state: &S,
    attempts: &Arc<Attempts>,
) -> BoxFuture<Finished> {
    let call = std::panic::catch_unwind(AssertUnwindSafe(|| relay.call(&record, state)));
    let attempts = attempts.clone();
    Box::pin(async move {
        let attempt = record.attempts().saturating_add(1);
        let result = match call {
            Err(panic) => Err(Outcome::panicked(&*panic)),
            Ok(call) => {
                let call =
                    tokio::time::timeout(attempts.timeout, AssertUnwindSafe(call).catch_unwind());
                tokio::select! {
                    biased;
                    result = call => match result {
                        Ok(Ok(attempt)) => Ok(attempt),
                        Ok(Err(panic)) => Err(Outcome::panicked(&*panic)),
                        Err(_) => Err(Outcome::Failed(format!(
                            "no answer within the attempt timeout ({} ms)",
                            attempts.timeout.as_millis()
                        ))),
                    },
                    () = attempts.abandon.cancelled() => {
                        return Finished { mark: Mark::Release(record.id().clone()), attempt };
                    }
                }
            }
        };
        let outcome = match result {
            Ok(Attempt::Delivered(receipt)) if receipt.record() == record.id() => {
                return Finished {
                    mark: Mark::Delivered(record.id().clone()),
                    attempt,
                };
            }
            Ok(Attempt::Delivered(receipt)) => Outcome::Failed(format!(
                "the receipt names record {}, not {}",
                receipt.record(),
                record.id()
            )),
            // As a consumer's handler error: a reject, or a retry (after its wait, if it asked).
            Ok(Attempt::Failed(error)) => crate::handler::outcome_of(error),
            Ok(Attempt::Malformed(malformed)) => Outcome::Malformed(malformed.to_string()),
            Err(outcome) => outcome,
        };
        let id = record.id().clone();
        let mark = match decide(
            &outcome,
            DeliveryCount::new(attempt),
            &attempts.policy,
            &UnitId::new(id.as_str()),
        ) {
            Disposition::Return { after } => Mark::Retry {
                id,
                error: outcome.error().to_owned(),
                after,
            },
            Disposition::DeadLetter(reason) => Mark::Dead { id, reason },
            // `decide` acknowledges only an applied outcome, which is handled above.
            Disposition::Ack => Mark::Retry {
                id,
                error: "unexpected acknowledgement".into(),
                after: Duration::ZERO,
            },
        };
        Finished { mark, attempt }
    })
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
