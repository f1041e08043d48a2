//! The transport conformance suite on the database queue, in the real PostgreSQL (127.0.0.1:5432,
//! or `DATABASE_URL`) and in SQLite (a file in the temp directory): the same checks in both, and
//! two of the acknowledgement in the handler's transaction. Fails, never skips, when PostgreSQL is
//! unreachable.
use std::collections::HashMap;
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery::queue::Queue;
use delivery::{Consumer, HandlerError, Json, Unit, consumer};
use delivery_core::testing::conformance::{self, Fixture};

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

async fn pg_pool() -> sqlx::PgPool {
    let url = database_url();
    sqlx::postgres::PgPoolOptions::new()
        .max_connections(32)
        .connect(&url)
        .await
        .unwrap_or_else(|e| {
            panic!("PostgreSQL unreachable at {url}: {e} (scripts/services.sh starts it)")
        })
}

/// A database file of its own for each test, removed first.
async fn sqlite_pool() -> sqlx::SqlitePool {
    static FILE: AtomicU64 = AtomicU64::new(0);
    let file = std::env::temp_dir().join(format!(
        "delivery-queue-{}-{}.db",
        std::process::id(),
        FILE.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_file(&file);
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(&file)
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(30));
    sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(8)
        .connect_with(options)
        .await
        .unwrap()
}

/// A queue name of its own for each run, short enough for PostgreSQL's identifiers.
fn fresh(prefix: &str) -> String {
    static RUN: AtomicU64 = AtomicU64::new(0);
    format!(
        "{prefix}{}_{}",
        std::process::id(),
        RUN.fetch_add(1, Ordering::Relaxed)
    )
}

/// The suite's redelivery timer: a claim not extended is visible again after it.
const VISIBILITY: Duration = Duration::from_millis(300);

#[derive(Clone)]
struct Effects {
    table: String,
}

#[derive(serde::Deserialize, serde::Serialize, Default)]
struct Fail {
    #[serde(default)]
    fail_until: u32,
    #[serde(default)]
    panic_until: u32,
    #[serde(default)]
    reject: bool,
    #[serde(default)]
    sleep_ms: u64,
}

/// The suite and the transaction checks in one database: its pool, its sqlx pool type, its queue,
/// transaction, store and dialect types, and the `Queue` method that opens it.
macro_rules! queue_tests {
    ($db:ident, $pool:ident, $Pool:ty, $Queue:ty, $Tx:ty, $Store:ty, $Dialect:ty, $open:ident) => {
        mod $db {
            use super::*;

            async fn drop_table(pool: &$Pool, queue: &Queue) {
                let table = queue.table_name();
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!("DROP TABLE IF EXISTS {table}")))
                    .execute(pool)
                    .await
                    .unwrap();
            }

            struct Db {
                pool: $Pool,
                queues: Mutex<HashMap<String, $Queue>>,
            }

            impl Db {
                fn queue(&self, name: &str) -> $Queue {
                    self.queues
                        .lock()
                        .unwrap()
                        .get(name)
                        .cloned()
                        .expect("declared first")
                }
            }

            impl Fixture for Db {
                type Source = delivery::queue::QueueSource<$Dialect>;
                type DeadLetters = $Store;

                fn redelivery_timer(&self) -> Option<Duration> {
                    Some(VISIBILITY)
                }

                fn counts_released_deliveries(&self) -> bool {
                    false
                }

                fn deduplicates_publishes(&self) -> bool {
                    true
                }

                async fn declare(&self, name: &str, max_deliveries: u32) {
                    let queue = Queue::new(name).table(&fresh("c"));
                    drop_table(&self.pool, &queue).await;
                    let queue = queue
                        .$open(self.pool.clone())
                        .max_deliveries(max_deliveries)
                        .visibility_timeout(VISIBILITY, Duration::from_secs(60))
                        .poll(Duration::from_millis(50));
                    queue.migrate().await.unwrap();
                    self.queues.lock().unwrap().insert(name.to_owned(), queue);
                }

                async fn publish(&self, name: &str, unit: Unit) {
                    let queue = self.queue(name);
                    let mut tx = self.pool.begin().await.unwrap();
                    queue.publish(&mut tx, &unit).await.unwrap();
                    tx.commit().await.unwrap();
                }

                async fn consume(&self, name: &str) -> Self::Source {
                    self.queue(name).source()
                }

                async fn dead_letter(&self, name: &str) -> $Store {
                    self.queue(name).store().clone()
                }
            }

            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn passes_the_conformance_suite() {
                let db = Db {
                    pool: $pool().await,
                    queues: Mutex::new(HashMap::new()),
                };
                conformance::run_all(&db).await;
                conformance::operates_the_dead_letter_in_the_console(
                    &db,
                    delivery_axum::admin::testing::console,
                )
                .await;
                let queues: Vec<$Queue> =
                    db.queues.lock().unwrap().drain().map(|(_, q)| q).collect();
                for queue in queues {
                    drop_table(&db.pool, queue.queue()).await;
                }
            }

            /// The effect table of the transaction checks: one row per run that committed.
            async fn effects(pool: &$Pool, table: &str) -> Vec<(String, i32)> {
                sqlx::query_as(sqlx::AssertSqlSafe(format!(
                    "SELECT unit, delivery FROM {table} ORDER BY unit, delivery"
                )))
                .fetch_all(pool)
                .await
                .unwrap()
            }

            /// Writes its effect (a row with no natural key: the unit and this delivery) into the unit's
            /// transaction, then fails on the units and deliveries the payload names.
            #[consumer]
            async fn apply(
                delivery::State(effects): delivery::State<Effects>,
                id: delivery::UnitId,
                count: delivery::DeliveryCount,
                Json(fail): Json<Fail>,
                mut tx: $Tx,
            ) -> Result<(), HandlerError> {
                sqlx::query(sqlx::AssertSqlSafe(format!(
                    "INSERT INTO {} (unit, delivery) VALUES ($1, $2)",
                    effects.table
                )))
                .bind(id.as_str())
                .bind(count.get() as i32)
                .execute(&mut *tx)
                .await?;
                if count.get() <= fail.fail_until {
                    return Err(HandlerError::retry("failing after the effect"));
                }
                if count.get() <= fail.panic_until {
                    panic!("panicking after the effect");
                }
                if fail.reject {
                    return Err(HandlerError::reject("refused after the effect"));
                }
                if fail.sleep_ms > 0 {
                    tokio::time::sleep(Duration::from_millis(fail.sleep_ms)).await;
                }
                Ok(())
            }

            async fn effects_table(pool: &$Pool) -> String {
                let table = fresh("effects");
                sqlx::raw_sql(sqlx::AssertSqlSafe(format!(
                    "CREATE TABLE {table} (unit text, delivery int)"
                )))
                .execute(pool)
                .await
                .unwrap();
                table
            }

            /// A failure, a panic or a dead letter after the effect rolls the effect back with the unit's
            /// transaction: only the run that was acknowledged left its effect.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn the_effect_commits_with_the_acknowledgement_or_not_at_all() {
                let pool = $pool().await;
                let table = effects_table(&pool).await;
                let queue = Queue::new(&fresh("tx"));
                drop_table(&pool, &queue).await;
                let queue = queue.$open(pool.clone()).max_deliveries(5);
                queue.migrate().await.unwrap();
                let mut tx = pool.begin().await.unwrap();
                for (id, fail) in [
                    ("ok", Fail::default()),
                    (
                        "fails-twice",
                        Fail {
                            fail_until: 2,
                            ..Fail::default()
                        },
                    ),
                    (
                        "panics-once",
                        Fail {
                            panic_until: 1,
                            ..Fail::default()
                        },
                    ),
                    (
                        "rejected",
                        Fail {
                            reject: true,
                            ..Fail::default()
                        },
                    ),
                ] {
                    queue
                        .publish(&mut tx, &Unit::json(id, &fail))
                        .await
                        .unwrap();
                }
                tx.commit().await.unwrap();

                let report = Consumer::new(queue.source())
                    .state(Effects {
                        table: table.clone(),
                    })
                    .backoff(delivery::disposition::Backoff::none())
                    .shutdown_on(queue.store().idle())
                    .run(apply)
                    .await;
                assert_eq!((report.acked, report.dead_lettered), (3, 1), "{report:?}");
                assert_eq!(
                    effects(&pool, &table).await,
                    vec![
                        ("fails-twice".into(), 3),
                        ("ok".into(), 1),
                        ("panics-once".into(), 2)
                    ]
                );
                let dead = delivery::dead_letter::DeadLetters::count(queue.store())
                    .await
                    .unwrap();
                assert_eq!(dead, 1);
                drop_table(&pool, queue.queue()).await;
            }

            /// A handler in the unit's transaction running long is kept alive while that
            /// transaction is open, and the keep-alive never waits on it. (In SQLite the
            /// transaction holds the database's one write lock: an extension on another
            /// connection would wait out the busy timeout and fail, stalling the queue behind it,
            /// while no other consumer can claim the unit meanwhile anyway.)
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_unit_in_its_transaction_is_kept_alive_without_waiting_on_it() {
                use delivery::transport::{Settle, Source};
                let pool = $pool().await;
                let queue = Queue::new(&fresh("kept"));
                drop_table(&pool, &queue).await;
                let queue = queue.$open(pool.clone());
                queue.migrate().await.unwrap();
                let mut tx = pool.begin().await.unwrap();
                queue
                    .publish(&mut tx, &Unit::new("k-1", "{}"))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();

                let mut source = queue.source();
                let (unit, mut handle) = source.receive().await.unwrap().expect("the unit");
                // The unit's transaction open, as while its handler runs.
                handle.begin(&unit).await.unwrap();
                let kept =
                    tokio::time::timeout(Duration::from_secs(60), handle.still_handling(&unit))
                        .await
                        .expect("the keep-alive returned");
                assert!(
                    kept.is_ok(),
                    "kept alive while its transaction is open: {kept:?}"
                );
                handle.ack(&unit).await.unwrap();
                let delivered: i64 = sqlx::query_scalar(sqlx::AssertSqlSafe(format!(
                    "SELECT count(*) FROM {} WHERE status = 'delivered'",
                    queue.queue().table_name()
                )))
                .fetch_one(&pool)
                .await
                .unwrap();
                assert_eq!(delivered, 1);
                drop_table(&pool, queue.queue()).await;
            }

            /// A run whose claim expired (no keep-alive) while another consumer took the unit and
            /// committed: the first run's acknowledgement finds the unit settled and its effect is rolled
            /// back. The effect stands once.
            #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
            async fn a_run_that_lost_its_claim_commits_nothing() {
                let pool = $pool().await;
                let table = effects_table(&pool).await;
                let queue = Queue::new(&fresh("lost"));
                drop_table(&pool, &queue).await;
                // Claims expire after 200 ms and are never extended.
                let queue = queue
                    .$open(pool.clone())
                    .visibility_timeout(Duration::from_millis(200), Duration::ZERO)
                    .poll(Duration::from_millis(20));
                queue.migrate().await.unwrap();
                let mut tx = pool.begin().await.unwrap();
                let slow = Fail {
                    sleep_ms: 1_000,
                    ..Fail::default()
                };
                queue
                    .publish(&mut tx, &Unit::json("slow", &slow))
                    .await
                    .unwrap();
                tx.commit().await.unwrap();

                let run = |queue: $Queue, table: String| async move {
                    Consumer::new(queue.source())
                        .state(Effects { table })
                        .shutdown_on(queue.store().idle())
                        .run(apply)
                        .await
                };
                let first = tokio::spawn(run(queue.clone(), table.clone()));
                tokio::time::sleep(Duration::from_millis(400)).await;
                let second = tokio::spawn(run(queue.clone(), table.clone()));
                let (first, second) = (first.await.unwrap(), second.await.unwrap());
                assert_eq!(first.acked + second.acked, 1, "{first:?} {second:?}");
                let applied = effects(&pool, &table).await;
                assert_eq!(applied.len(), 1, "{applied:?}");
                drop_table(&pool, queue.queue()).await;
            }
        }
    };
}

queue_tests!(
    postgres,
    pg_pool,
    sqlx::PgPool,
    delivery::queue::PgQueue,
    delivery::queue::PgTx,
    delivery::outbox::PgStore,
    delivery_postgres::Postgres,
    postgres
);

queue_tests!(
    sqlite,
    sqlite_pool,
    sqlx::SqlitePool,
    delivery::queue::SqliteQueue,
    delivery::queue::SqliteTx,
    delivery::outbox::SqliteStore,
    delivery_sqlite::Sqlite,
    sqlite
);
