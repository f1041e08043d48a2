//! The relay's gauges and the backlog watcher (the metrics' names are in
//! [`observe`](crate::observe)).

use std::time::Duration;

use metrics::Gauge;

use super::store::Store;
use crate::dead_letter::depth;
use crate::health::Health;
use crate::observe::{RELAY_IN_FLIGHT, RELAY_OLDEST_PENDING_AGE, RELAY_PENDING, describe};

/// The relay's handles, registered once per run.
pub(crate) struct RelayGauges {
    pub(crate) in_flight: Gauge,
    pub(crate) pending: Gauge,
    pub(crate) oldest_pending_age: Gauge,
}

impl RelayGauges {
    pub(crate) fn new(outbox: &str) -> Self {
        describe();
        RelayGauges {
            in_flight: metrics::gauge!(RELAY_IN_FLIGHT, "outbox" => outbox.to_owned()),
            pending: metrics::gauge!(RELAY_PENDING, "outbox" => outbox.to_owned()),
            oldest_pending_age: metrics::gauge!(RELAY_OLDEST_PENDING_AGE, "outbox" => outbox.to_owned()),
        }
    }
}

/// Reads `store`'s backlog now and every `every`, into `health` and the relay's gauges (and the
/// dead-letter depth gauge), until the returned task is aborted. A failed read is logged at
/// debug (the relay's claims report an unreachable database) and leaves the last values.
pub(crate) fn watch_backlog<St: Store>(
    store: St,
    health: Health,
    every: Duration,
) -> tokio::task::JoinHandle<()> {
    let gauges = RelayGauges::new(store.name());
    tokio::spawn(async move {
        loop {
            match store.backlog().await {
                Ok(backlog) => {
                    gauges.pending.set(backlog.pending as f64);
                    let age = backlog.oldest_pending_age.unwrap_or_default();
                    gauges.oldest_pending_age.set(age.as_secs_f64());
                    depth::record(store.name(), backlog.dead);
                    health.set_backlog(backlog.pending, backlog.oldest_pending_age, backlog.dead);
                }
                Err(error) => {
                    tracing::debug!(outbox = store.name(), %error, "could not read the outbox's backlog");
                }
            }
            tokio::time::sleep(every).await;
        }
    })
}
