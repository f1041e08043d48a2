//! Requests per second through a `#[webhook]` route against a plain axum route that does the same
//! work by hand — read the raw body, HMAC-SHA256 it (GitHub's scheme), compare in constant time,
//! then decode the JSON — both served on loopback in this process and driven by the same load
//! generator (keep-alive HTTP/1.1 clients, 32 at a time), interleaved over several rounds.
//!
//!     cargo bench --features axum --bench webhook_route
//!
//! Prints both rates and the ratio of medians.

use std::hint::black_box;
use std::net::SocketAddr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use axum::Router;
use axum::body::Bytes;
use axum::extract::State as AxumState;
use axum::http::{HeaderMap, StatusCode};
use axum::routing::post;
use delivery::webhook::{Scheme, route};
use delivery::{HandlerError, Json, State, webhook};
use hmac::{Hmac, KeyInit, Mac};
use serde::Deserialize;
use sha2::Sha256;

mod support;
use support::median;

const SECRET: &str = "benchmark secret";
const CLIENTS: usize = 32;
const ROUND: Duration = Duration::from_secs(3);
const ROUNDS: usize = 5;

#[derive(Deserialize)]
struct Push {
    #[serde(rename = "ref")]
    reference: String,
    after: String,
}

#[derive(Clone)]
struct Bench {
    secret: String,
}

#[webhook(scheme = github, secret = |s: &Bench| s.secret.clone())]
async fn on_push(State(_bench): State<Bench>, Json(push): Json<Push>) -> Result<(), HandlerError> {
    black_box((push.reference, push.after));
    Ok(())
}

/// The same work, written by hand: raw body, HMAC, constant-time compare, then parse.
async fn plain(AxumState(bench): AxumState<Bench>, headers: HeaderMap, body: Bytes) -> StatusCode {
    let Some(signature) = headers
        .get("x-hub-signature-256")
        .and_then(|v| v.to_str().ok())
    else {
        return StatusCode::UNAUTHORIZED;
    };
    let Some(Ok(expected)) = signature.strip_prefix("sha256=").map(hex::decode) else {
        return StatusCode::UNAUTHORIZED;
    };
    let mut mac = Hmac::<Sha256>::new_from_slice(bench.secret.as_bytes()).expect("any key length");
    mac.update(&body);
    if mac.verify_slice(&expected).is_err() {
        return StatusCode::UNAUTHORIZED;
    }
    match serde_json::from_slice::<Push>(&body) {
        Ok(push) => {
            black_box((push.reference, push.after));
            StatusCode::OK
        }
        Err(_) => StatusCode::BAD_REQUEST,
    }
}

async fn serve(router: Router) -> SocketAddr {
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, router).await.unwrap() });
    addr
}

/// Requests per second against `url` for [`ROUND`], from [`CLIENTS`] keep-alive clients.
async fn load(url: String, body: Arc<Vec<u8>>, headers: HeaderMap) -> f64 {
    let done = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let tasks: Vec<_> = (0..CLIENTS)
        .map(|_| {
            let (url, body, headers, done) =
                (url.clone(), body.clone(), headers.clone(), done.clone());
            tokio::spawn(async move {
                let client = reqwest::Client::new();
                while started.elapsed() < ROUND {
                    let response = client
                        .post(&url)
                        .headers(headers.clone())
                        .body(body.as_ref().clone())
                        .send()
                        .await
                        .unwrap();
                    assert_eq!(response.status(), StatusCode::OK);
                    done.fetch_add(1, Ordering::Relaxed);
                }
            })
        })
        .collect();
    for task in tasks {
        task.await.unwrap();
    }
    done.load(Ordering::Relaxed) as f64 / started.elapsed().as_secs_f64()
}

fn main() {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .enable_all()
        .build()
        .unwrap();
    rt.block_on(async {
        let state = Bench { secret: SECRET.to_owned() };
        let hooked = serve(
            Router::new().route("/webhooks", route(on_push, &state).expect("the secret is set")).with_state(state.clone()),
        )
        .await;
        let plain = serve(Router::new().route("/webhooks", post(plain)).with_state(state)).await;

        let body = Arc::new(
            serde_json::to_vec(&serde_json::json!({
                "ref": "refs/heads/main",
                "after": "6113728f27ae82c7b1a177c8d03f9e96e0adf246",
                "repository": {"full_name": "octo/hello", "private": false},
                "pusher": {"name": "octocat", "email": "octocat@example.com"},
                "commits": (0..8).map(|i| serde_json::json!({"id": format!("c{i}"), "message": "fix: a thing"})).collect::<Vec<_>>(),
            }))
            .unwrap(),
        );
        let headers = delivery::testing::Signer::new(Scheme::GitHub, SECRET).id("bench-delivery").headers(body.as_slice());

        let (mut with_macro, mut by_hand) = (Vec::new(), Vec::new());
        for round in 0..ROUNDS {
            let m = load(format!("http://{hooked}/webhooks"), body.clone(), headers.clone()).await;
            let h = load(format!("http://{plain}/webhooks"), body.clone(), headers.clone()).await;
            eprintln!("round {round}: #[webhook] {m:.0} req/s, by hand {h:.0} req/s");
            with_macro.push(m);
            by_hand.push(h);
        }
        let (m, h) = (median(with_macro), median(by_hand));
        println!("{} byte GitHub push, {CLIENTS} keep-alive clients, {ROUNDS} rounds of {ROUND:?}, medians:", body.len());
        println!("  plain axum route, HMAC by hand   {h:>10.0} req/s");
        println!("  #[webhook] route                 {m:>10.0} req/s   ratio {:.2}", m / h);
    });
}
