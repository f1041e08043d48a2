//! The wire format of a Kafka record: the unit's id, headers, carried count, due time and
//! origin, read from its headers.

use crate::unit::{Headers, UnitId};
use bytes::Bytes;
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
        };
        let Some(headers) = message.headers() else {
            return read;
        };
        let (mut topic, mut partition, mut offset) = (None, None, None);
        let mut own = Vec::new();
        for header in headers.iter() {
            let value = header.value.unwrap_or_default();
            let text = std::str::from_utf8(value).ok();
            match header.key {
                crate::headers::MESSAGE_ID => {
                    read.id = text.filter(|id| !id.is_empty()).map(UnitId::from);
                }
                crate::headers::DELIVERY_COUNT => {
                    read.count = text.and_then(|t| t.parse().ok()).filter(|&n| n > 0);
                }
                crate::headers::DUE_MS => read.due_ms = text.and_then(|t| t.parse().ok()),
                crate::headers::ORIGIN_TOPIC => topic = text.map(str::to_owned),
                crate::headers::ORIGIN_PARTITION => partition = text.and_then(|t| t.parse().ok()),
                crate::headers::ORIGIN_OFFSET => offset = text.and_then(|t| t.parse().ok()),
                name if crate::headers::is_bookkeeping(name) => {}
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
        if !own.is_empty() {
            read.headers = Headers::from_pairs(own);
        }
        read
    }
}
