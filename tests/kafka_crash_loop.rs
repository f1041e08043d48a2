//! A unit whose handling kills its consumer on every delivery, against a real Kafka-protocol broker
//! (tansu on 127.0.0.1:9092, or `KAFKA_BROKERS`): the consumer — this test binary run again as a
//! child process, in the ignored test `crash_loop_child` — SIGKILLs itself when it handles the
//! poison unit and is restarted in a loop. The count the transport records in the group's attempts
//! topic before any handler runs carries over the crashes, so the unit reaches the dead letter
//! (exhausted, intact) within the bound's restarts, and the units after it on its partition are
//! applied. Fails, never skips, when the broker is unreachable.
#![cfg(feature = "kafka")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/kafka.rs"]
mod kafka_support;

use std::collections::BTreeSet;
use std::io::Write as _;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use delivery::kafka::client::message::{Header, OwnedHeaders};
use delivery::kafka::{KafkaDeadLetters, KafkaSource, KafkaTopology};
use delivery::{
    Consumer, HandlerError, State, UnitId, consumer, dead_letter::DeadLetters,
    disposition::ReasonKind,
};
use kafka_support::{brokers, declare, producer, record, send, unique_name};

/// tansu 0.6 drops a dead member only once a member joins after the dead one's session expired,
/// so each restart after a kill waits it out first.
const SESSION_TIMEOUT_MS: u64 = 2000;
const MAX_DELIVERIES: u32 = 3;

fn topology(topic: &str) -> KafkaTopology {
    KafkaTopology::new(topic, format!("{topic}-group"))
        .partitions(1)
        .max_deliveries(MAX_DELIVERIES)
        .session_timeout(Duration::from_millis(SESSION_TIMEOUT_MS))
        .commit_interval(Duration::from_millis(100))
}

#[derive(Clone)]
struct Poison {
    poison: String,
    applied: PathBuf,
}

/// Kills this process (SIGKILL) on the poison unit; appends any other unit's id to the applied
/// file, flushed to disk before it returns.
#[consumer]
async fn crash_or_apply(id: UnitId, State(child): State<Poison>) -> Result<(), HandlerError> {
    if id.as_str() == child.poison {
        let _ = Command::new("kill")
            .args(["-KILL", &std::process::id().to_string()])
            .status();
        std::future::pending::<()>().await;
    }
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(&child.applied)
        .map_err(HandlerError::retry)?;
    writeln!(file, "{}", id.as_str()).map_err(HandlerError::retry)?;
    file.sync_all().map_err(HandlerError::retry)?;
    Ok(())
}

/// The consumer the parent test runs as a child process (`CRASH_LOOP_TOPIC`, `CRASH_LOOP_POISON`,
/// `CRASH_LOOP_APPLIED`); does nothing when run on its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "run by crash_loop_reaches_the_dead_letter as a child process"]
async fn crash_loop_child() {
    let (Ok(topic), Ok(poison), Ok(applied)) = (
        std::env::var("CRASH_LOOP_TOPIC"),
        std::env::var("CRASH_LOOP_POISON"),
        std::env::var("CRASH_LOOP_APPLIED"),
    ) else {
        return;
    };
    let _ = tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .try_init();
    let source = KafkaSource::connect(&brokers(), topology(&topic))
        .await
        .unwrap();
    Consumer::new(source)
        .concurrency(8)
        .state(Poison {
            poison,
            applied: applied.into(),
        })
        .run(crash_or_apply)
        .await;
}

fn start(topic: &str, poison: &str, applied: &Path) -> Child {
    Command::new(std::env::current_exe().unwrap())
        .args([
            "--ignored",
            "--exact",
            "crash_loop_child",
            "--nocapture",
            "--test-threads=1",
        ])
        .env("CRASH_LOOP_TOPIC", topic)
        .env("CRASH_LOOP_POISON", poison)
        .env("CRASH_LOOP_APPLIED", applied)
        .stdout(log_file(applied))
        .stderr(Stdio::null())
        .spawn()
        .expect("starting the child consumer")
}

