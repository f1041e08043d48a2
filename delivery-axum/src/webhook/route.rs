//! The route: [`route`] builds the verifier now; [`serve`] builds it on the first request. Both
//! read the raw body, verify it, and only then decode it and run the handler.

use std::panic::AssertUnwindSafe;
use std::sync::Arc;

use ::axum::extract::Request;
use ::axum::http::{StatusCode, header};
use ::axum::response::{IntoResponse, Response};
use ::axum::routing::MethodRouter;
use futures_util::FutureExt as _;
use http_body_util::{BodyExt as _, LengthLimitError, Limited};

use delivery_core::disposition::Outcome;
use delivery_core::unit::Unit;
use delivery_core::webhook::{Verifier, VerifyError, body_id};

use super::config::WebhookConfigError;
use super::handler::{ResponseFuture, WebhookHandler, WebhookMarker};

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
/// use delivery::webhook::WebhookConfigError;
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
            delivery_core::webhook::webhook_answered(
                H::NAME,
                self.verifier.scheme(),
                response.status(),
            );
            response
        })
    }
}

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
                delivery_core::webhook::webhook_answered(
                    H::NAME,
                    verifier.scheme(),
                    response.status(),
                );
                response
            }
            Err((error, built_now)) => {
                let response = misconfigured(H::NAME, &error, built_now);
                delivery_core::webhook::webhook_counter(H::NAME, "unknown", response.status())
                    .increment(1);
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
