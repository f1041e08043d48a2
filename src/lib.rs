//! At-least-once delivery that is hard to get wrong.
//!
//! `delivery` turns the rules of at-least-once delivery into code the compiler and a small runtime
//! enforce. You write an `async fn` that applies one unit's effect; `#[consumer]` generates the
//! wrapper that acknowledges only after the effect, returns failures with a backoff, bounds
//! redelivery by the broker's own count and moves poison, intact, to a dead letter an operator can
//! read and redrive.
//!
//! ```
//! use delivery::{consumer, Consumer, HandlerError, Json, State, UnitId};
//! use delivery::memory::MemoryBroker;
//!
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced { order_id: String, amount_cents: u64 }
//!
//! #[derive(Clone, Default)]
//! struct App { db: std::sync::Arc<std::sync::Mutex<Vec<(String, u64)>>> }
//!
//! #[consumer]
//! async fn record_order(State(app): State<App>, Json(order): Json<OrderPlaced>) -> Result<(), HandlerError> {
//!     let mut db = app.db.lock().unwrap();
//!     // Keyed by the order's id: a redelivery finds it and changes nothing (rule 3).
//!     if !db.iter().any(|(id, _)| *id == order.order_id) {
//!         db.push((order.order_id, order.amount_cents));
//!     }
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let broker = MemoryBroker::new();
//! broker.publish("orders", delivery::Unit::new("m-1", r#"{"order_id":"o-1","amount_cents":990}"#));
//! broker.publish("orders", delivery::Unit::new("m-1", r#"{"order_id":"o-1","amount_cents":990}"#));
//! let app = App::default();
//! Consumer::new(broker.consume("orders"))
//!     .state(app.clone())
//!     .shutdown_on(broker.idle("orders"))
//!     .run(record_order)
//!     .await;
//! assert_eq!(app.db.lock().unwrap().len(), 1);
//! # }
//! ```
//!
//! # What does not compile
//!
//! A handler that reads the clock writes a different value on every delivery (rule 3):
//!
//! ```compile_fail
//! # use delivery::{consumer, HandlerError, Json};
//! #[consumer]
//! async fn stamp(Json(id): Json<String>) -> Result<(), HandlerError> {
//!     let received_at = std::time::SystemTime::now(); // error: a handler must not read the clock
//!     Ok(())
//! }
//! ```
//!
//! A handler that mints an id creates a new record on every delivery (rule 3):
//!
//! ```compile_fail
//! # use delivery::{consumer, HandlerError, Json};
//! # mod uuid { pub struct Uuid; impl Uuid { pub fn new_v4() -> Self { Uuid } } }
//! #[consumer]
//! async fn create(Json(name): Json<String>) -> Result<(), HandlerError> {
//!     let id = uuid::Uuid::new_v4(); // error: a handler must not mint ids or randomness
//!     Ok(())
//! }
//! ```
//!
//! A handler that takes a clock, even behind an alias, an `Arc` or `State`:
//!
//! ```compile_fail
//! # use delivery::{consumer, HandlerError, State};
//! type Now = std::sync::Arc<std::time::Instant>;
//! #[consumer]
//! async fn handle(State(now): State<Now>) -> Result<(), HandlerError> { Ok(()) }
//! ```
//!
//! A handler that cannot fail would acknowledge a failed unit (rule 1):
//!
//! ```compile_fail
//! # use delivery::{consumer, Json};
//! #[consumer]
//! async fn handle(Json(n): Json<u64>) {}
//! ```
//!
//! # Crates and features
//!
//! This facade re-exports [`delivery_core`] (the runtime) and [`delivery_macros`] (the attributes).
//! Integration features are forwarded under the same names:
//!
//! | feature | what |
//! |---|---|
//! | *(always)* | the in-memory broker ([`memory`]), the consumer runtime, `#[consumer]` |
//! | `lapin` | RabbitMQ through lapin |
//! | `axum` | `#[webhook]` routes |
//! | `postgres`, `sqlite` | outbox stores (sqlx) |
//! | `redis` | Redis Streams |
//! | `nats` | NATS JetStream |
//! | `kafka` | Kafka through rdkafka |
//! | `http` | the relay's HTTP sink |
//! | `testing` | `testing::MemorySink`, the relay's receiver for tests: its receipt confirms a send that went nowhere, so enable it from `[dev-dependencies]` only |
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
// docs.rs (`--cfg docsrs`, nightly): each item behind a feature shows the feature it needs.
#![cfg_attr(docsrs, feature(doc_cfg))]

