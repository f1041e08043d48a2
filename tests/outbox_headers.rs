//! The outbox's `headers` column (the trace context written with a record, see `delivery::trace`):
//! `migrate` adds it to a table made before it, idempotently, and records written before it
//! still relay (with no headers); a record's headers come back with its claim.
#![cfg(all(feature = "sqlite", feature = "postgres"))]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::outbox::{NewRecord, Outbox, OutboxDatabase, Record, Relayer, Store};
use delivery::testing::MemorySink;
use delivery::{HandlerError, Receipt, State};
use sqlx::{AssertSqlSafe, PgPool};

/// A relayed record's id and its headers, as `name=value`.
type Relayed = (String, Vec<String>);

#[derive(Clone, Default)]
struct Seen {
    sink: MemorySink,
    records: Arc<Mutex<Vec<Relayed>>>,
}

#[delivery::relay]
async fn relay(record: Record, State(seen): State<Seen>) -> Result<Receipt, HandlerError> {
    let headers = record
        .headers()
        .iter()
        .map(|(name, value)| format!("{name}={}", String::from_utf8_lossy(value)))
        .collect();
    seen.records
        .lock()
        .unwrap()
        .push((record.id().to_string(), headers));
    seen.sink.send(&record).await
}

/// Writes `new-1` with a header beside the old record, relays both, and checks what the relay
/// function saw.
async fn write_then_relay<DB: OutboxDatabase, St: Store>(
    outbox: &Outbox,
    pool: &sqlx::Pool<DB>,
    store: &St,
    idle: impl Future<Output = ()> + Send + 'static,
) {
    let mut tx = pool.begin().await.unwrap();
    let record = NewRecord::new("orders", "{}")
        .id("new-1")
        .header("x-tenant", "t-1");
    outbox.write(&mut tx, record).await.unwrap();
    tx.commit().await.unwrap();

    let seen = Seen::default();
    let report = Relayer::new(store.clone())
        .state(seen.clone())
        .poll_interval(Duration::from_millis(20))
        .shutdown_on(idle)
        .run(relay)
        .await;
    assert_eq!(report.delivered, 2, "{report:?}");
    let expected: Vec<Relayed> = vec![
        ("old-1".into(), vec![]),
        ("new-1".into(), vec!["x-tenant=t-1".into()]),
    ];
    assert_eq!(*seen.records.lock().unwrap(), expected);
}

#[tokio::test]
async fn sqlite_a_table_made_before_the_column_gets_it() {
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(1)
        .connect("sqlite::memory:")
        .await
        .unwrap();
    // The table as `migrate` made it before the `headers` column, with a record in it.
    sqlx::raw_sql(
        "CREATE TABLE old_outbox (
            id TEXT PRIMARY KEY NOT NULL, topic TEXT NOT NULL, key TEXT, payload BLOB NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
            attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
            available_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
            lease_owner TEXT, lease_until INTEGER,
            created_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
            delivered_at INTEGER);
         INSERT INTO old_outbox (id, topic, payload) VALUES ('old-1', 'orders', '{}');",
    )
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table("old_outbox");
    let store = outbox.sqlite(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap(); // idempotent

    write_then_relay(&outbox, &pool, &store, store.idle()).await;
}

#[tokio::test]
async fn postgres_a_table_made_before_the_column_gets_it() {
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into());
    let pool = PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {url}: {e}"));
    let table = format!("old_outbox_{}", std::process::id());
    // The table as `migrate` made it before the `headers` column, with a record in it.
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE;
         CREATE TABLE {table} (
            id TEXT PRIMARY KEY, seq BIGSERIAL NOT NULL, topic TEXT NOT NULL, key TEXT,
            payload BYTEA NOT NULL,
            status TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
            attempts INTEGER NOT NULL DEFAULT 0, last_error TEXT,
            available_at TIMESTAMPTZ NOT NULL DEFAULT now(), lease_owner TEXT,
            lease_until TIMESTAMPTZ, created_at TIMESTAMPTZ NOT NULL DEFAULT now(),
            delivered_at TIMESTAMPTZ);
         INSERT INTO {table} (id, topic, payload) VALUES ('old-1', 'orders', '{{}}');"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool.clone());
    store.migrate().await.unwrap();
    store.migrate().await.unwrap(); // idempotent

    write_then_relay(&outbox, &pool, &store, store.idle()).await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE {table} CASCADE; DROP FUNCTION IF EXISTS {table}_notify()"
    )))
    .execute(&pool)
    .await
    .unwrap();
}
