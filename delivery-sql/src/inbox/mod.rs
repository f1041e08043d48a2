//! An inbox (rule 3): a handler whose effect has no natural key — a counter incremented, an email
//! queued, a row appended — made idempotent under redelivery in one line.
//!
//! In the handler's own sqlx transaction, [`Inbox::first_time`] records the unit's id under the
//! consumer's name and says whether this is its first time. When it is, the handler writes its
//! effect; when it is not, the unit was already applied, and the handler writes nothing and
//! returns `Ok` — the unit is acknowledged, never failed as a conflict. The record and the effect
//! commit together or not at all, so a crash or a failure between them changes nothing: a
//! transaction that rolls back takes its record with it, and the redelivery applies the unit.
//!
//! ```
//! # #[cfg(feature = "sqlite")]
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use delivery::inbox::Inbox;
//! use delivery::{HandlerError, State, Unit, UnitId, consumer};
//! use sqlx::SqlitePool;
//!
//! #[derive(Clone)]
//! struct App {
//!     db: SqlitePool,
//!     inbox: Inbox,
//! }
//!
//! /// Counts a notification: a counter has no key a redelivery could collide with.
//! #[consumer]
//! async fn notify(State(app): State<App>, id: UnitId) -> Result<(), HandlerError> {
//!     let mut tx = app.db.begin().await?;
//!     if !app.inbox.first_time(&mut tx, &id).await? {
//!         return Ok(()); // already applied: acknowledged, nothing written
//!     }
//!     sqlx::query("UPDATE notifications SET sent = sent + 1").execute(&mut *tx).await?;
//!     tx.commit().await?;
//!     Ok(())
//! }
//!
//! let db = SqlitePool::connect("sqlite::memory:").await?;
//! let inbox = Inbox::new("notifications");
//! inbox.sqlite(db.clone()).migrate().await?;
//! sqlx::raw_sql("CREATE TABLE notifications (sent INTEGER NOT NULL); \
//!                INSERT INTO notifications VALUES (0)").execute(&db).await?;
//!
//! let app = App { db: db.clone(), inbox };
//! let sent = || async {
//!     sqlx::query_scalar::<_, i64>("SELECT sent FROM notifications").fetch_one(&db).await.unwrap()
//! };
//! delivery::testing::assert_redelivery_changes_nothing(notify, &app, Unit::new("m-1", "{}"), sent)
//!     .await;
//! assert_eq!(sent().await, 1);
//! # Ok(()) }
//! # #[cfg(not(feature = "sqlite"))] fn main() {}
//! ```
//!
//! # What it keeps
//!
//! One table, `delivery_inbox` unless [`Inbox::table`] names another, made by the store's
//! `migrate` ([`PgInbox::migrate`], [`SqliteInbox::migrate`]):
//! `(consumer, unit_id, applied_at, PRIMARY KEY (consumer, unit_id))`. The consumer's name keeps
//! two handlers of one unit apart (a unit fanned out to billing and to shipping is applied once by
//! each). `applied_at` is the database's clock (`now()`, `unixepoch()`), read when the record is
//! inserted: never the handler's, which rule 3 keeps out of every write.
//!
//! The id is the unit's ([`UnitId`], the same on every delivery: a message id, an entry id, a
//! webhook's id). Two *publishes* of one effect under two ids are two units to the inbox; an
//! effect that has a natural key (an order's id) is better keyed by it, as a primary key, than
//! guarded by the inbox.
//!
//! # Concurrent deliveries
//!
//! Two deliveries of one unit may run at once (two consumers, a redelivery while a slow handler
//! still runs). `first_time` is an `INSERT … ON CONFLICT DO NOTHING`, and:
//!
//! - **PostgreSQL.** The second transaction's insert waits on the primary key's index entry until
//!   the first transaction ends: if it commits, the second sees the conflict and gets `false`; if
//!   it rolls back, the second inserts and gets `true`. Either way exactly one applies the unit.
//!   This holds at `READ COMMITTED` (the default). At `REPEATABLE READ` or `SERIALIZABLE`, a
//!   second transaction whose snapshot predates the first's commit fails with a serialization
//!   error instead (`could not serialize access due to concurrent update`): a retryable failure,
//!   so the unit is returned and its redelivery gets `false`. `tests/inbox_postgres.rs` runs 32 transactions of
//!   one unit in two processes at once and counts one application.
//! - **SQLite.** One writer at a time: the insert takes the database's write lock and holds it to
//!   the commit, so a second transaction waits (up to the pool's `busy_timeout`, 5 s by default
//!   in sqlx) and then sees the first's outcome the same way. Call `first_time` **first** in the
//!   transaction, or begin it with `pool.begin_with("BEGIN IMMEDIATE")`: a transaction that read
//!   before its first write cannot always wait for the lock (its snapshot may be older than the
//!   commit it waited for) and fails with `SQLITE_BUSY` instead — retryable, so the unit is
//!   returned, but a wasted delivery.
//!
//! # Retention
//!
//! The table grows by one row per unit. [`PgInbox::retain`] / [`SqliteInbox::retain`] delete a
//! consumer's records older than an age, and `spawn_cleanup` runs that on an interval, outside
//! every handler. **The trade-off:** a duplicate arriving after its record was deleted is applied
//! again. Keep records longer than the longest a unit can come back — the broker's redelivery
//! bound times the longest backoff, plus how long a dead letter waits before an operator redrives
//! it, plus how long a sender retries.
//!
//! # The caller's transaction
//!
//! `first_time` takes a [`sqlx::Transaction`], never a pool or a bare connection: on a connection
//! in autocommit the record would commit before the effect, and a crash between the two would
//! keep the record and lose the effect — the redelivery would find the unit "applied".

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use sqlx::Transaction;

