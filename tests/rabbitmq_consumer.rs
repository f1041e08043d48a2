//! `examples/rabbitmq_consumer.rs` run as a child process against the real RabbitMQ and
//! PostgreSQL: its contract, and SIGKILL mid-effect many times over thousands of units.
//! Fails, never skips, when a server is unreachable. Each test writes into a schema of its own.
#![cfg(feature = "lapin")]

use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delivery::ReasonKind;
use delivery::lapin::options::QueueDeleteOptions;
use delivery::lapin::{BasicProperties, Connection};
use delivery::rabbitmq::{ConfirmedPublisher, DeadLetterRecord, RabbitDeadLetters, RabbitTopology};
// Schema names below are this test's own (`rmq_<name>_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool, Row};

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
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
            "lapin",
            "--example",
            "rabbitmq_consumer",
        ])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .env("CARGO_TARGET_DIR", &target_dir)
        .status()
        .expect("running cargo build for the example");
    assert!(
        status.success(),
        "building examples/rabbitmq_consumer.rs failed"
    );
    profile_dir.join("examples").join("rabbitmq_consumer")
}

struct Env {
    queue: String,
    schema: String,
    db: PgPool,
    topology: RabbitTopology,
    binary: PathBuf,
    publisher: ConfirmedPublisher,
}

impl Env {
    async fn new(name: &str, delivery_limit: u32) -> Env {
        let queue = format!("rmq-{name}-{}", std::process::id());
        let schema = format!("rmq_{}_{}", name.replace('-', "_"), std::process::id());
        let db = PgPool::connect(&database_url())
            .await
            .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&db)
        .await
        .unwrap();
        let topology = RabbitTopology::new(&queue).delivery_limit(delivery_limit);
        let connection = Connection::connect(&amqp_url(), Default::default())
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {}: {e}", amqp_url()));
        for q in [topology.queue.clone(), topology.dead_letter_queue_name()] {
            let ch = connection.create_channel().await.unwrap();
            let _ = ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        let _ = connection.close(200, "ok".into()).await;
        delivery::rabbitmq::declare(&amqp_url(), &topology)
            .await
            .unwrap();
        Env {
            publisher: ConfirmedPublisher::new(amqp_url()),
            binary: tokio::task::spawn_blocking(example_binary).await.unwrap(),
            queue,
            schema,
            db,
            topology,
        }
    }

    fn child_database_url(&self) -> String {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{}", self.schema)
    }

