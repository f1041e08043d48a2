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
//! The handler's [`Unit`] holds the verified bytes, the id [`Verifier::unit_id`] derives from what
//! the signature covers (or `sha256:<hex>` of the body when the delivery carries none), and the
//! request's headers without those that carry credentials ([`Verifier::unit_headers`]):
//! `Authorization`, `Cookie`, `Proxy-Authorization`, and any named with
//! `#[webhook(credential_headers = ["X-Api-Key"])]` ([`Verifier::credential_header`]).
//!
//! # Secrets are checked at startup
//!
//! [`route`] builds the handler's [`Verifier`] when the router is built — reading its environment
//! variables, or taking its secrets from the state — and returns a [`WebhookConfigError`] naming
//! the variable when one is missing. The handler is also an axum handler on its own, so
//! `axum::routing::post(handler)` works too; then the verifier is built on the first request (once
//! per process for secrets from the environment), and a missing secret is answered with `500` and
//! logged, with the variable's name, at `error` level once.

use std::env::VarError;
use std::fmt;
use std::future::Future;
use std::marker::PhantomData;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use ::axum::extract::Request;
use ::axum::http::{StatusCode, header};
use ::axum::response::{IntoResponse, Response};
use ::axum::routing::MethodRouter;
use bytes::Bytes;
use futures_util::FutureExt as _;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use delivery_core::webhook::{Scheme, Secret, Verifier, VerifyError, body_id};
use delivery_core::disposition::Outcome;
use delivery_core::extract::{FromUnit, Malformed};
use delivery_core::unit::Unit;

/// A webhook handler: what `#[webhook(..)]` implements for the unit struct it generates, for
/// every router state `S` its own state can be taken from (`T: FromRef<S>`, as axum's `State`).
///
/// Route it with [`route`] (the verifier is built, and its secrets checked, now) or with plain
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

/// A `POST` route to `handler` whose verifier is built now, from `state` (the router's state, the
/// one given to `with_state`): a missing environment variable or an unusable secret is an error
/// here, at startup, naming the variable — not a failure on the first delivery.
///
/// ```ignore
/// // The runnable version is on `delivery::webhook` (this crate's doctests build the facade
/// // without its `axum` feature, which the attribute needs).
/// #[webhook(scheme = standard_webhooks, secret = |app: &App| app.secret.clone())]
/// async fn receive(State(app): State<App>, Json(event): Json<Event>) -> Result<(), HandlerError> {
///     /* ... */
/// }
///
/// let router = Router::new()
///     .route("/webhooks", delivery::webhook::route(receive, &app)?)
///     .with_state(app);
/// ```
///
/// The error names what is missing, never the secret:
///
/// ```
/// use delivery_core::webhook::WebhookConfigError;
///
/// let error = WebhookConfigError::MissingEnv { webhook: "receive", var: "WEBHOOK_SECRET" };
/// assert_eq!(
///     error.to_string(),
///     "webhook `receive` has no usable signing secret: environment variable `WEBHOOK_SECRET` is not set",
/// );
/// ```
pub fn route<H, S>(handler: H, state: &S) -> Result<MethodRouter<S>, WebhookConfigError>
where
    H: WebhookHandler<S>,
    S: Clone + Send + Sync + 'static,
{
    let verifier = handler.verifier(state)?;
    tracing::info!(
        webhook = H::NAME,
        scheme = ?verifier.scheme(),
        max_body = verifier.body_limit(),
        "webhook verifier ready"
    );
    Ok(::axum::routing::post(Verified {
        handler,
        verifier: Arc::new(verifier),
    }))
}

/// A handler with the verifier [`route`] built for it.
#[derive(Clone)]
struct Verified<H> {
    handler: H,
    verifier: Arc<Verifier>,
}

impl<H, S> ::axum::handler::Handler<WebhookMarker, S> for Verified<H>
where
    H: WebhookHandler<S>,
    S: Clone + Send + Sync + 'static,
{
    type Future = ResponseFuture;

    fn call(self, request: Request, state: S) -> Self::Future {
        Box::pin(async move {
            let response = receive(&self.handler, &self.verifier, request, &state).await;
            delivery_core::webhook::webhook_answered(H::NAME, self.verifier.scheme(), response.status());
            response
        })
    }
}

