//! Kafka set-up the tests share, against the real Kafka-protocol broker (tansu on
//! 127.0.0.1:9092, or `KAFKA_BROKERS`): unique topic names, declaring a topology, a producer
//! configured for tansu, publishing units, and reading a group's committed offsets and a
//! partition's end.
#![allow(dead_code)] // each test binary uses part of it

use std::time::Duration;

use delivery_core::headers::MESSAGE_ID as HEADER_MESSAGE_ID;
use delivery_kafka::KafkaTopology;
use delivery_kafka::client::consumer::{BaseConsumer, Consumer as _};
use delivery_kafka::client::message::{Header, OwnedHeaders, ToBytes};
use delivery_kafka::client::producer::{FutureProducer, FutureRecord};
use delivery_kafka::client::{ClientConfig, Offset, TopicPartitionList};

/// The brokers' address: `KAFKA_BROKERS`, or tansu on 127.0.0.1:9092.
pub fn brokers() -> String {
    std::env::var("KAFKA_BROKERS").unwrap_or_else(|_| "127.0.0.1:9092".into())
}

/// `{name}-{pid}-{milliseconds since the epoch}`: a topic name no earlier run used.
pub fn unique_name(name: &str) -> String {
    let stamp = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap()
        .as_millis();
    format!("{name}-{}-{stamp}", std::process::id())
}

/// Declares the topology's topics (tansu creates none on its own), failing the test with the
/// brokers' address when the broker is unreachable.
pub async fn declare(topology: &KafkaTopology) {
    declare_at(&brokers(), topology).await
}

/// Like [`declare`], at `brokers`.
pub async fn declare_at(brokers: &str, topology: &KafkaTopology) {
    topology.declare(brokers).await.unwrap_or_else(|e| {
        panic!("Kafka unreachable at {brokers}: {e} (scripts/services.sh starts tansu)")
    });
}

/// A producer's configuration for the brokers: `acks=all`, and one unit per record batch, since
/// tansu 0.6 serves nothing for a fetch starting inside a batch (Kafka itself serves the batch
/// that holds it), so a consumer restarted at a committed offset inside one would get nothing.
pub fn producer_config() -> ClientConfig {
    producer_config_at(&brokers())
}

/// Like [`producer_config`], for `brokers`.
pub fn producer_config_at(brokers: &str) -> ClientConfig {
    let mut config = ClientConfig::new();
    config
        .set("bootstrap.servers", brokers)
        .set("acks", "all")
        .set("batch.num.messages", "1");
    config
}

/// A producer made from [`producer_config`].
pub fn producer() -> FutureProducer {
    producer_at(&brokers())
}

/// A producer made from [`producer_config_at`].
pub fn producer_at(brokers: &str) -> FutureProducer {
    producer_config_at(brokers)
        .create()
        .expect("a Kafka producer")
}

/// A record of unit `id` for `topic`: keyed by the id, with `headers` and then the id as its
/// `message-id` header.
pub fn record<'a, P: ToBytes + ?Sized>(
    topic: &'a str,
    id: &'a str,
    payload: &'a P,
    headers: OwnedHeaders,
) -> FutureRecord<'a, str, P> {
    FutureRecord::to(topic)
        .key(id)
        .payload(payload)
        .headers(headers.insert(Header {
            key: HEADER_MESSAGE_ID,
            value: Some(id),
        }))
}

/// Sends `record` and waits for the broker's acknowledgement (`acks=all`).
pub async fn send<P: ToBytes + ?Sized>(
    producer: &FutureProducer,
    record: FutureRecord<'_, str, P>,
) {
    producer
        .send(record, Duration::from_secs(10))
        .await
        .map_err(|(e, _)| e)
        .expect("published with acks=all");
}

/// Publishes `count` units `{prefix}-0`, `{prefix}-1`.. to `topic`, `payload(n)` the body of unit
/// `n`, one at a time (each acknowledged before the next is sent): tansu reports the high
/// watermark right only after unpipelined produces, and on a partition unit `n` follows unit
/// `n - 1`.
pub async fn produce(topic: &str, prefix: &str, count: usize, payload: impl Fn(usize) -> String) {
    let producer = producer();
    for n in 0..count {
        let id = format!("{prefix}-{n}");
        send(
            &producer,
            record(topic, &id, &payload(n), OwnedHeaders::new()),
        )
        .await;
    }
}

/// Like [`produce`], to `partition` of `topic`.
pub async fn produce_to(
    topic: &str,
    partition: i32,
    prefix: &str,
    count: usize,
    payload: impl Fn(usize) -> String,
) {
    let producer = producer();
    for n in 0..count {
        let id = format!("{prefix}-{n}");
        let body = payload(n);
        send(
            &producer,
            record(topic, &id, &body, OwnedHeaders::new()).partition(partition),
        )
        .await;
    }
}

