//! What `#[webhook]` implements ([`WebhookHandler`]), and the types its axum `Handler`
//! implementations name.

use std::future::Future;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};

use ::axum::response::Response;

use delivery_core::disposition::Outcome;
use delivery_core::unit::Unit;
use delivery_core::webhook::Verifier;

use super::config::WebhookConfigError;

/// A webhook handler: what `#[webhook(..)]` implements for the unit struct it generates, for
/// every router state `S` its own state can be taken from (`T: FromRef<S>`, as axum's `State`).
///
/// Route it with [`route`](super::route()) (the verifier is built, and its secrets checked, now) or with plain
/// `axum::routing::post(handler)` (built on the first request).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a webhook handler for the router state `{S}`",
    label = "not a webhook handler for this state",
    note = "annotate an `async fn` with `#[delivery::webhook(scheme = .., secret = ..)]`; the state its `State<T>` and its secret closure name must be reachable from the router's state: `T: FromRef<{S}>`"
)]
pub trait WebhookHandler<S>: Clone + Send + Sync + 'static {
    /// The state the handler's parameters are resolved against: its `State<T>`'s `T`, or `()`.
    type State: Send + Sync + 'static;

    /// The handler's name, for logs.
    const NAME: &'static str;

    /// The handler's state, taken from the router's (`FromRef`).
    fn handler_state(state: &S) -> Self::State;

    /// Builds the verifier from the attribute's scheme and secrets, reading them now.
    fn verifier(&self, state: &S) -> Result<Verifier, WebhookConfigError>;

    /// Where a verifier that depends on no state is kept once built. Not public API.
    #[doc(hidden)]
    fn verifier_cache(&self) -> Option<&'static VerifierCache> {
        None
    }

    /// Resolves the parameters from a verified unit and runs the handler.
    fn run(
        &self,
        unit: &Unit,
        state: &Self::State,
    ) -> impl Future<Output = Outcome> + Send + 'static;
}

/// The verifier built on the first request for secrets that depend on no state. Not public API.
#[doc(hidden)]
pub struct VerifierCache(pub(super) OnceLock<Result<Arc<Verifier>, WebhookConfigError>>);

impl VerifierCache {
    #[allow(clippy::new_without_default)]
    pub const fn new() -> Self {
        VerifierCache(OnceLock::new())
    }
}

/// The marker type of the axum `Handler` implementations. Not public API.
#[doc(hidden)]
#[derive(Debug)]
pub enum WebhookMarker {}

/// The future of a webhook request. Not public API.
#[doc(hidden)]
pub type ResponseFuture = Pin<Box<dyn Future<Output = Response> + Send + 'static>>;
