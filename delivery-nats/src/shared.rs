//! The state a [`NatsSource`](crate::source::NatsSource) shares with its pull and its handles: the
//! connection, the stream's names, and the acknowledgements sent on a delivery's reply subject.

use async_nats::jetstream::{self, AckKind};
use async_nats::{Client, Subject};

use crate::codec;
use delivery_core::transport::TransportError;

pub(crate) struct Shared {
    pub(crate) client: Client,
    pub(crate) context: jetstream::Context,
    pub(crate) stream: String,
    /// The durable consumer's name: recorded on its dead letters, so a redrive is for it alone.
    pub(crate) durable: String,
    pub(crate) dead_letter_stream: String,
    pub(crate) dead_letter_subject: Subject,
    /// [`NatsTopology::confirm_acks`](crate::topology::NatsTopology::confirm_acks).
    pub(crate) confirm_acks: bool,
}

impl Shared {
    /// Whether `message` is a unit redriven from the dead letter of another durable consumer
    /// ([`delivery_core::headers::REDRIVE_GROUP`]): this one applied it when it was first delivered, so
    /// it is acknowledged, not handled.
    pub(crate) async fn redriven_for_another(&self, message: &jetstream::Message) -> bool {
        let Some(group) = codec::last(
            message.headers.as_ref(),
            delivery_core::headers::REDRIVE_GROUP,
        ) else {
            return false;
        };
        if group == self.durable {
            return false;
        }
        if let Some(reply) = message.reply.clone()
            && let Err(error) = self
                .send(
                    reply,
                    AckKind::Ack,
                    "acknowledging a redrive for another durable",
                )
                .await
        {
            // Delivered again after `ack_wait`, and skipped again.
            tracing::warn!(stream = %self.stream, %error,
                "acknowledging a unit redriven for another durable consumer failed");
        }
        tracing::debug!(stream = %self.stream, durable = %self.durable, redriven_for = group,
            "a unit redriven for another durable consumer; acknowledged, not handled");
        true
    }

    /// Sends `kind` on a delivery's reply subject without waiting for JetStream's reply (as
    /// async-nats `Message::ack` does): queued on the connection, flushed with its neighbours.
    pub(crate) async fn send(
        &self,
        reply: Subject,
        kind: AckKind,
        what: &'static str,
    ) -> Result<(), TransportError> {
        self.client
            .publish(reply, kind.into())
            .await
            .map_err(|e| crate::error::NATS.error(what, e))
    }

    /// A final settlement (`+ACK`, `+TERM`): sent as [`send`](Self::send) does, or, with
    /// [`confirm_acks`](crate::topology::NatsTopology::confirm_acks), as a request whose reply is JetStream's
    /// confirmation (async-nats `Message::double_ack`).
    pub(crate) async fn settle(
        &self,
        reply: Subject,
        kind: AckKind,
        what: &'static str,
    ) -> Result<(), TransportError> {
        if !self.confirm_acks {
            return self.send(reply, kind, what).await;
        }
        self.client
            .request(reply, kind.into())
            .await
            .map(drop)
            .map_err(|e| crate::error::NATS.error(what, e))
    }
}
