//! The `delivery_dead_letter_depth` gauge (label `dead_letter`): how many units wait in a dead
//! letter. Every dead letter — the in-memory broker's and each transport's operator view —
//! records it here, the same way.

use std::future::Future;
use std::time::Duration;

use crate::transport_error::TransportError;

/// Records that `depth` units wait in `dead_letter`.
pub fn record(dead_letter: &str, depth: u64) {
    metrics::gauge!(crate::observe::DEAD_LETTER_DEPTH, "dead_letter" => dead_letter.to_owned())
        .set(depth as f64);
}

/// Reads the depth with `count` (which records it) every `every`, until the returned task is
/// aborted; a failed read is logged and tried again at the next interval.
pub(crate) fn watch<C, F>(
    dead_letter: String,
    every: Duration,
    mut count: C,
) -> tokio::task::JoinHandle<()>
where
    C: FnMut() -> F + Send + 'static,
    F: Future<Output = Result<u64, TransportError>> + Send,
{
    tokio::spawn(async move {
        loop {
            if let Err(error) = count().await {
                tracing::warn!(dead_letter, %error, "could not read the dead letter's depth");
            }
            tokio::time::sleep(every).await;
        }
    })
}