/// Why a webhook's verifier could not be built: its secret is missing or unusable. Never carries
/// the secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum WebhookConfigError {
    /// An environment variable a secret is read from is not set.
    #[error(
        "webhook `{webhook}` has no usable signing secret: environment variable `{var}` is not set"
    )]
    MissingEnv {
        /// The handler's name.
        webhook: &'static str,
        /// The variable's name.
        var: &'static str,
    },
    /// An environment variable a secret is read from is set, but empty.
    #[error(
        "webhook `{webhook}` has no usable signing secret: environment variable `{var}` is empty"
    )]
    EmptyEnv {
        /// The handler's name.
        webhook: &'static str,
        /// The variable's name.
        var: &'static str,
    },
    /// An environment variable a secret is read from is not valid UTF-8.
    #[error(
        "webhook `{webhook}` has no usable signing secret: environment variable `{var}` is not valid UTF-8"
    )]
    NotUnicodeEnv {
        /// The handler's name.
        webhook: &'static str,
        /// The variable's name.
        var: &'static str,
    },
    /// No secret at all: the state gave none (an empty list, or `None`).
    #[error("webhook `{webhook}` has no usable signing secret: the state gave none")]
    NoSecret {
        /// The handler's name.
        webhook: &'static str,
    },
    /// A secret the scheme cannot use (a Standard Webhooks secret that is not base64, say).
    #[error(
        "webhook `{webhook}` has no usable signing secret: the secret from {origin} cannot be used: {reason}"
    )]
    Unusable {
        /// The handler's name.
        webhook: &'static str,
        /// Where the secret came from.
        origin: SecretOrigin,
        /// What is wrong with it.
        reason: &'static str,
    },
}

/// Where a webhook secret came from, for an error that names it without showing it.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum SecretOrigin {
    /// The environment variable of this name (`secret = env("VAR")`).
    Env(&'static str),
    /// The state (`secret = |s: &App| ..`).
    State,
}

impl fmt::Display for SecretOrigin {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SecretOrigin::Env(var) => write!(f, "environment variable `{var}`"),
            SecretOrigin::State => f.write_str("the state"),
        }
    }
}

impl WebhookConfigError {
    /// The name of the handler whose secret is at fault.
    pub fn webhook(&self) -> &'static str {
        match self {
            WebhookConfigError::MissingEnv { webhook, .. }
            | WebhookConfigError::EmptyEnv { webhook, .. }
            | WebhookConfigError::NotUnicodeEnv { webhook, .. }
            | WebhookConfigError::NoSecret { webhook }
            | WebhookConfigError::Unusable { webhook, .. } => webhook,
        }
    }

    /// The environment variable at fault, if one is.
    pub fn var(&self) -> Option<&'static str> {
        match self {
            WebhookConfigError::MissingEnv { var, .. }
            | WebhookConfigError::EmptyEnv { var, .. }
            | WebhookConfigError::NotUnicodeEnv { var, .. } => Some(var),
            WebhookConfigError::Unusable {
                origin: SecretOrigin::Env(var),
                ..
            } => Some(var),
            _ => None,
        }
    }
}

/// What a secret closure (`secret = |s: &App| ..`) may return: one secret, none, or several.
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a webhook secret",
    label = "the secret closure returns `{Self}`",
    note = "a secret taken from the state is a `String`, `&'static str` or `Secret`; an `Option` of one (`None`: none from here); or a `Vec` or array of them (several, while one is rotated)"
)]
pub trait IntoSecrets {
    /// The secrets, in order.
    fn into_secrets(self) -> Vec<Secret>;
}

impl IntoSecrets for Secret {
    fn into_secrets(self) -> Vec<Secret> {
        vec![self]
    }
}

impl IntoSecrets for String {
    fn into_secrets(self) -> Vec<Secret> {
        vec![Secret::from(self)]
    }
}

