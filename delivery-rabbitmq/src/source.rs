//! A consumer of one quorum queue, and the handle that settles each delivery.

use std::num::NonZeroU32;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::Duration;

use futures_util::StreamExt;
use lapin::message::Delivery;
use lapin::options::{BasicConsumeOptions, BasicQosOptions, QueueDeclareOptions};
use lapin::types::FieldTable;
use lapin::{Channel, Connection};

use crate::acks::{AckMode, ChannelAcks};
use crate::connector::{Leased, RabbitConnector, close_channel};
use crate::shared::Shared;

use crate::codec::{self};
use crate::publish::ConfirmedPublisher;
use crate::settle::{self, RabbitHandle};
use crate::topology::{QueueType, RabbitTopology, TopologyError};
use delivery_core::transport::{Settle, Source, TransportError};
use delivery_core::unit::Unit;

/// A consumer of one RabbitMQ quorum queue (see the [module docs](super)).
///
/// It holds one connection and channel with manual acknowledgement and the topology's prefetch.
/// If the connection or channel is lost, [`receive`](Source::receive) reports it once and then
/// reopens them, after the wait the consumer runtime keeps between failed receives (jittered, growing to 6.4 s); the broker
/// redelivers whatever was unacknowledged. Dropping the source closes its connection, which
/// cancels the consumer and hands its unacknowledged units back to the broker.
///
/// **On your own connection** ([`RabbitConnector`]) the source consumes on a channel of its own
/// and publishes its dead-letter copies on another, both on yours; dropping it closes its
/// channels (which hands its unacknowledged units back), never your connection. It cannot redial
/// your connection: while it is down, each `receive` fails with a [`TransportError`] saying so,
/// and the source consumes again once lapin has recovered it (`enable_auto_recover`). Give a
/// [`RabbitConnector::factory`] instead to have the source ask your factory for a new connection
/// after each loss.
///
/// **Acknowledgements** are coalesced by default: one `basic.ack(multiple)` for many units, never
/// past a unit not settled; see [`AckMode`] for the trade-off and [`ack_mode`](Self::ack_mode)
/// for acks per unit.
pub struct RabbitSource {
    connector: RabbitConnector,
    topology: RabbitTopology,
    ack_mode: AckMode,
    /// A unit of the current channel was handed out (see [`ack_mode`](Self::ack_mode)).
    handed_out: bool,
    live: Option<Live>,
    /// The connection was lost and is being reopened (for the log line once it is back).
    reconnecting: bool,
    shared: Arc<Shared>,
    consumer_tag: String,
}

struct Live {
    // Field order is drop order: the flush task, the consumer, its channel, the connection.
    /// The channel's coalesced acks, and the guard that ends their flush task.
    acks: Option<(Arc<ChannelAcks>, tokio_util::sync::DropGuard)>,
    consumer: lapin::Consumer,
    channel: Channel,
    connection: Leased,
}

impl RabbitSource {
    /// A source of `topology.queue` through `connector` — a URL, or your own lapin
    /// `Connection` or factory ([`RabbitConnector`]) — connected and consuming before it
    /// returns, so a wrong URL or a missing queue fails at start. Declare the topology first
    /// ([`super::declare`]).
    ///
    /// ```no_run
    /// use delivery::lapin::{Connection, ConnectionProperties};
    /// use delivery::rabbitmq::{RabbitSource, RabbitTopology};
    /// use std::sync::Arc;
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    /// let from_url = RabbitSource::connect(url, RabbitTopology::new("orders")).await?;
    ///
    /// // Your connection, with your properties (and TLS, with lapin's `rustls` feature).
    /// let properties = ConnectionProperties::default().enable_auto_recover();
    /// let connection = Arc::new(Connection::connect(url, properties).await?);
    /// let on_yours = RabbitSource::connect(connection.clone(), RabbitTopology::new("invoices")).await?;
    /// # let _ = (from_url, on_yours); Ok(()) }
    /// ```
    pub async fn connect(
        connector: impl Into<RabbitConnector>,
        topology: RabbitTopology,
    ) -> Result<Self, TransportError> {
        let mut source = RabbitSource::lazy(connector, topology);
        source.live = Some(source.open().await?);
        Ok(source)
    }

    /// A source that connects on its first [`receive`](Source::receive).
    pub fn lazy(connector: impl Into<RabbitConnector>, topology: RabbitTopology) -> Self {
        let connector = connector.into();
        RabbitSource {
            shared: Arc::new(Shared {
                queue: topology.queue.clone(),
                dead_letter_queue: topology.dead_letter_queue_name(),
                publisher: ConfirmedPublisher::new(connector.clone()),
                classic: topology.queue_type == QueueType::Classic,
                dropped: std::sync::Mutex::new(Vec::new()),
                any_dropped: std::sync::atomic::AtomicBool::new(false),
            }),
            consumer_tag: format!("delivery-{}-{}", std::process::id(), next_tag()),
            connector,
            topology,
            ack_mode: AckMode::default(),
            handed_out: false,
            live: None,
            reconnecting: false,
        }
    }

