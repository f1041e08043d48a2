//! The inbox in SQLite (see [the module](super)).

use std::time::Duration;

use sqlx::AssertSqlSafe;
use sqlx::sqlite::SqlitePool;

use super::table::{BATCH, Inbox, InboxDatabase, RecordFuture, cleanup};
use delivery_core::unit::UnitId;

/// SQLite's clock, in milliseconds since the Unix epoch (as the SQLite outbox keeps time).
const NOW: &str = "CAST(unixepoch('subsec') * 1000 AS INTEGER)";

impl InboxDatabase for sqlx::Sqlite {
    fn record<'a>(
        conn: &'a mut sqlx::SqliteConnection,
        table: &'a str,
        consumer: &'a str,
        id: &'a str,
    ) -> RecordFuture<'a> {
        Box::pin(async move {
            // The table name was validated as an identifier when the inbox was built. The insert
            // takes the database's write lock (waiting up to the busy timeout for another
            // writer's commit) and holds it to the end of the caller's transaction.
            let sql = format!(
                "INSERT INTO {table} (consumer, unit_id) VALUES (?1, ?2) \
                 ON CONFLICT (consumer, unit_id) DO NOTHING"
            );
            let inserted = sqlx::query(AssertSqlSafe(sql))
                .bind(consumer)
                .bind(id)
                .execute(conn)
                .await?
                .rows_affected();
            Ok(inserted == 1)
        })
    }
}

impl Inbox {
    /// This inbox's table in SQLite, through `pool`: its migration and its retention.
    pub fn sqlite(&self, pool: SqlitePool) -> SqliteInbox {
        SqliteInbox {
            pool,
            inbox: self.clone(),
        }
    }
}

/// An [`Inbox`]'s table in SQLite: made by [`migrate`](Self::migrate), kept to an age by
/// [`retain`](Self::retain). Handlers need none of it: [`Inbox::first_time`] takes their
/// transaction. Cheap to clone.
#[derive(Clone, Debug)]
pub struct SqliteInbox {
    pool: SqlitePool,
    inbox: Inbox,
}

impl SqliteInbox {
    /// The pool.
    pub fn pool(&self) -> &SqlitePool {
        &self.pool
    }

    /// The inbox.
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The statements [`migrate`](Self::migrate) runs, for a migration tool of your own. They
    /// are idempotent. `applied_at` is milliseconds since the Unix epoch, by SQLite's clock.
    pub fn migration(&self) -> String {
        let table = &self.inbox.table;
        // SQLite names an index in the table's database (`schema.index ON table`).
        let index = match &table.schema {
            Some(schema) => format!("{schema}.{}_applied_at", table.name),
            None => format!("{}_applied_at", table.name),
        };
        format!(
            "CREATE TABLE IF NOT EXISTS {t} ( \
               consumer   TEXT NOT NULL, \
               unit_id    TEXT NOT NULL, \
               applied_at INTEGER NOT NULL DEFAULT ({NOW}), \
               PRIMARY KEY (consumer, unit_id)); \
             CREATE INDEX IF NOT EXISTS {index} ON {name} (consumer, applied_at);",
            t = table.qualified,
            name = table.name,
        )
    }

    /// Creates the table and its index if missing. Safe to run at every start.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        sqlx::raw_sql(AssertSqlSafe(self.migration()))
            .execute(&self.pool)
            .await?;
        Ok(())
    }

    /// Whether this consumer's record of `id` is committed: the unit was applied, and was not
    /// forgotten since by [`retain`](Self::retain).
    pub async fn applied(&self, id: &UnitId) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE consumer = ?1 AND unit_id = ?2)",
            self.inbox.table.qualified
        );
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(&*self.inbox.consumer)
            .bind(id.as_str())
            .fetch_one(&self.pool)
            .await
    }

    /// Deletes this consumer's records applied more than `older_than` ago, by the database's
    /// clock, and returns how many. Runs outside handlers, in batches (each its own
    /// transaction, so handlers wait for the write lock one batch at most). A duplicate of a
    /// deleted unit arriving later is applied again: see [retention](super#retention).
    pub async fn retain(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        let t = &self.inbox.table.qualified;
        let sql = format!(
            "DELETE FROM {t} WHERE rowid IN ( \
               SELECT rowid FROM {t} WHERE consumer = ?1 AND applied_at < {NOW} - ?2 LIMIT ?3)"
        );
        let age_ms = i64::try_from(older_than.as_millis()).unwrap_or(i64::MAX);
        let mut deleted = 0;
        loop {
            let batch = sqlx::query(AssertSqlSafe(sql.as_str()))
                .bind(&*self.inbox.consumer)
                .bind(age_ms)
                .bind(BATCH)
                .execute(&self.pool)
                .await?
                .rows_affected();
            deleted += batch;
            if batch < BATCH as u64 {
                return Ok(deleted);
            }
        }
    }

    /// Runs [`retain`](Self::retain) now and then every `every`, until the returned task is
    /// aborted; a failed run is logged and tried again at the next interval.
    pub fn spawn_cleanup(
        &self,
        every: Duration,
        older_than: Duration,
    ) -> tokio::task::JoinHandle<()> {
        let store = self.clone();
        cleanup(self.inbox.clone(), every, move || {
            let store = store.clone();
            async move { store.retain(older_than).await }
        })
    }
}
