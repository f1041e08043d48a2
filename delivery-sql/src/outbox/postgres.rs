//! The PostgreSQL outbox store: claims with `FOR UPDATE SKIP LOCKED` inside the claiming
//! `UPDATE`, under a lease, so several relays share one table without relaying a record at the
//! same time; `LISTEN/NOTIFY` wakes them after a commit, polling is the fallback.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use sqlx::postgres::{PgListener, PgPool};
use sqlx::{AssertSqlSafe, Row};

use delivery_core::outbox::{Backlog, Claim, Mark, Store, StoredRecord, Wakeups, until_idle};
use delivery_core::outbox::{Record, RecordId};
use delivery_core::transport::TransportError;

use super::rows::{self, RETAIN_BATCH, in_batches};
use super::write::{Outbox, Table};
use crate::error::failed;

const MIGRATION: &str = include_str!("../../sql/outbox_postgres.sql");

/// An outbox table in PostgreSQL: what a [`Relayer`](delivery_core::outbox::Relayer) relays from, and an
/// operator's view of it (dead records, re-queue). Cheap to clone.
#[derive(Clone, Debug)]
pub struct PgStore {
    pool: PgPool,
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
    /// This outbox's table in PostgreSQL, through `pool`.
    pub fn postgres(&self, pool: PgPool) -> PgStore {
        PgStore::new(pool, self)
    }
}

const COLUMNS: &str = "id, topic, key, payload, status, attempts, last_error";

/// The condition that makes a claim or a batch of marks commit without waiting for its WAL flush
/// (`synchronous_commit = off` for that statement's transaction only; an uncorrelated subquery,
/// evaluated once before any row is written). A flush costs milliseconds on an ordinary disk and
/// the relay commits once per batch claimed and once per batch marked: waiting for it would pace
/// the relay at a batch per flush. Losing such a commit costs nothing rule 6 does not allow: only
/// a crash of the database itself loses its last fraction of a second of commits, which puts
/// the records it claimed or marked back as they were — pending, and relayed again under their
/// own id. The records themselves were committed by their writers, and are never touched by it.
const NO_FLUSH_WAIT: &str = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'";

