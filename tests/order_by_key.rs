//! Per-key order under concurrency (`Consumer::order_by_key`): units with the same key run one at
//! a time, in arrival order, while other keys run concurrently; waiting units are released at
//! shutdown. On the in-memory broker, on RabbitMQ (the key in the `x-delivery-key` header) and on
//! Kafka (the record's key), against the real servers.

use std::collections::{HashMap, HashSet};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::consumer::WhenReturned;
use delivery::memory::{MemoryBroker, QueueConfig};
use delivery::{Consumer, HandlerError, Headers, Json, State, Unit, consumer};
use serde::Deserialize;

#[derive(Deserialize)]
struct Step {
    key: String,
    seq: u32,
    #[serde(default)]
    fail_once: bool,
}

/// What the handler saw: each key's steps in the order they ran, whether two units of one key
/// ever ran at once, and the most units that ran at once.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Book>>);

#[derive(Default)]
struct Book {
    steps: HashMap<String, Vec<u32>>,
    running: HashSet<String>,
    overlaps: Vec<String>,
    now: usize,
    most: usize,
    failed: HashSet<(String, u32)>,
}

impl Seen {
    fn steps(&self, key: &str) -> Vec<u32> {
        self.0
            .lock()
            .unwrap()
            .steps
            .get(key)
            .cloned()
            .unwrap_or_default()
    }

    fn total(&self) -> usize {
        self.0.lock().unwrap().steps.values().map(Vec::len).sum()
    }
}

#[consumer]
async fn record(Json(step): Json<Step>, State(seen): State<Seen>) -> Result<(), HandlerError> {
    {
        let mut book = seen.0.lock().unwrap();
        if !book.running.insert(step.key.clone()) {
            book.overlaps.push(format!("{}#{}", step.key, step.seq));
        }
        book.now += 1;
        book.most = book.most.max(book.now);
    }
    // Units take different times, so that a key's later unit would overtake an earlier one if
    // nothing held it back.
    let pause = u64::from((step.seq * 7 + step.key.len() as u32) % 5);
    tokio::time::sleep(Duration::from_millis(1 + pause)).await;
    let mut book = seen.0.lock().unwrap();
    book.running.remove(&step.key);
    book.now -= 1;
    if step.fail_once && book.failed.insert((step.key.clone(), step.seq)) {
        return Err(HandlerError::retry(std::io::Error::other("once")));
    }
    book.steps.entry(step.key).or_default().push(step.seq);
    Ok(())
}

fn step(key: &str, seq: u32) -> Unit {
    Unit::new(
        format!("{key}-{seq}"),
        format!(r#"{{"key":"{key}","seq":{seq}}}"#),
    )
    .with_headers(Headers::from_pairs([(
        delivery::headers::KEY,
        key.to_owned(),
    )]))
}

/// Every key's steps ran in order, none overlapping another of its key, and keys ran together.
fn assert_in_order(seen: &Seen, keys: &[String], per_key: u32) {
    let book = seen.0.lock().unwrap();
    assert!(
        book.overlaps.is_empty(),
        "two units of one key ran at once: {:?}",
        book.overlaps
    );
    for key in keys {
        let steps = book.steps.get(key).cloned().unwrap_or_default();
        assert_eq!(
            steps,
            (0..per_key).collect::<Vec<_>>(),
            "key {key} in arrival order"
        );
    }
    assert!(
        book.most > 1,
        "other keys ran concurrently (at most {} at once)",
        book.most
    );
}

/// Consumes `source` at concurrency 16 ordered by key until `seen` holds `total` units (at most a
/// minute), then `linger` more.
async fn ordered_until<Src: delivery::transport::Source>(
    source: Src,
    seen: &Seen,
    total: usize,
    linger: Duration,
    when_returned: WhenReturned,
) -> delivery::consumer::Report {
    let stop = {
        let seen = seen.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while seen.total() < total && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(linger).await;
        }
    };
    Consumer::new(source)
        .state(seen.clone())
        .concurrency(16)
        .order_by_key()
        .when_returned(when_returned)
        .backoff(delivery::disposition::Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(100),
        ))
        .shutdown_on(stop)
        .run(record)
        .await
}

