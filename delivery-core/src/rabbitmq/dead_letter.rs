//! The operator's view of a queue's dead letter: [`DeadLetters`] over the dead-letter queue,
//! read with `basic.get` without acknowledgement, and the depth gauge.

use std::num::NonZeroU32;
use std::time::{Duration, UNIX_EPOCH};

use bytes::Bytes;
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Acker, BasicProperties, Channel};

use super::codec::{self, as_text, as_u64, get};
use super::publish::ConfirmedPublisher;
use super::topology::RabbitTopology;
use super::{Leased, RabbitConnector};
use crate::dead_letter::{Cursor, DeadLetter, DeadLetters, Listing, RedriveReport, Selection};
use crate::disposition::ReasonKind;
use crate::headers;
use crate::transport::TransportError;
use crate::unit::{DeliveryCount, Unit, UnitId};

/// The dead letter of one queue, for an operator: it implements [`DeadLetters`].
///
/// A queue has no random access, so every operation is a **pass** over the whole dead-letter
/// queue, on a channel of its own — on a connection of its own when made from a URL, or on your
/// connection ([`RabbitConnector`]), left open: every unit the queue holds when the pass starts is taken
/// from the head with `basic.get` without acknowledgement; those removed (redriven or purged) are
/// acknowledged, and the others are handed back when the pass's channel closes. Taking them all
/// is what keeps their order: a classic queue puts a handed-back unit back where it was; a quorum
/// queue (RabbitMQ 3.x) puts handed-back units at its back in the order they were taken — after a
/// whole pass, where they were. Nothing is lost if a pass dies: the broker hands back whatever it
/// had not acknowledged. Units dead-lettered while a pass runs are not taken by it (a redriven
/// unit failing again is not seen twice); on a quorum queue they end up ahead of the units the
/// pass handed back. Units another operator holds at that moment are not seen. Before an
/// operation returns, it waits (up to five seconds) until the broker shows the units it handed
/// back as ready again, so a [`count`](DeadLetters::count) right after it sees them.
///
/// - A record's [`position`](DeadLetter::position) is its place from the head (0 first), as in the
///   in-memory broker: it moves as units before it leave. Every page, and a peek, costs a pass over
///   the whole dead letter (one `basic.get` round trip a unit).
/// - The unit is the message as published: its `message_id` (or the digest the source uses for a
///   unit without one), body, and own headers — without this crate's `x-dead-letter-*` and
///   `x-delivery-count` and the broker's `x-death`, `x-first-death-*`, `x-last-death-*`.
/// - Its [`reason`](DeadLetter::reason), [`detail`](DeadLetter::detail),
///   [`source`](DeadLetter::source) and delivery count are the `x-dead-letter-*` headers the
///   consumer recorded. A unit the broker dead-lettered itself (past the quorum queue's
///   `x-delivery-limit`) is read from its `x-death` header: `exhausted`, on the topology's last
///   delivery, from the queue named there; for the broker's other reasons (`rejected`, `expired`,
///   `maxlen`) the reason is `None` and the detail names the broker's reason.
/// - [`dead_lettered_at`](DeadLetter::dead_lettered_at) is the latest `x-death` entry's time when
///   the broker dead-lettered the unit, else the message's `timestamp` property if its publisher
///   set one (the consumer records no time of its own when it dead-letters a unit), else `None`.
///   Both are whole seconds.
/// - A redrive publishes the unit to its source queue under a publisher confirm (same
///   `message_id`, body and properties, without the headers above, so the source counts its
///   deliveries afresh) and acknowledges the dead-letter copy only once the broker confirmed
///   it; if the acknowledgement is lost, the unit is in both, never in neither. An edited
///   redrive does the same with the operator's body and the edit's headers, and sets the
///   `message_id` to the unit's id (a unit published without one keeps the id its first body
///   gave it).
/// - A purge acknowledges the matching units: they are gone for good.
///
/// On RabbitMQ 4.0 and later, quorum queues have a default delivery limit (20) and every pass
/// hands the units it held back to the dead-letter queue, which may count as a delivery: declare
/// the dead-letter queue with an `x-delivery-limit` the operator's passes will not reach there.
///
/// ```no_run
/// # async fn run() -> Result<(), delivery::TransportError> {
/// use delivery::dead_letter::{DeadLetters, Selection};
/// use delivery::rabbitmq::{RabbitDeadLetters, RabbitTopology};
/// use delivery::UnitId;
///
/// let url = "amqp://guest:guest@127.0.0.1:5672/%2f";
/// let dead = RabbitDeadLetters::new(url, &RabbitTopology::new("orders"));
/// for record in dead.list(10, None).await?.records {
///     println!("{record}");
/// }
/// let report = dead.redrive(Selection::Ids(&[UnitId::new("order-42")])).await?;
///
/// // The same through a connection of yours (passes open channels on it; it stays open):
/// let connection = delivery::rabbitmq::connect(url).await?; // or `lapin::Connection::connect`
/// let yours = RabbitDeadLetters::new(connection, &RabbitTopology::new("orders"));
/// println!("{} dead", yours.count().await?);
/// # let _ = report; Ok(()) }
/// ```
#[derive(Clone, Debug)]
pub struct RabbitDeadLetters {
    connector: RabbitConnector,
    queue: String,
    dead_letter_queue: String,
    /// The most deliveries the topology allows: the delivery on which the broker dead-letters a
    /// unit past its `x-delivery-limit`.
    max_deliveries: NonZeroU32,
}