impl PgStore {
    /// `outbox`'s table through `pool`.
    pub fn new(pool: PgPool, outbox: &Outbox) -> Self {
        let table = outbox.table.clone();
        let t = &table.qualified;
        // The claim is `UPDATE .. WHERE id = ANY(ARRAY(<the batch, locked>))` and the mark names
        // its records again as `t.id = ANY(ARRAY(SELECT unnest($1)))` beside its join: arrays
        // PostgreSQL only sees when it runs the statement, so it plans for few records and finds
        // each by the primary key. Written as `id IN (<the batch>)`, or as the join alone, they are
        // planned as hash joins that read the whole table — delivered records included — for every
        // claim and mark, until the table is large enough (a few hundred thousand rows here) for
        // the cost model to prefer the index: 6–11 ms per claim of 256 at 20 000 rows against 2–2.6
        // ms, and 8 ms per mark against 2.5 ms (`EXPLAIN ANALYZE`, PostgreSQL 15;
        // `tests/outbox_postgres.rs` counts the rows read).
        let claim = |ordered: &str| {
            format!(
                "UPDATE {t} SET attempts = attempts + 1, lease_owner = $1, lease_until = now() + $2::float8 * interval '1 millisecond' \
                 WHERE {NO_FLUSH_WAIT} AND id = ANY(ARRAY( \
                   SELECT o.id FROM {t} o \
                   WHERE o.status = 'pending' AND o.available_at <= now() \
                     AND (o.lease_until IS NULL OR o.lease_until <= now()) {ordered} \
                   ORDER BY o.seq LIMIT $3 FOR UPDATE SKIP LOCKED)) \
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
               available_at = CASE WHEN f.op = 'retry' THEN now() + f.delay_ms::float8 * interval '1 millisecond' \
                              ELSE t.available_at END, \
               delivered_at = CASE WHEN f.op = 'delivered' THEN now() ELSE NULL END, \
               lease_owner = NULL, lease_until = NULL \
             FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[]) AS f(id, op, error, delay_ms) \
             WHERE {NO_FLUSH_WAIT} AND t.id = ANY(ARRAY(SELECT unnest($1::text[]))) \
               AND t.id = f.id AND t.status = 'pending' \
               AND (f.op = 'delivered' OR t.lease_owner = $5)"
        );
        PgStore {
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
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// Creates the table, its indexes and the notify trigger if missing
    /// (`delivery-core/sql/outbox_postgres.sql`). Safe to run from several processes at once.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        // Concurrent `CREATE ... IF NOT EXISTS` can still collide in the catalog: one at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(&*self.table.qualified)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(AssertSqlSafe(self.table.render(MIGRATION)))
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// How many records are pending (including those backing off or being relayed).
    pub async fn pending(&self) -> Result<u64, sqlx::Error> {
        self.count_with("pending").await
    }

    /// How many records have `status`.
    async fn count_with(&self, status: &str) -> Result<u64, sqlx::Error> {
        let sql = format!(
            "SELECT count(*) FROM {} WHERE status = $1",
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
    /// sequence, which never hands out a value at or below one it handed out (rule 4).
    ///
    /// ```no_run
    /// # #[cfg(feature = "postgres")]
    /// # async fn run(pool: delivery::sqlx::PgPool) -> Result<(), delivery::sqlx::Error> {
    /// use std::time::Duration;
    /// use delivery::outbox::Outbox;
    ///
    /// let store = Outbox::new().postgres(pool);
    /// // Every hour, delete what was delivered more than 7 days ago.
    /// let mut every = tokio::time::interval(Duration::from_secs(3_600));
    /// loop {
    ///     every.tick().await;
    ///     match store.retain(Duration::from_secs(7 * 86_400)).await {
    ///         Ok(deleted) => tracing::debug!(deleted, "delivered outbox records deleted"),
    ///         Err(error) => tracing::warn!(%error, "outbox retention failed; tried again in an hour"),
    ///     }
    /// }
    /// # }
    /// ```
    pub async fn retain(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        // `id = ANY(ARRAY(..))` finds the batch by the primary key (see `new`).
        let sql = format!(
            "DELETE FROM {t} WHERE status = 'delivered' AND id = ANY(ARRAY( \
               SELECT id FROM {t} WHERE status = 'delivered' \
                 AND delivered_at < now() - $1::float8 * interval '1 millisecond' \
               ORDER BY delivered_at LIMIT $2))",
            t = self.table.qualified
        );
        let age_ms = older_than.as_secs_f64() * 1000.0;
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
            "SELECT {COLUMNS} FROM {} WHERE id = $1",
            self.table.qualified
        );
        let row = sqlx::query(AssertSqlSafe(sql))
            .bind(id.as_str())
            .fetch_optional(&self.pool)
            .await?;
        row.map(|row| stored(&row)).transpose()
    }
}

fn stored(row: &sqlx::postgres::PgRow) -> Result<StoredRecord, sqlx::Error> {
    rows::stored::<_, i32>(row)
}

impl Store for PgStore {
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
        let mut listener = match PgListener::connect_with(&self.pool).await {
            Ok(listener) => listener,
            Err(error) => {
                tracing::warn!(outbox = self.name(), %error, "LISTEN unavailable; polling only");
                return None;
            }
        };
        if let Err(error) = listener.listen(&self.table.qualified).await {
            tracing::warn!(outbox = self.name(), %error, "LISTEN unavailable; polling only");
            return None;
        }
        // An error (a reconnect) wakes the relay too: a claim finds whatever the notification
        // would have announced.
        Some(Box::pin(listener.into_stream().map(|_| ())))
    }
}

// The dead records, for `DeadLetters`: the position is the record's `seq`.
super::rows::dead_records!(PgStore);

/// The SQL of the [`Store`] and [`DeadRecords`] methods, in sqlx's errors.
impl PgStore {
    async fn claim_sql(&self, claim: Claim<'_>) -> Result<Vec<Record>, sqlx::Error> {
        let sql = if claim.ordered {
            &self.sql.claim_ordered
        } else {
            &self.sql.claim
        };
        let rows = sqlx::query(AssertSqlSafe(sql.as_str()))
            .bind(claim.owner)
            .bind(claim.lease.as_secs_f64() * 1000.0)
            .bind(i64::try_from(claim.limit).unwrap_or(i64::MAX))
            .fetch_all(&self.pool)
            .await?;
        let mut claimed = rows
            .iter()
            .map(rows::claimed::<_, i32>)
            .collect::<Result<Vec<_>, sqlx::Error>>()?;
        // RETURNING promises no order: hand them out oldest first.
        claimed.sort_unstable_by_key(|(seq, _)| *seq);
        Ok(claimed.into_iter().map(|(_, record)| record).collect())
    }

    async fn mark_sql(&self, owner: &str, marks: &[Mark]) -> Result<u64, sqlx::Error> {
        if marks.is_empty() {
            return Ok(0);
        }
        let mut ids = Vec::with_capacity(marks.len());
        let mut ops = Vec::with_capacity(marks.len());
        let mut errors = Vec::with_capacity(marks.len());
        let mut delays = Vec::with_capacity(marks.len());
        for mark in marks {
            let (op, error, delay) = mark.columns();
            ids.push(mark.id().as_str());
            ops.push(op);
            errors.push(error);
            delays.push(delay);
        }
        let done = sqlx::query(AssertSqlSafe(self.sql.mark.as_str()))
            .bind(ids)
            .bind(ops)
            .bind(errors)
            .bind(delays)
            .bind(owner)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }

    async fn backlog_sql(&self) -> Result<Backlog, sqlx::Error> {
        let sql = format!(
            "SELECT count(*) FILTER (WHERE status = 'pending'), \
                    EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8, \
                    count(*) FILTER (WHERE status = 'dead') \
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
            "SELECT seq, {COLUMNS} FROM {} WHERE status = 'dead' AND seq > $1 ORDER BY seq LIMIT $2",
            self.table.qualified
        );
        let rows = sqlx::query(AssertSqlSafe(sql))
            .bind(after)
            .bind(limit)
            .fetch_all(&self.pool)
            .await?;
        rows.iter()
            .map(|row| Ok((row.try_get::<i64, _>("seq")?, stored(row)?)))
            .collect()
    }

    async fn requeue_dead_sql(
        &self,
        ids: Option<&[RecordId]>,
    ) -> Result<Vec<RecordId>, sqlx::Error> {
        let ids: Option<Vec<&str>> = ids.map(|ids| ids.iter().map(RecordId::as_str).collect());
        let sql = format!(
            "WITH requeued AS ( \
               UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), \
                 lease_owner = NULL, lease_until = NULL \
               WHERE status = 'dead' AND ($1::text[] IS NULL OR id = ANY($1::text[])) \
               RETURNING id, seq), \
             woken AS (SELECT pg_notify($2, '') WHERE EXISTS (SELECT 1 FROM requeued)) \
             SELECT id FROM requeued, (SELECT count(*) FROM woken) w ORDER BY seq",
            t = self.table.qualified
        );
        let ids: Vec<String> = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(ids)
            .bind(&*self.table.qualified)
            .fetch_all(&self.pool)
            .await?;
        Ok(ids.into_iter().map(RecordId::new).collect())
    }

    async fn dead_payload_sql(
        &self,
        id: &RecordId,
    ) -> Result<Option<(bytes::Bytes, delivery_core::unit::Headers)>, sqlx::Error> {
        let sql = format!(
            "SELECT payload, headers FROM {} WHERE status = 'dead' AND id = $1",
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
            "WITH requeued AS ( \
               UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), \
                 lease_owner = NULL, lease_until = NULL, payload = $3, headers = $4 \
               WHERE status = 'dead' AND id = $1 AND payload = $2 \
               RETURNING id), \
             woken AS (SELECT pg_notify($5, '') WHERE EXISTS (SELECT 1 FROM requeued)) \
             SELECT count(*) FROM requeued, (SELECT count(*) FROM woken) w",
            t = self.table.qualified
        );
        let requeued: i64 = sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(id.as_str())
            .bind(original)
            .bind(payload)
            .bind(super::rows::headers_column(headers))
            .bind(&*self.table.qualified)
            .fetch_one(&self.pool)
            .await?;
        Ok(requeued > 0)
    }

    async fn delete_dead_sql(&self, ids: &[RecordId]) -> Result<u64, sqlx::Error> {
        let ids: Vec<&str> = ids.iter().map(RecordId::as_str).collect();
        let sql = format!(
            "DELETE FROM {} WHERE status = 'dead' AND id = ANY($1::text[])",
            self.table.qualified
        );
        let done = sqlx::query(AssertSqlSafe(sql))
            .bind(ids)
            .execute(&self.pool)
            .await?;
        Ok(done.rows_affected())
    }
}
