//! The inbox (`delivery::inbox`, rule 3) in an SQLite file: a unit applied once, per consumer;
//! concurrent deliveries of one unit applying it once (SQLite's one writer at a time, in the
//! rollback journal and in WAL); a rolled back delivery leaving the unit unapplied; retention
//! deleting only what is older than its age.
#![cfg(feature = "sqlite")]

#[path = "support/inbox_batch.rs"]
mod inbox_batch;

use std::path::PathBuf;
use std::str::FromStr;
use std::time::Duration;

use delivery::UnitId;
use delivery::inbox::{Inbox, SqliteInbox};
use sqlx::SqlitePool;
use sqlx::sqlite::{SqliteConnectOptions, SqliteJournalMode, SqlitePoolOptions};

/// A fresh database file under the temp dir, with a `counter` table (an effect without a natural
/// key).
async fn setup(name: &str, journal: SqliteJournalMode) -> (SqlitePool, PathBuf) {
    let dir = std::env::temp_dir().join(format!("delivery-inbox-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = SqliteConnectOptions::from_str(&format!(
        "sqlite://{}?mode=rwc",
        dir.join("inbox.db").display()
    ))
    .unwrap()
    .journal_mode(journal);
    let db = SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap();
    sqlx::query("CREATE TABLE counter (consumer TEXT PRIMARY KEY, applied INTEGER NOT NULL)")
        .execute(&db)
        .await
        .unwrap();
    (db, dir)
}

async fn store(db: &SqlitePool, consumer: &str) -> SqliteInbox {
    let store = Inbox::new(consumer).sqlite(db.clone());
    store.migrate().await.unwrap();
    store
}

/// One delivery of `id`, as a handler applies it: the consumer's counter goes up only the first
/// time. `true` when it applied the unit.
async fn deliver(db: &SqlitePool, inbox: &Inbox, id: &str) -> bool {
    let mut tx = db.begin().await.unwrap();
    let first = inbox.first_time(&mut tx, &UnitId::new(id)).await.unwrap();
    if first {
        bump(&mut tx, inbox.consumer()).await;
    }
    tx.commit().await.unwrap();
    first
}

async fn bump(conn: &mut sqlx::SqliteConnection, consumer: &str) {
    sqlx::query(
        "INSERT INTO counter VALUES (?1, 1) \
         ON CONFLICT (consumer) DO UPDATE SET applied = counter.applied + 1",
    )
    .bind(consumer)
    .execute(conn)
    .await
    .unwrap();
}

async fn counter(db: &SqlitePool, consumer: &str) -> i64 {
    sqlx::query_scalar("SELECT coalesce((SELECT applied FROM counter WHERE consumer = ?1), 0)")
        .bind(consumer)
        .fetch_one(db)
        .await
        .unwrap()
}

#[tokio::test]
async fn a_unit_is_applied_once_per_consumer() {
    let (db, dir) = setup("once", SqliteJournalMode::Delete).await;
    let billing = store(&db, "billing").await;
    billing.migrate().await.unwrap(); // idempotent
    let shipping = store(&db, "shipping").await;

    assert!(deliver(&db, billing.inbox(), "u-1").await);
    assert!(
        !deliver(&db, billing.inbox(), "u-1").await,
        "already applied"
    );
    assert!(
        deliver(&db, shipping.inbox(), "u-1").await,
        "another consumer's inbox is its own"
    );
    assert!(deliver(&db, billing.inbox(), "u-2").await);
    assert_eq!(counter(&db, "billing").await, 2);
    assert_eq!(counter(&db, "shipping").await, 1);
    assert!(billing.applied(&"u-1".into()).await.unwrap());
    assert!(!billing.applied(&"u-3".into()).await.unwrap());
    // The record's time is the database's (milliseconds since the epoch), taken on insert.
    let skew: i64 = sqlx::query_scalar(
        "SELECT max(abs(CAST(unixepoch('subsec') * 1000 AS INTEGER) - applied_at)) FROM delivery_inbox",
    )
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(skew < 60_000, "applied_at is SQLite's clock: {skew} ms off");
    let _ = std::fs::remove_dir_all(dir);
}

/// `first_times` records a batch of units at once: each id once, only the first time, in the
/// caller's transaction, per consumer; 2 100 ids take three statements (at most 999 parameters
/// each).
#[tokio::test]
async fn a_batch_of_units_is_recorded_once_per_consumer() {
    let (db, dir) = setup("batch", SqliteJournalMode::Wal).await;
    let billing = store(&db, "billing").await;
    let shipping = Inbox::new("shipping");
    inbox_batch::first_times_records_each_id_once(&db, billing.inbox(), &shipping, 2_100).await;
    let _ = std::fs::remove_dir_all(dir);
}