// The names a handler is written with (at most 15 besides modules and macros; everything else lives in its
// module, under one path).
pub use delivery_core::extract::{Json, State};
pub use delivery_core::outbox::Receipt;
pub use delivery_core::unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};
pub use delivery_core::{Batch, BatchOutcome, Consumer, HandlerError, Stopwatch};

// The modules, as delivery-core has them.
pub use delivery_core::{
    batch, consumer, dead_letter, disposition, error, extract, handler, headers, marker, memory,
    observe, offset, testing, trace, transport, unit,
};

/// Names the macros' expansions use. Not public API: no semver guarantees.
#[doc(hidden)]
pub mod __private {
    pub use delivery_core::__private::*;

    /// The transports' probes of their clients' acknowledgement handles (lapin's `Acker`).
    #[cfg(feature = "lapin")]
    pub use delivery_rabbitmq::marker as transport_probe;
}

/// RabbitMQ (feature `lapin`): the crate [`delivery_rabbitmq`].
#[cfg(feature = "lapin")]
pub use delivery_rabbitmq as rabbitmq;
#[cfg(feature = "lapin")]
#[doc(no_inline)]
pub use delivery_rabbitmq::lapin;

/// Redis Streams (feature `redis`): the crate [`delivery_redis`].
#[cfg(feature = "redis")]
pub use delivery_redis as redis;

/// NATS JetStream (feature `nats`): the crate [`delivery_nats`].
#[cfg(feature = "nats")]
pub use delivery_nats as nats;
#[cfg(feature = "nats")]
#[doc(no_inline)]
pub use delivery_nats::async_nats;

/// Kafka (feature `kafka`): the crate [`delivery_kafka`].
#[cfg(feature = "kafka")]
pub use delivery_kafka as kafka;

/// The outbox relay's HTTP sink (feature `http`): the crate [`delivery_http`].
#[cfg(feature = "http")]
pub use delivery_http as http;

/// The inbox (features `postgres`, `sqlite`): [`delivery_sql::inbox`], with
/// [`PgInbox`](delivery_postgres::PgInbox) and [`SqliteInbox`](delivery_sqlite::SqliteInbox).
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod inbox {
    #[cfg(feature = "postgres")]
    pub use delivery_postgres::PgInbox;
    pub use delivery_sql::inbox::{Inbox, InboxDatabase, RecordFuture, SqlInbox, TABLE};
    #[cfg(feature = "sqlite")]
    pub use delivery_sqlite::SqliteInbox;
}
/// sqlx 0.9 (features `postgres`, `sqlite`), which the stores run on.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
#[doc(no_inline)]
pub use delivery_sql::sqlx;
/// The stamp guard (features `postgres`, `sqlite`): [`delivery_sql::store`], one statement in
/// every database, for each database's connections.
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod store {
    /// The guard in PostgreSQL (feature `postgres`).
    #[cfg(feature = "postgres")]
    pub use delivery_postgres::store as postgres;
    pub use delivery_sql::store::TABLE;
    /// The guard in SQLite (feature `sqlite`).
    #[cfg(feature = "sqlite")]
    pub use delivery_sqlite::store as sqlite;
}