#[tokio::test]
async fn the_in_memory_broker_runs_each_key_in_order_and_keys_concurrently() {
    let broker = MemoryBroker::new();
    broker.declare("ledger", QueueConfig::default()).unwrap();
    // Fewer keys than units at once: each key's next unit is always within reach.
    let keys: Vec<String> = (0..8).map(|k| format!("acct-{k}")).collect();
    for seq in 0..25 {
        for key in &keys {
            broker.publish("ledger", step(key, seq));
        }
    }
    let seen = Seen::default();
    let report = Consumer::new(broker.consume("ledger"))
        .state(seen.clone())
        .concurrency(16)
        .order_by_key()
        .shutdown_on(broker.idle("ledger"))
        .run(record)
        .await;
    assert_eq!(report.acked, 200);
    assert_in_order(&seen, &keys, 25);
    assert!(
        seen.0.lock().unwrap().most <= 16,
        "never more than the concurrency"
    );
}

#[tokio::test]
async fn units_without_a_key_run_unordered_beside_keyed_ones() {
    let broker = MemoryBroker::new();
    broker.declare("mixed", QueueConfig::default()).unwrap();
    for seq in 0..20 {
        broker.publish("mixed", step("one", seq));
        broker.publish(
            "mixed",
            Unit::new(
                format!("free-{seq}"),
                format!(r#"{{"key":"free-{seq}","seq":0}}"#),
            ),
        );
    }
    let seen = Seen::default();
    let report = Consumer::new(broker.consume("mixed"))
        .state(seen.clone())
        .concurrency(8)
        .order_by_key()
        .shutdown_on(broker.idle("mixed"))
        .run(record)
        .await;
    assert_eq!(report.acked, 40);
    assert_in_order(&seen, &["one".to_owned()], 20);
}

#[tokio::test]
async fn a_key_of_your_own_orders_by_what_it_finds() {
    let broker = MemoryBroker::new();
    broker.declare("ids", QueueConfig::default()).unwrap();
    let keys: Vec<String> = (0..5).map(|k| format!("k{k}")).collect();
    for seq in 0..8 {
        for key in &keys {
            // No header: the key is the id's prefix.
            broker.publish(
                "ids",
                Unit::new(
                    format!("{key}/{seq}"),
                    format!(r#"{{"key":"{key}","seq":{seq}}}"#),
                ),
            );
        }
    }
    let seen = Seen::default();
    Consumer::new(broker.consume("ids"))
        .state(seen.clone())
        .concurrency(8)
        .order_by(|unit: &Unit| {
            unit.id()
                .as_str()
                .split_once('/')
                .map(|(key, _)| key.to_owned())
        })
        .shutdown_on(broker.idle("ids"))
        .run(record)
        .await;
    assert_in_order(&seen, &keys, 8);
}

#[tokio::test]
async fn a_returned_unit_lets_its_keys_later_units_pass_and_comes_back_behind_them() {
    let broker = MemoryBroker::new();
    broker.declare("retry", QueueConfig::default()).unwrap();
    broker.publish(
        "retry",
        Unit::new("a-0", r#"{"key":"a","seq":0,"fail_once":true}"#)
            .with_headers(Headers::from_pairs([(delivery::headers::KEY, "a")])),
    );
    for seq in 1..4 {
        broker.publish("retry", step("a", seq));
    }
    let seen = Seen::default();
    let report = Consumer::new(broker.consume("retry"))
        .state(seen.clone())
        .concurrency(4)
        .order_by_key()
        .backoff(delivery::disposition::Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_millis(50),
        ))
        .shutdown_on(broker.idle("retry"))
        .run(record)
        .await;
    assert_eq!((report.acked, report.returned), (4, 1));
    assert_eq!(
        seen.steps("a"),
        [1, 2, 3, 0],
        "documented: rule 4's guard orders the effect"
    );
}

/// A key's first unit, failing on its first delivery.
fn failing_once(key: &str) -> Unit {
    Unit::new(
        format!("{key}-0"),
        format!(r#"{{"key":"{key}","seq":0,"fail_once":true}}"#),
    )
    .with_headers(Headers::from_pairs([(
        delivery::headers::KEY,
        key.to_owned(),
    )]))
}

#[tokio::test]
async fn held_a_returned_unit_keeps_its_keys_later_units_waiting_until_it_is_applied() {
    let broker = MemoryBroker::new();
    broker.declare("hold", QueueConfig::default()).unwrap();
    broker.publish("hold", failing_once("a"));
    for seq in 1..4 {
        broker.publish("hold", step("a", seq));
        broker.publish("hold", step("b", seq - 1));
    }
    let seen = Seen::default();
    let report = Consumer::new(broker.consume("hold"))
        .state(seen.clone())
        .concurrency(4)
        .order_by_key()
        .when_returned(WhenReturned::Hold)
        .backoff(delivery::disposition::Backoff::exponential(
            Duration::from_millis(50),
            Duration::from_millis(50),
        ))
        .shutdown_on(broker.idle("hold"))
        .run(record)
        .await;
    assert_eq!((report.acked, report.returned), (7, 1), "{report:?}");
    assert_eq!(seen.steps("a"), [0, 1, 2, 3], "a-1..3 waited for a-0");
    assert_eq!(seen.steps("b"), [0, 1, 2], "b did not wait for a");
}

#[tokio::test]
async fn held_keys_filling_the_concurrency_give_back_their_newest_units_and_keep_their_order() {
    let broker = MemoryBroker::new();
    broker.declare("full", QueueConfig::default()).unwrap();
    // Two keys fail first; their later units alone are more than the concurrency.
    for key in ["a", "b"] {
        broker.publish("full", failing_once(key));
    }
    for seq in 1..10 {
        for key in ["a", "b", "c"] {
            broker.publish("full", step(key, seq));
        }
    }
    broker.publish("full", step("c", 0));
    let seen = Seen::default();
    let report = Consumer::new(broker.consume("full"))
        .state(seen.clone())
        .concurrency(4)
        .order_by_key()
        .when_returned(WhenReturned::Hold)
        .backoff(delivery::disposition::Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(100),
        ))
        .shutdown_on(broker.idle("full"))
        .run(record)
        .await;
    assert_eq!(report.acked, 30, "{report:?}");
    assert!(
        report.returned > 2,
        "units were given back to make room: {report:?}"
    );
    assert_eq!(seen.steps("a"), (0..10).collect::<Vec<_>>());
    assert_eq!(seen.steps("b"), (0..10).collect::<Vec<_>>());
    assert_eq!(
        seen.steps("c").len(),
        10,
        "an unheld key ran through: {:?}",
        seen.steps("c")
    );
    assert!(seen.0.lock().unwrap().overlaps.is_empty());
}

#[tokio::test]
async fn units_waiting_behind_their_key_are_released_unstarted_at_shutdown() {
    let broker = MemoryBroker::new();
    broker.declare("slow", QueueConfig::default()).unwrap();
    for seq in 0..6 {
        broker.publish("slow", step("only", seq));
    }
    let seen = Seen::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(broker.consume("slow"))
            .state(seen.clone())
            .concurrency(8)
            .order_by_key()
            .drain_deadline(Duration::from_secs(5))
            .shutdown_on(async {
                let _ = stopped.await;
            })
            .run(record),
    );
    while seen.total() < 1 {
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    stop.send(()).unwrap();
    let report = consumer.await.unwrap();
    let applied = seen.total() as u64;
    assert_eq!(report.acked, applied);
    assert_eq!(report.acked + report.returned, 6, "{report:?}");
    assert!(
        report.returned > 0,
        "some waited and were released: {report:?}"
    );
    assert_eq!(
        broker.depth("slow") as u64,
        report.returned,
        "released, not lost"
    );
    assert_eq!(seen.steps("only"), (0..applied as u32).collect::<Vec<_>>());
}

/// `per_key` units for each of `keys` keys, interleaved; the first unit of the first `failing`
/// keys fails on its first delivery.
fn keyed_units(keys: &[String], per_key: u32, failing: usize) -> impl Iterator<Item = Unit> + '_ {
    (0..per_key).flat_map(move |seq| {
        keys.iter().enumerate().map(move |(k, key)| {
            if seq == 0 && k < failing {
                failing_once(key)
            } else {
                step(key, seq)
            }
        })
    })
}

fn keys(n: usize) -> Vec<String> {
    (0..n).map(|k| format!("acct-{k}")).collect()
}

#[cfg(feature = "lapin")]
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

/// Publishes `keys` x `per_key` units (the first `failing` keys' first units failing once) to a
/// fresh queue with `prefetch`, consumes them ordered by key with `when_returned`, and checks
/// every key's order.
#[cfg(feature = "lapin")]
async fn rabbitmq_ordered(
    name: &str,
    keys: &[String],
    per_key: u32,
    failing: usize,
    prefetch: u16,
    when_returned: WhenReturned,
) {
    use delivery::rabbitmq::{ConfirmedPublisher, RabbitSource, RabbitTopology};

    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let topology = RabbitTopology::new(format!("{name}-{}", std::process::id())).prefetch(prefetch);
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    for unit in keyed_units(keys, per_key, failing) {
        publisher
            .publish(
                &topology.queue,
                unit.payload(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    }
    let source = RabbitSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let seen = Seen::default();
    let total = keys.len() * per_key as usize;
    let report = ordered_until(source, &seen, total, Duration::ZERO, when_returned).await;
    assert_eq!(report.acked, total as u64, "{report:?}");
    assert_in_order(&seen, keys, per_key);
    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
    publisher.close().await;
}

#[cfg(feature = "lapin")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_runs_each_key_in_order_by_its_header() {
    rabbitmq_ordered("order-by-key", &keys(20), 8, 0, 32, WhenReturned::Pass).await;
}

#[cfg(feature = "lapin")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_holds_a_key_for_its_returned_unit_within_the_prefetch() {
    // The prefetch no more than the concurrency: units waiting behind held keys can take every
    // delivery the broker allows, and a returned unit must still come back.
    rabbitmq_ordered("order-hold", &keys(6), 12, 2, 16, WhenReturned::Hold).await;
}

#[cfg(feature = "kafka")]
#[path = "support/kafka.rs"]
mod kafka_support;

/// As [`rabbitmq_ordered`], on a Kafka topic of two partitions keyed by the record's key (no
/// header of ours); then every partition is committed to its end. Returns the run's report.
#[cfg(feature = "kafka")]
async fn kafka_ordered(
    name: &str,
    keys: &[String],
    per_key: u32,
    failing: usize,
    when_returned: WhenReturned,
) -> delivery::consumer::Report {
    use delivery::kafka::client::message::{Header, OwnedHeaders};
    use delivery::kafka::client::producer::FutureRecord;
    use delivery::kafka::{KafkaSource, KafkaTopology};
    use kafka_support::{brokers, committed_at, declare, end_of, producer, send, unique_name};

    let topic = unique_name(name);
    let group = format!("{topic}-group");
    let topology = KafkaTopology::new(&topic, &group)
        .partitions(2)
        .commit_interval(Duration::from_millis(100));
    declare(&topology).await;
    let producer = producer();
    for unit in keyed_units(keys, per_key, failing) {
        let key = unit.headers().get(delivery::headers::KEY).unwrap().clone();
        let key = std::str::from_utf8(&key).unwrap();
        let message = FutureRecord::to(&topic)
            .key(key)
            .payload(&unit.payload()[..])
            .headers(OwnedHeaders::new().insert(Header {
                key: delivery::headers::MESSAGE_ID,
                value: Some(unit.id().as_str()),
            }));
        send(&producer, message).await;
    }
    let source = KafkaSource::connect(&brokers(), topology.clone())
        .await
        .unwrap();
    let seen = Seen::default();
    let total = keys.len() * per_key as usize;
    // Time for the last commit after the last unit.
    let report = ordered_until(
        source,
        &seen,
        total,
        Duration::from_millis(500),
        when_returned,
    )
    .await;
    assert_eq!(report.acked, total as u64, "{report:?}");
    assert_in_order(&seen, keys, per_key);
    for partition in 0..2 {
        assert_eq!(
            committed_at(&topic, &group, partition).await,
            Some(end_of(&topic, partition).await),
            "partition {partition}: committed up to its end once every unit settled"
        );
    }
    report
}

#[cfg(feature = "kafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_runs_each_record_key_in_order_and_commits_everything_once_done() {
    kafka_ordered("order-by-key", &keys(12), 6, 0, WhenReturned::Pass).await;
}