    /// How units are acknowledged: [`AckMode::Coalesced`] by default (see [`AckMode`] for the
    /// trade-off), or [`AckMode::PerUnit`].
    ///
    /// ```no_run
    /// use delivery::rabbitmq::{AckMode, RabbitSource, RabbitTopology};
    ///
    /// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    /// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
    /// let source = RabbitSource::connect(url, RabbitTopology::new("orders"))
    ///     .await?
    ///     .ack_mode(AckMode::PerUnit);
    /// # let _ = source; Ok(()) }
    /// ```
    ///
    /// Set it before the first unit is received. Changed later, the source consumes again on a
    /// new channel, and the units of the old one are delivered again (rule 3).
    pub fn ack_mode(mut self, mode: AckMode) -> Self {
        if mode == self.ack_mode {
            return self;
        }
        self.ack_mode = mode;
        if std::mem::take(&mut self.handed_out) {
            self.live = None;
        } else if let Some(mut live) = self.live.take() {
            live.acks = self.coalesce(&live.channel);
            self.live = Some(live);
        }
        self
    }

    /// The topology this source consumes.
    pub fn topology(&self) -> &RabbitTopology {
        &self.topology
    }

    async fn open(&self) -> Result<Live, TransportError> {
        let connection = self.connector.open().await?;
        let opened = self.subscribe(&connection).await;
        match opened {
            Ok((consumer, channel)) => Ok(Live {
                acks: self.coalesce(&channel),
                consumer,
                channel,
                connection,
            }),
            Err(error) => {
                connection.close("failed to consume").await;
                Err(error)
            }
        }
    }

    /// The coalesced acks of a new consuming `channel`, in [`AckMode::Coalesced`].
    fn coalesce(
        &self,
        channel: &Channel,
    ) -> Option<(Arc<ChannelAcks>, tokio_util::sync::DropGuard)> {
        let timing = self.ack_mode.coalesced_timing()?;
        Some(ChannelAcks::start(
            channel.clone(),
            timing,
            self.topology.prefetch.max(1),
        ))
    }

