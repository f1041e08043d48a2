//! The outbox's stamps (rule 4) on both stores — PostgreSQL (the real server) and SQLite (a file in
//! a temporary directory): a record's stamp is above every stamp handed out before it, whatever
//! was deleted since (a purged dead record, delivered records past their retention), so a consumer
//! guarding its writes with `store::advance` never drops a newer state as older. And `retain`:
//! delivered records older than the age go, pending and dead ones stay. An SQLite outbox made by
//! the schema before the sequence is upgraded by `migrate`, its rows and stamps kept. Fails, never
//! skips, when PostgreSQL is unreachable.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use std::collections::BTreeMap;
use std::future::Future;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::outbox::{
    Attempt, IntoAttempt, NewRecord, Outbox, PgStore, Record, Relay, Relayer, SqliteStore, Status,
    Store, StoredRecord,
};
use delivery::testing::{MemorySink, SinkFailure};
use delivery::{Stamp, UnitId, disposition::Backoff};
use sqlx::AssertSqlSafe;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Sends the record as written, keeping the stamp of each record it was handed.
#[derive(Clone, Default)]
struct Stamps(Arc<Mutex<BTreeMap<String, Stamp>>>);

impl Stamps {
    fn of(&self, id: &str) -> Stamp {
        self.0.lock().unwrap()[id]
    }
    fn max(&self) -> Stamp {
        self.0.lock().unwrap().values().copied().max().unwrap()
    }
}

impl Relay<MemorySink> for Stamps {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let stamp = record.stamp().expect("a claimed record carries its stamp");
        self.0
            .lock()
            .unwrap()
            .insert(record.id().as_str().to_owned(), stamp);
        let (record, sink) = (record.clone(), sink.clone());
        async move { sink.send(&record).await.into_attempt() }
    }
}

/// What the tests need of either store.
trait Db: Store + DeadLetters {
    fn write(&self, outbox: &Outbox, id: &str) -> impl Future<Output = ()> + Send;
    fn get(&self, id: &str) -> impl Future<Output = Option<StoredRecord>> + Send;
    fn idle(&self) -> impl Future<Output = ()> + Send + 'static;
    fn retain_older(&self, older_than: Duration) -> impl Future<Output = u64> + Send;
    /// Moves the record's `delivered_at` and `created_at` (`delivered_at`: only where set)
    /// `days` back, as if it were that old.
    fn age(&self, id: &str, days: u32) -> impl Future<Output = ()> + Send;
}

/// `Db` for a store, given the statement that moves a record's times `?2` (`$2`) days back.
macro_rules! db {
    ($store:ident, $age:literal, $days:ty) => {
        impl Db for $store {
            async fn write(&self, outbox: &Outbox, id: &str) {
                let mut tx = self.pool().begin().await.unwrap();
                let record = NewRecord::new("orders.events", id.to_owned()).id(id);
                outbox.write(&mut tx, record).await.unwrap();
                tx.commit().await.unwrap();
            }
            async fn get(&self, id: &str) -> Option<StoredRecord> {
                $store::get(self, &id.into()).await.unwrap()
            }
            fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
                $store::idle(self)
            }
            async fn retain_older(&self, older_than: Duration) -> u64 {
                $store::retain(self, older_than).await.unwrap()
            }
            async fn age(&self, id: &str, days: u32) {
                sqlx::query(AssertSqlSafe(format!($age, Store::name(self))))
                    .bind(id)
                    .bind(<$days>::from(days))
                    .execute(self.pool())
                    .await
                    .unwrap();
            }
        }
    };
}

db!(
    PgStore,
    "UPDATE {} SET created_at = created_at - $2 * interval '1 day', \
       delivered_at = delivered_at - $2 * interval '1 day' WHERE id = $1",
    f64
);
db!(
    SqliteStore,
    "UPDATE {} SET created_at = created_at - ?2 * 86400000, \
       delivered_at = delivered_at - ?2 * 86400000 WHERE id = ?1",
    i64
);

/// A fresh outbox table in PostgreSQL.
async fn postgres(name: &str) -> (Outbox, PgStore) {
    let table = format!(
        "stamps_{}_{}",
        &name[..name.len().min(24)],
        std::process::id()
    );
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(4)
        .connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool);
    store.migrate().await.unwrap();
    (outbox, store)
}

