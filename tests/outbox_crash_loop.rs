//! A record whose attempt kills the relay on every try — a child process (this test binary, run
//! again as the relay) SIGKILLed from inside its relay function — reaches `dead` within
//! `max_attempts` restarts, because each attempt is counted when the record is claimed, before
//! the relay function runs; the relay then delivers the records behind it, in `ordered` mode
//! too, where the record held its key. Against the real PostgreSQL; fails, never skips, when it
//! is unreachable.
#![cfg(feature = "postgres")]

#[path = "support/process.rs"]
mod process;

use std::future::Future;
use std::process::{Command, Stdio};
use std::time::Duration;

use delivery::outbox::{
    Attempt, IntoAttempt, NewRecord, Outbox, PgStore, Record, Relay, Relayer, Status,
};
use delivery::testing::MemorySink;
use process::database_url;
use sqlx::AssertSqlSafe;
use sqlx::postgres::PgPoolOptions;

/// Set in the child: the outbox table it relays.
const CHILD_TABLE: &str = "DELIVERY_CRASH_LOOP_TABLE";
const MAX_ATTEMPTS: u32 = 3;

/// Relays to a memory sink; the record `doom` kills the process (SIGKILL) instead.
struct KillsOnDoom;
impl Relay<MemorySink> for KillsOnDoom {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let (record, sink) = (record.clone(), sink.clone());
        async move {
            if record.id().as_str() == "doom" {
                let _ = Command::new("kill")
                    .args(["-KILL", &std::process::id().to_string()])
                    .status();
                std::future::pending::<()>().await;
            }
            sink.send(&record).await.into_attempt()
        }
    }
}

async fn store(table: &str) -> (Outbox, PgStore) {
    let pool = PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
    let outbox = Outbox::table(table);
    let store = outbox.postgres(pool);
    (outbox, store)
}

/// The relay, when this binary runs as the child (a no-op in a normal test run).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn child_relay() {
    let Ok(table) = std::env::var(CHILD_TABLE) else {
        return;
    };
    let (_, store) = store(&table).await;
    Relayer::new(store.clone())
        .state(MemorySink::new())
        .max_attempts(MAX_ATTEMPTS)
        .lease(Duration::from_millis(300))
        .attempt_timeout(Duration::from_millis(100))
        .poll_interval(Duration::from_millis(20))
        .ordered(true)
        .shutdown_on(store.idle())
        .run(KillsOnDoom)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_that_kills_the_relay_reaches_dead_within_the_bound() {
    if std::env::var(CHILD_TABLE).is_ok() {
        return;
    }
    let table = format!("outbox_crash_loop_{}", std::process::id());
    let (outbox, store) = store(&table).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE;"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    store.migrate().await.unwrap();
    let mut tx = store.pool().begin().await.unwrap();
    outbox
        .write(&mut tx, NewRecord::new("t", "x").id("doom").key("k"))
        .await
        .unwrap();
    for i in 0..3 {
        outbox
            .write(
                &mut tx,
                NewRecord::new("t", "y").id(format!("after-{i}")).key("k"),
            )
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();

    // Each child relays until nothing is pending; one killed mid-attempt is started again, once
    // its lease ran out.
    let mut restarts = 0;
    loop {
        let status = Command::new(std::env::current_exe().unwrap())
            .args(["--exact", "child_relay", "--nocapture"])
            .env(CHILD_TABLE, &table)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .status()
            .unwrap();
        restarts += 1;
        if status.success() {
            break;
        }
        assert!(
            restarts <= MAX_ATTEMPTS,
            "{restarts} relays killed and `doom` is still {:?}",
            store.get(&"doom".into()).await.unwrap()
        );
        tokio::time::sleep(Duration::from_millis(350)).await;
    }
    for i in 0..3 {
        let after = store
            .get(&format!("after-{i}").into())
            .await
            .unwrap()
            .unwrap();
        assert_eq!(after.status, Status::Delivered, "{after:?}");
    }
    let doom = store.get(&"doom".into()).await.unwrap().unwrap();
    assert_eq!(doom.status, Status::Dead, "{doom:?}");
    assert_eq!(
        restarts,
        MAX_ATTEMPTS + 1,
        "killed once per attempt, then dead"
    );
    assert!(
        doom.last_error
            .as_deref()
            .unwrap_or("")
            .contains("past the bound"),
        "{doom:?}"
    );
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE;"
    )))
    .execute(store.pool())
    .await
    .unwrap();
}