impl IntoSecrets for &str {
    fn into_secrets(self) -> Vec<Secret> {
        vec![Secret::from(self)]
    }
}

impl IntoSecrets for &String {
    fn into_secrets(self) -> Vec<Secret> {
        vec![Secret::from(self)]
    }
}

impl<T: IntoSecrets> IntoSecrets for Option<T> {
    fn into_secrets(self) -> Vec<Secret> {
        self.map_or_else(Vec::new, IntoSecrets::into_secrets)
    }
}

impl<T: IntoSecrets> IntoSecrets for Vec<T> {
    fn into_secrets(self) -> Vec<Secret> {
        self.into_iter()
            .flat_map(IntoSecrets::into_secrets)
            .collect()
    }
}

impl<T: IntoSecrets, const N: usize> IntoSecrets for [T; N] {
    fn into_secrets(self) -> Vec<Secret> {
        self.into_iter()
            .flat_map(IntoSecrets::into_secrets)
            .collect()
    }
}

/// The verifier built on the first request for secrets that depend on no state. Not public API.
#[doc(hidden)]
pub struct VerifierCache(OnceLock<Result<Arc<Verifier>, WebhookConfigError>>);

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

/// Serves one request routed with plain `post(handler)`: the verifier is built first (or taken
/// from the cache), then the request is received as under [`route`]. Not public API.
#[doc(hidden)]
pub fn serve<H, S>(handler: H, request: Request, state: S) -> ResponseFuture
where
    H: WebhookHandler<S>,
    S: Send + Sync + 'static,
{
    Box::pin(async move {
        match lazy_verifier(&handler, &state) {
            Ok(verifier) => {
                let response = receive(&handler, &verifier, request, &state).await;
                delivery_core::webhook::webhook_answered(H::NAME, verifier.scheme(), response.status());
                response
            }
            Err((error, built_now)) => {
                let response = misconfigured(H::NAME, &error, built_now);
                delivery_core::webhook::webhook_counter(H::NAME, "unknown", response.status()).increment(1);
                response
            }
        }
    })
}

/// The verifier, cached when it depends on no state; the error says whether it was found now.
fn lazy_verifier<H: WebhookHandler<S>, S>(
    handler: &H,
    state: &S,
) -> Result<Arc<Verifier>, (WebhookConfigError, bool)> {
    let mut built_now = false;
    let verifier = match handler.verifier_cache() {
        Some(cache) => cache
            .0
            .get_or_init(|| {
                built_now = true;
                handler.verifier(state).map(Arc::new)
            })
            .clone(),
        None => {
            built_now = true;
            handler.verifier(state).map(Arc::new)
        }
    };
    verifier.map_err(|error| (error, built_now))
}

/// `500`: the webhook has no usable secret. Logged at `error` when found, then at `debug`.
fn misconfigured(webhook: &str, error: &WebhookConfigError, built_now: bool) -> Response {
    let status = StatusCode::INTERNAL_SERVER_ERROR;
    if built_now {
        tracing::error!(
            webhook,
            status = status.as_u16(),
            var = error.var(),
            %error,
            "webhook delivery not received: the webhook has no usable secret; every delivery is answered 500 until it has"
        );
    } else {
        tracing::debug!(
            webhook,
            status = status.as_u16(),
            %error,
            "webhook delivery not received: the webhook has no usable secret"
        );
    }
    (status, "webhook receiver is not configured").into_response()
}

