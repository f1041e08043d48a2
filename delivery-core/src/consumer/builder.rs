//! A consumer's settings: [`Consumer`] and its builder methods (its run is in `run`).

use std::future::Future;
use std::num::NonZeroU32;
use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;

use super::order::{self, WhenReturned};
use crate::disposition::{Backoff, RedeliveryPolicy};
use crate::health::{Component, Health};
use crate::runtime::Stop;
use crate::source::Source;
use crate::unit::Unit;

/// Runs a handler over a [`Source`]. Settings have defaults; see each method.
#[must_use = "a consumer does nothing until `.run(handler)` is awaited"]
pub struct Consumer<Src, S = ()> {
    pub(super) source: Src,
    pub(super) state: S,
    pub(super) concurrency: usize,
    pub(super) max_deliveries: Option<NonZeroU32>,
    pub(super) backoff: Backoff,
    pub(super) stop: Stop,
    pub(super) health: Health,
    pub(super) order: Option<order::Order>,
    pub(super) handler_timeout: Option<Duration>,
}

impl<Src: Source> Consumer<Src, ()> {
    /// A consumer of `source`, with no shared state.
    pub fn new(source: Src) -> Self {
        Consumer {
            health: Health::new(Component::Consumer, source.name()),
            source,
            state: (),
            concurrency: 16,
            max_deliveries: None,
            backoff: Backoff::default(),
            stop: Stop::new(Duration::from_secs(30)),
            order: None,
            handler_timeout: None,
        }
    }
}

impl<Src: Source, S> Consumer<Src, S> {
    /// The shared application state handlers take as `State<S>`.
    pub fn state<S2>(self, state: S2) -> Consumer<Src, S2> {
        self.map_state(|_| state)
    }

    /// The same consumer over the state `wrap` makes of this one's.
    pub(super) fn map_state<S2>(self, wrap: impl FnOnce(S) -> S2) -> Consumer<Src, S2> {
        Consumer {
            source: self.source,
            state: wrap(self.state),
            concurrency: self.concurrency,
            max_deliveries: self.max_deliveries,
            backoff: self.backoff,
            stop: self.stop,
            health: self.health,
            order: self.order,
            handler_timeout: self.handler_timeout,
        }
    }

    /// How many units are handled at once (default 16; at least 1). With
    /// [`batch`](Self::batch), how many batches run at once.
    pub fn concurrency(mut self, n: usize) -> Self {
        self.concurrency = n.max(1);
        self
    }

    /// Units with the same key run one at a time, in the order they arrived, while units of
    /// other keys run concurrently (up to [`concurrency`](Self::concurrency)). The key is the
    /// unit's [`KEY`](crate::headers::KEY) header (`x-delivery-key`: on Kafka, the record's key);
    /// a unit without one runs unordered. See [`order_by`](Self::order_by) for a key of your own.
    ///
    /// A unit waiting behind its key's running unit holds its delivery, unsettled, and counts
    /// against the concurrency (memory stays bounded; on Kafka the commit never passes it). A
    /// unit that fails and is returned lets its key's later units pass: it comes back after its
    /// backoff, behind them — where that matters, guard the effect with the unit's stamp (rule 4,
    /// `delivery::store`). At shutdown, waiting units are released unstarted.
    ///
    /// ```
    /// use delivery::{consumer, Consumer, HandlerError, Headers, Json, Unit};
    /// use delivery::memory::MemoryBroker;
    ///
    /// #[consumer]
    /// async fn apply(Json(step): Json<u32>) -> Result<(), HandlerError> { let _ = step; Ok(()) }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let broker = MemoryBroker::new();
    /// for (id, account, step) in [("u-1", "acct-7", 1), ("u-2", "acct-9", 1), ("u-3", "acct-7", 2)] {
    ///     let key = Headers::from_pairs([(delivery::headers::KEY, account)]);
    ///     broker.publish("ledger", Unit::new(id, step.to_string()).with_headers(key));
    /// }
    /// // u-3 runs only once u-1 settled; u-2 runs beside u-1.
    /// let report = Consumer::new(broker.consume("ledger"))
    ///     .concurrency(32)
    ///     .order_by_key()
    ///     .shutdown_on(broker.idle("ledger"))
    ///     .run(apply)
    ///     .await;
    /// assert_eq!(report.acked, 3);
    /// # }
    /// ```
    pub fn order_by_key(self) -> Self {
        self.order_by(|unit: &Unit| unit.headers().get(crate::headers::KEY).cloned())
    }

