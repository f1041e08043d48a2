//! Cross-checks against independent implementations (issue 3): a delivery signed by another
//! implementation verifies with ours, one signed by ours (`delivery_core::testing::sign`) verifies
//! with theirs, and a tampered one fails with both.
//!
//! - Standard Webhooks: `standardwebhooks`, the specification's own Rust library
//!   (github.com/standard-webhooks/standard-webhooks, `libraries/rust`). It computes the HMAC
//!   with the `hmac-sha256` crate, not RustCrypto's `hmac`/`sha2` that ours uses, so the
//!   primitive is independent too. Both directions.
//! - GitHub: `tower-github-webhook`, a tower middleware checking `X-Hub-Signature-256` over the
//!   streamed body. It only verifies: ours signs, theirs verifies. The other direction is GitHub's
//!   own published vector, in `tests/webhook_verify.rs`.
//!
//! Stripe, Slack and Shopify have no maintained crate of reasonable size that implements their
//! scheme (the Stripe one is part of `async-stripe`'s generated API, the Slack one of
//! `slack-morphism`'s client, the Shopify ones of HTTP clients); they are checked against their
//! SDKs' published vectors in `tests/webhook_verify.rs` instead.

use std::convert::Infallible;
use std::future::{Ready, poll_fn, ready};
use std::task::{Context, Poll};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD as B64;
use bytes::Bytes;
use delivery_core::testing::{Signer, sign};
use delivery_core::webhook::{Scheme, Verifier, VerifyError};
use http::{HeaderMap, HeaderValue, Request, Response, StatusCode};
use http_body_util::Full;
use proptest::prelude::*;
use tower_service::Service;

fn at(secs: u64) -> SystemTime {
    UNIX_EPOCH + Duration::from_secs(secs)
}

fn now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap()
        .as_secs()
}

// ---------------------------------------------------------------------------------------------
// Standard Webhooks, against `standardwebhooks`.

fn sw_headers(id: &str, timestamp: u64, signature: &str) -> HeaderMap {
    let mut headers = HeaderMap::new();
    headers.insert("webhook-id", HeaderValue::from_str(id).unwrap());
    headers.insert("webhook-timestamp", HeaderValue::from(timestamp));
    headers.insert(
        "webhook-signature",
        HeaderValue::from_str(signature).unwrap(),
    );
    headers
}

/// Signed by theirs at `timestamp`, verified by ours as of `timestamp`; the same headers as ours
/// builds; and a changed body refused by ours.
fn theirs_to_ours(
    secret: &str,
    id: &str,
    timestamp: u64,
    body: &[u8],
) -> Result<(), TestCaseError> {
    let theirs = standardwebhooks::Webhook::new(secret).unwrap();
    let signature = theirs.sign(id, timestamp as i64, body).unwrap();
    let headers = sw_headers(id, timestamp, &signature);
    let verifier = Verifier::new(Scheme::StandardWebhooks, secret);
    prop_assert_eq!(verifier.verify_at(&headers, body, at(timestamp)), Ok(()));
    let unit_id = verifier.unit_id(&headers, body);
    prop_assert_eq!(unit_id.as_deref(), Some(id));
    let ours = Signer::new(Scheme::StandardWebhooks, secret)
        .id(id)
        .at(at(timestamp))
        .headers(body);
    prop_assert_eq!(&ours["webhook-signature"], &signature);
    prop_assert_eq!(&ours["webhook-id"], id);
    let timestamp_text = timestamp.to_string();
    prop_assert_eq!(&ours["webhook-timestamp"], timestamp_text.as_str());
    let changed = [body, b" "].concat();
    prop_assert_eq!(
        verifier.verify_at(&headers, &changed, at(timestamp)),
        Err(VerifyError::Mismatch)
    );
    Ok(())
}