    fn start(&self, concurrency: usize) -> Child {
        Command::new(&self.binary)
            .env("AMQP_URL", amqp_url())
            .env("DATABASE_URL", self.child_database_url())
            .env("QUEUE", &self.queue)
            .env("DELIVERY_LIMIT", self.topology.delivery_limit.to_string())
            .env("PREFETCH", "64")
            .env("CONCURRENCY", concurrency.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the example")
    }

    async fn publish(&self, id: &str, body: &str) {
        self.publisher
            .publish(
                &self.queue,
                body.as_bytes(),
                BasicProperties::default()
                    .with_message_id(id.into())
                    .with_delivery_mode(2),
            )
            .await
            .unwrap();
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
            "SELECT customer_id, total_cents FROM {}.balances",
            self.schema
        )))
        .fetch_all(&self.db)
        .await
        .unwrap()
        .into_iter()
        .map(|r| (r.get::<String, _>(0), r.get::<i64, _>(1)))
        .collect()
    }

    fn dead_letters(&self) -> RabbitDeadLetters {
        RabbitDeadLetters::new(amqp_url(), &self.topology)
    }

    async fn queue_depth(&self) -> u64 {
        self.queue_counts().await.0
    }

    /// Messages ready in the queue, and consumers subscribed to it.
    async fn queue_counts(&self) -> (u64, u64) {
        let connection = Connection::connect(&amqp_url(), Default::default())
            .await
            .unwrap();
        let ch = connection.create_channel().await.unwrap();
        let q = ch
            .queue_declare(
                self.queue.as_str().into(),
                delivery::lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                Default::default(),
            )
            .await
            .unwrap();
        let _ = connection.close(200, "ok".into()).await;
        (u64::from(q.message_count()), u64::from(q.consumer_count()))
    }

    async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
        let connection = Connection::connect(&amqp_url(), Default::default())
            .await
            .unwrap();
        for q in [
            self.topology.queue.clone(),
            self.topology.dead_letter_queue_name(),
        ] {
            let ch = connection.create_channel().await.unwrap();
            let _ = ch
                .queue_delete(q.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        self.publisher.close().await;
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

fn by_id(dead: &[DeadLetterRecord]) -> BTreeMap<String, &DeadLetterRecord> {
    dead.iter().map(|d| (d.id.to_string(), d)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_applies_orders_once_and_dead_letters_poison() {
    let env = Env::new("contract", 5).await;
    let mut child = env.start(8);
    env.publish("m-1", &order("o-1", "c-1", 100)).await;
    env.publish("m-2", &order("o-2", "c-1", 50)).await;
    env.publish("m-1", &order("o-1", "c-1", 100)).await; // a redelivery of the same unit
    env.publish("m-3", &order("o-3", "c-2", 7)).await;
    env.publish("bad-json", "{not json").await;
    env.publish("missing-field", r#"{"order_id":"o-9","customer_id":"c-9"}"#)
        .await;
    env.publish("negative", &order("o-neg", "c-3", -5)).await;

    wait_for(
        "3 orders and 3 dead letters",
        Duration::from_secs(60),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == 3
                && env.dead_letters().count().await.unwrap() == 3
        },
    )
    .await;
    assert_eq!(
        env.balances().await,
        BTreeMap::from([("c-1".into(), 150), ("c-2".into(), 7)])
    );
    let dead = env.dead_letters().peek(100).await.unwrap();
    let dead = by_id(&dead);
    assert_eq!(dead["bad-json"].reason, Some(ReasonKind::Malformed));
    assert_eq!(dead["bad-json"].body.as_ref(), b"{not json", "intact");
    assert_eq!(
        dead["bad-json"].delivery_count,
        Some(1),
        "dead-lettered directly"
    );
    assert_eq!(dead["bad-json"].source.as_deref(), Some(env.queue.as_str()));
    assert_eq!(dead["missing-field"].reason, Some(ReasonKind::Malformed));
    assert_eq!(dead["negative"].reason, Some(ReasonKind::Rejected));
    assert_eq!(dead["negative"].delivery_count, Some(1));
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        3,
        "peeking consumed nothing"
    );

    let status = terminate(&mut child);
    assert!(
        status.success(),
        "graceful shutdown on SIGTERM exits 0: {status:?}"
    );
    assert_eq!(env.queue_depth().await, 0);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    const UNITS: usize = 3000;
    const POISON_EVERY: usize = 100;
    let env = Env::new("crash", 5).await;
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

    // Kill the consumer with SIGKILL at varying points, many times, while handlers are mid-effect.
    let mut kills = 0;
    for round in 0..12u64 {
        let mut child = env.start(16);
        tokio::time::sleep(Duration::from_millis(400 + (round * 137) % 700)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let applied_before_final = env.scalar("SELECT count(*) FROM $schema.orders").await;

    let mut child = env.start(16);
    wait_for(
        "every valid order applied and the poison dead-lettered",
        Duration::from_secs(180),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == valid_units
                && env.dead_letters().count().await.unwrap() >= poison.len() as u64
                // Drained, and by the final consumer: it is subscribed, so it is past start-up.
                && env.queue_counts().await == (0, 1)
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
        env.scalar("SELECT count(*) FROM $schema.orders").await,
        valid_units
    );
    let dead = env.dead_letters().peek(usize::MAX).await.unwrap();
    let found: BTreeSet<(String, String)> = dead
        .iter()
        .map(|d| {
            (
                d.id.to_string(),
                String::from_utf8(d.body.to_vec()).unwrap(),
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
