//! The inbox (`delivery::inbox`, rule 3) against the real PostgreSQL: a unit applied once, per
//! consumer; 32 concurrent deliveries of one unit in two processes applying it once; a rolled
//! back delivery leaving the unit unapplied; retention deleting only what is older than its age.
//! Fails, never skips, when PostgreSQL is unreachable. Each test works in a schema of its own.
#![cfg(feature = "postgres")]

#[path = "support/inbox_batch.rs"]
mod inbox_batch;
#[path = "../examples/support/orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;

use std::process::{Command, Stdio};
use std::str::FromStr;
use std::time::Duration;

use delivery::inbox::{Inbox, PgInbox};
use delivery::{Stamp, Unit, UnitId};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};

/// A schema of the test's own, with a `counter` table (an effect without a natural key): the
/// pool and the schema's name.
async fn setup(name: &str) -> (PgPool, String) {
    let db = PgPoolOptions::new()
        .max_connections(8)
        .connect(&process::database_url())
        .await
        .expect("PostgreSQL answers on DATABASE_URL (scripts/services.sh starts it)");
    let schema = format!("inbox_{name}_{}", std::process::id());
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema}; \
         CREATE TABLE {schema}.counter (consumer text PRIMARY KEY, applied bigint NOT NULL);"
    )))
    .execute(&db)
    .await
    .unwrap();
    (db, schema)
}

async fn drop_schema(db: &PgPool, schema: &str) {
    sqlx::raw_sql(AssertSqlSafe(format!("DROP SCHEMA {schema} CASCADE")))
        .execute(db)
        .await
        .unwrap();
}

fn inbox(schema: &str, consumer: &str) -> Inbox {
    Inbox::new(consumer).table(&format!("{schema}.delivery_inbox"))
}

async fn store(db: &PgPool, schema: &str, consumer: &str) -> PgInbox {
    let store = inbox(schema, consumer).postgres(db.clone());
    store.migrate().await.unwrap();
    store
}

/// One delivery of `id` to `inbox`'s consumer, as a handler applies it: the counter of the
/// consumer goes up by one only the first time. `true` when it applied the unit.
async fn deliver(db: &PgPool, schema: &str, inbox: &Inbox, id: &str) -> bool {
    let mut tx = db.begin().await.unwrap();
    let first = inbox.first_time(&mut tx, &UnitId::new(id)).await.unwrap();
    if first {
        bump(&mut tx, schema, inbox.consumer()).await;
    }
    tx.commit().await.unwrap();
    first
}

async fn bump(conn: &mut sqlx::PgConnection, schema: &str, consumer: &str) {
    sqlx::query(AssertSqlSafe(format!(
        "INSERT INTO {schema}.counter VALUES ($1, 1) \
         ON CONFLICT (consumer) DO UPDATE SET applied = counter.applied + 1"
    )))
    .bind(consumer)
    .execute(conn)
    .await
    .unwrap();
}

async fn counter(db: &PgPool, schema: &str, consumer: &str) -> i64 {
    sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT coalesce((SELECT applied FROM {schema}.counter WHERE consumer = $1), 0)"
    )))
    .bind(consumer)
    .fetch_one(db)
    .await
    .unwrap()
}

#[tokio::test]
async fn a_unit_is_applied_once_per_consumer() {
    let (db, schema) = setup("once").await;
    let billing = store(&db, &schema, "billing").await;
    billing.migrate().await.unwrap(); // idempotent
    let billing = billing.inbox().clone();
    let shipping = inbox(&schema, "shipping");

    assert!(
        deliver(&db, &schema, &billing, "u-1").await,
        "first delivery"
    );
    assert!(
        !deliver(&db, &schema, &billing, "u-1").await,
        "a redelivery is already applied"
    );
    assert_eq!(
        counter(&db, &schema, "billing").await,
        1,
        "the redelivery changed nothing"
    );
    assert!(
        deliver(&db, &schema, &shipping, "u-1").await,
        "another consumer's inbox is its own"
    );
    assert!(!deliver(&db, &schema, &shipping, "u-1").await);
    assert!(
        deliver(&db, &schema, &billing, "u-2").await,
        "another unit is another record"
    );
    assert_eq!(counter(&db, &schema, "billing").await, 2);
    assert_eq!(counter(&db, &schema, "shipping").await, 1);

    // Twice in one transaction: the second sees the first's uncommitted record.
    let mut tx = db.begin().await.unwrap();
    assert!(billing.first_time(&mut tx, &"u-3".into()).await.unwrap());
    assert!(!billing.first_time(&mut tx, &"u-3".into()).await.unwrap());
    tx.commit().await.unwrap();

    let billing_store = billing.postgres(db.clone());
    assert!(billing_store.applied(&"u-1".into()).await.unwrap());
    assert!(billing_store.applied(&"u-3".into()).await.unwrap());
    assert!(!billing_store.applied(&"u-4".into()).await.unwrap());
    // The record's time is the database's, taken when it was inserted.
    let skew: f64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT max(abs(extract(epoch FROM now() - applied_at)))::float8 FROM {schema}.delivery_inbox"
    )))
    .fetch_one(&db)
    .await
    .unwrap();
    assert!(
        skew < 60.0,
        "applied_at is the database's now(): {skew}s off"
    );
    drop_schema(&db, &schema).await;
}

