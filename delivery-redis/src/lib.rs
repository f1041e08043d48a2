//! Redis Streams consumer groups (feature `redis`): a [`Source`](delivery_core::Source) over one stream
//! read by a consumer group, the topology helper that creates the group, a publish helper, and
//! the operator's view of the dead-letter stream ([`RedisDeadLetters`], a
//! [`DeadLetters`](delivery_core::DeadLetters)).
//!
//! - **Acknowledgement**: new entries are read with `XREADGROUP ... >`; an entry is `XACK`ed only
//!   once its handler resolved `Ok` (the runtime's [`Disposition::Ack`](delivery_core::Disposition::Ack)),
//!   and its settle returns only once Redis answered that `XACK`. At most one `XACK` of a source
//!   is in flight: the entries settled while it is go together in the next one
//!   (`XACK <stream> <group> <id1> … <idN>`), so units in flight cost one command per round trip
//!   instead of one each; one unit at a time, each `XACK` carries one id.
//! - **Return**: a failed entry is left pending in the group. The source claims pending entries
//!   back itself with `XAUTOCLAIM` once they have been idle for the topology's
//!   [`claim_idle`](RedisTopology::claim_idle), and it is what brings a failed entry back until
//!   it reaches the bound (rule 1's last sentence). The runtime's backoff is kept up to that idle
//!   time: the entry given back has its idle time set (`XCLAIM … IDLE … JUSTID`, no delivery
//!   counted) so that it is claimed back once its backoff passed, and the source's next claim
//!   scan is brought forward to then; a backoff longer than the claim idle time is cut to it. Entries `XAUTOCLAIM` reports as deleted (trimmed
//!   away while pending) are logged with `tracing::warn!` and counted in
//!   `delivery_pending_deleted_total{source}`, never dropped silently.
//! - **The bound is Redis's count**: a unit's [`DeliveryCount`](delivery_core::DeliveryCount) is the
//!   pending entry's *times delivered* as Redis keeps it. An entry read with `XREADGROUP ... >`
//!   is on its first delivery (Redis sets the counter to 1); an entry claimed back is read with
//!   `XPENDING <stream> <group> <id> <id> 1 <consumer>` (the extended form) right after the
//!   claim, which incremented it. Nothing is counted in the process, so a restart or another
//!   replica continues the same count. [`Source::max_deliveries`](delivery_core::Source::max_deliveries)
//!   is the topology's [`max_deliveries`](RedisTopology::max_deliveries); an entry claimed with a
//!   count already past it (its consumers kept dying on it) goes to the dead letter as
//!   `exhausted` without reaching a handler again.
//! - **Dead letter**: past the bound, malformed or rejected, the entry is `XADD`ed to the
//!   dead-letter stream with all its fields as read, plus [`delivery_core::headers::DEAD_LETTER_REASON`],
//!   [`delivery_core::headers::DEAD_LETTER_DETAIL`], [`delivery_core::headers::DEAD_LETTER_SOURCE`], [`delivery_core::headers::DEAD_LETTER_ENTRY_ID`]
//!   and [`delivery_core::headers::DEAD_LETTER_DELIVERY_COUNT`]; only once Redis answered the `XADD` is it `XACK`ed.
//!   A failed `XADD` leaves it pending (returned), never acknowledged. A crash between the two
//!   leaves a duplicate in the dead letter, never a loss.
//! - **Blocking reads** run on a connection of their own with no client response timeout (the
//!   client's default 500 ms would cut every `BLOCK` short); the source bounds them itself
//!   (`BLOCK` plus a margin). Acknowledgements and dead-lettering use a second connection.
//! - **Your own client**: the source, [`declare`] and [`RedisDeadLetters`] take a
//!   [`RedisConnector`] — a URL, your `redis::Client`, or your own `ConnectionManager` /
//!   `MultiplexedConnection` (on which the source polls instead of blocking).
//!
//! # The entry layout and the unit id
//!
//! A unit is one stream entry. Its payload is the field [`FIELD_PAYLOAD`] (`payload`, bytes as
//! they are; an entry without it has an empty payload, which a `Json` handler refuses as
//! malformed, so it goes to the dead letter intact). Every other field except [`FIELD_ID`] is a
//! header of the unit.
//!
//! The [`UnitId`](delivery_core::UnitId) is the producer-supplied field [`FIELD_ID`] (`id`) when present
//! (and non-empty UTF-8), otherwise the stream entry id. Prefer the `id` field: an entry id is
//! minted by Redis per `XADD`, so the same unit published twice, or redriven from the dead letter,
//! gets a new entry id; the `id` field travels with the entry. A redrive writes the unit id into
//! the `id` field when the entry had none, so a redriven unit keeps the id it was dead-lettered
//! under. [`publish`] writes the layout.
//!
//! ```no_run
//! use delivery::{consumer, Consumer, HandlerError, Json};
//! use delivery::redis::{RedisSource, RedisTopology};
//!
//! #[derive(serde::Deserialize)]
//! struct Order { order_id: String }
//!
//! #[consumer]
//! async fn handle(Json(order): Json<Order>) -> Result<(), HandlerError> {
//!     let _ = order.order_id;
//!     Ok(())
//! }
//!
//! # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
//! let url = "redis://127.0.0.1:6379";
//! let topology = RedisTopology::new("orders", "billing")
//!     .max_deliveries(5)
//!     .claim_idle(std::time::Duration::from_secs(30));
//! delivery::redis::declare(url, &topology).await?;
//! let source = RedisSource::connect(url, topology).await?;
//! Consumer::new(source).concurrency(16).run(handle).await;
//! # Ok(()) }
//! ```

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acks;
mod codec;
mod connector;
mod dead_letter;
mod error;
mod publish;
mod settle;
mod shared;
mod source;
mod topology;

pub use codec::{FIELD_ID, FIELD_PAYLOAD};
pub use connector::{RedisConnector, connect};
pub use dead_letter::RedisDeadLetters;
pub use publish::publish;
pub use settle::RedisHandle;
pub use source::RedisSource;
pub use topology::{RedisTopology, declare};

/// The Redis client (crate `redis`, 1.x), re-exported so its version always matches the
/// connections [`connect`], [`publish`] and [`RedisConnector`] take: name its types as
/// `delivery::redis::client::...`.
pub use ::redis as client;
