//! NATS headers: the unit's id and headers, and the headers the dead letter records.

use async_nats::HeaderMap;
use async_nats::header::{HeaderValue, NATS_MESSAGE_ID};
use bytes::Bytes;

use delivery_core::dead_letter::DeadLetterStamp;
use delivery_core::unit::{Headers, Stamp, UnitId};

/// The unit's id: its producer's `Nats-Msg-Id`, else `<stream>:<sequence>`.
pub(crate) fn unit_id(headers: Option<&HeaderMap>, stream: &str, sequence: u64) -> UnitId {
    match headers.and_then(|h| h.get_last(NATS_MESSAGE_ID)) {
        Some(id) if !id.as_str().is_empty() => UnitId::new(id.as_str()),
        _ => sequence_id(stream, sequence),
    }
}

/// The id of a unit published without `Nats-Msg-Id`: its place in its stream.
pub(crate) fn sequence_id(stream: &str, sequence: u64) -> UnitId {
    // Written out by hand: this runs for every unit, and `format!` cost about as much as the
    // rest of building the unit.
    let mut digits = [0u8; 20];
    let mut at = digits.len();
    let mut n = sequence;
    loop {
        at -= 1;
        digits[at] = b'0' + (n % 10) as u8;
        n /= 10;
        if n == 0 {
            break;
        }
    }
    let digits = std::str::from_utf8(&digits[at..]).unwrap_or_default();
    let mut id = String::with_capacity(stream.len() + 1 + digits.len());
    id.push_str(stream);
    id.push(':');
    id.push_str(digits);
    UnitId::new(id)
}

/// The headers a producer publishes `unit` with, for the NATS source to read it back as it is:
/// its headers, its id as `Nats-Msg-Id` (JetStream's deduplication), and its
/// [`Stamp`](delivery_core::Stamp), if it has one, as [`delivery_core::headers::STAMP`] (without one, the
/// stream sequence is its stamp).
///
/// ```
/// use delivery::{Stamp, Unit};
///
/// let unit = Unit::new("order-1", "{}").with_stamp(Stamp(7));
/// let headers = delivery::nats::headers_of(&unit);
/// assert_eq!(headers.get("Nats-Msg-Id").map(|v| v.as_str()), Some("order-1"));
/// assert_eq!(headers.get("x-delivery-stamp").map(|v| v.as_str()), Some("7"));
/// ```
pub fn headers_of(unit: &delivery_core::Unit) -> HeaderMap {
    let mut headers = HeaderMap::new();
    for (name, value) in unit.headers().iter() {
        headers.insert(name, text(&String::from_utf8_lossy(value)));
    }
    headers.insert(NATS_MESSAGE_ID, unit.id().as_str());
    if let Some(stamp) = unit.stamp() {
        headers.insert(delivery_core::headers::STAMP, stamp.0.to_string());
    }
    headers
}

/// The unit's stamp (rule 4): the [`delivery_core::headers::STAMP`] its producer set or its dead letter
/// kept, else `sequence`, its place in the stream.
pub(crate) fn stamp(headers: Option<&HeaderMap>, sequence: u64) -> Option<Stamp> {
    match last(headers, delivery_core::headers::STAMP) {
        Some(value) => delivery_core::headers::parse_stamp(value.as_bytes()),
        None => Some(Stamp(sequence)),
    }
}

/// The unit's headers: every header, by its last value.
pub(crate) fn unit_headers(headers: Option<&HeaderMap>) -> Headers {
    match headers {
        None => Headers::default(),
        Some(map) if map.is_empty() => Headers::default(),
        Some(map) => Headers::from_pairs(map.iter().filter_map(|(name, values)| {
            let value = values.last()?;
            Some((
                AsRef::<str>::as_ref(name).to_owned(),
                Bytes::copy_from_slice(value.as_str().as_bytes()),
            ))
        })),
    }
}

/// A header value from free text: NATS header values cannot hold CR or LF.
pub(crate) fn text(s: &str) -> HeaderValue {
    let clean: String = s
        .chars()
        .map(|c| if c == '\r' || c == '\n' { ' ' } else { c })
        .collect();
    HeaderValue::from(clean)
}

/// Where a unit came from and why it is dead-lettered: the dead letter's own headers.
pub(crate) struct DeadLetterOrigin<'a> {
    /// Why, from which stream, on which delivery.
    pub(crate) stamp: DeadLetterStamp,
    pub(crate) subject: &'a str,
    pub(crate) sequence: u64,
    /// The durable consumer that dead-letters it: a redrive is for it alone.
    pub(crate) group: &'a str,
}

