//! The operator's side of the Redis dead-letter stream, against the real Redis: count (and its
//! gauge), list and peek without consuming, redrive under the same unit id, purge.
#![cfg(feature = "redis")]

#[path = "support/two_groups.rs"]
mod two_groups;

use std::time::{Duration, SystemTime};

use delivery::dead_letter::{DeadLetters, Selection};
use delivery::redis::{RedisDeadLetters, RedisSource, RedisTopology};
use delivery::{
    Headers, Unit, UnitId, disposition::DeadLetterReason, disposition::Disposition,
    disposition::ReasonKind, transport::Source,
};
use metrics_util::debugging::{DebugValue, DebuggingRecorder};
use redis::Value;

fn redis_url() -> String {
    std::env::var("REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into())
}

#[tokio::test(flavor = "current_thread")]
async fn list_peek_and_redrive_keep_units_intact_under_their_id() {
    let recorder = DebuggingRecorder::new();
    let snapshotter = recorder.snapshotter();
    let _metrics = metrics::set_default_local_recorder(&recorder);

    let url = redis_url();
    let mut redis = delivery::redis::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    let topology = RedisTopology::new(format!("redis-dlq-{}", std::process::id()), "ops");
    let dlq = topology.dead_letter_stream_name();
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(&dlq)
        .query_async(&mut redis)
        .await
        .unwrap();
    delivery::redis::declare(&url, &topology).await.unwrap();

    // Three units, one of them an entry without an `id` field, all rejected by a consumer.
    for id in ["d-1", "d-2"] {
        let unit = Unit::new(id, format!("body of {id}"))
            .with_headers(Headers::from_pairs([("tenant", "acme")]));
        delivery::redis::publish(&mut redis, &topology.stream, &unit)
            .await
            .unwrap();
    }
    let bare: String = redis::cmd("XADD")
        .arg(&topology.stream)
        .arg("*")
        .arg("payload")
        .arg("bare body")
        .arg("tenant")
        .arg("globex")
        .query_async(&mut redis)
        .await
        .unwrap();
    let mut source = RedisSource::connect(&url, topology.clone()).await.unwrap();
    // Redis's clock in whole milliseconds, as the dead-letter entry ids carry it.
    let before = SystemTime::now() - Duration::from_millis(1);
    for _ in 0..3 {
        let (unit, handle) = source.receive().await.unwrap().unwrap();
        let refused = Disposition::DeadLetter(DeadLetterReason::new(
            ReasonKind::Rejected,
            format!("{} refused", unit.id()),
        ));
        delivery::testing::settle(handle, &unit, &refused)
            .await
            .unwrap();
    }

    let dead = RedisDeadLetters::new(&url, &topology).unwrap();
    assert_eq!(dead.name(), dlq);
    assert_eq!(dead.count().await.unwrap(), 3);
    let depth = snapshotter
        .snapshot()
        .into_vec()
        .into_iter()
        .find(|(key, _, _, _)| {
            key.key().name() == "delivery_dead_letter_depth"
                && key
                    .key()
                    .labels()
                    .any(|l| l.key() == "dead_letter" && l.value() == dlq)
        })
        .map(|(_, _, _, value)| value);
    assert_eq!(depth, Some(DebugValue::Gauge(3.0.into())));

    let after = SystemTime::now() + Duration::from_millis(1);
    let listed = dead.list(10, None).await.unwrap();
    assert!(listed.next.is_none(), "one page holds them all");
    let peeked = listed.records;
    let ids: Vec<&str> = peeked.iter().map(|r| r.id().as_str()).collect();
    assert_eq!(ids, ["d-1", "d-2", bare.as_str()], "oldest first");
    for record in &peeked {
        assert_eq!(record.reason, Some(ReasonKind::Rejected));
        assert_eq!(record.source, topology.stream);
        assert_eq!(record.delivery_count().get(), 1);
        assert_eq!(record.detail, format!("{} refused", record.id()));
        assert!(
            record
                .unit
                .headers()
                .iter()
                .all(|(name, _)| !name.starts_with("x-dead-letter-")),
            "the unit's own headers: {:?}",
            record.unit.headers()
        );
        let at = record.dead_lettered_at.expect("the entry id's time");
        assert!(before <= at && at <= after, "{at:?} not within the test");
    }
    assert_eq!(peeked[0].unit.payload().as_ref(), b"body of d-1");
    assert_eq!(peeked[0].unit.headers().get_str("tenant"), Some("acme"));
    assert_eq!(peeked[2].unit.headers().get_str("tenant"), Some("globex"));
    assert_eq!(peeked[2].unit.headers().len(), 1);
    // Paging: a page of one, then what follows it.
    let first = dead.list(1, None).await.unwrap();
    assert_eq!(first.records, peeked[..1]);
    let rest = dead
        .list(10, Some(&first.next.expect("more follow")))
        .await
        .unwrap();
    assert_eq!(rest.records, peeked[1..]);
    assert_eq!(
        dead.peek(&UnitId::new(bare.as_str()))
            .await
            .unwrap()
            .as_ref(),
        Some(&peeked[2])
    );
    assert_eq!(dead.peek(&UnitId::new("d-9")).await.unwrap(), None);
    assert_eq!(dead.count().await.unwrap(), 3, "peeking consumed nothing");

    // Redrive the second and the bare one; keep the first.
    let report = dead
        .redrive(Selection::Ids(&[
            UnitId::new("d-2"),
            UnitId::new(bare.as_str()),
            UnitId::new("d-9"),
        ]))
        .await
        .unwrap();
    assert_eq!(
        report
            .redriven
            .iter()
            .map(|id| id.as_str())
            .collect::<Vec<_>>(),
        ["d-2", bare.as_str()]
    );
    assert_eq!(report.not_found, [UnitId::new("d-9")]);
    assert_eq!(dead.count().await.unwrap(), 1);
    assert_eq!(
        dead.list(10, None).await.unwrap().records[0].id().as_str(),
        "d-1"
    );

    // Back in the source stream: the unit's own fields, no bookkeeping, and its unit id as `id`.
    let back: Value = redis::cmd("XRANGE")
        .arg(&topology.stream)
        .arg(format!("({bare}"))
        .arg("+")
        .query_async(&mut redis)
        .await
        .unwrap();
    let Value::Array(entries) = back else {
        panic!("{back:?}")
    };
    assert_eq!(entries.len(), 2, "{entries:?}");
    for entry in &entries {
        let Value::Array(parts) = entry else { panic!() };
        let Value::Array(fields) = &parts[1] else {
            panic!()
        };
        let names: Vec<String> = fields
            .iter()
            .step_by(2)
            .map(|v| match v {
                Value::BulkString(b) => String::from_utf8(b.clone()).unwrap(),
                other => panic!("{other:?}"),
            })
            .collect();
        assert!(
            !names.iter().any(|n| n.starts_with("x-dead-letter-")),
            "bookkeeping fields go: {names:?}"
        );
        assert!(names.iter().any(|n| n == "tenant"), "{names:?}");
    }

    // Consumed again: same unit ids (the bare one keeps its first entry id), counted afresh.
    for (id, payload) in [("d-2", "body of d-2"), (bare.as_str(), "bare body")] {
        let (unit, handle) = source.receive().await.unwrap().unwrap();
        assert_eq!(unit.id().as_str(), id);
        assert_eq!(unit.payload().as_ref(), payload.as_bytes());
        assert_eq!(unit.delivery_count().get(), 1);
        assert_ne!(handle.entry_id(), id, "a new entry");
        delivery::testing::settle(handle, &unit, &Disposition::Ack)
            .await
            .unwrap();
    }

    // Purged for good.
    assert_eq!(dead.purge(&[UnitId::new("d-1")]).await.unwrap(), 1);
    assert_eq!(dead.purge(&[UnitId::new("d-1")]).await.unwrap(), 0);
    assert_eq!(dead.count().await.unwrap(), 0);

    drop(source);
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(&dlq)
        .query_async(&mut redis)
        .await
        .unwrap();
}

/// Two consumer groups of one stream, each with its own dead letter: a redrive from the first
/// group's dead letter is run by the first group alone; the second, which applied the unit when
/// it was first published, does not run it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_reaches_only_the_group_that_dead_lettered_it() {
    let url = redis_url();
    let mut redis = delivery::redis::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    let stream = format!("redis-redrive-groups-{}", std::process::id());
    let topology = |group: &str| {
        RedisTopology::new(&stream, group).dead_letter_stream(format!("{stream}.{group}.dlq"))
    };
    let (a, b) = (topology("a"), topology("b"));
    let mut delete = redis::cmd("DEL");
    delete
        .arg(&stream)
        .arg(a.dead_letter_stream_name())
        .arg(b.dead_letter_stream_name());
    let _: () = delete.query_async(&mut redis).await.unwrap();
    delivery::redis::declare(&url, &a).await.unwrap();
    delivery::redis::declare(&url, &b).await.unwrap();
    let publisher = redis.clone();
    two_groups::a_redrive_reaches_only_its_group(
        RedisSource::connect(&url, a.clone()).await.unwrap(),
        RedisSource::connect(&url, b.clone()).await.unwrap(),
        &RedisDeadLetters::new(url.as_str(), &a).unwrap(),
        async |id: &str| {
            let unit = Unit::new(id, id.to_owned());
            delivery::redis::publish(&mut publisher.clone(), &stream, &unit)
                .await
                .unwrap();
        },
    )
    .await;
    let _: () = delete.query_async(&mut redis).await.unwrap();
}
