//! The queue topology a RabbitMQ consumer relies on, declared with the deployment from a settings
//! struct that can live in the application's configuration.

use std::num::NonZeroU32;

use lapin::options::{ExchangeDeclareOptions, QueueBindOptions, QueueDeclareOptions};
use lapin::types::{AMQPValue, FieldTable, LongString};
use lapin::{Connection, ExchangeKind};
use serde::{Deserialize, Serialize};

use crate::connector::{RabbitConnector, close_channel};
use delivery_core::transport::TransportErrorKind;

/// The topology of one consumed queue: a quorum queue whose delivery limit and dead-letter
/// exchange make the broker itself bound redelivery (rule 2), and its dead-letter queue.
///
/// With `delivery_limit = N` a unit is delivered at most `N + 1` times: the broker counts each
/// return in the `x-delivery-count` header and dead-letters a unit returned past the limit.
///
/// A classic queue ([`QueueType::Classic`]) keeps no count, so the count travels with the unit:
/// a failed unit is returned by publishing a copy with the incremented `x-delivery-count` header
/// to the back of the queue under a publisher confirm, and only then acknowledging the original;
/// the consumer dead-letters it on its last allowed delivery. A crash between the two leaves both
/// copies (a duplicate, never a loss); a unit redelivered by the broker itself (its consumer
/// went away) counts one more delivery than it carries.
///
/// ```
/// use delivery::rabbitmq::RabbitTopology;
///
/// let topology: RabbitTopology =
///     serde_json::from_str(r#"{"queue": "orders", "delivery_limit": 4, "prefetch": 64}"#).unwrap();
/// assert_eq!(topology.dead_letter_queue_name(), "orders.dlq");
/// assert_eq!(topology.max_deliveries().get(), 5);
/// ```
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct RabbitTopology {
    /// The quorum queue consumed.
    pub queue: String,
    /// The queue's `x-delivery-limit`: returns allowed before the broker dead-letters a unit.
    /// Default 4 (five deliveries).
    #[serde(default = "default_delivery_limit")]
    pub delivery_limit: u32,
    /// The dead-letter queue. Default `<queue>.dlq`.
    #[serde(default)]
    pub dead_letter_queue: Option<String>,
    /// The dead-letter exchange (direct) the queue's `x-dead-letter-exchange` names. Default
    /// `<queue>.dlx`.
    #[serde(default)]
    pub dead_letter_exchange: Option<String>,
    /// Unacknowledged units the broker sends a consumer ahead (`basic.qos`). Default 32.
    #[serde(default = "default_prefetch")]
    pub prefetch: u16,
    /// The kind of queue: `quorum` (default; the broker counts deliveries) or `classic` (the
    /// count travels with the unit).
    #[serde(default)]
    pub queue_type: QueueType,
}

/// Which kind of RabbitMQ queue carries the units, which decides who keeps the delivery count.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum QueueType {
    /// A quorum queue: the broker counts deliveries (`x-delivery-count`) and dead-letters past
    /// `x-delivery-limit`.
    #[default]
    Quorum,
    /// A classic queue: no broker count; the consumer returns a failed unit as a confirmed copy
    /// carrying the incremented count, and dead-letters it at the bound itself.
    Classic,
}

fn default_delivery_limit() -> u32 {
    4
}

fn default_prefetch() -> u16 {
    32
}

impl RabbitTopology {
    /// The topology of `queue` with the defaults: delivery limit 4, dead letter `<queue>.dlq`,
    /// prefetch 32.
    pub fn new(queue: impl Into<String>) -> Self {
        RabbitTopology {
            queue: queue.into(),
            delivery_limit: default_delivery_limit(),
            dead_letter_queue: None,
            dead_letter_exchange: None,
            prefetch: default_prefetch(),
            queue_type: QueueType::Quorum,
        }
    }

    /// A classic queue instead of a quorum queue: the count travels with the unit
    /// ([`QueueType::Classic`]).
    pub fn classic(mut self) -> Self {
        self.queue_type = QueueType::Classic;
        self
    }

    /// Sets the `x-delivery-limit` (returns allowed; deliveries are `limit + 1`).
    pub fn delivery_limit(mut self, limit: u32) -> Self {
        self.delivery_limit = limit;
        self
    }

    /// Sets the limit from the most deliveries a unit gets (`n - 1` returns; `0` is read as 1).
    pub fn max_deliveries_of(mut self, n: u32) -> Self {
        self.delivery_limit = n.max(1) - 1;
        self
    }

    /// Sets the dead-letter queue's name.
    pub fn dead_letter_queue(mut self, name: impl Into<String>) -> Self {
        self.dead_letter_queue = Some(name.into());
        self
    }

    /// Sets the prefetch (at least 1).
    pub fn prefetch(mut self, n: u16) -> Self {
        self.prefetch = n.max(1);
        self
    }

    /// The dead-letter queue's name.
    pub fn dead_letter_queue_name(&self) -> String {
        self.dead_letter_queue
            .clone()
            .unwrap_or_else(|| format!("{}.dlq", self.queue))
    }

    /// The dead-letter exchange's name.
    pub fn dead_letter_exchange_name(&self) -> String {
        self.dead_letter_exchange
            .clone()
            .unwrap_or_else(|| format!("{}.dlx", self.queue))
    }

    /// The most deliveries a unit gets: `delivery_limit + 1`.
    pub fn max_deliveries(&self) -> NonZeroU32 {
        NonZeroU32::new(self.delivery_limit.saturating_add(1)).unwrap_or(NonZeroU32::MAX)
    }

