//! `#[webhook]` on a real axum `Router`, driven with `tower::ServiceExt::oneshot`: every status the
//! generated handler answers, for Standard Webhooks and Stripe, routed both ways (`route`, which
//! builds the verifier at startup, and plain `post`). Requests are signed here, by hand, with the
//! providers' published layouts. The handler counts its runs in the state, so each test checks it
//! ran exactly once per accepted delivery and never for a refused one.
#![cfg(feature = "axum")]

use std::collections::BTreeMap;
use std::io::Write;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, Once};
use std::time::{SystemTime, UNIX_EPOCH};

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use delivery::webhook::{SecretOrigin, Verifier, WebhookConfigError};
use delivery::{HandlerError, Headers, Json, State, Unit, UnitId, webhook};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;
use tower::ServiceExt as _;

/// The Standard Webhooks secret from the standard's own examples.
const STANDARD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// Another valid Standard Webhooks secret, for forgeries and rotations.
const OTHER_STANDARD_SECRET: &str = "whsec_dGhlIG90aGVyIHNlY3JldCBrZXkgISE=";
const STRIPE_VAR: &str = "DELIVERY_TEST_WEBHOOK_AXUM_STRIPE_SECRET";
const STRIPE_SECRET: &str = "whsec_test_stripe_secret_for_delivery";
const GITHUB_NEW_VAR: &str = "DELIVERY_TEST_WEBHOOK_AXUM_GITHUB_NEW";
const GITHUB_OLD_VAR: &str = "DELIVERY_TEST_WEBHOOK_AXUM_GITHUB_OLD";
const GITHUB_NEW: &str = "github secret, new";
const GITHUB_OLD: &str = "github secret, old";
const UNSET_VAR: &str = "DELIVERY_TEST_WEBHOOK_AXUM_NEVER_SET";
const SHOPIFY_SECRET: &str = "shopify secret";
/// The handlers' body limit (`max_body = 1024`).
const LIMIT: usize = 1024;

/// Sets the environment the handlers read, once, before any test reads it.
fn init_env() {
    static ONCE: Once = Once::new();
    ONCE.call_once(|| {
        // SAFETY: only this process's Rust code reads these variables, through `std::env`, which
        // serializes access; no C code in these tests reads the environment concurrently.
        unsafe {
            std::env::set_var(STRIPE_VAR, STRIPE_SECRET);
            std::env::set_var(GITHUB_NEW_VAR, GITHUB_NEW);
            std::env::set_var(GITHUB_OLD_VAR, GITHUB_OLD);
            std::env::remove_var(UNSET_VAR);
        }
    });
}

/// A unit id and what the handler read from the delivery.
type Seen = (String, Option<String>);

#[derive(Clone)]
struct App {
    standard_secret: String,
    /// Every run of a handler, accepted or failed.
    calls: Arc<AtomicUsize>,
    /// The effect: one entry per unit id, written once.
    effects: Arc<Mutex<BTreeMap<String, String>>>,
    /// Unit ids whose first run fails.
    flaky_failed: Arc<Mutex<Vec<String>>>,
    /// What the handlers saw, for the metadata tests.
    seen: Arc<Mutex<Vec<Seen>>>,
    /// The unit headers the handlers saw.
    headers_seen: Arc<Mutex<Vec<Headers>>>,
    /// The stamps the Stripe handler saw.
    stamps_seen: Arc<Mutex<Vec<Option<delivery::Stamp>>>>,
}

impl App {
    fn new() -> Self {
        App {
            standard_secret: STANDARD_SECRET.to_owned(),
            calls: Arc::default(),
            effects: Arc::default(),
            flaky_failed: Arc::default(),
            seen: Arc::default(),
            headers_seen: Arc::default(),
            stamps_seen: Arc::default(),
        }
    }

    fn calls(&self) -> usize {
        self.calls.load(Ordering::SeqCst)
    }

    fn effects(&self) -> BTreeMap<String, String> {
        self.effects.lock().unwrap().clone()
    }
}

#[derive(Deserialize)]
struct Event {
    r#type: String,
    data: serde_json::Value,
}

