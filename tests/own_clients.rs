//! Bring your own client: for RabbitMQ, Redis and Kafka, the source, the topology helper, the
//! publish side and the dead letter's view are built from a client the test made itself, with a
//! setting of its own the test can observe, and a consumer on it applies a unit, applies one that
//! failed once on its redelivery, and dead-letters a poison one — end to end against the real
//! servers (RabbitMQ, Redis, tansu; `AMQP_URL`, `REDIS_URL`, `KAFKA_BROKERS`). Fails, never
//! skips, when a server is unreachable.
//!
//! - RabbitMQ: the test's own lapin `Connection` carries everything; the transport never closes
//!   it, and once the test closes it, the source says it cannot redial it. A
//!   `RabbitConnector::factory` is asked for the dead letter's connections; a source made from a
//!   factory asks it again after its connection is cut (through a loopback proxy) and consumes on.
//! - Redis: the test's own `ConnectionManager` is on database 5, its own `redis::Client` on
//!   database 6; the streams appear there, and not in database 0 where the default URL would have
//!   put them.
//! - Kafka: the test's own rdkafka `ClientConfig` reaches every client: a property the broker
//!   refuses makes each fail, and with valid ones the whole path works.
#![cfg(all(feature = "lapin", feature = "redis", feature = "kafka"))]

#[path = "support/kafka.rs"]
mod kafka_support;
#[path = "support/proxy.rs"]
mod proxy;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::dead_letter::{DeadLetter, DeadLetters};
use delivery::kafka::client::ClientConfig;
use delivery::kafka::client::message::OwnedHeaders;
use delivery::kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
use delivery::lapin::{Connection, ConnectionProperties};
use delivery::rabbitmq::{
    ConfirmedPublisher, RabbitConnector, RabbitDeadLetters, RabbitSource, RabbitTopology,
};
use delivery::redis::client::aio::ConnectionManager;
use delivery::redis::{RedisConnector, RedisDeadLetters, RedisSource, RedisTopology};
use delivery::{
    Consumer, DeliveryCount, HandlerError, Json, State, Unit, consumer, disposition::Backoff,
    disposition::ReasonKind, transport::Source,
};
use kafka_support::{brokers, declare, producer, record, send, unique_name};

/// Order ids applied, with the delivery each was applied on.
#[derive(Clone, Default)]
struct Applied(Arc<Mutex<BTreeMap<String, u32>>>);

impl Applied {
    fn get(&self) -> BTreeMap<String, u32> {
        self.0.lock().unwrap().clone()
    }
}

#[derive(serde::Deserialize)]
struct Order {
    order_id: String,
    amount_cents: i64,
    /// Fails on its first delivery, as a dependency that was briefly down.
    #[serde(default)]
    flaky: bool,
}

/// Refuses a negative amount (poison), fails a flaky order once, applies the rest.
#[consumer]
async fn apply(
    Json(order): Json<Order>,
    count: DeliveryCount,
    State(applied): State<Applied>,
) -> Result<(), HandlerError> {
    if order.amount_cents < 0 {
        return Err(HandlerError::reject("negative amount"));
    }
    if order.flaky && count.get() == 1 {
        return Err(HandlerError::retry("the ledger is briefly down"));
    }
    applied
        .0
        .lock()
        .unwrap()
        .insert(order.order_id, count.get());
    Ok(())
}

