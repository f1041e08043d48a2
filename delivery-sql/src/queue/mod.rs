//! A durable queue in your own database: units published in your transaction, consumed with
//! `FOR UPDATE SKIP LOCKED` claims under a visibility timeout, acknowledged — for a handler that
//! takes the unit's [`Tx`] — in the same transaction as the handler's effect.
//!
//! A queue is a table of the outbox's shape ([`Outbox`]): one table per queue, its rows the
//! units. A row's `id` is the unit's id, its `attempts` the unit's delivery count (rule 2: kept
//! in the row, counted by each claim), its `seq` the unit's stamp (rule 4), its `key` the unit's
//! ordering key ([`KEY`], for
//! [`order_by_key`](delivery_core::Consumer::order_by_key)). A unit is `pending` until it is
//! acknowledged (`delivered`) or dead-lettered (`dead`, in the same table: its dead letter is the
//! [`SqlStore`]'s dead records, a [`DeadLetters`](delivery_core::DeadLetters) like every
//! transport's). Delivered rows stay until [`SqlStore::retain`] deletes them.
//!
//! Any producer can enqueue with a plain `INSERT` in its own transaction:
//! `INSERT INTO <table> (id, topic, payload) VALUES (<unit id>, <queue name>, <bytes>)`
//! (optionally `key` and `headers`, a JSON object of strings); PostgreSQL's trigger wakes the
//! consumers at the commit.
//!
//! ```
//! # #[tokio::main(flavor = "current_thread")]
//! # async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! use delivery::queue::{Queue, SqliteTx};
//! use delivery::{Consumer, HandlerError, Json, Unit, consumer};
//!
//! #[consumer]
//! async fn count(Json(n): Json<i64>, mut tx: SqliteTx) -> Result<(), HandlerError> {
//!     // The effect, in the unit's transaction: it commits with the acknowledgement, or not at all.
//!     sqlx::query("UPDATE total SET n = n + $1").bind(n).execute(&mut *tx).await?;
//!     Ok(())
//! }
//!
//! let file = std::env::temp_dir().join(format!("queue-doc-{}.db", std::process::id()));
//! let options = sqlx::sqlite::SqliteConnectOptions::new().filename(&file).create_if_missing(true);
//! let pool = delivery::sqlx::SqlitePool::connect_with(options).await?;
//! sqlx::raw_sql("CREATE TABLE total (n INTEGER); INSERT INTO total VALUES (0)").execute(&pool).await?;
//!
//! let queue = Queue::new("numbers").sqlite(pool.clone()); // PostgreSQL: `.postgres(pool)`
//! queue.migrate().await?;
//! let mut tx = pool.begin().await?;
//! for (id, n) in [("n-1", 2), ("n-2", 3)] {
//!     queue.publish(&mut tx, &Unit::json(id, &n)).await?;
//! }
//! tx.commit().await?;
//!
//! let report = Consumer::new(queue.source())
//!     .shutdown_on(queue.store().idle())
//!     .run(count)
//!     .await;
//! assert_eq!(report.acked, 2);
//! let n: i64 = sqlx::query_scalar("SELECT n FROM total").fetch_one(&pool).await?;
//! assert_eq!(n, 5);
//! # drop(pool); let _ = std::fs::remove_file(&file);
//! # Ok(()) }
//! ```

mod source;
mod tx;

use std::sync::Arc;
use std::time::Duration;

use sqlx::Transaction;

use delivery_core::headers::{KEY, STAMP};
use delivery_core::unit::Unit;

use crate::dialect::{Dialect, DialectOf};
use crate::driver::Sql;
use crate::outbox::{Outbox, Row, SqlStore};

use source::Settings;
pub use source::{QueueHandle, QueueSource};
pub use tx::{EndedByTheRuntime, Tx};

/// A queue's name and table: what a producer publishes to and a consumer reads. Its table is
/// `delivery_queue_<name>` (each character of the name that is not a letter, a digit or `_` as
/// `_`) unless [`table`](Queue::table) names another.
#[derive(Clone, Debug)]
pub struct Queue {
    name: String,
    outbox: Outbox,
}

impl Queue {
    /// The queue `name`, in the table `delivery_queue_<name>`.
    pub fn new(name: &str) -> Self {
        let table: String = name
            .chars()
            .map(|c| {
                if c.is_ascii_alphanumeric() {
                    c.to_ascii_lowercase()
                } else {
                    '_'
                }
            })
            .collect();
        Queue {
            name: name.to_owned(),
            outbox: Outbox::table(&format!("delivery_queue_{table}")),
        }
    }

    /// In the table `table` (optionally `schema.table`) instead.
    ///
    /// # Panics
    /// If `table` is not an SQL identifier.
    pub fn table(mut self, table: &str) -> Self {
        self.outbox = Outbox::table(table);
        self
    }

    /// The queue's name.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Its table's name.
    pub fn table_name(&self) -> &str {
        self.outbox.table_name()
    }

    /// The queue in PostgreSQL, through `pool` (a `delivery::queue::PgQueue`).
    #[cfg(feature = "postgres")]
    pub fn postgres<D>(&self, pool: sqlx::PgPool) -> SqlQueue<D>
    where
        D: Dialect<Database = sqlx::Postgres>,
        sqlx::Postgres: DialectOf<D>,
    {
        SqlQueue::new(pool, self)
    }

    /// The queue in SQLite, through `pool` (a `delivery::queue::SqliteQueue`).
    #[cfg(feature = "sqlite")]
    pub fn sqlite<D>(&self, pool: sqlx::SqlitePool) -> SqlQueue<D>
    where
        D: Dialect<Database = sqlx::Sqlite>,
        sqlx::Sqlite: DialectOf<D>,
    {
        SqlQueue::new(pool, self)
    }

