//! The operator's side of the RabbitMQ dead letter, against the real broker, through
//! [`DeadLetters`]: count, list and peek without consuming, redrive under the same message id,
//! purge; a unit the broker dead-lettered itself; the order kept across passes, for quorum and
//! classic queues.
#![cfg(feature = "lapin")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use delivery::dead_letter::{DeadLetter, DeadLetters, Selection};
use delivery::lapin::options::{BasicGetOptions, BasicRejectOptions};
use delivery::lapin::types::{AMQPValue, FieldTable, LongString};
use delivery::lapin::{BasicProperties, Connection};
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitTopology};
use delivery::{UnitId, disposition::ReasonKind};
use process::amqp_url;

/// Publishes `id` to the dead-letter queue as the consumer records a rejected unit.
async fn dead_letter(
    publisher: &ConfirmedPublisher,
    topology: &RabbitTopology,
    id: &str,
    timestamp: Option<u64>,
) {
    let mut headers = FieldTable::default();
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    headers.insert("tenant".into(), text("acme"));
    headers.insert("x-dead-letter-reason".into(), text("rejected"));
    headers.insert(
        "x-dead-letter-detail".into(),
        text(&format!("{id} refused")),
    );
    headers.insert("x-dead-letter-source".into(), text(&topology.queue));
    headers.insert(
        "x-dead-letter-delivery-count".into(),
        AMQPValue::LongLongInt(1),
    );
    let mut properties = BasicProperties::default()
        .with_message_id(id.into())
        .with_headers(headers);
    if let Some(timestamp) = timestamp {
        properties = properties.with_timestamp(timestamp);
    }
    publisher
        .publish(
            &topology.dead_letter_queue_name(),
            format!("body of {id}").as_bytes(),
            properties,
        )
        .await
        .unwrap();
}

fn ids(records: &[DeadLetter]) -> Vec<&str> {
    records.iter().map(|d| d.id().as_str()).collect()
}

fn header_names(record: &DeadLetter) -> Vec<&str> {
    record.unit.headers().iter().map(|(name, _)| name).collect()
}

/// The ids in the dead letter, listed three at a time.
async fn in_pages_of_three(dead: &RabbitDeadLetters) -> Vec<String> {
    let records = dead_letters::in_pages(dead, 3).await;
    ids(&records).into_iter().map(str::to_owned).collect()
}

/// A freshly declared topology, a publisher and the dead letter's operator view.
struct Setup {
    topology: RabbitTopology,
    connection: Connection,
    publisher: ConfirmedPublisher,
    dead: RabbitDeadLetters,
}

impl Setup {
    async fn new(topology: RabbitTopology) -> Setup {
        let url = amqp_url();
        Setup {
            connection: rabbitmq::fresh(&url, &topology).await,
            publisher: ConfirmedPublisher::new(url.as_str()),
            dead: RabbitDeadLetters::new(url.as_str(), &topology),
            topology,
        }
    }

    /// The message at the head of the source queue, taken: its id, body and headers.
    async fn take_from_source(&self) -> (Option<String>, Vec<u8>, FieldTable) {
        let ch = self.connection.create_channel().await.unwrap();
        let back = ch
            .basic_get(
                self.topology.queue.as_str().into(),
                BasicGetOptions { no_ack: true },
            )
            .await
            .unwrap()
            .expect("the redriven unit is back in its source queue");
        let properties = back.delivery.properties;
        (
            properties.message_id().as_ref().map(|s| s.to_string()),
            back.delivery.data,
            properties.headers().clone().unwrap_or_default(),
        )
    }