/// The effect every test handler applies: keyed by the unit's id, so a redelivery changes
/// nothing. The event's type picks a failure.
async fn apply(app: &App, id: &UnitId, event: Event) -> Result<(), HandlerError> {
    app.calls.fetch_add(1, Ordering::SeqCst);
    match event.r#type.as_str() {
        "reject" => return Err(HandlerError::reject("this event can never be applied")),
        "retry" => Err(std::io::Error::other("the database is down"))?,
        "rate_limited" => {
            return Err(HandlerError::retry("the ledger answered 429")
                .after(std::time::Duration::from_millis(1500)));
        }
        "panic" => panic!("a bug in the handler"),
        "flaky" => {
            let mut failed = app.flaky_failed.lock().unwrap();
            if !failed.contains(&id.to_string()) {
                failed.push(id.to_string());
                return Err(HandlerError::retry("fails on its first delivery"));
            }
        }
        _ => {}
    }
    app.effects
        .lock()
        .unwrap()
        .entry(id.to_string())
        .or_insert_with(|| event.data.to_string());
    Ok(())
}

#[webhook(
    scheme = standard_webhooks,
    secret = |app: &App| app.standard_secret.clone(),
    max_body = 1024
)]
async fn standard_hook(
    State(app): State<App>,
    id: UnitId,
    Json(event): Json<Event>,
) -> Result<(), HandlerError> {
    apply(&app, &id, event).await
}

#[webhook(scheme = stripe, secret = env("DELIVERY_TEST_WEBHOOK_AXUM_STRIPE_SECRET"), max_body = 1024)]
async fn stripe_hook(
    State(app): State<App>,
    id: UnitId,
    stamp: Option<delivery::Stamp>,
    Json(event): Json<Event>,
) -> Result<(), HandlerError> {
    app.stamps_seen.lock().unwrap().push(stamp);
    apply(&app, &id, event).await
}

/// Rotation: deliveries signed with either secret verify.
#[webhook(
    scheme = github,
    secret = [env("DELIVERY_TEST_WEBHOOK_AXUM_GITHUB_NEW"), env("DELIVERY_TEST_WEBHOOK_AXUM_GITHUB_OLD")]
)]
async fn github_hook(
    State(app): State<App>,
    id: UnitId,
    headers: Headers,
) -> Result<(), HandlerError> {
    let event = headers.get_str("x-github-event").map(str::to_owned);
    app.calls.fetch_add(1, Ordering::SeqCst);
    app.headers_seen.lock().unwrap().push(headers);
    app.seen.lock().unwrap().push((id.to_string(), event));
    Ok(())
}

/// Shopify signs the body only, like GitHub: the unit id is the body's digest.
#[webhook(scheme = shopify, secret = |_: &App| SHOPIFY_SECRET)]
async fn shopify_hook(
    State(app): State<App>,
    id: UnitId,
    Json(event): Json<Event>,
) -> Result<(), HandlerError> {
    apply(&app, &id, event).await
}

/// A route behind a proxy that adds an API key of its own: dropped from the unit, with the
/// request's `Authorization`, `Cookie` and `Proxy-Authorization`.
#[webhook(
    scheme = github,
    secret = env("DELIVERY_TEST_WEBHOOK_AXUM_GITHUB_NEW"),
    credential_headers = ["X-Api-Key"]
)]
async fn guarded_hook(State(app): State<App>, headers: Headers) -> Result<(), HandlerError> {
    app.calls.fetch_add(1, Ordering::SeqCst);
    app.headers_seen.lock().unwrap().push(headers);
    Ok(())
}

/// A secret whose variable is never set.
#[webhook(scheme = github, secret = env("DELIVERY_TEST_WEBHOOK_AXUM_NEVER_SET"))]
async fn unset_hook(State(app): State<App>) -> Result<(), HandlerError> {
    app.calls.fetch_add(1, Ordering::SeqCst);
    Ok(())
}

/// A Slack slash command: a form body with no event id, read as the verified bytes.
#[webhook(scheme = slack, secret = |app: &App| app.standard_secret.clone())]
async fn slack_hook(State(app): State<App>, unit: Unit) -> Result<(), HandlerError> {
    app.calls.fetch_add(1, Ordering::SeqCst);
    let body = String::from_utf8_lossy(unit.payload()).into_owned();
    app.seen
        .lock()
        .unwrap()
        .push((unit.id().to_string(), Some(body)));
    Ok(())
}

/// The two schemes under test, each routed both ways.
#[derive(Clone, Copy, Debug)]
enum Endpoint {
    StandardRouted,
    StandardPost,
    StripeRouted,
    StripePost,
}

