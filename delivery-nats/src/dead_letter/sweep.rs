//! The sweep: units stranded on their last delivery, announced by JetStream's `MAX_DELIVERIES`
//! advisories, moved into the dead letter.

use std::collections::HashSet;

use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use futures_util::StreamExt;

use super::read::{NatsDeadLetters, Stored, get_stored};
use crate::codec::{self, last};
use crate::topology::SWEEPER;
use delivery_core::dead_letter::DeadLetterStamp;
use delivery_core::disposition::{DeadLetterReason, ReasonKind};
use delivery_core::transport::{TransportError, TransportErrorKind};
use delivery_core::unit::{DeliveryCount, UnitId};

/// What a sweep did ([`NatsDeadLetters::sweep`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct SweepReport {
    /// Units stranded on their last delivery, now in the dead letter (reason `exhausted`).
    pub moved: Vec<UnitId>,
    /// Units announced stranded that were in the dead letter already (their consumer had moved
    /// them and died before terminating them).
    pub already: Vec<UnitId>,
    /// Stream sequences of units announced stranded that are no longer in the stream (removed by
    /// its limits or by an operator): nothing is left to move; each is logged as an error.
    pub missing: Vec<u64>,
    /// Advisories that could not be read, or that name another stream or consumer: logged and
    /// dropped.
    pub malformed: usize,
}

impl SweepReport {
    /// Whether the sweep found nothing to do.
    pub fn is_empty(&self) -> bool {
        self.moved.is_empty()
            && self.already.is_empty()
            && self.missing.is_empty()
            && self.malformed == 0
    }
}

/// The part of JetStream's `io.nats.jetstream.advisory.v1.max_deliver` advisory a sweep reads.
#[derive(serde::Deserialize)]
struct MaxDeliveriesAdvisory {
    stream: String,
    consumer: String,
    stream_seq: u64,
    deliveries: u64,
}

impl NatsDeadLetters {
    /// Moves the units stranded on their last delivery into the dead letter, reason `exhausted`.
    ///
    /// JetStream delivers a unit at most `max_deliver` times. When its last delivery is never
    /// settled — its consumer was killed, or the consumer's move to the dead letter was not
    /// confirmed — JetStream delivers it no more and only announces it with a `MAX_DELIVERIES`
    /// advisory (the unit's stream sequence and its deliveries), captured by the advisory stream
    /// ([`NatsTopology::advisory_stream_name`](crate::topology::NatsTopology::advisory_stream_name)). For each advisory a sweep takes (through the
    /// advisory stream's durable consumer `sweeper`, so concurrent sweeps share the work): it
    /// reads the unit by its stream sequence, publishes it intact to the dead-letter stream with
    /// the advisory's delivery count, and only once JetStream confirmed the copy acknowledges the
    /// advisory — unless the dead letter already holds a copy of that very unit (same source
    /// stream and sequence), which it leaves alone. A sweep that dies in between leaves the
    /// advisory to be taken again a minute later: a unit may then be in the dead letter twice,
    /// never lost.
    ///
    /// [`NatsSource`](crate::source::NatsSource) runs a sweep at start and every
    /// [`sweep_every`](crate::topology::NatsTopology::sweep_every); an operator can run one any time.
    ///
    /// The unit must still be in the stream. Under `limits` retention (the default) it is, until
    /// the stream's limits remove it. Under `work_queue` or `interest` retention JetStream 2.9
    /// keeps it too (it is neither acknowledged nor terminated) — and the sweep then removes it
    /// from the stream once it is in the dead letter, as a terminated unit would be. A unit
    /// already gone is reported in [`SweepReport::missing`].
    ///
    /// Each sweep that finds advisories reads the whole dead letter once to recognise copies
    /// already there.
    pub async fn sweep(&self) -> Result<SweepReport, TransportError> {
        let mut report = SweepReport::default();
        let advisories: PullConsumer = self
            .context
            .get_consumer_from_stream(SWEEPER, &self.advisory_stream)
            .await
            .map_err(|e| crate::error::NATS.error("looking up the advisory stream's sweeper", e))?;
        let mut held: Option<HashSet<u64>> = None;
        let mut source: Option<jetstream::stream::Stream> = None;
        loop {
            let mut batch = advisories
                .fetch()
                .max_messages(64)
                .messages()
                .await
                .map_err(|e| crate::error::NATS.error("reading the advisory stream", e))?;
            let mut taken = 0usize;
            while let Some(advisory) = batch.next().await {
                let advisory = advisory.map_err(|e| {
                    TransportError::msg("reading the advisory stream", e.to_string())
                })?;
                taken += 1;
                let parsed = serde_json::from_slice::<MaxDeliveriesAdvisory>(&advisory.payload)
                    .ok()
                    .filter(|a| a.stream == self.stream && a.consumer == self.durable);
                let Some(parsed) = parsed else {
                    tracing::warn!(advisory_stream = %self.advisory_stream, subject = %advisory.subject,
                        "an advisory that is not a MAX_DELIVERIES advisory of this consumer; dropped");
                    report.malformed += 1;
                    acknowledge(&advisory, AckKind::Term).await?;
                    continue;
                };
                if held.is_none() {
                    held = Some(self.held_sequences().await?);
                }
                let held = held.as_mut().expect("read above");
                if source.is_none() {
                    source = Some(
                        self.context
                            .get_stream(&self.stream)
                            .await
                            .map_err(|e| crate::error::NATS.error("reading the stream", e))?,
                    );
                }
                let source = source.as_ref().expect("read above");
                let sequence = parsed.stream_seq;
                let Some(unit) = get_stored(&self.context, &self.stream, sequence).await? else {
                    tracing::error!(stream = %self.stream, sequence,
                        deliveries = parsed.deliveries,
                        "a unit stranded on its last delivery is no longer in the stream; \
                         it cannot be moved to the dead letter");
                    report.missing.push(sequence);
                    acknowledge(&advisory, AckKind::Ack).await?;
                    continue;
                };
                let id = codec::unit_id(Some(&unit.headers), &self.stream, sequence);
                if held.contains(&sequence) {
                    report.already.push(id);
                } else {
                    self.publish_exhausted(&unit, &parsed).await?;
                    held.insert(sequence);
                    tracing::warn!(stream = %self.stream, sequence, unit = %id,
                        deliveries = parsed.deliveries,
                        "a unit stranded on its last delivery was moved to the dead letter");
                    report.moved.push(id);
                }
                if source.cached_info().config.retention
                    != jetstream::stream::RetentionPolicy::Limits
                {
                    // Neither acknowledged nor terminated, it would stay in the work queue.
                    if let Err(error) = source.delete_message(sequence).await {
                        tracing::warn!(stream = %self.stream, sequence, %error,
                            "a swept unit could not be removed from the stream");
                    }
                }
                acknowledge(&advisory, AckKind::Ack).await?;
            }
            if taken == 0 {
                return Ok(report);
            }
        }
    }

