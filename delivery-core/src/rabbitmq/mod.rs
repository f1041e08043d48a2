//! RabbitMQ through lapin (feature `lapin`): a [`Source`](crate::Source) over a quorum queue, the
//! topology helper that declares it, and the operator's view of its dead letter.
//!
//! - **Acknowledgement** is manual: `basic.qos` prefetch is set before `basic.consume`; a unit is
//!   acked only once its handler resolved `Ok`. A failed unit is returned with
//!   `basic.reject(requeue = true)` after the runtime's backoff (reject, not nack).
//! - **The bound is the broker's**: the delivery count is the quorum queue's `x-delivery-count`
//!   header (0 or absent on the first delivery), and the queue's `x-delivery-limit` with a
//!   dead-letter exchange makes the broker dead-letter a unit past it ([`RabbitTopology`]).
//!   On a classic queue, which keeps no count, the count travels with the unit: a return is a
//!   confirmed copy carrying the incremented count, then an ack of the original
//!   ([`QueueType::Classic`]).
//! - **Poison goes to the dead letter directly**: published intact (body and properties, with
//!   `x-dead-letter-reason`, `x-dead-letter-detail`, `x-dead-letter-source` and
//!   `x-dead-letter-delivery-count` headers) on a confirm channel, and only once the broker
//!   confirmed it, acked; otherwise returned.
//! - **Recovery**: a lost connection or channel is reopened by [`RabbitSource`]'s `receive` with a
//!   backoff; units in flight at the loss come back from the broker.
//! - **Operator side**: [`RabbitDeadLetters`] is the dead letter's [`DeadLetters`](crate::DeadLetters):
//!   count, list, peek, redrive and purge.
//!
//! ```no_run
//! use delivery::{consumer, Consumer, HandlerError, Json};
//! use delivery::rabbitmq::{RabbitSource, RabbitTopology};
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
//! let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
//! let topology = RabbitTopology::new("orders").delivery_limit(4);
//! delivery::rabbitmq::declare(url, &topology).await?;
//! let source = RabbitSource::connect(url, topology).await?;
//! Consumer::new(source).concurrency(16).run(handle).await;
//! # Ok(()) }
//! ```

mod codec;
mod dead_letter;
mod publish;
mod settle;
pub(crate) mod sink;
mod source;
mod topology;

pub use codec::properties_of;
pub use dead_letter::RabbitDeadLetters;
pub use publish::ConfirmedPublisher;
pub use settle::RabbitHandle;
pub use sink::RabbitSink;
pub use source::RabbitSource;
pub use topology::{QueueType, RabbitTopology, TopologyError};

use std::time::Duration;

use lapin::{Connection, ConnectionProperties};

use crate::transport::{TransportError, TransportErrorKind};

/// Opens a connection to `url` (`amqp://user:pass@host:port/vhost`, the vhost URL-encoded).
///
/// Each attempt is bounded (10 s), and a connection attempt that gets no answer is made again,
/// three times in all: lapin's handshake can wait forever when the broker closes the connection
/// during it (a handshake timeout under load), and a source must not hang on that.
pub async fn connect(url: &str) -> Result<Connection, TransportError> {
    connect_with(url, ConnectionProperties::default()).await
}

/// [`connect`] with lapin's connection `properties`.
pub(crate) async fn connect_with(
    url: &str,
    properties: ConnectionProperties,
) -> Result<Connection, TransportError> {
    const ATTEMPT: Duration = Duration::from_secs(10);
    for _ in 1..3 {
        match tokio::time::timeout(ATTEMPT, Connection::connect(url, properties.clone())).await {
            Ok(connected) => {
                return connected.map_err(|e| TransportError::new("connecting to RabbitMQ", e));
            }
            Err(_) => {
                tracing::warn!("no answer from RabbitMQ within {ATTEMPT:?}; connecting again")
            }
        }
    }
    tokio::time::timeout(ATTEMPT, Connection::connect(url, properties))
        .await
        .map_err(|_| {
            TransportError::msg(
                "connecting to RabbitMQ",
                format!("no answer within {ATTEMPT:?}, three times"),
            )
            .with_kind(TransportErrorKind::ConnectionLost)
        })?
        .map_err(|e| TransportError::new("connecting to RabbitMQ", e))
}

/// Closes `connection`, waiting at most 5 s for the broker's answer (lapin's close can wait
/// forever when the socket went first).
pub(crate) async fn close(connection: &Connection, why: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(5), connection.close(200, why.into())).await;
}

/// Closes `channel`, waiting at most 5 s (as [`close`]).
pub(crate) async fn close_channel(channel: &lapin::Channel, why: &str) {
    let _ = tokio::time::timeout(Duration::from_secs(5), channel.close(200, why.into())).await;
}

/// Connects to `url` and declares `topology` ([`RabbitTopology::declare`]).
pub async fn declare(
    url: &str,
    topology: &RabbitTopology,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let connection = connect(url).await?;
    let declared = topology.declare(&connection).await;
    close(&connection, "declared").await;
    Ok(declared?)
}
