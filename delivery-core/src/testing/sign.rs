//! Signing deliveries exactly as the providers do, so a webhook handler is tested with the headers
//! it will really receive.

use std::time::{SystemTime, UNIX_EPOCH};

use http::{HeaderMap, HeaderName, HeaderValue, Request, header};
use sha2::{Digest as _, Sha256};

use crate::webhook::{Scheme, Secret};

/// The headers `scheme`'s provider sends with `body`, signed with `secret` at `at`: what a handler
/// under test receives, in one line.
///
/// The same as [`Signer::new(scheme, secret).at(at).headers(body)`](Signer::headers), which says
/// which headers each scheme gets and lets you set the delivery's id, extra headers, or build the
/// whole [`http::Request`]. The delivery's id (Standard Webhooks `webhook-id`, GitHub
/// `X-GitHub-Delivery`, Shopify `X-Shopify-Webhook-Id`) is derived from the body: signing the same
/// body twice gives a redelivery of the same delivery, as the provider's retry would be.
///
/// ```
/// use delivery::testing::sign;
/// use delivery::webhook::{Scheme, Verifier, VerifyError};
/// use std::time::{Duration, UNIX_EPOCH};
///
/// let at = UNIX_EPOCH + Duration::from_secs(1_700_000_000);
/// let body = br#"{"id":"evt_1","object":"event","type":"invoice.paid"}"#;
///
/// let headers = sign(&Scheme::Stripe, "whsec_test_secret", body, at);
/// assert!(headers["stripe-signature"].to_str().unwrap().starts_with("t=1700000000,v1="));
///
/// let verifier = Verifier::new(Scheme::Stripe, "whsec_test_secret");
/// assert_eq!(verifier.verify_at(&headers, body, at), Ok(()));
/// assert_eq!(verifier.unit_id(&headers, body).as_deref(), Some("evt_1"));
///
/// // Ten minutes later the same delivery is a replay.
/// let later = at + Duration::from_secs(600);
/// assert!(matches!(
///     verifier.verify_at(&headers, body, later),
///     Err(VerifyError::TimestampOutOfTolerance { .. })
/// ));
/// ```
///
/// # Panics
///
/// Where [`Signer::headers`] does: a secret the scheme cannot use, a misconfigured generic
/// scheme, or `at` before the Unix epoch.
pub fn sign(
    scheme: &Scheme,
    secret: impl Into<Secret>,
    body: impl AsRef<[u8]>,
    at: SystemTime,
) -> HeaderMap {
    Signer::new(scheme.clone(), secret).at(at).headers(body)
}

/// Signs deliveries as a provider does: the headers for a body, or a whole request, for testing a
/// webhook handler end to end through [`Verifier`](crate::webhook::Verifier).
///
/// Built like the verifier it tests — a [`Scheme`] and a secret as the provider hands it out (for
/// Stripe the whole `whsec_...` string, for Standard Webhooks `whsec_<base64>`) — then optionally
/// given a time ([`at`](Signer::at), the clock by default), a delivery id ([`id`](Signer::id)) and
/// headers of its own ([`header`](Signer::header)).
///
/// | scheme | headers |
/// |---|---|
/// | `GitHub` | `X-Hub-Signature-256: sha256=<hex>`, `X-GitHub-Delivery: <id>` |
/// | `Stripe` | `Stripe-Signature: t=<unix>,v1=<hex>` |
/// | `StandardWebhooks` | `webhook-id: <id>`, `webhook-timestamp: <unix>`, `webhook-signature: v1,<base64>` |
/// | `Slack` | `X-Slack-Request-Timestamp: <unix>`, `X-Slack-Signature: v0=<hex>` |
/// | `Shopify` | `X-Shopify-Hmac-Sha256: <base64>`, `X-Shopify-Webhook-Id: <id>` |
/// | `Hmac(..)` | its signature header, and its timestamp and id headers where it has them |
///
/// Every map also has `Content-Type: application/json` unless [`header`](Signer::header) sets
/// another (Slack's slash commands send `application/x-www-form-urlencoded`).
///
/// ```
/// use delivery::testing::Signer;
/// use delivery::webhook::{Scheme, Verifier};
///
/// let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
/// let body = br#"{"type":"user.created","data":{"id":"u_1"}}"#.to_vec();
///
/// // The request a Standard Webhooks sender makes, now, under the id `msg_1`.
/// let request = Signer::new(Scheme::StandardWebhooks, secret)
///     .id("msg_1")
///     .request("/webhooks", body);
/// assert_eq!(request.method(), "POST");
/// assert_eq!(request.headers()["webhook-id"], "msg_1");
///
/// // With axum: `app.oneshot(request.map(axum::body::Body::from)).await`. Here, the verifier:
/// let verifier = Verifier::new(Scheme::StandardWebhooks, secret);
/// let (parts, body) = request.into_parts();
/// assert_eq!(verifier.verify(&parts.headers, &body), Ok(()));
/// assert_eq!(verifier.unit_id(&parts.headers, &body).as_deref(), Some("msg_1"));
/// ```
#[derive(Clone, Debug)]
pub struct Signer {
    scheme: Scheme,
    secret: Secret,
    at: Option<SystemTime>,
    id: Option<String>,
    extra: HeaderMap,
}

