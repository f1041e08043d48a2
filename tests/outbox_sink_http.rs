//! The outbox's HTTP sink against a real receiver on loopback (axum): how each answer maps to a
//! receipt, a retry (with the receiver's `Retry-After`) or a reject, with the record id as the
//! `Idempotency-Key` on every attempt and the payload intact.
#![cfg(feature = "http")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use axum::Router;
use axum::body::Bytes;
use axum::extract::State;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use delivery::http::HttpSink;
use delivery::outbox::{Record, Sink};
use delivery::{HandlerError, Receipt};

#[derive(Clone, Default)]
struct Receiver {
    answers: Arc<Vec<(u16, Option<&'static str>)>>,
    next: Arc<AtomicUsize>,
    seen: Arc<Mutex<Vec<(HeaderMap, Bytes)>>>,
}

async fn receive(State(receiver): State<Receiver>, headers: HeaderMap, body: Bytes) -> Response {
    receiver.seen.lock().unwrap().push((headers, body));
    let turn = receiver.next.fetch_add(1, Ordering::SeqCst);
    let (code, retry_after) = receiver.answers.get(turn).copied().unwrap_or((200, None));
    let mut response = (
        StatusCode::from_u16(code).unwrap(),
        format!("answer {turn}: {code}"),
    )
        .into_response();
    if let Some(value) = retry_after {
        response
            .headers_mut()
            .insert("retry-after", HeaderValue::from_static(value));
    }
    response
}

/// Serves `answers` in order (then 200) on 127.0.0.1:0; returns the URL and the receiver.
async fn serve(answers: Vec<(u16, Option<&'static str>)>) -> (String, Receiver) {
    let receiver = Receiver {
        answers: Arc::new(answers),
        ..Receiver::default()
    };
    let app = Router::new()
        .route("/events", post(receive))
        .with_state(receiver.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (format!("http://{address}/events"), receiver)
}

fn record() -> Record {
    // Bytes a re-encoding would change: key order, spacing, an escaped character, non-ASCII.
    let payload: &[u8] = b"{\"z\":1,  \"a\":\"caf\xc3\xa9 \\u00e9\",\"n\":[1.50,2]}";
    Record::new(
        "rec-7f3a-0001",
        "orders",
        Some("order-1".into()),
        payload,
        0,
    )
}

#[tokio::test]
async fn statuses_map_to_retry_retry_after_reject_then_receipt() {
    let (url, receiver) = serve(vec![
        (503, None),
        (429, Some("7")),
        (400, None),
        (200, None),
    ])
    .await;
    let sink = HttpSink::new(url.as_str()).unwrap();
    let record = record();

    let unavailable = sink.send(&record).await.unwrap_err();
    assert!(unavailable.is_retry(), "503: {unavailable}");
    assert_eq!(unavailable.delay(), None);
    assert!(unavailable.to_string().contains("503"), "{unavailable}");

    let throttled = sink.send(&record).await.unwrap_err();
    assert!(throttled.is_retry(), "429: {throttled}");
    assert_eq!(throttled.delay(), Some(Duration::from_secs(7)));

    let refused = sink.send(&record).await.unwrap_err();
    assert!(refused.is_reject(), "400: {refused}");
    // The receiver's own words travel into the dead record's reason.
    assert!(refused.to_string().contains("answer 2: 400"), "{refused}");

    let receipt = sink.send(&record).await.unwrap();
    assert_eq!(receipt.record(), record.id());

    let seen = receiver.seen.lock().unwrap();
    assert_eq!(seen.len(), 4);
    for (attempt, (headers, body)) in seen.iter().enumerate() {
        assert_eq!(
            headers.get("idempotency-key").unwrap(),
            "rec-7f3a-0001",
            "attempt {attempt}"
        );
        assert_eq!(headers.get("content-type").unwrap(), "application/json");
        assert_eq!(&body[..], &record.payload()[..], "attempt {attempt}");
    }
}

#[tokio::test]
async fn timeouts_and_server_errors_retry_other_client_errors_reject() {
    let (url, _receiver) = serve(vec![
        (408, None),
        (500, Some("Wed, 21 Oct 2015 07:28:00 GMT")), // a date in the past: no wait
        (404, None),
        (409, None),
        (303, None),
        (204, None),
    ])
    .await;
    let sink = HttpSink::new(url.as_str()).unwrap();
    let record = record();
    let request_timeout = sink.send(&record).await.unwrap_err();
    assert!(request_timeout.is_retry());
    let server_error = sink.send(&record).await.unwrap_err();
    assert!(server_error.is_retry());
    assert_eq!(server_error.delay(), Some(Duration::ZERO));
    assert!(sink.send(&record).await.unwrap_err().is_reject(), "404");
    assert!(sink.send(&record).await.unwrap_err().is_reject(), "409");
    // Not followed: a 303 would turn the POST into a GET.
    assert!(sink.send(&record).await.unwrap_err().is_reject(), "303");
    assert_eq!(sink.send(&record).await.unwrap().record(), record.id());
}

#[tokio::test]
async fn a_receiver_down_is_a_retry() {
    // A port that was just free: nothing listens there.
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let address = listener.local_addr().unwrap();
    drop(listener);
    let sink = HttpSink::new(format!("http://{address}/events").as_str()).unwrap();
    let failure = sink.send(record()).await.unwrap_err();
    assert!(failure.is_retry(), "{failure}");
}

#[tokio::test]
async fn a_topic_without_an_endpoint_is_rejected_and_routes_pick_the_url() {
    let (url, receiver) = serve(vec![]).await;
    let sink = HttpSink::routed(move |record: &Record| {
        (record.topic() == "orders").then(|| url.parse().unwrap())
    })
    .unwrap()
    .content_type(HeaderValue::from_static("application/vnd.orders+json"))
    .header(
        axum::http::header::AUTHORIZATION,
        HeaderValue::from_static("Bearer t0ken"),
    );
    let unknown = Record::new("rec-2", "billing", None, &b"{}"[..], 0);
    assert!(sink.send(&unknown).await.unwrap_err().is_reject());
    assert_eq!(
        sink.send(record()).await.unwrap().record().as_str(),
        "rec-7f3a-0001"
    );
    let seen = receiver.seen.lock().unwrap();
    assert_eq!(seen.len(), 1, "the unroutable record was never POSTed");
    assert_eq!(
        seen[0].0.get("content-type").unwrap(),
        "application/vnd.orders+json"
    );
    assert_eq!(seen[0].0.get("authorization").unwrap(), "Bearer t0ken");
}

/// Through the `outbox::Sink` trait, as a relay written once for any sink sends: the same answers.
#[tokio::test]
async fn the_sink_trait_sends_the_same_way() {
    async fn forward(sink: &impl Sink, record: &Record) -> Result<Receipt, HandlerError> {
        sink.send(record).await
    }
    let (url, _receiver) = serve(vec![(503, None), (204, None)]).await;
    let sink = HttpSink::new(url.as_str()).unwrap();
    let record = record();
    assert!(forward(&sink, &record).await.unwrap_err().is_retry());
    assert_eq!(forward(&sink, &record).await.unwrap().record(), record.id());
}