/// `first_times` records a batch of units at once: each id once, only the first time, in the
/// caller's transaction, per consumer; 70 000 ids take two statements (at most 65 535
/// parameters each).
#[tokio::test]
async fn a_batch_of_units_is_recorded_once_per_consumer() {
    let (db, schema) = setup("batch").await;
    let billing = store(&db, &schema, "billing").await;
    let shipping = inbox(&schema, "shipping");
    inbox_batch::first_times_records_each_id_once(&db, billing.inbox(), &shipping, 70_000).await;
    drop_schema(&db, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thirty_two_concurrent_deliveries_in_two_processes_apply_once() {
    let (db, schema) = setup("concurrent").await;
    // The example's tables, made here first so the two processes' `IF NOT EXISTS` are no-ops.
    store(&db, &schema, "counter").await;
    sqlx::query(AssertSqlSafe(format!(
        "CREATE TABLE {schema}.inbox_counter (unit_id text PRIMARY KEY, applied bigint NOT NULL)"
    )))
    .execute(&db)
    .await
    .unwrap();

    // The gate: held here, waited on (shared) by every delivery before it records the unit.
    let gate = 0x1B0C_0000_i64 + i64::from(std::process::id() % 0x10000);
    let mut gatekeeper = db.acquire().await.unwrap();
    sqlx::query("SELECT pg_advisory_lock($1)")
        .bind(gate)
        .execute(&mut *gatekeeper)
        .await
        .unwrap();

    let binary = process::example_binary("inbox_counter");
    let url = process::database_url();
    let sep = if url.contains('?') { '&' } else { '?' };
    let child_url = format!("{url}{sep}options=-c%20search_path%3D{schema}");
    let mut children: Vec<_> = (0..2)
        .map(|_| {
            Command::new(&binary)
                .env("DATABASE_URL", &child_url)
                .env("UNIT_ID", "u-1")
                .env("TASKS", "16")
                .env("HOLD_MS", "200")
                .env("GATE", gate.to_string())
                .stdout(Stdio::piped())
                .stderr(Stdio::piped())
                .spawn()
                .unwrap()
        })
        .collect();

    // Open the gate only once all 32 transactions wait at it.
    let waiting = || async {
        sqlx::query_scalar::<_, i64>(
            "SELECT count(*) FROM pg_locks \
             WHERE locktype = 'advisory' AND NOT granted AND objid::bigint = $1",
        )
        .bind(gate)
        .fetch_one(&db)
        .await
        .unwrap()
    };
    process::wait_for(
        "32 deliveries waiting at the gate",
        Duration::from_secs(120),
        async || {
            for child in &mut children {
                if let Some(status) = child.try_wait().unwrap() {
                    panic!("a consumer process ended before the gate opened: {status:?}");
                }
            }
            waiting().await == 32
        },
    )
    .await;
    sqlx::query("SELECT pg_advisory_unlock($1)")
        .bind(gate)
        .execute(&mut *gatekeeper)
        .await
        .unwrap();

    let mut applied = 0;
    let mut already = 0;
    for child in children {
        let output = tokio::task::spawn_blocking(move || child.wait_with_output())
            .await
            .unwrap()
            .unwrap();
        let stdout = String::from_utf8(output.stdout).unwrap();
        assert!(
            output.status.success(),
            "every transaction committed: {:?}\n{stdout}\n{}",
            output.status,
            String::from_utf8_lossy(&output.stderr)
        );
        for line in stdout.lines() {
            match line {
                "applied" => applied += 1,
                "already applied" => already += 1,
                other => panic!("unexpected output line {other:?}"),
            }
        }
    }
    assert_eq!(
        (applied, already),
        (1, 31),
        "one delivery applied the unit, the other 31 committed as already applied"
    );
    let count: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT applied FROM {schema}.inbox_counter WHERE unit_id = 'u-1'"
    )))
    .fetch_one(&db)
    .await
    .unwrap();
    assert_eq!(count, 1, "the counter went up exactly once");
    assert!(
        inbox(&schema, "counter")
            .postgres(db.clone())
            .applied(&"u-1".into())
            .await
            .unwrap()
    );
    drop(gatekeeper);
    drop_schema(&db, &schema).await;
}

