//! A Kafka broker restart or network failover as `examples/kafka_consumer.rs` sees it: every
//! connection between the consumer and the broker dropped mid-run, while the broker keeps its
//! data. tansu with memory storage loses everything on restart, so the test runs a tansu of its
//! own that advertises a loopback proxy (`support/proxy.rs`) as its address: every client
//! connection, the consumer's to the group coordinator and the partition leader, its producer's
//! and the attempts reader's, goes through the proxy, which drops them all at once and refuses new
//! ones for a few seconds. Needs `tansu` on PATH (or in ~/.cargo/bin) and PostgreSQL.
#![cfg(all(feature = "kafka", feature = "postgres"))]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/kafka.rs"]
mod kafka_support;
#[path = "support/kafka_orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;
#[path = "support/proxy.rs"]
mod proxy;

use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use kafka_support::{Tansu, free_address};
use orders::Env;
use process::{Orders as _, orders, terminate, wait_for};
use proxy::Proxy;

/// Every connection between the consumer and the broker dropped at once, after a tenth of the
/// orders are applied, and new ones refused for 3 s. The consumer, never restarted, goes on by
/// itself: every valid order is applied exactly once, and nothing valid reaches the dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_dead_letter_no_valid_unit() {
    const UNITS: usize = 3000;
    let upstream = free_address();
    let proxy = Proxy::start(upstream).await;
    let _tansu = Tansu::start(upstream, proxy.address()).await;
    let env = Env::at(&proxy.address().to_string(), "outage").await;
    let (units, expected) = orders(UNITS, 23, 50);
    env.publish_all(&units).await;

    // A pause after each effect's commit keeps the run long enough to drop the connections in
    // the middle of it, with units committed in PostgreSQL and not yet in Kafka.
    let mut child = env.start(4, 20);
    let applied = async || env.scalar("SELECT count(*) FROM $schema.orders").await;
    wait_for(
        "a tenth of the orders applied",
        Duration::from_secs(90),
        async || applied().await >= (UNITS / 10) as i64,
    )
    .await;
    let dropped = proxy.drop_all(Duration::from_secs(3));
    let applied_at_drop = applied().await;
    assert!(
        dropped >= 2,
        "the consumer's connections were dropped: {dropped}"
    );
    assert!(
        applied_at_drop < UNITS as i64,
        "the connections dropped mid-run: {applied_at_drop} of {UNITS} applied"
    );
    wait_for(
        "every order applied after the connections dropped",
        Duration::from_secs(180),
        async || {
            assert!(
                child.try_wait().unwrap().is_none(),
                "the consumer goes on by itself, never exits"
            );
            applied().await == UNITS as i64
        },
    )
    .await;
    let reconnected = proxy.open();
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        0,
        "a dropped connection is not a poison unit: nothing valid dead-lettered: {:?}",
        dead_letters::all(&env.dead_letters())
            .await
            .iter()
            .map(|d| (d.id().to_string(), d.reason))
            .collect::<Vec<_>>()
    );
    assert_eq!(applied().await, UNITS as i64, "every order applied, once");
    assert_eq!(env.balances().await, expected, "each order counted once");
    eprintln!(
        "dropped connections: {dropped} dropped with {applied_at_drop} of {UNITS} applied; {reconnected} open again at the end"
    );
    env.cleanup().await;
}