    async fn cleanup(self) {
        rabbitmq::delete_queues(
            &self.connection,
            [
                self.topology.queue.as_str(),
                &self.topology.dead_letter_queue_name(),
            ],
        )
        .await;
        self.publisher.close().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_and_peek_leave_units_redrive_moves_one_under_its_id_and_purge_removes() {
    let setup = Setup::new(RabbitTopology::new(format!(
        "rmq-dlq-{}",
        std::process::id()
    )))
    .await;
    let (topology, dead) = (&setup.topology, &setup.dead);
    // A unit with no recorded time is listed before one with a time (`timestamp` here).
    dead_letter(&setup.publisher, topology, "d-2", Some(1_700_000_000)).await;
    dead_letter(&setup.publisher, topology, "d-1", None).await;

    assert_eq!(dead.name(), topology.dead_letter_queue_name());
    assert_eq!(dead.count().await.unwrap(), 2);
    let listed = dead.list(10, None).await.unwrap();
    assert!(listed.next.is_none());
    let records = listed.records;
    assert_eq!(ids(&records), ["d-1", "d-2"]);
    for record in &records {
        assert_eq!(record.reason, Some(ReasonKind::Rejected));
        assert_eq!(record.source, topology.queue);
        assert_eq!(record.detail, format!("{} refused", record.id()));
        assert_eq!(record.delivery_count().get(), 1);
        assert_eq!(header_names(record), ["tenant"], "the unit's own only");
    }
    assert_eq!(records[0].unit.payload().as_ref(), b"body of d-1");
    assert_eq!(
        records[1].dead_lettered_at,
        Some(UNIX_EPOCH + Duration::from_secs(1_700_000_000)),
        "the message's timestamp, where nothing else was recorded"
    );
    assert_eq!(records[0].dead_lettered_at, None);
    assert_eq!(
        dead.peek(&UnitId::new("d-2")).await.unwrap().as_ref(),
        Some(&records[1])
    );
    assert_eq!(dead.peek(&UnitId::new("d-9")).await.unwrap(), None);
    assert_eq!(dead.count().await.unwrap(), 2, "listing consumed nothing");

    let report = dead
        .redrive(Selection::Ids(&[UnitId::new("d-2"), UnitId::new("d-9")]))
        .await
        .unwrap();
    assert_eq!(report.redriven, [UnitId::new("d-2")]);
    assert_eq!(report.not_found, [UnitId::new("d-9")]);
    assert_eq!(dead.count().await.unwrap(), 1);

    let (id, body, headers) = setup.take_from_source().await;
    assert_eq!(id.as_deref(), Some("d-2"));
    assert_eq!(body, b"body of d-2");
    assert!(
        headers.contains_key("tenant"),
        "the unit's own headers stay"
    );
    assert!(
        !headers.contains_key("x-dead-letter-reason"),
        "bookkeeping headers go: {headers:?}"
    );

    assert_eq!(dead.purge(&[UnitId::new("d-1")]).await.unwrap(), 1);
    assert_eq!(dead.purge(&[UnitId::new("d-1")]).await.unwrap(), 0);
    assert_eq!(dead.count().await.unwrap(), 0);
    setup.cleanup().await;
}

/// A unit returned past the quorum queue's `x-delivery-limit` is dead-lettered by the broker; the
/// record reads its `x-death`: exhausted, on the last delivery, from the queue, at the broker's
/// time. Redriven, it carries none of that.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_unit_the_broker_dead_lettered_is_read_from_x_death() {
    let setup = Setup::new(
        RabbitTopology::new(format!("rmq-dlq-broker-{}", std::process::id())).delivery_limit(1),
    )
    .await;
    let (topology, dead) = (&setup.topology, &setup.dead);
    let mut headers = FieldTable::default();
    headers.insert(
        "tenant".into(),
        AMQPValue::LongString(LongString::from("acme")),
    );
    setup
        .publisher
        .publish(
            &topology.queue,
            b"{}",
            BasicProperties::default()
                .with_message_id("limit-1".into())
                .with_headers(headers),
        )
        .await
        .unwrap();
    let before = SystemTime::now() - Duration::from_secs(1);
    let ch = setup.connection.create_channel().await.unwrap();
    for _ in 0..2 {
        let got = ch
            .basic_get(
                topology.queue.as_str().into(),
                BasicGetOptions { no_ack: false },
            )
            .await
            .unwrap()
            .expect("delivered until the limit");
        got.delivery
            .acker
            .reject(BasicRejectOptions { requeue: true })
            .await
            .unwrap();
    }
    let deadline = tokio::time::Instant::now() + Duration::from_secs(10);
    while dead.count().await.unwrap() == 0 {
        assert!(
            tokio::time::Instant::now() < deadline,
            "never dead-lettered"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let after = SystemTime::now() + Duration::from_secs(1);

    let record = dead
        .peek(&UnitId::new("limit-1"))
        .await
        .unwrap()
        .expect("in the dead letter");
    assert_eq!(record.reason, Some(ReasonKind::Exhausted));
    assert_eq!(
        record.delivery_count().get(),
        topology.max_deliveries().get()
    );
    assert_eq!(record.source, topology.queue);
    assert!(
        record.detail.contains("delivery_limit"),
        "{}",
        record.detail
    );
    let at = record.dead_lettered_at.expect("the x-death time");
    assert!(before <= at && at <= after, "{at:?}");
    assert_eq!(
        header_names(&record),
        ["tenant"],
        "no x-death, x-first-death-*, x-last-death-*, x-delivery-count"
    );

    let report = dead.redrive(Selection::All).await.unwrap();
    assert_eq!(report.redriven, [UnitId::new("limit-1")]);
    let (_, _, headers) = setup.take_from_source().await;
    assert!(
        !headers.contains_key("x-death"),
        "counted afresh: {headers:?}"
    );
    let count = headers
        .inner()
        .get("x-delivery-count")
        .map(|v| format!("{v:?}"));
    assert!(
        count.is_none() || count.as_deref().is_some_and(|c| c.contains("(0)")),
        "the first delivery again: {count:?}"
    );
    setup.cleanup().await;
}

/// Every pass hands back the units it did not remove in their order: pages follow one another,
/// and a purge or redrive in the middle leaves the rest as they were. Quorum and classic.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn passes_keep_the_order_of_what_they_hand_back() {
    for classic in [false, true] {
        let mut topology =
            RabbitTopology::new(format!("rmq-dlq-order-{classic}-{}", std::process::id()));
        if classic {
            topology = topology.classic();
        }
        let setup = Setup::new(topology).await;
        let all: Vec<String> = (0..7).map(|i| format!("o-{i}")).collect();
        for id in &all {
            dead_letter(&setup.publisher, &setup.topology, id, None).await;
        }
        let dead = &setup.dead;
        assert_eq!(in_pages_of_three(dead).await, all, "classic: {classic}");
        assert_eq!(in_pages_of_three(dead).await, all, "classic: {classic}");

        assert_eq!(dead.purge(&[UnitId::new("o-3")]).await.unwrap(), 1);
        let report = dead
            .redrive(Selection::Ids(&[UnitId::new("o-1"), UnitId::new("o-5")]))
            .await
            .unwrap();
        assert_eq!(report.redriven, [UnitId::new("o-1"), UnitId::new("o-5")]);
        assert_eq!(
            in_pages_of_three(dead).await,
            ["o-0", "o-2", "o-4", "o-6"],
            "classic: {classic}"
        );
        assert_eq!(dead.count().await.unwrap(), 4);
        setup.cleanup().await;
    }
}
