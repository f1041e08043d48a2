//! Reading a RabbitMQ dead letter leaves it as it was (issue 34, item 9): with 1 000 dead letters
//! on a quorum and on a classic dead-letter queue, through [`DeadLetters`], 30 reads in a row
//! give the same records in the same order, pages of 100 cover every unit exactly once, counts
//! are exact, and a bulk redrive or purge acts on exactly the units it selected.
#![cfg(feature = "lapin")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::HashSet;
use std::time::Instant;

use delivery::dead_letter::{DeadLetter, DeadLetters, Selection};
use delivery::lapin::BasicProperties;
use delivery::lapin::types::{AMQPValue, FieldTable, LongString};
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitTopology};
use delivery::{UnitId, disposition::ReasonKind};
use futures_util::future::join_all;
use process::amqp_url;

const UNITS: usize = 1_000;

/// Every tenth unit is rejected, the others malformed: as the consumer records them.
fn reason_of(i: usize) -> &'static str {
    if i % 10 == 3 { "rejected" } else { "malformed" }
}

/// Fills the dead-letter queue with `UNITS` dead letters `u-0000`.. as the consumer writes them
/// (the format of dead letters already in users' queues).
async fn fill(publisher: &ConfirmedPublisher, topology: &RabbitTopology) {
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    let ids: Vec<usize> = (0..UNITS).collect();
    for chunk in ids.chunks(100) {
        join_all(chunk.iter().map(|&i| {
            let mut headers = FieldTable::default();
            headers.insert("tenant".into(), text("acme"));
            headers.insert("x-dead-letter-reason".into(), text(reason_of(i)));
            headers.insert("x-dead-letter-detail".into(), text(&format!("unit {i}")));
            headers.insert("x-dead-letter-source".into(), text(&topology.queue));
            headers.insert(
                "x-dead-letter-delivery-count".into(),
                AMQPValue::LongLongInt(1),
            );
            let properties = BasicProperties::default()
                .with_message_id(format!("u-{i:04}").into())
                .with_delivery_mode(2)
                .with_headers(headers);
            let dlq = topology.dead_letter_queue_name();
            async move {
                publisher
                    .publish(&dlq, format!("body {i}").as_bytes(), properties)
                    .await
                    .unwrap();
            }
        }))
        .await;
    }
}

/// Deletes the topology's queues (and the dead letter's lock queue) and closes the publisher.
async fn cleanup(
    connection: &delivery::lapin::Connection,
    topology: &RabbitTopology,
    publisher: ConfirmedPublisher,
) {
    let dead = topology.dead_letter_queue_name();
    let lock = format!("{dead}.reader");
    rabbitmq::delete_queues(connection, [topology.queue.as_str(), &dead, &lock]).await;
    publisher.close().await;
}

fn ids(records: &[DeadLetter]) -> Vec<String> {
    records.iter().map(|d| d.id().as_str().to_owned()).collect()
}

/// What a read must give: the id, body, reason, detail and own headers of every unit.
fn assert_intact(records: &[DeadLetter], context: &str) {
    for record in records {
        let i: usize = record.id().as_str()[2..].parse().unwrap();
        assert_eq!(
            record.unit.payload().as_ref(),
            format!("body {i}").as_bytes(),
            "{context}"
        );
        assert_eq!(
            record.reason.map(ReasonKind::as_str),
            Some(reason_of(i)),
            "{context}"
        );
        assert_eq!(record.detail, format!("unit {i}"), "{context}");
        assert_eq!(record.delivery_count().get(), 1, "{context}");
        let names: Vec<&str> = record.unit.headers().iter().map(|(n, _)| n).collect();
        assert_eq!(names, ["tenant"], "{context}");
    }
}