/// The outbox: the relay ([`delivery_core::outbox`]) and, with the features `postgres` and
/// `sqlite`, the write side and the stores ([`delivery_sql::outbox`]).
pub mod outbox {
    pub use delivery_core::outbox::{
        Attempt, Backlog, FromRecord, IntoAttempt, OutboxRecord, Receipt, Record, RecordId, Relay,
        RelayReport, Relayer, Sink, Status, Store, StoredRecord,
    };
    #[cfg(feature = "postgres")]
    pub use delivery_postgres::PgStore;
    #[cfg(any(feature = "postgres", feature = "sqlite"))]
    pub use delivery_sql::outbox::{InsertFuture, NewRecord, Outbox, OutboxDatabase, SqlStore};
    #[cfg(feature = "sqlite")]
    pub use delivery_sqlite::SqliteStore;
}

/// A durable queue in your own database (features `postgres`, `sqlite`):
/// [`delivery_sql::queue`].
#[cfg(any(feature = "postgres", feature = "sqlite"))]
pub mod queue {
    #[cfg(feature = "postgres")]
    pub use delivery_postgres::{PgQueue, PgTx};
    pub use delivery_sql::queue::{Queue, QueueHandle, QueueSource, SqlQueue, Tx};
    #[cfg(feature = "sqlite")]
    pub use delivery_sqlite::{SqliteQueue, SqliteTx};
}

/// The dead-letter web console (feature `admin`): [`delivery_axum::admin`].
#[cfg(feature = "admin")]
pub use delivery_axum::admin;

/// Webhooks in: verification ([`delivery_core::webhook`]) and, with the feature `axum`, the
/// routes `#[webhook]` builds ([`delivery_axum::webhook`]).
pub mod webhook {
    #[cfg(feature = "axum")]
    #[doc(hidden)]
    pub use delivery_axum::webhook::__private;
    #[cfg(feature = "axum")]
    pub use delivery_axum::webhook::{
        IntoSecrets, SecretOrigin, WebhookConfigError, WebhookHandler, route,
    };
    pub use delivery_core::webhook::{
        HmacScheme, Scheme, Secret, StandardSigner, Verifier, VerifyError,
    };
}

/// A consumer's or relay's health ([`delivery_core::health`]) and, with the feature `axum`, its
/// route ([`delivery_axum::health`]).
pub mod health {
    #[cfg(feature = "axum")]
    pub use delivery_axum::health::{HealthReport, route};
    pub use delivery_core::health::{
        Component, Health, HealthSnapshot, HealthStatus, RECONNECT_GRACE,
    };
}

