//! The consumer runtime: receive -> decode -> handler -> disposition -> ack / return / dead letter,
//! the same for every transport.
//!
//! ```
//! use delivery::{consumer, Consumer, HandlerError, Json, State};
//! use delivery::memory::MemoryBroker;
//! use std::sync::{Arc, Mutex};
//!
//! #[derive(serde::Deserialize)]
//! struct OrderPlaced { order_id: String, amount_cents: u64 }
//!
//! #[derive(Clone, Default)]
//! struct App { totals: Arc<Mutex<std::collections::HashMap<String, u64>>> }
//!
//! #[consumer]
//! async fn record_order(State(app): State<App>, Json(order): Json<OrderPlaced>) -> Result<(), HandlerError> {
//!     // Keyed by the order's own id: a redelivery overwrites with the same value (rule 3).
//!     app.totals.lock().unwrap().insert(order.order_id, order.amount_cents);
//!     Ok(())
//! }
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() {
//! let broker = MemoryBroker::new();
//! broker.publish("orders", delivery::Unit::new("m-1", r#"{"order_id":"o-1","amount_cents":1250}"#));
//! let app = App::default();
//! let report = Consumer::new(broker.consume("orders"))
//!     .state(app.clone())
//!     .shutdown_on(broker.idle("orders"))
//!     .run(record_order)
//!     .await;
//! assert_eq!(report.acked, 1);
//! assert_eq!(app.totals.lock().unwrap()["o-1"], 1250);
//! # }
//! ```

mod batch;
mod builder;
mod handover;
mod holds;
mod keeping;
mod observer;
mod order;
mod pacing;
mod report;
mod run;
pub(crate) mod settle;

pub use batch::Batches;
pub use builder::Consumer;
pub use order::{HOLD_GRACE, WhenReturned};
pub use report::Report;

use crate::handler::Handler;
use crate::source::Source;

impl<Src: Source, S> Consumer<Src, S> {
    /// Runs `handler` until the shutdown signal or the end of the source, and reports what it did.
    ///
    /// A failed receive (the broker unreachable, a connection being reopened) is logged and
    /// tried again after a wait growing with each failure in a row (from 100 ms, doubling, to 6.4 s,
    /// jittered per process so replicas do not reconnect in lock-step); the shutdown
    /// signal is watched meanwhile.
    ///
    /// On a multi-threaded runtime the loop runs as a task of its own on a worker thread, beside
    /// the client tasks that wake it, rather than on the thread that awaits `run` (the one
    /// `#[tokio::main]` blocks on, say). It keeps the caller's span and `tracing` subscriber;
    /// dropping the future stops it and gives back what it holds, as on a current-thread
    /// runtime, where the loop runs in place. (A `metrics` recorder set only as the calling
    /// thread's local default is not carried over: install it globally.)
    pub async fn run<H>(self, handler: H) -> Report
    where
        H: Handler<S>,
        S: Send + Sync + 'static,
    {
        // Two runs, so that a consumer without a timeout polls its handler's own future.
        match self.handler_timeout {
            None => crate::runtime::on_a_worker(run::run(self, handler)).await,
            Some(limit) => {
                let timed = crate::handler::Timed { handler, limit };
                crate::runtime::on_a_worker(run::run(self, timed)).await
            }
        }
    }
}
