//! AMQP headers: reading the broker's count, turning headers into a unit's, and the headers the
//! dead letter records.

use bytes::Bytes;
use lapin::BasicProperties;
use lapin::types::{AMQPValue, FieldTable, LongString};
use sha2::{Digest, Sha256};

use delivery_core::unit::{DeliveryCount, Headers, UnitId};

/// An integer of any AMQP integer type, if it is a non-negative one.
pub(crate) fn as_u64(value: &AMQPValue) -> Option<u64> {
    match value {
        AMQPValue::ShortShortInt(v) => u64::try_from(*v).ok(),
        AMQPValue::ShortShortUInt(v) => Some(u64::from(*v)),
        AMQPValue::ShortInt(v) => u64::try_from(*v).ok(),
        AMQPValue::ShortUInt(v) => Some(u64::from(*v)),
        AMQPValue::LongInt(v) => u64::try_from(*v).ok(),
        AMQPValue::LongUInt(v) => Some(u64::from(*v)),
        AMQPValue::LongLongInt(v) => u64::try_from(*v).ok(),
        _ => None,
    }
}

/// Text of a string header.
pub(crate) fn as_text(value: &AMQPValue) -> Option<String> {
    match value {
        AMQPValue::LongString(s) => Some(String::from_utf8_lossy(s.as_bytes()).into_owned()),
        AMQPValue::ShortString(s) => Some(s.as_str().to_owned()),
        _ => None,
    }
}

pub(crate) fn get<'a>(headers: Option<&'a FieldTable>, name: &str) -> Option<&'a AMQPValue> {
    headers.and_then(|h| h.inner().get(name))
}

/// The delivery count of a delivery: `x-delivery-count + 1`, the first delivery being 1.
pub(crate) fn delivery_count(headers: Option<&FieldTable>) -> DeliveryCount {
    let earlier = get(headers, delivery_core::headers::DELIVERY_COUNT)
        .and_then(as_u64)
        .unwrap_or(0);
    DeliveryCount::new(u32::try_from(earlier.saturating_add(1)).unwrap_or(u32::MAX))
}

/// The properties a producer publishes `unit` with, for the RabbitMQ source to read it back as it
/// is: its id as `message_id`, persistent (`delivery_mode` 2), its headers as text, and its
/// [`Stamp`](delivery_core::Stamp) as [`delivery_core::headers::STAMP`] — RabbitMQ keeps no order of its own, so
/// the producer's stamp is the only one its units carry (rule 4).
///
/// ```
/// use delivery::lapin::types::AMQPValue;
/// use delivery::{Stamp, Unit};
///
/// let unit = Unit::new("order-1", "{}").with_stamp(Stamp(7));
/// let properties = delivery::rabbitmq::properties_of(&unit);
/// assert_eq!(properties.message_id().as_ref().map(|id| id.as_str()), Some("order-1"));
/// let headers = properties.headers().as_ref().unwrap();
/// assert_eq!(headers.inner().get("x-delivery-stamp"), Some(&AMQPValue::LongLongInt(7)));
/// ```
pub fn properties_of(unit: &delivery_core::Unit) -> BasicProperties {
    let mut headers = FieldTable::default();
    for (name, value) in unit.headers().iter() {
        headers.insert(
            name.into(),
            AMQPValue::LongString(LongString::from(value.to_vec())),
        );
    }
    if let Some(stamp) = unit.stamp() {
        headers.insert(
            delivery_core::headers::STAMP.into(),
            AMQPValue::LongLongInt(i64::try_from(stamp.0).unwrap_or(i64::MAX)),
        );
    }
    BasicProperties::default()
        .with_message_id(unit.id().as_str().into())
        .with_delivery_mode(2)
        .with_headers(headers)
}

/// The stamp its producer set or a copy kept ([`delivery_core::headers::STAMP`]), as text or an integer.
pub(crate) fn stamp(headers: Option<&FieldTable>) -> Option<delivery_core::Stamp> {
    let value = get(headers, delivery_core::headers::STAMP)?;
    match as_u64(value) {
        Some(stamp) => Some(delivery_core::Stamp(stamp)),
        None => delivery_core::headers::parse_stamp(&header_bytes(value)?),
    }
}

/// A header's value as the unit's bytes: strings as they are, numbers and booleans as text.
/// Nested tables and arrays (`x-death`) are left out of the unit; the operator reads them from
/// the dead letter.
fn header_bytes(value: &AMQPValue) -> Option<Bytes> {
    Some(match value {
        AMQPValue::LongString(s) => Bytes::copy_from_slice(s.as_bytes()),
        AMQPValue::ShortString(s) => Bytes::copy_from_slice(s.as_str().as_bytes()),
        AMQPValue::ByteArray(b) => Bytes::copy_from_slice(b.as_slice()),
        AMQPValue::Boolean(b) => Bytes::from_static(if *b { b"true" } else { b"false" }),
        AMQPValue::Float(v) => v.to_string().into(),
        AMQPValue::Double(v) => v.to_string().into(),
        AMQPValue::Timestamp(v) => v.to_string().into(),
        other => as_u64(other)
            .map(|v| v.to_string())
            .or_else(|| signed(other).map(|v| v.to_string()))?
            .into(),
    })
}

