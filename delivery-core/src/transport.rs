//! What a transport provides the consumer runtime: a [`Source`] of units, and for each unit a
//! [`Settle`] handle that carries out the runtime's [`Disposition`].
//!
//! Transports decide nothing: whether a unit is acknowledged, returned or dead-lettered is
//! [`decide`](crate::decide)'s answer, applied in one place (`consumer::settle`).

use std::error::Error as StdError;
use std::fmt;
use std::future::Future;
use std::num::NonZeroU32;

use crate::disposition::Disposition;
use crate::unit::Unit;

/// A stream of delivered units: a queue consumer, a stream read by a consumer group, the in-memory
/// broker.
pub trait Source: Send + 'static {
    /// The handle that settles one delivered unit.
    type Handle: Settle;

    /// The next delivered unit, waiting for one; `Ok(None)` once the source has ended.
    ///
    /// Must be cancel safe: the runtime polls it in a `select!` beside handlers in flight, and a
    /// cancelled call must lose no unit (keep received units in the source until returned).
    fn receive(
        &mut self,
    ) -> impl Future<Output = Result<Option<(Unit, Self::Handle)>, TransportError>> + Send;

    /// The delivery bound the mechanism itself enforces, declared with the deployment (a quorum
    /// queue's `x-delivery-limit + 1`, a JetStream consumer's `max_deliver`), if it keeps one.
    /// The runtime never allows more deliveries than this.
    fn max_deliveries(&self) -> Option<NonZeroU32> {
        None
    }

    /// A name for logs and metrics: the queue, stream or topic.
    fn name(&self) -> &str;
}

/// The handle of one delivered unit: the only thing that can acknowledge it. The runtime holds it
/// while the handler runs and consumes it with [`Settle::settle`]; handlers never see it.
///
/// Dropping a handle without settling it must leave the unit to be redelivered, as a broker does
/// with the units of a consumer that went away.
pub trait Settle: Send + 'static {
    /// Carries out `disposition` for `unit`:
    /// - [`Disposition::Ack`] — acknowledge;
    /// - [`Disposition::Return`] — hand the unit back so the mechanism delivers it again, no sooner
    ///   than `after`, counting the delivery;
    /// - [`Disposition::DeadLetter`] — move the unit intact — payload, id and headers — to the dead
    ///   letter with the reason, source and delivery count recorded, and only once that is
    ///   confirmed, acknowledge it. If the move fails, return the unit instead; never drop it.
    fn settle(
        self,
        unit: &Unit,
        disposition: &Disposition,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;
}

/// A failure of the transport itself (a lost connection, an unconfirmed publish).
pub struct TransportError {
    context: &'static str,
    source: Option<Box<dyn StdError + Send + Sync + 'static>>,
    message: String,
}

impl TransportError {
    /// A failure while doing `context`, caused by `source`.
    pub fn new(context: &'static str, source: impl StdError + Send + Sync + 'static) -> Self {
        TransportError {
            context,
            message: source.to_string(),
            source: Some(Box::new(source)),
        }
    }

    /// A failure while doing `context`, described by `message`.
    pub fn msg(context: &'static str, message: impl Into<String>) -> Self {
        TransportError {
            context,
            message: message.into(),
            source: None,
        }
    }

    /// What was being done.
    pub fn context(&self) -> &'static str {
        self.context
    }
}

impl fmt::Debug for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TransportError")
            .field("context", &self.context)
            .field("message", &self.message)
            .finish()
    }
}

impl fmt::Display for TransportError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.context, self.message)
    }
}

impl StdError for TransportError {
    fn source(&self) -> Option<&(dyn StdError + 'static)> {
        self.source
            .as_deref()
            .map(|e| e as &(dyn StdError + 'static))
    }
}
