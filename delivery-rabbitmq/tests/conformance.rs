//! The transport conformance suite against the real RabbitMQ (127.0.0.1:5672, or `AMQP_URL`).
//! Fails, never skips, when the broker is unreachable.
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};

use delivery_core::testing::conformance::{self, Fixture};
use delivery_core::unit::Unit;
use delivery_rabbitmq::lapin::BasicProperties;
use delivery_rabbitmq::lapin::options::{BasicPublishOptions, QueueDeleteOptions};
use delivery_rabbitmq::lapin::types::FieldTable;
use delivery_rabbitmq::{
    ConfirmedPublisher, RabbitDeadLetters, RabbitSource, RabbitTopology, TopologyError,
};

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
        let connection = delivery_rabbitmq::connect(&url).await.unwrap_or_else(|e| {
            panic!("RabbitMQ unreachable at {url}: {e} (scripts/services.sh starts it)")
        });
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            connection.close(200, "ok".into()),
        )
        .await;
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
        let connection = delivery_rabbitmq::connect(&self.url).await.unwrap();
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
        let _ = tokio::time::timeout(
            std::time::Duration::from_secs(5),
            connection.close(200, "ok".into()),
        )
        .await;
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

    /// A classic queue's count travels with the unit: a release carries it unchanged.
    fn counts_released_deliveries(&self) -> bool {
        !self.classic
    }

    /// RabbitMQ keeps no order: only the producer's stamp orders units.
    fn stamps_units(&self) -> bool {
        false
    }

    async fn declare(&self, name: &str, max_deliveries: u32) {
        let topology = self.topology(name).max_deliveries_of(max_deliveries);
        self.delete(&topology).await;
        delivery_rabbitmq::declare(&self.url, &topology)
            .await
            .unwrap();
        self.declared.lock().unwrap().push(topology);
    }

    async fn publish(&self, name: &str, unit: Unit) {
        let properties = delivery_rabbitmq::properties_of(&unit);
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
    passes_the_suite(Rabbit::new().await).await;
}

/// Every check of the suite, the console's included, then the queues removed.
async fn passes_the_suite(rabbit: Rabbit) {
    conformance::run_all(&rabbit).await;
    conformance::operates_the_dead_letter_in_the_console(
        &rabbit,
        delivery_axum::admin::testing::console,
    )
    .await;
    rabbit.cleanup().await;
}

/// A classic queue keeps no delivery count: the count travels with the unit (a confirmed copy
/// carrying it replaces each returned unit), and the suite passes unchanged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_queue_passes_the_conformance_suite() {
    passes_the_suite(Rabbit::classic().await).await;
}

/// Declaring against an existing queue with a different argument fails, naming the argument.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redeclaring_with_a_different_limit_names_the_argument() {
    let rabbit = Rabbit::new().await;
    let topology = rabbit.topology("redeclare").delivery_limit(3);
    rabbit.delete(&topology).await;
    delivery_rabbitmq::declare(&rabbit.url, &topology)
        .await
        .unwrap();
    // Same arguments: fine.
    delivery_rabbitmq::declare(&rabbit.url, &topology)
        .await
        .unwrap();
    let error = delivery_rabbitmq::declare(&rabbit.url, &topology.clone().delivery_limit(7))
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
    use delivery_core::{transport::Settle, transport::Source};
    let rabbit = Rabbit::new().await;
    let topology = rabbit.topology("no-id");
    rabbit.delete(&topology).await;
    delivery_rabbitmq::declare(&rabbit.url, &topology)
        .await
        .unwrap();
    let connection = delivery_rabbitmq::connect(&rabbit.url).await.unwrap();
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
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        connection.close(200, "ok".into()),
    )
    .await;
    rabbit.delete(&topology).await;
}

/// Fails a first delivery, signalling each run.
#[delivery_macros::consumer(crate = delivery_core)]
async fn fails_first(
    delivery_core::extract::State(seen): delivery_core::extract::State<
        std::sync::Arc<tokio::sync::Notify>,
    >,
    count: delivery_core::unit::DeliveryCount,
) -> Result<(), delivery_core::HandlerError> {
    seen.notify_one();
    if count.get() == 1 {
        return Err(delivery_core::HandlerError::retry(
            "fails on its first delivery",
        ));
    }
    Ok(())
}

