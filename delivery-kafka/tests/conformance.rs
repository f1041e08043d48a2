//! The transport conformance suite against a real Kafka-protocol broker (tansu on
//! 127.0.0.1:9092, or `KAFKA_BROKERS`). Fails, never skips, when the broker is unreachable.
#[path = "../../tests/support/kafka.rs"]
mod kafka_support;

use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery_core::unit::Unit;

use delivery_core::testing::conformance::{self, Fixture};
use delivery_kafka::client::producer::FutureProducer;
use delivery_kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
use kafka_support::{brokers, declare, producer_config, record, send};

struct Kafka {
    brokers: String,
    suffix: String,
    producer: FutureProducer,
}

impl Kafka {
    fn new() -> Self {
        static RUN: AtomicU64 = AtomicU64::new(0);
        let brokers = brokers();
        let producer = producer_config()
            .set("message.timeout.ms", "20000")
            .create()
            .expect("a Kafka producer");
        Kafka {
            suffix: format!(
                "{}-{}-{}",
                std::process::id(),
                RUN.fetch_add(1, Ordering::Relaxed),
                std::time::SystemTime::now()
                    .duration_since(std::time::UNIX_EPOCH)
                    .unwrap()
                    .as_millis()
            ),
            brokers,
            producer,
        }
    }

    fn topology(&self, name: &str) -> KafkaTopology {
        let topic = format!("{name}-{}", self.suffix);
        // One partition: the suite's checks stop the consumer once a unit published last is
        // applied, which assumes the order of one queue; several partitions are exercised by
        // `tests/kafka_consumer.rs` and `tests/kafka_offsets.rs`.
        KafkaTopology::new(&topic, format!("{topic}-group"))
            .partitions(1)
            .commit_interval(Duration::from_millis(100))
    }
}

impl Fixture for Kafka {
    type Source = KafkaSource;
    type DeadLetters = KafkaDeadLetters;

    fn counts_released_deliveries(&self) -> bool {
        false
    }

    async fn declare(&self, name: &str, max_deliveries: u32) {
        declare(&self.topology(name).max_deliveries(max_deliveries)).await;
    }

    async fn publish(&self, name: &str, unit: Unit) {
        let topology = self.topology(name);
        let headers = delivery_kafka::headers_of(&unit);
        send(
            &self.producer,
            record(
                &topology.topic,
                unit.id().as_str(),
                unit.payload().as_ref(),
                headers,
            ),
        )
        .await;
    }

    async fn consume(&self, name: &str) -> KafkaSource {
        // The bound is the runtime's setting here; the source reports the topology's.
        let topology = self.topology(name);
        KafkaSource::connect(&self.brokers, topology).await.unwrap()
    }

    async fn dead_letter(&self, name: &str) -> KafkaDeadLetters {
        KafkaDeadLetters::new(&self.brokers, &self.topology(name))
    }

    /// The group's attempts topic counts a delivery its consumer died on (the crash-loop count,
    /// `kafka/mod.rs`): the unit here is its partition's first, recorded before it runs, and a
    /// consumer dropped with it in flight records no clean end, so the next run counts it again.
    fn counts_crashed_deliveries(&self) -> bool {
        true
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_passes_the_conformance_suite() {
    let kafka = Kafka::new();
    conformance::run_all(&kafka).await;
    conformance::operates_the_dead_letter_in_the_console(
        &kafka,
        delivery_axum::admin::testing::console,
    )
    .await;
}