/// A pool on a fresh SQLite file in a temporary directory.
async fn sqlite_pool(name: &str) -> sqlx::SqlitePool {
    let dir = std::env::temp_dir().join(format!("delivery-stamps-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("outbox.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap()
}

/// A fresh outbox in an SQLite file.
async fn sqlite(name: &str) -> (Outbox, SqliteStore) {
    let outbox = Outbox::table("outbox");
    let store = outbox.sqlite(sqlite_pool(name).await);
    store.migrate().await.unwrap();
    (outbox, store)
}

/// Relays until nothing is pending, through `stamps`; `refused` is rejected by the receiver
/// (dead at once).
async fn relay<St: Db>(store: &St, stamps: &Stamps, refused: &[&str]) {
    let sink = MemorySink::new();
    for id in refused {
        sink.fail_record_always(*id, SinkFailure::Permanent);
    }
    Relayer::new(store.clone())
        .state(sink)
        .backoff(Backoff::none())
        .poll_interval(Duration::from_millis(10))
        .shutdown_on(store.idle())
        .run(stamps.clone())
        .await;
}

// ---- the scenarios, each run on both stores ----

/// Write A, A dies, the operator purges it, write B: B's stamp is above A's. (On SQLite the
/// stamp was the rowid, which SQLite hands out again once the newest row is deleted.)
async fn purged_newest_record<St: Db>(outbox: Outbox, store: St) {
    let stamps = Stamps::default();
    store.write(&outbox, "a").await;
    relay(&store, &stamps, &["a"]).await;
    assert_eq!(store.get("a").await.unwrap().status, Status::Dead);
    assert_eq!(store.purge(&[UnitId::new("a")]).await.unwrap(), 1);

    store.write(&outbox, "b").await;
    relay(&store, &stamps, &[]).await;
    assert_eq!(store.get("b").await.unwrap().status, Status::Delivered);
    assert!(
        stamps.of("b") > stamps.of("a"),
        "B, written after A, carries stamp {} <= A's {}: a consumer guarding with it drops B",
        stamps.of("b"),
        stamps.of("a"),
    );
}

/// `retain`: delivered records older than the age are deleted, recent delivered ones and every
/// pending and dead record stay, whatever their age; stamps keep growing past the deleted ones.
async fn retain_deletes_old_delivered_records<St: Db>(outbox: Outbox, store: St) {
    let stamps = Stamps::default();
    for id in ["dead", "recent", "old"] {
        store.write(&outbox, id).await;
    }
    relay(&store, &stamps, &["dead"]).await;
    store.write(&outbox, "pending").await;
    for (id, days) in [("dead", 3), ("old", 2), ("pending", 3)] {
        store.age(id, days).await;
    }
    let day = Duration::from_secs(86_400);
    assert_eq!(
        store.retain_older(3 * day).await,
        0,
        "nothing delivered 3 days ago"
    );
    assert_eq!(store.retain_older(day).await, 1);
    assert!(store.get("old").await.is_none(), "delivered 2 days ago");
    let status = |id: &'static str| {
        let store = store.clone();
        async move { store.get(id).await.map(|r| r.status) }
    };
    assert_eq!(status("recent").await, Some(Status::Delivered));
    assert_eq!(status("dead").await, Some(Status::Dead));
    assert_eq!(status("pending").await, Some(Status::Pending));
    assert_eq!(store.retain_older(day).await, 0);

    // The newest record, delivered and then past its retention: what is written after it is
    // deleted still stamps above it.
    relay(&store, &stamps, &[]).await;
    store.age("pending", 1).await;
    store.age("recent", 1).await;
    assert_eq!(store.retain_older(Duration::from_secs(3_600)).await, 2);
    assert!(store.get("pending").await.is_none());
    let newest = stamps.max();
    assert_eq!(newest, stamps.of("pending"));
    store.write(&outbox, "after").await;
    relay(&store, &stamps, &[]).await;
    assert!(
        stamps.of("after") > newest,
        "written after the retention: stamp {} <= {newest}",
        stamps.of("after")
    );
    assert_eq!(
        status("dead").await,
        Some(Status::Dead),
        "dead records stay"
    );
}

macro_rules! on_both_stores {
    ($($scenario:ident),* $(,)?) => {
        mod pg {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let (outbox, store) = postgres(stringify!($scenario)).await;
                super::$scenario(outbox, store).await;
            })*
        }
        mod lite {
            use super::*;
            $(#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn $scenario() {
                let (outbox, store) = sqlite(stringify!($scenario)).await;
                super::$scenario(outbox, store).await;
            })*
        }
    };
}

on_both_stores!(purged_newest_record, retain_deletes_old_delivered_records);

