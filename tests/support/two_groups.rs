//! Two groups (consumer groups, durable consumers) reading one source, and a redrive from the
//! first one's dead letter: it must reach the group that dead-lettered the unit alone. The
//! check is the same on every transport; each test binary brings its sources and dead letter.
#![allow(dead_code)] // each test binary uses part of it

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::dead_letter::{DeadLetters, Selection};
use delivery::{Consumer, HandlerError, State, UnitId, consumer, transport::Source};

/// How many times each unit was applied.
#[derive(Clone, Default)]
pub struct Applied(Arc<Mutex<BTreeMap<String, u32>>>);

impl Applied {
    pub fn of(&self, id: &str) -> u32 {
        self.0.lock().unwrap().get(id).copied().unwrap_or(0)
    }

    fn add(&self, id: &UnitId) {
        *self.0.lock().unwrap().entry(id.to_string()).or_default() += 1;
    }
}

/// The first group: refuses `u` (dead-lettered at once) until its fix is deployed (`fixed`),
/// then applies it; it applies everything else.
#[derive(Clone, Default)]
pub struct Fixable {
    pub applied: Applied,
    pub fixed: Arc<AtomicBool>,
}

#[consumer]
pub async fn refuses_u_until_fixed(
    id: UnitId,
    State(group): State<Fixable>,
) -> Result<(), HandlerError> {
    if id.as_str() == "u" && !group.fixed.load(Ordering::SeqCst) {
        return Err(HandlerError::reject(std::io::Error::other(
            "the first group cannot yet",
        )));
    }
    group.applied.add(&id);
    Ok(())
}

/// The second group: applies everything.
#[consumer]
pub async fn applies(id: UnitId, State(applied): State<Applied>) -> Result<(), HandlerError> {
    applied.add(&id);
    Ok(())
}

/// Waits (at most 60 s) until `done` holds.
pub async fn until(what: &str, mut done: impl AsyncFnMut() -> bool) {
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    while !done().await {
        assert!(
            tokio::time::Instant::now() < deadline,
            "not within 60 s: {what}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// `publish` puts unit `u` on the source (with its id) and later a unit `after`; `first` and
/// `second` consume it in two groups, `dead` is the first group's dead letter. The first group
/// dead-letters `u` and the second applies it; the first group's fix is deployed and `u`
/// redriven from its dead letter; `after` is published once the first group applied `u`. Both
/// groups stop once both applied `after` (which follows anything the redrive put on the source
/// in a source read in order). Then the second group ran `u` exactly once, the first applied it
/// once, and the dead letter is empty.
pub async fn a_redrive_reaches_only_its_group<A, B, D>(
    first: A,
    second: B,
    dead: &D,
    publish: impl AsyncFn(&str),
) where
    A: Source,
    B: Source,
    D: DeadLetters,
{
    let (group_a, applied_b) = (Fixable::default(), Applied::default());
    let (stop, stopped) = tokio::sync::watch::channel(false);
    let on_stop = || {
        let mut stopped = stopped.clone();
        async move {
            let _ = stopped.wait_for(|stop| *stop).await;
        }
    };
    let consumer_a = Consumer::new(first)
        .state(group_a.clone())
        .shutdown_on(on_stop());
    let consumer_b = Consumer::new(second)
        .state(applied_b.clone())
        .shutdown_on(on_stop());
    let script = async {
        publish("u").await;
        until(
            "the first group dead-letters u, the second applies it",
            async || dead.count().await.unwrap() == 1 && applied_b.of("u") == 1,
        )
        .await;
        group_a.fixed.store(true, Ordering::SeqCst);
        let report = dead
            .redrive(Selection::Ids(&[UnitId::new("u")]))
            .await
            .unwrap();
        assert_eq!(report.redriven, [UnitId::new("u")]);
        until("the first group applies the redriven u", async || {
            group_a.applied.of("u") == 1
        })
        .await;
        publish("after").await;
        until("both groups apply `after`", async || {
            applied_b.of("after") == 1 && group_a.applied.of("after") == 1
        })
        .await;
        stop.send_replace(true);
    };
    tokio::join!(
        consumer_a.run(refuses_u_until_fixed),
        consumer_b.run(applies),
        script
    );

    assert_eq!(
        applied_b.of("u"),
        1,
        "the second group ran u once: the redrive from the first group reached it too"
    );
    assert_eq!(
        group_a.applied.of("u"),
        1,
        "the first group applied the redriven u"
    );
    assert_eq!(dead.count().await.unwrap(), 0, "the dead letter is empty");
}