const ENDPOINTS: [Endpoint; 4] = [
    Endpoint::StandardRouted,
    Endpoint::StandardPost,
    Endpoint::StripeRouted,
    Endpoint::StripePost,
];

fn router(app: &App) -> Router {
    init_env();
    Router::new()
        .route(
            "/standard/routed",
            delivery::webhook::route(standard_hook, app).expect("the secret is set"),
        )
        .route("/standard/post", post(standard_hook))
        .route(
            "/stripe/routed",
            delivery::webhook::route(stripe_hook, app).expect("the secret is set"),
        )
        .route("/stripe/post", post(stripe_hook))
        .route(
            "/github",
            delivery::webhook::route(github_hook, app).expect("the secrets are set"),
        )
        .route("/shopify", post(shopify_hook))
        .route(
            "/guarded/routed",
            delivery::webhook::route(guarded_hook, app).expect("the secret is set"),
        )
        .route("/guarded/post", post(guarded_hook))
        .route("/unset", post(unset_hook))
        .route("/slack", post(slack_hook))
        .with_state(app.clone())
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

fn hmac(key: &[u8], pieces: &[&[u8]]) -> Vec<u8> {
    let mut mac = Hmac::<Sha256>::new_from_slice(key).unwrap();
    for piece in pieces {
        mac.update(piece);
    }
    mac.finalize().into_bytes().to_vec()
}

fn standard_key(secret: &str) -> Vec<u8> {
    BASE64
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap()
}

/// A delivery to send: its id, body and signing time, and the secret it is signed with.
struct Delivery {
    id: String,
    body: Vec<u8>,
    at: u64,
    secret: Option<&'static str>,
    content_length: bool,
}

impl Delivery {
    /// An event of `type` with the id in the body too (Stripe reads it there).
    fn event(id: &str, r#type: &str) -> Self {
        let body = serde_json::json!({"id": id, "type": r#type, "data": {"n": 1}});
        Delivery::raw(id, serde_json::to_vec(&body).unwrap())
    }

    fn raw(id: &str, body: Vec<u8>) -> Self {
        Delivery {
            id: id.to_owned(),
            body,
            at: now(),
            secret: None,
            content_length: true,
        }
    }

    fn at(mut self, at: u64) -> Self {
        self.at = at;
        self
    }

    fn signed_with(mut self, secret: &'static str) -> Self {
        self.secret = Some(secret);
        self
    }

    fn without_content_length(mut self) -> Self {
        self.content_length = false;
        self
    }

    fn request(&self, endpoint: Endpoint) -> Request<Body> {
        let (path, standard) = match endpoint {
            Endpoint::StandardRouted => ("/standard/routed", true),
            Endpoint::StandardPost => ("/standard/post", true),
            Endpoint::StripeRouted => ("/stripe/routed", false),
            Endpoint::StripePost => ("/stripe/post", false),
        };
        let mut request = Request::post(path).header("content-type", "application/json");
        let t = self.at.to_string();
        if standard {
            let key = standard_key(self.secret.unwrap_or(STANDARD_SECRET));
            let tag = hmac(
                &key,
                &[self.id.as_bytes(), b".", t.as_bytes(), b".", &self.body],
            );
            request = request
                .header("webhook-id", &self.id)
                .header("webhook-timestamp", &t)
                .header("webhook-signature", format!("v1,{}", BASE64.encode(tag)));
        } else {
            let key = self.secret.unwrap_or(STRIPE_SECRET);
            let tag = hmac(key.as_bytes(), &[t.as_bytes(), b".", &self.body]);
            request = request.header("stripe-signature", format!("t={t},v1={}", hex::encode(tag)));
        }
        if self.content_length {
            request = request.header("content-length", self.body.len());
        }
        request.body(Body::from(self.body.clone())).unwrap()
    }
}

async fn send(router: &Router, request: Request<Body>) -> (StatusCode, String) {
    let response = router.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let body = axum::body::to_bytes(response.into_body(), usize::MAX)
        .await
        .unwrap();
    (status, String::from_utf8_lossy(&body).into_owned())
}

async fn deliver(router: &Router, endpoint: Endpoint, delivery: &Delivery) -> StatusCode {
    send(router, delivery.request(endpoint)).await.0
}

#[tokio::test]
async fn a_verified_delivery_is_applied_once_and_answered_200() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let status = deliver(&router, endpoint, &Delivery::event("evt_1", "paid")).await;
        assert_eq!(status, StatusCode::OK, "{endpoint:?}");
        assert_eq!(app.calls(), 1, "{endpoint:?}");
        assert_eq!(
            app.effects().keys().collect::<Vec<_>>(),
            ["evt_1"],
            "{endpoint:?}: the unit id is the delivery's id"
        );
    }
}

/// Rule 4: a Stripe event's stamp is its signed `created`, the same on every attempt (its
/// signature's `t` is the attempt's).
#[tokio::test]
async fn a_stripe_event_is_stamped_with_its_created_time() {
    let app = App::new();
    let router = router(&app);
    let body =
        serde_json::json!({"id": "evt_s", "created": 1_700_000_000u64, "type": "paid", "data": {}});
    let delivery = Delivery::raw("evt_s", serde_json::to_vec(&body).unwrap());
    assert_eq!(
        deliver(&router, Endpoint::StripePost, &delivery).await,
        StatusCode::OK
    );
    // A later attempt of the same event, signed later, carries the same stamp.
    let retry = Delivery::raw("evt_s", serde_json::to_vec(&body).unwrap()).at(now() + 60);
    assert_eq!(
        deliver(&router, Endpoint::StripePost, &retry).await,
        StatusCode::OK
    );
    assert_eq!(
        *app.stamps_seen.lock().unwrap(),
        [Some(delivery::Stamp(1_700_000_000)); 2]
    );
    // Without `created`, no stamp: a handler taking `Stamp` would refuse it as malformed.
    let bare = Delivery::event("evt_bare", "paid");
    assert_eq!(
        deliver(&router, Endpoint::StripePost, &bare).await,
        StatusCode::OK
    );
    assert_eq!(app.stamps_seen.lock().unwrap().last(), Some(&None));
}

#[tokio::test]
async fn a_duplicate_delivery_is_answered_2xx_both_times_with_one_effect() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let first = Delivery::event("evt_dup", "paid");
        assert_eq!(deliver(&router, endpoint, &first).await, StatusCode::OK);
        let effect = app.effects();
        // The sender's redelivery: the same id and body, signed again at a later time.
        let again = Delivery::event("evt_dup", "paid").at(first.at + 30);
        assert_eq!(
            deliver(&router, endpoint, &again).await,
            StatusCode::OK,
            "{endpoint:?}: an already applied delivery is a success, never a conflict"
        );
        assert_eq!(app.calls(), 2, "{endpoint:?}");
        assert_eq!(
            app.effects(),
            effect,
            "{endpoint:?}: the redelivery changed nothing"
        );
    }
}

