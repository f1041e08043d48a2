//! Batch handlers: many units in one run of the handler (one transaction, one set-based
//! statement), each unit still acknowledged only after the run that applied it, and settled by
//! its own outcome.
//!
//! A `#[consumer]` whose parameter is a [`Batch<T>`] is a batch handler: `T` is the extractor
//! each unit is decoded with (`Json<Order>`), and each [`Item`] carries its unit's id, delivery
//! count and stamp. The handler's other parameters are `State<S>` only. It runs with
//! [`Consumer::batch`](crate::Consumer::batch):
//!
//! ```
//! use delivery::{consumer, Batch, Consumer, HandlerError, Json, State};
//! use delivery::memory::MemoryBroker;
//! use std::sync::{Arc, Mutex};
//! use std::time::Duration;
//!
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced { order_id: String, amount_cents: u64 }
//!
//! #[derive(Clone, Default)]
//! struct Db(Arc<Mutex<std::collections::BTreeMap<String, u64>>>);
//!
//! #[consumer]
//! async fn record_orders(orders: Batch<Json<OrderPlaced>>, State(db): State<Db>) -> Result<(), HandlerError> {
//!     // One transaction for the whole batch: every write keyed by the order's own id (rule 3).
//!     let mut table = db.0.lock().unwrap();
//!     for order in &orders {
//!         table.insert(order.order_id.clone(), order.amount_cents);
//!     }
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let broker = MemoryBroker::new();
//! for n in 1..=250 {
//!     let payload = format!(r#"{{"order_id":"o-{n}","amount_cents":{n}}}"#);
//!     broker.publish("orders", delivery::Unit::new(format!("m-{n}"), payload));
//! }
//! broker.publish("orders", delivery::Unit::new("m-bad", "not json"));
//! let db = Db::default();
//! let report = Consumer::new(broker.consume("orders"))
//!     .state(db.clone())
//!     .shutdown_on(broker.idle("orders"))
//!     .batch(100, Duration::from_millis(20))
//!     .run(record_orders)
//!     .await;
//! assert_eq!((report.acked, report.dead_lettered), (250, 1)); // the malformed unit never ran
//! assert_eq!(db.0.lock().unwrap().len(), 250);
//! # }
//! ```
//!
//! What each unit's outcome is:
//! - a unit that does not decode (or whose stamp is out of range) never enters a batch: it goes
//!   to the dead letter as malformed, intact, as with a unit handler;
//! - `Ok` acknowledges every unit of the batch, after the handler returned (rule 1);
//! - a failure (an error, a panic) of a batch of more than one unit is retried in place, in
//!   halves, down to single units: each half that succeeds is acknowledged, and a unit that still
//!   fails alone is returned with its backoff (or dead-lettered, when refused or past its bound) —
//!   one poison unit isolates itself instead of dragging its neighbours to the dead letter. These
//!   runs never hand a unit back, so they count no delivery (rule 2: the entrypoint's retry); each
//!   unit's delivery count is still the mechanism's. When every run on the way down to one unit
//!   failed, and the next one too, the failure is taken as the effect's (a database down), not a
//!   unit's, and the units not yet settled are returned together;
//! - a failure with a wait ([`HandlerError::after`](crate::HandlerError::after): a downstream's
//!   `Retry-After`) returns every unit of the batch after it, without halving;
//! - a [`BatchOutcome`] settles each unit by its own outcome: the units it names failed as named,
//!   the others applied.
//!
//! Halving reruns the handler over units it already saw in a failed run: as for any failure, the
//! failed run must have committed nothing, or what it committed must be idempotent (rule 3).

use std::collections::HashMap;
use std::ops::Deref;

use crate::disposition::Outcome;
use crate::error::HandlerError;
use crate::extract::Malformed;
use crate::unit::{DeliveryCount, Headers, Stamp, Unit, UnitId};

/// The units of one run of a batch handler, in the order they were received, each decoded with
/// `T` ([`Item`]). Dereferences to a slice: `batch.len()`, `batch.iter()`, `&batch[0]`.
#[derive(Debug)]
pub struct Batch<T> {
    items: Vec<Item<T>>,
}

impl<T> Batch<T> {
    /// A batch of `items`, for calling a batch handler directly (`name::handle(..)`) in a test.
    pub fn new(items: Vec<Item<T>>) -> Self {
        Batch { items }
    }

    /// The items, in order.
    pub fn into_items(self) -> Vec<Item<T>> {
        self.items
    }
}

impl<T> Deref for Batch<T> {
    type Target = [Item<T>];
    fn deref(&self) -> &[Item<T>] {
        &self.items
    }
}

impl<T> IntoIterator for Batch<T> {
    type Item = Item<T>;
    type IntoIter = std::vec::IntoIter<Item<T>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.into_iter()
    }
}

impl<'a, T> IntoIterator for &'a Batch<T> {
    type Item = &'a Item<T>;
    type IntoIter = std::slice::Iter<'a, Item<T>>;
    fn into_iter(self) -> Self::IntoIter {
        self.items.iter()
    }
}

/// One unit of a [`Batch`]: its decoded value (`T`, reached through `Deref`: `order.order_id`
/// on an `Item<Json<Order>>`) and what its unit carries — id, delivery count, stamp, headers.
#[derive(Debug)]
pub struct Item<T> {
    value: T,
    unit: Unit,
}

impl<T> Item<T> {
    /// `value`, decoded from `unit`: for calling a batch handler directly in a test.
    pub fn new(value: T, unit: Unit) -> Self {
        Item { value, unit }
    }

    /// The unit's id: the key of what the item writes (rule 3), and what a [`BatchOutcome`]
    /// names.
    pub fn id(&self) -> &UnitId {
        self.unit.id()
    }