#[cfg(feature = "kafka")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_holds_a_record_key_for_its_returned_unit() {
    let report = kafka_ordered("order-hold", &keys(6), 6, 2, WhenReturned::Hold).await;
    assert_eq!(report.returned, 2, "{report:?}");
}

/// What a timed unit asks of [`timed`]: sleep this long, and fail its first delivery.
#[derive(Deserialize)]
struct Timed {
    #[serde(default)]
    sleep_ms: u64,
    #[serde(default)]
    fail_first: bool,
}

/// Every run of [`timed`]: the unit's id and its delivery count, in the order they began.
#[derive(Clone, Default)]
struct Runs(Arc<Mutex<Vec<(String, u32)>>>);

impl Runs {
    fn all(&self) -> Vec<(String, u32)> {
        self.0.lock().unwrap().clone()
    }

    fn of(&self, id: &str) -> Vec<u32> {
        self.all()
            .into_iter()
            .filter(|(run, _)| run == id)
            .map(|(_, count)| count)
            .collect()
    }
}

#[consumer]
async fn timed(
    id: delivery::UnitId,
    count: delivery::DeliveryCount,
    Json(script): Json<Timed>,
    State(runs): State<Runs>,
) -> Result<(), HandlerError> {
    runs.0
        .lock()
        .unwrap()
        .push((id.as_str().to_owned(), count.get()));
    tokio::time::sleep(Duration::from_millis(script.sleep_ms)).await;
    if script.fail_first && count.get() == 1 {
        return Err(HandlerError::retry(std::io::Error::other("first delivery")));
    }
    Ok(())
}

