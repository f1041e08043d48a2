//! `examples/rabbitmq_consumer.rs` run as a child process against the real RabbitMQ and
//! PostgreSQL: its contract, and SIGKILL mid-effect many times over thousands of units, each
//! one unit per call and in batches (`BATCH_SIZE`). Fails, never skips, when a server is
//! unreachable. Each test writes into a schema of its own.
#![cfg(feature = "lapin")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/rabbitmq_orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use delivery::{dead_letter::DeadLetters, disposition::ReasonKind};
use orders::{Env, by_id};
use process::{Orders as _, order, terminate, wait_for};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_applies_orders_once_and_dead_letters_poison() {
    contract("contract", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_in_batches_applies_orders_once_and_dead_letters_poison() {
    contract("contract-batched", 50).await;
}

/// The example's contract, its handler taking `batch_size` units per call: each order applied
/// and confirmed once, each poison unit dead-lettered alone, intact.
async fn contract(name: &str, batch_size: usize) {
    let mut env = Env::new(name, 5).await;
    env.batch_size = batch_size;
    let mut child = env.start(8);
    env.publish("m-1", &order("o-1", "c-1", 100)).await;
    env.publish("m-2", &order("o-2", "c-1", 50)).await;
    env.publish("m-1", &order("o-1", "c-1", 100)).await; // a redelivery of the same unit
    env.publish("m-3", &order("o-3", "c-2", 7)).await;
    env.publish("bad-json", "{not json").await;
    env.publish("missing-field", r#"{"order_id":"o-9","customer_id":"c-9"}"#)
        .await;
    env.publish("negative", &order("o-neg", "c-3", -5)).await;
    // No `x-delivery-stamp`: the handler takes the stamp, so the unit is malformed (in batches,
    // it never enters one).
    env.publish_unit(delivery::Unit::new("no-stamp", order("o-ns", "c-4", 1)))
        .await;

    wait_for(
        "3 orders and 4 dead letters",
        Duration::from_secs(60),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == 3
                && env.dead_letters().count().await.unwrap() == 4
        },
    )
    .await;
    assert_eq!(
        env.balances().await,
        BTreeMap::from([("c-1".into(), 150), ("c-2".into(), 7)])
    );
    assert_eq!(
        env.confirmations().await,
        BTreeMap::from([("c-1".into(), 2), ("c-2".into(), 1)]),
        "one confirmation per unit: m-1 twice counts once"
    );
    let dead = env.all_dead().await;
    let dead = by_id(&dead);
    assert_eq!(dead["bad-json"].reason, Some(ReasonKind::Malformed));
    assert_eq!(
        dead["bad-json"].unit.payload().as_ref(),
        b"{not json",
        "intact"
    );
    assert_eq!(
        dead["bad-json"].delivery_count().get(),
        1,
        "dead-lettered directly"
    );
    assert_eq!(dead["bad-json"].source, env.queue);
    assert_eq!(dead["missing-field"].reason, Some(ReasonKind::Malformed));
    assert_eq!(dead["negative"].reason, Some(ReasonKind::Rejected));
    assert_eq!(dead["negative"].delivery_count().get(), 1);
    assert!(
        dead["negative"].detail.contains("negative"),
        "{}",
        dead["negative"].detail
    );
    assert_eq!(dead["no-stamp"].reason, Some(ReasonKind::Malformed));
    assert_eq!(dead["no-stamp"].delivery_count().get(), 1);
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        4,
        "peeking consumed nothing"
    );

    let status = terminate(&mut child);
    assert!(
        status.success(),
        "graceful shutdown on SIGTERM exits 0: {status:?}"
    );
    assert_eq!(env.queue_depth().await, 0);
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    sigkill_mid_effect(Crash::new("crash", "coalesced", 3000)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_with_per_unit_acks_loses_nothing() {
    sigkill_mid_effect(Crash::new("crash-per-unit", "per-unit", 1500)).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_batch_loses_nothing_and_applies_each_order_once() {
    // Batches of 50, each pausing 150 ms between its commit and its acknowledgements (about 650
    // units a second with two batches at once): most kills land on batches committed and not
    // acknowledged, whose units come back already applied.
    sigkill_mid_effect(Crash {
        batch_size: 50,
        effect_delay_ms: 150,
        ..Crash::new("crash-batched", "coalesced", 6000)
    })
    .await;
}

/// A crash run: its name, the example's settings, and how many units it publishes.
struct Crash {
    name: &'static str,
    acks: &'static str,
    units: usize,
    batch_size: usize,
    effect_delay_ms: u64,
}

impl Crash {
    /// One unit per call, no pause after the effect.
    fn new(name: &'static str, acks: &'static str, units: usize) -> Crash {
        Crash {
            name,
            acks,
            units,
            batch_size: 1,
            effect_delay_ms: 0,
        }
    }
}

/// `units` orders (every hundredth poison) consumed by the example in `acks` mode, SIGKILLed
/// twelve times mid-effect, then drained by a last consumer: each order applied exactly once,
/// each unit confirmed exactly once, the dead letter exactly the poison.
async fn sigkill_mid_effect(crash: Crash) {
    const POISON_EVERY: usize = 100;
    let Crash {
        name,
        acks,
        units,
        batch_size,
        effect_delay_ms,
    } = crash;
    let mut env = Env::new(name, 5).await;
    env.batch_size = batch_size;
    env.effect_delay_ms = effect_delay_ms;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut confirmations: BTreeMap<String, i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    // Each customer's last order in publication order: the latest the store must end with,
    // however the kills reorder the deliveries (rule 4).
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    for i in 0..units {
        if i % POISON_EVERY == 50 {
            let id = format!("poison-{i}");
            let body = if i % 200 == 50 {
                "{oops".to_owned()
            } else {
                order(&format!("o-{i}"), "c-x", -1)
            };
            env.publish(&id, &body).await;
            poison.insert((id, body));
            continue;
        }
        let customer = format!("c-{}", i % 37);
        let amount = (i % 100 + 1) as i64;
        *expected.entry(customer.clone()).or_default() += amount;
        *confirmations.entry(customer.clone()).or_default() += 1;
        latest.insert(customer.clone(), format!("o-{i}"));
        env.publish(
            &format!("m-{i}"),
            &order(&format!("o-{i}"), &customer, amount),
        )
        .await;
    }
    let valid_units = (units - poison.len()) as i64;
    let total = units as i64;

    // Kill the consumer with SIGKILL at varying points, many times, while handlers are mid-effect.
    // After each kill, once RabbitMQ has taken back what the consumer held: the orders applied,
    // and about how many units were applied but not acknowledged (each comes back, its effect
    // already committed): applied + ready + dead-lettered - published (a poison unit copied to
    // the dead letter and not yet acknowledged counts too).
    let started = std::time::Instant::now();
    let mut kills = 0;
    let mut kills_mid_stream = 0;
    let mut applied_unacked = Vec::new();
    for round in 0..12u64 {
        let mut child = env.start_acking(16, acks, std::process::Stdio::null());
        tokio::time::sleep(Duration::from_millis(400 + (round * 137) % 700)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        wait_for(
            "RabbitMQ to see the consumer gone",
            Duration::from_secs(30),
            async || env.queue_counts().await.1 == 0,
        )
        .await;
        let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
        let ready = env.queue_depth().await as i64;
        let dead = env.dead_letters().count().await.unwrap() as i64;
        if applied < valid_units {
            kills_mid_stream += 1;
        }
        applied_unacked.push(applied + ready + dead - total);
    }
    let applied_before_final = env.scalar("SELECT count(*) FROM $schema.orders").await;
    eprintln!(
        "crash run ({name}: {acks} acks, batch size {batch_size}, effect delay {effect_delay_ms} ms): \
         {kills} SIGKILLs in {:.1?}, {kills_mid_stream} with valid units still unapplied; units applied \
         and not acknowledged at each kill (redelivered already applied): {applied_unacked:?}",
        started.elapsed()
    );
    if effect_delay_ms > 0 {
        assert!(
            kills_mid_stream >= kills - 2
                && applied_unacked.iter().filter(|n| **n > 0).count() >= kills - 2,
            "the kills must land while effects are committed and unacknowledged: \
             {kills_mid_stream} mid-stream, {applied_unacked:?}"
        );
    }

    let mut child = env.start_acking(16, acks, std::process::Stdio::null());
    wait_for(
        "every valid order applied and the poison dead-lettered",
        Duration::from_secs(180),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == valid_units
                && env.dead_letters().count().await.unwrap() >= poison.len() as u64
                // Drained, and by the final consumer: it is subscribed, so it is past start-up.
                && env.queue_counts().await == (0, 1)
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    assert_eq!(
        env.balances().await,
        expected,
        "every order's amount counted exactly once"
    );
    assert_eq!(
        env.confirmations().await,
        confirmations,
        "every unit confirmed exactly once"
    );
    assert_eq!(
        env.latest_orders().await,
        latest,
        "each customer's latest order is its newest, whatever order they arrived in"
    );
    assert_eq!(
        env.scalar("SELECT count(*) FROM $schema.orders").await,
        valid_units
    );
    let dead = env.all_dead().await;
    let found: BTreeSet<(String, String)> = dead
        .iter()
        .map(|d| {
            (
                d.id().to_string(),
                String::from_utf8(d.unit.payload().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found, poison,
        "the dead letter holds exactly the poison units, intact"
    );
    eprintln!(
        "crash run ({name}): {units} units, {kills} SIGKILLs, {applied_before_final} applied before the final consumer, \
         {} dead-letter entries for {} poison units, {:.1?} in all",
        dead.len(),
        poison.len(),
        started.elapsed()
    );
    env.cleanup().await;
}
