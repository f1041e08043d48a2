//! What a [`RedisSource`](crate::RedisSource) and its handles share: names, settings, the
//! non-blocking connection and the acknowledgements in flight.

use metrics::Counter;
use tokio::time::Instant;

use crate::acks::Acks;
use crate::connector::Commands;

/// What the source and its handles share: names, settings and the non-blocking connection.
pub(crate) struct Shared {
    pub(crate) stream: String,
    pub(crate) group: String,
    pub(crate) consumer: String,
    pub(crate) dead_letter_stream: String,
    pub(crate) max_deliveries: u32,
    pub(crate) claim_idle_ms: u64,
    pub(crate) in_progress_limit_ms: u64,
    pub(crate) batch: usize,
    pub(crate) block_ms: u64,
    /// Whether reads block (`XREADGROUP … BLOCK`): only on a reader of the source's own.
    pub(crate) blocks: bool,
    /// The connection for `XACK`, `XADD` to the dead letter and `XPENDING`; reopened after a
    /// connection-level failure.
    pub(crate) commands: Commands,
    /// Acknowledgements in flight, combined into one `XACK` at a time.
    pub(crate) acks: Acks,
    pub(crate) deleted: Counter,
    /// When an entry given back becomes claimable, if before the next claim scan: the source
    /// scans for it then ([`give_back`](Shared::give_back)).
    pub(crate) claim_by: std::sync::Mutex<Option<Instant>>,
}
