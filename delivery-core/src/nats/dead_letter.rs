//! The operator's view of a stream's dead letter: count, list and peek without consuming, redrive
//! back to the source subject under the same unit id, and the sweep that moves units stranded on
//! their last delivery into it.

use std::collections::HashSet;
use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use bytes::Bytes;
use futures_util::StreamExt;

use super::codec::{self, last};
use super::topology::{NatsTopology, SWEEPER};
use crate::disposition::ReasonKind;
use crate::transport::TransportError;
use crate::unit::{Headers, UnitId};

/// One unit in the dead letter, as read without consuming it.
#[derive(Clone, Debug)]
pub struct DeadLetterRecord {
    /// Its sequence in the dead-letter stream.
    pub dead_letter_sequence: u64,
    /// The unit's id: its `Nats-Msg-Id`, else `<source stream>:<source sequence>` as the consumer
    /// saw it.
    pub id: UnitId,
    /// The payload, byte for byte as published.
    pub payload: Bytes,
    /// The unit's headers (last value of each), including the dead letter's own.
    pub headers: Headers,
    /// Every header with every value, as stored.
    pub nats_headers: HeaderMap,
    /// Why it was dead-lettered.
    pub reason: Option<ReasonKind>,
    /// The reason's detail, as the consumer recorded it.
    pub detail: Option<String>,
    /// The stream it came from.
    pub source: Option<String>,
    /// The subject it had been published to.
    pub subject: Option<String>,
    /// Its sequence in the source stream.
    pub source_sequence: Option<u64>,
    /// The delivery (from 1) on which it was dead-lettered.
    pub delivery_count: Option<u32>,
}

/// What a redrive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// Units published back to their subject (stored, confirmed) and removed from the dead letter.
    pub moved: Vec<UnitId>,
    /// Units JetStream refused as duplicates — their `Nats-Msg-Id` is still inside the source
    /// stream's duplicate window — left in the dead letter; redrive them once the window passed.
    pub duplicates: Vec<UnitId>,
    /// Units looked at and left in the dead letter.
    pub kept: usize,
}

/// What a sweep did ([`NatsDeadLetters::sweep`]).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
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

/// The dead letter of one stream, for an operator.
#[derive(Clone, Debug)]
pub struct NatsDeadLetters {
    context: jetstream::Context,
    stream: String,
    durable: String,
    subjects: Vec<String>,
    dead_letter_stream: String,
    dead_letter_subject: String,
    advisory_stream: String,
}

impl NatsDeadLetters {
    /// The dead letter of `topology.stream`, over an existing client connection.
    pub fn new(client: async_nats::Client, topology: &NatsTopology) -> Self {
        NatsDeadLetters {
            context: jetstream::new(client),
            stream: topology.stream.clone(),
            durable: topology.durable.clone(),
            subjects: topology.subject_names(),
            dead_letter_stream: topology.dead_letter_stream_name(),
            dead_letter_subject: topology.dead_letter_subject_name(),
            advisory_stream: topology.advisory_stream_name(),
        }
    }

    /// Connects to `url` for the dead letter of `topology.stream`.
    pub async fn connect(url: &str, topology: &NatsTopology) -> Result<Self, TransportError> {
        Ok(Self::new(super::connect(url).await?, topology))
    }

    /// The dead-letter stream's name.
    pub fn name(&self) -> &str {
        &self.dead_letter_stream
    }

    async fn dead_letter(&self) -> Result<jetstream::stream::Stream, TransportError> {
        self.context
            .get_stream(&self.dead_letter_stream)
            .await
            .map_err(|e| TransportError::new("reading the dead-letter stream", e))
    }

    /// Units waiting in the dead letter. Also sets the `delivery_dead_letter_depth` gauge (label
    /// `dead_letter`).
    pub async fn count(&self) -> Result<u64, TransportError> {
        let stream = self.dead_letter().await?;
        let depth = stream.cached_info().state.messages;
        crate::dead_letter::depth::record(&self.dead_letter_stream, depth);
        Ok(depth)
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        crate::dead_letter::depth::watch(self.dead_letter_stream.clone(), every, move || {
            let this = this.clone();
            async move { this.count().await }
        })
    }

    /// Every unit in the dead letter, oldest first, left in it.
    pub async fn list(&self) -> Result<Vec<DeadLetterRecord>, TransportError> {
        self.peek(usize::MAX).await
    }

