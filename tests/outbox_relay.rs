//! The outbox on both stores — PostgreSQL (the real server) and SQLite (a file in a temporary
//! directory) — relayed to the in-memory sink: the round trip, attempts counted in the record
//! across a relay restart, dead after the bound and re-queued by an operator, reject / malformed /
//! panic, `ordered`. Fails, never skips, when PostgreSQL is unreachable.
#![cfg(all(feature = "postgres", feature = "sqlite"))]

use std::future::Future;
use std::time::Duration;

#[path = "support/dead_letters.rs"]
mod dead_letters;

use delivery::dead_letter::{DeadLetters, Selection};
use delivery::outbox::{
    Attempt, FromRecord, IntoAttempt, NewRecord, Outbox, OutboxRecord, PgStore, Record, RecordId,
    Relay, Relayer, SqliteStore, Status, Store, StoredRecord,
};
use delivery::testing::{MemorySink, SinkFailure};
use delivery::{UnitId, disposition::Backoff, disposition::ReasonKind};
use sqlx::AssertSqlSafe;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// Sends the record as written (what `#[relay]` generates for `async fn(record: Record, State(sink))`).
struct ToSink;
impl Relay<MemorySink> for ToSink {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let (record, sink) = (record.clone(), sink.clone());
        async move { sink.send(&record).await.into_attempt() }
    }
}

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order: String,
}

/// Decodes the payload first (`OutboxRecord<OrderPlaced>`): what does not decode never reaches
/// the sink.
struct Decoding;
impl Relay<MemorySink> for Decoding {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let decoded =
            <OutboxRecord<OrderPlaced> as FromRecord<MemorySink>>::from_record(record, sink);
        let sink = sink.clone();
        async move {
            match decoded {
                Ok(record) => {
                    assert!(!record.order.is_empty());
                    sink.send(&record).await.into_attempt()
                }
                Err(malformed) => Attempt::Malformed(malformed),
            }
        }
    }
}

/// Panics on a record's first attempt, sends it on the next.
struct PanicsFirst;
impl Relay<MemorySink> for PanicsFirst {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let (record, sink) = (record.clone(), sink.clone());
        async move {
            if record.attempts() == 0 && record.id().as_str() == "boom" {
                panic!("relay function panicked on {}", record.id());
            }
            sink.send(&record).await.into_attempt()
        }
    }
}

/// Sends the record as written, keeping a copy of each record it was handed.
#[derive(Clone, Default)]
struct Capturing(std::sync::Arc<std::sync::Mutex<Vec<Record>>>);
impl Relay<MemorySink> for Capturing {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        self.0.lock().unwrap().push(record.clone());
        ToSink.call(record, sink)
    }
}

/// What the tests need of either store.
trait Db: Store + DeadLetters {
    fn pending(&self) -> impl Future<Output = u64> + Send;
    fn get(&self, id: &str) -> impl Future<Output = StoredRecord> + Send;
    fn idle(&self) -> impl Future<Output = ()> + Send + 'static;
    /// Writes the order and its record in one transaction; commits unless `rollback`.
    fn write_order(
        &self,
        outbox: &Outbox,
        order: &str,
        record: NewRecord,
        rollback: bool,
    ) -> impl Future<Output = RecordId> + Send;
}

impl Db for PgStore {
    async fn pending(&self) -> u64 {
        PgStore::pending(self).await.unwrap()
    }
    async fn get(&self, id: &str) -> StoredRecord {
        PgStore::get(self, &id.into()).await.unwrap().unwrap()
    }
    fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        PgStore::idle(self)
    }
    async fn write_order(
        &self,
        outbox: &Outbox,
        order: &str,
        record: NewRecord,
        rollback: bool,
    ) -> RecordId {
        let mut tx = self.pool().begin().await.unwrap();
        let sql = format!(
            "INSERT INTO {}_orders (id) VALUES ($1)",
            outbox.table_name()
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(order)
            .execute(&mut *tx)
            .await
            .unwrap();
        let id = outbox.write(&mut tx, record).await.unwrap();
        if rollback {
            tx.rollback().await.unwrap();
        } else {
            tx.commit().await.unwrap();
        }
        id
    }
}

