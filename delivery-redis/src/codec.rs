//! Stream entries as Redis returns them (RESP2 arrays or RESP3 maps), and the unit an entry is.

use ::redis::Value;
use bytes::Bytes;

use delivery_core::headers;
use delivery_core::unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// The field holding the unit's payload.
pub const FIELD_PAYLOAD: &str = "payload";
/// The field holding the producer-supplied unit id.
pub const FIELD_ID: &str = "id";

/// One stream entry: its id and its fields, in order, exactly as stored (names may repeat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Entry {
    pub(crate) id: String,
    pub(crate) fields: Vec<(Bytes, Bytes)>,
}

/// An entry of a reply, or the id of one that no longer exists (a pending entry trimmed away).
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Read {
    Entry(Entry),
    Deleted(String),
}

/// What a reply looked like — its kind and length, taken before it is parsed without formatting
/// it — for the error if it does not have the shape the command documents. (Formatting every
/// reply up front cost more than the rest of a unit's receipt.)
#[derive(Clone, Copy, Debug)]
pub(crate) struct Shape {
    what: &'static str,
    kind: &'static str,
    len: Option<usize>,
}

impl Shape {
    pub(crate) fn of(what: &'static str, value: &Value) -> Shape {
        let (kind, len) = match value {
            Value::Nil => ("nil", None),
            Value::Int(_) => ("an integer", None),
            Value::BulkString(b) => ("a bulk string", Some(b.len())),
            Value::Array(items) => ("an array", Some(items.len())),
            Value::Map(pairs) => ("a map", Some(pairs.len())),
            Value::Set(items) => ("a set", Some(items.len())),
            Value::SimpleString(_) | Value::Okay => ("a simple string", None),
            Value::ServerError(_) => ("an error", None),
            _ => ("another kind of value", None),
        };
        Shape { what, kind, len }
    }
}

impl std::fmt::Display for Shape {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "unexpected reply to {}: {}", self.what, self.kind)?;
        match self.len {
            Some(len) => write!(f, " of {len} (not the shape the command documents)"),
            None => write!(f, " (not the shape the command documents)"),
        }
    }
}

/// The bytes of a string reply.
pub(crate) fn bytes(value: Value) -> Option<Bytes> {
    match value {
        Value::BulkString(b) => Some(Bytes::from(b)),
        Value::SimpleString(s) => Some(Bytes::from(s)),
        Value::VerbatimString { text, .. } => Some(Bytes::from(text)),
        Value::Int(n) => Some(Bytes::from(n.to_string())),
        Value::Okay => Some(Bytes::from_static(b"OK")),
        _ => None,
    }
}

/// The text of a string reply.
pub(crate) fn text(value: Value) -> Option<String> {
    bytes(value).and_then(|b| String::from_utf8(b.to_vec()).ok())
}

/// An integer reply (or a string holding one).
pub(crate) fn int(value: &Value) -> Option<i64> {
    match value {
        Value::Int(n) => Some(*n),
        Value::BulkString(b) => std::str::from_utf8(b).ok()?.parse().ok(),
        Value::SimpleString(s) => s.parse().ok(),
        _ => None,
    }
}

fn items(value: Value) -> Option<Vec<Value>> {
    match value {
        Value::Array(items) | Value::Set(items) => Some(items),
        Value::Nil => Some(Vec::new()),
        _ => None,
    }
}

/// One entry: `[id, [field, value, ...]]`, or `[id, nil]` for a deleted one.
pub(crate) fn entry(value: Value) -> Option<Read> {
    let mut parts = items(value)?.into_iter();
    let id = text(parts.next()?)?;
    let fields = match parts.next()? {
        Value::Nil => return Some(Read::Deleted(id)),
        Value::Map(pairs) => pairs
            .into_iter()
            .map(|(k, v)| Some((bytes(k)?, bytes(v)?)))
            .collect::<Option<Vec<_>>>()?,
        other => {
            let flat = items(other)?;
            if flat.len() % 2 != 0 {
                return None;
            }
            let mut fields = Vec::with_capacity(flat.len() / 2);
            let mut flat = flat.into_iter();
            while let (Some(k), Some(v)) = (flat.next(), flat.next()) {
                fields.push((bytes(k)?, bytes(v)?));
            }
            fields
        }
    };
    Some(Read::Entry(Entry { id, fields }))
}

/// A list of entries (`XRANGE`, one stream of `XREADGROUP`, `XAUTOCLAIM`'s second element).
pub(crate) fn entries(value: Value) -> Option<Vec<Read>> {
    items(value)?.into_iter().map(entry).collect()
}

