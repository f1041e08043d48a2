//! The operator's view of a stream's dead letter: count, list and peek without consuming, redrive
//! back to the source stream under the same unit id, and the depth gauge.

use std::sync::{Arc, Mutex};
use std::time::Duration;

use ::redis::Value;
use ::redis::aio::MultiplexedConnection;
use bytes::Bytes;

use super::entry::{self, Entry, Read};
use super::topology::RedisTopology;
use super::{COMMAND_TIMEOUT, FIELD_ID, FIELD_PAYLOAD};
use crate::disposition::ReasonKind;
use crate::transport::TransportError;
use crate::unit::{Headers, UnitId};

/// One unit in the dead-letter stream, as read without removing it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct DeadLetterRecord {
    /// The entry's id in the dead-letter stream (what [`RedisDeadLetters::remove`] takes).
    pub entry_id: String,
    /// The unit's id: its `id` field, else the entry id it had in its source stream.
    pub id: UnitId,
    /// The `payload` field, byte for byte as it was read (empty if the entry had none).
    pub payload: Bytes,
    /// Every field but `payload` and `id`, including the `x-dead-letter-*` ones.
    pub headers: Headers,
    /// Every field, in order, exactly as stored.
    pub fields: Vec<(Bytes, Bytes)>,
    /// Why it was dead-lettered.
    pub reason: Option<ReasonKind>,
    /// The reason's detail, as the consumer recorded it.
    pub detail: Option<String>,
    /// The stream it came from.
    pub source: Option<String>,
    /// The entry id it had in that stream.
    pub source_entry_id: Option<String>,
    /// Redis's delivery count (times delivered) when it was dead-lettered.
    pub delivery_count: Option<u32>,
}

/// What a redrive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// Units added back to their source stream (and then deleted from the dead letter).
    pub moved: Vec<UnitId>,
    /// Units looked at and left in the dead letter.
    pub kept: usize,
}

/// The dead-letter stream of one consumed stream, for an operator.
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::TransportError> {
/// use delivery::redis::{RedisDeadLetters, RedisTopology};
///
/// let topology = RedisTopology::new("orders", "billing");
/// let dead = RedisDeadLetters::new("redis://127.0.0.1:6379", &topology)?;
/// for record in dead.peek(10).await? {
///     println!("{} {:?}: {:?}", record.id, record.reason, record.detail);
/// }
/// // Back to `orders`, under the same unit id, once the bug is fixed.
/// let report = dead.redrive(|r| r.reason == Some(delivery::ReasonKind::Exhausted)).await?;
/// # let _ = report; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisDeadLetters {
    client: ::redis::Client,
    stream: String,
    dead_letter_stream: String,
    connection: Arc<Mutex<Option<MultiplexedConnection>>>,
}

impl std::fmt::Debug for RedisDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDeadLetters")
            .field("stream", &self.stream)
            .field("dead_letter_stream", &self.dead_letter_stream)
            .finish_non_exhaustive()
    }
}

const PAGE: usize = 100;

impl RedisDeadLetters {
    /// The dead letter of `topology.stream` on the server at `url`. Connects on first use.
    pub fn new(url: &str, topology: &RedisTopology) -> Result<Self, TransportError> {
        Ok(RedisDeadLetters {
            client: super::client(url)?,
            stream: topology.stream.clone(),
            dead_letter_stream: topology.dead_letter_stream_name(),
            connection: Arc::new(Mutex::new(None)),
        })
    }

    /// The dead-letter stream's name.
    pub fn name(&self) -> &str {
        &self.dead_letter_stream
    }

    async fn run<T: ::redis::FromRedisValue>(
        &self,
        what: &'static str,
        command: &::redis::Cmd,
    ) -> Result<T, TransportError> {
        let cached = self
            .connection
            .lock()
            .unwrap_or_else(|p| p.into_inner())
            .clone();
        let mut connection = match cached {
            Some(connection) => connection,
            None => {
                let connection = super::open(&self.client, Some(COMMAND_TIMEOUT)).await?;
                *self.connection.lock().unwrap_or_else(|p| p.into_inner()) =
                    Some(connection.clone());
                connection
            }
        };
        command.query_async(&mut connection).await.map_err(|error| {
            if error.is_unrecoverable_error() || error.is_connection_dropped() || error.is_timeout()
            {
                *self.connection.lock().unwrap_or_else(|p| p.into_inner()) = None;
            }
            TransportError::new(what, error)
        })
    }

