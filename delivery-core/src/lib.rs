//! The core of [`delivery`](https://docs.rs/delivery): what every transport shares, and no
//! broker, database or web framework client. Depend on the `delivery` facade rather than on this
//! crate (it re-exports what a service uses, with the attribute macros); depend on this crate to
//! write a transport (see [`transport`]).
//!
//! | where | what | rule |
//! |---|---|---|
//! | [`unit`](mod@unit) | the delivered unit: id, payload, delivery count, stamp, headers | 3, 4 |
//! | [`disposition`] | [`disposition::decide`], the one decision: ack, return after backoff, or dead letter | 1, 2 |
//! | [`consumer`] | the runtime loop; `consumer::settle` is where every unit is acknowledged; per-key order (`Consumer::order_by_key`) | 1, 2 |
//! | [`dead_letter`] | the operator's API over every dead letter (`DeadLetters`, `AnyDeadLetters`) | 2 |
//! | [`extract`] | handler parameters: `Json`, `State`, metadata | 3 |
//! | [`marker`] | what a handler may not take: clocks, minters, ack handles | 1, 3 |
//! | [`memory`] | the in-memory broker with real redelivery semantics and an operator's dead letter; an offset-log mode (partitions, consumer groups, the commit watermark) | 1, 2 |
//! | [`offset`] | the commit watermark of a stream read by offset: never committed past a unit not final | 1 |
//! | [`outbox`] | the sending side's relay: records claimed from a [`outbox::Store`], sent by a relay function, marked only for a [`outbox::Receipt`] | 6 |
//! | [`webhook`] | a third party's delivery verified over its raw body before parsing (GitHub, Stripe, Standard Webhooks, Slack, Shopify, any HMAC scheme), and the signer of webhooks sent out | 5 |
//! | [`transport`] | what a transport is written with: `Source`, `Settle`, `TransportError`, the dead letter's helpers | 1, 2 |
//! | [`testing`] | helpers for users' own tests; the conformance suite every transport passes (feature `testing`) | 3 |
//! | [`trace`] | a span per unit, webhook request and relay attempt; the trace context from the outbox write to the consumer | — |
//! | [`observe`], [`health`] | every metric's name and description; a consumer's or relay's health | — |
//!
//! The transports are crates of their own over this one: delivery-rabbitmq, delivery-redis,
//! delivery-nats, delivery-kafka, delivery-sql (PostgreSQL and SQLite: outbox stores, inbox,
//! stamp guard), delivery-axum (webhook routes, the console, health) and delivery-http (the HTTP
//! sink).
//!
//! # Features
//!
//! | feature | adds |
//! |---|---|
//! | `opentelemetry` | the W3C trace context (`traceparent`, `tracestate`) written with each outbox record, sent by every sink and continued by every source and `#[webhook]` route, through `tracing-opentelemetry` ([`trace`]) |
//! | `testing` | `testing::MemorySink`, the relay's receiver for tests (a receipt for a send that went nowhere), and `testing::conformance`, the suite every transport passes: enable it from `[dev-dependencies]` only, never in a production build |
//! | `rand-*`, `ulid-*`, `fastrand-*` | those releases' generators are [`marker::Minter`]s, refused as handler parameters |
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
// docs.rs (`--cfg docsrs`, nightly): each item behind a feature shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

pub mod batch;
pub mod consumer;
pub mod dead_letter;
pub mod disposition;
pub mod error;
pub mod extract;
pub mod handler;
pub mod headers;
pub mod health;
pub mod marker;
pub mod memory;
pub mod observe;
pub mod offset;
pub mod outbox;
mod pace;
mod runtime;
mod source;
mod stopwatch;
pub mod testing;
pub mod trace;
pub mod transport;
mod transport_error;
pub mod unit;
pub mod webhook;

