//! [`AnyDeadLetters`]: any transport's dead letter behind one type, for a tool that picks its
//! transport at run time.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use bytes::Bytes;

use super::api::{Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection};
use crate::transport_error::TransportError;
use crate::unit::UnitId;

/// A boxed future answering a dead letter's operation.
type Answer<'a, T> = Pin<Box<dyn Future<Output = Result<T, TransportError>> + Send + 'a>>;

/// [`DeadLetters`] with each future boxed: what [`AnyDeadLetters`] holds.
trait Erased: Send + Sync {
    fn name(&self) -> &str;
    fn count(&self) -> Answer<'_, u64>;
    fn list<'a>(&'a self, limit: usize, after: Option<&'a Cursor>) -> Answer<'a, Listing>;
    fn peek<'a>(&'a self, id: &'a UnitId) -> Answer<'a, Option<DeadLetter>>;
    fn redrive<'a>(&'a self, selection: Selection<'a>) -> Answer<'a, RedriveReport>;
    fn purge<'a>(&'a self, ids: &'a [UnitId]) -> Answer<'a, u64>;
    fn redrive_edited<'a>(&'a self, id: &'a UnitId, payload: Bytes) -> Answer<'a, bool>;
}

impl<D: DeadLetters> Erased for D {
    fn name(&self) -> &str {
        DeadLetters::name(self)
    }

    fn count(&self) -> Answer<'_, u64> {
        Box::pin(DeadLetters::count(self))
    }

    fn list<'a>(&'a self, limit: usize, after: Option<&'a Cursor>) -> Answer<'a, Listing> {
        Box::pin(DeadLetters::list(self, limit, after))
    }

    fn peek<'a>(&'a self, id: &'a UnitId) -> Answer<'a, Option<DeadLetter>> {
        Box::pin(DeadLetters::peek(self, id))
    }

    fn redrive<'a>(&'a self, selection: Selection<'a>) -> Answer<'a, RedriveReport> {
        Box::pin(DeadLetters::redrive(self, selection))
    }

    fn purge<'a>(&'a self, ids: &'a [UnitId]) -> Answer<'a, u64> {
        Box::pin(DeadLetters::purge(self, ids))
    }

    fn redrive_edited<'a>(&'a self, id: &'a UnitId, payload: Bytes) -> Answer<'a, bool> {
        Box::pin(DeadLetters::redrive_edited(self, id, payload))
    }
}

/// Any transport's dead letter behind one type: for a tool that picks its transport at run time
/// (a command line, a web console), where `impl DeadLetters` cannot be named.
///
/// It implements [`DeadLetters`] itself, each operation's future boxed. Cloning it is cheap (an
/// [`Arc`]): every clone operates the same dead letter. Made with [`AnyDeadLetters::new`] from
/// any [`DeadLetters`], or with `into()` from this crate's own (`MemoryDeadLetters`,
/// `RabbitDeadLetters`, `RedisDeadLetters`, `NatsDeadLetters`, `KafkaDeadLetters`, and the outbox
/// stores `PgStore` and `SqliteStore`).
///
/// ```
/// use delivery::dead_letter::{AnyDeadLetters, DeadLetters};
/// use delivery::memory::{MemoryBroker, QueueConfig};
/// use delivery::{Unit, UnitId};
///
/// # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), delivery::transport::TransportError> {
/// let broker = MemoryBroker::new();
/// broker.declare("orders", QueueConfig::default()).unwrap();
/// # #[delivery::consumer]
/// # async fn take(_n: delivery::Json<u32>) -> Result<(), delivery::HandlerError> { Ok(()) }
/// # broker.publish("orders", Unit::new("o-1", "not json"));
/// # delivery::Consumer::new(broker.consume("orders")).shutdown_on(broker.idle("orders")).run(take).await;
/// // ... a consumer dead-lettered `o-1` as malformed ...
/// // Chosen at run time, e.g. from a command line's `--transport`:
/// let dead: AnyDeadLetters = broker.dead_letters("orders").into();
/// let tool = dead.clone(); // the same dead letter
/// assert_eq!(tool.count().await?, 1);
///
/// // The operator fixes the payload and sends it back under the same id.
/// let fixed = bytes::Bytes::from_static(b"42");
/// assert!(tool.redrive_edited(&UnitId::new("o-1"), fixed).await?);
/// assert_eq!(dead.count().await?, 0);
/// assert!(!tool.redrive_edited(&UnitId::new("o-2"), "1".into()).await?);
/// assert_eq!(broker.depth("orders"), 1);
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct AnyDeadLetters(Arc<dyn Erased>);

impl AnyDeadLetters {
    /// `dead_letters` behind the one type.
    pub fn new<D: DeadLetters + 'static>(dead_letters: D) -> Self {
        AnyDeadLetters(Arc::new(dead_letters))
    }
}

impl fmt::Debug for AnyDeadLetters {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_tuple("AnyDeadLetters")
            .field(&self.0.name())
            .finish()
    }
}

impl DeadLetters for AnyDeadLetters {
    fn name(&self) -> &str {
        self.0.name()
    }

    fn count(&self) -> impl Future<Output = Result<u64, TransportError>> + Send {
        self.0.count()
    }

    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        self.0.list(limit, after).await
    }

    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        self.0.peek(id).await
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        self.0.redrive(selection).await
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        self.0.purge(ids).await
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        self.0.redrive_edited(id, payload).await
    }
}
