//! Signed webhooks, sent from the outbox (rules 5 and 6 together), end to end: a `Relayer` over a
//! real PostgreSQL outbox sends each record through `HttpSink::standard_webhooks` to receivers on
//! loopback — this crate's own `#[webhook(scheme = standard_webhooks)]` route and an independent
//! verifier (`standardwebhooks`, the standard's own Rust library, in a plain axum handler) — and
//! each accepts every record under its record id: when the receiver is down at first, slower than
//! the sink's timeout, rotating its secret, refusing a record (422: dead, with the answer in the
//! dead record) or throttling (429 with `Retry-After`). Fails, never skips, when PostgreSQL is
//! unreachable.
#![cfg(all(feature = "postgres", feature = "http", feature = "axum"))]

use std::collections::{BTreeMap, HashMap, VecDeque};
use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, HeaderValue, StatusCode};
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use delivery::http::HttpSink;
use delivery::outbox::{NewRecord, Outbox, PgStore, Record, RecordId, Relayer, Status};
use delivery::{
    HandlerError, Receipt, State, Unit, UnitId, dead_letter::DeadLetters, disposition::Backoff,
    disposition::ReasonKind, relay, webhook,
};
use sqlx::{AssertSqlSafe, PgPool};

/// The Standard Webhooks secret from the standard's own examples.
const OLD_SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// `whsec_` + base64 of "the new secret key !!!": the secret a rotation moves to.
const NEW_SECRET: &str = "whsec_dGhlIG5ldyBzZWNyZXQga2V5ICEhIQ==";
/// A secret neither side of the rotation has.
const STRANGER_SECRET: &str = "whsec_dGhlIG90aGVyIHNlY3JldCBrZXkgISE=";

fn database_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".into())
}

// ---------------------------------------------------------------------------------------------
// The sending side: one relay function, to one sink or to several (each must confirm).

#[relay]
async fn to_receivers(
    record: Record,
    State(sinks): State<Vec<HttpSink>>,
) -> Result<Receipt, HandlerError> {
    let mut receipt = None;
    for sink in &sinks {
        receipt = Some(sink.send(&record).await?);
    }
    receipt.ok_or_else(|| HandlerError::reject("no sink configured"))
}

/// A fresh outbox table with `ids` written in one transaction, each with a JSON payload naming
/// it (a space and an escaped character, so a re-encoding would change the signed bytes).
async fn outbox(name: &str, ids: &[String]) -> PgStore {
    let pool = PgPool::connect(&database_url())
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {}: {e}", database_url()));
    let table = format!("outbox_hooks_{name}_{}", std::process::id());
    sqlx::raw_sql(AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table} CASCADE"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool.clone());
    store.migrate().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for id in ids {
        let record = NewRecord::new("orders.events", payload(id)).id(id.as_str());
        outbox.write(&mut tx, record).await.unwrap();
    }
    tx.commit().await.unwrap();
    store
}

fn payload(id: &str) -> String {
    format!(
        "{{\"type\":\"order.placed\", \"data\":{{\"record\":\"{id}\",\"note\":\"caf\\u00e9\"}}}}"
    )
}

fn ids(prefix: &str, n: usize) -> Vec<String> {
    (0..n).map(|i| format!("{prefix}-{i:03}")).collect()
}

fn quick_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(50), Duration::from_millis(200)).without_jitter()
}

fn relayer(store: &PgStore, sinks: Vec<HttpSink>) -> Relayer<PgStore, Vec<HttpSink>> {
    Relayer::new(store.clone())
        .state(sinks)
        .backoff(quick_backoff())
        .max_attempts(1000)
        .poll_interval(Duration::from_millis(50))
}

async fn stored(store: &PgStore, id: &str) -> delivery::outbox::StoredRecord {
    store
        .get(&RecordId::new(id))
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("record {id} is in the outbox"))
}

async fn assert_all_delivered(store: &PgStore, ids: &[String]) {
    for id in ids {
        let record = stored(store, id).await;
        assert_eq!(record.status, Status::Delivered, "{id}: {record:?}");
    }
}

/// Serves `router` on `listener`.
fn serve_on(listener: tokio::net::TcpListener, router: Router) -> SocketAddr {
    let address = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    address
}

async fn serve(router: Router) -> SocketAddr {
    serve_on(
        tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap(),
        router,
    )
}

fn url(address: SocketAddr, path: &str) -> String {
    format!("http://{address}{path}")
}