/// One delivery: limit, read, verify, and only then decode and run.
async fn receive<H, S>(handler: &H, verifier: &Verifier, request: Request, state: &S) -> Response
where
    H: WebhookHandler<S>,
{
    let (parts, body) = request.into_parts();
    let limit = verifier.body_limit();
    let declared = parts
        .headers
        .get(header::CONTENT_LENGTH)
        .and_then(|v| v.to_str().ok())
        .and_then(|v| v.parse::<u64>().ok());
    if let Some(size) = declared.filter(|size| *size > limit as u64) {
        return too_large(H::NAME, limit, Some(size));
    }
    let body = match Limited::new(body, limit).collect().await {
        Ok(collected) => collected.to_bytes(),
        Err(error) if error.is::<LengthLimitError>() => return too_large(H::NAME, limit, None),
        Err(error) => {
            let status = StatusCode::BAD_REQUEST;
            tracing::warn!(
                webhook = H::NAME,
                status = status.as_u16(),
                %error,
                "webhook delivery refused: its body could not be read; nothing was run"
            );
            return (status, "the request body could not be read").into_response();
        }
    };

    // Rule 5: the bytes as received, verified before anything reads them.
    if let Err(error) = verifier.verify(&parts.headers, &body) {
        return refused(H::NAME, &error);
    }

    // The id from what the signature covers; the headers without the caller's credentials.
    let id = verifier
        .unit_id(&parts.headers, &body)
        .unwrap_or_else(|| body_id(&body));
    let mut unit = Unit::new(id, body).with_headers(verifier.unit_headers(&parts.headers));
    if let Some(stamp) = verifier.stamp(unit.payload()) {
        unit = unit.with_stamp(stamp);
    }
    let span = delivery_core::trace::webhook_span(H::NAME, &unit);
    let outcome = tracing::Instrument::instrument(run(handler, &unit, state), span.clone()).await;
    span.in_scope(|| respond(H::NAME, &unit, &outcome))
}

fn too_large(webhook: &str, limit: usize, declared: Option<u64>) -> Response {
    let status = StatusCode::PAYLOAD_TOO_LARGE;
    tracing::warn!(
        webhook,
        status = status.as_u16(),
        limit,
        declared,
        "webhook delivery refused: the body is over the limit; nothing was run"
    );
    (status, "webhook body is over the limit").into_response()
}

fn refused(webhook: &str, error: &VerifyError) -> Response {
    let status = error.status_code();
    tracing::warn!(
        webhook,
        status = status.as_u16(),
        %error,
        "webhook delivery refused: it failed verification; nothing was run"
    );
    let text = match status {
        StatusCode::PAYLOAD_TOO_LARGE => "webhook body is over the limit",
        StatusCode::INTERNAL_SERVER_ERROR => "webhook receiver is not configured",
        _ => "webhook signature verification failed",
    };
    (status, text).into_response()
}

/// Runs the handler; a panic, while taking its state, resolving the parameters or running, is a
/// failure.
async fn run<H: WebhookHandler<S>, S>(handler: &H, unit: &Unit, state: &S) -> Outcome {
    let state = match std::panic::catch_unwind(AssertUnwindSafe(|| H::handler_state(state))) {
        Ok(state) => state,
        Err(panic) => return Outcome::panicked(&*panic),
    };
    match std::panic::catch_unwind(AssertUnwindSafe(|| handler.run(unit, &state))) {
        Err(panic) => Outcome::panicked(&*panic),
        Ok(future) => AssertUnwindSafe(future)
            .catch_unwind()
            .await
            .unwrap_or_else(|panic| Outcome::panicked(&*panic)),
    }
}

