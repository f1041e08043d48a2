//! PostgreSQL's SQL for the stores written in delivery-sql.

use futures_util::StreamExt;
use futures_util::future::{self, BoxFuture};
use sqlx::postgres::{PgArguments, PgListener};
use sqlx::{Arguments, PgConnection, PgPool};

use delivery_core::outbox::{Mark, RecordId, Wakeups};
use delivery_sql::dialect::{Dialect, DialectOf, OutboxSql, mark_set};
use delivery_sql::driver::Value;
use delivery_sql::table::Table;

const MIGRATION: &str = include_str!("../sql/outbox_postgres.sql");

/// PostgreSQL's dialect: the SQL of `PgStore`, `PgInbox` and the guard.
#[derive(Clone, Copy, Debug, Default)]
pub struct Postgres;

impl DialectOf<Postgres> for sqlx::Postgres {}

/// The condition that makes a claim or a batch of marks commit without waiting for its WAL flush
/// (`synchronous_commit = off` for that statement's transaction only; an uncorrelated subquery,
/// evaluated once before any row is written). A flush costs milliseconds on an ordinary disk and
/// the relay commits once per batch claimed and once per batch marked: waiting for it would pace
/// the relay at a batch per flush. Losing such a commit costs nothing rule 6 does not allow: only
/// a crash of the database itself loses its last fraction of a second of commits, which puts
/// the records it claimed or marked back as they were — pending, and relayed again under their
/// own id. The records themselves were committed by their writers, and are never touched by it.
const NO_FLUSH_WAIT: &str = "(SELECT set_config('synchronous_commit', 'off', true)) = 'off'";

impl Dialect for Postgres {
    type Database = sqlx::Postgres;

    const SYSTEM: &'static str = "postgresql";
    const NOTIFIES: bool = true;

    const BEGIN: &'static str = "BEGIN";
    const ONE_WRITER: bool = false;

