//! The handle of one Redis Streams entry and its primitives: `XACK`, leaving the entry pending to
//! be claimed back, and an `XADD` of an intact copy to the dead-letter stream.
//! `consumer::settle` decides when each runs.

use crate::acks::{Joined, Next, Turn};
use crate::codec::{self, Entry};
use ::redis::Value;
use delivery_core::dead_letter::DeadLetterStamp;
use delivery_core::disposition::DeadLetterReason;
use delivery_core::transport::{Settle, TransportError};
use delivery_core::unit::{DeliveryCount, Unit};
use std::sync::Arc;
use std::time::Duration;
use tokio::time::Instant;

use crate::shared::Shared;

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

/// The settle primitives, on the state the handles share with the source.
impl Shared {
    /// Acknowledges `entry_id`, returning once Redis answered the `XACK` that carried it. With
    /// an `XACK` of this source already in flight, the id waits and goes with the others queued
    /// meanwhile in the next one (see `acks.rs`).
    pub(super) async fn ack(&self, entry_id: String) -> Result<(), TransportError> {
        match self.acks.join(entry_id) {
            Joined::Send(turn) => self.send_acks(turn).await,
            Joined::Wait(mut waiting) => loop {
                match waiting.next().await {
                    Next::Answered(outcome) => return outcome,
                    // It sends for the queue (its own id among it, unless an earlier `XACK`
                    // took it); its own answer comes through `waiting` either way.
                    Next::Send(turn) => drop(self.send_acks(turn).await),
                }
            },
        }
    }

    /// One `XACK` for the ids of `turn`; then the next may go.
    async fn send_acks(&self, turn: Turn<'_>) -> Result<(), TransportError> {
        let mut xack = ::redis::cmd("XACK");
        xack.arg(&self.stream).arg(&self.group);
        for id in turn.ids() {
            xack.arg(id);
        }
        let outcome = match self.commands.connection().await {
            // The reply counts the ids that were pending; one that was not had been claimed and
            // acknowledged by another consumer meanwhile, which is no failure.
            Ok(mut connection) => xack
                .query_async::<i64>(&mut connection)
                .await
                .map(drop)
                .map_err(|e| self.commands.failed("acknowledging (XACK)", e)),
            Err(error) => Err(error),
        };
        turn.finish(&outcome);
        outcome
    }

    /// Claims `entry_id` again for this consumer (`XCLAIM … 0 … JUSTID`): its idle time starts
    /// over, so no consumer claims it back meanwhile, and Redis counts no delivery.
    pub(super) async fn still_handling(&self, entry_id: &str) -> Result<(), TransportError> {
        self.claim_justid(entry_id, None, "keeping the entry claimed (XCLAIM JUSTID)")
            .await
    }

    /// Gives `entry_id` back to be claimed once `after` passed (at most the claim idle time):
    /// `XCLAIM … 0 … IDLE <claim idle - after> JUSTID` sets its idle time without counting a
    /// delivery, and the source's next claim scan is brought forward to then.
    pub(super) async fn give_back(
        &self,
        entry_id: &str,
        after: Duration,
    ) -> Result<(), TransportError> {
        let claim_idle = Duration::from_millis(self.claim_idle_ms);
        let after = after.min(claim_idle);
        let idle = u64::try_from((claim_idle - after).as_millis()).unwrap_or(u64::MAX);
        self.claim_justid(
            entry_id,
            Some(idle),
            "giving the entry back (XCLAIM IDLE JUSTID)",
        )
        .await?;
        let at = Instant::now() + after;
        let mut claim_by = self
            .claim_by
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        *claim_by = Some(claim_by.map_or(at, |by| by.min(at)));
        Ok(())
    }

    /// `XCLAIM <stream> <group> <consumer> 0 <entry_id> [IDLE <idle_ms>] JUSTID`: the entry stays
    /// this consumer's, its idle time set (to 0, or to `idle_ms`), and Redis counts no delivery.
    async fn claim_justid(
        &self,
        entry_id: &str,
        idle_ms: Option<u64>,
        what: &'static str,
    ) -> Result<(), TransportError> {
        let mut connection = self.commands.connection().await?;
        let mut command = ::redis::cmd("XCLAIM");
        command
            .arg(&self.stream)
            .arg(&self.group)
            .arg(&self.consumer)
            .arg(0)
            .arg(entry_id);
        if let Some(idle_ms) = idle_ms {
            command.arg("IDLE").arg(idle_ms);
        }
        command
            .arg("JUSTID")
            .query_async::<Value>(&mut connection)
            .await
            .map(drop)
            .map_err(|e| self.commands.failed(what, e))
    }

    pub(super) async fn copy_to_dead_letter(
        &self,
        entry: &Entry,
        reason: &DeadLetterReason,
        count: u32,
    ) -> Result<(), TransportError> {
        let mut connection = self.commands.connection().await?;
        let mut add = ::redis::cmd("XADD");
        add.arg(&self.dead_letter_stream).arg("*");
        for (name, value) in &entry.fields {
            if !codec::is_transport_field(name) {
                add.arg(name.as_ref()).arg(value.as_ref());
            }
        }
        // The entry id is the stamp: the copy keeps it, for a redrive to carry (rule 4).
        if codec::field(&entry.fields, delivery_core::headers::STAMP).is_none()
            && let Some(stamp) = codec::entry_id_stamp(&entry.id)
        {
            add.arg(delivery_core::headers::STAMP).arg(stamp.0);
        }
        let stamp = DeadLetterStamp::new(reason, Some(&self.stream), DeliveryCount::new(count));
        for (name, value) in stamp.headers() {
            add.arg(name).arg(value);
        }
        add.arg(delivery_core::headers::DEAD_LETTER_ENTRY_ID)
            .arg(&entry.id)
            .arg(delivery_core::headers::DEAD_LETTER_GROUP)
            .arg(&self.group);
        add.query_async::<Value>(&mut connection)
            .await
            .map(drop)
            .map_err(|error| {
                self.commands
                    .failed("moving the unit to the dead letter (XADD)", error)
            })
    }
}
