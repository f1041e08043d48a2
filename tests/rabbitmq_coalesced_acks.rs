//! Coalesced acknowledgements against the real RabbitMQ: a multiple ack never passes a unit still
//! running. A slow unit with a low delivery tag runs while the units after it finish; the
//! consumer — this test binary run again as a child process, in the ignored test
//! `slow_unit_child` — is killed with SIGKILL once they did. The slow unit must come back, and
//! every unit be applied at least once. Run in both ack modes. Fails, never skips, when the broker
//! is unreachable.
#![cfg(feature = "lapin")]

#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delivery::rabbitmq::{AckMode, ConfirmedPublisher, RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, State, Unit, UnitId, consumer};

const SLOW: &str = "slow";
/// Units before the slow one (lower tags), and after it.
const BEFORE: usize = 10;
const AFTER: usize = 10;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

fn topology(queue: &str) -> RabbitTopology {
    RabbitTopology::new(queue).delivery_limit(5).prefetch(64)
}

#[derive(Clone)]
struct ChildState {
    applied: PathBuf,
    slow_for: Duration,
}

/// Appends `line` to the applied file, on disk before it returns.
fn record(path: &Path, line: &str) -> Result<(), HandlerError> {
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)
        .map_err(HandlerError::retry)?;
    writeln!(file, "{line}").map_err(HandlerError::retry)?;
    file.sync_all().map_err(HandlerError::retry)
}

/// Records each unit applied; the slow unit first says it started, then takes `slow_for`.
#[consumer]
async fn apply(id: UnitId, State(child): State<ChildState>) -> Result<(), HandlerError> {
    if id.as_str() == SLOW {
        record(&child.applied, "slow-started")?;
        tokio::time::sleep(child.slow_for).await;
    }
    record(&child.applied, id.as_str())
}

/// The consumer the parent test runs as a child process (`SLOW_QUEUE`, `SLOW_APPLIED`,
/// `SLOW_FOR_MS`, `SLOW_ACKS`); does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the tests below as a child process"]
async fn slow_unit_child() {
    let (Ok(queue), Ok(applied), Ok(slow_for), Ok(acks)) = (
        std::env::var("SLOW_QUEUE"),
        std::env::var("SLOW_APPLIED"),
        std::env::var("SLOW_FOR_MS"),
        std::env::var("SLOW_ACKS"),
    ) else {
        return;
    };
    let mode = match acks.as_str() {
        "per-unit" => AckMode::PerUnit,
        _ => AckMode::coalesced(),
    };
    let source = RabbitSource::connect(amqp_url(), topology(&queue))
        .await
        .unwrap()
        .ack_mode(mode);
    Consumer::new(source)
        .concurrency(32)
        .state(ChildState {
            applied: applied.into(),
            slow_for: Duration::from_millis(slow_for.parse().unwrap()),
        })
        .run(apply)
        .await;
}

/// A child consumer, killed (SIGKILL) if the test ends before it is stopped.
struct ChildConsumer(Child);

impl Drop for ChildConsumer {
    fn drop(&mut self) {
        if let Ok(None) = self.0.try_wait() {
            let _ = self.0.kill();
            let _ = self.0.wait();
        }
    }
}

fn start(queue: &str, applied: &Path, slow_for_ms: u64, acks: &str) -> ChildConsumer {
    ChildConsumer(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                "slow_unit_child",
                "--nocapture",
                "--test-threads=1",
            ])
            .env("SLOW_QUEUE", queue)
            .env("SLOW_APPLIED", applied)
            .env("SLOW_FOR_MS", slow_for_ms.to_string())
            .env("SLOW_ACKS", acks)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the child consumer"),
    )
}

