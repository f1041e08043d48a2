//! The store guard of rule 4 (`store::postgres::advance`, `store::sqlite::advance`) against the
//! real PostgreSQL and an SQLite file: a newer stamp moves, an older or equal one does not, inside
//! the caller's transaction (a rollback undoes it), and two transactions of one key serialize.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use std::time::Duration;

use delivery::memory::MemoryBroker;
use delivery::store::{postgres, sqlite};
use delivery::{
    Consumer, HandlerError, Json, Stamp, State, Unit, disposition::Backoff, disposition::ReasonKind,
};
use sqlx::{PgPool, SqlitePool};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn pg() -> PgPool {
    let pool = PgPool::connect(&database_url())
        .await
        .expect("PostgreSQL answers on DATABASE_URL (scripts/services.sh starts it)");
    postgres::migrate(&mut pool.acquire().await.unwrap())
        .await
        .unwrap();
    pool
}

/// A key of this run, with whatever an earlier run left under it removed.
async fn key(pool: &PgPool, name: &str) -> String {
    let key = format!("{name}-{}", std::process::id());
    sqlx::query("DELETE FROM delivery_stamps WHERE key = $1")
        .bind(&key)
        .execute(pool)
        .await
        .unwrap();
    key
}

#[tokio::test]
async fn postgres_moves_only_forward_in_the_callers_transaction() {
    let pool = pg().await;
    let key = key(&pool, "forward").await;
    let mut tx = pool.begin().await.unwrap();
    assert!(
        postgres::advance(&mut tx, "guard", &key, Stamp(10))
            .await
            .unwrap()
    );
    assert!(
        !postgres::advance(&mut tx, "guard", &key, Stamp(10))
            .await
            .unwrap(),
        "equal"
    );
    assert!(
        !postgres::advance(&mut tx, "guard", &key, Stamp(9))
            .await
            .unwrap(),
        "older"
    );
    assert!(
        postgres::advance(&mut tx, "guard", &key, Stamp(11))
            .await
            .unwrap()
    );
    assert!(
        postgres::advance(&mut tx, "other-scope", &key, Stamp(1))
            .await
            .unwrap(),
        "scopes are apart"
    );
    tx.rollback().await.unwrap();
    // Rolled back with the caller's writes: the key starts afresh.
    let mut tx = pool.begin().await.unwrap();
    assert!(
        postgres::advance(&mut tx, "guard", &key, Stamp(5))
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    assert!(
        !postgres::advance(&mut conn, "guard", &key, Stamp(4))
            .await
            .unwrap()
    );
    let error = postgres::advance(&mut conn, "guard", &key, Stamp(u64::MAX))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("i64::MAX"), "{error}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_two_transactions_of_one_key_serialize() {
    let pool = pg().await;
    let key = key(&pool, "serialize").await;
    // The first holds the key at 20, uncommitted...
    let mut first = pool.begin().await.unwrap();
    assert!(
        postgres::advance(&mut first, "guard", &key, Stamp(20))
            .await
            .unwrap()
    );
    // ...the second, with an older stamp, waits for it, then compares with what it committed.
    let second = {
        let (pool, key) = (pool.clone(), key.clone());
        tokio::spawn(async move {
            let mut tx = pool.begin().await.unwrap();
            let moved = postgres::advance(&mut tx, "guard", &key, Stamp(15))
                .await
                .unwrap();
            tx.commit().await.unwrap();
            moved
        })
    };
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert!(!second.is_finished(), "the second waits on the key's row");
    first.commit().await.unwrap();
    assert!(
        !second.await.unwrap(),
        "15 after a committed 20 does not move"
    );
}

#[tokio::test]
async fn sqlite_moves_only_forward_in_the_callers_transaction() {
    let dir = std::env::temp_dir().join(format!("delivery-guard-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("guard.db").display());
    let pool = SqlitePool::connect(&url).await.unwrap();
    sqlite::migrate(&mut pool.acquire().await.unwrap())
        .await
        .unwrap();
    let mut tx = pool.begin().await.unwrap();
    assert!(
        sqlite::advance(&mut tx, "guard", "k", Stamp(10))
            .await
            .unwrap()
    );
    assert!(
        !sqlite::advance(&mut tx, "guard", "k", Stamp(10))
            .await
            .unwrap(),
        "equal"
    );
    assert!(
        !sqlite::advance(&mut tx, "guard", "k", Stamp(3))
            .await
            .unwrap(),
        "older"
    );
    tx.rollback().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    assert!(
        sqlite::advance(&mut tx, "guard", "k", Stamp(3))
            .await
            .unwrap(),
        "rolled back"
    );
    assert!(
        sqlite::advance(&mut tx, "guard", "k", Stamp(30))
            .await
            .unwrap()
    );
    tx.commit().await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    assert!(
        !sqlite::advance(&mut conn, "guard", "k", Stamp(29))
            .await
            .unwrap()
    );
    drop(conn);
    pool.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// What the consumer below guards its rows with.
#[derive(Clone)]
struct Latest {
    pool: PgPool,
    key: String,
}

/// A consumer keeping the latest state of a key, guarded by the unit's stamp: what a user writes
/// (`?` on the guard's error, as on any database error).
#[delivery::consumer]
async fn keep_latest(
    Json(version): Json<i64>,
    stamp: Stamp,
    State(latest): State<Latest>,
) -> Result<(), HandlerError> {
    let mut tx = latest.pool.begin().await?;
    if postgres::advance(&mut tx, "guard-consumer", &latest.key, stamp).await? {
        let _ = version; // the caller's own write goes here
    }
    tx.commit().await?;
    Ok(())
}

/// Issue 34, item 15: a stamp the store cannot hold (above `i64::MAX`, the guard's `BIGINT`) can
/// never pass, so it is poison (rule 2): dead-lettered on its first delivery, its detail saying
/// once that the stamp is out of range; never retried to the bound and dead-lettered `exhausted`.
/// The largest stamp that fits is applied.
#[tokio::test]
async fn a_stamp_past_i64_max_goes_to_the_dead_letter_at_once() {
    let pool = pg().await;
    let key = key(&pool, "past-i64").await;
    sqlx::query("DELETE FROM delivery_stamps WHERE scope = 'guard-consumer' AND key = $1")
        .bind(&key)
        .execute(&pool)
        .await
        .unwrap();
    let broker = MemoryBroker::new();
    let over = i64::MAX as u64 + 1;
    for (id, stamp) in [("u-max", u64::MAX), ("u-over", over), ("u-fits", over - 1)] {
        broker.publish("latest", Unit::new(id, "1").with_stamp(Stamp(stamp)));
    }
    let report = Consumer::new(broker.consume("latest"))
        .state(Latest {
            pool: pool.clone(),
            key: key.clone(),
        })
        .max_deliveries(3)
        .backoff(Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(10),
        ))
        .shutdown_on(broker.idle("latest"))
        .run(keep_latest)
        .await;
    assert_eq!(
        (report.acked, report.returned, report.dead_lettered),
        (1, 0, 2),
        "{report:?}"
    );
    let dead = broker.dead_letters("latest");
    for (id, stamp) in [("u-max", u64::MAX), ("u-over", over)] {
        let letter = dead
            .peek(id)
            .unwrap_or_else(|| panic!("{id} dead-lettered"));
        assert_eq!(
            letter.delivery_count().get(),
            1,
            "{id}: on its first delivery"
        );
        assert_eq!(letter.reason.unwrap(), ReasonKind::Malformed, "{id}");
        assert_eq!(
            letter.detail.matches("out of range").count(),
            1,
            "{id}: {}",
            letter.detail
        );
        assert_eq!(
            letter.detail.matches(&stamp.to_string()).count(),
            1,
            "{id}: {}",
            letter.detail
        );
    }
    let kept: i64 = sqlx::query_scalar(
        "SELECT stamp FROM delivery_stamps WHERE scope = 'guard-consumer' AND key = $1",
    )
    .bind(&key)
    .fetch_one(&pool)
    .await
    .unwrap();
    assert_eq!(kept, i64::MAX);
}