    fn lock<'c>(
        conn: &'c mut PgConnection,
        name: &'c str,
    ) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        // Concurrent `CREATE ... IF NOT EXISTS` can still collide in the catalog: one at a time.
        Box::pin(async move {
            sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
                .bind(name)
                .execute(conn)
                .await?;
            Ok(())
        })
    }

    fn millis(duration: std::time::Duration) -> Value<'static> {
        Value::Float(duration.as_secs_f64() * 1000.0)
    }

    fn add_ids(args: &mut PgArguments, ids: Option<&[RecordId]>) -> Result<(), sqlx::Error> {
        let ids: Option<Vec<&str>> = ids.map(|ids| ids.iter().map(RecordId::as_str).collect());
        args.add(ids).map_err(sqlx::Error::Encode)
    }

    fn add_marks(args: &mut PgArguments, marks: &[Mark]) -> Result<(), sqlx::Error> {
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
        (|| {
            args.add(ids)?;
            args.add(ops)?;
            args.add(errors)?;
            args.add(delays)
        })()
        .map_err(sqlx::Error::Encode)
    }

    fn outbox(table: &Table) -> OutboxSql {
        let t = table.qualified();
        // The claim is `UPDATE .. WHERE id = ANY(ARRAY(<the batch, locked>))` and the mark names
        // its records again as `t.id = ANY(ARRAY(SELECT unnest($1)))` beside its join: arrays
        // PostgreSQL only sees when it runs the statement, so it plans for few records and finds
        // each by the primary key. Written as `id IN (<the batch>)`, or as the join alone, they are
        // planned as hash joins that read the whole table — delivered records included — for every
        // claim and mark, until the table is large enough (a few hundred thousand rows here) for
        // the cost model to prefer the index: 6–11 ms per claim of 256 at 20 000 rows against 2–2.6
        // ms, and 8 ms per mark against 2.5 ms (`EXPLAIN ANALYZE`, PostgreSQL 15;
        // `tests/outbox_postgres.rs` counts the rows read).
        OutboxSql {
            claim: format!(
                "UPDATE {t} SET attempts = attempts + 1, lease_owner = $1, lease_until = now() + $2::float8 * interval '1 millisecond' \
                 WHERE {NO_FLUSH_WAIT} AND id = ANY(ARRAY( \
                   SELECT o.id FROM {t} o \
                   WHERE o.status = 'pending' AND o.available_at <= now() \
                     AND (o.lease_until IS NULL OR o.lease_until <= now()) {{ordered}} \
                   ORDER BY o.seq LIMIT $3 FOR UPDATE SKIP LOCKED)) \
                 RETURNING id, topic, key, payload, attempts - 1 AS attempts, seq, headers"
            ),
            mark: format!(
                "UPDATE {t} AS t SET {set} \
                 FROM UNNEST($1::text[], $2::text[], $3::text[], $4::int8[]) AS f(id, op, error, delay_ms) \
                 WHERE {NO_FLUSH_WAIT} AND t.id = ANY(ARRAY(SELECT unnest($1::text[]))) \
                   AND t.id = f.id AND t.status = 'pending' \
                   AND (f.op = 'delivered' OR t.lease_owner = $5)",
                set = mark_set(
                    "now()",
                    "now() + f.delay_ms::float8 * interval '1 millisecond'"
                ),
            ),
            // `id = ANY(ARRAY(..))` finds the batch by the primary key (see the claim).
            retain: format!(
                "DELETE FROM {t} WHERE status = 'delivered' AND id = ANY(ARRAY( \
                   SELECT id FROM {t} WHERE status = 'delivered' \
                     AND delivered_at < now() - $1::float8 * interval '1 millisecond' \
                   ORDER BY delivered_at LIMIT $2))"
            ),
            backlog: format!(
                "SELECT count(*) FILTER (WHERE status = 'pending') AS pending, \
                        EXTRACT(EPOCH FROM now() - min(created_at) FILTER (WHERE status = 'pending'))::float8 AS age, \
                        count(*) FILTER (WHERE status = 'dead') AS dead \
                 FROM {t} WHERE status IN ('pending', 'dead')"
            ),
            // The channel is the table's validated name, as the migration's trigger writes it.
            requeue: format!(
                "WITH requeued AS ( \
                   UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), \
                     lease_owner = NULL, lease_until = NULL \
                   WHERE status = 'dead' AND ($1::text[] IS NULL OR id = ANY($1::text[])) \
                   RETURNING id, seq), \
                 woken AS (SELECT pg_notify('{t}', '') WHERE EXISTS (SELECT 1 FROM requeued)) \
                 SELECT id FROM requeued, (SELECT count(*) FROM woken) w ORDER BY seq"
            ),
            requeue_edited: format!(
                "WITH requeued AS ( \
                   UPDATE {t} SET status = 'pending', attempts = 0, available_at = now(), \
                     lease_owner = NULL, lease_until = NULL, payload = $3, headers = $4 \
                   WHERE status = 'dead' AND id = $1 AND payload = $2 \
                   RETURNING id), \
                 woken AS (SELECT pg_notify('{t}', '') WHERE EXISTS (SELECT 1 FROM requeued)) \
                 SELECT id FROM requeued, (SELECT count(*) FROM woken) w"
            ),
            delete_dead: format!("DELETE FROM {t} WHERE status = 'dead' AND id = ANY($1::text[])"),
            extend: format!(
                "UPDATE {t} SET lease_until = now() + $2::float8 * interval '1 millisecond' \
                 WHERE id = $1 AND status = 'pending' AND lease_owner = $3"
            ),
            complete: format!(
                "UPDATE {t} SET status = 'delivered', delivered_at = now(), lease_owner = NULL, \
                   lease_until = NULL \
                 WHERE id = $1 AND status = 'pending'"
            ),
        }
    }

    fn outbox_schema(table: &Table) -> String {
        table.render(MIGRATION)
    }

    fn outbox_migration<'c>(
        _: &'c mut PgConnection,
        table: &'c Table,
    ) -> BoxFuture<'c, Result<String, sqlx::Error>> {
        Box::pin(future::ready(Ok(Self::outbox_schema(table))))
    }

    fn inbox_migration(table: &Table) -> String {
        let (t, name) = (table.qualified(), table.name());
        format!(
            "CREATE TABLE IF NOT EXISTS {t} ( \
               consumer   TEXT NOT NULL, \
               unit_id    TEXT NOT NULL, \
               applied_at TIMESTAMPTZ NOT NULL DEFAULT now(), \
               PRIMARY KEY (consumer, unit_id)); \
             CREATE INDEX IF NOT EXISTS {name}_applied_at ON {t} (consumer, applied_at);"
        )
    }

    fn inbox_retain(table: &Table) -> String {
        let t = table.qualified();
        format!(
            "DELETE FROM {t} WHERE consumer = $1 AND unit_id IN ( \
               SELECT unit_id FROM {t} WHERE consumer = $1 \
                 AND applied_at < now() - $2::float8 * interval '1 millisecond' \
               LIMIT $3)"
        )
    }

    fn wakeups<'a>(pool: &'a PgPool, table: &'a Table) -> BoxFuture<'a, Option<Wakeups>> {
        Box::pin(async move {
            let outbox = table.qualified();
            let mut listener = match PgListener::connect_with(pool).await {
                Ok(listener) => listener,
                Err(error) => {
                    tracing::warn!(outbox, %error, "LISTEN unavailable; polling only");
                    return None;
                }
            };
            if let Err(error) = listener.listen(outbox).await {
                tracing::warn!(outbox, %error, "LISTEN unavailable; polling only");
                return None;
            }
            // An error (a reconnect) wakes the relay too: a claim finds whatever the notification
            // would have announced.
            let wakeups: Wakeups = Box::pin(listener.into_stream().map(|_| ()));
            Some(wakeups)
        })
    }
}