impl Signer {
    /// A signer for `scheme` with `secret`, signing at the time it signs, with an id derived from
    /// the body.
    pub fn new(scheme: Scheme, secret: impl Into<Secret>) -> Self {
        Signer {
            scheme,
            secret: secret.into(),
            at: None,
            id: None,
            extra: HeaderMap::new(),
        }
    }

    /// Signs as of `at` rather than the clock: for [`Verifier::verify_at`], or a delivery made
    /// too long ago (a replay) or in the future.
    ///
    /// [`Verifier::verify_at`]: crate::webhook::Verifier::verify_at
    #[must_use]
    pub fn at(mut self, at: SystemTime) -> Self {
        self.at = Some(at);
        self
    }

    /// The delivery's id, for the schemes that send one in a header: Standard Webhooks
    /// `webhook-id` (which is also signed), GitHub `X-GitHub-Delivery`, Shopify
    /// `X-Shopify-Webhook-Id`, a generic scheme's id header. Stripe and Slack carry theirs in the
    /// body, which is yours to write.
    ///
    /// By default it is derived from the body, so that the same body signed twice is a
    /// redelivery; give two deliveries of one body different ids to make them different
    /// deliveries — for Standard Webhooks and a generic scheme that signs `{id}`. GitHub's and
    /// Shopify's id is not signed, so the unit's id is the body's digest whatever id is given
    /// here ([`Verifier::unit_id`](crate::webhook::Verifier::unit_id)): one body is one unit.
    #[must_use]
    pub fn id(mut self, id: impl Into<String>) -> Self {
        self.id = Some(id.into());
        self
    }

    /// Sets a header the provider sends besides the signature, replacing any of the same name:
    /// GitHub's `X-GitHub-Event`, Shopify's `X-Shopify-Topic`, `Content-Type`. It is set after
    /// the signature's headers, so it may also replace one of those, to test a tampered delivery.
    ///
    /// # Panics
    ///
    /// If `name` is not a header name or `value` not a header value.
    #[must_use]
    pub fn header(mut self, name: impl AsRef<str>, value: impl AsRef<str>) -> Self {
        let (name, value) = (name.as_ref(), value.as_ref());
        let Ok(header) = HeaderName::from_bytes(name.as_bytes()) else {
            panic!("{name:?} is not a valid header name");
        };
        let Ok(value) = HeaderValue::from_str(value) else {
            panic!("{value:?} is not a valid value for header {name:?}");
        };
        self.extra.insert(header, value);
        self
    }

    /// The headers the provider sends with `body` (the table above), signed over `body` byte for
    /// byte.
    ///
    /// # Panics
    ///
    /// If the scheme cannot use the secret (a Standard Webhooks secret that is not base64, an
    /// empty one), the scheme is a misconfigured [`HmacScheme`](crate::webhook::HmacScheme), the
    /// id is not visible ASCII, or the time is before the Unix epoch — each a mistake in the
    /// test, said in the panic's message.
    pub fn headers(&self, body: impl AsRef<[u8]>) -> HeaderMap {
        let body = body.as_ref();
        let at = self.at.unwrap_or_else(SystemTime::now);
        let Ok(since_epoch) = at.duration_since(UNIX_EPOCH) else {
            panic!("cannot sign a webhook at {at:?}, before the Unix epoch");
        };
        let id = match &self.id {
            Some(id) => id.clone(),
            None => default_id(&self.scheme, body),
        };
        let signed = self
            .scheme
            .sign(&self.secret, body, since_epoch.as_secs(), &id)
            .unwrap_or_else(|reason| panic!("cannot sign a {:?} webhook: {reason}", self.scheme));
        let mut headers = HeaderMap::with_capacity(signed.len() + self.extra.len() + 1);
        headers.insert(
            header::CONTENT_TYPE,
            HeaderValue::from_static("application/json"),
        );
        headers.extend(signed);
        for (name, value) in &self.extra {
            headers.insert(name, value.clone());
        }
        headers
    }

    /// The whole request: `POST uri` with [`headers`](Signer::headers) and `body`. Framework
    /// agnostic; with axum, `request.map(axum::body::Body::from)` is the request a
    /// `tower::ServiceExt::oneshot` test sends.
    ///
    /// # Panics
    ///
    /// Where [`headers`](Signer::headers) does, and if `uri` is not a valid URI.
    pub fn request(&self, uri: impl AsRef<str>, body: impl Into<Vec<u8>>) -> Request<Vec<u8>> {
        let body = body.into();
        let headers = self.headers(&body);
        let uri = uri.as_ref();
        let mut request = Request::post(uri)
            .body(body)
            .unwrap_or_else(|e| panic!("{uri:?} is not a valid request URI: {e}"));
        *request.headers_mut() = headers;
        request
    }
}

/// An id derived from the body, shaped like the provider's: `msg_...` for Standard Webhooks, a
/// UUID's layout otherwise. The same body gets the same id, as a redelivery does.
fn default_id(scheme: &Scheme, body: &[u8]) -> String {
    let digest = hex::encode(&Sha256::digest(body)[..16]);
    match scheme {
        Scheme::StandardWebhooks => format!("msg_{}", &digest[..24]),
        _ => format!(
            "{}-{}-{}-{}-{}",
            &digest[..8],
            &digest[8..12],
            &digest[12..16],
            &digest[16..20],
            &digest[20..]
        ),
    }
}
