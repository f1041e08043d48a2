//! The transport conformance suite against the real NATS JetStream (127.0.0.1:4222, or
//! `NATS_URL`). Fails, never skips, when the server is unreachable.
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use async_nats::jetstream;
use delivery_core::testing::conformance::{self, Fixture};
use delivery_core::unit::Unit;
use delivery_nats::{NatsDeadLetters, NatsSource, NatsTopology};

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

struct JetStream {
    client: async_nats::Client,
    context: jetstream::Context,
    suffix: String,
    declared: Mutex<Vec<NatsTopology>>,
}

impl JetStream {
    async fn new() -> Self {
        static RUN: AtomicU64 = AtomicU64::new(0);
        let url = nats_url();
        let client = async_nats::connect(&url).await.unwrap_or_else(|e| {
            panic!("NATS unreachable at {url}: {e} (scripts/services.sh starts it)")
        });
        JetStream {
            context: jetstream::new(client.clone()),
            client,
            suffix: format!(
                "{}-{}",
                std::process::id(),
                RUN.fetch_add(1, Ordering::Relaxed)
            ),
            declared: Mutex::new(Vec::new()),
        }
    }

    fn topology(&self, name: &str) -> NatsTopology {
        let stream = format!("{name}-{}", self.suffix);
        NatsTopology::new(&stream)
            .subjects([stream.clone()])
            .ack_wait(Duration::from_secs(2))
            // The shortest JetStream allows: the suite publishes one unit twice on purpose.
            .duplicate_window(Duration::from_millis(100))
            .batch(16)
            // A unit whose last delivery was cut short is swept into the dead letter this often.
            .sweep_every(Duration::from_millis(500))
    }

    async fn delete(&self, topology: &NatsTopology) {
        for stream in [
            &topology.stream,
            &topology.dead_letter_stream_name(),
            &topology.advisory_stream_name(),
        ] {
            let _ = self.context.delete_stream(stream).await;
        }
    }

    async fn cleanup(&self) {
        let declared = std::mem::take(&mut *self.declared.lock().unwrap());
        for topology in declared {
            self.delete(&topology).await;
        }
    }
}

impl Fixture for JetStream {
    type Source = NatsSource;
    type DeadLetters = NatsDeadLetters;

    fn redelivery_timer(&self) -> Option<Duration> {
        Some(Duration::from_secs(2))
    }

    /// The pull request outstanding when the source stops stays the server's until it expires
    /// (aborting the pull task does not withdraw it): a unit released after the stop may be
    /// delivered to it, and comes back after `ack_wait`, counted once more. (Seen here too: a
    /// released unit run twice by the next consumer, on deliveries 2 and 1.)
    fn may_deliver_released_units_to_a_stopped_source(&self) -> bool {
        true
    }

    async fn declare(&self, name: &str, max_deliveries: u32) {
        let topology = self.topology(name).max_deliver(max_deliveries);
        self.delete(&topology).await;
        topology.declare(&self.context).await.unwrap();
        self.declared.lock().unwrap().push(topology);
    }

    /// Published under the unit's id as `Nats-Msg-Id`. JetStream drops a second publish of one
    /// id inside the duplicate window, so a unit published twice on purpose is published again
    /// once the window (100 ms here) has passed: a producer's retry after it.
    async fn publish(&self, name: &str, unit: Unit) {
        let topology = self.topology(name);
        let headers = delivery_nats::headers_of(&unit);
        for _ in 0..50 {
            let ack = self
                .context
                .publish_with_headers(
                    topology.stream.clone(),
                    headers.clone(),
                    unit.payload().clone(),
                )
                .await
                .unwrap()
                .await
                .unwrap();
            if !ack.duplicate {
                return;
            }
            tokio::time::sleep(Duration::from_millis(150)).await;
        }
        panic!("{} stayed a duplicate", unit.id());
    }

    async fn consume(&self, name: &str) -> NatsSource {
        let topology = self
            .declared
            .lock()
            .unwrap()
            .iter()
            .find(|t| t.stream == self.topology(name).stream)
            .cloned()
            .expect("declared before consumed");
        NatsSource::with_client(self.client.clone(), topology)
            .await
            .unwrap()
    }

    async fn dead_letter(&self, name: &str) -> NatsDeadLetters {
        NatsDeadLetters::new(self.client.clone(), &self.topology(name))
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_passes_the_conformance_suite() {
    let nats = JetStream::new().await;
    conformance::run_all(&nats).await;
    conformance::operates_the_dead_letter_in_the_console(
        &nats,
        delivery_axum::admin::testing::console,
    )
    .await;
    nats.cleanup().await;
}
