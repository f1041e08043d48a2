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
#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]

#[doc(inline)]
pub use delivery_core::*;

/// Turns an `async fn` into a handler the consumer runtime runs.
///
/// The function's parameters are extractors ([`Json<T>`], [`State<S>`], [`UnitId`],
/// [`DeliveryCount`], [`Stamp`], [`Headers`], [`Unit`]); it returns `Result<_, E>` with
/// `E: Into<HandlerError>`. The attribute replaces the function with a unit struct of the same
/// name implementing [`Handler`], which [`Consumer::run`] takes; the function as written stays
/// callable as `name::handle(..)` for tests.
///
/// It refuses at compile time, each time on the offending tokens:
/// - a parameter that is a clock, an id minter or an acknowledgement handle — also behind a type
///   alias, `&`, `Arc`, `Box` or `State`; declare your own types with [`Clock`] and [`Minter`];
/// - a body that reads the clock or mints an id (`SystemTime::now`, `Utc::now`, `Uuid::new_v4`,
///   `rand::random`, `thread_rng`, ...) anywhere — nested blocks, closures, async blocks, macro
///   arguments;
/// - a return type that cannot carry a failure.
///
/// Deterministic derivations stay allowed: `Uuid::new_v5(ns, unit_id)`, times parsed from the
/// payload, `tokio::time::sleep`, a method named `now` on your own value.
///
/// # Arguments
/// - `allow_clock = "why"`: a recorded exception for a clock read that writes nothing (a latency
///   metric). The reason is required and appears in the handler's documentation.
/// - `state = Type`: the shared state, when no `State<T>` parameter names it (for your own
///   extractors that read it).
/// - `crate = path`: where `delivery` is, when renamed or re-exported.
///
/// # Equivalent code without the attribute
///
/// ```
/// # use delivery::{HandlerError, Json, Handler, Outcome, Unit, FromUnit, IntoOutcome};
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
