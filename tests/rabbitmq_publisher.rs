//! The confirmed publisher behind dead letters, classic-queue returns, redrives and the relay's
//! sink, against the real broker: a publish the broker returns as unroutable fails, and only that
//! one, even when it is pipelined with confirmed publishes in flight at the same time — whether
//! their `message_id`s differ, are all the same, or are absent.
#![cfg(feature = "lapin")]

#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use delivery::lapin::BasicProperties;
use delivery::rabbitmq::{ConfirmedPublisher, RabbitTopology};
use futures_util::future::join_all;
use process::amqp_url;

/// How the publishes of one round name their message.
#[derive(Clone, Copy)]
enum Ids {
    /// Each its own `message_id`.
    Distinct,
    /// All the same `message_id` (two deliveries of one unit copied at once).
    Same,
    /// No `message_id` at all.
    Absent,
}

/// Rounds of `width` publishes in flight together, every other one to a queue that does not
/// exist: the broker returns those (`mandatory`) and confirms the rest, so each outcome must
/// follow the publish's own destination, not where a return or a multiple ack landed.
async fn returns_follow_their_publish(test: &str, ids: Ids, rounds: usize) {
    let url = amqp_url();
    let topology = RabbitTopology::new(format!("rmq-publisher-{test}-{}", std::process::id()));
    let missing = format!("rmq-publisher-{test}-missing-{}", std::process::id());
    let connection = rabbitmq::fresh(&url, &topology).await;
    rabbitmq::delete_queues(&connection, [missing.as_str()]).await;

    let publisher = ConfirmedPublisher::new(url.as_str());
    let width = 64;
    let mut delivered = 0u32;
    let mut wrong = Vec::new();
    for round in 0..rounds {
        let outcomes = join_all((0..width).map(|i| {
            let publisher = publisher.clone();
            let queue = if i % 2 == 0 {
                topology.queue.clone()
            } else {
                missing.clone()
            };
            async move {
                let id = format!("p-{round}-{i}");
                let properties = match ids {
                    Ids::Distinct => BasicProperties::default().with_message_id(id.as_str().into()),
                    Ids::Same => BasicProperties::default().with_message_id("same".into()),
                    Ids::Absent => BasicProperties::default(),
                };
                let result = publisher.publish(&queue, id.as_bytes(), properties).await;
                (i, id, result)
            }
        }))
        .await;
        for (i, id, result) in outcomes {
            if i % 2 == 0 {
                match result {
                    Ok(()) => delivered += 1,
                    Err(error) => wrong.push(format!("{id} to an existing queue failed: {error}")),
                }
            } else {
                match result {
                    Ok(()) => wrong.push(format!("{id} to a missing queue was confirmed")),
                    Err(error) if !error.to_string().contains("unroutable") => {
                        wrong.push(format!("{id}: unexpected error {error}"))
                    }
                    Err(_) => {}
                }
            }
        }
    }
    publisher.close().await;
    assert!(
        wrong.is_empty(),
        "{} wrong outcomes: {wrong:#?}",
        wrong.len()
    );

    let (depth, _) = rabbitmq::queue_counts(&connection, &topology.queue).await;
    assert_eq!(
        depth,
        u64::from(delivered),
        "every confirmed publish is in the queue"
    );
    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_publish_fails_and_its_neighbours_do_not() {
    returns_follow_their_publish("distinct", Ids::Distinct, 400).await;
}

/// Publishes with one key (exchange, routing key, `message_id`) go one at a time, so a return
/// names exactly one of them even when every publish carries the same `message_id`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_are_attributed_among_publishes_with_the_same_message_id() {
    returns_follow_their_publish("same", Ids::Same, 50).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn returns_are_attributed_among_publishes_without_a_message_id() {
    returns_follow_their_publish("absent", Ids::Absent, 50).await;
}
