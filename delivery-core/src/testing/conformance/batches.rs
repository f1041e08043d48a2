//! The suite's checks of batch handlers ([`Consumer::batch`]): every transport runs them, as it
//! runs the unit checks, through the same [`Fixture`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::{
    Fixture, PATIENCE, Script, Store, dead_letters, queue, script, until, wait_dead_letters,
};
use crate::batch::{Batch, BatchHandler, BatchOutcome};
use crate::consumer::{Consumer, Report};
use crate::disposition::{Backoff, ReasonKind};
use crate::error::HandlerError;
use crate::extract::Malformed;
use crate::health::Health;
use crate::unit::Unit;

/// The suite's batch handler: the whole batch in one "transaction" of the store — every unit's
/// `key = value` written, or none. A unit scripted to fail (`fail_until`) or be refused
/// (`reject`) fails the whole batch, as a failing row fails a transaction; a unit scripted to
/// hang after the effect (`hang_after_effect_until`) hangs the batch after the whole batch was
/// written, the first time its key comes.
#[derive(Clone, Copy)]
struct ScriptedBatch;

impl BatchHandler<Store> for ScriptedBatch {
    type Item = Script;

    fn decode(&self, unit: &Unit, _: &Store) -> Result<Script, Malformed> {
        crate::extract::decode_json::<Script>(unit.payload())
    }

    fn call(
        &self,
        batch: Batch<Script>,
        store: &Store,
    ) -> impl Future<Output = BatchOutcome> + Send + 'static {
        let store = store.clone();
        async move {
            let mut hang = false;
            for item in &batch {
                let (script, count) = (item.value(), item.delivery_count().get());
                store.runs.lock().unwrap().push((script.key.clone(), count));
                if script.reject {
                    return BatchOutcome::failed(HandlerError::reject(format!(
                        "{} refused",
                        script.key
                    )));
                }
                if count < script.fail_until {
                    return BatchOutcome::failed(HandlerError::retry(format!(
                        "{} failed on delivery {count}",
                        script.key
                    )));
                }
                if count < script.hang_after_effect_until {
                    let mut hung = store.hung.lock().unwrap();
                    if !hung.contains(&script.key) {
                        hung.push(script.key.clone());
                        hang = true;
                    }
                }
            }
            {
                let mut rows = store.rows.lock().unwrap();
                let mut writes = store.writes.lock().unwrap();
                for item in &batch {
                    let script = item.value();
                    if rows.get(&script.key) != Some(&script.value) {
                        rows.insert(script.key.clone(), script.value);
                        writes.push(script.key.clone());
                    }
                }
            }
            if hang {
                std::future::pending::<()>().await;
            }
            BatchOutcome::applied()
        }
    }
}

/// A batch consumer of `name` (batches of up to `max_size`, `max_wait`; one batch at a time),
/// in a task, stopping when `stop` is notified.
async fn batches<F: Fixture>(
    fixture: &F,
    name: &str,
    store: &Store,
    max_deliveries: u32,
    (max_size, max_wait): (usize, Duration),
    drain_deadline: Duration,
    stop: &Arc<tokio::sync::Notify>,
) -> (tokio::task::JoinHandle<Report>, Health) {
    let source = fixture.consume(name).await;
    let stop = stop.clone();
    let consumer = Consumer::new(source);
    let health = consumer.health();
    let running = tokio::spawn(
        consumer
            .state(store.clone())
            .concurrency(1)
            .max_deliveries(max_deliveries)
            .backoff(Backoff::exponential(
                Duration::from_millis(10),
                Duration::from_millis(50),
            ))
            .drain_deadline(drain_deadline)
            .shutdown_on(async move { stop.notified().await })
            .batch(max_size, max_wait)
            .run(ScriptedBatch),
    );
    (running, health)
}

