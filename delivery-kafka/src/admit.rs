//! Admitting a received message: its unit, its handle tracked in the commit book, and when it is
//! due if it came from the retry topic. Both the source and the keeper task admit what they
//! receive.

use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use rdkafka::Message;
use rdkafka::message::BorrowedMessage;
use tokio::time::Instant;

use crate::codec::{Origin, Read};
use crate::partition::{Log, Tracked};
use crate::settle::KafkaHandle;
use crate::shared::Shared;
use delivery_core::unit::{DeliveryCount, Stamp, Unit, UnitId};

/// A unit received and tracked in the book, and when it is due if it came from the retry topic.
pub(crate) type Admitted = (Unit, KafkaHandle, Option<Instant>);

/// The unit and handle of one message, tracked in the book, and when it is due if it came from
/// the retry topic.
pub(crate) fn admit(shared: &Arc<Shared>, message: &BorrowedMessage<'_>) -> Admitted {
    let topic = message.topic();
    let partition = message.partition();
    let offset = u64::try_from(message.offset()).unwrap_or(0);
    let log = shared.book.log(topic).unwrap_or(Log::Source);
    let read = Read::of(message);
    let id = read
        .id
        .clone()
        .unwrap_or_else(|| UnitId::new(format!("{topic}:{partition}:{offset}")));
    let count = DeliveryCount::new(read.count.unwrap_or(1));
    let origin = read.origin.clone().unwrap_or_else(|| Origin {
        topic: topic.into(),
        partition,
        offset: message.offset(),
    });
    let mut unit = Unit::new(id, read.payload)
        .with_delivery_count(count)
        .with_headers(read.headers);
    // The stamp its producer set or a retry kept, else its offset in the source topic.
    let stamp = read
        .stamp
        .unwrap_or_else(|| u64::try_from(origin.offset).ok().map(Stamp));
    if let Some(stamp) = stamp {
        unit = unit.with_stamp(stamp);
    }
    let at = shared
        .book
        .track((log, partition), offset)
        .map(|generation| Tracked {
            partition: (log, partition),
            offset,
            generation,
        });
    let due = match (log, read.due_ms) {
        (Log::Retry, Some(due_ms)) => {
            let now_ms = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_millis() as u64);
            Some(Instant::now() + Duration::from_millis(due_ms.saturating_sub(now_ms)))
        }
        _ => None,
    };
    let handle = KafkaHandle {
        shared: shared.clone(),
        at,
        key: message.key().map(Bytes::copy_from_slice),
        origin,
    };
    (unit, handle, due)
}
