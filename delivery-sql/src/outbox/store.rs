//! The outbox store, in every dialect: claims under a lease, batched marks, the backlog, the
//! dead records and their re-queue, retention. The SQL text whose shape differs between the
//! databases is the dialect's ([`OutboxSql`]); the rest, and every step around the statements,
//! is written here once.

use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use sqlx::Pool;

use delivery_core::dead_letter::AnyDeadLetters;
use delivery_core::outbox::{Backlog, Claim, DeadRecords, Mark, Record, RecordId, Store};
use delivery_core::outbox::{StoredRecord, Wakeups, until_idle};
use delivery_core::transport::TransportError;
use delivery_core::unit::Headers;

use super::rows::{self, COLUMNS, RETAIN_BATCH, in_batches};
use super::write::Outbox;
use crate::dialect::{Dialect, DialectOf, OutboxSql};
use crate::driver::{Exec, Sql, Value};
use crate::error::failed;
use crate::table::Table;

/// An outbox table in the database of the dialect `D`: what a
/// [`Relayer`](delivery_core::outbox::Relayer) relays from, and an operator's view of it (dead
/// records, re-queue). `delivery::outbox::PgStore` in PostgreSQL — several relays share one
/// table, `LISTEN/NOTIFY` wakes them — and `delivery::outbox::SqliteStore` in SQLite — one relay,
/// woken by polling. Cheap to clone.
pub struct SqlStore<D: Dialect> {
    pool: Pool<D::Database>,
    table: Table,
    sql: Arc<Statements>,
    dialect: PhantomData<fn() -> D>,
}

/// The store's statements for its table, written once when it is made.
#[derive(Debug)]
struct Statements {
    claim: String,
    claim_ordered: String,
    dialect: OutboxSql,
    count: String,
    any_pending: String,
    get: String,
    dead_after: String,
    dead_payload: String,
}

impl<D: Dialect> Clone for SqlStore<D> {
    fn clone(&self) -> Self {
        SqlStore {
            pool: self.pool.clone(),
            table: self.table.clone(),
            sql: self.sql.clone(),
            dialect: PhantomData,
        }
    }
}

impl<D: Dialect> fmt::Debug for SqlStore<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlStore")
            .field("table", &self.table.qualified())
            .field("pool", &self.pool)
            .finish_non_exhaustive()
    }
}

impl Outbox {
    /// This outbox's table in PostgreSQL, through `pool` (a `delivery::outbox::PgStore`).
    #[cfg(feature = "postgres")]
    pub fn postgres<D>(&self, pool: sqlx::PgPool) -> SqlStore<D>
    where
        D: Dialect<Database = sqlx::Postgres>,
        sqlx::Postgres: DialectOf<D>,
    {
        SqlStore::new(pool, self)
    }

    /// This outbox's table in SQLite, through `pool` (a `delivery::outbox::SqliteStore`).
    #[cfg(feature = "sqlite")]
    pub fn sqlite<D>(&self, pool: sqlx::SqlitePool) -> SqlStore<D>
    where
        D: Dialect<Database = sqlx::Sqlite>,
        sqlx::Sqlite: DialectOf<D>,
    {
        SqlStore::new(pool, self)
    }
}

