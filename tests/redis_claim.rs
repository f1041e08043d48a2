//! Pending entries of a consumer that died are claimed back by another consumer of the group,
//! with Redis's own delivery count, and not before the claim idle time; an entry claimed past the
//! bound goes to the dead letter (the runtime's check) without reaching a handler. Against the real Redis.
#![cfg(feature = "redis")]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use delivery::redis::{RedisDeadLetters, RedisSource, RedisTopology};
use delivery::{
    Consumer, HandlerError, State, Unit, UnitId, consumer, disposition::Disposition,
    disposition::ReasonKind, transport::Source,
};
use redis::Value;
use redis::aio::ConnectionManager;

/// The ids a handler saw.
#[derive(Clone, Default)]
struct Seen {
    ids: Arc<Mutex<Vec<String>>>,
}

#[consumer]
async fn record(State(seen): State<Seen>, id: UnitId) -> Result<(), HandlerError> {
    seen.ids.lock().unwrap().push(id.to_string());
    Ok(())
}

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

async fn fresh(name: &str) -> (RedisTopology, ConnectionManager) {
    let url = redis_url();
    let mut redis = delivery::redis::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    let topology = RedisTopology::new(format!("redis-{name}-{}", std::process::id()), "workers");
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut redis)
        .await
        .unwrap();
    delivery::redis::declare(&url, &topology).await.unwrap();
    (topology, redis)
}