pub use batch::{Batch, BatchHandler, BatchOutcome};
pub use consumer::{Consumer, Report};
pub use dead_letter::{DeadLetter, DeadLetters, RedriveReport};
pub use disposition::{
    Backoff, DeadLetterReason, Disposition, Outcome, ReasonKind, RedeliveryPolicy, decide,
};
pub use error::BoxError;
pub use error::{FailureKind, HandlerError};
pub use extract::{FromUnit, Json, Malformed, State};
pub use handler::{Handler, IntoOutcome};
pub use health::Health;
pub use marker::{AckHandle, Clock, Minter};
pub use outbox::{OutboxRecord, Receipt, RecordId};
pub use stopwatch::Stopwatch;
pub use transport::{Settle, Source, TransportError, TransportErrorKind};
pub use unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// Names the macros' expansions use. Not public API: no semver guarantees.
#[doc(hidden)]
pub mod __private {
    pub use crate::batch::{Batch, BatchHandler, BatchOutcome, IntoBatchOutcome};
    pub use crate::disposition::Outcome;
    pub use crate::extract::{FromUnit, Malformed};
    pub use crate::handler::{Handler, IntoOutcome};
    pub use crate::marker::probe;
    pub use crate::marker::probe::no_transport as transport_probe;
    pub use crate::unit::Unit;

    /// Extracts one parameter, or ends the run as malformed.
    #[inline]
    pub fn extract<T: FromUnit<S>, S>(unit: &Unit, state: &S) -> Result<T, Malformed> {
        T::from_unit(unit, state)
    }

    /// Checks at the definition that a parameter type is an extractor for the state `S`.
    #[inline]
    pub fn assert_extractor<T: FromUnit<S>, S>() {}

    pub use crate::outbox::{Attempt, FromRecord, IntoAttempt, Record, Relay};

    /// Extracts one relay function parameter, or ends the attempt as malformed.
    #[inline]
    pub fn extract_record<T: FromRecord<S>, S>(record: &Record, state: &S) -> Result<T, Malformed> {
        T::from_record(record, state)
    }

    /// Checks at the definition that a parameter type is a relay extractor for the state `S`.
    #[inline]
    pub fn assert_record_extractor<T: FromRecord<S>, S>() {}

    /// Turns a decode failure into the run's outcome.
    #[inline]
    pub fn malformed(error: Malformed) -> Outcome {
        Outcome::Malformed(error.to_string())
    }

    /// Turns a batch's state that could not be resolved into its outcome (a state never fails
    /// to resolve; a batch handler takes nothing else).
    #[cold]
    pub fn batch_malformed(error: Malformed) -> BatchOutcome {
        BatchOutcome::failed(crate::HandlerError::retry(format!(
            "the batch's parameters could not be resolved: {error}"
        )))
    }

    pub use returned::{
        AttemptViaBoxError, AttemptViaHandlerError, AttemptViaNothing, BatchViaBoxError,
        BatchViaHandlerError, BatchViaNothing, CarriesFailure, ProvesReceipt, Returned,
        ViaBoxError, ViaHandlerError, ViaNothing,
    };

    /// The handler's return value as an outcome, by the first route that applies (autoref
    /// specialization, resolved at the macro's call site where the type is concrete):
    /// `(&&Returned::new(value)).outcome()` finds
    /// 1. `Result<_, E>` with `E: Into<HandlerError>` (any `std::error::Error`, `HandlerError`);
    /// 2. `Result<_, E>` with `E: Into<BoxError>` (`anyhow::Error`, `Box<dyn Error + Send + Sync>`,
    ///    a message): a retry;
    /// 3. anything else: refused with [`CarriesFailure`]'s message.
    mod returned {
        use std::cell::Cell;

        use crate::batch::{BatchOutcome, IntoBatchOutcome};
        use crate::disposition::Outcome;
        use crate::error::{BoxError, HandlerError};
        use crate::handler::IntoOutcome;
        use crate::outbox::{Attempt, IntoAttempt, Receipt};

        pub struct Returned<R>(Cell<Option<R>>);

        impl<R> Returned<R> {
            #[inline]
            pub fn new(value: R) -> Self {
                Returned(Cell::new(Some(value)))
            }

            #[inline]
            fn take(&self) -> R {
                self.0
                    .take()
                    .expect("a handler's return value is converted once")
            }
        }

        pub trait ViaHandlerError {
            fn outcome(&self) -> Outcome;
        }
        impl<T, E: Into<HandlerError>> ViaHandlerError for &Returned<Result<T, E>> {
            #[inline]
            fn outcome(&self) -> Outcome {
                self.take().into_outcome()
            }
        }

