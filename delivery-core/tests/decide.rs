//! The disposition decision, tested on its own: a table of every kind of outcome at the edges of the
//! bound, and properties over all counts, bounds and backoffs.

use std::num::NonZeroU32;
use std::time::Duration;

use delivery_core::{
    Backoff, DeliveryCount, Disposition, Outcome, ReasonKind, RedeliveryPolicy, UnitId, decide,
};
use proptest::prelude::*;

fn policy(max: u32) -> RedeliveryPolicy {
    RedeliveryPolicy {
        max_deliveries: NonZeroU32::new(max).unwrap(),
        backoff: Backoff::exponential(Duration::from_millis(100), Duration::from_secs(30))
            .without_jitter(),
    }
}

#[derive(Debug, PartialEq)]
enum Expect {
    Ack,
    Return(u64),
    Dead(ReasonKind),
}

fn check(outcome: Outcome, count: u32, max: u32, expect: Expect) {
    let got = decide(&outcome, DeliveryCount::new(count), &policy(max), "u");
    let got = match got {
        Disposition::Ack => Expect::Ack,
        Disposition::Return { after } => Expect::Return(after.as_millis() as u64),
        Disposition::DeadLetter(reason) => Expect::Dead(reason.kind()),
    };
    assert_eq!(got, expect, "{outcome:?} on delivery {count} of {max}");
}

#[test]
fn table() {
    use Expect::*;
    let failed = || Outcome::Failed("db down".into());
    let panicked = || Outcome::Panicked("boom".into());
    let rejected = || Outcome::Rejected("unknown sku".into());
    let malformed = || Outcome::Malformed("not json".into());
    let retry_after = |ms| Outcome::RetryAfter {
        error: "429 from the downstream".into(),
        after: Duration::from_millis(ms),
    };
    let cases = [
        // applied: always acknowledged, even past the bound (the effect is there)
        (Outcome::Applied, 1, 5, Ack),
        (Outcome::Applied, 5, 5, Ack),
        (Outcome::Applied, 9, 5, Ack),
        // transient failures: returned with a growing backoff, dead-lettered on the last delivery
        (failed(), 1, 5, Return(100)),
        (failed(), 2, 5, Return(200)),
        (failed(), 3, 5, Return(400)),
        (failed(), 4, 5, Return(800)),
        (failed(), 5, 5, Dead(ReasonKind::Exhausted)),
        (failed(), 6, 5, Dead(ReasonKind::Exhausted)),
        (failed(), 1, 1, Dead(ReasonKind::Exhausted)),
        (failed(), 12, 20, Return(30_000)),
        (panicked(), 1, 5, Return(100)),
        (panicked(), 5, 5, Dead(ReasonKind::Exhausted)),
        // a failure that asked for a wait: the longer of the wait and the backoff, same bound
        (retry_after(50), 1, 5, Return(100)),
        (retry_after(5_000), 1, 5, Return(5_000)),
        (retry_after(5_000), 4, 5, Return(5_000)),
        (retry_after(60_000), 12, 20, Return(60_000)),
        (retry_after(5_000), 5, 5, Dead(ReasonKind::Exhausted)),
        // permanent: straight to the dead letter, never through redeliveries
        (rejected(), 1, 5, Dead(ReasonKind::Rejected)),
        (rejected(), 4, 5, Dead(ReasonKind::Rejected)),
        (malformed(), 1, 5, Dead(ReasonKind::Malformed)),
        (malformed(), 5, 5, Dead(ReasonKind::Malformed)),
    ];
    for (outcome, count, max, expect) in cases {
        check(outcome, count, max, expect);
    }
}

#[test]
fn exhausted_reason_names_the_count_and_the_last_error() {
    let d = decide(
        &Outcome::Failed("db down".into()),
        DeliveryCount::new(3),
        &policy(3),
        "u",
    );
    let Disposition::DeadLetter(reason) = d else {
        panic!("{d:?}")
    };
    assert_eq!(reason.detail(), "failed on delivery 3 of 3: db down");
}

fn outcome() -> impl Strategy<Value = Outcome> {
    prop_oneof![
        Just(Outcome::Applied),
        ".*".prop_map(Outcome::Failed),
        (".*", 0u64..120_000).prop_map(|(error, ms)| Outcome::RetryAfter {
            error,
            after: Duration::from_millis(ms)
        }),
        ".*".prop_map(Outcome::Panicked),
        ".*".prop_map(Outcome::Rejected),
        ".*".prop_map(Outcome::Malformed),
    ]
}

