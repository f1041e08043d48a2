//! `examples/redis_consumer.rs` run as a child process against the real Redis: its contract, and
//! SIGKILL mid-effect many times over thousands of units. Fails, never skips, when Redis is
//! unreachable. Each test uses streams and hashes of its own (`redis-<name>-<pid>`).
#![cfg(feature = "redis")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/process.rs"]
mod process;

use process::{example_binary, order, terminate, wait_for};
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::Duration;

use delivery::dead_letter::{DeadLetter, DeadLetters};
use delivery::redis::{RedisDeadLetters, RedisTopology};
use delivery::{ReasonKind, UnitId};
use redis::Value;
use redis::aio::MultiplexedConnection;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

struct Env {
    stream: String,
    topology: RedisTopology,
    redis: MultiplexedConnection,
    binary: PathBuf,
    delivery_limit: u32,
}

const GROUP: &str = "billing";

impl Env {
    async fn new(name: &str, delivery_limit: u32) -> Env {
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
            delivery_limit,
        };
        env.delete_keys().await;
        env
    }

    async fn delete_keys(&self) {
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

    fn start(&self, concurrency: usize, consumer: &str, effect_delay_ms: u64) -> Child {
        Command::new(&self.binary)
            .env("REDIS_URL", redis_url())
            .env("STREAM", &self.stream)
            .env("GROUP", GROUP)
            .env("CONSUMER", consumer)
            .env("DELIVERY_LIMIT", self.delivery_limit.to_string())
            .env("CLAIM_IDLE_MS", "200")
            .env("BATCH", "32")
            .env("CONCURRENCY", concurrency.to_string())
            .env("EFFECT_DELAY_MS", effect_delay_ms.to_string())
            .env("RUST_LOG", "warn")
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the example")
    }

    async fn publish(&self, id: &str, body: &str) {
        let mut redis = self.redis.clone();
        delivery::redis::publish(
            &mut redis,
            &self.stream,
            &delivery::Unit::new(id, body.to_owned()),
        )
        .await
        .unwrap();
    }

    async fn hlen(&self, key: &str) -> u64 {
        let mut redis = self.redis.clone();
        redis::cmd("HLEN")
            .arg(format!("{}:{key}", self.stream))
            .query_async(&mut redis)
            .await
            .unwrap()
    }

    async fn balances(&self) -> BTreeMap<String, i64> {
        let mut redis = self.redis.clone();
        let all: HashMap<String, i64> = redis::cmd("HGETALL")
            .arg(format!("{}:balances", self.stream))
            .query_async(&mut redis)
            .await
            .unwrap();
        all.into_iter().collect()
    }

    fn dead_letters(&self) -> RedisDeadLetters {
        RedisDeadLetters::new(&redis_url(), &self.topology).unwrap()
    }

    /// Every record in the dead letter.
    async fn all_dead(&self) -> Vec<DeadLetter> {
        dead_letters::all(&self.dead_letters()).await
    }

    /// The fields of the dead-letter entry `entry_id`, in order, exactly as stored.
    async fn dead_letter_fields(&self, entry_id: &str) -> Vec<(Vec<u8>, Vec<u8>)> {
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
    async fn group_state(&self) -> (i64, bool) {
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

    async fn cleanup(self) {
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

fn by_id(dead: &[DeadLetter]) -> BTreeMap<String, &DeadLetter> {
    dead.iter().map(|d| (d.id().to_string(), d)).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_example_applies_orders_once_and_dead_letters_poison() {
    let env = Env::new("contract", 5).await;
    let mut child = env.start(8, "contract", 0);
    env.publish("m-1", &order("o-1", "c-1", 100)).await;
    env.publish("m-2", &order("o-2", "c-1", 50)).await;
    env.publish("m-1", &order("o-1", "c-1", 100)).await; // the same unit again
    env.publish("m-3", &order("o-3", "c-2", 7)).await;
    env.publish("bad-json", "{not json").await;
    env.publish("missing-field", r#"{"order_id":"o-9","customer_id":"c-9"}"#)
        .await;
    env.publish("negative", &order("o-neg", "c-3", -5)).await;
    // An entry in no layout at all: no `payload`, no `id`.
    let mut redis = env.redis.clone();
    let raw_id: String = redis::cmd("XADD")
        .arg(&env.stream)
        .arg("*")
        .arg("order_id")
        .arg("o-raw")
        .arg("blob")
        .arg(&[0xffu8, 0x00, 0x7f][..])
        .query_async(&mut redis)
        .await
        .unwrap();

    wait_for(
        "3 orders and 4 dead letters",
        Duration::from_secs(60),
        async || env.hlen("orders").await == 3 && env.dead_letters().count().await.unwrap() == 4,
    )
    .await;
    assert_eq!(
        env.balances().await,
        BTreeMap::from([("c-1".into(), 150), ("c-2".into(), 7)])
    );
    let dead = env.all_dead().await;
    let dead = by_id(&dead);
    let bad = dead["bad-json"];
    assert_eq!(bad.reason, Some(ReasonKind::Malformed));
    assert_eq!(bad.unit.payload().as_ref(), b"{not json", "intact");
    assert_eq!(bad.delivery_count().get(), 1, "dead-lettered directly");
    assert_eq!(bad.source, env.stream);
    assert!(bad.dead_lettered_at.is_some());
    assert_eq!(dead["missing-field"].reason, Some(ReasonKind::Malformed));
    assert_eq!(dead["negative"].reason, Some(ReasonKind::Rejected));
    assert_eq!(dead["negative"].delivery_count().get(), 1);
    assert!(dead["negative"].detail.contains("negative amount"));
    // The entry with no `id` field is known by the entry id it had in the stream.
    let raw = dead[raw_id.as_str()];
    assert_eq!(raw.reason, Some(ReasonKind::Malformed));
    assert_eq!(
        env.dead_letters()
            .peek(&UnitId::new(raw_id.as_str()))
            .await
            .unwrap()
            .as_ref(),
        Some(raw)
    );
    assert_eq!(raw.unit.headers().get_str("order_id"), Some("o-raw"));
    assert_eq!(
        raw.unit.headers().get("blob").map(|b| b.as_ref()),
        Some(&[0xff, 0x00, 0x7f][..])
    );
    assert_eq!(
        &env.dead_letter_fields(&raw.position).await[..2],
        &[
            (b"order_id".to_vec(), b"o-raw".to_vec()),
            (b"blob".to_vec(), vec![0xff, 0x00, 0x7f])
        ],
        "every field kept, in order, byte for byte"
    );
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        4,
        "peeking consumed nothing"
    );

    let status = terminate(&mut child);
    assert!(
        status.success(),
        "graceful shutdown on SIGTERM exits 0: {status:?}"
    );
    assert_eq!(env.group_state().await, (0, true), "nothing left pending");
    env.cleanup().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigkill_mid_effect_loses_nothing_and_applies_each_order_once() {
    const UNITS: usize = 3000;
    const POISON_EVERY: usize = 100;
    let env = Env::new("crash", 5).await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut poison = BTreeSet::new();
    for i in 0..UNITS {
        if i % POISON_EVERY == 50 {
            let id = format!("poison-{i}");
            let body = if i % 200 == 50 {
                "{oops".to_owned()
            } else {
                order(&format!("o-{i}"), "c-x", -1)
            };
            env.publish(&id, &body).await;
            poison.insert((id, body));
            continue;
        }
        let customer = format!("c-{}", i % 37);
        let amount = (i % 100 + 1) as i64;
        *expected.entry(customer.clone()).or_default() += amount;
        env.publish(
            &format!("m-{i}"),
            &order(&format!("o-{i}"), &customer, amount),
        )
        .await;
    }
    let valid_units = (UNITS - poison.len()) as u64;

    // Kill the consumer with SIGKILL at varying points, many times. Each handler pauses 40 ms
    // between its effect and its acknowledgement (8 at once: about 200 units a second), so the
    // kills land while the stream is being consumed, on units mid-way.
    let mut kills = 0;
    for round in 0..12u64 {
        let mut child = env.start(8, &format!("crash-{round}"), 40);
        tokio::time::sleep(Duration::from_millis(400 + (round * 137) % 700)).await;
        child.kill().unwrap(); // SIGKILL
        child.wait().unwrap();
        kills += 1;
    }
    let applied_before_final = env.hlen("orders").await;
    let pending_after_kills = env.group_state().await.0;

    let mut child = env.start(16, "final", 0);
    wait_for(
        "every valid order applied and the poison dead-lettered",
        Duration::from_secs(180),
        async || {
            env.hlen("orders").await == valid_units
                && env.dead_letters().count().await.unwrap() >= poison.len() as u64
                && env.group_state().await == (0, true)
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    assert_eq!(
        env.balances().await,
        expected,
        "every order's amount counted exactly once"
    );
    assert_eq!(env.hlen("orders").await, valid_units);
    let dead = env.all_dead().await;
    let found: BTreeSet<(String, String)> = dead
        .iter()
        .map(|d| {
            (
                d.id().to_string(),
                String::from_utf8(d.unit.payload().to_vec()).unwrap(),
            )
        })
        .collect();
    assert_eq!(
        found, poison,
        "the dead letter holds exactly the poison units, intact"
    );
    for d in &dead {
        assert!(
            matches!(d.reason, Some(ReasonKind::Malformed | ReasonKind::Rejected)),
            "{d:?}"
        );
        assert_eq!(d.source, env.stream);
    }
    eprintln!(
        "crash run: {UNITS} units, {kills} SIGKILLs, {applied_before_final} applied and \
         {pending_after_kills} pending before the final consumer, {} dead-letter entries for {} \
         poison units",
        dead.len(),
        poison.len()
    );
    env.cleanup().await;
}