#[tokio::test]
async fn a_rolled_back_delivery_leaves_the_unit_unapplied() {
    let (db, schema) = setup("rollback").await;
    let store = store(&db, &schema, "billing").await;
    let billing = store.inbox().clone();

    // The handler records the unit and writes its effect, then fails: the transaction rolls back.
    let mut tx = db.begin().await.unwrap();
    assert!(billing.first_time(&mut tx, &"u-1".into()).await.unwrap());
    bump(&mut tx, &schema, "billing").await;
    tx.rollback().await.unwrap();
    assert!(
        !store.applied(&"u-1".into()).await.unwrap(),
        "the record went with the effect"
    );
    assert_eq!(counter(&db, &schema, "billing").await, 0);

    // Dropped without a commit (a panic, a crash): the same.
    {
        let mut tx = db.begin().await.unwrap();
        assert!(billing.first_time(&mut tx, &"u-1".into()).await.unwrap());
        bump(&mut tx, &schema, "billing").await;
    }

    assert!(
        deliver(&db, &schema, &billing, "u-1").await,
        "the redelivery applies it"
    );
    assert_eq!(counter(&db, &schema, "billing").await, 1);
    assert!(store.applied(&"u-1".into()).await.unwrap());
    drop_schema(&db, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_concurrent_delivery_waits_for_the_first_to_end() {
    let (db, schema) = setup("waits").await;
    let billing = store(&db, &schema, "billing").await.inbox().clone();

    for (first_commits, unit) in [(false, "u-rolled-back"), (true, "u-committed")] {
        let mut first = db.begin().await.unwrap();
        assert!(billing.first_time(&mut first, &unit.into()).await.unwrap());
        bump(&mut first, &schema, "billing").await;

        let second = tokio::spawn({
            let (db, schema, billing) = (db.clone(), schema.clone(), billing.clone());
            async move { deliver(&db, &schema, &billing, unit).await }
        });
        tokio::time::sleep(Duration::from_millis(500)).await;
        assert!(
            !second.is_finished(),
            "the second delivery waits on the first's record"
        );
        if first_commits {
            first.commit().await.unwrap();
        } else {
            first.rollback().await.unwrap();
        }
        let second_applied = tokio::time::timeout(Duration::from_secs(10), second)
            .await
            .expect("the second delivery ends once the first did")
            .unwrap();
        assert_eq!(
            second_applied, !first_commits,
            "{unit}: the second applies the unit only if the first rolled back"
        );
    }
    assert_eq!(
        counter(&db, &schema, "billing").await,
        2,
        "each unit applied once"
    );
    drop_schema(&db, &schema).await;
}

#[tokio::test]
async fn retention_deletes_only_what_is_older_than_its_age() {
    let (db, schema) = setup("retain").await;
    let billing = store(&db, &schema, "billing").await;
    let shipping = store(&db, &schema, "shipping").await;
    for id in ["u-old-1", "u-old-2", "u-new"] {
        assert!(deliver(&db, &schema, billing.inbox(), id).await);
    }
    assert!(deliver(&db, &schema, shipping.inbox(), "u-old-1").await);
    // Two hours pass for the old records (by the database's clock, which the inbox reads).
    sqlx::query(AssertSqlSafe(format!(
        "UPDATE {schema}.delivery_inbox SET applied_at = applied_at - interval '2 hours' \
         WHERE unit_id LIKE 'u-old-%'"
    )))
    .execute(&db)
    .await
    .unwrap();

    assert_eq!(
        billing.retain(Duration::from_secs(3 * 3600)).await.unwrap(),
        0,
        "nothing is older than 3 h"
    );
    assert_eq!(
        billing.retain(Duration::from_secs(3600)).await.unwrap(),
        2,
        "billing's two records older than 1 h"
    );
    assert!(!billing.applied(&"u-old-1".into()).await.unwrap());
    assert!(!billing.applied(&"u-old-2".into()).await.unwrap());
    assert!(
        billing.applied(&"u-new".into()).await.unwrap(),
        "younger than the age: kept"
    );
    assert!(
        shipping.applied(&"u-old-1".into()).await.unwrap(),
        "another consumer's records are its own to retain"
    );

    // The trade-off: a duplicate arriving after its record is gone is applied again.
    assert!(deliver(&db, &schema, billing.inbox(), "u-old-1").await);
    assert!(!deliver(&db, &schema, billing.inbox(), "u-new").await);
    assert_eq!(counter(&db, &schema, "billing").await, 4);

    // The cleanup task does the same on an interval, outside any handler.
    let cleanup = shipping.spawn_cleanup(Duration::from_millis(100), Duration::from_secs(3600));
    process::wait_for(
        "the cleanup task deletes shipping's old record",
        Duration::from_secs(10),
        async || !shipping.applied(&"u-old-1".into()).await.unwrap(),
    )
    .await;
    cleanup.abort();
    drop_schema(&db, &schema).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_concurrently() {
    let (db, schema) = setup("migrate").await;
    let runs: Vec<_> = (0..8)
        .map(|i| {
            let store = inbox(&schema, &format!("c-{i}")).postgres(db.clone());
            tokio::spawn(async move { store.migrate().await })
        })
        .collect();
    for run in runs {
        run.await.unwrap().unwrap();
    }
    assert!(deliver(&db, &schema, &inbox(&schema, "c-0"), "u-1").await);
    drop_schema(&db, &schema).await;
}

/// The examples' orders contract (`examples/support/orders.rs`) counts a confirmation per unit,
/// a counter with no natural key, guarded by the inbox: a redelivery counts nothing.
#[tokio::test]
async fn the_orders_contract_counts_a_confirmation_once_per_unit() {
    let (admin, schema) = setup("orders").await;
    let options = PgConnectOptions::from_str(&process::database_url())
        .unwrap()
        .options([("search_path", schema.as_str())]);
    let db = PgPoolOptions::new()
        .max_connections(2)
        .connect_with(options)
        .await
        .unwrap();
    orders::create_tables(&db).await.unwrap();
    orders::create_tables(&db).await.unwrap(); // idempotent
    let app = orders::App {
        db: db.clone(),
        effect_delay: Duration::ZERO,
    };
    let snapshot = || async {
        let sent: Vec<(String, i64)> =
            sqlx::query_as("SELECT customer_id, sent FROM confirmations ORDER BY customer_id")
                .fetch_all(&db)
                .await
                .unwrap();
        let balances: Vec<(String, i64)> =
            sqlx::query_as("SELECT customer_id, total_cents FROM balances ORDER BY customer_id")
                .fetch_all(&db)
                .await
                .unwrap();
        (sent, balances)
    };
    let order = r#"{"order_id":"o-1","customer_id":"c-1","amount_cents":100}"#;
    let unit = Unit::new("m-1", order).with_stamp(Stamp(1));
    delivery::testing::assert_redelivery_changes_nothing(orders::apply_order, &app, unit, snapshot)
        .await;
    let second = r#"{"order_id":"o-2","customer_id":"c-1","amount_cents":50}"#;
    let unit = Unit::new("m-2", second).with_stamp(Stamp(2));
    delivery::testing::assert_redelivery_changes_nothing(orders::apply_order, &app, unit, snapshot)
        .await;
    assert_eq!(
        snapshot().await,
        (vec![("c-1".into(), 2)], vec![("c-1".into(), 150)]),
        "one confirmation per unit, each amount once"
    );
    db.close().await;
    drop_schema(&admin, &schema).await;
}
