//! The operator's view of a stream's dead letter — the [`DeadLetters`] API over the dead-letter
//! stream — and the sweep that moves units stranded on their last delivery into it.

use std::collections::HashSet;
use std::time::{Duration, SystemTime};

use async_nats::HeaderMap;
use async_nats::header::NATS_MESSAGE_ID;
use async_nats::jetstream::consumer::PullConsumer;
use async_nats::jetstream::{self, AckKind};
use bytes::Bytes;
use futures_util::StreamExt;

use super::codec::{self, last};
use super::topology::{NatsTopology, SWEEPER};
use delivery_core::dead_letter::{Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection};
use delivery_core::disposition::ReasonKind;
use delivery_core::transport::{TransportError, TransportErrorKind};
use delivery_core::unit::{DeliveryCount, Unit, UnitId};

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

/// The dead letter of one stream, for an operator: its dead-letter stream through
/// [`DeadLetters`], and [`sweep`](Self::sweep) and [`watch_depth`](Self::watch_depth).
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
///   redrive, and a [`NatsSource`](super::NatsSource) of another durable acknowledges it without
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

    /// The stream this dead letter belongs to.
    pub fn source(&self) -> &str {
        &self.stream
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        delivery_core::transport::watch_depth(self.dead_letter_stream.clone(), every, move || {
            let this = this.clone();
            async move { DeadLetters::count(&this).await }
        })
    }

    /// The first unit stored in the dead letter at sequence `from` or after.
    async fn next_from(&self, from: u64) -> Result<Option<Stored>, TransportError> {
        get(
            &self.context,
            &self.dead_letter_stream,
            serde_json::json!({ "seq": from.max(1), "next_by_subj": ">" }),
        )
        .await
    }

    /// Every unit in the dead letter, oldest first, as stored.
    async fn all(&self) -> Result<Vec<Stored>, TransportError> {
        let mut all = Vec::new();
        let mut from = 1;
        while let Some(stored) = self.next_from(from).await? {
            from = stored.sequence + 1;
            all.push(stored);
        }
        Ok(all)
    }

    /// The record of a unit stored in the dead letter.
    fn record(&self, stored: &Stored) -> DeadLetter {
        let h = Some(&stored.headers);
        let source = last(h, delivery_core::headers::DEAD_LETTER_SOURCE).unwrap_or(&self.stream);
        let source_sequence =
            last(h, delivery_core::headers::DEAD_LETTER_SEQUENCE).and_then(|s| s.parse::<u64>().ok());
        let id = match source_sequence {
            Some(sequence) => codec::unit_id(h, source, sequence),
            None => codec::unit_id(h, &self.dead_letter_stream, stored.sequence),
        };
        let count = last(h, delivery_core::headers::DEAD_LETTER_DELIVERY_COUNT)
            .and_then(|s| s.parse().ok())
            .unwrap_or(1);
        let own = codec::without_dead_letter_headers(h);
        let mut unit = Unit::new(id, stored.payload.clone())
            .with_headers(codec::unit_headers(Some(&own)))
            .with_delivery_count(DeliveryCount::new(count));
        if let Some(stamp) = source_sequence.and_then(|sequence| codec::stamp(h, sequence)) {
            unit = unit.with_stamp(stamp);
        }
        let mut record = DeadLetter::new(unit, source, stored.sequence.to_string());
        record.reason = last(h, delivery_core::headers::DEAD_LETTER_REASON).and_then(ReasonKind::parse);
        record.detail = last(h, delivery_core::headers::DEAD_LETTER_DETAIL)
            .unwrap_or_default()
            .to_owned();
        record.dead_lettered_at = Some(stored.time);
        record
    }

    /// Deletes the unit at `sequence` from the dead-letter stream.
    async fn delete(&self, sequence: u64) -> Result<(), TransportError> {
        self.context
            .get_stream_no_info(&self.dead_letter_stream)
            .await
            .map_err(|e| crate::error::transport_error("reading the dead-letter stream", e))?
            .delete_message(sequence)
            .await
            .map(drop)
            .map_err(|e| crate::error::transport_error("deleting from the dead-letter stream", e))
    }

    /// `stream`'s duplicate window, if it is at most [`SHORT_WINDOW`].
    async fn short_duplicate_window(
        &self,
        stream: &str,
    ) -> Result<Option<Duration>, TransportError> {
        let window = self
            .context
            .get_stream(stream)
            .await
            .map_err(|e| crate::error::transport_error("reading a stream's configuration", e))?
            .cached_info()
            .config
            .duplicate_window;
        Ok((window <= SHORT_WINDOW).then_some(window))
    }

    /// Publishes `stored` back to the subject it came from under its unit's id `id` — edited to
    /// `edit`, if given — and waits for JetStream's confirmation.
    async fn publish_back(
        &self,
        stored: &Stored,
        id: &UnitId,
        edit: Option<&Bytes>,
    ) -> Result<Published, TransportError> {
        let subject = last(Some(&stored.headers), delivery_core::headers::DEAD_LETTER_SUBJECT)
            .map(str::to_owned)
            .or_else(|| {
                // Published by something else than this transport: its first literal subject.
                self.subjects
                    .iter()
                    .find(|s| !s.contains(['*', '>']))
                    .cloned()
            });
        let Some(subject) = subject else {
            return Ok(Published::Refused(format!(
                "no subject recorded, and `{}` has no literal subject to publish it to",
                self.stream
            )));
        };
        let mut headers = codec::without_dead_letter_headers(Some(&stored.headers));
        headers.insert(NATS_MESSAGE_ID, id.as_str());
        // For the durable consumer that dead-lettered it alone: the others skip it.
        if let Some(group) = last(Some(&stored.headers), delivery_core::headers::DEAD_LETTER_GROUP) {
            headers.insert(delivery_core::headers::REDRIVE_GROUP, group);
        }
        let payload = match edit {
            None => stored.payload.clone(),
            Some(payload) => {
                for (name, value) in delivery_core::transport::edit_headers(&stored.payload) {
                    headers.insert(name, value.as_str());
                }
                payload.clone()
            }
        };
        let ack = self
            .context
            .publish_with_headers(subject.clone(), headers, payload)
            .await
            .map_err(|e| crate::error::transport_error("redriving", e))?
            .await
            .map_err(|e| {
                TransportError::msg(
                    "redriving",
                    format!(
                        "{id} was not confirmed on `{subject}` and stays in the dead letter: {e}"
                    ),
                )
            })?;
        Ok(if ack.duplicate {
            Published::Duplicate(ack.sequence)
        } else {
            Published::Stored(ack.sequence)
        })
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
            .map_err(|e| crate::error::transport_error("looking up the advisory stream's sweeper", e))?;
        let mut held: Option<HashSet<u64>> = None;
        let mut source: Option<jetstream::stream::Stream> = None;
        loop {
            let mut batch = advisories
                .fetch()
                .max_messages(64)
                .messages()
                .await
                .map_err(|e| crate::error::transport_error("reading the advisory stream", e))?;
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
                            .map_err(|e| crate::error::transport_error("reading the stream", e))?,
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
                last(Some(&s.headers), delivery_core::headers::DEAD_LETTER_SOURCE) == Some(&self.stream)
            })
            .filter_map(|s| {
                last(Some(&s.headers), delivery_core::headers::DEAD_LETTER_SEQUENCE)
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
                reason: ReasonKind::Exhausted.as_str(),
                detail: &format!(
                    "its last delivery ({} of max_deliver) was never settled; moved by a sweep",
                    advisory.deliveries
                ),
                stream: &self.stream,
                subject: &unit.subject,
                sequence: advisory.stream_seq,
                delivery_count: advisory.deliveries,
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
            .map_err(|e| crate::error::transport_error("publishing to the dead-letter stream", e))?
            .await
            .map_err(|e| crate::error::transport_error("confirming the dead-letter publish", e))?;
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

/// The longest duplicate window a redrive waits out for a unit JetStream refused as a duplicate.
const SHORT_WINDOW: Duration = Duration::from_secs(2);

/// What became of a unit published back to its subject.
enum Published {
    /// Stored in the source stream at this sequence.
    Stored(u64),
    /// Refused as a duplicate of the unit stored at this sequence.
    Duplicate(u64),
    /// Not published, for this reason.
    Refused(String),
}

impl DeadLetters for NatsDeadLetters {
    fn name(&self) -> &str {
        &self.dead_letter_stream
    }

    /// The dead-letter stream's message count.
    async fn count(&self) -> Result<u64, TransportError> {
        let stream = self
            .context
            .get_stream(&self.dead_letter_stream)
            .await
            .map_err(|e| crate::error::transport_error("reading the dead-letter stream", e))?;
        let depth = stream.cached_info().state.messages;
        delivery_core::transport::record_depth(&self.dead_letter_stream, depth);
        Ok(depth)
    }

    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let mut from = match after {
            None => 1,
            Some(cursor) => delivery_core::transport::parse_cursor::<u64>(cursor)?.saturating_add(1),
        };
        let mut records = Vec::new();
        while let Some(stored) = self.next_from(from).await? {
            if records.len() == limit {
                return Ok(Listing::page(records, true));
            }
            from = stored.sequence + 1;
            records.push(self.record(&stored));
        }
        Ok(Listing::page(records, false))
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        let mut from = 1;
        while let Some(stored) = self.next_from(from).await? {
            from = stored.sequence + 1;
            let record = self.record(&stored);
            if record.id() == id {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        self.redrive_selected(selection, None).await
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        let selection = Selection::Ids(std::slice::from_ref(id));
        let report = self.redrive_selected(selection, Some(&payload)).await?;
        Ok(!report.redriven.is_empty())
    }

    /// Deletes every record of each of `ids` from the dead-letter stream, by sequence.
    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        let mut removed = 0;
        for stored in self.all().await? {
            if ids.contains(self.record(&stored).id()) {
                self.delete(stored.sequence).await?;
                removed += 1;
            }
        }
        Ok(removed)
    }
}

impl NatsDeadLetters {
    /// Publishes each selected unit back to its subject — edited to `edit`, if given — and
    /// deletes its dead-letter copy once JetStream confirmed it (see the [type docs](Self)).
    async fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<RedriveReport, TransportError> {
        let mut redriven = Vec::new();
        // Source sequences this redrive stored, by unit id: a later copy of one of them refused
        // as a duplicate is already back in the source.
        let mut sent: Vec<(UnitId, u64)> = Vec::new();
        let mut left: Vec<String> = Vec::new();
        // Both duplicate windows, where short enough to wait out.
        let source_window = self.short_duplicate_window(&self.stream).await?;
        let dead_letter_window = self
            .short_duplicate_window(&self.dead_letter_stream)
            .await?;
        for stored in self.all().await? {
            let record = self.record(&stored);
            let id = record.id();
            if !selection.contains(id) {
                continue;
            }
            if let Some(window) = dead_letter_window {
                // The dead letter refuses the same id within its window (JetStream forgets an id
                // up to one more window late): redriven from a copy younger than that, the unit
                // refused again at once could not come back to the dead letter.
                let age = SystemTime::now()
                    .duration_since(stored.time)
                    .unwrap_or_default();
                if let Some(wait) = (window * 2 + Duration::from_millis(50)).checked_sub(age) {
                    tokio::time::sleep(wait).await;
                }
            }
            let mut published = self.publish_back(&stored, id, edit).await?;
            for _ in 0..3 {
                match (&published, source_window) {
                    (Published::Duplicate(at), Some(window))
                        if !sent.contains(&(id.clone(), *at)) =>
                    {
                        tokio::time::sleep(window).await;
                        published = self.publish_back(&stored, id, edit).await?;
                    }
                    _ => break,
                }
            }
            match published {
                Published::Stored(at) => sent.push((id.clone(), at)),
                Published::Duplicate(at) if sent.contains(&(id.clone(), at)) => {}
                Published::Duplicate(_) => {
                    left.push(format!(
                        "{id} (refused as a duplicate: its id is still inside `{}`'s duplicate window)",
                        self.stream
                    ));
                    continue;
                }
                Published::Refused(why) => {
                    left.push(format!("{id} ({why})"));
                    continue;
                }
            }
            self.delete(stored.sequence).await.map_err(|e| {
                TransportError::msg(
                    "redriving",
                    format!("{id} is back in `{}` but its dead-letter copy was not deleted ({e}); it is in both", self.stream),
                )
            })?;
            redriven.push(id.clone());
        }
        if !left.is_empty() {
            return Err(TransportError::msg(
                "redriving",
                format!(
                    "redriven: [{}]; left in the dead letter: {} — redrive them again later",
                    redriven
                        .iter()
                        .map(UnitId::as_str)
                        .collect::<Vec<_>>()
                        .join(", "),
                    left.join(", ")
                ),
            ));
        }
        Ok(RedriveReport::of(selection, redriven))
    }
}

/// A unit as stored in a stream, every header with every value.
struct Stored {
    subject: String,
    sequence: u64,
    headers: HeaderMap,
    payload: Bytes,
    /// When JetStream stored it.
    time: SystemTime,
}

#[derive(serde::Deserialize)]
struct GetResponse {
    message: jetstream::stream::RawMessage,
}

/// Reads the unit at `sequence` of `stream` (`None`: no unit there).
async fn get_stored(
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
        .map_err(|e| crate::error::transport_error("reading a stored unit", e))?;
    let message = match response {
        Response::Ok(response) => response.message,
        Response::Err { error } if error.error_code() == jetstream::ErrorCode::NO_MESSAGE_FOUND => {
            return Ok(None);
        }
        Response::Err { error } => {
            return Err(crate::error::transport_error("reading a stored unit", error));
        }
    };
    let engine = base64::engine::general_purpose::STANDARD;
    let payload = engine
        .decode(&message.payload)
        .map_err(|e| crate::error::transport_error("decoding a stored unit's payload", e))?;
    let headers = match message.headers.as_deref() {
        None | Some("") => HeaderMap::new(),
        Some(encoded) => {
            let block = engine
                .decode(encoded)
                .map_err(|e| crate::error::transport_error("decoding a stored unit's headers", e))?;
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

/// Settles an advisory, confirmed by JetStream (so a sweep's effects are visible once it returns).
async fn acknowledge(advisory: &jetstream::Message, kind: AckKind) -> Result<(), TransportError> {
    advisory
        .double_ack_with(kind)
        .await
        .map_err(|e| TransportError::msg("acknowledging an advisory", e.to_string()))
}

impl From<NatsDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: NatsDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
