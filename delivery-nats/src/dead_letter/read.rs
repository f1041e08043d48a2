//! The dead letter's records: the [`NatsDeadLetters`] handle, and reading the units stored in a
//! stream one at a time, every header with every value.

use std::time::SystemTime;

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;

use crate::codec::{self, last};
use crate::topology::NatsTopology;
#[cfg(doc)]
use delivery_core::dead_letter::DeadLetters;
use delivery_core::dead_letter::{DeadLetter, DeadLetterStamp};
use delivery_core::transport::TransportError;
use delivery_core::unit::{DeliveryCount, Unit};

/// The dead letter of one stream, for an operator: its dead-letter stream through
/// [`DeadLetters`] (its [`watch_depth`](DeadLetters::watch_depth) too), and [`sweep`](Self::sweep).
///
/// - **Records** are read without consuming anything (`STREAM.MSG.GET`, every value of a repeated
///   header kept). A record's [`position`](DeadLetter::position) is its sequence in the
///   dead-letter stream, [`dead_lettered_at`](DeadLetter::dead_lettered_at) the time JetStream
///   stored it there, [`source`](DeadLetter::source) the stream it came from; its unit has the id
///   the consumer saw (`Nats-Msg-Id`, else `<stream>:<sequence>`), its stream sequence as its
///   stamp, and its own headers without the `x-dead-letter-*` ones.
/// - **[`count`](DeadLetters::count)** is the dead-letter stream's message count.
/// - **[`redrive`](DeadLetters::redrive)** publishes each selected unit back to the subject it had
///   been published to (`x-dead-letter-subject`; else the stream's first literal subject), payload
///   and every header value as stored, the dead letter's own removed, `Nats-Msg-Id` set to the
///   unit's id (so the consumer sees the same id, and counts its deliveries afresh), and
///   [`delivery_core::headers::REDRIVE_GROUP`] naming the durable consumer that dead-lettered it
///   ([`delivery_core::headers::DEAD_LETTER_GROUP`]): every durable consumer of the stream receives the
///   redrive, and a [`NatsSource`](crate::NatsSource) of another durable acknowledges it without
///   handling it, so only the one that dead-lettered the unit runs it again. (A reader of the
///   stream that is not a `NatsSource`, or a copy dead-lettered before the durable was recorded,
///   sees it as a new message.) It deletes
///   the dead-letter copy only once JetStream confirmed the publish. JetStream refuses a publish
///   as a duplicate while the id is inside the source stream's `duplicate_window` (default two
///   minutes) since it was last stored: where that window is at most two seconds the redrive
///   waits it out and publishes again; otherwise the unit stays in the dead letter, the redrive
///   goes on with the others and then returns an error naming what it moved and what it left
///   (redrive those again once the window passed). A second copy of a unit this very redrive sent
///   back is deleted as redriven: the source holds the unit. The dead-letter stream refuses an id
///   the same way within its own window (100 ms as declared), so a copy younger than twice that
///   is redriven only once it is older: a consumer that dead-letters the unit again at once is
///   not refused. [`redrive_edited`](DeadLetters::redrive_edited) does the same with the
///   operator's payload and the edit's headers (any earlier edit's replaced).
/// - **[`purge`](DeadLetters::purge)** deletes the records by their sequence: gone for good.
///
/// Listing, peeking, redriving and purging read the dead letter one stored unit at a time, in
/// sequence order: an operator's tool, not a hot path.
#[derive(Clone, Debug)]
pub struct NatsDeadLetters {
    pub(super) context: jetstream::Context,
    pub(super) stream: String,
    pub(super) durable: String,
    pub(super) subjects: Vec<String>,
    pub(super) dead_letter_stream: String,
    pub(super) dead_letter_subject: String,
    pub(super) advisory_stream: String,
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
        Ok(Self::new(crate::connect::connect(url).await?, topology))
    }

    /// The stream this dead letter belongs to.
    pub fn source(&self) -> &str {
        &self.stream
    }

    /// The first unit stored in the dead letter at sequence `from` or after.
    pub(super) async fn next_from(&self, from: u64) -> Result<Option<Stored>, TransportError> {
        get(
            &self.context,
            &self.dead_letter_stream,
            serde_json::json!({ "seq": from.max(1), "next_by_subj": ">" }),
        )
        .await
    }

    /// Every unit in the dead letter, oldest first, as stored.
    pub(super) async fn all(&self) -> Result<Vec<Stored>, TransportError> {
        let mut all = Vec::new();
        let mut from = 1;
        while let Some(stored) = self.next_from(from).await? {
            from = stored.sequence + 1;
            all.push(stored);
        }
        Ok(all)
    }

    /// The record of a unit stored in the dead letter.
    pub(super) fn record(&self, stored: &Stored) -> DeadLetter {
        let h = Some(&stored.headers);
        let written = DeadLetterStamp::read(|name| last(h, name).map(Into::into));
        let source = written.source.as_deref().unwrap_or(&self.stream);
        let source_sequence = last(h, delivery_core::headers::DEAD_LETTER_SEQUENCE)
            .and_then(|s| s.parse::<u64>().ok());
        let id = match source_sequence {
            Some(sequence) => codec::unit_id(h, source, sequence),
            None => codec::unit_id(h, &self.dead_letter_stream, stored.sequence),
        };
        let count = written.delivery_count.unwrap_or(DeliveryCount::FIRST);
        let own = codec::without_dead_letter_headers(h);
        let mut unit = Unit::new(id, stored.payload.clone())
            .with_headers(codec::unit_headers(Some(&own)))
            .with_delivery_count(count);
        if let Some(stamp) = source_sequence.and_then(|sequence| codec::stamp(h, sequence)) {
            unit = unit.with_stamp(stamp);
        }
        let mut record = DeadLetter::new(unit, source, stored.sequence.to_string());
        record.reason = written.reason;
        record.detail = written.detail.unwrap_or_default();
        record.dead_lettered_at = Some(stored.time);
        record
    }

    /// Deletes the unit at `sequence` from the dead-letter stream.
    pub(super) async fn delete(&self, sequence: u64) -> Result<(), TransportError> {
        self.context
            .get_stream_no_info(&self.dead_letter_stream)
            .await
            .map_err(|e| crate::error::NATS.error("reading the dead-letter stream", e))?
            .delete_message(sequence)
            .await
            .map(drop)
            .map_err(|e| crate::error::NATS.error("deleting from the dead-letter stream", e))
    }
}

