//! The SQLite outbox store: the embedded default, for one relay. Claims under a lease all the
//! same (a relay that stopped mid-flight leaves its records to the next one after the lease);
//! polling wakes the relay.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use sqlx::sqlite::SqlitePool;
use sqlx::{AssertSqlSafe, Row};

use delivery_core::outbox::{Backlog, Claim, Mark, Store, StoredRecord, Wakeups, until_idle};
use delivery_core::outbox::{Record, RecordId};
use delivery_core::transport::TransportError;

use super::rows::{self, RETAIN_BATCH, in_batches};
use super::write::{Outbox, Table};
use crate::error::failed;

const MIGRATION: &str = include_str!("../../sql/outbox_sqlite.sql");

/// SQLite's clock, in milliseconds since the Unix epoch.
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// An outbox table in SQLite: what a [`Relayer`](delivery_core::outbox::Relayer) relays from, and an operator's
/// view of it. One relay at a time. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqliteStore {
    pool: SqlitePool,
    table: Table,
    sql: Arc<Statements>,
}

#[derive(Debug)]
struct Statements {
    claim: String,
    claim_ordered: String,
    mark: String,
}

impl Outbox {
    /// This outbox's table in SQLite, through `pool`.
    pub fn sqlite(&self, pool: SqlitePool) -> SqliteStore {
        SqliteStore::new(pool, self)
    }
}

const COLUMNS: &str = "id, topic, key, payload, status, attempts, last_error";

/// The columns an upgrade copies from a table made before `seq` (into `seq` and these), and what
/// it reads them from (the `rowid` and the same columns).
const UPGRADED: &str = "seq, id, topic, key, payload, status, attempts, last_error, available_at, \
                        lease_owner, lease_until, created_at, delivered_at";
const UPGRADED_FROM: &str = "id, topic, key, payload, status, attempts, last_error, available_at, \
                             lease_owner, lease_until, created_at, delivered_at";

impl SqliteStore {
    /// `outbox`'s table through `pool`.
    pub fn new(pool: SqlitePool, outbox: &Outbox) -> Self {
        let table = outbox.table.clone();
        let t = &table.qualified;
        let claim = |ordered: &str| {
            format!(
                "UPDATE {t} SET attempts = attempts + 1, lease_owner = ?1, lease_until = {NOW} + ?2 \
                 WHERE id IN ( \
                   SELECT o.id FROM {t} o \
                   WHERE o.status = 'pending' AND o.available_at <= {NOW} \
                     AND (o.lease_until IS NULL OR o.lease_until <= {NOW}) {ordered} \
                   ORDER BY o.seq LIMIT ?3) \
                 RETURNING id, topic, key, payload, attempts - 1 AS attempts, seq, headers"
            )
        };
        let ordered = format!(
            "AND (o.key IS NULL OR NOT EXISTS ( \
               SELECT 1 FROM {t} e WHERE e.key = o.key AND e.status = 'pending' AND e.seq < o.seq))"
        );
        let mark = format!(
            "UPDATE {t} AS t SET \
               status = CASE f.op WHEN 'delivered' THEN 'delivered' WHEN 'dead' THEN 'dead' ELSE 'pending' END, \
               attempts = t.attempts - CASE WHEN f.op = 'release' THEN 1 ELSE 0 END, \
               last_error = CASE WHEN f.op IN ('retry', 'dead') THEN f.error ELSE t.last_error END, \
               available_at = CASE WHEN f.op = 'retry' THEN {NOW} + f.delay_ms ELSE t.available_at END, \
               delivered_at = CASE WHEN f.op = 'delivered' THEN {NOW} ELSE NULL END, \
               lease_owner = NULL, lease_until = NULL \
             FROM (SELECT value ->> 0 AS id, value ->> 1 AS op, value ->> 2 AS error, \
                          value ->> 3 AS delay_ms FROM json_each(?1)) AS f \
             WHERE t.id = f.id AND t.status = 'pending' AND (f.op = 'delivered' OR t.lease_owner = ?2)"
        );
        SqliteStore {
            sql: Arc::new(Statements {
                claim: claim(""),
                claim_ordered: claim(&ordered),
                mark,
            }),
            pool,
            table,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// Creates the table and its indexes if missing (`delivery-core/sql/outbox_sqlite.sql`), and
    /// upgrades a table made before its `seq` column, keeping every record and its stamp. Safe
    /// to run at every start, from several processes at once (one waits for the other).
    ///
    /// The upgrade: before `seq`, a record's stamp was its implicit `rowid`, which SQLite hands
    /// out again once the newest records are deleted. The table is copied, in one transaction,
    /// into the new shape with each record's `rowid` as its `seq`, so the stamps already handed
    /// out stay what they were and the next ones continue above the highest.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        // A write lock from the start: a second migration waits here, then finds `seq`.
        let mut tx = self.pool.begin_with("BEGIN IMMEDIATE").await?;
        let schema = self
            .table
            .qualified
            .split_once('.')
            .map(|(schema, _)| schema);
        let columns: Vec<String> = sqlx::query_scalar(match schema {
            Some(_) => "SELECT name FROM pragma_table_info(?1, ?2)",
            None => "SELECT name FROM pragma_table_info(?1)",
        })
        .bind(&*self.table.name)
        .bind(schema)
        .fetch_all(&mut *tx)
        .await?;
        let migration = self.table.render(MIGRATION);
        let has = |column: &str| columns.iter().any(|c| c == column);
        let sql = if columns.is_empty() || has("seq") {
            migration
        } else {
            let name = &self.table.name;
            let in_schema = |item: &str| match schema {
                Some(schema) => format!("{schema}.{item}"),
                None => item.to_owned(),
            };
            let old = format!("{name}_before_seq");
            // A table made before the `headers` column has none to copy.
            let headers = if has("headers") { "headers" } else { "NULL" };
            format!(
                "ALTER TABLE {table} RENAME TO {old}; \
                 DROP INDEX IF EXISTS {pending}; DROP INDEX IF EXISTS {key}; \
                 {migration} \
                 INSERT INTO {table} ({UPGRADED}, headers) \
                   SELECT rowid, {UPGRADED_FROM}, {headers} FROM {old_table} ORDER BY rowid; \
                 DROP TABLE {old_table};",
                table = self.table.qualified,
                pending = in_schema(&format!("{name}_pending")),
                key = in_schema(&format!("{name}_key")),
                old_table = in_schema(&old),
            )
        };
        sqlx::raw_sql(AssertSqlSafe(sql)).execute(&mut *tx).await?;
        tx.commit().await
    }

    /// How many records are pending (including those backing off or being relayed).
    pub async fn pending(&self) -> Result<u64, sqlx::Error> {
        self.count_with("pending").await
    }

    /// How many records have `status`.
    async fn count_with(&self, status: &str) -> Result<u64, sqlx::Error> {
        let sql = format!(
            "SELECT count(*) FROM {} WHERE status = ?1",
            self.table.qualified
        );
        let n: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(status)
            .fetch_one(&self.pool)
            .await?;
        Ok(n as u64)
    }

    /// Resolves once no record is pending: a shutdown signal that relays until the outbox is
    /// drained (`Relayer::shutdown_on(store.idle())`).
    pub fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        let store = self.clone();
        async move { until_idle(|| store.any_pending()).await }
    }

