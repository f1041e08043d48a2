//! `examples/redis_consumer.rs` run as a child process against the real Redis: its contract (one
//! unit per call and in batches, `BATCH_SIZE`), and SIGKILL mid-effect many times over thousands
//! of units. Fails, never skips, when Redis is
//! unreachable. Each test uses streams and hashes of its own (`redis-<name>-<pid>`).
#![cfg(feature = "redis")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/redis_orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;

use orders::{Env, by_id};
use process::{order, terminate, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::{UnitId, disposition::ReasonKind};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_applies_orders_once_and_dead_letters_poison() {
    contract("contract", 1).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_in_batches_applies_orders_once_and_dead_letters_poison() {
    contract("contract-batched", 50).await;
}

/// The example's contract, its handler taking `batch_size` units per call: each order applied
/// once, each poison unit dead-lettered alone, intact.
async fn contract(name: &str, batch_size: usize) {
    let mut env = Env::new(name, 5).await;
    env.batch_size = batch_size;
    let mut child = env.start(8, "contract", 0);
    env.publish("m-1", &order("o-1", "c-1", 100)).await;
    env.publish("m-2", &order("o-2", "c-1", 50)).await;
    env.publish("m-1", &order("o-1", "c-1", 100)).await; // the same unit again
    env.publish("m-3", &order("o-3", "c-2", 7)).await;
    env.publish("bad-json", "{not json").await;
    env.publish("missing-field", r#"{"order_id":"o-9","customer_id":"c-9"}"#)
        .await;
    env.publish("negative", &order("o-neg", "c-3", -5)).await;
    // An entry in no layout at all: no `payload`, no `id`.
    let mut redis = env.redis.clone();
    let raw_id: String = redis::cmd("XADD")
        .arg(&env.stream)
        .arg("*")
        .arg("order_id")
        .arg("o-raw")
        .arg("blob")
        .arg(&[0xffu8, 0x00, 0x7f][..])
        .query_async(&mut redis)
        .await
        .unwrap();

    wait_for(
        "3 orders and 4 dead letters",
        Duration::from_secs(60),
        async || env.hlen("orders").await == 3 && env.dead_letters().count().await.unwrap() == 4,
    )
    .await;
    assert_eq!(
        env.balances().await,
        BTreeMap::from([("c-1".into(), 150), ("c-2".into(), 7)])
    );
    let dead = env.all_dead().await;
    let dead = by_id(&dead);
    let bad = dead["bad-json"];
    assert_eq!(bad.reason, Some(ReasonKind::Malformed));
    assert_eq!(bad.unit.payload().as_ref(), b"{not json", "intact");
    assert_eq!(bad.delivery_count().get(), 1, "dead-lettered directly");
    assert_eq!(bad.source, env.stream);
    assert!(bad.dead_lettered_at.is_some());
    assert_eq!(dead["missing-field"].reason, Some(ReasonKind::Malformed));
    assert_eq!(dead["negative"].reason, Some(ReasonKind::Rejected));
    assert_eq!(dead["negative"].delivery_count().get(), 1);
    assert!(dead["negative"].detail.contains("negative amount"));
    // The entry with no `id` field is known by the entry id it had in the stream.
    let raw = dead[raw_id.as_str()];
    assert_eq!(raw.reason, Some(ReasonKind::Malformed));
    assert_eq!(
        env.dead_letters()
            .peek(&UnitId::new(raw_id.as_str()))
            .await
            .unwrap()
            .as_ref(),
        Some(raw)
    );
    assert_eq!(raw.unit.headers().get_str("order_id"), Some("o-raw"));
    assert_eq!(
        raw.unit.headers().get("blob").map(|b| b.as_ref()),
        Some(&[0xff, 0x00, 0x7f][..])
    );
    assert_eq!(
        &env.dead_letter_fields(&raw.position).await[..2],
        &[
            (b"order_id".to_vec(), b"o-raw".to_vec()),
            (b"blob".to_vec(), vec![0xff, 0x00, 0x7f])
        ],
        "every field kept, in order, byte for byte"
    );
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
    assert_eq!(env.group_state().await, (0, true), "nothing left pending");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    const UNITS: usize = 3000;
    const POISON_EVERY: usize = 100;
    let env = Env::new("crash", 5).await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    for i in 0..UNITS {
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
        env.publish(
            &format!("m-{i}"),
            &order(&format!("o-{i}"), &customer, amount),
        )
        .await;
    }
    let valid_units = (UNITS - poison.len()) as u64;

    // Kill the consumer with SIGKILL at varying points, many times. Each handler pauses 40 ms
    // between its effect and its acknowledgement (8 at once: about 200 units a second), so the
    // kills land while the stream is being consumed, on units mid-way.
    let mut kills = 0;
    for round in 0..12u64 {
        let mut child = env.start(8, &format!("crash-{round}"), 40);
        tokio::time::sleep(Duration::from_millis(400 + (round * 137) % 700)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let applied_before_final = env.hlen("orders").await;
    let pending_after_kills = env.group_state().await.0;

    let mut child = env.start(16, "final", 0);
    wait_for(
        "every valid order applied and the poison dead-lettered",
        Duration::from_secs(180),
        async || {
            env.hlen("orders").await == valid_units
                && env.dead_letters().count().await.unwrap() >= poison.len() as u64
                && env.group_state().await == (0, true)
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
    assert_eq!(env.hlen("orders").await, valid_units);
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
    for d in &dead {
        assert!(
            matches!(d.reason, Some(ReasonKind::Malformed | ReasonKind::Rejected)),
            "{d:?}"
        );
        assert_eq!(d.source, env.stream);
    }
    eprintln!(
        "crash run: {UNITS} units, {kills} SIGKILLs, {applied_before_final} applied and \
         {pending_after_kills} pending before the final consumer, {} dead-letter entries for {} \
         poison units",
        dead.len(),
        poison.len()
    );
    env.cleanup().await;
}