/// The SQLite outbox table as made before `seq` (its stamp the implicit rowid), with its indexes.
const TABLE_BEFORE_SEQ: &str = "
CREATE TABLE outbox (
    id           TEXT PRIMARY KEY NOT NULL,
    topic        TEXT NOT NULL,
    key          TEXT,
    payload      BLOB NOT NULL,
    status       TEXT NOT NULL DEFAULT 'pending' CHECK (status IN ('pending', 'delivered', 'dead')),
    attempts     INTEGER NOT NULL DEFAULT 0,
    last_error   TEXT,
    available_at INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    lease_owner  TEXT,
    lease_until  INTEGER,
    created_at   INTEGER NOT NULL DEFAULT (CAST(unixepoch('subsec') * 1000 AS INTEGER)),
    delivered_at INTEGER,
    headers      TEXT
);
CREATE INDEX outbox_pending ON outbox (status, available_at);
CREATE INDEX outbox_key ON outbox (key, status);
";

/// An SQLite outbox made before `seq`, with records in every status, is upgraded by `migrate`
/// (run twice at once, then again): every record kept as it was, its stamp its old rowid, and the
/// records written after it stamped above the highest.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_table_before_seq_is_upgraded() {
    let pool = sqlite_pool("upgrade").await;
    sqlx::raw_sql(TABLE_BEFORE_SEQ)
        .execute(&pool)
        .await
        .unwrap();
    let outbox = Outbox::table("outbox");
    let old = outbox.sqlite(pool.clone());
    for id in ["delivered", "pending", "dead", "gone", "pending-2"] {
        old.write(&outbox, id).await;
    }
    // The relay's marks, as they were written to this table; "gone" was purged (a rowid below the
    // highest: not handed out again by the old table either).
    sqlx::raw_sql(
        "UPDATE outbox SET status = 'delivered', attempts = 1, delivered_at = 1 WHERE id = 'delivered'; \
         UPDATE outbox SET status = 'dead', attempts = 1, last_error = 'rejected: refused' WHERE id = 'dead'; \
         DELETE FROM outbox WHERE id = 'gone';",
    )
    .execute(&pool)
    .await
    .unwrap();
    let rowids: BTreeMap<String, i64> = sqlx::query_as("SELECT id, rowid FROM outbox")
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    let before: Vec<StoredRecord> = {
        let mut records = Vec::new();
        for id in rowids.keys() {
            records.push(Db::get(&old, id).await.unwrap());
        }
        records
    };

    // Two processes starting at once, and a restart.
    let other = outbox.sqlite(pool.clone());
    let (one, two) = tokio::join!(old.migrate(), other.migrate());
    one.unwrap();
    two.unwrap();
    old.migrate().await.unwrap();
    let store = old;

    let seqs: BTreeMap<String, i64> = sqlx::query_as("SELECT id, seq FROM outbox")
        .fetch_all(&pool)
        .await
        .unwrap()
        .into_iter()
        .collect();
    assert_eq!(seqs, rowids, "every record kept, its seq its old rowid");
    for record in &before {
        assert_eq!(
            Db::get(&store, record.id.as_str()).await.as_ref(),
            Some(record),
            "kept as it was"
        );
    }
    let tables: Vec<String> =
        sqlx::query_scalar("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name")
            .fetch_all(&pool)
            .await
            .unwrap();
    assert_eq!(
        tables,
        ["outbox", "sqlite_sequence"],
        "the old table is gone"
    );
    let indexes: Vec<String> = sqlx::query_scalar(
        "SELECT name FROM sqlite_master WHERE type = 'index' AND tbl_name = 'outbox' \
           AND name NOT LIKE 'sqlite_autoindex%' ORDER BY name",
    )
    .fetch_all(&pool)
    .await
    .unwrap();
    assert_eq!(
        indexes,
        ["outbox_delivered", "outbox_key", "outbox_pending"]
    );
    // The dead letter's positions are the same as before (an operator's cursor stays valid).
    let dead = store.list(10, None).await.unwrap();
    assert_eq!(dead.records.len(), 1);
    assert_eq!(dead.records[0].position, rowids["dead"].to_string());

    // The pending records are relayed with their old rowids as stamps; a record written now is
    // stamped above the highest.
    let stamps = Stamps::default();
    store.write(&outbox, "after").await;
    relay(&store, &stamps, &[]).await;
    for id in ["pending", "pending-2"] {
        assert_eq!(stamps.of(id), Stamp(rowids[id] as u64), "{id}");
    }
    let highest = *rowids.values().max().unwrap();
    assert!(
        stamps.of("after") > Stamp(highest as u64),
        "written after the upgrade: stamp {} <= {highest}",
        stamps.of("after")
    );
    // And above it still once the newest record is gone.
    assert_eq!(store.retain_older(Duration::ZERO).await, 4);
    store.write(&outbox, "last").await;
    relay(&store, &stamps, &[]).await;
    assert!(stamps.of("last") > stamps.of("after"));
}
