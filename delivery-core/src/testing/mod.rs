//! Helpers for testing your own handlers without a broker.
//!
//! With the `testing` feature, `MemorySink` is here too: the receiver of a relay under test,
//! which returns a `Receipt` without sending anything; and `conformance`, the suite every
//! transport passes. They exist only under that feature (enable
//! it in `[dev-dependencies]`, `delivery = { version = "..", features = ["testing"] }`), never in
//! `outbox::sink`, so a production build cannot wire a relay to a receipt that proves nothing
//! (rule 6).
//!
//! The one every consumer should have — a second delivery changes nothing (rule 3):
//!
//! ```
//! use delivery::{consumer, HandlerError, Json, State, Unit};
//! use std::collections::HashMap;
//! use std::sync::{Arc, Mutex};
//!
//! #[derive(Clone, Default)]
//! struct App { balances: Arc<Mutex<HashMap<String, i64>>> }
//!
//! #[derive(serde::Deserialize)]
//! struct Deposit { account: String, balance_after: i64 }
//!
//! #[consumer]
//! async fn apply_deposit(State(app): State<App>, Json(d): Json<Deposit>) -> Result<(), HandlerError> {
//!     app.balances.lock().unwrap().insert(d.account, d.balance_after);
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let app = App::default();
//! let unit = Unit::new("dep-7", r#"{"account":"acc-1","balance_after":120}"#);
//! delivery::testing::assert_redelivery_changes_nothing(apply_deposit, &app, unit, || {
//!     let balances = app.balances.lock().unwrap().clone();
//!     async move { balances }
//! })
//! .await;
//! # }
//! ```

use std::fmt::Debug;
use std::future::Future;
use std::panic::AssertUnwindSafe;

use futures_util::FutureExt;

use crate::disposition::{Disposition, Outcome, RedeliveryPolicy, decide};
use crate::handler::Handler;
use crate::source::Settle;
use crate::transport_error::TransportError;
use crate::unit::Unit;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub mod conformance;
#[cfg(feature = "testing")]
mod memory_sink;
mod sign;
#[cfg(feature = "testing")]
#[cfg_attr(docsrs, doc(cfg(feature = "testing")))]
pub use memory_sink::{MemorySink, Sent, SinkFailure};
pub use sign::{Signer, sign};

/// Carries out `disposition` for `unit` through its transport's `handle`, exactly as the
/// consumer runtime does (a dead letter: an intact copy confirmed first, then the original
/// acknowledged; the original given back if the copy failed). For tests that drive a
/// [`Source`](crate::Source) by hand.
pub async fn settle<H: Settle>(
    handle: H,
    unit: &Unit,
    disposition: &Disposition,
) -> Result<(), TransportError> {
    crate::consumer::settle::carry_out(handle, unit, disposition).await
}

/// Runs one delivery of `unit` through `handler` as the runtime would — decode, handler (a panic
/// is a failure), decision under the default policy — and returns the disposition the runtime
/// would carry out.
pub async fn deliver<H, S>(handler: &H, state: &S, unit: &Unit) -> Disposition
where
    H: Handler<S>,
{
    let outcome = AssertUnwindSafe(handler.call(unit, state))
        .catch_unwind()
        .await
        .unwrap_or_else(|_| Outcome::Panicked("handler panicked".into()));
    decide(
        &outcome,
        unit.delivery_count(),
        &RedeliveryPolicy::default(),
        unit.id().as_str(),
    )
}

/// Delivers `unit` twice — the second time as a redelivery — and asserts that both were
/// acknowledged and that `observe` (a snapshot of the effect: rows, a map, a counter) saw the same
/// after each. Panics with what differed otherwise.
pub async fn assert_redelivery_changes_nothing<H, S, F, Fut, O>(
    handler: H,
    state: &S,
    unit: Unit,
    mut observe: F,
) where
    H: Handler<S>,
    F: FnMut() -> Fut,
    Fut: Future<Output = O>,
    O: PartialEq + Debug,
{
    let first = deliver(&handler, state, &unit).await;
    assert_eq!(
        first,
        Disposition::Ack,
        "the first delivery of unit {} was not applied",
        unit.id()
    );
    let after_first = observe().await;
    let again = unit
        .clone()
        .with_delivery_count(unit.delivery_count().next());
    let second = deliver(&handler, state, &again).await;
    assert_eq!(
        second,
        Disposition::Ack,
        "the second delivery of unit {} was not acknowledged; an already applied unit must succeed, \
         never fail as a conflict (rule 3)",
        unit.id()
    );
    let after_second = observe().await;
    assert_eq!(
        after_first,
        after_second,
        "the second delivery of unit {} changed the effect (rule 3): left is after the first delivery, right after the second",
        unit.id()
    );
}