    /// Up to `n` units from the head of the dead letter, left in it.
    pub async fn peek(&self, n: usize) -> Result<Vec<DeadLetterRecord>, TransportError> {
        let stream = self.dead_letter().await?;
        let state = &stream.cached_info().state;
        let (first, last) = (state.first_sequence, state.last_sequence);
        let mut records = Vec::new();
        let mut sequence = first.max(1);
        while records.len() < n && sequence <= last && state.messages > 0 {
            // `None`: deleted (redriven) in between, a gap in the sequence.
            if let Some(message) =
                get_stored(&self.context, &self.dead_letter_stream, sequence).await?
            {
                records.push(record(message));
            }
            sequence += 1;
        }
        Ok(records)
    }

    /// Publishes the units `select` picks back to the subject they came from, under the same
    /// unit id (`Nats-Msg-Id`, set to the unit's id when it was published without one), payload
    /// and headers without the dead letter's own. Each publish is confirmed by JetStream before
    /// the dead-letter copy is deleted; one refused as a duplicate stays (see
    /// [`RedriveReport::duplicates`]); on an error the redrive stops, the unit still in the dead
    /// letter.
    pub async fn redrive(
        &self,
        mut select: impl FnMut(&DeadLetterRecord) -> bool,
    ) -> Result<RedriveReport, TransportError> {
        let stream = self.dead_letter().await?;
        let mut report = RedriveReport::default();
        for record in self.list().await? {
            if !select(&record) {
                report.kept += 1;
                continue;
            }
            let Some(subject) = record.subject.clone().or_else(|| {
                // Published by something else than this transport: its first literal subject.
                self.subjects
                    .iter()
                    .find(|s| !s.contains(['*', '>']))
                    .cloned()
            }) else {
                report.kept += 1;
                continue;
            };
            let mut headers = codec::without_dead_letter_headers(Some(&record.nats_headers));
            if headers.get(NATS_MESSAGE_ID).is_none() {
                headers.insert(NATS_MESSAGE_ID, record.id.as_str());
            }
            let ack = self
                .context
                .publish_with_headers(subject.clone(), headers, record.payload.clone())
                .await
                .map_err(|e| TransportError::new("redriving", e))?
                .await
                .map_err(|e| {
                    TransportError::msg(
                        "redriving",
                        format!(
                            "{} was not confirmed on `{subject}` and stays in the dead letter: {e}",
                            record.id
                        ),
                    )
                })?;
            if ack.duplicate {
                report.duplicates.push(record.id);
                continue;
            }
            stream
                .delete_message(record.dead_letter_sequence)
                .await
                .map_err(|e| {
                    TransportError::msg(
                        "redriving",
                        format!(
                            "{} was published to `{subject}` but its dead-letter copy was not deleted ({e}); it is in both",
                            record.id
                        ),
                    )
                })?;
            report.moved.push(record.id);
        }
        Ok(report)
    }

    /// The stream this dead letter belongs to.
    pub fn source(&self) -> &str {
        &self.stream
    }

    /// Moves the units stranded on their last delivery into the dead letter, reason `exhausted`.
    ///
    /// JetStream delivers a unit at most `max_deliver` times. When its last delivery is never
    /// settled — its consumer was killed, or the consumer's move to the dead letter was not
    /// confirmed — JetStream delivers it no more and only announces it with a `MAX_DELIVERIES`
    /// advisory (the unit's stream sequence and its deliveries), captured by the advisory stream
    /// ([`NatsTopology::advisory_stream_name`]). For each advisory a sweep takes (through the
    /// advisory stream's durable consumer `sweeper`, so concurrent sweeps share the work): it
    /// reads the unit by its stream sequence, publishes it intact to the dead-letter stream with
    /// the advisory's delivery count, and only once JetStream confirmed the copy acknowledges the
    /// advisory — unless the dead letter already holds a copy of that very unit (same source
    /// stream and sequence), which it leaves alone. A sweep that dies in between leaves the
    /// advisory to be taken again a minute later: a unit may then be in the dead letter twice,
    /// never lost.
    ///
    /// [`NatsSource`](super::NatsSource) runs a sweep at start and every
    /// [`sweep_every`](NatsTopology::sweep_every); an operator can run one any time.
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
            .map_err(|e| TransportError::new("looking up the advisory stream's sweeper", e))?;
        let mut held: Option<HashSet<u64>> = None;
        let mut source: Option<jetstream::stream::Stream> = None;
        loop {
            let mut batch = advisories
                .fetch()
                .max_messages(64)
                .messages()
                .await
                .map_err(|e| TransportError::new("reading the advisory stream", e))?;
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
                            .map_err(|e| TransportError::new("reading the stream", e))?,
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
            .list()
            .await?
            .into_iter()
            .filter(|r| r.source.as_deref() == Some(self.stream.as_str()))
            .filter_map(|r| r.source_sequence)
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
                reason: ReasonKind::Exhausted.as_str(),
                detail: &format!(
                    "its last delivery ({} of max_deliver) was never settled; moved by a sweep",
                    advisory.deliveries
                ),
                stream: &self.stream,
                subject: &unit.subject,
                sequence: advisory.stream_seq,
                delivery_count: advisory.deliveries,
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
            .map_err(|e| TransportError::new("publishing to the dead-letter stream", e))?
            .await
            .map_err(|e| TransportError::new("confirming the dead-letter publish", e))?;
        if ack.duplicate {
            // Another unit with the same `Nats-Msg-Id` within the dead letter's 100 ms window:
            // leave the advisory to a later sweep.
            return Err(TransportError::msg(
                "publishing to the dead-letter stream",
                format!(
                    "the unit at sequence {} was refused as a duplicate; a later sweep moves it",
                    advisory.stream_seq
                ),
            ));
        }
        Ok(())
    }
}

