//! What the relay hands a relay function: a claimed [`Record`], decoded into an
//! [`OutboxRecord<T>`], and what the function must hand back: a [`Receipt`].

use std::fmt;
use std::future::Future;
use std::ops::Deref;
use std::sync::Arc;

use bytes::Bytes;
use serde::de::DeserializeOwned;

use crate::error::HandlerError;
use crate::extract::{Malformed, State, decode_json};
use crate::unit::{DeliveryCount, Headers, Stamp, Unit};

/// A record's id: fixed when the record is written, in the same transaction as the effect, and
/// used unchanged by every attempt to relay it — as the AMQP `message_id`, the HTTP
/// `Idempotency-Key`, a Kafka `message-id` header — so the receiver can deduplicate (rule 6).
#[derive(Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct RecordId(Arc<str>);

impl RecordId {
    /// An id as stored.
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        RecordId(id.into())
    }

    /// The id as text.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

impl fmt::Debug for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(&*self.0, f)
    }
}

impl fmt::Display for RecordId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl From<&str> for RecordId {
    fn from(id: &str) -> Self {
        RecordId::new(id)
    }
}

impl From<String> for RecordId {
    fn from(id: String) -> Self {
        RecordId::new(id)
    }
}

/// A row of an outbox table, or of a queue's (the same shape), as the unit it carries, on its
/// `count`th delivery: its id and payload; its headers, with its key as
/// [`KEY`](crate::headers::KEY); and its stamp — its producer's
/// [`STAMP`](crate::headers::STAMP) header where it has one, else `seq`, the row's place in its
/// table (rule 4). What a database queue delivers and what a dead record shows an operator, in
/// one place.
#[doc(hidden)]
pub fn row_unit(
    id: &str,
    payload: Bytes,
    key: Option<&str>,
    headers: Headers,
    seq: Option<Stamp>,
    count: DeliveryCount,
) -> Unit {
    let stamp = match headers.get(crate::headers::STAMP) {
        Some(value) => crate::headers::parse_stamp(value),
        None => seq,
    };
    let headers = match key {
        Some(key) => headers.with(crate::headers::KEY, key.to_owned()),
        None => headers,
    };
    let unit = Unit::new(id, payload)
        .with_delivery_count(count)
        .with_headers(headers);
    match stamp {
        Some(stamp) => unit.with_stamp(stamp),
        None => unit,
    }
}

/// A claimed outbox record, as stored: id, topic, optional key, payload bytes, and how many
/// attempts to relay it have failed so far (counted in the record, never in the process).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Record {
    id: RecordId,
    topic: Arc<str>,
    key: Option<Arc<str>>,
    payload: Bytes,
    attempts: u32,
    stamp: Option<Stamp>,
    headers: Headers,
}

impl Record {
    /// A record as a store read it back.
    pub fn new(
        id: impl Into<RecordId>,
        topic: impl Into<Arc<str>>,
        key: Option<String>,
        payload: impl Into<Bytes>,
        attempts: u32,
    ) -> Self {
        Record {
            id: id.into(),
            topic: topic.into(),
            key: key.map(Into::into),
            payload: payload.into(),
            attempts,
            stamp: None,
            headers: Headers::default(),
        }
    }

    /// The record with its place in the outbox's order: its stamp (rule 4).
    pub fn with_stamp(mut self, stamp: Stamp) -> Self {
        self.stamp = Some(stamp);
        self
    }

    /// Sets the headers written with the record (its trace context: see [`crate::trace`]).
    pub fn with_headers(mut self, headers: Headers) -> Self {
        self.headers = headers;
        self
    }

    /// The id fixed at write time.
    pub fn id(&self) -> &RecordId {
        &self.id
    }

    /// Where it goes: an exchange, a topic, an endpoint's name.
    pub fn topic(&self) -> &str {
        &self.topic
    }

    /// The routing or partitioning key, if the writer gave one.
    pub fn key(&self) -> Option<&str> {
        self.key.as_deref()
    }

    /// The payload exactly as written.
    pub fn payload(&self) -> &Bytes {
        &self.payload
    }

    /// How many earlier attempts there were (0 on the first): attempts that failed, and attempts
    /// cut short by a relay that died. Each is counted in the store when the record is claimed,
    /// before the relay function runs, so a record whose attempt kills the relay still reaches
    /// `max_attempts`.
    pub fn attempts(&self) -> u32 {
        self.attempts
    }

    /// The record's place in its outbox's order (the table's sequence), which every sink sends as
    /// the [`headers::STAMP`](crate::headers::STAMP) header, so a consumer's store can refuse an
    /// older record arriving after a newer one (rule 4). A record redriven from the dead keeps
    /// its place.
    pub fn stamp(&self) -> Option<Stamp> {
        self.stamp
    }

    /// The headers written with the record: the W3C trace context (`traceparent`, `tracestate`)
    /// of the span it was written in (feature `opentelemetry`), which sinks send on.
    pub fn headers(&self) -> &Headers {
        &self.headers
    }
}

/// A relay function's record parameter: the claimed record with its payload decoded from JSON.
/// It dereferences to the decoded payload; the raw bytes stay available, so a sink sends exactly
/// what was written.
///
/// A payload that does not decode never reaches the function: the record is marked dead with
/// reason `malformed` at once (nothing retries it into success).
#[derive(Clone, Debug)]
pub struct OutboxRecord<T> {
    record: Record,
    payload: T,
}