/// A unit as stored in a stream, every header with every value.
pub struct Stored {
    pub(super) subject: String,
    pub(super) sequence: u64,
    pub(super) headers: HeaderMap,
    pub(super) payload: Bytes,
    /// When JetStream stored it.
    pub(super) time: SystemTime,
}

#[derive(serde::Deserialize)]
struct GetResponse {
    message: jetstream::stream::RawMessage,
}

/// Reads the unit at `sequence` of `stream` (`None`: no unit there).
pub(super) async fn get_stored(
    context: &jetstream::Context,
    stream: &str,
    sequence: u64,
) -> Result<Option<Stored>, TransportError> {
    get(context, stream, serde_json::json!({ "seq": sequence })).await
}

/// Reads the unit `request` (a `STREAM.MSG.GET` request) names in `stream` (`None`: no such unit).
/// The client's own `get_raw_message` keeps only the last value of a repeated header; this keeps
/// them all.
async fn get(
    context: &jetstream::Context,
    stream: &str,
    request: serde_json::Value,
) -> Result<Option<Stored>, TransportError> {
    use base64::Engine as _;
    use jetstream::response::Response;

    let response: Response<GetResponse> = context
        .request(format!("STREAM.MSG.GET.{stream}"), &request)
        .await
        .map_err(|e| crate::error::NATS.error("reading a stored unit", e))?;
    let message = match response {
        Response::Ok(response) => response.message,
        Response::Err { error } if error.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND => {
            return Ok(None);
        }
        Response::Err { error } => {
            return Err(crate::error::NATS.error("reading a stored unit", error));
        }
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let payload = engine
        .decode(&message.payload)
        .map_err(|e| crate::error::NATS.error("decoding a stored unit's payload", e))?;
    let headers = match message.headers.as_deref() {
        None | Some("") => HeaderMap::new(),
        Some(encoded) => {
            let block = engine
                .decode(encoded)
                .map_err(|e| crate::error::NATS.error("decoding a stored unit's headers", e))?;
            codec::parse_block(&block).ok_or_else(|| {
                TransportError::msg(
                    "decoding a stored unit's headers",
                    format!(
                        "unreadable header block at sequence {} of `{stream}`",
                        message.sequence
                    ),
                )
            })?
        }
    };
    Ok(Some(Stored {
        subject: message.subject,
        sequence: message.sequence,
        headers,
        payload: Bytes::from(payload),
        time: SystemTime::from(message.time),
    }))
}
