//! The operator's API over a dead letter: the [`DeadLetters`] trait and what it answers with.

use std::fmt;
use std::future::Future;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use sha2::{Digest, Sha256};

use crate::disposition::ReasonKind;
use crate::transport_error::TransportError;
use crate::unit::{DeliveryCount, Unit, UnitId};

/// The headers an edited redrive writes on a unit whose payload was `original`:
/// [`EDITED`](crate::headers::EDITED) and [`ORIGINAL_SHA256`](crate::headers::ORIGINAL_SHA256).
/// A unit edited again keeps only its latest edit's (the digest of the payload just replaced).
pub fn edit_headers(original: &[u8]) -> [(&'static str, String); 2] {
    [
        (crate::headers::EDITED, "true".to_owned()),
        (
            crate::headers::ORIGINAL_SHA256,
            hex::encode(Sha256::digest(original)),
        ),
    ]
}

/// `unit` as an edited redrive sends it back: `payload` in place of its own, its
/// [`edit_headers`] set, the rest (id, stamp, other headers) as it was.
pub(crate) fn edited(unit: &Unit, payload: Bytes) -> Unit {
    let headers = edit_headers(unit.payload())
        .into_iter()
        .fold(unit.headers().clone(), |headers, (name, value)| {
            headers.with(name, value)
        });
    let mut out = Unit::new(unit.id().clone(), payload)
        .with_headers(headers)
        .with_delivery_count(unit.delivery_count());
    if let Some(stamp) = unit.stamp() {
        out = out.with_stamp(stamp);
    }
    out
}

/// A unit in a dead letter, as an operator reads it. The same record for every transport.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct DeadLetter {
    /// The unit exactly as it was delivered: its id, payload and own headers (without the
    /// `x-dead-letter-*` ones), and as its delivery count the delivery on which it was
    /// dead-lettered (1 where none was recorded).
    pub unit: Unit,
    /// Why it was dead-lettered, as recorded with it; `None` where nothing this crate knows was
    /// recorded (a unit the broker dead-lettered on its own).
    pub reason: Option<ReasonKind>,
    /// The detail of the reason: the decode error, the handler's error. Empty if none.
    pub detail: String,
    /// Where it came from (the queue, stream or topic), where a redrive sends it back. Empty if
    /// unknown.
    pub source: String,
    /// When it was dead-lettered, as the mechanism recorded it (a stream entry's id, a message's
    /// timestamp), where it records one.
    pub dead_lettered_at: Option<SystemTime>,
    /// Where it stands in the dead letter (a stream entry id, a sequence, an offset): what a
    /// [`Cursor`] points after.
    pub position: String,
}

impl DeadLetter {
    /// A record of `unit` dead-lettered from `source` at `position`; the rest is set with the
    /// public fields.
    pub fn new(unit: Unit, source: impl Into<String>, position: impl Into<String>) -> Self {
        DeadLetter {
            unit,
            reason: None,
            detail: String::new(),
            source: source.into(),
            dead_lettered_at: None,
            position: position.into(),
        }
    }

    /// The unit's id.
    pub fn id(&self) -> &UnitId {
        self.unit.id()
    }

    /// The delivery on which the unit was dead-lettered.
    pub fn delivery_count(&self) -> DeliveryCount {
        self.unit.delivery_count()
    }
}

impl fmt::Display for DeadLetter {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let count = self.delivery_count();
        write!(
            f,
            "{id}  from {source}  after {count} deliver{ies}  {reason}: {detail}  payload: {payload}",
            id = self.unit.id(),
            source = self.source,
            ies = if count.get() == 1 { "y" } else { "ies" },
            reason = self.reason.map_or("unknown", ReasonKind::as_str),
            detail = self.detail,
            payload = String::from_utf8_lossy(self.unit.payload()),
        )
    }
}

/// Where a listing goes on from: after the record at this [`DeadLetter::position`].
#[derive(Clone, Debug, PartialEq, Eq, Hash)]
pub struct Cursor(String);

impl Cursor {
    /// A cursor after the record at `position` (a [`DeadLetter::position`], or what
    /// [`Cursor::as_str`] gave, e.g. from a command line).
    pub fn new(position: impl Into<String>) -> Self {
        Cursor(position.into())
    }

    /// The position, to print or to pass on.
    pub fn as_str(&self) -> &str {
        &self.0
    }
}

/// One page of a dead letter, oldest first.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct Listing {
    /// At most the asked-for number of records.
    pub records: Vec<DeadLetter>,
    /// Where the next page starts; `None` once the dead letter has no more.
    pub next: Option<Cursor>,
}

