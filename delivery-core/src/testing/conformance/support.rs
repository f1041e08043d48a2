//! What the checks share: the scripted units, the effect store they write, and the waits and
//! reads of the dead letter.

use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bytes::Bytes;
use serde::Deserialize;

use super::fixture::Fixture;
use crate::dead_letter::DeadLetters;
use crate::disposition::ReasonKind;
use crate::unit::{Headers, Stamp, Unit};

/// A dead-lettered unit, as the suite reads it back through the mechanism's [`DeadLetters`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub(super) struct DeadLettered {
    /// The unit's id.
    pub(super) id: String,
    /// The payload as found in the dead letter (must equal the one published).
    pub(super) payload: Bytes,
    /// The headers as found, including the reason the transport recorded.
    pub(super) headers: Headers,
    /// The reason, as recorded.
    pub(super) reason: ReasonKind,
    /// The delivery count recorded with it.
    pub(super) delivery_count: u32,
}

/// How long a check waits for its condition before failing.
pub(super) const PATIENCE: Duration = Duration::from_secs(60);

/// What a suite unit asks of the handler, in its JSON payload.
#[derive(Deserialize)]
pub(super) struct Script {
    pub(super) key: String,
    pub(super) value: i64,
    /// Fail (retry) on deliveries before this one.
    #[serde(default)]
    pub(super) fail_until: u32,
    /// Refuse the unit for good.
    #[serde(default)]
    pub(super) reject: bool,
    /// After applying the effect, hang on deliveries before this one (a consumer that dies
    /// between the effect and the acknowledgement).
    #[serde(default)]
    pub(super) hang_after_effect_until: u32,
    /// Hang before the effect on this delivery, the first time it comes.
    #[serde(default)]
    pub(super) hang_once_on: u32,
    /// Hang before the effect on every delivery (a unit whose handling kills its consumer).
    #[serde(default)]
    pub(super) hang: bool,
    /// Take this long before applying the effect (a slow handler).
    #[serde(default)]
    pub(super) sleep_ms: u64,
    /// Write only if the unit's stamp is newer than the key's (rule 4's store guard); a unit
    /// without a stamp is malformed.
    #[serde(default)]
    pub(super) guarded: bool,
}

pub(super) fn script(key: &str, value: i64) -> String {
    format!(r#"{{"key":"{key}","value":{value}}}"#)
}

/// A key, and the stamp one of its units carried.
pub(super) type Seen = (String, Option<Stamp>);

/// The suite's effect store and log.
#[derive(Clone, Default)]
pub(super) struct Store {
    pub(super) rows: Arc<Mutex<HashMap<String, i64>>>,
    /// Every handler run: key, delivery count.
    pub(super) runs: Arc<Mutex<Vec<(String, u32)>>>,
    /// Every run that applied its effect, keyed writes that changed something.
    pub(super) writes: Arc<Mutex<Vec<String>>>,
    /// Keys whose run hung once (`hang_once_on`).
    pub(super) hung: Arc<Mutex<Vec<String>>>,
    /// Every guarded run: key, the stamp its unit carried.
    pub(super) stamps_seen: Arc<Mutex<Vec<Seen>>>,
    /// The stamp of each guarded key's stored value.
    pub(super) stamps: Arc<Mutex<HashMap<String, Stamp>>>,
    /// The last unit each key's run was handed.
    pub(super) units: Arc<Mutex<HashMap<String, Unit>>>,
}

impl Store {
    pub(super) fn rows(&self) -> HashMap<String, i64> {
        self.rows.lock().unwrap().clone()
    }
    pub(super) fn runs(&self) -> Vec<(String, u32)> {
        self.runs.lock().unwrap().clone()
    }
    pub(super) fn runs_of(&self, key: &str) -> Vec<u32> {
        self.runs()
            .into_iter()
            .filter(|(k, _)| k == key)
            .map(|(_, c)| c)
            .collect()
    }
    pub(super) fn writes(&self) -> Vec<String> {
        self.writes.lock().unwrap().clone()
    }
    pub(super) fn unit_of(&self, key: &str) -> Option<Unit> {
        self.units.lock().unwrap().get(key).cloned()
    }
    pub(super) fn stamps_seen_by(&self, key: &str) -> Vec<Option<Stamp>> {
        let seen = self.stamps_seen.lock().unwrap();
        seen.iter()
            .filter(|(k, _)| k == key)
            .map(|(_, s)| *s)
            .collect()
    }
}

/// Waits until `holds`, failing `check` after [`PATIENCE`].
pub(super) async fn until(check: &str, store: &Store, holds: impl Fn(&Store) -> bool) {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    while !holds(store) {
        assert!(
            tokio::time::Instant::now() < deadline,
            "conformance `{check}`: the condition never held within {PATIENCE:?}; runs: {:?}",
            store.runs()
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

pub(super) fn queue(check: &str) -> String {
    format!("conformance-{check}")
}

pub(super) async fn wait_dead_letters<F: Fixture>(
    fixture: &F,
    name: &str,
    n: usize,
) -> Vec<DeadLettered> {
    let deadline = tokio::time::Instant::now() + PATIENCE;
    loop {
        let dead = dead_letters(fixture, name).await;
        if dead.len() >= n {
            return dead;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "conformance: expected {n} dead letters in {name}, found {dead:?}"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// Every unit in `name`'s dead letter, read through [`DeadLetters::list`] two at a time (so the
/// cursor is exercised by every check that reads the dead letter).
pub(super) async fn dead_letters<F: Fixture>(fixture: &F, name: &str) -> Vec<DeadLettered> {
    let view = fixture.dead_letter(name).await;
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = view
            .list(2, after.as_ref())
            .await
            .unwrap_or_else(|e| panic!("conformance: listing {}: {e}", view.name()));
        assert!(page.records.len() <= 2, "a page holds at most its limit");
        all.extend(page.records.into_iter().map(|d| DeadLettered {
            id: d.unit.id().to_string(),
            payload: Bytes::copy_from_slice(d.unit.payload()),
            headers: d.unit.headers().clone(),
            reason:
                d.reason.unwrap_or_else(|| {
                    panic!("conformance: no reason recorded for {}", d.unit.id())
                }),
            delivery_count: d.unit.delivery_count().get(),
        }));
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
}
