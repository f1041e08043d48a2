//! Sinks: where a relay function sends a record, and the only makers of a [`Receipt`](super::Receipt).
//! Each sends under the record's own id and returns a receipt only once the receiver confirmed.
//!
//! | sink | feature | the record id travels as | a receipt for |
//! |---|---|---|---|
//! | `RabbitSink` | `lapin` | `message_id` | the publisher confirm's `ack`, nothing returned |
//! | `KafkaSink` | `kafka` | the `message-id` header | the idempotent producer's `acks=all` delivery report |
//! | `HttpSink` | `http` | `Idempotency-Key`; signed as a Standard Webhooks sender (`HttpSink::standard_webhooks`), `webhook-id` too | a 2xx answer |
//!
//! The in-memory stand-in for a receiver, which confirms without sending anything, is not one of
//! them: it is `testing::MemorySink`, behind the `testing` feature, so no production relay can
//! be wired to a sink whose receipt proves nothing.

#[cfg(feature = "http")]
mod http;

#[cfg(feature = "http")]
pub use http::*;
// The broker sinks live beside their broker's transport (`rabbitmq::sink`, `kafka::sink`) and
// are named here too, with every sink.
#[cfg(feature = "kafka")]
pub use crate::kafka::sink::{DEFAULT_DELIVERY_TIMEOUT, KafkaSink, MESSAGE_ID};
#[cfg(feature = "lapin")]
pub use crate::rabbitmq::sink::{DEFAULT_CONFIRM_TIMEOUT, DEFAULT_CONFIRM_WINDOW, RabbitSink};
