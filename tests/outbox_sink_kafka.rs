//! The outbox's Kafka sink against a real Kafka-protocol broker (tansu on 127.0.0.1:9092, or
//! `KAFKA_BROKERS`) and a real SQLite outbox: records relayed by a `#[relay]` function arrive
//! keyed by their key, with their id in the `message-id` header and their payload intact, each
//! once, and each is marked delivered only after its receipt; with the broker unreachable nothing
//! is marked, no receipt is made, and the failures are counted in the records until the broker is
//! reachable again. Fails, never skips, when the broker is unreachable.
#![cfg(all(feature = "kafka", feature = "sqlite"))]

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delivery::kafka::client as rdkafka;
use delivery::kafka::{KafkaSink, MESSAGE_ID};
use delivery::outbox::{NewRecord, Outbox, Record, Relayer, SqliteStore, Status};
use delivery::{HandlerError, Receipt, State, disposition::Backoff, relay};
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication};
use rdkafka::client::DefaultClientContext;
use rdkafka::consumer::{Consumer, StreamConsumer};
use rdkafka::message::{Headers, Message};
use rdkafka::{ClientConfig, Offset, TopicPartitionList};

fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// A topic name no earlier run used (tansu keeps topics until it restarts).
fn unique(test: &str) -> String {
    let nanos = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_nanos();
    format!("outbox-sink-kafka-{test}-{}-{nanos}", std::process::id())
}

/// Creates `topic` with `partitions` partitions (tansu creates no topic on its own).
async fn create_topic(topic: &str, partitions: i32) {
    let admin: AdminClient<DefaultClientContext> = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .create()
        .unwrap();
    let options = AdminOptions::new().request_timeout(Some(Duration::from_secs(10)));
    let new = NewTopic::new(topic, partitions, TopicReplication::Fixed(1));
    let results = admin
        .create_topics([&new], &options)
        .await
        .unwrap_or_else(|e| panic!("Kafka unreachable at {}: {e}", brokers()));
    for result in results {
        result.unwrap_or_else(|(topic, code)| panic!("creating {topic}: {code}"));
    }
}

/// One message as it arrived.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Arrived {
    partition: i32,
    key: Option<String>,
    message_id: Option<String>,
    /// `None` for a null payload, which the sink never sends.
    payload: Option<Vec<u8>>,
}

/// Every message in `topic`, read from the beginning of each partition: at least `expected`,
/// then whatever else arrives until the topic has been quiet for a while, so an extra copy would
/// be seen. (Not bounded by the high watermarks: tansu 0.6 under-reports them after pipelined
/// produces.)
async fn read_topic(topic: &str, expected: usize) -> Vec<Arrived> {
    const QUIET: Duration = Duration::from_secs(2);
    let consumer: StreamConsumer = ClientConfig::new()
        .set("bootstrap.servers", brokers())
        .set("group.id", format!("{topic}-reader"))
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let partitions: Vec<i32> = tokio::task::block_in_place(|| {
        let metadata = consumer
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .unwrap();
        metadata.topics()[0]
            .partitions()
            .iter()
            .map(|p| p.id())
            .collect()
    });
    let mut assignment = TopicPartitionList::new();
    for partition in partitions {
        assignment
            .add_partition_offset(topic, partition, Offset::Beginning)
            .unwrap();
    }
    consumer.assign(&assignment).unwrap();
    let mut arrived = Vec::with_capacity(expected);
    loop {
        let wait = if arrived.len() < expected {
            Duration::from_secs(30)
        } else {
            QUIET
        };
        let message = match tokio::time::timeout(wait, consumer.recv()).await {
            Ok(message) => message.unwrap(),
            Err(_) if arrived.len() >= expected => break,
            Err(_) => panic!("only {} of {expected} messages read", arrived.len()),
        };
        let message_id = message.headers().and_then(|headers| {
            headers
                .iter()
                .find(|header| header.key == MESSAGE_ID)
                .and_then(|header| header.value)
                .map(|value| String::from_utf8_lossy(value).into_owned())
        });
        arrived.push(Arrived {
            partition: message.partition(),
            key: message
                .key()
                .map(|key| String::from_utf8_lossy(key).into_owned()),
            message_id,
            payload: message.payload().map(<[u8]>::to_vec),
        });
    }
    arrived
}

/// A fresh outbox in an SQLite file in a temporary directory.
async fn sqlite(name: &str) -> (Outbox, SqliteStore) {
    let dir = std::env::temp_dir().join(format!(
        "delivery-outbox-kafka-{name}-{}",
        std::process::id()
    ));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let options = sqlx::sqlite::SqliteConnectOptions::new()
        .filename(dir.join("outbox.db"))
        .create_if_missing(true)
        .journal_mode(sqlx::sqlite::SqliteJournalMode::Wal)
        .busy_timeout(Duration::from_secs(10));
    let pool = sqlx::sqlite::SqlitePoolOptions::new()
        .max_connections(4)
        .connect_with(options)
        .await
        .unwrap();
    let outbox = Outbox::table("outbox");
    let store = outbox.sqlite(pool);
    store.migrate().await.unwrap();
    (outbox, store)
}

