//! `examples/kafka_consumer.rs` run as a child process against a real Kafka-protocol broker (tansu
//! on 127.0.0.1:9092, or `KAFKA_BROKERS`) and PostgreSQL, SIGKILLed mid-effect many times over
//! thousands of units across several partitions. Fails, never skips, when a server is unreachable.
//! The test writes into a schema of its own.
#![cfg(feature = "kafka")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/kafka.rs"]
mod kafka_support;
#[path = "support/process.rs"]
mod process;

use kafka_support::{brokers, declare, headers_at, producer, record, unique_name};
use process::{database_url, example_binary, order, terminate, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use delivery::DeadLetters;
use delivery::kafka::client::message::OwnedHeaders;
use delivery::kafka::client::producer::FutureProducer;
use delivery::kafka::{KafkaDeadLetters, KafkaTopology};
// Schema names below are this test's own (`kafka_<name>_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool, Row};

const PARTITIONS: i32 = 3;

/// The group's session timeout. tansu 0.6 drops a dead member only when a member joins after the
/// dead one's session has expired (Kafka itself rebalances as soon as it expires), so each
/// restart after a kill waits it out first.
const SESSION_TIMEOUT_MS: u64 = 3000;

struct Env {
    topic: String,
    group: String,
    schema: String,
    db: PgPool,
    topology: KafkaTopology,
    binary: PathBuf,
    producer: FutureProducer,
}

impl Env {
    async fn new(name: &str) -> Env {
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
        declare(&topology).await;
        // One unit per record batch: a consumer restarted at a committed offset inside a batch
        // gets nothing from tansu 0.6 (Kafka itself serves the batch that holds it).
        let producer = producer();
        Env {
            binary: tokio::task::spawn_blocking(|| example_binary("kafka_consumer"))
                .await
                .unwrap(),
            topic,
            group,
            schema,
            db,
            topology,
            producer,
        }
    }

    fn start(&self, concurrency: usize, effect_delay_ms: u64) -> Child {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        Command::new(&self.binary)
            .env("KAFKA_BROKERS", brokers())
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

    /// Publishes every `(id, body)` with the id as key and `message-id`, all awaited (`acks=all`).
    async fn publish_all(&self, units: &[(String, String)]) {
        let sends = units.iter().map(|(id, body)| {
            self.producer.send(
                record(&self.topic, id, body.as_str(), OwnedHeaders::new()),
                Duration::from_secs(10),
            )
        });
        for sent in futures_util::future::join_all(sends).await {
            sent.map_err(|(e, _)| e).expect("published with acks=all");
        }
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

    fn dead_letters(&self) -> KafkaDeadLetters {
        KafkaDeadLetters::new(&brokers(), &self.topology)
    }

    async fn cleanup(self) {
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.schema
        )))
        .execute(&self.db)
        .await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    const UNITS: usize = 3000;
    const KILLS: u64 = 10;
    const POISON_EVERY: usize = 100;
    let env = Env::new("crash").await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    let mut units = Vec::with_capacity(UNITS);
    for i in 0..UNITS {
        if i % POISON_EVERY == 50 {
            let id = format!("poison-{i}");
            let body = if i % 200 == 50 {
                "{oops".to_owned()
            } else {
                order(&format!("o-{i}"), "c-x", -1)
            };
            poison.insert((id.clone(), body.clone()));
            units.push((id, body));
            continue;
        }
        let customer = format!("c-{}", i % 37);
        let amount = (i % 100 + 1) as i64;
        *expected.entry(customer.clone()).or_default() += amount;
        units.push((
            format!("m-{i}"),
            order(&format!("o-{i}"), &customer, amount),
        ));
    }
    env.publish_all(&units).await;
    let valid_units = (UNITS - poison.len()) as i64;

    // SIGKILL the consumer at varying points, many times. Each handler pauses 40 ms between its
    // effect's commit and its return (8 at once), so a kill lands on units whose effect is
    // committed and whose offset is not. A kill counts as mid-stream when it found more applied
    // than the previous one (the consumer was working) and valid units still unapplied.
    let mut kills = 0;
    let mut kills_mid_stream = 0;
    let mut applied_at_kills = Vec::new();
    let mut last_applied = 0;
    for round in 0..KILLS {
        let mut child = env.start(8, 40);
        // Joining the group takes a moment; wait until this consumer applies something.
        let before = last_applied;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
            if applied > before || applied >= valid_units || tokio::time::Instant::now() > deadline
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300 + (round * 137) % 700)).await;
        let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(SESSION_TIMEOUT_MS + 500)).await;
        kills += 1;
        if applied > before && applied < valid_units {
            kills_mid_stream += 1;
        }
        applied_at_kills.push(applied);
        last_applied = applied;
    }
    eprintln!(
        "crash run: {kills} SIGKILLs, {kills_mid_stream} mid-stream; applied at each kill: {applied_at_kills:?}"
    );
    assert!(
        kills_mid_stream >= KILLS - 2,
        "the kills must land while the topic is consumed: {kills_mid_stream} of {kills} mid-stream"
    );

    let mut child = env.start(16, 0);
    wait_for(
        "every valid order applied and every poison unit dead-lettered",
        Duration::from_secs(240),
        async || {
            let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
            if applied < valid_units {
                return false;
            }
            let dead: BTreeSet<String> = dead_letters::all(&env.dead_letters())
                .await
                .into_iter()
                .map(|d| d.id().to_string())
                .collect();
            dead.len() >= poison.len()
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    assert_eq!(
        env.scalar("SELECT count(*) FROM $schema.orders").await,
        valid_units,
        "every valid order applied, once"
    );
    assert_eq!(
        env.balances().await,
        expected,
        "every order's amount counted exactly once"
    );
    let dead = dead_letters::all(&env.dead_letters()).await;
    // A kill between a dead-letter publish and the offset's commit leaves a second copy of the
    // same unit: a duplicate in the dead letter, never a loss.
    let found: BTreeSet<(String, String)> = dead
        .iter()
        .map(|d| {
            (
                d.id().to_string(),
                String::from_utf8(d.unit.payload().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found, poison,
        "the dead letter holds exactly the poison units, intact"
    );
    let dead_letter_topic = env.topology.dead_letter_topic_name();
    let mut partitions = BTreeSet::new();
    for d in &dead {
        assert_eq!(d.source, env.topic, "{}", d.id());
        assert!(
            d.unit.stamp().is_some(),
            "the source offset recorded: {}",
            d.id()
        );
        assert!(
            d.dead_lettered_at.is_some(),
            "the record's timestamp: {}",
            d.id()
        );
        let (partition, offset) = d.position.split_once(':').expect("<partition>:<offset>");
        let source_partition = headers_at(
            &dead_letter_topic,
            partition.parse().unwrap(),
            offset.parse().unwrap(),
        )
        .await
        .into_iter()
        .find(|(name, _)| name == delivery::headers::DEAD_LETTER_SOURCE_PARTITION)
        .and_then(|(_, p)| p.parse::<i32>().ok())
        .expect("the source partition recorded");
        assert!((0..PARTITIONS).contains(&source_partition), "{}", d.id());
        partitions.insert(source_partition);
        let expected_reason = if d.unit.payload().starts_with(b"{oops") {
            delivery::ReasonKind::Malformed
        } else {
            delivery::ReasonKind::Rejected
        };
        assert_eq!(d.reason, Some(expected_reason), "{}", d.id());
    }
    let depth = env.dead_letters().count().await.unwrap();
    assert!(
        depth >= 1 && depth <= dead.len() as u64,
        "the dead letter's depth ({depth}) counts its entries ({})",
        dead.len()
    );
    assert!(
        partitions.len() > 1,
        "poison came from several partitions: {partitions:?}"
    );
    eprintln!(
        "crash run: {UNITS} units over {PARTITIONS} partitions, {valid_units} applied once, {} dead-letter entries (depth {depth}) for {} poison units",
        dead.len(),
        poison.len()
    );
    env.cleanup().await;
}
