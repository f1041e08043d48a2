//! The built `delivery-dlq` binary over a RabbitMQ dead letter of 1 000 units, quorum and
//! classic (issue 34, item 9): counts by reason exact and the same on every read, paging with
//! `list --limit 100 --after` shows every unit exactly once and the same way twice, and
//! `redrive --reason` and `purge` act on exactly the units they selected.

#[path = "../../tests/support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::BTreeSet;
use std::process::Command;

use delivery::lapin::BasicProperties;
use delivery::lapin::types::{AMQPValue, FieldTable, LongString};
use delivery::rabbitmq::{ConfirmedPublisher, RabbitTopology};
use serde_json::Value;

const UNITS: usize = 1_000;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

/// Every tenth unit rejected, the others malformed: as the consumer records them.
fn reason_of(i: usize) -> &'static str {
    if i % 10 == 3 { "rejected" } else { "malformed" }
}

/// Runs the binary on the topology's dead letter, expecting exit status `code`; its stdout.
fn dlq(url: &str, topology: &RabbitTopology, code: i32, command: &[&str]) -> String {
    let output = Command::new(env!("CARGO_BIN_EXE_delivery-dlq"))
        .args(["--transport", "rabbitmq", "--amqp-url", url])
        .args(["--queue", &topology.queue])
        .args(command)
        .output()
        .expect("running delivery-dlq");
    let stdout = String::from_utf8(output.stdout).unwrap();
    assert_eq!(
        output.status.code(),
        Some(code),
        "delivery-dlq {command:?}: {stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|e| panic!("not JSON ({e}):\n{stdout}"))
}

/// Every id, listed 100 at a time with `--after`.
fn paged(url: &str, topology: &RabbitTopology) -> Vec<String> {
    let mut ids = Vec::new();
    let mut after: Option<String> = None;
    loop {
        let mut command = vec!["list", "--limit", "100", "--json"];
        if let Some(cursor) = &after {
            command.extend(["--after", cursor.as_str()]);
        }
        let page = json(&dlq(url, topology, 0, &command));
        let records = page["records"].as_array().expect("records");
        assert!(records.len() <= 100);
        ids.extend(records.iter().map(|r| r["id"].as_str().unwrap().to_owned()));
        match page["next"].as_str() {
            Some(next) => after = Some(next.to_owned()),
            None => return ids,
        }
    }
}

async fn reads_and_bulk_actions_are_exact(classic: bool) {
    let kind = if classic { "classic" } else { "quorum" };
    let mut topology = RabbitTopology::new(format!("cli-rmq-reads-{kind}-{}", std::process::id()));
    if classic {
        topology = topology.classic();
    }
    let url = amqp_url();
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    let text = |s: &str| AMQPValue::LongString(LongString::from(s));
    for i in 0..UNITS {
        let mut headers = FieldTable::default();
        headers.insert("x-dead-letter-reason".into(), text(reason_of(i)));
        headers.insert("x-dead-letter-detail".into(), text(&format!("unit {i}")));
        headers.insert("x-dead-letter-source".into(), text(&topology.queue));
        let properties = BasicProperties::default()
            .with_message_id(format!("u-{i:04}").into())
            .with_headers(headers);
        publisher
            .publish(
                &topology.dead_letter_queue_name(),
                format!("{{\"n\": {i}}}").as_bytes(),
                properties,
            )
            .await
            .unwrap();
    }

    for _ in 0..3 {
        let count = json(&dlq(&url, &topology, 0, &["count", "--json"]));
        assert_eq!(count["total"], UNITS, "{kind}: {count}");
        assert_eq!(
            count["by_reason"]["malformed"],
            UNITS - UNITS / 10,
            "{kind}"
        );
        assert_eq!(count["by_reason"]["rejected"], UNITS / 10, "{kind}");
    }
    let first = paged(&url, &topology);
    assert_eq!(first.len(), UNITS, "{kind}: every unit listed");
    let distinct: BTreeSet<&String> = first.iter().collect();
    assert_eq!(distinct.len(), UNITS, "{kind}: each once");
    assert_eq!(
        paged(&url, &topology),
        first,
        "{kind}: the same pages again"
    );

    let redriven = dlq(
        &url,
        &topology,
        0,
        &["redrive", "--reason", "rejected", "--yes"],
    );
    let name = topology.dead_letter_queue_name();
    assert_eq!(
        redriven,
        format!("redriven {} units from {name}\n", UNITS / 10),
        "{kind}"
    );
    assert_eq!(
        rabbitmq::queue_counts(&connection, &topology.queue).await.0,
        (UNITS / 10) as u64,
        "{kind}: the source holds every rejected unit"
    );
    let count = json(&dlq(&url, &topology, 0, &["count", "--json"]));
    assert_eq!(count["total"], UNITS - UNITS / 10, "{kind}: {count}");
    assert!(count["by_reason"]["rejected"].is_null(), "{kind}: {count}");

    let purge: Vec<String> = first
        .iter()
        .filter(|id| !id.ends_with('3'))
        .take(100)
        .cloned()
        .collect();
    let mut command = vec!["purge", "--yes"];
    command.extend(purge.iter().map(String::as_str));
    let purged = dlq(&url, &topology, 0, &command);
    assert_eq!(purged, format!("purged 100 units from {name}\n"), "{kind}");
    let left = paged(&url, &topology);
    let expected: Vec<String> = first
        .iter()
        .filter(|id| !id.ends_with('3') && !purge.contains(id))
        .cloned()
        .collect();
    assert_eq!(left, expected, "{kind}: exactly the rest, in place");

    rabbitmq::delete_queues(&connection, [topology.queue.as_str(), name.as_str()]).await;
    publisher.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quorum_dead_letter_of_1000_through_the_cli() {
    reads_and_bulk_actions_are_exact(false).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_classic_dead_letter_of_1000_through_the_cli() {
    reads_and_bulk_actions_are_exact(true).await;
}