    /// As [`order_by_key`](Self::order_by_key), with the key `key_of` finds in a unit (`None`:
    /// the unit runs unordered). It must be cheap and decide from the unit alone.
    ///
    /// ```
    /// # use delivery::{Consumer, Unit};
    /// # let broker = delivery::memory::MemoryBroker::new();
    /// // The account a unit is about, from its id `account/sequence`.
    /// let consumer = Consumer::new(broker.consume("ledger")).order_by(|unit: &Unit| {
    ///     unit.id().as_str().split_once('/').map(|(account, _)| account.to_owned())
    /// });
    /// # let _ = consumer;
    /// ```
    pub fn order_by<K: Into<Bytes>>(
        mut self,
        key_of: impl Fn(&Unit) -> Option<K> + Send + Sync + 'static,
    ) -> Self {
        let when_returned = self
            .order
            .as_ref()
            .map_or(WhenReturned::default(), |order| order.when_returned);
        self.order = Some(order::Order {
            key_of: Arc::new(move |unit: &Unit| key_of(unit).map(Into::into)),
            when_returned,
        });
        self
    }

    /// What a unit that fails and is returned does to its key's later units when the consumer
    /// orders by key ([`order_by_key`](Self::order_by_key), [`order_by`](Self::order_by); call it
    /// after either): [`WhenReturned::Pass`] by default, or [`WhenReturned::Hold`] to keep them
    /// waiting until it comes back and is applied or dead-lettered.
    ///
    /// ```
    /// use delivery::{consumer, Consumer, DeliveryCount, HandlerError, Headers, Json, State, Unit};
    /// use delivery::consumer::WhenReturned;
    /// use delivery::disposition::Backoff;
    /// use delivery::memory::MemoryBroker;
    /// use std::sync::{Arc, Mutex};
    /// use std::time::Duration;
    ///
    /// #[derive(Clone, Default)]
    /// struct Ledger(Arc<Mutex<Vec<u32>>>);
    ///
    /// #[consumer]
    /// async fn apply(Json(step): Json<u32>, count: DeliveryCount, State(ledger): State<Ledger>)
    ///     -> Result<(), HandlerError> {
    ///     if step == 1 && count.get() == 1 {
    ///         return Err(HandlerError::retry(std::io::Error::other("ledger busy")));
    ///     }
    ///     ledger.0.lock().unwrap().push(step);
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let broker = MemoryBroker::new();
    /// for step in 1..=3u32 {
    ///     let key = Headers::from_pairs([(delivery::headers::KEY, "acct-7")]);
    ///     broker.publish("ledger", Unit::new(format!("u-{step}"), step.to_string()).with_headers(key));
    /// }
    /// let ledger = Ledger::default();
    /// Consumer::new(broker.consume("ledger"))
    ///     .state(ledger.clone())
    ///     .concurrency(8)
    ///     .order_by_key()
    ///     .when_returned(WhenReturned::Hold)
    ///     .backoff(Backoff::exponential(Duration::from_millis(20), Duration::from_millis(20)))
    ///     .shutdown_on(broker.idle("ledger"))
    ///     .run(apply)
    ///     .await;
    /// // Step 1 failed once; steps 2 and 3 waited for it.
    /// assert_eq!(*ledger.0.lock().unwrap(), [1, 2, 3]);
    /// # }
    /// ```
    pub fn when_returned(mut self, when_returned: WhenReturned) -> Self {
        if let Some(order) = &mut self.order {
            order.when_returned = when_returned;
        }
        self
    }

    /// The most deliveries a unit gets, for mechanisms that declare no bound of their own. Where
    /// the mechanism declares one ([`Source::max_deliveries`]) the smaller applies. Default 5.
    pub fn max_deliveries(mut self, n: u32) -> Self {
        self.max_deliveries = Some(NonZeroU32::new(n).unwrap_or(NonZeroU32::MIN));
        self
    }

    /// The wait before a returned unit is delivered again (default: from 100 ms, four-fold per delivery, to 30 s: see [`Backoff`]).
    pub fn backoff(mut self, backoff: Backoff) -> Self {
        self.backoff = backoff;
        self
    }

