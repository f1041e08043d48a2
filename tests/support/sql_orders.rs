//! The orders contract of `examples/sql_consumer.rs`, driven from tests as a child process,
//! against a real PostgreSQL or a SQLite file: each test gets a queue of its own, and a schema of
//! its own in PostgreSQL (`sql_<name>_<pid>`, the example's tables and its queue's table in it
//! through the `search_path` of its `DATABASE_URL`) or a directory of its own holding the SQLite
//! file (`delivery-sql-<name>-<pid>` in the temporary directory).
#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use delivery::Unit;
use delivery::dead_letter::{DeadLetter, DeadLetters};
use delivery::queue::{PgQueue, Queue};
// From `delivery-sqlite`, a dev-dependency of the workspace, so this file builds without the
// feature `sqlite` (the example needs it to open a SQLite file: the SQLite tests do).
use delivery_sqlite::SqliteQueue;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode};
// Schema and table names below are this test's own, never input.
use sqlx::{AssertSqlSafe, Connection, PgPool, QueryBuilder, SqliteConnection, SqlitePool};

use crate::dead_letters;
use crate::process::{Orders, OrdersDb, Running, database_url, example_binary, in_schema};

pub struct Env {
    /// The queue's name: the units' `topic`, the dead letters' source.
    pub name: String,
    /// Where the queue and the example's tables are.
    db: Db,
    pub delivery_limit: u32,
    /// How long a unit claimed by a consumer stays invisible to the others (`VISIBILITY_MS`).
    pub visibility_ms: u64,
    /// How long a statement of the example waits for a lock on its SQLite file
    /// (`BUSY_TIMEOUT_MS`; its default when `None`).
    pub busy_timeout_ms: Option<u64>,
    binary: PathBuf,
    /// Where the example's log goes (appended by each run).
    log: PathBuf,
}

/// Where a test's queue and the example's tables are.
enum Db {
    Postgres {
        /// The server's URL, without the schema.
        database_url: String,
        schema: String,
        /// Sessions in the test's schema (its `search_path`), as the example's are.
        pool: PgPool,
        /// The queue, as a producer in the test's schema publishes to it.
        queue: PgQueue,
    },
    Sqlite {
        /// The test's own directory, the file in it.
        dir: PathBuf,
        file: PathBuf,
        pool: SqlitePool,
        queue: SqliteQueue,
    },
}

impl Orders for Env {
    fn tables(&self) -> OrdersDb<'_> {
        match &self.db {
            Db::Postgres { pool, schema, .. } => OrdersDb::Postgres { db: pool, schema },
            Db::Sqlite { pool, .. } => OrdersDb::Sqlite(pool),
        }
    }
}

impl Env {
    /// An environment on the PostgreSQL at `DATABASE_URL` (default: the local one).
    pub async fn new(name: &str, delivery_limit: u32) -> Env {
        Env::with_database(name, delivery_limit, database_url()).await
    }