fn signed(value: &AMQPValue) -> Option<i64> {
    match value {
        AMQPValue::ShortShortInt(v) => Some(i64::from(*v)),
        AMQPValue::ShortInt(v) => Some(i64::from(*v)),
        AMQPValue::LongInt(v) => Some(i64::from(*v)),
        AMQPValue::LongLongInt(v) => Some(*v),
        _ => None,
    }
}

/// The unit's headers.
pub(crate) fn unit_headers(headers: Option<&FieldTable>) -> Headers {
    headers_where(headers, |_| true)
}

/// The unit's own headers: without the transport's and the broker's
/// ([`is_transport_header`]).
pub(crate) fn own_headers(headers: Option<&FieldTable>) -> Headers {
    headers_where(headers, |name| !is_transport_header(name))
}

fn headers_where(headers: Option<&FieldTable>, keep: impl Fn(&str) -> bool) -> Headers {
    match headers {
        None => Headers::default(),
        Some(table) if table.inner().is_empty() => Headers::default(),
        Some(table) => Headers::from_pairs(table.inner().iter().filter_map(|(k, v)| {
            let name = k.as_str();
            keep(name).then(|| Some((name.to_owned(), header_bytes(v)?)))?
        })),
    }
}

/// Headers the broker or this transport set along the way, which are not part of the unit.
pub(crate) fn is_transport_header(name: &str) -> bool {
    name == delivery_core::headers::DELIVERY_COUNT
        // RabbitMQ 4.3 and later: every acquisition by a consumer, failed or not.
        || name == "x-acquired-count"
        || delivery_core::headers::is_dead_letter(name)
        || name == "x-death"
        || name.starts_with("x-first-death-")
        || name.starts_with("x-last-death-")
}

/// The unit's id: its `message_id`, or — for a unit published without one — a digest of its
/// body and its own headers, the same on every delivery of it.
pub(crate) fn unit_id(properties: &BasicProperties, body: &[u8]) -> UnitId {
    if let Some(id) = properties.message_id() {
        return UnitId::new(id.as_str());
    }
    let mut digest = Sha256::new();
    digest.update((body.len() as u64).to_be_bytes());
    digest.update(body);
    if let Some(headers) = properties.headers() {
        for (name, value) in headers.inner() {
            if is_transport_header(name.as_str()) {
                continue;
            }
            digest.update(name.as_str().as_bytes());
            digest.update([0]);
            digest.update(format!("{value:?}").as_bytes());
            digest.update([0]);
        }
    }
    UnitId::new(format!("sha256:{}", hex::encode(&digest.finalize()[..16])))
}

/// `headers` without the transport's own, with `extra` added.
pub(crate) fn rewrite(
    headers: Option<&FieldTable>,
    extra: impl IntoIterator<Item = (&'static str, AMQPValue)>,
) -> FieldTable {
    let mut table = FieldTable::default();
    if let Some(headers) = headers {
        for (name, value) in headers.inner() {
            if !is_transport_header(name.as_str()) {
                table.insert(name.clone(), value.clone());
            }
        }
    }
    for (name, value) in extra {
        table.insert(name.into(), value);
    }
    table
}

/// [`rewrite`] for an edited redrive of a unit whose body was `original`: any earlier edit's
/// headers replaced by this one's.
pub(crate) fn rewrite_edited(headers: Option<&FieldTable>, original: &[u8]) -> FieldTable {
    let edit = delivery_core::transport::edit_headers(original);
    rewrite(
        headers,
        edit.iter()
            .map(|(name, value)| (*name, text_value(value)))
            .collect::<Vec<_>>(),
    )
}

/// Milliseconds since the Unix epoch, now.
pub(crate) fn now_millis() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| i64::try_from(d.as_millis()).unwrap_or(i64::MAX))
}

pub(crate) fn text_value(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn with_count(value: AMQPValue) -> FieldTable {
        let mut t = FieldTable::default();
        t.insert(delivery_core::headers::DELIVERY_COUNT.into(), value);
        t
    }

    #[test]
    fn delivery_count_accepts_every_integer_type() {
        assert_eq!(delivery_count(None).get(), 1);
        for (value, expected) in [
            (AMQPValue::ShortShortInt(0), 1),
            (AMQPValue::ShortShortUInt(1), 2),
            (AMQPValue::ShortInt(2), 3),
            (AMQPValue::ShortUInt(3), 4),
            (AMQPValue::LongInt(4), 5),
            (AMQPValue::LongUInt(5), 6),
            (AMQPValue::LongLongInt(6), 7),
            (AMQPValue::LongLongInt(-1), 1),
            (AMQPValue::LongString("x".into()), 1),
        ] {
            assert_eq!(
                delivery_count(Some(&with_count(value.clone()))).get(),
                expected,
                "{value:?}"
            );
        }
    }

    #[test]
    fn a_unit_without_message_id_gets_a_stable_id() {
        let body = b"{}";
        let a = unit_id(
            &BasicProperties::default().with_headers(with_count(AMQPValue::LongInt(0))),
            body,
        );
        let b = unit_id(
            &BasicProperties::default().with_headers(with_count(AMQPValue::LongInt(3))),
            body,
        );
        assert_eq!(a, b, "the broker's count is not part of the identity");
        assert_ne!(a, unit_id(&BasicProperties::default(), b"{ }"));
        assert_eq!(
            unit_id(
                &BasicProperties::default().with_message_id("m-1".into()),
                body
            )
            .as_str(),
            "m-1"
        );
    }
}
