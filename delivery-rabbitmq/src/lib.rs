//! RabbitMQ through lapin (feature `lapin`): a [`Source`](delivery_core::Source) over a quorum queue, the
//! topology helper that declares it, and the operator's view of its dead letter.
//!
//! - **Acknowledgement** is manual: `basic.qos` prefetch is set before `basic.consume`; a unit is
//!   acked only once its handler resolved `Ok`. A failed unit is returned with
//!   `basic.reject(requeue = true)` after the runtime's backoff (reject, not nack). Acks are
//!   coalesced by default — one `basic.ack(multiple = true)` up to the highest delivery tag below
//!   which every unit of the channel is settled, flushed every few milliseconds and at shutdown —
//!   or sent per unit ([`AckMode`]; an ack not yet flushed at a crash is a redelivery, which
//!   rule 3 makes harmless).
//! - **The bound is the broker's**: the delivery count is the quorum queue's `x-delivery-count`
//!   header (0 or absent on the first delivery), and the queue's `x-delivery-limit` with a
//!   dead-letter exchange makes the broker dead-letter a unit past it ([`RabbitTopology`]).
//!   On a classic queue, which keeps no count, the count travels with the unit: a return is a
//!   confirmed copy carrying the incremented count, then an ack of the original
//!   ([`QueueType::Classic`]).
//! - **Poison goes to the dead letter directly**: published intact (body and properties, with
//!   `x-dead-letter-reason`, `x-dead-letter-detail`, `x-dead-letter-source`,
//!   `x-dead-letter-delivery-count` and `x-dead-letter-at` headers) on a confirm channel, and only once the broker
//!   confirmed it, acked; otherwise returned.
//! - **Recovery**: a lost connection or channel is reopened by [`RabbitSource`]'s `receive` with a
//!   backoff; units in flight at the loss come back from the broker. A connection that is yours
//!   is not redialled (see [`RabbitConnector`]).
//! - **Your own client**: everything that talks to the broker takes a [`RabbitConnector`] — a URL,
//!   your lapin [`Connection`](lapin::Connection) (its properties, TLS and executor kept), or a factory of them.
//! - **Operator side**: [`RabbitDeadLetters`] is the dead letter's [`DeadLetters`](delivery_core::DeadLetters):
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

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod acks;
mod codec;
mod connector;
mod dead_letter;
mod error;
#[doc(hidden)]
pub mod marker;
mod publish;
mod settle;
mod shared;
mod sink;
mod source;
mod topology;

/// The client this crate runs on, re-exported: name its types through it so they are the ones
/// this crate takes.
pub use ::lapin;
pub use acks::AckMode;
pub use codec::properties_of;
pub use connector::{RabbitConnector, connect};
pub use dead_letter::RabbitDeadLetters;
pub use publish::ConfirmedPublisher;
pub use publish::{DEFAULT_CONFIRM_TIMEOUT, DEFAULT_CONFIRM_WINDOW};
pub use settle::RabbitHandle;
pub use sink::RabbitSink;
pub use source::RabbitSource;
pub use topology::{QueueType, RabbitTopology, TopologyError, declare};