    /// The consumed queue's arguments, exactly as declared.
    pub fn queue_arguments(&self) -> FieldTable {
        let mut args = FieldTable::default();
        if self.queue_type == QueueType::Classic {
            // No broker count, so no broker bound: the consumer enforces it (see the type docs).
            args.insert("x-queue-type".into(), text("classic"));
            return args;
        }
        args.insert("x-queue-type".into(), text("quorum"));
        args.insert(
            "x-delivery-limit".into(),
            AMQPValue::LongLongInt(i64::from(self.delivery_limit)),
        );
        args.insert(
            "x-dead-letter-exchange".into(),
            text(&self.dead_letter_exchange_name()),
        );
        args.insert(
            "x-dead-letter-routing-key".into(),
            text(&self.dead_letter_queue_name()),
        );
        // At-least-once dead-lettering: the broker keeps a unit until the dead letter confirmed
        // it, which requires `reject-publish` overflow.
        args.insert("x-dead-letter-strategy".into(), text("at-least-once"));
        args.insert("x-overflow".into(), text("reject-publish"));
        args
    }

    fn dead_letter_arguments(&self) -> FieldTable {
        let mut args = FieldTable::default();
        let kind = match self.queue_type {
            QueueType::Quorum => "quorum",
            QueueType::Classic => "classic",
        };
        args.insert("x-queue-type".into(), text(kind));
        args
    }

    /// Declares the dead-letter exchange and queue, their binding, and the consumed queue, on a
    /// channel of its own (a refused declaration closes its channel).
    ///
    /// Declaring against an existing queue with other arguments fails with a [`TopologyError`]
    /// naming the differing argument, as the broker reported it.
    pub async fn declare(&self, connection: &Connection) -> Result<(), TopologyError> {
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| TopologyError::new("opening a channel", "", e))?;
        let dlx = self.dead_letter_exchange_name();
        let dlq = self.dead_letter_queue_name();
        let durable = QueueDeclareOptions {
            durable: true,
            ..QueueDeclareOptions::default()
        };
        channel
            .exchange_declare(
                dlx.as_str().into(),
                ExchangeKind::Direct,
                ExchangeDeclareOptions {
                    durable: true,
                    ..ExchangeDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| TopologyError::new("declaring the dead-letter exchange", &dlx, e))?;
        channel
            .queue_declare(dlq.as_str().into(), durable, self.dead_letter_arguments())
            .await
            .map_err(|e| TopologyError::new("declaring the dead-letter queue", &dlq, e))?;
        channel
            .queue_bind(
                dlq.as_str().into(),
                dlx.as_str().into(),
                dlq.as_str().into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .map_err(|e| TopologyError::new("binding the dead-letter queue", &dlq, e))?;
        channel
            .queue_declare(self.queue.as_str().into(), durable, self.queue_arguments())
            .await
            .map_err(|e| TopologyError::new("declaring the queue", &self.queue, e))?;
        close_channel(&channel, "declared").await;
        Ok(())
    }
}

/// Declares `topology` ([`RabbitTopology::declare`]) through `connector`: a URL (dialled, then
/// closed) or your own [`Connection`] (left open), see [`RabbitConnector`].
///
/// ```no_run
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// use delivery::lapin::Connection;
/// use delivery::rabbitmq::RabbitTopology;
/// use std::sync::Arc;
///
/// let topology = RabbitTopology::new("orders");
/// delivery::rabbitmq::declare("amqp://guest:guest@127.0.0.1:5672/%2f", &topology).await?;
/// // The same through a connection of yours, which stays open for your own use.
/// let connection = Arc::new(Connection::connect("amqp://guest:guest@127.0.0.1:5672/%2f", Default::default()).await?);
/// delivery::rabbitmq::declare(connection.clone(), &topology).await?;
/// # Ok(()) }
/// ```
pub async fn declare(
    connector: impl Into<RabbitConnector>,
    topology: &RabbitTopology,
) -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let connection = connector.into().open().await?;
    let declared = topology.declare(&connection).await;
    connection.close("declared").await;
    Ok(declared?)
}

fn text(s: &str) -> AMQPValue {
    AMQPValue::LongString(LongString::from(s))
}

/// The topology could not be declared. When the broker refused a declaration because the queue
/// exists with other arguments (`PRECONDITION_FAILED`), [`TopologyError::argument`] names the
/// argument that differs.
#[derive(Debug, thiserror::Error)]
#[error("{doing} `{name}`: {detail}")]
#[non_exhaustive]
pub struct TopologyError {
    doing: &'static str,
    name: String,
    argument: Option<String>,
    detail: String,
    #[source]
    source: lapin::Error,
}

impl TopologyError {
    pub(super) fn new(doing: &'static str, name: &str, source: lapin::Error) -> Self {
        let text = source.to_string();
        let argument = text
            .split_once("inequivalent arg '")
            .and_then(|(_, rest)| rest.split_once('\''))
            .map(|(arg, _)| arg.to_owned());
        let detail = match &argument {
            Some(argument) => format!(
                "it already exists with a different `{argument}` ({text}); a queue's arguments are \
                 fixed once declared: change the settings back, or delete the queue (after \
                 draining it) to redeclare it"
            ),
            None => text,
        };
        TopologyError {
            doing,
            name: name.to_owned(),
            argument,
            detail,
            source,
        }
    }

    /// The argument the existing queue or exchange declares differently, if that is the cause.
    pub fn argument(&self) -> Option<&str> {
        self.argument.as_deref()
    }

    /// What kind of failure this is: [`Misconfigured`](TransportErrorKind::Misconfigured) when
    /// the broker holds the queue or exchange with other arguments, else as the client's error
    /// reads (a lost connection, access refused).
    pub fn kind(&self) -> TransportErrorKind {
        match self.argument {
            Some(_) => TransportErrorKind::Misconfigured,
            None => crate::error::LAPIN.kind_of(&self.source),
        }
    }
}
