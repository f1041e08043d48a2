//! The RabbitMQ transport with a real effect — `examples/rabbitmq_consumer.rs`'s orders
//! transaction in PostgreSQL — against a hand-written lapin + sqlx loop doing the same
//! transaction, on the real broker and database.
//!
//!     cargo bench --features lapin,postgres --bench rabbitmq_postgres
//!
//! Publishes `BENCH_N` orders (default 20000), stamped and with message ids as a producer of the
//! example's contract does, to a fresh quorum queue (the example's topology: delivery limit 5, a
//! dead letter), prefetch 100; empties the effect tables; and drains them at concurrency 32 with a
//! pool of 32 connections:
//!
//! - **delivery**: `RabbitSource` + `Consumer` running the example's own handler
//!   (`examples/support/orders.rs`, `apply_order`), in each ack mode (`BENCH_ACKS=coalesced` or
//!   `per-unit` runs one; both by default);
//! - **hand-written**: lapin's consumer stream, `for_each_concurrent(32)`, the same statements in
//!   one sqlx transaction per unit, then `basic.ack` of that delivery.
//!
//! Each side is timed from its consumer's start to its last acknowledgement. `BENCH_ROUNDS`
//! rounds (default 3), interleaved, the first side alternating; prints every run, the median
//! rates and their ratio, and the median CPU time the bench process spent per unit (PostgreSQL's
//! and the broker's not included).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery::lapin::options::BasicAckOptions;
use delivery::lapin::types::AMQPValue;
use delivery::rabbitmq::{AckMode, RabbitSource, RabbitTopology};
use delivery::{Consumer, Handler, Outcome, Stamp, Unit};
use futures_util::StreamExt;
use sqlx::postgres::{PgPool, PgPoolOptions};
use sqlx::{AssertSqlSafe, Row};
use tokio::sync::Notify;

mod support;
use support::{Run, env_or, interleaved, measure, report};
#[path = "support/rabbitmq.rs"]
mod rabbitmq;
use rabbitmq::{ack_modes, fresh, subscribe, url};

#[path = "../examples/support/orders.rs"]
#[allow(dead_code)]
mod orders;

const CONCURRENCY: usize = 32;
const PREFETCH: u16 = 100;

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

/// The example's handler, counting the units it applied: the last one stops the consumer.
struct Counted {
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<Notify>,
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

/// A fresh queue holding `n` orders, and empty effect tables.
async fn fresh_orders(topology: &RabbitTopology, db: &PgPool, n: u64) {
    sqlx::raw_sql(
        "TRUNCATE orders, balances, latest_orders, confirmations, delivery_inbox, delivery_stamps",
    )
    .execute(db)
    .await
    .unwrap();
    fresh(topology, n, |i| {
        let body = format!(
            r#"{{"order_id":"o-{i}","customer_id":"c-{}","amount_cents":{}}}"#,
            i % 37,
            i % 100 + 1
        );
        let unit = Unit::new(format!("m-{i}"), body).with_stamp(Stamp(i + 1));
        (
            unit.payload().to_vec(),
            delivery::rabbitmq::properties_of(&unit),
        )
    })
    .await;
}

async fn through_transport(topology: &RabbitTopology, db: &PgPool, n: u64, mode: AckMode) -> Run {
    fresh_orders(topology, db, n).await;
    let handler = Counted {
        done: Arc::new(AtomicU64::new(0)),
        target: n,
        finished: Arc::new(Notify::new()),
    };
    let finished = handler.finished.clone();
    let source = RabbitSource::connect(url(), topology.clone())
        .await
        .unwrap()
        .ack_mode(mode);
    let state = orders::App {
        db: db.clone(),
        effect_delay: Duration::ZERO,
    };
    let run = measure(n, async {
        let report = Consumer::new(source)
            .state(state)
            .concurrency(CONCURRENCY)
            .shutdown_on(async move { finished.notified().await })
            .run(handler)
            .await;
        assert_eq!(report.acked, n, "{report:?}");
    })
    .await;
    check(db, n).await;
    run
}

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
    customer_id: String,
    amount_cents: i64,
}

/// The example's transaction, written by hand: the order inserted (nothing if its id exists), and
/// only then the balance, the stamp guard and the latest order; the inbox and the confirmation.
async fn apply_by_hand(db: &PgPool, id: &str, stamp: i64, order: &OrderPlaced) -> sqlx::Result<()> {
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

async fn hand_written(topology: &RabbitTopology, db: &PgPool, n: u64) -> Run {
    fresh_orders(topology, db, n).await;
    let (connection, _channel, consumer) = subscribe(topology).await;
    let run = measure(n, async {
        consumer
            .take(n as usize)
            .for_each_concurrent(CONCURRENCY, |delivery| async move {
                let delivery = delivery.unwrap();
                let id = delivery.properties.message_id().as_ref().unwrap().as_str();
                let stamp = match delivery
                    .properties
                    .headers()
                    .as_ref()
                    .and_then(|h| h.inner().get("x-delivery-stamp"))
                {
                    Some(AMQPValue::LongLongInt(stamp)) => *stamp,
                    other => panic!("a stamp: {other:?}"),
                };
                let order: OrderPlaced = serde_json::from_slice(&delivery.data).unwrap();
                apply_by_hand(db, id, stamp, &order).await.unwrap();
                assert!(delivery.ack(BasicAckOptions::default()).await.unwrap());
            })
            .await;
    })
    .await;
    let _ = connection.close(200, "ok".into()).await;
    check(db, n).await;
    run
}

/// Every order applied once.
async fn check(db: &PgPool, n: u64) {
    let applied: i64 = sqlx::query("SELECT count(*) FROM orders")
        .fetch_one(db)
        .await
        .unwrap()
        .get(0);
    assert_eq!(applied, n as i64);
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let name = format!("bench_rmq_pg_{}", std::process::id());
    let topology = RabbitTopology::new(name.replace('_', "-"))
        .delivery_limit(5)
        .prefetch(PREFETCH);

    // The bench's own schema, first on the search path of every connection of the pool.
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
        .max_connections(CONCURRENCY as u32)
        .connect(&format!("{base}{sep}options=-c%20search_path%3D{name}"))
        .await
        .unwrap();
    orders::create_tables(&db).await.unwrap();

    for (label, mode) in ack_modes() {
        let (hand, ours) = interleaved(
            rounds,
            async || hand_written(&topology, &db, n).await,
            async || through_transport(&topology, &db, n, mode).await,
        )
        .await;
        report(
            &format!("orders into PostgreSQL, concurrency {CONCURRENCY}, {label}"),
            &format!("{n} units, prefetch {PREFETCH}, pool {CONCURRENCY}"),
            "lapin + sqlx",
            &hand,
            &ours,
        );
    }

    db.close().await;
    let _ = sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP SCHEMA IF EXISTS {name} CASCADE"
    )))
    .execute(&admin)
    .await;
    rabbitmq::delete(&topology).await;
}
