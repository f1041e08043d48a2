//! `delivery::admin::Console` served by a real axum `Router` (driven with `oneshot`), over the
//! in-memory broker's dead letters: the credential on every route, CSRF on every change,
//! escaping, grouping, and each action doing what it says to the dead letter and its source.
//! The same console over a real RabbitMQ queue, in a real browser: tests/admin_browser.rs.
#![cfg(feature = "admin")]

use axum::Router;
use axum::body::Body;
use axum::http::{Request, StatusCode, header};
use delivery::admin::Console;
use delivery::dead_letter::DeadLetters;
use delivery::memory::{MemoryBroker, QueueConfig};
use delivery::{Consumer, HandlerError, Json, Unit, consumer};
use tower::ServiceExt as _;

const TOKEN: &str = "test-console-token-0123456789";

#[consumer]
async fn take(Json(n): Json<u32>) -> Result<(), HandlerError> {
    if n == 13 {
        return Err(HandlerError::reject(std::io::Error::other("13 is refused")));
    }
    Ok(())
}

/// A broker whose `orders` dead letter holds two malformed units (one a `<script>`) and one the
/// handler rejected, and whose `invoices` dead letter holds one malformed unit.
async fn seeded() -> MemoryBroker {
    let broker = MemoryBroker::new();
    for queue in ["orders", "invoices"] {
        broker.declare(queue, QueueConfig::default()).unwrap();
    }
    broker.publish("orders", Unit::new("o-1", "not json"));
    broker.publish(
        "orders",
        Unit::new("o/2 ?&", "<script>alert('pwned')</script>"),
    );
    broker.publish("orders", Unit::new("o-3", "13"));
    broker.publish("invoices", Unit::new("i-1", "{oops"));
    for queue in ["orders", "invoices"] {
        consume(&broker, queue).await;
    }
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 3);
    broker
}

/// Runs [`take`] on `queue` until it is idle.
async fn consume(broker: &MemoryBroker, queue: &str) {
    Consumer::new(broker.consume(queue))
        .shutdown_on(broker.idle(queue))
        .run(take)
        .await;
}

/// `uri` as a script with the bearer token gets it.
async fn bearer_get(app: &Router, uri: &str) -> Answer {
    send(app, bearer(get(uri)).body(Body::empty()).unwrap()).await
}

/// The console mounted at `/admin` beside a route of the service's own, as the docs and
/// `examples/console.rs` mount it (`nest_service`: `/admin/` too).
fn app(broker: &MemoryBroker) -> Router {
    mounted(
        Console::new(TOKEN)
            .dead_letters(broker.dead_letters("orders"))
            .dead_letters(broker.dead_letters("invoices")),
    )
}

fn mounted(console: Console) -> Router {
    Router::new()
        .route("/", axum::routing::get(|| async { "the service" }))
        .nest_service("/admin", console.router())
}

struct Answer {
    status: StatusCode,
    headers: axum::http::HeaderMap,
    body: String,
}

async fn send(app: &Router, request: Request<Body>) -> Answer {
    let response = app.clone().oneshot(request).await.unwrap();
    let status = response.status();
    let headers = response.headers().clone();
    let body = axum::body::to_bytes(response.into_body(), 1 << 20)
        .await
        .unwrap();
    Answer {
        status,
        headers,
        body: String::from_utf8(body.to_vec()).unwrap(),
    }
}

fn get(uri: &str) -> axum::http::request::Builder {
    Request::get(uri)
}

fn bearer(builder: axum::http::request::Builder) -> axum::http::request::Builder {
    builder.header(header::AUTHORIZATION, format!("Bearer {TOKEN}"))
}

fn form(uri: &str) -> axum::http::request::Builder {
    Request::post(uri).header(header::CONTENT_TYPE, "application/x-www-form-urlencoded")
}

