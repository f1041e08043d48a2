//! Coalesced acknowledgements against the real RabbitMQ: a multiple ack never passes a unit still
//! running. A slow unit with a low delivery tag runs while the units after it finish; the
//! consumer — this test binary run again as a child process, in the ignored test
//! `slow_unit_child` — is killed with SIGKILL once they did. The slow unit must come back, and
//! every unit be applied at least once. Run per unit, coalesced with acks held behind the slow
//! unit as long as it runs (only the multiple ack moves), and coalesced with the default
//! `hold_for`, after which they are acknowledged one by one. And a unit that aborts its consumer
//! on every delivery (a crash loop) is dead-lettered alone: the units applied while it ran are
//! acknowledged before it crashes, not held behind it. Fails, never skips, when the broker is
//! unreachable.
#![cfg(feature = "lapin")]

#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delivery::dead_letter::DeadLetters;
use delivery::rabbitmq::{
    AckMode, ConfirmedPublisher, RabbitDeadLetters, RabbitSource, RabbitTopology,
};
use delivery::{Consumer, HandlerError, State, UnitId, consumer};

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
        // Acks held behind a unit not settled for as long as it takes: only the watermark moves.
        "held" => AckMode::Coalesced {
            flush_every: Duration::from_millis(5),
            hold_for: Duration::from_secs(3600),
        },
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

/// This test binary run again as a child process: only the ignored test `child`, with `env`.
fn spawn_child(child: &str, env: &[(&str, &std::ffi::OsStr)]) -> ChildConsumer {
    ChildConsumer(
        Command::new(std::env::current_exe().unwrap())
            .args([
                "--ignored",
                "--exact",
                child,
                "--nocapture",
                "--test-threads=1",
            ])
            .envs(env.iter().copied())
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("starting the child consumer"),
    )
}

