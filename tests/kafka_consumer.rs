//! `examples/kafka_consumer.rs` run as a child process against a real Kafka-protocol broker (tansu
//! on 127.0.0.1:9092, or `KAFKA_BROKERS`) and PostgreSQL, SIGKILLed mid-effect many times over
//! thousands of units across several partitions. Fails, never skips, when a server is unreachable.
//! The test writes into a schema of its own.
#![cfg(feature = "kafka")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/kafka.rs"]
mod kafka_support;
#[path = "support/process.rs"]
mod process;

#[path = "support/kafka_orders.rs"]
mod orders;

use kafka_support::{brokers, headers_at};
use orders::{Env, PARTITIONS, SESSION_TIMEOUT_MS};
use process::{Orders as _, order, terminate, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use delivery::dead_letter::DeadLetters;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    const UNITS: usize = 3000;
    const KILLS: u64 = 10;
    const POISON_EVERY: usize = 100;
    let env = Env::at(&brokers(), "crash").await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    // Each customer's last order in publication order: the latest the store must end with.
    let mut latest: BTreeMap<String, String> = BTreeMap::new();
    let mut units = Vec::with_capacity(UNITS);
    for i in 0..UNITS {
        if i % POISON_EVERY == 50 {
            let id = format!("poison-{i}");
            let body = if i % 200 == 50 {
                "{oops".to_owned()
            } else {
                order(&format!("o-{i}"), "c-x", -1)
            };
            poison.insert((id.clone(), body.clone()));
            units.push((id, body));
            continue;
        }
        let customer = format!("c-{}", i % 37);
        let amount = (i % 100 + 1) as i64;
        *expected.entry(customer.clone()).or_default() += amount;
        latest.insert(customer.clone(), format!("o-{i}"));
        units.push((
            format!("m-{i}"),
            order(&format!("o-{i}"), &customer, amount),
        ));
    }
    env.publish_all(&units).await;
    let valid_units = (UNITS - poison.len()) as i64;

    // SIGKILL the consumer at varying points, many times. Each handler pauses 40 ms between its
    // effect's commit and its return (8 at once), so a kill lands on units whose effect is
    // committed and whose offset is not. A kill counts as mid-stream when it found more applied
    // than the previous one (the consumer was working) and valid units still unapplied.
    let mut kills = 0;
    let mut kills_mid_stream = 0;
    let mut applied_at_kills = Vec::new();
    let mut last_applied = 0;
    for round in 0..KILLS {
        let mut child = env.start(8, 40);
        // Joining the group takes a moment; wait until this consumer applies something.
        let before = last_applied;
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        loop {
            let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
            if applied > before || applied >= valid_units || tokio::time::Instant::now() > deadline
            {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        tokio::time::sleep(Duration::from_millis(300 + (round * 137) % 700)).await;
        let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        tokio::time::sleep(Duration::from_millis(SESSION_TIMEOUT_MS + 500)).await;
        kills += 1;
        if applied > before && applied < valid_units {
            kills_mid_stream += 1;
        }
        applied_at_kills.push(applied);
        last_applied = applied;
    }
    eprintln!(
        "crash run: {kills} SIGKILLs, {kills_mid_stream} mid-stream; applied at each kill: {applied_at_kills:?}"
    );
    assert!(
        kills_mid_stream >= KILLS - 2,
        "the kills must land while the topic is consumed: {kills_mid_stream} of {kills} mid-stream"
    );

    let mut child = env.start(16, 0);
    wait_for(
        "every valid order applied and every poison unit dead-lettered",
        Duration::from_secs(240),
        async || {
            let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
            if applied < valid_units {
                return false;
            }
            let dead: BTreeSet<String> = dead_letters::all(&env.dead_letters())
                .await
                .into_iter()
                .map(|d| d.id().to_string())
                .collect();
            dead.len() >= poison.len()
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    assert_eq!(
        env.scalar("SELECT count(*) FROM $schema.orders").await,
        valid_units,
        "every valid order applied, once"
    );
    assert_eq!(
        env.balances().await,
        expected,
        "every order's amount counted exactly once"
    );
    assert_eq!(
        env.latest_orders().await,
        latest,
        "each customer's latest order is its newest, whatever order they arrived in"
    );
    let dead = dead_letters::all(&env.dead_letters()).await;
    // A kill between a dead-letter publish and the offset's commit leaves a second copy of the
    // same unit: a duplicate in the dead letter, never a loss.
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
    let dead_letter_topic = env.topology.dead_letter_topic_name();
    let mut partitions = BTreeSet::new();
    for d in &dead {
        assert_eq!(d.source, env.topic, "{}", d.id());
        assert!(
            d.unit.stamp().is_some(),
            "the source offset recorded: {}",
            d.id()
        );
        assert!(
            d.dead_lettered_at.is_some(),
            "the record's timestamp: {}",
            d.id()
        );
        let (partition, offset) = d.position.split_once(':').expect("<partition>:<offset>");
        let source_partition = headers_at(
            &dead_letter_topic,
            partition.parse().unwrap(),
            offset.parse().unwrap(),
        )
        .await
        .into_iter()
        .find(|(name, _)| name == delivery::headers::DEAD_LETTER_SOURCE_PARTITION)
        .and_then(|(_, p)| p.parse::<i32>().ok())
        .expect("the source partition recorded");
        assert!((0..PARTITIONS).contains(&source_partition), "{}", d.id());
        partitions.insert(source_partition);
        let expected_reason = if d.unit.payload().starts_with(b"{oops") {
            delivery::disposition::ReasonKind::Malformed
        } else {
            delivery::disposition::ReasonKind::Rejected
        };
        assert_eq!(d.reason, Some(expected_reason), "{}", d.id());
    }
    let depth = env.dead_letters().count().await.unwrap();
    assert!(
        depth >= 1 && depth <= dead.len() as u64,
        "the dead letter's depth ({depth}) counts its entries ({})",
        dead.len()
    );
    assert!(
        partitions.len() > 1,
        "poison came from several partitions: {partitions:?}"
    );
    eprintln!(
        "crash run: {UNITS} units over {PARTITIONS} partitions, {valid_units} applied once, {} dead-letter entries (depth {depth}) for {} poison units",
        dead.len(),
        poison.len()
    );
    env.cleanup().await;
}