impl<D: Dialect> SqlStore<D> {
    /// `outbox`'s table through `pool`.
    pub fn new(pool: Pool<D::Database>, outbox: &Outbox) -> Self {
        let table = outbox.table.clone();
        let t = table.qualified();
        let dialect = D::outbox(&table);
        let ordered = format!(
            "AND (o.key IS NULL OR NOT EXISTS ( \
               SELECT 1 FROM {t} e WHERE e.key = o.key AND e.status = 'pending' AND e.seq < o.seq))"
        );
        let sql = Statements {
            claim: dialect.claim.replace("{ordered}", ""),
            claim_ordered: dialect.claim.replace("{ordered}", &ordered),
            count: format!("SELECT count(*) AS n FROM {t} WHERE status = $1"),
            any_pending: format!(
                "SELECT EXISTS (SELECT 1 FROM {t} WHERE status = 'pending') AS found"
            ),
            get: format!("SELECT {COLUMNS} FROM {t} WHERE id = $1"),
            dead_after: format!(
                "SELECT seq AS position, {COLUMNS} FROM {t} \
                 WHERE status = 'dead' AND seq > $1 ORDER BY seq LIMIT $2"
            ),
            dead_payload: format!(
                "SELECT payload, headers FROM {t} WHERE status = 'dead' AND id = $1"
            ),
            dialect,
        };
        SqlStore {
            pool,
            table,
            sql: Arc::new(sql),
            dialect: PhantomData,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<D::Database> {
        &self.pool
    }

    /// The dialect's statements for this table.
    pub(crate) fn statements(&self) -> &OutboxSql {
        &self.sql.dialect
    }

    /// Creates the table and its indexes if missing (PostgreSQL: and the notify trigger; the
    /// statements are each dialect's crate's `sql/` file), and upgrades a table made by an
    /// earlier version (SQLite: one made before its `seq` column, keeping every record and its
    /// stamp). Safe to run at every start, from several processes at once (one waits for the
    /// other).
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin_with(D::BEGIN).await?;
        D::lock(&mut *tx, self.table.qualified()).await?;
        let sql = D::outbox_migration(&mut *tx, &self.table).await?;
        D::Database::run_script(Exec::Conn(&mut *tx), sql).await?;
        tx.commit().await
    }

    /// How many records are pending (including those backing off or being relayed).
    pub async fn pending(&self) -> Result<u64, sqlx::Error> {
        self.count_with("pending").await
    }

    /// How many records have `status`.
    async fn count_with(&self, status: &str) -> Result<u64, sqlx::Error> {
        let row = self
            .fetch_one(&self.sql.count, &[Value::Text(status)])
            .await?;
        Ok(D::Database::int(&row, "n")?.max(0) as u64)
    }

    /// Resolves once no record is pending: a shutdown signal that relays until the outbox is
    /// drained (`Relayer::shutdown_on(store.idle())`).
    pub fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let store = self.clone();
        async move { until_idle(|| store.any_pending()).await }
    }

    /// 1 while any record is pending, else 0: cheaper than counting them.
    async fn any_pending(&self) -> Result<u64, sqlx::Error> {
        let row = self.fetch_one(&self.sql.any_pending, &[]).await?;
        Ok(u64::from(D::Database::boolean(&row, "found")?))
    }

    /// Deletes the records delivered more than `older_than` ago, by the database's clock (the
    /// record's `delivered_at`, written when the receiver confirmed it), and returns how many.
    /// Pending and dead records stay, whatever their age: a dead record is the operator's to
    /// redrive or purge ([`DeadLetters`](delivery_core::DeadLetters)). Without it, the outbox
    /// keeps every record it ever relayed. Deletes in batches, each its own transaction; run it
    /// beside the relay, now and then.
    ///
    /// Deleting records never lowers the stamp of a later one: stamps come from the table's
    /// sequence (SQLite: its `AUTOINCREMENT` column), which never hands out a value at or below
    /// one it handed out (rule 4).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use delivery::outbox::{NewRecord, Outbox, Status};
    ///
    /// let pool = delivery::sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let outbox = Outbox::new();
    /// let store = outbox.sqlite(pool.clone()); // PostgreSQL: outbox.postgres(pool)
    /// store.migrate().await?;
    /// let mut tx = pool.begin().await?;
    /// outbox.write(&mut tx, NewRecord::new("orders.events", "o-1 placed").id("o-1")).await?;
    /// tx.commit().await?;
    ///
    /// // Delivered records are kept 7 days (run it now and then, e.g. every hour).
    /// assert_eq!(store.retain(Duration::from_secs(7 * 86_400)).await?, 0);
    /// // A pending record is never deleted, however old.
    /// assert_eq!(store.retain(Duration::ZERO).await?, 0);
    /// assert_eq!(store.get(&"o-1".into()).await?.unwrap().status, Status::Pending);
    /// # Ok(()) }
    /// ```
    pub async fn retain(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        let values = [D::millis(older_than), Value::Int(RETAIN_BATCH)];
        in_batches(RETAIN_BATCH, || async {
            let args = D::Database::arguments(&values)?;
            D::Database::execute(self.exec(), &self.sql.dialect.retain, args).await
        })
        .await
    }