#[tokio::test]
async fn a_forged_delivery_is_answered_401_and_writes_nothing() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let wrong_secret: &'static str = match endpoint {
            Endpoint::StandardRouted | Endpoint::StandardPost => OTHER_STANDARD_SECRET,
            Endpoint::StripeRouted | Endpoint::StripePost => "whsec_not_the_secret",
        };
        let forged = Delivery::event("evt_forged", "paid").signed_with(wrong_secret);
        assert_eq!(
            deliver(&router, endpoint, &forged).await,
            StatusCode::UNAUTHORIZED,
            "{endpoint:?}"
        );

        // A genuine signature over another body.
        let genuine = Delivery::event("evt_tampered", "paid");
        let mut request = genuine.request(endpoint);
        *request.body_mut() =
            Body::from(genuine.body.clone().into_iter().rev().collect::<Vec<_>>());
        assert_eq!(
            send(&router, request).await.0,
            StatusCode::UNAUTHORIZED,
            "{endpoint:?}"
        );

        // No signature at all, and a malformed body: refused for the signature, never parsed.
        let unsigned = Request::post(match endpoint {
            Endpoint::StandardRouted => "/standard/routed",
            Endpoint::StandardPost => "/standard/post",
            Endpoint::StripeRouted => "/stripe/routed",
            Endpoint::StripePost => "/stripe/post",
        })
        .body(Body::from("{not json"))
        .unwrap();
        let (status, text) = send(&router, unsigned).await;
        assert_eq!(status, StatusCode::UNAUTHORIZED, "{endpoint:?}");
        assert!(!text.contains("whsec"), "{endpoint:?}: {text}");

        assert_eq!(app.calls(), 0, "{endpoint:?}: the handler never ran");
        assert!(app.effects().is_empty(), "{endpoint:?}");
    }
}

