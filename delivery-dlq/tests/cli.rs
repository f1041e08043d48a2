//! The built `delivery-dlq` binary against the real servers — RabbitMQ, Redis, NATS, Kafka
//! (tansu), PostgreSQL and SQLite — over dead letters a real consumer (or outbox relay) filled:
//! count, list (table, JSON, filters, paging), show (a JSON payload pretty-printed, a binary one
//! escaped), redrive (one id back in its source under the same id, ids with one not found, by
//! reason, all), an edited redrive (`--payload FILE`, `--payload -`, `--edit` in `$EDITOR`: back
//! in its source under its own id with the new payload and the edit's headers; an unchanged or
//! empty edit refused), purge, confirmation refused without a terminal, and the exit codes. Fails,
//! never skips, when a server is unreachable.

#[path = "../../tests/support/dead_letters.rs"]
mod dead_letters;
#[path = "../../tests/support/kafka.rs"]
mod kafka_support;
#[path = "../../tests/support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::{BTreeSet, HashMap};
use std::io::Write as _;
use std::process::{Command, Stdio};
use std::time::Duration;

use dead_letters::strict;
use delivery::dead_letter::DeadLetters;
use delivery::headers::{EDITED, ORIGINAL_SHA256};
use delivery::kafka::client::message::{Header, OwnedHeaders};
use delivery::kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
use delivery::lapin::BasicProperties;
use delivery::lapin::Connection;
use delivery::lapin::options::BasicGetOptions;
use delivery::lapin::types::{AMQPValue, FieldTable, LongString};
use delivery::nats::{NatsDeadLetters, NatsSource, NatsTopology};
use delivery::outbox::{
    Attempt, NewRecord, Outbox, OutboxDatabase, Record, Relay, Relayer, Status, Store,
};
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitSource, RabbitTopology};
use delivery::redis::{RedisDeadLetters, RedisSource, RedisTopology};
use delivery::{Consumer, HandlerError, Headers, Unit, transport::Settle, transport::Source};
use serde_json::Value;
use sha2::Digest as _;

fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

fn amqp_url() -> String {
    env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f")
}

fn redis_url() -> String {
    env_or("REDIS_URL", "redis://127.0.0.1:6379")
}

fn nats_url() -> String {
    env_or("NATS_URL", "nats://127.0.0.1:4222")
}

fn database_url() -> String {
    env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test")
}

