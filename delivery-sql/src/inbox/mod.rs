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
//! `migrate` ([`SqlInbox::migrate`]: `PgInbox`, `SqliteInbox`):
//! `(consumer, unit_id, applied_at, PRIMARY KEY (consumer, unit_id))`. The consumer's name keeps
//! two handlers of one unit apart (a unit fanned out to billing and to shipping is applied once by
//! each). `applied_at` is the database's clock (`now()`, `unixepoch()`), read when the record is
//! inserted: never the handler's, which rule 3 keeps out of every write.
//!
//! The id is the unit's ([`UnitId`](delivery_core::unit::UnitId), the same on every delivery: a message id, an entry id, a
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
//! The table grows by one row per unit. [`SqlInbox::retain`] (`PgInbox`, `SqliteInbox`) deletes a
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

mod store;
mod write;

pub use store::SqlInbox;
pub use write::{Inbox, InboxDatabase, RecordFuture, TABLE};
