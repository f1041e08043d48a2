//! SQLite's SQL for the stores written in delivery-sql. Times are milliseconds since the Unix
//! epoch, by SQLite's clock; lists are JSON arrays, read with `json_each`.

use futures_util::future::{self, BoxFuture};
use sqlx::sqlite::SqliteArguments;
use sqlx::{Arguments, SqliteConnection, SqlitePool};

use delivery_core::outbox::{Mark, RecordId, Wakeups};
use delivery_sql::dialect::{Dialect, DialectOf, OutboxSql, mark_set};
use delivery_sql::driver::Value;
use delivery_sql::table::Table;

const MIGRATION: &str = include_str!("../sql/outbox_sqlite.sql");

/// SQLite's clock, in milliseconds since the Unix epoch.
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

/// The columns an upgrade copies from a table made before `seq` (into `seq` and these), and what
/// it reads them from (the `rowid` and the same columns).
const UPGRADED: &str = "seq, id, topic, key, payload, status, attempts, last_error, available_at, \
                        lease_owner, lease_until, created_at, delivered_at";
const UPGRADED_FROM: &str = "id, topic, key, payload, status, attempts, last_error, available_at, \
                             lease_owner, lease_until, created_at, delivered_at";

/// SQLite's dialect: the SQL of `SqliteStore`, `SqliteInbox` and the guard.
#[derive(Clone, Copy, Debug, Default)]
pub struct Sqlite;

impl DialectOf<Sqlite> for sqlx::Sqlite {}

/// `ids` as a JSON array of strings.
fn json_ids(ids: &[RecordId]) -> String {
    serde_json::to_string(&ids.iter().map(RecordId::as_str).collect::<Vec<_>>())
        .expect("a list of strings serializes")
}

impl Dialect for Sqlite {
    type Database = sqlx::Sqlite;

    // A write lock from the start: a second migration waits here, then finds the table as the
    // first left it.
    const SYSTEM: &'static str = "sqlite";
    const NOTIFIES: bool = false;

    const BEGIN: &'static str = "BEGIN IMMEDIATE";
    const ONE_WRITER: bool = true;

    fn lock<'c>(_: &'c mut SqliteConnection, _: &'c str) -> BoxFuture<'c, Result<(), sqlx::Error>> {
        Box::pin(future::ready(Ok(())))
    }