/// The units every test publishes: one the consumer takes, two it cannot decode (one of them
/// not even UTF-8), two it refuses (`negative amount`).
const UNITS: [(&str, &[u8]); 5] = [
    ("fine", br#"{"amount_cents":5}"#),
    ("bad-json", b"{oops"),
    ("neg-1", br#"{"amount_cents":-5}"#),
    ("neg-2", br#"{"amount_cents":-7}"#),
    ("bin", b"\x00\xffnot json\n"),
];

/// The ids the consumer dead-letters.
const DEAD: [&str; 4] = ["bad-json", "neg-1", "neg-2", "bin"];

/// Runs `strict` on `source` until `dead` holds `n` units.
async fn consume_until_dead<S, D>(source: S, dead: &D, n: u64)
where
    S: Source,
    D: DeadLetters + Clone + 'static,
{
    let dead = dead.clone();
    let deadline = tokio::time::Instant::now() + Duration::from_secs(60);
    Consumer::new(source)
        .shutdown_on(async move {
            while dead.count().await.unwrap() < n {
                assert!(
                    tokio::time::Instant::now() < deadline,
                    "{n} dead letters not reached within 60 s"
                );
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .run(strict)
        .await;
}

/// What one run of the binary did.
#[derive(Debug)]
struct Run {
    code: i32,
    stdout: String,
    stderr: String,
}

impl Run {
    /// The value after `name` on the line that starts with it (`show`'s and `count`'s fields).
    fn field(&self, name: &str) -> &str {
        self.stdout
            .lines()
            .find_map(|line| line.trim_start().strip_prefix(name))
            .unwrap_or_else(|| panic!("no {name:?} line in:\n{}", self.stdout))
            .trim()
    }

    fn json(&self) -> Value {
        serde_json::from_str(&self.stdout)
            .unwrap_or_else(|e| panic!("not JSON ({e}):\n{}", self.stdout))
    }

    /// The ids of a `list --json`.
    fn ids(&self) -> Vec<String> {
        self.json()["records"]
            .as_array()
            .expect("records")
            .iter()
            .map(|r| r["id"].as_str().unwrap().to_owned())
            .collect()
    }
}

/// The binary with the flags naming one dead letter.
struct Dlq {
    target: Vec<String>,
}

impl Dlq {
    fn new(target: &[&str]) -> Self {
        Dlq {
            target: target.iter().map(|s| (*s).to_owned()).collect(),
        }
    }

    /// Runs `command` with no terminal (stdin closed, output captured).
    fn run(&self, command: &[&str]) -> Run {
        self.run_with(command, &[], b"")
    }

    /// Runs `command` with no terminal, `env` set (and no other editor) and `stdin` its input.
    fn run_with(&self, command: &[&str], env: &[(&str, &str)], stdin: &[u8]) -> Run {
        let mut child = Command::new(env!("CARGO_BIN_EXE_delivery-dlq"))
            .args(&self.target)
            .args(command)
            .env_remove("DLQ_TRANSPORT")
            .env_remove("QUEUE")
            .env_remove("STREAM")
            .env_remove("TOPIC")
            .env_remove("GROUP")
            .env_remove("DEAD_LETTER")
            .env_remove("OUTBOX_TABLE")
            .env_remove("VISUAL")
            .env_remove("EDITOR")
            .envs(env.iter().copied())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("running delivery-dlq");
        let mut input = child.stdin.take().unwrap();
        // The binary may exit without reading its input: a broken pipe is no failure here.
        let _ = input.write_all(stdin);
        drop(input);
        let output = child.wait_with_output().expect("running delivery-dlq");
        Run {
            code: output.status.code().expect("an exit code"),
            stdout: String::from_utf8(output.stdout).expect("UTF-8 output"),
            stderr: String::from_utf8(output.stderr).expect("UTF-8 errors"),
        }
    }

    /// Runs `command`, expecting exit status `code`.
    fn expect(&self, code: i32, command: &[&str]) -> Run {
        let run = self.run(command);
        assert_eq!(run.code, code, "delivery-dlq {command:?}: {run:#?}");
        run
    }

    fn ok(&self, command: &[&str]) -> Run {
        self.expect(0, command)
    }

    /// Runs `command` with `EDITOR` set to `editor`, expecting exit status `code`.
    fn edit(&self, code: i32, id: &str, editor: &str) -> Run {
        let command = ["redrive", id, "--edit", "--yes"];
        let run = self.run_with(&command, &[("EDITOR", editor)], b"");
        assert_eq!(
            run.code, code,
            "EDITOR={editor:?} delivery-dlq {command:?}: {run:#?}"
        );
        run
    }
}

/// `count`: the total and the count by reason, as the consumer filled the dead letter.
fn counts_two_malformed_two_rejected(dlq: &Dlq, total: u64) {
    let count = dlq.ok(&["count"]);
    assert_eq!(count.field("total"), total.to_string());
    assert_eq!(count.field("malformed"), "2");
    assert_eq!(count.field("rejected"), "2");
    let json = dlq.ok(&["count", "--json"]).json();
    assert_eq!(json["total"], total);
    assert_eq!(json["by_reason"]["malformed"], 2);
    assert_eq!(json["by_reason"]["rejected"], 2);
}

/// `list`: the table, `--json`, a filter, two pages, and a filter matching nothing (2).
fn lists(dlq: &Dlq, source: &str) {
    let table = dlq.ok(&["list"]);
    let mut lines = table.stdout.lines();
    let header = lines.next().unwrap();
    let columns: Vec<&str> = header
        .split("  ")
        .map(str::trim)
        .filter(|c| !c.is_empty())
        .collect();
    let expected = [
        "POSITION",
        "ID",
        "REASON",
        "DELIVERIES",
        "SOURCE",
        "DEAD SINCE",
        "DETAIL",
    ];
    assert_eq!(columns, expected, "{header}");
    for id in DEAD {
        assert!(
            table.stdout.lines().any(|l| l.contains(id)),
            "{id} listed:\n{}",
            table.stdout
        );
    }
    assert!(table.stdout.contains("negative amount"), "{}", table.stdout);
    assert!(!table.stdout.contains("next:"), "one page holds all");

    let json = dlq.ok(&["list", "--json"]);
    let ids: BTreeSet<String> = json.ids().into_iter().collect();
    assert_eq!(ids, DEAD.iter().map(|s| (*s).to_owned()).collect());
    let value = json.json();
    assert_eq!(value["next"], Value::Null);
    let records = value["records"].as_array().unwrap();
    let neg = records.iter().find(|r| r["id"] == "neg-1").unwrap();
    assert_eq!(neg["reason"], "rejected");
    assert_eq!(neg["detail"], "negative amount");
    assert_eq!(neg["source"], source);
    assert_eq!(neg["delivery_count"], 1);
    assert_eq!(neg["payload"], serde_json::json!({"amount_cents": -5}));
    assert_eq!(neg["payload_encoding"], "json");
    assert_eq!(neg["headers"]["tenant"], "acme");
    let bin = records.iter().find(|r| r["id"] == "bin").unwrap();
    assert_eq!(bin["payload_encoding"], "escaped");
    assert_eq!(bin["payload"], "\\u{0}\\xffnot json\n");

    let malformed: BTreeSet<String> = dlq
        .ok(&["list", "--json", "--reason", "malformed"])
        .ids()
        .into_iter()
        .collect();
    assert_eq!(malformed, ["bad-json".to_owned(), "bin".to_owned()].into());
    assert_eq!(
        dlq.ok(&["list", "--json", "--id-prefix", "neg-"])
            .ids()
            .len(),
        2
    );
    assert_eq!(
        dlq.ok(&["list", "--json", "--source", source]).ids().len(),
        4
    );

    // Two pages of two: the first prints the cursor of the second.
    let first = dlq.ok(&["list", "--limit", "2"]);
    let cursor = first.field("next: --after").to_owned();
    let first = dlq.ok(&["list", "--limit", "2", "--json"]);
    assert_eq!(first.json()["next"], cursor.as_str());
    let second = dlq.ok(&["list", "--limit", "2", "--json", "--after", &cursor]);
    let paged: BTreeSet<String> = first.ids().into_iter().chain(second.ids()).collect();
    assert_eq!(paged, ids, "two pages hold every record once");

    let none = dlq.expect(2, &["list", "--id-prefix", "no-such-"]);
    assert!(none.stdout.contains("no records"), "{none:?}");
}

/// `show`: a JSON payload pretty-printed, a binary one escaped, an unknown id (2).
fn shows(dlq: &Dlq, source: &str) {
    let neg = dlq.ok(&["show", "neg-1"]);
    assert_eq!(neg.field("id:"), "neg-1");
    assert_eq!(neg.field("source:"), source);
    assert_eq!(neg.field("reason:"), "rejected");
    assert_eq!(neg.field("detail:"), "negative amount");
    assert_eq!(neg.field("deliveries:"), "1");
    assert_eq!(neg.field("tenant:"), "acme");
    assert!(
        neg.stdout
            .contains("payload (JSON, 19 bytes):\n{\n  \"amount_cents\": -5\n}\n"),
        "pretty-printed:\n{}",
        neg.stdout
    );
    let since = neg.field("dead since:");
    assert!(since == "not recorded" || since.ends_with('Z'), "{since}");

    let bin = dlq.ok(&["show", "bin"]);
    assert_eq!(bin.field("reason:"), "malformed");
    assert!(
        bin.stdout
            .contains("payload (not JSON, 11 bytes, escaped):\n\\u{0}\\xffnot json\n"),
        "escaped:\n{}",
        bin.stdout
    );
    assert_eq!(dlq.ok(&["show", "bin", "--json"]).json()["id"], "bin");

    let missing = dlq.expect(2, &["show", "no-such-id"]);
    assert!(missing.stderr.contains("no-such-id"), "{missing:?}");
}

/// Reads the dead letter of [`DEAD`] every way, then redrives `neg-1`: three are left.
fn read_then_redrive_one(dlq: &Dlq, name: &str, source: &str) {
    counts_two_malformed_two_rejected(dlq, 4);
    lists(dlq, source);
    shows(dlq, source);
    let one = dlq.ok(&["redrive", "neg-1"]);
    assert_eq!(one.stdout, format!("redriven 1 unit from {name}\n"));
    assert_eq!(dlq.ok(&["count"]).field("total"), "3");
}

/// Everything an operator does, on a dead letter holding [`DEAD`]: `source_ids` reads the ids
/// of the units the source holds (taking them where reading is taking).
async fn operate(dlq: &Dlq, name: &str, source: &str, source_ids: impl AsyncFn() -> Vec<String>) {
    counts_two_malformed_two_rejected(dlq, 4);
    lists(dlq, source);
    shows(dlq, source);

    // One id, no confirmation asked: back in its source under the same id.
    let before = source_ids().await;
    let one = dlq.ok(&["redrive", "neg-1"]);
    assert_eq!(one.stdout, format!("redriven 1 unit from {name}\n"));
    let after = source_ids().await;
    let copies = |ids: &[String]| ids.iter().filter(|id| *id == "neg-1").count();
    assert_eq!(
        copies(&after),
        copies(&before) + 1,
        "{before:?} then {after:?}"
    );
    dlq.expect(2, &["show", "neg-1"]);

    // Several ids: refused without a terminal to confirm on, then partial with --yes.
    let refused = dlq.expect(1, &["redrive", "neg-2", "nope"]);
    assert!(refused.stderr.contains("--yes"), "{refused:?}");
    let partial = dlq.expect(3, &["redrive", "neg-2", "nope", "--yes"]);
    assert_eq!(
        partial.stdout,
        format!("redriven 1 unit from {name}; not found: nope\n")
    );

    // A purge always asks; removes for good.
    dlq.expect(1, &["purge", "bad-json"]);
    let purged = dlq.expect(3, &["purge", "bad-json", "nope", "--yes"]);
    assert_eq!(
        purged.stdout,
        format!("purged 1 unit from {name}; not found: nope\n")
    );
    dlq.expect(2, &["purge", "bad-json", "--yes"]);

    // By reason: none rejected is left; then all of it, with its summary.
    let by_reason = dlq.expect(2, &["redrive", "--reason", "rejected", "--yes"]);
    assert!(
        by_reason.stdout.contains("nothing to redrive"),
        "{by_reason:?}"
    );
    assert_eq!(dlq.ok(&["count"]).field("total"), "1");
    let all = dlq.ok(&["redrive", "--all", "--yes"]);
    assert_eq!(all.stdout, format!("redriven 1 unit from {name}\n"));
    assert!(source_ids().await.contains(&"bin".to_owned()));
    let empty = dlq.expect(2, &["redrive", "--all", "--yes"]);
    assert_eq!(
        empty.stdout,
        format!("nothing to redrive: {name} is empty\n")
    );
    assert_eq!(dlq.ok(&["count"]).field("total"), "0");
    dlq.expect(2, &["list"]);
}

/// A fresh RabbitMQ queue `<prefix>-<pid>` whose dead letter a consumer filled with [`DEAD`] (each
/// unit with the header `tenant: acme`): its topology, a connection for the test's own use, and
/// the publisher to close.
async fn rabbitmq_dead(
    url: &str,
    prefix: &str,
) -> (RabbitTopology, Connection, ConfirmedPublisher) {
    let topology = RabbitTopology::new(format!("{prefix}-{}", std::process::id()));
    let connection = rabbitmq::fresh(url, &topology).await;
    let publisher = ConfirmedPublisher::new(url);
    for (id, body) in UNITS {
        let mut headers = FieldTable::default();
        headers.insert(
            "tenant".into(),
            AMQPValue::LongString(LongString::from("acme")),
        );
        let properties = BasicProperties::default()
            .with_message_id(id.into())
            .with_headers(headers);
        publisher
            .publish(&topology.queue, body, properties)
            .await
            .unwrap();
    }
    let dead = RabbitDeadLetters::new(url, &topology);
    let source = RabbitSource::connect(url, topology.clone()).await.unwrap();
    consume_until_dead(source, &dead, 4).await;
    (topology, connection, publisher)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_count_list_show_redrive_purge() {
    let url = amqp_url();
    let (topology, connection, publisher) = rabbitmq_dead(&url, "cli-rmq").await;
    let name = topology.dead_letter_queue_name();
    let dlq = Dlq::new(&[
        "--transport",
        "rabbitmq",
        "--amqp-url",
        &url,
        "--queue",
        &topology.queue,
    ]);
    let queue = topology.queue.clone();
    // Takes what the source queue holds: reading a queue is taking from it.
    let source_ids = async || {
        let channel = connection.create_channel().await.unwrap();
        let mut ids = Vec::new();
        while let Some(message) = channel
            .basic_get(queue.as_str().into(), BasicGetOptions { no_ack: true })
            .await
            .unwrap()
        {
            let id = message.delivery.properties.message_id().as_ref();
            ids.push(id.map(|s| s.to_string()).unwrap_or_default());
        }
        ids
    };
    operate(&dlq, &name, &topology.queue, source_ids).await;

    // A wrong command line is an error (1), not "nothing matched".
    assert_eq!(dlq.run(&["redrive"]).code, 1);
    assert_eq!(dlq.run(&["redrive", "a", "--all"]).code, 1);
    let help = dlq.ok(&["--help"]);
    assert!(help.stdout.contains("Exit codes:"), "{}", help.stdout);
    rabbitmq::delete_queues(&connection, [topology.queue.as_str(), name.as_str()]).await;
    publisher.close().await;
}

/// A fresh Redis stream `<prefix>-<pid>` (group `ops`) whose dead letter a consumer filled with
/// [`DEAD`] (each unit with the header `tenant: acme`): its topology and a connection for the
/// test's own use.
async fn redis_dead(url: &str, prefix: &str) -> (RedisTopology, RedisConnection) {
    let mut redis = delivery::redis::connect(url)
        .await
        .unwrap_or_else(|e| panic!("Redis unreachable at {url}: {e}"));
    let topology = RedisTopology::new(format!("{prefix}-{}", std::process::id()), "ops");
    delete_streams(&mut redis, &topology).await;
    delivery::redis::declare(url, &topology).await.unwrap();
    for (id, body) in UNITS {
        let unit =
            Unit::new(id, body.to_vec()).with_headers(Headers::from_pairs([("tenant", "acme")]));
        delivery::redis::publish(&mut redis, &topology.stream, &unit)
            .await
            .unwrap();
    }
    let dead = RedisDeadLetters::new(url, &topology).unwrap();
    let source = RedisSource::connect(url, topology.clone()).await.unwrap();
    consume_until_dead(source, &dead, 4).await;
    (topology, redis)
}

type RedisConnection = delivery::redis::client::aio::ConnectionManager;

/// The binary on the Redis dead letter of `topology`'s stream.
fn redis_cli(url: &str, topology: &RedisTopology) -> Dlq {
    Dlq::new(&[
        "--transport",
        "redis",
        "--redis-url",
        url,
        "--stream",
        &topology.stream,
    ])
}

/// Deletes the topology's stream and its dead-letter stream.
async fn delete_streams(redis: &mut RedisConnection, topology: &RedisTopology) {
    let _: () = redis::cmd("DEL")
        .arg(&topology.stream)
        .arg(topology.dead_letter_stream_name())
        .query_async(redis)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_count_list_show_redrive_purge() {
    let url = redis_url();
    let (topology, mut redis) = redis_dead(&url, "cli-redis").await;
    let name = topology.dead_letter_stream_name();
    let dlq = Dlq::new(&[
        "--transport",
        "redis",
        "--redis-url",
        &url,
        "--stream",
        &topology.stream,
        "--group",
        "ops",
    ]);
    let stream = topology.stream.clone();
    // The `id` fields of the entries the source stream holds.
    let source_ids = async || {
        let mut redis = redis.clone();
        let entries: Vec<(String, HashMap<String, Vec<u8>>)> = redis::cmd("XRANGE")
            .arg(&stream)
            .arg("-")
            .arg("+")
            .query_async(&mut redis)
            .await
            .unwrap();
        entries
            .into_iter()
            .filter_map(|(_, mut fields)| String::from_utf8(fields.remove("id")?).ok())
            .collect()
    };
    operate(&dlq, &name, &topology.stream, source_ids).await;
    delete_streams(&mut redis, &topology).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nats_count_list_show_and_redrive_one() {
    let url = nats_url();
    let client = delivery::async_nats::connect(url.as_str())
        .await
        .unwrap_or_else(|e| panic!("NATS unreachable at {url}: {e}"));
    let context = delivery::async_nats::jetstream::new(client.clone());
    let stream = format!("cli-nats-{}", std::process::id());
    let topology = NatsTopology::new(&stream)
        .subjects([format!("{stream}.>")])
        .duplicate_window(Duration::from_millis(100));
    for s in [
        topology.stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(&s).await;
    }
    delivery::nats::declare(&url, &topology).await.unwrap();
    for (id, body) in UNITS {
        let mut headers = delivery::async_nats::HeaderMap::new();
        headers.insert("tenant", "acme");
        headers.insert("Nats-Msg-Id", id);
        context
            .publish_with_headers(format!("{stream}.orders"), headers, body.to_vec().into())
            .await
            .unwrap()
            .await
            .unwrap();
    }
    let dead = NatsDeadLetters::new(client.clone(), &topology);
    let source = NatsSource::with_client(client.clone(), topology.clone())
        .await
        .unwrap();
    consume_until_dead(source, &dead, 4).await;

    let dlq = Dlq::new(&[
        "--transport",
        "nats",
        "--nats-url",
        &url,
        "--stream",
        &stream,
    ]);
    read_then_redrive_one(&dlq, &topology.dead_letter_stream_name(), &stream);
    for s in [
        topology.stream.clone(),
        topology.dead_letter_stream_name(),
        topology.advisory_stream_name(),
    ] {
        let _ = context.delete_stream(&s).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn kafka_count_list_show_and_redrive_one() {
    let brokers = kafka_support::brokers();
    let topic = kafka_support::unique_name("cli-kafka");
    let group = format!("{topic}-group");
    let topology = KafkaTopology::new(&topic, &group).commit_interval(Duration::from_millis(100));
    kafka_support::declare(&topology).await;
    let producer = kafka_support::producer();
    for (id, body) in UNITS {
        let headers = OwnedHeaders::new().insert(Header {
            key: "tenant",
            value: Some("acme"),
        });
        kafka_support::send(&producer, kafka_support::record(&topic, id, body, headers)).await;
    }
    let dead = KafkaDeadLetters::new(&brokers, &topology);
    let source = KafkaSource::connect(&brokers, topology.clone())
        .await
        .unwrap();
    consume_until_dead(source, &dead, 4).await;

    let dlq = Dlq::new(&[
        "--transport",
        "kafka",
        "--kafka-brokers",
        &brokers,
        "--topic",
        &topic,
        "--group",
        &group,
    ]);
    read_then_redrive_one(&dlq, &topology.dead_letter_topic_name(), &topic);
}

/// The payload `id` was published with.
fn original(id: &str) -> &'static [u8] {
    UNITS.iter().find(|(u, _)| *u == id).unwrap().1
}

fn sha256(payload: &[u8]) -> String {
    hex::encode(sha2::Sha256::digest(payload))
}

/// What an edited redrive of `id` prints.
fn redriven_edited(id: &str, name: &str) -> String {
    format!(
        "redriven {id} edited from {name}; original payload sha256 {}\n",
        sha256(original(id))
    )
}

/// The next unit `source` delivers, acknowledged.
async fn next_unit(source: &mut impl Source) -> Unit {
    let received = tokio::time::timeout(Duration::from_secs(30), source.receive())
        .await
        .expect("a unit within 30 s");
    let (unit, handle) = received.unwrap().expect("the source has not ended");
    handle.ack(&unit).await.unwrap();
    unit
}

/// `unit` is `id` sent back edited: under its own id, with `payload`, its own header, the edit's
/// two, and its deliveries counted afresh.
fn assert_edited(unit: &Unit, id: &str, payload: &[u8]) {
    let header = |name| unit.headers().get_str(name);
    assert_eq!(unit.id().as_str(), id, "{unit:?}");
    assert_eq!(&unit.payload()[..], payload, "{unit:?}");
    assert_eq!(header(EDITED), Some("true"), "{unit:?}");
    let digest = sha256(original(id));
    assert_eq!(header(ORIGINAL_SHA256), Some(digest.as_str()), "{unit:?}");
    assert_eq!(header("tenant"), Some("acme"), "{unit:?}");
    assert_eq!(unit.delivery_count().get(), 1, "counted afresh: {unit:?}");
}

/// `redrive --edit` on a dead letter holding [`DEAD`] but `neg-1`, `source` reading its source:
/// a JSON payload edited pretty and sent compact, a text one edited by a shell command (`EDITOR`
/// with arguments), then an unchanged, an emptied and a failed edit refused (1) with `bin` left
/// in the dead letter, and an unknown id (2).
async fn edits(dlq: &Dlq, name: &str, source: &mut impl Source) {
    let neg = dlq.edit(0, "neg-2", "sed -i s/-7/7/");
    assert_eq!(neg.stdout, redriven_edited("neg-2", name));
    assert_edited(&next_unit(source).await, "neg-2", br#"{"amount_cents":7}"#);

    // The final newline `echo` adds is dropped: `{oops` had none.
    let text = dlq.edit(0, "bad-json", r#"sh -c 'echo fixed > "$1"' --"#);
    assert_eq!(text.stdout, redriven_edited("bad-json", name));
    assert_edited(&next_unit(source).await, "bad-json", b"fixed");

    let unchanged = dlq.edit(1, "bin", "true");
    assert!(unchanged.stderr.contains("unchanged"), "{unchanged:?}");
    let emptied = dlq.edit(1, "bin", r#"sh -c ': > "$1"' --"#);
    assert!(emptied.stderr.contains("empty"), "{emptied:?}");
    let failed = dlq.edit(1, "bin", "false");
    assert!(failed.stderr.contains("failed"), "{failed:?}");
    assert_eq!(dlq.ok(&["show", "bin"]).field("deliveries:"), "1");
    assert_eq!(dlq.ok(&["count"]).field("total"), "1");

    let missing = dlq.edit(2, "no-such-id", "true");
    assert!(missing.stderr.contains("not in"), "{missing:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rabbitmq_redrive_edited() {
    let url = amqp_url();
    let (topology, connection, publisher) = rabbitmq_dead(&url, "cli-rmq-edit").await;
    let name = topology.dead_letter_queue_name();
    let dlq = Dlq::new(&[
        "--transport",
        "rabbitmq",
        "--amqp-url",
        &url,
        "--queue",
        &topology.queue,
    ]);
    let mut source = RabbitSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fixed.json");
    std::fs::write(&file, br#"{"amount_cents":5}"#).unwrap();
    let file = file.to_str().unwrap();

    // Confirmed as a bulk action is: refused without a terminal, the two payloads shown.
    let refused = dlq.expect(1, &["redrive", "neg-1", "--payload", file]);
    assert!(refused.stderr.contains("--yes"), "{refused:?}");
    assert!(
        refused.stderr.contains(&sha256(original("neg-1")))
            && refused.stderr.contains(&sha256(br#"{"amount_cents":5}"#)),
        "{refused:?}"
    );
    let edited = dlq.ok(&["redrive", "neg-1", "--payload", file, "--yes"]);
    assert_eq!(edited.stdout, redriven_edited("neg-1", &name));
    assert_edited(
        &next_unit(&mut source).await,
        "neg-1",
        br#"{"amount_cents":5}"#,
    );
    dlq.expect(2, &["show", "neg-1"]);
    let missing = dlq.expect(2, &["redrive", "neg-1", "--payload", file, "--yes"]);
    assert!(missing.stderr.contains("not in"), "{missing:?}");

    edits(&dlq, &name, &mut source).await;

    // One id, and never with --reason, --all or each other: a wrong command line (1).
    for wrong in [
        &["redrive", "bin", "neg-2", "--payload", file, "--yes"][..],
        &["redrive", "--all", "--payload", file, "--yes"],
        &["redrive", "--reason", "malformed", "--edit", "--yes"],
        &["redrive", "bin", "--edit", "--payload", file, "--yes"],
        &["redrive", "--payload", file, "--yes"],
    ] {
        dlq.expect(1, wrong);
    }
    assert_eq!(dlq.ok(&["count"]).field("total"), "1");
    drop(source);
    rabbitmq::delete_queues(&connection, [topology.queue.as_str(), name.as_str()]).await;
    publisher.close().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_redrive_edited() {
    let url = redis_url();
    let (topology, mut redis) = redis_dead(&url, "cli-redis-edit").await;
    let name = topology.dead_letter_stream_name();
    let dlq = redis_cli(&url, &topology);
    let mut source = RedisSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();

    // `--payload -`: the payload from stdin.
    let command = ["redrive", "neg-1", "--payload", "-", "--yes"];
    let edited = dlq.run_with(&command, &[], br#"{"amount_cents":5}"#);
    assert_eq!(edited.code, 0, "{edited:#?}");
    assert_eq!(edited.stdout, redriven_edited("neg-1", &name));
    assert_edited(
        &next_unit(&mut source).await,
        "neg-1",
        br#"{"amount_cents":5}"#,
    );
    dlq.expect(2, &["show", "neg-1"]);

    edits(&dlq, &name, &mut source).await;
    drop(source);
    delete_streams(&mut redis, &topology).await;
}

/// Refuses every record: each is dead on its first attempt.
struct Refuse;
impl Relay<()> for Refuse {
    fn call(
        &self,
        _record: &Record,
        _state: &(),
    ) -> impl Future<Output = Attempt> + Send + 'static {
        std::future::ready(Attempt::Failed(HandlerError::reject(
            "refused by the receiver",
        )))
    }
}

/// Writes the records of [`DEAD`] (topic `orders.events`) to `outbox` through `pool`, and relays
/// them until `idle`: each is refused, dead on its first attempt.
async fn fill_dead<DB: OutboxDatabase, St: Store + Clone>(
    outbox: &Outbox,
    pool: &delivery::sqlx::Pool<DB>,
    store: &St,
    idle: impl Future<Output = ()> + Send + 'static,
) {
    let mut tx = pool.begin().await.unwrap();
    for id in DEAD {
        let record = NewRecord::new("orders.events", original(id).to_vec()).id(id);
        outbox.write(&mut tx, record).await.unwrap();
    }
    tx.commit().await.unwrap();
    Relayer::new(store.clone())
        .poll_interval(Duration::from_millis(10))
        .shutdown_on(idle)
        .run(Refuse)
        .await;
}

/// `count`, `list` (filtered by id) and `redrive` of one record, on an outbox's dead records.
fn operate_outbox(dlq: &Dlq, table: &str) -> Run {
    let count = dlq.ok(&["count"]);
    assert_eq!(count.field("dead letter"), table);
    assert_eq!(count.field("total"), "4");
    assert_eq!(count.field("rejected"), "4");
    let listed = dlq.ok(&["list", "--json"]);
    assert_eq!(listed.ids(), DEAD, "in the order written");
    let record = &listed.json()["records"][1];
    assert_eq!(record["source"], "orders.events");
    assert_eq!(record["detail"], "refused by the receiver");
    assert_eq!(record["payload"], serde_json::json!({"amount_cents": -5}));
    assert_eq!(
        dlq.ok(&["list", "--json", "--id-prefix", "neg"]).ids(),
        ["neg-1", "neg-2"]
    );
    shows_escaped_bin(dlq);
    dlq.ok(&["redrive", "neg-1"])
}

fn shows_escaped_bin(dlq: &Dlq) {
    let bin = dlq.ok(&["show", "bin"]);
    assert!(
        bin.stdout.contains("\\u{0}\\xffnot json\n"),
        "{}",
        bin.stdout
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_outbox_count_list_and_redrive() {
    let url = database_url();
    let pool = delivery::sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {url}: {e}"));
    let table = format!("cli_outbox_{}", std::process::id());
    delivery::sqlx::query(delivery::sqlx::AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {table}"
    )))
    .execute(&pool)
    .await
    .unwrap();
    let outbox = Outbox::table(&table);
    let store = outbox.postgres(pool.clone());
    store.migrate().await.unwrap();
    fill_dead(&outbox, &pool, &store, store.idle()).await;

    let dlq = Dlq::new(&[
        "--transport",
        "postgres",
        "--database-url",
        &url,
        "--table",
        &table,
    ]);
    let redriven = operate_outbox(&dlq, &table);
    assert_eq!(redriven.stdout, format!("redriven 1 unit from {table}\n"));
    let record = store.get(&"neg-1".into()).await.unwrap().unwrap();
    assert_eq!((record.status, record.attempts), (Status::Pending, 0));

    // An edited redrive: pending again under its own id, with the new payload and the edit's
    // headers; an unknown id changes nothing (2).
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fixed.json");
    std::fs::write(&file, br#"{"amount_cents":7}"#).unwrap();
    let file = file.to_str().unwrap();
    dlq.expect(2, &["redrive", "no-such-id", "--payload", file, "--yes"]);
    let edited = dlq.ok(&["redrive", "neg-2", "--payload", file, "--yes"]);
    assert_eq!(edited.stdout, redriven_edited("neg-2", &table));
    let record = store.get(&"neg-2".into()).await.unwrap().unwrap();
    assert_eq!(
        (record.status, record.attempts, &record.payload[..]),
        (Status::Pending, 0, &br#"{"amount_cents":7}"#[..])
    );
    let headers: String = delivery::sqlx::query_scalar(delivery::sqlx::AssertSqlSafe(format!(
        "SELECT headers::text FROM {table} WHERE id = 'neg-2'"
    )))
    .fetch_one(&pool)
    .await
    .unwrap();
    let headers: Value = serde_json::from_str(&headers).unwrap();
    assert_eq!(headers[EDITED], "true", "{headers}");
    assert_eq!(
        headers[ORIGINAL_SHA256],
        sha256(original("neg-2")),
        "{headers}"
    );
    assert_eq!(dlq.ok(&["count"]).field("total"), "2");
    delivery::sqlx::query(delivery::sqlx::AssertSqlSafe(format!("DROP TABLE {table}")))
        .execute(&pool)
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlite_outbox_count_list_and_redrive() {
    let dir = std::env::temp_dir().join(format!("delivery-dlq-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let path = dir.join("outbox.db");
    let _ = std::fs::remove_file(&path);
    let url = format!("sqlite://{}?mode=rwc", path.display());
    let pool = delivery::sqlx::SqlitePool::connect(&url).await.unwrap();
    let outbox = Outbox::new();
    let store = outbox.sqlite(pool.clone());
    store.migrate().await.unwrap();
    fill_dead(&outbox, &pool, &store, store.idle()).await;

    let dlq = Dlq::new(&["--transport", "sqlite", "--database-url", &url]);
    operate_outbox(&dlq, "delivery_outbox");
    let record = store.get(&"neg-1".into()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Pending);
    pool.close().await;
    let _ = std::fs::remove_dir_all(&dir);
}

/// An id the dead letter holds twice (`neg-1`, rejected, then malformed when published again
/// with a broken payload): every action on it acts on both copies, and says so before asking.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_bulk_actions_name_the_copies_they_touch() {
    let url = redis_url();
    let (topology, mut redis) = redis_dead(&url, "cli-redis-copies").await;
    let again = Unit::new("neg-1", b"neg-1 again, not json".to_vec());
    delivery::redis::publish(&mut redis, &topology.stream, &again)
        .await
        .unwrap();
    let dead = RedisDeadLetters::new(url.as_str(), &topology).unwrap();
    let source = RedisSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    consume_until_dead(source, &dead, 5).await;
    let name = topology.dead_letter_stream_name();
    let dlq = redis_cli(&url, &topology);
    let refused = |run: Run, copies: &str| {
        assert_eq!(run.code, 1, "{run:#?}");
        assert!(run.stderr.contains("--yes"), "{run:#?}");
        assert!(run.stderr.contains(copies), "names {copies:?}: {run:#?}");
    };

    // An edited redrive sends every copy back edited: it says how many first.
    let edit = ["redrive", "neg-1", "--edit"];
    refused(
        dlq.run_with(&edit, &[("EDITOR", "sed -i s/-5/5/")], b""),
        "2 copies",
    );
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("fixed.json");
    std::fs::write(&file, br#"{"amount_cents":5}"#).unwrap();
    let file = file.to_str().unwrap();
    refused(
        dlq.run(&["redrive", "neg-1", "--payload", file]),
        "2 copies",
    );
    // One id, two copies: asked as a bulk action is.
    refused(dlq.run(&["redrive", "neg-1"]), "2 copies");
    // By reason: the malformed copy of neg-1 brings its rejected copy along.
    refused(dlq.run(&["redrive", "--reason", "malformed"]), "4 copies");
    assert_eq!(dlq.ok(&["count"]).field("total"), "5", "nothing redriven");

    let all = dlq.ok(&["redrive", "--reason", "malformed", "--yes"]);
    assert_eq!(all.stdout, format!("redriven 4 units from {name}\n"));
    assert_eq!(dlq.ok(&["count"]).field("total"), "1");
    delete_streams(&mut redis, &topology).await;
}

/// A fresh PostgreSQL queue `cli-queue-<suffix>` (its own table) through `pool`, whose dead rows a
/// consumer filled with [`DEAD`] (each unit with the header `tenant: acme`).
async fn queue_dead(pool: &delivery::sqlx::PgPool, suffix: &str) -> delivery::queue::PgQueue {
    let queue = fresh_queue(pool, suffix).await;
    let mut tx = pool.begin().await.unwrap();
    for (id, body) in UNITS {
        let headers = Headers::from_pairs([("tenant", "acme")]);
        let unit = Unit::new(id, body.to_vec()).with_headers(headers);
        queue.publish(&mut tx, &unit).await.unwrap();
    }
    tx.commit().await.unwrap();
    consume_until_dead(queue.source(), queue.store(), 4).await;
    queue
}

/// An empty PostgreSQL queue `cli-queue-<suffix>-<pid>`, its table made anew.
async fn fresh_queue(pool: &delivery::sqlx::PgPool, suffix: &str) -> delivery::queue::PgQueue {
    let queue = delivery::queue::Queue::new(&format!("cli-queue-{suffix}-{}", std::process::id()));
    delivery::sqlx::query(delivery::sqlx::AssertSqlSafe(format!(
        "DROP TABLE IF EXISTS {}",
        queue.table_name()
    )))
    .execute(pool)
    .await
    .unwrap();
    let queue = queue.postgres(pool.clone());
    queue.migrate().await.unwrap();
    queue
}

/// The binary on the dead records of the PostgreSQL table `table`.
fn postgres_cli(table: &str) -> Dlq {
    let url = database_url();
    Dlq::new(&[
        "--transport",
        "postgres",
        "--database-url",
        &url,
        "--table",
        table,
    ])
}

async fn pg_pool() -> delivery::sqlx::PgPool {
    let url = database_url();
    delivery::sqlx::PgPool::connect(&url)
        .await
        .unwrap_or_else(|e| panic!("PostgreSQL unreachable at {url}: {e}"))
}

async fn drop_queue(pool: &delivery::sqlx::PgPool, queue: &delivery::queue::PgQueue) {
    delivery::sqlx::query(delivery::sqlx::AssertSqlSafe(format!(
        "DROP TABLE {}",
        queue.queue().table_name()
    )))
    .execute(pool)
    .await
    .unwrap();
}

/// The database queue's dead letter (its table's dead rows) through the same commands as every
/// broker's: a redriven unit is pending again in its table, under its own id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_queue_count_list_show_redrive_purge() {
    let pool = pg_pool().await;
    let queue = queue_dead(&pool, "ops").await;
    let table = queue.queue().table_name().to_owned();
    let dlq = postgres_cli(&table);
    let pending = format!("SELECT id FROM {table} WHERE status = 'pending'");
    let source_ids = async || {
        delivery::sqlx::query_scalar(delivery::sqlx::AssertSqlSafe(pending.clone()))
            .fetch_all(&pool)
            .await
            .unwrap()
    };
    operate(&dlq, &table, queue.queue().name(), source_ids).await;
    drop_queue(&pool, &queue).await;
}

/// A thousand dead units: counted, listed page by page in their order, redriven all at once
/// (each pending again, its count back to 0), and, dead again, purged by id.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn postgres_queue_a_thousand_dead_letters() {
    const N: usize = 1000;
    let pool = pg_pool().await;
    let queue = fresh_queue(&pool, "many").await.batch(256);
    let ids: Vec<String> = (0..N).map(|i| format!("poison-{i:04}")).collect();
    let mut tx = pool.begin().await.unwrap();
    for id in &ids {
        queue
            .publish(&mut tx, &Unit::new(id.as_str(), b"{not json".to_vec()))
            .await
            .unwrap();
    }
    tx.commit().await.unwrap();
    let fill = |queue: delivery::queue::PgQueue| async move {
        let store = queue.store().clone();
        Consumer::new(queue.source())
            .concurrency(32)
            .shutdown_on(async move { store.idle().await })
            .run(strict)
            .await
    };
    assert_eq!(fill(queue.clone()).await.dead_lettered, N as u64);

    let table = queue.queue().table_name().to_owned();
    let dlq = postgres_cli(&table);
    assert_eq!(dlq.ok(&["count"]).field("total"), N.to_string());
    // Every unit, page by page, in the order they were published, each once.
    let mut listed = Vec::new();
    let mut cursor: Option<String> = None;
    loop {
        let mut command = vec!["list", "--json", "--limit", "300"];
        if let Some(after) = &cursor {
            command.extend(["--after", after.as_str()]);
        }
        let page = dlq.ok(&command).json();
        listed.extend(
            page["records"]
                .as_array()
                .unwrap()
                .iter()
                .map(|r| r["id"].as_str().unwrap().to_owned()),
        );
        match page["next"].as_str() {
            Some(next) => cursor = Some(next.to_owned()),
            None => break,
        }
    }
    assert_eq!(listed, ids);

    let all = dlq.ok(&["redrive", "--all", "--yes"]);
    assert_eq!(all.stdout, format!("redriven {N} units from {table}\n"));
    assert_eq!(queue.store().pending().await.unwrap(), N as u64);
    assert_eq!(dlq.ok(&["count"]).field("total"), "0");
    // Dead again (their count restarted at 1), then purged for good.
    assert_eq!(fill(queue.clone()).await.dead_lettered, N as u64);
    let first = dlq.ok(&["show", "poison-0000", "--json"]).json();
    assert_eq!(first["delivery_count"], 1, "{first}");
    let mut purge = vec!["purge"];
    purge.extend(ids.iter().map(String::as_str));
    purge.push("--yes");
    let purged = dlq.ok(&purge);
    assert_eq!(purged.stdout, format!("purged {N} units from {table}\n"));
    assert_eq!(dlq.ok(&["count"]).field("total"), "0");
    drop_queue(&pool, &queue).await;
}
