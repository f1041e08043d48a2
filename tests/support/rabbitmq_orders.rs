//! The orders contract of `examples/rabbitmq_consumer.rs`, driven from tests as a child process
//! against the real RabbitMQ and PostgreSQL: each test gets its own queue and schema.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use delivery::dead_letter::DeadLetter;
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitTopology};
// Schema names below are this test's own (`rmq_<name>_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool};

use crate::dead_letters;
use crate::process::{Orders, OrdersDb, Running, amqp_url, database_url, example_binary};
use crate::rabbitmq;

pub struct Env {
    pub database_url: String,
    pub queue: String,
    pub schema: String,
    pub db: PgPool,
    pub topology: RabbitTopology,
    pub binary: PathBuf,
    pub publisher: ConfirmedPublisher,
    /// The example's `BATCH_SIZE` (1: one unit per call).
    pub batch_size: usize,
    /// The example's `EFFECT_DELAY_MS`: its pause between a commit and the acknowledgements.
    pub effect_delay_ms: u64,
    /// The stamp each unit id was published with.
    stamps: std::sync::Mutex<std::collections::HashMap<String, u64>>,
}

impl Orders for Env {
    fn tables(&self) -> OrdersDb<'_> {
        OrdersDb::Postgres {
            db: &self.db,
            schema: &self.schema,
        }
    }
}

impl Env {
    pub async fn new(name: &str, delivery_limit: u32) -> Env {
        Env::with_database(name, delivery_limit, database_url()).await
    }

    /// An environment whose effects go to the PostgreSQL at `database_url`.
    pub async fn with_database(name: &str, delivery_limit: u32, database_url: String) -> Env {
        let queue = format!("rmq-{name}-{}", std::process::id());
        let schema = format!("rmq_{}_{}", name.replace('-', "_"), std::process::id());
        let db = PgPool::connect(&database_url)
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {database_url}: {e}"));
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&db)
        .await
        .unwrap();
        let topology = RabbitTopology::new(&queue).delivery_limit(delivery_limit);
        let connection = rabbitmq::fresh(&amqp_url(), &topology).await;
        let _ = connection.close(200, "ok".into()).await;
        Env {
            database_url,
            publisher: ConfirmedPublisher::new(amqp_url()),
            batch_size: 1,
            effect_delay_ms: 0,
            stamps: Default::default(),
            binary: tokio::task::spawn_blocking(|| example_binary("rabbitmq_consumer"))
                .await
                .unwrap(),
            queue,
            schema,
            db,
            topology,
        }
    }

    pub fn child_database_url(&self) -> String {
        let base = &self.database_url;
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{}", self.schema)
    }

    pub fn start(&self, concurrency: usize) -> Running {
        self.start_with(concurrency, Stdio::null())
    }

    /// Starts the example with its log (warnings and errors: one line per returned or
    /// dead-lettered unit) written to `log`.
    pub fn start_with(&self, concurrency: usize, log: impl Into<Stdio>) -> Running {
        self.start_acking(concurrency, "coalesced", log)
    }

    /// Starts the example acknowledging in `acks` mode (`coalesced` or `per-unit`), in batches
    /// of [`batch_size`](Env::batch_size) units (prefetching twice as many, at least 64).
    pub fn start_acking(&self, concurrency: usize, acks: &str, log: impl Into<Stdio>) -> Running {
        Command::new(&self.binary)
            .env("ACKS", acks)
            .env("AMQP_URL", amqp_url())
            .env("DATABASE_URL", self.child_database_url())
            .env("QUEUE", &self.queue)
            .env("DELIVERY_LIMIT", self.topology.delivery_limit.to_string())
            .env("PREFETCH", (2 * self.batch_size).max(64).to_string())
            .env("BATCH_SIZE", self.batch_size.to_string())
            .env("EFFECT_DELAY_MS", self.effect_delay_ms.to_string())
            .env("CONCURRENCY", concurrency.to_string())
            .env("RUST_LOG", "warn")
            .stdout(log)
            .stderr(Stdio::null())
            .spawn()
            .map(Running)
            .expect("starting the example")
    }

    /// Publishes `body` as the unit `id`, stamped as its producer would (rule 4): in the order of
    /// first publication, the same stamp for every publication of one id.
    pub async fn publish(&self, id: &str, body: &str) {
        let stamp = {
            let mut stamps = self.stamps.lock().unwrap();
            let next = stamps.len() as u64 + 1;
            *stamps.entry(id.to_owned()).or_insert(next)
        };
        self.publish_unit(
            delivery::Unit::new(id, body.to_owned()).with_stamp(delivery::Stamp(stamp)),
        )
        .await;
    }

    /// Publishes `unit` as it is (with no stamp if it has none), confirmed.
    pub async fn publish_unit(&self, unit: delivery::Unit) {
        let body = unit.payload().clone();
        self.publisher
            .publish(&self.queue, &body, delivery::rabbitmq::properties_of(&unit))
            .await
            .unwrap();
    }

    pub fn dead_letters(&self) -> RabbitDeadLetters {
        RabbitDeadLetters::new(amqp_url(), &self.topology)
    }

    /// Every record in the dead letter.
    pub async fn all_dead(&self) -> Vec<DeadLetter> {
        dead_letters::all(&self.dead_letters()).await
    }

    pub async fn queue_depth(&self) -> u64 {
        self.queue_counts().await.0
    }

    /// Messages ready in the queue, and consumers subscribed to it.
    pub async fn queue_counts(&self) -> (u64, u64) {
        let connection = rabbitmq::connect(&amqp_url()).await;
        let counts = rabbitmq::queue_counts(&connection, &self.queue).await;
        let _ = connection.close(200, "ok".into()).await;
        counts
    }

    pub async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
        let connection = rabbitmq::connect(&amqp_url()).await;
        rabbitmq::delete_queues(
            &connection,
            [
                self.topology.queue.as_str(),
                &self.topology.dead_letter_queue_name(),
            ],
        )
        .await;
        self.publisher.close().await;
    }
}

pub fn by_id(dead: &[DeadLetter]) -> BTreeMap<String, &DeadLetter> {
    dead.iter().map(|d| (d.id().to_string(), d)).collect()
}