    /// 1 while any record is pending, else 0: cheaper than counting them.
    async fn any_pending(&self) -> Result<u64, sqlx::Error> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE status = 'pending')",
            self.table.qualified
        );
        let any: bool = sqlx::query_scalar(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await?;
        Ok(u64::from(any))
    }

    /// Deletes the records delivered more than `older_than` ago, by the database's clock (the
    /// record's `delivered_at`, written when the receiver confirmed it), and returns how many.
    /// Pending and dead records stay, whatever their age: a dead record is the operator's to
    /// redrive or purge ([`DeadLetters`](delivery_core::DeadLetters)). Without it, the outbox keeps
    /// every record it ever relayed. Deletes in batches, each its own transaction; run it
    /// beside the relay, now and then.
    ///
    /// Deleting records never lowers the stamp of a later one: stamps come from the table's
    /// `AUTOINCREMENT` sequence, which never hands out a value at or below one it handed out
    /// (rule 4).
    ///
    /// ```
    /// # #[tokio::main(flavor = "current_thread")]
    /// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
    /// use std::time::Duration;
    /// use delivery::outbox::{NewRecord, Outbox, Status};
    ///
    /// let pool = delivery::sqlx::SqlitePool::connect("sqlite::memory:").await?;
    /// let outbox = Outbox::new();
    /// let store = outbox.sqlite(pool.clone());
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
        let sql = format!(
            "DELETE FROM {t} WHERE seq IN ( \
               SELECT seq FROM {t} WHERE status = 'delivered' AND delivered_at < {NOW} - ?1 \
               ORDER BY delivered_at LIMIT ?2)",
            t = self.table.qualified
        );
        let age_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        in_batches(|| async {
            let done = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(age_ms)
                .bind(RETAIN_BATCH)
                .execute(&self.pool)
                .await?;
            Ok(done.rows_affected())
        })
        .await
    }

    /// The record `id`, wherever it stands.
    pub async fn get(&self, id: &RecordId) -> Result<Option<StoredRecord>, sqlx::Error> {
        let sql = format!(
            "SELECT {COLUMNS} FROM {} WHERE id = ?1",
            self.table.qualified
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| stored(&row)).transpose()
    }
}

fn stored(row: &sqlx::sqlite::SqliteRow) -> Result<StoredRecord, sqlx::Error> {
    rows::stored::<_, i64>(row)
}

impl Store for SqliteStore {
    #[allow(clippy::misnamed_getters)] // the qualified name: what logs and metrics show
    fn name(&self) -> &str {
        &self.table.qualified
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
        None
    }
}