/// Unit `id` of `key`, sleeping `sleep_ms` (and failing its first delivery if `fail_first`).
#[cfg(any(feature = "nats", feature = "redis", feature = "lapin"))]
fn timed_unit(id: &str, key: &str, sleep_ms: u64, fail_first: bool) -> Unit {
    Unit::new(
        id,
        format!(r#"{{"sleep_ms":{sleep_ms},"fail_first":{fail_first}}}"#),
    )
    .with_headers(Headers::from_pairs([(
        delivery::headers::KEY,
        key.to_owned(),
    )]))
}

/// Consumes `source` at concurrency 4 ordered by key until `done` holds (at most a minute), then
/// `linger` more: long enough for a unit not kept alive to be delivered again.
#[cfg(any(feature = "nats", feature = "redis"))]
async fn timed_until<Src: delivery::transport::Source>(
    source: Src,
    runs: &Runs,
    when_returned: WhenReturned,
    done: impl Fn(&Runs) -> bool + Send + 'static,
    linger: Duration,
) -> delivery::consumer::Report {
    let stop = {
        let runs = runs.clone();
        async move {
            let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
            while !done(&runs) && tokio::time::Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
            tokio::time::sleep(linger).await;
        }
    };
    Consumer::new(source)
        .state(runs.clone())
        .concurrency(4)
        .max_deliveries(5)
        .order_by_key()
        .when_returned(when_returned)
        .backoff(delivery::disposition::Backoff::exponential(
            Duration::from_millis(100),
            Duration::from_millis(100),
        ))
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(stop)
        .run(timed)
        .await
}

#[cfg(feature = "nats")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_keeps_a_unit_waiting_behind_its_key_alive() {
    use delivery::nats::{NatsSource, NatsTopology};

    let url = std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into());
    let client = async_nats::connect(&url).await.unwrap();
    let context = async_nats::jetstream::new(client.clone());
    let stream = format!("order-waiting-{}", std::process::id());
    let topology = NatsTopology::new(&stream)
        .subjects([stream.clone()])
        .ack_wait(Duration::from_secs(2));
    let _ = context.delete_stream(&stream).await;
    topology.declare(&context).await.unwrap();
    for unit in [
        timed_unit("a1", "a", 6_000, false),
        timed_unit("a2", "a", 0, false),
    ] {
        context
            .publish_with_headers(
                stream.clone(),
                delivery::nats::headers_of(&unit),
                unit.payload().clone(),
            )
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    let runs = Runs::default();
    // Past a2's run, longer than `ack_wait` again: a unit not acknowledged would come back.
    let report = timed_until(
        source,
        &runs,
        WhenReturned::Pass,
        |runs| !runs.of("a2").is_empty(),
        Duration::from_secs(3),
    )
    .await;
    for name in [
        stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(&name).await;
    }
    assert_eq!(
        runs.all(),
        [("a1".to_owned(), 1), ("a2".to_owned(), 1)],
        "a2 waited for a1 (6 s, ack_wait 2 s) kept alive, and ran once: {report:?}"
    );
    assert_eq!((report.acked, report.dead_lettered), (2, 0), "{report:?}");
}