/// Turns an `async fn` into a handler the consumer runtime runs.
///
/// The function's parameters are extractors ([`Json<T>`], [`State<S>`], [`UnitId`],
/// [`DeliveryCount`], [`Stamp`], [`Headers`], [`Unit`]); it returns `Result<_, E>` with
/// `E: Into<HandlerError>`. The attribute replaces the function with a unit struct of the same
/// name implementing [`Handler`](handler::Handler), which [`Consumer::run`] takes; the function as written stays
/// callable as `name::handle(..)` for tests.
///
/// It refuses at compile time, each time on the offending tokens:
/// - a parameter that is a clock, an id minter or an acknowledgement handle, decided by what its
///   type is: the marker traits [`Clock`](marker::Clock), [`Minter`](marker::Minter) and [`AckHandle`](marker::AckHandle) (std's `SystemTime` and
///   `Instant`, tokio's `Instant`, the generators of rand 0.8, 0.9 and 0.10, ulid 1–3 and
///   fastrand 1–2 under the features named after each release (`rand-0_8`, `ulid-1`, ...; see
///   [`marker`]), your own types marked with them), which reach through a type alias, `&`, `Arc`, `Box`, `Option`, `Mutex`,
///   `State` and each element of a tuple written in the parameter. A path refuses a type by its
///   name only where the name cannot be anything else (`SystemTime`, `ThreadRng`, `chrono::Utc`,
///   `std::time::Instant`): your own `billing::Local`, `geo::Instant`, `ClockConfig` or
///   `IdGenerator` compiles;
/// - a body that reads the clock or mints an id or randomness, anywhere in it — nested blocks,
///   closures, async blocks, macro arguments, method chains: `SystemTime::now`, `Instant::now`,
///   `UNIX_EPOCH.elapsed()`, chrono's `Utc::now` and `Local::now`, time's
///   `OffsetDateTime::now_utc` and `UtcDateTime::now`, jiff's and uuid's `Timestamp::now`,
///   `Zoned::now`; `Uuid::new_v4`, `now_v1`, `now_v6`, `now_v7` and `new_v7` (its random bits),
///   `Ulid::new`, `ulid::Generator`, rand's free functions, `ThreadRng`, `OsRng` and
///   entropy-seeded generators (`StdRng::from_entropy()`), `fastrand`, `getrandom`, `nanoid!`,
///   `cuid`, `Ksuid::new`. A `use` inside the body, plain or renamed with `as`, is followed; a bare
///   `random()`, `thread_rng()`, `rng()` or `getrandom()` is refused by its name, since its import
///   is usually at module level, out of sight;
/// - a return type that cannot carry a failure.
///
/// Deterministic code stays allowed: `Uuid::new_v5(ns, unit_id)`, `Uuid::from_u128`, times parsed
/// from the payload, `UNIX_EPOCH + Duration::from_secs(secs_from_the_payload)`, `Duration`
/// arithmetic, `DateTime<Utc>` as a type, `StdRng::seed_from_u64(seed_from_the_unit)`,
/// `tokio::time::sleep` and `tokio::time::timeout`, a method named `now` on your own value.
///
/// # Deadlines and latency
/// A clock read that writes nothing takes a [`Stopwatch`], which the check knows:
/// `Stopwatch::start()`, then `watch.deadline(d)` for `tokio::time::timeout_at` or `sleep_until`,
/// `watch.exceeds(limit)` to count slow units, `watch.record(&histogram)` for a latency metric. It
/// hands out no time and no duration, so nothing read from it can be written as a value, and the
/// rest of the body stays checked. `tokio::time::timeout(d, ..)` and `sleep(d)` read no clock in
/// the handler and need nothing. `allow_clock` (below) remains for what a `Stopwatch` cannot
/// express; it switches the clock check off for the whole handler.
///
/// # Where the check stops
/// The checks see the handler's own tokens and the types of its parameters, nothing else:
/// - **a helper function the handler calls**: `let at = stamp();` with `fn stamp()` reading the
///   clock compiles — another function's tokens are not the attribute's input, and a proc macro
///   cannot resolve a call to its definition. Keep clock reads and minting out of what a handler
///   calls;
/// - **a clock or generator in a field of the state struct** (`struct App { rng: StdRng, .. }`
///   taken as `State<App>`): the markers see the parameter's type, `App`, not its fields — a trait
///   cannot ask whether some field is a clock. Mark the state (`impl delivery::marker::Minter for App {}`)
///   to refuse it, or keep clocks and generators out of the state;
/// - **an import or alias at module level used in the body**: `use std::time::SystemTime as
///   Wall;` then `Wall::now()`, `use ulid::Generator;` then `Generator::new()`, a free function
///   imported bare under a common name (`use getrandom::fill;` then `fill(..)`). A type imported
///   under its own name is still refused (`use chrono::Utc;` then `Utc::now()`), and so is the same
///   `use` written inside the body; an alias to a tuple (`type S = (u32, Instant)`) hides its
///   elements from the markers;
/// - **the database's clock**: `now()`, `CURRENT_TIMESTAMP` or `gen_random_uuid()` inside a SQL
///   string or a column default read the database's clock on every delivery; string contents are
///   not looked into. Bind the time and the id from the unit;
/// - **a `Deserialize` that reads the clock**: `#[serde(default = "Utc::now")]` on a payload field
///   fills a missing field with each delivery's time while [`Json<T>`] decodes, in another item
///   the attribute does not see. Make such fields required, or default them from the unit's
///   [`Stamp`];
/// - **a method on a value made elsewhere**: `rng.random()` on a generator from the state,
///   `started.elapsed()` on an `Instant` from a parameter (the read that made them is refused, in
///   the handler or as a parameter), and a macro whose own definition reads the clock.
///
/// These limits hold for `#[webhook]` and [`#[relay]`](macro@relay) too.
///
/// The return type may carry any error: `?` on a `std::error::Error`, an `anyhow::Error` or a
/// `Box<dyn Error + Send + Sync>` returns the unit for redelivery; `HandlerError::reject(e)` sends
/// it to the dead letter.
///
/// # Arguments
/// - `allow_clock = "why"`: a recorded exception for a clock read that writes nothing and that a
///   [`Stopwatch`] cannot express. The reason is required and appears in the handler's
///   documentation. It covers the handler's clock wherever it comes from — a read in the body, or
///   a clock in its state — for the whole handler, so prefer a [`Stopwatch`]. Minters and
///   acknowledgement handles stay refused.
/// - `state = Type`: the shared state, when no `State<T>` parameter names it (for your own
///   extractors that read it).
/// - `crate = path`: where `delivery` is, when renamed or re-exported.
///
/// # Equivalent code without the attribute
///
/// ```
/// # use delivery::{HandlerError, Json, handler::Handler, disposition::Outcome, Unit, extract::FromUnit, handler::IntoOutcome};
/// # #[derive(serde::Deserialize)] struct Order { id: String }
/// // #[consumer] async fn record(Json(order): Json<Order>) -> Result<(), HandlerError> { .. }
/// #[allow(non_camel_case_types)]
/// #[derive(Clone, Copy, Debug)]
/// struct record;
/// impl record {
///     async fn handle(Json(order): Json<Order>) -> Result<(), HandlerError> { Ok(()) }
/// }
/// impl<S: Send + Sync + 'static> Handler<S> for record {
///     fn call(&self, unit: &Unit, state: &S) -> impl Future<Output = Outcome> + Send + 'static {
///         let arg = <Json<Order> as FromUnit<S>>::from_unit(unit, state);
///         async move {
///             match arg {
///                 Ok(arg) => record::handle(arg).await.into_outcome(),
///                 Err(malformed) => Outcome::Malformed(malformed.to_string()),
///             }
///         }
///     }
/// }
/// ```
/// (plus the compile-time checks, which is why you should not write it by hand).
pub use delivery_macros::consumer;

