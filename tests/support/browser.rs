//! A real headless Chromium driven over WebDriver: `/usr/bin/chromedriver` started as a child on a
//! free port (killed with its browser when the guard drops, a panic included), a `fantoccini`
//! session on it, and the waits and screenshots the browser tests share. Fails, never skips, when
//! the driver or the browser is missing (`scripts/prerequisites.sh` installs `chromium
//! chromium-driver`).
#![allow(dead_code)] // each test binary uses part of it

use std::fs::File;
use std::net::{Ipv4Addr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use fantoccini::elements::Element;
use fantoccini::wd::TimeoutConfiguration;
use fantoccini::{Client, ClientBuilder, Locator};
use hyper_util::client::legacy::connect::HttpConnector;

pub const CHROMEDRIVER: &str = "/usr/bin/chromedriver";
pub const CHROMIUM: &str = "/usr/bin/chromium";

/// How long one page may take to load, a script to run, or a wait to be met.
pub const PATIENCE: Duration = Duration::from_secs(15);

/// A running chromedriver: dropped (a panic included), the browsers it started are sent SIGTERM,
/// the driver is killed and reaped. (A browser left behind would quit by itself within seconds of
/// losing its driver: the pipe between them closes.)
pub struct Chromedriver {
    child: Child,
    port: u16,
}

impl Chromedriver {
    /// Starts the driver on a free loopback port, its log in `log`, and waits (at most 20 s) for
    /// it to accept connections.
    pub fn start(log: &Path) -> Chromedriver {
        for binary in [CHROMEDRIVER, CHROMIUM] {
            assert!(
                Path::new(binary).exists(),
                "{binary} is missing: scripts/prerequisites.sh installs `chromium chromium-driver`"
            );
        }
        let port = free_port();
        let log_file = File::create(log).unwrap();
        let child = Command::new(CHROMEDRIVER)
            .arg(format!("--port={port}"))
            .arg("--allowed-ips=127.0.0.1")
            .stdin(Stdio::null())
            .stdout(log_file.try_clone().unwrap())
            .stderr(log_file)
            .spawn()
            .unwrap_or_else(|e| panic!("starting {CHROMEDRIVER}: {e}"));
        let mut driver = Chromedriver { child, port };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect((Ipv4Addr::LOCALHOST, port)).is_err() {
            if let Some(status) = driver.child.try_wait().unwrap() {
                panic!(
                    "{CHROMEDRIVER} exited ({status}) before listening on {port}: see {}",
                    log.display()
                );
            }
            assert!(
                Instant::now() < deadline,
                "{CHROMEDRIVER} did not listen on {port} within 20 s: see {}",
                log.display()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        driver
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }

    /// A new session in headless Chromium, each wait of the session bounded by [`PATIENCE`].
    pub async fn session(&self) -> Client {
        let mut capabilities = serde_json::Map::new();
        capabilities.insert(
            "goog:chromeOptions".into(),
            serde_json::json!({
                "binary": CHROMIUM,
                "args": [
                    "--headless=new",
                    "--no-sandbox",
                    "--disable-gpu",
                    "--disable-dev-shm-usage",
                    "--window-size=1280,900",
                ],
            }),
        );
        let client = tokio::time::timeout(
            Duration::from_secs(60),
            ClientBuilder::new(HttpConnector::new())
                .capabilities(capabilities)
                .connect(&self.url()),
        )
        .await
        .expect("Chromium did not start within 60 s")
        .unwrap_or_else(|e| panic!("a WebDriver session in {CHROMIUM}: {e}"));
        client
            .update_timeouts(TimeoutConfiguration::new(
                Some(PATIENCE),
                Some(PATIENCE),
                Some(Duration::ZERO),
            ))
            .await
            .unwrap();
        client
    }
}

impl Drop for Chromedriver {
    fn drop(&mut self) {
        for browser in children_of(self.child.id()) {
            let _ = Command::new("kill")
                .args(["-TERM", &browser.to_string()])
                .stderr(Stdio::null())
                .status();
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

/// The ids of the processes whose parent is `parent`, read from `/proc`.
fn children_of(parent: u32) -> Vec<u32> {
    let Ok(entries) = std::fs::read_dir("/proc") else {
        return Vec::new();
    };
    entries
        .filter_map(|entry| entry.ok()?.file_name().to_str()?.parse::<u32>().ok())
        .filter(|pid| {
            // `pid (comm) state ppid ...`: the command may hold spaces, so read after its `)`.
            std::fs::read_to_string(format!("/proc/{pid}/stat")).is_ok_and(|stat| {
                stat.rsplit_once(')')
                    .and_then(|(_, rest)| rest.split_whitespace().nth(1)?.parse::<u32>().ok())
                    == Some(parent)
            })
        })
        .collect()
}

/// A loopback port nothing listens on (as of now).
pub fn free_port() -> u16 {
    TcpListener::bind((Ipv4Addr::LOCALHOST, 0))
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The element `css` selects, waited for (at most [`PATIENCE`]), failing with the page's URL and
/// source when it never appears.
pub async fn element(client: &Client, css: &str) -> Element {
    match client
        .wait()
        .at_most(PATIENCE)
        .for_element(Locator::Css(css))
        .await
    {
        Ok(element) => element,
        Err(e) => panic!(
            "no `{css}` on {} within {PATIENCE:?}: {e}\n{}",
            client
                .current_url()
                .await
                .map_or_else(|e| e.to_string(), |u| u.to_string()),
            client.source().await.unwrap_or_default()
        ),
    }
}

/// Every element `css` selects now (none is no failure).
pub async fn elements(client: &Client, css: &str) -> Vec<Element> {
    client.find_all(Locator::Css(css)).await.unwrap()
}

/// Runs `script` in the page and returns its value.
pub async fn script(client: &Client, script: &str) -> serde_json::Value {
    client
        .execute(script, Vec::new())
        .await
        .unwrap_or_else(|e| panic!("running `{script}`: {e}"))
}

/// Clicks `element` and waits (at most [`PATIENCE`]) until another document has loaded in its
/// place: the old one is marked first, so a page that navigates to its own URL counts too.
pub async fn click_and_wait(client: &Client, element: &Element) {
    script(client, "window.__before_navigation = true").await;
    element.click().await.unwrap();
    let deadline = Instant::now() + PATIENCE;
    loop {
        // While the page is being replaced the script may fail: that is no answer yet.
        let loaded = client
            .execute(
                "return window.__before_navigation === undefined \
                 && document.readyState === 'complete'",
                Vec::new(),
            )
            .await;
        if matches!(loaded, Ok(serde_json::Value::Bool(true))) {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "no new page within {PATIENCE:?} of the click (now on {})",
            client
                .current_url()
                .await
                .map_or_else(|e| e.to_string(), |u| u.to_string())
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Submits the form `form` selects with its submit button, as a person would, and waits for the
/// page that answers it.
pub async fn submit(client: &Client, form: &str) {
    let button = element(
        client,
        &format!(
            "{form} button:not([type]), {form} button[type=submit], {form} input[type=submit]"
        ),
    )
    .await;
    click_and_wait(client, &button).await;
}

/// Saves a PNG of the viewport as `dir/name.png`, checked to be a non-empty PNG; returns its path.
pub async fn screenshot(client: &Client, dir: &Path, name: &str) -> PathBuf {
    let png = client.screenshot().await.unwrap();
    assert!(
        png.starts_with(b"\x89PNG\r\n\x1a\n"),
        "the screenshot of {name} is a PNG"
    );
    let path = dir.join(format!("{name}.png"));
    std::fs::write(&path, &png).unwrap();
    let written = std::fs::metadata(&path).unwrap().len();
    assert!(written > 0, "{} is empty", path.display());
    path
}
