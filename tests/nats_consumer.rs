//! `examples/nats_consumer.rs` run as a child process against the real NATS JetStream and
//! PostgreSQL, SIGKILLed mid-effect many times over thousands of units. Fails, never skips, when a
//! server is unreachable. The test writes into a schema of its own.
#![cfg(feature = "nats")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/nats_orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;

use process::{Orders as _, order, terminate, wait_for};
use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use orders::Env;
use sqlx::{AssertSqlSafe, Row};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    // The default bound (5): no unit is expected to exhaust it under 12 kills, and one that does
    // (its fifth delivery dying with its consumer) is swept into the dead letter, not lost.
    crash_run("crash", 5, 3000, 12).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn units_stranded_by_sigkill_on_their_last_delivery_are_swept_into_the_dead_letter() {
    // One delivery per unit: every unit a kill catches unsettled is stranded on its last delivery,
    // and the next consumer's sweep moves it into the dead letter.
    let exhausted = crash_run("stranded", 1, 1500, 4).await;
    assert!(exhausted > 0, "the kills stranded units");
}

/// Publishes `units` orders (1 in 100 poison), SIGKILLs the example `kills` times mid-stream,
/// then lets a final consumer finish; checks that nothing is lost and returns how many valid
/// units were swept into the dead letter as exhausted.
async fn crash_run(name: &str, max_deliver: u32, units: usize, kills_wanted: u64) -> usize {
    // One crash run at a time: two at once on two cores slow each consumer down, and more of
    // the units it prefetched are caught by its kills.
    static ONE_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());
    let _one = ONE_AT_A_TIME.lock().await;
    const POISON_EVERY: usize = 100;
    let env = Env::new(name, max_deliver).await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut orders: BTreeMap<String, (String, i64)> = BTreeMap::new();
    // The valid units in publication order: message id, customer, order id.
    let mut published: Vec<(String, String, String)> = Vec::new();
    let mut poison = BTreeSet::new();
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
        orders.insert(format!("m-{i}"), (customer.clone(), amount));
        published.push((format!("m-{i}"), customer.clone(), format!("o-{i}")));
        env.publish(
            &format!("m-{i}"),
            &order(&format!("o-{i}"), &customer, amount),
        )
        .await;
    }
    let valid_units = (units - poison.len()) as i64;

    // SIGKILL the consumer at varying points, many times. Each handler pauses 40 ms between its
    // effect's commit and its acknowledgement (8 at once: about 200 units a second), so a kill
    // lands on units whose effect is committed and whose ack is not sent. Just before each kill
    // the test reads how far the consumer got: a kill counts as mid-stream when valid units are
    // still unapplied, and as mid-effect when deliveries are unsettled (JetStream's ack pending).
    let mut kills = 0;
    let mut kills_mid_stream = 0;
    let mut kills_mid_effect = 0;
    let mut ack_pending_at_kills = Vec::new();
    for round in 0..kills_wanted {
        let mut child = env.start(8, 40);
        tokio::time::sleep(Duration::from_millis(600 + (round * 137) % 700)).await;
        let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
        let (_, ack_pending) = env.consumer_backlog().await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
        if applied < valid_units {
            kills_mid_stream += 1;
        }
        if ack_pending > 0 {
            kills_mid_effect += 1;
        }
        ack_pending_at_kills.push(ack_pending);
    }
    let applied_before_final = env.scalar("SELECT count(*) FROM $schema.orders").await;
    eprintln!(
        "crash run ({name}): {kills} SIGKILLs, {kills_mid_stream} with valid units still unapplied, \
         {kills_mid_effect} with deliveries unsettled (ack pending at each kill: {ack_pending_at_kills:?}), \
         {applied_before_final} of {valid_units} applied before the final consumer"
    );
    assert!(
        kills_mid_stream >= kills_wanted - 2 && kills_mid_effect >= kills_wanted - 2,
        "the kills must land while the stream is consumed: {kills_mid_stream} mid-stream, \
         {kills_mid_effect} mid-effect of {kills}"
    );

    let mut child = env.start(16, 0);
    wait_for(
        "every valid order applied or swept, and the poison dead-lettered",
        Duration::from_secs(180),
        async || {
            let applied = env.scalar("SELECT count(*) FROM $schema.orders").await;
            let dead = env.dead_letters().count().await.unwrap() as i64;
            applied + dead >= valid_units + poison.len() as i64
                && env.consumer_backlog().await == (0, 0)
                && env.advisories_waiting().await == 0
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    // A valid unit whose fifth delivery died with its consumer is in the dead letter as
    // exhausted (its effect may or may not have been applied before the kill): its amount is
    // counted at most once. Every other valid unit is applied exactly once.
    let dead = dead_letters::all(&env.dead_letters()).await;
    // Valid units swept as exhausted (a poison unit caught by a kill on its last delivery is
    // swept as exhausted too, instead of being dead-lettered for its own reason).
    let exhausted: BTreeSet<String> = dead
        .iter()
        .filter(|d| d.reason == Some(delivery::disposition::ReasonKind::Exhausted))
        .filter(|d| orders.contains_key(d.id().as_str()))
        .map(|d| d.id().to_string())
        .collect();
    let applied: BTreeSet<String> = sqlx::query(AssertSqlSafe(format!(
        "SELECT order_id FROM {}.orders",
        env.schema
    )))
    .fetch_all(&env.db)
    .await
    .unwrap()
    .into_iter()
    .map(|r| r.get::<String, _>(0).replacen("o-", "m-", 1))
    .collect();
    let mut expected_applied: BTreeMap<String, i64> = BTreeMap::new();
    for (id, (customer, amount)) in &orders {
        assert!(
            applied.contains(id) || exhausted.contains(id),
            "{id} was neither applied nor dead-lettered as exhausted: lost"
        );
        if applied.contains(id) {
            *expected_applied.entry(customer.clone()).or_default() += amount;
        }
    }
    assert_eq!(
        env.balances().await,
        expected_applied,
        "every applied order's amount counted exactly once"
    );
    if exhausted.is_empty() {
        assert_eq!(expected_applied, expected, "every valid order applied");
    }
    // Each customer's latest order is its newest applied one, whatever order they arrived in
    // (rule 4: the stream sequence is the stamp).
    let latest: BTreeMap<String, String> = published
        .iter()
        .filter(|(id, _, _)| applied.contains(id))
        .map(|(_, customer, order)| (customer.clone(), order.clone()))
        .collect();
    assert_eq!(env.latest_orders().await, latest);
    assert!(
        dead.iter()
            .all(|d| d.id().as_str().starts_with("poison-") || exhausted.contains(d.id().as_str())),
        "only poison and exhausted units in the dead letter"
    );
    let found: BTreeSet<(String, String)> = dead
        .iter()
        .filter(|d| d.id().as_str().starts_with("poison-"))
        .map(|d| {
            (
                d.id().to_string(),
                String::from_utf8(d.unit.payload().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found, poison,
        "the dead letter holds every poison unit once, intact"
    );
    eprintln!(
        "crash run ({name}, max_deliver {max_deliver}): {units} units, {} applied, {} dead-letter \
         entries for {} poison units, {} valid units swept as exhausted",
        applied.len(),
        dead.len(),
        poison.len(),
        exhausted.len()
    );
    for d in dead.iter().filter(|d| exhausted.contains(d.id().as_str())) {
        let (customer, amount) = &orders[d.id().as_str()];
        let i = &d.id().as_str()[2..];
        assert_eq!(
            String::from_utf8(d.unit.payload().to_vec()).unwrap(),
            order(&format!("o-{i}"), customer, *amount),
            "{} swept intact",
            d.id()
        );
        assert_eq!(d.delivery_count().get(), max_deliver);
    }
    let exhausted = exhausted.len();
    env.cleanup().await;
    exhausted
}
