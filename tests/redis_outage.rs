//! A Redis restart or failover as `examples/redis_consumer.rs` sees it, against the real Redis:
//! every client connection dropped mid-run. In a binary of its own, since it drops every
//! connection to the server, other tests' too.
#![cfg(feature = "redis")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/process.rs"]
mod process;
#[path = "support/redis_orders.rs"]
mod redis_orders;

use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use process::{orders, terminate, wait_for};
use redis_orders::{Env, redis_url};

/// A Redis restart or failover as the consumer sees it: every client connection dropped at once,
/// mid-run. The example's effect connection, the source's reading and settling all reconnect by
/// themselves; every valid order is applied once, and none goes to the dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropped_connections_dead_letter_no_valid_unit() {
    const UNITS: usize = 3000;
    let env = Env::new("dropped", 5).await;
    let (messages, expected) = orders(UNITS, 23, 50);
    for (id, body) in &messages {
        env.publish(id, body).await;
    }
    let mut child = env.start(8, "dropped", 5);
    wait_for(
        "a tenth of the orders applied",
        Duration::from_secs(60),
        async || env.hlen("orders").await >= (UNITS / 10) as u64,
    )
    .await;
    // Every normal client connection dropped, the consumer's included (this one is skipped).
    let admin = redis::Client::open(redis_url()).unwrap();
    let mut admin = admin.get_multiplexed_async_connection().await.unwrap();
    let killed: i64 = redis::cmd("CLIENT")
        .arg("KILL")
        .arg("TYPE")
        .arg("normal")
        .arg("SKIPME")
        .arg("yes")
        .query_async(&mut admin)
        .await
        .unwrap();
    assert!(
        killed >= 3,
        "the consumer's connections were dropped: {killed}"
    );
    // This test's own connection was dropped too: its next command fails, and it reconnects.
    let _ = redis::cmd("PING")
        .query_async::<()>(&mut env.redis.clone())
        .await;
    let applied_at_kill = env.hlen("orders").await;
    wait_for(
        "every order applied after the connections dropped",
        Duration::from_secs(120),
        async || env.hlen("orders").await == UNITS as u64 && env.group_state().await == (0, true),
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        0,
        "a dropped connection is not a poison unit: nothing valid dead-lettered"
    );
    assert_eq!(env.balances().await, expected, "each order counted once");
    eprintln!("dropped connections: {killed} killed with {applied_at_kill} of {UNITS} applied");
    env.cleanup().await;
}
