//! The dead-letter console (`delivery::admin`) in a real headless Chromium (issue 18, "Tested in
//! a real browser"), over a real RabbitMQ dead letter filled by a real consumer beside it: nothing
//! without the credential, the sign-in form, the dead letter grouped by reason, a hostile payload
//! shown as text and never run, an edited and a plain redrive applied by the consumer, a purge,
//! and no action without the form's CSRF token. Fails, never skips, when RabbitMQ, chromedriver or
//! Chromium is missing. Screenshots of each page land in `$CARGO_TARGET_TMPDIR/admin_browser/`.

#[path = "support/browser.rs"]
mod browser;
#[path = "support/process.rs"]
mod process;
#[path = "support/rabbitmq.rs"]
mod rabbitmq;

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use browser::{Chromedriver, click_and_wait, element, elements, screenshot, script, submit};
use delivery::admin::Console;
use delivery::dead_letter::DeadLetters;
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, Json, State, Unit, UnitId, consumer};
use fantoccini::Client;
use process::{amqp_url, wait_for};

/// The console's bearer token.
const TOKEN: &str = "browser-test-token-0123456789";
/// Where the console is mounted.
const MOUNT: &str = "/admin";
/// Malformed, so dead-lettered as it is: shown by the console, it must stay text.
const HOSTILE: &str = r#"<script>window.__pwned = 1; document.title = "pwned"</script>"#;
/// What the operator types in place of `bad-1`'s broken payload.
const FIXED: &str = r#"{"order_id":"bad-1","amount_cents":7}"#;

