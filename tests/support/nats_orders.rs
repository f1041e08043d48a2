//! The orders contract of `examples/nats_consumer.rs`, driven from tests as a child process
//! against the real NATS JetStream and PostgreSQL: each test gets a stream (`nats-<name>-<pid>`)
//! and a schema (`nats_<name>_<pid>`) of its own.
#![allow(dead_code)] // each test binary uses part of it

use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use delivery::nats::{NatsDeadLetters, NatsTopology};
// Schema names below are this test's own (`nats_<name>_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool};

use crate::process::{Orders, OrdersDb, Running, database_url, example_binary};

pub fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

pub struct Env {
    pub stream: String,
    pub schema: String,
    pub db: PgPool,
    pub topology: NatsTopology,
    binary: PathBuf,
    pub client: async_nats::Client,
    pub context: jetstream::Context,
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
    pub async fn new(name: &str, max_deliver: u32) -> Env {
        let stream = format!("nats-{name}-{}", std::process::id());
        let schema = format!("nats_{}_{}", name.replace('-', "_"), std::process::id());
        let db = PgPool::connect(&database_url())
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&db)
        .await
        .unwrap();
        let client = async_nats::connect(nats_url())
            .await
            .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
        let context = jetstream::new(client.clone());
        // The example's topology, as it declares it from its environment.
        let topology = NatsTopology::new(&stream)
            .max_deliver(max_deliver)
            .ack_wait(Duration::from_secs(2));
        for s in [
            &topology.stream,
            &topology.dead_letter_stream_name(),
            &topology.advisory_stream_name(),
        ] {
            let _ = context.delete_stream(s).await;
        }
        topology.declare(&context).await.unwrap();
        Env {
            binary: tokio::task::spawn_blocking(|| example_binary("nats_consumer"))
                .await
                .unwrap(),
            stream,
            schema,
            db,
            topology,
            client,
            context,
        }
    }

    pub fn start(&self, concurrency: usize, effect_delay_ms: u64) -> Running {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        Command::new(&self.binary)
            .env("NATS_URL", nats_url())
            .env(
                "DATABASE_URL",
                format!("{base}{sep}options=-c%20search_path%3D{}", self.schema),
            )
            .env("STREAM", &self.stream)
            .env("DELIVERY_LIMIT", self.topology.max_deliver.to_string())
            .env("ACK_WAIT_SECS", "2")
            .env("BATCH", "64")
            .env("CONCURRENCY", concurrency.to_string())
            .env("EFFECT_DELAY_MS", effect_delay_ms.to_string())
            .env("SWEEP_SECS", "1")
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Running)
            .expect("starting the example")
    }

    pub async fn publish(&self, id: &str, body: &str) {
        let mut headers = HeaderMap::new();
        headers.insert("Nats-Msg-Id", id);
        let ack = self
            .context
            .publish_with_headers(
                format!("{}.orders", self.stream),
                headers,
                body.to_owned().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
        assert!(!ack.duplicate, "{id} published once");
    }

    pub fn dead_letters(&self) -> NatsDeadLetters {
        NatsDeadLetters::new(self.client.clone(), &self.topology)
    }

    /// Units not yet delivered, and deliveries not yet settled, by the durable consumer.
    pub async fn consumer_backlog(&self) -> (u64, u64) {
        let stream = self.context.get_stream(&self.stream).await.unwrap();
        let info = stream.consumer_info(&self.topology.durable).await.unwrap();
        (info.num_pending, info.num_ack_pending as u64)
    }

    /// `MAX_DELIVERIES` advisories not yet swept.
    pub async fn advisories_waiting(&self) -> u64 {
        let stream = self
            .context
            .get_stream(self.topology.advisory_stream_name())
            .await
            .unwrap();
        stream.cached_info().state.messages
    }

    pub async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
        for s in [
            &self.topology.stream,
            &self.topology.dead_letter_stream_name(),
            &self.topology.advisory_stream_name(),
        ] {
            let _ = self.context.delete_stream(s).await;
        }
    }
}
