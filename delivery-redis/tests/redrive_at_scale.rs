//! A redrive at scale against the real Redis (127.0.0.1:6379, or `REDIS_URL`): 1 000 units
//! dead-lettered by a consumer, all redriven in one call, every one back in its source under its
//! own id and gone from the dead letter. Prints how long the redrive took.
use std::time::Instant;

use delivery_core::dead_letter::{DeadLetters, Selection};
use delivery_core::disposition::{DeadLetterReason, Disposition, ReasonKind};
use delivery_core::transport::Source;
use delivery_core::unit::Unit;
use delivery_redis::{RedisDeadLetters, RedisSource, RedisTopology};
use redis::aio::ConnectionManager;

const UNITS: usize = 1_000;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redrives_1000_dead_letters_back_under_their_ids() {
    let url = redis_url();
    let mut redis = delivery_redis::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e} (scripts/services.sh)"));
    let topology = RedisTopology::new(format!("redrive-scale-{}", std::process::id()), "ops");
    remove_streams(&mut redis, &topology).await;
    delivery_redis::declare(&url, &topology).await.unwrap();
    for i in 0..UNITS {
        let unit = Unit::new(format!("u-{i}"), format!("body {i}"));
        delivery_redis::publish(&mut redis, &topology.stream, &unit)
            .await
            .unwrap();
    }
    let mut source = RedisSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let refused = Disposition::DeadLetter(DeadLetterReason::new(ReasonKind::Rejected, "no"));
    for _ in 0..UNITS {
        let (unit, handle) = source.receive().await.unwrap().unwrap();
        delivery_core::testing::settle(handle, &unit, &refused)
            .await
            .unwrap();
    }
    let dead = RedisDeadLetters::new(url.as_str(), &topology).unwrap();
    assert_eq!(dead.count().await.unwrap(), UNITS as u64);

    let started = Instant::now();
    let report = dead.redrive(Selection::All).await.unwrap();
    let took = started.elapsed();
    eprintln!("redrive of {UNITS} Redis dead letters took {took:?}");

    assert_eq!(report.redriven.len(), UNITS);
    assert!(report.not_found.is_empty());
    assert_eq!(dead.count().await.unwrap(), 0);
    let length: u64 = redis::cmd("XLEN")
        .arg(&topology.stream)
        .query_async(&mut redis)
        .await
        .unwrap();
    assert_eq!(length, 2 * UNITS as u64, "every unit is back, once");
    for i in 0..UNITS {
        let (unit, _handle) = source.receive().await.unwrap().unwrap();
        assert_eq!(unit.id().as_str(), format!("u-{i}"));
        assert_eq!(unit.payload().as_ref(), format!("body {i}").as_bytes());
    }
    remove_streams(&mut redis, &topology).await;
}

/// Removes the stream and its dead letter (a run's leftovers, or this run's).
async fn remove_streams(redis: &mut ConnectionManager, topology: &RedisTopology) {
    let streams = [topology.stream.clone(), topology.dead_letter_stream_name()];
    let _: () = redis::cmd("DEL")
        .arg(&streams)
        .query_async(redis)
        .await
        .unwrap();
}
