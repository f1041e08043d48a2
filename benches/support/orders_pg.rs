//! What the benchmarks with the real effect share: the orders of `examples/support/orders.rs`
//! (each order's unit, the example's handler counted, the same transaction written by hand, the
//! check that every order was applied once) and the bench's own PostgreSQL schema with its pool.
#![allow(dead_code)] // each benchmark uses part of it

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery::batch::{Batch, BatchHandler, BatchOutcome};
use delivery::extract::Malformed;
use delivery::{Stamp, Unit, disposition::Outcome, handler::Handler};
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::Notify;

#[path = "../../examples/support/orders.rs"]
pub mod orders;

pub fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The customer of the `i`th order: one of 37.
pub fn customer_of(i: u64) -> String {
    format!("c-{}", i % 37)
}

/// The `i`th order (`i` from 0) as its producer publishes it: unit id `m-<i>`, stamp `i + 1`,
/// customer [`customer_of`], amounts 1 to 100 cents.
pub fn order_unit(i: u64) -> Unit {
    let body = format!(
        r#"{{"order_id":"o-{i}","customer_id":"{}","amount_cents":{}}}"#,
        customer_of(i),
        i % 100 + 1
    );
    Unit::new(format!("m-{i}"), body).with_stamp(Stamp(i + 1))
}

/// The example's handler, counting the units it applied: the last one stops the consumer.
pub struct Counted {
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<Notify>,
}

impl Counted {
    /// The handler for `target` units, and what it notifies once the last one is applied.
    pub fn new(target: u64) -> (Self, Arc<Notify>) {
        let finished = Arc::new(Notify::new());
        let handler = Counted {
            done: Arc::new(AtomicU64::new(0)),
            target,
            finished: finished.clone(),
        };
        (handler, finished)
    }
}

impl Handler<orders::App> for Counted {
    fn call(
        &self,
        unit: &Unit,
        state: &orders::App,
    ) -> impl Future<Output = Outcome> + Send + 'static {
        let run = orders::apply_order.call(unit, state);
        let (done, target, finished) = (self.done.clone(), self.target, self.finished.clone());
        async move {
            let outcome = run.await;
            if matches!(outcome, Outcome::Applied)
                && done.fetch_add(1, Ordering::Relaxed) + 1 == target
            {
                finished.notify_one();
            }
            outcome
        }
    }
}

/// `source` drained of its `n` orders by a `Consumer` at `concurrency` running the example's
/// handler ([`Counted`]), measured from the consumer's start to the last unit settled; then every
/// order checked applied once.
pub async fn drain<Src: delivery::transport::Source>(
    source: Src,
    pg: &Schema,
    n: u64,
    concurrency: usize,
) -> crate::support::Run {
    let (handler, finished) = Counted::new(n);
    let run = crate::support::measure(n, async {
        let report = delivery::Consumer::new(source)
            .state(app(&pg.db))
            .concurrency(concurrency)
            .shutdown_on(async move { finished.notified().await })
            .run(handler)
            .await;
        assert_eq!(report.acked, n, "{report:?}");
    })
    .await;
    check(&pg.db, n).await;
    run
}

/// The example's batch handler, counting the units its batches applied: the last one stops the
/// consumer.
pub struct CountedBatches {
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<Notify>,
}

impl BatchHandler<orders::App> for CountedBatches {
    type Item = <orders::apply_orders as BatchHandler<orders::App>>::Item;

    fn decode(&self, unit: &Unit, state: &orders::App) -> Result<Self::Item, Malformed> {
        orders::apply_orders.decode(unit, state)
    }

    fn call(
        &self,
        batch: Batch<Self::Item>,
        state: &orders::App,
    ) -> impl Future<Output = BatchOutcome> + Send + 'static {
        let n = batch.len() as u64;
        let run = orders::apply_orders.call(batch, state);
        let (done, target, finished) = (self.done.clone(), self.target, self.finished.clone());
        async move {
            let outcome = run.await;
            if done.fetch_add(n, Ordering::Relaxed) + n >= target {
                finished.notify_one();
            }
            outcome
        }
    }
}

