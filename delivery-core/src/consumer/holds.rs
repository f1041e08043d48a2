//! The units the runtime holds for a wait before giving them back ([`Holds`]): a return whose
//! backoff the mechanism cannot wait out itself, a unit whose dead-letter copy failed, a unit
//! given back unstarted to make room behind a held key.

use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use tokio::task::JoinSet;
use tokio_util::sync::CancellationToken;

use super::handover::Settled;
use super::keeping::Keeping;
use crate::source::{KeepAlive, Settle};
use crate::transport_error::TransportError;
use crate::unit::Unit;

/// The returns the runtime holds for their wait, for a mechanism that cannot delay a redelivery
/// itself ([`Settle::DELAYS_REDELIVERY`] is `false`), and the units given back to make room
/// behind a held key (`order.rs`). Each waits in a task of its own, taking no place of the
/// consumer's concurrency, its delivery kept alive meanwhile where the mechanism needs it
/// ([`Source::keep_alive`](crate::Source::keep_alive)), then is given back and recorded like any
/// other return;
/// [`release`](Holds::release), at shutdown, cuts the waits short. Dropped (the run itself
/// dropped), the tasks are aborted and their handles dropped unsettled: the mechanism
/// redelivers those units.
#[derive(Default)]
pub(super) struct Holds {
    held: Mutex<Held>,
    cut: CancellationToken,
    keep_alive: Option<KeepAlive>,
}

#[derive(Default)]
struct Held {
    tasks: JoinSet<Settled>,
    /// Returns given back whose task was reaped before the run's end.
    returned: u64,
    failed: u64,
}

impl Held {
    fn reaped(&mut self, joined: Result<Settled, tokio::task::JoinError>) {
        match joined {
            Ok(Settled::Returned) => self.returned += 1,
            _ => self.failed += 1,
        }
    }
}

impl Holds {
    /// Holds that keep their units alive as `keep_alive` says ([`Source::keep_alive`]).
    ///
    /// [`Source::keep_alive`]: crate::Source::keep_alive
    pub(super) fn new(keep_alive: Option<KeepAlive>) -> Self {
        Holds {
            keep_alive,
            ..Holds::default()
        }
    }

    /// Holds `unit` for `after`, then gives it back through `handle` with a zero wait and
    /// records the result with `then`.
    pub(super) fn hold_then<H: Settle>(
        &self,
        handle: H,
        unit: &Unit,
        after: Duration,
        then: impl FnOnce(Result<(), TransportError>, &Unit) -> Settled + Send + 'static,
    ) {
        self.spawn(handle, unit, after, Give::Back, then);
    }

    pub(super) fn spawn<H: Settle>(
        &self,
        handle: H,
        unit: &Unit,
        after: Duration,
        give: Give,
        then: impl FnOnce(Result<(), TransportError>, &Unit) -> Settled + Send + 'static,
    ) {
        let unit = unit.clone();
        let cut = self.cut.clone();
        let keep_alive = self.keep_alive;
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        while let Some(joined) = held.tasks.try_join_next() {
            held.reaped(joined);
        }
        held.tasks.spawn(async move {
            let mut handle = handle;
            let mut keeping = Keeping::new(keep_alive);
            let mut wait = std::pin::pin!(tokio::time::sleep(after));
            loop {
                tokio::select! {
                    biased;
                    () = &mut wait => break,
                    () = cut.cancelled() => break,
                    () = keeping.due() => keeping.kept(handle.still_handling(&unit).await, &unit),
                }
            }
            let result = match give {
                Give::Back => handle.give_back(&unit, Duration::ZERO).await,
                Give::Release => handle.release(&unit).await,
            };
            then(result, &unit)
        });
    }

    /// Gives back at once every unit still held, waits until each was, and counts them all in
    /// `report`.
    pub(super) async fn release(&self, report: &mut super::report::Report) {
        self.cut.cancel();
        let mut held =
            std::mem::take(&mut *self.held.lock().unwrap_or_else(PoisonError::into_inner));
        if !held.tasks.is_empty() {
            tracing::info!(
                held = held.tasks.len(),
                "giving back the units held for their backoff"
            );
        }
        while let Some(joined) = held.tasks.join_next().await {
            held.reaped(joined);
        }
        report.returned += held.returned;
        report.settle_failed += held.failed;
    }
}

/// How a held unit is handed back once its wait is over.
pub(super) enum Give {
    /// Counting the delivery ([`Settle::give_back`]): it failed.
    Back,
    /// Uncounted where the mechanism allows ([`Settle::release`]): it never ran.
    Release,
}
