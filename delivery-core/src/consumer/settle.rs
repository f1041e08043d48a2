//! Where a unit's disposition is carried out: acknowledged, returned or dead-lettered. Every
//! transport's units pass through [`apply!`], which also logs the disposition once and counts it.

use std::time::Duration;

use metrics::Counter;

use crate::disposition::{Disposition, Outcome, ReasonKind, RedeliveryPolicy, decide};
use crate::transport::TransportError;
use crate::unit::Unit;

/// How one unit ended, for the run's [`Report`](super::Report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    Acked,
    Returned,
    DeadLettered,
    /// The transport could not carry out the disposition; the mechanism redelivers the unit.
    Failed,
}

/// Counters registered once per run, so the hot path only increments.
pub(crate) struct Counters {
    acked: Counter,
    returned: Counter,
    malformed: Counter,
    rejected: Counter,
    exhausted: Counter,
    settle_failed: Counter,
}

impl Counters {
    pub(crate) fn new(source: &str) -> Self {
        let dead = |reason: ReasonKind| metrics::counter!("delivery_dead_lettered_total", "source" => source.to_owned(), "reason" => reason.as_str());
        Counters {
            acked: metrics::counter!("delivery_acked_total", "source" => source.to_owned()),
            returned: metrics::counter!("delivery_returned_total", "source" => source.to_owned()),
            malformed: dead(ReasonKind::Malformed),
            rejected: dead(ReasonKind::Rejected),
            exhausted: dead(ReasonKind::Exhausted),
            settle_failed: metrics::counter!("delivery_settle_failed_total", "source" => source.to_owned()),
        }
    }
}

/// The disposition of a unit whose handler ended with `outcome`: [`decide`]'s answer. An applied
/// unit is acknowledged without looking at the count or the policy (no backoff, no reason).
#[inline]
pub(crate) fn disposition(
    outcome: &Outcome,
    unit: &Unit,
    policy: &RedeliveryPolicy,
) -> Disposition {
    match outcome {
        Outcome::Applied => Disposition::Ack,
        _ => decide(outcome, unit.delivery_count(), policy, unit.id()),
    }
}

/// Carries out `disposition` through the unit's handle, then logs and counts it:
/// `apply!(handle, &unit, &outcome, &disposition, counters)` evaluates to the unit's [`Settled`],
/// in an async context.
///
/// A macro rather than an `async fn`, so the caller's state machine awaits the transport's future
/// itself: a function here would add a state machine of its own, set up and torn down per unit.
macro_rules! apply {
    ($handle:expr, $unit:expr, $outcome:expr, $disposition:expr, $counters:expr $(,)?) => {{
        let (unit, disposition) = ($unit, $disposition);
        let result = $crate::transport::Settle::settle($handle, unit, disposition).await;
        $crate::consumer::settle::record(result, unit, $outcome, disposition, $counters)
    }};
}
pub(crate) use apply;

/// Logs the disposition once and counts it. A carried-out acknowledgement, the common case, is
/// handled inline; everything else (with its larger log records) out of line.
#[inline(always)]
pub(crate) fn record(
    result: Result<(), TransportError>,
    unit: &Unit,
    outcome: &Outcome,
    disposition: &Disposition,
    counters: &Counters,
) -> Settled {
    match result {
        Ok(()) if matches!(disposition, Disposition::Ack) => acked(unit, counters),
        result => record_other(result, unit, outcome, disposition, counters),
    }
}

#[inline(always)]
fn acked(unit: &Unit, counters: &Counters) -> Settled {
    counters.acked.increment(1);
    tracing::debug!(
        unit.id = unit.id().as_str(),
        delivery_count = unit.delivery_count().get(),
        disposition = "ack",
        "unit applied"
    );
    Settled::Acked
}

#[inline(never)]
fn record_other(
    result: Result<(), TransportError>,
    unit: &Unit,
    outcome: &Outcome,
    disposition: &Disposition,
    counters: &Counters,
) -> Settled {
    let id = unit.id().as_str();
    let count = unit.delivery_count().get();
    if let Err(error) = result {
        counters.settle_failed.increment(1);
        tracing::error!(unit.id = id, delivery_count = count, ?disposition, %error,
            "could not settle the unit; the broker will deliver it again");
        return Settled::Failed;
    }
    match disposition {
        Disposition::Ack => acked(unit, counters),
        Disposition::Return { after } => {
            counters.returned.increment(1);
            let error = outcome.error();
            tracing::warn!(
                unit.id = id,
                delivery_count = count,
                disposition = "return",
                backoff_ms = duration_ms(*after),
                error,
                "unit failed; returned for redelivery"
            );
            Settled::Returned
        }
        Disposition::DeadLetter(reason) => {
            match reason.kind() {
                ReasonKind::Malformed => &counters.malformed,
                ReasonKind::Rejected => &counters.rejected,
                ReasonKind::Exhausted => &counters.exhausted,
            }
            .increment(1);
            tracing::error!(
                unit.id = id,
                delivery_count = count,
                disposition = "dead-letter",
                reason = reason.kind().as_str(),
                detail = reason.detail(),
                "unit moved to the dead letter"
            );
            Settled::DeadLettered
        }
    }
}

fn duration_ms(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}
