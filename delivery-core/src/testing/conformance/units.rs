//! The checks of a unit handler, each on a queue of its own.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::fixture::{Fixture, WebConsole};
use super::support::{
    PATIENCE, Script, Store, dead_letters, queue, script, until, wait_dead_letters,
};
use crate::consumer::Consumer;
use crate::dead_letter::{AnyDeadLetters, DeadLetters, Selection};
use crate::disposition::{Backoff, Outcome, ReasonKind};
use crate::handler::Handler;
use crate::unit::{Headers, Stamp, Unit, UnitId};

/// The suite's handler: applies `key = value` idempotently, failing or hanging as scripted.
#[derive(Clone, Copy)]
struct Scripted;

impl Handler<Store> for Scripted {
    fn call(&self, unit: &Unit, store: &Store) -> impl Future<Output = Outcome> + Send + 'static {
        let script = crate::extract::decode_json::<Script>(unit.payload());
        let unit = unit.clone();
        let count = unit.delivery_count().get();
        let stamp = unit.stamp();
        let store = store.clone();
        async move {
            let script = match script {
                Ok(script) => script,
                Err(malformed) => return Outcome::Malformed(malformed.to_string()),
            };
            store.runs.lock().unwrap().push((script.key.clone(), count));
            let handed = unit.clone();
            store
                .units
                .lock()
                .unwrap()
                .insert(script.key.clone(), handed);
            if script.guarded {
                let seen = (script.key.clone(), stamp);
                store.stamps_seen.lock().unwrap().push(seen);
            }
            if script.reject {
                return Outcome::Rejected(format!("{} refused", script.key));
            }
            if script.hang {
                std::future::pending::<()>().await;
            }
            if count == script.hang_once_on && count > 0 {
                let first = {
                    let mut hung = store.hung.lock().unwrap();
                    let first = !hung.contains(&script.key);
                    hung.push(script.key.clone());
                    first
                };
                if first {
                    std::future::pending::<()>().await;
                }
            }
            if script.sleep_ms > 0 {
                tokio::time::sleep(Duration::from_millis(script.sleep_ms)).await;
            }
            if count < script.fail_until {
                return Outcome::Failed(format!("{} failed on delivery {count}", script.key));
            }
            if script.guarded {
                let Some(stamp) = stamp else {
                    return Outcome::Malformed(format!("{} carries no stamp", script.key));
                };
                let mut stamps = store.stamps.lock().unwrap();
                if stamps
                    .get(&script.key)
                    .is_some_and(|stored| *stored >= stamp)
                {
                    // The store holds this unit's state or a newer one: handled, nothing written.
                    return Outcome::Applied;
                }
                stamps.insert(script.key.clone(), stamp);
            }
            {
                let mut rows = store.rows.lock().unwrap();
                if rows.get(&script.key) != Some(&script.value) {
                    rows.insert(script.key.clone(), script.value);
                    store.writes.lock().unwrap().push(script.key.clone());
                }
            }
            if count < script.hang_after_effect_until {
                std::future::pending::<()>().await;
            }
            Outcome::Applied
        }
    }
}

