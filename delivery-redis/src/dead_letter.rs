//! The operator's view of a stream's dead letter: [`DeadLetters`] over the dead-letter stream
//! (`XLEN`, `XRANGE`, `XADD` back to the source, `XDEL`), and the depth gauge.

use std::sync::Arc;
use std::time::{Duration, UNIX_EPOCH};

use ::redis::Value;
use bytes::Bytes;

use crate::codec::{self, Entry, Read};
use crate::codec::{FIELD_ID, FIELD_PAYLOAD};
use crate::connector::{Commands, RedisConnector};
use crate::topology::RedisTopology;
use delivery_core::dead_letter::{
    self, Cursor, DeadLetter, DeadLetterStamp, DeadLetters, Listing, Page, RedriveLog,
    RedriveReport, Republished, Selection,
};
use delivery_core::headers;
use delivery_core::transport::TransportError;
use delivery_core::unit::{DeliveryCount, Headers, Unit, UnitId};

/// The dead-letter stream of one consumed stream, for an operator: it implements
/// [`DeadLetters`].
///
/// - A record's [`position`](DeadLetter::position) is its entry id in the dead-letter stream, so
///   a [`Cursor`] stays valid while other entries come and go; its
///   [`dead_lettered_at`](DeadLetter::dead_lettered_at) is that entry id's millisecond part (the
///   time Redis added it).
/// - The unit's id is its `id` field, else the entry id it had in its source stream
///   ([`delivery_core::headers::DEAD_LETTER_ENTRY_ID`]); its headers are its fields without `payload`,
///   `id` and the `x-dead-letter-*` ones.
/// - A redrive `XADD`s the unit back to its source stream (the recorded
///   [`delivery_core::headers::DEAD_LETTER_SOURCE`], else the topology's stream) with its fields as they
///   were, without the `x-dead-letter-*` ones (so Redis counts its deliveries afresh), and with an
///   `id` field holding its unit id if it had none (so it keeps the id it was dead-lettered
///   under). Every group of the stream receives the new entry, so it carries
///   [`delivery_core::headers::REDRIVE_GROUP`], the group that dead-lettered it
///   ([`delivery_core::headers::DEAD_LETTER_GROUP`]): a [`RedisSource`](super::RedisSource) of another
///   group acknowledges it without handling it, and only that group runs it again. (A reader of
///   the stream that is not a `RedisSource`, or a copy dead-lettered before the group was
///   recorded, sees it as a new entry.) An edited redrive adds it with the operator's `payload`
///   and the edit's fields.
///   Only once Redis answered the `XADD` is the dead-letter entry deleted (`XDEL`); a crash
///   between the two leaves the unit in both, never in neither. A redrive or purge looks at the
///   entries present when it starts, not at those added while it runs (a redriven unit that fails
///   again comes back after them).
/// - A purge deletes the entries for good (`XDEL`).
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::transport::TransportError> {
/// use delivery::dead_letter::{DeadLetters, Selection};
/// use delivery::redis::{RedisDeadLetters, RedisTopology};
///
/// let topology = RedisTopology::new("orders", "billing");
/// let dead = RedisDeadLetters::new("redis://127.0.0.1:6379", &topology)?;
/// for record in dead.list(10, None).await?.records {
///     println!("{record}");
/// }
/// // Back to `orders`, under the same unit id, once the bug is fixed.
/// let report = dead.redrive(Selection::All).await?;
///
/// // The same on your own (reconnecting) connection:
/// let manager = delivery::redis::connect("redis://127.0.0.1:6379").await?;
/// let yours = RedisDeadLetters::new(manager, &topology)?;
/// println!("{} dead", yours.count().await?);
/// # let _ = report; Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisDeadLetters {
    stream: String,
    dead_letter_stream: String,
    commands: Arc<Commands>,
}