#[tokio::test]
async fn a_timestamp_outside_the_tolerance_is_answered_401_either_way() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let replay = Delivery::event("evt_old", "paid").at(now() - 3_600);
        let future = Delivery::event("evt_future", "paid").at(now() + 3_600);
        assert_eq!(
            deliver(&router, endpoint, &replay).await,
            StatusCode::UNAUTHORIZED,
            "{endpoint:?}"
        );
        assert_eq!(
            deliver(&router, endpoint, &future).await,
            StatusCode::UNAUTHORIZED,
            "{endpoint:?}"
        );
        assert_eq!(app.calls(), 0, "{endpoint:?}");
    }
}

#[tokio::test]
async fn a_body_over_the_limit_is_answered_413_before_it_is_verified() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let big = serde_json::json!({"id": "evt_big", "type": "paid", "data": "x".repeat(LIMIT)});
        let big = serde_json::to_vec(&big).unwrap();
        // Refused by its declared length, and by its length once read when none is declared.
        let declared = Delivery::raw("evt_big", big.clone());
        let streamed = Delivery::raw("evt_big", big).without_content_length();
        assert_eq!(
            deliver(&router, endpoint, &declared).await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{endpoint:?}"
        );
        assert_eq!(
            deliver(&router, endpoint, &streamed).await,
            StatusCode::PAYLOAD_TOO_LARGE,
            "{endpoint:?}"
        );
        // Exactly at the limit is accepted.
        let mut at_limit =
            serde_json::to_vec(&serde_json::json!({"id": "evt_fit", "type": "paid", "data": ""}))
                .unwrap();
        let pad = LIMIT - at_limit.len();
        at_limit.splice(
            at_limit.len() - 2..at_limit.len() - 2,
            std::iter::repeat_n(b'y', pad),
        );
        assert_eq!(at_limit.len(), LIMIT);
        let fits = Delivery::raw("evt_fit", at_limit);
        assert_eq!(
            deliver(&router, endpoint, &fits).await,
            StatusCode::OK,
            "{endpoint:?}"
        );
        assert_eq!(
            app.calls(),
            1,
            "{endpoint:?}: only the delivery that fits ran"
        );
    }
}

#[tokio::test]
async fn a_verified_but_malformed_payload_is_answered_400_and_never_runs() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let not_json = Delivery::raw("evt_bad", b"{\"id\": \"evt_bad\", oops".to_vec());
        let wrong_shape =
            Delivery::raw("evt_shape", br#"{"id": "evt_shape", "data": {}}"#.to_vec());
        let not_utf8 = Delivery::raw("evt_bytes", vec![0xff, 0xfe, 0x00]);
        for delivery in [&not_json, &wrong_shape, &not_utf8] {
            assert_eq!(
                deliver(&router, endpoint, delivery).await,
                StatusCode::BAD_REQUEST,
                "{endpoint:?}: {}",
                delivery.id
            );
        }
        assert_eq!(app.calls(), 0, "{endpoint:?}");
    }
}

#[tokio::test]
async fn a_rejected_delivery_is_answered_422() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let status = deliver(&router, endpoint, &Delivery::event("evt_r", "reject")).await;
        assert_eq!(status, StatusCode::UNPROCESSABLE_ENTITY, "{endpoint:?}");
        assert_eq!(app.calls(), 1, "{endpoint:?}");
        assert!(app.effects().is_empty(), "{endpoint:?}");
    }
}

#[tokio::test]
async fn a_failed_or_panicking_handler_is_answered_503_so_the_sender_retries() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let retry = deliver(&router, endpoint, &Delivery::event("evt_q", "retry")).await;
        assert_eq!(retry, StatusCode::SERVICE_UNAVAILABLE, "{endpoint:?}: `?`");
        let panic = deliver(&router, endpoint, &Delivery::event("evt_p", "panic")).await;
        assert_eq!(
            panic,
            StatusCode::SERVICE_UNAVAILABLE,
            "{endpoint:?}: panic"
        );
        assert_eq!(app.calls(), 2, "{endpoint:?}");
        assert!(app.effects().is_empty(), "{endpoint:?}");

        // The sender's retry of a transient failure succeeds, and applies the effect once.
        let flaky = Delivery::event("evt_f", "flaky");
        assert_eq!(
            deliver(&router, endpoint, &flaky).await,
            StatusCode::SERVICE_UNAVAILABLE
        );
        assert_eq!(
            deliver(
                &router,
                endpoint,
                &Delivery::event("evt_f", "flaky").at(flaky.at + 60)
            )
            .await,
            StatusCode::OK
        );
        assert_eq!(app.calls(), 4, "{endpoint:?}");
        assert_eq!(app.effects().keys().collect::<Vec<_>>(), ["evt_f"]);
    }
}