/// Runs a consumer of `name` until `done` holds, failing the check after [`PATIENCE`].
async fn consume_until<F: Fixture>(
    fixture: &F,
    name: &str,
    store: &Store,
    max_deliveries: u32,
    check: &str,
    done: impl Fn(&Store) -> bool + Send + Sync + 'static,
) {
    let source = fixture.consume(name).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let watcher = {
        let (store, stop) = (store.clone(), stop.clone());
        tokio::spawn(async move {
            let deadline = tokio::time::Instant::now() + PATIENCE;
            let held = loop {
                if done(&store) {
                    break true;
                }
                if tokio::time::Instant::now() > deadline {
                    break false;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            };
            stop.notify_one();
            held
        })
    };
    Consumer::new(source)
        .state(store.clone())
        .concurrency(4)
        .max_deliveries(max_deliveries)
        .backoff(Backoff::exponential(
            Duration::from_millis(10),
            Duration::from_millis(50),
        ))
        .drain_deadline(Duration::from_secs(5))
        .shutdown_on(async move { stop.notified().await })
        .run(Scripted)
        .await;
    let held = watcher.await.unwrap_or(false);
    assert!(
        held,
        "conformance `{check}`: the condition never held within {PATIENCE:?}; runs: {:?}",
        store.runs()
    );
}

/// A consumer of `name`, one unit at a time, with no shutdown signal: the check crashes it by
/// dropping its task (with its source and handles).
async fn crashable<F: Fixture>(
    fixture: &F,
    name: &str,
    store: &Store,
    max_deliveries: u32,
) -> tokio::task::JoinHandle<crate::consumer::Report> {
    let source = fixture.consume(name).await;
    tokio::spawn(
        Consumer::new(source)
            .state(store.clone())
            .concurrency(1)
            .max_deliveries(max_deliveries)
            .run(Scripted),
    )
}

/// A consumer of `name` in a task, ordered by key ([`Consumer::order_by`]: a unit's key is its
/// id up to `/`), at concurrency 16 (every unit of a check is received at once, into its lane),
/// with a drain deadline of 5 s; it stops when `stop` is notified.
async fn ordered<F: Fixture>(
    fixture: &F,
    name: &str,
    store: &Store,
    max_deliveries: u32,
    stop: &Arc<tokio::sync::Notify>,
) -> tokio::task::JoinHandle<crate::consumer::Report> {
    let source = fixture.consume(name).await;
    let stop = stop.clone();
    tokio::spawn(
        Consumer::new(source)
            .state(store.clone())
            .concurrency(16)
            .max_deliveries(max_deliveries)
            .order_by(|unit: &Unit| {
                unit.id()
                    .as_str()
                    .split_once('/')
                    .map(|(key, _)| key.to_owned())
            })
            .drain_deadline(Duration::from_secs(5))
            .shutdown_on(async move { stop.notified().await })
            .run(Scripted),
    )
}

/// A unit of `lane` (its id `lane/n`) writing `key = value`, taking `sleep_ms`.
fn in_lane(lane: &str, n: u32, key: &str, value: i64, sleep_ms: u64) -> Unit {
    Unit::new(
        format!("{lane}/{n}"),
        format!(r#"{{"key":"{key}","value":{value},"sleep_ms":{sleep_ms}}}"#),
    )
}

/// Rule 1: a unit whose handler succeeds is acknowledged, once, after its effect; it is not
/// delivered again.
pub async fn acks_after_the_effect<F: Fixture>(fixture: &F) {
    let name = queue("ack");
    fixture.declare(&name, 5).await;
    for i in 0..20 {
        fixture
            .publish(
                &name,
                Unit::new(format!("ack-{i}"), script(&format!("k{i}"), i)),
            )
            .await;
    }
    let store = Store::default();
    consume_until(fixture, &name, &store, 5, "acks_after_the_effect", |s| {
        s.rows().len() == 20
    })
    .await;
    // A fresh consumer, given longer than the mechanism's redelivery timer (half a second where
    // it has none), finds nothing to redeliver: a unit not acknowledged would come back.
    let quiet = fixture
        .redelivery_timer()
        .map_or(Duration::from_millis(500), |timer| {
            (timer * 2).max(Duration::from_millis(500))
        });
    let started = tokio::time::Instant::now();
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "acks_after_the_effect (nothing redelivered)",
        move |_| started.elapsed() > quiet,
    )
    .await;
    assert_eq!(
        store.runs().len(),
        20,
        "conformance `acks_after_the_effect`: an acknowledged unit came back: {:?}",
        store.runs()
    );
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rule 1: a failed unit is returned and delivered again, with the mechanism's count growing,
/// then applied.
pub async fn returns_a_failed_unit<F: Fixture>(fixture: &F) {
    let name = queue("return");
    fixture.declare(&name, 5).await;
    fixture
        .publish(
            &name,
            Unit::new("ret-1", r#"{"key":"r","value":7,"fail_until":3}"#),
        )
        .await;
    let store = Store::default();
    consume_until(fixture, &name, &store, 5, "returns_a_failed_unit", |s| {
        s.rows().contains_key("r")
    })
    .await;
    assert_eq!(
        store.runs_of("r"),
        [1, 2, 3],
        "conformance `returns_a_failed_unit`: delivery counts"
    );
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rule 2: a unit that always fails is delivered exactly the bound's number of times, counted by
/// the mechanism across consumer restarts, then dead-lettered intact as exhausted.
pub async fn bounds_redelivery_by_the_mechanisms_count<F: Fixture>(fixture: &F) {
    let name = queue("bound");
    fixture.declare(&name, 3).await;
    let payload = r#"{"key":"b","value":1,"fail_until":1000}"#;
    fixture.publish(&name, Unit::new("bound-1", payload)).await;
    let store = Store::default();
    // The first consumer sees one failed delivery and stops (a restart)...
    consume_until(fixture, &name, &store, 3, "bound (first consumer)", |s| {
        !s.runs().is_empty()
    })
    .await;
    // ...the next continues the mechanism's count up to the bound.
    consume_until(
        fixture,
        &name,
        &store,
        3,
        "bounds_redelivery_by_the_mechanisms_count",
        |s| s.runs().len() >= 3,
    )
    .await;
    let dead = wait_dead_letters(fixture, &name, 1).await;
    assert_eq!(
        store.runs_of("b"),
        [1, 2, 3],
        "conformance `bounds_redelivery`: counts seen by handlers"
    );
    assert_eq!(dead[0].id, "bound-1");
    assert_eq!(
        dead[0].payload.as_ref(),
        payload.as_bytes(),
        "dead letter intact"
    );
    assert_eq!(dead[0].reason, ReasonKind::Exhausted);
    assert_eq!(dead[0].delivery_count, 3);
}

/// Rule 2: malformed and rejected units go to the dead letter on their first delivery, payload
/// and headers intact, never through redeliveries.
pub async fn dead_letters_poison_directly_and_intact<F: Fixture>(fixture: &F) {
    let name = queue("poison");
    fixture.declare(&name, 5).await;
    let headers = Headers::from_pairs([("tenant", "acme"), ("trace", "t-1")]);
    let malformed: &[u8] = &[0xff, b'{', b'"', 0x00];
    fixture
        .publish(
            &name,
            Unit::new("poison-bytes", malformed.to_vec()).with_headers(headers.clone()),
        )
        .await;
    fixture
        .publish(&name, Unit::new("poison-json", r#"{"key": 1}"#))
        .await;
    fixture
        .publish(
            &name,
            Unit::new("refused", r#"{"key":"x","value":1,"reject":true}"#),
        )
        .await;
    fixture
        .publish(&name, Unit::new("fine", script("ok", 1)))
        .await;
    let store = Store::default();
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "dead_letters_poison_directly_and_intact",
        |s| s.rows().contains_key("ok"),
    )
    .await;
    let dead = wait_dead_letters(fixture, &name, 3).await;
    let find = |id: &str| {
        dead.iter()
            .find(|d| d.id == id)
            .unwrap_or_else(|| panic!("{id} not in the dead letter: {dead:?}"))
    };
    let bytes = find("poison-bytes");
    assert_eq!(
        bytes.payload.as_ref(),
        malformed,
        "payload intact, byte for byte"
    );
    assert_eq!(bytes.reason, ReasonKind::Malformed);
    assert_eq!(bytes.delivery_count, 1, "never redelivered");
    for (name, value) in headers.iter() {
        assert_eq!(bytes.headers.get(name), Some(value), "header {name} intact");
    }
    assert_eq!(find("poison-json").reason, ReasonKind::Malformed);
    assert_eq!(find("refused").reason, ReasonKind::Rejected);
    assert_eq!(find("refused").delivery_count, 1);
    assert_eq!(
        store.runs_of("x"),
        [1],
        "a rejected unit is not redelivered"
    );
}

/// Rule 3: the same unit delivered twice is applied once.
pub async fn a_second_delivery_changes_nothing<F: Fixture>(fixture: &F) {
    let name = queue("twice");
    fixture.declare(&name, 5).await;
    for _ in 0..2 {
        fixture
            .publish(&name, Unit::new("twice-1", script("t", 42)))
            .await;
    }
    let store = Store::default();
    let runs = if fixture.deduplicates_publishes() {
        1
    } else {
        2
    };
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "a_second_delivery_changes_nothing",
        move |s| s.runs_of("t").len() == runs,
    )
    .await;
    assert_eq!(store.rows().get("t"), Some(&42));
    assert_eq!(store.writes(), ["t"], "the second delivery wrote nothing");
}

/// Rules 1 and 3: a consumer that dies after the effect and before the acknowledgement loses
/// nothing: the mechanism delivers the unit again, and the idempotent handler changes nothing.
pub async fn a_crash_between_effect_and_ack_loses_nothing<F: Fixture>(fixture: &F) {
    let name = queue("crash");
    fixture.declare(&name, 5).await;
    fixture
        .publish(
            &name,
            Unit::new(
                "crash-1",
                r#"{"key":"c","value":9,"hang_after_effect_until":2}"#,
            ),
        )
        .await;
    let store = Store::default();
    // The first consumer applies the effect, then hangs before acknowledging; it is killed (its
    // task dropped with its source and handles) once the effect is there.
    let crashed = crashable(fixture, &name, &store, 5).await;
    until(
        "a_crash_between_effect_and_ack_loses_nothing",
        &store,
        |s| s.rows().contains_key("c"),
    )
    .await;
    crashed.abort();
    let _ = crashed.await;
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "a_crash_between_effect_and_ack_loses_nothing",
        |s| s.runs_of("c").len() >= 2,
    )
    .await;
    let expected: &[u32] = if fixture.counts_crashed_deliveries() {
        &[1, 2]
    } else {
        &[1, 1]
    };
    assert_eq!(
        store.runs_of("c"),
        expected,
        "redelivered with the mechanism's count"
    );
    assert_eq!(store.writes(), ["c"], "the redelivery changed nothing");
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rule 2, the operator's side: the dead letter is read, peeked, purged and redriven through
/// [`DeadLetters`], the same on every transport. A redriven unit comes back under its own id with
/// its own payload and headers, and is applied.
pub async fn operates_the_dead_letter<F: Fixture>(fixture: &F) {
    let name = queue("operate");
    fixture.declare(&name, 5).await;
    let headers = Headers::from_pairs([("tenant", "acme")]);
    for id in ["op-1", "op-2", "op-3"] {
        let unit = Unit::new(id, format!(r#"{{"key":"{id}","value":7,"reject":true}}"#))
            .with_headers(headers.clone());
        fixture.publish(&name, unit).await;
    }
    let store = Store::default();
    consume_until(fixture, &name, &store, 5, "operates_the_dead_letter", |s| {
        s.runs().len() >= 3
    })
    .await;
    wait_dead_letters(fixture, &name, 3).await;
    let view = fixture.dead_letter(&name).await;
    let fail = |what: &str, e: crate::transport_error::TransportError| -> ! {
        panic!("conformance `operates_the_dead_letter`: {what}: {e}")
    };
    assert_eq!(view.count().await.unwrap_or_else(|e| fail("count", e)), 3);

    let first = view.list(2, None).await.unwrap_or_else(|e| fail("list", e));
    assert_eq!(first.records.len(), 2, "a page of two");
    let next = first.next.clone().expect("a third record follows");
    let second = view
        .list(2, Some(&next))
        .await
        .unwrap_or_else(|e| fail("list after a cursor", e));
    let mut ids: Vec<String> = first
        .records
        .iter()
        .chain(&second.records)
        .map(|d| d.unit.id().to_string())
        .collect();
    ids.sort();
    assert_eq!(
        ids,
        ["op-1", "op-2", "op-3"],
        "the pages hold each unit once"
    );
    assert!(second.next.is_none(), "no page after the last");

    let peeked = view
        .peek(&UnitId::new("op-2"))
        .await
        .unwrap_or_else(|e| fail("peek", e))
        .expect("op-2 is in the dead letter");
    assert_eq!(peeked.unit.id().as_str(), "op-2");
    assert_eq!(
        peeked.unit.payload().as_ref(),
        br#"{"key":"op-2","value":7,"reject":true}"#
    );
    assert_eq!(
        peeked.unit.headers().get("tenant").map(|v| v.as_ref()),
        Some(&b"acme"[..]),
        "own headers intact"
    );
    assert!(
        peeked
            .unit
            .headers()
            .iter()
            .all(|(n, _)| !crate::headers::is_dead_letter(n)),
        "the record's headers are the unit's own: {:?}",
        peeked.unit.headers()
    );
    assert_eq!(peeked.reason, Some(ReasonKind::Rejected));
    assert!(
        peeked.detail.contains("op-2 refused"),
        "detail: {}",
        peeked.detail
    );
    assert!(
        peeked.source.contains(&name),
        "source {} names {name}",
        peeked.source
    );
    assert_eq!(peeked.unit.delivery_count().get(), 1);
    assert!(
        view.peek(&UnitId::new("op-none"))
            .await
            .unwrap_or_else(|e| fail("peek", e))
            .is_none()
    );

    let purged = view
        .purge(&[UnitId::new("op-1")])
        .await
        .unwrap_or_else(|e| fail("purge", e));
    assert_eq!(purged, 1);
    assert_eq!(view.count().await.unwrap_or_else(|e| fail("count", e)), 2);

    let report = view
        .redrive(Selection::Ids(&[
            UnitId::new("op-2"),
            UnitId::new("op-none"),
        ]))
        .await
        .unwrap_or_else(|e| fail("redrive", e));
    assert_eq!(report.redriven, [UnitId::new("op-2")]);
    assert_eq!(report.not_found, [UnitId::new("op-none")]);
    let left = dead_letters(fixture, &name).await;
    assert_eq!(left.len(), 1, "op-3 stays: {left:?}");
    assert_eq!(left[0].id, "op-3");

    // Redriven, op-2 is delivered again under its own id (the scripted handler refuses it once
    // more, so it comes back to the dead letter: counted afresh, headers intact).
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "operates_the_dead_letter (redrive)",
        |s| s.runs_of("op-2").len() >= 2,
    )
    .await;
    let back = wait_dead_letters(fixture, &name, 2).await;
    let op2 = back
        .iter()
        .find(|d| d.id == "op-2")
        .expect("op-2 dead-lettered again");
    assert_eq!(op2.delivery_count, 1, "a redrive counts deliveries afresh");
    assert_eq!(
        op2.headers.get("tenant").map(|v| v.as_ref()),
        Some(&b"acme"[..])
    );

    let report = view
        .redrive(Selection::All)
        .await
        .unwrap_or_else(|e| fail("redrive all", e));
    let mut redriven: Vec<String> = report.redriven.iter().map(ToString::to_string).collect();
    redriven.sort();
    assert_eq!(redriven, ["op-2", "op-3"]);
    assert!(report.not_found.is_empty());
    assert_eq!(view.count().await.unwrap_or_else(|e| fail("count", e)), 0);
}

/// Rule 2, the operator's fix: a unit redriven with an edited payload
/// ([`DeadLetters::redrive_edited`]) is delivered under its own id with the operator's payload, its
/// own headers, and the edit recorded in two headers (the digest of the payload replaced); it
/// leaves the dead letter. An id the dead letter does not hold answers `false` and changes
/// nothing. Operated through an [`AnyDeadLetters`].
pub async fn redrives_an_edited_unit<F: Fixture>(fixture: &F) {
    let name = queue("edit");
    fixture.declare(&name, 5).await;
    let original = r#"{"key":"ed-1","value":7,"reject":true}"#;
    let unit = Unit::new("ed-1", original).with_headers(Headers::from_pairs([("tenant", "acme")]));
    fixture.publish(&name, unit).await;
    let store = Store::default();
    consume_until(fixture, &name, &store, 5, "redrives_an_edited_unit", |s| {
        s.runs_of("ed-1").len() == 1
    })
    .await;
    wait_dead_letters(fixture, &name, 1).await;
    // Through the type-erased handle an operator's tool holds, so it is held to the check too.
    let view = AnyDeadLetters::new(fixture.dead_letter(&name).await);
    let fail = |what: &str, e: crate::transport_error::TransportError| -> ! {
        panic!("conformance `redrives_an_edited_unit`: {what}: {e}")
    };

    let unknown = view
        .redrive_edited(&UnitId::new("ed-none"), Bytes::from_static(b"{}"))
        .await
        .unwrap_or_else(|e| fail("redrive_edited of an unknown id", e));
    assert!(!unknown, "no dead letter with that id");
    let left = dead_letters(fixture, &name).await;
    assert_eq!(left.len(), 1, "nothing changed: {left:?}");
    assert_eq!(left[0].payload.as_ref(), original.as_bytes());

    let fixed = Bytes::from_static(br#"{"key":"ed-1","value":8}"#);
    let done = view
        .redrive_edited(&UnitId::new("ed-1"), fixed.clone())
        .await
        .unwrap_or_else(|e| fail("redrive_edited", e));
    assert!(done, "ed-1 was in the dead letter");
    assert_eq!(view.count().await.unwrap_or_else(|e| fail("count", e)), 0);
    assert!(
        view.peek(&UnitId::new("ed-1"))
            .await
            .unwrap_or_else(|e| fail("peek", e))
            .is_none(),
        "the dead letter no longer holds ed-1"
    );

    consume_until(
        fixture,
        &name,
        &store,
        5,
        "redrives_an_edited_unit (delivered)",
        |s| s.rows().get("ed-1") == Some(&8),
    )
    .await;
    let delivered = store
        .unit_of("ed-1")
        .expect("ed-1 was handed to the handler");
    assert_eq!(delivered.id().as_str(), "ed-1", "under its own id");
    assert_eq!(delivered.payload(), &fixed, "the operator's payload");
    assert_eq!(delivered.delivery_count().get(), 1, "counted afresh");
    let header = |name: &str| delivered.headers().get_str(name).map(str::to_owned);
    assert_eq!(
        header("tenant").as_deref(),
        Some("acme"),
        "own headers kept"
    );
    assert_eq!(
        header(crate::headers::EDITED).as_deref(),
        Some("true"),
        "the edit is recorded: {:?}",
        delivered.headers()
    );
    use sha2::Digest as _;
    let digest = hex::encode(sha2::Sha256::digest(original.as_bytes()));
    assert_eq!(
        header(crate::headers::ORIGINAL_SHA256),
        Some(digest),
        "the digest of the payload replaced"
    );
    assert!(
        delivered
            .headers()
            .iter()
            .all(|(n, _)| !crate::headers::is_dead_letter(n)),
        "no dead-letter headers: {:?}",
        delivered.headers()
    );
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rules 1 and 3: a handler slower than the mechanism's redelivery timer (three times as slow)
/// runs once: while it runs, the unit is not handed to another consumer (two consume the queue
/// here), nor dead-lettered; it is acknowledged once, and not delivered again after.
pub async fn a_slow_handler_runs_once<F: Fixture>(fixture: &F) {
    let Some(timer) = fixture.redelivery_timer() else {
        return;
    };
    let name = queue("slow");
    fixture.declare(&name, 2).await;
    let slow_ms = u64::try_from((timer * 3).as_millis()).unwrap_or(u64::MAX);
    fixture
        .publish(
            &name,
            Unit::new(
                "slow-1",
                format!(r#"{{"key":"s","value":3,"sleep_ms":{slow_ms}}}"#),
            ),
        )
        .await;
    let store = Store::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let mut consumers = Vec::new();
    for _ in 0..2 {
        let source = fixture.consume(&name).await;
        let (store, stop) = (store.clone(), stop.clone());
        consumers.push(tokio::spawn(async move {
            Consumer::new(source)
                .state(store)
                .concurrency(2)
                .max_deliveries(2)
                .drain_deadline(Duration::from_secs(5))
                .shutdown_on(async move { stop.notified().await })
                .run(Scripted)
                .await
        }));
    }
    until("a_slow_handler_runs_once", &store, |s| {
        s.rows().contains_key("s")
    })
    .await;
    // Longer than the timer again: a unit not acknowledged would be delivered meanwhile.
    tokio::time::sleep(timer * 2).await;
    stop.notify_waiters();
    let mut acked = 0;
    for consumer in consumers {
        acked += consumer.await.expect("the consumer ran").acked;
    }
    assert_eq!(
        store.runs_of("s"),
        [1],
        "conformance `a_slow_handler_runs_once`: handed to a second run while the first ran"
    );
    assert_eq!(acked, 1, "acknowledged once");
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rule 2: a unit whose handling kills its consumer on every delivery (here: the consumer's task
/// dropped, with its source and handles, while the handler runs) reaches the dead letter within
/// the bound — the mechanism counts each delivery before the handler runs — and consumers then
/// make progress past it. Applies where the mechanism counts a delivery cut short by a crash
/// ([`Fixture::counts_crashed_deliveries`]).
pub async fn a_crash_loop_reaches_the_dead_letter<F: Fixture>(fixture: &F) {
    if !fixture.counts_crashed_deliveries() {
        return;
    }
    let name = queue("crash-loop");
    fixture.declare(&name, 3).await;
    let payload = r#"{"key":"d","value":1,"hang":true}"#;
    fixture.publish(&name, Unit::new("doom-1", payload)).await;
    let store = Store::default();
    for crash in 1..=3 {
        let running = crashable(fixture, &name, &store, 3).await;
        until("a_crash_loop_reaches_the_dead_letter", &store, |s| {
            s.runs_of("d").len() >= crash
        })
        .await;
        running.abort();
        let _ = running.await;
    }
    // The next consumer finds the unit past the bound (or the mechanism, which delivers no
    // more, reports it stranded on its last delivery): dead-lettered without running, and the
    // consumer goes on with the next unit.
    fixture
        .publish(&name, Unit::new("after-1", script("a", 2)))
        .await;
    let source = fixture.consume(&name).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = tokio::spawn({
        let (store, stop) = (store.clone(), stop.clone());
        Consumer::new(source)
            .state(store)
            .max_deliveries(3)
            .shutdown_on(async move { stop.notified().await })
            .run(Scripted)
    });
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let dead = loop {
        let dead = dead_letters(fixture, &name).await;
        if store.rows().contains_key("a") && !dead.is_empty() {
            break dead;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "conformance `a_crash_loop_reaches_the_dead_letter`: not dead-lettered, or no progress; runs: {:?}, dead letter: {dead:?}",
            store.runs()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };
    stop.notify_one();
    running.await.expect("the consumer ran");
    assert_eq!(
        store.runs_of("d"),
        [1, 2, 3],
        "conformance `a_crash_loop_reaches_the_dead_letter`: the handler ran once per delivery, up to the bound"
    );
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].id, "doom-1");
    assert_eq!(dead[0].payload.as_ref(), payload.as_bytes(), "intact");
    assert_eq!(dead[0].reason, ReasonKind::Exhausted);
}

/// Rules 1 and 2: a unit whose run is cut short at shutdown, on its last allowed delivery, did not
/// fail: the runtime releases it ([`Settle::release`](crate::Settle::release)). Where the
/// mechanism allows, that delivery is not counted, and the next consumer applies the unit; where
/// it counts every return ([`Fixture::counts_released_deliveries`]), the unit is past the bound
/// on its next arrival and goes to the dead letter intact, as exhausted — never lost either way.
pub async fn a_unit_cut_short_at_shutdown_on_its_last_delivery<F: Fixture>(fixture: &F) {
    let name = queue("cut-short");
    fixture.declare(&name, 2).await;
    let payload = r#"{"key":"q","value":4,"fail_until":2,"hang_once_on":2}"#;
    fixture.publish(&name, Unit::new("cut-1", payload)).await;
    let store = Store::default();
    // Delivery 1 fails; delivery 2, the last allowed, hangs until the drain deadline cuts it.
    let source = fixture.consume(&name).await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = tokio::spawn({
        let (store, stop) = (store.clone(), stop.clone());
        Consumer::new(source)
            .state(store)
            .max_deliveries(2)
            .backoff(Backoff::exponential(
                Duration::from_millis(10),
                Duration::from_millis(50),
            ))
            .drain_deadline(Duration::from_millis(200))
            .shutdown_on(async move { stop.notified().await })
            .run(Scripted)
    });
    until(
        "a_unit_cut_short_at_shutdown_on_its_last_delivery",
        &store,
        |s| s.runs_of("q").len() >= 2,
    )
    .await;
    stop.notify_one();
    let report = running.await.expect("the consumer ran");
    assert_eq!(
        (report.returned, report.dead_lettered),
        (2, 0),
        "failed once, released once: {report:?}"
    );
    if fixture.counts_released_deliveries() {
        // Past the bound on arrival: dead-lettered unhandled. (JetStream delivers it no more and
        // reports it stranded; the sweep moves it.)
        let source = fixture.consume(&name).await;
        let stop = Arc::new(tokio::sync::Notify::new());
        let running = tokio::spawn({
            let (store, stop) = (store.clone(), stop.clone());
            Consumer::new(source)
                .state(store)
                .max_deliveries(2)
                .shutdown_on(async move { stop.notified().await })
                .run(Scripted)
        });
        let dead = wait_dead_letters(fixture, &name, 1).await;
        stop.notify_one();
        running.await.expect("the consumer ran");
        assert_eq!(dead[0].id, "cut-1");
        assert_eq!(dead[0].payload.as_ref(), payload.as_bytes(), "intact");
        assert_eq!(dead[0].reason, ReasonKind::Exhausted);
        assert_eq!(store.runs_of("q"), [1, 2], "not run past the bound");
    } else {
        consume_until(
            fixture,
            &name,
            &store,
            2,
            "a_unit_cut_short_at_shutdown_on_its_last_delivery",
            |s| s.rows().contains_key("q"),
        )
        .await;
        assert_eq!(
            store.runs_of("q"),
            [1, 2, 2],
            "released uncounted: delivered again as the same delivery"
        );
        assert!(dead_letters(fixture, &name).await.is_empty());
    }
}

/// Rule 4: arrival order is not the record's order, and the store guards its writes with the
/// unit's stamp. For one key, a newer unit is applied, then an older one arrives — directly
/// (published after it), and through a return — and changes nothing; a unit keeps its stamp
/// through every return and through a dead letter and its redrive.
pub async fn an_older_unit_changes_nothing<F: Fixture>(fixture: &F) {
    let name = queue("stamp");
    fixture.declare(&name, 2).await;
    let guarded = |key: &str, value: i64, extra: &str| {
        format!(r#"{{"key":"{key}","value":{value},"guarded":true{extra}}}"#)
    };
    let stamped =
        |id: &str, payload: String, stamp: u64| Unit::new(id, payload).with_stamp(Stamp(stamp));
    // Directly: the producer's order is 10, 30, 20; the unit stamped 20 arrives last and changes
    // nothing.
    for (id, value, stamp) in [("st-a", 1, 10), ("st-b", 3, 30), ("st-c", 2, 20)] {
        fixture
            .publish(&name, stamped(id, guarded("direct", value, ""), stamp))
            .await;
    }
    // Through a return: stamped 40, it fails on its first delivery; stamped 50, it is applied
    // meanwhile; the return of 40 arrives after it and changes nothing.
    fixture
        .publish(
            &name,
            stamped("st-d", guarded("returned", 4, r#","fail_until":2"#), 40),
        )
        .await;
    fixture
        .publish(&name, stamped("st-e", guarded("returned", 5, ""), 50))
        .await;
    // Through the dead letter and a redrive: the stamp is the producer's where the mechanism
    // keeps no order, else the mechanism's own, and the redriven unit carries the same.
    let poison = guarded("redriven", 6, r#","fail_until":1000"#);
    let poison = if fixture.stamps_units() {
        Unit::new("st-f", poison)
    } else {
        stamped("st-f", poison, 60)
    };
    fixture.publish(&name, poison).await;

    let store = Store::default();
    consume_until(
        fixture,
        &name,
        &store,
        2,
        "an_older_unit_changes_nothing",
        |s| {
            s.runs_of("direct").len() >= 3
                && s.runs_of("returned").len() >= 3
                && s.runs_of("redriven").len() >= 2
        },
    )
    .await;
    let rows = store.rows();
    assert_eq!(
        rows.get("direct"),
        Some(&3),
        "conformance `an_older_unit_changes_nothing`: the unit stamped 20, arriving after the one \
         stamped 30, changed the key; stamps seen: {:?}",
        store.stamps_seen_by("direct")
    );
    assert_eq!(
        rows.get("returned"),
        Some(&5),
        "conformance `an_older_unit_changes_nothing`: the return of the unit stamped 40 changed \
         the key after the one stamped 50; stamps seen: {:?}",
        store.stamps_seen_by("returned")
    );
    let mut returned = store.stamps_seen_by("returned");
    returned.sort();
    assert_eq!(
        returned,
        [Some(Stamp(40)), Some(Stamp(40)), Some(Stamp(50))],
        "conformance `an_older_unit_changes_nothing`: a returned unit keeps its stamp"
    );

    let first = store.stamps_seen_by("redriven");
    assert!(
        first.iter().all(|s| s.is_some() && *s == first[0]),
        "conformance `an_older_unit_changes_nothing`: every delivery of a unit carries one \
         stamp: {first:?}"
    );
    let view = fixture.dead_letter(&name).await;
    wait_dead_letters(fixture, &name, 1).await;
    let record = view
        .peek(&UnitId::new("st-f"))
        .await
        .unwrap_or_else(|e| panic!("conformance: peek: {e}"))
        .expect("st-f is in the dead letter");
    assert_eq!(
        record.unit.stamp(),
        first[0],
        "conformance `an_older_unit_changes_nothing`: the dead letter keeps the unit's stamp"
    );
    let report = view
        .redrive(Selection::Ids(&[UnitId::new("st-f")]))
        .await
        .unwrap_or_else(|e| panic!("conformance: redrive: {e}"));
    assert_eq!(report.redriven, [UnitId::new("st-f")]);
    consume_until(
        fixture,
        &name,
        &store,
        2,
        "an_older_unit_changes_nothing (redrive)",
        |s| s.runs_of("redriven").len() >= 4,
    )
    .await;
    let all = store.stamps_seen_by("redriven");
    assert!(
        all.iter().all(|s| *s == first[0]),
        "conformance `an_older_unit_changes_nothing`: a redriven unit keeps its first stamp \
         (a redrive is not a newer unit): {all:?}"
    );
}

/// Rule 2, through a web console over the transport's dead letter (the `admin` console of
/// delivery-axum, served through [`WebConsole`]): without its token the console answers 401; with
/// it, the overview groups the dead letter by reason with counts, a unit's page shows its payload
/// escaped, an edited redrive sends the unit back under its own id (rule 3) and it is applied, and
/// a group's purge empties the dead letter. `console` makes the console at `/ops` over a dead
/// letter, signed in with a bearer token.
pub async fn operates_the_dead_letter_in_the_console<F: Fixture, C: WebConsole>(
    fixture: &F,
    console: impl FnOnce(AnyDeadLetters, &'static str) -> C,
) {
    use http::{Request, StatusCode, header};

    const TOKEN: &str = "conformance-console-token";
    let name = queue("console");
    fixture.declare(&name, 5).await;
    let poison = "not json <b>bold</b>";
    fixture.publish(&name, Unit::new("cn-1", poison)).await;
    fixture
        .publish(
            &name,
            Unit::new("cn-2", r#"{"key":"cn-2","value":5,"reject":true}"#),
        )
        .await;
    let store = Store::default();
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "operates_the_dead_letter_in_the_console",
        |s| s.runs_of("cn-2").len() == 1,
    )
    .await;
    wait_dead_letters(fixture, &name, 2).await;
    let dead = fixture.dead_letter(&name).await;
    let dead_name = dead.name().to_owned();
    let app = console(AnyDeadLetters::new(dead), TOKEN);
    let check = "conformance `operates_the_dead_letter_in_the_console`";
    let send = |request: Request<Bytes>| {
        let app = app.clone();
        async move {
            let response = app.answer(request).await;
            let status = response.status();
            let location = response
                .headers()
                .get(header::LOCATION)
                .map(|l| l.to_str().unwrap_or_default().to_owned());
            let body = response.into_body();
            (
                status,
                location,
                String::from_utf8_lossy(&body).into_owned(),
            )
        }
    };
    let get = |uri: String, bearer: bool| {
        let request = Request::get(uri);
        let request = if bearer {
            request.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
        } else {
            request
        };
        request.body(Bytes::new()).expect("a request")
    };
    let post = |uri: String, form: String| {
        Request::post(uri)
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
            .body(Bytes::from(form))
            .expect("a request")
    };
    let segment = |s: &str| {
        s.bytes()
            .map(|b| match b {
                b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' => char::from(b).to_string(),
                _ => format!("%{b:02X}"),
            })
            .collect::<String>()
    };
    let unit_path = |id: &str| format!("/ops/d/{}/u/{}", segment(&dead_name), segment(id));

    let (status, _, _) = send(get("/ops".into(), false)).await;
    assert_eq!(
        status,
        StatusCode::UNAUTHORIZED,
        "{check}: no token, no console"
    );

    let (status, _, overview) = send(get("/ops".into(), true)).await;
    assert_eq!(status, StatusCode::OK, "{check}: the overview");
    let group_of = |reason: &str| {
        overview
            .split("<tr class=\"group\"")
            .find(|row| row.contains(&format!("data-reason=\"{reason}\"")))
            .map(|row| row.split("</tr>").next().unwrap_or_default().to_owned())
            .unwrap_or_else(|| panic!("{check}: no {reason} group in {overview}"))
    };
    for reason in ["malformed", "rejected"] {
        assert!(
            group_of(reason).contains("<td class=\"count\">1</td>"),
            "{check}: one {reason} unit: {}",
            group_of(reason)
        );
    }
    let csrf = overview
        .split("name=\"csrf\" value=\"")
        .nth(1)
        .and_then(|rest| rest.get(..64))
        .unwrap_or_else(|| panic!("{check}: no CSRF token in the overview"))
        .to_owned();

    let (status, _, page) = send(get(unit_path("cn-1"), true)).await;
    assert_eq!(status, StatusCode::OK, "{check}: cn-1's page");
    assert!(
        page.contains("<pre id=\"payload\">not json &lt;b&gt;bold&lt;/b&gt;</pre>"),
        "{check}: the payload, escaped: {page}"
    );

    let fixed = r#"{"key":"cn-2","value":9}"#;
    let form = format!("csrf={csrf}&payload={}", segment(fixed));
    let (status, location, _) = send(post(format!("{}/edit", unit_path("cn-2")), form)).await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{check}: the edit");
    assert_eq!(location.as_deref(), Some("/ops?done=edited&n=1"), "{check}");
    consume_until(
        fixture,
        &name,
        &store,
        5,
        "operates_the_dead_letter_in_the_console (applied)",
        |s| s.rows().get("cn-2") == Some(&9),
    )
    .await;
    let delivered = store
        .unit_of("cn-2")
        .expect("cn-2 was handed to the handler");
    assert_eq!(delivered.id().as_str(), "cn-2", "{check}: under its own id");
    assert_eq!(
        delivered.headers().get_str(crate::headers::EDITED),
        Some("true"),
        "{check}: the edit is recorded"
    );

    let group = format!(
        "csrf={csrf}&source={}&reason=malformed",
        segment(&dead_source(fixture, &name).await)
    );
    let (status, location, _) = send(post(
        format!("/ops/d/{}/group/purge", segment(&dead_name)),
        group,
    ))
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER, "{check}: the group's purge");
    assert_eq!(location.as_deref(), Some("/ops?done=purged&n=1"), "{check}");
    assert!(
        dead_letters(fixture, &name).await.is_empty(),
        "{check}: nothing left"
    );
}

/// The source the records of `name`'s dead letter name (what the console groups by).
async fn dead_source<F: Fixture>(fixture: &F, name: &str) -> String {
    let view = fixture.dead_letter(name).await;
    let page = view
        .list(1, None)
        .await
        .unwrap_or_else(|e| panic!("conformance: listing {}: {e}", view.name()));
    page.records
        .first()
        .map(|record| record.source.clone())
        .unwrap_or_default()
}

/// Rules 1 and 3, ordered by key: a unit waiting in its key's lane behind a slower one (three
/// times the mechanism's redelivery timer) holds its delivery, and is kept alive as a running
/// one is ([`Source::keep_alive`](crate::Source::keep_alive)): it is not delivered again meanwhile, to this consumer or
/// another, and runs once, on its first delivery, after the one before it; nothing is
/// dead-lettered.
pub async fn a_unit_waiting_in_its_lane_is_kept_alive<F: Fixture>(fixture: &F) {
    const CHECK: &str = "a_unit_waiting_in_its_lane_is_kept_alive";
    let name = queue("lane-kept");
    fixture.declare(&name, 3).await;
    let timer = fixture.redelivery_timer();
    let slow = timer.map_or(Duration::ZERO, |timer| timer * 3);
    let slow_ms = u64::try_from(slow.as_millis()).unwrap_or(u64::MAX).max(500);
    fixture
        .publish(&name, in_lane("lane", 1, "w1", 1, slow_ms))
        .await;
    fixture.publish(&name, in_lane("lane", 2, "w2", 2, 0)).await;
    let store = Store::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = ordered(fixture, &name, &store, 3, &stop).await;
    until(CHECK, &store, |s| s.rows().contains_key("w2")).await;
    // Longer than the timer again: a unit not acknowledged would be delivered meanwhile.
    tokio::time::sleep(timer.map_or(Duration::from_millis(500), |timer| timer * 2)).await;
    stop.notify_one();
    let report = running.await.expect("the consumer ran");
    assert_eq!(
        (store.runs_of("w1"), store.runs_of("w2")),
        (vec![1], vec![1]),
        "conformance `{CHECK}`: each unit ran once, on its first delivery: {:?}",
        store.runs()
    );
    assert_eq!(
        store.runs().first().map(|(key, _)| key.as_str()),
        Some("w1"),
        "in its key's order"
    );
    assert_eq!(report.acked, 2, "{report:?}");
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rules 1 and 2, ordered by key: units waiting in their key's lane at shutdown never ran. They
/// are released once the source stopped ([`Source::stop`](crate::Source::stop)), so they go to the next consumer and
/// not back to the stopping one on its way out: their next delivery counts this one only where
/// the mechanism counts a release ([`Fixture::counts_released_deliveries`]), once. They are never
/// acknowledged, and the next consumer applies each once (at least once, where
/// [`Fixture::may_deliver_released_units_to_a_stopped_source`]).
pub async fn units_waiting_at_shutdown_are_released_after_the_stop<F: Fixture>(fixture: &F) {
    const CHECK: &str = "units_waiting_at_shutdown_are_released_after_the_stop";
    let name = queue("lane-stop");
    fixture.declare(&name, 5).await;
    fixture
        .publish(&name, in_lane("stop", 1, "s1", 1, 1_500))
        .await;
    for n in 2..=4 {
        fixture
            .publish(&name, in_lane("stop", n, &format!("s{n}"), n.into(), 0))
            .await;
    }
    let store = Store::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = ordered(fixture, &name, &store, 5, &stop).await;
    until(CHECK, &store, |s| !s.runs_of("s1").is_empty()).await;
    // The units behind s1 are received meanwhile and wait in its lane.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.notify_one();
    let report = running.await.expect("the consumer ran");
    assert_eq!(
        store.runs(),
        [("s1".to_owned(), 1)],
        "conformance `{CHECK}`: only s1 ran before the shutdown"
    );
    assert_eq!(
        (report.acked, report.returned),
        (1, 3),
        "conformance `{CHECK}`: s1 finished within the drain deadline, the waiting units were released: {report:?}"
    );
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = ordered(fixture, &name, &store, 5, &stop).await;
    until(CHECK, &store, |s| s.rows().len() == 4).await;
    stop.notify_one();
    running.await.expect("the consumer ran");
    let next = if fixture.counts_released_deliveries() {
        2
    } else {
        1
    };
    let exact = !fixture.may_deliver_released_units_to_a_stopped_source();
    for key in ["s2", "s3", "s4"] {
        let runs = store.runs_of(key);
        assert!(
            runs == [next] || !exact && !runs.is_empty(),
            "conformance `{CHECK}`: {key} released once, after the stop, then run once on delivery {next}: {:?}",
            store.runs()
        );
    }
    assert_eq!(store.runs_of("s1"), [1], "acknowledged: not run again");
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rules 1 and 3, ordered by key: a consumer stopped while units run and wait in several keys'
/// lanes loses nothing and acknowledges nothing that did not run: it acknowledges exactly the
/// units it applied, which never run again, and the next consumer applies every other — each
/// once, unless the mechanism may deliver released units to the stopped source
/// ([`Fixture::may_deliver_released_units_to_a_stopped_source`]), which may deliver one again.
pub async fn a_shutdown_with_lanes_loses_nothing<F: Fixture>(fixture: &F) {
    const CHECK: &str = "a_shutdown_with_lanes_loses_nothing";
    let name = queue("lane-shutdown");
    fixture.declare(&name, 5).await;
    let lanes = ["a", "b", "c"];
    for n in 0..5 {
        for lane in lanes {
            fixture
                .publish(
                    &name,
                    in_lane(lane, n, &format!("{lane}{n}"), n.into(), 100),
                )
                .await;
        }
    }
    let store = Store::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = ordered(fixture, &name, &store, 5, &stop).await;
    until(CHECK, &store, |s| s.rows().len() >= 3).await;
    stop.notify_one();
    let report = running.await.expect("the consumer ran");
    let first: Vec<String> = store.rows().into_keys().collect();
    assert_eq!(
        report.acked as usize,
        first.len(),
        "conformance `{CHECK}`: acknowledged exactly the units applied: {report:?}"
    );
    let stop = Arc::new(tokio::sync::Notify::new());
    let running = ordered(fixture, &name, &store, 5, &stop).await;
    until(CHECK, &store, |s| s.rows().len() == 15).await;
    stop.notify_one();
    running.await.expect("the consumer ran");
    let exact = !fixture.may_deliver_released_units_to_a_stopped_source();
    for n in 0..5 {
        for lane in lanes {
            let key = format!("{lane}{n}");
            let runs = store.runs_of(&key).len();
            assert!(
                runs == 1 || (!exact && runs > 1 && !first.contains(&key)),
                "conformance `{CHECK}`: {key} ran once: {:?}",
                store.runs()
            );
        }
    }
    assert!(dead_letters(fixture, &name).await.is_empty());
}
