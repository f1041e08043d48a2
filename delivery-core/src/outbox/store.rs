//! What a relay needs from an outbox table: claim pending records under a lease, write back how
//! each attempt ended (one statement per batch), and a wake-up after a commit where the database
//! has one. Implemented by [`PgStore`](super::PgStore) and [`SqliteStore`](super::SqliteStore).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::Bytes;
use futures_util::stream::Stream;

use super::record::{Record, RecordId};
use crate::disposition::{DeadLetterReason, Disposition, Outcome};
use crate::transport_error::TransportError;
use crate::unit::Headers;

/// A claim: up to `limit` records, leased to `owner` for `lease`.
#[derive(Clone, Copy, Debug)]
pub struct Claim<'a> {
    /// The relay claiming (unique per relay run).
    pub owner: &'a str,
    /// The most records to claim.
    pub limit: usize,
    /// How long the claim holds; past it, another relay may claim the record again.
    pub lease: Duration,
    /// Claim only the earliest pending record of each key (see
    /// [`Relayer::ordered`](super::Relayer::ordered)).
    pub ordered: bool,
}

/// How one attempt ended, as written back to the record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Mark {
    /// The receiver confirmed: `delivered`.
    Delivered(RecordId),
    /// Failed: claimable again `after` from the database's now. (The attempt was counted when
    /// the record was claimed.)
    Retry {
        /// The record.
        id: RecordId,
        /// The failure, kept as `last_error`.
        error: String,
        /// The backoff.
        after: Duration,
    },
    /// Failed for good: `dead`, with the reason as `last_error`.
    Dead {
        /// The record.
        id: RecordId,
        /// Why.
        reason: DeadLetterReason,
    },
    /// Not attempted to the end (shutdown): the lease is given up, and the attempt counted at
    /// the claim is taken back.
    Release(RecordId),
}

impl Mark {
    /// The mark of an attempt that ended with `outcome`, decided into `disposition` by
    /// [`decide`](crate::disposition::decide), as a consumer's unit is.
    pub(crate) fn of(id: RecordId, disposition: Disposition, outcome: &Outcome) -> Mark {
        match disposition {
            Disposition::Ack => Mark::Delivered(id),
            Disposition::Return { after } => Mark::Retry {
                id,
                error: outcome.error().to_owned(),
                after,
            },
            Disposition::DeadLetter(reason) => Mark::Dead { id, reason },
        }
    }

    /// The record this mark is for.
    pub fn id(&self) -> &RecordId {
        match self {
            Mark::Delivered(id) | Mark::Release(id) => id,
            Mark::Retry { id, .. } | Mark::Dead { id, .. } => id,
        }
    }

    /// `(op, error, delay in ms)` as the stores' batched UPDATE takes them.
    pub fn columns(&self) -> (&'static str, String, i64) {
        match self {
            Mark::Delivered(_) => ("delivered", String::new(), 0),
            Mark::Release(_) => ("release", String::new(), 0),
            Mark::Retry { error, after, .. } => (
                "retry",
                error.clone(),
                after.as_millis().try_into().unwrap_or(i64::MAX),
            ),
            Mark::Dead { reason, .. } => ("dead", reason.to_string(), 0),
        }
    }
}

/// Notifications that records were committed: hints to claim now rather than at the next poll.
pub type Wakeups = Pin<Box<dyn Stream<Item = ()> + Send>>;