/// `source` drained of its `n` orders by a `Consumer` running the example's batch handler
/// (`apply_orders`) in batches of up to `batch` (`BENCH_MAX_WAIT_MS`, default 20 ms), `at_once` batches at a time,
/// measured from the consumer's start to the last unit settled; then every order checked applied
/// once.
pub async fn drain_batches<Src: delivery::transport::Source>(
    source: Src,
    pg: &Schema,
    n: u64,
    batch: usize,
    at_once: usize,
) -> crate::support::Run {
    let finished = Arc::new(Notify::new());
    let handler = CountedBatches {
        done: Arc::new(AtomicU64::new(0)),
        target: n,
        finished: finished.clone(),
    };
    let run = crate::support::measure(n, async {
        let report = delivery::Consumer::new(source)
            .state(app(&pg.db))
            .concurrency(at_once)
            .shutdown_on(async move { finished.notified().await })
            .batch(
                batch,
                Duration::from_millis(crate::support::env_or("BENCH_MAX_WAIT_MS", 20)),
            )
            .run(handler)
            .await;
        assert_eq!(report.acked, n, "{report:?}");
    })
    .await;
    check(&pg.db, n).await;
    run
}

/// The example's state over `db`, with no pause after the effect.
pub fn app(db: &PgPool) -> orders::App {
    orders::App {
        db: db.clone(),
        effect_delay: Duration::ZERO,
    }
}

#[derive(serde::Deserialize)]
pub struct OrderPlaced {
    order_id: String,
    customer_id: String,
    amount_cents: i64,
}

/// The example's transaction, written by hand: the order inserted (nothing if its id exists), and
/// only then the balance, the stamp guard and the latest order; the inbox and the confirmation.
pub async fn apply_by_hand(
    db: &PgPool,
    id: &str,
    stamp: i64,
    order: &OrderPlaced,
) -> sqlx::Result<()> {
    let mut tx = db.begin().await?;
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
        let newer = sqlx::query(
            "INSERT INTO delivery_stamps (scope, key, stamp) VALUES ($1, $2, $3) \
             ON CONFLICT (scope, key) DO UPDATE SET stamp = EXCLUDED.stamp \
             WHERE delivery_stamps.stamp < EXCLUDED.stamp \
             RETURNING 1",
        )
        .bind("latest_orders")
        .bind(&order.customer_id)
        .bind(stamp)
        .fetch_optional(&mut *tx)
        .await?
        .is_some();
        if newer {
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
    let first_time = sqlx::query(
        "INSERT INTO delivery_inbox (consumer, unit_id) VALUES ($1, $2) \
         ON CONFLICT (consumer, unit_id) DO NOTHING",
    )
    .bind("orders.confirmations")
    .bind(id)
    .execute(&mut *tx)
    .await?
    .rows_affected()
        == 1;
    if first_time {
        sqlx::query(
            "INSERT INTO confirmations (customer_id, sent) VALUES ($1, 1) \
             ON CONFLICT (customer_id) DO UPDATE SET sent = confirmations.sent + 1",
        )
        .bind(&order.customer_id)
        .execute(&mut *tx)
        .await?;
    }
    tx.commit().await
}

/// The bench's own schema, first on the search path of every connection of its pool, holding the
/// example's tables.
pub struct Schema {
    admin: PgPool,
    name: String,
    /// The pool the effects are written through, by both sides.
    pub db: PgPool,
}

impl Schema {
    /// The schema `name` created afresh (dropped first if it exists), with the example's tables,
    /// and a pool of `connections` on it.
    pub async fn create(name: &str, connections: u32) -> Schema {
        let admin = PgPool::connect(&database_url())
            .await
            .expect("PostgreSQL unreachable");
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {name} CASCADE; CREATE SCHEMA {name};"
        )))
        .execute(&admin)
        .await
        .unwrap();
        let base = database_url();
        let sep = if base.contains('?') { '&' } else { '?' };
        let db = PgPoolOptions::new()
            .max_connections(connections)
            .connect(&format!("{base}{sep}options=-c%20search_path%3D{name}"))
            .await
            .unwrap();
        orders::create_tables(&db).await.unwrap();
        Schema {
            admin,
            name: name.to_owned(),
            db,
        }
    }

    /// Empties the effect tables (between runs).
    pub async fn empty(&self) {
        sqlx::raw_sql(
            "TRUNCATE orders, balances, latest_orders, confirmations, delivery_inbox, delivery_stamps",
        )
        .execute(&self.db)
        .await
        .unwrap();
    }

    /// Closes the pool and drops the schema.
    pub async fn remove(self) {
        self.db.close().await;
        let _ = sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {} CASCADE",
            self.name
        )))
        .execute(&self.admin)
        .await;
    }
}

/// Every order applied once.
pub async fn check(db: &PgPool, n: u64) {
    let applied: i64 = sqlx::query("SELECT count(*) FROM orders")
        .fetch_one(db)
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied, n as i64);
}