fn applied(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

async fn wait_for(what: &str, patience: Duration, check: impl Fn() -> bool) {
    let deadline = Instant::now() + patience;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

fn fast(i: usize) -> String {
    format!("u-{i:02}")
}

/// Publishes `BEFORE` fast units, the slow one, then `AFTER` fast units; runs a first consumer
/// until every fast unit is applied and the slow one runs, SIGKILLs it, and runs a second one
/// until the slow unit is applied and it is quiet, then stops it gracefully. Answers what the
/// second consumer applied.
async fn slow_unit_across_a_sigkill(name: &str, acks: &str) -> BTreeSet<String> {
    let queue = format!("rmq-acks-{name}-{}", std::process::id());
    let topology = topology(&queue);
    let connection = rabbitmq::fresh(&amqp_url(), &topology).await;
    let publisher = ConfirmedPublisher::new(amqp_url());
    let ids: Vec<String> = (0..BEFORE)
        .map(fast)
        .chain([SLOW.to_owned()])
        .chain((BEFORE..BEFORE + AFTER).map(fast))
        .collect();
    for id in &ids {
        let unit = Unit::new(id.as_str(), format!("{{\"id\":\"{id}\"}}"));
        publisher
            .publish(
                &queue,
                unit.payload(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    }
    let dir = std::env::temp_dir().join(&queue);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let (first_file, second_file) = (dir.join("first"), dir.join("second"));
    let fast_ids: BTreeSet<String> = ids.iter().filter(|id| *id != SLOW).cloned().collect();

    let mut first = start(&queue, &first_file, 3_600_000, acks);
    wait_for(
        "every fast unit applied while the slow one runs",
        Duration::from_secs(60),
        || {
            let seen = applied(&first_file);
            seen.contains("slow-started") && fast_ids.is_subset(&seen)
        },
    )
    .await;
    // Two hundred flush intervals: an ack that would pass the slow unit would be sent by now.
    tokio::time::sleep(Duration::from_secs(1)).await;
    first.0.kill().unwrap(); // SIGKILL
    first.0.wait().unwrap();
    let first_applied = applied(&first_file);
    assert!(
        !first_applied.contains(SLOW),
        "the slow unit was still running at the kill"
    );

    let mut second = start(&queue, &second_file, 0, acks);
    wait_for(
        "the slow unit delivered again and applied",
        Duration::from_secs(60),
        || applied(&second_file).contains(SLOW),
    )
    .await;
    // Quiet: the redeliveries it received are applied (they are tiny) once its file stops growing.
    let mut seen = applied(&second_file);
    loop {
        tokio::time::sleep(Duration::from_secs(1)).await;
        let now = applied(&second_file);
        if now == seen {
            break;
        }
        seen = now;
    }
    let status = Command::new("kill")
        .args(["-TERM", &second.0.id().to_string()])
        .status()
        .unwrap();
    assert!(status.success());
    second.0.wait().unwrap();
    let (ready, _) = rabbitmq::queue_counts(&connection, &queue).await;
    assert_eq!(
        ready, 0,
        "every unit acknowledged by a consumer that applied it"
    );

    let second_applied = applied(&second_file);
    for id in &ids {
        assert!(
            first_applied.contains(id) || second_applied.contains(id),
            "{id} was never applied: lost"
        );
    }
    rabbitmq::delete_queues(
        &connection,
        [queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
    let _ = connection.close(200, "ok".into()).await;
    publisher.close().await;
    let _ = std::fs::remove_dir_all(&dir);
    second_applied
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_acks_never_pass_a_unit_still_running() {
    let again = slow_unit_across_a_sigkill("coalesced", "coalesced").await;
    assert!(again.contains(SLOW), "the slow unit was delivered again");
    // The units before it were settled, so the watermark passed them and their multiple ack went
    // out while it ran; the units after it were held behind it, unacknowledged, and come back.
    for i in 0..BEFORE {
        assert!(!again.contains(&fast(i)), "{} was acknowledged", fast(i));
    }
    for i in BEFORE..BEFORE + AFTER {
        assert!(
            again.contains(&fast(i)),
            "{} was held behind the slow unit",
            fast(i)
        );
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn per_unit_acks_redeliver_only_the_unit_still_running() {
    let again = slow_unit_across_a_sigkill("per-unit", "per-unit").await;
    assert_eq!(
        again,
        BTreeSet::from([SLOW.to_owned(), "slow-started".to_owned()]),
        "each fast unit was acknowledged on its own"
    );
}
