//! The durable queue in PostgreSQL (`delivery::queue`, `PgQueue`) against hand-written sqlx loops
//! over the same table, statements and pool, on the real database.
//!
//!     cargo bench --features postgres --bench sql_queue
//!
//! Everything runs in a schema of its own (dropped at the end), with a pool of
//! `BENCH_CONCURRENCY + 4` connections (default concurrency 16, as `examples/sql_consumer.rs`),
//! claims of `BENCH_BATCH` units (default 32, the example's). `BENCH_PART=drain,claim,latency`
//! (any of them, comma-separated) runs only those parts.
//!
//! 1. **Drain** (`BENCH_UNITS`, default 20000, pre-published per run into a fresh queue table;
//!    `BENCH_ROUNDS` rounds, default 5, the sides' order rotating each round): the example's
//!    orders effect (order insert, balance upsert, the stamp guard and latest order, the
//!    confirmation counter) in each unit's transaction with its acknowledgement.
//!    - **delivery**: `Consumer::new(queue.source()).concurrency(C)` running the example's
//!      handler (`apply_order`, taking `PgTx`).
//!    - **hand-written, transaction per unit** (the same guarantees): C tokio tasks, each claiming
//!      its own batches with the queue's own claim statement (the same `UPDATE .. FOR UPDATE SKIP
//!      LOCKED`, committed on its own), then for each claimed row `BEGIN`, the same statements,
//!      `UPDATE .. SET status = 'delivered' WHERE id = $1 AND status = 'pending'`, `COMMIT`.
//!    - **hand-written, transaction per batch** (for information; weaker: one failing unit rolls
//!      back its whole batch): the same claim, then one transaction for the batch's effects
//!      (applied by customer to avoid deadlocks) and one `UPDATE .. WHERE id = ANY($1)`.
//!
//!    The `i`th order's customer is `i % BENCH_CUSTOMERS` (default 37). The sides then do not run
//!    the same statements: the runtime applies a claim's units in the queue's order, so each
//!    unit's stamp is its customer's newest and the latest order is written for every unit; the
//!    hand-written tasks apply their batches side by side, out of order across the customers, so
//!    the stamp guard skips that write for most units (the share is printed per run). With
//!    `BENCH_CUSTOMERS=20000` (as many as units) every unit writes it on both sides: the same
//!    statements, and no row lock waited for.
//!
//!    Each run is checked: every order applied once, every confirmation counted once, every row
//!    `delivered`. Prints every run, the medians and the ratio delivery / hand-written (target
//!    at least 1.0), and for each run the share of units whose stamp guard let the latest order
//!    be written (a side applying units further out of order skips that statement more often).
//!    `BENCH_ONLY` (comma-separated, default `delivery,hand,batch`) runs those sides, and these
//!    diagnostics (not run by default): `spawned`, the consumer spawned as a task of its own;
//!    `split`, `BENCH_SPLIT` consumers (default 2), each with a source of its own and C / k
//!    concurrency, each spawned; `shared`, the hand-written per-unit loop with one claimer task
//!    feeding C worker tasks through a channel; `onetask`, the hand-written per-unit loop in one
//!    future, as the runtime runs its units (a `FuturesUnordered` of up to C). `BENCH_THREADS`
//!    sets the runtime's worker threads (default one per core).
//! 2. **Claim cost as the table grows**: the queue's claim (`Store::claim`, batch as above), one
//!    claimer on a connection of its own, each claimed batch then marked delivered, over
//!    `BENCH_CLAIM_UNITS` (default 10 000) pending units published behind `BENCH_FINISHED_SMALL`
//!    (default 10 000) or `BENCH_FINISHED_LARGE` (default 1 000 000) `delivered` rows (inserted
//!    once, in bulk); `BENCH_CLAIM_ROUNDS` (default 5) rounds, interleaved (after one on each not
//!    counted), the round's rows deleted and the table vacuumed after each. Reports the claims
//!    per second (1 / the median claim's time; the median of the rounds) for each and their
//!    ratio (target within 10 %), the table's `pg_stat_user_tables` `seq_scan` / `idx_scan` /
//!    `seq_tup_read` deltas over each round's claims and marks, and `EXPLAIN (ANALYZE, BUFFERS)`
//!    of the claim on each table (rolled back), with whether a Seq Scan appears.
//! 3. **Latency, publish commit to handler start** (LISTEN/NOTIFY): a publisher commits one unit
//!    every `1 / BENCH_LATENCY_RATE` s (default 100 units/s) with `Queue::publish`, for
//!    `BENCH_LATENCY_UNITS` units in all (default 2000, split over `BENCH_LATENCY_ROUNDS` = 2
//!    interleaved rounds per side, the first 10 of each run not counted). The latency of a unit
//!    is from the moment its publisher sent `COMMIT` to the moment its handler started (the same
//!    process's monotonic clock). **delivery**: the consumer at concurrency C, the handler
//!    reading the clock (`allow_clock`) and acknowledging on its own; **hand-written**: a
//!    `PgListener` on the queue's channel and a loop that claims until nothing is left, reads
//!    the clock per row, marks it delivered, and waits for the next notification (or 1 s).
//!    p50 / p99 of each, and the ratios delivery / hand-written.
//!
//! A summary table closes the run.

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use delivery::disposition::Outcome;
use delivery::handler::Handler;
use delivery::queue::{PgQueue, PgTx, Queue};
use delivery::store::postgres;
use delivery::{Consumer, HandlerError, Json, Stamp, State, Unit, consumer};
use delivery_core::outbox::{Claim, Store};
use futures_util::StreamExt;
use serde::Deserialize;
use sqlx::postgres::{PgConnection, PgListener, PgPool, PgPoolOptions, PgRow};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::{mpsc, oneshot, watch};

mod support;
use support::{Run, env_or, measure, median, report};
#[path = "support/orders_pg.rs"]
mod orders_pg;
use orders_pg::{Schema, check, database_url};

/// The claim's visibility timeout, both sides (the queue's default).
const VISIBILITY: Duration = Duration::from_secs(30);
/// Units of each latency run not counted (the first claims prepare their statements).
const LATENCY_WARMUP: u64 = 10;

/// The units of a drain run whose stamp guard let the latest order be written (a unit applied
/// after a newer one of its customer skips that statement): how much of the effect each side
/// ran, which depends on the order it applies the units in.
static LATEST_WRITTEN: AtomicU64 = AtomicU64::new(0);

// ---------------------------------------------------------------------------------------------
// The effect: `examples/sql_consumer.rs`'s handler, and the same statements written by hand.

