//! The operator's side of the RabbitMQ dead letter, against the real broker: count, peek without
//! consuming, redrive one unit under the same message id.
#![cfg(feature = "lapin")]

#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use delivery::ReasonKind;
use delivery::lapin::BasicProperties;
use delivery::lapin::options::BasicGetOptions;
use delivery::lapin::types::{AMQPValue, FieldTable, LongString};
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitTopology};
use process::amqp_url;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn peek_leaves_units_and_redrive_moves_one_under_its_id() {
    let url = amqp_url();
    let topology = RabbitTopology::new(format!("rmq-dlq-{}", std::process::id()));
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    for id in ["d-1", "d-2"] {
        let mut headers = FieldTable::default();
        headers.insert(
            "tenant".into(),
            AMQPValue::LongString(LongString::from("acme")),
        );
        headers.insert(
            "x-dead-letter-reason".into(),
            AMQPValue::LongString(LongString::from("rejected")),
        );
        headers.insert(
            "x-dead-letter-source".into(),
            AMQPValue::LongString(topology.queue.as_str().into()),
        );
        headers.insert(
            "x-dead-letter-delivery-count".into(),
            AMQPValue::LongLongInt(1),
        );
        publisher
            .publish(
                &topology.dead_letter_queue_name(),
                format!("body of {id}").as_bytes(),
                BasicProperties::default()
                    .with_message_id(id.into())
                    .with_headers(headers),
            )
            .await
            .unwrap();
    }
    let dead = RabbitDeadLetters::new(url.as_str(), &topology);
    assert_eq!(dead.count().await.unwrap(), 2);
    let peeked = dead.peek(10).await.unwrap();
    assert_eq!(peeked.len(), 2);
    assert_eq!(peeked[0].reason, Some(ReasonKind::Rejected));
    assert_eq!(peeked[0].source.as_deref(), Some(topology.queue.as_str()));
    assert_eq!(dead.count().await.unwrap(), 2, "peek consumed nothing");

    let report = dead.redrive(|d| d.id.as_str() == "d-2").await.unwrap();
    assert_eq!(report.moved.len(), 1);
    assert_eq!(report.kept, 1);
    assert_eq!(dead.count().await.unwrap(), 1);

    let ch = connection.create_channel().await.unwrap();
    let back = ch
        .basic_get(
            topology.queue.as_str().into(),
            BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
        .expect("the redriven unit is back in its source queue");
    assert_eq!(
        back.delivery
            .properties
            .message_id()
            .as_ref()
            .map(|s| s.as_str()),
        Some("d-2")
    );
    assert_eq!(back.delivery.data, b"body of d-2");
    let headers = back
        .delivery
        .properties
        .headers()
        .clone()
        .unwrap_or_default();
    assert!(
        headers.contains_key("tenant"),
        "the unit's own headers stay"
    );
    assert!(
        !headers.contains_key("x-dead-letter-reason"),
        "bookkeeping headers go: {headers:?}"
    );

    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
    publisher.close().await;
}
