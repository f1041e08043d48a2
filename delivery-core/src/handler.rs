//! The handler the runtime runs: what `#[consumer]` generates around a user's async fn.

use std::future::Future;
use std::time::Duration;

use crate::disposition::Outcome;
use crate::error::{FailureKind, HandlerError};
use crate::unit::Unit;

/// A unit handler over shared state `S`.
///
/// Implemented by `#[consumer]` for the unit struct it generates in place of the annotated fn;
/// implement it by hand only for handlers that cannot be written as one function. The returned
/// future resolves to the run's [`Outcome`]; the runtime, not the handler, acknowledges.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a consumer handler for state `{S}`",
    label = "not a handler",
    note = "annotate an `async fn` with `#[delivery::consumer]`; its `State<T>` parameter, if any, must match the consumer's `.state(..)`",
    note = "a handler taking `Batch<T>` is a batch handler: run it with `.batch(max_size, max_wait).run(..)`"
)]
pub trait Handler<S>: Send + Sync + 'static {
    /// Whether the handler takes the unit's transaction (a parameter whose
    /// [`FromUnit::IN_TRANSACTION`](crate::FromUnit::IN_TRANSACTION) is `true`): the runtime then
    /// has the unit's handle [begin](crate::Settle::begin) it before each run. `#[consumer]` sets
    /// it from the parameters.
    const IN_TRANSACTION: bool = false;

    /// Resolves the parameters from `unit` and `state`, then runs the handler.
    fn call(&self, unit: &Unit, state: &S) -> impl Future<Output = Outcome> + Send + 'static;

    /// Called by the runtime whenever the source has no unit waiting: a batch handler runs the
    /// batch it is gathering now rather than wait for units that are not there.
    #[doc(hidden)]
    #[inline(always)]
    fn source_idle(&self) {}
}

/// A handler's return value, turned into an [`Outcome`].
///
/// Implemented for `Result<T, E>` with `E: Into<HandlerError>`: a return type that cannot carry a
/// failure would swallow it (rule 1).
#[diagnostic::on_unimplemented(
    message = "a handler returning `{Self}` cannot report a failure, so a failed unit would be acknowledged (rule 1)",
    label = "cannot carry a failure",
    note = "return `Result<(), E>` where `E: Into<HandlerError>`; `?` on an ordinary error returns the unit for redelivery, `HandlerError::reject` sends it to the dead letter"
)]
pub trait IntoOutcome {
    /// The outcome this value stands for.
    fn into_outcome(self) -> Outcome;
}

impl<T, E> IntoOutcome for Result<T, E>
where
    E: Into<HandlerError>,
{
    #[inline]
    fn into_outcome(self) -> Outcome {
        match self {
            Ok(_) => Outcome::Applied,
            Err(error) => outcome_of(error.into()),
        }
    }
}

/// The outcome of a handler's error (a consumer's or a relay's), out of line: the success path
/// stays small enough to inline into the handler's future.
#[cold]
#[inline(never)]
pub(crate) fn outcome_of(error: HandlerError) -> Outcome {
    match error.kind() {
        FailureKind::Retry => match error.delay() {
            None => Outcome::Failed(error.to_string()),
            Some(after) => Outcome::RetryAfter {
                error: error.to_string(),
                after,
            },
        },
        FailureKind::Reject => Outcome::Rejected(error.to_string()),
    }
}

/// A handler bounded by the consumer's [`handler_timeout`](crate::Consumer::handler_timeout): a
/// run that has not resolved when the timeout ends is dropped, and the unit is a failure (returned
/// after its backoff, counted as any failure). Only built when the setting is given, so a consumer
/// without it runs the handler itself, unwrapped.
pub(crate) struct Timed<H> {
    pub(crate) handler: H,
    pub(crate) limit: Duration,
}

impl<S, H: Handler<S>> Handler<S> for Timed<H> {
    const IN_TRANSACTION: bool = H::IN_TRANSACTION;

    #[inline]
    fn call(&self, unit: &Unit, state: &S) -> impl Future<Output = Outcome> + Send + 'static {
        let limit = self.limit;
        // The clock starts here, when the runtime starts the run.
        let run = tokio::time::timeout(limit, self.handler.call(unit, state));
        async move {
            match run.await {
                Ok(outcome) => outcome,
                Err(_) => timed_out(limit),
            }
        }
    }

    #[inline(always)]
    fn source_idle(&self) {
        self.handler.source_idle();
    }
}

#[cold]
#[inline(never)]
fn timed_out(limit: Duration) -> Outcome {
    Outcome::Failed(format!(
        "the handler ran past its timeout ({} ms) and was stopped",
        limit.as_millis()
    ))
}