/// The three units every transport gets: one applied, one failing once, one poison.
fn units() -> [Unit; 3] {
    [
        Unit::new("u-ok", r#"{"order_id":"o-1","amount_cents":100}"#),
        Unit::new(
            "u-flaky",
            r#"{"order_id":"o-2","amount_cents":50,"flaky":true}"#,
        ),
        Unit::new("u-poison", r#"{"order_id":"o-3","amount_cents":-5}"#),
    ]
}

/// Runs `apply` on `source` until both good orders are applied and `dead` holds one unit; then
/// checks what was applied and what was dead-lettered.
async fn consume_and_check<S: Source>(
    what: &str,
    source: S,
    dead: &(impl DeadLetters + Clone + 'static),
) {
    let applied = Applied::default();
    let done = {
        let (applied, dead) = (applied.clone(), dead.clone());
        async move {
            loop {
                let count = dead.count().await.unwrap_or(0);
                if applied.get().len() >= 2 && count >= 1 {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        }
    };
    let run = Consumer::new(source)
        .state(applied.clone())
        .backoff(Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(500),
        ))
        .shutdown_on(done)
        .run(apply);
    if tokio::time::timeout(Duration::from_secs(90), run)
        .await
        .is_err()
    {
        panic!(
            "{what}: not done within 90 s: applied {:?}, dead {:?}",
            applied.get(),
            dead.count().await
        );
    }
    assert_eq!(
        applied.get(),
        BTreeMap::from([("o-1".into(), 1), ("o-2".into(), 2)]),
        "{what}: o-1 applied on its first delivery, o-2 on its second"
    );
    let listed: Vec<DeadLetter> = dead.list(10, None).await.unwrap().records;
    assert_eq!(listed.len(), 1, "{what}: one dead letter: {listed:?}");
    let poison = &listed[0];
    assert_eq!(poison.id().as_str(), "u-poison", "{what}");
    assert_eq!(poison.reason, Some(ReasonKind::Rejected), "{what}");
    assert_eq!(poison.detail, "negative amount", "{what}");
    assert_eq!(
        poison.unit.payload().as_ref(),
        br#"{"order_id":"o-3","amount_cents":-5}"#,
        "{what}: intact"
    );
    assert_eq!(
        poison.delivery_count().get(),
        1,
        "{what}: dead-lettered directly"
    );
}

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_on_your_own_connection_and_factory() {
    let url = amqp_url();
    let properties = ConnectionProperties::default().with_connection_name("own-clients".into());
    let connection = Arc::new(
        Connection::connect(&url, properties)
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {url}: {e}")),
    );
    let queue = format!("own-clients-{}", std::process::id());
    let topology = RabbitTopology::new(&queue).delivery_limit(4);
    for name in [queue.clone(), topology.dead_letter_queue_name()] {
        let channel = connection.create_channel().await.unwrap();
        let _ = channel
            .queue_delete(name.as_str().into(), Default::default())
            .await;
    }
    delivery::rabbitmq::declare(connection.clone(), &topology)
        .await
        .unwrap();
    assert!(
        connection.status().connected(),
        "declare leaves your connection open"
    );

    let publisher = ConfirmedPublisher::new(connection.clone());
    for unit in units() {
        publisher
            .publish(
                &queue,
                unit.payload(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    }
    // The dead letter's view dials through a factory of the test's: it is asked for connections.
    let dials = Arc::new(AtomicUsize::new(0));
    let factory = RabbitConnector::factory({
        let (url, dials) = (url.clone(), dials.clone());
        move || {
            dials.fetch_add(1, Ordering::SeqCst);
            let url = url.clone();
            async move { Connection::connect(&url, ConnectionProperties::default()).await }
        }
    });
    let dead = RabbitDeadLetters::new(factory, &topology);
    let source = RabbitSource::connect(connection.clone(), topology.clone())
        .await
        .unwrap();
    consume_and_check("RabbitMQ", source, &dead).await;
    assert!(
        dials.load(Ordering::SeqCst) > 0,
        "the dead letter's view asked the factory"
    );
    assert!(
        connection.status().connected(),
        "the source and the publisher leave your connection open"
    );
    let channel = connection.create_channel().await.unwrap();
    let ready = channel
        .queue_declare(
            queue.as_str().into(),
            delivery::lapin::options::QueueDeclareOptions {
                passive: true,
                ..Default::default()
            },
            Default::default(),
        )
        .await
        .unwrap();
    assert_eq!(ready.message_count(), 0, "everything settled");

    // Your connection closed: the source cannot dial it again, and says so on each receive.
    let mut source = RabbitSource::connect(connection.clone(), topology)
        .await
        .unwrap();
    publisher.close().await;
    // (lapin refuses to close while a channel is still closing: tried until it is closed. A
    // close can also wait forever for the broker's answer, as the library's own closes bound it:
    // each attempt is bounded too.)
    for _ in 0..50 {
        let closing = connection.close(200, "test over".into());
        if matches!(
            tokio::time::timeout(Duration::from_secs(1), closing).await,
            Ok(Ok(()))
        ) || !connection.status().connected()
        {
            break;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    assert!(!connection.status().connected(), "closed");
    let mut errors = Vec::new();
    for _ in 0..2 {
        let received = tokio::time::timeout(Duration::from_secs(10), source.receive())
            .await
            .expect("a receive on a closed connection ends");
        match received {
            Ok(_) => panic!("a unit from a closed connection"),
            Err(error) => errors.push(error.to_string()),
        }
    }
    assert!(
        errors[1].contains("cannot dial it again") && errors[1].contains("factory"),
        "{errors:?}"
    );
}

/// A source made from your factory reconnects by itself: every connection it carries cut (a
/// loopback proxy between it and the broker), it asks the factory again and goes on consuming.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_a_factory_is_asked_again_after_a_loss() {
    let url = amqp_url();
    let uri: delivery::lapin::uri::AMQPUri = url.parse().unwrap();
    let upstream = std::net::ToSocketAddrs::to_socket_addrs(&(
        uri.authority.host.as_str(),
        uri.authority.port,
    ))
    .unwrap()
    .next()
    .unwrap();
    let proxy = proxy::Proxy::start(upstream).await;
    let mut through = uri.clone();
    through.authority.host = proxy.address().ip().to_string();
    through.authority.port = proxy.address().port();

    let queue = format!("own-clients-factory-{}", std::process::id());
    let topology = RabbitTopology::new(&queue);
    let direct = Arc::new(delivery::rabbitmq::connect(&url).await.unwrap());
    for name in [queue.clone(), topology.dead_letter_queue_name()] {
        let channel = direct.create_channel().await.unwrap();
        let _ = channel
            .queue_delete(name.as_str().into(), Default::default())
            .await;
    }
    delivery::rabbitmq::declare(direct.clone(), &topology)
        .await
        .unwrap();
    let publisher = ConfirmedPublisher::new(direct.clone());
    let publish = async |id: &str, order: &str| {
        let unit = Unit::new(id, format!(r#"{{"order_id":"{order}","amount_cents":1}}"#));
        publisher
            .publish(
                &queue,
                unit.payload(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    };

    let dials = Arc::new(AtomicUsize::new(0));
    let factory = RabbitConnector::factory({
        let dials = dials.clone();
        move || {
            dials.fetch_add(1, Ordering::SeqCst);
            let uri = through.clone();
            async move { Connection::connect_uri(uri, ConnectionProperties::default()).await }
        }
    });
    let source = RabbitSource::connect(factory, topology).await.unwrap();
    let applied = Applied::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(source)
            .state(applied.clone())
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(apply),
    );
    let applied_within = async |order: &str, what: &str| {
        let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
        while !applied.get().contains_key(order) {
            assert!(
                tokio::time::Instant::now() < deadline,
                "{what}: {order} not applied within 60 s (dials {})",
                dials.load(Ordering::SeqCst)
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    };
    publish("u-before", "o-10").await;
    applied_within("o-10", "before the loss").await;
    let dialled_before = dials.load(Ordering::SeqCst);
    assert!(
        proxy.drop_all(Duration::from_secs(1)) >= 1,
        "the source's connection went through the proxy"
    );
    publish("u-after", "o-11").await;
    applied_within("o-11", "after the loss").await;
    assert!(
        dials.load(Ordering::SeqCst) > dialled_before,
        "the factory was asked again ({dialled_before} before the loss)"
    );
    let _ = stop.send(());
    consumer.await.unwrap();
}

fn redis_url(db: u32) -> String {
    let base = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let base = match base.rsplit_once('/') {
        Some((host, path)) if !path.is_empty() && path.bytes().all(|b| b.is_ascii_digit()) => {
            host.to_owned()
        }
        _ => base.trim_end_matches('/').to_owned(),
    };
    format!("{base}/{db}")
}

/// Everything through `connector`, made from the test's own client on database `db`: the
/// streams must land there, and nothing in database 0.
async fn redis_case(what: &str, db: u32, connector: impl Fn(&str) -> RedisConnector) {
    let url = redis_url(db);
    let manager =
        ConnectionManager::new(delivery::redis::client::Client::open(url.as_str()).unwrap())
            .await
            .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    let stream = format!("own-clients-{what}-{}", std::process::id());
    let topology = RedisTopology::new(&stream, "billing")
        .max_deliveries(4)
        .claim_idle(Duration::from_millis(300))
        .block(Duration::from_millis(200));
    let dlq = topology.dead_letter_stream_name();
    let mut db0 = delivery::redis::connect(&redis_url(0)).await.unwrap();
    for connection in [&mut manager.clone(), &mut db0] {
        let _: () = redis::cmd("DEL")
            .arg(&stream)
            .arg(&dlq)
            .query_async(connection)
            .await
            .unwrap();
    }
    delivery::redis::declare(connector(&url), &topology)
        .await
        .unwrap();
    for unit in units() {
        delivery::redis::publish(&mut manager.clone(), &stream, &unit)
            .await
            .unwrap();
    }
    let dead = RedisDeadLetters::new(connector(&url), &topology).unwrap();
    let source = RedisSource::connect(connector(&url), topology)
        .await
        .unwrap();
    consume_and_check(what, source, &dead).await;

    let exists = |mut connection: ConnectionManager, key: String| async move {
        redis::cmd("EXISTS")
            .arg(key)
            .query_async::<u32>(&mut connection)
            .await
            .unwrap()
    };
    assert_eq!(
        exists(manager, dlq.clone()).await,
        1,
        "{what}: db {db} has the dead letter"
    );
    assert_eq!(
        exists(db0.clone(), stream).await,
        0,
        "{what}: nothing in db 0"
    );
    assert_eq!(exists(db0, dlq).await, 0, "{what}: nothing in db 0");
}

/// Your `ConnectionManager` (on database 5): every command on it, reads polling.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_on_your_own_connection_manager() {
    let url = redis_url(5);
    let client = delivery::redis::client::Client::open(url.as_str()).unwrap();
    let manager = ConnectionManager::new(client)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    redis_case("manager", 5, |_| manager.clone().into()).await;
}

/// Your `redis::Client` (on database 6): the transport's own connections opened from it,
/// blocking reads included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_from_your_own_client() {
    redis_case("client", 6, |url| {
        RedisConnector::client(delivery::redis::client::Client::open(url).unwrap())
    })
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_with_your_own_client_config() {
    let topic = unique_name("own-clients");
    let mut yours = ClientConfig::new();
    yours
        .set("bootstrap.servers", brokers())
        .set("client.id", "own-clients-test")
        .set("socket.timeout.ms", "20000");
    let topology = KafkaTopology::new(&topic, format!("{topic}-group"))
        .partitions(1)
        .commit_interval(Duration::from_millis(100))
        .with_client_config(&yours);
    let every_client = topology.client_config(&brokers());
    assert_eq!(every_client.get("client.id"), Some("own-clients-test"));
    assert_eq!(every_client.get("socket.timeout.ms"), Some("20000"));

    // A property of yours the clients refuse: each client the transport makes fails on it, so
    // each is built from your configuration.
    let mut refused = yours.clone();
    refused.set("security.protocol", "carrier-pigeon");
    let bad = topology.clone().with_client_config(&refused);
    let on_it = |what: &str, error: String| {
        assert!(error.contains("security.protocol"), "{what}: {error}");
    };
    on_it(
        "declare",
        bad.declare(&brokers()).await.unwrap_err().to_string(),
    );
    on_it(
        "the consumer",
        KafkaSource::connect(&brokers(), bad.clone())
            .await
            .err()
            .expect("refused")
            .to_string(),
    );
    on_it(
        "the dead letter's view",
        KafkaDeadLetters::new(&brokers(), &bad)
            .count()
            .await
            .unwrap_err()
            .to_string(),
    );
    on_it(
        "the relay's sink",
        delivery::kafka::KafkaSink::from_topology(&brokers(), &bad)
            .unwrap_err()
            .to_string(),
    );

    declare(&topology).await;
    let producer = producer();
    for unit in units() {
        let payload = unit.payload().clone();
        send(
            &producer,
            record(
                &topic,
                unit.id().as_str(),
                &payload[..],
                OwnedHeaders::new(),
            ),
        )
        .await;
    }
    let dead = KafkaDeadLetters::new(&brokers(), &topology);
    let source = KafkaSource::connect(&brokers(), topology).await.unwrap();
    consume_and_check("Kafka", source, &dead).await;
}