#[cfg(feature = "redis")]
async fn redis_stream(name: &str, claim_idle: Duration) -> delivery::redis::RedisTopology {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let topology =
        delivery::redis::RedisTopology::new(format!("{name}-{}", std::process::id()), "order")
            .claim_idle(claim_idle);
    let mut connection = delivery::redis::connect(&url).await.unwrap();
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut connection)
        .await
        .unwrap();
    delivery::redis::declare(&url, &topology).await.unwrap();
    topology
}

/// Publishes `units` to a fresh stream with `claim_idle` and consumes them ordered by key
/// until `done`, then `linger`; the stream is deleted after.
#[cfg(feature = "redis")]
async fn redis_timed(
    name: &str,
    claim_idle: Duration,
    units: impl IntoIterator<Item = Unit>,
    when_returned: WhenReturned,
    done: impl Fn(&Runs) -> bool + Send + 'static,
    linger: Duration,
) -> (Runs, delivery::consumer::Report) {
    let url = std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let topology = redis_stream(name, claim_idle).await;
    let mut connection = delivery::redis::connect(&url).await.unwrap();
    for unit in units {
        delivery::redis::publish(&mut connection, &topology.stream, &unit)
            .await
            .unwrap();
    }
    let source = delivery::redis::RedisSource::connect(&url, topology.clone())
        .await
        .unwrap();
    let runs = Runs::default();
    let report = timed_until(source, &runs, when_returned, done, linger).await;
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut connection)
        .await
        .unwrap();
    (runs, report)
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_keeps_a_unit_waiting_behind_its_key_alive() {
    let (runs, report) = redis_timed(
        "order-waiting",
        Duration::from_secs(2),
        [
            timed_unit("a1", "a", 6_000, false),
            timed_unit("a2", "a", 0, false),
        ],
        WhenReturned::Pass,
        |runs| !runs.of("a2").is_empty(),
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(
        runs.all(),
        [("a1".to_owned(), 1), ("a2".to_owned(), 1)],
        "a2 waited for a1 (6 s, claim idle 2 s) kept alive, and ran once: {report:?}"
    );
    assert_eq!((report.acked, report.dead_lettered), (2, 0), "{report:?}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holds_a_key_for_its_slow_returned_unit_with_the_next_kept_alive() {
    // a1 runs 6 s and fails; a2 waits for a1's second delivery, kept alive meanwhile.
    let (runs, report) = redis_timed(
        "order-hold-slow",
        Duration::from_secs(2),
        [
            timed_unit("a1", "a", 6_000, true),
            timed_unit("a2", "a", 0, false),
        ],
        WhenReturned::Hold,
        |runs| !runs.of("a2").is_empty(),
        Duration::from_secs(3),
    )
    .await;
    assert_eq!(
        runs.all(),
        [
            ("a1".to_owned(), 1),
            ("a1".to_owned(), 2),
            ("a2".to_owned(), 1)
        ],
        "a2 ran once, after a1's second delivery: {report:?}"
    );
    assert_eq!((report.acked, report.returned), (2, 1), "{report:?}");
}

#[cfg(feature = "redis")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_holds_a_key_until_its_returned_unit_comes_back_after_its_backoff() {
    // A claim idle time longer than the backoff and the hold's grace: the returned unit must
    // come back after its backoff, not after the claim idle time, or the hold lapses.
    let (runs, report) = redis_timed(
        "order-hold-lapse",
        Duration::from_secs(30),
        [
            timed_unit("a1", "a", 0, true),
            timed_unit("a2", "a", 0, false),
        ],
        WhenReturned::Hold,
        |runs| !runs.of("a2").is_empty() && runs.of("a1").len() >= 2,
        Duration::ZERO,
    )
    .await;
    assert_eq!(
        runs.all(),
        [
            ("a1".to_owned(), 1),
            ("a1".to_owned(), 2),
            ("a2".to_owned(), 1)
        ],
        "a2 ran after a1's second delivery: {report:?}"
    );
}

/// Item 6: units waiting in their key's lane at shutdown are released after the source stopped,
/// so they are not delivered once more to the stopping consumer and counted twice.
#[cfg(feature = "lapin")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_releases_units_waiting_at_shutdown_after_the_stop() {
    use delivery::lapin::options::BasicGetOptions;
    use delivery::rabbitmq::{ConfirmedPublisher, RabbitSource, RabbitTopology};

    let url = std::env::var("AMQP_URL")
        .unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".to_owned());
    let topology = RabbitTopology::new(format!("order-stop-{}", std::process::id())).prefetch(16);
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    let units = std::iter::once(timed_unit("a1", "a", 5_000, false))
        .chain((2..=4).map(|n| timed_unit(&format!("a{n}"), "a", 0, false)));
    for unit in units {
        publisher
            .publish(
                &topology.queue,
                unit.payload(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    }
    let source = RabbitSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let runs = Runs::default();
    let report = Consumer::new(source)
        .state(runs.clone())
        .concurrency(4)
        .order_by_key()
        .drain_deadline(Duration::from_secs(10))
        .shutdown_on(tokio::time::sleep(Duration::from_secs(1)))
        .run(timed)
        .await;
    assert_eq!(runs.all(), [("a1".to_owned(), 1)], "{report:?}");
    assert_eq!((report.acked, report.returned), (1, 3), "{report:?}");
    let channel = connection.create_channel().await.unwrap();
    let mut counts = HashMap::new();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while counts.len() < 3 && tokio::time::Instant::now() < deadline {
        let Some(message) = channel
            .basic_get(
                topology.queue.as_str().into(),
                BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap()
        else {
            tokio::time::sleep(Duration::from_millis(50)).await;
            continue;
        };
        let properties = &message.delivery.properties;
        let id = properties
            .message_id()
            .as_ref()
            .unwrap()
            .as_str()
            .to_owned();
        let count = properties
            .headers()
            .as_ref()
            .and_then(|headers| headers.inner().get("x-delivery-count"))
            .map(|count| format!("{count:?}"));
        counts.insert(id, count);
    }
    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
    publisher.close().await;
    for id in ["a2", "a3", "a4"] {
        let count = counts.get(id).cloned().flatten();
        assert!(
            count.as_deref().is_some_and(|c| c.contains("(1)")),
            "{id} returned once, never redelivered to the stopping consumer: x-delivery-count {count:?} (all: {counts:?})"
        );
    }
}
