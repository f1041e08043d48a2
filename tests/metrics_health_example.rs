//! `examples/metrics_health.rs` as a real process over loopback: orders in through its HTTP
//! route, then `/metrics` (Prometheus' text format) and `/health` (JSON) scraped as an operator's
//! tools would.
//!
//! The example's own `main` runs in a child process: this test binary includes the example's
//! source and starts itself again with `--exact run_the_example_when_started_as_its_process` and
//! the marker variable below, so the process under test is always built from the current source.
#![cfg(all(feature = "axum", feature = "sqlite"))]

#[path = "../examples/metrics_health.rs"]
mod example;

use std::io::{BufRead, BufReader};
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant};

/// Set in the child's environment: run the example instead of testing it.
const CHILD: &str = "DELIVERY_METRICS_HEALTH_EXAMPLE_CHILD";

/// Not a test of its own: the example's process, when this binary is started as one.
#[test]
fn run_the_example_when_started_as_its_process() {
    if std::env::var_os(CHILD).is_none() {
        return;
    }
    let code = example::main();
    std::process::exit(if code == ExitCode::SUCCESS { 0 } else { 1 });
}

/// The example running as a child process; killed when dropped.
struct Example {
    child: Child,
    base: String,
}

impl Example {
    /// Starts it on a free loopback port and waits for the address it prints.
    fn start() -> Example {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "--exact",
                "run_the_example_when_started_as_its_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("LISTEN_ADDR", "127.0.0.1:0")
            .env("RUST_LOG", "warn")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .spawn()
            .unwrap();
        let stdout = child.stdout.take().unwrap();
        let (tx, rx) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines().map_while(Result::ok) {
                // After libtest's `test ... ` on the same line.
                if let Some((_, base)) = line.split_once("listening on ") {
                    let _ = tx.send(base.trim().to_owned());
                }
            }
        });
        let base = rx
            .recv_timeout(Duration::from_secs(60))
            .expect("the example printed its address within 60 s");
        Example { child, base }
    }

    async fn post_order(&self, client: &reqwest::Client, id: &str, body: &str) {
        let answer = client
            .post(format!("{}/orders", self.base))
            .header("x-message-id", id)
            .body(body.to_owned())
            .send()
            .await
            .unwrap();
        assert_eq!(answer.status(), 202);
    }

    async fn get(&self, client: &reqwest::Client, path: &str) -> (u16, String) {
        let answer = client
            .get(format!("{}{path}", self.base))
            .send()
            .await
            .unwrap();
        (answer.status().as_u16(), answer.text().await.unwrap())
    }

    /// Sends SIGTERM and waits for it to exit.
    fn terminate(mut self) -> bool {
        let status = Command::new("kill")
            .args(["-TERM", &self.child.id().to_string()])
            .status()
            .unwrap();
        assert!(status.success());
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return status.success();
            }
            assert!(
                Instant::now() < deadline,
                "still running 20 s after SIGTERM"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The value of the sample `series` (name and labels exactly as rendered) in a scrape.
fn sample(scrape: &str, series: &str) -> Option<f64> {
    scrape.lines().find_map(|line| {
        line.strip_prefix(series)
            .and_then(|rest| rest.strip_prefix(' '))
            .map(|value| value.trim().parse().unwrap())
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn metrics_and_health_report_what_the_service_did() {
    let example = Example::start();
    let client = reqwest::Client::new();

    // Three orders (one of 0 cents, refused downstream by the relay) and one poison unit.
    let o = |id: &str, cents: u64| format!(r#"{{"order_id":"{id}","amount_cents":{cents}}}"#);
    example.post_order(&client, "m-1", &o("o-1", 990)).await;
    example.post_order(&client, "m-2", &o("o-2", 1250)).await;
    example.post_order(&client, "m-3", &o("o-3", 0)).await;
    example
        .post_order(&client, "m-4", "this is not an order")
        .await;

    // Until everything settled: both dead letters hold their one unit, nothing is pending.
    let deadline = Instant::now() + Duration::from_secs(30);
    let health = loop {
        let (status, body) = example.get(&client, "/health").await;
        let health: serde_json::Value = serde_json::from_str(&body).unwrap();
        let [consumer, relay] = [&health["components"][0], &health["components"][1]];
        if status == 200
            && consumer["dead_letter_depth"] == 1
            && consumer["in_flight"] == 0
            && relay["dead_letter_depth"] == 1
            && relay["pending"] == 0
            && relay["in_flight"] == 0
        {
            break health;
        }
        assert!(
            Instant::now() < deadline,
            "not settled within 30 s: {status} {body}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    };

    let consumer = &health["components"][0];
    assert_eq!(health["healthy"], true);
    assert_eq!(consumer["component"], "consumer");
    assert_eq!(consumer["name"], "orders");
    assert_eq!(consumer["status"], "up");
    assert_eq!(consumer["connected"], true);
    assert_eq!(consumer["dead_lettered"], 1, "the poison unit: {consumer}");
    let age = consumer["last_receive_age_seconds"].as_f64().unwrap();
    assert!((0.0..30.0).contains(&age), "{consumer}");
    let relay = &health["components"][1];
    assert_eq!(relay["component"], "relay");
    assert_eq!(relay["name"], "delivery_outbox");
    assert_eq!(relay["connected"], true);
    assert_eq!(relay["dead_lettered"], 1, "the order of 0 cents: {relay}");
    assert!(relay["oldest_pending_age_seconds"].is_null(), "{relay}");

    let (status, scrape) = example.get(&client, "/metrics").await;
    assert_eq!(status, 200);
    let source = r#"{source="orders"}"#;
    // Described once, with the unit, as a real histogram.
    assert!(
        scrape.contains("# TYPE delivery_handler_duration_seconds histogram"),
        "{scrape}"
    );
    assert!(
        scrape.contains("# HELP delivery_handler_duration_seconds "),
        "{scrape}"
    );
    let handled = sample(
        &scrape,
        &format!("delivery_handler_duration_seconds_count{source}"),
    );
    assert_eq!(
        handled,
        Some(4.0),
        "every unit's handler ran once:\n{scrape}"
    );
    let seconds = sample(
        &scrape,
        &format!("delivery_handler_duration_seconds_sum{source}"),
    )
    .unwrap();
    assert!(
        (0.0..5.0).contains(&seconds),
        "{seconds} s for four quick handlers"
    );
    let in_bucket = sample(
        &scrape,
        r#"delivery_handler_duration_seconds_bucket{source="orders",le="+Inf"}"#,
    );
    assert_eq!(in_bucket, Some(4.0), "{scrape}");
    assert_eq!(
        sample(&scrape, &format!("delivery_in_flight{source}")),
        Some(0.0),
        "{scrape}"
    );
    assert_eq!(
        sample(&scrape, &format!("delivery_acked_total{source}")),
        Some(3.0)
    );
    assert_eq!(
        sample(
            &scrape,
            r#"delivery_dead_lettered_total{source="orders",reason="malformed"}"#
        ),
        Some(1.0)
    );
    let outbox = r#"{outbox="delivery_outbox"}"#;
    assert_eq!(
        sample(&scrape, &format!("delivery_relayed_total{outbox}")),
        Some(2.0)
    );
    assert_eq!(
        sample(
            &scrape,
            r#"delivery_relay_dead_total{outbox="delivery_outbox",reason="rejected"}"#
        ),
        Some(1.0)
    );
    assert_eq!(
        sample(&scrape, &format!("delivery_relay_pending{outbox}")),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &scrape,
            &format!("delivery_relay_oldest_pending_age_seconds{outbox}")
        ),
        Some(0.0)
    );
    assert_eq!(
        sample(&scrape, &format!("delivery_relay_in_flight{outbox}")),
        Some(0.0)
    );
    assert_eq!(
        sample(
            &scrape,
            r#"delivery_dead_letter_depth{dead_letter="delivery_outbox"}"#
        ),
        Some(1.0)
    );
    assert!(
        scrape.contains("# TYPE delivery_relay_pending gauge"),
        "{scrape}"
    );

    assert!(example.terminate(), "the example stops cleanly on SIGTERM");
}
