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
#[derive(Clone)]
pub struct ConfirmedPublisher {
    url: Arc<str>,
    channel: Arc<Mutex<Option<(Connection, Channel)>>>,
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
            channel: Arc::new(Mutex::new(None)),
        }
    }

    async fn channel(&self) -> Result<Channel, TransportError> {
        let mut slot = self.channel.lock().await;
        if let Some((connection, channel)) = slot.as_ref()
            && connection.status().connected()
            && channel.status().connected()
        {
            return Ok(channel.clone());
        }
        *slot = None;
        let connection = super::connect(&self.url).await?;
        let channel = connection
            .create_channel()
            .await
            .map_err(|e| TransportError::new("opening a publishing channel", e))?;
        channel
            .confirm_select(ConfirmSelectOptions::default())
            .await
            .map_err(|e| TransportError::new("enabling publisher confirms", e))?;
        *slot = Some((connection, channel.clone()));
        Ok(channel)
    }

    async fn forget(&self) {
        *self.channel.lock().await = None;
    }

    /// Publishes `body` with `properties` to `queue` through the default exchange, and waits for
    /// the broker's confirm.
    pub async fn publish(
        &self,
        queue: &str,
        body: &[u8],
        properties: BasicProperties,
    ) -> Result<(), TransportError> {
        let channel = self.channel().await?;
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
            Err(error) => {
                self.forget().await;
                return Err(TransportError::new("publishing", error));
            }
        };
        match confirm.await {
            Ok(Confirmation::Ack(None)) => Ok(()),
            Ok(Confirmation::Ack(Some(returned))) => Err(TransportError::msg(
                "publishing",
                format!(
                    "the broker returned the unit as unroutable to `{queue}` ({} {}): does the queue exist?",
                    returned.reply_code, returned.reply_text
                ),
            )),
            Ok(Confirmation::Nack(_)) => Err(TransportError::msg(
                "publishing",
                format!("the broker refused the unit (basic.nack) for `{queue}`"),
            )),
            Ok(Confirmation::NotRequested) => Err(TransportError::msg(
                "publishing",
                "the channel is not in confirm mode",
            )),
            Err(error) => {
                self.forget().await;
                Err(TransportError::new(
                    "waiting for the publisher confirm",
                    error,
                ))
            }
        }
    }

    /// Closes the connection, if open.
    pub async fn close(&self) {
        if let Some((connection, _)) = self.channel.lock().await.take() {
            let _ = connection.close(200, "closing".into()).await;
        }
    }
}