/// How long an operation waits for the units its pass held to be ready again.
const HANDED_BACK: Duration = Duration::from_secs(5);

impl RabbitDeadLetters {
    /// The dead letter of `topology.queue` through `connector`: a URL, your own lapin
    /// `Connection` or a factory ([`RabbitConnector`]).
    pub fn new(connector: impl Into<RabbitConnector>, topology: &RabbitTopology) -> Self {
        RabbitDeadLetters {
            connector: connector.into(),
            queue: topology.queue.clone(),
            dead_letter_queue: topology.dead_letter_queue_name(),
            max_deliveries: topology.max_deliveries(),
        }
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        crate::dead_letter::depth::watch(self.dead_letter_queue.clone(), every, move || {
            let this = this.clone();
            async move { DeadLetters::count(&this).await }
        })
    }

    async fn open(&self) -> Result<(Leased, Channel), TransportError> {
        let connection = self.connector.open().await?;
        match connection.create_channel().await {
            Ok(channel) => Ok((connection, channel)),
            Err(error) => {
                connection.close("done").await;
                Err(TransportError::new("opening a channel", error))
            }
        }
    }

    /// The units ready in the dead-letter queue (a passive `queue.declare`).
    async fn ready(&self, channel: &Channel) -> Result<u64, TransportError> {
        let queue = channel
            .queue_declare(
                self.dead_letter_queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| TransportError::new("reading the dead letter's depth", e))?;
        Ok(u64::from(queue.message_count()))
    }

    /// Starts a pass over the units the dead-letter queue holds now.
    async fn pass(&self) -> Result<Pass, TransportError> {
        let (connection, channel) = self.open().await?;
        match self.ready(&channel).await {
            Ok(left) => Ok(Pass {
                connection,
                channel,
                left,
                held: 0,
                position: 0,
            }),
            Err(error) => {
                super::close_channel(&channel, "done").await;
                connection.close("done").await;
                Err(error)
            }
        }
    }

    /// Runs `work` over a pass, then ends the pass whatever `work` returned.
    async fn with_pass<T>(
        &self,
        work: impl AsyncFnOnce(&mut Pass) -> Result<T, TransportError>,
    ) -> Result<T, TransportError> {
        let mut pass = self.pass().await?;
        let result = work(&mut pass).await;
        pass.end(self).await;
        result
    }

    /// The record of a unit a pass took (its body moves into the record).
    fn record(&self, taken: &mut Taken) -> DeadLetter {
        let properties = &taken.properties;
        let table = properties.headers().as_ref();
        let text = |name: &str| get(table, name).and_then(as_text);
        // The latest time the broker dead-lettered it, if it did.
        let death = latest_death(table);
        let by_broker_past_limit = death
            .as_ref()
            .is_some_and(|d| d.reason == "delivery_limit" && d.queue == self.queue);
        let count = get(table, headers::DEAD_LETTER_DELIVERY_COUNT)
            .and_then(as_u64)
            .map(|c| DeliveryCount::new(u32::try_from(c).unwrap_or(u32::MAX)))
            .or_else(|| by_broker_past_limit.then(|| DeliveryCount::new(self.max_deliveries.get())))
            .unwrap_or(DeliveryCount::FIRST);
        let mut unit = Unit::new(taken.id.clone(), std::mem::take(&mut taken.data))
            .with_headers(codec::own_headers(table))
            .with_delivery_count(count);
        if let Some(stamp) = codec::stamp(table) {
            unit = unit.with_stamp(stamp);
        }
        let source = text(headers::DEAD_LETTER_SOURCE)
            .or_else(|| death.as_ref().map(|d| d.queue.clone()))
            .unwrap_or_else(|| self.queue.clone());
        let mut record = DeadLetter::new(unit, source, taken.position.to_string());
        record.reason = text(headers::DEAD_LETTER_REASON)
            .and_then(|r| ReasonKind::parse(&r))
            .or_else(|| by_broker_past_limit.then_some(ReasonKind::Exhausted));
        record.detail = text(headers::DEAD_LETTER_DETAIL)
            .or_else(|| {
                death.as_ref().map(|d| {
                    format!(
                        "dead-lettered by the broker from `{}`: {}",
                        d.queue, d.reason
                    )
                })
            })
            .unwrap_or_default();
        record.dead_lettered_at = death
            .and_then(|d| d.time)
            .or(*properties.timestamp())
            .map(|seconds| UNIX_EPOCH + Duration::from_secs(seconds));
        record
    }
}

