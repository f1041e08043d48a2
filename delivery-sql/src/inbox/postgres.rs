//! The inbox in PostgreSQL (see [the module](super)).

use std::time::Duration;

use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPool;

use super::table::{BATCH, Inbox, InboxDatabase, RecordFuture, cleanup};
use delivery_core::unit::UnitId;

impl InboxDatabase for sqlx::Postgres {
    fn record<'a>(
        conn: &'a mut sqlx::PgConnection,
        table: &'a str,
        consumer: &'a str,
        id: &'a str,
    ) -> RecordFuture<'a> {
        Box::pin(async move {
            // The table name was validated as an identifier when the inbox was built. A
            // concurrent transaction inserting the same key makes this one wait on the primary
            // key until it ends: committed, a conflict (nothing inserted); rolled back, inserted.
            let sql = format!(
                "INSERT INTO {table} (consumer, unit_id) VALUES ($1, $2) \
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
    /// This inbox's table in PostgreSQL, through `pool`: its migration and its retention.
    pub fn postgres(&self, pool: PgPool) -> PgInbox {
        PgInbox {
            pool,
            inbox: self.clone(),
        }
    }
}

/// An [`Inbox`]'s table in PostgreSQL: made by [`migrate`](Self::migrate), kept to an age by
/// [`retain`](Self::retain). Handlers need none of it: [`Inbox::first_time`] takes their
/// transaction. Cheap to clone.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// use std::time::Duration;
/// use delivery::inbox::Inbox;
///
/// let inbox = Inbox::new("billing");
/// let store = inbox.postgres(pool);
/// store.migrate().await?;
/// // Outside the handlers: every hour, forget what was applied more than 14 days ago.
/// let cleanup = store.spawn_cleanup(Duration::from_secs(3600), Duration::from_secs(14 * 86_400));
/// # cleanup.abort();
/// # Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct PgInbox {
    pool: PgPool,
    inbox: Inbox,
}

impl PgInbox {
    /// The pool.
    pub fn pool(&self) -> &PgPool {
        &self.pool
    }

    /// The inbox.
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The statements [`migrate`](Self::migrate) runs, for a migration tool of your own. They
    /// are idempotent.
    pub fn migration(&self) -> String {
        let table = &self.inbox.table;
        let (t, name) = (&table.qualified, &table.name);
        format!(
            "CREATE TABLE IF NOT EXISTS {t} ( \
               consumer   TEXT NOT NULL, \
               unit_id    TEXT NOT NULL, \
               applied_at TIMESTAMPTZ NOT NULL DEFAULT now(), \
               PRIMARY KEY (consumer, unit_id)); \
             CREATE INDEX IF NOT EXISTS {name}_applied_at ON {t} (consumer, applied_at);"
        )
    }

    /// Creates the table and its index if missing. Safe to run at every start, from several
    /// processes at once.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin().await?;
        // Concurrent `CREATE ... IF NOT EXISTS` can still collide in the catalog: one at a time.
        sqlx::query("SELECT pg_advisory_xact_lock(hashtext($1))")
            .bind(&*self.inbox.table.qualified)
            .execute(&mut *tx)
            .await?;
        sqlx::raw_sql(AssertSqlSafe(self.migration()))
            .execute(&mut *tx)
            .await?;
        tx.commit().await
    }

    /// Whether this consumer's record of `id` is committed: the unit was applied, and was not
    /// forgotten since by [`retain`](Self::retain).
    pub async fn applied(&self, id: &UnitId) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE consumer = $1 AND unit_id = $2)",
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
    /// transaction). A duplicate of a deleted unit arriving later is applied again: see
    /// [retention](super#retention).
    pub async fn retain(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        let t = &self.inbox.table.qualified;
        let sql = format!(
            "DELETE FROM {t} WHERE consumer = $1 AND unit_id IN ( \
               SELECT unit_id FROM {t} WHERE consumer = $1 \
                 AND applied_at < now() - $2::float8 * interval '1 millisecond' \
               LIMIT $3)"
        );
        let age_ms = older_than.as_secs_f64() * 1000.0;
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
