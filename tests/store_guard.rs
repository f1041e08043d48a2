//! The store guard of rule 4 (`store::postgres::advance`, `store::sqlite::advance`) against the
//! real PostgreSQL and an SQLite file: a newer stamp moves, an older or equal one does not, inside
//! the caller's transaction (a rollback undoes it), and two transactions of one key serialize;
//! `advance_all` does the same for many keys in one statement, and overlapping batches moved at
//! once in any order never deadlock.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use std::collections::HashSet;
use std::time::Duration;

use delivery::memory::MemoryBroker;
use delivery::store::{postgres, sqlite};
use delivery::{
    Consumer, HandlerError, Json, Stamp, State, Unit, disposition::Backoff, disposition::ReasonKind,
};
use sqlx::{Database, PgPool, Pool, SqlitePool};

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

/// A key of this run, with whatever an earlier run left under it (or under `<key>-…`) removed.
async fn key(pool: &PgPool, name: &str) -> String {
    let key = format!("{name}-{}", std::process::id());
    sqlx::query("DELETE FROM delivery_stamps WHERE key = $1 OR key LIKE $1 || '-%'")
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

/// A fresh SQLite file with the guard's table, in the directory it returns.
async fn sqlite_pool(name: &str) -> (SqlitePool, std::path::PathBuf) {
    let dir = std::env::temp_dir().join(format!("delivery-guard-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let url = format!("sqlite://{}?mode=rwc", dir.join("guard.db").display());
    let pool = SqlitePool::connect(&url).await.unwrap();
    sqlite::migrate(&mut pool.acquire().await.unwrap())
        .await
        .unwrap();
    (pool, dir)
}

/// `advance_all` in the database of `pool` (through `advance_all`, its database's function),
/// for keys under `key`: several keys in one call, a key given twice moved to its highest stamp,
/// a stale or equal stamp refused, a rollback undoing it, `many` keys in one call (more than one
/// statement holds in the database), and a stamp past `i64::MAX` refused.
async fn advance_all_moves_each_key_to_its_highest_stamp<DB: Database>(
    pool: &Pool<DB>,
    key: &str,
    many: usize,
    advance_all: impl AsyncFn(
        &mut DB::Connection,
        &str,
        &[(String, Stamp)],
    ) -> Result<HashSet<String>, sqlx::Error>,
) {
    let k = |name: &str| format!("{key}-{name}");
    let keys = |names: &[&str]| names.iter().map(|n| k(n)).collect::<HashSet<_>>();
    let stamps = |pairs: &[(&str, u64)]| {
        pairs
            .iter()
            .map(|(name, stamp)| (k(name), Stamp(*stamp)))
            .collect::<Vec<_>>()
    };
    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        advance_all(
            &mut *tx,
            "guard",
            &stamps(&[("a", 5), ("b", 3), ("a", 9), ("a", 7)])
        )
        .await
        .unwrap(),
        keys(&["a", "b"]),
        "each key moves once"
    );
    assert_eq!(
        advance_all(&mut *tx, "guard", &stamps(&[("a", 8), ("b", 3), ("c", 1)]))
            .await
            .unwrap(),
        keys(&["c"]),
        "a is at 9, its highest (not 7, its last): 8 is stale; b's 3 is equal"
    );
    assert_eq!(
        advance_all(&mut *tx, "other-scope", &stamps(&[("a", 1)]))
            .await
            .unwrap(),
        keys(&["a"]),
        "scopes are apart"
    );
    assert_eq!(
        advance_all(&mut *tx, "guard", &[]).await.unwrap(),
        HashSet::new()
    );
    tx.rollback().await.unwrap();

    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        advance_all(&mut *tx, "guard", &stamps(&[("a", 2), ("b", 2)]))
            .await
            .unwrap(),
        keys(&["a", "b"]),
        "rolled back: the keys start afresh"
    );
    tx.commit().await.unwrap();
    let mut conn = pool.acquire().await.unwrap();
    assert_eq!(
        advance_all(&mut *conn, "guard", &stamps(&[("a", 2), ("b", 1)]))
            .await
            .unwrap(),
        HashSet::new(),
        "committed"
    );
    drop(conn);

    // More keys than one statement takes: the even ones moved to 2, then every one to 2 and
    // the odd ones to 3 as well.
    let names: Vec<String> = (0..many).map(|i| format!("n-{i}")).collect();
    let even: Vec<(&str, u64)> = names.iter().step_by(2).map(|n| (n.as_str(), 2)).collect();
    let mut all: Vec<(&str, u64)> = names.iter().map(|n| (n.as_str(), 2)).collect();
    all.extend(names.iter().skip(1).step_by(2).map(|n| (n.as_str(), 3)));
    let odd: Vec<&str> = names
        .iter()
        .skip(1)
        .step_by(2)
        .map(String::as_str)
        .collect();
    let mut tx = pool.begin().await.unwrap();
    assert_eq!(
        advance_all(&mut *tx, "guard", &stamps(&even))
            .await
            .unwrap()
            .len(),
        even.len()
    );
    assert_eq!(
        advance_all(&mut *tx, "guard", &stamps(&all)).await.unwrap(),
        keys(&odd),
        "the even keys are at 2 already; the odd ones move to 3"
    );
    tx.commit().await.unwrap();

    let mut conn = pool.acquire().await.unwrap();
    let error = advance_all(&mut *conn, "guard", &stamps(&[("a", 10), ("b", u64::MAX)]))
        .await
        .unwrap_err();
    assert!(error.to_string().contains("i64::MAX"), "{error}");
}

#[tokio::test]
async fn sqlite_moves_only_forward_in_the_callers_transaction() {
    let (pool, dir) = sqlite_pool("forward").await;
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

#[tokio::test]
async fn postgres_advance_all_moves_each_key_to_its_highest_stamp() {
    let pool = pg().await;
    let key = key(&pool, "all").await;
    // 40 000 keys: two statements (at most 65 535 parameters each, two per key).
    advance_all_moves_each_key_to_its_highest_stamp(
        &pool,
        &key,
        40_000,
        async |conn: &mut sqlx::PgConnection, scope: &str, stamps: &[(String, Stamp)]| {
            postgres::advance_all(conn, scope, stamps).await
        },
    )
    .await;
}

#[tokio::test]
async fn sqlite_advance_all_moves_each_key_to_its_highest_stamp() {
    let (pool, dir) = sqlite_pool("all").await;
    // 1 200 keys: three statements (at most 999 parameters each, two per key).
    advance_all_moves_each_key_to_its_highest_stamp(
        &pool,
        "k",
        1_200,
        async |conn: &mut sqlx::SqliteConnection, scope: &str, stamps: &[(String, Stamp)]| {
            sqlite::advance_all(conn, scope, stamps).await
        },
    )
    .await;
    pool.close().await;
    let _ = std::fs::remove_dir_all(dir);
}

/// Concurrent batches over the same keys, each given them in another order, in PostgreSQL: the
/// guard writes them in one order, so a batch waits for another to end and none deadlocks
/// (given in their own orders, two batches would each hold a key the other waits for, and
/// PostgreSQL would fail one of them with `deadlock detected`).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_overlapping_batches_in_any_order_never_deadlock() {
    const TASKS: u64 = 6;
    const ROUNDS: u64 = 15;
    let pool = pg().await;
    let key = key(&pool, "overlap").await;
    let keys: Vec<String> = (0..60).map(|i| format!("{key}-{i:02}")).collect();
    let batches = (0..TASKS).map(|task| {
        let (pool, mut keys) = (pool.clone(), keys.clone());
        tokio::spawn(async move {
            // Each task its own order: rotated, every other one reversed.
            let turn = (task as usize * 11) % keys.len();
            keys.rotate_left(turn);
            if task % 2 == 1 {
                keys.reverse();
            }
            for round in 0..ROUNDS {
                let stamp = Stamp(1 + round * TASKS + task);
                let stamps: Vec<(&str, Stamp)> = keys.iter().map(|k| (k.as_str(), stamp)).collect();
                let mut tx = pool.begin().await.unwrap();
                postgres::advance_all(&mut tx, "guard-overlap", &stamps).await?;
                tx.commit().await?;
            }
            Ok::<_, sqlx::Error>(())
        })
    });
    let results = futures_util::future::join_all(batches).await;
    for result in results {
        result
            .unwrap()
            .expect("no batch fails (a deadlock fails one)");
    }
    let highest: Vec<i64> = sqlx::query_scalar(
        "SELECT DISTINCT stamp FROM delivery_stamps WHERE scope = 'guard-overlap' AND key LIKE $1 || '-%'",
    )
    .bind(&key)
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        highest,
        [(ROUNDS * TASKS) as i64],
        "every key at the highest stamp given"
    );
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