    /// Which delivery of the unit this is, counted by the mechanism.
    pub fn delivery_count(&self) -> DeliveryCount {
        self.unit.delivery_count()
    }

    /// The unit's ordering stamp, if it carries one (rule 4); at most `i64::MAX`, what a store's
    /// `BIGINT` holds (a unit with a larger one is malformed and never enters a batch).
    pub fn stamp(&self) -> Option<Stamp> {
        self.unit.stamp()
    }

    /// The unit's headers.
    pub fn headers(&self) -> &Headers {
        self.unit.headers()
    }

    /// The whole unit, read-only.
    pub fn unit(&self) -> &Unit {
        &self.unit
    }

    /// The decoded value.
    pub fn value(&self) -> &T {
        &self.value
    }

    /// The decoded value, owned.
    pub fn into_value(self) -> T {
        self.value
    }
}

impl<T: Deref> Deref for Item<T> {
    type Target = T::Target;
    fn deref(&self) -> &T::Target {
        &self.value
    }
}

/// A batch handler's answer unit by unit: every unit applied, except those it names.
///
/// ```
/// use delivery::{consumer, Batch, BatchOutcome, HandlerError, Json};
///
/// #[derive(serde::Deserialize)]
/// struct Payment { amount_cents: i64 }
///
/// #[consumer]
/// async fn apply(payments: Batch<Json<Payment>>) -> BatchOutcome {
///     let mut outcome = BatchOutcome::applied();
///     for payment in &payments {
///         if payment.amount_cents < 0 {
///             // This unit alone goes to the dead letter; the others are acknowledged.
///             outcome.fail(payment.id(), HandlerError::reject("a negative payment"));
///         }
///     }
///     outcome
/// }
/// ```
#[derive(Debug, Default)]
pub struct BatchOutcome {
    /// `None`: applied, but for `failed`; `Some`: the whole run failed.
    whole: Option<Outcome>,
    failed: HashMap<UnitId, Outcome>,
}

impl BatchOutcome {
    /// Every unit applied.
    pub fn applied() -> Self {
        BatchOutcome::default()
    }

    /// The unit `id` (every unit of the batch with that id) failed with `error`: returned with
    /// its backoff for [`HandlerError::retry`] (or an ordinary error), after the wait for
    /// [`HandlerError::after`], to the dead letter for [`HandlerError::reject`]. Its neighbours
    /// are not run again.
    pub fn fail(&mut self, id: &UnitId, error: impl Into<HandlerError>) -> &mut Self {
        let outcome = crate::handler::outcome_of(error.into());
        self.failed.insert(id.clone(), outcome);
        self
    }

    /// The whole run failed with `error`: what a handler returning `Err` means.
    pub fn failed(error: impl Into<HandlerError>) -> Self {
        BatchOutcome {
            whole: Some(crate::handler::outcome_of(error.into())),
            failed: HashMap::new(),
        }
    }

    /// The outcome of the whole run (the run's own [`Outcome`] for every unit).
    pub(crate) fn whole(outcome: Outcome) -> Self {
        BatchOutcome {
            whole: match outcome {
                Outcome::Applied => None,
                failure => Some(failure),
            },
            failed: HashMap::new(),
        }
    }

    /// The whole run's failure, if it failed as a whole.
    pub(crate) fn whole_failure(&self) -> Option<&Outcome> {
        self.whole.as_ref()
    }

    /// The outcome of the unit `id`, in a run that did not fail as a whole.
    pub(crate) fn of(&self, id: &UnitId) -> Outcome {
        self.failed.get(id).cloned().unwrap_or(Outcome::Applied)
    }
}

/// A batch handler's return value, turned into a [`BatchOutcome`]: `Result<(), E>` (one outcome
/// for the batch), [`BatchOutcome`] or `Result<BatchOutcome, E>`, with `E: Into<HandlerError>`.
pub trait IntoBatchOutcome {
    /// The outcome this value stands for.
    fn into_batch_outcome(self) -> BatchOutcome;
}

impl IntoBatchOutcome for BatchOutcome {
    fn into_batch_outcome(self) -> BatchOutcome {
        self
    }
}

impl<E: Into<HandlerError>> IntoBatchOutcome for Result<(), E> {
    fn into_batch_outcome(self) -> BatchOutcome {
        match self {
            Ok(()) => BatchOutcome::applied(),
            Err(error) => BatchOutcome::failed(error),
        }
    }
}

impl<E: Into<HandlerError>> IntoBatchOutcome for Result<BatchOutcome, E> {
    fn into_batch_outcome(self) -> BatchOutcome {
        self.unwrap_or_else(BatchOutcome::failed)
    }
}

/// A handler of batches of units over shared state `S`: what `#[consumer]` generates for a
/// function taking a [`Batch`]. Run it with [`Consumer::batch`](crate::Consumer::batch).
#[diagnostic::on_unimplemented(
    message = "`{Self}` is not a batch handler for state `{S}`",
    label = "not a batch handler",
    note = "annotate an `async fn` taking a `Batch<T>` with `#[delivery::consumer]`; a handler of one unit at a time runs with `Consumer::run` instead of `.batch(..).run(..)`"
)]
pub trait BatchHandler<S>: Send + Sync + 'static {
    /// What each unit is decoded into (the `T` of `Batch<T>`).
    type Item: Send + 'static;

    /// Decodes `unit` into its item; a unit that does not decode is malformed and never enters a
    /// batch.
    fn decode(&self, unit: &Unit, state: &S) -> Result<Self::Item, Malformed>;

    /// Runs the handler over `batch`.
    fn call(
        &self,
        batch: Batch<Self::Item>,
        state: &S,
    ) -> impl Future<Output = BatchOutcome> + Send + 'static;
}