/// One unit: `{"order_id": str, "customer_id": str, "amount_cents": int}`.
#[derive(Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer_id: String,
    amount_cents: i64,
}

/// `examples/sql_consumer.rs`'s handler (with no pause after the effect): the order, the
/// balance, the latest order under the stamp guard and the confirmation, in the unit's
/// transaction, committed by the runtime with the acknowledgement.
#[consumer]
async fn apply_order(
    stamp: Stamp,
    Json(order): Json<OrderPlaced>,
    mut tx: PgTx,
) -> Result<(), HandlerError> {
    if order.amount_cents < 0 {
        return Err(HandlerError::reject(format!(
            "order {} has a negative amount ({} cents)",
            order.order_id, order.amount_cents
        )));
    }
    let inserted = sqlx::query(
        "INSERT INTO orders (order_id, customer_id, amount_cents) VALUES ($1, $2, $3) \
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(&order.order_id)
    .bind(&order.customer_id)
    .bind(order.amount_cents)
    .execute(&mut *tx)
    .await?
    .rows_affected();
    if inserted == 1 {
        sqlx::query(
            "INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2) \
             ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents",
        )
        .bind(&order.customer_id)
        .bind(order.amount_cents)
        .execute(&mut *tx)
        .await?;
        if postgres::advance(&mut tx, "latest_orders", &order.customer_id, stamp).await? {
            LATEST_WRITTEN.fetch_add(1, Ordering::Relaxed);
            sqlx::query(
                "INSERT INTO latest_orders (customer_id, order_id, amount_cents) VALUES ($1, $2, $3) \
                 ON CONFLICT (customer_id) DO UPDATE \
                 SET order_id = EXCLUDED.order_id, amount_cents = EXCLUDED.amount_cents",
            )
            .bind(&order.customer_id)
            .bind(&order.order_id)
            .bind(order.amount_cents)
            .execute(&mut *tx)
            .await?;
        }
    }
    sqlx::query(
        "INSERT INTO confirmations (customer_id, sent) VALUES ($1, 1) \
         ON CONFLICT (customer_id) DO UPDATE SET sent = confirmations.sent + 1",
    )
    .bind(&order.customer_id)
    .execute(&mut *tx)
    .await?;
    Ok(())
}

/// The example's handler, counting the units it applied: the last one stops the consumers.
#[derive(Clone)]
struct Counted {
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<watch::Sender<bool>>,
}

impl Handler<()> for Counted {
    const IN_TRANSACTION: bool = <apply_order as Handler<()>>::IN_TRANSACTION;

    fn call(&self, unit: &Unit, state: &()) -> impl Future<Output = Outcome> + Send + 'static {
        let run = apply_order.call(unit, state);
        let (done, target, finished) = (self.done.clone(), self.target, self.finished.clone());
        async move {
            let outcome = run.await;
            if matches!(outcome, Outcome::Applied)
                && done.fetch_add(1, Ordering::Relaxed) + 1 == target
            {
                finished.send_replace(true);
            }
            outcome
        }
    }
}