#[tokio::test]
async fn a_failure_asking_for_a_wait_is_answered_503_with_retry_after() {
    for endpoint in ENDPOINTS {
        let app = App::new();
        let router = router(&app);
        let response = router
            .clone()
            .oneshot(Delivery::event("evt_r", "rate_limited").request(endpoint))
            .await
            .unwrap();
        assert_eq!(
            response.status(),
            StatusCode::SERVICE_UNAVAILABLE,
            "{endpoint:?}"
        );
        // 1.5 s, rounded up to whole seconds: never sooner than the handler asked.
        assert_eq!(
            response.headers().get("retry-after").map(|v| v.as_bytes()),
            Some(&b"2"[..]),
            "{endpoint:?}"
        );
        assert!(app.effects().is_empty(), "{endpoint:?}");
        // A plain failure names no wait.
        let response = router
            .clone()
            .oneshot(Delivery::event("evt_q", "retry").request(endpoint))
            .await
            .unwrap();
        assert_eq!(response.headers().get("retry-after"), None, "{endpoint:?}");
    }
}

#[tokio::test]
async fn rotation_accepts_every_listed_secret_and_only_those() {
    let app = App::new();
    let router = router(&app);
    let body = br#"{"zen":"Keep it logically awesome."}"#;
    let github = |secret: &str, delivery: &str| {
        github_request(
            "/github",
            secret,
            body,
            &[("x-github-event", "ping"), ("x-github-delivery", delivery)],
        )
    };
    assert_eq!(
        send(&router, github(GITHUB_NEW, "d-1")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&router, github(GITHUB_OLD, "d-2")).await.0,
        StatusCode::OK
    );
    assert_eq!(
        send(&router, github("a third secret", "d-3")).await.0,
        StatusCode::UNAUTHORIZED
    );
    assert_eq!(app.calls(), 2);
    // The unit id is the signed body's digest (GitHub's delivery id is not signed); the headers
    // are the request's.
    let id = body_id(body);
    assert_eq!(
        *app.seen.lock().unwrap(),
        [
            (id.clone(), Some("ping".to_owned())),
            (id, Some("ping".to_owned()))
        ]
    );
}

/// A GitHub delivery of `body` to `path`, signed with `secret`, with `headers` beside the
/// signature.
fn github_request(
    path: &str,
    secret: &str,
    body: &[u8],
    headers: &[(&str, &str)],
) -> Request<Body> {
    let signature = format!("sha256={}", hex::encode(hmac(secret.as_bytes(), &[body])));
    let mut request = Request::post(path).header("x-hub-signature-256", signature);
    for (name, value) in headers {
        request = request.header(*name, *value);
    }
    request.body(Body::from(body.to_vec())).unwrap()
}

