//! What a read makes of a unit: its [`DeadLetter`] record, and the key that orders the listing
//! and that a cursor points after.

use std::time::{Duration, UNIX_EPOCH};

use lapin::types::{AMQPValue, FieldTable};
use lapin::{Acker, BasicProperties};
use sha2::{Digest, Sha256};

use crate::codec::{self, as_text, as_u64, get};
use delivery_core::dead_letter::{DeadLetter, DeadLetterStamp};
use delivery_core::disposition::ReasonKind;
use delivery_core::headers;
use delivery_core::unit::{DeliveryCount, Unit, UnitId};

use super::queue::RabbitDeadLetters;

impl RabbitDeadLetters {
    /// The record of a unit a pass took (its body moves into the record).
    pub(super) fn record(&self, taken: &mut Taken) -> DeadLetter {
        let properties = &taken.properties;
        let table = properties.headers().as_ref();
        // A count written as a number (before the stamp was text) reads as its digits.
        let stamp = DeadLetterStamp::read(|name| {
            let value = get(table, name)?;
            as_text(value)
                .or_else(|| as_u64(value).map(|n| n.to_string()))
                .map(Into::into)
        });
        // The latest time the broker dead-lettered it, if it did.
        let death = latest_death(table);
        let by_broker_past_limit = death
            .as_ref()
            .is_some_and(|d| d.reason == "delivery_limit" && d.queue == self.queue);
        let count = stamp
            .delivery_count
            .or_else(|| by_broker_past_limit.then(|| DeliveryCount::new(self.max_deliveries.get())))
            .unwrap_or(DeliveryCount::FIRST);
        let mut unit = Unit::new(taken.key.id.clone(), std::mem::take(&mut taken.data))
            .with_headers(codec::own_headers(table))
            .with_delivery_count(count);
        if let Some(stamp) = codec::stamp(table) {
            unit = unit.with_stamp(stamp);
        }
        let source = stamp
            .source
            .or_else(|| death.as_ref().map(|d| d.queue.clone()))
            .unwrap_or_else(|| self.queue.clone());
        let mut record = DeadLetter::new(unit, source, taken.key.position());
        record.reason = stamp
            .reason
            .or_else(|| by_broker_past_limit.then_some(ReasonKind::Exhausted));
        record.detail = stamp
            .detail
            .or_else(|| {
                death.as_ref().map(|d| {
                    format!(
                        "dead-lettered by the broker from `{}`: {}",
                        d.queue, d.reason
                    )
                })
            })
            .unwrap_or_default();
        record.dead_lettered_at = dead_lettered_at(properties, death.as_ref())
            .map(|millis| UNIX_EPOCH + Duration::from_millis(millis));
        record
    }
}

/// When the unit was dead-lettered, in milliseconds since the epoch, where that is recorded:
/// the consumer's `x-dead-letter-at`, else the broker's `x-death` time, else the message's
/// `timestamp` (both whole seconds).
pub(super) fn dead_lettered_at(properties: &BasicProperties, death: Option<&Death>) -> Option<u64> {
    get(properties.headers().as_ref(), headers::DEAD_LETTER_AT)
        .and_then(as_u64)
        .or_else(|| {
            let seconds = death.and_then(|d| d.time).or(*properties.timestamp())?;
            Some(seconds.saturating_mul(1000))
        })
}

/// Where a record stands: the order of the listing and what a cursor points after.
#[derive(Clone, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) struct Key {
    /// When it was dead-lettered, in milliseconds since the epoch; 0 where that is not recorded.
    pub(super) at: u64,
    pub(super) id: UnitId,
    /// Of its body and headers, without the broker's counts (16 hex digits).
    pub(super) digest: String,
    /// Its place among identical copies (0 first).
    pub(super) copy: u32,
}

impl Key {
    pub(super) fn position(&self) -> String {
        format!("{}.{}.{}.{}", self.at, self.digest, self.copy, self.id)
    }

    pub(super) fn parse(position: &str) -> Option<Key> {
        let mut parts = position.splitn(4, '.');
        let at = parts.next()?.parse().ok()?;
        let digest = parts.next()?;
        let copy = parts.next()?.parse().ok()?;
        let id = parts.next()?;
        (digest.len() == 16 && digest.bytes().all(|b| b.is_ascii_hexdigit())).then(|| Key {
            at,
            id: UnitId::new(id),
            digest: digest.to_owned(),
            copy,
        })
    }

    /// The key of a unit as delivered (its place among copies is set once all are taken).
    pub(super) fn of(properties: &BasicProperties, data: &[u8]) -> Key {
        let table = properties.headers().as_ref();
        let mut digest = Sha256::new();
        digest.update((data.len() as u64).to_be_bytes());
        digest.update(data);
        for (name, value) in table.map(FieldTable::inner).into_iter().flatten() {
            // The counts a quorum queue raises on every hand-back are not the unit's.
            if matches!(name.as_str(), "x-delivery-count" | "x-acquired-count") {
                continue;
            }
            digest.update(name.as_str().as_bytes());
            digest.update([0]);
            digest.update(format!("{value:?}").as_bytes());
            digest.update([0]);
        }
        Key {
            at: dead_lettered_at(properties, latest_death(table).as_ref()).unwrap_or(0),
            id: codec::unit_id(properties, data),
            digest: hex::encode(&digest.finalize()[..8]),
            copy: 0,
        }
    }
}

/// A unit a pass took, until it is acknowledged or handed back.
pub(super) struct Taken {
    pub(super) key: Key,
    pub(super) properties: BasicProperties,
    pub(super) data: Vec<u8>,
    /// `None` once acknowledged.
    pub(super) acker: Option<Acker>,
}

/// The latest entry of the broker's `x-death` header (the first), when the broker dead-lettered
/// the unit.
pub(super) struct Death {
    pub(super) queue: String,
    /// `delivery_limit`, `rejected`, `expired` or `maxlen`.
    pub(super) reason: String,
    /// Seconds since the Unix epoch.
    pub(super) time: Option<u64>,
}

pub(super) fn latest_death(table: Option<&FieldTable>) -> Option<Death> {
    let Some(AMQPValue::FieldArray(entries)) = get(table, "x-death") else {
        return None;
    };
    entries.as_slice().iter().find_map(|entry| match entry {
        AMQPValue::FieldTable(t) => {
            let field = |name: &str| get(Some(t), name).and_then(as_text).unwrap_or_default();
            Some(Death {
                queue: field("queue"),
                reason: field("reason"),
                time: match get(Some(t), "time") {
                    Some(AMQPValue::Timestamp(seconds)) => Some(*seconds),
                    _ => None,
                },
            })
        }
        _ => None,
    })
}
