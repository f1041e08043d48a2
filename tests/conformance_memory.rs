//! The transport conformance suite against the in-memory broker.

use delivery::Unit;
use delivery::memory::{MemoryBroker, MemoryDeadLetters, MemorySource, QueueConfig};
use delivery::testing::conformance::{self, Fixture};

struct Memory(MemoryBroker);

impl Fixture for Memory {
    type Source = MemorySource;
    type DeadLetters = MemoryDeadLetters;

    fn counts_released_deliveries(&self) -> bool {
        false
    }

    async fn declare(&self, name: &str, max_deliveries: u32) {
        self.0
            .declare(name, QueueConfig::default().max_deliveries(max_deliveries))
            .unwrap();
    }

    async fn publish(&self, name: &str, unit: Unit) {
        self.0.publish(name, unit);
    }

    async fn consume(&self, name: &str) -> MemorySource {
        self.0.consume(name)
    }

    async fn dead_letter(&self, name: &str) -> MemoryDeadLetters {
        self.0.dead_letters(name)
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_in_memory_broker_passes_the_conformance_suite() {
    let memory = Memory(MemoryBroker::new());
    conformance::run_all(&memory).await;
    #[cfg(feature = "admin")]
    conformance::operates_the_dead_letter_in_the_console(
        &memory,
        delivery::admin::testing::console,
    )
    .await;
}