/// What the test writes for record `i`: id, key (every tenth has none), payload bytes a
/// re-encoding would change (key order, spacing, an escape, non-ASCII).
fn written(name: &str, i: usize) -> (String, Option<String>, Vec<u8>) {
    let key = (!i.is_multiple_of(10)).then(|| format!("customer-{}", i % 7));
    let payload = format!("{{\"z\":{i},  \"a\":\"caf\u{e9} \\u00e9\",\"n\":[1.50]}}");
    (format!("{name}-{i:03}"), key, payload.into_bytes())
}

/// Writes `n` records for `topic` in one transaction.
async fn write(outbox: &Outbox, store: &SqliteStore, name: &str, topic: &str, n: usize) {
    let mut tx = store.pool().begin().await.unwrap();
    for i in 0..n {
        let (id, key, payload) = written(name, i);
        let mut record = NewRecord::new(topic, payload).id(id);
        if let Some(key) = key {
            record = record.key(key);
        }
        outbox.write(&mut tx, record).await.unwrap();
    }
    tx.commit().await.unwrap();
}

#[derive(Clone)]
struct App {
    sink: KafkaSink,
    store: SqliteStore,
    /// Receipts the sink handed back.
    receipts: Arc<AtomicU64>,
    /// Receipts for a record the store had already marked (must stay 0).
    marked_before_receipt: Arc<AtomicU64>,
}

/// The relay function: produce the record as written, and return the broker's receipt. Before
/// returning it, looks the record up: the store must not have marked it yet.
#[relay]
async fn to_kafka(record: Record, State(app): State<App>) -> Result<Receipt, HandlerError> {
    let receipt = app.sink.send(&record).await?;
    app.receipts.fetch_add(1, Ordering::SeqCst);
    let stored = app
        .store
        .get(record.id())
        .await?
        .ok_or_else(|| HandlerError::reject("the record vanished from the outbox"))?;
    if stored.status != Status::Pending {
        app.marked_before_receipt.fetch_add(1, Ordering::SeqCst);
    }
    Ok(receipt)
}

fn quick_backoff() -> Backoff {
    Backoff::exponential(Duration::from_millis(50), Duration::from_millis(200)).without_jitter()
}

fn app(sink: KafkaSink, store: &SqliteStore) -> App {
    App {
        sink,
        store: store.clone(),
        receipts: Arc::new(AtomicU64::new(0)),
        marked_before_receipt: Arc::new(AtomicU64::new(0)),
    }
}

/// Each record's status, attempts and last error, by id.
async fn statuses(
    store: &SqliteStore,
    name: &str,
    n: usize,
) -> BTreeMap<String, (Status, u32, Option<String>)> {
    let mut out = BTreeMap::new();
    for i in 0..n {
        let (id, _, _) = written(name, i);
        let stored = store.get(&id.as_str().into()).await.unwrap().unwrap();
        out.insert(id, (stored.status, stored.attempts, stored.last_error));
    }
    out
}