/// `tasks` deliveries of one unit at once, each holding its transaction a while after it
/// recorded the unit: one applies it, every other one commits as already applied.
async fn concurrent(db: &SqlitePool, inbox: &Inbox, tasks: usize, read_first: bool) {
    let runs: Vec<_> = (0..tasks)
        .map(|_| {
            let (db, inbox) = (db.clone(), inbox.clone());
            tokio::spawn(async move {
                let mut tx = if read_first {
                    // A handler that reads before it records the unit takes the write lock up
                    // front.
                    let mut tx = db.begin_with("BEGIN IMMEDIATE").await?;
                    sqlx::query("SELECT count(*) FROM counter")
                        .execute(&mut *tx)
                        .await?;
                    tx
                } else {
                    db.begin().await?
                };
                let first = inbox.first_time(&mut tx, &"u-1".into()).await?;
                if first {
                    bump(&mut tx, inbox.consumer()).await;
                    tokio::time::sleep(Duration::from_millis(100)).await;
                }
                tx.commit().await?;
                Ok::<_, sqlx::Error>(first)
            })
        })
        .collect();
    let mut applied = 0;
    for run in runs {
        if run.await.unwrap().expect("every delivery commits") {
            applied += 1;
        }
    }
    assert_eq!(applied, 1, "one delivery applied the unit");
    assert_eq!(counter(db, inbox.consumer()).await, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_deliveries_apply_once() {
    for (journal, name) in [
        (SqliteJournalMode::Delete, "concurrent-delete"),
        (SqliteJournalMode::Wal, "concurrent-wal"),
    ] {
        let (db, dir) = setup(name, journal).await;
        concurrent(&db, store(&db, "first").await.inbox(), 8, false).await;
        concurrent(&db, store(&db, "immediate").await.inbox(), 8, true).await;
        db.close().await;
        let _ = std::fs::remove_dir_all(dir);
    }
}

#[tokio::test]
async fn a_rolled_back_delivery_leaves_the_unit_unapplied() {
    let (db, dir) = setup("rollback", SqliteJournalMode::Delete).await;
    let store = store(&db, "billing").await;

    let mut tx = db.begin().await.unwrap();
    assert!(
        store
            .inbox()
            .first_time(&mut tx, &"u-1".into())
            .await
            .unwrap()
    );
    bump(&mut tx, "billing").await;
    tx.rollback().await.unwrap();
    assert!(!store.applied(&"u-1".into()).await.unwrap());
    assert_eq!(counter(&db, "billing").await, 0);

    assert!(
        deliver(&db, store.inbox(), "u-1").await,
        "the redelivery applies it"
    );
    assert_eq!(counter(&db, "billing").await, 1);
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn retention_deletes_only_what_is_older_than_its_age() {
    let (db, dir) = setup("retain", SqliteJournalMode::Delete).await;
    let billing = store(&db, "billing").await;
    let shipping = store(&db, "shipping").await;
    for id in ["u-old-1", "u-old-2", "u-new"] {
        assert!(deliver(&db, billing.inbox(), id).await);
    }
    assert!(deliver(&db, shipping.inbox(), "u-old-1").await);
    // Two hours pass for the old records.
    sqlx::query(
        "UPDATE delivery_inbox SET applied_at = applied_at - 7200000 WHERE unit_id LIKE 'u-old-%'",
    )
    .execute(&db)
    .await
    .unwrap();

    assert_eq!(
        billing.retain(Duration::from_secs(3 * 3600)).await.unwrap(),
        0
    );
    assert_eq!(billing.retain(Duration::from_secs(3600)).await.unwrap(), 2);
    assert!(!billing.applied(&"u-old-1".into()).await.unwrap());
    assert!(!billing.applied(&"u-old-2".into()).await.unwrap());
    assert!(billing.applied(&"u-new".into()).await.unwrap());
    assert!(
        shipping.applied(&"u-old-1".into()).await.unwrap(),
        "another consumer's records are its own to retain"
    );
    // The trade-off: a duplicate arriving after its record is gone is applied again.
    assert!(deliver(&db, billing.inbox(), "u-old-1").await);
    assert!(!deliver(&db, billing.inbox(), "u-new").await);

    let cleanup = shipping.spawn_cleanup(Duration::from_millis(100), Duration::from_secs(3600));
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while shipping.applied(&"u-old-1".into()).await.unwrap() {
        assert!(
            tokio::time::Instant::now() < deadline,
            "the cleanup task deletes shipping's old record"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    cleanup.abort();
    let _ = std::fs::remove_dir_all(dir);
}

#[tokio::test]
async fn a_table_of_its_own() {
    let (db, dir) = setup("table", SqliteJournalMode::Delete).await;
    let store = Inbox::new("billing")
        .table("main.billing_inbox")
        .sqlite(db.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap();
    assert!(deliver(&db, store.inbox(), "u-1").await);
    assert!(!deliver(&db, store.inbox(), "u-1").await);
    let rows: i64 = sqlx::query_scalar("SELECT count(*) FROM billing_inbox")
        .fetch_one(&db)
        .await
        .unwrap();
    assert_eq!(rows, 1);
    let _ = std::fs::remove_dir_all(dir);
}
