//! The orders contract of `examples/sql_consumer.rs`, driven from tests as a child process
//! against a real PostgreSQL: each test gets a queue and a schema of its own (`sql_<name>_<pid>`,
//! the example's tables and its queue's table in it through the `search_path` of its
//! `DATABASE_URL`).
#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use delivery::Unit;
use delivery::dead_letter::DeadLetter;
use delivery::outbox::PgStore;
use delivery::queue::{PgQueue, Queue};
// Schema and table names below are this test's own, never input.
use sqlx::{AssertSqlSafe, PgPool};

use crate::dead_letters;
use crate::process::{Orders, OrdersDb, database_url, example_binary, in_schema};

pub struct Env {
    /// The server's URL, without the schema.
    pub database_url: String,
    /// The queue's name: the units' `topic`, the dead letters' source.
    pub name: String,
    pub schema: String,
    /// Sessions in the test's schema (its `search_path`), as the example's are.
    pub db: PgPool,
    /// The queue, as a producer in the test's schema publishes to it.
    pub queue: PgQueue,
    pub delivery_limit: u32,
    /// How long a unit claimed by a consumer stays invisible to the others (`VISIBILITY_MS`).
    pub visibility_ms: u64,
    binary: PathBuf,
    /// Where the example's log goes (appended by each run).
    log: PathBuf,
}

impl Orders for Env {
    fn tables(&self) -> OrdersDb<'_> {
        OrdersDb {
            db: &self.db,
            schema: &self.schema,
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
        let queue_name = format!("sql-{name}-{pid}");
        let schema = format!("sql_{}_{pid}", name.replace('-', "_"));
        let db = PgPool::connect(&in_schema(&database_url, &schema))
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {database_url}: {e}"));
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&db)
        .await
        .unwrap();
        let queue: PgQueue = Queue::new(&queue_name).postgres(db.clone());
        queue.migrate().await.unwrap();
        let log = std::env::temp_dir().join(format!("delivery-{queue_name}.log"));
        let _ = std::fs::remove_file(&log);
        Env {
            binary: tokio::task::spawn_blocking(|| example_binary("sql_consumer"))
                .await
                .unwrap(),
            database_url,
            name: queue_name,
            schema,
            db,
            queue,
            delivery_limit,
            visibility_ms: 30_000,
            log,
        }
    }

    /// Starts the example: `concurrency` handlers, each pausing `effect_delay_ms` between its
    /// effect and the commit of its unit's transaction (which holds the acknowledgement).
    pub fn start(&self, concurrency: usize, effect_delay_ms: u64) -> Child {
        let log = std::fs::OpenOptions::new()
            .create(true)
            .append(true)
            .open(&self.log)
            .unwrap();
        Command::new(&self.binary)
            .env("DATABASE_URL", in_schema(&self.database_url, &self.schema))
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
        let units: Vec<_> = units.into_iter().collect();
        let mut new = Vec::with_capacity(units.len());
        for chunk in units.chunks(1000) {
            let mut tx = self.db.begin().await.unwrap();
            for (id, body) in chunk {
                let unit = Unit::new(id.as_str(), body.clone());
                new.push(self.queue.publish(&mut tx, &unit).await.unwrap());
            }
            tx.commit().await.unwrap();
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
        let sql = format!(
            "INSERT INTO {} (id, topic, payload) \
             SELECT id, $3, payload FROM UNNEST($1::text[], $2::bytea[]) WITH ORDINALITY \
               AS u(id, payload, n) ORDER BY n",
            self.queue.queue().table_name()
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
                .execute(&self.db)
                .await
                .unwrap()
                .rows_affected();
            assert_eq!(inserted, chunk.len() as u64);
        }
    }

    /// Rows of the queue's table with `status` (`pending`, `delivered`, `dead`); `-1` while the
    /// database does not answer.
    pub async fn rows(&self, status: &str) -> i64 {
        self.scalar(&format!(
            "SELECT count(*) FROM $schema.{} WHERE status = '{status}'",
            self.queue.queue().table_name()
        ))
        .await
    }

    /// The queue's dead letter: its `dead` rows.
    pub fn dead_letters(&self) -> &PgStore {
        self.queue.store()
    }

    /// Every record in the dead letter.
    pub async fn all_dead(&self) -> Vec<DeadLetter> {
        dead_letters::all(self.dead_letters()).await
    }

    pub async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
        let _ = std::fs::remove_file(&self.log);
    }
}
