//! What differs between the databases: the SQL text of each statement whose shape is not
//! shared, how a list or a span of time is passed, how a migration is serialized, how relays are
//! woken. A [`Dialect`] describes one database (delivery-postgres's `Postgres`,
//! delivery-sqlite's `Sqlite`); the stores, the inbox and the guard are written once over it
//! ([`SqlStore`](crate::outbox::SqlStore), [`SqlInbox`](crate::inbox::SqlInbox),
//! [`store`](crate::store)).
//!
//! The statements the databases share are written here and in the stores once, with `$n`
//! parameters, which both PostgreSQL and SQLite read.

use std::time::Duration;

use futures_util::future::BoxFuture;
use sqlx::{Database, Pool};

use delivery_core::outbox::{Mark, RecordId, Wakeups};

use crate::driver::{Sql, Value};
use crate::table::Table;

/// The SQL of one database, for the outbox store, the inbox and the guard. Implemented by the
/// crate of each database; [`DialectOf`] names it from the database's sqlx type.
pub trait Dialect: Send + Sync + 'static {
    /// sqlx's database.
    type Database: Sql;

    /// The database's name as traces spell it (`postgresql`, `sqlite`).
    const SYSTEM: &'static str;

    /// Whether the database notifies commits ([`wakeups`](Self::wakeups)), so that a consumer
    /// waits for them rather than polling.
    const NOTIFIES: bool;

    /// The statement that begins a migration's transaction (`BEGIN`; SQLite: `BEGIN IMMEDIATE`,
    /// which takes the write lock at once).
    const BEGIN: &'static str;

    /// Whether a transaction begun with [`BEGIN`](Self::BEGIN) holds the database's one write lock
    /// until it ends (SQLite): no other connection writes meanwhile, a claim included.
    const ONE_WRITER: bool;

    /// Serializes migrations of `name` (a table) in the transaction on `conn` with other
    /// processes', if the database needs more than [`BEGIN`](Self::BEGIN) for that.
    fn lock<'c>(
        conn: &'c mut <Self::Database as Database>::Connection,
        name: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>>;

    /// A span of time as the statements take it, in milliseconds.
    fn millis(duration: Duration) -> Value<'static>;

    /// Adds `ids` as one parameter (`None`: every record), as [`OutboxSql::requeue`] and
    /// [`OutboxSql::delete_dead`] read it.
    fn add_ids(
        args: &mut <Self::Database as Database>::Arguments,
        ids: Option<&[RecordId]>,
    ) -> Result<(), sqlx::Error>;

    /// Adds `marks` as the parameters before the owner's in [`OutboxSql::mark`].
    fn add_marks(
        args: &mut <Self::Database as Database>::Arguments,
        marks: &[Mark],
    ) -> Result<(), sqlx::Error>;

    /// The outbox store's statements for `table`.
    fn outbox(table: &Table) -> OutboxSql;

    /// The statements that create the outbox `table` (or a queue's, the same shape) and its
    /// indexes, as the crate's `sql/` file has them: for a migration tool of your own.
    fn outbox_schema(table: &Table) -> String;

    /// The statements that create or upgrade the outbox `table`, run on `conn` in the migration's
    /// transaction (which they may read first).
    fn outbox_migration<'c>(
        conn: &'c mut <Self::Database as Database>::Connection,
        table: &'c Table,
    ) -> BoxFuture<'c, Result<String, sqlx::Error>>;

    /// The statements that create the inbox `table` and its index. Idempotent.
    fn inbox_migration(table: &Table) -> String;

    /// The inbox's `retain`: deletes a consumer's (`$1`) records applied more than `$2`
    /// ([`millis`](Self::millis)) ago, at most `$3` of them.
    fn inbox_retain(table: &Table) -> String;

    /// Notifications that records were committed to the outbox `table`, if the database sends
    /// any.
    fn wakeups<'a>(
        pool: &'a Pool<Self::Database>,
        table: &'a Table,
    ) -> BoxFuture<'a, Option<Wakeups>>;
}

/// Names the [`Dialect`] of the sqlx database `Self`, so that `outbox.postgres(pool)` finds
/// delivery-postgres's from the pool's type. Implemented once per database, by the crate of its
/// dialect (`impl DialectOf<Postgres> for sqlx::Postgres`).
pub trait DialectOf<D: Dialect<Database = Self>>: Sql {}

/// The outbox store's statements in one dialect, for one table, where their shapes differ.
/// Parameters are `$n`.
#[derive(Clone, Debug)]
pub struct OutboxSql {
    /// Claims up to `$3` records for the owner `$1` for `$2` ([`Dialect::millis`]), oldest
    /// first, each record at most once at a time; `{ordered}` stands for the condition that holds
    /// a key's later records behind its earlier pending ones. Returns `id, topic, key, payload,
    /// attempts` (before this claim)`, seq, headers`.
    pub claim: String,
    /// Writes the marks ([`Dialect::add_marks`]) of the owner that follows them.
    pub mark: String,
    /// Deletes up to `$2` records delivered more than `$1` ([`Dialect::millis`]) ago.
    pub retain: String,
    /// `pending` (records), `age` (seconds since the oldest pending record was written, or
    /// `NULL`) and `dead` (records).
    pub backlog: String,
    /// Makes the dead records `$1` ([`Dialect::add_ids`]) pending again, wakes the relays, and
    /// returns their `id`s.
    pub requeue: String,
    /// Makes the dead record `$1` whose payload is `$2` pending again with payload `$3` and
    /// headers `$4`, wakes the relays, and returns its `id` if it did.
    pub requeue_edited: String,
    /// Deletes the dead records `$1` ([`Dialect::add_ids`]).
    pub delete_dead: String,
    /// Moves the lease of the pending record `$1`, held by the owner `$3`, to `$2`
    /// ([`Dialect::millis`]) from now: a queue's keep-alive for a unit still being handled.
    pub extend: String,
    /// Marks the pending record `$1` delivered, in the transaction it runs in: a queue's
    /// acknowledgement, committed with its handler's effect. Changes nothing (0 rows) once the
    /// record is not pending any more: settled by another run, whose effect then stands alone.
    pub complete: String,
}

/// The `SET` list of [`OutboxSql::mark`] (`UPDATE <table> AS t SET <this> FROM <the marks> AS f`,
/// `f` with the columns `id, op, error, delay_ms`), in every dialect: `now` is the database's
/// clock, `retry_at` when a retried record is claimable again (from `f.delay_ms`).
pub fn mark_set(now: &str, retry_at: &str) -> String {
    format!(
        "status = CASE f.op WHEN 'delivered' THEN 'delivered' WHEN 'dead' THEN 'dead' ELSE 'pending' END, \
         attempts = t.attempts - CASE WHEN f.op = 'release' THEN 1 ELSE 0 END, \
         last_error = CASE WHEN f.op IN ('retry', 'dead') THEN f.error ELSE t.last_error END, \
         available_at = CASE WHEN f.op = 'retry' THEN {retry_at} ELSE t.available_at END, \
         delivered_at = CASE WHEN f.op = 'delivered' THEN {now} ELSE NULL END, \
         lease_owner = NULL, lease_until = NULL"
    )
}
