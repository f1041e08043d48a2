//! The store guard of rule 4 (`store::postgres::advance`, `store::sqlite::advance`) against the
//! real PostgreSQL and an SQLite file: a newer stamp moves, an older or equal one does not, inside
//! the caller's transaction (a rollback undoes it), and two transactions of one key serialize.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use std::time::Duration;

use delivery::Stamp;
use delivery::store::{postgres, sqlite};
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