/// RabbitMQ has no delayed requeue, so the runtime holds a failed unit for its backoff. Stopped
/// meanwhile, it gives the unit back before `run` returns — not after, not never — counts it once
/// in the report, and the broker counts one delivery: the next consumer sees count 2.
async fn a_held_return_is_given_back_at_shutdown(rabbit: &Rabbit) {
    use delivery_core::{Consumer, disposition::Backoff};
    use std::sync::Arc;
    use std::time::Duration;
    let name = "held";
    rabbit.declare(name, 5).await;
    rabbit.publish(name, Unit::new("held-1", "{}")).await;
    let seen = Arc::new(tokio::sync::Notify::new());
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let run = tokio::spawn(
        Consumer::new(rabbit.consume(name).await)
            .state(seen.clone())
            .backoff(Backoff::exponential(
                Duration::from_secs(600),
                Duration::from_secs(600),
            ))
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(fails_first),
    );
    seen.notified().await;
    stop.send(()).unwrap();
    // A hang here would be a return waiting out its 10 minutes at shutdown.
    let report = tokio::time::timeout(Duration::from_secs(60), run)
        .await
        .expect("shutdown does not wait out a backoff")
        .unwrap();
    assert_eq!(report.returned, 1, "{report:?}");
    assert_eq!(report.acked + report.settle_failed, 0, "{report:?}");
    let topology = rabbit.topology(name);
    let connection = delivery_rabbitmq::connect(&rabbit.url).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    let ready = channel
        .queue_declare(
            topology.queue.as_str().into(),
            delivery_rabbitmq::lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            FieldTable::default(),
        )
        .await
        .unwrap()
        .message_count();
    assert_eq!(ready, 1, "given back before `run` returned");
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        connection.close(200, "ok".into()),
    )
    .await;

    let report = Consumer::new(rabbit.consume(name).await)
        .state(seen.clone())
        .shutdown_on(async move {
            seen.notified().await;
            tokio::time::sleep(Duration::from_millis(200)).await;
        })
        .run(counts_second)
        .await;
    assert_eq!(report.acked, 1, "the second delivery counted 2: {report:?}");
}

/// Applies only a second delivery.
#[delivery_macros::consumer(crate = delivery_core)]
async fn counts_second(
    delivery_core::extract::State(seen): delivery_core::extract::State<
        std::sync::Arc<tokio::sync::Notify>,
    >,
    count: delivery_core::unit::DeliveryCount,
) -> Result<(), delivery_core::HandlerError> {
    seen.notify_one();
    if count.get() != 2 {
        return Err(delivery_core::HandlerError::reject(format!(
            "delivery {count}, not 2"
        )));
    }
    Ok(())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_return_is_given_back_at_shutdown_quorum_and_classic() {
    for rabbit in [Rabbit::new().await, Rabbit::classic().await] {
        a_held_return_is_given_back_at_shutdown(&rabbit).await;
        rabbit.cleanup().await;
    }
}

/// Refuses every unit, counting the runs.
#[delivery_macros::consumer(crate = delivery_core)]
async fn refuses(
    delivery_core::extract::State(runs): delivery_core::extract::State<std::sync::Arc<AtomicU64>>,
) -> Result<(), delivery_core::HandlerError> {
    runs.fetch_add(1, Ordering::SeqCst);
    Err(delivery_core::HandlerError::reject("refused"))
}

/// A dead letter that cannot take the unit (its queue deleted: the copy comes back unroutable)
/// leaves the unit returned, never acknowledged — and returned after a pause, not at once: the
/// broker would deliver it again at once, and a consumer would spin on it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failing_dead_letter_is_not_a_hot_loop() {
    use delivery_core::Consumer;
    use std::sync::Arc;
    use std::time::Duration;
    let rabbit = Rabbit::classic().await;
    rabbit.declare("no-dlq", 1000).await;
    let topology = rabbit.topology("no-dlq");
    let connection = delivery_rabbitmq::connect(&rabbit.url).await.unwrap();
    let channel = connection.create_channel().await.unwrap();
    channel
        .queue_delete(
            topology.dead_letter_queue_name().as_str().into(),
            QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
    rabbit.publish("no-dlq", Unit::new("refused-1", "{}")).await;
    let runs = Arc::new(AtomicU64::new(0));
    let report = Consumer::new(rabbit.consume("no-dlq").await)
        .state(runs.clone())
        .shutdown_on(tokio::time::sleep(Duration::from_secs(3)))
        .run(refuses)
        .await;
    let runs = runs.load(Ordering::SeqCst);
    // One move to the dead letter a second at most: a hot loop makes hundreds in 3 s.
    assert!((1..=5).contains(&runs), "{runs} runs in 3 s: {report:?}");
    assert_eq!(report.acked + report.dead_lettered, 0, "{report:?}");
    let (ready, _) = {
        let q = channel
            .queue_declare(
                topology.queue.as_str().into(),
                delivery_rabbitmq::lapin::options::QueueDeclareOptions {
                    passive: true,
                    ..Default::default()
                },
                FieldTable::default(),
            )
            .await
            .unwrap();
        (q.message_count(), q.consumer_count())
    };
    assert_eq!(ready, 1, "the unit is still in its queue");
    let _ = tokio::time::timeout(
        std::time::Duration::from_secs(5),
        connection.close(200, "ok".into()),
    )
    .await;
    rabbit.cleanup().await;
}

/// A queue the topology calls quorum but the broker holds as classic (it has no
/// `x-delivery-count`, so a failed unit would be returned forever) is refused at connect, with
/// the differing argument named.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_topology_over_a_classic_queue_is_refused_at_connect() {
    let rabbit = Rabbit::classic().await;
    rabbit.declare("really-classic", 5).await;
    let quorum = RabbitTopology::new(rabbit.topology("really-classic").queue.clone());
    let error = RabbitSource::connect(rabbit.url.as_str(), quorum)
        .await
        .err()
        .expect("refused")
        .to_string();
    // The broker names the first argument that differs (the classic queue has no dead-letter
    // exchange, no type, no limit).
    assert!(
        error.contains("already exists with a different") && error.contains("really-classic"),
        "{error}"
    );
    rabbit.cleanup().await;
}
