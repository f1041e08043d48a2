//! The orders contract of `examples/redis_consumer.rs`, driven from tests as a child process
//! against the real Redis: each test gets streams and hashes of its own (`redis-<name>-<pid>`).
#![allow(dead_code)] // each test binary uses part of it

use std::collections::{BTreeMap, HashMap};
use std::path::PathBuf;
use std::process::{Command, Stdio};

use delivery::dead_letter::DeadLetter;
use delivery::redis::{RedisDeadLetters, RedisTopology};
use redis::Value;
use redis::aio::ConnectionManager;

use crate::dead_letters;
use crate::process::{Running, example_binary};

pub fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

pub struct Env {
    pub stream: String,
    pub topology: RedisTopology,
    pub redis: ConnectionManager,
    /// The example's `BATCH_SIZE` (1: one unit per call).
    pub batch_size: usize,
    binary: PathBuf,
    delivery_limit: u32,
}

pub const GROUP: &str = "billing";

impl Env {
    pub async fn new(name: &str, delivery_limit: u32) -> Env {
        let stream = format!("redis-{name}-{}", std::process::id());
        let redis = delivery::redis::connect(&redis_url())
            .await
            .unwrap_or_else(|e| panic!("Redis unreachable at {}: {e}", redis_url()));
        let topology = RedisTopology::new(&stream, GROUP);
        let env = Env {
            binary: tokio::task::spawn_blocking(|| example_binary("redis_consumer"))
                .await
                .unwrap(),
            stream,
            topology,
            redis,
            batch_size: 1,
            delivery_limit,
        };
        env.delete_keys().await;
        env
    }

    pub async fn delete_keys(&self) {
        let mut redis = self.redis.clone();
        let _: () = redis::cmd("DEL")
            .arg(&self.stream)
            .arg(self.topology.dead_letter_stream_name())
            .arg(format!("{}:orders", self.stream))
            .arg(format!("{}:balances", self.stream))
            .query_async(&mut redis)
            .await
            .unwrap();
    }

    pub fn start(&self, concurrency: usize, consumer: &str, effect_delay_ms: u64) -> Running {
        Command::new(&self.binary)
            .env("REDIS_URL", redis_url())
            .env("STREAM", &self.stream)
            .env("GROUP", GROUP)
            .env("CONSUMER", consumer)
            .env("DELIVERY_LIMIT", self.delivery_limit.to_string())
            .env("CLAIM_IDLE_MS", "200")
            .env("BATCH", "32")
            .env("CONCURRENCY", concurrency.to_string())
            .env("BATCH_SIZE", self.batch_size.to_string())
            .env("EFFECT_DELAY_MS", effect_delay_ms.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .map(Running)
            .expect("starting the example")
    }

    pub async fn publish(&self, id: &str, body: &str) {
        let mut redis = self.redis.clone();
        delivery::redis::publish(
            &mut redis,
            &self.stream,
            &delivery::Unit::new(id, body.to_owned()),
        )
        .await
        .unwrap();
    }

    pub async fn hlen(&self, key: &str) -> u64 {
        let mut redis = self.redis.clone();
        redis::cmd("HLEN")
            .arg(format!("{}:{key}", self.stream))
            .query_async(&mut redis)
            .await
            .unwrap()
    }

    pub async fn balances(&self) -> BTreeMap<String, i64> {
        let mut redis = self.redis.clone();
        let all: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(format!("{}:balances", self.stream))
            .query_async(&mut redis)
            .await
            .unwrap();
        all.into_iter().collect()
    }

    pub fn dead_letters(&self) -> RedisDeadLetters {
        RedisDeadLetters::new(redis_url(), &self.topology).unwrap()
    }

    /// Every record in the dead letter.
    pub async fn all_dead(&self) -> Vec<DeadLetter> {
        dead_letters::all(&self.dead_letters()).await
    }

    /// The fields of the dead-letter entry `entry_id`, in order, exactly as stored.
    pub async fn dead_letter_fields(&self, entry_id: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
        let mut redis = self.redis.clone();
        let range: Value = redis::cmd("XRANGE")
            .arg(self.topology.dead_letter_stream_name())
            .arg(entry_id)
            .arg(entry_id)
            .query_async(&mut redis)
            .await
            .unwrap();
        let bytes = |v: &Value| match v {
            Value::BulkString(b) => b.clone(),
            other => panic!("{other:?}"),
        };
        match range {
            Value::Array(entries) => match &entries[..] {
                [Value::Array(entry)] => match &entry[..] {
                    [_, Value::Array(fields)] => fields
                        .chunks(2)
                        .map(|kv| (bytes(&kv[0]), bytes(&kv[1])))
                        .collect(),
                    other => panic!("{other:?}"),
                },
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
    }

    /// The group's pending entries, and whether it has been handed every entry of the stream.
    pub async fn group_state(&self) -> (i64, bool) {
        let mut redis = self.redis.clone();
        let groups: Value = redis::cmd("XINFO")
            .arg("GROUPS")
            .arg(&self.stream)
            .query_async(&mut redis)
            .await
            .unwrap();
        let stream: Value = redis::cmd("XINFO")
            .arg("STREAM")
            .arg(&self.stream)
            .query_async(&mut redis)
            .await
            .unwrap();
        let Value::Array(groups) = groups else {
            panic!("{groups:?}")
        };
        let group = groups
            .into_iter()
            .map(pairs)
            .find(|g| text(&g["name"]) == GROUP)
            .expect("the group exists");
        let last = text(&pairs(stream)["last-generated-id"]);
        let pending = match group["pending"] {
            Value::Int(n) => n,
            ref other => panic!("{other:?}"),
        };
        (pending, text(&group["last-delivered-id"]) == last)
    }

    pub async fn cleanup(self) {
        self.delete_keys().await;
    }
}

fn text(value: &Value) -> String {
    match value {
        Value::BulkString(b) => String::from_utf8_lossy(b).into_owned(),
        Value::SimpleString(s) => s.clone(),
        other => panic!("{other:?}"),
    }
}

fn pairs(value: Value) -> HashMap<String, Value> {
    match value {
        Value::Array(flat) => flat
            .chunks(2)
            .map(|kv| (text(&kv[0]), kv[1].clone()))
            .collect(),
        Value::Map(map) => map.into_iter().map(|(k, v)| (text(&k), v)).collect(),
        other => panic!("{other:?}"),
    }
}

pub fn by_id(dead: &[DeadLetter]) -> BTreeMap<String, &DeadLetter> {
    dead.iter().map(|d| (d.id().to_string(), d)).collect()
}