/// The status for the handler's outcome, logged once.
fn respond(webhook: &str, unit: &Unit, outcome: &Outcome) -> Response {
    let id = unit.id().as_str();
    let (status, text) = match outcome {
        Outcome::Applied => {
            let status = StatusCode::OK;
            tracing::debug!(
                webhook,
                unit.id = id,
                status = status.as_u16(),
                "webhook delivery applied"
            );
            (status, "")
        }
        Outcome::Malformed(error) => {
            let status = StatusCode::BAD_REQUEST;
            tracing::warn!(
                webhook,
                unit.id = id,
                status = status.as_u16(),
                error = error.as_str(),
                "webhook delivery refused: verified, but its payload does not decode; the handler did not run"
            );
            (status, "malformed webhook payload")
        }
        Outcome::Rejected(error) => {
            let status = StatusCode::UNPROCESSABLE_ENTITY;
            tracing::warn!(
                webhook,
                unit.id = id,
                status = status.as_u16(),
                error = error.as_str(),
                "webhook delivery rejected by the handler; the sender should not deliver it again"
            );
            (status, "webhook delivery rejected")
        }
        Outcome::Failed(error) => {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            tracing::warn!(
                webhook,
                unit.id = id,
                status = status.as_u16(),
                error = error.as_str(),
                "webhook delivery failed; the sender will deliver it again"
            );
            (status, "webhook delivery failed; deliver it again later")
        }
        Outcome::RetryAfter { error, after } => {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            // Whole seconds, rounded up: never sooner than the handler asked.
            let seconds = after.as_secs() + u64::from(after.subsec_nanos() > 0);
            tracing::warn!(
                webhook,
                unit.id = id,
                status = status.as_u16(),
                error = error.as_str(),
                retry_after_s = seconds,
                "webhook delivery failed; the sender will deliver it again, not before Retry-After"
            );
            return (
                status,
                [(axum::http::header::RETRY_AFTER, seconds.to_string())],
                "webhook delivery failed; deliver it again after Retry-After",
            )
                .into_response();
        }
        Outcome::Panicked(error) => {
            let status = StatusCode::SERVICE_UNAVAILABLE;
            tracing::error!(
                webhook,
                unit.id = id,
                status = status.as_u16(),
                error = error.as_str(),
                "webhook handler panicked; the sender will deliver it again"
            );
            (status, "webhook delivery failed; deliver it again later")
        }
    };
    (status, text).into_response()
}

/// Builds a verifier from the attribute's arguments. Not public API.
#[doc(hidden)]
pub struct Config {
    webhook: &'static str,
    scheme: Scheme,
    secrets: Vec<(SecretOrigin, Secret)>,
    error: Option<WebhookConfigError>,
    max_body: Option<usize>,
    tolerance: Option<Duration>,
    credential_headers: Vec<&'static str>,
}

impl Config {
    pub fn new(webhook: &'static str, scheme: Scheme) -> Self {
        Config {
            webhook,
            scheme,
            secrets: Vec::new(),
            error: None,
            max_body: None,
            tolerance: None,
            credential_headers: Vec::new(),
        }
    }

    /// `env("VAR")`: read now.
    pub fn env(mut self, var: &'static str) -> Self {
        if self.error.is_some() {
            return self;
        }
        let webhook = self.webhook;
        match std::env::var(var) {
            Ok(value) if value.is_empty() => {
                self.error = Some(WebhookConfigError::EmptyEnv { webhook, var });
            }
            Ok(value) => self
                .secrets
                .push((SecretOrigin::Env(var), Secret::from(value))),
            Err(VarError::NotPresent) => {
                self.error = Some(WebhookConfigError::MissingEnv { webhook, var });
            }
            Err(VarError::NotUnicode(_)) => {
                self.error = Some(WebhookConfigError::NotUnicodeEnv { webhook, var });
            }
        }
        self
    }

    /// `|s: &T| ..`: the closure's secrets, taken from `state` now.
    pub fn from_state<T, F, R>(mut self, state: &T, secrets: F) -> Self
    where
        F: FnOnce(&T) -> R,
        R: IntoSecrets,
    {
        if self.error.is_none() {
            let secrets = secrets(state).into_secrets();
            self.secrets
                .extend(secrets.into_iter().map(|s| (SecretOrigin::State, s)));
        }
        self
    }

    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = Some(bytes);
        self
    }

    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = Some(tolerance);
        self
    }

    /// `credential_headers = [..]`: one name (checked by the attribute).
    pub fn credential_header(mut self, name: &'static str) -> Self {
        self.credential_headers.push(name);
        self
    }

    pub fn build(self) -> Result<Verifier, WebhookConfigError> {
        if let Some(error) = self.error {
            return Err(error);
        }
        let webhook = self.webhook;
        // Each secret on its own first, so an unusable one is named by where it came from.
        for (origin, secret) in &self.secrets {
            if let Err(VerifyError::Misconfigured { reason }) =
                Verifier::new(self.scheme.clone(), secret.clone()).check()
            {
                return Err(WebhookConfigError::Unusable {
                    webhook,
                    origin: *origin,
                    reason,
                });
            }
        }
        let mut secrets = self.secrets.into_iter().map(|(_, secret)| secret);
        let first = secrets
            .next()
            .ok_or(WebhookConfigError::NoSecret { webhook })?;
        let mut verifier = secrets.fold(Verifier::new(self.scheme, first), Verifier::also_accept);
        if let Some(bytes) = self.max_body {
            verifier = verifier.max_body(bytes);
        }
        if let Some(tolerance) = self.tolerance {
            verifier = verifier.tolerance(tolerance);
        }
        Ok(self
            .credential_headers
            .into_iter()
            .fold(verifier, Verifier::credential_header))
    }
}