impl Db for SqliteStore {
    async fn pending(&self) -> u64 {
        SqliteStore::pending(self).await.unwrap()
    }
    async fn get(&self, id: &str) -> StoredRecord {
        SqliteStore::get(self, &id.into()).await.unwrap().unwrap()
    }
    fn idle(&self) -> impl Future<Output = ()> + Send + 'static {
        SqliteStore::idle(self)
    }
    async fn write_order(
        &self,
        outbox: &Outbox,
        order: &str,
        record: NewRecord,
        rollback: bool,
    ) -> RecordId {
        let mut tx = self.pool().begin().await.unwrap();
        let sql = format!(
            "INSERT INTO {}_orders (id) VALUES (?1)",
            outbox.table_name()
        );
        sqlx::query(AssertSqlSafe(sql))
            .bind(order)
            .execute(&mut *tx)
            .await
            .unwrap();
        let id = outbox.write(&mut tx, record).await.unwrap();
        if rollback {
            tx.rollback().await.unwrap();
        } else {
            tx.commit().await.unwrap();
        }
        id
    }
}

/// A fresh outbox table (and an `orders` table beside it) in PostgreSQL.
async fn postgres(name: &str) -> (Outbox, PgStore) {
    let table = format!("outbox_{name}_{}", std::process::id());
    let pool = sqlx::postgres::PgPoolOptions::new()
        .max_connections(8)
        .connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE; DROP TABLE IF EXISTS {table}_orders; \
         CREATE TABLE {table}_orders (id TEXT PRIMARY KEY);"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool);
    store.migrate().await.unwrap();
    (outbox, store)
}

