//! A consumer of one quorum queue, and the handle that settles each delivery.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::Acker;
use lapin::message::Delivery;
use lapin::options::{BasicAckOptions, BasicConsumeOptions, BasicQosOptions, BasicRejectOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;

use super::codec::{self, text_value};
use super::publisher::ConfirmedPublisher;
use super::topology::{QueueType, RabbitTopology};
use crate::disposition::DeadLetterReason;
use crate::transport::{Settle, Source, TransportError};
use crate::unit::Unit;

/// A consumer of one RabbitMQ quorum queue (see the [module docs](super)).
///
/// It holds one connection and channel with manual acknowledgement and the topology's prefetch.
/// If the connection or channel is lost, [`receive`](Source::receive) reports it once and then
/// reopens them, after the wait the consumer runtime keeps between failed receives (jittered, growing to 6.4 s); the broker
/// redelivers whatever was unacknowledged. Dropping the source closes its connection, which
/// cancels the consumer and hands its unacknowledged units back to the broker.
pub struct RabbitSource {
    url: Arc<str>,
    topology: RabbitTopology,
    live: Option<Live>,
    /// The connection was lost and is being reopened (for the log line once it is back).
    reconnecting: bool,
    shared: Arc<Shared>,
    consumer_tag: String,
}

struct Live {
    // Field order is drop order: the consumer, then its channel, then the connection.
    consumer: lapin::Consumer,
    channel: Channel,
    connection: Connection,
}

struct Shared {
    queue: String,
    dead_letter_queue: String,
    publisher: ConfirmedPublisher,
    /// A classic queue: the count travels with the unit, and a return is a confirmed copy.
    classic: bool,
    /// Returns waiting out their backoff: each must reject (quorum) or copy and ack (classic)
    /// its delivery on the channel it came from, so the source keeps that channel open for them
    /// when it is dropped, cancels its consumer, and tells them to stop waiting.
    returns: TaskTracker,
    closing: CancellationToken,
    /// Deliveries whose handle was dropped unsettled: returned by the source's next `receive`,
    /// so a source being dropped with them (a crash) leaves them to the connection's close and
    /// the broker counts the return once.
    dropped: std::sync::Mutex<Vec<Acker>>,
    /// Whether `dropped` may hold any, so `receive` takes the lock only then.
    any_dropped: std::sync::atomic::AtomicBool,
}

impl RabbitSource {
    /// A source of `topology.queue` at `url`, connected and consuming before it returns, so a
    /// wrong URL or a missing queue fails at start. Declare the topology first
    /// ([`super::declare`]).
    pub async fn connect(
        url: impl Into<Arc<str>>,
        topology: RabbitTopology,
    ) -> Result<Self, TransportError> {
        let mut source = RabbitSource::lazy(url, topology);
        source.live = Some(source.open().await?);
        Ok(source)
    }

    /// A source that connects on its first [`receive`](Source::receive).
    pub fn lazy(url: impl Into<Arc<str>>, topology: RabbitTopology) -> Self {
        let url = url.into();
        RabbitSource {
            shared: Arc::new(Shared {
                queue: topology.queue.clone(),
                dead_letter_queue: topology.dead_letter_queue_name(),
                publisher: ConfirmedPublisher::new(url.clone()),
                classic: topology.queue_type == QueueType::Classic,
                returns: TaskTracker::new(),
                closing: CancellationToken::new(),
                dropped: std::sync::Mutex::new(Vec::new()),
                any_dropped: std::sync::atomic::AtomicBool::new(false),
            }),
            consumer_tag: format!("delivery-{}-{}", std::process::id(), next_tag()),
            url,
            topology,
            live: None,
            reconnecting: false,
        }
    }

    /// The topology this source consumes.
    pub fn topology(&self) -> &RabbitTopology {
        &self.topology
    }

    async fn open(&self) -> Result<Live, TransportError> {
        let connection = super::connect(&self.url).await?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| TransportError::new("opening a channel", e))?;
        channel
            .basic_qos(self.topology.prefetch.max(1), BasicQosOptions::default())
            .await
            .map_err(|e| TransportError::new("setting the prefetch (basic.qos)", e))?;
        let consumer = channel
            .basic_consume(
                self.topology.queue.as_str().into(),
                self.consumer_tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| TransportError::new("starting the consumer (basic.consume)", e))?;
        Ok(Live {
            consumer,
            channel,
            connection,
        })
    }

    fn lost(&mut self, error: TransportError) -> TransportError {
        if let Some(live) = self.live.take() {
            drop(live);
        }
        self.reconnecting = true;
        error
    }

    fn unit_of(&self, delivery: Delivery) -> (Unit, RabbitHandle) {
        let Delivery {
            data,
            properties,
            acker,
            redelivered,
            ..
        } = delivery;
        let headers = properties.headers().as_ref();
        let id = codec::unit_id(&properties, &data);
        let mut count = codec::delivery_count(headers);
        if self.shared.classic && redelivered {
            // The broker delivered this copy before (its consumer went away): one more delivery
            // than the copy carries.
            count = count.next();
        }
        let unit = Unit::new(id, data)
            .with_delivery_count(count)
            .with_headers(codec::unit_headers(headers));
        let handle = RabbitHandle {
            acker: Some(acker),
            properties,
            shared: self.shared.clone(),
        };
        (unit, handle)
    }
}

