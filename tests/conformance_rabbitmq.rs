//! The transport conformance suite against the real RabbitMQ (127.0.0.1:5672, or `AMQP_URL`).
//! Fails, never skips, when the broker is unreachable.
#![cfg(feature = "lapin")]

use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use delivery::Unit;
use delivery::lapin::options::{BasicPublishOptions, QueueDeleteOptions};
use delivery::lapin::types::{AMQPValue, FieldTable, LongString};
use delivery::lapin::{BasicProperties, Connection};
use delivery::rabbitmq::{
    ConfirmedPublisher, RabbitDeadLetters, RabbitSource, RabbitTopology, TopologyError,
};
use delivery::testing::conformance::{self, Fixture};

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

struct Rabbit {
    url: String,
    suffix: String,
    publisher: ConfirmedPublisher,
    declared: Mutex<Vec<RabbitTopology>>,
    /// Classic queues: the count travels with the unit.
    classic: bool,
}

impl Rabbit {
    async fn new() -> Self {
        static RUN: AtomicU64 = AtomicU64::new(0);
        let url = amqp_url();
        // Fail loudly if the broker is not there.
        let connection = Connection::connect(&url, Default::default())
            .await
            .unwrap_or_else(|e| {
                panic!("RabbitMQ unreachable at {url}: {e} (scripts/services.sh starts it)")
            });
        let _ = connection.close(200, "ok".into()).await;
        Rabbit {
            publisher: ConfirmedPublisher::new(url.as_str()),
            url,
            suffix: format!(
                "{}-{}",
                std::process::id(),
                RUN.fetch_add(1, Ordering::Relaxed)
            ),
            declared: Mutex::new(Vec::new()),
            classic: false,
        }
    }

    async fn classic() -> Self {
        Rabbit {
            classic: true,
            ..Rabbit::new().await
        }
    }

    fn topology(&self, name: &str) -> RabbitTopology {
        let topology = RabbitTopology::new(format!("{name}.{}", self.suffix));
        if self.classic {
            topology.classic()
        } else {
            topology
        }
    }

    async fn delete(&self, topology: &RabbitTopology) {
        let connection = Connection::connect(&self.url, Default::default())
            .await
            .unwrap();
        for queue in [topology.queue.clone(), topology.dead_letter_queue_name()] {
            let channel = connection.create_channel().await.unwrap();
            let _ = channel
                .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
                .await;
        }
        let channel = connection.create_channel().await.unwrap();
        let _ = channel
            .exchange_delete(
                topology.dead_letter_exchange_name().as_str().into(),
                Default::default(),
            )
            .await;
        let _ = connection.close(200, "ok".into()).await;
    }

    async fn cleanup(&self) {
        let declared = std::mem::take(&mut *self.declared.lock().unwrap());
        for topology in declared {
            self.delete(&topology).await;
        }
    }
}

impl Fixture for Rabbit {
    type Source = RabbitSource;
    type DeadLetters = RabbitDeadLetters;

    async fn declare(&self, name: &str, max_deliveries: u32) {
        let topology = self.topology(name).max_deliveries_of(max_deliveries);
        self.delete(&topology).await;
        delivery::rabbitmq::declare(&self.url, &topology)
            .await
            .unwrap();
        self.declared.lock().unwrap().push(topology);
    }

    async fn publish(&self, name: &str, unit: Unit) {
        let mut headers = FieldTable::default();
        for (k, v) in unit.headers().iter() {
            headers.insert(
                k.into(),
                AMQPValue::LongString(LongString::from(v.to_vec())),
            );
        }
        let properties = BasicProperties::default()
            .with_message_id(unit.id().as_str().into())
            .with_delivery_mode(2)
            .with_headers(headers);
        self.publisher
            .publish(&self.topology(name).queue, unit.payload(), properties)
            .await
            .unwrap();
    }

    async fn consume(&self, name: &str) -> RabbitSource {
        let topology = self
            .declared
            .lock()
            .unwrap()
            .iter()
            .find(|t| t.queue == self.topology(name).queue)
            .cloned()
            .expect("declared before consumed");
        RabbitSource::connect(self.url.as_str(), topology)
            .await
            .unwrap()
    }

    async fn dead_letter(&self, name: &str) -> RabbitDeadLetters {
        let topology = self.topology(name);
        let declared = self
            .declared
            .lock()
            .unwrap()
            .iter()
            .find(|t| t.queue == topology.queue)
            .cloned();
        // The declared topology, with its limit (where the broker dead-letters past it).
        RabbitDeadLetters::new(self.url.as_str(), &declared.unwrap_or(topology))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_passes_the_conformance_suite() {
    let rabbit = Rabbit::new().await;
    conformance::run_all(&rabbit).await;
    rabbit.cleanup().await;
}

/// A classic queue keeps no delivery count: the count travels with the unit (a confirmed copy
/// carrying it replaces each returned unit), and the suite passes unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_queue_passes_the_conformance_suite() {
    let rabbit = Rabbit::classic().await;
    conformance::run_all(&rabbit).await;
    rabbit.cleanup().await;
}

/// Declaring against an existing queue with a different argument fails, naming the argument.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclaring_with_a_different_limit_names_the_argument() {
    let rabbit = Rabbit::new().await;
    let topology = rabbit.topology("redeclare").delivery_limit(3);
    rabbit.delete(&topology).await;
    delivery::rabbitmq::declare(&rabbit.url, &topology)
        .await
        .unwrap();
    // Same arguments: fine.
    delivery::rabbitmq::declare(&rabbit.url, &topology)
        .await
        .unwrap();
    let error = delivery::rabbitmq::declare(&rabbit.url, &topology.clone().delivery_limit(7))
        .await
        .unwrap_err();
    let error = error
        .downcast_ref::<TopologyError>()
        .expect("a topology error");
    assert_eq!(error.argument(), Some("x-delivery-limit"), "{error}");
    let text = error.to_string();
    assert!(
        text.contains("x-delivery-limit") && text.contains(&topology.queue),
        "{text}"
    );
    rabbit.delete(&topology).await;
}

/// Units published without a `message_id` get an id from their content, the same on every
/// delivery; the first delivery's count is 1 whatever the broker's header says.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_without_message_id_keeps_one_id_across_deliveries() {
    use delivery::{Settle, Source};
    let rabbit = Rabbit::new().await;
    let topology = rabbit.topology("no-id");
    rabbit.delete(&topology).await;
    delivery::rabbitmq::declare(&rabbit.url, &topology)
        .await
        .unwrap();
    let connection = Connection::connect(&rabbit.url, Default::default())
        .await
        .unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .basic_publish(
            "".into(),
            topology.queue.as_str().into(),
            BasicPublishOptions::default(),
            b"{}",
            BasicProperties::default(),
        )
        .await
        .unwrap();
    let mut source = RabbitSource::connect(rabbit.url.as_str(), topology.clone())
        .await
        .unwrap();
    let (first, handle) = source.receive().await.unwrap().unwrap();
    assert_eq!(first.delivery_count().get(), 1);
    assert!(
        first.id().as_str().starts_with("sha256:"),
        "{:?}",
        first.id()
    );
    handle
        .give_back(&first, std::time::Duration::ZERO)
        .await
        .unwrap();
    let (second, handle) = source.receive().await.unwrap().unwrap();
    assert_eq!(second.id(), first.id());
    assert_eq!(second.delivery_count().get(), 2);
    handle.ack(&second).await.unwrap();
    drop(source);
    let _ = connection.close(200, "ok".into()).await;
    rabbit.delete(&topology).await;
}
