//! Faults against the real servers, with `examples/rabbitmq_consumer.rs` as a child process:
//! PostgreSQL stopped for a few seconds mid-run, and RabbitMQ stopped and started mid-run
//! (`rabbitmqctl stop_app` / `start_app`). Each server is started again even when the test fails.
//!
//! The database that goes down is a PostgreSQL cluster of the fault tests' own
//! (`delivery_faults`, port 5433, created with `pg_createcluster` on first use;
//! `support/faults.rs`), so stopping it disturbs nothing else on the machine.
//!
//! The two faults run one after the other (a lock), and cargo runs test binaries one at a time, so
//! no other test sees the broker go down.
#![cfg(feature = "lapin")]

#[path = "support/dead_letters.rs"]
mod dead_letters;
#[path = "support/faults.rs"]
mod faults;
#[path = "support/rabbitmq_orders.rs"]
mod orders;
#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::BTreeMap;
use std::fs::File;
use std::process::Command;
use std::time::Duration;

use delivery::dead_letter::DeadLetters;
use faults::{Restart, fault_database, service, start_postgres, stop_postgres};
use orders::Env;
use process::{Orders as _, order, terminate, wait_for};

fn stop_rabbitmq_app() {
    service("stopping RabbitMQ", "rabbitmqctl", &["stop_app"]);
}

fn start_rabbitmq_app() {
    service("starting RabbitMQ", "rabbitmqctl", &["start_app"]);
    service(
        "waiting for RabbitMQ",
        "rabbitmqctl",
        &["await_startup", "--timeout", "120"],
    );
}

/// `line` without its ANSI color sequences (`ESC [ ... m`).
fn without_colors(line: &str) -> String {
    let mut out = String::with_capacity(line.len());
    let mut chars = line.chars();
    while let Some(c) = chars.next() {
        if c == '\u{1b}' {
            for c in chars.by_ref() {
                if c == 'm' {
                    break;
                }
            }
        } else {
            out.push(c);
        }
    }
    out
}

/// How many units the child logged as returned for redelivery, and the highest delivery count
/// among them.
fn returned(log: &std::path::Path) -> (usize, u32) {
    let text = std::fs::read_to_string(log).unwrap_or_default();
    let mut n = 0;
    let mut highest = 0;
    for line in text
        .lines()
        .filter(|l| l.contains("returned for redelivery"))
    {
        let line = without_colors(line);
        n += 1;
        if let Some(count) = line
            .split("delivery_count=")
            .nth(1)
            .and_then(|rest| rest.split(|c: char| !c.is_ascii_digit()).next())
            .and_then(|digits| digits.parse::<u32>().ok())
        {
            highest = highest.max(count);
        }
    }
    (n, highest)
}