/// The unit's own headers, every value kept, with the dead letter's added (replacing any earlier
/// ones, as after a redrive).
pub(crate) fn dead_letter_headers(
    unit: Option<&HeaderMap>,
    origin: &DeadLetterOrigin<'_>,
) -> HeaderMap {
    let mut headers = unit.cloned().unwrap_or_default();
    // The unit's place in its stream is its stamp: kept, for a redrive to carry (rule 4).
    if last(unit, delivery_core::headers::STAMP).is_none() {
        headers.insert(delivery_core::headers::STAMP, origin.sequence.to_string());
    }
    for (name, value) in origin.stamp.headers() {
        headers.insert(name, text(&value));
    }
    headers.insert(
        delivery_core::headers::DEAD_LETTER_SUBJECT,
        text(origin.subject),
    );
    headers.insert(
        delivery_core::headers::DEAD_LETTER_SEQUENCE,
        origin.sequence.to_string(),
    );
    headers.insert(
        delivery_core::headers::DEAD_LETTER_GROUP,
        text(origin.group),
    );
    headers
}

/// Whether a dead letter's headers say it is the unit at `sequence` of `stream`.
pub(crate) fn is_copy_of(headers: Option<&HeaderMap>, stream: &str, sequence: u64) -> bool {
    last(headers, delivery_core::headers::DEAD_LETTER_SOURCE) == Some(stream)
        && last(headers, delivery_core::headers::DEAD_LETTER_SEQUENCE)
            .and_then(|s| s.parse::<u64>().ok())
            == Some(sequence)
}

/// `headers` without the dead letter's own, every value kept in order.
pub(crate) fn without_dead_letter_headers(headers: Option<&HeaderMap>) -> HeaderMap {
    let mut out = HeaderMap::new();
    if let Some(headers) = headers {
        for (name, values) in headers.iter() {
            if delivery_core::headers::is_dead_letter(AsRef::<str>::as_ref(name)) {
                continue;
            }
            for value in values {
                out.append(name.clone(), value.clone());
            }
        }
    }
    out
}

/// Parses a stored header block (`NATS/1.0` line, then `Name: value` lines), keeping every value
/// of a repeated header in order. `None` if it is not a header block.
pub(crate) fn parse_block(block: &[u8]) -> Option<HeaderMap> {
    let text = std::str::from_utf8(block).ok()?;
    let mut lines = text.split("\r\n");
    if !lines.next()?.starts_with("NATS/1.0") {
        return None;
    }
    let mut headers = HeaderMap::new();
    for line in lines.filter(|l| !l.is_empty()) {
        let (name, value) = line.split_once(':')?;
        let name: async_nats::header::HeaderName = name.trim().parse().ok()?;
        let value: HeaderValue = value.trim().parse().ok()?;
        headers.append(name, value);
    }
    Some(headers)
}

pub(crate) fn last<'a>(headers: Option<&'a HeaderMap>, name: &str) -> Option<&'a str> {
    headers
        .and_then(|h| h.get_last(name))
        .map(HeaderValue::as_str)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_sequence_id_is_the_stream_and_the_sequence() {
        for (sequence, text) in [
            (0, "ORDERS:0"),
            (7, "ORDERS:7"),
            (10, "ORDERS:10"),
            (1_234_567_890, "ORDERS:1234567890"),
            (u64::MAX, "ORDERS:18446744073709551615"),
        ] {
            assert_eq!(sequence_id("ORDERS", sequence).as_str(), text);
        }
    }

    #[test]
    fn the_id_is_the_producers_message_id_else_the_sequence() {
        let mut headers = HeaderMap::new();
        headers.insert(NATS_MESSAGE_ID, "m-1");
        assert_eq!(unit_id(Some(&headers), "ORDERS", 7).as_str(), "m-1");
        assert_eq!(unit_id(None, "ORDERS", 7).as_str(), "ORDERS:7");
        assert_eq!(
            unit_id(Some(&HeaderMap::new()), "ORDERS", 8).as_str(),
            "ORDERS:8"
        );
    }

    #[test]
    fn a_stored_header_block_keeps_every_value() {
        let headers =
            parse_block(b"NATS/1.0\r\nNats-Msg-Id: m-1\r\ntrace: a\r\ntrace: b\r\n\r\n").unwrap();
        assert_eq!(headers.get_all("trace").count(), 2);
        assert_eq!(last(Some(&headers), "trace"), Some("b"));
        assert_eq!(last(Some(&headers), "Nats-Msg-Id"), Some("m-1"));
        assert!(parse_block(b"HTTP/1.1 200\r\n").is_none());
    }

    #[test]
    fn free_text_never_breaks_a_header() {
        assert_eq!(text("a\r\nb").as_str(), "a  b");
    }

    #[test]
    fn a_redrive_strips_only_the_dead_letters_headers() {
        let mut headers = HeaderMap::new();
        headers.insert("tenant", "acme");
        headers.append("multi", "1");
        headers.append("multi", "2");
        headers.insert(delivery_core::headers::DEAD_LETTER_REASON, "malformed");
        let stripped = without_dead_letter_headers(Some(&headers));
        assert_eq!(stripped.len(), 2);
        assert_eq!(stripped.get_all("multi").count(), 2);
        assert!(
            stripped
                .get(delivery_core::headers::DEAD_LETTER_REASON)
                .is_none()
        );
    }
}