/// Rules 1 and 2: in a batch, a unit that keeps failing and a unit refused for good each reach
/// the dead letter alone — the failing one on its own delivery count, the refused one at once —
/// and their neighbours are applied on their first delivery, once, never redelivered.
pub async fn a_poison_unit_in_a_batch_isolates_itself<F: Fixture>(fixture: &F) {
    const CHECK: &str = "a_poison_unit_in_a_batch_isolates_itself";
    let name = queue("batch-poison");
    fixture.declare(&name, 3).await;
    let fine: Vec<String> = (0..10).map(|i| format!("b{i}")).collect();
    for (i, key) in fine.iter().enumerate() {
        if i == 4 {
            let sick = r#"{"key":"sick","value":1,"fail_until":99}"#;
            fixture.publish(&name, Unit::new("batch-sick", sick)).await;
        }
        if i == 8 {
            let refused = r#"{"key":"refused","value":1,"reject":true}"#;
            fixture
                .publish(&name, Unit::new("batch-refused", refused))
                .await;
        }
        let value = i64::try_from(i).expect("small");
        fixture
            .publish(&name, Unit::new(format!("batch-{key}"), script(key, value)))
            .await;
    }
    let store = Store::default();
    let stop = Arc::new(tokio::sync::Notify::new());
    let sizing = (16, Duration::from_millis(200));
    let (running, _) = batches(
        fixture,
        &name,
        &store,
        3,
        sizing,
        Duration::from_secs(5),
        &stop,
    )
    .await;
    let dead = wait_dead_letters(fixture, &name, 2).await;
    until(CHECK, &store, |s| s.rows().len() == fine.len()).await;
    stop.notify_one();
    let report = running.await.expect("the consumer ran");
    let mut dead_ids: Vec<&str> = dead.iter().map(|d| d.id.as_str()).collect();
    dead_ids.sort_unstable();
    assert_eq!(
        dead_ids,
        ["batch-refused", "batch-sick"],
        "conformance `{CHECK}`: the dead letter holds the two poison units alone"
    );
    for d in &dead {
        let (reason, count) = match d.id.as_str() {
            "batch-sick" => (ReasonKind::Exhausted, 3),
            _ => (ReasonKind::Rejected, 1),
        };
        assert_eq!(
            (d.reason, d.delivery_count),
            (reason, count),
            "conformance `{CHECK}`: {} dead-lettered on its own count",
            d.id
        );
    }
    for key in &fine {
        let counts = store.runs_of(key);
        assert!(
            !counts.is_empty() && counts.iter().all(|&c| c == 1),
            "conformance `{CHECK}`: {key} applied on its first delivery, never returned: {counts:?}"
        );
    }
    let mut writes = store.writes();
    writes.sort_unstable();
    assert_eq!(
        writes, fine,
        "conformance `{CHECK}`: each neighbour written once"
    );
    assert_eq!(
        report.acked as usize,
        fine.len(),
        "conformance `{CHECK}`: {report:?}"
    );
}

