//! Acknowledgements settled together are combined into one `XACK` at a time, and each settle
//! still returns `Ok` only once the `XACK` carrying its id was answered; a settle dropped while
//! its `XACK` is in flight strands none of the others. Against the real Redis.
#![cfg(feature = "redis")]

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use delivery::redis::{RedisHandle, RedisSource, RedisTopology};
use delivery::{Unit, disposition::Disposition, transport::Source, transport::TransportError};
use futures_util::{FutureExt, StreamExt};
use redis::Value;
use redis::aio::ConnectionManager;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

async fn fresh(name: &str) -> (RedisTopology, ConnectionManager) {
    let url = redis_url();
    let mut redis = delivery::redis::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    let topology =
        RedisTopology::new(format!("redis-{name}-{}", std::process::id()), "workers").batch(64);
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut redis)
        .await
        .unwrap();
    delivery::redis::declare(&url, &topology).await.unwrap();
    (topology, redis)
}

/// Publishes `n` units and receives them all through a fresh source.
async fn received(
    topology: &RedisTopology,
    redis: &mut ConnectionManager,
    n: usize,
) -> (RedisSource, Vec<(Unit, RedisHandle)>) {
    for i in 0..n {
        let unit = Unit::new(format!("u-{i}"), &b"{}"[..]);
        delivery::redis::publish(redis, &topology.stream, &unit)
            .await
            .unwrap();
    }
    let mut source = RedisSource::connect(redis_url(), topology.clone())
        .await
        .unwrap();
    let mut units = Vec::with_capacity(n);
    while units.len() < n {
        units.push(source.receive().await.unwrap().expect("the source ended"));
    }
    (source, units)
}

/// Whether `entry_id` is still pending in the group.
async fn is_pending(redis: &mut ConnectionManager, stream: &str, entry_id: &str) -> bool {
    let reply: Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg("workers")
        .arg(entry_id)
        .arg(entry_id)
        .arg(1)
        .query_async(redis)
        .await
        .unwrap();
    match reply {
        Value::Array(rows) => !rows.is_empty(),
        other => panic!("unexpected XPENDING reply {other:?}"),
    }
}

/// The number of entries pending in the group.
async fn pending_total(redis: &mut ConnectionManager, stream: &str) -> i64 {
    let reply: Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg("workers")
        .query_async(redis)
        .await
        .unwrap();
    match reply {
        Value::Array(parts) => match parts.first() {
            Some(Value::Int(n)) => *n,
            other => panic!("unexpected XPENDING summary {other:?}"),
        },
        other => panic!("unexpected XPENDING reply {other:?}"),
    }
}

type Settling = Pin<Box<dyn Future<Output = Result<(), TransportError>> + Send>>;

fn settle(unit: Unit, handle: RedisHandle) -> Settling {
    Box::pin(async move { delivery::testing::settle(handle, &unit, &Disposition::Ack).await })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acks_in_flight_share_an_xack_and_each_returns_once_answered() {
    let (topology, mut redis) = fresh("acks-combined").await;
    // MONITOR shows every command Redis runs; the entries of this stream are recognised by id.
    let client = redis::Client::open(redis_url()).unwrap();
    let mut monitor = client.get_async_monitor().await.unwrap();
    let (_source, units) = received(&topology, &mut redis, 200).await;
    let ids: Vec<String> = units.iter().map(|(_, h)| h.entry_id().to_owned()).collect();

    // All settled at once from one task, as the runtime does with units in flight. Each checks,
    // as soon as its settle returned, on another connection, that Redis no longer holds its entry
    // pending: `Ok` means the `XACK` carrying it was answered, not just sent.
    let mut checks = futures_util::stream::FuturesUnordered::new();
    for (unit, handle) in units {
        let id = handle.entry_id().to_owned();
        let mut check = redis.clone();
        let stream = topology.stream.clone();
        checks.push(async move {
            settle(unit, handle).await.expect("acknowledged");
            assert!(
                !is_pending(&mut check, &stream, &id).await,
                "entry {id}'s settle returned Ok while it was still pending"
            );
        });
    }
    while checks.next().await.is_some() {}
    assert_eq!(pending_total(&mut redis, &topology.stream).await, 0);

    // The XACKs Redis ran for this stream: every id in one, and fewer XACKs than ids.
    let marker = format!("end-of-{}", topology.stream);
    let _: String = redis::cmd("ECHO")
        .arg(&marker)
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut lines = monitor.on_message::<String>();
    let mut xacks = Vec::new();
    let wanted = format!("\"XACK\" \"{}\"", topology.stream);
    while let Some(line) = lines.next().await {
        if line.contains(&marker) {
            break;
        }
        if line.contains(&wanted) {
            xacks.push(line);
        }
    }
    let mut carried = 0;
    for id in &ids {
        let quoted = format!("\"{id}\"");
        assert!(
            xacks.iter().any(|x| x.contains(&quoted)),
            "no XACK carried {id}"
        );
        carried += 1;
    }
    assert_eq!(carried, 200);
    assert!(
        xacks.len() < ids.len(),
        "{} XACKs for {} entries settled together: none was combined",
        xacks.len(),
        ids.len()
    );
}

// One thread: while the test polls by hand, the connection's own task cannot run, so every
// settle is still waiting for Redis where the test says so.
#[tokio::test(flavor = "current_thread")]
async fn a_settle_dropped_while_sending_strands_no_other() {
    let (topology, mut redis) = fresh("acks-dropped").await;
    let (_source, mut units) = received(&topology, &mut redis, 51).await;
    // One settled first, so the connection for acknowledgements is open.
    let (unit, handle) = units.remove(0);
    settle(unit, handle).await.expect("acknowledged");
    let ids: Vec<String> = units.iter().map(|(_, h)| h.entry_id().to_owned()).collect();
    let mut settling: Vec<Option<Settling>> = units
        .into_iter()
        .map(|(unit, handle)| Some(settle(unit, handle)))
        .collect();

    // Polled once each: the first sends its XACK, the others queue behind it.
    for s in settling.iter_mut().flatten() {
        assert!(
            s.as_mut().now_or_never().is_none(),
            "settled before Redis could answer"
        );
    }
    // The sender is dropped before its answer; then the first waiter takes the turn for the
    // queue (each polled once more) and is dropped in turn while sending.
    settling[0] = None;
    for s in settling.iter_mut().flatten() {
        assert!(s.as_mut().now_or_never().is_none());
    }
    settling[1] = None;

    // The rest still complete, each acknowledged.
    let rest = settling
        .into_iter()
        .enumerate()
        .filter_map(|(i, s)| Some((i, s?)));
    let outcomes = tokio::time::timeout(
        Duration::from_secs(60),
        futures_util::future::join_all(rest.map(|(i, s)| async move { (i, s.await) })),
    )
    .await
    .expect("settles left waiting after the sender was dropped");
    assert_eq!(outcomes.len(), 48);
    for (i, outcome) in outcomes {
        outcome.unwrap_or_else(|e| panic!("entry {}: {e}", ids[i]));
        assert!(!is_pending(&mut redis, &topology.stream, &ids[i]).await);
    }
}