// ---------------------------------------------------------------------------------------------
// Receiver 1: this crate's own `#[webhook]` route, idempotent by the delivery's `webhook-id`.

/// One delivery a receiver took: its `webhook-id`, `Idempotency-Key`, `webhook-timestamp`.
#[derive(Clone, Debug)]
struct Arrival {
    webhook_id: String,
    idempotency_key: String,
    timestamp: u64,
    signatures: usize,
}

#[derive(Clone)]
struct Own {
    secret: &'static str,
    /// The effect, keyed by the unit id (the delivery's `webhook-id`): written once.
    effects: Arc<Mutex<BTreeMap<String, Bytes>>>,
    /// How many times each unit's effect was applied (1 once written; a redelivery adds none).
    applied: Arc<Mutex<HashMap<String, usize>>>,
    /// Every verified delivery, in order.
    arrivals: Arc<Mutex<Vec<Arrival>>>,
    /// Answer this long after applying a unit's effect the first time (slower than the sink's
    /// timeout: the sender gives up and sends again).
    slow_first: Option<Duration>,
}

impl Own {
    fn new(secret: &'static str) -> Self {
        Own {
            secret,
            effects: Arc::default(),
            applied: Arc::default(),
            arrivals: Arc::default(),
            slow_first: None,
        }
    }

    fn effects(&self) -> BTreeMap<String, Bytes> {
        self.effects.lock().unwrap().clone()
    }

    fn arrivals(&self) -> Vec<Arrival> {
        self.arrivals.lock().unwrap().clone()
    }

    fn router(&self) -> Router {
        Router::new()
            .route(
                "/hooks",
                delivery::webhook::route(receive, self).expect("the secret is usable"),
            )
            .with_state(self.clone())
    }
}

fn header(unit: &Unit, name: &str) -> String {
    unit.headers().get_str(name).unwrap_or_default().to_owned()
}

#[webhook(scheme = standard_webhooks, secret = |own: &Own| own.secret)]
async fn receive(State(own): State<Own>, id: UnitId, unit: Unit) -> Result<(), HandlerError> {
    own.arrivals.lock().unwrap().push(Arrival {
        webhook_id: header(&unit, "webhook-id"),
        idempotency_key: header(&unit, "idempotency-key"),
        timestamp: header(&unit, "webhook-timestamp").parse().unwrap(),
        signatures: header(&unit, "webhook-signature").split(' ').count(),
    });
    let first = {
        let mut effects = own.effects.lock().unwrap();
        let first = !effects.contains_key(id.as_str());
        if first {
            effects.insert(id.to_string(), unit.payload().clone());
            *own.applied
                .lock()
                .unwrap()
                .entry(id.to_string())
                .or_default() += 1;
        }
        first
    };
    if let (true, Some(slow)) = (first, own.slow_first) {
        tokio::time::sleep(slow).await;
    }
    Ok(())
}

// ---------------------------------------------------------------------------------------------
// Receiver 2: an independent verifier, the `standardwebhooks` crate, in a plain axum handler.

/// What an independent receiver answers a verified delivery of a given record, in turn; once a
/// record's script is used up (or it has none), 204.
type Script = HashMap<String, VecDeque<(u16, Option<&'static str>, &'static str)>>;

#[derive(Clone)]
struct Independent {
    webhook: Arc<standardwebhooks::Webhook>,
    /// Every verified delivery: its arrival, its body, when it came (the test's clock, read by
    /// the test's own receiver, not a handler of the crate).
    seen: Arc<Mutex<Vec<(Arrival, Bytes, Instant)>>>,
    /// Deliveries refused by the verifier.
    refused: Arc<Mutex<Vec<String>>>,
    script: Arc<Mutex<Script>>,
}

impl Independent {
    fn new(secret: &str) -> Self {
        Independent {
            webhook: Arc::new(standardwebhooks::Webhook::new(secret).unwrap()),
            seen: Arc::default(),
            refused: Arc::default(),
            script: Arc::default(),
        }
    }

    fn scripted(self, id: &str, answers: Vec<(u16, Option<&'static str>, &'static str)>) -> Self {
        self.script
            .lock()
            .unwrap()
            .insert(id.to_owned(), answers.into());
        self
    }

    fn router(&self) -> Router {
        Router::new()
            .route("/hooks", post(independent))
            .with_state(self.clone())
    }

    /// The accepted deliveries' ids, each once, and how many deliveries each had.
    fn counts(&self) -> BTreeMap<String, usize> {
        let mut counts = BTreeMap::new();
        for (arrival, _, _) in self.seen.lock().unwrap().iter() {
            *counts.entry(arrival.webhook_id.clone()).or_default() += 1;
        }
        counts
    }
}