impl<T> OutboxRecord<T> {
    /// The record as stored (id, topic, key, raw payload, attempts).
    pub fn record(&self) -> &Record {
        &self.record
    }

    /// The id fixed at write time: what every attempt sends as the message id.
    pub fn id(&self) -> &RecordId {
        self.record.id()
    }

    /// The decoded payload.
    pub fn payload(&self) -> &T {
        &self.payload
    }

    /// The decoded payload, owned.
    pub fn into_payload(self) -> T {
        self.payload
    }
}

impl<T> Deref for OutboxRecord<T> {
    type Target = T;
    fn deref(&self) -> &T {
        &self.payload
    }
}

/// A relay function parameter resolved from the claimed record and the relay's shared state `S`.
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be a relay function parameter: it is not resolved from the outbox record or the shared state",
    label = "not a relay extractor",
    note = "relay parameters are `OutboxRecord<T>`, `State<S>`, `RecordId`, or a type implementing `FromRecord`",
    note = "a clock or an id minter is never a parameter (rule 6): the record's id was fixed when it was written"
)]
pub trait FromRecord<S>: Sized {
    /// Resolves the parameter; a failure marks the record dead as malformed.
    fn from_record(record: &Record, state: &S) -> Result<Self, Malformed>;
}

impl<T: DeserializeOwned, S> FromRecord<S> for OutboxRecord<T> {
    fn from_record(record: &Record, _: &S) -> Result<Self, Malformed> {
        Ok(OutboxRecord {
            payload: decode_json(record.payload())?,
            record: record.clone(),
        })
    }
}

impl<S: Clone> FromRecord<S> for State<S> {
    fn from_record(_: &Record, state: &S) -> Result<Self, Malformed> {
        Ok(State(state.clone()))
    }
}

impl<S> FromRecord<S> for RecordId {
    fn from_record(record: &Record, _: &S) -> Result<Self, Malformed> {
        Ok(record.id().clone())
    }
}

impl<S> FromRecord<S> for Record {
    fn from_record(record: &Record, _: &S) -> Result<Self, Malformed> {
        Ok(record.clone())
    }
}

/// Proof that a receiver acknowledged a record: a publisher confirm `Ack` with nothing returned,
/// an HTTP 2xx, a delivery report without error.
///
/// Only a sink of this crate produces one, and only once the receiver confirmed; a relay
/// function must return it, and the relay marks a record delivered only for a receipt naming
/// that record. No code outside this crate can make one up.
#[derive(Debug, PartialEq, Eq)]
#[must_use = "a receipt is what lets the relay mark the record delivered: return it"]
pub struct Receipt {
    record: RecordId,
}

impl Receipt {
    /// Made by a sink once the receiver confirmed `record`. A build without any sink (no
    /// `lapin`, `kafka`, `http`, and no test-only `testing::MemorySink`) makes none.
    pub fn confirmed(record: RecordId) -> Self {
        Receipt { record }
    }

    /// The record the receiver confirmed.
    pub fn record(&self) -> &RecordId {
        &self.record
    }
}

/// How one attempt to relay a record ended.
#[derive(Debug)]
pub enum Attempt {
    /// The receiver confirmed: mark the record delivered.
    Delivered(Receipt),
    /// The function failed: retry after a backoff ([`HandlerError::retry`], `?`), or mark the
    /// record dead now ([`HandlerError::reject`]).
    Failed(HandlerError),
    /// The payload did not decode into the function's parameters: the record is dead.
    Malformed(Malformed),
}

/// A relay function's return value, turned into an [`Attempt`]. Implemented for
/// `Result<Receipt, E>` with `E: Into<HandlerError>` only.
#[diagnostic::on_unimplemented(
    message = "a relay function returning `{Self}` does not prove the receiver confirmed the record (rule 6)",
    label = "not `Result<Receipt, _>`",
    note = "return `Result<Receipt, E>`: a `Receipt` comes only from a sink (`send(..).await?`), once the receiver acknowledged; the relay marks the record delivered only then"
)]
pub trait IntoAttempt {
    /// The attempt this value stands for.
    fn into_attempt(self) -> Attempt;
}

impl<E: Into<HandlerError>> IntoAttempt for Result<Receipt, E> {
    #[inline]
    fn into_attempt(self) -> Attempt {
        match self {
            Ok(receipt) => Attempt::Delivered(receipt),
            Err(error) => Attempt::Failed(error.into()),
        }
    }
}

/// A relay function over shared state `S`: what `#[relay]` generates around a user's async fn.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a relay function for state `{S}`",
    label = "not a relay function",
    note = "annotate an `async fn(record: OutboxRecord<T>, ..) -> Result<Receipt, E>` with `#[delivery::relay]`"
)]
pub trait Relay<S>: Send + Sync + 'static {
    /// Resolves the parameters from `record` and `state`, then runs the function.
    fn call(&self, record: &Record, state: &S) -> impl Future<Output = Attempt> + Send + 'static;
}

impl AsRef<Record> for Record {
    fn as_ref(&self) -> &Record {
        self
    }
}

impl<T> AsRef<Record> for OutboxRecord<T> {
    fn as_ref(&self) -> &Record {
        &self.record
    }
}
