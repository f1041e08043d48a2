//! Publishing under a publisher confirm, on a connection of its own that is reopened after a loss.

use std::sync::Arc;

use lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use lapin::{BasicProperties, Channel, Confirmation, Connection};
use tokio::sync::Mutex;

use crate::transport::TransportError;

/// Publishes to a queue and waits for the broker's confirm: `Ok` only for a `basic.ack` without a
/// returned message (the publish is mandatory, so an unroutable one comes back and fails).
///
/// It keeps its own connection (publishing and consuming on separate connections, so flow control
/// on one never stalls the other), opened on first use and reopened after a failure.
///
/// **One publish in flight per channel.** AMQP does not say which publish a `basic.return`
/// belongs to: lapin hands it to whichever confirm it settles next, and a `basic.ack` with
/// `multiple` settles several in no set order. With two publishes in flight on one channel, one
/// to a missing queue, the missing queue's publish could be reported confirmed — and the unit it
/// carried acknowledged and lost. So each publish takes a channel of its own from a pool (opening
/// one when none is idle) and gives it back after its confirm; concurrent publishes use
/// concurrent channels.
#[derive(Clone)]
pub struct ConfirmedPublisher {
    url: Arc<str>,
    pool: Arc<Mutex<Pool>>,
}

#[derive(Default)]
struct Pool {
    connection: Option<Connection>,
    /// Channels in confirm mode with no publish in flight.
    idle: Vec<Channel>,
}

impl std::fmt::Debug for ConfirmedPublisher {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ConfirmedPublisher").finish_non_exhaustive()
    }
}

impl ConfirmedPublisher {
    /// A publisher to the broker at `url`; connects on first use.
    pub fn new(url: impl Into<Arc<str>>) -> Self {
        ConfirmedPublisher {
            url: url.into(),
            pool: Arc::new(Mutex::new(Pool::default())),
        }
    }

    /// An idle channel, or a new one (on a new connection if the old one is gone).
    async fn take(&self) -> Result<Channel, TransportError> {
        let mut pool = self.pool.lock().await;
        let pool = &mut *pool;
        if !pool
            .connection
            .as_ref()
            .is_some_and(|c| c.status().connected())
        {
            pool.idle.clear();
            pool.connection = None;
            pool.connection = Some(super::connect(&self.url).await?);
        }
        while let Some(channel) = pool.idle.pop() {
            if channel.status().connected() {
                return Ok(channel);
            }
        }
        let connection = pool.connection.as_ref().expect("connected above");
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| TransportError::new("opening a publishing channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| TransportError::new("enabling publisher confirms", e))?;
        Ok(channel)
    }

    /// Gives back a channel whose publish was settled.
    async fn give_back(&self, channel: Channel) {
        self.pool.lock().await.idle.push(channel);
    }

    /// Publishes `body` with `properties` to `queue` through the default exchange, and waits for
    /// the broker's confirm.
    pub async fn publish(
        &self,
        queue: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), TransportError> {
        let channel = self.take().await?;
        let confirm = match channel
            .basic_publish(
                "".into(),
                queue.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..BasicPublishOptions::default()
                },
                body,
                properties,
            )
            .await
        {
            Ok(confirm) => confirm,
            // The channel is not given back: a later publish opens a fresh one.
            Err(error) => return Err(TransportError::new("publishing", error)),
        };
        let confirmation = match confirm.await {
            Ok(confirmation) => confirmation,
            Err(error) => {
                return Err(TransportError::new(
                    "waiting for the publisher confirm",
                    error,
                ));
            }
        };
        // Settled, and no return can be waiting for a later publish: the channel may be reused.
        self.give_back(channel).await;
        match confirmation {
            Confirmation::Ack(None) => Ok(()),
            Confirmation::Ack(Some(returned)) => Err(TransportError::msg(
                "publishing",
                format!(
                    "the broker returned the unit as unroutable to `{queue}` ({} {}): does the queue exist?",
                    returned.reply_code, returned.reply_text
                ),
            )),
            Confirmation::Nack(_) => Err(TransportError::msg(
                "publishing",
                format!("the broker refused the unit (basic.nack) for `{queue}`"),
            )),
            Confirmation::NotRequested => Err(TransportError::msg(
                "publishing",
                "the channel is not in confirm mode",
            )),
        }
    }

    /// Closes the connection, if open.
    pub async fn close(&self) {
        let mut pool = self.pool.lock().await;
        pool.idle.clear();
        if let Some(connection) = pool.connection.take() {
            let _ = connection.close(200, "closing".into()).await;
        }
    }
}