/// A handler parameter's extractor, chosen where the types are concrete (autoref
/// specialization): `(&&Extract::<T, S>::NEW).extractor()` finds
/// 1. `T: FromUnit<S>`: its `from_unit`;
/// 2. a type that reads the raw body (axum's `Json`, `Form`, `Bytes`, `String`, `Request`,
///    `Body`): refused with rule 5's message ([`VerifiedFirst`]);
/// 3. anything else: refused with `FromUnit`'s "not an extractor" message.
///
/// Not public API.
#[doc(hidden)]
pub struct Extract<T, S>(PhantomData<fn() -> (T, S)>);

impl<T, S> Extract<T, S> {
    pub const NEW: Self = Extract(PhantomData);
}

/// Resolves one parameter from the unit and the state.
#[doc(hidden)]
pub type ExtractFn<T, S> = fn(&Unit, &S) -> Result<T, Malformed>;

#[doc(hidden)]
pub trait ViaFromUnit<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>;
}

impl<T: FromUnit<S>, S> ViaFromUnit<T, S> for &Extract<T, S> {
    #[inline]
    fn extractor(&self) -> ExtractFn<T, S> {
        T::from_unit
    }
}

#[doc(hidden)]
pub trait ViaRawBody<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: VerifiedFirst;
}

impl<T: ReadsRawBody, S> ViaRawBody<T, S> for &&Extract<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: VerifiedFirst,
    {
        unreachable!("no type implements VerifiedFirst")
    }
}

#[doc(hidden)]
pub trait ViaAnything<T, S> {
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: FromUnit<S>;
}

impl<T, S> ViaAnything<T, S> for Extract<T, S> {
    #[inline]
    fn extractor(&self) -> ExtractFn<T, S>
    where
        T: FromUnit<S>,
    {
        T::from_unit
    }
}

/// Types that read the request body: as a webhook handler's parameter they would read (or parse)
/// it before the generated handler verified it. Not public API.
#[doc(hidden)]
pub trait ReadsRawBody {}

impl<T> ReadsRawBody for ::axum::Json<T> {}
impl<T> ReadsRawBody for ::axum::Form<T> {}
impl ReadsRawBody for ::axum::extract::RawForm {}
impl ReadsRawBody for ::axum::body::Body {}
impl<B> ReadsRawBody for ::axum::http::Request<B> {}
impl ReadsRawBody for Bytes {}
impl ReadsRawBody for bytes::BytesMut {}
impl ReadsRawBody for String {}
impl<T: ReadsRawBody> ReadsRawBody for Option<T> {}
impl<T: ReadsRawBody, E> ReadsRawBody for Result<T, E> {}

/// Nothing implements it: a parameter that reaches this bound reads the body unverified.
#[doc(hidden)]
#[diagnostic::on_unimplemented(
    message = "a webhook handler must not take `{Self}`: it reads the request body before its signature is verified (rule 5)",
    label = "reads the body before it is verified",
    note = "the generated handler reads the raw body and verifies it first; take `delivery::Json<T>` for the verified payload, or `delivery::Unit` for the verified bytes"
)]
pub trait VerifiedFirst {}

/// Names the expansion of `#[webhook]` uses. Not public API: no semver guarantees.
#[doc(hidden)]
pub mod __private {
    pub use ::axum;
    pub use ::axum::extract::FromRef;

    pub use super::{
        Config, Extract, ExtractFn, ReadsRawBody, ResponseFuture, VerifiedFirst, VerifierCache,
        ViaAnything, ViaFromUnit, ViaRawBody, WebhookHandler, WebhookMarker, serve,
    };
}