use delivery_core::unit::UnitId;

#[cfg(feature = "postgres")]
mod postgres;
#[cfg(feature = "sqlite")]
mod sqlite;

#[cfg(feature = "postgres")]
pub use postgres::PgInbox;
#[cfg(feature = "sqlite")]
pub use sqlite::SqliteInbox;

/// The table an [`Inbox`] keeps its records in unless [`Inbox::table`] names another.
pub const TABLE: &str = "delivery_inbox";

/// The units one consumer has applied, recorded in the consumer's own transactions (see [the
/// module](self)). Cheap to clone.
#[derive(Clone, Debug)]
pub struct Inbox {
    consumer: Arc<str>,
    table: Table,
}

impl Inbox {
    /// The inbox of the consumer named `consumer` (a stable name: `"billing"`, the queue it
    /// reads), in the table `delivery_inbox`.
    pub fn new(consumer: impl Into<Arc<str>>) -> Self {
        Inbox {
            consumer: consumer.into(),
            table: Table::parse(TABLE).expect("the default table is an identifier"),
        }
    }

    /// Keeps the records in `table` (`name` or `schema.name`) instead of `delivery_inbox`.
    ///
    /// # Panics
    /// When `table` is not an SQL identifier (ASCII letters, digits and `_`, not starting with a
    /// digit, at most 50 characters), optionally qualified by a schema: the name is written into
    /// statements, so it is checked here, where it is configuration, never at run time.
    pub fn table(mut self, table: &str) -> Self {
        match Table::parse(table) {
            Some(parsed) => self.table = parsed,
            None => panic!(
                "inbox table name {table:?} is not an SQL identifier (letters, digits, `_`, optionally `schema.name`)"
            ),
        }
        self
    }

    /// The consumer's name.
    pub fn consumer(&self) -> &str {
        &self.consumer
    }

    /// The table the records are kept in.
    pub fn table_name(&self) -> &str {
        &self.table.qualified
    }

