//! `examples/axum_webhook.rs` against its contract, as a real process: real HTTP over loopback,
//! real PostgreSQL (127.0.0.1:5432, a database of its own per test, dropped afterwards).
//!
//! The example's own `main` runs in a child process: this test binary includes the example's
//! source and starts itself again with `--exact run_the_example_when_started_as_its_process` and
//! the marker variable below, so the process under test is always built from the current source —
//! never a stale `target/*/examples/axum_webhook` left by an earlier build.
#![cfg(feature = "axum")]

#[path = "../examples/axum_webhook.rs"]
mod example;

use std::fs::File;
use std::net::{Ipv4Addr, SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, ExitCode, Stdio};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as BASE64;
use hmac::{Hmac, KeyInit, Mac};
use sha2::Sha256;
use sqlx::{AssertSqlSafe, Connection, PgConnection, Row};

/// Set in the child's environment: run the example instead of testing it.
const CHILD: &str = "DELIVERY_AXUM_WEBHOOK_EXAMPLE_CHILD";
const SECRET: &str = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
const OTHER_SECRET: &str = "whsec_dGhlIG90aGVyIHNlY3JldCBrZXkgISE=";

fn admin_url() -> String {
    std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

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
    port: u16,
    log: PathBuf,
}

impl Example {
    /// Starts the example with `env` (and nothing else of this process's configuration).
    fn start(env: &[(&str, &str)]) -> Example {
        let port = free_port();
        let log = std::env::temp_dir().join(format!(
            "delivery-axum-webhook-example-{}-{port}.log",
            std::process::id()
        ));
        let out = File::create(&log).unwrap();
        let mut command = Command::new(std::env::current_exe().unwrap());
        command
            .args([
                "--exact",
                "run_the_example_when_started_as_its_process",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(CHILD, "1")
            .env("PORT", port.to_string())
            .env_remove("WEBHOOK_SECRET")
            .env_remove("DATABASE_URL")
            .env("RUST_LOG", "info,delivery_core=debug")
            .stdin(Stdio::null())
            .stdout(out.try_clone().unwrap())
            .stderr(out);
        for (key, value) in env {
            command.env(key, value);
        }
        Example {
            child: command.spawn().unwrap(),
            port,
            log,
        }
    }

    /// Waits until it accepts connections; panics with its output if it exits first.
    fn ready(mut self) -> Example {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if TcpStream::connect((Ipv4Addr::LOCALHOST, self.port)).is_ok() {
                return self;
            }
            if let Some(status) = self.child.try_wait().unwrap() {
                panic!("the example exited with {status}:\n{}", self.output());
            }
            assert!(
                Instant::now() < deadline,
                "the example is not listening after 60 s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    /// Waits for it to exit by itself; its status and output.
    fn exits(mut self) -> (bool, String) {
        let deadline = Instant::now() + Duration::from_secs(60);
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                return (status.success(), self.output());
            }
            assert!(
                Instant::now() < deadline,
                "the example is still running after 60 s:\n{}",
                self.output()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    }

    fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    fn url(&self) -> String {
        format!("http://127.0.0.1:{}/webhooks", self.port)
    }
}

impl Drop for Example {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        let _ = std::fs::remove_file(&self.log);
    }
}

fn free_port() -> u16 {
    TcpListener::bind(SocketAddr::from((Ipv4Addr::LOCALHOST, 0)))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// A database of the test's own, dropped afterwards.
struct Database {
    name: String,
}

impl Database {
    async fn create(test: &str) -> Database {
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .subsec_nanos();
        let name = format!("delivery_{test}_{}_{nanos}", std::process::id());
        let mut admin = PgConnection::connect(&admin_url())
            .await
            .expect("PostgreSQL answers on DATABASE_URL (default 127.0.0.1:5432, database `test`)");
        sqlx::query(AssertSqlSafe(format!("CREATE DATABASE \"{name}\"")))
            .execute(&mut admin)
            .await
            .unwrap();
        Database { name }
    }

    fn url(&self) -> String {
        let admin = admin_url();
        let base = admin
            .rsplit_once('/')
            .map_or(admin.as_str(), |(base, _)| base);
        format!("{base}/{}", self.name)
    }

    async fn connect(&self) -> PgConnection {
        PgConnection::connect(&self.url()).await.unwrap()
    }

    async fn drop(self) {
        let mut admin = PgConnection::connect(&admin_url()).await.unwrap();
        sqlx::query(AssertSqlSafe(format!(
            "DROP DATABASE IF EXISTS \"{}\" WITH (FORCE)",
            self.name
        )))
        .execute(&mut admin)
        .await
        .unwrap();
    }
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

/// A Standard Webhooks delivery: `id`, `body`, signed at `at` with `secret`.
async fn deliver(
    client: &reqwest::Client,
    url: &str,
    id: &str,
    body: &[u8],
    at: u64,
    secret: &str,
) -> u16 {
    let key = BASE64
        .decode(secret.strip_prefix("whsec_").unwrap())
        .unwrap();
    let mut mac = Hmac::<Sha256>::new_from_slice(&key).unwrap();
    mac.update(format!("{id}.{at}.").as_bytes());
    mac.update(body);
    let signature = BASE64.encode(mac.finalize().into_bytes());
    client
        .post(url)
        .header("content-type", "application/json")
        .header("webhook-id", id)
        .header("webhook-timestamp", at.to_string())
        .header("webhook-signature", format!("v1,{signature}"))
        .body(body.to_vec())
        .send()
        .await
        .unwrap()
        .status()
        .as_u16()
}

/// Announces a body of `length` bytes, sends none of it, and returns the status of the answer.
async fn deliver_oversized(url: &str, length: usize) -> u16 {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let rest = url.strip_prefix("http://").expect("an http:// url");
    let (authority, path) = rest.split_at(rest.find('/').unwrap_or(rest.len()));
    let mut stream = tokio::net::TcpStream::connect(authority).await.unwrap();
    let request = format!(
        "POST {path} HTTP/1.1\r\nhost: {authority}\r\ncontent-type: application/json\r\n\
         webhook-id: msg_big\r\nwebhook-timestamp: {}\r\nwebhook-signature: v1,AAAA\r\n\
         content-length: {length}\r\n\r\n",
        now()
    );
    stream.write_all(request.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    let mut buf = [0u8; 1024];
    while !answer.windows(2).any(|w| w == b"\r\n") {
        let n = stream.read(&mut buf).await.unwrap();
        assert!(n > 0, "the server closed without answering");
        answer.extend_from_slice(&buf[..n]);
    }
    let line = String::from_utf8_lossy(&answer);
    line.split_whitespace()
        .nth(1)
        .and_then(|code| code.parse().ok())
        .unwrap_or_else(|| panic!("not an HTTP status line: {line:?}"))
}

async fn rows(db: &mut PgConnection) -> Vec<(String, String, serde_json::Value)> {
    sqlx::query("SELECT webhook_id, event_type, payload FROM webhook_events ORDER BY webhook_id")
        .fetch_all(db)
        .await
        .unwrap()
        .into_iter()
        .map(|row| {
            let payload: sqlx::types::Json<serde_json::Value> = row.get(2);
            (row.get(0), row.get(1), payload.0)
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_event_is_recorded_once_and_a_forgery_writes_nothing() {
    let database = Database::create("axum_webhook_once").await;
    let example = Example::start(&[
        ("WEBHOOK_SECRET", SECRET),
        ("DATABASE_URL", &database.url()),
    ])
    .ready();
    let url = example.url();
    let client = reqwest::Client::new();
    let mut db = database.connect().await;

    // The table exists once the service is up.
    assert_eq!(rows(&mut db).await, [], "{}", example.output());

    let body = br#"{"type": "invoice.paid", "data": {"invoice": "in_1", "amount": 990}}"#;
    let first = now();
    assert_eq!(
        deliver(&client, &url, "msg_1", body, first, SECRET).await,
        200,
        "{}",
        example.output()
    );
    let expected = vec![(
        "msg_1".to_owned(),
        "invoice.paid".to_owned(),
        serde_json::json!({"invoice": "in_1", "amount": 990}),
    )];
    assert_eq!(rows(&mut db).await, expected);

    // The sender's redelivery: same id, signed again later. 2xx, and nothing new.
    assert_eq!(
        deliver(&client, &url, "msg_1", body, first + 5, SECRET).await,
        200
    );
    assert_eq!(rows(&mut db).await, expected);

    // A forgery, a replay outside the tolerance, an unsigned-looking body: 401, nothing written.
    let forged = br#"{"type": "invoice.paid", "data": {"invoice": "in_666"}}"#;
    assert_eq!(
        deliver(&client, &url, "msg_forged", forged, now(), OTHER_SECRET).await,
        401
    );
    assert_eq!(
        deliver(&client, &url, "msg_stale", body, now() - 3_600, SECRET).await,
        401
    );
    let unsigned = client
        .post(&url)
        .body(forged.to_vec())
        .send()
        .await
        .unwrap();
    assert_eq!(unsigned.status().as_u16(), 401);

    // Verified, but not an event: 400, and the sender does not retry.
    assert_eq!(
        deliver(
            &client,
            &url,
            "msg_shape",
            br#"{"data": {}}"#,
            now(),
            SECRET
        )
        .await,
        400
    );
    // Over the 1 MiB limit: 413, answered from the Content-Length before any of the body is read
    // (so the request is written by hand: a client still writing the body when the server answers
    // and closes would see a broken pipe instead of the answer).
    assert_eq!(deliver_oversized(&url, (1 << 20) + 1).await, 413);

    assert_eq!(rows(&mut db).await, expected, "{}", example.output());
    drop(db);
    drop(example);
    database.drop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreachable_database_is_answered_503() {
    let example = Example::start(&[
        ("WEBHOOK_SECRET", SECRET),
        ("DATABASE_URL", "postgres://postgres@127.0.0.1:1/test"),
    ])
    .ready();
    let client = reqwest::Client::new();
    let body = br#"{"type": "invoice.paid", "data": {"invoice": "in_2"}}"#;
    let status = deliver(&client, &example.url(), "msg_2", body, now(), SECRET).await;
    assert_eq!(status, 503, "{}", example.output());
    // And a forgery is still refused for its signature, before the database is tried.
    let status = deliver(&client, &example.url(), "msg_3", body, now(), OTHER_SECRET).await;
    assert_eq!(status, 401, "{}", example.output());
}

#[test]
fn without_a_usable_secret_the_example_refuses_to_start() {
    let (success, output) = Example::start(&[]).exits();
    assert!(!success, "{output}");
    assert!(
        output.contains("environment variable `WEBHOOK_SECRET` is not set"),
        "{output}"
    );

    let (success, output) = Example::start(&[("WEBHOOK_SECRET", "whsec_not*base64")]).exits();
    assert!(!success, "{output}");
    assert!(output.contains("WEBHOOK_SECRET"), "{output}");
    assert!(output.contains("not base64"), "{output}");
    assert!(
        !output.contains("not*base64"),
        "the secret is never shown: {output}"
    );
}
