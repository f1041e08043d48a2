//! `examples/nats_consumer.rs` run as a child process against the real NATS JetStream and
//! PostgreSQL, SIGKILLed mid-effect many times over thousands of units. Fails, never skips, when a
//! server is unreachable. The test writes into a schema of its own.
#![cfg(feature = "nats")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream;
use delivery::nats::{NatsDeadLetters, NatsTopology};
// Schema names below are this test's own (`nats_<name>_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool, Row};

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The example's binary, built on demand into this test's own target directory.
fn example_binary() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    let profile_dir = exe.parent().unwrap().parent().unwrap().to_path_buf();
    let target_dir = profile_dir.parent().unwrap().to_path_buf();
    let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".into());
    let status = Command::new(cargo)
        .args([
            "build",
            "--quiet",
            "--features",
            "nats",
            "--example",
            "nats_consumer",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("running cargo build for the example");
    assert!(
        status.success(),
        "building examples/nats_consumer.rs failed"
    );
    profile_dir.join("examples").join("nats_consumer")
}

struct Env {
    stream: String,
    schema: String,
    db: PgPool,
    topology: NatsTopology,
    binary: PathBuf,
    client: async_nats::Client,
    context: jetstream::Context,
}

impl Env {
    async fn new(name: &str, max_deliver: u32) -> Env {
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
        for s in [&topology.stream, &topology.dead_letter_stream_name()] {
            let _ = context.delete_stream(s).await;
        }
        topology.declare(&context).await.unwrap();
        Env {
            binary: tokio::task::spawn_blocking(example_binary).await.unwrap(),
            stream,
            schema,
            db,
            topology,
            client,
            context,
        }
    }

    fn start(&self, concurrency: usize) -> Child {
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
            .env("RUST_LOG", "error")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the example")
    }

    async fn publish(&self, id: &str, body: &str) {
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

    async fn scalar(&self, sql: &str) -> i64 {
        let sql = sql.replace("$schema", &self.schema);
        match sqlx::query(AssertSqlSafe(sql)).fetch_one(&self.db).await {
            Ok(row) => row.try_get::<Option<i64>, _>(0).unwrap().unwrap_or(0),
            // The example has not created its tables yet.
            Err(_) => -1,
        }
    }

    async fn balances(&self) -> BTreeMap<String, i64> {
        sqlx::query(AssertSqlSafe(format!(
            "SELECT customer_id, total_cents FROM {}.nats_balances",
            self.schema
        )))
        .fetch_all(&self.db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
        .collect()
    }

    fn dead_letters(&self) -> NatsDeadLetters {
        NatsDeadLetters::new(self.client.clone(), &self.topology)
    }

    /// Units not yet delivered, and deliveries not yet settled, by the durable consumer.
    async fn consumer_backlog(&self) -> (u64, u64) {
        let stream = self.context.get_stream(&self.stream).await.unwrap();
        let info = stream.consumer_info(&self.topology.durable).await.unwrap();
        (info.num_pending, info.num_ack_pending as u64)
    }

    async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
        for s in [
            &self.topology.stream,
            &self.topology.dead_letter_stream_name(),
        ] {
            let _ = self.context.delete_stream(s).await;
        }
    }
}

async fn wait_for(what: &str, patience: Duration, mut check: impl AsyncFnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !check().await {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

fn terminate(child: &mut Child) -> std::process::ExitStatus {
    let status = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return status;
        }
        assert!(
            Instant::now() < deadline,
            "the example did not stop within 20 s of SIGTERM"
        );
        std::thread::sleep(Duration::from_millis(50));
    }
}

fn order(id: &str, customer: &str, amount: i64) -> String {
    format!(r#"{{"order_id":"{id}","customer_id":"{customer}","amount_cents":{amount}}}"#)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    const UNITS: usize = 3000;
    const POISON_EVERY: usize = 100;
    // A bound far above what the kills below can use up, so every valid unit is applied; a unit
    // whose last delivery dies with its consumer is not delivered again (see the module docs).
    let env = Env::new("crash", 10).await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    for i in 0..UNITS {
        if i % POISON_EVERY == 50 {
            let id = format!("poison-{i}");
            let body = if i % 200 == 50 {
                "{oops".to_owned()
            } else {
                order(&format!("o-{i}"), "c-x", -1)
            };
            env.publish(&id, &body).await;
            poison.insert((id, body));
            continue;
        }
        let customer = format!("c-{}", i % 37);
        let amount = (i % 100 + 1) as i64;
        *expected.entry(customer.clone()).or_default() += amount;
        env.publish(
            &format!("m-{i}"),
            &order(&format!("o-{i}"), &customer, amount),
        )
        .await;
    }
    let valid_units = (UNITS - poison.len()) as i64;

    // SIGKILL the consumer at varying points, many times, while handlers are mid-effect.
    let mut kills = 0;
    for round in 0..12u64 {
        let mut child = env.start(16);
        tokio::time::sleep(Duration::from_millis(400 + (round * 137) % 700)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let applied_before_final = env.scalar("SELECT count(*) FROM $schema.nats_orders").await;

    let mut child = env.start(16);
    wait_for(
        "every valid order applied and the poison dead-lettered",
        Duration::from_secs(180),
        async || {
            env.scalar("SELECT count(*) FROM $schema.nats_orders").await == valid_units
                && env.dead_letters().count().await.unwrap() >= poison.len() as u64
                && env.consumer_backlog().await == (0, 0)
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    assert_eq!(
        env.balances().await,
        expected,
        "every order's amount counted exactly once"
    );
    assert_eq!(
        env.scalar("SELECT count(*) FROM $schema.nats_orders").await,
        valid_units
    );
    let dead = env.dead_letters().list().await.unwrap();
    let found: BTreeSet<(String, String)> = dead
        .iter()
        .map(|d| {
            (
                d.id.to_string(),
                String::from_utf8(d.payload.to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found, poison,
        "the dead letter holds exactly the poison units, intact"
    );
    eprintln!(
        "crash run: {UNITS} units, {kills} SIGKILLs, {applied_before_final} applied before the final consumer, \
         {} dead-letter entries for {} poison units",
        dead.len(),
        poison.len()
    );
    env.cleanup().await;
}
