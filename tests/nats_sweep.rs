//! Units stranded on their last delivery — delivered `max_deliver` times, the last delivery never
//! settled, as when the consumer dies — swept from JetStream's `MAX_DELIVERIES` advisory into the
//! dead letter, intact, reason `exhausted`; against the real server, under `limits` and
//! `work_queue` retention.
#![cfg(feature = "nats")]

#[path = "support/dead_letters.rs"]
mod dead_letters;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use async_nats::HeaderMap;
use async_nats::jetstream;
use bytes::Bytes;
use delivery::headers::{
    DEAD_LETTER_REASON as HEADER_DEAD_LETTER_REASON,
    DEAD_LETTER_SEQUENCE as HEADER_DEAD_LETTER_SEQUENCE,
    DEAD_LETTER_SOURCE as HEADER_DEAD_LETTER_SOURCE,
    DEAD_LETTER_SUBJECT as HEADER_DEAD_LETTER_SUBJECT,
};
use delivery::nats::{NatsDeadLetters, NatsSource, NatsTopology, Retention};
use delivery::{Stamp, UnitId, disposition::ReasonKind, transport::Source};

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

async fn setup(
    name: &str,
    retention: Retention,
    sweep_every: Duration,
) -> (async_nats::Client, NatsTopology) {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client.clone());
    let stream = format!("nats-sweep-{name}-{}", std::process::id());
    let topology = NatsTopology::new(&stream)
        .max_deliver(2)
        .ack_wait(Duration::from_millis(500))
        .retention(retention)
        .sweep_every(sweep_every);
    drop_streams(&context, &topology).await;
    topology.declare(&context).await.unwrap();
    (client, topology)
}

async fn drop_streams(context: &jetstream::Context, topology: &NatsTopology) {
    for s in [
        topology.stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(s).await;
    }
}

/// Publishes a unit with headers (one of them with two values) and returns its stream sequence.
async fn publish(
    context: &jetstream::Context,
    topology: &NatsTopology,
    id: &str,
    body: &'static [u8],
) -> u64 {
    let mut headers = HeaderMap::new();
    headers.insert("Nats-Msg-Id", id);
    headers.insert("tenant", "acme");
    headers.append("trace", "a");
    headers.append("trace", "b");
    context
        .publish_with_headers(
            format!("{}.orders", topology.stream),
            headers,
            Bytes::from_static(body),
        )
        .await
        .unwrap()
        .await
        .unwrap()
        .sequence
}

/// The stored copy at `sequence` of `stream`, read through a consumer (which keeps every value of
/// a repeated header).
async fn stored(context: &jetstream::Context, stream: &str, sequence: u64) -> jetstream::Message {
    use futures_util::StreamExt;
    use jetstream::consumer::{DeliverPolicy, pull};
    let consumer = context
        .get_stream(stream)
        .await
        .unwrap()
        .create_consumer(pull::Config {
            deliver_policy: DeliverPolicy::ByStartSequence {
                start_sequence: sequence,
            },
            ..pull::Config::default()
        })
        .await
        .unwrap();
    consumer
        .fetch()
        .max_messages(1)
        .messages()
        .await
        .unwrap()
        .next()
        .await
        .expect("a stored copy")
        .unwrap()
}

async fn stream_messages(context: &jetstream::Context, name: &str) -> u64 {
    context
        .get_stream(name)
        .await
        .unwrap()
        .cached_info()
        .state
        .messages
}

/// Receives from `source`, dropping every handle unsettled (as a consumer killed mid-handler
/// leaves it), calling `on_last` on each last delivery first, until `done` holds. Returns the most
/// deliveries seen per unit. Panics if not done within a minute.
async fn strand(
    source: &mut NatsSource,
    mut on_last: impl AsyncFnMut(&UnitId, u64),
    mut done: impl AsyncFnMut() -> bool,
) -> BTreeMap<String, u32> {
    let deadline = Instant::now() + Duration::from_secs(60);
    let mut seen: BTreeMap<String, u32> = BTreeMap::new();
    while !done().await {
        assert!(
            Instant::now() < deadline,
            "the units were not stranded within a minute"
        );
        // Keeps a pull request open: JetStream announces a unit past `max_deliver` only when it
        // would deliver it again to a waiting pull.
        if let Ok(received) =
            tokio::time::timeout(Duration::from_millis(200), source.receive()).await
        {
            let (unit, handle) = received.unwrap().unwrap();
            let count = unit.delivery_count().get();
            let most = seen.entry(unit.id().to_string()).or_default();
            *most = (*most).max(count);
            if count == 2 {
                on_last(unit.id(), unit.stamp().map(|s| s.0).unwrap_or_default()).await;
            }
            drop(handle);
        }
    }
    seen
}