/// `XREADGROUP`'s reply for one stream: nil on timeout, `[[stream, entries]]` (RESP2) or
/// `{stream: entries}` (RESP3).
pub(crate) fn read_group(value: Value) -> Option<Vec<Read>> {
    let streams = match value {
        Value::Nil => return Some(Vec::new()),
        Value::Map(pairs) => pairs.into_iter().map(|(_, v)| v).collect::<Vec<_>>(),
        other => items(other)?
            .into_iter()
            .map(|stream| items(stream)?.into_iter().nth(1))
            .collect::<Option<Vec<_>>>()?,
    };
    let mut all = Vec::new();
    for stream in streams {
        all.extend(entries(stream)?);
    }
    Some(all)
}

/// `XAUTOCLAIM`'s reply: the next cursor, the claimed entries, and the ids of pending entries that
/// no longer exist (Redis 7 lists them in a third element and drops them from the pending list;
/// Redis 6.2 returns them as nil entries among the claimed).
pub(crate) fn auto_claim(value: Value) -> Option<(String, Vec<Read>)> {
    let mut parts = items(value)?.into_iter();
    let cursor = text(parts.next()?)?;
    let mut claimed = entries(parts.next()?)?;
    if let Some(deleted) = parts.next() {
        for id in items(deleted)? {
            claimed.push(Read::Deleted(text(id)?));
        }
    }
    Some((cursor, claimed))
}

/// The extended `XPENDING` reply for one id and consumer: `[[id, consumer, idle, delivered]]`,
/// or empty when the entry is not pending for that consumer. Returns times delivered.
pub(crate) fn pending_count(value: Value) -> Option<Option<u32>> {
    let Some(first) = items(value)?.into_iter().next() else {
        return Some(None);
    };
    let parts = items(first)?;
    let delivered = int(parts.get(3)?)?;
    Some(Some(u32::try_from(delivered.max(1)).unwrap_or(u32::MAX)))
}

/// The first value of field `name`.
pub(crate) fn field<'a>(fields: &'a [(Bytes, Bytes)], name: &str) -> Option<&'a Bytes> {
    fields
        .iter()
        .find(|(k, _)| k.as_ref() == name.as_bytes())
        .map(|(_, v)| v)
}

/// The first value of field `name`, if UTF-8.
pub(crate) fn field_str<'a>(fields: &'a [(Bytes, Bytes)], name: &str) -> Option<&'a str> {
    field(fields, name).and_then(|v| std::str::from_utf8(v).ok())
}

/// The unit id an entry carries: its `id` field when present (non-empty UTF-8), else `fallback`.
pub(crate) fn unit_id(fields: &[(Bytes, Bytes)], fallback: &str) -> UnitId {
    match field_str(fields, FIELD_ID) {
        Some(id) if !id.is_empty() => UnitId::new(id),
        _ => UnitId::new(fallback),
    }
}

/// The unit's headers: every field but `payload`, `id` and the stamp whose name is UTF-8.
pub(crate) fn headers(fields: &[(Bytes, Bytes)]) -> Headers {
    let named = fields.iter().filter_map(|(k, v)| {
        let name = std::str::from_utf8(k).ok()?;
        (name != FIELD_PAYLOAD && name != FIELD_ID && name != headers::STAMP)
            .then(|| (name.to_owned(), v.clone()))
    });
    let mut named = named.peekable();
    if named.peek().is_none() {
        return Headers::default();
    }
    Headers::from_pairs(named)
}

/// The unit an entry is, on delivery `count`.
pub(crate) fn unit(entry: &Entry, count: DeliveryCount) -> Unit {
    let payload = field(&entry.fields, FIELD_PAYLOAD)
        .cloned()
        .unwrap_or_default();
    let unit = Unit::new(unit_id(&entry.fields, &entry.id), payload)
        .with_delivery_count(count)
        .with_headers(headers(&entry.fields));
    match stamp(entry) {
        Some(stamp) => unit.with_stamp(stamp),
        None => unit,
    }
}

/// The entry's stamp (rule 4): its [`headers::STAMP`] field where its producer set one or a dead
/// letter kept the first entry's, else its entry id.
pub(crate) fn stamp(entry: &Entry) -> Option<Stamp> {
    match field(&entry.fields, headers::STAMP) {
        Some(value) => headers::parse_stamp(value),
        None => entry_id_stamp(&entry.id),
    }
}

/// Bits of a stamp given to an entry id's sequence within its millisecond.
const SEQUENCE_BITS: u32 = 20;

/// An entry id `<ms>-<seq>` as one stamp in the order of the ids: `ms << 20 | seq`. `None` for an
/// id past what that holds (a millisecond past the year 2248, or more than a million entries in
/// one millisecond: only ids set by hand).
pub(crate) fn entry_id_stamp(id: &str) -> Option<Stamp> {
    let (ms, seq) = id.split_once('-')?;
    let (ms, seq): (u64, u64) = (ms.parse().ok()?, seq.parse().ok()?);
    (ms < 1 << (63 - SEQUENCE_BITS) && seq < 1 << SEQUENCE_BITS)
        .then_some(Stamp(ms << SEQUENCE_BITS | seq))
}

