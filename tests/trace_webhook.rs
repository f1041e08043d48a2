//! A `#[webhook]` route runs each verified request in a `delivery.unit` span (see
//! `delivery::trace`) whose parent is the sender's `traceparent`: the sender's trace goes on in the
//! receiver, and the handler's own spans are inside it.
#![cfg(all(feature = "axum", feature = "opentelemetry"))]

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode};
use axum::routing::post;
use delivery::{HandlerError, State, UnitId, webhook};
use hmac::{Hmac, KeyInit, Mac};
use opentelemetry::trace::TracerProvider as _;
use opentelemetry_sdk::trace::{InMemorySpanExporter, SdkTracerProvider};
use sha2::Sha256;
use tower::ServiceExt as _;
use tracing_subscriber::layer::SubscriberExt;

const SECRET: &str = "trace webhook secret";
const TRACE_ID: &str = "4bf92f3577b34da6a3ce929d0e0e4736";
const SENDER_SPAN: &str = "00f067aa0ba902b7";

#[derive(Clone)]
struct App;

#[webhook(scheme = github, secret = |_: &App| SECRET)]
async fn hook(State(_): State<App>, id: UnitId) -> Result<(), HandlerError> {
    tracing::info_span!("hook body", %id).in_scope(|| tracing::info!("applied"));
    Ok(())
}

fn signed(body: &[u8], traceparent: &str) -> Request<Body> {
    let mut mac = Hmac::<Sha256>::new_from_slice(SECRET.as_bytes()).unwrap();
    mac.update(body);
    let signature = format!("sha256={}", hex::encode(mac.finalize().into_bytes()));
    Request::post("/hook")
        .header("x-hub-signature-256", signature)
        .header("x-github-delivery", "d-1")
        .header("traceparent", traceparent)
        .body(Body::from(body.to_vec()))
        .unwrap()
}

#[tokio::test]
async fn a_request_continues_the_senders_trace() {
    let exporter = InMemorySpanExporter::default();
    let provider = SdkTracerProvider::builder()
        .with_simple_exporter(exporter.clone())
        .build();
    let subscriber = tracing_subscriber::registry()
        .with(tracing_opentelemetry::layer().with_tracer(provider.tracer("receiver")));
    let _guard = tracing::subscriber::set_default(subscriber);

    let router: Router = Router::new().route("/hook", post(hook)).with_state(App);
    let traceparent = format!("00-{TRACE_ID}-{SENDER_SPAN}-01");
    let response = router
        .oneshot(signed(br#"{"ok":true}"#, &traceparent))
        .await
        .unwrap();
    assert_eq!(response.status(), StatusCode::OK);

    provider.force_flush().unwrap();
    let spans = exporter.get_finished_spans().unwrap();
    let unit = spans
        .iter()
        .find(|s| s.name == "process hook")
        .unwrap_or_else(|| panic!("the request's span, in {spans:#?}"));
    assert_eq!(unit.span_context.trace_id().to_string(), TRACE_ID);
    assert_eq!(unit.parent_span_id.to_string(), SENDER_SPAN);
    let attribute = |key: &str| {
        unit.attributes
            .iter()
            .find(|kv| kv.key.as_str() == key)
            .map(|kv| kv.value.to_string())
    };
    assert_eq!(attribute("messaging.system").as_deref(), Some("webhook"));
    assert_eq!(
        attribute("messaging.operation.type").as_deref(),
        Some("process")
    );
    let body = spans.iter().find(|s| s.name == "hook body").unwrap();
    assert_eq!(body.parent_span_id, unit.span_context.span_id());
    assert_eq!(body.span_context.trace_id().to_string(), TRACE_ID);
}
