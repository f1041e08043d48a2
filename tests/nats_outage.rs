//! A NATS server restart as `examples/nats_consumer.rs` sees it, against the real JetStream and
//! PostgreSQL: the server stopped mid-run and started again a few seconds later. In a binary of
//! its own, since it takes the server away from every other client too. Needs root (it stops and
//! starts the local server with `start-stop-daemon`, as ../shared/SERVICES.md starts it).
#![cfg(feature = "nats")]

#[path = "support/nats_orders.rs"]
mod nats_orders;
#[path = "support/process.rs"]
mod process;

use std::net::TcpStream;
use std::process::Command;
use std::time::{Duration, Instant};

use delivery::dead_letter::DeadLetters;
use nats_orders::Env;
use process::{Orders as _, orders, terminate, wait_for};

const NATS_SERVER: &str = "/usr/sbin/nats-server";
const NATS_ADDR: &str = "127.0.0.1:4222";

fn answers() -> bool {
    TcpStream::connect_timeout(&NATS_ADDR.parse().unwrap(), Duration::from_millis(200)).is_ok()
}

fn start_stop_daemon(args: &[&str]) {
    let status = Command::new("start-stop-daemon")
        .args(args)
        .status()
        .expect("running start-stop-daemon (as root)");
    assert!(status.success(), "start-stop-daemon {args:?}: {status:?}");
}

/// The local NATS server stopped for as long as this lives: started again when it is ended or
/// dropped, a failing test included, and waited for until it answers.
struct Outage {
    ended: bool,
}

impl Outage {
    fn begin() -> Outage {
        start_stop_daemon(&["--stop", "--oknodo", "--retry", "10", "--exec", NATS_SERVER]);
        let outage = Outage { ended: false };
        assert!(
            !answers(),
            "the NATS server still answers after being stopped"
        );
        outage
    }

    fn end(mut self) {
        self.ended = true;
        restart();
    }
}

impl Drop for Outage {
    fn drop(&mut self) {
        if !self.ended {
            restart();
        }
    }
}

/// Starts the server as ../shared/SERVICES.md does and waits (at most 30 s) until it answers.
fn restart() {
    start_stop_daemon(&[
        "--start",
        "--oknodo",
        "--background",
        "--exec",
        NATS_SERVER,
        "--",
        "-a",
        "127.0.0.1",
        "-p",
        "4222",
        "-js",
        "-sd",
        "/var/lib/nats-server",
        "-l",
        "/var/log/nats-server.log",
    ]);
    let deadline = Instant::now() + Duration::from_secs(30);
    while !answers() {
        assert!(
            Instant::now() < deadline,
            "the NATS server does not answer on {NATS_ADDR} 30 s after being started"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The server stopped once a tenth of the orders are applied and started again after a few
/// seconds: the running consumer reconnects by itself, keeps applying, and ends with every valid
/// order applied once and nothing valid in the dead letter.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_server_restart_mid_run_dead_letters_no_valid_unit() {
    const UNITS: usize = 3000;
    let env = Env::new("outage", 5).await;
    let (messages, expected) = orders(UNITS, 23, 50);
    for (id, body) in &messages {
        env.publish(id, body).await;
    }
    let applied = async || env.scalar("SELECT count(*) FROM $schema.orders").await;
    let mut child = env.start(8, 5);
    wait_for(
        "a tenth of the orders applied",
        Duration::from_secs(60),
        async || applied().await >= (UNITS / 10) as i64,
    )
    .await;

    let outage = Outage::begin();
    let applied_at_stop = applied().await;
    // Down for a few seconds: longer than the consumer's `ack_wait` (2 s), so units delivered
    // before the stop are due again when it comes back.
    tokio::time::sleep(Duration::from_secs(4)).await;
    let applied_while_down = applied().await;
    outage.end();
    let answered = Instant::now();
    let applied_at_start = applied().await;

    let mut running = || {
        let exited = child.try_wait().unwrap();
        assert!(exited.is_none(), "the consumer exited: {exited:?}");
    };
    wait_for(
        "the consumer applies orders again after the restart, by itself",
        Duration::from_secs(60),
        async || {
            running();
            applied().await > applied_at_start
        },
    )
    .await;
    let resumed_after = answered.elapsed();
    wait_for(
        "every order applied after the restart, nothing left unsettled or unswept",
        Duration::from_secs(180),
        async || {
            running();
            applied().await == UNITS as i64
                && env.consumer_backlog().await == (0, 0)
                && env.advisories_waiting().await == 0
        },
    )
    .await;
    let status = terminate(&mut child);
    assert!(status.success(), "{status:?}");
    assert_eq!(
        env.dead_letters().count().await.unwrap(),
        0,
        "a server restart is not a poison unit: nothing valid dead-lettered"
    );
    assert_eq!(env.balances().await, expected, "each order counted once");
    eprintln!(
        "server restart: stopped with {applied_at_stop} of {UNITS} applied, \
         {applied_while_down} applied while down, {applied_at_start} when it answered again, \
         applying again {resumed_after:?} after it answered"
    );
    env.cleanup().await;
}