/// `sha256:<hex>` of `body`, computed here.
fn body_id(body: &[u8]) -> String {
    use sha2::Digest as _;
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// GitHub and Shopify sign the body only, and no timestamp: a captured delivery verifies forever,
/// and its delivery-id header is not signed. Replayed under a fresh id, it is still the same unit
/// (the id comes from the signed body), so deduplication by id holds.
#[tokio::test]
async fn a_replay_under_a_fresh_delivery_id_is_the_same_unit() {
    let app = App::new();
    let router = router(&app);
    let body = br#"{"zen":"Design for failure."}"#;
    let github = |delivery: &str| {
        github_request(
            "/github",
            GITHUB_NEW,
            body,
            &[("x-github-event", "ping"), ("x-github-delivery", delivery)],
        )
    };
    assert_eq!(send(&router, github("d-original")).await.0, StatusCode::OK);
    assert_eq!(send(&router, github("d-replayed")).await.0, StatusCode::OK);
    let seen = app.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert_eq!(seen[0].0, body_id(body));
    assert_eq!(seen[0], seen[1], "a fresh delivery id, the same unit");

    let event =
        serde_json::to_vec(&serde_json::json!({"type": "orders/paid", "data": {"n": 1}})).unwrap();
    let shopify = |webhook_id: &str| {
        Request::post("/shopify")
            .header("x-shopify-topic", "orders/paid")
            .header("x-shopify-webhook-id", webhook_id)
            .header(
                "x-shopify-hmac-sha256",
                BASE64.encode(hmac(SHOPIFY_SECRET.as_bytes(), &[&event])),
            )
            .body(Body::from(event.clone()))
            .unwrap()
    };
    assert_eq!(
        send(&router, shopify("wh-original")).await.0,
        StatusCode::OK
    );
    let effect = app.effects();
    assert_eq!(effect.keys().collect::<Vec<_>>(), [&body_id(&event)]);
    assert_eq!(
        send(&router, shopify("wh-replayed")).await.0,
        StatusCode::OK
    );
    assert_eq!(app.effects(), effect, "the replay changed nothing");
    // A forged body under the old signature is still refused.
    let mut forged = shopify("wh-forged");
    *forged.body_mut() = Body::from(&b"{\"type\":\"orders/paid\",\"data\":{\"n\":2}}"[..]);
    assert_eq!(send(&router, forged).await.0, StatusCode::UNAUTHORIZED);
}

/// A verified request's credentials — `Authorization`, `Cookie`, `Proxy-Authorization` and the
/// names given in `credential_headers` — never reach the unit's headers; the rest do.
#[tokio::test]
async fn a_verified_delivery_carries_no_credential_headers_into_the_unit() {
    let app = App::new();
    let router = router(&app);
    let body = br#"{"zen":"Avoid administrative distraction."}"#;
    let credentials = [
        ("Authorization", "Bearer proxy-t0ken"),
        ("Cookie", "session=s3ss10n"),
        ("Proxy-Authorization", "Basic cHJveHk6cGFzcw=="),
        ("X-Api-Key", "api-k3y"),
    ];
    for path in ["/guarded/routed", "/guarded/post"] {
        let mut headers = vec![("x-github-event", "push"), ("x-github-delivery", "d-7")];
        headers.extend(credentials);
        let request = github_request(path, GITHUB_NEW, body, &headers);
        assert_eq!(send(&router, request).await.0, StatusCode::OK, "{path}");
    }
    let seen = app.headers_seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for headers in seen {
        let names: Vec<&str> = headers.iter().map(|(name, _)| name).collect();
        assert_eq!(
            names,
            ["x-github-delivery", "x-github-event", "x-hub-signature-256"],
            "no credential is copied into the unit"
        );
        assert!(
            headers
                .iter()
                .all(|(_, value)| !String::from_utf8_lossy(value).contains("t0ken"))
        );
    }
    // Only the route that names `X-Api-Key` drops it: `/github` keeps it, but not `Authorization`.
    let request = github_request("/github", GITHUB_NEW, body, &credentials);
    assert_eq!(send(&router, request).await.0, StatusCode::OK);
    let kept = app.headers_seen.lock().unwrap().last().cloned().unwrap();
    assert_eq!(kept.get_str("x-api-key"), Some("api-k3y"));
    assert_eq!(kept.get("authorization"), None);
}

#[tokio::test]
async fn a_delivery_without_an_id_gets_one_derived_from_its_verified_bytes() {
    let app = App::new();
    let router = router(&app);
    let body = "command=%2Fdeploy&text=api&user_id=U1";
    let slack = |t: u64| {
        let tag = hmac(
            STANDARD_SECRET.as_bytes(),
            &[b"v0:", t.to_string().as_bytes(), b":", body.as_bytes()],
        );
        Request::post("/slack")
            .header("x-slack-request-timestamp", t)
            .header("x-slack-signature", format!("v0={}", hex::encode(tag)))
            .body(Body::from(body))
            .unwrap()
    };
    assert_eq!(send(&router, slack(now())).await.0, StatusCode::OK);
    assert_eq!(send(&router, slack(now() + 1)).await.0, StatusCode::OK);
    let seen = app.seen.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    assert!(seen[0].0.starts_with("sha256:"), "{}", seen[0].0);
    assert_eq!(seen[0], seen[1], "the same bytes, the same id");
    assert_eq!(seen[0].1.as_deref(), Some(body));
}

#[tokio::test]
async fn a_missing_secret_fails_at_startup_naming_the_variable() {
    init_env();
    let app = App::new();
    let expected = WebhookConfigError::MissingEnv {
        webhook: "unset_hook",
        var: UNSET_VAR,
    };
    let error = delivery::webhook::route(unset_hook, &app).unwrap_err();
    assert_eq!(error, expected);
    assert_eq!(error.var(), Some(UNSET_VAR));
    assert_eq!(
        error.to_string(),
        format!(
            "webhook `unset_hook` has no usable signing secret: environment variable `{UNSET_VAR}` is not set"
        )
    );
    assert_eq!(unset_hook::verifier(&app).unwrap_err(), expected);

    // The same check, on its own, for the handlers whose secrets are there.
    let verifier: Verifier = stripe_hook::verifier(&app).unwrap();
    assert!(verifier.check().is_ok());
}

#[tokio::test]
async fn an_unusable_secret_from_the_state_is_named_by_where_it_came_from() {
    let mut app = App::new();
    app.standard_secret = "whsec_not base64!".to_owned();
    let error = delivery::webhook::route(standard_hook, &app).unwrap_err();
    assert!(matches!(
        error,
        WebhookConfigError::Unusable {
            webhook: "standard_hook",
            origin: SecretOrigin::State,
            ..
        }
    ));
    assert!(!error.to_string().contains("not base64!"), "{error}");
}

#[tokio::test]
async fn with_plain_post_a_missing_secret_is_answered_500_and_nothing_runs() {
    let app = App::new();
    let router = router(&app);
    for _ in 0..2 {
        let request = Request::post("/unset")
            .header("x-hub-signature-256", format!("sha256={}", "0".repeat(64)))
            .body(Body::from("{}"))
            .unwrap();
        assert_eq!(
            send(&router, request).await.0,
            StatusCode::INTERNAL_SERVER_ERROR
        );
    }
    assert_eq!(app.calls(), 0);
}

/// A `tracing` writer into a shared buffer.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> tracing_subscriber::fmt::MakeWriter<'a> for Captured {
    type Writer = Captured;
    fn make_writer(&'a self) -> Captured {
        self.clone()
    }
}

