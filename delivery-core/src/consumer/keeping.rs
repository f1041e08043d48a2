//! A waiting unit kept alive ([`Source::keep_alive`](crate::source::Source::keep_alive)): the
//! keep-alive bookkeeping of the loop's waiting handlers and of `settle::Holds`.

use crate::source::KeepAlive;
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// A waiting handler's unit kept alive ([`Source::keep_alive`]): due every `every`, until
/// `at_most` after the wait began. (Also a unit held for its backoff or parked to make room, in
/// `settle::Holds`.)
pub(super) struct Keeping {
    ticks: Option<(tokio::time::Interval, tokio::time::Instant)>,
}

impl Keeping {
    #[cold]
    pub(super) fn new(keep_alive: Option<KeepAlive>) -> Self {
        let now = tokio::time::Instant::now();
        Keeping {
            ticks: keep_alive.map(|KeepAlive { every, at_most }| {
                let mut ticks = tokio::time::interval_at(now + every, every);
                ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
                (ticks, now + at_most)
            }),
        }
    }

    /// Completes when the unit is due to be kept alive again; never once `at_most` passed.
    pub(super) async fn due(&mut self) {
        match &mut self.ticks {
            Some((ticks, until)) if tokio::time::Instant::now() < *until => {
                ticks.tick().await;
            }
            _ => std::future::pending().await,
        }
    }

    #[cold]
    pub(super) fn kept(&self, result: Result<(), TransportError>, unit: &Unit) {
        if let Err(error) = result {
            tracing::warn!(unit.id = unit.id().as_str(), %error,
                "could not keep the unit alive; the mechanism may deliver it again meanwhile");
        }
    }
}
