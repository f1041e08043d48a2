//! NATS JetStream through async-nats (feature `nats`): a [`Source`](delivery_core::Source) over a durable
//! pull consumer, the topology helper that declares it, and the operator's view of its dead
//! letter.
//!
//! - **Acknowledgement** is explicit: units are pulled at most `batch` at a time and buffered in
//!   the source; a unit is acked (`+ACK`) only once its handler resolved `Ok`. A failed unit is
//!   returned with `-NAK` carrying the runtime's backoff as its delay. Acknowledgements are sent
//!   without waiting for JetStream's reply (async-nats `ack`, not `double_ack`): a lost one means
//!   a redelivery after `ack_wait`, which changes nothing under rule 3.
//!   [`NatsTopology::confirm_acks`] makes `+ACK` and `+TERM` wait for it, at a round trip each.
//! - **The bound is JetStream's**: the delivery count is the message's own `delivered` metadata
//!   (1 on the first delivery), and the consumer's `max_deliver`, declared by [`NatsTopology`], is
//!   reported as [`Source::max_deliveries`](delivery_core::Source::max_deliveries). JetStream itself only
//!   stops delivering past it (with an advisory), so the consumer moves a unit that fails on its
//!   last delivery (`delivered == max_deliver`) to the dead-letter stream itself, as exhausted.
//! - **Poison goes to the dead letter directly**: published to the dead-letter stream intact
//!   (payload and every header), with `x-dead-letter-reason`, `-detail`, `-source` (stream),
//!   `-subject`, `-sequence` (stream sequence) and `-delivery-count` headers; only once JetStream
//!   acknowledged the publish is the unit terminated (`+TERM`). If the publish is not confirmed
//!   the unit is returned (`-NAK`) instead: never terminated unless it is in the dead letter.
//! - **In progress**: JetStream starts a unit's `ack_wait` when it sends it, so a unit is kept in
//!   progress (`+WPI`) from then on. While it waits in the source's buffer behind slow handlers,
//!   the pull sends `+WPI` for it every sixth of `ack_wait`, and a buffered unit it could not keep
//!   within half of `ack_wait` is let go (JetStream delivers it again) rather than handed to a
//!   handler while JetStream may be delivering it elsewhere (see `pull.rs`). While its handler
//!   runs, the runtime sends `+WPI` every third of `ack_wait`. Each wait is kept up to
//!   `in_progress_limit` (past it JetStream may deliver the unit again), so a slow handler runs
//!   once.
//! - **Identity**: a unit's [`UnitId`](delivery_core::UnitId) is its producer's `Nats-Msg-Id` (the id
//!   JetStream deduplicates on), else `<stream>:<stream sequence>`; its
//!   [`Stamp`](delivery_core::Stamp) is the stream sequence.
//! - **Operator side**: [`NatsDeadLetters`] is the dead letter's
//!   [`DeadLetters`](delivery_core::DeadLetters): count (the `delivery_dead_letter_depth` gauge), list,
//!   peek, redrive under the same id, purge.
//!
//! ```no_run
//! use delivery::{consumer, Consumer, HandlerError, Json};
//! use delivery::nats::{NatsSource, NatsTopology};
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
//! let url = "nats://127.0.0.1:4222";
//! let topology = NatsTopology::new("ORDERS").subjects(["orders.>"]).max_deliver(5);
//! delivery::nats::declare(url, &topology).await?;
//! let source = NatsSource::connect(url, topology).await?;
//! Consumer::new(source).concurrency(16).run(handle).await;
//! # Ok(()) }
//! ```
//!
//! **Stranded units are swept**: a unit whose last delivery never settles (its consumer crashed,
//! or its move to the dead letter was not confirmed) is not delivered again by JetStream, which
//! only announces it with a `MAX_DELIVERIES` advisory. The topology captures those advisories in a
//! stream of their own, and [`NatsDeadLetters::sweep`] — run by every [`NatsSource`] at start and
//! every [`NatsTopology::sweep_every`] — moves each such unit from the stream into the dead
//! letter, intact, reason `exhausted`. JetStream emits the advisory only once the last delivery's
//! `ack_wait` has passed while a consumer of the durable is pulling, so a stranded unit reaches the
//! dead letter one `ack_wait` plus at most one `sweep_every` after its consumer died, provided
//! some consumer of the durable runs (or an operator sweeps after one ran).
//!
//! **Known limit**: a unit stranded and then removed from the stream (by its limits, before a
//! sweep) cannot be moved; the sweep logs it and reports it in [`SweepReport::missing`].

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

mod codec;
mod connect;
mod dead_letter;
mod error;
mod pull;
mod settle;
mod shared;
mod source;
mod topology;

/// The client this crate runs on, re-exported: name its types through it so they are the ones
/// this crate takes.
pub use ::async_nats;
pub use codec::headers_of;
pub use connect::{connect, declare};
pub use dead_letter::{NatsDeadLetters, SweepReport};
pub use settle::NatsHandle;
pub use source::NatsSource;
pub use topology::{NatsTopology, Retention, TopologyError};
