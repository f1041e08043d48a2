//! The PostgreSQL outbox store against the real server: two relays at once over thousands of
//! records, a lease left by a relay dropped mid-flight, `LISTEN/NOTIFY` waking an idle relay, a
//! receiver's `Retry-After` kept in the record, migrations run concurrently. Fails, never skips,
//! when PostgreSQL is unreachable.
#![cfg(feature = "postgres")]

use std::collections::HashMap;
use std::future::Future;
use std::time::Duration;

use delivery::disposition::Backoff;
use delivery::outbox::{
    Attempt, IntoAttempt, NewRecord, Outbox, PgStore, Record, Relay, Relayer, Status, Store,
};
use delivery::testing::{MemorySink, SinkFailure};
use sqlx::postgres::PgPoolOptions;
use sqlx::{AssertSqlSafe, PgPool};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

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

async fn pool() -> PgPool {
    PgPoolOptions::new()
        .max_connections(6)
        .connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()))
}

async fn fresh(name: &str) -> (Outbox, PgStore) {
    let table = format!("outbox_{name}_{}", std::process::id());
    let pool = pool().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE;"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool);
    store.migrate().await.unwrap();
    (outbox, store)
}

/// Writes `n` records, 500 per transaction.
async fn write(outbox: &Outbox, store: &PgStore, n: usize, key: impl Fn(usize) -> Option<String>) {
    for chunk in (0..n).collect::<Vec<_>>().chunks(500) {
        let mut tx = store.pool().begin().await.unwrap();
        for &i in chunk {
            let record =
                NewRecord::new("orders.events", format!("payload {i}")).id(format!("r-{i:05}"));
            let record = match key(i) {
                Some(key) => record.key(key),
                None => record,
            };
            outbox.write(&mut tx, record).await.unwrap();
        }
        tx.commit().await.unwrap();
    }
}

