//! The suite's checks of batch handlers ([`Consumer::batch`]): every transport runs them, as it
//! runs the unit checks, through the same [`Fixture`].

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use super::fixture::Fixture;
use super::support::{
    PATIENCE, Script, Store, dead_letters, queue, script, until, wait_dead_letters,
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
/// written, and one scripted to hang before it (`hang_once_on`) hangs it before, the first time
/// its key comes; a slow unit (`sleep_ms`) makes the batch that long.
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
            let (mut hang, mut hang_before, mut sleep_ms) = (false, false, 0);
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
                let after = count < script.hang_after_effect_until;
                if after || count == script.hang_once_on {
                    let mut hung = store.hung.lock().unwrap();
                    if !hung.contains(&script.key) {
                        hung.push(script.key.clone());
                        hang |= after;
                        hang_before |= !after;
                    }
                }
                sleep_ms = sleep_ms.max(script.sleep_ms);
            }
            if hang_before {
                std::future::pending::<()>().await;
            }
            tokio::time::sleep(Duration::from_millis(sleep_ms)).await;
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

/// A batch consumer's settings in a check: batches of up to `max_size` units, `max_wait`,
/// `at_once` batches at a time, bound `max_deliveries`, drain deadline `drain`.
#[derive(Clone, Copy)]
struct Batching {
    max_deliveries: u32,
    max_size: usize,
    max_wait: Duration,
    at_once: usize,
    drain: Duration,
}

impl Default for Batching {
    fn default() -> Self {
        Batching {
            max_deliveries: 5,
            max_size: 100,
            max_wait: Duration::from_millis(50),
            at_once: 1,
            drain: Duration::from_secs(5),
        }
    }
}

/// A batch consumer running in a task.
struct Running {
    task: tokio::task::JoinHandle<Report>,
    health: Health,
    stop: Arc<tokio::sync::Notify>,
}

impl Batching {
    /// Starts a batch consumer of `name` with these settings.
    async fn start<F: Fixture>(self, fixture: &F, name: &str, store: &Store) -> Running {
        let source = fixture.consume(name).await;
        let stop = Arc::new(tokio::sync::Notify::new());
        let consumer = Consumer::new(source);
        let health = consumer.health();
        let signal = stop.clone();
        let task = tokio::spawn(
            consumer
                .state(store.clone())
                .concurrency(self.at_once)
                .max_deliveries(self.max_deliveries)
                .backoff(Backoff::exponential(
                    Duration::from_millis(10),
                    Duration::from_millis(50),
                ))
                .drain_deadline(self.drain)
                .shutdown_on(async move { signal.notified().await })
                .batch(self.max_size, self.max_wait)
                .run(ScriptedBatch),
        );
        Running { task, health, stop }
    }
}

impl Running {
    /// Signals the shutdown and waits for the consumer's report.
    async fn stop(self) -> Report {
        self.stop.notify_one();
        self.task.await.expect("the consumer ran")
    }
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
    let running = Batching {
        max_deliveries: 3,
        max_size: 16,
        max_wait: Duration::from_millis(200),
        ..Batching::default()
    }
    .start(fixture, &name, &store)
    .await;
    let dead = wait_dead_letters(fixture, &name, 2).await;
    until(CHECK, &store, |s| s.rows().len() == fine.len()).await;
    let report = running.stop().await;
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
    // As many places as units: a batch that hangs holds no other back, however the units split.
    let crashed = Batching {
        max_size: keys.len(),
        max_wait: Duration::from_secs(1),
        at_once: keys.len(),
        ..Batching::default()
    }
    .start(fixture, &name, &store)
    .await;
    until(CHECK, &store, |s| s.rows().len() == keys.len()).await;
    // Killed: its task dropped with its source and every handle it held.
    crashed.task.abort();
    let _ = crashed.task.await;
    let again = Batching {
        max_size: keys.len(),
        ..Batching::default()
    }
    .start(fixture, &name, &store)
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
            break again.stop().await;
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

/// Rule 1: at shutdown, a partial batch waiting for a place to run (the one place taken by a
/// batch still running) runs within the drain deadline once the place frees, and is
/// acknowledged; one that cannot (the running batch hangs past the deadline) is released with
/// it, never acknowledged, and the next consumer applies them all. Nothing is lost either way.
pub async fn a_partial_batch_at_shutdown_runs_or_is_released<F: Fixture>(fixture: &F) {
    const CHECK: &str = "a_partial_batch_at_shutdown_runs_or_is_released";
    let name = queue("batch-shutdown");
    fixture.declare(&name, 5).await;
    let store = Store::default();
    // Drained: the running batch takes a second; the drain deadline is five.
    let slow = r#"{"key":"slow","value":1,"sleep_ms":1000}"#;
    let drained: Vec<String> = (0..3).map(|i| format!("d{i}")).collect();
    let report = stopped_behind(fixture, &name, &store, slow, &drained, 5_000).await;
    assert_eq!(
        (report.acked, report.returned),
        (4, 0),
        "conformance `{CHECK}`: the partial batch ran at shutdown: {report:?}"
    );
    assert!(drained.iter().all(|k| store.rows().contains_key(k)));
    // Released: the running batch hangs; the drain deadline is half a second.
    let stuck = r#"{"key":"stuck","value":1,"hang_once_on":1}"#;
    let released: Vec<String> = (0..3).map(|i| format!("r{i}")).collect();
    let report = stopped_behind(fixture, &name, &store, stuck, &released, 500).await;
    assert_eq!(
        (report.acked, report.returned),
        (0, 4),
        "conformance `{CHECK}`: the partial batch and the one running were released: {report:?}"
    );
    // The next consumer gets them again and applies them.
    let last = Batching::default().start(fixture, &name, &store).await;
    until(CHECK, &store, |s| {
        let rows = s.rows();
        rows.contains_key("stuck") && released.iter().all(|k| rows.contains_key(k))
    })
    .await;
    last.stop().await;
    assert!(dead_letters(fixture, &name).await.is_empty());
}

/// Starts a batch consumer with one place, publishes `first` and waits until its batch runs,
/// then publishes a unit per key, which gather behind it; stops the consumer once they are all
/// received: its report.
async fn stopped_behind<F: Fixture>(
    fixture: &F,
    name: &str,
    store: &Store,
    first: &str,
    keys: &[String],
    drain_ms: u64,
) -> Report {
    let running = Batching {
        max_wait: Duration::from_secs(60),
        drain: Duration::from_millis(drain_ms),
        ..Batching::default()
    }
    .start(fixture, name, store)
    .await;
    let id = format!("batch-first-{}", keys[0]);
    fixture.publish(name, Unit::new(id, first.to_owned())).await;
    let first_key = serde_json::from_str::<Script>(first).expect("a script").key;
    until("stopped_behind", store, |s| {
        !s.runs_of(&first_key).is_empty()
    })
    .await;
    for key in keys {
        fixture
            .publish(name, Unit::new(format!("batch-{key}"), script(key, 1)))
            .await;
    }
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while running.health.snapshot().in_flight < keys.len() as u64 + 1 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "conformance: {} units never all received",
            keys.len() + 1
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    running.stop().await
}