async fn stranded_units_are_swept_into_the_dead_letter(name: &str, retention: Retention) {
    let (client, topology) = setup(name, retention, Duration::ZERO).await;
    let context = jetstream::new(client.clone());
    let body: &'static [u8] = b"{\"order_id\":\"o-1\"} \xff raw bytes";
    let stranded = publish(&context, &topology, "stranded-1", body).await;
    let moved_before = publish(
        &context,
        &topology,
        "moved-before-crash",
        b"{\"order_id\":\"o-2\"}",
    )
    .await;
    let dead_letter_subject = topology.dead_letter_subject_name();
    let source_stream = topology.stream.clone();

    let mut source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    let advisories = topology.advisory_stream_name();
    let seen = strand(
        &mut source,
        // The consumer of `moved-before-crash` moved it to the dead letter on its last delivery
        // and died before terminating it.
        async |id: &UnitId, sequence: u64| {
            if id.as_str() == "moved-before-crash" {
                let mut headers = HeaderMap::new();
                headers.insert("Nats-Msg-Id", "moved-before-crash");
                headers.insert(HEADER_DEAD_LETTER_REASON, "exhausted");
                headers.insert(HEADER_DEAD_LETTER_SOURCE, source_stream.as_str());
                headers.insert(HEADER_DEAD_LETTER_SEQUENCE, sequence.to_string());
                headers.insert(
                    HEADER_DEAD_LETTER_SUBJECT,
                    format!("{source_stream}.orders"),
                );
                context
                    .publish_with_headers(
                        dead_letter_subject.clone(),
                        headers,
                        "{\"order_id\":\"o-2\"}".into(),
                    )
                    .await
                    .unwrap()
                    .await
                    .unwrap();
            }
        },
        async || stream_messages(&context, &advisories).await >= 2,
    )
    .await;
    drop(source);
    assert_eq!(
        seen,
        BTreeMap::from([
            ("moved-before-crash".to_owned(), 2),
            ("stranded-1".to_owned(), 2)
        ]),
        "each unit delivered max_deliver times, never more"
    );
    assert!(
        context
            .get_stream(&topology.stream)
            .await
            .unwrap()
            .get_raw_message(stranded)
            .await
            .is_ok(),
        "under {retention:?} retention JetStream keeps a unit past max_deliver in the stream"
    );
    // Not an advisory of this consumer: dropped by the sweep, without harm.
    context
        .publish(
            topology.max_deliveries_advisory_subject(),
            "not an advisory".into(),
        )
        .await
        .unwrap()
        .await
        .unwrap();

    let dead_letters = NatsDeadLetters::new(client.clone(), &topology);
    let report = dead_letters.sweep().await.unwrap();
    assert_eq!(report.moved, vec![UnitId::new("stranded-1")]);
    assert_eq!(report.already, vec![UnitId::new("moved-before-crash")]);
    assert!(report.missing.is_empty(), "{report:?}");
    assert_eq!(report.malformed, 1);
    assert_eq!(
        stream_messages(&context, &advisories).await,
        0,
        "every advisory taken"
    );

    let records = dead_letters::all(&dead_letters).await;
    assert_eq!(records.len(), 2, "one copy of each unit: {records:?}");
    let swept = records
        .iter()
        .find(|r| r.id().as_str() == "stranded-1")
        .unwrap();
    assert_eq!(swept.unit.payload().as_ref(), body, "the payload intact");
    assert_eq!(swept.reason, Some(ReasonKind::Exhausted));
    assert_eq!(swept.delivery_count().get(), 2);
    assert_eq!(swept.source, topology.stream);
    assert_eq!(swept.unit.stamp(), Some(Stamp(stranded)));
    assert_eq!(swept.unit.headers().get_str("tenant"), Some("acme"));
    assert!(swept.detail.contains("never settled"), "{:?}", swept.detail);
    let copy = stored(
        &context,
        &topology.dead_letter_stream_name(),
        swept.position.parse().unwrap(),
    )
    .await;
    let headers = copy.headers.as_ref().unwrap();
    assert_eq!(
        headers
            .get_all("trace")
            .map(|v| v.as_str().to_owned())
            .collect::<Vec<_>>(),
        ["a", "b"],
        "every header value kept"
    );
    assert_eq!(
        headers.get(HEADER_DEAD_LETTER_SUBJECT).map(|v| v.as_str()),
        Some(format!("{}.orders", topology.stream).as_str())
    );

    let in_stream = context.get_stream(&topology.stream).await.unwrap();
    match retention {
        Retention::Limits => assert!(in_stream.get_raw_message(stranded).await.is_ok()),
        _ => {
            assert!(
                in_stream.get_raw_message(stranded).await.is_err(),
                "a swept unit leaves the work queue"
            );
            assert!(in_stream.get_raw_message(moved_before).await.is_err());
        }
    }

    let again = dead_letters.sweep().await.unwrap();
    assert!(again.is_empty(), "a second sweep finds nothing: {again:?}");
    assert_eq!(
        delivery::dead_letter::DeadLetters::count(&dead_letters)
            .await
            .unwrap(),
        2
    );
    drop_streams(&context, &topology).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranded_units_are_swept_under_limits_retention() {
    stranded_units_are_swept_into_the_dead_letter("limits", Retention::Limits).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn stranded_units_are_swept_under_work_queue_retention() {
    stranded_units_are_swept_into_the_dead_letter("wq", Retention::WorkQueue).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_source_sweeps_by_itself() {
    let (client, topology) = setup("auto", Retention::Limits, Duration::from_millis(300)).await;
    let context = jetstream::new(client.clone());
    let sequence = publish(
        &context,
        &topology,
        "stranded-auto",
        b"{\"order_id\":\"o-3\"}",
    )
    .await;
    let dead_letters = NatsDeadLetters::new(client.clone(), &topology);
    let mut source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    strand(
        &mut source,
        async |_: &UnitId, _: u64| {},
        async || {
            delivery::dead_letter::DeadLetters::count(&dead_letters)
                .await
                .unwrap()
                == 1
        },
    )
    .await;
    let records = dead_letters::all(&dead_letters).await;
    assert_eq!(records[0].id().as_str(), "stranded-auto");
    assert_eq!(records[0].reason, Some(ReasonKind::Exhausted));
    assert_eq!(records[0].unit.stamp(), Some(Stamp(sequence)));
    assert_eq!(
        records[0].unit.payload().as_ref(),
        b"{\"order_id\":\"o-3\"}"
    );
    drop(source);
    drop_streams(&context, &topology).await;
}