#[tokio::test]
async fn each_outcome_is_logged_once_and_never_the_secret() {
    let captured = Captured::default();
    let subscriber = tracing_subscriber::fmt()
        .with_writer(captured.clone())
        .with_max_level(tracing::Level::DEBUG)
        .with_ansi(false)
        .finish();
    let _guard = tracing::subscriber::set_default(subscriber);

    let app = App::new();
    let router = router(&app);
    let endpoint = Endpoint::StandardRouted;
    let deliveries = [
        (Delivery::event("log_ok", "paid"), "200"),
        (
            Delivery::event("log_forged", "paid").signed_with(OTHER_STANDARD_SECRET),
            "401",
        ),
        (Delivery::raw("log_bad", b"nope".to_vec()), "400"),
        (Delivery::event("log_reject", "reject"), "422"),
        (Delivery::event("log_retry", "retry"), "503"),
    ];
    for (delivery, _) in &deliveries {
        deliver(&router, endpoint, delivery).await;
    }
    let request = Request::post("/unset").body(Body::from("{}")).unwrap();
    send(&router, request).await;

    let log = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let lines: Vec<&str> = log
        .lines()
        .filter(|line| line.contains("webhook=\"standard_hook\"") && line.contains("status="))
        .collect();
    assert_eq!(lines.len(), deliveries.len(), "{log}");
    for ((_, status), line) in deliveries.iter().zip(&lines) {
        assert!(line.contains(&format!("status={status}")), "{line}");
    }
    assert!(
        log.lines()
            .any(|l| l.contains("webhook=\"unset_hook\"") && l.contains(UNSET_VAR)),
        "the missing variable is named: {log}"
    );
    for secret in [
        STANDARD_SECRET,
        &STANDARD_SECRET[6..],
        STRIPE_SECRET,
        GITHUB_NEW,
        GITHUB_OLD,
    ] {
        assert!(!log.contains(secret), "a secret reached the log: {log}");
    }
}

/// A handler that takes no state expands without a lint (`cargo clippy --all-targets` checks it).
#[webhook(scheme = github, secret = env("WEBHOOK_AXUM_STATELESS_SECRET"))]
async fn stateless(id: UnitId) -> Result<(), HandlerError> {
    let _ = id;
    Ok(())
}

#[test]
fn a_stateless_handler_is_a_webhook_handler() {
    fn is_handler<H: delivery::webhook::WebhookHandler<()>>(_: H) {}
    is_handler(stateless);
}
