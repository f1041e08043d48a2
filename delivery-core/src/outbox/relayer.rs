//! The relay runtime: claim pending records in batches, hand each to the relay function (up to a
//! window at once, so a sink's confirms are pipelined), and write back how each attempt ended —
//! delivered only for a [`Receipt`](super::Receipt) naming the record — in one statement per
//! batch of marks.
//!
//! | where | what |
//! |---|---|
//! | `settings` | the settings ([`Relayer`]) and what a run did ([`RelayReport`]) |
//! | here | [`Relayer::run`]: the backlog watcher and the loop |
//! | `relay_loop` | the run: its state, one method per event, and the loop that selects them |
//! | `attempt` | one attempt: the relay function, panic guard and timeout, decided into a mark |

mod attempt;
mod relay_loop;
mod settings;

use super::record::Relay;
use super::store::Store;
use relay_loop::RelayLoop;

pub use settings::{RelayReport, Relayer};

impl<St: Store, S> Relayer<St, S> {
    /// Runs `relay` until the shutdown signal, and reports what it did.
    pub async fn run<R>(self, relay: R) -> RelayReport
    where
        R: Relay<S>,
        S: Send + Sync + 'static,
    {
        let _running = self.health.running();
        // Aborted when the run ends, or when its future is dropped.
        let _backlog = tokio_util::task::AbortOnDropHandle::new(super::backlog::watch_backlog(
            self.store.clone(),
            self.health.clone(),
            self.backlog_every,
        ));
        RelayLoop::new(self, relay).run().await
    }
}