/// Turns an `async fn` into an axum webhook handler that verifies each delivery over its raw body
/// before anything parses it (rule 5), then runs the function and answers with the status that
/// tells the sender whether to deliver again. Feature `axum`.
///
/// ```
/// use std::collections::HashMap;
/// use std::sync::{Arc, Mutex};
///
/// use axum::Router;
/// use delivery::{HandlerError, Json, State, UnitId, webhook};
///
/// #[derive(Clone, Default)]
/// struct App { paid: Arc<Mutex<HashMap<String, u64>>> }
///
/// #[derive(serde::Deserialize)]
/// struct Event { r#type: String, data: Data }
/// #[derive(serde::Deserialize)]
/// struct Data { object: Invoice }
/// #[derive(serde::Deserialize)]
/// struct Invoice { id: String, amount_paid: u64 }
///
/// #[webhook(scheme = stripe, secret = env("STRIPE_WEBHOOK_SECRET"))]
/// async fn stripe_events(
///     State(app): State<App>,
///     event_id: UnitId, // Stripe's event id: the same on every delivery of the event
///     Json(event): Json<Event>,
/// ) -> Result<(), HandlerError> {
///     if event.r#type != "invoice.paid" {
///         return Ok(()); // not ours: acknowledged, never retried
///     }
///     let invoice = event.data.object;
///     // Keyed by the invoice's id: a redelivery changes nothing (rule 3).
///     app.paid.lock().unwrap().entry(invoice.id).or_insert(invoice.amount_paid);
///     let _ = event_id;
///     Ok(())
/// }
///
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// # unsafe { std::env::set_var("STRIPE_WEBHOOK_SECRET", "whsec_test_secret") };
/// let app = App::default();
/// let router = Router::new()
///     // The verifier is built here: an unset STRIPE_WEBHOOK_SECRET fails now, by name.
///     .route("/webhooks/stripe", delivery::webhook::route(stripe_events, &app)?)
///     .with_state(app.clone());
///
/// // A delivery signed as Stripe signs it...
/// # use hmac::{KeyInit as _, Mac as _};
/// # use tower::ServiceExt as _;
/// let body = r#"{"id":"evt_1","type":"invoice.paid","data":{"object":{"id":"in_1","amount_paid":990}}}"#;
/// let t = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH)?.as_secs();
/// let mut mac = hmac::Hmac::<sha2::Sha256>::new_from_slice(b"whsec_test_secret")?;
/// mac.update(format!("{t}.{body}").as_bytes());
/// let signature = format!("t={t},v1={}", hex::encode(mac.finalize().into_bytes()));
/// let request = |signature: &str| {
///     axum::http::Request::post("/webhooks/stripe")
///         .header("stripe-signature", signature)
///         .body(axum::body::Body::from(body))
/// };
/// let answer = router.clone().oneshot(request(&signature)?).await?;
/// assert_eq!(answer.status(), 200);
///
/// // ...and a forgery, which never reaches the function.
/// let forged = signature.replace("v1=", "v1=0");
/// let answer = router.oneshot(request(&forged)?).await?;
/// assert_eq!(answer.status(), 401);
/// assert_eq!(app.paid.lock().unwrap().len(), 1);
/// # Ok(()) }
/// ```
///
/// The generated handler takes the raw body and headers, applies the body limit, verifies the
/// signature (and the signed timestamp, where the scheme has one), and only then decodes the
/// parameters and calls the function.
///
/// | what happened | status | the sender |
/// |---|---|---|
/// | the function returned `Ok` — applied now, or already applied by an earlier delivery | `200` | stops |
/// | signature missing, malformed or wrong; timestamp outside the tolerance | `401` | stops: nothing ran, and no retry turns it into a success |
/// | body over `max_body` | `413` | stops |
/// | verified, but the payload does not decode into the parameters | `400` | stops |
/// | the function returned [`HandlerError::reject`] | `422` | stops |
/// | the function failed (`?`, [`HandlerError::retry`]) or panicked | `503` | delivers again |
/// | no usable secret (only when routed with plain `post`, see below) | `500` | delivers again |
///
/// Each outcome is logged once with `tracing`, under the function's name; a secret never appears
/// in a log line, an error or a diagnostic.
///
/// # Arguments
/// - `scheme = ..` (required): `github`, `stripe`, `standard_webhooks`, `slack` or `shopify`, each
///   exactly as its provider signs ([`webhook::Scheme`]).
/// - `secret = ..` (required), never written in the source:
///   - `env("VAR")`: read from the environment when the verifier is built;
///   - `|s: &App| s.webhook_secret.clone()`: taken from the state (any `T: FromRef<RouterState>`);
///     the closure returns a `String`, `&'static str`, [`webhook::Secret`], an `Option` of one, or a
///     `Vec` of them ([`webhook::IntoSecrets`]);
///   - a list, for a rotation — a delivery signed with any of them verifies:
///     `secret = [env("WEBHOOK_SECRET"), env("WEBHOOK_SECRET_PREVIOUS")]`. Every listed variable
///     must be set; a secret that may be absent comes from the state as an `Option`.
/// - `max_body = bytes`: the largest body accepted (default 1 MiB), checked by `Content-Length`
///   and while reading, before any hashing.
/// - `tolerance_secs = seconds`: how far a signed timestamp may be from the clock, either way
///   (default 300).
/// - `credential_headers = ["X-Api-Key", ..]`: header names, beside `Authorization`, `Cookie` and
///   `Proxy-Authorization`, that carry credentials and are never copied into the unit's
///   [`Headers`] ([`webhook::Verifier::credential_header`]).
/// - `allow_clock = "why"`, `state = Type`, `crate = path`: as for [`consumer`](macro@consumer).
///
/// # Parameters
/// The extractors of [`consumer`](macro@consumer), resolved from the verified delivery:
/// [`Json<T>`] decodes the verified body; [`State<S>`] is the handler's state, taken from the
/// router's state by `FromRef` as axum's own `State` is; [`UnitId`] is the delivery's id, taken
/// only from what the signature covers ([`webhook::Verifier::unit_id`]) — Standard Webhooks
/// `webhook-id`, Stripe's event `id`, Slack's `event_id`, or `sha256:<hex>` of the verified body
/// when the delivery carries no signed id: always for GitHub and Shopify, whose
/// `X-GitHub-Delivery` / `X-Shopify-Webhook-Id` is unsigned and would let a replay pass as a new
/// unit (both stay in the headers, for logs); [`Headers`] are the request's headers, without
/// those that carry credentials (`Authorization`, `Cookie`, `Proxy-Authorization`, and
/// `credential_headers`);
/// [`Unit`] holds the verified bytes. HTTP senders send no delivery count, so [`DeliveryCount`] is
/// always 1.
///
/// # Startup
/// [`webhook::route(handler, &state)`](webhook::route) builds the verifier when the router is
/// built and returns a [`webhook::WebhookConfigError`] naming the variable that is not set, or the
/// secret the scheme cannot use: the service fails at startup, not on its first delivery.
/// `handler::verifier(&state)` performs the same check on its own. The handler is an axum handler
/// too, so `axum::routing::post(handler)` works as well; the verifier is then built on the first
/// request (once per process when every secret comes from the environment), and a missing secret
/// is answered with `500` and logged with the variable's name.
///
/// # What does not compile
/// Everything [`consumer`](macro@consumer) refuses (a clock or a minter as a parameter or in the body, an
/// acknowledgement handle, a return type that cannot fail), and a parameter that reads the body
/// before it is verified — axum's `Json`, `Form`, `Bytes`, `String`, `Request`, `Body`:
///
/// ```compile_fail
/// # use delivery::{HandlerError, webhook};
/// # #[derive(serde::Deserialize)] struct Event { id: String }
/// #[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
/// async fn push(axum::Json(event): axum::Json<Event>) -> Result<(), HandlerError> {
///     // error: a webhook handler must not take `axum::Json`: it reads the request body before
///     // its signature is verified (rule 5)
///     Ok(())
/// }
/// ```
///
/// A secret written in the source, a missing `secret` or an unknown `scheme` are errors on the
/// attribute, which list what is accepted.
#[cfg(feature = "axum")]
pub use delivery_macros::webhook;