    /// The source sequences of the units of this stream in the dead letter.
    async fn held_sequences(&self) -> Result<HashSet<u64>, TransportError> {
        Ok(self
            .all()
            .await?
            .iter()
            .filter(|s| {
                last(Some(&s.headers), delivery_core::headers::DEAD_LETTER_SOURCE)
                    == Some(&self.stream)
            })
            .filter_map(|s| {
                last(
                    Some(&s.headers),
                    delivery_core::headers::DEAD_LETTER_SEQUENCE,
                )
                .and_then(|n| n.parse::<u64>().ok())
            })
            .collect())
    }

    /// Publishes a stranded unit to the dead letter, reason `exhausted`, confirmed by JetStream.
    async fn publish_exhausted(
        &self,
        unit: &Stored,
        advisory: &MaxDeliveriesAdvisory,
    ) -> Result<(), TransportError> {
        let headers = codec::dead_letter_headers(
            Some(&unit.headers),
            &codec::DeadLetterOrigin {
                stamp: DeadLetterStamp::new(
                    &DeadLetterReason::new(
                        ReasonKind::Exhausted,
                        format!(
                            "its last delivery ({} of max_deliver) was never settled; moved by a \
                             sweep",
                            advisory.deliveries
                        ),
                    ),
                    Some(&self.stream),
                    DeliveryCount::new(u32::try_from(advisory.deliveries).unwrap_or(u32::MAX)),
                ),
                subject: &unit.subject,
                sequence: advisory.stream_seq,
                group: &self.durable,
            },
        );
        let ack = self
            .context
            .publish_with_headers(
                self.dead_letter_subject.clone(),
                headers,
                unit.payload.clone(),
            )
            .await
            .map_err(|e| crate::error::NATS.error("publishing to the dead-letter stream", e))?
            .await
            .map_err(|e| crate::error::NATS.error("confirming the dead-letter publish", e))?;
        if ack.duplicate {
            // Another unit with the same `Nats-Msg-Id` within the dead letter's 100 ms window:
            // leave the advisory to a later sweep.
            return Err(TransportError::msg(
                "publishing to the dead-letter stream",
                format!(
                    "the unit at sequence {} was refused as a duplicate; a later sweep moves it",
                    advisory.stream_seq
                ),
            )
            .with_kind(TransportErrorKind::NotConfirmed));
        }
        Ok(())
    }
}

/// Settles an advisory, confirmed by JetStream (so a sweep's effects are visible once it returns).
async fn acknowledge(advisory: &jetstream::Message, kind: AckKind) -> Result<(), TransportError> {
    advisory
        .double_ack_with(kind)
        .await
        .map_err(|e| TransportError::msg("acknowledging an advisory", e.to_string()))
}