/// Where the next child's log goes (beside the applied file), for a failed run.
fn log_file(applied: &Path) -> std::fs::File {
    use std::sync::atomic::{AtomicU32, Ordering};
    static CHILD: AtomicU32 = AtomicU32::new(0);
    let n = CHILD.fetch_add(1, Ordering::Relaxed);
    std::fs::File::create(applied.with_extension(format!("{n}.log"))).expect("a log file")
}

fn applied(path: &Path) -> BTreeSet<String> {
    std::fs::read_to_string(path)
        .unwrap_or_default()
        .lines()
        .map(str::to_owned)
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn crash_loop_reaches_the_dead_letter() {
    let topic = unique_name("kafka-crash-loop");
    let topology = topology(&topic);
    declare(&topology).await;
    let producer = producer();
    // Units before and after the poison unit, all on the one partition.
    let ids: Vec<String> = (0..10).map(|n| format!("u-{n}")).collect();
    let poison = "u-3".to_owned();
    for id in &ids {
        let headers = OwnedHeaders::new().insert(Header {
            key: "tenant",
            value: Some("acme"),
        });
        send(&producer, record(&topic, id, id.as_str(), headers)).await;
    }
    let applied_file = std::env::temp_dir().join(format!("{topic}.applied"));
    let dead = KafkaDeadLetters::new(&brokers(), &topology);
    let others: BTreeSet<String> = ids.iter().filter(|id| **id != poison).cloned().collect();

    // The first run's crash may land before the poison unit was the partition's first unit not
    // final: that delivery is counted from the next run, which hands it out alone. So the unit is
    // dead-lettered by the (bound + 2)-th run at the latest.
    let most_runs = MAX_DELIVERIES as usize + 2;
    let mut runs = 0;
    let mut crashes = 0;
    loop {
        assert!(
            runs < most_runs,
            "not dead-lettered within {most_runs} runs ({crashes} crashes); applied: {:?}",
            applied(&applied_file)
        );
        runs += 1;
        let mut child = start(&topic, &poison, &applied_file);
        // Until the child dies (it crashed on the poison unit) or everything is settled.
        let deadline = Instant::now() + Duration::from_secs(60);
        let crashed = loop {
            if let Some(status) = child.try_wait().unwrap() {
                break Some(status);
            }
            if dead.count().await.unwrap() >= 1 && applied(&applied_file).is_superset(&others) {
                break None;
            }
            assert!(
                Instant::now() < deadline,
                "run {runs}: neither crashed nor done within 60 s"
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        };
        match crashed {
            Some(status) => {
                assert_eq!(
                    std::os::unix::process::ExitStatusExt::signal(&status),
                    Some(9),
                    "run {runs}: the child ends only by its own SIGKILL: {status:?}"
                );
                crashes += 1;
                // The dead member's session must expire before the next one can join.
                tokio::time::sleep(Duration::from_millis(SESSION_TIMEOUT_MS + 500)).await;
            }
            None => {
                child.kill().unwrap();
                child.wait().unwrap();
                break;
            }
        }
    }
    eprintln!("dead-lettered after {runs} runs, {crashes} crashes");
    assert!(crashes >= 1, "the poison unit crashed the consumer");

    let letters = dead_letters::all(&dead).await;
    let poisoned: Vec<_> = letters
        .iter()
        .filter(|d| d.id().as_str() == poison)
        .collect();
    assert!(!poisoned.is_empty(), "the poison unit is dead-lettered");
    for letter in &poisoned {
        assert_eq!(letter.reason, Some(ReasonKind::Exhausted));
        assert_eq!(
            letter.unit.payload().as_ref(),
            poison.as_bytes(),
            "intact payload"
        );
        assert_eq!(
            letter.unit.headers().get("tenant").map(|v| v.as_ref()),
            Some(b"acme".as_ref()),
            "intact headers"
        );
        assert!(letter.unit.delivery_count().get() > MAX_DELIVERIES);
    }
    assert!(
        letters.iter().all(|d| d.id().as_str() == poison),
        "only the poison unit is dead-lettered: {:?}",
        letters
            .iter()
            .map(|d| d.id().to_string())
            .collect::<Vec<_>>()
    );
    assert_eq!(
        applied(&applied_file),
        others,
        "every other unit applied, those after the poison unit too"
    );
    let _ = std::fs::remove_file(&applied_file);
}