/// Turns an `async fn(record: OutboxRecord<T>, ..) -> Result<Receipt, E>` into a relay function
/// the outbox relay runs (rule 6).
///
/// The relay ([`outbox::Relayer`]) claims pending outbox records and calls the function once per
/// attempt, under the record's own id; it marks a record delivered only for the [`Receipt`] the
/// function returns — and only a sink makes one, once the receiver confirmed. A failure (`?`,
/// [`HandlerError::retry`]) is retried after a backoff, counted in the record;
/// [`HandlerError::reject`] and a payload that does not decode mark the record dead at once.
///
/// ```
/// # #[cfg(feature = "sqlite")]
/// # #[tokio::main(flavor = "current_thread")]
/// # async fn main() -> Result<(), Box<dyn std::error::Error>> {
/// use delivery::testing::MemorySink;
/// use delivery::outbox::{NewRecord, Outbox, Relayer};
/// use delivery::{HandlerError, outbox::OutboxRecord, Receipt, State, relay};
///
/// #[derive(serde::Serialize, serde::Deserialize)]
/// struct OrderPlaced { order_id: String }
///
/// #[relay]
/// async fn announce(
///     record: OutboxRecord<OrderPlaced>,
///     State(sink): State<MemorySink>,
/// ) -> Result<Receipt, HandlerError> {
///     // Sent under the record's own id (an AMQP message id, an HTTP Idempotency-Key).
///     sink.send(&record).await
/// }
///
/// // The write side: the record is written in the same transaction as the effect.
/// let pool = sqlx::SqlitePool::connect("sqlite::memory:").await?;
/// let outbox = Outbox::new();
/// let store = outbox.sqlite(pool.clone());
/// store.migrate().await?;
/// let mut tx = pool.begin().await?;
/// // .. the order itself is inserted here, in `tx` ..
/// let event = OrderPlaced { order_id: "o-1".into() };
/// outbox.write(&mut tx, NewRecord::json("orders.events", &event)?.id("order-o-1")).await?;
/// tx.commit().await?;
///
/// // The relay: marks the record delivered once the sink's receipt came back.
/// let sink = MemorySink::new();
/// let report = Relayer::new(store.clone())
///     .state(sink.clone())
///     .shutdown_on(store.idle())
///     .run(announce)
///     .await;
/// assert_eq!(report.delivered, 1);
/// assert_eq!(sink.accepted()[0].id.as_str(), "order-o-1");
/// # Ok(()) }
/// # #[cfg(not(feature = "sqlite"))] fn main() {}
/// ```
///
/// Parameters are relay extractors ([`outbox::FromRecord`]): [`OutboxRecord<T>`](outbox::OutboxRecord) (the record with
/// its JSON payload decoded), [`outbox::Record`] (as stored, bytes untouched), [`State<S>`],
/// [`RecordId`](outbox::RecordId). The checks of [`consumer`](macro@consumer) apply: no clock or id minter as a parameter or in the
/// body, no acknowledgement handle — and the function must return `Result<Receipt, E>`:
///
/// ```compile_fail
/// # use delivery::{HandlerError, outbox::OutboxRecord, relay};
/// # #[derive(serde::Deserialize)] struct OrderPlaced { order_id: String }
/// #[relay]
/// async fn announce(record: OutboxRecord<OrderPlaced>) -> Result<(), HandlerError> {
///     // error: a relay function returning `Result<(), HandlerError>` does not prove the
///     // receiver confirmed the record (rule 6)
///     Ok(())
/// }
/// ```
///
/// # Arguments
/// `allow_clock = "why"`, `state = Type`, `crate = path`: as for [`consumer`](macro@consumer).
pub use delivery_macros::relay;

