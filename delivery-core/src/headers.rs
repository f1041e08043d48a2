//! The names of every header (or stream field) this crate writes on a unit, defined once for every
//! transport.
//!
//! Two families:
//! - `x-delivery-*`: bookkeeping that travels with a unit where the mechanism keeps none of its own
//!   (the count a classic RabbitMQ queue or a Kafka retry topic carries, where a returned unit was
//!   first read). A consumer strips them from the unit's [`Headers`](crate::Headers) — all but
//!   [`EDITED`] and [`ORIGINAL_SHA256`], the unit's own record of an operator's edit.
//! - `x-dead-letter-*`: what a dead letter records beside the unit's intact payload, id and
//!   headers: why, from where, on which delivery. A redrive removes them.
//!
//! ```
//! use delivery::headers;
//! assert_eq!(headers::DEAD_LETTER_REASON, "x-dead-letter-reason");
//! assert!(headers::is_dead_letter(headers::DEAD_LETTER_SOURCE));
//! ```

/// The delivery count a unit carries where the mechanism keeps none (absent on the first
/// delivery). Also the name of a RabbitMQ quorum queue's own count of earlier deliveries.
pub const DELIVERY_COUNT: &str = "x-delivery-count";
/// The unit's id, where the mechanism has no id of its own (Kafka).
pub const MESSAGE_ID: &str = "message-id";
/// When a returned unit is due again, in milliseconds since the Unix epoch (Kafka's retry topic).
pub const DUE_MS: &str = "x-delivery-due-ms";
/// Where a returned unit was first read: its topic.
pub const ORIGIN_TOPIC: &str = "x-delivery-origin-topic";
/// Where a returned unit was first read: its partition.
pub const ORIGIN_PARTITION: &str = "x-delivery-origin-partition";
/// Where a returned unit was first read: its offset.
pub const ORIGIN_OFFSET: &str = "x-delivery-origin-offset";

/// The unit's ordering [`Stamp`](crate::unit::Stamp) (rule 4), in decimal: set by its producer (the
/// outbox relay writes its record's sequence), or written on a copy of a unit to keep the stamp
/// of its first delivery (a dead letter, a retry topic, a redrive). A source that finds it takes
/// it as the unit's stamp, over the mechanism's own position.
pub const STAMP: &str = "x-delivery-stamp";

/// The stamp a [`STAMP`] header's value carries: `None` unless it is decimal digits that fit a
/// `u64`.
///
/// ```
/// use delivery::{Stamp, headers};
/// assert_eq!(headers::parse_stamp(b"42"), Some(Stamp(42)));
/// assert_eq!(headers::parse_stamp(b"-1"), None);
/// ```
pub fn parse_stamp(value: &[u8]) -> Option<crate::unit::Stamp> {
    std::str::from_utf8(value)
        .ok()
        .filter(|text| !text.is_empty() && text.bytes().all(|b| b.is_ascii_digit()))
        .and_then(|text| text.parse().ok())
        .map(crate::unit::Stamp)
}

/// Set to `true` on a unit an operator redrove from a dead letter with a payload of their own
/// ([`DeadLetters::redrive_edited`](crate::dead_letter::DeadLetters::redrive_edited)): the unit's
/// history says it was edited. Unlike the other `x-delivery-*` headers it is one of the unit's own
/// headers, delivered to its handler.
pub const EDITED: &str = "x-delivery-edited";
/// On an edited unit ([`EDITED`]): the lowercase hex SHA-256 of the payload the operator replaced.
pub const ORIGINAL_SHA256: &str = "x-delivery-original-sha256";

/// Whether `name` is one of the headers recording an operator's edit ([`EDITED`],
/// [`ORIGINAL_SHA256`]).
pub fn is_edit(name: &str) -> bool {
    name == EDITED || name == ORIGINAL_SHA256
}

/// Why the unit was dead-lettered: `malformed`, `rejected` or `exhausted`.
pub const DEAD_LETTER_REASON: &str = "x-dead-letter-reason";
/// The detail of the reason: the decode error, the handler's error.
pub const DEAD_LETTER_DETAIL: &str = "x-dead-letter-detail";
/// The queue or stream the unit was dead-lettered from.
pub const DEAD_LETTER_SOURCE: &str = "x-dead-letter-source";
/// The delivery (from 1) on which the unit was dead-lettered.
pub const DEAD_LETTER_DELIVERY_COUNT: &str = "x-dead-letter-delivery-count";
/// RabbitMQ: when the consumer dead-lettered the unit, in milliseconds since the Unix epoch
/// (what orders the dead letter's listing).
pub const DEAD_LETTER_AT: &str = "x-dead-letter-at";
/// NATS: the subject the unit had been published to (where a redrive publishes it again).
pub const DEAD_LETTER_SUBJECT: &str = "x-dead-letter-subject";
/// NATS: the unit's sequence in its source stream.
pub const DEAD_LETTER_SEQUENCE: &str = "x-dead-letter-sequence";
/// Redis: the entry id the unit had in its source stream.
pub const DEAD_LETTER_ENTRY_ID: &str = "x-dead-letter-entry-id";
/// Kafka: the topic the unit was first read from.
pub const DEAD_LETTER_SOURCE_TOPIC: &str = "x-dead-letter-source-topic";
/// Kafka: the partition the unit was first read from.
pub const DEAD_LETTER_SOURCE_PARTITION: &str = "x-dead-letter-source-partition";
/// Kafka: the offset the unit was first read at.
pub const DEAD_LETTER_SOURCE_OFFSET: &str = "x-dead-letter-source-offset";

/// Redis, NATS: the consumer group (NATS: the durable consumer) that dead-lettered the unit, for
/// whom alone a redrive is meant.
pub const DEAD_LETTER_GROUP: &str = "x-dead-letter-group";

/// Redis, NATS: on a redriven unit, the one consumer group (NATS: durable consumer) it is for —
/// the one that dead-lettered it ([`DEAD_LETTER_GROUP`]). A redrive goes back to the stream every
/// group reads; the sources of the other groups acknowledge it without handling it, as they
/// applied the unit when it was first delivered.
pub const REDRIVE_GROUP: &str = "x-delivery-redrive-group";

/// Whether `name` is one of the headers a dead letter adds (and a redrive removes).
pub fn is_dead_letter(name: &str) -> bool {
    name.starts_with("x-dead-letter-")
}

/// The unit's ordering key: units with the same key run one at a time, in arrival order, under
/// [`Consumer::order_by_key`](crate::Consumer::order_by_key). Set by the producer on RabbitMQ,
/// Redis and NATS; on Kafka, a record's key is its unit's `x-delivery-key` (unless the record
/// carries the header itself). One of the unit's own headers, carried through dead letters and
/// redrives.
pub const KEY: &str = "x-delivery-key";

/// Whether `name` is bookkeeping a transport writes for itself, not one of the unit's headers.
///
/// The headers recording an edit ([`is_edit`]) and the ordering [`KEY`] are the unit's own, not
/// bookkeeping.
pub fn is_bookkeeping(name: &str) -> bool {
    name == MESSAGE_ID || (name.starts_with("x-delivery-") && !is_edit(name) && name != KEY)
}