fn start(queue: &str, applied: &Path, slow_for_ms: u64, acks: &str) -> ChildConsumer {
    let slow_for_ms = slow_for_ms.to_string();
    spawn_child(
        "slow_unit_child",
        &[
            ("SLOW_QUEUE", queue.as_ref()),
            ("SLOW_APPLIED", applied.as_ref()),
            ("SLOW_FOR_MS", slow_for_ms.as_ref()),
            ("SLOW_ACKS", acks.as_ref()),
        ],
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
    rabbitmq::publish_ids(&publisher, &queue, &ids).await;
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
    // Acks held behind it as long as it runs (`hold_for` an hour), so the multiple ack is all
    // that moves.
    let again = slow_unit_across_a_sigkill("coalesced", "held").await;
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

/// The default `hold_for` (100 ms): the units after the slow one wait behind it that long, then
/// are acknowledged one by one while it still runs, and only the slow unit comes back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_acks_held_behind_a_slow_unit_go_one_by_one_after_hold_for() {
    let again = slow_unit_across_a_sigkill("hold-for", "coalesced").await;
    assert_eq!(
        again,
        BTreeSet::from([SLOW.to_owned(), "slow-started".to_owned()]),
        "the units after the slow one were acknowledged on their own after hold_for"
    );
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

/// A unit that kills its consumer, in a crash loop, takes only itself to the dead letter: units
/// applied while it ran are acknowledged before the crash, not held behind its tag until
/// half the prefetch waits (they would come back with it on every crash, and reach the delivery
/// limit with it). Consumers (children, `poison_unit_child`) are started again until it is
/// dead-lettered.
const POISON: &str = "poison";
/// Fast units published after the poison one (higher tags, far below half the prefetch).
const GOOD_AFTER_POISON: usize = 10;

fn poison_topology(queue: &str) -> RabbitTopology {
    RabbitTopology::new(queue).delivery_limit(2)
}

fn good(i: usize) -> String {
    format!("g-{i:02}")
}

/// Records each unit applied; the poison unit runs 300 ms, then aborts the process.
#[consumer]
async fn apply_or_crash(id: UnitId, State(applied): State<PathBuf>) -> Result<(), HandlerError> {
    if id.as_str() == POISON {
        record(&applied, "poison-started")?;
        tokio::time::sleep(Duration::from_millis(300)).await;
        std::process::abort();
    }
    record(&applied, id.as_str())
}

/// The consumer the crash-loop test runs as a child process (`POISON_QUEUE`, `POISON_APPLIED`);
/// does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by the crash-loop test as a child process"]
async fn poison_unit_child() {
    let (Ok(queue), Ok(applied)) = (
        std::env::var("POISON_QUEUE"),
        std::env::var("POISON_APPLIED"),
    ) else {
        return;
    };
    let source = RabbitSource::connect(amqp_url(), poison_topology(&queue))
        .await
        .unwrap()
        .ack_mode(AckMode::coalesced());
    Consumer::new(source)
        .concurrency(8)
        .state(PathBuf::from(applied))
        .run(apply_or_crash)
        .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_poison_unit_in_a_crash_loop_dead_letters_only_itself() {
    let queue = format!("rmq-acks-poison-{}", std::process::id());
    let topology = poison_topology(&queue);
    let dead_letter_queue = topology.dead_letter_queue_name();
    let connection = rabbitmq::fresh(&amqp_url(), &topology).await;
    let publisher = ConfirmedPublisher::new(amqp_url());
    let ids: Vec<String> = [POISON.to_owned()]
        .into_iter()
        .chain((0..GOOD_AFTER_POISON).map(good))
        .collect();
    rabbitmq::publish_ids(&publisher, &queue, &ids).await;
    let dir = std::env::temp_dir().join(&queue);
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let file = dir.join("applied");

    let mut crashes = 0;
    loop {
        let mut child = spawn_child(
            "poison_unit_child",
            &[
                ("POISON_QUEUE", queue.as_ref()),
                ("POISON_APPLIED", file.as_ref()),
            ],
        );
        // Until the poison unit kills it, or is dead-lettered and every unit is settled.
        let deadline = Instant::now() + Duration::from_secs(60);
        let crashed = loop {
            if child.0.try_wait().unwrap().is_some() {
                break true;
            }
            let (dead, _) = rabbitmq::queue_counts(&connection, &dead_letter_queue).await;
            let (ready, _) = rabbitmq::queue_counts(&connection, &queue).await;
            if dead >= 1 && ready == 0 {
                break false;
            }
            assert!(
                Instant::now() < deadline,
                "child {}: neither crashed nor done within 60 s",
                crashes + 1
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        if !crashed {
            // Quiet: what it received is applied once its file stops growing; then a graceful stop.
            let mut seen = applied(&file).len();
            loop {
                tokio::time::sleep(Duration::from_secs(1)).await;
                let now = applied(&file).len();
                if now == seen {
                    break;
                }
                seen = now;
            }
            let status = Command::new("kill")
                .args(["-TERM", &child.0.id().to_string()])
                .status()
                .unwrap();
            assert!(status.success());
            child.0.wait().unwrap();
            break;
        }
        crashes += 1;
        assert!(crashes <= 6, "the poison unit was never dead-lettered");
    }

    let dead = RabbitDeadLetters::new(amqp_url(), &topology);
    let listed: BTreeSet<String> = dead
        .list(100, None)
        .await
        .unwrap()
        .records
        .iter()
        .map(|record| record.id().as_str().to_owned())
        .collect();
    let (ready, _) = rabbitmq::queue_counts(&connection, &queue).await;
    let everything_applied = applied(&file);
    rabbitmq::delete_queues(&connection, [queue.as_str(), &dead_letter_queue]).await;
    let _ = connection.close(200, "ok".into()).await;
    publisher.close().await;
    let _ = std::fs::remove_dir_all(&dir);

    assert_eq!(ready, 0, "every good unit acknowledged");
    for i in 0..GOOD_AFTER_POISON {
        assert!(everything_applied.contains(&good(i)), "{} applied", good(i));
    }
    assert_eq!(
        listed,
        BTreeSet::from([POISON.to_owned()]),
        "the dead letter holds exactly the poison unit (after {crashes} crashes)"
    );
}
