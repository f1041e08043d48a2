//! `#[webhook]` on axum (feature `axum`): the route that reads the raw body, verifies it, and only
//! then decodes it and runs the handler (rule 5), answering with the status that tells the sender
//! whether to deliver again (rules 1 and 2).
//!
//! | what happened | status | the sender |
//! |---|---|---|
//! | the handler returned `Ok` (applied now, or already applied by an earlier delivery) | `200` | stops |
//! | signature missing, malformed or wrong; timestamp outside the tolerance | `401` | stops: nothing was run, and no retry turns it into a success |
//! | body over the limit (by `Content-Length`, or once read) | `413` | stops |
//! | the body was verified but does not decode into the handler's parameters | `400` | stops |
//! | the handler refused it: [`HandlerError::reject`](delivery_core::HandlerError::reject) | `422` | stops |
//! | the handler failed (`?`, [`HandlerError::retry`](delivery_core::HandlerError::retry)) or panicked | `503` | delivers again |
//! | the webhook's secret is not configured (only when routed with plain `post`) | `500` | delivers again |
//!
//! Each request's outcome is logged once, with `tracing`, under the handler's name; no log line,
//! error or response carries a secret.
//!
//! # The unit
//!
//! The handler's [`Unit`](delivery_core::unit::Unit) holds the verified bytes, the id [`Verifier::unit_id`](delivery_core::webhook::Verifier::unit_id) derives from what
//! the signature covers (or `sha256:<hex>` of the body when the delivery carries none), and the
//! request's headers without those that carry credentials ([`Verifier::unit_headers`](delivery_core::webhook::Verifier::unit_headers)):
//! `Authorization`, `Cookie`, `Proxy-Authorization`, and any named with
//! `#[webhook(credential_headers = ["X-Api-Key"])]` ([`Verifier::credential_header`](delivery_core::webhook::Verifier::credential_header)).
//!
//! # Secrets are checked at startup
//!
//! [`route`] builds the handler's [`Verifier`](delivery_core::webhook::Verifier) when the router is built — reading its environment
//! variables, or taking its secrets from the state — and returns a [`WebhookConfigError`] naming
//! the variable when one is missing. The handler is also an axum handler on its own, so
//! `axum::routing::post(handler)` works too; then the verifier is built on the first request (once
//! per process for secrets from the environment), and a missing secret is answered with `500` and
//! logged, with the variable's name, at `error` level once.

mod config;
mod extract;
mod handler;
mod route;

pub use config::{IntoSecrets, SecretOrigin, WebhookConfigError};
pub use handler::WebhookHandler;
pub use route::route;

/// Names the expansion of `#[webhook]` uses. Not public API: no semver guarantees.
#[doc(hidden)]
pub mod __private {
    pub use ::axum;
    pub use ::axum::extract::FromRef;

    pub use super::config::Config;
    pub use super::extract::{
        Extract, ExtractFn, ReadsRawBody, VerifiedFirst, ViaAnything, ViaFromUnit, ViaRawBody,
    };
    pub use super::handler::{ResponseFuture, VerifierCache, WebhookHandler, WebhookMarker};
    pub use super::route::serve;
}