        pub trait ViaBoxError {
            fn outcome(&self) -> Outcome;
        }
        impl<T, E: Into<BoxError>> ViaBoxError for &&Returned<Result<T, E>> {
            #[inline]
            fn outcome(&self) -> Outcome {
                self.take().map_err(HandlerError::retry).into_outcome()
            }
        }

        /// Nothing implements it: a return type that reaches this route cannot report a failure.
        #[diagnostic::on_unimplemented(
            message = "a handler returning `{Self}` cannot report a failure, so a failed unit would be acknowledged (rule 1)",
            label = "cannot carry a failure",
            note = "return `Result<_, E>` where `E` is an error: any `std::error::Error + Send + Sync + 'static`, `HandlerError`, `anyhow::Error` or `Box<dyn Error + Send + Sync>`; `?` on an error returns the unit for redelivery, `HandlerError::reject` sends it to the dead letter"
        )]
        pub trait CarriesFailure {}

        pub trait ViaNothing<R> {
            fn outcome(&self) -> Outcome
            where
                R: CarriesFailure;
        }
        impl<R> ViaNothing<R> for Returned<R> {
            fn outcome(&self) -> Outcome
            where
                R: CarriesFailure,
            {
                unreachable!("no type implements CarriesFailure")
            }
        }

        // The same routes for a batch handler, whose success is `()` or a `BatchOutcome`, or
        // which returns a `BatchOutcome`: `(&&Returned::new(value)).batch_outcome()`.

        pub trait BatchViaHandlerError {
            fn batch_outcome(&self) -> BatchOutcome;
        }
        impl<R: IntoBatchOutcome> BatchViaHandlerError for &Returned<R> {
            #[inline]
            fn batch_outcome(&self) -> BatchOutcome {
                self.take().into_batch_outcome()
            }
        }

        pub trait BatchViaBoxError {
            fn batch_outcome(&self) -> BatchOutcome;
        }
        impl<T, E: Into<BoxError>> BatchViaBoxError for &&Returned<Result<T, E>>
        where
            Result<T, HandlerError>: IntoBatchOutcome,
        {
            #[inline]
            fn batch_outcome(&self) -> BatchOutcome {
                self.take()
                    .map_err(HandlerError::retry)
                    .into_batch_outcome()
            }
        }

        pub trait BatchViaNothing<R> {
            fn batch_outcome(&self) -> BatchOutcome
            where
                R: CarriesFailure;
        }
        impl<R> BatchViaNothing<R> for Returned<R> {
            fn batch_outcome(&self) -> BatchOutcome
            where
                R: CarriesFailure,
            {
                unreachable!("no type implements CarriesFailure")
            }
        }

        // The same routes for a relay function, whose success must be the sink's `Receipt`:
        // `(&&Returned::new(value)).attempt()`.

        pub trait AttemptViaHandlerError {
            fn attempt(&self) -> Attempt;
        }
        impl<E: Into<HandlerError>> AttemptViaHandlerError for &Returned<Result<Receipt, E>> {
            #[inline]
            fn attempt(&self) -> Attempt {
                self.take().into_attempt()
            }
        }

        pub trait AttemptViaBoxError {
            fn attempt(&self) -> Attempt;
        }
        impl<E: Into<BoxError>> AttemptViaBoxError for &&Returned<Result<Receipt, E>> {
            #[inline]
            fn attempt(&self) -> Attempt {
                self.take().map_err(HandlerError::retry).into_attempt()
            }
        }

        /// Nothing implements it: a relay function returning anything but `Result<Receipt, _>`
        /// proves nothing about the receiver.
        #[diagnostic::on_unimplemented(
            message = "a relay function returning `{Self}` does not prove the receiver confirmed the record (rule 6)",
            label = "not `Result<Receipt, _>`",
            note = "return `Result<Receipt, E>`: a `Receipt` comes only from a sink (`sink.send(&record).await?`), once the receiver acknowledged; the relay marks the record delivered only then"
        )]
        pub trait ProvesReceipt {}

        pub trait AttemptViaNothing<R> {
            fn attempt(&self) -> Attempt
            where
                R: ProvesReceipt;
        }
        impl<R> AttemptViaNothing<R> for Returned<R> {
            fn attempt(&self) -> Attempt
            where
                R: ProvesReceipt,
            {
                unreachable!("no type implements ProvesReceipt")
            }
        }
    }
}
