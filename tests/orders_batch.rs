//! `apply_orders` (`examples/support/orders.rs`), the orders contract in batches, against the
//! real PostgreSQL on the in-memory broker: the same units applied in batches and unit by unit
//! (`apply_order`) end in the same tables, whatever the batch holds — an order published twice
//! under two ids, a unit delivered twice, stamps out of publication order, a negative amount,
//! a malformed unit — and a redelivery of every unit, in batches, changes nothing.
//! Fails, never skips, when PostgreSQL is unreachable. Each run writes into a schema of its own.
#![cfg(feature = "postgres")]

#[path = "../examples/support/orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;

use std::collections::BTreeMap;
use std::str::FromStr;
use std::time::Duration;

use delivery::disposition::{Backoff, ReasonKind};
use delivery::memory::MemoryBroker;
use delivery::{Consumer, Stamp, Unit};
use process::{Orders, OrdersDb, order};
use sqlx::postgres::{PgConnectOptions, PgPoolOptions};
use sqlx::{AssertSqlSafe, PgPool};

/// The orders tables in a schema of their own, and the example's state over them.
struct Tables {
    admin: PgPool,
    schema: String,
    app: orders::App,
}

impl Orders for Tables {
    fn tables(&self) -> OrdersDb<'_> {
        OrdersDb::Postgres {
            db: &self.admin,
            schema: &self.schema,
        }
    }
}

impl Tables {
    async fn new(name: &str) -> Tables {
        let admin = PgPool::connect(&process::database_url())
            .await
            .expect("PostgreSQL answers on DATABASE_URL (scripts/services.sh starts it)");
        let schema = format!("orders_batch_{name}_{}", std::process::id());
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA IF EXISTS {schema} CASCADE; CREATE SCHEMA {schema};"
        )))
        .execute(&admin)
        .await
        .unwrap();
        let options = PgConnectOptions::from_str(&process::database_url())
            .unwrap()
            .options([("search_path", schema.as_str())]);
        let db = PgPoolOptions::new()
            .max_connections(8)
            .connect_with(options)
            .await
            .unwrap();
        orders::create_tables(&db).await.unwrap();
        Tables {
            admin,
            schema,
            app: orders::App {
                db,
                effect_delay: Duration::ZERO,
            },
        }
    }

    /// Everything the contract writes: orders, balances, latest orders, confirmations.
    async fn state(&self) -> (i64, Vec<BTreeMap<String, i64>>, BTreeMap<String, String>) {
        (
            self.scalar("SELECT count(*) FROM $schema.orders").await,
            vec![self.balances().await, self.confirmations().await],
            self.latest_orders().await,
        )
    }

    async fn drop(self) {
        self.app.db.close().await;
        sqlx::raw_sql(AssertSqlSafe(format!(
            "DROP SCHEMA {} CASCADE",
            self.schema
        )))
        .execute(&self.admin)
        .await
        .unwrap();
    }
}

/// The units of the run, in publication order, and the ids of those that cannot be applied.
fn units() -> (Vec<Unit>, Vec<(&'static str, ReasonKind)>) {
    let mut units = Vec::new();
    let mut stamp = 0;
    let mut stamped = |id: String, body: String| {
        stamp += 1;
        Unit::new(id, body).with_stamp(Stamp(stamp))
    };
    for i in 0..300 {
        let customer = format!("c-{}", i % 7);
        units.push(stamped(
            format!("m-{i}"),
            order(&format!("o-{i}"), &customer, i + 1),
        ));
        match i {
            // The same order published again under another id: inserted once, counted once in
            // the balance, and confirmed per unit (two units).
            5 | 150 => units.push(stamped(
                format!("m-{i}-again"),
                order(&format!("o-{i}"), &customer, i + 1),
            )),
            // The same unit delivered twice: confirmed once.
            7 | 151 => units.push(units.last().unwrap().clone()),
            _ => {}
        }
    }
    // Older orders arriving late: stamps below their customers' newest, never their latest.
    for (i, late) in [(1u64, 300), (2, 301)] {
        let body = order(&format!("o-{late}"), &format!("c-{}", late % 7), 1000);
        units.push(Unit::new(format!("m-{late}"), body).with_stamp(Stamp(i)));
    }
    units.insert(40, stamped("negative".into(), order("o-neg", "c-1", -5)));
    units.insert(80, stamped("malformed".into(), "{oops".into()));
    let dead = vec![
        ("malformed", ReasonKind::Malformed),
        ("negative", ReasonKind::Rejected),
    ];
    (units, dead)
}

/// Runs `units` through the example's handler on `tables`: in batches of `batch_size` with
/// `concurrency` batches at once, or unit by unit (`batch_size` 1). The dead letter's ids and
/// reasons, sorted.
async fn run(
    tables: &Tables,
    units: &[Unit],
    batch_size: usize,
    concurrency: usize,
) -> Vec<(String, ReasonKind)> {
    let broker = MemoryBroker::new();
    for unit in units {
        broker.publish("orders", unit.clone());
    }
    let consumer = Consumer::new(broker.consume("orders"))
        .state(tables.app.clone())
        .concurrency(concurrency)
        .backoff(Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(10),
        ))
        .shutdown_on(broker.idle("orders"));
    let report = if batch_size > 1 {
        consumer
            .batch(batch_size, Duration::from_millis(20))
            .run(orders::apply_orders)
            .await
    } else {
        consumer.run(orders::apply_order).await
    };
    assert_eq!(report.returned, 0, "no failure: {report:?}");
    let mut dead: Vec<(String, ReasonKind)> = broker
        .dead_letters("orders")
        .list()
        .into_iter()
        .map(|d| (d.id().to_string(), d.reason.unwrap()))
        .collect();
    dead.sort_by(|a, b| a.0.cmp(&b.0));
    dead
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_end_in_the_tables_units_applied_one_by_one_end_in() {
    let (units, poison) = units();
    let poison: Vec<(String, ReasonKind)> = poison
        .into_iter()
        .map(|(id, r)| (id.to_owned(), r))
        .collect();

    let one_by_one = Tables::new("one").await;
    assert_eq!(run(&one_by_one, &units, 1, 1).await, poison);
    let expected = one_by_one.state().await;
    one_by_one.drop().await;
    assert_eq!(expected.0, 302, "300 orders, 2 late ones; none twice");
    assert_eq!(
        expected.1[1].values().sum::<i64>(),
        304,
        "a confirmation per unit: 302 orders, 2 published twice"
    );

    // The first 150 units, then every unit: batches that mix units already applied with new
    // ones, then batches of units all applied.
    let batched = Tables::new("batched").await;
    run(&batched, &units[..150], 64, 1).await;
    assert_eq!(run(&batched, &units, 64, 1).await, poison);
    assert_eq!(batched.state().await, expected, "one batch at a time");
    run(&batched, &units, 64, 1).await;
    assert_eq!(batched.state().await, expected, "every unit redelivered");
    batched.drop().await;

    // Batches at once: they share customers (every batch writes each of the 7) and wait for
    // each other's keys rather than deadlock (a deadlock would fail a batch: `returned`).
    let concurrent = Tables::new("concurrent").await;
    assert_eq!(run(&concurrent, &units, 16, 4).await, poison);
    assert_eq!(concurrent.state().await, expected, "four batches at a time");
    concurrent.drop().await;
}