/// The README's examples, compiled (and run, unless marked `no_run`) as doc tests, so what a new
/// user copies from it builds.
// Every Rust block of every README compiles (and runs, unless `no_run`) as a doc test, with
// every feature on (`scripts/test.sh`).
macro_rules! readme_examples {
    ($($name:ident = $path:literal),* $(,)?) => {$(
        #[cfg(all(
            doctest,
            feature = "axum",
            feature = "admin",
            feature = "lapin",
            feature = "redis",
            feature = "nats",
            feature = "kafka",
            feature = "postgres",
            feature = "sqlite",
            feature = "http",
            feature = "testing"
        ))]
        #[doc = include_str!($path)]
        pub struct $name;
    )*};
}
readme_examples!(
    ReadmeExamples = "../README.md",
    CoreReadmeExamples = "../delivery-core/README.md",
    RabbitmqReadmeExamples = "../delivery-rabbitmq/README.md",
    RedisReadmeExamples = "../delivery-redis/README.md",
    NatsReadmeExamples = "../delivery-nats/README.md",
    KafkaReadmeExamples = "../delivery-kafka/README.md",
    AxumReadmeExamples = "../delivery-axum/README.md",
    HttpReadmeExamples = "../delivery-http/README.md",
    SqlReadmeExamples = "../delivery-sql/README.md",
    PostgresReadmeExamples = "../delivery-postgres/README.md",
    SqliteReadmeExamples = "../delivery-sqlite/README.md",
);
