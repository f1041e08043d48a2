//! Redis Streams consumer groups (feature `redis`): a [`Source`](crate::Source) over one stream
//! read by a consumer group, the topology helper that creates the group, a publish helper, and
//! the operator's view of the dead-letter stream ([`RedisDeadLetters`], a
//! [`DeadLetters`](crate::DeadLetters)).
//!
//! - **Acknowledgement**: new entries are read with `XREADGROUP ... >`; an entry is `XACK`ed only
//!   once its handler resolved `Ok` (the runtime's [`Disposition::Ack`](crate::Disposition::Ack)),
//!   and its settle returns only once Redis answered that `XACK`. At most one `XACK` of a source
//!   is in flight: the entries settled while it is go together in the next one
//!   (`XACK <stream> <group> <id1> … <idN>`), so units in flight cost one command per round trip
//!   instead of one each; one unit at a time, each `XACK` carries one id.
//! - **Return**: a failed entry is left pending in the group. The source claims pending entries
//!   back itself with `XAUTOCLAIM` once they have been idle for the topology's
//!   [`claim_idle`](RedisTopology::claim_idle): that idle time is the backoff (it replaces the
//!   runtime's own, which Redis cannot schedule), and it is what brings a failed entry back until
//!   it reaches the bound (rule 1's last sentence). Entries `XAUTOCLAIM` reports as deleted (trimmed
//!   away while pending) are logged with `tracing::warn!` and counted in
//!   `delivery_pending_deleted_total{source}`, never dropped silently.
//! - **The bound is Redis's count**: a unit's [`DeliveryCount`](crate::DeliveryCount) is the
//!   pending entry's *times delivered* as Redis keeps it. An entry read with `XREADGROUP ... >`
//!   is on its first delivery (Redis sets the counter to 1); an entry claimed back is read with
//!   `XPENDING <stream> <group> <id> <id> 1 <consumer>` (the extended form) right after the
//!   claim, which incremented it. Nothing is counted in the process, so a restart or another
//!   replica continues the same count. [`Source::max_deliveries`](crate::Source::max_deliveries)
//!   is the topology's [`max_deliveries`](RedisTopology::max_deliveries); an entry claimed with a
//!   count already past it (its consumers kept dying on it) goes to the dead letter as
//!   `exhausted` without reaching a handler again.
//! - **Dead letter**: past the bound, malformed or rejected, the entry is `XADD`ed to the
//!   dead-letter stream with all its fields as read, plus [`crate::headers::DEAD_LETTER_REASON`],
//!   [`crate::headers::DEAD_LETTER_DETAIL`], [`crate::headers::DEAD_LETTER_SOURCE`], [`crate::headers::DEAD_LETTER_ENTRY_ID`]
//!   and [`crate::headers::DEAD_LETTER_DELIVERY_COUNT`]; only once Redis answered the `XADD` is it `XACK`ed.
//!   A failed `XADD` leaves it pending (returned), never acknowledged. A crash between the two
//!   leaves a duplicate in the dead letter, never a loss.
//! - **Blocking reads** run on a connection of their own with no client response timeout (the
//!   client's default 500 ms would cut every `BLOCK` short); the source bounds them itself
//!   (`BLOCK` plus a margin). Acknowledgements and dead-lettering use a second connection.
//!
//! # The entry layout and the unit id
//!
//! A unit is one stream entry. Its payload is the field [`FIELD_PAYLOAD`] (`payload`, bytes as
//! they are; an entry without it has an empty payload, which a `Json` handler refuses as
//! malformed, so it goes to the dead letter intact). Every other field except [`FIELD_ID`] is a
//! header of the unit.
//!
//! The [`UnitId`](crate::UnitId) is the producer-supplied field [`FIELD_ID`] (`id`) when present
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

mod ack;
mod codec;
mod dead_letter;
mod publish;
mod settle;
mod source;
mod topology;

pub use dead_letter::RedisDeadLetters;
pub use publish::publish;
pub use settle::RedisHandle;
pub use source::RedisSource;
pub use topology::RedisTopology;

/// The Redis client (crate `redis`), re-exported so its version always matches the connections
/// [`connect`] and [`publish`] take.
pub use ::redis as client;

use std::time::Duration;

use ::redis::AsyncConnectionConfig;
use ::redis::aio::{ConnectionManager, ConnectionManagerConfig, MultiplexedConnection};

use crate::transport::TransportError;

/// The field holding the unit's payload.
pub const FIELD_PAYLOAD: &str = "payload";
/// The field holding the producer-supplied unit id.
pub const FIELD_ID: &str = "id";

/// How long a command on the non-blocking connection may take before it counts as failed.
const COMMAND_TIMEOUT: Duration = Duration::from_secs(10);

fn client(url: &str) -> Result<::redis::Client, TransportError> {
    ::redis::Client::open(url).map_err(|e| TransportError::new("parsing the Redis URL", e))
}

async fn open(
    client: &::redis::Client,
    response_timeout: Option<Duration>,
) -> Result<MultiplexedConnection, TransportError> {
    let config = AsyncConnectionConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(response_timeout);
    client
        .get_multiplexed_async_connection_with_config(&config)
        .await
        .map_err(|e| TransportError::new("connecting to Redis", e))
}

/// A connection to `url` (`redis://host:port/db`) for commands that do not block — a handler's
/// effects, publishing, the topology — connected before it returns, with a 10 s response
/// timeout. Cloning is cheap; clones share it.
///
/// It reconnects by itself (redis' [`ConnectionManager`]): after a restart, a failover or a
/// dropped connection, a command in flight when it dropped fails (a handler returning that error
/// has its unit returned and delivered again), and the next command goes on a fresh connection —
/// a few seconds without Redis cost some retries, never a stream of units failing to their bound.
pub async fn connect(url: &str) -> Result<ConnectionManager, TransportError> {
    let config = ConnectionManagerConfig::new()
        .set_connection_timeout(Some(Duration::from_secs(5)))
        .set_response_timeout(Some(COMMAND_TIMEOUT))
        .set_min_delay(Duration::from_millis(100))
        .set_max_delay(Duration::from_secs(2))
        .set_number_of_retries(3);
    ConnectionManager::new_with_config(client(url)?, config)
        .await
        .map_err(|e| TransportError::new("connecting to Redis", e))
}

/// Connects to `url` and declares `topology` ([`RedisTopology::declare`]).
pub async fn declare(url: &str, topology: &RedisTopology) -> Result<(), TransportError> {
    let mut connection = connect(url).await?;
    topology.declare(&mut connection).await
}