/// Asserts that `arrived` is exactly the `n` records written, each once, as written.
fn assert_arrived_as_written(arrived: &[Arrived], name: &str, n: usize) {
    assert_eq!(arrived.len(), n, "each record produced once");
    let by_id: BTreeMap<&str, &Arrived> = arrived
        .iter()
        .map(|message| (message.message_id.as_deref().unwrap_or(""), message))
        .collect();
    assert_eq!(by_id.len(), n, "every message carries a distinct record id");
    for i in 0..n {
        let (id, key, payload) = written(name, i);
        let message = by_id
            .get(id.as_str())
            .unwrap_or_else(|| panic!("{id} never arrived"));
        assert_eq!(message.key, key, "{id}: key");
        assert_eq!(message.payload, Some(payload), "{id}: payload");
    }
    // The key is the partitioning key: a key's records share a partition.
    let mut partitions_by_key: BTreeMap<&str, BTreeSet<i32>> = BTreeMap::new();
    for message in arrived {
        if let Some(key) = &message.key {
            partitions_by_key
                .entry(key)
                .or_default()
                .insert(message.partition);
        }
    }
    for (key, partitions) in partitions_by_key {
        assert_eq!(partitions.len(), 1, "{key} spread over {partitions:?}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn relayed_records_arrive_under_their_id_and_key_and_are_marked_after_the_receipt() {
    const N: usize = 200;
    let name = "relayed";
    let topic = unique(name);
    create_topic(&topic, 3).await;
    let (outbox, store) = sqlite(name).await;
    write(&outbox, &store, name, &topic, N).await;

    let app = app(KafkaSink::new(&brokers()).unwrap(), &store);
    let report = Relayer::new(store.clone())
        .state(app.clone())
        .backoff(quick_backoff())
        .max_attempts(100)
        .window(64)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(store.idle())
        .run(to_kafka)
        .await;
    assert_eq!(report.delivered, N as u64, "{report:?}");
    assert_eq!(report.retried, 0, "{report:?}");
    assert_eq!(app.receipts.load(Ordering::SeqCst), N as u64);
    assert_eq!(app.marked_before_receipt.load(Ordering::SeqCst), 0);
    for (id, (status, attempts, _)) in statuses(&store, name, N).await {
        assert_eq!(
            (status, attempts),
            (Status::Delivered, 1),
            "{id}: one attempt, counted when claimed"
        );
    }
    assert_eq!(store.pending().await.unwrap(), 0);

    assert_arrived_as_written(&read_topic(&topic, N).await, name, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_the_broker_unreachable_nothing_is_marked_then_every_record_is_relayed() {
    const N: usize = 30;
    let name = "unreachable";
    let topic = unique(name);
    create_topic(&topic, 2).await;
    let (outbox, store) = sqlite(name).await;
    write(&outbox, &store, name, &topic, N).await;

    // Nothing listens on port 1; librdkafka gives up on each message after 400 ms.
    let unreachable = KafkaSink::with_config(
        ClientConfig::new()
            .set("bootstrap.servers", "127.0.0.1:1")
            .set("message.timeout.ms", "400")
            .clone(),
    )
    .unwrap();
    let down = app(unreachable, &store);
    let report = Relayer::new(store.clone())
        .state(down.clone())
        .backoff(quick_backoff())
        .max_attempts(100)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on({
            // Until every record failed once and was claimed again, however loaded the machine.
            let store = store.clone();
            async move {
                let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
                while !statuses(&store, name, N)
                    .await
                    .values()
                    .all(|(_, attempts, _)| *attempts >= 2)
                {
                    assert!(
                        tokio::time::Instant::now() < deadline,
                        "not every record failed"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        })
        .run(to_kafka)
        .await;
    assert_eq!(report.delivered, 0, "{report:?}");
    assert_eq!(report.dead, 0, "{report:?}");
    assert!(report.retried >= N as u64, "{report:?}");
    assert_eq!(down.receipts.load(Ordering::SeqCst), 0, "no receipt");
    for (id, (status, attempts, last_error)) in statuses(&store, name, N).await {
        assert_eq!(status, Status::Pending, "{id}");
        assert!(
            attempts >= 1,
            "{id}: the failures are counted in the record"
        );
        let last_error = last_error.unwrap_or_default();
        assert!(
            last_error.contains("not delivered") && last_error.contains(&id),
            "{id}: {last_error}"
        );
    }
    assert_eq!(store.pending().await.unwrap(), N as u64);

    // The broker reachable: every record relayed, under the same ids.
    let up = app(KafkaSink::new(&brokers()).unwrap(), &store);
    let report = Relayer::new(store.clone())
        .state(up.clone())
        .backoff(quick_backoff())
        .max_attempts(100)
        .poll_interval(Duration::from_millis(50))
        .shutdown_on(store.idle())
        .run(to_kafka)
        .await;
    assert_eq!(report.delivered, N as u64, "{report:?}");
    assert_eq!(up.marked_before_receipt.load(Ordering::SeqCst), 0);
    for (id, (status, _, _)) in statuses(&store, name, N).await {
        assert_eq!(status, Status::Delivered, "{id}");
    }
    // Nothing reached the topic while the broker was unreachable: exactly one copy each.
    assert_arrived_as_written(&read_topic(&topic, N).await, name, N);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_topic_is_a_retry_a_record_that_can_never_pass_is_a_reject() {
    let topic = unique("direct");
    create_topic(&topic, 1).await;
    let sink = KafkaSink::with_config(
        ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("message.timeout.ms", "1500")
            .clone(),
    )
    .unwrap();

    // A topic nobody created: no receipt, a retry (it may be created later).
    let missing = Record::new(
        "rec-missing",
        format!("{topic}-never-created"),
        None,
        &b"{}"[..],
        0,
    );
    let failure = sink.send(&missing).await.unwrap_err();
    assert!(failure.is_retry(), "{failure}");

    // A name Kafka forbids, and a payload over the producer's `message.max.bytes` (1 000 000):
    // never sent, rejected.
    let illegal = Record::new("rec-illegal", "orders events", None, &b"{}"[..], 0);
    assert!(sink.send(&illegal).await.unwrap_err().is_reject());
    let huge = Record::new("rec-huge", topic.as_str(), None, vec![b'x'; 2_000_000], 0);
    let failure = sink.send(&huge).await.unwrap_err();
    assert!(failure.is_reject(), "{failure}");

    // The sink is not worn out by them; a clone shares its producer.
    let record = Record::new("rec-fine", topic.as_str(), Some("k".into()), &b""[..], 0);
    let receipt = sink.clone().send(&record).await.unwrap();
    assert_eq!(receipt.record(), record.id());
    let arrived = read_topic(&topic, 1).await;
    assert_eq!(
        arrived,
        [Arrived {
            partition: 0,
            key: Some("k".into()),
            message_id: Some("rec-fine".into()),
            payload: Some(Vec::new()),
        }]
    );
}