/// A fresh outbox in an SQLite file in a temporary directory.
async fn sqlite(name: &str) -> (Outbox, SqliteStore) {
    let dir = std::env::temp_dir().join(format!("delivery-outbox-{name}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("outbox.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    let outbox = Outbox::table("outbox");
    sqlx::query("CREATE TABLE outbox_orders (id TEXT PRIMARY KEY)")
        .execute(&pool)
        .await
        .unwrap();
    let store = outbox.sqlite(pool);
    store.migrate().await.unwrap();
    (outbox, store)
}

fn relayer<St: Store>(store: &St, sink: &MemorySink) -> Relayer<St, MemorySink> {
    Relayer::new(store.clone())
        .state(sink.clone())
        .backoff(Backoff::none())
        .poll_interval(Duration::from_millis(10))
}

/// Resolves once `check` holds, polling.
async fn until<F: Future<Output = bool>>(mut check: impl FnMut() -> F) {
    while !check().await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// ---- the scenarios, each run on both stores ----

async fn round_trip<St: Db>(outbox: Outbox, store: St) {
    let mut written = Vec::new();
    for i in 0..40 {
        let record = NewRecord::json(
            "orders.events",
            &serde_json::json!({ "order": format!("o-{i}") }),
        )
        .unwrap()
        .key(format!("customer-{}", i % 3));
        // Half with the caller's own id, half minted at write time.
        let record = if i % 2 == 0 {
            record.id(format!("order-o-{i}"))
        } else {
            record
        };
        let id = store
            .write_order(&outbox, &format!("o-{i}"), record, false)
            .await;
        if i % 2 == 0 {
            assert_eq!(id.as_str(), format!("order-o-{i}"));
        }
        written.push((id, i));
    }
    // An order whose transaction rolled back: its record never existed.
    let ghost = store
        .write_order(
            &outbox,
            "o-ghost",
            NewRecord::new("orders.events", "ghost").id("order-o-ghost"),
            true,
        )
        .await;
    assert_eq!(store.pending().await, 40);

    let sink = MemorySink::new();
    let report = relayer(&store, &sink)
        .shutdown_on(store.idle())
        .run(Decoding)
        .await;
    assert_eq!(report.delivered, 40, "{report:?}");
    let accepted = sink.accepted();
    assert_eq!(accepted.len(), 40);
    assert!(accepted.iter().all(|s| s.id != ghost));
    for (id, i) in &written {
        let sent = accepted
            .iter()
            .find(|s| &s.id == id)
            .expect("every record sent");
        assert_eq!(sent.topic, "orders.events");
        assert_eq!(
            sent.key.as_deref(),
            Some(format!("customer-{}", i % 3).as_str())
        );
        let payload: serde_json::Value = serde_json::from_slice(&sent.payload).unwrap();
        assert_eq!(payload["order"], format!("o-{i}"));
        let stored = store.get(id.as_str()).await;
        assert_eq!(stored.status, Status::Delivered);
        assert_eq!(stored.attempts, 1, "one attempt, counted when claimed");
    }
    // Nothing is sent twice when nothing failed.
    assert_eq!(sink.sent().len(), 40);
}

async fn attempts_survive_restart<St: Db>(outbox: Outbox, store: St) {
    store
        .write_order(
            &outbox,
            "o-1",
            NewRecord::new("orders.events", "o-1").id("order-o-1"),
            false,
        )
        .await;
    let sink = MemorySink::new();
    sink.fail_record_always("order-o-1", SinkFailure::Transient);

    // First relay: stopped once two attempts failed.
    let watch = store.clone();
    let first = relayer(&store, &sink)
        .max_attempts(5)
        .shutdown_on(
            async move { until(|| async { watch.get("order-o-1").await.attempts >= 2 }).await },
        )
        .run(ToSink)
        .await;
    let after_first = store.get("order-o-1").await;
    assert_eq!(after_first.status, Status::Pending);
    assert!(after_first.attempts >= 2);
    assert_eq!(first.retried, u64::from(after_first.attempts));

    // A new relay (a restarted process) continues the count from the record, to the bound.
    let second = relayer(&store, &sink)
        .max_attempts(5)
        .shutdown_on(store.idle())
        .run(ToSink)
        .await;
    let stored = store.get("order-o-1").await;
    assert_eq!(stored.status, Status::Dead);
    assert_eq!(stored.attempts, 5);
    let error = stored.last_error.clone().unwrap();
    assert!(
        error.starts_with("exhausted: failed on delivery 5 of 5"),
        "{error}"
    );
    assert!(error.contains("transient failure"), "{error}");
    assert_eq!(second.dead, 1);
    // Every attempt the sink saw carried the record's id and the count so far: 0, 1, 2, 3, 4.
    let sent = sink.sent();
    assert!(sent.iter().all(|s| s.id.as_str() == "order-o-1"));
    assert_eq!(
        sent.iter().map(|s| s.attempts).collect::<Vec<_>>(),
        vec![0, 1, 2, 3, 4]
    );

    // The operator lists it (through the one dead-letter API), fixes the receiver, redrives:
    // delivered under the same id.
    let dead = dead_letters::all(&store).await;
    assert_eq!(dead.len(), 1);
    assert_eq!(dead[0].unit.id().as_str(), "order-o-1");
    assert_eq!(&dead[0].unit.payload()[..], b"o-1");
    assert_eq!(dead[0].reason, Some(ReasonKind::Exhausted));
    assert_eq!(dead[0].unit.delivery_count().get(), 5, "its attempts");
    assert_eq!(dead[0].source, "orders.events");
    let report = store
        .redrive(Selection::Ids(&[
            dead[0].unit.id().clone(),
            UnitId::new("no-such-record"),
        ]))
        .await
        .unwrap();
    assert_eq!(report.redriven, [UnitId::new("order-o-1")]);
    assert_eq!(report.not_found, [UnitId::new("no-such-record")]);
    assert_eq!(store.get("order-o-1").await.attempts, 0);
    sink.heal();
    let third = relayer(&store, &sink)
        .shutdown_on(store.idle())
        .run(ToSink)
        .await;
    assert_eq!(third.delivered, 1);
    assert_eq!(store.get("order-o-1").await.status, Status::Delivered);
    let accepted = sink.accepted();
    assert_eq!(accepted.len(), 1);
    assert_eq!(
        (accepted[0].id.as_str(), accepted[0].attempts),
        ("order-o-1", 0)
    );
    assert!(dead_letters::all(&store).await.is_empty());
}

async fn dead_at_once<St: Db>(outbox: Outbox, store: St) {
    let write = |order: &'static str, payload: &'static [u8]| {
        let (store, outbox) = (store.clone(), outbox.clone());
        async move {
            store
                .write_order(
                    &outbox,
                    order,
                    NewRecord::new("orders.events", payload).id(order),
                    false,
                )
                .await
        }
    };
    write("refused", br#"{"order":"refused"}"#).await;
    write("garbled", b"{not json\xff").await;
    write("fine", br#"{"order":"fine"}"#).await;
    let sink = MemorySink::new();
    sink.fail_record_always("refused", SinkFailure::Permanent);
    let report = relayer(&store, &sink)
        .max_attempts(10)
        .shutdown_on(store.idle())
        .run(Decoding)
        .await;
    assert_eq!(
        (report.delivered, report.dead, report.retried),
        (1, 2, 0),
        "{report:?}"
    );

    let refused = store.get("refused").await;
    assert_eq!((refused.status, refused.attempts), (Status::Dead, 1));
    assert!(
        refused
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("rejected: memory sink: refused")
    );
    let garbled = store.get("garbled").await;
    assert_eq!((garbled.status, garbled.attempts), (Status::Dead, 1));
    assert!(
        garbled
            .last_error
            .as_deref()
            .unwrap()
            .starts_with("malformed: ")
    );
    // Kept intact for the operator.
    assert_eq!(&garbled.payload[..], b"{not json\xff");
    // The refused record was sent once; the malformed one never reached the sink.
    let sent: Vec<_> = sink.sent().into_iter().map(|s| s.id.to_string()).collect();
    assert_eq!(sent.iter().filter(|id| *id == "refused").count(), 1);
    assert!(!sent.iter().any(|id| id == "garbled"));
    assert_eq!(dead_letters::all(&store).await.len(), 2);
    assert_eq!(store.count().await.unwrap(), 2);
    // One is purged for good; the other stays, readable by id.
    assert_eq!(store.purge(&[UnitId::new("garbled")]).await.unwrap(), 1);
    let left = store.peek(&UnitId::new("refused")).await.unwrap().unwrap();
    assert_eq!(left.reason, Some(ReasonKind::Rejected));
    assert!(
        left.detail.starts_with("memory sink: refused"),
        "{}",
        left.detail
    );
    assert!(store.peek(&UnitId::new("garbled")).await.unwrap().is_none());
    assert_eq!(store.count().await.unwrap(), 1);
}

/// An operator's edited redrive of a dead record: pending again under its own id with the new
/// payload, its headers kept and the edit recorded in two more, then relayed; an unknown id
/// changes nothing.
async fn edited_redrive<St: Db>(outbox: Outbox, store: St) {
    let original = br#"{"order":"refused","total":-1}"#;
    let record = NewRecord::new("orders.events", &original[..])
        .id("refused")
        .header("tenant", "acme");
    store.write_order(&outbox, "refused", record, false).await;
    let sink = MemorySink::new();
    sink.fail_record_always("refused", SinkFailure::Permanent);
    relayer(&store, &sink)
        .shutdown_on(store.idle())
        .run(ToSink)
        .await;
    assert_eq!(store.get("refused").await.status, Status::Dead);

    let fixed = bytes::Bytes::from_static(br#"{"order":"refused","total":12}"#);
    let unknown = store
        .redrive_edited(&UnitId::new("no-such"), fixed.clone())
        .await
        .unwrap();
    assert!(!unknown, "no dead record with that id");
    assert_eq!(store.count().await.unwrap(), 1, "nothing changed");
    assert_eq!(&store.get("refused").await.payload[..], &original[..]);

    assert!(
        store
            .redrive_edited(&UnitId::new("refused"), fixed.clone())
            .await
            .unwrap()
    );
    assert_eq!(store.count().await.unwrap(), 0);
    let requeued = store.get("refused").await;
    assert_eq!(
        (requeued.id.as_str(), requeued.status, requeued.attempts),
        ("refused", Status::Pending, 0),
        "pending again under its own id"
    );
    assert_eq!(requeued.payload, fixed);
    // Redriven already: a second edit finds no dead record.
    assert!(
        !store
            .redrive_edited(&UnitId::new("refused"), "x".into())
            .await
            .unwrap()
    );

    let sink = MemorySink::new();
    let relay = Capturing::default();
    let report = relayer(&store, &sink)
        .shutdown_on(store.idle())
        .run(relay.clone())
        .await;
    assert_eq!(report.delivered, 1, "{report:?}");
    let sent = relay.0.lock().unwrap().clone();
    assert_eq!(sent.len(), 1);
    let sent = &sent[0];
    assert_eq!(sent.id().as_str(), "refused");
    assert_eq!(sent.payload(), &fixed);
    let header = |name: &str| sent.headers().get_str(name).map(str::to_owned);
    assert_eq!(header("tenant").as_deref(), Some("acme"));
    assert_eq!(header(delivery::headers::EDITED).as_deref(), Some("true"));
    use sha2::Digest as _;
    assert_eq!(
        header(delivery::headers::ORIGINAL_SHA256),
        Some(hex::encode(sha2::Sha256::digest(original))),
        "{:?}",
        sent.headers()
    );
    assert_eq!(store.get("refused").await.status, Status::Delivered);
}

async fn panic_is_a_failure<St: Db>(outbox: Outbox, store: St) {
    store
        .write_order(
            &outbox,
            "boom",
            NewRecord::new("orders.events", "boom").id("boom"),
            false,
        )
        .await;
    let sink = MemorySink::new();
    let report = relayer(&store, &sink)
        .shutdown_on(store.idle())
        .run(PanicsFirst)
        .await;
    assert_eq!((report.retried, report.delivered), (1, 1), "{report:?}");
    let stored = store.get("boom").await;
    assert_eq!(
        (stored.status, stored.attempts),
        (Status::Delivered, 2),
        "the panicked attempt and the delivered one"
    );
    assert!(stored.last_error.unwrap().contains("panicked"));
}

async fn ordered_holds_a_key<St: Db>(outbox: Outbox, store: St) {
    for (order, key) in [
        ("a1", "A"),
        ("b1", "B"),
        ("a2", "A"),
        ("b2", "B"),
        ("a3", "A"),
        ("b3", "B"),
        ("n1", ""),
    ] {
        let record = NewRecord::new("orders.events", order).id(order);
        let record = if key.is_empty() {
            record
        } else {
            record.key(key)
        };
        store.write_order(&outbox, order, record, false).await;
    }
    let sink = MemorySink::new();
    sink.fail_record_always("a1", SinkFailure::Transient);

    // While a1 fails, A's later records are held; B and the keyless record flow.
    let watch = store.clone();
    relayer(&store, &sink)
        .ordered(true)
        .max_attempts(1000)
        .shutdown_on(async move {
            until(|| async {
                let mut done = true;
                for id in ["b1", "b2", "b3", "n1"] {
                    done &= watch.get(id).await.status == Status::Delivered;
                }
                done && watch.get("a1").await.attempts >= 3
            })
            .await
        })
        .run(ToSink)
        .await;
    for id in ["a2", "a3"] {
        let held = store.get(id).await;
        assert_eq!(
            (held.status, held.attempts),
            (Status::Pending, 0),
            "{id} held back"
        );
        assert!(
            !sink.sent().iter().any(|s| s.id.as_str() == id),
            "{id} never sent while a1 fails"
        );
    }
    let order_b: Vec<_> = sink
        .accepted()
        .into_iter()
        .filter(|s| s.key.as_deref() == Some("B"))
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(order_b, ["b1", "b2", "b3"]);

    // Released once a1 goes through, in order. (The same bound as the first run: a1 has been
    // attempted more times than the default allows, and a record claimed past its bound is dead.)
    sink.heal();
    relayer(&store, &sink)
        .ordered(true)
        .max_attempts(1000)
        .shutdown_on(store.idle())
        .run(ToSink)
        .await;
    let order_a: Vec<_> = sink
        .accepted()
        .into_iter()
        .filter(|s| s.key.as_deref() == Some("A"))
        .map(|s| s.id.to_string())
        .collect();
    assert_eq!(order_a, ["a1", "a2", "a3"]);
    assert_eq!(store.pending().await, 0);
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

on_both_stores!(
    round_trip,
    attempts_survive_restart,
    dead_at_once,
    edited_redrive,
    panic_is_a_failure,
    ordered_holds_a_key,
);