    /// Enqueues `unit` (its id, payload and headers; its key from its
    /// [`KEY`] header) in the caller's transaction: it is consumed
    /// only once that transaction commits, and not at all if it rolls back. Its stamp is the
    /// row's sequence (or the unit's own, where its producer gave it one), its delivery count
    /// starts at the first claim. Returns `false`, changing
    /// nothing, if a unit with its id is already in the queue (a producer's retry publishes
    /// it once).
    pub async fn publish<DB: Sql>(
        &self,
        tx: &mut Transaction<'_, DB>,
        unit: &Unit,
    ) -> Result<bool, sqlx::Error> {
        // A producer's stamp travels as a header, and orders the unit in place of the row's
        // sequence.
        let mut headers = unit.headers().clone();
        if let (Some(stamp), None) = (unit.stamp(), headers.get(STAMP)) {
            headers = headers.with(STAMP, stamp.0.to_string());
        }
        let row = Row {
            id: unit.id().as_str(),
            topic: &self.name,
            key: unit.headers().get_str(KEY),
            payload: unit.payload(),
            headers: &headers,
        };
        let written = self
            .outbox
            .insert::<DB>(&mut **tx, row, " ON CONFLICT (id) DO NOTHING")
            .await?;
        Ok(written == 1)
    }
}

/// A [`Queue`] in the database of the dialect `D`: its migration, its publisher and its
/// consumers' [`source`](SqlQueue::source). `delivery::queue::PgQueue` in PostgreSQL, where
/// `LISTEN/NOTIFY` wakes the consumers at each commit, and `delivery::queue::SqliteQueue` in
/// SQLite, which they poll. Cheap to clone.
pub struct SqlQueue<D: Dialect> {
    queue: Queue,
    store: SqlStore<D>,
    settings: Settings,
}

impl<D: Dialect> Clone for SqlQueue<D> {
    fn clone(&self) -> Self {
        SqlQueue {
            queue: self.queue.clone(),
            store: self.store.clone(),
            settings: self.settings,
        }
    }
}

impl<D: Dialect> std::fmt::Debug for SqlQueue<D> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqlQueue")
            .field("name", &self.queue.name)
            .field("table", &self.queue.outbox.table_name())
            .field("settings", &self.settings)
            .finish_non_exhaustive()
    }
}

impl<D: Dialect> SqlQueue<D> {
    /// `queue` through `pool`.
    pub fn new(pool: sqlx::Pool<D::Database>, queue: &Queue) -> Self {
        SqlQueue {
            store: SqlStore::new(pool, &queue.outbox),
            queue: queue.clone(),
            settings: Settings {
                batch: 32,
                visibility: Duration::from_secs(30),
                keep_alive_at_most: Duration::from_secs(30 * 60),
                // PostgreSQL's consumers are woken by `NOTIFY`: the poll is the fallback.
                poll: if D::NOTIFIES {
                    Duration::from_secs(1)
                } else {
                    Duration::from_millis(50)
                },
                max_deliveries: std::num::NonZeroU32::new(5),
            },
        }
    }

    /// How many units a claim takes at most (default 32).
    pub fn batch(mut self, n: usize) -> Self {
        self.settings.batch = n.max(1);
        self
    }

    /// How long a claimed unit stays invisible to other consumers (default 30 s): the
    /// mechanism's redelivery timer. A consumer that crashes holds its units this long; a handler
    /// still running keeps its unit for up to `at_most` (default 30 min), extending the claim
    /// every third of `visibility`.
    pub fn visibility_timeout(mut self, visibility: Duration, at_most: Duration) -> Self {
        self.settings.visibility = visibility.max(Duration::from_millis(30));
        self.settings.keep_alive_at_most = at_most;
        self
    }

    /// How often an idle consumer claims without being woken (default: SQLite 50 ms; PostgreSQL
    /// 1 s, which only matters if a notification is missed).
    pub fn poll(mut self, every: Duration) -> Self {
        self.settings.poll = every.max(Duration::from_millis(1));
        self
    }

    /// The most deliveries a unit gets (default 5), counted in its row: a unit claimed once more
    /// goes to the dead letter unrun.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.settings.max_deliveries = std::num::NonZeroU32::new(n);
        self
    }

    /// The queue's name and table.
    pub fn queue(&self) -> &Queue {
        &self.queue
    }

    /// The queue's table as the outbox store it is: its [`DeadLetters`](delivery_core::DeadLetters)
    /// (the dead units), [`retain`](SqlStore::retain) (deletes delivered rows),
    /// [`idle`](SqlStore::idle) and the backlog.
    pub fn store(&self) -> &SqlStore<D> {
        &self.store
    }

    /// Creates the table, its indexes (and in PostgreSQL the trigger that wakes consumers) if
    /// missing. Safe at every start, from several processes at once.
    pub async fn migrate(&self) -> Result<(), sqlx::Error> {
        self.store.migrate().await
    }

    /// What [`migrate`](SqlQueue::migrate) runs, for a migration tool of your own.
    pub fn migration(&self) -> String {
        D::outbox_schema(&self.queue.outbox.table)
    }

    /// [`Queue::publish`].
    pub async fn publish(
        &self,
        tx: &mut Transaction<'_, D::Database>,
        unit: &Unit,
    ) -> Result<bool, sqlx::Error> {
        self.queue.publish(tx, unit).await
    }

    /// A consumer's source of the queue's units, for [`Consumer::new`](delivery_core::Consumer::new).
    pub fn source(&self) -> QueueSource<D> {
        QueueSource::new(
            self.store.clone(),
            Arc::from(self.queue.name.as_str()),
            self.settings,
        )
    }
}
