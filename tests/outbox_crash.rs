//! `examples/outbox_relay.rs` run as a child process against the real PostgreSQL and RabbitMQ,
//! SIGKILLed many times while it relays — between publishes and their marks — then run to the end:
//! every record is marked delivered and reached `orders.events.audit` at least once, every copy
//! carrying the record's id as `message_id`. Fails, never skips, when a server is unreachable.
#![cfg(all(feature = "postgres", feature = "lapin"))]

#[path = "support/process.rs"]
mod process;

use process::{amqp_url, database_url, example_binary};
use std::collections::{BTreeMap, BTreeSet};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};

use delivery::lapin::Connection;
use delivery::lapin::options::{BasicGetOptions, QueueDeleteOptions};
// Schema names below are this test's own (`outbox_crash_<pid>`), never input.
use sqlx::{AssertSqlSafe, PgPool};

const RECORDS: i64 = 3000;
const KILLS: usize = 12;
const QUEUE: &str = "orders.events.audit";

struct Env {
    binary: PathBuf,
    schema: String,
    db: PgPool,
}

impl Env {
    fn child_database_url(&self) -> String {
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        format!("{base}{sep}options=-c%20search_path%3D{}", self.schema)
    }

    fn command(&self) -> Command {
        let mut command = Command::new(&self.binary);
        command
            .env("AMQP_URL", amqp_url())
            .env("DATABASE_URL", self.child_database_url())
            .env("WINDOW", "64")
            .env("BATCH", "64")
            // Short, so the records a killed relay held are claimed again soon.
            .env("LEASE_MS", "1500")
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null());
        command
    }

    fn start(&self) -> Child {
        self.command().spawn().expect("starting the example")
    }

    async fn count(&self, status: &str) -> i64 {
        let sql = format!(
            "SELECT count(*) FROM {}.delivery_outbox WHERE status = $1",
            self.schema
        );
        sqlx::query_scalar(AssertSqlSafe(sql))
            .bind(status)
            .fetch_one(&self.db)
            .await
            .unwrap()
    }

    async fn wait_for_delivered(&self, at_least: i64) {
        while self.count("delivered").await < at_least {
            tokio::time::sleep(std::time::Duration::from_millis(5)).await;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_between_publish_and_mark_loses_nothing() {
    let schema = format!("outbox_crash_{}", std::process::id());
    let db = PgPool::connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
    )))
    .execute(&db)
    .await
    .unwrap();
    // The queue is the example's contract: start it empty (the example declares it again).
    let connection = Connection::connect(&amqp_url(), Default::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {}: {e}", amqp_url()));
    let channel = connection.create_channel().await.unwrap();
    let _ = channel
        .queue_delete(QUEUE.into(), QueueDeleteOptions::default())
        .await;
    let env = Env {
        binary: tokio::task::spawn_blocking(|| example_binary("outbox_relay"))
            .await
            .unwrap(),
        schema,
        db,
    };

    let seeded = env
        .command()
        .args(["--seed", &RECORDS.to_string()])
        .status()
        .expect("seeding");
    assert!(seeded.success());
    assert_eq!(env.count("pending").await, RECORDS);

    // Kill the relay again and again while it relays: each time once it has marked more records,
    // so publishes are outstanding and marks unwritten at the kill.
    let mut kills = 0;
    for round in 1..=KILLS as i64 {
        let mut child = env.start();
        env.wait_for_delivered(round * RECORDS / (KILLS as i64 + 4))
            .await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let delivered_before_final = env.count("delivered").await;

    // The last relay runs to the end and stops on SIGTERM.
    let mut child = env.start();
    env.wait_for_delivered(RECORDS).await;
    let terminated = Command::new("kill")
        .args(["-TERM", &child.id().to_string()])
        .status()
        .unwrap();
    assert!(terminated.success());
    let exit = child.wait().unwrap();
    assert!(
        exit.success(),
        "the relay stops cleanly on SIGTERM: {exit:?}"
    );
    assert_eq!(env.count("delivered").await, RECORDS);
    assert_eq!(env.count("pending").await, 0);
    assert_eq!(env.count("dead").await, 0);

    // Every record reached the queue, every copy under its record's id.
    let channel = connection.create_channel().await.unwrap();
    let mut copies: BTreeMap<String, usize> = BTreeMap::new();
    let mut foreign = Vec::new();
    while let Some(message) = channel
        .basic_get(QUEUE.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let properties = &message.delivery.properties;
        let id = properties
            .message_id()
            .as_ref()
            .map(|id| id.as_str().to_owned())
            .unwrap_or_default();
        let body: serde_json::Value = serde_json::from_slice(&message.delivery.data).unwrap();
        if id != format!("order-{}-placed", body["order_id"]) {
            foreign.push(id.clone());
        }
        *copies.entry(id).or_default() += 1;
    }
    let expected: BTreeSet<String> = (1..=RECORDS).map(|i| format!("order-{i}-placed")).collect();
    let received: BTreeSet<String> = copies.keys().cloned().collect();
    let total: usize = copies.values().sum();
    let duplicates = total - copies.len();
    println!(
        "crash run: {RECORDS} records, {kills} SIGKILLs, {delivered_before_final} marked delivered \
         before the final relay, {total} messages in {QUEUE}, {duplicates} duplicates (same message_id)"
    );
    assert!(
        foreign.is_empty(),
        "messages whose message_id is not their record's: {foreign:?}"
    );
    let missing: Vec<_> = expected.difference(&received).take(10).collect();
    assert!(
        missing.is_empty(),
        "records that never reached the queue: {missing:?}"
    );
    assert_eq!(received, expected);
    assert_eq!(kills, KILLS);

    let _ = channel
        .queue_delete(QUEUE.into(), QueueDeleteOptions::default())
        .await;
    let _ = connection.close(200, "done".into()).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA {} CASCADE;",
        env.schema
    )))
    .execute(&env.db)
    .await
    .unwrap();
}