    /// The longest a handler may run on one unit (default: no limit). A run still going when it
    /// ends is stopped (its future dropped, at the await it is waiting on) and the unit is a
    /// failure: returned after its backoff and counted against its bound like any other failure,
    /// so a handler that hangs — a call without a timeout of its own, a lock never released —
    /// cannot hold its unit, its key's lane or, on Kafka and RabbitMQ's coalesced acks, the
    /// commit of every unit after it, forever. What the run did before it was stopped stays done:
    /// the handler is idempotent (rule 3). A handler that blocks its thread without awaiting
    /// cannot be stopped this way. Without this setting the handler runs unwrapped, at no cost.
    ///
    /// ```
    /// use delivery::{consumer, Consumer, DeliveryCount, HandlerError, Json};
    /// use delivery::disposition::Backoff;
    /// use delivery::memory::MemoryBroker;
    /// use std::time::Duration;
    ///
    /// #[consumer]
    /// async fn charge(Json(amount): Json<u64>, count: DeliveryCount) -> Result<(), HandlerError> {
    ///     if count.get() == 1 {
    ///         std::future::pending::<()>().await; // a downstream that never answers, once
    ///     }
    ///     let _ = amount;
    ///     Ok(())
    /// }
    ///
    /// # #[tokio::main(flavor = "current_thread", start_paused = true)] async fn main() {
    /// let broker = MemoryBroker::new();
    /// broker.publish("charges", delivery::Unit::new("c-1", "1250"));
    /// let report = Consumer::new(broker.consume("charges"))
    ///     .handler_timeout(Duration::from_secs(10))
    ///     .backoff(Backoff::exponential(Duration::from_millis(100), Duration::from_secs(1)))
    ///     .shutdown_on(broker.idle("charges"))
    ///     .run(charge)
    ///     .await;
    /// // Stopped after 10 s and returned; applied on its second delivery.
    /// assert_eq!((report.returned, report.acked), (1, 1));
    /// # }
    /// ```
    pub fn handler_timeout(mut self, limit: Duration) -> Self {
        self.handler_timeout = Some(limit);
        self
    }

    /// Stops the consumer when `signal` completes: no new unit is received, units in flight finish
    /// within the [drain deadline](Self::drain_deadline), and the rest are returned.
    pub fn shutdown_on(mut self, signal: impl Future<Output = ()> + Send + 'static) -> Self {
        self.stop.on(signal);
        self
    }

    /// How long units in flight may run after shutdown before they are released (default 30 s).
    /// It bounds the whole shutdown, settles included: past it and a 5 s grace for the settles
    /// it started, whatever still waits on the broker is dropped unsettled, and the broker
    /// delivers those units again — a broker that stopped answering cannot hold a process up.
    pub fn drain_deadline(mut self, deadline: Duration) -> Self {
        self.stop.drain_within(deadline);
        self
    }

    /// This consumer's [`Health`]: take it before `.run(..)` and serve it (see
    /// [`health::route`](crate::health)). The run updates it: connected or not, the last unit's
    /// age, units in flight, units dead-lettered.
    ///
    /// ```
    /// # use delivery::{consumer, Consumer, HandlerError, Json};
    /// # #[consumer] async fn take(Json(n): Json<u32>) -> Result<(), HandlerError> { let _ = n; Ok(()) }
    /// # #[tokio::main(flavor = "current_thread")] async fn main() {
    /// let broker = delivery::memory::MemoryBroker::new();
    /// broker.publish("numbers", delivery::Unit::new("n-1", "7"));
    /// let consumer = Consumer::new(broker.consume("numbers")).shutdown_on(broker.idle("numbers"));
    /// let health = consumer.health();
    /// tokio::spawn(consumer.run(take)).await.unwrap();
    /// assert_eq!(health.snapshot().in_flight, 0);
    /// # }
    /// ```
    pub fn health(&self) -> Health {
        self.health.clone()
    }

    /// The policy this consumer applies: its bound is the smaller of the setting and the
    /// mechanism's own.
    pub fn policy(&self) -> RedeliveryPolicy {
        let declared = [self.max_deliveries, self.source.max_deliveries()];
        let max_deliveries = declared
            .into_iter()
            .flatten()
            .min()
            .unwrap_or(RedeliveryPolicy::DEFAULT_MAX_DELIVERIES);
        RedeliveryPolicy {
            max_deliveries,
            backoff: self.backoff.clone(),
        }
    }
}
