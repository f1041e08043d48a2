//! The confirmed publisher behind dead letters and classic-queue returns, against the real
//! broker: a publish the broker returns as unroutable fails, and only that one, even when it
//! shares the connection with confirmed publishes in flight at the same time.
#![cfg(feature = "lapin")]

#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use delivery::lapin::BasicProperties;
use delivery::rabbitmq::{ConfirmedPublisher, RabbitTopology};
use futures_util::future::join_all;
use process::amqp_url;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_returned_publish_fails_and_its_neighbours_do_not() {
    let url = amqp_url();
    let topology = RabbitTopology::new(format!("rmq-publisher-{}", std::process::id()));
    let missing = format!("rmq-publisher-missing-{}", std::process::id());
    let connection = rabbitmq::fresh(&url, &topology).await;
    rabbitmq::delete_queues(&connection, [missing.as_str()]).await;

    // Rounds of publishes in flight together, every other one to a queue that does not exist:
    // the broker returns those (`mandatory`) and confirms the rest, so each outcome must follow
    // the publish's own destination, not where a return or a multiple ack landed.
    let publisher = ConfirmedPublisher::new(url.as_str());
    let (rounds, width) = (400, 64);
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
                let result = publisher
                    .publish(
                        &queue,
                        id.as_bytes(),
                        BasicProperties::default().with_message_id(id.as_str().into()),
                    )
                    .await;
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