/// A pass over the dead-letter queue (see [`RabbitDeadLetters`]).
struct Pass {
    connection: Leased,
    channel: Channel,
    /// Units still to take of those the queue held when the pass started: a pass takes them
    /// all.
    left: u64,
    /// Units taken and not acknowledged: handed back when the pass ends.
    held: u64,
    /// The place from the head of the next unit taken.
    position: usize,
}

/// A unit a pass took, until it is acknowledged or handed back.
struct Taken {
    /// Its place from the head.
    position: usize,
    id: UnitId,
    properties: BasicProperties,
    data: Vec<u8>,
    acker: Acker,
}

impl Pass {
    /// The next unit from the head, taken without acknowledgement; `None` once the units the
    /// queue held at the start are all taken.
    async fn next(&mut self, dead: &RabbitDeadLetters) -> Result<Option<Taken>, TransportError> {
        if self.left == 0 {
            return Ok(None);
        }
        let got = self
            .channel
            .basic_get(
                dead.dead_letter_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .map_err(|e| TransportError::new("reading the dead letter (basic.get)", e))?;
        let Some(message) = got else {
            self.left = 0;
            return Ok(None);
        };
        self.left -= 1;
        self.held += 1;
        let delivery = message.delivery;
        let position = self.position;
        self.position += 1;
        Ok(Some(Taken {
            position,
            id: codec::unit_id(&delivery.properties, &delivery.data),
            properties: delivery.properties,
            data: delivery.data,
            acker: delivery.acker,
        }))
    }

    /// Acknowledges a unit taken: it leaves the dead letter for good.
    async fn remove(&mut self, taken: Taken) -> Result<(), TransportError> {
        match taken.acker.ack(BasicAckOptions::default()).await {
            Ok(true) => {
                self.held -= 1;
                Ok(())
            }
            Ok(false) => Err(TransportError::msg(
                "removing from the dead letter (basic.ack)",
                "the delivery was already settled",
            )),
            Err(error) => Err(TransportError::new(
                "removing from the dead letter (basic.ack)",
                error,
            )),
        }
    }

    /// Ends the pass: closing its channel settles the acknowledgements sent on it and hands back
    /// the units held; then waits until the broker shows them ready again.
    async fn end(self, dead: &RabbitDeadLetters) {
        super::close_channel(&self.channel, "pass done").await;
        if self.held > 0 {
            let deadline = tokio::time::Instant::now() + HANDED_BACK;
            if let Ok(channel) = self.connection.create_channel().await {
                loop {
                    match dead.ready(&channel).await {
                        Ok(ready) if ready >= self.held => break,
                        Ok(_) if tokio::time::Instant::now() < deadline => {
                            tokio::time::sleep(Duration::from_millis(10)).await;
                        }
                        _ => {
                            tracing::debug!(
                                dead_letter = dead.dead_letter_queue,
                                held = self.held,
                                "the units a pass held are not all ready again yet"
                            );
                            break;
                        }
                    }
                }
            }
        }
        self.connection.close("pass done").await;
    }
}

impl DeadLetters for RabbitDeadLetters {
    /// The dead-letter queue's name.
    fn name(&self) -> &str {
        &self.dead_letter_queue
    }

    /// The units ready in the dead-letter queue (a passive `queue.declare`), not counting any an
    /// operator's pass holds at that moment.
    async fn count(&self) -> Result<u64, TransportError> {
        let (connection, channel) = self.open().await?;
        let ready = self.ready(&channel).await;
        super::close_channel(&channel, "done").await;
        connection.close("done").await;
        let depth = ready?;
        crate::dead_letter::depth::record(&self.dead_letter_queue, depth);
        Ok(depth)
    }