    /// Units in the dead letter (`XLEN`). Also sets the `delivery_dead_letter_depth` gauge
    /// (label `dead_letter`).
    pub async fn count(&self) -> Result<u64, TransportError> {
        let mut len = ::redis::cmd("XLEN");
        len.arg(&self.dead_letter_stream);
        let depth: u64 = self
            .run("reading the dead letter's depth (XLEN)", &len)
            .await?;
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

    /// Up to `n` units from the head (oldest first) of the dead letter, left in it.
    pub async fn peek(&self, n: usize) -> Result<Vec<DeadLetterRecord>, TransportError> {
        self.list(None, n).await
    }

    /// Up to `n` units that follow the entry `after` (a [`DeadLetterRecord::entry_id`]), or
    /// from the head with `None`, oldest first, left in the dead letter: pages through it.
    pub async fn list(
        &self,
        after: Option<&str>,
        n: usize,
    ) -> Result<Vec<DeadLetterRecord>, TransportError> {
        let mut records = Vec::new();
        let mut cursor = after.map(str::to_owned);
        while records.len() < n {
            let page = (n - records.len()).min(PAGE);
            let mut range = ::redis::cmd("XRANGE");
            range
                .arg(&self.dead_letter_stream)
                .arg(match &cursor {
                    Some(id) => format!("({id}"),
                    None => "-".to_owned(),
                })
                .arg("+")
                .arg("COUNT")
                .arg(page);
            let reply: Value = self.run("reading the dead letter (XRANGE)", &range).await?;
            let shape = entry::Shape::of("XRANGE", &reply);
            let read = entry::entries(reply).ok_or_else(|| {
                TransportError::msg("reading the dead letter (XRANGE)", shape.to_string())
            })?;
            let got = read.len();
            for read in read {
                if let Read::Entry(entry) = read {
                    cursor = Some(entry.id.clone());
                    records.push(record(entry));
                }
            }
            if got < page {
                break;
            }
        }
        Ok(records)
    }

    /// Deletes entries from the dead letter (`XDEL`), for units an operator has dealt with.
    /// Returns how many were there.
    pub async fn remove(&self, entry_ids: &[&str]) -> Result<u64, TransportError> {
        if entry_ids.is_empty() {
            return Ok(0);
        }
        let mut del = ::redis::cmd("XDEL");
        del.arg(&self.dead_letter_stream).arg(entry_ids);
        self.run("deleting from the dead letter (XDEL)", &del).await
    }

    /// Moves the units `select` picks back to their source stream (the recorded
    /// `x-dead-letter-source`, or the topology's stream): each is added as a new entry with its
    /// fields as they were, without the `x-dead-letter-*` ones (so Redis counts its deliveries
    /// afresh), and with an `id` field holding its unit id if it had none, so it keeps the id it
    /// was dead-lettered under. Only once Redis answered the `XADD` is the dead-letter entry
    /// deleted; a unit whose `XADD` fails stays in the dead letter and the redrive stops with
    /// the error.
    pub async fn redrive(
        &self,
        mut select: impl FnMut(&DeadLetterRecord) -> bool,
    ) -> Result<RedriveReport, TransportError> {
        let mut report = RedriveReport::default();
        let mut after: Option<String> = None;
        loop {
            let page = self.list(after.as_deref(), PAGE).await?;
            let Some(last) = page.last() else { break };
            after = Some(last.entry_id.clone());
            let full = page.len() == PAGE;
            for record in page {
                if !select(&record) {
                    report.kept += 1;
                    continue;
                }
                let target = record.source.clone().unwrap_or_else(|| self.stream.clone());
                let mut add = ::redis::cmd("XADD");
                add.arg(&target).arg("*");
                if entry::field(&record.fields, FIELD_ID).is_none() {
                    add.arg(FIELD_ID).arg(record.id.as_str());
                }
                for (name, value) in &record.fields {
                    if !entry::is_transport_field(name) {
                        add.arg(name.as_ref()).arg(value.as_ref());
                    }
                }
                self.run::<Value>("redriving (XADD)", &add)
                    .await
                    .map_err(|e| {
                        TransportError::msg(
                            "redriving",
                            format!(
                                "{} was not added to `{target}` and stays in the dead letter: {e}",
                                record.id
                            ),
                        )
                    })?;
                self.remove(&[record.entry_id.as_str()]).await.map_err(|e| {
                    TransportError::msg(
                        "redriving",
                        format!(
                            "{} was added to `{target}` but not deleted from the dead letter ({e}); it is in both",
                            record.id
                        ),
                    )
                })?;
                report.moved.push(record.id);
            }
            if !full {
                break;
            }
        }
        Ok(report)
    }
}

fn record(entry: Entry) -> DeadLetterRecord {
    let Entry { id, fields } = entry;
    let text = |name: &str| entry::field_str(&fields, name).map(str::to_owned);
    let source_entry_id = text(crate::headers::DEAD_LETTER_ENTRY_ID);
    DeadLetterRecord {
        id: entry::unit_id(&fields, source_entry_id.as_deref().unwrap_or(&id)),
        payload: entry::field(&fields, FIELD_PAYLOAD)
            .cloned()
            .unwrap_or_default(),
        headers: entry::headers(&fields),
        reason: text(crate::headers::DEAD_LETTER_REASON).and_then(|r| ReasonKind::parse(&r)),
        detail: text(crate::headers::DEAD_LETTER_DETAIL),
        source: text(crate::headers::DEAD_LETTER_SOURCE),
        delivery_count: text(crate::headers::DEAD_LETTER_DELIVERY_COUNT)
            .and_then(|c| c.parse().ok()),
        source_entry_id,
        entry_id: id,
        fields,
    }
}