/// Signed by ours now, verified by theirs (which reads the clock); a changed body and another
/// secret refused by theirs.
fn ours_to_theirs(secret: &str, id: &str, body: &[u8]) -> Result<(), TestCaseError> {
    let theirs = standardwebhooks::Webhook::new(secret).unwrap();
    let headers = Signer::new(Scheme::StandardWebhooks, secret)
        .id(id)
        .headers(body);
    prop_assert!(theirs.verify(body, &headers).is_ok(), "{headers:?}");
    let changed = [body, b"x"].concat();
    prop_assert!(matches!(
        theirs.verify(&changed, &headers),
        Err(standardwebhooks::WebhookError::InvalidSignature)
    ));
    let other = Signer::new(
        Scheme::StandardWebhooks,
        "whsec_b3RoZXItc2VjcmV0LW90aGVyLXNlY3JldA==",
    )
    .id(id)
    .headers(body);
    prop_assert!(matches!(
        theirs.verify(body, &other),
        Err(standardwebhooks::WebhookError::InvalidSignature)
    ));
    Ok(())
}

#[test]
fn standard_webhooks_signed_by_theirs_verifies_with_ours() {
    // The specification's vector and the Rust library's own test vector, then others.
    let cases: [(&str, &str, u64, &[u8]); 5] = [
        (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_p5jXN8AQM9LWM0D4loKWxJek",
            1_614_265_330,
            br#"{"test": 2432232314}"#,
        ),
        (
            "whsec_C2FVsBQIhrscChlQIMV+b5sSYspob7oD",
            "msg_27UH4WbU6Z5A5EzD8u03UvzRbpk",
            1_649_367_553,
            br#"{"email":"test@example.com","username":"test_user"}"#,
        ),
        // Without the `whsec_` prefix, as both accept.
        (
            "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_2",
            1_700_000_000,
            b"{}",
        ),
        (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "msg_3",
            1_700_000_000,
            b"",
        ),
        (
            "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw",
            "evt 4 with spaces",
            4_000_000_000,
            "{\"name\":\"Zoë ✓\",\n\"nested\":{\"a\":[1,2,3]}}".as_bytes(),
        ),
    ];
    for (secret, id, timestamp, body) in cases {
        theirs_to_ours(secret, id, timestamp, body).unwrap();
    }
}

#[test]
fn standard_webhooks_signed_by_ours_verifies_with_theirs() {
    let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
    ours_to_theirs(
        secret,
        "msg_p5jXN8AQM9LWM0D4loKWxJek",
        br#"{"test": 2432232314}"#,
    )
    .unwrap();
    ours_to_theirs("MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw", "msg_1", b"").unwrap();

    // The one-line helper, and the id it derives from the body.
    let body = br#"{"type":"user.created"}"#;
    let theirs = standardwebhooks::Webhook::new(secret).unwrap();
    let headers = sign(&Scheme::StandardWebhooks, secret, body, SystemTime::now());
    assert!(theirs.verify(body, &headers).is_ok());
    assert!(headers["webhook-id"].to_str().unwrap().starts_with("msg_"));

    // Signed by ours ten minutes ago, or ten minutes ahead: theirs refuses the timestamp too.
    for (when, expected) in [(now() - 600, "too old"), (now() + 600, "too far in future")] {
        let headers = Signer::new(Scheme::StandardWebhooks, secret)
            .at(at(when))
            .headers(body);
        let err = theirs.verify(body, &headers).unwrap_err();
        assert!(err.to_string().contains(expected), "{err}");
    }
}

// ---------------------------------------------------------------------------------------------
// GitHub, against `tower-github-webhook`.

/// The service behind theirs: answers 200 with the body it was handed.
#[derive(Clone)]
struct Echo;

impl Service<Request<Full<Bytes>>> for Echo {
    type Response = Response<Full<Bytes>>;
    type Error = Infallible;
    type Future = Ready<Result<Self::Response, Infallible>>;