impl std::fmt::Debug for RedisDeadLetters {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisDeadLetters")
            .field("stream", &self.stream)
            .field("dead_letter_stream", &self.dead_letter_stream)
            .finish_non_exhaustive()
    }
}

/// Entries read per `XRANGE` while a redrive, purge or peek scans the dead letter.
const PAGE: usize = 100;

/// A scan of the entries a dead letter holds when it starts, a page at a time: the entries
/// added while it runs (a redriven unit dead-lettered again) are not seen.
#[derive(Default)]
pub struct Scan {
    /// The newest entry when the scan started, read with its first page.
    last: Option<String>,
    /// The last entry seen.
    after: Option<String>,
    done: bool,
}

impl RedisDeadLetters {
    /// The dead letter of `topology.stream` through `connector`: a URL, your `redis::Client`,
    /// or your own connection ([`RedisConnector`]). Connects on first use; fails only on a URL
    /// that does not parse.
    pub fn new(
        connector: impl Into<RedisConnector>,
        topology: &RedisTopology,
    ) -> Result<Self, TransportError> {
        Ok(RedisDeadLetters {
            stream: topology.stream.clone(),
            dead_letter_stream: topology.dead_letter_stream_name(),
            commands: Arc::new(Commands::new(connector.into().resolve()?)),
        })
    }

    async fn run<T: ::redis::FromRedisValue>(
        &self,
        what: &'static str,
        command: &::redis::Cmd,
    ) -> Result<T, TransportError> {
        self.commands.run(what, command).await
    }

    /// Up to `count` entries after the entry `after` (from the first with `None`) up to the entry
    /// `last` (inclusive), oldest first.
    async fn range(
        &self,
        after: Option<&str>,
        last: &str,
        count: usize,
    ) -> Result<Vec<Entry>, TransportError> {
        const WHAT: &str = "reading the dead letter (XRANGE)";
        let mut range = ::redis::cmd("XRANGE");
        range
            .arg(&self.dead_letter_stream)
            .arg(after.map_or_else(|| "-".to_owned(), |id| format!("({id}")))
            .arg(last)
            .arg("COUNT")
            .arg(count);
        self.entries(WHAT, "XRANGE", &range).await
    }

    /// The id of the newest entry (`XREVRANGE + - COUNT 1`), where a scan of the entries present
    /// now stops; `None` when the dead letter is empty.
    async fn newest(&self) -> Result<Option<String>, TransportError> {
        const WHAT: &str = "reading the dead letter's newest entry (XREVRANGE)";
        let mut range = ::redis::cmd("XREVRANGE");
        range
            .arg(&self.dead_letter_stream)
            .arg("+")
            .arg("-")
            .arg("COUNT")
            .arg(1);
        let newest = self.entries(WHAT, "XREVRANGE", &range).await?;
        Ok(newest.into_iter().next().map(|entry| entry.id))
    }

    /// The entries a range command's reply lists.
    async fn entries(
        &self,
        what: &'static str,
        name: &'static str,
        command: &::redis::Cmd,
    ) -> Result<Vec<Entry>, TransportError> {
        let reply: Value = self.run(what, command).await?;
        let shape = codec::Shape::of(name, &reply);
        let read =
            codec::entries(reply).ok_or_else(|| TransportError::msg(what, shape.to_string()))?;
        Ok(read
            .into_iter()
            .filter_map(|read| match read {
                Read::Entry(entry) => Some(entry),
                Read::Deleted(_) => None,
            })
            .collect())
    }

    /// The next page of `scan`, each entry with its record; `None` once it saw them all.
    async fn next_page(
        &self,
        scan: &mut Scan,
    ) -> Result<Option<Vec<(Entry, DeadLetter)>>, TransportError> {
        if scan.done {
            return Ok(None);
        }
        let last = match &scan.last {
            Some(last) => last.clone(),
            None => match self.newest().await? {
                Some(last) => scan.last.insert(last).clone(),
                None => {
                    scan.done = true;
                    return Ok(None);
                }
            },
        };
        let page = self.range(scan.after.as_deref(), &last, PAGE).await?;
        scan.done = page.len() < PAGE;
        let Some(newest) = page.last() else {
            return Ok(None);
        };
        scan.after = Some(newest.id.clone());
        Ok(Some(
            page.into_iter()
                .map(|entry| {
                    let record = self.record(&entry);
                    (entry, record)
                })
                .collect(),
        ))
    }

