//! Where a unit's disposition is carried out: acknowledged, returned or dead-lettered. Every
//! transport's units pass through [`apply`], which also logs the disposition once and counts it.

use std::time::Duration;

use metrics::Counter;

use crate::disposition::{Disposition, Outcome, ReasonKind};
use crate::transport::{Settle, TransportError};
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

/// Carries out `disposition` through the unit's handle, then logs and counts it.
pub(crate) async fn apply<H: Settle>(
    handle: H,
    unit: &Unit,
    outcome: &Outcome,
    disposition: &Disposition,
    counters: &Counters,
) -> Settled {
    let result = handle.settle(unit, disposition).await;
    record(result, unit, outcome, disposition, counters)
}

/// Logs the disposition once and counts it.
#[inline]
fn record(
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
        Disposition::Ack => {
            counters.acked.increment(1);
            tracing::debug!(
                unit.id = id,
                delivery_count = count,
                disposition = "ack",
                "unit applied"
            );
            Settled::Acked
        }
        Disposition::Return { after } => {
            counters.returned.increment(1);
            let error = failure_text(outcome);
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

fn failure_text(outcome: &Outcome) -> &str {
    match outcome {
        Outcome::Applied => "",
        Outcome::Failed(e)
        | Outcome::Panicked(e)
        | Outcome::Rejected(e)
        | Outcome::Malformed(e) => e,
    }
}

fn duration_ms(d: Duration) -> u64 {
    d.as_millis().try_into().unwrap_or(u64::MAX)
}
