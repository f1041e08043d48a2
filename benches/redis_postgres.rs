//! The Redis Streams transport with a real effect — the orders transaction in PostgreSQL of
//! `examples/support/orders.rs` (the one `examples/nats_consumer.rs` and
//! `examples/kafka_consumer.rs` run) — against a hand-written redis + sqlx loop doing the same
//! transaction, on the real Redis and database.
//!
//!     cargo bench --features redis,postgres --bench redis_postgres
//!
//! Adds `BENCH_N` orders (default 20000) to a fresh stream and group, each entry in the layout of
//! `delivery::redis::publish` (fields `id` = its unit id, `payload`, and `x-delivery-stamp` = its
//! stamp); empties the effect tables; and drains them at concurrency 32 with a pool of 32
//! connections, reading 32 entries at a time:
//!
//! - **delivery**: `RedisSource` (batch 32, delivery limit 5, as `examples/redis_consumer.rs`
//!   configures it) + `Consumer` running the example's own handler (`apply_order`);
//! - **hand-written**: `XREADGROUP GROUP … COUNT 32 BLOCK 2000` on a connection without response
//!   timeout; for each entry of the batch, at once (up to 32 in flight), the same statements in
//!   one sqlx transaction, then `XACK` of that entry on a second, multiplexed connection; all of
//!   the batch awaited before the next read.
//!
//! Each side is timed from its consumer's start to its last acknowledgement. `BENCH_ROUNDS`
//! rounds (default 3), interleaved, the first side alternating; prints every run, the median
//! rates and their ratio, and the median CPU time the bench process spent per unit (PostgreSQL's
//! and Redis's not included). `BENCH_ONLY=hand` or `BENCH_ONLY=delivery` runs one side.

use std::time::Duration;

use delivery::redis::{FIELD_ID, FIELD_PAYLOAD, RedisSource, RedisTopology};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};

mod support;
use support::{Run, env_or, interleaved, measure, report};
#[path = "support/orders_pg.rs"]
mod orders_pg;
use orders_pg::{OrderPlaced, Schema, apply_by_hand, check, order_unit};

const CONCURRENCY: usize = 32;
const BATCH: usize = 32;

fn url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

async fn raw(response_timeout: Option<Duration>) -> MultiplexedConnection {
    redis::Client::open(url())
        .unwrap()
        .get_multiplexed_async_connection_with_config(
            &AsyncConnectionConfig::new().set_response_timeout(response_timeout),
        )
        .await
        .expect("Redis unreachable")
}

async fn delete(topology: &RedisTopology) {
    let mut redis = raw(Some(Duration::from_secs(30))).await;
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut redis)
        .await
        .unwrap();
}

/// A fresh stream and group holding `n` orders, and empty effect tables.
async fn fresh_orders(topology: &RedisTopology, pg: &Schema, n: u64) {
    pg.empty().await;
    delete(topology).await;
    delivery::redis::declare(url(), topology).await.unwrap();
    let mut redis = raw(Some(Duration::from_secs(30))).await;
    let mut i = 0;
    while i < n {
        // `delivery::redis::publish`'s layout, pipelined a thousand at a time.
        let mut pipe = redis::pipe();
        for j in i..(i + 1000).min(n) {
            let unit = order_unit(j);
            pipe.cmd("XADD")
                .arg(&topology.stream)
                .arg("*")
                .arg(FIELD_ID)
                .arg(unit.id().as_str())
                .arg(FIELD_PAYLOAD)
                .arg(unit.payload().as_ref())
                .arg(delivery::headers::STAMP)
                .arg(unit.stamp().unwrap().0)
                .ignore();
        }
        let _: () = pipe.query_async(&mut redis).await.unwrap();
        i += 1000;
    }
}

async fn through_transport(topology: &RedisTopology, pg: &Schema, n: u64) -> Run {
    fresh_orders(topology, pg, n).await;
    let source = RedisSource::connect(url(), topology.clone()).await.unwrap();
    orders_pg::drain(source, pg, n, CONCURRENCY).await
}

/// One entry of an `XREADGROUP` reply: its entry id, unit id, stamp and payload.
struct Entry {
    entry_id: String,
    id: String,
    stamp: i64,
    payload: Vec<u8>,
}