    fn poll_ready(&mut self, _: &mut Context<'_>) -> Poll<Result<(), Infallible>> {
        Poll::Ready(Ok(()))
    }

    fn call(&mut self, request: Request<Full<Bytes>>) -> Self::Future {
        ready(Ok(Response::new(request.into_body())))
    }
}

/// The status theirs answers for a request made by our `Signer`.
fn github_status(
    runtime: &tokio::runtime::Runtime,
    secret: &str,
    request: Request<Vec<u8>>,
) -> StatusCode {
    let mut theirs = tower_github_webhook::ValidateGitHubWebhook::new(secret, Echo);
    let request = request.map(|body| Full::new(Bytes::from(body)));
    runtime.block_on(async {
        poll_fn(|cx| Service::<Request<Full<Bytes>>>::poll_ready(&mut theirs, cx))
            .await
            .unwrap();
        theirs.call(request).await.unwrap().status()
    })
}

fn runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap()
}

#[test]
fn github_signed_by_ours_verifies_with_theirs() {
    let runtime = runtime();
    let secret = "It's a Secret to Everybody";
    let bodies: [&[u8]; 4] = [
        b"Hello, World!",
        br#"{"action":"opened","number":1}"#,
        b"",
        b"\xff\xfe\x00 not UTF-8",
    ];
    for body in bodies {
        let signer = Signer::new(Scheme::GitHub, secret).header("X-GitHub-Event", "push");
        let request = signer.request("/webhooks/github", body);
        assert_eq!(request.headers()["x-github-event"], "push");
        assert_eq!(
            github_status(&runtime, secret, request),
            StatusCode::OK,
            "{body:?}"
        );

        // A changed body, another secret: refused by theirs, as by ours.
        let mut changed = signer.request("/webhooks/github", body);
        changed.body_mut().push(b'!');
        assert_eq!(
            github_status(&runtime, secret, changed),
            StatusCode::UNAUTHORIZED
        );
        let other = Signer::new(Scheme::GitHub, "another secret").request("/", body);
        assert_eq!(
            github_status(&runtime, secret, other),
            StatusCode::UNAUTHORIZED
        );
    }
    // GitHub's published vector, as ours signs it.
    let headers = sign(&Scheme::GitHub, secret, b"Hello, World!", SystemTime::now());
    assert_eq!(
        headers["x-hub-signature-256"],
        "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17"
    );
}

// ---------------------------------------------------------------------------------------------
// Properties: any body, id, secret and time.

fn sw_secret() -> impl Strategy<Value = String> {
    (prop::collection::vec(any::<u8>(), 1..64), any::<bool>()).prop_map(|(key, prefixed)| {
        let encoded = B64.encode(key);
        if prefixed {
            format!("whsec_{encoded}")
        } else {
            encoded
        }
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn standard_webhooks_both_ways(
        secret in sw_secret(),
        id in "[A-Za-z0-9_-]{1,40}",
        timestamp in 1_000_000_000u64..4_000_000_000,
        // Theirs signs UTF-8 text only.
        body in any::<String>(),
    ) {
        theirs_to_ours(&secret, &id, timestamp, body.as_bytes())?;
        ours_to_theirs(&secret, &id, body.as_bytes())?;
    }

    #[test]
    fn github_ours_to_theirs(
        secret in "[ -~]{1,64}",
        body in prop::collection::vec(any::<u8>(), 0..2048),
    ) {
        let runtime = runtime();
        let request = Signer::new(Scheme::GitHub, secret.as_str()).request("/", body.clone());
        prop_assert_eq!(github_status(&runtime, &secret, request), StatusCode::OK);
        if !body.is_empty() {
            let mut changed = body.clone();
            changed[0] ^= 1;
            let mut request = Signer::new(Scheme::GitHub, secret.as_str()).request("/", body);
            *request.body_mut() = changed;
            prop_assert_eq!(github_status(&runtime, &secret, request), StatusCode::UNAUTHORIZED);
        }
    }
}