/// Fields the transport records on a dead letter, which are not part of the unit's entry.
pub(crate) fn is_transport_field(name: &[u8]) -> bool {
    name.starts_with(b"x-dead-letter-")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn bulk(s: &[u8]) -> Value {
        Value::BulkString(s.to_vec())
    }

    fn raw_entry(id: &str, fields: &[(&[u8], &[u8])]) -> Value {
        Value::Array(vec![
            bulk(id.as_bytes()),
            Value::Array(
                fields
                    .iter()
                    .flat_map(|(k, v)| [bulk(k), bulk(v)])
                    .collect(),
            ),
        ])
    }

    #[test]
    fn an_entry_becomes_a_unit_with_its_id_field_payload_and_headers() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk(b"orders"),
            Value::Array(vec![raw_entry(
                "1-0",
                &[
                    (b"id", b"u-1"),
                    (b"payload", &[0xff, 0x00]),
                    (b"tenant", b"acme"),
                ],
            )]),
        ])]);
        let read = read_group(reply).unwrap();
        let [Read::Entry(entry)] = &read[..] else {
            panic!("{read:?}")
        };
        let unit = unit(entry, DeliveryCount::FIRST);
        assert_eq!(unit.id().as_str(), "u-1");
        assert_eq!(unit.payload().as_ref(), &[0xff, 0x00]);
        assert_eq!(unit.headers().get_str("tenant"), Some("acme"));
        assert_eq!(unit.headers().len(), 1);
    }

    #[test]
    fn an_entry_without_id_field_is_its_entry_id_and_without_payload_is_empty() {
        let Some(Read::Entry(entry)) = entry(raw_entry("7-3", &[(b"a", b"b")])) else {
            panic!()
        };
        let unit = unit(&entry, DeliveryCount::new(2));
        assert_eq!(unit.id().as_str(), "7-3");
        assert!(unit.payload().is_empty());
        assert_eq!(unit.delivery_count().get(), 2);
    }

    #[test]
    fn a_timeout_reads_nothing_and_odd_shapes_are_refused() {
        assert_eq!(read_group(Value::Nil), Some(Vec::new()));
        assert_eq!(entry(Value::Int(3)), None);
        assert_eq!(
            entry(Value::Array(vec![
                bulk(b"1-0"),
                Value::Array(vec![bulk(b"x")])
            ])),
            None
        );
    }

    #[test]
    fn auto_claim_reports_deleted_entries_of_both_versions() {
        let reply = Value::Array(vec![
            bulk(b"0-0"),
            Value::Array(vec![
                raw_entry("1-0", &[(b"payload", b"{}")]),
                Value::Array(vec![bulk(b"2-0"), Value::Nil]),
            ]),
            Value::Array(vec![bulk(b"3-0")]),
        ]);
        let (cursor, read) = auto_claim(reply).unwrap();
        assert_eq!(cursor, "0-0");
        assert!(matches!(&read[0], Read::Entry(e) if e.id == "1-0"));
        assert_eq!(read[1], Read::Deleted("2-0".into()));
        assert_eq!(read[2], Read::Deleted("3-0".into()));
    }

    #[test]
    fn the_stamp_is_the_stamp_field_else_the_entry_id_in_its_order() {
        let a = entry_id_stamp("1700000000000-0").unwrap();
        let b = entry_id_stamp("1700000000000-7").unwrap();
        let c = entry_id_stamp("1700000000001-0").unwrap();
        assert!(a < b && b < c);
        assert_eq!(entry_id_stamp("5-1"), Some(Stamp(5 << 20 | 1)));
        assert_eq!(
            entry_id_stamp("5-99999999"),
            None,
            "a sequence past 20 bits"
        );
        assert_eq!(entry_id_stamp("x"), None);
        let kept = Entry {
            id: "1700000000001-0".into(),
            fields: vec![(
                Bytes::from_static(b"x-delivery-stamp"),
                Bytes::from_static(b"9"),
            )],
        };
        assert_eq!(stamp(&kept), Some(Stamp(9)));
        assert_eq!(unit(&kept, DeliveryCount::FIRST).stamp(), Some(Stamp(9)));
        assert!(
            unit(&kept, DeliveryCount::FIRST)
                .headers()
                .get("x-delivery-stamp")
                .is_none()
        );
    }

    #[test]
    fn pending_count_reads_times_delivered() {
        let reply = Value::Array(vec![Value::Array(vec![
            bulk(b"1-0"),
            bulk(b"c"),
            Value::Int(12),
            Value::Int(4),
        ])]);
        assert_eq!(pending_count(reply), Some(Some(4)));
        assert_eq!(pending_count(Value::Array(vec![])), Some(None));
    }
}