/// The CSRF token the console's forms carry.
fn csrf_of(page: &str) -> String {
    let at = page
        .find(r#"name="csrf" value=""#)
        .expect("a form with a csrf token")
        + 19;
    page[at..at + 64].to_owned()
}

#[tokio::test]
async fn every_route_answers_401_without_the_credential() {
    let broker = seeded().await;
    let app = app(&broker);
    let gets = [
        "/admin",
        "/admin/d/orders.dead-letter?source=orders&reason=malformed",
        "/admin/d/orders.dead-letter/u/o-1",
        "/admin/no/such/page",
    ];
    for uri in gets {
        for request in [
            get(uri),
            get(uri).header(header::AUTHORIZATION, "Bearer wrong-token-0123456789"),
            get(uri).header(header::COOKIE, format!("delivery_admin={TOKEN}")),
        ] {
            let answer = send(&app, request.body(Body::empty()).unwrap()).await;
            assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "GET {uri}");
            assert!(answer.body.contains(r#"id="sign-in""#), "GET {uri}");
            assert!(
                !answer.body.contains("o-1"),
                "GET {uri} shows nothing of the dead letter"
            );
        }
    }
    let posts = [
        "/admin/d/orders.dead-letter/u/o-1/redrive",
        "/admin/d/orders.dead-letter/u/o-1/purge",
        "/admin/d/orders.dead-letter/u/o-1/edit",
        "/admin/d/orders.dead-letter/group/redrive",
        "/admin/d/orders.dead-letter/group/purge",
        "/admin/sign-out",
    ];
    for uri in posts {
        let body = "csrf=x&source=orders&reason=malformed&payload=1";
        let answer = send(&app, form(uri).body(Body::from(body)).unwrap()).await;
        assert_eq!(answer.status, StatusCode::UNAUTHORIZED, "POST {uri}");
    }
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 3);
    assert_eq!(broker.depth("orders"), 0);

    // A wrong token at the sign-in form: 401, no cookie.
    let body = "token=not-the-token";
    let answer = send(&app, form("/admin/sign-in").body(Body::from(body)).unwrap()).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert!(answer.headers.get(header::SET_COOKIE).is_none());
    // The service's own routes are not the console's business.
    let answer = send(&app, get("/").body(Body::empty()).unwrap()).await;
    assert_eq!(answer.status, StatusCode::OK);
}

#[tokio::test]
async fn signing_in_sets_a_session_cookie_that_admits_the_browser() {
    let broker = seeded().await;
    let app = app(&broker);
    let body = format!("token={TOKEN}");
    let answer = send(&app, form("/admin/sign-in").body(Body::from(body)).unwrap()).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.headers[header::LOCATION], "/admin");
    let cookie = answer.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        cookie.contains("HttpOnly") && cookie.contains("SameSite=Strict"),
        "{cookie}"
    );
    assert!(cookie.contains("Path=/admin"), "{cookie}");
    assert!(
        !cookie.contains(TOKEN),
        "the cookie never holds the token: {cookie}"
    );
    let session = cookie.split(';').next().unwrap().to_owned();

    let answer = send(
        &app,
        get("/admin")
            .header(header::COOKIE, session)
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(answer.body.contains(r#"data-name="orders.dead-letter""#));
    assert_eq!(answer.headers[header::CACHE_CONTROL], "no-store");
    let csp = answer.headers[header::CONTENT_SECURITY_POLICY]
        .to_str()
        .unwrap();
    assert!(csp.contains("default-src 'none'"), "{csp}");
}

#[tokio::test]
async fn the_overview_groups_each_dead_letter_by_source_and_reason_with_escaped_values() {
    let broker = seeded().await;
    let app = app(&broker);
    let page = send(&app, bearer(get("/admin")).body(Body::empty()).unwrap()).await;
    assert_eq!(page.status, StatusCode::OK);
    let body = page.body;
    assert!(
        body.contains(r#"<section class="dead-letter" data-name="orders.dead-letter">"#),
        "{body}"
    );
    assert!(body.contains(r#"<section class="dead-letter" data-name="invoices.dead-letter">"#));
    assert!(body.contains(r#"<tr class="group" data-source="orders" data-reason="malformed"><td>orders</td><td>malformed</td><td class="count">2</td>"#), "{body}");
    assert!(body.contains(r#"data-source="orders" data-reason="rejected"><td>orders</td><td>rejected</td><td class="count">1</td>"#));
    assert!(body.contains(r#"data-source="invoices" data-reason="malformed"><td>invoices</td><td>malformed</td><td class="count">1</td>"#));
    // Links stay within the mount point.
    assert!(
        body.contains(r#"href="/admin/d/orders.dead-letter?source=orders&amp;reason=malformed""#),
        "{body}"
    );

    let group = send(
        &app,
        bearer(get(
            "/admin/d/orders.dead-letter?source=orders&reason=malformed",
        ))
        .body(Body::empty())
        .unwrap(),
    )
    .await;
    assert_eq!(group.status, StatusCode::OK);
    assert!(group.body.contains(r#"<tr class="unit" data-id="o-1">"#));
    // The id is percent-encoded in the link and escaped in the text; the payload preview too.
    assert!(
        group
            .body
            .contains(r#"href="/admin/d/orders.dead-letter/u/o%2F2%20%3F%26""#),
        "{}",
        group.body
    );
    assert!(
        group
            .body
            .contains("&lt;script&gt;alert('pwned')&lt;/script&gt;")
    );
    assert!(!group.body.contains("<script>"));

    let unit = send(
        &app,
        bearer(get("/admin/d/orders.dead-letter/u/o%2F2%20%3F%26"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(unit.status, StatusCode::OK);
    assert!(
        unit.body
            .contains(r#"<pre id="payload">&lt;script&gt;alert('pwned')&lt;/script&gt;</pre>"#),
        "{}",
        unit.body
    );
    assert!(unit.body.contains(r#"<dd id="reason">malformed</dd>"#));
    assert!(unit.body.contains(r#"<dd id="delivery-count">1</dd>"#));
    assert!(!unit.body.contains("<script>"));

    let missing = send(
        &app,
        bearer(get("/admin/d/orders.dead-letter/u/nope"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(missing.status, StatusCode::NOT_FOUND);
    let unknown = send(
        &app,
        bearer(get("/admin/d/elsewhere/u/o-1"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(unknown.status, StatusCode::NOT_FOUND);
}

#[tokio::test]
async fn a_post_without_the_csrf_token_is_refused_and_changes_nothing() {
    let broker = seeded().await;
    let app = app(&broker);
    for body in [
        "",
        "csrf=",
        "csrf=0000000000000000000000000000000000000000000000000000000000000000",
    ] {
        for uri in [
            "/admin/d/orders.dead-letter/u/o-1/redrive",
            "/admin/d/orders.dead-letter/u/o-1/purge",
        ] {
            let answer = send(&app, bearer(form(uri)).body(Body::from(body)).unwrap()).await;
            assert_eq!(answer.status, StatusCode::FORBIDDEN, "POST {uri} {body:?}");
        }
        let group = format!("{body}&source=orders&reason=malformed");
        let answer = send(
            &app,
            bearer(form("/admin/d/orders.dead-letter/group/purge"))
                .body(Body::from(group))
                .unwrap(),
        )
        .await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN);
    }
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 3);
    assert_eq!(broker.depth("orders"), 0);
}

#[tokio::test]
async fn redrive_purge_and_edit_act_on_the_dead_letter_and_say_so() {
    let broker = seeded().await;
    let app = app(&broker);
    let overview = send(&app, bearer(get("/admin")).body(Body::empty()).unwrap()).await;
    let csrf = csrf_of(&overview.body);
    let post = |uri: &str, body: String| bearer(form(uri)).body(Body::from(body)).unwrap();

    // Redrive one unit: back in its source under its own id.
    let answer = send(
        &app,
        post(
            "/admin/d/orders.dead-letter/u/o-3/redrive",
            format!("csrf={csrf}"),
        ),
    )
    .await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER);
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=redriven&n=1");
    assert_eq!(broker.depth("orders"), 1);
    let after = send(
        &app,
        bearer(get("/admin?done=redriven&n=1"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(
        after.body.contains(
            r#"<p id="flash">Redrove 1 unit to where it came from, under its own id.</p>"#
        ),
        "{}",
        after.body
    );
    // A `done` the console did not send says nothing.
    let forged = send(
        &app,
        bearer(get("/admin?done=%3Cb%3Ehi&n=1"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(!forged.body.contains(r#"id="flash""#));

    // Edit and redrive: the operator's payload, the edit recorded in the headers.
    let answer = send(
        &app,
        post(
            "/admin/d/orders.dead-letter/u/o-1/edit",
            format!("csrf={csrf}&payload=%7B%22n%22%3A%201%7D%0D%0A"),
        ),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=edited&n=1");
    assert_eq!(broker.depth("orders"), 2);
    let answer = send(
        &app,
        post(
            "/admin/d/orders.dead-letter/u/o-1/edit",
            format!("csrf={csrf}&payload=1"),
        ),
    )
    .await;
    assert_eq!(
        answer.headers[header::LOCATION],
        "/admin?done=gone&n=0",
        "o-1 is no longer dead"
    );

    // Purge the rest of the malformed group, then the other dead letter's unit.
    let answer = send(
        &app,
        post(
            "/admin/d/orders.dead-letter/group/purge",
            format!("csrf={csrf}&source=orders&reason=malformed"),
        ),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=purged&n=1");
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 0);
    let answer = send(
        &app,
        post(
            "/admin/d/invoices.dead-letter/group/redrive",
            format!("csrf={csrf}&source=invoices&reason=malformed"),
        ),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=redriven&n=1");
    assert_eq!(broker.depth("invoices"), 1);

    // What came back to `orders`: o-3 as it was, o-1 edited, both under their own ids.
    let mut source = broker.consume("orders");
    let mut back = Vec::new();
    for _ in 0..2 {
        let (unit, _handle) = delivery::transport::Source::receive(&mut source)
            .await
            .unwrap()
            .unwrap();
        back.push(unit);
    }
    back.sort_by(|a, b| a.id().as_str().cmp(b.id().as_str()));
    assert_eq!(back[0].id().as_str(), "o-1");
    assert_eq!(
        &back[0].payload()[..],
        b"{\"n\": 1}\n",
        "CRLF from the browser back to LF"
    );
    assert_eq!(
        back[0].headers().get_str(delivery::headers::EDITED),
        Some("true")
    );
    assert!(
        back[0]
            .headers()
            .get_str(delivery::headers::ORIGINAL_SHA256)
            .is_some()
    );
    assert_eq!(back[1].id().as_str(), "o-3");
    assert_eq!(&back[1].payload()[..], b"13");
    assert_eq!(back[1].headers().get_str(delivery::headers::EDITED), None);
}

#[test]
#[should_panic(expected = "at least 16 characters")]
fn a_short_token_is_refused() {
    let _ = Console::new("short").router();
}

/// The service's own check in place of the token's: a header its proxy sets.
async fn operators_only(
    request: axum::extract::Request,
    next: axum::middleware::Next,
) -> axum::response::Response {
    use axum::response::IntoResponse as _;
    match request.headers().get("x-operator") {
        Some(who) if who == "ada" => next.run(request).await,
        _ => StatusCode::UNAUTHORIZED.into_response(),
    }
}

#[tokio::test]
async fn behind_the_services_own_auth_layer_the_layer_decides_and_csrf_still_holds() {
    let broker = seeded().await;
    let console = Console::new(TOKEN)
        .dead_letters(broker.dead_letters("orders"))
        .auth_layer(axum::middleware::from_fn(operators_only));
    let app = Router::new().nest("/ops", console.router());

    // The token is no credential here: only the layer admits.
    let answer = send(&app, bearer(get("/ops")).body(Body::empty()).unwrap()).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let answer = send(&app, get("/ops/nope").body(Body::empty()).unwrap()).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let answer = send(
        &app,
        get("/ops")
            .header("x-operator", "ada")
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::OK);
    assert!(
        answer
            .body
            .contains(r#"href="/ops/d/orders.dead-letter?source=orders&amp;reason=rejected""#)
    );
    let csrf = csrf_of(&answer.body);

    let purge = |body: String| {
        form("/ops/d/orders.dead-letter/u/o-1/purge")
            .header("x-operator", "ada")
            .body(Body::from(body))
            .unwrap()
    };
    let answer = send(&app, purge("csrf=wrong".to_owned())).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 3);
    let answer = send(&app, purge(format!("csrf={csrf}"))).await;
    assert_eq!(answer.headers[header::LOCATION], "/ops?done=purged&n=1");
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 2);
}

/// Refuses every record: each is dead on its first attempt.
#[cfg(feature = "sqlite")]
struct Refuse;

#[cfg(feature = "sqlite")]
impl delivery::outbox::Relay<()> for Refuse {
    fn call(
        &self,
        _record: &delivery::outbox::Record,
        _state: &(),
    ) -> impl Future<Output = delivery::outbox::Attempt> + Send + 'static {
        std::future::ready(delivery::outbox::Attempt::Failed(HandlerError::reject(
            "refused by the receiver",
        )))
    }
}

/// An outbox's dead records in the console: grouped under their topic, shown, redriven edited
/// (the record pending again with the operator's payload and the edit in its headers).
#[cfg(feature = "sqlite")]
#[tokio::test]
async fn an_outbox_stores_dead_records_are_operated_in_the_console() {
    use delivery::outbox::{NewRecord, Outbox, Relayer, Status};

    let pool = delivery::sqlx::SqlitePool::connect("sqlite::memory:")
        .await
        .unwrap();
    let outbox = Outbox::new();
    let store = outbox.sqlite(pool.clone());
    store.migrate().await.unwrap();
    let mut tx = pool.begin().await.unwrap();
    for (id, payload) in [("ev-1", "{\"n\":-1}"), ("ev-2", "<i>x</i>")] {
        let record = NewRecord::new("orders.events", payload.as_bytes().to_vec()).id(id);
        outbox.write(&mut tx, record).await.unwrap();
    }
    tx.commit().await.unwrap();
    Relayer::new(store.clone())
        .poll_interval(std::time::Duration::from_millis(10))
        .shutdown_on(store.idle())
        .run(Refuse)
        .await;

    let app = Router::new().nest(
        "/admin",
        Console::new(TOKEN).dead_letters(store.clone()).router(),
    );
    let overview = send(&app, bearer(get("/admin")).body(Body::empty()).unwrap()).await;
    assert!(
        overview.body.contains(r#"<tr class="group" data-source="orders.events" data-reason="rejected"><td>orders.events</td><td>rejected</td><td class="count">2</td>"#),
        "{}",
        overview.body
    );
    let csrf = csrf_of(&overview.body);
    let page = send(
        &app,
        bearer(get("/admin/d/delivery_outbox/u/ev-2"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(
        page.body
            .contains(r#"<pre id="payload">&lt;i&gt;x&lt;/i&gt;</pre>"#),
        "{}",
        page.body
    );

    let body = format!("csrf={csrf}&payload=%7B%22n%22%3A1%7D");
    let answer = send(
        &app,
        bearer(form("/admin/d/delivery_outbox/u/ev-1/edit"))
            .body(Body::from(body))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=edited&n=1");
    let record = store.get(&"ev-1".into()).await.unwrap().unwrap();
    assert_eq!(record.status, Status::Pending);
    assert_eq!(&record.payload[..], b"{\"n\":1}");
    assert_eq!(
        delivery::dead_letter::DeadLetters::count(&store)
            .await
            .unwrap(),
        1
    );
}

/// Signs in through the form: the `Set-Cookie` header, and the `name=value` pair a browser sends
/// back.
async fn sign_in(app: &Router) -> (String, String) {
    let set = sign_in_as(app, form("/admin/sign-in")).await;
    let pair = set.split(';').next().unwrap().to_owned();
    (set, pair)
}

/// The `Set-Cookie` header of a sign-in with the token sent as `request`.
async fn sign_in_as(app: &Router, request: axum::http::request::Builder) -> String {
    let body = Body::from(format!("token={TOKEN}"));
    let answer = send(app, request.body(body).unwrap()).await;
    assert_eq!(answer.status, StatusCode::SEE_OTHER, "{}", answer.body);
    answer.headers[header::SET_COOKIE]
        .to_str()
        .unwrap()
        .to_owned()
}

/// The overview as the browser holding `cookie` gets it.
async fn overview_with(app: &Router, cookie: &str) -> Answer {
    send(
        app,
        get("/admin")
            .header(header::COOKIE, cookie)
            .body(Body::empty())
            .unwrap(),
    )
    .await
}

#[tokio::test]
async fn each_sign_in_is_its_own_session_with_its_own_csrf_value_and_signing_out_ends_it() {
    let broker = seeded().await;
    let app = app(&broker);
    let (_, first) = sign_in(&app).await;
    let (_, second) = sign_in(&app).await;
    assert_ne!(first, second, "two sign-ins, two sessions");
    let first_csrf = csrf_of(&overview_with(&app, &first).await.body);
    let second_csrf = csrf_of(&overview_with(&app, &second).await.body);
    assert_ne!(first_csrf, second_csrf, "a CSRF value per session");

    // One session's CSRF value is no good with another session's cookie.
    let purge = |cookie: &str, csrf: &str| {
        form("/admin/d/orders.dead-letter/u/o-1/purge")
            .header(header::COOKIE, cookie)
            .body(Body::from(format!("csrf={csrf}")))
            .unwrap()
    };
    let answer = send(&app, purge(&second, &first_csrf)).await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 3);

    // Signing out ends the session on the server: its cookie admits nobody afterwards.
    let answer = send(
        &app,
        form("/admin/sign-out")
            .header(header::COOKIE, &first)
            .body(Body::from(format!("csrf={first_csrf}")))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    let answer = overview_with(&app, &first).await;
    assert_eq!(
        answer.status,
        StatusCode::UNAUTHORIZED,
        "the cookie of a signed-out session"
    );
    let answer = send(&app, purge(&first, &first_csrf)).await;
    assert_eq!(answer.status, StatusCode::UNAUTHORIZED);
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 3);
    // The other session goes on.
    assert_eq!(overview_with(&app, &second).await.status, StatusCode::OK);
}

#[tokio::test(start_paused = true)]
async fn a_session_expires_after_twelve_hours_by_default() {
    let broker = seeded().await;
    let app = app(&broker);
    let (set, cookie) = sign_in(&app).await;
    assert!(set.contains("Max-Age=43200"), "{set}");
    tokio::time::advance(std::time::Duration::from_secs(12 * 3600 - 60)).await;
    assert_eq!(overview_with(&app, &cookie).await.status, StatusCode::OK);
    tokio::time::advance(std::time::Duration::from_secs(61)).await;
    let answer = overview_with(&app, &cookie).await;
    assert_eq!(
        answer.status,
        StatusCode::UNAUTHORIZED,
        "a session 12 h old"
    );
    assert!(answer.body.contains(r#"id="sign-in""#));

    // Shorter, as the service sets it.
    let app = mounted(
        Console::new(TOKEN)
            .dead_letters(broker.dead_letters("orders"))
            .session_ttl(std::time::Duration::from_secs(15 * 60)),
    );
    let (set, cookie) = sign_in(&app).await;
    assert!(set.contains("Max-Age=900"), "{set}");
    tokio::time::advance(std::time::Duration::from_secs(14 * 60)).await;
    assert_eq!(overview_with(&app, &cookie).await.status, StatusCode::OK);
    tokio::time::advance(std::time::Duration::from_secs(60)).await;
    assert_eq!(
        overview_with(&app, &cookie).await.status,
        StatusCode::UNAUTHORIZED
    );
}

#[tokio::test]
async fn the_cookie_is_secure_when_the_request_came_over_tls() {
    let broker = seeded().await;
    let app = app(&broker);
    let set = sign_in_as(&app, form("https://console.example/admin/sign-in")).await;
    assert!(set.contains("; Secure"), "{set}");
    // Over plain HTTP, and with a proxy's word the console was not told to trust: not Secure
    // (a browser would drop it).
    let forwarded = || form("/admin/sign-in").header("x-forwarded-proto", "https");
    let set = sign_in_as(&app, forwarded()).await;
    assert!(!set.contains("Secure"), "{set}");

    // Behind a proxy the console was told to trust: its word, for the cookie and the origin.
    let proxied = mounted(
        Console::new(TOKEN)
            .dead_letters(broker.dead_letters("orders"))
            .trust_forwarded_headers(true),
    );
    let request = forwarded()
        .header(header::HOST, "127.0.0.1:8080")
        .header("x-forwarded-host", "ops.example")
        .header(header::ORIGIN, "https://ops.example");
    let set = sign_in_as(&proxied, request).await;
    assert!(set.contains("; Secure"), "{set}");
    let request = form("/admin/sign-in").header("x-forwarded-proto", "http");
    let set = sign_in_as(&proxied, request).await;
    assert!(!set.contains("Secure"), "{set}");

    // A service serving TLS itself over HTTP/1.1 says so: every cookie Secure, its clearing too.
    let tls = mounted(
        Console::new(TOKEN)
            .dead_letters(broker.dead_letters("orders"))
            .served_over_tls(),
    );
    let (set, cookie) = sign_in(&tls).await;
    assert!(set.contains("; Secure"), "{set}");
    let csrf = csrf_of(&overview_with(&tls, &cookie).await.body);
    let answer = send(
        &tls,
        form("/admin/sign-out")
            .header(header::COOKIE, &cookie)
            .body(Body::from(format!("csrf={csrf}")))
            .unwrap(),
    )
    .await;
    let set = answer.headers[header::SET_COOKIE].to_str().unwrap();
    assert!(
        set.contains("Max-Age=0") && set.contains("; Secure"),
        "{set}"
    );
}

#[tokio::test]
async fn a_post_from_another_origin_is_refused_even_with_the_cookie_and_the_csrf_value() {
    let broker = seeded().await;
    let app = app(&broker);
    let (_, cookie) = sign_in(&app).await;
    let csrf = csrf_of(&overview_with(&app, &cookie).await.body);
    let purge = |name: &str, value: &str| {
        form("/admin/d/orders.dead-letter/u/o-1/purge")
            .header(header::HOST, "console.example")
            .header(header::COOKIE, &cookie)
            .header(name, value)
            .body(Body::from(format!("csrf={csrf}")))
            .unwrap()
    };
    for (name, value) in [
        ("origin", "https://evil.example"),
        ("origin", "null"),
        ("origin", "http://console.example.evil.example"),
        ("referer", "https://evil.example/console.example/admin"),
        ("sec-fetch-site", "cross-site"),
        ("sec-fetch-site", "same-site"),
    ] {
        let answer = send(&app, purge(name, value)).await;
        assert_eq!(answer.status, StatusCode::FORBIDDEN, "{name}: {value}");
        assert_eq!(
            broker.dead_letters("orders").count().await.unwrap(),
            3,
            "{name}: {value}"
        );
    }
    // A sign-in from another origin signs nobody in.
    let answer = send(
        &app,
        form("/admin/sign-in")
            .header(header::HOST, "console.example")
            .header(header::ORIGIN, "https://evil.example")
            .body(Body::from(format!("token={TOKEN}")))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.status, StatusCode::FORBIDDEN);
    assert!(answer.headers.get(header::SET_COOKIE).is_none());
    // The console's own origin, as a browser names it.
    let answer = send(&app, purge("origin", "http://console.example")).await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=purged&n=1");
    let answer = send(
        &app,
        form("/admin/d/orders.dead-letter/u/o-3/purge")
            .header(header::HOST, "console.example")
            .header(header::COOKIE, &cookie)
            .header(
                header::REFERER,
                "http://console.example/admin/d/orders.dead-letter/u/o-3",
            )
            .body(Body::from(format!("csrf={csrf}")))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=purged&n=1");
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 1);
}

#[tokio::test]
async fn the_mount_with_a_trailing_slash_answers_as_the_mount_does() {
    let broker = seeded().await;
    let app = app(&broker);
    let bare = send(&app, get("/admin/").body(Body::empty()).unwrap()).await;
    assert_eq!(bare.status, StatusCode::UNAUTHORIZED, "{}", bare.body);
    assert!(bare.body.contains(r#"id="sign-in""#));
    assert_eq!(bare.headers[header::CACHE_CONTROL], "no-store");
    assert!(bare.headers.contains_key(header::CONTENT_SECURITY_POLICY));
    let page = send(&app, bearer(get("/admin/")).body(Body::empty()).unwrap()).await;
    assert_eq!(page.status, StatusCode::OK);
    assert!(page.body.contains(r#"data-name="orders.dead-letter""#));
    assert!(
        page.body
            .contains(r#"href="/admin/d/orders.dead-letter?source=orders&amp;reason=malformed""#),
        "links stay within the mount: {}",
        page.body
    );
    let query = send(
        &app,
        bearer(get("/admin/?done=purged&n=2"))
            .body(Body::empty())
            .unwrap(),
    )
    .await;
    assert!(query.body.contains("Purged 2 units"), "{}", query.body);
}

/// Browsers send a textarea's line breaks as CRLF: a payload whose lines end in CRLF comes back
/// from an edit byte for byte, through the dead letter again.
#[tokio::test]
async fn an_edited_payload_with_crlf_lines_keeps_its_bytes() {
    let broker = seeded().await;
    let original = "name,qty\r\nwidget,0\r\n";
    broker.publish("orders", Unit::new("csv-1", original));
    consume(&broker, "orders").await;
    let app = app(&broker);
    let page = bearer_get(&app, "/admin/d/orders.dead-letter/u/csv-1").await;
    // The textarea holds the payload's own bytes, after the newline the HTML parser drops.
    assert!(
        page.body
            .contains("spellcheck=\"false\">\nname,qty\r\nwidget,0\r\n</textarea>"),
        "{}",
        page.body
    );
    let csrf = csrf_of(&page.body);
    // What a browser submits for the edited textarea: every line break as CRLF.
    let edited = "name,qty\r\nwidget,1\r\n";
    let body = format!(
        "csrf={csrf}&payload={}",
        edited.replace("\r\n", "%0D%0A").replace(',', "%2C")
    );
    let answer = send(
        &app,
        bearer(form("/admin/d/orders.dead-letter/u/csv-1/edit"))
            .body(Body::from(body))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=edited&n=1");
    // Still no JSON: dead-lettered again, with the operator's bytes.
    consume(&broker, "orders").await;
    let record = broker
        .dead_letters("orders")
        .peek("csv-1")
        .expect("dead-lettered again");
    assert_eq!(
        std::str::from_utf8(record.unit.payload()).unwrap(),
        edited,
        "byte for byte"
    );
    assert_eq!(
        record.unit.headers().get_str(delivery::headers::EDITED),
        Some("true")
    );
}

/// A group's actions select by id, so they act on the copies of its ids in other groups too: its
/// page says how many before the operator presses the button.
#[tokio::test]
async fn a_group_page_names_the_copies_its_actions_touch_in_other_groups() {
    let broker = seeded().await;
    // o-1 again, refused this time: one copy malformed, one rejected.
    broker.publish("orders", Unit::new("o-1", "13"));
    consume(&broker, "orders").await;
    let app = app(&broker);
    let page = bearer_get(
        &app,
        "/admin/d/orders.dead-letter?source=orders&reason=malformed",
    )
    .await;
    assert!(
        page.body.contains("1 more copy in other groups") && page.body.contains("3 copies in all"),
        "{}",
        page.body
    );
    let csrf = csrf_of(&page.body);
    let answer = send(
        &app,
        bearer(form("/admin/d/orders.dead-letter/group/redrive"))
            .body(Body::from(format!(
                "csrf={csrf}&source=orders&reason=malformed"
            )))
            .unwrap(),
    )
    .await;
    assert_eq!(answer.headers[header::LOCATION], "/admin?done=redriven&n=3");
    assert_eq!(broker.dead_letters("orders").count().await.unwrap(), 1);
    // A group without copies elsewhere says nothing of them.
    let page = bearer_get(
        &app,
        "/admin/d/invoices.dead-letter?source=invoices&reason=malformed",
    )
    .await;
    assert!(!page.body.contains(r#"id="copies""#), "{}", page.body);
}