async fn reads_leave_every_dead_letter_in_place(classic: bool) {
    let mut topology = RabbitTopology::new(format!(
        "rmq-dlq-reads-{}-{}",
        if classic { "classic" } else { "quorum" },
        std::process::id()
    ));
    if classic {
        topology = topology.classic();
    }
    let url = amqp_url();
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    let dead = RabbitDeadLetters::new(url.as_str(), &topology);
    fill(&publisher, &topology).await;
    let kind = if classic { "classic" } else { "quorum" };

    let started = Instant::now();
    let first = dead.list(UNITS, None).await.unwrap();
    eprintln!("{kind}: one list of {UNITS} took {:?}", started.elapsed());
    assert!(first.next.is_none(), "{kind}: all {UNITS} in one page");
    let first = first.records;
    assert_eq!(first.len(), UNITS, "{kind}: every unit listed");
    let distinct: HashSet<String> = ids(&first).into_iter().collect();
    assert_eq!(distinct.len(), UNITS, "{kind}: each unit once");
    assert_intact(&first, kind);

    // 30 reads in a row: whole listings, pages of 100, peeks and counts.
    for read in 1..=30 {
        let context = format!("{kind}: read {read}");
        match read % 3 {
            0 => {
                let listed = dead.list(UNITS, None).await.unwrap();
                assert_eq!(ids(&listed.records), ids(&first), "{context}");
                assert_eq!(listed.records, first, "{context}: records intact");
            }
            1 => {
                let started = Instant::now();
                let paged = dead_letters::in_pages(&dead, 100).await;
                if read == 1 {
                    eprintln!(
                        "{kind}: {UNITS} in pages of 100 took {:?}",
                        started.elapsed()
                    );
                }
                assert_eq!(ids(&paged), ids(&first), "{context}: pages of 100");
                assert_eq!(paged, first, "{context}: records intact");
            }
            _ => {
                let id = &first[(read * 37) % UNITS];
                assert_eq!(
                    dead.peek(id.id()).await.unwrap().as_ref(),
                    Some(id),
                    "{context}: peek"
                );
            }
        }
        assert_eq!(
            dead.count().await.unwrap(),
            UNITS as u64,
            "{context}: count"
        );
    }

    // A bulk redrive of what the listing selected acts on exactly those units.
    let rejected: Vec<UnitId> = first
        .iter()
        .filter(|r| r.reason == Some(ReasonKind::Rejected))
        .map(|r| r.id().clone())
        .collect();
    assert_eq!(rejected.len(), UNITS / 10, "{kind}: counted by reason");
    let report = dead.redrive(Selection::Ids(&rejected)).await.unwrap();
    let mut redriven = report.redriven.clone();
    redriven.sort();
    let mut wanted = rejected.clone();
    wanted.sort();
    assert_eq!(
        redriven, wanted,
        "{kind}: every selected unit redriven once"
    );
    assert!(
        report.not_found.is_empty(),
        "{kind}: {:?}",
        report.not_found
    );
    assert_eq!(
        rabbitmq::queue_counts(&connection, &topology.queue).await.0,
        rejected.len() as u64,
        "{kind}: the source holds the redriven units"
    );
    assert_eq!(dead.count().await.unwrap(), (UNITS - UNITS / 10) as u64);

    // A purge of 50 selected units removes exactly those; the rest stay in order.
    let left: Vec<DeadLetter> = first
        .iter()
        .filter(|r| r.reason != Some(ReasonKind::Rejected))
        .cloned()
        .collect();
    let purge: Vec<UnitId> = left
        .iter()
        .step_by(18)
        .take(50)
        .map(|r| r.id().clone())
        .collect();
    assert_eq!(purge.len(), 50);
    assert_eq!(dead.purge(&purge).await.unwrap(), 50, "{kind}: purged");
    let kept: Vec<DeadLetter> = left
        .into_iter()
        .filter(|r| !purge.contains(r.id()))
        .collect();
    let after = dead_letters::in_pages(&dead, 100).await;
    let (listed, wanted) = (ids(&after), ids(&kept));
    let missing: Vec<&String> = wanted.iter().filter(|id| !listed.contains(id)).collect();
    let extra: Vec<&String> = listed.iter().filter(|id| !wanted.contains(id)).collect();
    assert_eq!(
        listed, wanted,
        "{kind}: the rest in place (missing {missing:?}, not wanted {extra:?})"
    );
    assert_eq!(dead.count().await.unwrap(), kept.len() as u64);

    cleanup(&connection, &topology, publisher).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_quorum_dead_letter_leave_1000_units_in_place() {
    reads_leave_every_dead_letter_in_place(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_of_a_classic_dead_letter_leave_1000_units_in_place() {
    reads_leave_every_dead_letter_in_place(true).await;
}

/// A unit the consumer dead-letters carries when (`x-dead-letter-at`, milliseconds): the record
/// reads it as `dead_lettered_at`, and the listing is oldest first by it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_consumer_records_when_it_dead_lettered_a_unit_and_lists_oldest_first() {
    use delivery::rabbitmq::RabbitSource;
    use delivery::{Consumer, Unit};
    use std::time::{Duration, SystemTime};

    let topology = RabbitTopology::new(format!("rmq-dlq-at-{}", std::process::id()));
    let url = amqp_url();
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    let dead = RabbitDeadLetters::new(url.as_str(), &topology);
    let source = RabbitSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let watched = dead.clone();
    let consumer = tokio::spawn(
        Consumer::new(source)
            .concurrency(1)
            .shutdown_on(async move {
                while watched.count().await.unwrap() < 3 {
                    tokio::time::sleep(Duration::from_millis(20)).await;
                }
            })
            .run(dead_letters::strict),
    );
    let before = SystemTime::now();
    // Published z, y, x, each once the one before is dead: dead-lettered in that order, each in a
    // millisecond of its own, so listed in that order (not by id, the tie-break within one
    // millisecond).
    for (n, (id, body)) in [
        ("z", "not json"),
        ("y", r#"{"amount_cents": -1}"#),
        ("x", "[]"),
    ]
    .into_iter()
    .enumerate()
    {
        let unit = Unit::new(id, body);
        publisher
            .publish(
                &topology.queue,
                body.as_bytes(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
        while dead.count().await.unwrap() <= n as u64 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    consumer.await.unwrap();
    let after = SystemTime::now();

    let records = dead.list(10, None).await.unwrap().records;
    assert_eq!(ids(&records), ["z", "y", "x"], "oldest first");
    let times: Vec<SystemTime> = records
        .iter()
        .map(|r| r.dead_lettered_at.expect("the consumer's time"))
        .collect();
    for at in &times {
        assert!(before <= *at && *at <= after, "{at:?}");
    }
    assert!(times.is_sorted());
    let names: Vec<&str> = records[1].unit.headers().iter().map(|(n, _)| n).collect();
    assert!(
        !names.contains(&"x-dead-letter-at"),
        "not one of the unit's own headers: {names:?}"
    );

    // Redriven, it carries no dead-letter time.
    let report = dead
        .redrive(Selection::Ids(&[UnitId::new("y")]))
        .await
        .unwrap();
    assert_eq!(report.redriven, [UnitId::new("y")]);
    let channel = connection.create_channel().await.unwrap();
    let back = channel
        .basic_get(
            topology.queue.as_str().into(),
            delivery::lapin::options::BasicGetOptions { no_ack: true },
        )
        .await
        .unwrap()
        .expect("redriven");
    let headers = back
        .delivery
        .properties
        .headers()
        .clone()
        .unwrap_or_default();
    assert!(!headers.contains_key("x-dead-letter-at"), "{headers:?}");

    cleanup(&connection, &topology, publisher).await;
}

/// Readers at the same time — on connections of their own (the broker's lock) and sharing one
/// connection (the process's) — each see the whole dead letter: a count or a listing never
/// misses the units another reader holds at that moment.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readers_at_the_same_time_each_see_the_whole_dead_letter() {
    let topology = RabbitTopology::new(format!("rmq-dlq-readers-{}", std::process::id()));
    let url = amqp_url();
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    fill(&publisher, &topology).await;
    let shared = std::sync::Arc::new(rabbitmq::connect(&url).await);
    let readers = [
        RabbitDeadLetters::new(url.as_str(), &topology),
        RabbitDeadLetters::new(url.as_str(), &topology),
        RabbitDeadLetters::new(shared.clone(), &topology),
        RabbitDeadLetters::new(shared.clone(), &topology),
    ];
    let runs = readers.into_iter().enumerate().map(|(n, dead)| {
        tokio::spawn(async move {
            for read in 0..4 {
                let context = format!("reader {n}, read {read}");
                assert_eq!(dead.count().await.unwrap(), UNITS as u64, "{context}");
                let listed = dead.list(UNITS, None).await.unwrap().records;
                assert_eq!(listed.len(), UNITS, "{context}");
            }
        })
    });
    for run in join_all(runs).await {
        run.unwrap();
    }
    cleanup(&connection, &topology, publisher).await;
}

/// The console over a RabbitMQ dead letter of 1 000 units: the overview counts each group
/// exactly, the group page of the 100 rejected units lists each once on every read, and the
/// group purge removes exactly those 100.
#[cfg(feature = "admin")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_and_purges_a_group_of_a_1000_unit_quorum_dead_letter_exactly() {
    the_console_reads_and_purges_a_group_exactly(false).await;
}

#[cfg(feature = "admin")]
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_reads_and_purges_a_group_of_a_1000_unit_classic_dead_letter_exactly() {
    the_console_reads_and_purges_a_group_exactly(true).await;
}

#[cfg(feature = "admin")]
async fn the_console_reads_and_purges_a_group_exactly(classic: bool) {
    use axum::body::Body;
    use axum::http::{Request, StatusCode, header};
    use tower::ServiceExt as _;

    const TOKEN: &str = "test-console-token-0123456789";
    let kind = if classic { "classic" } else { "quorum" };
    let mut topology =
        RabbitTopology::new(format!("rmq-dlq-console-{kind}-{}", std::process::id()));
    if classic {
        topology = topology.classic();
    }
    let url = amqp_url();
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    fill(&publisher, &topology).await;
    let dead = RabbitDeadLetters::new(url.as_str(), &topology);
    let app = axum::Router::new().nest(
        "/admin",
        delivery::admin::Console::new(TOKEN)
            .dead_letters(dead.clone())
            .router(),
    );
    let send = async |request: axum::http::request::Builder, body: String| {
        let request = request
            .header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
            .body(Body::from(body))
            .unwrap();
        let response = app.clone().oneshot(request).await.unwrap();
        let status = response.status();
        let location = response.headers().get(header::LOCATION).cloned();
        let body = axum::body::to_bytes(response.into_body(), 1 << 24)
            .await
            .unwrap();
        (status, location, String::from_utf8(body.to_vec()).unwrap())
    };
    let (name, queue) = (topology.dead_letter_queue_name(), &topology.queue);

    let (status, _, overview) = send(Request::get("/admin"), String::new()).await;
    assert_eq!(status, StatusCode::OK);
    for (reason, n) in [("malformed", 900), ("rejected", 100)] {
        let row = format!(
            r#"data-reason="{reason}"><td>{queue}</td><td>{reason}</td><td class="count">{n}</td>"#
        );
        assert!(overview.contains(&row), "{row} in:\n{overview}");
    }
    let group = format!("/admin/d/{name}?source={queue}&reason=rejected");
    for read in 0..5 {
        let (status, _, page) = send(Request::get(group.as_str()), String::new()).await;
        assert_eq!(status, StatusCode::OK);
        let rows: Vec<&str> = page
            .split(r#"<tr class="unit" data-id=""#)
            .skip(1)
            .map(|row| &row[..row.find('"').unwrap()])
            .collect();
        let distinct: HashSet<&str> = rows.iter().copied().collect();
        assert_eq!(rows.len(), UNITS / 10, "read {read}: one row a unit");
        assert_eq!(distinct.len(), UNITS / 10, "read {read}: each unit once");
    }

    let at = overview.find(r#"name="csrf" value=""#).expect("a form") + 19;
    let csrf = &overview[at..at + 64];
    let (status, location, _) = send(
        Request::post(format!("/admin/d/{name}/group/purge"))
            .header(header::CONTENT_TYPE, "application/x-www-form-urlencoded"),
        format!("csrf={csrf}&source={queue}&reason=rejected"),
    )
    .await;
    assert_eq!(status, StatusCode::SEE_OTHER);
    assert_eq!(
        location.unwrap().to_str().unwrap(),
        format!("/admin?done=purged&n={}", UNITS / 10)
    );
    assert_eq!(dead.count().await.unwrap(), (UNITS - UNITS / 10) as u64);
    cleanup(&connection, &topology, publisher).await;
}

/// The broker's lock, as another process holds it: while another connection is the exclusive
/// consumer of `<dead-letter queue>.reader`, a read waits; once it lets go, the read goes on and
/// sees every unit.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_waits_while_another_connection_holds_the_lock() {
    use delivery::lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
    use std::time::Duration;

    let topology = RabbitTopology::new(format!("rmq-dlq-lock-{}", std::process::id()));
    let url = amqp_url();
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    fill(&publisher, &topology).await;
    let dead = RabbitDeadLetters::new(url.as_str(), &topology);
    assert_eq!(
        dead.count().await.unwrap(),
        UNITS as u64,
        "declares the lock queue"
    );

    // Another reader: the exclusive consumer of the lock queue, on a connection of its own.
    let other = rabbitmq::connect(&url).await;
    let channel = other.create_channel().await.unwrap();
    let lock = format!("{}.reader", topology.dead_letter_queue_name());
    let passive = QueueDeclareOptions {
        passive: true,
        ..QueueDeclareOptions::default()
    };
    channel
        .queue_declare(lock.as_str().into(), passive, FieldTable::default())
        .await
        .expect("the lock queue exists after a read");
    let exclusive = BasicConsumeOptions {
        exclusive: true,
        no_ack: true,
        ..BasicConsumeOptions::default()
    };
    let _held = channel
        .basic_consume(
            lock.as_str().into(),
            "other-reader".into(),
            exclusive,
            FieldTable::default(),
        )
        .await
        .unwrap();

    let reading = tokio::spawn({
        let dead = dead.clone();
        async move { dead.list(UNITS, None).await.unwrap().records.len() }
    });
    tokio::time::sleep(Duration::from_secs(1)).await;
    assert!(!reading.is_finished(), "a read waits for the other reader");
    channel.close(200, "done".into()).await.unwrap();
    let read = tokio::time::timeout(Duration::from_secs(30), reading)
        .await
        .expect("the read goes on once the lock is free")
        .unwrap();
    assert_eq!(read, UNITS);
    let _ = other.close(200, "done".into()).await;
    cleanup(&connection, &topology, publisher).await;
}