    /// The record `id`, wherever it stands.
    pub async fn get(&self, id: &RecordId) -> Result<Option<StoredRecord>, sqlx::Error> {
        let args = D::Database::arguments(&[Value::Text(id.as_str())])?;
        let row = D::Database::fetch_optional(self.exec(), &self.sql.get, args).await?;
        row.as_ref().map(rows::stored::<D::Database>).transpose()
    }

    fn exec(&self) -> Exec<'_, D::Database> {
        Exec::Pool(&self.pool)
    }

    async fn fetch_one(
        &self,
        sql: &str,
        values: &[Value<'_>],
    ) -> Result<<D::Database as sqlx::Database>::Row, sqlx::Error> {
        let args = D::Database::arguments(values)?;
        D::Database::fetch_optional(self.exec(), sql, args)
            .await?
            .ok_or(sqlx::Error::RowNotFound)
    }
}

impl<D: Dialect> Store for SqlStore<D> {
    #[allow(clippy::misnamed_getters)] // the qualified name: what logs and metrics show
    fn name(&self) -> &str {
        self.table.qualified()
    }

    async fn claim(&self, claim: Claim<'_>) -> Result<Vec<Record>, TransportError> {
        self.claim_sql(claim)
            .await
            .map_err(failed("claiming records"))
    }

    async fn mark(&self, owner: &str, marks: &[Mark]) -> Result<u64, TransportError> {
        self.mark_sql(owner, marks)
            .await
            .map_err(failed("writing marks"))
    }

    async fn backlog(&self) -> Result<Backlog, TransportError> {
        self.backlog_sql()
            .await
            .map_err(failed("reading the backlog"))
    }

    async fn wakeups(&self) -> Option<Wakeups> {
        D::wakeups(&self.pool, &self.table).await
    }
}

/// The dead records, for `DeadLetters`: the position is the record's `seq`.
impl<D: Dialect> DeadRecords for SqlStore<D> {
    async fn count_dead(&self) -> Result<u64, TransportError> {
        self.count_with("dead")
            .await
            .map_err(failed("counting dead records"))
    }

    async fn dead_after(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, StoredRecord)>, TransportError> {
        self.dead_after_sql(after, limit)
            .await
            .map_err(failed("listing dead records"))
    }

    /// Pending again under the same id, attempts back to 0, available now (the last error stays
    /// for reference); relays are woken.
    async fn requeue_dead(
        &self,
        ids: Option<&[RecordId]>,
    ) -> Result<Vec<RecordId>, TransportError> {
        self.requeue_dead_sql(ids)
            .await
            .map_err(failed("requeueing dead records"))
    }

    async fn dead_payload(
        &self,
        id: &RecordId,
    ) -> Result<Option<(Bytes, Headers)>, TransportError> {
        self.dead_payload_sql(id)
            .await
            .map_err(failed("reading a dead record"))
    }

    /// Pending again as `requeue_dead` makes it, with the new payload and headers; relays are
    /// woken.
    async fn requeue_dead_edited(
        &self,
        id: &RecordId,
        original: &[u8],
        payload: &[u8],
        headers: &Headers,
    ) -> Result<bool, TransportError> {
        self.requeue_dead_edited_sql(id, original, payload, headers)
            .await
            .map_err(failed("requeueing an edited dead record"))
    }

    async fn delete_dead(&self, ids: &[RecordId]) -> Result<u64, TransportError> {
        self.delete_dead_sql(ids)
            .await
            .map_err(failed("deleting dead records"))
    }
}

impl<D: Dialect> From<SqlStore<D>> for AnyDeadLetters {
    fn from(store: SqlStore<D>) -> Self {
        AnyDeadLetters::new(store)
    }
}

