//! The outbox's RabbitMQ sink against the real broker: what arrives (message id, persistence,
//! payload), pipelined confirms under many concurrent sends, unroutable publishes (no queue bound,
//! the queue deleted) failing without a receipt even when they share the channel with routable
//! ones, and recovery after the broker closed the channel (a missing exchange).
#![cfg(feature = "lapin")]

use std::collections::BTreeSet;
use std::sync::Arc;

use delivery::lapin::options::{
    BasicGetOptions, ExchangeDeclareOptions, ExchangeDeleteOptions, QueueBindOptions,
    QueueDeclareOptions, QueueDeleteOptions,
};
use delivery::lapin::types::FieldTable;
use delivery::lapin::{Channel, Connection, ExchangeKind};
use delivery::outbox::Record;
use delivery::rabbitmq::RabbitSink;
use futures_util::future::join_all;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

async fn connection() -> Connection {
    let url = amqp_url();
    Connection::connect(&url, Default::default())
        .await
        .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {url}: {e}"))
}

/// A direct exchange `name` and, for each routing key, a queue `name.key` bound to it; both
/// declared fresh.
async fn topology(channel: &Channel, name: &str, bound_keys: &[&str]) {
    let _ = channel
        .exchange_delete(name.into(), ExchangeDeleteOptions::default())
        .await;
    channel
        .exchange_declare(
            name.into(),
            ExchangeKind::Direct,
            ExchangeDeclareOptions::default(),
            FieldTable::default(),
        )
        .await
        .unwrap();
    for key in bound_keys {
        let queue = format!("{name}.{key}");
        let _ = channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
        channel
            .queue_declare(
                queue.as_str().into(),
                QueueDeclareOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
        channel
            .queue_bind(
                queue.as_str().into(),
                name.into(),
                (*key).into(),
                QueueBindOptions::default(),
                FieldTable::default(),
            )
            .await
            .unwrap();
    }
}

async fn cleanup(channel: &Channel, name: &str, bound_keys: &[&str]) {
    for key in bound_keys {
        let queue = format!("{name}.{key}");
        let _ = channel
            .queue_delete(queue.as_str().into(), QueueDeleteOptions::default())
            .await;
    }
    let _ = channel
        .exchange_delete(name.into(), ExchangeDeleteOptions::default())
        .await;
}

/// Every message now in `queue`, taken off it: (message id, delivery mode, payload).
async fn drain(channel: &Channel, queue: &str) -> Vec<(String, Option<u8>, Vec<u8>)> {
    let mut messages = Vec::new();
    while let Some(message) = channel
        .basic_get(queue.into(), BasicGetOptions { no_ack: true })
        .await
        .unwrap()
    {
        let properties = &message.delivery.properties;
        messages.push((
            properties
                .message_id()
                .as_ref()
                .map(|id| id.to_string())
                .unwrap_or_default(),
            *properties.delivery_mode(),
            message.delivery.data.clone(),
        ));
    }
    messages
}

fn name(test: &str) -> String {
    format!("outbox-sink-{test}-{}", std::process::id())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sent_record_arrives_persistent_under_its_id_with_its_payload() {
    let admin = connection().await;
    let channel = admin.create_channel().await.unwrap();
    let exchange = name("arrives");
    topology(&channel, &exchange, &["placed"]).await;

    let sink = RabbitSink::connect(&amqp_url()).await.unwrap();
    let payload: &[u8] = b"{\"z\":1,  \"a\":\"caf\xc3\xa9\",\"n\":[1.50]}";
    let record = Record::new(
        "rec-0193-aa",
        exchange.as_str(),
        Some("placed".into()),
        payload,
        3,
    );
    let receipt = sink.send(&record).await.unwrap();
    assert_eq!(receipt.record(), record.id());

    let arrived = drain(&channel, &format!("{exchange}.placed")).await;
    assert_eq!(
        arrived,
        vec![("rec-0193-aa".to_string(), Some(2), payload.to_vec())]
    );
    cleanup(&channel, &exchange, &["placed"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_sends_share_the_channel_and_each_gets_its_receipt() {
    let admin = connection().await;
    let channel = admin.create_channel().await.unwrap();
    let exchange = name("pipelined");
    topology(&channel, &exchange, &["k"]).await;

    // On a connection the caller owns; a window smaller than the number of sends, so sends also
    // wait for a slot.
    let sink = RabbitSink::new(Arc::new(connection().await))
        .await
        .unwrap()
        .window(64);
    let records: Vec<Record> = (0..1000)
        .map(|i| {
            Record::new(
                format!("rec-{i:04}"),
                exchange.as_str(),
                Some("k".into()),
                format!("{{\"i\":{i}}}").into_bytes(),
                0,
            )
        })
        .collect();
    let sends = records.iter().map(|record| {
        let sink = sink.clone();
        async move { sink.send(record).await }
    });
    let results = join_all(sends).await;
    for (record, result) in records.iter().zip(&results) {
        let receipt = result
            .as_ref()
            .unwrap_or_else(|e| panic!("{}: {e}", record.id()));
        assert_eq!(receipt.record(), record.id());
    }

    let arrived = drain(&channel, &format!("{exchange}.k")).await;
    let ids: BTreeSet<String> = arrived.iter().map(|(id, _, _)| id.clone()).collect();
    let sent: BTreeSet<String> = records.iter().map(|r| r.id().to_string()).collect();
    assert_eq!(ids, sent);
    assert_eq!(arrived.len(), 1000, "each record published once");
    cleanup(&channel, &exchange, &["k"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unroutable_publish_fails_without_a_receipt_even_among_routable_ones() {
    let admin = connection().await;
    let channel = admin.create_channel().await.unwrap();
    let exchange = name("unroutable");
    // Key "bound" has a queue; key "nobody" has none.
    topology(&channel, &exchange, &["bound"]).await;
    let sink = RabbitSink::connect(&amqp_url()).await.unwrap();

    let alone = Record::new(
        "rec-alone",
        exchange.as_str(),
        Some("nobody".into()),
        &b"{}"[..],
        0,
    );
    let failure = sink.send(&alone).await.unwrap_err();
    assert!(failure.is_retry(), "{failure}");
    assert!(failure.to_string().contains("unroutable"), "{failure}");

    // Interleaved on one channel: lapin attaches a return to whichever confirm it resolves next,
    // so this catches a receipt given to a returned record because a neighbour carried its return.
    let records: Vec<Record> = (0..600)
        .map(|i| {
            let key = if i % 3 == 0 { "nobody" } else { "bound" };
            Record::new(
                format!("rec-{key}-{i:04}"),
                exchange.as_str(),
                Some(key.into()),
                &b"{}"[..],
                0,
            )
        })
        .collect();
    let results = join_all(records.iter().map(|record| sink.send(record))).await;
    let mut receipts = BTreeSet::new();
    for (record, result) in records.iter().zip(results) {
        match (record.key(), result) {
            (Some("bound"), Ok(receipt)) => {
                assert_eq!(receipt.record(), record.id());
                receipts.insert(record.id().to_string());
            }
            (Some("nobody"), Err(failure)) => assert!(failure.is_retry(), "{failure}"),
            (Some("nobody"), Ok(_)) => {
                panic!("{}: a receipt for an unroutable publish", record.id())
            }
            (_, Err(failure)) => panic!("{}: a routable publish failed: {failure}", record.id()),
            (key, Ok(_)) => panic!("unexpected key {key:?}"),
        }
    }
    assert_eq!(receipts.len(), 400);
    let arrived: BTreeSet<String> = drain(&channel, &format!("{exchange}.bound"))
        .await
        .into_iter()
        .map(|(id, _, _)| id)
        .collect();
    assert_eq!(
        arrived, receipts,
        "every receipt names a record in the queue"
    );

    // The queue deleted: what was routable is now returned, and no receipt comes.
    channel
        .queue_delete(
            format!("{exchange}.bound").as_str().into(),
            QueueDeleteOptions::default(),
        )
        .await
        .unwrap();
    let orphan = Record::new(
        "rec-orphan",
        exchange.as_str(),
        Some("bound".into()),
        &b"{}"[..],
        0,
    );
    let failure = sink.send(&orphan).await.unwrap_err();
    assert!(failure.is_retry(), "{failure}");
    cleanup(&channel, &exchange, &[]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_missing_exchange_fails_and_the_sink_recovers_for_the_next_send() {
    let admin = connection().await;
    let channel = admin.create_channel().await.unwrap();
    let exchange = name("recovers");
    topology(&channel, &exchange, &["k"]).await;
    for sink in [
        RabbitSink::connect(&amqp_url()).await.unwrap(),
        RabbitSink::new(connection().await).await.unwrap(),
    ] {
        let first = Record::new(
            "rec-before",
            exchange.as_str(),
            Some("k".into()),
            &b"1"[..],
            0,
        );
        assert_eq!(sink.send(&first).await.unwrap().record(), first.id());

        // The broker closes the channel (404 NOT_FOUND) for a publish to an undeclared exchange.
        let lost = Record::new(
            "rec-lost",
            format!("{exchange}-never-declared"),
            Some("k".into()),
            &b"2"[..],
            0,
        );
        let failure = sink.send(&lost).await.unwrap_err();
        assert!(failure.is_retry(), "{failure}");

        // The next send gets a fresh channel; sends a clone makes recover too.
        let after = Record::new(
            "rec-after",
            exchange.as_str(),
            Some("k".into()),
            &b"3"[..],
            0,
        );
        let receipt = sink.clone().send(&after).await.unwrap();
        assert_eq!(receipt.record().as_str(), "rec-after");

        // A few failures in a row do not wear the sink out.
        for _ in 0..3 {
            assert!(sink.send(&lost).await.unwrap_err().is_retry());
        }
        assert_eq!(sink.send(&after).await.unwrap().record(), after.id());

        let arrived: Vec<String> = drain(&channel, &format!("{exchange}.k"))
            .await
            .into_iter()
            .map(|(id, _, _)| id)
            .collect();
        assert_eq!(arrived, ["rec-before", "rec-after", "rec-after"]);
    }
    cleanup(&channel, &exchange, &["k"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_beyond_amqp_limits_are_rejected_not_panicked_on() {
    let sink = RabbitSink::connect(&amqp_url()).await.unwrap();
    let long = "x".repeat(256);
    for record in [
        Record::new(long.as_str(), "amq.direct", None, &b"{}"[..], 0),
        Record::new("rec-1", long.as_str(), None, &b"{}"[..], 0),
        Record::new("rec-1", "amq.direct", Some(long.clone()), &b"{}"[..], 0),
    ] {
        let failure = sink.send(&record).await.unwrap_err();
        assert!(failure.is_reject(), "{failure}");
    }
}

/// The broker's pid for the connection named `connection_name`, from `rabbitmqctl` (one line per
/// connection: the pid, a tab, the client properties, which hold the name).
fn connection_pid(connection_name: &str) -> Option<String> {
    let output = std::process::Command::new("rabbitmqctl")
        .args(["list_connections", "pid", "client_properties", "-q"])
        .output()
        .expect("rabbitmqctl runs");
    let listed = String::from_utf8_lossy(&output.stdout).into_owned();
    let quoted = format!("\"{connection_name}\"");
    listed
        .lines()
        .find(|line| line.contains(&quoted))
        .and_then(|line| line.split('\t').next())
        .map(|pid| pid.trim().to_owned())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_closed_by_the_broker_is_redialled_on_the_next_send() {
    let admin = connection().await;
    let channel = admin.create_channel().await.unwrap();
    let exchange = name("redial");
    topology(&channel, &exchange, &["k"]).await;
    let connection_name = format!("{exchange}-sink");
    let sink = RabbitSink::connect_with(
        &amqp_url(),
        delivery::lapin::ConnectionProperties::default()
            .with_connection_name(connection_name.as_str().into()),
    )
    .await
    .unwrap();
    let record = Record::new(
        "rec-redial",
        exchange.as_str(),
        Some("k".into()),
        &b"{}"[..],
        0,
    );
    assert_eq!(sink.send(&record).await.unwrap().record(), record.id());

    let pid = connection_pid(&connection_name).expect("the sink's connection is listed");
    let closed = std::process::Command::new("rabbitmqctl")
        .args(["close_connection", &pid, "closed by outbox_sink_rabbitmq"])
        .status()
        .expect("rabbitmqctl runs");
    assert!(closed.success());

    // Until the client has seen the close, a send may still fail (a retry); once it has, the
    // next send redials. No timing: a bounded number of attempts, each awaited to its end.
    let mut outcomes = Vec::new();
    for _ in 0..50 {
        match sink.send(&record).await {
            Ok(receipt) => {
                assert_eq!(receipt.record(), record.id());
                break;
            }
            Err(failure) => {
                assert!(failure.is_retry(), "{failure}");
                outcomes.push(failure.to_string());
                tokio::task::yield_now().await;
            }
        }
    }
    assert!(outcomes.len() < 50, "never redialled: {outcomes:?}");
    let new_pid = connection_pid(&connection_name).expect("a new connection is listed");
    assert_ne!(new_pid, pid, "a fresh connection");
    let arrived = drain(&channel, &format!("{exchange}.k")).await;
    assert_eq!(arrived.len(), 2, "{arrived:?}");
    cleanup(&channel, &exchange, &["k"]).await;
}