/// The same statements, by hand, on the transaction's connection.
async fn effect(conn: &mut PgConnection, stamp: i64, order: &OrderPlaced) -> sqlx::Result<()> {
    let inserted = sqlx::query(
        "INSERT INTO orders (order_id, customer_id, amount_cents) VALUES ($1, $2, $3) \
         ON CONFLICT (order_id) DO NOTHING",
    )
    .bind(&order.order_id)
    .bind(&order.customer_id)
    .bind(order.amount_cents)
    .execute(&mut *conn)
    .await?
    .rows_affected();
    if inserted == 1 {
        sqlx::query(
            "INSERT INTO balances (customer_id, total_cents) VALUES ($1, $2) \
             ON CONFLICT (customer_id) DO UPDATE SET total_cents = balances.total_cents + EXCLUDED.total_cents",
        )
        .bind(&order.customer_id)
        .bind(order.amount_cents)
        .execute(&mut *conn)
        .await?;
        let newer = sqlx::query(
            "INSERT INTO delivery_stamps (scope, key, stamp) VALUES ($1, $2, $3) \
             ON CONFLICT (scope, key) DO UPDATE SET stamp = EXCLUDED.stamp \
             WHERE delivery_stamps.stamp < EXCLUDED.stamp \
             RETURNING 1",
        )
        .bind("latest_orders")
        .bind(&order.customer_id)
        .bind(stamp)
        .fetch_optional(&mut *conn)
        .await?
        .is_some();
        if newer {
            LATEST_WRITTEN.fetch_add(1, Ordering::Relaxed);
            sqlx::query(
                "INSERT INTO latest_orders (customer_id, order_id, amount_cents) VALUES ($1, $2, $3) \
                 ON CONFLICT (customer_id) DO UPDATE \
                 SET order_id = EXCLUDED.order_id, amount_cents = EXCLUDED.amount_cents",
            )
            .bind(&order.customer_id)
            .bind(&order.order_id)
            .bind(order.amount_cents)
            .execute(&mut *conn)
            .await?;
        }
    }
    sqlx::query(
        "INSERT INTO confirmations (customer_id, sent) VALUES ($1, 1) \
         ON CONFLICT (customer_id) DO UPDATE SET sent = confirmations.sent + 1",
    )
    .bind(&order.customer_id)
    .execute(&mut *conn)
    .await?;
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// The queue's table and its statements, as the hand-written loops write them.

/// The statements of the hand-written loops on the table `t`.
struct Statements {
    /// The queue's own claim (`delivery-postgres/src/dialect.rs`, unordered), word for word.
    claim: String,
    /// The acknowledgement of one unit, as the queue writes it in the unit's transaction.
    complete: String,
    /// The acknowledgement of a batch.
    complete_all: String,
}

impl Statements {
    fn new(t: &str) -> Self {
        Statements {
            claim: format!(
                "UPDATE {t} SET attempts = attempts + 1, lease_owner = $1, lease_until = now() + $2::float8 * interval '1 millisecond' \
                 WHERE (SELECT set_config('synchronous_commit', 'off', true)) = 'off' AND id = ANY(ARRAY( \
                   SELECT o.id FROM {t} o \
                   WHERE o.status = 'pending' AND o.available_at <= now() \
                     AND (o.lease_until IS NULL OR o.lease_until <= now())  \
                   ORDER BY o.seq LIMIT $3 FOR UPDATE SKIP LOCKED)) \
                 RETURNING id, topic, key, payload, attempts - 1 AS attempts, seq, headers"
            ),
            complete: format!(
                "UPDATE {t} SET status = 'delivered', delivered_at = now(), lease_owner = NULL, \
                   lease_until = NULL \
                 WHERE id = $1 AND status = 'pending'"
            ),
            complete_all: format!(
                "UPDATE {t} SET status = 'delivered', delivered_at = now(), lease_owner = NULL, \
                   lease_until = NULL \
                 WHERE id = ANY($1::text[]) AND status = 'pending'"
            ),
        }
    }

    async fn claim(&self, db: &PgPool, owner: &str, batch: usize) -> Vec<PgRow> {
        sqlx::query(AssertSqlSafe(self.claim.as_str()))
            .bind(owner)
            .bind(VISIBILITY.as_secs_f64() * 1000.0)
            .bind(batch as i64)
            .fetch_all(db)
            .await
            .expect("claiming")
    }
}

/// A claimed row: its id, its stamp (`seq`) and its order.
fn claimed(row: &PgRow) -> (String, i64, OrderPlaced) {
    let payload: Vec<u8> = row.get("payload");
    (
        row.get("id"),
        row.get("seq"),
        serde_json::from_slice(&payload).expect("an order"),
    )
}

/// The queue `name` in `db`, its table dropped and made afresh.
async fn fresh_queue(db: &PgPool, name: &str, batch: usize) -> PgQueue {
    let queue: PgQueue = Queue::new(name).postgres(db.clone()).batch(batch);
    exec(
        db,
        &format!("DROP TABLE IF EXISTS {}", queue.queue().table_name()),
    )
    .await;
    queue.migrate().await.expect("migrating the queue");
    queue
}

async fn exec(db: &PgPool, sql: &str) {
    sqlx::raw_sql(AssertSqlSafe(sql.to_owned()))
        .execute(db)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// `n` orders in `t` in one statement, `status` each (the `i`th: id `<prefix>-<i>`, the order
/// of `benches/support/orders_pg.rs`'s `order_unit`, stamp its `seq`).
async fn insert_orders(db: &PgPool, t: &str, prefix: &str, n: u64, status: &str) {
    insert_orders_of(db, t, prefix, n, status, 37).await
}

/// [`insert_orders`], the `i`th order's customer `i % customers`.
async fn insert_orders_of(
    db: &PgPool,
    t: &str,
    prefix: &str,
    n: u64,
    status: &str,
    customers: u64,
) {
    let delivered_at = if status == "delivered" {
        "now()"
    } else {
        "NULL"
    };
    let sql = format!(
        "INSERT INTO {t} (id, topic, payload, status, delivered_at) \
         SELECT '{prefix}-' || i, 'bench', \
           convert_to(format('{{\"order_id\":\"o-%s\",\"customer_id\":\"c-%s\",\"amount_cents\":%s}}', \
             i, i % $2, i % 100 + 1), 'UTF8'), '{status}', {delivered_at} \
         FROM generate_series(0, $1 - 1) AS i"
    );
    sqlx::query(AssertSqlSafe(sql))
        .bind(n as i64)
        .bind(customers.max(1) as i64)
        .execute(db)
        .await
        .expect("publishing in bulk");
}

// ---------------------------------------------------------------------------------------------
// Part 1: the drain.

#[derive(Clone, Copy)]
struct Drain {
    n: u64,
    concurrency: usize,
    batch: usize,
    /// The `i`th order's customer is `i % customers`.
    customers: u64,
}

/// A fresh queue of `n` orders, and empty effect tables.
async fn prepared(pg: &Schema, d: Drain) -> PgQueue {
    pg.empty().await;
    let queue = fresh_queue(&pg.db, "bench", d.batch).await;
    let t = queue.queue().table_name().to_owned();
    insert_orders_of(&pg.db, &t, "m", d.n, "pending", d.customers).await;
    exec(&pg.db, &format!("ANALYZE {t}")).await;
    LATEST_WRITTEN.store(0, Ordering::Relaxed);
    queue
}

/// Every order applied once, every confirmation counted once, every unit delivered.
async fn verify(pg: &Schema, t: &str, n: u64) {
    check(&pg.db, n).await;
    let sent: i64 = sqlx::query_scalar("SELECT coalesce(sum(sent), 0)::int8 FROM confirmations")
        .fetch_one(&pg.db)
        .await
        .unwrap();
    assert_eq!(sent, n as i64, "confirmations counted");
    let delivered: i64 = sqlx::query_scalar(AssertSqlSafe(format!(
        "SELECT count(*) FROM {t} WHERE status = 'delivered'"
    )))
    .fetch_one(&pg.db)
    .await
    .unwrap();
    assert_eq!(delivered, n as i64, "units delivered");
}

/// How the bench runs the queue's consumer.
#[derive(Clone, Copy)]
enum Placement {
    /// One consumer, awaited where the bench awaits it (the runtime's `block_on` thread, as a
    /// `#[tokio::main]` that awaits `Consumer::run` has it).
    InPlace,
    /// `k` consumers, each with a source of its own and `concurrency / k`, each spawned as a
    /// task (diagnostics: `BENCH_ONLY=spawned` is one, `BENCH_ONLY=split` is `BENCH_SPLIT`,
    /// default 2).
    Spawned(usize),
}

async fn drain_delivery(pg: &Schema, d: Drain, placement: Placement) -> Run {
    let queue = prepared(pg, d).await;
    let (finished, _) = watch::channel(false);
    let handler = Counted {
        done: Arc::new(AtomicU64::new(0)),
        target: d.n,
        finished: Arc::new(finished),
    };
    let consumer = |concurrency: usize| {
        let mut finished = handler.finished.subscribe();
        Consumer::new(queue.source())
            .concurrency(concurrency)
            .shutdown_on(async move {
                let _ = finished.wait_for(|done| *done).await;
            })
            .run(handler.clone())
    };
    let run = measure(d.n, async {
        let acked = match placement {
            Placement::InPlace => consumer(d.concurrency).await.acked,
            Placement::Spawned(k) => {
                let consumers: Vec<_> = (0..k)
                    .map(|_| tokio::spawn(consumer(d.concurrency.div_ceil(k))))
                    .collect();
                let mut acked = 0;
                for consumer in consumers {
                    acked += consumer.await.expect("a consumer").acked;
                }
                acked
            }
        };
        assert_eq!(acked, d.n);
    })
    .await;
    verify(pg, queue.queue().table_name(), d.n).await;
    run
}

/// The hand-written loops: `concurrency` tasks, each claiming its own batches until a claim
/// comes back empty, each batch through `per_batch` (which returns how many it acknowledged).
async fn drain_by_hand<F, Fut>(pg: &Schema, d: Drain, per_batch: F) -> Run
where
    F: Fn(PgPool, Arc<Statements>, Vec<PgRow>) -> Fut + Copy + Send + 'static,
    Fut: Future<Output = u64> + Send,
{
    let queue = prepared(pg, d).await;
    let t = queue.queue().table_name().to_owned();
    let statements = Arc::new(Statements::new(&t));
    let run = measure(d.n, async {
        let tasks: Vec<_> = (0..d.concurrency)
            .map(|task| {
                let (db, statements) = (pg.db.clone(), statements.clone());
                let owner = format!("hand-{}-{task}", std::process::id());
                tokio::spawn(async move {
                    let mut acked = 0;
                    loop {
                        let rows = statements.claim(&db, &owner, d.batch).await;
                        if rows.is_empty() {
                            return acked;
                        }
                        acked += per_batch(db.clone(), statements.clone(), rows).await;
                    }
                })
            })
            .collect();
        let mut acked = 0;
        for task in tasks {
            acked += task.await.expect("a hand-written task");
        }
        assert_eq!(acked, d.n);
    })
    .await;
    verify(pg, &t, d.n).await;
    run
}

/// Hand-written in the runtime's shape (a diagnostic, `BENCH_ONLY=shared`): one task claims
/// batches into a channel of a batch's room (so it claims the next batch as soon as the last one
/// is handed out), `concurrency` tasks take units from it, each unit through [`per_unit`].
async fn drain_shared(pg: &Schema, d: Drain) -> Run {
    let queue = prepared(pg, d).await;
    let t = queue.queue().table_name().to_owned();
    let statements = Arc::new(Statements::new(&t));
    let run = measure(d.n, async {
        let (sender, receiver) = mpsc::channel::<PgRow>(d.batch);
        let receiver = Arc::new(tokio::sync::Mutex::new(receiver));
        let claimer = {
            let (db, statements) = (pg.db.clone(), statements.clone());
            let owner = format!("shared-{}", std::process::id());
            tokio::spawn(async move {
                loop {
                    let rows = statements.claim(&db, &owner, d.batch).await;
                    if rows.is_empty() {
                        return;
                    }
                    for row in rows {
                        sender.send(row).await.expect("the workers wait");
                    }
                }
            })
        };
        let worker = |_| {
            let (db, statements, receiver) = (pg.db.clone(), statements.clone(), receiver.clone());
            async move {
                let mut acked = 0;
                loop {
                    let next = receiver.lock().await.recv().await;
                    let Some(row) = next else { return acked };
                    acked += per_unit(db.clone(), statements.clone(), vec![row]).await;
                }
            }
        };
        let workers: Vec<_> = (0..d.concurrency)
            .map(|i| tokio::spawn(worker(i)))
            .collect();
        let mut acked = 0;
        for worker in workers {
            acked += worker.await.expect("a worker");
        }
        claimer.await.expect("the claimer");
        assert_eq!(acked, d.n);
    })
    .await;
    verify(pg, &t, d.n).await;
    run
}

/// Hand-written in the runtime's own shape (a diagnostic, `BENCH_ONLY=onetask`): one future,
/// awaited where the bench awaits the consumer, keeping up to `concurrency` units' transactions
/// ([`per_unit`]) in a `FuturesUnordered`, claiming a batch when its buffer is empty, the claim
/// polled beside the units in flight.
async fn drain_one_task(pg: &Schema, d: Drain) -> Run {
    let queue = prepared(pg, d).await;
    let t = queue.queue().table_name().to_owned();
    let statements = Arc::new(Statements::new(&t));
    let owner = format!("onetask-{}", std::process::id());
    let run = measure(d.n, async {
        let mut inflight = futures_util::stream::FuturesUnordered::new();
        let mut buffer = std::collections::VecDeque::new();
        let mut claiming: Option<std::pin::Pin<Box<dyn Future<Output = Vec<PgRow>> + Send>>> = None;
        let (mut acked, mut exhausted) = (0, false);
        loop {
            while inflight.len() < d.concurrency {
                let Some(row) = buffer.pop_front() else { break };
                inflight.push(per_unit(pg.db.clone(), statements.clone(), vec![row]));
            }
            if buffer.is_empty() && !exhausted && claiming.is_none() {
                let (db, statements, owner) = (pg.db.clone(), statements.clone(), owner.clone());
                claiming = Some(Box::pin(async move {
                    statements.claim(&db, &owner, d.batch).await
                }));
            }
            if inflight.is_empty() && claiming.is_none() {
                break;
            }
            tokio::select! {
                Some(n) = inflight.next(), if !inflight.is_empty() => acked += n,
                rows = async { claiming.as_mut().expect("claiming").await }, if claiming.is_some()
                    && inflight.len() < d.concurrency => {
                    claiming = None;
                    exhausted = rows.is_empty();
                    buffer.extend(rows);
                }
            }
        }
        assert_eq!(acked, d.n);
    })
    .await;
    verify(pg, &t, d.n).await;
    run
}

/// A transaction per unit: `BEGIN`, the effect, the acknowledgement, `COMMIT`.
async fn per_unit(db: PgPool, statements: Arc<Statements>, rows: Vec<PgRow>) -> u64 {
    let mut acked = 0;
    for row in &rows {
        let (id, stamp, order) = claimed(row);
        let mut tx = db.begin().await.expect("BEGIN");
        effect(&mut tx, stamp, &order).await.expect("the effect");
        let completed = sqlx::query(AssertSqlSafe(statements.complete.as_str()))
            .bind(&id)
            .execute(&mut *tx)
            .await
            .expect("acknowledging")
            .rows_affected();
        if completed == 1 {
            tx.commit().await.expect("COMMIT");
            acked += 1;
        } else {
            // Settled by another run meanwhile: its effect stands, this one's is rolled back.
            tx.rollback().await.expect("ROLLBACK");
        }
    }
    acked
}

/// A transaction per batch: the batch's effects by customer (each transaction then locks the
/// customers' rows in the same order: no deadlock), one acknowledgement for all, one `COMMIT`.
async fn per_batch(db: PgPool, statements: Arc<Statements>, rows: Vec<PgRow>) -> u64 {
    let mut units: Vec<_> = rows.iter().map(claimed).collect();
    units.sort_by(|a, b| (&a.2.customer_id, a.1).cmp(&(&b.2.customer_id, b.1)));
    let ids: Vec<&str> = units.iter().map(|(id, _, _)| id.as_str()).collect();
    let mut tx = db.begin().await.expect("BEGIN");
    for (_, stamp, order) in &units {
        effect(&mut tx, *stamp, order).await.expect("the effect");
    }
    let completed = sqlx::query(AssertSqlSafe(statements.complete_all.as_str()))
        .bind(&ids)
        .execute(&mut *tx)
        .await
        .expect("acknowledging")
        .rows_affected();
    assert_eq!(completed, units.len() as u64);
    tx.commit().await.expect("COMMIT");
    completed
}

struct DrainFigures {
    ours: f64,
    hand: f64,
    batch: f64,
    shared: f64,
    d: Drain,
}

async fn drain(pg: &Schema, d: Drain) -> DrainFigures {
    let rounds: usize = env_or("BENCH_ROUNDS", 5).max(1);
    let only = std::env::var("BENCH_ONLY").unwrap_or_else(|_| "delivery,hand,batch".into());
    let split: usize = env_or("BENCH_SPLIT", 2).max(1);
    let selected: Vec<&str> = [
        "delivery", "hand", "batch", "shared", "onetask", "spawned", "split",
    ]
    .into_iter()
    .filter(|side| only.split(',').any(|o| o.trim() == *side))
    .collect();
    println!(
        "\n== 1. drain: {} units pre-published, concurrency {}, batch {}, pool {} ==",
        d.n,
        d.concurrency,
        d.batch,
        d.concurrency + 4
    );
    let (mut ours, mut hand, mut batch, mut shared, mut onetask, mut spawned, mut split_runs) = (
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
        Vec::new(),
    );
    for round in 0..rounds {
        let mut sides = selected.clone();
        let len = sides.len();
        sides.rotate_left(round % len.max(1));
        for side in sides {
            let run = match side {
                "delivery" => drain_delivery(pg, d, Placement::InPlace).await,
                "spawned" => drain_delivery(pg, d, Placement::Spawned(1)).await,
                "split" => drain_delivery(pg, d, Placement::Spawned(split)).await,
                "hand" => drain_by_hand(pg, d, per_unit).await,
                "batch" => drain_by_hand(pg, d, per_batch).await,
                "shared" => drain_shared(pg, d).await,
                _ => drain_one_task(pg, d).await,
            };
            println!(
                "  round {round} {side:<8} {:>6.0} units/s, client CPU {:>5.1} µs/unit, latest order written for {:>3.0} % of units",
                run.rate,
                run.cpu_us,
                LATEST_WRITTEN.load(Ordering::Relaxed) as f64 * 100.0 / d.n as f64
            );
            match side {
                "delivery" => ours.push(run),
                "hand" => hand.push(run),
                "batch" => batch.push(run),
                "shared" => shared.push(run),
                "onetask" => onetask.push(run),
                "spawned" => spawned.push(run),
                _ => split_runs.push(run),
            }
        }
    }
    report(
        "drain",
        &format!(
            "{} units, batch {}, concurrency {}, {} customers",
            d.n, d.batch, d.concurrency, d.customers
        ),
        "sqlx loop (a transaction per unit)",
        &hand,
        &ours,
    );
    let rate = |runs: &[Run]| {
        if runs.is_empty() {
            f64::NAN
        } else {
            median(runs.iter().map(|r| r.rate).collect())
        }
    };
    let figures = DrainFigures {
        ours: rate(&ours),
        hand: rate(&hand),
        batch: rate(&batch),
        shared: rate(&shared),
        d,
    };
    if !batch.is_empty() {
        println!(
            "drain: for information, hand-written with a transaction per batch (a failing unit rolls back its batch): runs [{}], median {:.0}/s; delivery / it {:.3}",
            batch
                .iter()
                .map(|r| format!("{:.0}", r.rate))
                .collect::<Vec<_>>()
                .join(", "),
            figures.batch,
            figures.ours / figures.batch
        );
    }
    if !shared.is_empty() {
        println!(
            "drain: diagnostic, hand-written in the runtime's shape (one claimer, {} workers): runs [{}], median {:.0}/s; delivery / it {:.3}",
            d.concurrency,
            shared
                .iter()
                .map(|r| format!("{:.0}", r.rate))
                .collect::<Vec<_>>()
                .join(", "),
            figures.shared,
            figures.ours / figures.shared
        );
    }
    if !spawned.is_empty() {
        println!(
            "drain: diagnostic, delivery's consumer spawned as a task: runs [{}], median {:.0}/s; it / hand-written {:.3}",
            spawned
                .iter()
                .map(|r| format!("{:.0}", r.rate))
                .collect::<Vec<_>>()
                .join(", "),
            rate(&spawned),
            rate(&spawned) / figures.hand
        );
    }
    if !split_runs.is_empty() {
        println!(
            "drain: diagnostic, {split} consumers spawned as tasks, concurrency {} each: runs [{}], median {:.0}/s; it / hand-written {:.3}",
            d.concurrency.div_ceil(split),
            split_runs
                .iter()
                .map(|r| format!("{:.0}", r.rate))
                .collect::<Vec<_>>()
                .join(", "),
            rate(&split_runs),
            rate(&split_runs) / figures.hand
        );
    }
    if !onetask.is_empty() {
        println!(
            "drain: diagnostic, hand-written in one future as the runtime runs (a FuturesUnordered of up to {} units): runs [{}], median {:.0}/s; delivery / it {:.3}",
            d.concurrency,
            onetask
                .iter()
                .map(|r| format!("{:.0}", r.rate))
                .collect::<Vec<_>>()
                .join(", "),
            rate(&onetask),
            figures.ours / rate(&onetask)
        );
    }
    figures
}

// ---------------------------------------------------------------------------------------------
// Part 2: the claim's cost as the table grows.

struct ClaimTable {
    finished: u64,
    queue: PgQueue,
    /// The claimer's pool: one connection, so its statistics can be flushed on demand.
    pool: PgPool,
    rates: Vec<f64>,
    stats: Vec<(i64, i64, i64)>,
}

/// A pool on the bench's schema.
async fn schema_pool(schema: &str, connections: u32) -> PgPool {
    let base = database_url();
    let sep = if base.contains('?') { '&' } else { '?' };
    PgPoolOptions::new()
        .max_connections(connections)
        .connect(&format!("{base}{sep}options=-c%20search_path%3D{schema}"))
        .await
        .expect("PostgreSQL unreachable")
}

/// `seq_scan`, `idx_scan` and `seq_tup_read` of `t` so far, once `pool`'s connection has
/// reported its own.
async fn table_stats(pool: &PgPool, reader: &PgPool, schema: &str, t: &str) -> (i64, i64, i64) {
    sqlx::query("SELECT pg_stat_force_next_flush()")
        .execute(pool)
        .await
        .unwrap();
    tokio::time::sleep(Duration::from_millis(50)).await;
    sqlx::query_as(
        "SELECT coalesce(seq_scan, 0), coalesce(idx_scan, 0), coalesce(seq_tup_read, 0) \
         FROM pg_stat_user_tables WHERE schemaname = $1 AND relname = $2",
    )
    .bind(schema)
    .bind(t)
    .fetch_one(reader)
    .await
    .unwrap()
}

/// One round on `table`: `p` pending units published, claimed until none is left (each batch then
/// marked delivered), then deleted. Records the claims per second (1 / the median claim's time).
async fn claim_round(table: &mut ClaimTable, pg: &Schema, schema: &str, p: u64, batch: usize) {
    let t = table.queue.queue().table_name().to_owned();
    insert_orders(&table.pool, &t, "p", p, "pending").await;
    let statements = Statements::new(&t);
    let owner = format!("claims-{}", std::process::id());
    let before = table_stats(&table.pool, &pg.db, schema, &t).await;
    let (mut claimed, mut took) = (0u64, Vec::new());
    loop {
        let start = Instant::now();
        let records = table
            .queue
            .store()
            .claim(Claim {
                owner: &owner,
                limit: batch,
                lease: VISIBILITY,
                ordered: false,
            })
            .await
            .expect("claiming");
        took.push(start.elapsed().as_secs_f64());
        if records.is_empty() {
            break;
        }
        claimed += records.len() as u64;
        let ids: Vec<&str> = records.iter().map(|r| r.id().as_str()).collect();
        sqlx::query(AssertSqlSafe(statements.complete_all.as_str()))
            .bind(&ids)
            .execute(&table.pool)
            .await
            .expect("marking delivered");
    }
    let after = table_stats(&table.pool, &pg.db, schema, &t).await;
    assert_eq!(claimed, p);
    // The empty claim that ended the round is one of them. The median claim, so that another
    // process's burst on this shared machine moves the figure less than a mean would.
    table.rates.push(1.0 / median(took));
    table
        .stats
        .push((after.0 - before.0, after.1 - before.1, after.2 - before.2));
    exec(&table.pool, &format!("DELETE FROM {t} WHERE id LIKE 'p-%'")).await;
    exec(&table.pool, &format!("VACUUM {t}")).await;
}

/// `EXPLAIN (ANALYZE, BUFFERS)` of the claim on `table` with `p` units pending, rolled back.
async fn explain_claim(table: &ClaimTable, p: u64, batch: usize) -> bool {
    let t = table.queue.queue().table_name().to_owned();
    insert_orders(&table.pool, &t, "p", p, "pending").await;
    let statements = Statements::new(&t);
    let mut tx = table.pool.begin().await.unwrap();
    let plan: Vec<String> = sqlx::query_scalar(AssertSqlSafe(format!(
        "EXPLAIN (ANALYZE, BUFFERS) {}",
        statements.claim
    )))
    .bind("explain")
    .bind(VISIBILITY.as_secs_f64() * 1000.0)
    .bind(batch as i64)
    .fetch_all(&mut *tx)
    .await
    .expect("EXPLAIN");
    tx.rollback().await.unwrap();
    exec(&table.pool, &format!("DELETE FROM {t} WHERE id LIKE 'p-%'")).await;
    exec(&table.pool, &format!("VACUUM {t}")).await;
    let seq_scan = plan.iter().any(|line| line.contains("Seq Scan"));
    println!(
        "  EXPLAIN (ANALYZE, BUFFERS) of the claim, {} finished rows, {p} pending: Seq Scan {}",
        table.finished,
        if seq_scan { "PRESENT" } else { "absent" }
    );
    for line in &plan {
        println!("    {line}");
    }
    seq_scan
}

struct ClaimFigures {
    small: u64,
    large: u64,
    small_rate: f64,
    large_rate: f64,
    seq_scan_in_plan: bool,
    seq_scans: i64,
}

async fn claim_cost(pg: &Schema, schema: &str, batch: usize) -> ClaimFigures {
    let small: u64 = env_or("BENCH_FINISHED_SMALL", 10_000);
    let large: u64 = env_or("BENCH_FINISHED_LARGE", 1_000_000);
    let p: u64 = env_or("BENCH_CLAIM_UNITS", 10_000);
    let rounds: usize = env_or("BENCH_CLAIM_ROUNDS", 5).max(1);
    println!(
        "\n== 2. claim cost: {p} pending units behind {small} vs {large} delivered rows, batch {batch}, one claimer ==",
    );
    let mut tables = Vec::new();
    for (name, finished) in [("claims_small", small), ("claims_large", large)] {
        let pool = schema_pool(schema, 1).await;
        let queue = fresh_queue(&pool, name, batch).await;
        let t = queue.queue().table_name().to_owned();
        let start = Instant::now();
        insert_orders(&pool, &t, "done", finished, "delivered").await;
        exec(&pool, &format!("VACUUM ANALYZE {t}")).await;
        println!(
            "  {t}: {finished} delivered rows inserted and vacuumed in {:.1} s",
            start.elapsed().as_secs_f64()
        );
        tables.push(ClaimTable {
            finished,
            queue,
            pool,
            rates: Vec::new(),
            stats: Vec::new(),
        });
    }
    // A round on each, not counted: the claimer's statements prepared, the tables' pages read.
    for table in &mut tables {
        claim_round(table, pg, schema, p, batch).await;
        table.rates.clear();
        table.stats.clear();
    }
    for round in 0..rounds {
        let order = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for i in order {
            claim_round(&mut tables[i], pg, schema, p, batch).await;
            let table = &tables[i];
            let (seq, idx, tup) = table.stats.last().copied().unwrap();
            println!(
                "  round {round} {:>8} finished: {:>6.0} claims/s ({:.0} units/s); seq_scan +{seq}, idx_scan +{idx}, seq_tup_read +{tup}",
                table.finished,
                table.rates.last().unwrap(),
                table.rates.last().unwrap() * batch as f64,
            );
        }
    }
    let mut seq_scan_in_plan = false;
    for table in &tables {
        seq_scan_in_plan |= explain_claim(table, p, batch).await;
    }
    let (small_rate, large_rate) = (
        median(tables[0].rates.clone()),
        median(tables[1].rates.clone()),
    );
    let seq_scans: i64 = tables
        .iter()
        .flat_map(|t| t.stats.iter().map(|s| s.0))
        .sum();
    println!(
        "claim: {small} finished {small_rate:.0} claims/s, {large} finished {large_rate:.0} claims/s (medians of {rounds}); ratio large / small {:.3} (target within 10 %); seq scans over every round's claims and marks: {seq_scans}; Seq Scan in the claim's plan: {}",
        large_rate / small_rate,
        if seq_scan_in_plan { "yes" } else { "no" }
    );
    for table in tables {
        let t = table.queue.queue().table_name().to_owned();
        exec(&table.pool, &format!("DROP TABLE {t}")).await;
        table.pool.close().await;
    }
    ClaimFigures {
        small,
        large,
        small_rate,
        large_rate,
        seq_scan_in_plan,
        seq_scans,
    }
}

// ---------------------------------------------------------------------------------------------
// Part 3: latency from the publish's commit to the handler's start.

/// A latency unit's payload: its number and its publish time (µs since the run's start, read
/// before its `INSERT`).
#[derive(Deserialize, serde::Serialize)]
struct Sent {
    i: u64,
    t: u64,
}

/// The latency handler's state: the run's start, and where receive times go.
#[derive(Clone)]
struct Clock {
    base: Instant,
    seen: mpsc::UnboundedSender<(u64, u64)>,
}

fn micros(base: Instant, at: Instant) -> u64 {
    at.duration_since(base).as_micros() as u64
}

/// Records when it started, for the unit's number; acknowledged on its own.
#[consumer(allow_clock = "bench latency: the receive time is reported, never written")]
async fn record_latency(
    State(clock): State<Clock>,
    Json(sent): Json<Sent>,
) -> Result<(), HandlerError> {
    let now = Instant::now();
    let _ = clock.seen.send((sent.i, micros(clock.base, now)));
    Ok(())
}

/// Publishes `n` units, one every `every`, each in a transaction of its own; returns, for each,
/// when its `COMMIT` was sent, and the publishes' durations.
async fn publish_paced(
    db: PgPool,
    queue: PgQueue,
    base: Instant,
    n: u64,
    every: Duration,
) -> (Vec<u64>, Vec<f64>) {
    let mut tick = tokio::time::interval(every);
    tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let (mut committing, mut took) = (Vec::with_capacity(n as usize), Vec::new());
    for i in 0..n {
        tick.tick().await;
        let start = Instant::now();
        let unit = Unit::json(
            format!("l-{i}"),
            &Sent {
                i,
                t: micros(base, start),
            },
        );
        let mut tx = db.begin().await.unwrap();
        queue.publish(&mut tx, &unit).await.unwrap();
        committing.push(micros(base, Instant::now()));
        tx.commit().await.unwrap();
        took.push(start.elapsed().as_secs_f64() * 1e3);
    }
    (committing, took)
}

/// Receives `n` receive times, each at its unit's number.
async fn collect(mut seen: mpsc::UnboundedReceiver<(u64, u64)>, n: u64) -> Vec<u64> {
    let mut received = vec![u64::MAX; n as usize];
    let mut count = 0;
    while count < n {
        let (i, at) = tokio::time::timeout(Duration::from_secs(30), seen.recv())
            .await
            .expect("a unit received within 30 s")
            .expect("the handler's channel open");
        if received[i as usize] == u64::MAX {
            count += 1;
        }
        received[i as usize] = at;
    }
    received
}

/// The latencies in ms, from each counted unit's `COMMIT` to its handler's start.
fn latencies(committing: &[u64], received: &[u64]) -> Vec<f64> {
    committing
        .iter()
        .zip(received)
        .skip(LATENCY_WARMUP as usize)
        .map(|(&c, &r)| (r as f64 - c as f64) / 1e3)
        .collect()
}

async fn latency_delivery(pg: &Schema, n: u64, every: Duration, c: usize) -> (Vec<f64>, Vec<f64>) {
    let queue = fresh_queue(&pg.db, "latency", 32).await;
    let base = Instant::now();
    let (seen, seen_rx) = mpsc::unbounded_channel();
    let (stop, stopped) = oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(queue.source())
            .state(Clock { base, seen })
            .concurrency(c)
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(record_latency),
    );
    // The consumer's first claim finds nothing, and it listens.
    tokio::time::sleep(Duration::from_millis(500)).await;
    let publisher = tokio::spawn(publish_paced(pg.db.clone(), queue.clone(), base, n, every));
    let received = collect(seen_rx, n).await;
    let (committing, took) = publisher.await.unwrap();
    let _ = stop.send(());
    let report = consumer.await.unwrap();
    assert_eq!(report.acked, n, "{report:?}");
    (latencies(&committing, &received), took)
}

async fn latency_by_hand(
    pg: &Schema,
    n: u64,
    every: Duration,
    batch: usize,
) -> (Vec<f64>, Vec<f64>) {
    let queue = fresh_queue(&pg.db, "latency", batch).await;
    let t = queue.queue().table_name().to_owned();
    let base = Instant::now();
    let (seen, seen_rx) = mpsc::unbounded_channel();
    let db = pg.db.clone();
    let consumer = tokio::spawn(async move {
        let statements = Statements::new(&t);
        let mut listener = PgListener::connect_with(&db).await.unwrap();
        listener.listen(&t).await.unwrap();
        let owner = format!("hand-{}", std::process::id());
        let mut acked = 0;
        while acked < n {
            let rows = statements.claim(&db, &owner, batch).await;
            if rows.is_empty() {
                tokio::select! {
                    notified = listener.recv() => { notified.unwrap(); }
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                }
                continue;
            }
            for row in &rows {
                let now = Instant::now();
                let id: String = row.get("id");
                let payload: Vec<u8> = row.get("payload");
                let sent: Sent = serde_json::from_slice(&payload).unwrap();
                let _ = seen.send((sent.i, micros(base, now)));
                let completed = sqlx::query(AssertSqlSafe(statements.complete.as_str()))
                    .bind(&id)
                    .execute(&db)
                    .await
                    .unwrap()
                    .rows_affected();
                acked += completed;
            }
        }
        acked
    });
    tokio::time::sleep(Duration::from_millis(500)).await;
    let publisher = tokio::spawn(publish_paced(pg.db.clone(), queue, base, n, every));
    let received = collect(seen_rx, n).await;
    let (committing, took) = publisher.await.unwrap();
    assert_eq!(consumer.await.unwrap(), n);
    (latencies(&committing, &received), took)
}

fn percentile(sorted: &[f64], p: f64) -> f64 {
    let rank = ((sorted.len() as f64 * p).ceil() as usize).clamp(1, sorted.len());
    sorted[rank - 1]
}

struct LatencyFigures {
    rate: f64,
    units: usize,
    ours: (f64, f64),
    hand: (f64, f64),
}

async fn latency(pg: &Schema, c: usize, batch: usize) -> LatencyFigures {
    let total: u64 = env_or("BENCH_LATENCY_UNITS", 2_000);
    let rate: f64 = env_or("BENCH_LATENCY_RATE", 100.0);
    let rounds: u64 = env_or("BENCH_LATENCY_ROUNDS", 2).max(1);
    let per_run = total / rounds + LATENCY_WARMUP;
    let every = Duration::from_secs_f64(1.0 / rate);
    println!(
        "\n== 3. latency, publish COMMIT to handler start: {rate} units/s, {total} units per side over {rounds} runs (first {LATENCY_WARMUP} of each not counted) =="
    );
    let (mut ours, mut hand, mut took) = (Vec::new(), Vec::new(), Vec::new());
    let summary = |mut v: Vec<f64>| {
        v.sort_by(f64::total_cmp);
        (percentile(&v, 0.5), percentile(&v, 0.99))
    };
    for round in 0..rounds {
        let sides = if round % 2 == 0 { [0, 1] } else { [1, 0] };
        for side in sides {
            let (lat, publish) = if side == 0 {
                latency_delivery(pg, per_run, every, c).await
            } else {
                latency_by_hand(pg, per_run, every, batch).await
            };
            let (p50, p99) = summary(lat.clone());
            println!(
                "  round {round} {:<8} p50 {p50:.2} ms, p99 {p99:.2} ms",
                if side == 0 { "delivery" } else { "hand" }
            );
            took.extend(publish);
            if side == 0 {
                ours.extend(lat)
            } else {
                hand.extend(lat)
            }
        }
    }
    let units = ours.len();
    let (ours, hand) = (summary(ours), summary(hand));
    println!(
        "latency: delivery p50 {:.2} ms, p99 {:.2} ms; hand-written LISTEN + claim p50 {:.2} ms, p99 {:.2} ms; ratio delivery / hand-written p50 {:.3}, p99 {:.3}; a publish (BEGIN, INSERT, COMMIT) took {:.2} ms (median)",
        ours.0,
        ours.1,
        hand.0,
        hand.1,
        ours.0 / hand.0,
        ours.1 / hand.1,
        median(took)
    );
    LatencyFigures {
        rate,
        units,
        ours,
        hand,
    }
}

// ---------------------------------------------------------------------------------------------

fn main() {
    // `BENCH_THREADS` sets the runtime's worker threads (default: one per core).
    let mut runtime = tokio::runtime::Builder::new_multi_thread();
    if let Some(threads) = std::env::var("BENCH_THREADS")
        .ok()
        .and_then(|t| t.parse().ok())
    {
        runtime.worker_threads(threads);
    }
    runtime.enable_all().build().unwrap().block_on(bench());
}

async fn bench() {
    let concurrency: usize = env_or("BENCH_CONCURRENCY", 16).max(1);
    let batch: usize = env_or("BENCH_BATCH", 32).max(1);
    let n: u64 = env_or("BENCH_UNITS", 20_000);
    let parts = std::env::var("BENCH_PART").unwrap_or_else(|_| "drain,claim,latency".into());
    let runs = |part: &str| parts.split(',').any(|p| p.trim() == part);
    let schema = format!("bench_sql_queue_{}", std::process::id());
    let pg = Schema::create(&schema, concurrency as u32 + 4).await;
    let started = Instant::now();

    let drained = if runs("drain") {
        Some(
            drain(
                &pg,
                Drain {
                    n,
                    concurrency,
                    batch,
                    customers: env_or("BENCH_CUSTOMERS", 37),
                },
            )
            .await,
        )
    } else {
        None
    };
    let claims = if runs("claim") {
        Some(claim_cost(&pg, &schema, batch).await)
    } else {
        None
    };
    let latencies = if runs("latency") {
        Some(latency(&pg, concurrency, batch).await)
    } else {
        None
    };

    println!(
        "\n== summary (sql_queue, {:.0} s) ==",
        started.elapsed().as_secs_f64()
    );
    println!(
        "| {:<68} | {:>12} | {:>12} | {:>7} | {:<11} |",
        "measure", "delivery", "hand-written", "ratio", "target"
    );
    println!(
        "|{:-<70}|{:-<14}|{:-<14}|{:-<9}|{:-<13}|",
        "", "", "", "", ""
    );
    let row = |what: &str, ours: String, hand: String, ratio: Option<f64>, target: &str| {
        let ratio = ratio.map_or(String::new(), |r| format!("{r:.3}"));
        println!("| {what:<68} | {ours:>12} | {hand:>12} | {ratio:>7} | {target:<11} |");
    };
    if let Some(d) = drained {
        row(
            &format!(
                "drain, tx per unit (units/s; {} units, C {}, batch {}, {} cust.)",
                d.d.n, d.d.concurrency, d.d.batch, d.d.customers
            ),
            format!("{:.0}", d.ours),
            format!("{:.0}", d.hand),
            Some(d.ours / d.hand),
            ">= 1.0",
        );
        row(
            "drain, hand-written tx per batch (info; weaker guarantees)",
            format!("{:.0}", d.ours),
            format!("{:.0}", d.batch),
            Some(d.ours / d.batch),
            "info",
        );
        if !d.shared.is_nan() {
            row(
                "drain, hand-written one claimer + C workers (diagnostic)",
                format!("{:.0}", d.ours),
                format!("{:.0}", d.shared),
                Some(d.ours / d.shared),
                "info",
            );
        }
    }
    if let Some(c) = claims {
        row(
            &format!("claims/s (batch {batch}), {} delivered rows", c.small),
            format!("{:.0}", c.small_rate),
            "-".into(),
            None,
            "",
        );
        row(
            &format!(
                "claims/s (batch {batch}), {} delivered rows (ratio: / {})",
                c.large, c.small
            ),
            format!("{:.0}", c.large_rate),
            "-".into(),
            Some(c.large_rate / c.small_rate),
            "0.9 - 1.1",
        );
        println!(
            "|   claim plan: Seq Scan {}; seq_scan delta over all claim rounds: {}",
            if c.seq_scan_in_plan {
                "PRESENT"
            } else {
                "absent"
            },
            c.seq_scans
        );
    }
    if let Some(l) = latencies {
        row(
            &format!("latency p50, ms ({} units/s, {} units)", l.rate, l.units),
            format!("{:.2}", l.ours.0),
            format!("{:.2}", l.hand.0),
            Some(l.ours.0 / l.hand.0),
            "info",
        );
        row(
            &format!("latency p99, ms ({} units/s, {} units)", l.rate, l.units),
            format!("{:.2}", l.ours.1),
            format!("{:.2}", l.hand.1),
            Some(l.ours.1 / l.hand.1),
            "info",
        );
    }

    pg.remove().await;
}
