//! The operator's view of a stream's dead letter: count, list and peek without consuming, and
//! redrive back to the source subject under the same unit id.

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::{self, message::StreamMessage};
use bytes::Bytes;

use super::headers::{self, last};
use super::topology::NatsTopology;
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

/// The dead letter of one stream, for an operator.
#[derive(Clone, Debug)]
pub struct NatsDeadLetters {
    context: jetstream::Context,
    stream: String,
    subjects: Vec<String>,
    dead_letter_stream: String,
}

impl NatsDeadLetters {
    /// The dead letter of `topology.stream`, over an existing client connection.
    pub fn new(client: async_nats::Client, topology: &NatsTopology) -> Self {
        NatsDeadLetters {
            context: jetstream::new(client),
            stream: topology.stream.clone(),
            subjects: topology.subject_names(),
            dead_letter_stream: topology.dead_letter_stream_name(),
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
        metrics::gauge!("delivery_dead_letter_depth", "dead_letter" => self.dead_letter_stream.clone())
            .set(depth as f64);
        Ok(depth)
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        tokio::spawn(async move {
            loop {
                if let Err(error) = this.count().await {
                    tracing::warn!(dead_letter = %this.dead_letter_stream, %error, "could not read the dead letter's depth");
                }
                tokio::time::sleep(every).await;
            }
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
            match stream.get_raw_message(sequence).await {
                Ok(message) => records.push(record(message)),
                // Deleted (redriven) in between: a gap in the sequence.
                Err(error)
                    if matches!(
                        error.kind(),
                        jetstream::stream::RawMessageErrorKind::NoMessageFound
                    ) => {}
                Err(error) => {
                    return Err(TransportError::new("reading the dead letter", error));
                }
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
            let mut headers = headers::without_dead_letter_headers(Some(&record.nats_headers));
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
}

fn record(message: StreamMessage) -> DeadLetterRecord {
    let h = Some(&message.headers);
    let source = last(h, headers::HEADER_DEAD_LETTER_SOURCE).map(str::to_owned);
    let source_sequence =
        last(h, headers::HEADER_DEAD_LETTER_SEQUENCE).and_then(|s| s.parse::<u64>().ok());
    let id = match (&source, source_sequence) {
        (Some(stream), Some(sequence)) => headers::unit_id(h, stream, sequence),
        _ => headers::unit_id(h, "dead-letter", message.sequence),
    };
    DeadLetterRecord {
        dead_letter_sequence: message.sequence,
        id,
        payload: message.payload,
        headers: headers::unit_headers(h),
        reason: last(h, headers::HEADER_DEAD_LETTER_REASON).and_then(ReasonKind::parse),
        detail: last(h, headers::HEADER_DEAD_LETTER_DETAIL).map(str::to_owned),
        source,
        subject: last(h, headers::HEADER_DEAD_LETTER_SUBJECT).map(str::to_owned),
        source_sequence,
        delivery_count: last(h, headers::HEADER_DEAD_LETTER_DELIVERY_COUNT)
            .and_then(|s| s.parse().ok()),
        nats_headers: message.headers,
    }
}