    /// An environment on the PostgreSQL at `database_url`: a fresh schema, the queue's table
    /// made in it.
    pub async fn with_database(name: &str, delivery_limit: u32, database_url: String) -> Env {
        let pid = std::process::id();
        let schema = format!("sql_{}_{pid}", name.replace('-', "_"));
        let pool = PgPool::connect(&in_schema(&database_url, &schema))
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {database_url}: {e}"));
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&pool)
        .await
        .unwrap();
        let queue_name = format!("sql-{name}-{pid}");
        let queue: PgQueue = Queue::new(&queue_name).postgres(pool.clone());
        queue.migrate().await.unwrap();
        let db = Db::Postgres {
            database_url,
            schema,
            pool,
            queue,
        };
        Env::in_db(queue_name, db, delivery_limit).await
    }

    /// An environment on a fresh SQLite file in a directory of its own, the queue's table made
    /// in it.
    pub async fn sqlite(name: &str, delivery_limit: u32) -> Env {
        let pid = std::process::id();
        let dir = std::env::temp_dir().join(format!("delivery-sql-{name}-{pid}"));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("orders.db");
        let pool = SqlitePool::connect_with(sqlite_options(&file, Duration::from_secs(5)))
            .await
            .unwrap_or_else(|e| panic!("opening {}: {e}", file.display()));
        let queue_name = format!("sql-{name}-{pid}");
        let queue: SqliteQueue = Queue::new(&queue_name).sqlite(pool.clone());
        queue.migrate().await.unwrap();
        let db = Db::Sqlite {
            dir,
            file,
            pool,
            queue,
        };
        Env::in_db(queue_name, db, delivery_limit).await
    }

    async fn in_db(name: String, db: Db, delivery_limit: u32) -> Env {
        let log = std::env::temp_dir().join(format!("delivery-{name}.log"));
        let _ = std::fs::remove_file(&log);
        Env {
            binary: tokio::task::spawn_blocking(|| example_binary("sql_consumer"))
                .await
                .unwrap(),
            name,
            db,
            delivery_limit,
            visibility_ms: 30_000,
            busy_timeout_ms: None,
            log,
        }
    }

    /// The example's `DATABASE_URL`.
    fn url(&self) -> String {
        match &self.db {
            Db::Postgres {
                database_url,
                schema,
                ..
            } => in_schema(database_url, schema),
            Db::Sqlite { file, .. } => format!("sqlite://{}", file.display()),
        }
    }

    /// The queue's table.
    pub fn table(&self) -> &str {
        match &self.db {
            Db::Postgres { queue, .. } => queue.queue().table_name(),
            Db::Sqlite { queue, .. } => queue.queue().table_name(),
        }
    }

    /// Starts the example: `concurrency` handlers, each pausing `effect_delay_ms` between its
    /// effect and the commit of its unit's transaction (which holds the acknowledgement).
    pub fn start(&self, concurrency: usize, effect_delay_ms: u64) -> Running {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        let mut command = Command::new(&self.binary);
        if let Some(ms) = self.busy_timeout_ms {
            command.env("BUSY_TIMEOUT_MS", ms.to_string());
        }
        command
            .env("DATABASE_URL", self.url())
            .env("QUEUE", &self.name)
            .env("DELIVERY_LIMIT", self.delivery_limit.to_string())
            .env("BATCH", "32")
            .env("CONCURRENCY", concurrency.to_string())
            .env("VISIBILITY_MS", self.visibility_ms.to_string())
            .env("EFFECT_DELAY_MS", effect_delay_ms.to_string())
            .env("RUST_LOG", "warn")
            .env("NO_COLOR", "1")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .map(Running)
            .expect("starting the example")
    }

    /// The file the example's runs log their warnings and errors to (kept when a test fails).
    pub fn log(&self) -> &std::path::Path {
        &self.log
    }

    /// Publishes `body` as the unit `id` with `Queue::publish`, in a transaction of its own:
    /// `false` if a unit with that id was already in the queue.
    pub async fn publish(&self, id: &str, body: impl Into<Vec<u8>>) -> bool {
        self.publish_all([(id.to_owned(), body.into())]).await[0]
    }

    /// Publishes each `(id, body)` in order, up to a thousand in a transaction: whether each was
    /// new to the queue.
    pub async fn publish_all(
        &self,
        units: impl IntoIterator<Item = (String, Vec<u8>)>,
    ) -> Vec<bool> {
        let units: Vec<Unit> = units
            .into_iter()
            .map(|(id, body)| Unit::new(id, body))
            .collect();
        let mut new = Vec::with_capacity(units.len());
        for chunk in units.chunks(1000) {
            match &self.db {
                Db::Postgres { pool, queue, .. } => {
                    let mut tx = pool.begin().await.unwrap();
                    for unit in chunk {
                        new.push(queue.publish(&mut tx, unit).await.unwrap());
                    }
                    tx.commit().await.unwrap();
                }
                Db::Sqlite { pool, queue, .. } => {
                    let mut tx = pool.begin().await.unwrap();
                    for unit in chunk {
                        new.push(queue.publish(&mut tx, unit).await.unwrap());
                    }
                    tx.commit().await.unwrap();
                }
            }
        }
        new
    }

    /// Enqueues as any producer can, without the library: a plain `INSERT` of the row.
    pub async fn insert(&self, id: &str, body: &str) {
        self.insert_all([(id.to_owned(), body.as_bytes().to_vec())])
            .await;
    }

    /// Enqueues each `(id, body)` in order with plain `INSERT`s, a thousand rows a statement
    /// (20 000 units in a second, where a statement per unit takes half a minute on a loaded
    /// machine): the rows' sequence, the units' stamps, follows the order given. Every id must be
    /// new to the queue.
    pub async fn insert_all(&self, units: impl IntoIterator<Item = (String, Vec<u8>)>) {
        let units: Vec<_> = units.into_iter().collect();
        match &self.db {
            Db::Postgres { pool, .. } => {
                let sql = format!(
                    "INSERT INTO {} (id, topic, payload) \
                     SELECT id, $3, payload FROM UNNEST($1::text[], $2::bytea[]) WITH ORDINALITY \
                       AS u(id, payload, n) ORDER BY n",
                    self.table()
                );
                for chunk in units.chunks(1000) {
                    let (ids, bodies): (Vec<&str>, Vec<&[u8]>) = chunk
                        .iter()
                        .map(|(id, body)| (id.as_str(), body.as_slice()))
                        .unzip();
                    let inserted = sqlx::query(AssertSqlSafe(sql.as_str()))
                        .bind(ids)
                        .bind(bodies)
                        .bind(&self.name)
                        .execute(pool)
                        .await
                        .unwrap()
                        .rows_affected();
                    assert_eq!(inserted, chunk.len() as u64);
                }
            }
            Db::Sqlite { pool, .. } => {
                let mut tx = pool.begin().await.unwrap();
                for chunk in units.chunks(1000) {
                    let mut insert = QueryBuilder::new(format!(
                        "INSERT INTO {} (id, topic, payload) ",
                        self.table()
                    ));
                    insert.push_values(chunk, |mut row, (id, body)| {
                        row.push_bind(id).push_bind(&self.name).push_bind(body);
                    });
                    let inserted = insert.build().execute(&mut *tx).await.unwrap();
                    assert_eq!(inserted.rows_affected(), chunk.len() as u64);
                }
                tx.commit().await.unwrap();
            }
        }
    }

    /// Rows of the queue's table with `status` (`pending`, `delivered`, `dead`); `-1` while the
    /// database does not answer.
    pub async fn rows(&self, status: &str) -> i64 {
        self.scalar(&format!(
            "SELECT count(*) FROM $schema.{} WHERE status = '{status}'",
            self.table()
        ))
        .await
    }

    /// How many units the queue's dead letter holds (its `dead` rows), through `DeadLetters`.
    pub async fn dead_count(&self) -> u64 {
        match &self.db {
            Db::Postgres { queue, .. } => queue.store().count().await.unwrap(),
            Db::Sqlite { queue, .. } => queue.store().count().await.unwrap(),
        }
    }

    /// Every record in the dead letter, through `DeadLetters`.
    pub async fn all_dead(&self) -> Vec<DeadLetter> {
        match &self.db {
            Db::Postgres { queue, .. } => dead_letters::all(queue.store()).await,
            Db::Sqlite { queue, .. } => dead_letters::all(queue.store()).await,
        }
    }

    /// SQLite: another connection takes the file with `BEGIN EXCLUSIVE` (waiting for the
    /// transaction in progress, if any), and holds it until [`Lock::release`]: no other
    /// connection can write meanwhile, the example's claims and transactions included, which
    /// wait and then fail with `SQLITE_BUSY`. (Readers in WAL mode still read the last commit.)
    ///
    /// # Panics
    /// In PostgreSQL.
    pub async fn lock(&self) -> Lock {
        let Db::Sqlite { file, .. } = &self.db else {
            panic!("a lock on the file is SQLite's outage");
        };
        // However busy the example keeps the write lock, this one gets it in the end.
        let mut conn =
            SqliteConnection::connect_with(&sqlite_options(file, Duration::from_secs(60)))
                .await
                .unwrap();
        sqlx::raw_sql("BEGIN EXCLUSIVE")
            .execute(&mut conn)
            .await
            .unwrap();
        Lock(conn)
    }

    pub async fn cleanup(self) {
        match self.db {
            Db::Postgres { pool, schema, .. } => {
                let _ = sqlx::raw_sql(AssertSqlSafe(format!(
                    "DROP SCHEMA IF EXISTS {schema} CASCADE"
                )))
                .execute(&pool)
                .await;
            }
            Db::Sqlite { pool, dir, .. } => {
                pool.close().await;
                let _ = std::fs::remove_dir_all(dir);
            }
        }
        let _ = std::fs::remove_file(&self.log);
    }
}

/// A SQLite file as the example opens it: WAL, waiting up to `busy` for a lock.
fn sqlite_options(file: &std::path::Path, busy: Duration) -> SqliteConnectOptions {
    SqliteConnectOptions::new()
        .filename(file)
        .create_if_missing(true)
        .journal_mode(SqliteJournalMode::Wal)
        .busy_timeout(busy)
}

/// A SQLite file held with `BEGIN EXCLUSIVE` ([`Env::lock`]).
pub struct Lock(SqliteConnection);

impl Lock {
    /// Ends the transaction (it wrote nothing) and closes the connection: the file is free.
    pub async fn release(mut self) {
        sqlx::raw_sql("ROLLBACK")
            .execute(&mut self.0)
            .await
            .unwrap();
        self.0.close().await.unwrap();
    }
}
