//! The raw lapin publisher the relay benches measure against: confirm mode, up to a window of
//! confirms outstanding, nothing read from or written to a database.

use std::collections::VecDeque;

use delivery::lapin::options::{BasicPublishOptions, ConfirmSelectOptions};
use delivery::lapin::types::{AMQPValue, FieldTable};
use delivery::lapin::{BasicProperties, Channel, Confirmation, Connection, PublisherConfirm};

/// What each raw publish carries beside its body, `message_id` and `delivery_mode` 2.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Properties {
    /// Nothing else.
    Bare,
    /// What `RabbitSink` puts on every publish of an outbox record: `content_type`
    /// `application/json` and the record's stamp (its `seq`, here its position from 1) in the
    /// `x-delivery-stamp` header. RabbitMQ decodes the properties of every publish, so the same
    /// message on the wire is the same work for the broker.
    LikeTheSink,
}

impl Properties {
    fn of(self, id: String, position: usize) -> BasicProperties {
        let properties = BasicProperties::default()
            .with_message_id(id.into())
            .with_delivery_mode(2);
        match self {
            Properties::Bare => properties,
            Properties::LikeTheSink => {
                let mut headers = FieldTable::default();
                headers.insert(
                    delivery::headers::STAMP.into(),
                    AMQPValue::LongLongInt(position as i64 + 1),
                );
                properties
                    .with_content_type("application/json".into())
                    .with_headers(headers)
            }
        }
    }
}

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
/// outstanding, each with `properties`; every confirm must be an ack with nothing returned.
pub async fn raw_pipelined(
    channel: &Channel,
    window: usize,
    exchange: &str,
    routing_key: &str,
    properties: Properties,
    messages: impl IntoIterator<Item = (String, Vec<u8>)>,
) {
    let mut outstanding: VecDeque<PublisherConfirm> = VecDeque::with_capacity(window);
    for (position, (id, body)) in messages.into_iter().enumerate() {
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
                properties.of(id, position),
            )
            .await
            .unwrap();
        outstanding.push_back(confirm);
    }
    for confirm in outstanding {
        assert!(matches!(confirm.await.unwrap(), Confirmation::Ack(None)));
    }
}