fn text(headers: &HeaderMap, name: &str) -> String {
    headers
        .get(name)
        .and_then(|v| v.to_str().ok())
        .unwrap_or_default()
        .to_owned()
}

async fn independent(
    AxumState(receiver): AxumState<Independent>,
    headers: HeaderMap,
    body: Bytes,
) -> Response {
    if let Err(error) = receiver.webhook.verify(&body, &headers) {
        receiver.refused.lock().unwrap().push(error.to_string());
        return (StatusCode::UNAUTHORIZED, error.to_string()).into_response();
    }
    let arrival = Arrival {
        webhook_id: text(&headers, "webhook-id"),
        idempotency_key: text(&headers, "idempotency-key"),
        timestamp: text(&headers, "webhook-timestamp").parse().unwrap(),
        signatures: text(&headers, "webhook-signature").split(' ').count(),
    };
    let id = arrival.webhook_id.clone();
    receiver
        .seen
        .lock()
        .unwrap()
        .push((arrival, body, Instant::now()));
    let next = receiver
        .script
        .lock()
        .unwrap()
        .get_mut(&id)
        .and_then(VecDeque::pop_front);
    match next {
        None => StatusCode::NO_CONTENT.into_response(),
        Some((code, retry_after, body)) => {
            let mut response = (StatusCode::from_u16(code).unwrap(), body).into_response();
            if let Some(value) = retry_after {
                response
                    .headers_mut()
                    .insert("retry-after", HeaderValue::from_static(value));
            }
            response
        }
    }
}

// ---------------------------------------------------------------------------------------------

/// Both receivers accept every record, each once and under its own record id, with the payload
/// byte for byte; `Idempotency-Key` is still sent, equal to `webhook-id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn our_webhook_route_and_an_independent_verifier_accept_every_record_under_its_id() {
    let ids = ids("both", 12);
    let store = outbox("both", &ids).await;
    let own = Own::new(OLD_SECRET);
    let independent = Independent::new(OLD_SECRET);
    let own_at = serve(own.router()).await;
    let independent_at = serve(independent.router()).await;
    let sinks = vec![
        HttpSink::new(url(own_at, "/hooks"))
            .unwrap()
            .standard_webhooks(OLD_SECRET)
            .unwrap(),
        HttpSink::new(url(independent_at, "/hooks"))
            .unwrap()
            .standard_webhooks(OLD_SECRET)
            .unwrap(),
    ];

    let report = relayer(&store, sinks)
        .shutdown_on(store.idle())
        .run(to_receivers)
        .await;

    assert_eq!(report.delivered, ids.len() as u64, "{report:?}");
    assert_all_delivered(&store, &ids).await;
    let expected: BTreeMap<String, Bytes> = ids
        .iter()
        .map(|id| (id.clone(), Bytes::from(payload(id))))
        .collect();
    assert_eq!(own.effects(), expected, "our route: every record, intact");
    let arrivals = own.arrivals();
    assert_eq!(arrivals.len(), ids.len(), "our route: each record once");
    for arrival in &arrivals {
        assert_eq!(arrival.idempotency_key, arrival.webhook_id);
        assert_eq!(arrival.signatures, 1);
    }

    assert!(independent.refused.lock().unwrap().is_empty());
    let counts = independent.counts();
    assert_eq!(
        counts.keys().cloned().collect::<Vec<_>>(),
        ids,
        "the independent verifier: every record under its id"
    );
    assert!(counts.values().all(|n| *n == 1), "{counts:?}");
    for (arrival, body, _) in independent.seen.lock().unwrap().iter() {
        assert_eq!(body, &expected[&arrival.webhook_id]);
        assert_eq!(arrival.idempotency_key, arrival.webhook_id);
    }
}

