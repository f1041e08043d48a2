//! How a unit's run ended, counted into the run's [`Report`], with what its key's lane needs to
//! hand over the next unit of the key.

use std::time::Duration;

use bytes::Bytes;

use super::report::Report;
use crate::unit::UnitId;

/// How one unit ended, for the run's [`Report`](super::report::Report).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Settled {
    Acked,
    Returned,
    DeadLettered,
    /// The transport could not carry out the disposition; the mechanism redelivers the unit.
    Failed,
    /// A return the runtime holds for its wait ([`Holds`]); counted when it is given back.
    Held,
}

#[inline]
pub(super) fn count(report: &mut Report, settled: Settled) {
    match settled {
        Settled::Acked => report.acked += 1,
        Settled::Returned => report.returned += 1,
        Settled::DeadLettered => report.dead_lettered += 1,
        Settled::Failed => report.settle_failed += 1,
        // Counted once it is given back, by `Holds::release`.
        Settled::Held => {}
    }
}

/// How a unit's run ended, with the key it ran under and, when it was returned, its id and
/// backoff: for its lane to hand over (or hold) the next.
pub(super) struct Done {
    pub(super) settled: Settled,
    pub(super) key: Option<Bytes>,
    pub(super) returned: Option<(UnitId, Duration)>,
}

impl Done {
    #[inline(always)]
    pub(super) fn new(settled: Settled, key: Option<Bytes>) -> Self {
        Done {
            settled,
            key,
            returned: None,
        }
    }
}

/// An instant no lane waits until: the timer of a disabled branch.
#[cold]
pub(super) fn far_future() -> tokio::time::Instant {
    tokio::time::Instant::now() + Duration::from_secs(86_400 * 365)
}
