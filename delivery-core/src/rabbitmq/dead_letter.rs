//! The operator's view of a queue's dead letter: count, peek without consuming, and redrive back
//! to the source queue under the same message id.

use std::sync::Arc;
use std::time::Duration;

use bytes::Bytes;
use lapin::options::{BasicAckOptions, BasicGetOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{BasicProperties, Channel, Connection};

use super::codec::{self, as_text, as_u64, get};
use super::publisher::ConfirmedPublisher;
use super::topology::RabbitTopology;
use crate::disposition::ReasonKind;
use crate::transport::TransportError;
use crate::unit::{Headers, UnitId};

/// One unit in the dead letter, as read without consuming it.
#[derive(Clone, Debug)]
pub struct DeadLetterRecord {
    /// The unit's id (its `message_id`).
    pub id: UnitId,
    /// The body, byte for byte as published.
    pub body: Bytes,
    /// The unit's headers (strings and numbers; see [`Unit::headers`](crate::Unit::headers)).
    pub headers: Headers,
    /// The AMQP properties, including every header as typed.
    pub properties: BasicProperties,
    /// Why it was dead-lettered: recorded by the consumer, or `Exhausted` when the broker moved it
    /// past the delivery limit.
    pub reason: Option<ReasonKind>,
    /// The reason's detail, as the consumer recorded it.
    pub detail: Option<String>,
    /// The queue it came from.
    pub source: Option<String>,
    /// The delivery on which it was dead-lettered (from 1), when recorded.
    pub delivery_count: Option<u32>,
    /// The broker's `x-death` history, when the broker dead-lettered it.
    pub x_death: Vec<XDeath>,
}

/// One entry of the broker's `x-death` header.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct XDeath {
    /// The queue the unit was dead-lettered from.
    pub queue: String,
    /// The broker's reason: `delivery_limit`, `rejected`, `expired`, `maxlen`.
    pub reason: String,
    /// How many times it was dead-lettered from that queue for that reason.
    pub count: u64,
    /// The exchange it had been published to.
    pub exchange: String,
}

/// What a redrive did.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct RedriveReport {
    /// Units moved back to their source queue (publish confirmed, dead-letter copy acked).
    pub moved: Vec<UnitId>,
    /// Units looked at and left in the dead letter.
    pub kept: usize,
}

/// The dead letter of one queue, for an operator.
#[derive(Clone, Debug)]
pub struct RabbitDeadLetters {
    url: Arc<str>,
    queue: String,
    dead_letter_queue: String,
}

impl RabbitDeadLetters {
    /// The dead letter of `topology.queue` on the broker at `url`.
    pub fn new(url: impl Into<Arc<str>>, topology: &RabbitTopology) -> Self {
        RabbitDeadLetters {
            url: url.into(),
            queue: topology.queue.clone(),
            dead_letter_queue: topology.dead_letter_queue_name(),
        }
    }

    /// The dead-letter queue's name.
    pub fn name(&self) -> &str {
        &self.dead_letter_queue
    }

    /// The next unit at the head of the dead letter, taken without acknowledgement.
    async fn get(
        &self,
        channel: &Channel,
    ) -> Result<Option<lapin::message::BasicGetMessage>, TransportError> {
        channel
            .basic_get(
                self.dead_letter_queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .map_err(|e| TransportError::new("reading the dead letter (basic.get)", e))
    }

    async fn open(&self) -> Result<(Connection, Channel), TransportError> {
        let connection = super::connect(&self.url).await?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| TransportError::new("opening a channel", e))?;
        Ok((connection, channel))
    }

    /// Units waiting in the dead letter (not counting any an operator holds at this moment).
    /// Also sets the `delivery_dead_letter_depth` gauge (label `dead_letter`).
    pub async fn count(&self) -> Result<u64, TransportError> {
        let (connection, channel) = self.open().await?;
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
            .map_err(|e| TransportError::new("reading the dead letter's depth", e));
        let _ = connection.close(200, "done".into()).await;
        let depth = u64::from(queue?.message_count());
        crate::dead_letter::depth::record(&self.dead_letter_queue, depth);
        Ok(depth)
    }

    /// Keeps the `delivery_dead_letter_depth` gauge current, reading the depth every `every`,
    /// until the returned task is aborted.
    pub fn watch_depth(&self, every: Duration) -> tokio::task::JoinHandle<()> {
        let this = self.clone();
        crate::dead_letter::depth::watch(self.dead_letter_queue.clone(), every, move || {
            let this = this.clone();
            async move { this.count().await }
        })
    }