/// Rules 1 and 3: a consumer that dies after a batch's effect and before its acknowledgement
/// loses nothing — every unit of the batch comes back — and the redelivered batch changes
/// nothing.
pub async fn a_crash_mid_batch_loses_nothing<F: Fixture>(fixture: &F) {
    const CHECK: &str = "a_crash_mid_batch_loses_nothing";
    let name = queue("batch-crash");
    fixture.declare(&name, 5).await;
    let keys: Vec<String> = (0..6).map(|i| format!("c{i}")).collect();
    for (i, key) in keys.iter().enumerate() {
        let payload = format!(r#"{{"key":"{key}","value":{i},"hang_after_effect_until":99}}"#);
        fixture
            .publish(&name, Unit::new(format!("batch-{key}"), payload))
            .await;
    }
    let store = Store::default();
    let never = Arc::new(tokio::sync::Notify::new());
    let sizing = (keys.len(), Duration::from_secs(1));
    let (crashed, _) = batches(
        fixture,
        &name,
        &store,
        5,
        sizing,
        Duration::from_secs(5),
        &never,
    )
    .await;
    until(CHECK, &store, |s| s.rows().len() == keys.len()).await;
    // Killed: its task dropped with its source and every handle it held.
    crashed.abort();
    let _ = crashed.await;
    let stop = Arc::new(tokio::sync::Notify::new());
    let sizing = (keys.len(), Duration::from_millis(100));
    let (again, _) = batches(
        fixture,
        &name,
        &store,
        5,
        sizing,
        Duration::from_secs(5),
        &stop,
    )
    .await;
    until(CHECK, &store, |s| {
        keys.iter().all(|key| s.runs_of(key).len() >= 2)
    })
    .await;
    // Every unit was delivered again; the second consumer acknowledges all of them.
    let deadline = tokio::time::Instant::now() + PATIENCE;
    let report = loop {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if tokio::time::Instant::now() > deadline || store.runs().len() >= 2 * keys.len() {
            stop.notify_one();
            break again.await.expect("the consumer ran");
        }
    };
    assert_eq!(
        report.acked as usize,
        keys.len(),
        "conformance `{CHECK}`: every unit of the batch delivered again and acknowledged: {report:?}"
    );
    let mut writes = store.writes();
    writes.sort_unstable();
    assert_eq!(
        writes, keys,
        "conformance `{CHECK}`: the redelivered batch changed nothing"
    );
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Rule 1: at shutdown, a partial batch still waiting to fill runs within the drain deadline and
/// is acknowledged; one that cannot (its wait longer than the deadline) is released unrun, and
/// the next consumer applies it. Nothing is lost either way.
pub async fn a_partial_batch_at_shutdown_runs_or_is_released<F: Fixture>(fixture: &F) {
    const CHECK: &str = "a_partial_batch_at_shutdown_runs_or_is_released";
    let name = queue("batch-shutdown");
    fixture.declare(&name, 5).await;
    let store = Store::default();
    // Drained: the batch's wait (1 s) ends within the drain deadline (5 s).
    let drained: Vec<String> = (0..3).map(|i| format!("d{i}")).collect();
    let sizing = (100, Duration::from_secs(1));
    let report = stopped_while_gathering(fixture, &name, &store, &drained, sizing, 5_000).await;
    assert_eq!(
        (report.acked, report.returned),
        (3, 0),
        "conformance `{CHECK}`: the partial batch ran at shutdown: {report:?}"
    );
    assert!(drained.iter().all(|k| store.rows().contains_key(k)));
    // Released: the batch would wait a minute; the drain deadline is half a second.
    let released: Vec<String> = (0..3).map(|i| format!("r{i}")).collect();
    let sizing = (100, Duration::from_secs(60));
    let report = stopped_while_gathering(fixture, &name, &store, &released, sizing, 500).await;
    assert_eq!(
        (report.acked, report.returned),
        (0, 3),
        "conformance `{CHECK}`: the partial batch was released unrun: {report:?}"
    );
    assert!(released.iter().all(|k| store.runs_of(k).is_empty()));
    // The next consumer gets them again and applies them.
    let stop = Arc::new(tokio::sync::Notify::new());
    let sizing = (100, Duration::from_millis(50));
    let (last, _) = batches(
        fixture,
        &name,
        &store,
        5,
        sizing,
        Duration::from_secs(5),
        &stop,
    )
    .await;
    until(CHECK, &store, |s| {
        released.iter().all(|k| s.rows().contains_key(k))
    })
    .await;
    stop.notify_one();
    last.await.expect("the consumer ran");
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Publishes a unit per key, starts a batch consumer, and stops it once every unit is received
/// and waiting in its partial batch: its report.
async fn stopped_while_gathering<F: Fixture>(
    fixture: &F,
    name: &str,
    store: &Store,
    keys: &[String],
    sizing: (usize, Duration),
    drain_ms: u64,
) -> Report {
    for key in keys {
        fixture
            .publish(name, Unit::new(format!("batch-{key}"), script(key, 1)))
            .await;
    }
    let stop = Arc::new(tokio::sync::Notify::new());
    let drain = Duration::from_millis(drain_ms);
    let (running, health) = batches(fixture, name, store, 5, sizing, drain, &stop).await;
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while health.snapshot().in_flight < keys.len() as u64 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "conformance: {} units never all received",
            keys.len()
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    stop.notify_one();
    running.await.expect("the consumer ran")
}
