//! The runtime of [`delivery`](https://docs.rs/delivery): units, dispositions, the consumer runtime,
//! the in-memory broker, and the transports behind features. Depend on the `delivery` facade
//! rather than on this crate; it re-exports everything here together with the attribute macros.
//!
//! | where | what | rule |
//! |---|---|---|
//! | [`unit`] | the delivered unit: id, payload, delivery count, stamp, headers | 3, 4 |
//! | [`decide`] | the one decision: ack, return after backoff, or dead letter | 1, 2 |
//! | [`consumer`] | the runtime loop; `consumer::settle` is where every unit is acknowledged | 1, 2 |
//! | [`extract`] | handler parameters: `Json`, `State`, metadata | 3 |
//! | [`marker`] | what a handler may not take: clocks, minters, ack handles | 1, 3 |
//! | [`memory`] | the in-memory broker with real redelivery semantics and an operator's dead letter | 1, 2 |
//! | [`testing`] | helpers for users' own tests | 3 |
//!
//! # Features
//!
//! | feature | integration |
//! |---|---|
//! | `lapin` | RabbitMQ (lapin): its acknowledgement handles are refused as handler parameters |
//! | `axum`, `postgres`, `sqlite`, `redis`, `nats`, `kafka`, `http` | reserved for their integrations |
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

pub mod consumer;
pub mod disposition;
mod error;
pub mod extract;
mod handler;
pub mod marker;
pub mod memory;
pub mod testing;
pub mod transport;
pub mod unit;
pub mod webhook;

pub use consumer::{Consumer, Report};
pub use disposition::{
    Backoff, DeadLetterReason, Disposition, Outcome, ReasonKind, RedeliveryPolicy, decide,
};
pub use error::{FailureKind, HandlerError};
pub use extract::{FromUnit, Json, Malformed, State};
pub use handler::{Handler, IntoOutcome};
pub use marker::{AckHandle, Clock, Minter};
pub use transport::{Settle, Source, TransportError};
pub use unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// Names the macros' expansions use. Not public API: no semver guarantees.
#[doc(hidden)]
pub mod __private {
    pub use crate::extract::{FromUnit, Malformed};
    pub use crate::handler::{Handler, IntoOutcome};
    pub use crate::disposition::Outcome;
    pub use crate::marker::probe;
    pub use crate::unit::Unit;

    /// Extracts one parameter, or ends the run as malformed.
    #[inline]
    pub fn extract<T: FromUnit<S>, S>(unit: &Unit, state: &S) -> Result<T, Malformed> {
        T::from_unit(unit, state)
    }

    /// Checks at the definition that a parameter type is an extractor for the state `S`.
    #[inline]
    pub fn assert_extractor<T: FromUnit<S>, S>() {}

    /// The handler's return value as the run's outcome.
    #[inline]
    pub fn into_outcome<T: IntoOutcome>(value: T) -> Outcome {
        value.into_outcome()
    }

    /// Turns a decode failure into the run's outcome.
    #[inline]
    pub fn malformed(error: Malformed) -> Outcome {
        Outcome::Malformed(error.to_string())
    }
}
