//! A relayer's settings ([`Relayer`]) and what a run did ([`RelayReport`]).

use std::future::Future;
use std::num::NonZeroU32;
use std::time::Duration;

use super::super::store::Store;
use crate::disposition::Backoff;
use crate::health::{Component, Health};
use crate::runtime::Stop;

/// Runs a relay function over an outbox [`Store`]. Settings have defaults; see each method.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use std::future::Future;
/// use delivery_core::testing::MemorySink;
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
    pub(super) store: St,
    pub(super) state: S,
    pub(super) batch: usize,
    pub(super) window: usize,
    pub(super) max_attempts: NonZeroU32,
    pub(super) backoff: Backoff,
    pub(super) lease: Duration,
    pub(super) attempt_timeout: Duration,
    pub(super) poll_interval: Duration,
    pub(super) ordered: bool,
    pub(super) stop: Stop,
    pub(super) health: Health,
    pub(super) backlog_every: Duration,
}

/// What a run of a relayer did, counted when it stops (marks written to the store).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
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
            health: Health::new(Component::Relay, store.name()),
            backlog_every: Duration::from_secs(15),
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
            stop: Stop::new(Duration::from_secs(10)),
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
            stop: self.stop,
            health: self.health,
            backlog_every: self.backlog_every,
        }
    }

    /// The most records claimed by one statement (default 100; at least 1). The next batch is
    /// claimed while the window is still busy, so up to a batch of claimed records waits for a
    /// slot: a slot freed by a receipt is filled at once, not after a claim's round trip.
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
        self.stop.on(signal);
        self
    }

    /// How long attempts in flight may run after shutdown before they are given back (default
    /// 10 s). It bounds the whole shutdown, the store included: past it and a 5 s grace for the
    /// marks it started, whatever still waits on the store (a claim or a write of marks blocked
    /// by a lock, a server that stopped answering) is dropped, counted in
    /// [`RelayReport::mark_failed`], and those records are claimed again after their lease.
    pub fn drain_deadline(mut self, deadline: Duration) -> Self {
        self.stop.drain_within(deadline);
        self
    }

    /// How often the run reads the outbox's backlog — pending records, the oldest one's age,
    /// dead records — into its [`Health`] and the `delivery_relay_pending`,
    /// `delivery_relay_oldest_pending_age_seconds` and `delivery_dead_letter_depth` gauges
    /// (default 15 s; at least 100 ms). One small query ([`Store::backlog`]) each time.
    pub fn backlog_every(mut self, every: Duration) -> Self {
        self.backlog_every = every.max(Duration::from_millis(100));
        self
    }

    /// This relayer's [`Health`]: take it before `.run(..)` and serve it (see
    /// [`health`](crate::health)). The run updates it: whether the last claim succeeded, records
    /// in flight, the backlog and dead records as last read.
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use delivery_core::outbox::{Outbox, Relayer};
    /// use delivery_core::health::HealthStatus;
    ///
    /// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let store = Outbox::new().sqlite(pool);
    /// store.migrate().await?;
    /// let relayer = Relayer::new(store);
    /// let health = relayer.health();
    /// assert_eq!(health.snapshot().status, HealthStatus::Starting);
    /// assert_eq!(health.name(), "delivery_outbox");
    /// # Ok(()) }
    /// # #[cfg(not(feature = "sqlite"))] fn main() {}
    /// ```
    pub fn health(&self) -> Health {
        self.health.clone()
    }
}