/// The faults run one at a time: a broker restart would also cut the other test's connections.
static ONE_FAULT_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_database_outage_is_waited_out() {
    let _one = ONE_FAULT_AT_A_TIME.lock().await;
    database_outage_is_waited_out().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_restart_loses_nothing() {
    let _one = ONE_FAULT_AT_A_TIME.lock().await;
    broker_restart_resumes_consumption().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_broker_that_blocks_publishing_cannot_hold_shutdown_up() {
    let _one = ONE_FAULT_AT_A_TIME.lock().await;
    blocked_publishing_at_shutdown().await;
}

/// What RabbitMQ does with a handler slower than its `consumer_timeout` (a broker setting, 30 min
/// by default; a queue cannot raise it on 3.10): it closes the channel, so the first run's
/// acknowledgement fails, and delivers the unit again, counted. The runtime cannot keep such a
/// delivery alive; what holds is rule 3 (the second run changes nothing) and rule 2 (the return is
/// counted, so a handler that is always too slow ends in the dead letter, never in a loop).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_handler_slower_than_the_consumer_timeout_is_run_again() {
    let _one = ONE_FAULT_AT_A_TIME.lock().await;
    slower_than_the_consumer_timeout().await;
}

async fn slower_than_the_consumer_timeout() {
    use std::sync::{Arc, Mutex};

    use delivery::rabbitmq::{RabbitSource, RabbitTopology};
    use delivery::{Consumer, DeliveryCount, HandlerError, State, consumer};

    #[consumer]
    async fn slow_first(
        State(runs): State<Arc<Mutex<Vec<u32>>>>,
        count: DeliveryCount,
    ) -> Result<(), HandlerError> {
        runs.lock().unwrap().push(count.get());
        if count.get() == 1 {
            tokio::time::sleep(Duration::from_secs(5)).await;
        }
        Ok(())
    }

    /// Sets a `rabbit` application setting for channels opened from now on; puts it back on drop.
    struct Setting(&'static str, String);
    impl Setting {
        fn set(name: &'static str, value: &str) -> Setting {
            let get = Command::new("rabbitmqctl")
                .args(["eval", &format!("application:get_env(rabbit, {name}).")])
                .output()
                .expect("rabbitmqctl");
            let before = String::from_utf8_lossy(&get.stdout).trim().to_owned();
            let before = before
                .strip_prefix("{ok,")
                .and_then(|v| v.strip_suffix('}'))
                .unwrap_or_else(|| panic!("{name} is {before}"))
                .to_owned();
            service(
                &format!("setting {name}"),
                "rabbitmqctl",
                &[
                    "eval",
                    &format!("application:set_env(rabbit, {name}, {value})."),
                ],
            );
            Setting(name, before)
        }
    }
    impl Drop for Setting {
        fn drop(&mut self) {
            service(
                &format!("restoring {}", self.0),
                "rabbitmqctl",
                &[
                    "eval",
                    &format!("application:set_env(rabbit, {}, {}).", self.0, self.1),
                ],
            );
        }
    }
    let _timeout = Setting::set("consumer_timeout", "1500");
    let _tick = Setting::set("channel_tick_interval", "500");

    let url = process::amqp_url();
    let topology = RabbitTopology::new(format!("faults-timeout-{}", std::process::id()));
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = delivery::rabbitmq::ConfirmedPublisher::new(url.as_str());
    let unit = delivery::Unit::new("slow-1", "{}");
    publisher
        .publish(
            &topology.queue,
            b"{}",
            delivery::rabbitmq::properties_of(&unit),
        )
        .await
        .unwrap();
    let runs = Arc::new(Mutex::new(Vec::new()));
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let source = RabbitSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let run = tokio::spawn(
        Consumer::new(source)
            .state(runs.clone())
            .concurrency(1)
            .shutdown_on(async move {
                let _ = stopped.await;
            })
            .run(slow_first),
    );
    wait_for(
        "the unit run a second time and acknowledged",
        Duration::from_secs(60),
        async || {
            runs.lock().unwrap().len() >= 2
                && rabbitmq::queue_counts(&connection, &topology.queue).await == (0, 1)
        },
    )
    .await;
    let _ = stop.send(());
    let report = run.await.unwrap();
    assert_eq!(
        *runs.lock().unwrap(),
        [1, 2],
        "run again past the timeout, its return counted"
    );
    assert_eq!(report.acked, 1, "{report:?}");
    assert_eq!(report.dead_lettered, 0, "{report:?}");
    assert!(
        report.settle_failed >= 1,
        "the first run's ack failed on the closed channel: {report:?}"
    );
    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
}

/// The broker's memory alarm raised (publishing blocked; a dead-letter copy never confirmed)
/// while a unit is being dead-lettered, then the shutdown signal: `run` returns within the drain
/// deadline and the settle grace, not after the publisher's 30 s confirm timeout, and the unit,
/// never acknowledged, is still in its queue once the alarm is cleared.
async fn blocked_publishing_at_shutdown() {
    use delivery::rabbitmq::{RabbitSource, RabbitTopology};
    use delivery::{Consumer, HandlerError, State, consumer};
    use std::sync::Arc;
    use tokio::sync::Notify;

    #[consumer]
    async fn refuse(State(seen): State<Arc<Notify>>) -> Result<(), HandlerError> {
        seen.notify_one();
        Err(HandlerError::reject("refused"))
    }

    let url = process::amqp_url();
    let topology = RabbitTopology::new(format!("faults-blocked-{}", std::process::id()));
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = delivery::rabbitmq::ConfirmedPublisher::new(url.as_str());
    publisher
        .publish(
            &topology.queue,
            b"{}",
            delivery::lapin::BasicProperties::default().with_message_id("blocked-1".into()),
        )
        .await
        .unwrap();
    let before = Command::new("rabbitmqctl")
        .args(["eval", "vm_memory_monitor:get_vm_memory_high_watermark()."])
        .output()
        .expect("rabbitmqctl");
    let before = String::from_utf8_lossy(&before.stdout).trim().to_owned();
    let before: &'static str = Box::leak(before.into_boxed_str());
    service(
        "raising the memory alarm",
        "rabbitmqctl",
        &["set_vm_memory_high_watermark", "0"],
    );
    struct Clear(&'static str);
    impl Drop for Clear {
        fn drop(&mut self) {
            service(
                "clearing the memory alarm",
                "rabbitmqctl",
                &["set_vm_memory_high_watermark", self.0],
            );
        }
    }
    let clear = Clear(before);

    let seen = Arc::new(Notify::new());
    let stop = Arc::new(Notify::new());
    let source = RabbitSource::connect(url.as_str(), topology.clone())
        .await
        .unwrap();
    let run = tokio::spawn(
        Consumer::new(source)
            .state(seen.clone())
            .drain_deadline(Duration::from_secs(1))
            .shutdown_on({
                let stop = stop.clone();
                async move { stop.notified().await }
            })
            .run(refuse),
    );
    seen.notified().await;
    stop.notify_one();
    // The drain deadline (1 s) and the settle grace (5 s), with room to spare; the blocked
    // confirm alone would take 30 s.
    let report = tokio::time::timeout(Duration::from_secs(15), run)
        .await
        .expect("shutdown bounded by the drain deadline, settles included")
        .unwrap();
    assert_eq!(report.acked + report.dead_lettered, 0, "{report:?}");
    drop(clear);
    wait_for(
        "the unit back in its queue",
        Duration::from_secs(30),
        async || rabbitmq::queue_counts(&connection, &topology.queue).await.0 == 1,
    )
    .await;
    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
}

/// PostgreSQL is stopped for 10 s while units keep arriving. With the default backoff (and the
/// example's delivery limit of 5), units that failed during the outage are applied afterwards,
/// not dead-lettered as exhausted.
async fn database_outage_is_waited_out() {
    const UNITS: usize = 400;
    let env = Env::with_database("db-outage", 5, fault_database()).await;
    let log = std::env::temp_dir().join(format!("delivery-db-outage-{}.log", std::process::id()));
    let mut child = env.start_with(8, File::create(&log).unwrap());
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    let mut publish = async |range: std::ops::Range<usize>| {
        for i in range {
            let customer = format!("c-{}", i % 13);
            let amount = (i % 50 + 1) as i64;
            *expected.entry(customer.clone()).or_default() += amount;
            env.publish(
                &format!("m-{i}"),
                &order(&format!("o-{i}"), &customer, amount),
            )
            .await;
        }
    };
    publish(0..100).await;
    wait_for(
        "the first orders applied",
        Duration::from_secs(60),
        async || env.scalar("SELECT count(*) FROM $schema.orders").await >= 50,
    )
    .await;

    stop_postgres();
    let restart = Restart(Some(start_postgres));
    publish(100..UNITS).await; // units keep arriving while the database is down
    tokio::time::sleep(Duration::from_secs(10)).await;
    start_postgres();
    restart.disarm();

    // The test's own pool reconnects on its own; the count waits for it.
    wait_for(
        "every order applied after the outage",
        Duration::from_secs(120),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == UNITS as i64
                && env.queue_depth().await == 0
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");

    let (returns, highest) = returned(&log);
    assert!(
        returns > 0,
        "units failed during the outage (the child logged no return)"
    );
    assert_eq!(
        env.balances().await,
        expected,
        "every order counted exactly once"
    );
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        0,
        "no unit exhausted its bound during a 10 s outage"
    );
    eprintln!(
        "database outage: {UNITS} units, 10 s outage, {returns} returns (highest delivery count {highest}), 0 dead-lettered"
    );
    let _ = std::fs::remove_file(&log);
    env.cleanup().await;
}

/// RabbitMQ's application is stopped for 5 s mid-run and started again: the consumer reconnects
/// on its own and drains the queue; every order is applied exactly once.
async fn broker_restart_resumes_consumption() {
    const UNITS: usize = 1000;
    let env = Env::new("broker-restart", 5).await;
    let mut expected: BTreeMap<String, i64> = BTreeMap::new();
    for i in 0..UNITS {
        let customer = format!("c-{}", i % 17);
        let amount = (i % 40 + 1) as i64;
        *expected.entry(customer.clone()).or_default() += amount;
        env.publish(
            &format!("m-{i}"),
            &order(&format!("o-{i}"), &customer, amount),
        )
        .await;
    }
    let mut child = env.start(8);
    wait_for(
        "consumption under way",
        Duration::from_secs(60),
        async || env.scalar("SELECT count(*) FROM $schema.orders").await >= 100,
    )
    .await;
    let applied_at_stop = env.scalar("SELECT count(*) FROM $schema.orders").await;

    stop_rabbitmq_app();
    let restart = Restart(Some(start_rabbitmq_app));
    tokio::time::sleep(Duration::from_secs(5)).await;
    start_rabbitmq_app();
    restart.disarm();

    wait_for(
        "every order applied after the restart",
        Duration::from_secs(180),
        async || {
            env.scalar("SELECT count(*) FROM $schema.orders").await == UNITS as i64
                && env.queue_counts().await == (0, 1)
        },
    )
    .await;
    assert!(
        child.try_wait().unwrap().is_none(),
        "the consumer kept running through the restart"
    );
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
    assert_eq!(
        env.balances().await,
        expected,
        "every order counted exactly once"
    );
    assert_eq!(env.dead_letters().count().await.unwrap(), 0);
    eprintln!(
        "broker restart: {UNITS} units, {applied_at_stop} applied when the broker stopped, all {UNITS} applied once after"
    );
    env.cleanup().await;
}
