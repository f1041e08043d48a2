//! The transport conformance suite against the real Redis (127.0.0.1:6379, or `REDIS_URL`).
//! Fails, never skips, when the server is unreachable.
use std::sync::Mutex;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery_core::testing::conformance::{self, Fixture};
use delivery_core::unit::Unit;
use delivery_redis::{RedisDeadLetters, RedisSource, RedisTopology};
use redis::aio::ConnectionManager;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

struct Redis {
    url: String,
    suffix: String,
    connection: ConnectionManager,
    declared: Mutex<Vec<RedisTopology>>,
}

impl Redis {
    async fn new() -> Self {
        static RUN: AtomicU64 = AtomicU64::new(0);
        let url = redis_url();
        let connection = delivery_redis::connect(&url).await.unwrap_or_else(|e| {
            panic!("Redis unreachable at {url}: {e} (scripts/services.sh starts it)")
        });
        Redis {
            url,
            suffix: format!(
                "{}-{}",
                std::process::id(),
                RUN.fetch_add(1, Ordering::Relaxed)
            ),
            connection,
            declared: Mutex::new(Vec::new()),
        }
    }

    fn topology(&self, name: &str) -> RedisTopology {
        // A short claim idle time is the suite's backoff: failed units come back within ~100 ms.
        RedisTopology::new(format!("{name}.{}", self.suffix), "conformance")
            .claim_idle(Duration::from_millis(100))
    }

    async fn delete(&self, topology: &RedisTopology) {
        let mut connection = self.connection.clone();
        let _: () = redis::cmd("DEL")
            .arg(&topology.stream)
            .arg(topology.dead_letter_stream_name())
            .query_async(&mut connection)
            .await
            .unwrap();
    }

    async fn cleanup(&self) {
        let declared = std::mem::take(&mut *self.declared.lock().unwrap());
        for topology in declared {
            self.delete(&topology).await;
        }
    }
}

impl Fixture for Redis {
    type Source = RedisSource;
    type DeadLetters = RedisDeadLetters;

    fn redelivery_timer(&self) -> Option<Duration> {
        Some(Duration::from_millis(100))
    }

    async fn declare(&self, name: &str, max_deliveries: u32) {
        let topology = self.topology(name).max_deliveries(max_deliveries);
        self.delete(&topology).await;
        delivery_redis::declare(&self.url, &topology).await.unwrap();
        self.declared.lock().unwrap().push(topology);
    }

    async fn publish(&self, name: &str, unit: Unit) {
        let mut connection = self.connection.clone();
        delivery_redis::publish(&mut connection, &self.topology(name).stream, &unit)
            .await
            .unwrap();
    }

    async fn consume(&self, name: &str) -> RedisSource {
        let topology = self
            .declared
            .lock()
            .unwrap()
            .iter()
            .find(|t| t.stream == self.topology(name).stream)
            .cloned()
            .expect("declared before consumed");
        RedisSource::connect(&self.url, topology).await.unwrap()
    }

    async fn dead_letter(&self, name: &str) -> RedisDeadLetters {
        RedisDeadLetters::new(&self.url, &self.topology(name)).unwrap()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_passes_the_conformance_suite() {
    let redis = Redis::new().await;
    conformance::run_all(&redis).await;
    conformance::operates_the_dead_letter_in_the_console(
        &redis,
        delivery_axum::admin::testing::console,
    )
    .await;
    redis.cleanup().await;
}

/// Declaring twice is fine (`BUSYGROUP` tolerated); a key of another type is refused, naming it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn declaring_is_idempotent_and_refuses_a_key_that_is_not_a_stream() {
    let redis = Redis::new().await;
    let topology = redis.topology("declare");
    redis.delete(&topology).await;
    delivery_redis::declare(&redis.url, &topology)
        .await
        .unwrap();
    delivery_redis::declare(&redis.url, &topology)
        .await
        .unwrap();
    let mut connection = redis.connection.clone();
    let _: () = redis::cmd("SET")
        .arg(&topology.stream)
        .arg("not a stream")
        .query_async(&mut connection)
        .await
        .unwrap();
    let error = delivery_redis::declare(&redis.url, &topology.clone().consumer("x"))
        .await
        .unwrap_err();
    let text = error.to_string();
    assert!(
        text.contains(&topology.stream) && text.contains("WRONGTYPE"),
        "{text}"
    );
    let missing = RedisTopology::new(format!("missing-{}", redis.suffix), "g");
    let error = RedisSource::connect(&redis.url, missing)
        .await
        .err()
        .expect("a source of a stream with no group fails at start");
    assert!(
        error.to_string().contains("declare the topology"),
        "{error}"
    );
    redis.delete(&topology).await;
}