    fn millis(duration: std::time::Duration) -> Value<'static> {
        Value::Int(i64::try_from(duration.as_millis()).unwrap_or(i64::MAX))
    }

    fn add_ids(args: &mut SqliteArguments, ids: Option<&[RecordId]>) -> Result<(), sqlx::Error> {
        args.add(ids.map(json_ids)).map_err(sqlx::Error::Encode)
    }

    fn add_marks(args: &mut SqliteArguments, marks: &[Mark]) -> Result<(), sqlx::Error> {
        let rows: Vec<serde_json::Value> = marks
            .iter()
            .map(|mark| {
                let (op, error, delay) = mark.columns();
                serde_json::json!([mark.id().as_str(), op, error, delay])
            })
            .collect();
        args.add(serde_json::Value::Array(rows).to_string())
            .map_err(sqlx::Error::Encode)
    }

    fn outbox(table: &Table) -> OutboxSql {
        let t = table.qualified();
        OutboxSql {
            claim: format!(
                "UPDATE {t} SET attempts = attempts + 1, lease_owner = $1, lease_until = {NOW} + $2 \
                 WHERE id IN ( \
                   SELECT o.id FROM {t} o \
                   WHERE o.status = 'pending' AND o.available_at <= {NOW} \
                     AND (o.lease_until IS NULL OR o.lease_until <= {NOW}) {{ordered}} \
                   ORDER BY o.seq LIMIT $3) \
                 RETURNING id, topic, key, payload, attempts - 1 AS attempts, seq, headers"
            ),
            mark: format!(
                "UPDATE {t} AS t SET {set} \
                 FROM (SELECT value ->> 0 AS id, value ->> 1 AS op, value ->> 2 AS error, \
                              value ->> 3 AS delay_ms FROM json_each($1)) AS f \
                 WHERE t.id = f.id AND t.status = 'pending' AND (f.op = 'delivered' OR t.lease_owner = $2)",
                set = mark_set(NOW, &format!("{NOW} + f.delay_ms")),
            ),
            retain: format!(
                "DELETE FROM {t} WHERE seq IN ( \
                   SELECT seq FROM {t} WHERE status = 'delivered' AND delivered_at < {NOW} - $1 \
                   ORDER BY delivered_at LIMIT $2)"
            ),
            backlog: format!(
                "SELECT COALESCE(SUM(status = 'pending'), 0) AS pending, \
                        ({NOW} - MIN(CASE WHEN status = 'pending' THEN created_at END)) / 1000.0 AS age, \
                        COALESCE(SUM(status = 'dead'), 0) AS dead \
                 FROM {t} WHERE status IN ('pending', 'dead')"
            ),
            requeue: format!(
                "UPDATE {t} SET status = 'pending', attempts = 0, available_at = {NOW}, \
                   lease_owner = NULL, lease_until = NULL \
                 WHERE status = 'dead' AND ($1 IS NULL OR id IN (SELECT value FROM json_each($1))) \
                 RETURNING id"
            ),
            requeue_edited: format!(
                "UPDATE {t} SET status = 'pending', attempts = 0, available_at = {NOW}, \
                   lease_owner = NULL, lease_until = NULL, payload = $3, headers = $4 \
                 WHERE status = 'dead' AND id = $1 AND payload = $2 \
                 RETURNING id"
            ),
            delete_dead: format!(
                "DELETE FROM {t} WHERE status = 'dead' AND id IN (SELECT value FROM json_each($1))"
            ),
            extend: format!(
                "UPDATE {t} SET lease_until = {NOW} + $2 \
                 WHERE id = $1 AND status = 'pending' AND lease_owner = $3"
            ),
            complete: format!(
                "UPDATE {t} SET status = 'delivered', delivered_at = {NOW}, lease_owner = NULL, \
                   lease_until = NULL \
                 WHERE id = $1 AND status = 'pending'"
            ),
        }
    }

    /// The migration file, or, for a table made before `seq`, its upgrade: before `seq`, a
    /// record's stamp was its implicit `rowid`, which SQLite hands out again once the newest
    /// records are deleted. The table is copied, in the migration's transaction, into the new
    /// shape with each record's `rowid` as its `seq`, so the stamps already handed out stay what
    /// they were and the next ones continue above the highest.
    fn outbox_schema(table: &Table) -> String {
        table.render(MIGRATION)
    }

    fn outbox_migration<'c>(
        conn: &'c mut SqliteConnection,
        table: &'c Table,
    ) -> BoxFuture<'c, Result<String, sqlx::Error>> {
        Box::pin(async move {
            let schema = table.schema();
            let columns: Vec<String> = sqlx::query_scalar(match schema {
                Some(_) => "SELECT name FROM pragma_table_info(?1, ?2)",
                None => "SELECT name FROM pragma_table_info(?1)",
            })
            .bind(table.name())
            .bind(schema)
            .fetch_all(&mut *conn)
            .await?;
            let migration = Self::outbox_schema(table);
            let has = |column: &str| columns.iter().any(|c| c == column);
            if columns.is_empty() || has("seq") {
                return Ok(migration);
            }
            let name = table.name();
            let old = format!("{name}_before_seq");
            // A table made before the `headers` column has none to copy.
            let headers = if has("headers") { "headers" } else { "NULL" };
            Ok(format!(
                "ALTER TABLE {table} RENAME TO {old}; \
                 DROP INDEX IF EXISTS {pending}; DROP INDEX IF EXISTS {key}; \
                 {migration} \
                 INSERT INTO {table} ({UPGRADED}, headers) \
                   SELECT rowid, {UPGRADED_FROM}, {headers} FROM {old_table} ORDER BY rowid; \
                 DROP TABLE {old_table};",
                table = table.qualified(),
                pending = table.in_schema(&format!("{name}_pending")),
                key = table.in_schema(&format!("{name}_key")),
                old_table = table.in_schema(&old),
            ))
        })
    }

    fn inbox_migration(table: &Table) -> String {
        // SQLite names an index in the table's database (`schema.index ON table`).
        let name = table.name();
        let index = table.in_schema(&format!("{name}_applied_at"));
        format!(
            "CREATE TABLE IF NOT EXISTS {t} ( \
               consumer   TEXT NOT NULL, \
               unit_id    TEXT NOT NULL, \
               applied_at INTEGER NOT NULL DEFAULT ({NOW}), \
               PRIMARY KEY (consumer, unit_id)); \
             CREATE INDEX IF NOT EXISTS {index} ON {name} (consumer, applied_at);",
            t = table.qualified(),
        )
    }

    fn inbox_retain(table: &Table) -> String {
        let t = table.qualified();
        format!(
            "DELETE FROM {t} WHERE rowid IN ( \
               SELECT rowid FROM {t} WHERE consumer = $1 AND applied_at < {NOW} - $2 LIMIT $3)"
        )
    }

    fn wakeups<'a>(_: &'a SqlitePool, _: &'a Table) -> BoxFuture<'a, Option<Wakeups>> {
        Box::pin(future::ready(None))
    }
}
