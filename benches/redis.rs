//! The Redis Streams transport against a hand-written loop with the raw client, on the real Redis.
//!
//!     cargo bench --features redis --bench redis
//!
//! Adds `BENCH_N` entries (default 20000) to a fresh stream and group, then consumes them with a
//! no-op handler through `RedisSource` + `Consumer` (batch 32), and the same through a
//! hand-written loop as a user writes it: `XREADGROUP ... COUNT 32 BLOCK` on a connection without
//! response timeout, then one `XACK` per entry on a second connection. First one at a time
//! (concurrency 1: each `XACK` awaited before the next entry, on both sides), then with the
//! acknowledgements of up to 32 entries in flight (the hand-written loop sends a batch's 32
//! `XACK`s at once, pipelined on its multiplexed connection, and awaits them all before the next
//! read).
//!
//! The transport sends at most one `XACK` at a time per source and combines the entries settled
//! while one is in flight into the next (`XACK stream group id1 … idN`); each settle still returns
//! only once the `XACK` carrying its id was answered. At concurrency 1 that changes nothing (one
//! id per `XACK`, as the hand-written loop); at concurrency 32 the transport sends fewer, longer
//! `XACK`s than the hand-written loop's one per entry.
//!
//! Each side runs `BENCH_ROUNDS` times (default 5), interleaved, the first side alternating;
//! prints every run, the median rates and their ratio (and the median of each round's ratio), and the median CPU time the bench process spent per unit (both sides'
//! client work, Redis's own time not included), which the other load of a shared machine
//! disturbs less than the rates. For profiling, `BENCH_ONLY=hand` or `BENCH_ONLY=delivery` runs
//! one side and `BENCH_CONCURRENCY=1` or `32` one of the two cases.

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use delivery::redis::{RedisSource, RedisTopology};
use delivery::{Consumer, HandlerError, State, consumer};
use futures_util::StreamExt;
use futures_util::stream::FuturesUnordered;
use redis::aio::MultiplexedConnection;
use redis::{AsyncConnectionConfig, Value};
use tokio::sync::Notify;

mod support;
use support::{Run, env_or, interleaved, measure, report, selected};

const BATCH: usize = 32;

#[derive(Clone)]
struct Bench {
    done: Arc<AtomicU64>,
    target: u64,
    finished: Arc<Notify>,
}

/// The no-op: counts, and says when the last unit is in (no timer wakes the consumer meanwhile).
#[consumer]
async fn handle(State(bench): State<Bench>) -> Result<(), HandlerError> {
    if bench.done.fetch_add(1, Ordering::Relaxed) + 1 == bench.target {
        bench.finished.notify_one();
    }
    Ok(())
}

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

async fn fresh(topology: &RedisTopology, n: u64) {
    let mut redis = raw(Some(Duration::from_secs(30))).await;
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut redis)
        .await
        .unwrap();
    delivery::redis::declare(url(), topology).await.unwrap();
    let body = br#"{"order_id":"o","customer_id":"c","amount_cents":1}"#;
    let mut i = 0;
    while i < n {
        let mut pipe = redis::pipe();
        for j in i..(i + 1000).min(n) {
            pipe.cmd("XADD")
                .arg(&topology.stream)
                .arg("*")
                .arg("id")
                .arg(format!("b-{j}"))
                .arg("payload")
                .arg(&body[..])
                .ignore();
        }
        let _: () = pipe.query_async(&mut redis).await.unwrap();
        i += 1000;
    }
}

async fn through_transport(topology: &RedisTopology, n: u64, concurrency: usize) -> Run {
    fresh(topology, n).await;
    let bench = Bench {
        done: Arc::new(AtomicU64::new(0)),
        target: n,
        finished: Arc::new(Notify::new()),
    };
    let source = RedisSource::connect(url(), topology.clone()).await.unwrap();
    let finished = bench.finished.clone();
    measure(n, async {
        let report = Consumer::new(source)
            .state(bench)
            .concurrency(concurrency)
            .shutdown_on(async move { finished.notified().await })
            .run(handle)
            .await;
        assert_eq!(report.acked, n);
    })
    .await
}

/// The entry ids of an `XREADGROUP` reply for one stream.
fn entry_ids(reply: Value) -> Vec<String> {
    let Value::Array(streams) = reply else {
        return Vec::new();
    };
    let mut ids = Vec::new();
    for stream in streams {
        let Value::Array(mut parts) = stream else {
            continue;
        };
        let Value::Array(entries) = parts.remove(1) else {
            continue;
        };
        for entry in entries {
            let Value::Array(mut entry) = entry else {
                continue;
            };
            if let Value::BulkString(id) = entry.swap_remove(0) {
                ids.push(String::from_utf8(id).unwrap());
            }
        }
    }
    ids
}

async fn hand_written(topology: &RedisTopology, n: u64, concurrency: usize) -> Run {
    fresh(topology, n).await;
    let mut reader = raw(None).await;
    let acker = raw(Some(Duration::from_secs(10))).await;
    measure(
        n,
        hand_written_loop(topology, n, concurrency, &mut reader, &acker),
    )
    .await
}

async fn hand_written_loop(
    topology: &RedisTopology,
    n: u64,
    concurrency: usize,
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
        let ids = entry_ids(reply);
        let ack = |id: String| {
            let mut acker = acker.clone();
            let (stream, group) = (topology.stream.clone(), topology.group.clone());
            async move {
                let _: i64 = redis::cmd("XACK")
                    .arg(stream)
                    .arg(group)
                    .arg(id)
                    .query_async(&mut acker)
                    .await
                    .unwrap();
            }
        };
        if concurrency == 1 {
            for id in ids {
                ack(id).await;
                acked += 1;
            }
        } else {
            let mut inflight = FuturesUnordered::new();
            for id in ids {
                inflight.push(ack(id));
                acked += 1;
            }
            while inflight.next().await.is_some() {}
        }
    }
}

#[tokio::main]
async fn main() {
    let n: u64 = env_or("BENCH_N", 20_000);
    let rounds: usize = env_or("BENCH_ROUNDS", 5).max(1);
    let topology = RedisTopology::new(format!("bench-{}", std::process::id()), "bench")
        .batch(BATCH)
        .consumer("transport");
    // Two cores shared with the server (and other work) make single runs noisy: each side runs
    // `rounds` times, interleaved, and the medians are compared.
    for (label, concurrency) in [
        ("no-op, concurrency 1", 1),
        ("no-op, acks of a batch in flight (concurrency 32)", 32),
    ] {
        if !selected(concurrency) {
            continue;
        }
        let (hand, ours) = interleaved(
            rounds,
            async || hand_written(&topology, n, concurrency).await,
            async || through_transport(&topology, n, concurrency).await,
        )
        .await;
        report(
            label,
            &format!("{n} units, batch {BATCH}"),
            "redis",
            &hand,
            &ours,
        );
    }
    let mut redis = raw(Some(Duration::from_secs(10))).await;
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut redis)
        .await
        .unwrap();
}