    /// A pass over every unit, keeping the page's.
    async fn list(&self, limit: usize, after: Option<&Cursor>) -> Result<Listing, TransportError> {
        let start = match after {
            None => 0,
            Some(cursor) => cursor.as_str().parse::<usize>().map_err(|_| {
                TransportError::msg(
                    "listing the dead letter",
                    format!(
                        "`{}` is not a cursor of a RabbitMQ dead letter (a place from the head)",
                        cursor.as_str()
                    ),
                )
            })? + 1,
        };
        self.with_pass(async |pass| {
            let mut records = Vec::new();
            let mut more = false;
            while let Some(mut taken) = pass.next(self).await? {
                if taken.position < start {
                    continue;
                }
                if records.len() == limit {
                    more = true;
                } else {
                    records.push(self.record(&mut taken));
                }
            }
            Ok(Listing::page(records, more))
        })
        .await
    }

    /// A pass over every unit, keeping the first with `id`.
    async fn peek(&self, id: &UnitId) -> Result<Option<DeadLetter>, TransportError> {
        self.with_pass(async |pass| {
            let mut found = None;
            while let Some(mut taken) = pass.next(self).await? {
                if found.is_none() && taken.id == *id {
                    found = Some(self.record(&mut taken));
                }
            }
            Ok(found)
        })
        .await
    }

    async fn redrive(&self, selection: Selection<'_>) -> Result<RedriveReport, TransportError> {
        let redriven = self.redrive_selected(selection, None).await?;
        Ok(RedriveReport::of(selection, redriven))
    }

    async fn purge(&self, ids: &[UnitId]) -> Result<u64, TransportError> {
        if ids.is_empty() {
            return Ok(0);
        }
        self.with_pass(async |pass| {
            let mut purged = 0;
            while let Some(taken) = pass.next(self).await? {
                if ids.contains(&taken.id) {
                    pass.remove(taken).await?;
                    purged += 1;
                }
            }
            Ok(purged)
        })
        .await
    }

    async fn redrive_edited(&self, id: &UnitId, payload: Bytes) -> Result<bool, TransportError> {
        let selection = Selection::Ids(std::slice::from_ref(id));
        let redriven = self.redrive_selected(selection, Some(&payload)).await?;
        Ok(!redriven.is_empty())
    }
}

impl RabbitDeadLetters {
    /// A pass that publishes each selected unit back to its source — edited to `edit`, if given,
    /// under its own `message_id` — and acknowledges its dead-letter copy once the broker
    /// confirmed it. Returns the ids redriven.
    async fn redrive_selected(
        &self,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<Vec<UnitId>, TransportError> {
        let publisher = ConfirmedPublisher::new(self.connector.clone());
        let redriven = self
            .with_pass(async |pass| {
                let mut redriven = Vec::new();
                while let Some(mut taken) = pass.next(self).await? {
                    if !selection.contains(&taken.id) {
                        continue;
                    }
                    let id = taken.id.clone();
                    let record = self.record(&mut taken);
                    let target = &record.source;
                    let table = taken.properties.headers().as_ref();
                    let (payload, headers, properties) = match edit {
                        None => (record.unit.payload(), codec::rewrite(table, []), taken.properties.clone()),
                        // An edited unit keeps its id even where it was a digest of its body.
                        Some(payload) => (
                            payload,
                            codec::rewrite_edited(table, record.unit.payload()),
                            taken.properties.clone().with_message_id(id.as_str().into()),
                        ),
                    };
                    publisher
                        .publish(target, payload, properties.with_headers(headers))
                        .await
                        .map_err(|e| {
                            TransportError::msg(
                                "redriving",
                                format!(
                                    "{id} was not moved to `{target}` and stays in the dead letter: {e}"
                                ),
                            )
                        })?;
                    pass.remove(taken).await.map_err(|e| {
                        TransportError::msg(
                            "redriving",
                            format!(
                                "{id} was copied to `{target}` but its dead-letter copy was not acknowledged ({e}); it is in both"
                            ),
                        )
                    })?;
                    redriven.push(id);
                }
                Ok(redriven)
            })
            .await;
        publisher.close().await;
        redriven
    }
}

/// The latest entry of the broker's `x-death` header (the first), when the broker dead-lettered
/// the unit.
struct Death {
    queue: String,
    /// `delivery_limit`, `rejected`, `expired` or `maxlen`.
    reason: String,
    /// Seconds since the Unix epoch.
    time: Option<u64>,
}

fn latest_death(table: Option<&FieldTable>) -> Option<Death> {
    let Some(AMQPValue::FieldArray(entries)) = get(table, "x-death") else {
        return None;
    };
    entries.as_slice().iter().find_map(|entry| match entry {
        AMQPValue::FieldTable(t) => {
            let field = |name: &str| get(Some(t), name).and_then(as_text).unwrap_or_default();
            Some(Death {
                queue: field("queue"),
                reason: field("reason"),
                time: match get(Some(t), "time") {
                    Some(AMQPValue::Timestamp(seconds)) => Some(*seconds),
                    _ => None,
                },
            })
        }
        _ => None,
    })
}
