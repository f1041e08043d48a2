//! `examples/kafka_consumer.rs` as the crash and outage tests run it: a topic of its own with its
//! topology declared, the example started as a child process writing into a PostgreSQL schema of
//! its own, orders published, and what it applied read back. Used with `support/kafka.rs` (as
//! `kafka_support`) and `support/process.rs` (as `process`).
#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use delivery::kafka::client::message::OwnedHeaders;
use delivery::kafka::client::producer::FutureProducer;
use delivery::kafka::{KafkaDeadLetters, KafkaTopology};
// Schema names below are this module's own (`kafka_<name>_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool};

use crate::kafka_support::{declare_at, producer_at, record, unique_name};
use crate::process::{Orders, OrdersDb, Running, database_url, example_binary};

pub const PARTITIONS: i32 = 3;

/// The group's session timeout. tansu 0.6 drops a dead member only when a member joins after the
/// dead one's session has expired (Kafka itself rebalances as soon as it expires), so each
/// restart after a kill waits it out first.
pub const SESSION_TIMEOUT_MS: u64 = 3000;

pub struct Env {
    /// The bootstrap list the example and this module's clients use.
    pub brokers: String,
    pub topic: String,
    pub group: String,
    pub schema: String,
    pub db: PgPool,
    pub topology: KafkaTopology,
    binary: PathBuf,
    producer: FutureProducer,
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
    /// A topic `kafka-{name}-..` of its own at `brokers`, its topology declared, and a schema of
    /// its own.
    pub async fn at(brokers: &str, name: &str) -> Env {
        let topic = unique_name(&format!("kafka-{name}"));
        let group = format!("{topic}-consumer");
        let schema = format!("kafka_{}_{}", name.replace('-', "_"), std::process::id());
        let db = PgPool::connect(&database_url())
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&db)
        .await
        .unwrap();
        // The example's topology, as it declares it from its environment.
        let topology = KafkaTopology::new(&topic, &group).partitions(PARTITIONS);
        declare_at(brokers, &topology).await;
        // One unit per record batch: a consumer restarted at a committed offset inside a batch
        // gets nothing from tansu 0.6 (Kafka itself serves the batch that holds it).
        let producer = producer_at(brokers);
        Env {
            binary: tokio::task::spawn_blocking(|| example_binary("kafka_consumer"))
                .await
                .unwrap(),
            brokers: brokers.to_owned(),
            topic,
            group,
            schema,
            db,
            topology,
            producer,
        }
    }

    pub fn start(&self, concurrency: usize, effect_delay_ms: u64) -> Running {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        Command::new(&self.binary)
            .env("KAFKA_BROKERS", &self.brokers)
            .env(
                "DATABASE_URL",
                format!("{base}{sep}options=-c%20search_path%3D{}", self.schema),
            )
            .env("TOPIC", &self.topic)
            .env("GROUP", &self.group)
            .env("SESSION_TIMEOUT_MS", SESSION_TIMEOUT_MS.to_string())
            .env("PARTITIONS", PARTITIONS.to_string())
            .env("CONCURRENCY", concurrency.to_string())
            .env("EFFECT_DELAY_MS", effect_delay_ms.to_string())
            .env("RUST_LOG", "info")
            // The example logs to stdout.
            .stdout(self.log_file())
            .stderr(Stdio::null())
            .spawn()
            .map(Running)
            .expect("starting the example")
    }

    /// Where the next child's log goes (the system's temporary directory), for a failed run.
    fn log_file(&self) -> std::fs::File {
        use std::sync::atomic::{AtomicU32, Ordering};
        static CHILD: AtomicU32 = AtomicU32::new(0);
        let n = CHILD.fetch_add(1, Ordering::Relaxed);
        let path = std::env::temp_dir().join(format!("{}-{n}.log", self.topic));
        std::fs::File::create(&path).expect("a log file for the child")
    }

    /// Publishes every `(id, body)` with the id as `message-id`, all awaited (`acks=all`), keyed
    /// by the order's customer where the body names one (so one customer's orders share a
    /// partition, and their offsets order them: rule 4), else by the id.
    pub async fn publish_all(&self, units: &[(String, String)]) {
        let customers: Vec<Option<String>> = units
            .iter()
            .map(|(_, body)| {
                let order: serde_json::Value = serde_json::from_str(body).ok()?;
                Some(order.get("customer_id")?.as_str()?.to_owned())
            })
            .collect();
        let sends = units.iter().zip(&customers).map(|((id, body), customer)| {
            let record = record(&self.topic, id, body.as_str(), OwnedHeaders::new());
            let record = match customer {
                Some(customer) => record.key(customer.as_str()),
                None => record,
            };
            self.producer.send(record, Duration::from_secs(10))
        });
        for sent in futures_util::future::join_all(sends).await {
            sent.map_err(|(e, _)| e).expect("published with acks=all");
        }
    }

    pub fn dead_letters(&self) -> KafkaDeadLetters {
        KafkaDeadLetters::new(&self.brokers, &self.topology)
    }

    pub async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
    }
}