// The dead records, for `DeadLetters`: the position is the record's `seq`.
super::rows::dead_records!(SqliteStore);

/// The SQL of the [`Store`] and [`DeadRecords`] methods, in sqlx's errors.
impl SqliteStore {
    async fn claim_sql(&self, claim: Claim<'_>) -> Result<Vec<Record>, sqlx::Error> {
        let sql = if claim.ordered {
            &self.sql.claim_ordered
        } else {
            &self.sql.claim
        };
        let rows = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(claim.owner)
            .bind(i64::try_from(claim.lease.as_millis()).unwrap_or(i64::MAX))
            .bind(i64::try_from(claim.limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        let mut claimed = rows
            .iter()
            .map(rows::claimed::<_, i64>)
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        // RETURNING promises no order: hand them out oldest first.
        claimed.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(claimed.into_iter().map(|(_, record)| record).collect())
    }

    async fn mark_sql(&self, owner: &str, marks: &[Mark]) -> Result<u64, sqlx::Error> {
        if marks.is_empty() {
            return Ok(0);
        }
        let rows: Vec<serde_json::Value> = marks
            .iter()
            .map(|mark| {
                let (op, error, delay) = mark.columns();
                serde_json::json!([mark.id().as_str(), op, error, delay])
            })
            .collect();
        let rows = serde_json::Value::Array(rows).to_string();
        let done = sqlx::query(AssertSqlSafe(self.sql.mark.as_str()))
            .bind(rows)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn backlog_sql(&self) -> Result<Backlog, sqlx::Error> {
        let sql = format!(
            "SELECT COALESCE(SUM(status = 'pending'), 0), \
                    ({NOW} - MIN(CASE WHEN status = 'pending' THEN created_at END)) / 1000.0, \
                    COALESCE(SUM(status = 'dead'), 0) \
             FROM {} WHERE status IN ('pending', 'dead')",
            self.table.qualified
        );
        let (pending, age, dead): (i64, Option<f64>, i64) = sqlx::query_as(AssertSqlSafe(sql))
            .fetch_one(&self.pool)
            .await?;
        Ok(Backlog::from_row(pending, age, dead))
    }

    async fn count_dead_sql(&self) -> Result<u64, sqlx::Error> {
        self.count_with("dead").await
    }

    async fn dead_after_sql(
        &self,
        after: i64,
        limit: i64,
    ) -> Result<Vec<(i64, StoredRecord)>, sqlx::Error> {
        let sql = format!(
            "SELECT seq AS position, {COLUMNS} FROM {} \
             WHERE status = 'dead' AND seq > ?1 ORDER BY seq LIMIT ?2",
            self.table.qualified
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get::<i64, _>("position")?, stored(row)?)))
            .collect()
    }

    async fn requeue_dead_sql(
        &self,
        ids: Option<&[RecordId]>,
    ) -> Result<Vec<RecordId>, sqlx::Error> {
        let ids = ids.map(|ids| {
            serde_json::to_string(&ids.iter().map(RecordId::as_str).collect::<Vec<_>>())
                .expect("a list of strings serializes")
        });
        let sql = format!(
            "UPDATE {} SET status = 'pending', attempts = 0, available_at = {NOW}, \
               lease_owner = NULL, lease_until = NULL \
             WHERE status = 'dead' AND (?1 IS NULL OR id IN (SELECT value FROM json_each(?1))) \
             RETURNING id",
            self.table.qualified
        );
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(ids)
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.into_iter().map(RecordId::new).collect())
    }

    async fn dead_payload_sql(
        &self,
        id: &RecordId,
    ) -> Result<Option<(bytes::Bytes, delivery_core::unit::Headers)>, sqlx::Error> {
        let sql = format!(
            "SELECT payload, headers FROM {} WHERE status = 'dead' AND id = ?1",
            self.table.qualified
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.as_ref()
            .map(super::rows::payload_and_headers)
            .transpose()
    }

    async fn requeue_dead_edited_sql(
        &self,
        id: &RecordId,
        original: &[u8],
        payload: &[u8],
        headers: &delivery_core::unit::Headers,
    ) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "UPDATE {} SET status = 'pending', attempts = 0, available_at = {NOW}, \
               lease_owner = NULL, lease_until = NULL, payload = ?3, headers = ?4 \
             WHERE status = 'dead' AND id = ?1 AND payload = ?2",
            self.table.qualified
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(id.as_str())
            .bind(original)
            .bind(payload)
            .bind(super::rows::headers_column(headers))
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected() > 0)
    }

    async fn delete_dead_sql(&self, ids: &[RecordId]) -> Result<u64, sqlx::Error> {
        let ids = serde_json::to_string(&ids.iter().map(RecordId::as_str).collect::<Vec<_>>())
            .expect("a list of strings serializes");
        let sql = format!(
            "DELETE FROM {} WHERE status = 'dead' AND id IN (SELECT value FROM json_each(?1))",
            self.table.qualified
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(ids)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