/// `(consumer, times delivered)` of a pending entry, from `XPENDING`'s extended form.
async fn pending(
    redis: &mut ConnectionManager,
    stream: &str,
    entry_id: &str,
) -> Option<(String, i64)> {
    let reply: Value = redis::cmd("XPENDING")
        .arg(stream)
        .arg("workers")
        .arg(entry_id)
        .arg(entry_id)
        .arg(1)
        .query_async(redis)
        .await
        .unwrap();
    let Value::Array(rows) = reply else {
        panic!("{reply:?}")
    };
    let Value::Array(row) = rows.into_iter().next()? else {
        panic!()
    };
    let consumer = match &row[1] {
        Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
        other => panic!("{other:?}"),
    };
    let Value::Int(count) = row[3] else {
        panic!("{row:?}")
    };
    Some((consumer, count))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dead_consumers_unit_is_claimed_by_another_after_the_idle_time() {
    let (topology, mut redis) = fresh("claim").await;
    let url = redis_url();
    delivery::redis::publish(&mut redis, &topology.stream, &Unit::new("u-1", "first"))
        .await
        .unwrap();

    // Consumer `a` takes the unit and dies without settling it.
    let mut a = RedisSource::connect(&url, topology.clone().consumer("a"))
        .await
        .unwrap();
    let (unit, handle) = a.receive().await.unwrap().unwrap();
    assert_eq!(unit.id().as_str(), "u-1");
    assert_eq!(unit.delivery_count().get(), 1);
    let entry_id = handle.entry_id().to_owned();
    drop(handle);
    drop(a);
    assert_eq!(
        pending(&mut redis, &topology.stream, &entry_id).await,
        Some(("a".into(), 1)),
        "still pending for the dead consumer"
    );

    // Consumer `c`, whose claim idle time is an hour, does not take it: it gets the next new unit.
    let mut c = RedisSource::connect(
        &url,
        topology
            .clone()
            .consumer("c")
            .claim_idle(Duration::from_secs(3600)),
    )
    .await
    .unwrap();
    delivery::redis::publish(&mut redis, &topology.stream, &Unit::new("u-2", "second"))
        .await
        .unwrap();
    let (second, handle) = c.receive().await.unwrap().unwrap();
    assert_eq!(second.id().as_str(), "u-2");
    assert_eq!(second.delivery_count().get(), 1);
    delivery::testing::settle(handle, &second, &Disposition::Ack)
        .await
        .unwrap();
    assert_eq!(
        pending(&mut redis, &topology.stream, &entry_id).await,
        Some(("a".into(), 1)),
        "not claimed before its idle time"
    );

    // Consumer `b`, with a 300 ms claim idle time, claims it back: the same unit, Redis's count.
    let mut b = RedisSource::connect(
        &url,
        topology
            .clone()
            .consumer("b")
            .claim_idle(Duration::from_millis(300)),
    )
    .await
    .unwrap();
    let (claimed, handle) = b.receive().await.unwrap().unwrap();
    assert_eq!(claimed.id().as_str(), "u-1");
    assert_eq!(claimed.payload().as_ref(), b"first");
    assert_eq!(claimed.delivery_count().get(), 2, "counted by Redis");
    assert_eq!(handle.entry_id(), entry_id);
    assert_eq!(
        pending(&mut redis, &topology.stream, &entry_id).await,
        Some(("b".into(), 2))
    );
    delivery::testing::settle(handle, &claimed, &Disposition::Ack)
        .await
        .unwrap();
    assert_eq!(
        pending(&mut redis, &topology.stream, &entry_id).await,
        None,
        "acknowledged"
    );
    drop((b, c));
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .query_async(&mut redis)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_claimed_past_the_bound_goes_to_the_dead_letter_unhandled() {
    let (topology, mut redis) = fresh("bound").await;
    let url = redis_url();
    let topology = topology
        .max_deliveries(2)
        .claim_idle(Duration::from_millis(50));
    delivery::redis::publish(&mut redis, &topology.stream, &Unit::new("crashes", "{}"))
        .await
        .unwrap();
    // Two consumers in turn take it and die on it: deliveries 1 and 2 of a bound of 2.
    for (name, count) in [("a", 1), ("b", 2)] {
        let mut source = RedisSource::connect(&url, topology.clone().consumer(name))
            .await
            .unwrap();
        assert_eq!(source.max_deliveries().map(|n| n.get()), Some(2));
        let (unit, handle) = source.receive().await.unwrap().unwrap();
        assert_eq!(
            (unit.id().as_str(), unit.delivery_count().get()),
            ("crashes", count)
        );
        drop((handle, source));
    }
    // The third claim is delivery 3, past the bound: the runtime moves it to the dead letter
    // before any handler runs, and goes on to the next unit. (The wait makes the entry
    // claimable when `c` starts, so `c`'s first fetch claims before it reads.)
    tokio::time::sleep(Duration::from_millis(100)).await;
    delivery::redis::publish(&mut redis, &topology.stream, &Unit::new("next", "{}"))
        .await
        .unwrap();
    let source = RedisSource::connect(&url, topology.clone().consumer("c"))
        .await
        .unwrap();
    let seen = Seen::default();
    let report = Consumer::new(source)
        .state(seen.clone())
        .shutdown_on({
            let seen = seen.clone();
            async move {
                while !seen.ids.lock().unwrap().iter().any(|id| id == "next") {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                }
            }
        })
        .run(record)
        .await;
    assert_eq!(
        *seen.ids.lock().unwrap(),
        ["next"],
        "the unit past the bound never reached a handler"
    );
    assert_eq!((report.acked, report.dead_lettered), (1, 1), "{report:?}");
    let dead = RedisDeadLetters::new(&url, &topology)
        .unwrap()
        .list(10, None)
        .await
        .unwrap()
        .records;
    assert_eq!(dead.len(), 1, "{dead:?}");
    assert_eq!(dead[0].id().as_str(), "crashes");
    assert_eq!(dead[0].reason, Some(ReasonKind::Exhausted));
    assert_eq!(dead[0].delivery_count().get(), 3);
    assert_eq!(dead[0].unit.payload().as_ref(), b"{}");
    let summary: Value = redis::cmd("XPENDING")
        .arg(&topology.stream)
        .arg("workers")
        .query_async(&mut redis)
        .await
        .unwrap();
    assert!(
        matches!(&summary, Value::Array(s) if s.first() == Some(&Value::Int(0))),
        "acknowledged once dead-lettered: {summary:?}"
    );
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(&mut redis)
        .await
        .unwrap();
}
