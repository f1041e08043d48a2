//! An inbox's table in one database: its migration, what it holds, its retention.

use std::fmt;
use std::marker::PhantomData;
use std::time::Duration;

use sqlx::Pool;

use delivery_core::unit::UnitId;

use super::write::Inbox;
use crate::dialect::{Dialect, DialectOf};
use crate::driver::{Exec, Sql, Value};

/// How many records one statement of `retain` deletes: a long cleanup holds no lock for long.
const BATCH: i64 = 10_000;

impl Inbox {
    /// This inbox's table in PostgreSQL, through `pool`: its migration and its retention (a
    /// `delivery::inbox::PgInbox`).
    #[cfg(feature = "postgres")]
    pub fn postgres<D>(&self, pool: sqlx::PgPool) -> SqlInbox<D>
    where
        D: Dialect<Database = sqlx::Postgres>,
        sqlx::Postgres: DialectOf<D>,
    {
        SqlInbox::new(pool, self)
    }

    /// This inbox's table in SQLite, through `pool`: its migration and its retention (a
    /// `delivery::inbox::SqliteInbox`).
    #[cfg(feature = "sqlite")]
    pub fn sqlite<D>(&self, pool: sqlx::SqlitePool) -> SqlInbox<D>
    where
        D: Dialect<Database = sqlx::Sqlite>,
        sqlx::Sqlite: DialectOf<D>,
    {
        SqlInbox::new(pool, self)
    }
}

/// An [`Inbox`]'s table in the database of the dialect `D` (`delivery::inbox::PgInbox`,
/// `delivery::inbox::SqliteInbox`): made by [`migrate`](Self::migrate), kept to an age by
/// [`retain`](Self::retain). Handlers need none of it: [`Inbox::first_time`] takes their
/// transaction. Cheap to clone.
///
/// ```no_run
/// # async fn run(pool: sqlx::PgPool) -> Result<(), sqlx::Error> {
/// use std::time::Duration;
/// use delivery::inbox::Inbox;
///
/// let inbox = Inbox::new("billing");
/// let store = inbox.postgres(pool); // SQLite: inbox.sqlite(pool)
/// store.migrate().await?;
/// // Outside the handlers: every hour, forget what was applied more than 14 days ago.
/// let cleanup = store.spawn_cleanup(Duration::from_secs(3600), Duration::from_secs(14 * 86_400));
/// # cleanup.abort();
/// # Ok(()) }
/// ```
pub struct SqlInbox<D: Dialect> {
    pool: Pool<D::Database>,
    inbox: Inbox,
    dialect: PhantomData<fn() -> D>,
}

impl<D: Dialect> Clone for SqlInbox<D> {
    fn clone(&self) -> Self {
        SqlInbox::new(self.pool.clone(), &self.inbox)
    }
}

impl<D: Dialect> fmt::Debug for SqlInbox<D> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqlInbox")
            .field("pool", &self.pool)
            .field("inbox", &self.inbox)
            .finish()
    }
}

impl<D: Dialect> SqlInbox<D> {
    /// `inbox`'s table through `pool`.
    pub fn new(pool: Pool<D::Database>, inbox: &Inbox) -> Self {
        SqlInbox {
            pool,
            inbox: inbox.clone(),
            dialect: PhantomData,
        }
    }

    /// The pool.
    pub fn pool(&self) -> &Pool<D::Database> {
        &self.pool
    }

    /// The inbox.
    pub fn inbox(&self) -> &Inbox {
        &self.inbox
    }

    /// The statements [`migrate`](Self::migrate) runs, for a migration tool of your own. They
    /// are idempotent. `applied_at` is the database's clock (SQLite: milliseconds since the Unix
    /// epoch).
    pub fn migration(&self) -> String {
        D::inbox_migration(&self.inbox.table)
    }

    /// Creates the table and its index if missing. Safe to run at every start, from several
    /// processes at once.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        let mut tx = self.pool.begin_with(D::BEGIN).await?;
        D::lock(&mut *tx, self.inbox.table.qualified()).await?;
        D::Database::run_script(Exec::Conn(&mut *tx), self.migration()).await?;
        tx.commit().await
    }

    /// Whether this consumer's record of `id` is committed: the unit was applied, and was not
    /// forgotten since by [`retain`](Self::retain).
    pub async fn applied(&self, id: &UnitId) -> Result<bool, sqlx::Error> {
        let sql = format!(
            "SELECT EXISTS (SELECT 1 FROM {} WHERE consumer = $1 AND unit_id = $2) AS applied",
            self.inbox.table.qualified()
        );
        let args =
            D::Database::arguments(&[Value::Text(&self.inbox.consumer), Value::Text(id.as_str())])?;
        let row = D::Database::fetch_optional(Exec::Pool(&self.pool), &sql, args)
            .await?
            .ok_or(sqlx::Error::RowNotFound)?;
        D::Database::boolean(&row, "applied")
    }

    /// Deletes this consumer's records applied more than `older_than` ago, by the database's
    /// clock, and returns how many. Runs outside handlers, in batches (each its own transaction,
    /// so handlers wait one batch at most). A duplicate of a deleted unit arriving later is
    /// applied again: see [retention](super#retention).
    pub async fn retain(&self, older_than: Duration) -> Result<u64, sqlx::Error> {
        let sql = D::inbox_retain(&self.inbox.table);
        let values = [
            Value::Text(&self.inbox.consumer),
            D::millis(older_than),
            Value::Int(BATCH),
        ];
        let mut deleted = 0;
        loop {
            let args = D::Database::arguments(&values)?;
            let batch = D::Database::execute(Exec::Pool(&self.pool), &sql, args).await?;
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
        tokio::spawn(async move {
            loop {
                match store.retain(older_than).await {
                    Ok(deleted) => tracing::debug!(
                        consumer = store.inbox.consumer(),
                        table = store.inbox.table_name(),
                        deleted,
                        "inbox records past their retention deleted"
                    ),
                    Err(error) => tracing::warn!(
                        consumer = store.inbox.consumer(),
                        table = store.inbox.table_name(),
                        %error,
                        "could not delete the inbox records past their retention"
                    ),
                }
                tokio::time::sleep(every).await;
            }
        })
    }
}