/// The entries of an `XREADGROUP` reply for one stream.
fn entries(reply: Value) -> Vec<Entry> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    let mut out = Vec::new();
    for stream in streams {
        let Value::Array(mut parts) = stream else {
            panic!("a stream: {stream:?}");
        };
        let Value::Array(entries) = parts.remove(1) else {
            panic!("entries");
        };
        for entry in entries {
            let Value::Array(mut entry) = entry else {
                panic!("an entry: {entry:?}");
            };
            let (Value::Array(fields), Value::BulkString(entry_id)) =
                (entry.swap_remove(1), entry.swap_remove(0))
            else {
                panic!("an entry's id and fields");
            };
            let (mut id, mut stamp, mut payload) = (None, None, None);
            let mut fields = fields.into_iter();
            while let (Some(Value::BulkString(name)), Some(Value::BulkString(value))) =
                (fields.next(), fields.next())
            {
                match name.as_slice() {
                    b"id" => id = Some(String::from_utf8(value).unwrap()),
                    b"x-delivery-stamp" => {
                        stamp = Some(std::str::from_utf8(&value).unwrap().parse().unwrap())
                    }
                    b"payload" => payload = Some(value),
                    _ => {}
                }
            }
            out.push(Entry {
                entry_id: String::from_utf8(entry_id).unwrap(),
                id: id.expect("an id field"),
                stamp: stamp.expect("a stamp field"),
                payload: payload.expect("a payload field"),
            });
        }
    }
    out
}

async fn hand_written(topology: &RedisTopology, pg: &Schema, n: u64) -> Run {
    fresh_orders(topology, pg, n).await;
    let mut reader = raw(None).await;
    let acker = raw(Some(Duration::from_secs(10))).await;
    let run = measure(n, hand_written_loop(topology, pg, n, &mut reader, &acker)).await;
    check(&pg.db, n).await;
    run
}

async fn hand_written_loop(
    topology: &RedisTopology,
    pg: &Schema,
    n: u64,
    reader: &mut MultiplexedConnection,
    acker: &MultiplexedConnection,
) {
    let mut acked = 0u64;
    while acked < n {
        let reply: Value = redis::cmd("XREADGROUP")
            .arg("GROUP")
            .arg(&topology.group)
            .arg("hand")
            .arg("COUNT")
            .arg(BATCH)
            .arg("BLOCK")
            .arg(2000)
            .arg("STREAMS")
            .arg(&topology.stream)
            .arg(">")
            .query_async(reader)
            .await
            .unwrap();
        let apply = |entry: Entry| {
            let mut acker = acker.clone();
            let (stream, group) = (&topology.stream, &topology.group);
            async move {
                let order: OrderPlaced = serde_json::from_slice(&entry.payload).unwrap();
                apply_by_hand(&pg.db, &entry.id, entry.stamp, &order)
                    .await
                    .unwrap();
                let acked: i64 = redis::cmd("XACK")
                    .arg(stream)
                    .arg(group)
                    .arg(entry.entry_id)
                    .query_async(&mut acker)
                    .await
                    .unwrap();
                assert_eq!(acked, 1);
            }
        };
        let mut inflight = FuturesUnordered::new();
        for entry in entries(reply) {
            inflight.push(apply(entry));
            acked += 1;
        }
        while inflight.next().await.is_some() {}
    }
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 3).max(1);
    let name = format!("bench_redis_pg_{}", std::process::id());
    let topology = RedisTopology::new(name.replace('_', "-"), "bench")
        .max_deliveries(5)
        .batch(BATCH)
        .consumer("transport");
    let pg = Schema::create(&name, CONCURRENCY as u32).await;

    let (hand, ours) = interleaved(
        rounds,
        async || hand_written(&topology, &pg, n).await,
        async || through_transport(&topology, &pg, n).await,
    )
    .await;
    report(
        &format!("orders into PostgreSQL, concurrency {CONCURRENCY}"),
        &format!("{n} units, batch {BATCH}, pool {CONCURRENCY}"),
        "redis + sqlx",
        &hand,
        &ours,
    );

    pg.remove().await;
    delete(&topology).await;
}