impl Drop for RabbitSource {
    /// Returns still waiting out their backoff are completed at once, after the consumer is
    /// cancelled and before the connection closes: a quorum queue's reject then counts one
    /// delivery (not a redelivery to this consumer plus its close), and a classic queue's
    /// original is acked rather than handed back beside its copy.
    fn drop(&mut self) {
        if self.shared.returns.is_empty() {
            return;
        }
        let live = self.live.take();
        let shared = self.shared.clone();
        let tag = std::mem::take(&mut self.consumer_tag);
        shared.returns.close();
        if let Ok(runtime) = tokio::runtime::Handle::try_current() {
            runtime.spawn(async move {
                // Unsubscribe first, so the copies go to the next consumer, not to this one.
                if let Some(live) = &live {
                    let _ = live
                        .channel
                        .basic_cancel(tag.as_str().into(), Default::default())
                        .await;
                }
                shared.closing.cancel();
                let _ = tokio::time::timeout(Duration::from_secs(30), shared.returns.wait()).await;
                drop(live);
            });
        } else {
            self.shared.closing.cancel();
        }
    }
}

fn next_tag() -> u64 {
    use std::sync::atomic::{AtomicU64, Ordering};
    static NEXT: AtomicU64 = AtomicU64::new(0);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

impl Source for RabbitSource {
    type Handle = RabbitHandle;

    /// Cancel safe: a delivery is taken from lapin's consumer stream only when it is returned;
    /// a cancelled reconnection is simply started again (and its half-open connection closed).
    async fn receive(&mut self) -> Result<Option<(Unit, RabbitHandle)>, TransportError> {
        let dropped = if self.shared.any_dropped.swap(false, Ordering::AcqRel) {
            std::mem::take(
                &mut *self
                    .shared
                    .dropped
                    .lock()
                    .unwrap_or_else(|p| p.into_inner()),
            )
        } else {
            Vec::new()
        };
        for acker in dropped {
            tokio::spawn(async move {
                let _ = acker.reject(BasicRejectOptions { requeue: true }).await;
            });
        }
        if self.live.is_none() {
            match self.open().await {
                Ok(live) => {
                    if std::mem::take(&mut self.reconnecting) {
                        tracing::info!(queue = %self.topology.queue, "reconnected; consuming again");
                    }
                    self.live = Some(live);
                }
                Err(error) => return Err(self.lost(error)),
            }
        }
        let live = self.live.as_mut().expect("opened above");
        match live.consumer.next().await {
            Some(Ok(delivery)) => Ok(Some(self.unit_of(delivery))),
            Some(Err(error)) => Err(self.lost(TransportError::new("consuming", error))),
            None => {
                let connected = live.connection.status().connected();
                Err(self.lost(TransportError::msg(
                    "consuming",
                    if connected {
                        "the broker cancelled the consumer (queue deleted?); resubscribing"
                    } else {
                        "the connection was lost; reconnecting"
                    },
                )))
            }
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.topology.max_deliveries())
    }

    fn name(&self) -> &str {
        &self.topology.queue
    }
}

/// The handle of one delivery from a [`RabbitSource`]. Only the runtime holds it.
///
/// Dropped unsettled, its delivery is rejected with `requeue = true` by the source's next
/// `receive`; if the source is gone too, its connection's close hands the delivery back.
pub struct RabbitHandle {
    acker: Option<Acker>,
    properties: BasicProperties,
    shared: Arc<Shared>,
}

impl std::fmt::Debug for RabbitHandle {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RabbitHandle")
            .field("queue", &self.shared.queue)
            .finish_non_exhaustive()
    }
}

impl crate::marker::AckHandle for RabbitHandle {}

/// `Ok(true)` is the only answer that says the frame was sent.
fn sent(what: &'static str, result: lapin::Result<bool>) -> Result<(), TransportError> {
    match result {
        Ok(true) => Ok(()),
        Ok(false) => Err(TransportError::msg(
            what,
            "not sent: the channel is closed or the delivery was already settled; the broker will deliver the unit again",
        )),
        Err(error) => Err(TransportError::new(what, error)),
    }
}

async fn requeue(acker: &Acker) -> Result<(), TransportError> {
    sent(
        "returning the unit (basic.reject requeue)",
        acker.reject(BasicRejectOptions { requeue: true }).await,
    )
}

