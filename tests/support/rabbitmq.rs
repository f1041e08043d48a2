//! RabbitMQ set-up the tests share: a freshly declared topology, a queue's counts, deleting queues.
#![allow(dead_code)] // each test binary uses part of it

use delivery::lapin::Connection;
use delivery::lapin::options::{QueueDeclareOptions, QueueDeleteOptions};
use delivery::rabbitmq::RabbitTopology;

/// Connects to `url`, failing the test with the URL when the broker is unreachable.
pub async fn connect(url: &str) -> Connection {
    delivery::rabbitmq::connect(url)
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {url}: {e}"))
}

/// Deletes `queues` where they exist.
pub async fn delete_queues<'a>(connection: &Connection, queues: impl IntoIterator<Item = &'a str>) {
    for queue in queues {
        let ch = connection.create_channel().await.unwrap();
        let _ = ch
            .queue_delete(queue.into(), QueueDeleteOptions::default())
            .await;
    }
}

/// The topology's queue and dead-letter queue, deleted (with what an earlier run left in them)
/// and declared again; the connection is returned for the test's own use.
pub async fn fresh(url: &str, topology: &RabbitTopology) -> Connection {
    let connection = connect(url).await;
    delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
    delivery::rabbitmq::declare(url, topology).await.unwrap();
    connection
}

/// Messages ready in `queue`, and consumers subscribed to it.
pub async fn queue_counts(connection: &Connection, queue: &str) -> (u64, u64) {
    let ch = connection.create_channel().await.unwrap();
    let q = ch
        .queue_declare(
            queue.into(),
            QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    (u64::from(q.message_count()), u64::from(q.consumer_count()))
}

/// Publishes a unit `{"id": id}` per id to `queue`, in order, each confirmed.
pub async fn publish_ids(
    publisher: &delivery::rabbitmq::ConfirmedPublisher,
    queue: &str,
    ids: impl IntoIterator<Item = impl AsRef<str>>,
) {
    for id in ids {
        let id = id.as_ref();
        let unit = delivery::Unit::new(id, format!("{{\"id\":\"{id}\"}}"));
        publisher
            .publish(
                queue,
                unit.payload(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    }
}