    /// Checks the queue, then opens the consuming channel and subscribes.
    async fn subscribe(
        &self,
        connection: &Connection,
    ) -> Result<(lapin::Consumer, Channel), TransportError> {
        self.check(connection).await?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| crate::error::LAPIN.error("opening a channel", e))?;
        channel
            .basic_qos(self.topology.prefetch.max(1), BasicQosOptions::default())
            .await
            .map_err(|e| crate::error::LAPIN.error("setting the prefetch (basic.qos)", e))?;
        let consumer = channel
            .basic_consume(
                self.topology.queue.as_str().into(),
                self.consumer_tag.as_str().into(),
                BasicConsumeOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| crate::error::LAPIN.error("starting the consumer (basic.consume)", e))?;
        Ok((consumer, channel))
    }

    /// A classic queue's unit delivered again without being settled — its consumer crashed, or
    /// its connection was lost — is counted here, before any handler runs: the broker keeps no
    /// count, so a copy carrying the lost delivery goes to the back of the queue, confirmed, and
    /// the original is acknowledged (a failed copy requeues the original, and the receive fails,
    /// so the runtime backs off). A unit whose consumers keep dying on it so reaches the bound,
    /// and the runtime dead-letters it on arrival (rule 2).
    async fn count_the_lost_delivery(&mut self, delivery: Delivery) -> Result<(), TransportError> {
        // As read, the unit's count is the number of deliveries so far, the lost one included.
        let (unit, handle) = self.unit_of(delivery)?;
        tracing::debug!(queue = %self.topology.queue, unit.id = %unit.id(),
            delivery_count = unit.delivery_count().get(), "counting a delivery lost with its consumer");
        handle.give_back(&unit, Duration::ZERO).await
    }

    /// The queue as the broker holds it, checked against the topology rather than trusted: it
    /// must exist, and with the topology's arguments — above all its type. A queue the topology
    /// calls quorum that is classic on the broker has no `x-delivery-count`, so a failed unit's
    /// count would never move and it would be returned forever; the broker refuses the
    /// declaration with the differing argument, and the source reports it at connect.
    async fn check(&self, connection: &Connection) -> Result<(), TransportError> {
        let queue = self.topology.queue.as_str();
        let declare = async |passive: bool, arguments: FieldTable| {
            // A refused declaration closes its channel: each gets one of its own.
            let channel = connection
                .create_channel()
                .await
                .map_err(|e| crate::error::LAPIN.error("opening a channel", e))?;
            let options = QueueDeclareOptions {
                passive,
                durable: true,
                ..QueueDeclareOptions::default()
            };
            let declared = channel
                .queue_declare(queue.into(), options, arguments)
                .await;
            close_channel(&channel, "checked").await;
            Ok::<_, TransportError>(declared.map(drop))
        };
        declare(true, FieldTable::default())
            .await?
            .map_err(|e| crate::error::LAPIN.error("looking up the queue (declare it first)", e))?;
        declare(false, self.topology.queue_arguments())
            .await?
            .map_err(|e| {
                crate::error::LAPIN.error(
                    "checking the queue against the topology",
                    TopologyError::new("checking the queue", queue, e),
                )
            })
    }

    fn lost(&mut self, error: TransportError) -> TransportError {
        if let Some(live) = self.live.take() {
            drop(live);
        }
        self.handed_out = false;
        self.reconnecting = true;
        error
    }

    fn unit_of(&mut self, delivery: Delivery) -> Result<(Unit, RabbitHandle), TransportError> {
        let Delivery {
            delivery_tag,
            data,
            properties,
            acker,
            ..
        } = delivery;
        // Tracked before the unit is handed out: from now on it holds the watermark.
        let coalesced = match self.live.as_ref().and_then(|live| live.acks.as_ref()) {
            Some((acks, _)) => {
                acks.track(delivery_tag)?;
                Some((acks.clone(), delivery_tag))
            }
            None => None,
        };
        self.handed_out = true;
        let headers = properties.headers().as_ref();
        let id = codec::unit_id(&properties, &data);
        let count = codec::delivery_count(headers);
        let mut unit = Unit::new(id, data)
            .with_delivery_count(count)
            .with_headers(codec::unit_headers(headers));
        // RabbitMQ keeps no order of its own: the stamp is the one the producer set (rule 4).
        if let Some(stamp) = codec::stamp(headers) {
            unit = unit.with_stamp(stamp);
        }
        let handle = RabbitHandle {
            acker: Some(acker),
            properties,
            shared: self.shared.clone(),
            coalesced,
        };
        Ok((unit, handle))
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
        for (acker, coalesced) in dropped {
            tokio::spawn(async move {
                let _ = settle::requeue(&acker, coalesced.as_ref()).await;
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
        loop {
            let live = self.live.as_mut().expect("opened above");
            let delivery = match live.consumer.next().await {
                Some(Ok(delivery)) => delivery,
                Some(Err(error)) => {
                    return Err(self.lost(crate::error::LAPIN.error("consuming", error)));
                }
                None => {
                    let connected = live.connection.status().connected();
                    if connected && let Some((acks, _)) = &live.acks {
                        // Cancelled by the broker on a channel still open: its acks still count.
                        let _ = acks.flush().await;
                    }
                    return Err(self.lost(TransportError::msg(
                        "consuming",
                        if connected {
                            "the broker cancelled the consumer (queue deleted?); resubscribing"
                        } else {
                            "the connection was lost; reconnecting"
                        },
                    )));
                }
            };
            if self.shared.classic && delivery.redelivered {
                self.count_the_lost_delivery(delivery).await?;
                continue;
            }
            return match self.unit_of(delivery) {
                Ok(received) => Ok(Some(received)),
                Err(error) => Err(self.lost(error)),
            };
        }
    }

    fn max_deliveries(&self) -> Option<NonZeroU32> {
        Some(self.topology.max_deliveries())
    }

    fn name(&self) -> &str {
        &self.topology.queue
    }

    fn messaging(&self) -> delivery_core::trace::Messaging {
        delivery_core::trace::Messaging::new("rabbitmq", &self.topology.queue)
    }

    /// Cancels the subscription (`basic.cancel`): the units the runtime gives back at shutdown
    /// then go to another consumer, and the broker counts their return once — not once more for
    /// a delivery to this consumer on its way out. Acknowledging what is in flight still works:
    /// coalesced acks waiting are sent now, and from now on each as it comes.
    async fn stop(&mut self) {
        let Some(live) = &self.live else {
            return;
        };
        if let Err(error) = live
            .channel
            .basic_cancel(self.consumer_tag.as_str().into(), Default::default())
            .await
        {
            tracing::debug!(queue = %self.topology.queue, %error, "cancelling the consumer failed");
        }
        if let Some((acks, _)) = &live.acks {
            acks.stop().await;
        }
    }
}