async fn until<F: Future<Output = bool>>(mut check: impl FnMut() -> F) {
    while !check().await {
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_relays_never_relay_a_record_twice() {
    const N: usize = 4000;
    let (outbox, store) = fresh("two_relays").await;
    write(&outbox, &store, N, |i| Some(format!("k{}", i % 17))).await;

    let sink = MemorySink::new();
    // A confirm round trip, so both relays have windows of records outstanding at once.
    sink.latency(Duration::from_millis(2));
    // Each relay has its own pool, as two processes would.
    let relay = |store: PgStore| {
        Relayer::new(store.clone())
            .state(sink.clone())
            .batch(50)
            .window(32)
            .backoff(Backoff::none())
            .poll_interval(Duration::from_millis(10))
            .shutdown_on(store.idle())
            .run(ToSink)
    };
    let other = outbox.postgres(pool().await);
    let (a, b) = tokio::join!(
        tokio::spawn(relay(store.clone())),
        tokio::spawn(relay(other))
    );
    let (a, b) = (a.unwrap(), b.unwrap());

    let accepted = sink.accepted();
    let mut copies: HashMap<String, usize> = HashMap::new();
    for sent in &accepted {
        *copies.entry(sent.id.to_string()).or_default() += 1;
    }
    let duplicates = accepted.len() - copies.len();
    println!(
        "two relays: {} and {} records delivered, {} sends, {} duplicates, at most {} in flight",
        a.delivered,
        b.delivered,
        accepted.len(),
        duplicates,
        sink.most_in_flight()
    );
    assert_eq!(copies.len(), N, "every record delivered");
    assert_eq!(duplicates, 0, "no record relayed by both");
    assert_eq!(a.delivered + b.delivered, N as u64);
    assert!(
        a.delivered > 0 && b.delivered > 0,
        "both relays took part: {a:?} {b:?}"
    );
    assert_eq!(store.pending().await.unwrap(), 0);
    let delivered: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {} WHERE status = 'delivered' AND delivered_at IS NOT NULL AND lease_owner IS NULL",
        outbox.table_name()
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert_eq!(delivered, N as i64);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lease_left_mid_flight_is_claimed_again_after_it_expires() {
    let (outbox, store) = fresh("lease").await;
    write(&outbox, &store, 1, |_| None).await;
    let sink = MemorySink::new();
    sink.fail_record_always("r-00000", SinkFailure::Hang);

    // The relay is dropped while its attempt is in flight: no mark, the lease stays.
    let running = Relayer::new(store.clone())
        .state(sink.clone())
        .lease(Duration::from_secs(2))
        .poll_interval(Duration::from_millis(10))
        .run(ToSink);
    let watch = sink.clone();
    tokio::select! {
        _ = running => panic!("the relay has no shutdown signal"),
        () = until(|| { let sent = watch.sent().len(); async move { sent == 1 } }) => {}
    }
    let leased: (Option<String>, bool) = sqlx::query_as(AssertSqlSafe(format!(
        "SELECT lease_owner, lease_until > now() FROM {} WHERE id = 'r-00000'",
        outbox.table_name()
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(
        leased.0.is_some() && leased.1,
        "claimed and leased: {leased:?}"
    );
    // The attempt was counted when the record was claimed, before the relay function ran: a
    // relay that dies mid-attempt still moves the record towards `max_attempts`.
    let stored = store.get(&"r-00000".into()).await.unwrap().unwrap();
    assert_eq!((stored.status, stored.attempts), (Status::Pending, 1));

    // Another relay claims it once the lease expired, and delivers it under the same id.
    sink.heal();
    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .poll_interval(Duration::from_millis(20))
        .shutdown_on(store.idle())
        .run(ToSink)
        .await;
    assert_eq!(report.delivered, 1);
    let sent = sink.sent();
    assert_eq!(sent.len(), 2);
    assert!(sent.iter().all(|s| s.id.as_str() == "r-00000"));
    assert_eq!(
        sent.iter().map(|s| s.attempts).collect::<Vec<_>>(),
        [0, 1],
        "the second attempt knows of the first, cut short"
    );
    assert!(sent[1].accepted);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn notify_wakes_an_idle_relay() {
    let (outbox, store) = fresh("notify").await;
    let sink = MemorySink::new();
    let watch = sink.clone();
    // Polling once an hour: only the notification can bring the record in time.
    let relay = tokio::spawn(
        Relayer::new(store.clone())
            .state(sink.clone())
            .poll_interval(Duration::from_secs(3600))
            .shutdown_on(async move {
                until(|| {
                    let n = watch.accepted().len();
                    async move { n == 1 }
                })
                .await
            })
            .run(ToSink),
    );
    // Let the relay find the table empty and go idle, listening.
    until(|| {
        let store = store.clone();
        async move {
            let listening: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'LISTEN %'",
            )
            .fetch_one(store.pool())
            .await
            .unwrap();
            listening > 0
        }
    })
    .await;
    tokio::time::sleep(Duration::from_millis(100)).await;
    write(&outbox, &store, 1, |_| None).await;
    let report = tokio::time::timeout(Duration::from_secs(60), relay)
        .await
        .expect("the commit's notification woke the relay")
        .unwrap();
    assert_eq!(report.delivered, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn retry_after_is_kept_in_the_record() {
    let (outbox, store) = fresh("retry_after").await;
    write(&outbox, &store, 1, |_| None).await;
    let sink = MemorySink::new();
    sink.fail_record(
        "r-00000",
        1,
        SinkFailure::RetryAfter(Duration::from_secs(3600)),
    );
    let watch = store.clone();
    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .backoff(Backoff::none())
        .poll_interval(Duration::from_millis(10))
        .shutdown_on(async move {
            until(|| async {
                watch
                    .get(&"r-00000".into())
                    .await
                    .unwrap()
                    .unwrap()
                    .attempts
                    == 1
            })
            .await
        })
        .run(ToSink)
        .await;
    assert_eq!(report.retried, 1);
    // Not available again for about an hour, by the database's clock.
    let wait: f64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT extract(epoch FROM available_at - now())::float8 FROM {} WHERE id = 'r-00000'",
        outbox.table_name()
    )))
    .fetch_one(store.pool())
    .await
    .unwrap();
    assert!(wait > 3000.0, "available again in {wait} s");
    let stored = store.get(&"r-00000".into()).await.unwrap().unwrap();
    assert!(
        stored
            .last_error
            .unwrap()
            .contains("retry after 3600000 ms")
    );
    assert_eq!(sink.sent().len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn migrations_run_concurrently() {
    let table = format!("outbox_migrate_{}", std::process::id());
    let pool = pool().await;
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE;"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let stores: Vec<_> = (0..4).map(|_| outbox.postgres(pool.clone())).collect();
    let runs = stores.iter().map(|s| s.migrate());
    for result in futures_util::future::join_all(runs).await {
        result.unwrap();
    }
    assert_eq!(stores[0].pending().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_backlog_counts_pending_and_dead_records_and_ages_the_oldest() {
    let (outbox, store) = fresh("backlog").await;
    let empty = store.backlog().await.unwrap();
    assert_eq!(
        (empty.pending, empty.oldest_pending_age, empty.dead),
        (0, None, 0)
    );

    write(&outbox, &store, 3, |_| None).await;
    let t = outbox.table_name();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "UPDATE {t} SET created_at = now() - interval '90 seconds' WHERE id = 'r-00000'; \
         UPDATE {t} SET status = 'dead' WHERE id = 'r-00002';"
    )))
    .execute(store.pool())
    .await
    .unwrap();
    let backlog = store.backlog().await.unwrap();
    assert_eq!((backlog.pending, backlog.dead), (2, 1));
    let age = backlog.oldest_pending_age.unwrap().as_secs_f64();
    assert!((89.0..200.0).contains(&age), "the oldest is {age} s old");

    // The relay reads it into its health while it runs.
    let relayer = Relayer::new(store.clone())
        .state(MemorySink::new())
        .poll_interval(Duration::from_millis(10))
        .backlog_every(Duration::from_millis(100));
    let health = relayer.health();
    let watch = health.clone();
    let report = relayer
        .shutdown_on(async move { until(|| async { watch.snapshot().pending == Some(0) }).await })
        .run(ToSink)
        .await;
    assert_eq!(report.delivered, 2);
    let snapshot = health.snapshot();
    assert_eq!(snapshot.dead_letter_depth, Some(1));
    assert_eq!(snapshot.oldest_pending_age_seconds, None);
    assert!(snapshot.connected && snapshot.last_receive_age_seconds.is_some());
}

/// Claims and marks read their batch, not the table. Claimed as `id IN (<the batch>)` and marked
/// through a join alone, each read all of the table's rows, delivered ones included (PostgreSQL's
/// hash joins, chosen below a few hundred thousand rows): relaying these 20 000 records read
/// 1.6–1.8 million rows sequentially (0.38 million with the claim fixed and not the mark).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn claims_read_their_batch_not_the_whole_table() {
    const N: usize = 20_000;
    let (outbox, store) = fresh("claim_reads").await;
    write(&outbox, &store, N, |_| None).await;
    // The statistics autovacuum keeps of a table in use, without waiting for it.
    sqlx::raw_sql(AssertSqlSafe(format!("ANALYZE {}", outbox.table_name())))
        .execute(store.pool())
        .await
        .unwrap();

    let sink = MemorySink::new();
    // Stopped once the sink has every record (the relay marks what it sent before it stops),
    // rather than by polling the table: only claims and marks read it meanwhile.
    let all_sent = {
        let sink = sink.clone();
        async move { until(|| std::future::ready(sink.accepted().len() >= N)).await }
    };
    let report = Relayer::new(store.clone())
        .state(sink.clone())
        .batch(256)
        .backoff(Backoff::none())
        .poll_interval(Duration::from_millis(10))
        .shutdown_on(all_sent)
        .run(ToSink)
        .await;
    assert_eq!(report.delivered, N as u64, "{report:?}");

    // The table's statistics, once every claim's and every mark's update has reached them (each
    // connection reports its own when it goes idle, within about a second).
    let table = outbox.table_name().to_owned();
    let read = async || -> (i64, i64) {
        sqlx::query_as(
            "SELECT coalesce(seq_tup_read, 0), coalesce(n_tup_upd, 0) \
             FROM pg_stat_user_tables WHERE relname = $1",
        )
        .bind(&table)
        .fetch_one(store.pool())
        .await
        .unwrap()
    };
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let (sequential, updated) = loop {
        let (sequential, updated) = read().await;
        if updated >= 2 * N as i64 || std::time::Instant::now() > deadline {
            break (sequential, updated);
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    };
    println!("relaying {N} records: {sequential} rows read sequentially, {updated} updated");
    assert!(
        updated >= 2 * N as i64,
        "every record claimed and marked ({updated} updates counted)"
    );
    // A pass or two over the table at most (20 000 rows read here), never one per claim or mark
    // (79 of each).
    assert!(
        sequential <= 5 * N as i64,
        "{sequential} rows read sequentially to relay {N} records: claims scan the whole table"
    );
}

/// The sink behind a gate: each attempt waits for a permit before it sends.
struct Gated {
    gate: std::sync::Arc<tokio::sync::Semaphore>,
    entered: std::sync::Arc<std::sync::atomic::AtomicUsize>,
}
impl Relay<MemorySink> for Gated {
    fn call(
        &self,
        record: &Record,
        sink: &MemorySink,
    ) -> impl Future<Output = Attempt> + Send + 'static {
        let (record, sink) = (record.clone(), sink.clone());
        let (gate, entered) = (self.gate.clone(), self.entered.clone());
        async move {
            entered.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
            gate.acquire().await.unwrap().forget();
            sink.send(&record).await.into_attempt()
        }
    }
}

/// Another session locks the outbox table (`ACCESS EXCLUSIVE`: every statement on it waits),
/// in a transaction left open until the lock is dropped.
async fn lock_table(table: &str) -> sqlx::PgConnection {
    use sqlx::Connection;
    let mut conn = sqlx::PgConnection::connect(&database_url()).await.unwrap();
    sqlx::raw_sql(AssertSqlSafe(format!(
        "BEGIN; LOCK TABLE {table} IN ACCESS EXCLUSIVE MODE;"
    )))
    .execute(&mut conn)
    .await
    .unwrap();
    conn
}

/// Until a statement of the relay naming `table` and starting with `verb` waits on a lock.
async fn blocked(store: &PgStore, table: &str, verb: &str) {
    let mut checks = 0;
    until(|| {
        checks += 1;
        assert!(
            checks < 3_000,
            "no {verb} on {table} ever waited on the lock"
        );
        let (store, table, verb) = (store.clone(), table.to_owned(), verb.to_owned());
        async move {
            let waiting: i64 = sqlx::query_scalar(
                "SELECT count(*) FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
                 AND query ILIKE $1 || '%' AND query LIKE '%' || $2 || '%'",
            )
            .bind(verb)
            .bind(table)
            .fetch_one(store.pool())
            .await
            .unwrap();
            waiting > 0
        }
    })
    .await;
}

/// A relay over `store` and `sink`, drain deadline 1 s, running until `stop` is notified.
struct Stoppable {
    stop: std::sync::Arc<tokio::sync::Notify>,
    relay: tokio::task::JoinHandle<delivery::outbox::RelayReport>,
}

impl Stoppable {
    fn spawn(store: &PgStore, sink: &MemorySink, relay: impl Relay<MemorySink>) -> Self {
        let stop = std::sync::Arc::new(tokio::sync::Notify::new());
        let relay = tokio::spawn(
            Relayer::new(store.clone())
                .state(sink.clone())
                .drain_deadline(Duration::from_secs(1))
                .shutdown_on({
                    let stop = stop.clone();
                    async move { stop.notified().await }
                })
                .run(relay),
        );
        Stoppable { stop, relay }
    }

    /// Signals the shutdown and waits for the run to return: within the drain deadline (1 s)
    /// and its grace (5 s); the bound is generous, not a measure of speed.
    async fn stop(self, blocked: &str) -> delivery::outbox::RelayReport {
        self.stop.notify_one();
        tokio::time::timeout(Duration::from_secs(60), self.relay)
            .await
            .unwrap_or_else(|_| {
                panic!("the relay never returned from its shutdown, its {blocked} still blocked")
            })
            .unwrap()
    }
}

/// Issue 34, item 11: shutdown is bounded by the drain deadline and its grace, even with the
/// relay's claim blocked in PostgreSQL (the table locked by another session). Nothing is marked.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_while_a_claim_is_blocked() {
    let (outbox, store) = fresh("claim_blocked").await;
    write(&outbox, &store, 1, |_| None).await;
    let table = outbox.table_name().to_owned();
    let lock = lock_table(&table).await;

    let sink = MemorySink::new();
    let relay = Stoppable::spawn(&store, &sink, ToSink);
    blocked(&store, &table, "UPDATE").await;
    let report = relay.stop("claim").await;
    assert_eq!((report.delivered, report.dead), (0, 0), "{report:?}");

    drop(lock); // the session ends, its lock with it
    assert!(sink.sent().is_empty());
    let stored = store.get(&"r-00000".into()).await.unwrap().unwrap();
    assert_eq!(stored.status, Status::Pending, "nothing marked");
}

/// The same with the relay's write of marks blocked: one record confirmed by the receiver (its
/// mark stuck behind the lock), one never confirmed (hangs; given back at the drain deadline).
/// The relay returns; the record never confirmed is never marked delivered or dead.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_returns_while_a_mark_is_blocked() {
    let (outbox, store) = fresh("mark_blocked").await;
    write(&outbox, &store, 2, |_| None).await;
    let table = outbox.table_name().to_owned();
    let sink = MemorySink::new();
    sink.fail_record_always("r-00001", SinkFailure::Hang);
    let gated = Gated {
        gate: std::sync::Arc::new(tokio::sync::Semaphore::new(0)),
        entered: Default::default(),
    };
    let (gate, entered) = (gated.gate.clone(), gated.entered.clone());
    let relay = Stoppable::spawn(&store, &sink, gated);
    // Both attempts under way (claimed, leased), then the table locked, then the receiver answers.
    until(|| std::future::ready(entered.load(std::sync::atomic::Ordering::SeqCst) == 2)).await;
    let lock = lock_table(&table).await;
    gate.add_permits(2);
    until(|| std::future::ready(sink.accepted().len() == 1)).await;
    blocked(&store, &table, "UPDATE").await;
    let report = relay.stop("write of marks").await;
    assert_eq!((report.delivered, report.dead), (0, 0), "{report:?}");
    assert!(report.mark_failed >= 1, "the mark not written: {report:?}");

    drop(lock);
    assert_eq!(sink.accepted().len(), 1);
    assert_eq!(sink.accepted()[0].id.as_str(), "r-00000");
    let never_confirmed = store.get(&"r-00001".into()).await.unwrap().unwrap();
    assert_eq!(
        never_confirmed.status,
        Status::Pending,
        "never confirmed: not marked"
    );
    let confirmed = store.get(&"r-00000".into()).await.unwrap().unwrap();
    assert_ne!(
        confirmed.status,
        Status::Dead,
        "confirmed: delivered, or pending again"
    );
}