    /// Records `id` as applied by this consumer, in the caller's transaction, and says whether
    /// this is its first time: `true` — apply the unit's effect in `tx`, then commit; `false` —
    /// the unit was already applied: write nothing and return `Ok`.
    ///
    /// The record commits with `tx` or not at all: a transaction that rolls back leaves the unit
    /// unapplied, and its redelivery gets `true`. A concurrent transaction recording the same id
    /// waits for this one to end (see [concurrent deliveries](self#concurrent-deliveries)).
    pub async fn first_time<DB: InboxDatabase>(
        &self,
        tx: &mut Transaction<'_, DB>,
        id: &UnitId,
    ) -> Result<bool, sqlx::Error> {
        DB::record(
            &mut **tx,
            &self.table.qualified,
            &self.consumer,
            id.as_str(),
        )
        .await
    }
}

/// A boxed future, as [`InboxDatabase::record`] returns.
pub type RecordFuture<'a> = Pin<Box<dyn Future<Output = Result<bool, sqlx::Error>> + Send + 'a>>;

/// A database an [`Inbox`] can be kept in: PostgreSQL (feature `postgres`) and SQLite (feature
/// `sqlite`).
pub trait InboxDatabase: sqlx::Database {
    /// Inserts `(consumer, id)` through `conn` (the caller's transaction) unless it is there:
    /// `true` when it inserted.
    #[doc(hidden)]
    fn record<'a>(
        conn: &'a mut Self::Connection,
        table: &'a str,
        consumer: &'a str,
        id: &'a str,
    ) -> RecordFuture<'a>;
}

/// How many records one statement of `retain` deletes: a long cleanup holds no lock for long.
const BATCH: i64 = 10_000;

/// Runs `retain` now and then every `every`, until the task is aborted; a failed run is logged.
fn cleanup<R, F>(inbox: Inbox, every: Duration, mut retain: R) -> tokio::task::JoinHandle<()>
where
    R: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<u64, sqlx::Error>> + Send,
{
    tokio::spawn(async move {
        loop {
            match retain().await {
                Ok(deleted) => tracing::debug!(
                    consumer = &*inbox.consumer,
                    table = &*inbox.table.qualified,
                    deleted,
                    "inbox records past their retention deleted"
                ),
                Err(error) => tracing::warn!(
                    consumer = &*inbox.consumer,
                    table = &*inbox.table.qualified,
                    %error,
                    "could not delete the inbox records past their retention"
                ),
            }
            tokio::time::sleep(every).await;
        }
    })
}

/// A validated table name: `name` or `schema.name`, each an SQL identifier.
#[derive(Clone, Debug)]
struct Table {
    /// As written in statements.
    qualified: Arc<str>,
    /// The schema (PostgreSQL) or attached database (SQLite), if named.
    schema: Option<Arc<str>>,
    /// The unqualified name: index names start with it.
    name: Arc<str>,
}

impl Table {
    fn parse(table: &str) -> Option<Table> {
        let ident = |s: &str| {
            let mut chars = s.chars();
            matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
                && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
                && s.len() <= 50
        };
        let (schema, name) = match table.split_once('.') {
            Some((schema, name)) if ident(schema) && ident(name) => (Some(schema.into()), name),
            None if ident(table) => (None, table),
            _ => return None,
        };
        Some(Table {
            qualified: table.into(),
            schema,
            name: name.into(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::{Inbox, Table};

    #[test]
    fn table_names_are_identifiers() {
        let t = Table::parse("app.inbox_2").unwrap();
        assert_eq!(
            (&*t.qualified, t.schema.as_deref(), &*t.name),
            ("app.inbox_2", Some("app"), "inbox_2")
        );
        assert!(Table::parse("delivery_inbox").unwrap().schema.is_none());
        for bad in ["", "1x", "a b", "a;drop", "a.b.c", "a.", ".b", "x\"y"] {
            assert!(Table::parse(bad).is_none(), "{bad:?}");
        }
    }

    #[test]
    fn defaults() {
        let inbox = Inbox::new("billing");
        assert_eq!(inbox.consumer(), "billing");
        assert_eq!(inbox.table_name(), "delivery_inbox");
        assert_eq!(inbox.table("ops.seen").table_name(), "ops.seen");
    }

    #[test]
    #[should_panic(expected = "not an SQL identifier")]
    fn a_table_name_that_is_not_an_identifier_panics() {
        let _ = Inbox::new("billing").table("inbox; DROP TABLE x");
    }
}