    /// Deletes the entries `ids` (`XDEL`); returns how many were there.
    async fn delete(&self, ids: &[&str]) -> Result<u64, TransportError> {
        if ids.is_empty() {
            return Ok(0);
        }
        let mut del = ::redis::cmd("XDEL");
        del.arg(&self.dead_letter_stream).arg(ids);
        self.run("deleting from the dead letter (XDEL)", &del).await
    }

    /// Adds `entry`'s unit back to `target` as a new entry: its own fields, and its unit `id`;
    /// edited to `edit`, if given: that payload, and the edit's fields in place of any earlier
    /// edit's.
    async fn republish(
        &self,
        entry: &Entry,
        id: &UnitId,
        target: &str,
        edit: Option<&Bytes>,
    ) -> Result<(), TransportError> {
        let mut add = ::redis::cmd("XADD");
        add.arg(target).arg("*");
        if codec::field(&entry.fields, FIELD_ID).is_none() {
            add.arg(FIELD_ID).arg(id.as_str());
        }
        // For the group that dead-lettered it alone: the other groups' sources skip it.
        let group = codec::field(&entry.fields, headers::DEAD_LETTER_GROUP);
        if let Some(group) = group {
            add.arg(headers::REDRIVE_GROUP).arg(group.as_ref());
        }
        let replaced = |name: &[u8]| {
            name == headers::REDRIVE_GROUP.as_bytes()
                || (edit.is_some()
                    && (name == FIELD_PAYLOAD.as_bytes()
                        || std::str::from_utf8(name).is_ok_and(headers::is_edit)))
        };
        for (name, value) in &entry.fields {
            if !codec::is_transport_field(name) && !replaced(name.as_ref()) {
                add.arg(name.as_ref()).arg(value.as_ref());
            }
        }
        if let Some(payload) = edit {
            let original = codec::field(&entry.fields, FIELD_PAYLOAD)
                .cloned()
                .unwrap_or_default();
            add.arg(FIELD_PAYLOAD).arg(payload.as_ref());
            for (name, value) in delivery_core::transport::edit_headers(&original) {
                add.arg(name).arg(value);
            }
        }
        self.run::<Value>("redriving (XADD)", &add).await?;
        Ok(())
    }

    /// The record of a dead-letter entry.
    fn record(&self, entry: &Entry) -> DeadLetter {
        let fields = &entry.fields;
        let text = |name: &str| codec::field_str(fields, name);
        let id = codec::unit_id(
            fields,
            text(headers::DEAD_LETTER_ENTRY_ID).unwrap_or(&entry.id),
        );
        let payload = codec::field(fields, FIELD_PAYLOAD)
            .cloned()
            .unwrap_or_default();
        let own = codec::headers(fields);
        let own = if own.iter().any(|(name, _)| headers::is_dead_letter(name)) {
            Headers::from_pairs(
                own.iter()
                    .filter(|(name, _)| !headers::is_dead_letter(name))
                    .map(|(name, value)| (name.to_owned(), value.clone())),
            )
        } else {
            own
        };
        let written = DeadLetterStamp::read(|name| text(name).map(Into::into));
        let count = written.delivery_count.unwrap_or(DeliveryCount::FIRST);
        let unit = Unit::new(id, payload)
            .with_headers(own)
            .with_delivery_count(count);
        // The stamp the copy kept, else its first entry's id (a copy from before stamps).
        let stamp = match codec::field(fields, headers::STAMP) {
            Some(value) => headers::parse_stamp(value),
            None => text(headers::DEAD_LETTER_ENTRY_ID).and_then(codec::entry_id_stamp),
        };
        let unit = match stamp {
            Some(stamp) => unit.with_stamp(stamp),
            None => unit,
        };
        let source = written.source.unwrap_or_else(|| self.stream.clone());
        let mut record = DeadLetter::new(unit, source, entry.id.clone());
        record.reason = written.reason;
        record.detail = written.detail.unwrap_or_default();
        record.dead_lettered_at = entry
            .id
            .split_once('-')
            .and_then(|(millis, _)| millis.parse().ok())
            .map(|millis| UNIX_EPOCH + Duration::from_millis(millis));
        record
    }
}