proptest! {
    #[test]
    fn decision_properties(
        outcome in outcome(),
        count in 1u32..100,
        max in 1u32..50,
        initial_ms in 0u64..10_000,
        cap_ms in 0u64..120_000,
        jitter in any::<bool>(),
        id in "[a-z0-9-]{1,20}",
    ) {
        let mut backoff = Backoff::exponential(Duration::from_millis(initial_ms), Duration::from_millis(cap_ms));
        if !jitter { backoff = backoff.without_jitter(); }
        let policy = RedeliveryPolicy { max_deliveries: NonZeroU32::new(max).unwrap(), backoff: backoff.clone() };
        let id = UnitId::new(id);
        let d = decide(&outcome, DeliveryCount::new(count), &policy, id.as_str());
        // Pure: the same inputs always give the same answer.
        prop_assert_eq!(&d, &decide(&outcome, DeliveryCount::new(count), &policy, id.as_str()));
        match (&outcome, &d) {
            // Only an applied unit is ever acknowledged (rule 1).
            (Outcome::Applied, Disposition::Ack) => {}
            (Outcome::Applied, other) => prop_assert!(false, "applied but {other:?}"),
            (_, Disposition::Ack) => prop_assert!(false, "a failed unit was acknowledged"),
            // Permanent failures never burn redeliveries (rule 2).
            (Outcome::Rejected(_), Disposition::DeadLetter(r)) => prop_assert_eq!(r.kind(), ReasonKind::Rejected),
            (Outcome::Malformed(_), Disposition::DeadLetter(r)) => prop_assert_eq!(r.kind(), ReasonKind::Malformed),
            (Outcome::Rejected(_) | Outcome::Malformed(_), other) => prop_assert!(false, "permanent failure {other:?}"),
            // Transient failures: returned below the bound, dead-lettered at it (rule 2).
            (_, Disposition::Return { after }) => {
                prop_assert!(count < max, "returned on delivery {count} of {max}");
                let full = backoff.delay(DeliveryCount::new(count), id.as_str());
                if let Outcome::RetryAfter { after: asked, .. } = &outcome {
                    // Never sooner than the handler asked, nor than the backoff.
                    prop_assert_eq!(*after, full.max(*asked));
                    return Ok(());
                }
                prop_assert!(*after <= backoff.max());
                prop_assert_eq!(*after, full);
                let exact = Backoff::exponential(Duration::from_millis(initial_ms), Duration::from_millis(cap_ms))
                    .without_jitter()
                    .delay(DeliveryCount::new(count), id.as_str());
                prop_assert!(*after >= exact / 2 && *after <= exact, "{after:?} outside [{:?}, {exact:?}]", exact / 2);
            }
            (_, Disposition::DeadLetter(r)) => {
                prop_assert!(count >= max);
                prop_assert_eq!(r.kind(), ReasonKind::Exhausted);
            }
        }
    }

    #[test]
    fn backoff_grows_with_the_count_until_the_cap(count in 1u32..40) {
        let b = Backoff::default().without_jitter();
        let id = UnitId::new("u");
        let this = b.delay(DeliveryCount::new(count), id.as_str());
        let next = b.delay(DeliveryCount::new(count + 1), id.as_str());
        prop_assert!(next >= this);
        prop_assert!(next <= Duration::from_secs(30));
    }
}

/// Rule 1: a short outage of a dependency must not burn the bound. With the default policy on a
/// quorum queue with `x-delivery-limit = 5` (6 deliveries, 5 returns), the waits add up to more
/// than a dependency restart takes, whatever the jitter.
#[test]
fn the_default_backoff_outlasts_a_short_outage() {
    let backoff = Backoff::default();
    for n in 0..1000 {
        let id = UnitId::new(format!("unit-{n}"));
        let waited: Duration = (1..=5)
            .map(|count| backoff.delay(DeliveryCount::new(count), id.as_str()))
            .sum();
        assert!(
            waited >= Duration::from_secs(15),
            "{id:?} waits only {waited:?}"
        );
        let first_four: Duration = (1..=4)
            .map(|count| backoff.delay(DeliveryCount::new(count), id.as_str()))
            .sum();
        assert!(
            first_four >= Duration::from_secs(4),
            "{id:?} waits only {first_four:?}"
        );
    }
    assert_eq!(
        Backoff::default()
            .without_jitter()
            .delay(DeliveryCount::new(1), "u"),
        Duration::from_millis(100)
    );
    assert_eq!(
        Backoff::default()
            .without_jitter()
            .delay(DeliveryCount::new(9), "u"),
        Duration::from_secs(30)
    );
}