impl Listing {
    /// A page of `records`, followed by more when `more` (the cursor is the last record's
    /// position).
    pub fn page(records: Vec<DeadLetter>, more: bool) -> Self {
        let next = if more {
            records.last().map(|r| Cursor::new(r.position.clone()))
        } else {
            None
        };
        Listing { records, next }
    }
}

/// Which units a [`DeadLetters::redrive`] moves back.
#[derive(Clone, Copy, Debug)]
pub enum Selection<'a> {
    /// The units with these ids (every copy of each).
    Ids(&'a [UnitId]),
    /// Every unit in the dead letter.
    All,
}

impl Selection<'_> {
    /// Whether the unit with `id` is selected.
    pub fn contains(&self, id: &UnitId) -> bool {
        match self {
            Selection::Ids(ids) => ids.contains(id),
            Selection::All => true,
        }
    }
}

/// What a redrive did. The same for every transport.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
#[non_exhaustive]
pub struct RedriveReport {
    /// The ids of the units sent back to their source, in the order they were (one per copy).
    pub redriven: Vec<UnitId>,
    /// Ids asked for by [`Selection::Ids`] that the dead letter does not hold.
    pub not_found: Vec<UnitId>,
}

impl RedriveReport {
    /// The report of a redrive of `selection` that moved `redriven`.
    pub fn of(selection: Selection<'_>, redriven: Vec<UnitId>) -> Self {
        let not_found = match selection {
            Selection::Ids(ids) => ids
                .iter()
                .filter(|id| !redriven.contains(id))
                .cloned()
                .collect(),
            Selection::All => Vec::new(),
        };
        RedriveReport {
            redriven,
            not_found,
        }
    }
}

/// A dead letter an operator reads and redrives: the one API every transport's dead letter
/// implements (see the [module docs](crate::dead_letter)).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a dead letter an operator can read",
    note = "every transport's dead letter implements `DeadLetters`: RabbitDeadLetters, RedisDeadLetters, NatsDeadLetters, KafkaDeadLetters, MemoryDeadLetters"
)]
pub trait DeadLetters: Send + Sync {
    /// The dead letter's name: its queue, stream, topic or table.
    fn name(&self) -> &str;

    /// How many units it holds. Also records the `delivery_dead_letter_depth` gauge.
    fn count(&self) -> impl Future<Output = Result<u64, TransportError>> + Send;

    /// Up to `limit` records, oldest first, after `after` (from the start when `None`), without
    /// removing them.
    fn list(
        &self,
        limit: usize,
        after: Option<&Cursor>,
    ) -> impl Future<Output = Result<Listing, TransportError>> + Send;

    /// The record of the unit with `id`, without removing it; the oldest if several copies are
    /// held.
    fn peek(
        &self,
        id: &UnitId,
    ) -> impl Future<Output = Result<Option<DeadLetter>, TransportError>> + Send;

    /// Sends the selected units back to their source under their own ids, each removed from the
    /// dead letter only once the source holds it.
    fn redrive(
        &self,
        selection: Selection<'_>,
    ) -> impl Future<Output = Result<RedriveReport, TransportError>> + Send;

    /// Removes the units with `ids` for good. Returns how many records were removed.
    fn purge(&self, ids: &[UnitId]) -> impl Future<Output = Result<u64, TransportError>> + Send;

    /// Sends the unit with `id` back to its source as [`redrive`](Self::redrive) does — same id,
    /// stamp and headers, its deliveries counted afresh, removed from the dead letter only once the
    /// source holds it — but with `payload` in place of its own, and the edit recorded in its
    /// headers: [`EDITED`](crate::headers::EDITED) `true` and
    /// [`ORIGINAL_SHA256`](crate::headers::ORIGINAL_SHA256), the lowercase hex SHA-256 of the
    /// payload it replaced. Every copy the dead letter holds of that id is sent back so, each with
    /// its own original's digest.
    ///
    /// `false`: the dead letter holds no unit with `id`, and nothing changed.
    fn redrive_edited(
        &self,
        id: &UnitId,
        payload: Bytes,
    ) -> impl Future<Output = Result<bool, TransportError>> + Send;

    /// Keeps the `delivery_dead_letter_depth` gauge current: reads [`count`](Self::count) (which
    /// records it) every `every`, until the returned task is aborted; a failed read is logged and
    /// tried again at the next interval.
    fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()>
    where
        Self: Clone + 'static,
    {
        let this = self.clone();
        super::depth::watch(self.name().to_owned(), every, move || {
            let this = this.clone();
            async move { this.count().await }
        })
    }
}