/// The units published, and why each ends in the dead letter: three malformed, two refused while
/// the shop is closed.
const UNITS: [(&str, &str); 5] = [
    ("xss-1", HOSTILE),
    ("bad-1", r#"{"order_id":"bad-1","amount_cents":"#),
    ("bad-2", "not an order"),
    ("late-1", r#"{"order_id":"late-1","amount_cents":3}"#),
    ("late-2", r#"{"order_id":"late-2","amount_cents":4}"#),
];

#[derive(serde::Deserialize)]
struct Order {
    amount_cents: i64,
}

/// The consumer's state: refusing orders while `closed`, recording each applied unit's amount.
#[derive(Clone, Default)]
struct Shop {
    closed: Arc<AtomicBool>,
    applied: Arc<Mutex<BTreeMap<String, i64>>>,
}

impl Shop {
    fn applied(&self) -> BTreeMap<String, i64> {
        self.applied.lock().unwrap().clone()
    }
}

/// Applies an order unless the shop is closed (rejected); a unit that is no order is malformed.
#[consumer]
async fn take_order(
    id: UnitId,
    State(shop): State<Shop>,
    Json(order): Json<Order>,
) -> Result<(), HandlerError> {
    if shop.closed.load(Ordering::SeqCst) {
        return Err(HandlerError::reject("the shop is closed"));
    }
    shop.applied
        .lock()
        .unwrap()
        .insert(id.to_string(), order.amount_cents);
    Ok(())
}

/// Plain HTTP to the console, redirects not followed.
struct Http {
    client: reqwest::Client,
}

/// How a request authenticates.
#[derive(Clone, Copy, Debug)]
enum Auth<'a> {
    Nothing,
    Bearer(&'a str),
}

impl Http {
    fn new() -> Http {
        Http {
            client: reqwest::Client::builder()
                .redirect(reqwest::redirect::Policy::none())
                .no_proxy()
                .timeout(Duration::from_secs(15))
                .build()
                .unwrap(),
        }
    }

    fn authorized(&self, request: reqwest::RequestBuilder, auth: Auth) -> reqwest::RequestBuilder {
        match auth {
            Auth::Nothing => request,
            Auth::Bearer(token) => request.header("authorization", format!("Bearer {token}")),
        }
    }

    async fn get(&self, url: &str, auth: Auth<'_>) -> (u16, String) {
        let response = self
            .authorized(self.client.get(url), auth)
            .send()
            .await
            .unwrap_or_else(|e| panic!("GET {url}: {e}"));
        (response.status().as_u16(), response.text().await.unwrap())
    }

    /// POSTs `fields` form-encoded: the status and the body.
    async fn post(&self, url: &str, auth: Auth<'_>, fields: &[(&str, &str)]) -> (u16, String) {
        let (status, _, body) = self.post_for_location(url, auth, fields).await;
        (status, body)
    }

    /// POSTs `fields` form-encoded: the status, the `Location` and the body.
    async fn post_for_location(
        &self,
        url: &str,
        auth: Auth<'_>,
        fields: &[(&str, &str)],
    ) -> (u16, Option<String>, String) {
        let body = fields
            .iter()
            .map(|(name, value)| format!("{}={}", form_encode(name), form_encode(value)))
            .collect::<Vec<_>>()
            .join("&");
        let response = self
            .authorized(self.client.post(url), auth)
            .header("content-type", "application/x-www-form-urlencoded")
            .body(body)
            .send()
            .await
            .unwrap_or_else(|e| panic!("POST {url}: {e}"));
        let location = response
            .headers()
            .get("location")
            .map(|l| l.to_str().unwrap().to_owned());
        (
            response.status().as_u16(),
            location,
            response.text().await.unwrap(),
        )
    }
}

/// `application/x-www-form-urlencoded` encoding of one name or value.
fn form_encode(s: &str) -> String {
    s.bytes()
        .map(|b| match b {
            b'A'..=b'Z' | b'a'..=b'z' | b'0'..=b'9' | b'-' | b'_' | b'.' | b'~' => {
                (b as char).to_string()
            }
            b' ' => "+".into(),
            _ => format!("%{b:02X}"),
        })
        .collect()
}

/// A form the page holds: where it posts, and its CSRF token.
#[derive(Debug)]
struct Form {
    action: String,
    csrf: String,
}

/// The form `css` selects on the current page, checked to post with a hidden `csrf` field.
async fn form(client: &Client, css: &str) -> Form {
    element(client, css).await;
    let found = client
        .execute(
            "const f = document.querySelector(arguments[0]);
             const csrf = f.querySelector('input[name=csrf]');
             return [f.getAttribute('method'), f.action, csrf && csrf.type, csrf && csrf.value];",
            vec![serde_json::json!(css)],
        )
        .await
        .unwrap();
    let field = |i: usize| found[i].as_str().map(str::to_owned);
    assert_eq!(
        field(0).map(|m| m.to_ascii_lowercase()).as_deref(),
        Some("post"),
        "{css} posts"
    );
    assert_eq!(
        field(2).as_deref(),
        Some("hidden"),
        "{css} has a hidden csrf field"
    );
    let csrf = field(3).unwrap();
    assert!(!csrf.is_empty(), "{css}: an empty csrf token");
    Form {
        action: field(1).unwrap(),
        csrf,
    }
}

/// Each group of the overview: (dead letter, source, reason) and its count.
async fn groups(client: &Client) -> BTreeMap<(String, String, String), u64> {
    let rows = script(
        client,
        "return Array.from(document.querySelectorAll('section.dead-letter tr.group')).map(tr =>
             [tr.closest('section.dead-letter').dataset.name, tr.dataset.source,
              tr.dataset.reason, tr.querySelector('td.count').textContent.trim()]);",
    )
    .await;
    rows.as_array()
        .unwrap()
        .iter()
        .map(|row| {
            let text = |i: usize| row[i].as_str().unwrap().to_owned();
            let count = text(3)
                .parse()
                .unwrap_or_else(|e| panic!("a count that is no number: {row}: {e}"));
            ((text(0), text(1), text(2)), count)
        })
        .collect()
}

/// The text of the element `css` selects.
async fn text(client: &Client, css: &str) -> String {
    element(client, css).await.text().await.unwrap()
}

/// The element's `href`, resolved.
async fn href(client: &Client, css: &str) -> String {
    element(client, css)
        .await
        .prop("href")
        .await
        .unwrap()
        .unwrap_or_else(|| panic!("{css} has no href"))
}

/// The ids of the units the group page lists.
async fn unit_rows(client: &Client) -> BTreeSet<String> {
    element(client, "tr.unit").await;
    let mut ids = BTreeSet::new();
    for row in elements(client, "tr.unit").await {
        ids.insert(row.attr("data-id").await.unwrap().unwrap());
    }
    ids
}

/// Checks the browser is on the page at `path` (whatever the query).
async fn back_on(client: &Client, path: &str) {
    let now = client.current_url().await.unwrap();
    assert_eq!(now.path(), path, "on {now}");
}

/// The flash the overview shows after an action.
async fn flash(client: &Client) -> String {
    let flash = text(client, "#flash").await;
    assert!(!flash.trim().is_empty(), "an empty flash");
    flash
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_console_in_a_real_browser() {
    // Every wait below is bounded; this bounds them all, the guards' drops killing the browser.
    tokio::time::timeout(Duration::from_secs(300), in_a_real_browser())
        .await
        .expect("the browser test did not finish within 5 minutes");
}

async fn in_a_real_browser() {
    let shots = Path::new(env!("CARGO_TARGET_TMPDIR")).join("admin_browser");
    let _ = std::fs::remove_dir_all(&shots);
    std::fs::create_dir_all(&shots).unwrap();
    let mut screenshots: Vec<PathBuf> = Vec::new();

    // A dead letter filled by a real consumer: three malformed units, two refused.
    let url = amqp_url();
    let topology = RabbitTopology::new(format!("admin-browser-{}", std::process::id()));
    let connection = rabbitmq::fresh(&url, &topology).await;
    let publisher = ConfirmedPublisher::new(url.as_str());
    for (id, body) in UNITS {
        let unit = Unit::new(id, body.to_owned());
        publisher
            .publish(
                &topology.queue,
                body.as_bytes(),
                delivery::rabbitmq::properties_of(&unit),
            )
            .await
            .unwrap();
    }
    let shop = Shop::default();
    shop.closed.store(true, Ordering::SeqCst);
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(
            RabbitSource::connect(url.as_str(), topology.clone())
                .await
                .unwrap(),
        )
        .state(shop.clone())
        .shutdown_on(async move {
            let _ = stopped.await;
        })
        .run(take_order),
    );
    let dead = RabbitDeadLetters::new(url.as_str(), &topology);
    wait_for(
        "five units dead-lettered",
        Duration::from_secs(30),
        async || dead.count().await.unwrap() == 5,
    )
    .await;
    assert!(shop.applied().is_empty());
    let dead_name = dead.name().to_string();
    let group_key = |reason: &str| (dead_name.clone(), topology.queue.clone(), reason.to_owned());

    // The console, served beside the consumer.
    let app = axum::Router::new().nest(
        MOUNT,
        Console::new(TOKEN).dead_letters(dead.clone()).router(),
    );
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let base = format!("http://{}{MOUNT}", listener.local_addr().unwrap());
    let server = tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    let http = Http::new();

    let driver = Chromedriver::start(&shots.join("chromedriver.log"));
    let client = driver.session().await;

    // 1. Without the credential the browser gets the sign-in form, and nothing of the dead letter.
    client.goto(&base).await.unwrap();
    let sign_in = element(&client, "form#sign-in").await;
    assert_eq!(
        sign_in
            .attr("method")
            .await
            .unwrap()
            .map(|m| m.to_ascii_lowercase())
            .as_deref(),
        Some("post")
    );
    assert_eq!(
        sign_in.prop("action").await.unwrap().as_deref(),
        Some(format!("{base}/sign-in").as_str())
    );
    element(
        &client,
        r#"form#sign-in input[name="token"][type="password"]"#,
    )
    .await;
    assert!(elements(&client, "section.dead-letter").await.is_empty());
    screenshots.push(screenshot(&client, &shots, "sign-in").await);
    let (status, page) = http.get(&base, Auth::Nothing).await;
    assert_eq!(status, 401, "{page}");
    assert!(page.contains(r#"id="sign-in""#), "{page}");
    let (status, _) = http
        .post(
            &format!("{base}/sign-in"),
            Auth::Nothing,
            &[("token", "not-the-token-at-all")],
        )
        .await;
    assert_eq!(status, 401, "a wrong token signs nobody in");
    let (status, signed_in_to, _) = http
        .post_for_location(
            &format!("{base}/sign-in"),
            Auth::Nothing,
            &[("token", TOKEN)],
        )
        .await;
    assert_eq!(status, 303, "the right token signs in");
    let signed_in_to = signed_in_to.expect("a sign-in redirects");

    // 2. Signed in through the form: the dead letter, grouped by reason, with its counts.
    element(&client, r#"form#sign-in input[name="token"]"#)
        .await
        .send_keys(TOKEN)
        .await
        .unwrap();
    submit(&client, "form#sign-in").await;
    element(&client, "section.dead-letter").await;
    // The overview, where the console's own header links, within where it is mounted.
    let overview_url = client.current_url().await.unwrap();
    let overview = overview_url.to_string();
    let overview_path = overview_url.path().to_owned();
    assert_eq!(href(&client, "header a").await, overview);
    assert!(overview.starts_with(&base), "{overview} is within {base}");
    assert_eq!(
        overview_path, signed_in_to,
        "a sign-in leads to the overview"
    );
    let cookies = client.get_all_cookies().await.unwrap();
    assert!(
        cookies.iter().any(|c| c.http_only() == Some(true)
            && c.same_site().map(|s| s.to_string()).as_deref() == Some("Strict")),
        "an HttpOnly, SameSite=Strict session cookie: {cookies:?}"
    );
    assert_eq!(
        groups(&client).await,
        BTreeMap::from([(group_key("malformed"), 3), (group_key("rejected"), 2)])
    );
    screenshots.push(screenshot(&client, &shots, "overview").await);
    let malformed_row = format!(
        r#"tr.group[data-source="{}"][data-reason="malformed"]"#,
        topology.queue
    );
    let rejected_row = format!(
        r#"tr.group[data-source="{}"][data-reason="rejected"]"#,
        topology.queue
    );
    let redrive_malformed = form(&client, &format!("{malformed_row} form.redrive-group")).await;
    let purge_malformed = form(&client, &format!("{malformed_row} form.purge-group")).await;
    let rejected_group = href(&client, &format!("{rejected_row} a.open-group")).await;

    // 3. The group, then the hostile unit: its payload is text, and ran nowhere.
    click_and_wait(
        &client,
        &element(&client, &format!("{malformed_row} a.open-group")).await,
    )
    .await;
    let malformed_group = client.current_url().await.unwrap().to_string();
    assert_eq!(
        unit_rows(&client).await,
        BTreeSet::from(["bad-1", "bad-2", "xss-1"].map(String::from))
    );
    screenshots.push(screenshot(&client, &shots, "group").await);
    let open = element(&client, r#"tr.unit[data-id="xss-1"] a.open-unit"#).await;
    assert_eq!(open.text().await.unwrap(), "xss-1");
    click_and_wait(&client, &open).await;
    let hostile_unit = client.current_url().await.unwrap().to_string();
    let payload = text(&client, "pre#payload").await;
    assert!(
        payload.contains("<script>"),
        "the payload as text: {payload:?}"
    );
    assert_eq!(payload.trim(), HOSTILE);
    assert_eq!(
        script(&client, "return typeof window.__pwned").await,
        "undefined",
        "the payload ran"
    );
    assert_ne!(client.title().await.unwrap(), "pwned", "the payload ran");
    assert_eq!(
        script(
            &client,
            "return document.querySelectorAll('#payload *').length"
        )
        .await,
        0,
        "the payload is parsed as markup"
    );
    assert_eq!(text(&client, "dd#reason").await.trim(), "malformed");
    assert_eq!(text(&client, "dd#source").await.trim(), topology.queue);
    assert_eq!(text(&client, "dd#delivery-count").await.trim(), "1");
    element(&client, "table#headers").await;
    screenshots.push(screenshot(&client, &shots, "unit").await);
    let redrive_hostile = form(&client, "form#redrive").await;
    let purge_hostile = form(&client, "form#purge").await;
    let edit_hostile = form(&client, "form#edit").await;
    assert_eq!(
        element(&client, r#"form#edit textarea[name="payload"]"#)
            .await
            .prop("value")
            .await
            .unwrap()
            .as_deref(),
        Some(HOSTILE),
        "the editor holds the payload as text"
    );

    // 1 (continued). Every route, with the browser's own form tokens but without the credential
    // (or with a wrong one), answers 401 with the sign-in form, and changes nothing.
    let pages = [
        overview.clone(),
        base.clone(),
        malformed_group.clone(),
        rejected_group.clone(),
        hostile_unit.clone(),
        format!("{base}/no-such-page"),
    ];
    for page in &pages {
        for auth in [Auth::Nothing, Auth::Bearer("a-wrong-token-of-enough-chars")] {
            let (status, body) = http.get(page, auth).await;
            assert_eq!(status, 401, "GET {page} with {auth:?}: {body}");
            assert!(body.contains(r#"id="sign-in""#), "GET {page}: {body}");
        }
    }
    let actions: [(&Form, &[(&str, &str)]); 5] = [
        (&redrive_malformed, &[]),
        (&purge_malformed, &[]),
        (&redrive_hostile, &[]),
        (&purge_hostile, &[]),
        (&edit_hostile, &[("payload", "{}")]),
    ];
    for (form, extra) in actions {
        let mut fields = vec![("csrf", form.csrf.as_str())];
        fields.extend_from_slice(extra);
        for auth in [Auth::Nothing, Auth::Bearer("a-wrong-token-of-enough-chars")] {
            let (status, body) = http.post(&form.action, auth, &fields).await;
            assert_eq!(status, 401, "POST {} with {auth:?}: {body}", form.action);
            assert!(
                body.contains(r#"id="sign-in""#),
                "POST {}: {body}",
                form.action
            );
        }
    }
    let (status, body) = http
        .post(&format!("{base}/no-such-action"), Auth::Nothing, &[])
        .await;
    assert_eq!(status, 401, "{body}");

    // 5. With the bearer token but a missing or wrong CSRF token, every action answers 403 and
    // changes nothing.
    let (status, body) = http.get(&overview, Auth::Bearer(TOKEN)).await;
    assert_eq!(status, 200, "the bearer token is a credential: {body}");
    for (form, extra) in actions {
        for csrf in [None, Some("not-the-csrf-token")] {
            let mut fields: Vec<(&str, &str)> = extra.to_vec();
            if let Some(csrf) = csrf {
                fields.push(("csrf", csrf));
            }
            let (status, body) = http.post(&form.action, Auth::Bearer(TOKEN), &fields).await;
            assert_eq!(
                status, 403,
                "POST {} with csrf {csrf:?}: {body}",
                form.action
            );
        }
    }
    assert_eq!(
        dead.count().await.unwrap(),
        5,
        "no action without the CSRF token"
    );
    let hostile = dead
        .peek(&UnitId::new("xss-1"))
        .await
        .unwrap()
        .expect("still there");
    assert_eq!(
        hostile.unit.payload().as_ref(),
        HOSTILE.as_bytes(),
        "not edited"
    );

    // 4. The shop opens. `bad-1` is fixed and redriven from its page: applied, and the malformed
    // group shrinks.
    shop.closed.store(false, Ordering::SeqCst);
    client.goto(&malformed_group).await.unwrap();
    click_and_wait(
        &client,
        &element(&client, r#"tr.unit[data-id="bad-1"] a.open-unit"#).await,
    )
    .await;
    assert_eq!(text(&client, "pre#payload").await.trim(), UNITS[1].1);
    let editor = element(&client, r#"form#edit textarea[name="payload"]"#).await;
    editor.clear().await.unwrap();
    editor.send_keys(FIXED).await.unwrap();
    screenshots.push(screenshot(&client, &shots, "unit-edit").await);
    submit(&client, "form#edit").await;
    back_on(&client, &overview_path).await;
    let said = flash(&client).await;
    assert!(said.contains("1 unit"), "{said}");
    wait_for(
        "bad-1 applied as edited",
        Duration::from_secs(30),
        async || shop.applied().get("bad-1") == Some(&7),
    )
    .await;
    assert_eq!(
        groups(&client).await,
        BTreeMap::from([(group_key("malformed"), 2), (group_key("rejected"), 2)])
    );

    // `late-1`, refused while the shop was closed, redriven as it is from its page.
    client.goto(&rejected_group).await.unwrap();
    assert_eq!(
        unit_rows(&client).await,
        BTreeSet::from(["late-1", "late-2"].map(String::from))
    );
    click_and_wait(
        &client,
        &element(&client, r#"tr.unit[data-id="late-1"] a.open-unit"#).await,
    )
    .await;
    assert_eq!(text(&client, "dd#reason").await.trim(), "rejected");
    submit(&client, "form#redrive").await;
    back_on(&client, &overview_path).await;
    let said = flash(&client).await;
    assert!(said.contains("1 unit"), "{said}");
    screenshots.push(screenshot(&client, &shots, "after-redrive").await);
    wait_for("late-1 applied", Duration::from_secs(30), async || {
        shop.applied().contains_key("late-1")
    })
    .await;
    assert_eq!(
        groups(&client).await,
        BTreeMap::from([(group_key("malformed"), 2), (group_key("rejected"), 1)])
    );

    // The rest of the refused group, redriven from the overview: the group is gone.
    submit(&client, &format!("{rejected_row} form.redrive-group")).await;
    back_on(&client, &overview_path).await;
    let said = flash(&client).await;
    assert!(said.contains("1 unit"), "{said}");
    wait_for("late-2 applied", Duration::from_secs(30), async || {
        shop.applied().contains_key("late-2")
    })
    .await;
    assert_eq!(
        groups(&client).await,
        BTreeMap::from([(group_key("malformed"), 2)])
    );

    // `bad-2` is no order at all: purged from its page.
    client.goto(&malformed_group).await.unwrap();
    click_and_wait(
        &client,
        &element(&client, r#"tr.unit[data-id="bad-2"] a.open-unit"#).await,
    )
    .await;
    submit(&client, "form#purge").await;
    back_on(&client, &overview_path).await;
    let said = flash(&client).await;
    assert!(said.contains("1 unit"), "{said}");
    screenshots.push(screenshot(&client, &shots, "after-purge").await);
    assert_eq!(
        groups(&client).await,
        BTreeMap::from([(group_key("malformed"), 1)])
    );
    assert_eq!(dead.count().await.unwrap(), 1);
    assert!(dead.peek(&UnitId::new("xss-1")).await.unwrap().is_some());
    assert_eq!(
        shop.applied(),
        BTreeMap::from([
            ("bad-1".to_owned(), 7),
            ("late-1".to_owned(), 3),
            ("late-2".to_owned(), 4)
        ]),
        "each redriven unit applied once, the purged one never"
    );

    for shot in &screenshots {
        let size = std::fs::metadata(shot).unwrap().len();
        assert!(size > 0, "{} is empty", shot.display());
        println!("screenshot: {} ({size} bytes)", shot.display());
    }

    let _ = tokio::time::timeout(Duration::from_secs(10), client.close()).await;
    drop(driver);
    server.abort();
    stop.send(()).unwrap();
    let report = tokio::time::timeout(Duration::from_secs(30), consumer)
        .await
        .expect("the consumer stops within 30 s")
        .unwrap();
    assert_eq!(report.acked, 3, "{report:?}");
    // Five units dead-lettered once each: no refused action redrove one, to come back.
    assert_eq!(report.dead_lettered, 5, "{report:?}");
    rabbitmq::delete_queues(
        &connection,
        [topology.queue.as_str(), &topology.dead_letter_queue_name()],
    )
    .await;
    publisher.close().await;
}