impl DeadLetters for RedisDeadLetters {
    /// The dead-letter stream's name.
    fn name(&self) -> &str {
        &self.dead_letter_stream
    }

    /// Entries in the dead-letter stream (`XLEN`).
    async fn count(&self) -> Result<u64, TransportError> {
        let mut len = ::redis::cmd("XLEN");
        len.arg(&self.dead_letter_stream);
        let depth: u64 = self
            .run("reading the dead letter's depth (XLEN)", &len)
            .await?;
        delivery_core::transport::record_depth(&self.dead_letter_stream, depth);
        Ok(depth)
    }

    /// One `XRANGE` after the cursor's entry id.
    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        if limit == 0 {
            return Ok(Listing::page(Vec::new(), false));
        }
        let mut page = self
            .range(after.map(Cursor::as_str), "+", limit.saturating_add(1))
            .await?;
        let more = page.len() > limit;
        page.truncate(limit);
        Ok(Listing::page(
            page.iter().map(|entry| self.record(entry)).collect(),
            more,
        ))
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        let mut scan = Scan::default();
        while let Some(page) = self.next_page(&mut scan).await? {
            if let Some((_, record)) = page.into_iter().find(|(_, record)| record.id() == id) {
                return Ok(Some(record));
            }
        }
        Ok(None)
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        dead_letter::redrive(self, selection).await
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        let mut purged = 0;
        let mut scan = Scan::default();
        while !ids.is_empty()
            && let Some(page) = self.next_page(&mut scan).await?
        {
            let matching: Vec<&str> = page
                .iter()
                .filter(|(_, record)| ids.contains(record.id()))
                .map(|(entry, _)| entry.id.as_str())
                .collect();
            purged += self.delete(&matching).await?;
        }
        Ok(purged)
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        dead_letter::redrive_edited(self, id, payload).await
    }
}

/// A redrive's primitives: a scan of the entries present when it starts, `XADD` back to the
/// source, `XDEL` of the dead-letter entry.
impl RedriveLog for RedisDeadLetters {
    type Pass = Scan;
    type Entry = Entry;

    async fn open(&self) -> Result<Scan, TransportError> {
        Ok(Scan::default())
    }

    async fn next_page(&self, scan: &mut Scan) -> Result<Page<Entry>, TransportError> {
        let page = RedisDeadLetters::next_page(self, scan).await?;
        Ok((page.unwrap_or_default(), !scan.done))
    }

    async fn republish(
        &self,
        _: &mut Scan,
        entry: &Entry,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> Result<Republished, TransportError> {
        RedisDeadLetters::republish(self, entry, record.id(), &record.source, edit).await?;
        Ok(Republished::Confirmed)
    }

    async fn remove(&self, _: &mut Scan, entry: Entry) -> Result<(), TransportError> {
        self.delete(&[entry.id.as_str()]).await.map(drop)
    }
}

impl From<RedisDeadLetters> for delivery_core::dead_letter::AnyDeadLetters {
    fn from(dead_letters: RedisDeadLetters) -> Self {
        delivery_core::dead_letter::AnyDeadLetters::new(dead_letters)
    }
}