/// The group's committed offset of each of `partitions` of `topic`, in that order, as the broker
/// has it (`None` where the group has committed none).
pub async fn committed(
    topic: &str,
    group: &str,
    partitions: impl IntoIterator<Item = i32>,
) -> Vec<Option<i64>> {
    let (topic, group) = (topic.to_owned(), group.to_owned());
    let partitions: Vec<i32> = partitions.into_iter().collect();
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", &group)
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        for &partition in &partitions {
            list.add_partition(&topic, partition);
        }
        let offsets = reader
            .committed_offsets(list, Duration::from_secs(10))
            .unwrap();
        partitions
            .iter()
            .map(|&partition| {
                match offsets
                    .find_partition(&topic, partition)
                    .map(|e| e.offset())
                {
                    Some(Offset::Offset(o)) => Some(o),
                    _ => None,
                }
            })
            .collect()
    })
    .await
    .unwrap()
}

/// The group's committed offset of `partition` of `topic`, as the broker has it.
pub async fn committed_at(topic: &str, group: &str, partition: i32) -> Option<i64> {
    committed(topic, group, [partition]).await[0]
}

/// One past the last unit of `partition` (units published one at a time, so tansu reports it).
pub async fn end_of(topic: &str, partition: i32) -> i64 {
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .create()
            .unwrap();
        reader
            .fetch_watermarks(&topic, partition, Duration::from_secs(10))
            .unwrap()
            .1
    })
    .await
    .unwrap()
}

/// Every header of the record at `offset` of `partition` of `topic`, in order (values as UTF-8,
/// lossily), read without a group.
pub async fn headers_at(topic: &str, partition: i32, offset: i64) -> Vec<(String, String)> {
    use delivery_kafka::client::Message as _;
    use delivery_kafka::client::message::Headers as _;
    let topic = topic.to_owned();
    tokio::task::spawn_blocking(move || {
        let reader: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", brokers())
            .set("group.id", "tests-header-reader")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        let mut list = TopicPartitionList::new();
        list.add_partition_offset(&topic, partition, Offset::Offset(offset))
            .unwrap();
        reader.assign(&list).unwrap();
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while std::time::Instant::now() < deadline {
            let Some(Ok(message)) = reader.poll(Duration::from_millis(100)) else {
                continue;
            };
            if message.offset() != offset {
                continue;
            }
            return message
                .headers()
                .map(|headers| {
                    headers
                        .iter()
                        .map(|h| {
                            let value = h.value.unwrap_or_default();
                            (
                                h.key.to_owned(),
                                String::from_utf8_lossy(value).into_owned(),
                            )
                        })
                        .collect()
                })
                .unwrap_or_default();
        }
        panic!("no record at {topic}/{partition}@{offset} within 30 s")
    })
    .await
    .unwrap()
}

/// A tansu broker of a test's own (memory storage), on `listen`, advertising `advertised` to its
/// clients: killed when dropped. Its log goes to the system's temporary directory.
pub struct Tansu {
    child: std::process::Child,
}

impl Tansu {
    /// Starts it and waits (at most 30 s) until it accepts connections on `listen`.
    pub async fn start(listen: std::net::SocketAddr, advertised: std::net::SocketAddr) -> Tansu {
        let log = std::env::temp_dir().join(format!("tansu-{}.log", listen.port()));
        let home = std::env::var("HOME").unwrap_or_default();
        let path = format!(
            "{home}/.cargo/bin:{}",
            std::env::var("PATH").unwrap_or_default()
        );
        let child = std::process::Command::new("tansu")
            .args([
                "broker",
                "--listener-url",
                &format!("tcp://{listen}"),
                "--advertised-listener-url",
                &format!("tcp://{advertised}"),
                "--storage-engine",
                "memory://tansu/",
            ])
            .env("PATH", path)
            .stdout(std::fs::File::create(&log).expect("a log file for tansu"))
            .stderr(std::process::Stdio::null())
            .spawn()
            .expect("starting tansu (scripts/prerequisites.sh installs it)");
        let tansu = Tansu { child };
        let deadline = std::time::Instant::now() + Duration::from_secs(30);
        while tokio::net::TcpStream::connect(listen).await.is_err() {
            assert!(
                std::time::Instant::now() < deadline,
                "tansu did not listen on {listen} within 30 s (log: {})",
                log.display()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
        tansu
    }
}

impl Drop for Tansu {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// A loopback address whose port was free a moment ago.
pub fn free_address() -> std::net::SocketAddr {
    std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
}