/// A unit as stored in a stream, every header with every value.
struct Stored {
    subject: String,
    sequence: u64,
    headers: HeaderMap,
    payload: Bytes,
}

#[derive(serde::Deserialize)]
struct GetResponse {
    message: GetMessage,
}

#[derive(serde::Deserialize)]
struct GetMessage {
    subject: String,
    seq: u64,
    #[serde(default)]
    data: String,
    #[serde(default)]
    hdrs: Option<String>,
}

/// Reads the unit at `sequence` of `stream` (`None`: no unit there). The client's own
/// `get_raw_message` keeps only the last value of a repeated header; this keeps them all.
async fn get_stored(
    context: &jetstream::Context,
    stream: &str,
    sequence: u64,
) -> Result<Option<Stored>, TransportError> {
    use base64::Engine as _;
    use jetstream::response::Response;

    let response: Response<GetResponse> = context
        .request(
            format!("STREAM.MSG.GET.{stream}"),
            &serde_json::json!({ "seq": sequence }),
        )
        .await
        .map_err(|e| TransportError::new("reading a stored unit", e))?;
    let message = match response {
        Response::Ok(response) => response.message,
        Response::Err { error } if error.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND => {
            return Ok(None);
        }
        Response::Err { error } => {
            return Err(TransportError::new("reading a stored unit", error));
        }
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let payload = engine
        .decode(&message.data)
        .map_err(|e| TransportError::new("decoding a stored unit's payload", e))?;
    let headers = match message.hdrs.as_deref() {
        None | Some("") => HeaderMap::new(),
        Some(encoded) => {
            let block = engine
                .decode(encoded)
                .map_err(|e| TransportError::new("decoding a stored unit's headers", e))?;
            codec::parse_block(&block).ok_or_else(|| {
                TransportError::msg(
                    "decoding a stored unit's headers",
                    format!("unreadable header block at sequence {sequence} of `{stream}`"),
                )
            })?
        }
    };
    Ok(Some(Stored {
        subject: message.subject,
        sequence: message.seq,
        headers,
        payload: Bytes::from(payload),
    }))
}

/// Settles an advisory, confirmed by JetStream (so a sweep's effects are visible once it returns).
async fn acknowledge(advisory: &jetstream::Message, kind: AckKind) -> Result<(), TransportError> {
    advisory
        .double_ack_with(kind)
        .await
        .map_err(|e| TransportError::msg("acknowledging an advisory", e.to_string()))
}

fn record(message: Stored) -> DeadLetterRecord {
    let h = Some(&message.headers);
    let source = last(h, crate::headers::DEAD_LETTER_SOURCE).map(str::to_owned);
    let source_sequence =
        last(h, crate::headers::DEAD_LETTER_SEQUENCE).and_then(|s| s.parse::<u64>().ok());
    let id = match (&source, source_sequence) {
        (Some(stream), Some(sequence)) => codec::unit_id(h, stream, sequence),
        _ => codec::unit_id(h, "dead-letter", message.sequence),
    };
    DeadLetterRecord {
        dead_letter_sequence: message.sequence,
        id,
        payload: message.payload,
        headers: codec::unit_headers(h),
        reason: last(h, crate::headers::DEAD_LETTER_REASON).and_then(ReasonKind::parse),
        detail: last(h, crate::headers::DEAD_LETTER_DETAIL).map(str::to_owned),
        source,
        subject: last(h, crate::headers::DEAD_LETTER_SUBJECT).map(str::to_owned),
        source_sequence,
        delivery_count: last(h, crate::headers::DEAD_LETTER_DELIVERY_COUNT)
            .and_then(|s| s.parse().ok()),
        nats_headers: message.headers,
    }
}
