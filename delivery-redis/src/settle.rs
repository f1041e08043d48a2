//! The handle of one Redis Streams entry and its primitives: `XACK`, leaving the entry pending to
//! be claimed back, and an `XADD` of an intact copy to the dead-letter stream.
//! `consumer::settle` decides when each runs.

use super::codec::Entry;
use delivery_core::disposition::DeadLetterReason;
use delivery_core::transport::{Settle, TransportError};
use delivery_core::unit::Unit;
use std::sync::Arc;
use std::time::Duration;

use super::source::Shared;

/// The handle of one entry from a [`RedisSource`](super::RedisSource). Only the runtime holds it.
///
/// Dropped unsettled, the entry stays pending in the group and is claimed back after the claim
/// idle time, as a dead consumer's entries are.
pub struct RedisHandle {
    pub(super) entry: Entry,
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for RedisHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisHandle")
            .field("stream", &self.shared.stream)
            .field("entry_id", &self.entry.id)
            .finish_non_exhaustive()
    }
}

impl RedisHandle {
    /// The entry's id in the stream.
    pub fn entry_id(&self) -> &str {
        &self.entry.id
    }
}

impl delivery_core::marker::AckHandle for RedisHandle {}

impl Settle for RedisHandle {
    async fn ack(self, _unit: &Unit) -> Result<(), TransportError> {
        self.shared.ack(self.entry.id).await
    }

    async fn still_handling(&mut self, _unit: &Unit) -> Result<(), TransportError> {
        self.shared.still_handling(&self.entry.id).await
    }

    /// Left pending, its idle time set (`XCLAIM … IDLE … JUSTID`, which counts no delivery) so
    /// that it is claimed back once `after` passed — or once the claim idle time passed, if that
    /// is shorter — and the source's next claim scanned for then: counted by Redis on that claim.
    /// A unit held for its key's order ([`WhenReturned::Hold`](delivery_core::consumer::WhenReturned))
    /// comes back after its backoff, not after the claim idle time, past the hold.
    async fn give_back(self, _unit: &Unit, after: Duration) -> Result<(), TransportError> {
        self.shared.give_back(&self.entry.id, after).await
    }

    async fn copy_to_dead_letter(
        &mut self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        self.shared
            .copy_to_dead_letter(&self.entry, reason, unit.delivery_count().get())
            .await
    }
}