impl RabbitHandle {
    fn acker(&mut self) -> Acker {
        self.acker.take().expect("a handle is settled once")
    }
}

impl Settle for RabbitHandle {
    async fn ack(mut self, _unit: &Unit) -> Result<(), TransportError> {
        sent(
            "acknowledging (basic.ack)",
            self.acker().ack(BasicAckOptions::default()).await,
        )
    }

    async fn give_back(mut self, unit: &Unit, after: Duration) -> Result<(), TransportError> {
        let acker = self.acker();
        if self.shared.classic {
            // The count travels with the unit: a copy carrying it goes to the back of the
            // queue, confirmed, and only then is the original acknowledged.
            let properties = std::mem::take(&mut self.properties);
            let unit = unit.clone();
            let shared = self.shared.clone();
            self.shared.returns.spawn(async move {
                tokio::select! {
                    () = tokio::time::sleep(after) => {}
                    // The source is going away: return the unit now, while its channel is open.
                    () = shared.closing.cancelled() => {}
                }
                if let Err(error) = return_copy(&shared, &unit, properties, &acker).await {
                    tracing::warn!(unit.id = %unit.id(), queue = shared.queue, %error, "could not return the unit after its backoff");
                    metrics::counter!("delivery_settle_failed_total", "source" => shared.queue.clone())
                        .increment(1);
                }
            });
            return Ok(());
        }
        if after.is_zero() {
            return requeue(&acker).await;
        }
        // The wait holds the delivery (and its prefetch slot), not the handler's concurrency
        // slot. If the channel goes meanwhile, the broker returns it anyway; if the source is
        // dropped, the return is made at once, after the consumer is cancelled (so the unit is
        // not delivered to this consumer again on its way out, which would count a delivery
        // twice).
        let id = unit.id().clone();
        let queue = self.shared.queue.clone();
        let closing = self.shared.closing.clone();
        self.shared.returns.spawn(async move {
            tokio::select! {
                () = tokio::time::sleep(after) => {}
                () = closing.cancelled() => {}
            }
            if let Err(error) = requeue(&acker).await {
                tracing::warn!(unit.id = %id, queue, %error, "could not return the unit after its backoff");
                metrics::counter!("delivery_settle_failed_total", "source" => queue)
                    .increment(1);
            }
        });
        Ok(())
    }

    async fn copy_to_dead_letter(
        &mut self,
        unit: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        let headers = codec::rewrite(
            self.properties.headers().as_ref(),
            [
                (
                    crate::headers::DEAD_LETTER_REASON,
                    text_value(reason.kind().as_str()),
                ),
                (
                    crate::headers::DEAD_LETTER_DETAIL,
                    text_value(reason.detail()),
                ),
                (
                    crate::headers::DEAD_LETTER_SOURCE,
                    text_value(&self.shared.queue),
                ),
                (
                    crate::headers::DEAD_LETTER_DELIVERY_COUNT,
                    AMQPValue::LongLongInt(i64::from(unit.delivery_count().get())),
                ),
            ],
        );
        let properties = self.properties.clone().with_headers(headers);
        self.shared
            .publisher
            .publish(&self.shared.dead_letter_queue, unit.payload(), properties)
            .await
    }
}

/// Returns a unit of a classic queue: publishes a copy carrying its delivery count (the number
/// of deliveries so far) under a confirm, then acknowledges the original. If the copy is not
/// confirmed, the original is requeued instead (its count then stays, but nothing is lost).
async fn return_copy(
    shared: &Shared,
    unit: &Unit,
    properties: BasicProperties,
    acker: &Acker,
) -> Result<(), TransportError> {
    let headers = codec::rewrite(
        properties.headers().as_ref(),
        [(
            crate::headers::DELIVERY_COUNT,
            AMQPValue::LongLongInt(i64::from(unit.delivery_count().get())),
        )],
    );
    let copied = shared
        .publisher
        .publish(
            &shared.queue,
            unit.payload(),
            properties.with_headers(headers),
        )
        .await;
    match copied {
        Ok(()) => sent(
            "acknowledging a returned unit's original (basic.ack)",
            acker.ack(BasicAckOptions::default()).await,
        ),
        Err(error) => {
            let requeued = requeue(acker).await;
            Err(TransportError::msg(
                "returning the unit as a copy",
                match requeued {
                    Ok(()) => format!("{error}; the original was requeued instead"),
                    Err(e) => format!(
                        "{error}; requeueing failed too ({e}); the broker will deliver it again"
                    ),
                },
            ))
        }
    }
}

impl Drop for RabbitHandle {
    fn drop(&mut self) {
        let Some(acker) = self.acker.take() else {
            return;
        };
        if acker.usable() {
            self.shared
                .dropped
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .push(acker);
            self.shared.any_dropped.store(true, Ordering::Release);
        }
    }
}
