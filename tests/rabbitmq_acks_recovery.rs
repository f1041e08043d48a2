//! Coalesced acknowledgements across lapin's own recovery of the user's connection
//! (`ConnectionProperties::enable_auto_recover`), against the real RabbitMQ: after the broker
//! closes the connection, lapin reopens the same channel and consumes again there, its delivery
//! tags starting over at 1. A handler of the lost incarnation finishing afterwards must not
//! acknowledge anything there — a multiple ack by number would settle units of the new
//! incarnation that nobody handled. Every unit must be applied at least once, and the queue end
//! empty once the consumer stopped (which hands back anything not acknowledged). Fails, never
//! skips, when the broker is unreachable.
//!
//! The slow units are not the first ones: the first `FAST` are applied and acknowledged before,
//! so the slow units' tags (9..=16) are above the first tags of the units delivered again after
//! the recovery, which start with the slow units themselves (tags 1..=8 there). Were the slow
//! units the first ones, an old ack by number would pass only units the old handlers applied,
//! and nothing would show.
//!
//! The broker closes only this test's own connection (`rabbitmqctl close_connection` on its pid,
//! found by its unique connection name): other tests share the broker.
#![cfg(feature = "lapin")]

#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::BTreeSet;
use std::process::Command;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use delivery::lapin::{Connection, ConnectionProperties};
use delivery::rabbitmq::{ConfirmedPublisher, RabbitSource, RabbitTopology};
use delivery::{Consumer, DeliveryCount, HandlerError, State, UnitId, consumer};

const UNITS: usize = 40;
/// The first units, applied at once.
const FAST: usize = 8;
/// The units after them whose first delivery runs long: all of the concurrency.
const SLOW: usize = 8;

fn amqp_url() -> String {
    std::env::var("AMQP_URL").unwrap_or_else(|_| "amqp://guest:guest@127.0.0.1:5672/%2f".into())
}

#[derive(Clone, Default)]
struct Seen {
    /// Ids whose handler returned `Ok`.
    applied: Arc<Mutex<BTreeSet<String>>>,
    /// Slow handlers running.
    slow_started: Arc<Mutex<usize>>,
}

fn id(i: usize) -> String {
    format!("r-{i:02}")
}

/// How long the slow units' first delivery runs: long enough for `rabbitmqctl` (about a second
/// a call) to close the connection, and for lapin to recover it (it waits 1 s first), meanwhile.
const SLOW_FOR: Duration = Duration::from_secs(6);

/// The `SLOW` ids after the first `FAST` take `SLOW_FOR` on their first delivery; every unit is
/// recorded once applied.
#[consumer]
async fn apply(
    id: UnitId,
    count: DeliveryCount,
    State(seen): State<Seen>,
) -> Result<(), HandlerError> {
    let index: usize = id.as_str()[2..].parse().map_err(HandlerError::reject)?;
    if (FAST..FAST + SLOW).contains(&index) && count.get() == 1 {
        *seen.slow_started.lock().unwrap() += 1;
        tokio::time::sleep(SLOW_FOR).await;
    }
    seen.applied.lock().unwrap().insert(id.as_str().to_owned());
    Ok(())
}

/// What `rabbitmqctl args` prints (about a second a call: off the runtime's threads).
async fn rabbitmqctl(args: &[&str]) -> String {
    let args: Vec<String> = args.iter().map(|arg| (*arg).to_owned()).collect();
    tokio::task::spawn_blocking(move || {
        let out = Command::new("rabbitmqctl")
            .args(&args)
            .output()
            .expect("running rabbitmqctl");
        assert!(out.status.success(), "rabbitmqctl {args:?}: {out:?}");
        String::from_utf8_lossy(&out.stdout).into_owned()
    })
    .await
    .unwrap()
}

/// The pid of the broker's connection named `name`.
async fn connection_pid(name: &str) -> Option<String> {
    rabbitmqctl(&["list_connections", "--silent", "pid", "client_properties"])
        .await
        .lines()
        .find(|line| line.contains(name))
        .and_then(|line| line.split('\t').next())
        .map(str::to_owned)
}

async fn wait_for(what: &str, patience: Duration, mut check: impl FnMut() -> bool) {
    let deadline = Instant::now() + patience;
    while !check() {
        assert!(
            Instant::now() < deadline,
            "{what}: not reached within {patience:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn coalesced_acks_of_a_lost_incarnation_acknowledge_nothing_after_recovery() {
    let url = amqp_url();
    let queue = format!("rmq-acks-recovery-{}", std::process::id());
    let topology = RabbitTopology::new(&queue).prefetch(32).delivery_limit(10);
    let admin = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.clone());
    rabbitmq::publish_ids(&publisher, &queue, (0..UNITS).map(id)).await;

    // The user's own connection, recovered by lapin, with a name only this test uses.
    let name = format!("acks-recovery-{}", std::process::id());
    let properties = ConnectionProperties::default()
        .with_connection_name(name.as_str().into())
        .enable_auto_recover();
    let connection = Arc::new(
        Connection::connect(&url, properties)
            .await
            .unwrap_or_else(|e| panic!("RabbitMQ unreachable at {url}: {e}")),
    );
    let pid = connection_pid(&name)
        .await
        .unwrap_or_else(|| panic!("no connection named {name}"));
    let source = RabbitSource::connect(connection.clone(), topology.clone())
        .await
        .unwrap();
    let seen = Seen::default();
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(source)
            .concurrency(8)
            .state(seen.clone())
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(apply),
    );

    wait_for("the slow handlers running", Duration::from_secs(30), || {
        *seen.slow_started.lock().unwrap() == SLOW
    })
    .await;
    // The fast units' multiple ack is sent 5 ms after they finished: well before this.
    tokio::time::sleep(Duration::from_millis(300)).await;
    // The broker closes this connection, and only it.
    rabbitmqctl(&["close_connection", &pid, "closed by the test"]).await;

    // Every unit applied (a lost one never is: the deadline ends the wait), then a graceful
    // stop, which hands back whatever was not acknowledged: the queue must be empty.
    let deadline = Instant::now() + Duration::from_secs(30);
    while seen.applied.lock().unwrap().len() < UNITS && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let _ = stop.send(());
    tokio::time::timeout(Duration::from_secs(20), consumer)
        .await
        .expect("the consumer stops")
        .unwrap();
    let applied = seen.applied.lock().unwrap().clone();
    let never: Vec<String> = (0..UNITS)
        .map(id)
        .filter(|i| !applied.contains(i))
        .collect();
    let (ready, _) = rabbitmq::queue_counts(&admin, &queue).await;
    assert!(
        never.is_empty(),
        "acknowledged but never applied (lost): {never:?}"
    );
    assert_eq!(ready, 0, "every unit acknowledged once applied");

    rabbitmq::delete_queues(&admin, [queue.as_str(), &topology.dead_letter_queue_name()]).await;
    let _ = connection.close(200, "test over".into()).await;
    let _ = admin.close(200, "test over".into()).await;
    publisher.close().await;
}