    /// Up to `n` units from the head of the dead letter, left in it: they are taken without
    /// acknowledgement and handed back when the peek's connection closes.
    pub async fn peek(&self, n: usize) -> Result<Vec<DeadLetterRecord>, TransportError> {
        let (connection, channel) = self.open().await?;
        let mut records = Vec::new();
        let result = async {
            while records.len() < n {
                let got = self.get(&channel).await?;
                let Some(message) = got else { break };
                records.push(record(message.delivery.properties, message.delivery.data));
            }
            Ok::<_, TransportError>(())
        }
        .await;
        let _ = connection.close(200, "peeked".into()).await;
        result.map(|()| records)
    }

    /// Moves the units `select` picks back to their source queue (`x-dead-letter-source`, or the
    /// topology's queue) under the same message id, body and properties, without the transport's
    /// and the broker's bookkeeping headers (so the count starts afresh). Each move is confirmed
    /// by the broker before the dead-letter copy is acknowledged; a unit whose move is not
    /// confirmed stays in the dead letter and the redrive stops with the error.
    pub async fn redrive(
        &self,
        mut select: impl FnMut(&DeadLetterRecord) -> bool,
    ) -> Result<RedriveReport, TransportError> {
        let (connection, channel) = self.open().await?;
        let publisher = ConfirmedPublisher::new(self.url.clone());
        let mut report = RedriveReport::default();
        let result = async {
            loop {
                let got = self.get(&channel).await?;
                let Some(message) = got else { break };
                let acker = message.delivery.acker;
                let record = record(message.delivery.properties, message.delivery.data);
                if !select(&record) {
                    // Held until the connection closes, so the scan moves on; then handed back.
                    report.kept += 1;
                    continue;
                }
                let target = record.source.clone().unwrap_or_else(|| self.queue.clone());
                let headers = codec::rewrite(record.properties.headers().as_ref(), []);
                let properties = record.properties.clone().with_headers(headers);
                publisher.publish(&target, &record.body, properties).await.map_err(|e| {
                    TransportError::msg(
                        "redriving",
                        format!("{} was not moved to `{target}` and stays in the dead letter: {e}", record.id),
                    )
                })?;
                match acker.ack(BasicAckOptions::default()).await {
                    Ok(true) => {}
                    other => {
                        return Err(TransportError::msg(
                            "redriving",
                            format!(
                                "{} was copied to `{target}` but its dead-letter copy was not acknowledged ({other:?}); it is in both",
                                record.id
                            ),
                        ));
                    }
                }
                report.moved.push(record.id);
            }
            Ok::<_, TransportError>(())
        }
        .await;
        let _ = connection.close(200, "redriven".into()).await;
        publisher.close().await;
        result.map(|()| report)
    }
}

fn record(properties: BasicProperties, data: Vec<u8>) -> DeadLetterRecord {
    let table = properties.headers().as_ref();
    let id = codec::unit_id(&properties, &data);
    let x_death = x_death(table);
    let recorded = get(table, crate::headers::DEAD_LETTER_REASON)
        .and_then(as_text)
        .and_then(|r| ReasonKind::parse(&r));
    let reason = recorded.or_else(|| {
        x_death
            .iter()
            .any(|d| d.reason == "delivery_limit")
            .then_some(ReasonKind::Exhausted)
    });
    let source = get(table, crate::headers::DEAD_LETTER_SOURCE)
        .and_then(as_text)
        .or_else(|| x_death.first().map(|d| d.queue.clone()));
    let delivery_count = get(table, crate::headers::DEAD_LETTER_DELIVERY_COUNT)
        .and_then(as_u64)
        .and_then(|c| u32::try_from(c).ok());
    DeadLetterRecord {
        id,
        headers: codec::unit_headers(table),
        detail: get(table, crate::headers::DEAD_LETTER_DETAIL).and_then(as_text),
        reason,
        source,
        delivery_count,
        x_death,
        body: Bytes::from(data),
        properties,
    }
}

fn x_death(table: Option<&FieldTable>) -> Vec<XDeath> {
    let Some(AMQPValue::FieldArray(entries)) = get(table, "x-death") else {
        return Vec::new();
    };
    entries
        .as_slice()
        .iter()
        .filter_map(|entry| match entry {
            AMQPValue::FieldTable(t) => {
                let field = |name: &str| get(Some(t), name).and_then(as_text).unwrap_or_default();
                Some(XDeath {
                    queue: field("queue"),
                    reason: field("reason"),
                    exchange: field("exchange"),
                    count: get(Some(t), "count").and_then(as_u64).unwrap_or(0),
                })
            }
            _ => None,
        })
        .collect()
}