/// The SQL of the [`Store`] and [`DeadRecords`] methods, in sqlx's errors.
impl<D: Dialect> SqlStore<D> {
    async fn claim_sql(&self, claim: Claim<'_>) -> Result<Vec<Record>, sqlx::Error> {
        let sql = if claim.ordered {
            &self.sql.claim_ordered
        } else {
            &self.sql.claim
        };
        let args = D::Database::arguments(&[
            Value::Text(claim.owner),
            D::millis(claim.lease),
            Value::Int(i64::try_from(claim.limit).unwrap_or(i64::MAX)),
        ])?;
        let rows = D::Database::fetch_all(self.exec(), sql, args).await?;
        let mut claimed = rows
            .iter()
            .map(rows::claimed::<D::Database>)
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        // RETURNING promises no order: hand them out oldest first.
        claimed.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(claimed.into_iter().map(|(_, record)| record).collect())
    }

    async fn mark_sql(&self, owner: &str, marks: &[Mark]) -> Result<u64, sqlx::Error> {
        if marks.is_empty() {
            return Ok(0);
        }
        let mut args = D::Database::arguments(&[])?;
        D::add_marks(&mut args, marks)?;
        D::Database::add(&mut args, Value::Text(owner))?;
        D::Database::execute(self.exec(), &self.sql.dialect.mark, args).await
    }

    async fn backlog_sql(&self) -> Result<Backlog, sqlx::Error> {
        let row = self.fetch_one(&self.sql.dialect.backlog, &[]).await?;
        Ok(Backlog::from_row(
            D::Database::int(&row, "pending")?,
            D::Database::opt_float(&row, "age")?,
            D::Database::int(&row, "dead")?,
        ))
    }

    async fn dead_after_sql(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, StoredRecord)>, sqlx::Error> {
        let args = D::Database::arguments(&[Value::Int(after), Value::Int(limit)])?;
        let rows = D::Database::fetch_all(self.exec(), &self.sql.dead_after, args).await?;
        rows.iter()
            .map(|row| {
                Ok((
                    D::Database::int(row, "position")?,
                    rows::stored::<D::Database>(row)?,
                ))
            })
            .collect()
    }

    async fn requeue_dead_sql(
        &self,
        ids: Option<&[RecordId]>,
    ) -> Result<Vec<RecordId>, sqlx::Error> {
        let mut args = D::Database::arguments(&[])?;
        D::add_ids(&mut args, ids)?;
        let rows = D::Database::fetch_all(self.exec(), &self.sql.dialect.requeue, args).await?;
        rows.iter()
            .map(|row| D::Database::text(row, "id").map(RecordId::new))
            .collect()
    }

    async fn dead_payload_sql(
        &self,
        id: &RecordId,
    ) -> Result<Option<(Bytes, Headers)>, sqlx::Error> {
        let args = D::Database::arguments(&[Value::Text(id.as_str())])?;
        let row = D::Database::fetch_optional(self.exec(), &self.sql.dead_payload, args).await?;
        row.as_ref()
            .map(rows::payload_and_headers::<D::Database>)
            .transpose()
    }

    async fn requeue_dead_edited_sql(
        &self,
        id: &RecordId,
        original: &[u8],
        payload: &[u8],
        headers: &Headers,
    ) -> Result<bool, sqlx::Error> {
        let headers = rows::headers_column(headers);
        let args = D::Database::arguments(&[
            Value::Text(id.as_str()),
            Value::Bytes(original),
            Value::Bytes(payload),
            Value::OptText(headers.as_deref()),
        ])?;
        let sql = &self.sql.dialect.requeue_edited;
        let rows = D::Database::fetch_all(self.exec(), sql, args).await?;
        Ok(!rows.is_empty())
    }

    async fn delete_dead_sql(&self, ids: &[RecordId]) -> Result<u64, sqlx::Error> {
        let mut args = D::Database::arguments(&[])?;
        D::add_ids(&mut args, Some(ids))?;
        D::Database::execute(self.exec(), &self.sql.dialect.delete_dead, args).await
    }
}
