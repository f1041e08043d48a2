//! The operator's side of the JetStream dead letter through `DeadLetters`, against the real
//! server: poison moved by the consumer, listed a page at a time and peeked without consuming, the
//! depth, a redrive back to the source subject under the same unit id, and a purge.
#![cfg(feature = "nats")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/two_groups.rs"]
mod two_groups;

use std::time::Duration;

use async_nats::HeaderMap;
use async_nats::jetstream;
use dead_letters::strict;
use delivery::dead_letter::{Cursor, DeadLetters, Selection};
use delivery::nats::{NatsDeadLetters, NatsSource, NatsTopology};
use delivery::{Consumer, Stamp, UnitId, disposition::ReasonKind};

fn nats_url() -> String {
    std::env::var("NATS_URL").unwrap_or_else(|_| "nats://127.0.0.1:4222".into())
}

/// Deletes the topology's stream, its dead letter and its advisories.
async fn delete_streams(context: &jetstream::Context, topology: &NatsTopology) {
    for stream in [
        topology.stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(stream).await;
    }
}

/// Consumes until the consumer's ack floor reaches `sequence`.
async fn consume_through(
    client: &async_nats::Client,
    topology: &NatsTopology,
    sequence: u64,
) -> delivery::consumer::Report {
    let context = jetstream::new(client.clone());
    let source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    let stream = context.get_stream(&topology.stream).await.unwrap();
    let durable = topology.durable.clone();
    Consumer::new(source)
        .shutdown_on(async move {
            loop {
                tokio::time::sleep(Duration::from_millis(50)).await;
                let info = stream.consumer_info(&durable).await.unwrap();
                if info.ack_floor.stream_sequence >= sequence && info.num_ack_pending == 0 {
                    return;
                }
            }
        })
        .run(strict)
        .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_peek_and_redrive_under_the_same_id() {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client.clone());
    let stream = format!("nats-dlq-{}", std::process::id());
    let topology = NatsTopology::new(&stream)
        .subjects([format!("{stream}.>")])
        .duplicate_window(Duration::from_millis(100));
    delete_streams(&context, &topology).await;
    delivery::nats::declare(&nats_url(), &topology)
        .await
        .unwrap();

    let publish = async |subject: &str, id: Option<&str>, body: &str| {
        let mut headers = HeaderMap::new();
        headers.insert("tenant", "acme");
        if let Some(id) = id {
            headers.insert("Nats-Msg-Id", id);
        }
        context
            .publish_with_headers(
                format!("{stream}.{subject}"),
                headers,
                body.to_owned().into(),
            )
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence
    };
    publish("a", Some("bad-json"), "{oops").await;
    publish("b", Some("negative"), r#"{"amount_cents":-5}"#).await;
    let anonymous = publish("c", None, r#"{"amount_cents":-1}"#).await;
    let last = publish("d", Some("fine"), r#"{"amount_cents":5}"#).await;
    let report = consume_through(&client, &topology, last).await;
    assert_eq!((report.acked, report.dead_lettered), (1, 3), "{report:?}");

    let dead = NatsDeadLetters::new(client.clone(), &topology);
    assert_eq!(dead.name(), format!("{stream}_DLQ"));
    assert_eq!(dead.count().await.unwrap(), 3);
    let listed = dead.list(10, None).await.unwrap();
    assert!(listed.next.is_none(), "one page holds all three");
    let listed = listed.records;
    let ids: Vec<&str> = listed.iter().map(|d| d.id().as_str()).collect();
    let anonymous_id = format!("{stream}:{anonymous}");
    assert_eq!(ids, ["bad-json", "negative", anonymous_id.as_str()]);
    let bad = &listed[0];
    assert_eq!(bad.unit.payload().as_ref(), b"{oops", "intact");
    assert_eq!(bad.reason, Some(ReasonKind::Malformed));
    assert_eq!(bad.delivery_count().get(), 1);
    assert_eq!(bad.source, stream);
    assert_eq!(
        bad.unit.stamp(),
        Some(Stamp(1)),
        "its sequence in the source"
    );
    assert_eq!(bad.position, "1", "its sequence in the dead letter");
    let stored_at = bad.dead_lettered_at.expect("JetStream's time of the copy");
    let age = std::time::SystemTime::now()
        .duration_since(stored_at)
        .unwrap_or_default();
    assert!(age < Duration::from_secs(60), "stored {age:?} ago");
    assert_eq!(bad.unit.headers().get_str("tenant"), Some("acme"));
    assert_eq!(bad.unit.headers().get_str("Nats-Msg-Id"), Some("bad-json"));
    assert!(
        bad.unit
            .headers()
            .iter()
            .all(|(name, _)| !delivery::headers::is_dead_letter(name)),
        "{:?}",
        bad.unit.headers()
    );
    assert_eq!(listed[1].reason, Some(ReasonKind::Rejected));
    assert_eq!(listed[1].detail, "negative amount", "{:?}", listed[1]);

    // A page at a time: the cursor is the record's position.
    let first = dead.list(1, None).await.unwrap();
    assert_eq!(first.records, listed[..1]);
    assert_eq!(first.next, Some(Cursor::new("1")));
    let rest = dead.list(5, first.next.as_ref()).await.unwrap();
    assert_eq!(rest.records, listed[1..]);
    assert!(rest.next.is_none());
    assert!(dead.list(1, Some(&Cursor::new("x"))).await.is_err());

    let peeked = dead.peek(bad.id()).await.unwrap();
    assert_eq!(peeked.as_ref(), Some(bad));
    assert!(dead.peek(&UnitId::new("none")).await.unwrap().is_none());
    assert_eq!(
        dead.count().await.unwrap(),
        3,
        "listing and peeking consume nothing"
    );

    // Redrive the two refused units; the malformed one stays. Units published less than the
    // source's duplicate window ago (100 ms here) are redriven once it has passed.
    let refused: Vec<UnitId> = listed
        .iter()
        .filter(|d| d.reason == Some(ReasonKind::Rejected))
        .map(|d| d.id().clone())
        .collect();
    let report = dead.redrive(Selection::Ids(&refused)).await.unwrap();
    let mut moved = report.redriven.clone();
    moved.sort();
    let mut expected = vec![UnitId::new("negative"), UnitId::new(anonymous_id.clone())];
    expected.sort();
    assert_eq!(moved, expected);
    assert!(report.not_found.is_empty(), "{report:?}");
    assert_eq!(dead.count().await.unwrap(), 1, "the malformed unit stays");

    // Back in the source stream on their subject, under the same id, without the dead letter's
    // headers; consumed (and refused) again, they come back to the dead letter with the same id.
    let source = context.get_stream(&stream).await.unwrap();
    let info = source.get_info().await.unwrap();
    let redriven_seq = info.state.last_sequence;
    let mut seen = Vec::new();
    for seq in redriven_seq - 1..=redriven_seq {
        let message = source.get_raw_message(seq).await.unwrap();
        assert!(message.headers.get("x-dead-letter-reason").is_none());
        assert_eq!(
            message.headers.get("tenant").map(|v| v.as_str()),
            Some("acme")
        );
        seen.push((
            message.subject.to_string(),
            message
                .headers
                .get("Nats-Msg-Id")
                .unwrap()
                .as_str()
                .to_owned(),
        ));
    }
    seen.sort();
    assert_eq!(
        seen,
        [
            (format!("{stream}.b"), "negative".to_owned()),
            (format!("{stream}.c"), anonymous_id.clone()),
        ]
    );
    consume_through(&client, &topology, redriven_seq).await;
    let again = dead.list(10, None).await.unwrap().records;
    let again_ids: Vec<&str> = again.iter().map(|d| d.id().as_str()).collect();
    assert_eq!(again.len(), 3, "{again_ids:?}");
    assert!(again_ids.contains(&"negative") && again_ids.contains(&anonymous_id.as_str()));
    assert!(
        again.iter().all(|d| d.delivery_count().get() == 1),
        "a redrive counts deliveries afresh"
    );

    // Purged, the malformed unit is gone for good.
    assert_eq!(dead.purge(&[UnitId::new("bad-json")]).await.unwrap(), 1);
    assert_eq!(dead.count().await.unwrap(), 2);
    assert!(
        dead.peek(&UnitId::new("bad-json")).await.unwrap().is_none(),
        "purged"
    );
    assert_eq!(dead.purge(&[UnitId::new("bad-json")]).await.unwrap(), 0);

    delete_streams(&context, &topology).await;
}

/// With `confirm_acks`, `+ACK` and `+TERM` wait for JetStream's reply: both are answered, so the
/// good unit is acknowledged and the poison one terminated once its copy is in the dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn confirmed_acks_and_terms_are_answered() {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client.clone());
    let stream = format!("nats-confirmed-{}", std::process::id());
    let topology = NatsTopology::new(&stream)
        .subjects([format!("{stream}.>")])
        .confirm_acks(true);
    delete_streams(&context, &topology).await;
    delivery::nats::declare(&nats_url(), &topology)
        .await
        .unwrap();
    let mut last = 0;
    for body in ["{oops", r#"{"amount_cents":5}"#] {
        last = context
            .publish(format!("{stream}.a"), body.to_owned().into())
            .await
            .unwrap()
            .await
            .unwrap()
            .sequence;
    }
    let report = consume_through(&client, &topology, last).await;
    assert_eq!((report.acked, report.dead_lettered), (1, 1), "{report:?}");
    let dead = NatsDeadLetters::new(client.clone(), &topology);
    assert_eq!(dead.count().await.unwrap(), 1);
    delete_streams(&context, &topology).await;
}

/// Two durable consumers of one stream, each with its own dead letter: a redrive from the first
/// one's dead letter is run by the first alone; the second, which applied the unit when it was
/// first published, does not run it again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redrive_reaches_only_the_durable_that_dead_lettered_it() {
    let client = async_nats::connect(nats_url())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {}: {e}", nats_url()));
    let context = jetstream::new(client.clone());
    let stream = format!("nats-redrive-groups-{}", std::process::id());
    let topology = |durable: &str| {
        let own = format!("{stream}_{durable}");
        NatsTopology::new(&stream)
            .subjects([format!("{stream}.>")])
            .durable(durable)
            .duplicate_window(Duration::from_millis(100))
            .dead_letter_stream(format!("{own}_DLQ"))
            .dead_letter_subject(format!("{own}_DLQ"))
            .advisory_stream(format!("{own}_MAX_DELIVERIES"))
    };
    let (a, b) = (topology("a"), topology("b"));
    delete_streams(&context, &a).await;
    delete_streams(&context, &b).await;
    for topology in [&a, &b] {
        delivery::nats::declare(&nats_url(), topology)
            .await
            .unwrap();
    }
    two_groups::a_redrive_reaches_only_its_group(
        NatsSource::with_client(client.clone(), a.clone())
            .await
            .unwrap(),
        NatsSource::with_client(client.clone(), b.clone())
            .await
            .unwrap(),
        &NatsDeadLetters::new(client.clone(), &a),
        async |id: &str| {
            let mut headers = HeaderMap::new();
            headers.insert("Nats-Msg-Id", id);
            context
                .publish_with_headers(format!("{stream}.orders"), headers, id.to_owned().into())
                .await
                .unwrap()
                .await
                .unwrap();
        },
    )
    .await;
    delete_streams(&context, &a).await;
    delete_streams(&context, &b).await;
}