/// An outbox table a [`Relayer`](super::Relayer) relays from (`PgStore` of delivery-postgres and
/// `SqliteStore` of delivery-sqlite, both delivery-sql's `SqlStore`). The relayer alone decides when a mark is written (only after a receipt, rule
/// 6); a store only claims under a lease and writes the marks it is handed.
pub trait Store: Clone + Send + Sync + 'static {
    /// The table's name, for logs and metrics.
    fn name(&self) -> &str;

    #[doc(hidden)]
    /// Claims pending records that are available (backoff passed) and not leased (or whose lease
    /// expired), oldest first, leasing them to `claim.owner`.
    fn claim(
        &self,
        claim: Claim<'_>,
    ) -> impl Future<Output = Result<Vec<Record>, TransportError>> + Send;

    #[doc(hidden)]
    /// Writes back `marks` in one statement. A failure mark applies only while `owner` still holds
    /// the lease; a delivered mark applies to any pending record (the receiver confirmed it).
    /// Returns how many records changed.
    fn mark(
        &self,
        owner: &str,
        marks: &[Mark],
    ) -> impl Future<Output = Result<u64, TransportError>> + Send;

    /// The backlog now: records pending (neither delivered nor dead, whether backing off, leased
    /// or waiting), the age of the oldest by the database's clock, and the dead records. One
    /// aggregate query over the pending and dead records (`count(*)` and `min(created_at)`); the
    /// relay runs it every [`backlog_every`](super::Relayer::backlog_every).
    ///
    /// ```
    /// # #[cfg(feature = "sqlite")]
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use delivery_core::outbox::{NewRecord, Outbox, Store};
    ///
    /// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let outbox = Outbox::new();
    /// let store = outbox.sqlite(pool.clone());
    /// store.migrate().await?;
    /// assert_eq!(store.backlog().await?.pending, 0);
    /// let mut tx = pool.begin().await?;
    /// outbox.write(&mut tx, NewRecord::new("orders.events", "o-1 placed").id("o-1")).await?;
    /// tx.commit().await?;
    /// let backlog = store.backlog().await?;
    /// assert_eq!((backlog.pending, backlog.dead), (1, 0));
    /// assert!(backlog.oldest_pending_age.is_some());
    /// # Ok(()) }
    /// # #[cfg(not(feature = "sqlite"))] fn main() {}
    /// ```
    fn backlog(&self) -> impl Future<Output = Result<Backlog, TransportError>> + Send;

    #[doc(hidden)]
    /// Wake-ups after commits, where the database sends them (PostgreSQL `LISTEN`); `None` where
    /// polling is the only way.
    fn wakeups(&self) -> impl Future<Output = Option<Wakeups>> + Send;
}

/// An outbox's backlog, as [`Store::backlog`] reads it.
#[derive(Clone, Copy, Debug, Default, PartialEq)]
#[non_exhaustive]
pub struct Backlog {
    /// Records neither delivered nor dead.
    pub pending: u64,
    /// How long ago the oldest pending record was written; `None` when none is pending.
    pub oldest_pending_age: Option<Duration>,
    /// Records marked dead.
    pub dead: u64,
}

impl Backlog {
    /// From the query's columns: counts, and the age in seconds (negative clamped to zero).
    pub fn from_row(pending: i64, oldest_age_seconds: Option<f64>, dead: i64) -> Self {
        Backlog {
            pending: pending.max(0) as u64,
            oldest_pending_age: oldest_age_seconds
                .filter(|_| pending > 0)
                .map(|s| Duration::try_from_secs_f64(s.max(0.0)).unwrap_or(Duration::MAX)),
            dead: dead.max(0) as u64,
        }
    }
}

/// Where a record stands.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
#[non_exhaustive]
pub enum Status {
    /// Waiting to be relayed (or being relayed, or backing off).
    Pending,
    /// Relayed: the receiver confirmed.
    Delivered,
    /// Given up: rejected, malformed, or failed `max_attempts` times. An operator re-queues it.
    Dead,
}

impl Status {
    /// The status a `status` column holds (`pending`, `delivered`, `dead`).
    pub fn parse(s: &str) -> Status {
        match s {
            "delivered" => Status::Delivered,
            "dead" => Status::Dead,
            _ => Status::Pending,
        }
    }
}

/// A record as an operator reads it: what was written and where its relaying stands.
#[derive(Clone, PartialEq, Eq)]
pub struct StoredRecord {
    /// The id fixed at write time.
    pub id: RecordId,
    /// The topic.
    pub topic: String,
    /// The key, if any.
    pub key: Option<String>,
    /// The payload exactly as written.
    pub payload: Bytes,
    /// Where it stands.
    pub status: Status,
    /// Attempts so far, counted as each began (the claim).
    pub attempts: u32,
    /// The last failure (for a dead record: `reason: detail`, e.g. `rejected: ...`).
    pub last_error: Option<String>,
    /// The headers written with it.
    pub headers: Headers,
}

impl fmt::Debug for StoredRecord {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("StoredRecord")
            .field("id", &self.id)
            .field("topic", &self.topic)
            .field("key", &self.key)
            .field("payload_len", &self.payload.len())
            .field("status", &self.status)
            .field("attempts", &self.attempts)
            .field("last_error", &self.last_error)
            .field("headers", &self.headers)
            .finish()
    }
}

/// Resolves once `pending` reports no pending record, polling every 20 ms (a shutdown signal
/// for tests and batch jobs: relay until the outbox is drained).
pub async fn until_idle<F, Fut, E>(pending: F)
where
    F: Fn() -> Fut,
    Fut: Future<Output = Result<u64, E>>,
{
    loop {
        if let Ok(0) = pending().await {
            return;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}