/// Nothing listens at the receiver's address at first: every record fails, stays pending with its
/// attempts counted, nothing is lost; once the receiver is started there, the same relay run
/// delivers every record.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_receiver_down_then_started_loses_nothing() {
    let ids = ids("down", 8);
    let store = outbox("down", &ids).await;
    // A port that was just free: nothing listens there until the receiver is started.
    let address = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    let sink = HttpSink::new(url(address, "/hooks"))
        .unwrap()
        .standard_webhooks(OLD_SECRET)
        .unwrap();
    let relay = tokio::spawn(
        relayer(&store, vec![sink])
            .shutdown_on(store.idle())
            .run(to_receivers),
    );

    // Down: wait until every record has failed at least once.
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    loop {
        let mut all_failed = true;
        for id in &ids {
            let record = stored(&store, id).await;
            assert_eq!(
                record.status,
                Status::Pending,
                "{id} stays pending while the receiver is down: {record:?}"
            );
            all_failed &= record.attempts >= 1;
        }
        if all_failed {
            break;
        }
        assert!(
            tokio::time::Instant::now() < deadline,
            "not every record was attempted within 60 s"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert!(!relay.is_finished(), "the relay keeps going");
    let failed = stored(&store, &ids[0]).await;
    assert!(
        failed.last_error.as_deref().unwrap_or("").contains(&ids[0]),
        "the connection error is recorded: {failed:?}"
    );

    // Up, at the address the sink was given.
    let own = Own::new(OLD_SECRET);
    let listener = tokio::net::TcpListener::bind(address).await.unwrap();
    serve_on(listener, own.router());

    let report = tokio::time::timeout(Duration::from_secs(120), relay)
        .await
        .expect("the relay drained the outbox once the receiver was up")
        .unwrap();
    assert_eq!(report.delivered, ids.len() as u64, "{report:?}");
    assert_all_delivered(&store, &ids).await;
    assert_eq!(
        own.effects().keys().cloned().collect::<Vec<_>>(),
        ids,
        "every record reached the receiver once it was up"
    );
}

/// The receiver applies the effect, then answers later than the sink's timeout: the sink gives
/// up, the relay sends again under the same `webhook-id`, signed afresh, and the receiver's
/// second delivery changes nothing.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_receiver_is_retried_and_deduplicates_by_webhook_id() {
    let ids = ids("slow", 3);
    let store = outbox("slow", &ids).await;
    let own = Own {
        slow_first: Some(Duration::from_secs(3)),
        ..Own::new(OLD_SECRET)
    };
    let own_at = serve(own.router()).await;
    let sink = HttpSink::new(url(own_at, "/hooks"))
        .unwrap()
        .standard_webhooks(OLD_SECRET)
        .unwrap()
        .timeout(Duration::from_secs(1));

    let report = relayer(&store, vec![sink])
        .shutdown_on(store.idle())
        .run(to_receivers)
        .await;

    assert_eq!(report.delivered, ids.len() as u64, "{report:?}");
    assert!(report.retried >= ids.len() as u64, "{report:?}");
    assert_all_delivered(&store, &ids).await;
    assert_eq!(own.effects().keys().cloned().collect::<Vec<_>>(), ids);
    let applied = own.applied.lock().unwrap().clone();
    assert!(
        applied.values().all(|n| *n == 1),
        "each effect applied once: {applied:?}"
    );
    let arrivals = own.arrivals();
    for id in &ids {
        let of_id: Vec<&Arrival> = arrivals.iter().filter(|a| &a.webhook_id == id).collect();
        assert!(
            of_id.len() >= 2,
            "{id}: the timed-out attempt was sent again: {arrivals:?}"
        );
        assert!(of_id.iter().all(|a| &a.idempotency_key == id));
        assert!(
            of_id.windows(2).all(|w| w[0].timestamp <= w[1].timestamp),
            "each attempt is signed at its own send time: {of_id:?}"
        );
    }
}

