//! The handle of one JetStream delivery and its primitives: `+ACK`, `-NAK` with a delay, a copy
//! to the dead-letter stream confirmed by JetStream, and `+TERM` once it is there.
//! `consumer::settle` decides when each runs.

use super::codec;
use async_nats::jetstream::AckKind;
use async_nats::{HeaderMap, Subject};
use delivery_core::dead_letter::DeadLetterStamp;
use delivery_core::disposition::DeadLetterReason;
use delivery_core::transport::{Settle, TransportError, TransportErrorKind};
use delivery_core::unit::Unit;
use std::sync::Arc;
use std::time::Duration;

use super::shared::Shared;

/// The handle of one delivery from a [`NatsSource`](super::NatsSource). Only the runtime holds it.
///
/// While its handler runs, the runtime keeps the delivery in progress (`+WPI`). Dropped
/// unsettled, JetStream delivers it again after `ack_wait`, counting the delivery. (Nothing is
/// sent on drop: a `-NAK` sent then races the drop of the source's pull request, and JetStream
/// 2.9 then redelivers the unit without counting the lost delivery.)
pub struct NatsHandle {
    pub(super) reply: Option<Subject>,
    pub(super) subject: Subject,
    pub(super) headers: Option<HeaderMap>,
    pub(super) sequence: u64,
    pub(super) shared: Arc<Shared>,
}

impl std::fmt::Debug for NatsHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("NatsHandle")
            .field("stream", &self.shared.stream)
            .field("sequence", &self.sequence)
            .finish_non_exhaustive()
    }
}

impl delivery_core::marker::AckHandle for NatsHandle {}

impl NatsHandle {
    /// Publishes the unit, intact, to the dead-letter stream with the reason recorded, and waits
    /// for JetStream's publish acknowledgement.
    async fn move_to_dead_letter(
        &self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        let shared = &self.shared;
        let headers = codec::dead_letter_headers(
            self.headers.as_ref(),
            &codec::DeadLetterOrigin {
                stamp: DeadLetterStamp::new(reason, Some(&shared.stream), unit.delivery_count()),
                subject: &self.subject,
                sequence: self.sequence,
                group: &shared.durable,
            },
        );
        let ack = shared
            .context
            .publish_with_headers(
                shared.dead_letter_subject.clone(),
                headers,
                unit.payload().clone(),
            )
            .await
            .map_err(|e| crate::error::NATS.error("publishing to the dead-letter stream", e))?
            .await
            .map_err(|e| crate::error::NATS.error("confirming the dead-letter publish", e))?;
        if !ack.duplicate {
            return Ok(());
        }
        // JetStream took it for a copy it already holds (same `Nats-Msg-Id` within the window):
        // only a copy of this very delivery source and sequence counts; a copy since redriven
        // away does not.
        let stream = shared
            .context
            .get_stream_no_info(&shared.dead_letter_stream)
            .await
            .map_err(|e| crate::error::NATS.error("reading the dead-letter stream", e))?;
        let held = stream
            .get_raw_message(ack.sequence)
            .await
            .ok()
            .is_some_and(|copy| {
                codec::is_copy_of(Some(&copy.headers), &shared.stream, self.sequence)
            });
        if held {
            Ok(())
        } else {
            Err(TransportError::msg(
                "publishing to the dead-letter stream",
                "refused as a duplicate of a unit no longer in the dead letter",
            )
            .with_kind(TransportErrorKind::NotConfirmed))
        }
    }
}

impl NatsHandle {
    /// Sends `kind` on the delivery's reply subject, not waiting for JetStream's reply.
    async fn send(mut self, kind: AckKind, what: &'static str) -> Result<(), TransportError> {
        let reply = self.reply.take().expect("a handle is settled once");
        self.shared.send(reply, kind, what).await
    }

    /// Sends the final `kind` (`+ACK`, `+TERM`), waiting for JetStream's reply only with
    /// [`confirm_acks`](super::NatsTopology::confirm_acks).
    async fn finish(mut self, kind: AckKind, what: &'static str) -> Result<(), TransportError> {
        let reply = self.reply.take().expect("a handle is settled once");
        self.shared.settle(reply, kind, what).await
    }
}

impl Settle for NatsHandle {
    /// `+ACK`, sent without waiting for JetStream's reply unless
    /// [`confirm_acks`](super::NatsTopology::confirm_acks) is set: the effect is committed
    /// before it either way (rule 1), and an acknowledgement lost on the way means one more
    /// delivery after `ack_wait`, which changes nothing (rule 3).
    async fn ack(self, _unit: &Unit) -> Result<(), TransportError> {
        self.finish(AckKind::Ack, "acknowledging (+ACK)").await
    }

    /// `+WPI`: JetStream restarts the delivery's `ack_wait`.
    async fn still_handling(&mut self, _unit: &Unit) -> Result<(), TransportError> {
        let reply = self.reply.clone().expect("held until settled");
        self.shared
            .send(reply, AckKind::Progress, "marking in progress (+WPI)")
            .await
    }

    async fn give_back(self, _unit: &Unit, after: Duration) -> Result<(), TransportError> {
        let delay = (!after.is_zero()).then_some(after);
        self.send(AckKind::Nak(delay), "returning the unit (-NAK)")
            .await
    }

    /// Still held (and kept in progress) until the dead letter confirmed the copy.
    async fn copy_to_dead_letter(
        &mut self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        self.move_to_dead_letter(unit, reason).await
    }

    /// `+TERM`: JetStream delivers it no more (an ack would do the same, but a terminated unit
    /// is told apart in the stream's advisories). Its copy is in the dead letter, confirmed; a
    /// `+TERM` lost on the way means a redelivery whose copy JetStream finds already held.
    async fn finish_dead_lettered(self, _unit: &Unit) -> Result<(), TransportError> {
        self.finish(AckKind::Term, "terminating a dead-lettered unit (+TERM)")
            .await
    }
}
