//! The wire format of a Kafka record: the unit's id, headers, carried count, due time and
//! origin, read from its headers.

use bytes::Bytes;
use delivery_core::unit::{Headers, Stamp, UnitId};
use rdkafka::Message;
use rdkafka::message::{BorrowedMessage, Headers as _};

/// Where a unit was first read: recorded with it in the dead letter.
#[derive(Clone, Debug)]
pub(super) struct Origin {
    pub(super) topic: String,
    pub(super) partition: i32,
    pub(super) offset: i64,
}

/// The parts of a message this transport reads.
pub(super) struct Read {
    pub(super) payload: Bytes,
    pub(super) headers: Headers,
    pub(super) id: Option<UnitId>,
    pub(super) count: Option<u32>,
    pub(super) due_ms: Option<u64>,
    pub(super) origin: Option<Origin>,
    /// The [`delivery_core::headers::STAMP`] header's stamp, when the message has the header (`None`
    /// inside for a value that is not one).
    pub(super) stamp: Option<Option<Stamp>>,
}

impl Read {
    pub(super) fn of(message: &BorrowedMessage<'_>) -> Read {
        let mut read = Read {
            payload: Bytes::copy_from_slice(message.payload().unwrap_or_default()),
            headers: Headers::default(),
            id: None,
            count: None,
            due_ms: None,
            origin: None,
            stamp: None,
        };
        // The record's key orders its unit (`Consumer::order_by_key`), unless a header says.
        let key = message.key().filter(|key| !key.is_empty());
        let Some(headers) = message.headers() else {
            if let Some(key) = key {
                read.headers = Headers::from_pairs([(
                    delivery_core::headers::KEY,
                    Bytes::copy_from_slice(key),
                )]);
            }
            return read;
        };
        let (mut topic, mut partition, mut offset) = (None, None, None);
        let mut own = Vec::new();
        for header in headers.iter() {
            let value = header.value.unwrap_or_default();
            let text = std::str::from_utf8(value).ok();
            match header.key {
                delivery_core::headers::MESSAGE_ID => {
                    read.id = text.filter(|id| !id.is_empty()).map(UnitId::from);
                }
                delivery_core::headers::DELIVERY_COUNT => {
                    read.count = text.and_then(|t| t.parse().ok()).filter(|&n| n > 0);
                }
                delivery_core::headers::STAMP => {
                    read.stamp = Some(delivery_core::headers::parse_stamp(value))
                }
                delivery_core::headers::DUE_MS => read.due_ms = text.and_then(|t| t.parse().ok()),
                delivery_core::headers::ORIGIN_TOPIC => topic = text.map(str::to_owned),
                delivery_core::headers::ORIGIN_PARTITION => {
                    partition = text.and_then(|t| t.parse().ok())
                }
                delivery_core::headers::ORIGIN_OFFSET => offset = text.and_then(|t| t.parse().ok()),
                name if delivery_core::headers::is_bookkeeping(name) => {}
                name => own.push((name.to_owned(), Bytes::copy_from_slice(value))),
            }
        }
        if let (Some(topic), Some(partition), Some(offset)) = (topic, partition, offset) {
            read.origin = Some(Origin {
                topic,
                partition,
                offset,
            });
        }
        if let Some(key) = key
            && !own
                .iter()
                .any(|(name, _)| name == delivery_core::headers::KEY)
        {
            own.push((
                delivery_core::headers::KEY.to_owned(),
                Bytes::copy_from_slice(key),
            ));
        }
        if !own.is_empty() {
            read.headers = Headers::from_pairs(own);
        }
        read
    }
}

/// The headers a producer publishes `unit` with, for the Kafka source to read it back as it is:
/// its headers, its id as [`delivery_core::headers::MESSAGE_ID`], and its [`Stamp`], if it has one, as
/// [`delivery_core::headers::STAMP`] (without one, its offset is its stamp).
///
/// ```
/// use delivery::kafka::client::message::Headers as _;
/// use delivery::{Stamp, Unit};
///
/// let unit = Unit::new("order-1", "{}").with_stamp(Stamp(7));
/// let headers = delivery::kafka::headers_of(&unit);
/// let stamp = headers.iter().find(|h| h.key == "x-delivery-stamp").unwrap();
/// assert_eq!(stamp.value, Some(&b"7"[..]));
/// ```
pub fn headers_of(unit: &delivery_core::Unit) -> rdkafka::message::OwnedHeaders {
    use rdkafka::message::{Header, OwnedHeaders};
    let mut headers = OwnedHeaders::new_with_capacity(unit.headers().len() + 2);
    for (name, value) in unit.headers().iter() {
        headers = headers.insert(Header {
            key: name,
            value: Some(value.as_ref()),
        });
    }
    headers = headers.insert(Header {
        key: delivery_core::headers::MESSAGE_ID,
        value: Some(unit.id().as_str()),
    });
    if let Some(stamp) = unit.stamp() {
        headers = headers.insert(Header {
            key: delivery_core::headers::STAMP,
            value: Some(stamp.0.to_string().as_str()),
        });
    }
    headers
}