/// A rotation: the sender signs with the new and the old secret. Receivers that know only the new
/// one and receivers that know only the old one — ours and the independent verifier — all accept
/// every record. A receiver with neither refuses (401: dead at once), and a sender that signs
/// with the old secret alone is refused by a receiver that has moved to the new one.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rotating_secret_is_accepted_by_receivers_knowing_either() {
    let ids = ids("rotate", 6);
    let store = outbox("rotate", &ids).await;
    let own_new = Own::new(NEW_SECRET);
    let own_old = Own::new(OLD_SECRET);
    let independent_new = Independent::new(NEW_SECRET);
    let independent_old = Independent::new(OLD_SECRET);
    let rotating = |address| {
        HttpSink::new(url(address, "/hooks"))
            .unwrap()
            .standard_webhooks(NEW_SECRET)
            .unwrap()
            .also_sign_with(OLD_SECRET)
            .unwrap()
    };
    let sinks = vec![
        rotating(serve(own_new.router()).await),
        rotating(serve(own_old.router()).await),
        rotating(serve(independent_new.router()).await),
        rotating(serve(independent_old.router()).await),
    ];

    let report = relayer(&store, sinks.clone())
        .shutdown_on(store.idle())
        .run(to_receivers)
        .await;

    assert_eq!(report.delivered, ids.len() as u64, "{report:?}");
    assert_all_delivered(&store, &ids).await;
    for (name, own) in [("new", &own_new), ("old", &own_old)] {
        assert_eq!(
            own.effects().keys().cloned().collect::<Vec<_>>(),
            ids,
            "our route knowing only the {name} secret"
        );
        assert!(own.arrivals().iter().all(|a| a.signatures == 2));
    }
    for (name, independent) in [("new", &independent_new), ("old", &independent_old)] {
        assert!(independent.refused.lock().unwrap().is_empty(), "{name}");
        assert_eq!(
            independent.counts().keys().cloned().collect::<Vec<_>>(),
            ids,
            "the independent verifier knowing only the {name} secret"
        );
    }

    // Controls: the signatures are really checked.
    let record = Record::new("rotate-control", "orders.events", None, payload("c"), 0);
    let stranger = Own::new(STRANGER_SECRET);
    let refused = rotating(serve(stranger.router()).await)
        .send(&record)
        .await
        .unwrap_err();
    assert!(refused.is_reject(), "{refused}");
    assert!(refused.to_string().contains("401"), "{refused}");
    assert!(stranger.effects().is_empty());
    let not_rotated = HttpSink::new(url(serve(Own::new(NEW_SECRET).router()).await, "/hooks"))
        .unwrap()
        .standard_webhooks(OLD_SECRET)
        .unwrap();
    let refused = not_rotated.send(&record).await.unwrap_err();
    assert!(refused.to_string().contains("401"), "{refused}");
}

/// A 422 with a body dead-letters the record at once, the status and the receiver's words in the
/// dead record's detail; a 429 with `Retry-After: 1` is retried about a second later and
/// delivered; the other records are delivered meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_is_dead_with_the_answer_and_a_429_waits_for_retry_after() {
    let mut ids = ids("answers", 4);
    ids.extend(["answers-refused".to_owned(), "answers-throttled".to_owned()]);
    let store = outbox("answers", &ids).await;
    let independent = Independent::new(OLD_SECRET)
        .scripted(
            "answers-refused",
            vec![(422, None, "order o-13 has no customer")],
        )
        .scripted("answers-throttled", vec![(429, Some("1"), "slow down")]);
    let sink = HttpSink::new(url(serve(independent.router()).await, "/hooks"))
        .unwrap()
        .standard_webhooks(OLD_SECRET)
        .unwrap();

    let report = relayer(&store, vec![sink])
        .shutdown_on(store.idle())
        .run(to_receivers)
        .await;

    assert_eq!(report.delivered, ids.len() as u64 - 1, "{report:?}");
    assert_eq!(report.dead, 1, "{report:?}");

    // Refused: dead after one attempt, with the answer.
    let refused = stored(&store, "answers-refused").await;
    assert_eq!(refused.status, Status::Dead, "{refused:?}");
    assert_eq!(
        refused.attempts, 1,
        "dead at once, not retried: {refused:?}"
    );
    let letter = DeadLetters::peek(&store, &UnitId::from("answers-refused"))
        .await
        .unwrap()
        .expect("the refused record is a dead letter");
    assert_eq!(letter.reason, Some(ReasonKind::Rejected), "{letter:?}");
    assert!(letter.detail.contains("422"), "{}", letter.detail);
    assert!(
        letter.detail.contains("order o-13 has no customer"),
        "{}",
        letter.detail
    );
    assert_eq!(independent.counts()["answers-refused"], 1);

    // Throttled: sent again once the receiver's second had passed, then delivered.
    assert_eq!(
        stored(&store, "answers-throttled").await.status,
        Status::Delivered
    );
    let throttled: Vec<Instant> = independent
        .seen
        .lock()
        .unwrap()
        .iter()
        .filter(|(a, _, _)| a.webhook_id == "answers-throttled")
        .map(|(_, _, at)| *at)
        .collect();
    assert_eq!(throttled.len(), 2, "429 then accepted");
    let waited = throttled[1] - throttled[0];
    // The relay's own backoff is 50 ms; the second attempt waited for the receiver's `Retry-After`
    // (the database's clock decides when it is due, so allow its rounding).
    assert!(
        waited >= Duration::from_millis(900),
        "retried after {waited:?}, not after Retry-After: 1"
    );

    for id in &ids[..4] {
        assert_eq!(stored(&store, id).await.status, Status::Delivered, "{id}");
    }
}
