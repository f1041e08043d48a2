//! The raw lapin publisher the relay benches measure against: confirm mode, up to a window of
//! confirms outstanding, nothing read from or written to a database.

use std::collections::VecDeque;

use delivery::lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use delivery::lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

/// A channel of its own on `connection`, in confirm mode.
pub async fn confirm_channel(connection: &Connection) -> Channel {
    let channel = connection.create_channel().await.unwrap();
    channel
        .confirm_select(ConfirmSelectOptions::default())
        .await
        .unwrap();
    channel
}

/// Publishes each `(message_id, body)` of `messages` to `exchange` with `routing_key`,
/// persistent and `mandatory`, on `channel` (in confirm mode), with at most `window` confirms
/// outstanding; every confirm must be an ack with nothing returned.
pub async fn raw_pipelined(
    channel: &Channel,
    window: usize,
    exchange: &str,
    routing_key: &str,
    messages: impl IntoIterator<Item = (String, Vec<u8>)>,
) {
    let mut outstanding: VecDeque<PublisherConfirm> = VecDeque::with_capacity(window);
    for (id, body) in messages {
        if outstanding.len() == window {
            let confirm = outstanding.pop_front().unwrap();
            assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
        }
        let confirm = channel
            .basic_publish(
                exchange.into(),
                routing_key.into(),
                BasicPublishOptions {
                    mandatory: true,
                    ..Default::default()
                },
                &body,
                BasicProperties::default()
                    .with_message_id(id.into())
                    .with_delivery_mode(2),
            )
            .await
            .unwrap();
        outstanding.push_back(confirm);
    }
    for confirm in outstanding {
        assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
    }
}
