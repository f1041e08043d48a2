//! The handler the runtime runs: what `#[consumer]` generates around a user's async fn.

use std::future::Future;

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
    note = "annotate an `async fn` with `#[delivery::consumer]`; its `State<T>` parameter, if any, must match the consumer's `.state(..)`"
)]
pub trait Handler<S>: Send + Sync + 'static {
    /// Resolves the parameters from `unit` and `state`, then runs the handler.
    fn call(&self, unit: &Unit, state: &S) -> impl Future<Output = Outcome> + Send + 'static;
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
