//! Webhook verification (rule 5): a third party's delivery is verified against the raw body it
//! signed, before the body is parsed.
//!
//! A [`Verifier`] holds a [`Scheme`] (GitHub, Stripe, Standard Webhooks, Slack, Shopify, or a
//! configured [`HmacScheme`]), one or more secrets, a timestamp tolerance and a body size limit.
//! It needs no HTTP framework: it takes an [`http::HeaderMap`] and the body's bytes, and answers
//! `Ok(())` or a [`VerifyError`] saying why the delivery is refused. A refused delivery is
//! answered with nothing written and is never retried into success.
//!
//! - The HMAC-SHA256 tag is compared in constant time, in one place.
//! - Several secrets are accepted at once while one is rotated ([`Verifier::also_accept`]); any
//!   secret may match any signature the delivery carries.
//! - The body limit ([`Verifier::max_body`], 1 MiB by default) applies before any hashing.
//! - A signed timestamp further than the tolerance from the verifier's clock, in the past (a
//!   replay) or the future, is refused.
//! - A missing, repeated or malformed header is its own [`VerifyError`], naming the header.
//! - Secrets never appear in `Debug`, `Display` or any error ([`Secret`]).
//! - The unit's id is taken only from what the signature covers ([`Verifier::unit_id`]): a
//!   provider's unsigned delivery-id header (GitHub, Shopify) is not trusted for deduplication,
//!   since a captured request replayed under a fresh id would otherwise be a new unit.
//! - The unit's headers never carry the request's credentials ([`Verifier::unit_headers`]):
//!   `Authorization`, `Cookie`, `Proxy-Authorization` and the names given to
//!   [`Verifier::credential_header`] are dropped.
//!
//! The sending side of Standard Webhooks is the outbox's HTTP sink (feature `http`):
//! `HttpSink::standard_webhooks(secret)` signs every attempt with the function this module
//! verifies against (`webhook-id` the record id, `webhook-timestamp` the attempt's time, one `v1,`
//! signature per secret while one is rotated), so a sender and a receiver built from this crate
//! cannot disagree on the layout or the key.

mod answered;
mod error;
mod generic;
mod parse;
mod scheme;
mod secret;
mod signer;
mod standard;
mod stripe;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use bytes::Bytes;
use http::{HeaderMap, HeaderName, header};
use sha2::{Digest as _, Sha256};
use subtle::{Choice, ConstantTimeEq};

use crate::unit::Headers;

pub use answered::{webhook_answered, webhook_counter};
pub use error::VerifyError;
pub use generic::HmacScheme;
pub use scheme::Scheme;
pub use secret::Secret;

use parse::Signed;
use secret::Key;
pub use signer::StandardSigner;

/// Verifies webhook deliveries for one [`Scheme`] and one or more secrets.
///
/// Built once (at startup) and shared; [`verify`](Verifier::verify) is the production entry
/// point, [`verify_at`](Verifier::verify_at) takes the time as an input for tests and replays.
///
/// ```
/// use delivery_core::webhook::{Scheme, Verifier, VerifyError};
/// use http::{HeaderMap, HeaderValue};
/// use std::time::SystemTime;
///
/// // GitHub's documented example: secret "It's a Secret to Everybody", body "Hello, World!".
/// let verifier = Verifier::new(Scheme::GitHub, "It's a Secret to Everybody")
///     .also_accept("the-next-secret"); // rotation: both are accepted until the old one is dropped
///
/// let mut headers = HeaderMap::new();
/// headers.insert(
///     "X-Hub-Signature-256",
///     HeaderValue::from_static(
///         "sha256=757107ea0eb2509fc211221cce984b8a37570b6d7586c22c46f4379c8b043e17",
///     ),
/// );
/// let id = HeaderValue::from_static("72d3162e-cc78-11e3-81ab-4c9367dc0958");
/// headers.insert("X-GitHub-Delivery", id);
///
/// // Verify the raw bytes first; only then parse them.
/// verifier.verify_at(&headers, b"Hello, World!", SystemTime::now())?;
/// // GitHub signs the body only: its delivery id is informational (for logs) ...
/// assert_eq!(
///     verifier.delivery_id(&headers).as_deref(),
///     Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
/// );
/// // ... and the unit's id, what deduplication keys on, comes from the signed bytes.
/// assert_eq!(
///     verifier.unit_id(&headers, b"Hello, World!").as_deref(),
///     Some("sha256:dffd6021bb2bd5b0af676290809ec3a53191dd81c7f70a4b28688a362182986f"),
/// );
///
/// // A body changed by one byte is refused.
/// let forged = verifier.verify_at(&headers, b"Hello, World?", SystemTime::now());
/// assert_eq!(forged, Err(VerifyError::Mismatch));
///
/// // And the secret never shows.
/// assert!(!format!("{verifier:?}").contains("Everybody"));
/// # Ok::<(), VerifyError>(())
/// ```
#[derive(Clone, Debug)]
pub struct Verifier {
    scheme: Scheme,
    /// HMAC keys, derived from the secrets as the scheme says.
    keys: Vec<Key>,
    tolerance: Duration,
    max_body: usize,
    misconfigured: Option<&'static str>,
    /// Header names beyond [`Verifier::CREDENTIAL_HEADERS`] never copied into a unit.
    credential_headers: Vec<HeaderName>,
}

impl Verifier {
    /// The default timestamp tolerance, in both directions: 300 s, every provider's own.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

    /// The request headers that carry credentials, never copied into a unit's headers
    /// ([`unit_headers`](Verifier::unit_headers)): a handler, a log line or a dead letter that
    /// shows the unit's headers must not show a caller's token. Add others with
    /// [`credential_header`](Verifier::credential_header).
    pub const CREDENTIAL_HEADERS: [HeaderName; 3] = [
        header::AUTHORIZATION,
        header::COOKIE,
        header::PROXY_AUTHORIZATION,
    ];

    /// A verifier for `scheme`, accepting signatures made with `secret`.
    ///
    /// The secret is taken as the provider hands it out: for Stripe the whole `whsec_...` string,
    /// for Standard Webhooks `whsec_<base64>` (with or without the prefix). A secret this scheme
    /// cannot use (not base64 for Standard Webhooks, or empty) does not panic: every
    /// verification then fails with [`VerifyError::Misconfigured`], and [`check`](Verifier::check)
    /// reports it at startup.
    pub fn new(scheme: Scheme, secret: impl Into<Secret>) -> Self {
        let verifier = Verifier {
            misconfigured: scheme.problem(),
            scheme,
            keys: Vec::new(),
            tolerance: Self::DEFAULT_TOLERANCE,
            max_body: Self::DEFAULT_MAX_BODY,
            credential_headers: Vec::new(),
        };
        verifier.also_accept(secret)
    }

    /// Also accepts signatures made with `secret`, for a rotation: deliveries signed with the
    /// old or the new secret both verify until the old one is dropped. A secret the scheme cannot
    /// use makes the whole verifier [misconfigured](VerifyError::Misconfigured): it fails closed.
    pub fn also_accept(mut self, secret: impl Into<Secret>) -> Self {
        match self.scheme.key(&secret.into()) {
            Ok(key) => self.keys.push(key),
            Err(reason) => self.misconfigured = self.misconfigured.or(Some(reason)),
        }
        self
    }

    /// How far a signed timestamp may be from the verifier's clock, in the past or the future
    /// (default [`DEFAULT_TOLERANCE`](Verifier::DEFAULT_TOLERANCE)). Schemes without a
    /// timestamp ignore it.
    pub fn tolerance(mut self, tolerance: Duration) -> Self {
        self.tolerance = tolerance;
        self
    }

    /// The largest body accepted, in bytes (default
    /// [`DEFAULT_MAX_BODY`](Verifier::DEFAULT_MAX_BODY)); a larger one is refused with
    /// [`VerifyError::BodyTooLarge`] before any hashing.
    pub fn max_body(mut self, bytes: usize) -> Self {
        self.max_body = bytes;
        self
    }

    /// The largest body it verifies, in bytes ([`max_body`](Self::max_body)): a route reads no
    /// more than this before it refuses the request.
    pub fn body_limit(&self) -> usize {
        self.max_body
    }

    /// Also drops the header `name` (any case) from the unit's headers, beside
    /// [`CREDENTIAL_HEADERS`](Verifier::CREDENTIAL_HEADERS): a header that carries a credential
    /// of your own, such as an API key a proxy adds (`X-Api-Key`). With `#[webhook]`, the
    /// attribute's `credential_headers = ["X-Api-Key"]` calls it.
    ///
    /// ```
    /// use delivery_core::webhook::{Scheme, Verifier};
    /// use http::{HeaderMap, HeaderValue};
    ///
    /// let verifier = Verifier::new(Scheme::GitHub, "secret").credential_header("X-Api-Key");
    /// let mut headers = HeaderMap::new();
    /// headers.insert("x-github-event", HeaderValue::from_static("push"));
    /// headers.insert("authorization", HeaderValue::from_static("Bearer t0ken"));
    /// headers.insert("x-api-key", HeaderValue::from_static("k3y"));
    /// let kept = verifier.unit_headers(&headers);
    /// assert_eq!(kept.get_str("x-github-event"), Some("push"));
    /// assert_eq!(kept.get("authorization"), None);
    /// assert_eq!(kept.get("x-api-key"), None);
    /// ```
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name (a configuration constant, checked where the
    /// verifier is built, like [`HeaderName::from_static`]).
    pub fn credential_header(mut self, name: impl AsRef<str>) -> Self {
        let name = name.as_ref();
        match HeaderName::from_bytes(name.as_bytes()) {
            Ok(name) => self.credential_headers.push(name),
            Err(_) => panic!("{name:?} is not a valid header name"),
        }
        self
    }

    /// Whether `name` carries a credential: one of
    /// [`CREDENTIAL_HEADERS`](Verifier::CREDENTIAL_HEADERS) or a name given to
    /// [`credential_header`](Verifier::credential_header).
    pub fn is_credential_header(&self, name: &HeaderName) -> bool {
        Self::CREDENTIAL_HEADERS.contains(name) || self.credential_headers.contains(name)
    }

    /// The request's headers as the unit carries them: every one but those that carry
    /// credentials ([`is_credential_header`](Verifier::is_credential_header)).
    pub fn unit_headers(&self, headers: &HeaderMap) -> Headers {
        Headers::from_pairs(
            headers
                .iter()
                .filter(|(name, _)| !self.is_credential_header(name))
                .map(|(name, value)| (name.as_str(), Bytes::copy_from_slice(value.as_bytes()))),
        )
    }

    /// The scheme this verifier checks.
    pub fn scheme(&self) -> &Scheme {
        &self.scheme
    }

    /// Whether the verifier can verify anything: call it at startup to fail fast on a secret the
    /// scheme cannot use, rather than refusing every delivery.
    pub fn check(&self) -> Result<(), VerifyError> {
        match self.misconfigured {
            Some(reason) => Err(VerifyError::Misconfigured { reason }),
            None => Ok(()),
        }
    }

    /// Verifies a delivery against the clock: the production entry point.
    ///
    /// `body` is the raw request body, byte for byte as received, not parsed and re-serialized.
    /// Parse it only once this returns `Ok`.
    pub fn verify(&self, headers: &HeaderMap, body: &[u8]) -> Result<(), VerifyError> {
        self.verify_at(headers, body, SystemTime::now())
    }

    /// Verifies a delivery as of `now`: the body's size, then the headers, then the signed
    /// timestamp against `now` and the tolerance, then the signature, in constant time.
    pub fn verify_at(
        &self,
        headers: &HeaderMap,
        body: &[u8],
        now: SystemTime,
    ) -> Result<(), VerifyError> {
        self.check()?;
        if body.len() > self.max_body {
            return Err(VerifyError::BodyTooLarge {
                limit: self.max_body,
                size: body.len(),
            });
        }
        let signed = self.scheme.parse(headers)?;
        if let Some(timestamp) = signed.timestamp {
            within_tolerance(timestamp, now, self.tolerance)?;
        }
        if self.matches(&signed, body) {
            Ok(())
        } else {
            Err(VerifyError::Mismatch)
        }
    }

    /// The delivery's id from its headers, where the scheme puts it there: Standard Webhooks
    /// `webhook-id` (or `svix-id`), GitHub `X-GitHub-Delivery`, Shopify `X-Shopify-Webhook-Id`,
    /// or a generic scheme's [`id_header`](HmacScheme::id_header). `None` for Stripe and Slack,
    /// whose ids are in the body ([`unit_id`](Verifier::unit_id)).
    ///
    /// GitHub's and Shopify's (and a generic scheme's whose signed content has no `{id}`) is
    /// not signed: anyone replaying a captured delivery can change it. Log it, correlate with the
    /// provider's console by it, but deduplicate by [`unit_id`](Verifier::unit_id).
    pub fn delivery_id(&self, headers: &HeaderMap) -> Option<String> {
        self.scheme
            .header_id(headers)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
    }

    /// The unit's id for idempotency (rule 3): the same on every redelivery of the delivery,
    /// and taken only from what the signature covers, so a replay cannot pass as a new unit.
    ///
    /// - Standard Webhooks (and a generic scheme whose signed content has `{id}`): the
    ///   [`delivery_id`](Verifier::delivery_id), which is signed.
    /// - Stripe: the event's top-level `"id"`; Slack: the Events API's top-level `"event_id"` —
    ///   both read from `verified_body`, which is signed. `None` when the body carries none (a
    ///   Slack slash command, say); the `#[webhook]` route then takes `sha256:<hex>` of the body.
    /// - GitHub, Shopify (and a generic scheme whose id, if any, is not signed): `sha256:<hex>`
    ///   of `verified_body`. Their delivery-id header is outside the signature, and they sign no
    ///   timestamp, so a captured request verifies forever; keyed by that header, each replay
    ///   under a fresh id would be a new unit. Keyed by the signed bytes, every replay and every
    ///   redelivery of one event is the same unit (two events with byte-identical bodies are one
    ///   unit too: the same bytes, the same effect). The header id stays available from
    ///   [`delivery_id`](Verifier::delivery_id) and in the unit's headers, for logs.
    ///
    /// Call it only once [`verify`](Verifier::verify) passed.
    pub fn unit_id(&self, headers: &HeaderMap, verified_body: &[u8]) -> Option<String> {
        let Some(field) = self.scheme.body_id_field() else {
            return if self.scheme.header_id_is_signed() {
                self.delivery_id(headers)
            } else {
                Some(body_id(verified_body))
            };
        };
        let event: serde_json::Value = serde_json::from_slice(verified_body).ok()?;
        let id = event.get(field)?.as_str()?;
        (!id.is_empty()).then(|| id.to_owned())
    }

    /// The unit's [`Stamp`](crate::unit::Stamp) (rule 4), where the provider signs the event's own
    /// time, the same on every attempt: Stripe's `created`, Slack's Events API `event_time`, both
    /// Unix seconds read from `verified_body`. It orders a provider's events *seconds apart*: two
    /// events of one object within a second get one stamp, and a store guard refuses the second,
    /// so guard with it only where that cannot happen, or with a version the payload carries.
    ///
    /// `None` for the other schemes: Standard Webhooks' `webhook-timestamp` and Slack's
    /// request timestamp are the *attempt's* time (a retry of an older event is signed later
    /// than a newer event's first attempt), and GitHub and Shopify sign no time at all.
    ///
    /// ```
    /// use delivery::webhook::{Scheme, Verifier};
    /// use delivery::Stamp;
    ///
    /// let stripe = Verifier::new(Scheme::Stripe, "whsec_test");
    /// let body = br#"{"id":"evt_1","created":1700000000,"type":"invoice.paid"}"#;
    /// assert_eq!(stripe.stamp(body), Some(Stamp(1700000000)));
    /// assert_eq!(Verifier::new(Scheme::GitHub, "s").stamp(body), None);
    /// ```
    ///
    /// Call it only once [`verify`](Verifier::verify) passed.
    pub fn stamp(&self, verified_body: &[u8]) -> Option<crate::unit::Stamp> {
        let field = self.scheme.body_stamp_field()?;
        let event: serde_json::Value = serde_json::from_slice(verified_body).ok()?;
        event.get(field)?.as_u64().map(crate::unit::Stamp)
    }

    /// Whether any accepted secret signed the body under any of the delivery's signatures: the
    /// one place a signature is compared, in constant time.
    fn matches(&self, signed: &Signed<'_>, body: &[u8]) -> bool {
        let mut matched = Choice::from(0);
        for key in &self.keys {
            let tag = signed.tag(key, body);
            for signature in &signed.signatures {
                matched |= tag.as_slice().ct_eq(signature);
            }
        }
        matched.into()
    }
}

/// A unit id derived from the verified bytes, `sha256:<hex>`: the same for every delivery of the
/// same bytes (rule 3), for a delivery whose signature covers no id of its own.
pub fn body_id(body: &[u8]) -> String {
    format!("sha256:{}", hex::encode(Sha256::digest(body)))
}

/// Refuses a timestamp further than `tolerance` from `now`, in either direction.
fn within_tolerance(
    timestamp: u64,
    now: SystemTime,
    tolerance: Duration,
) -> Result<(), VerifyError> {
    let skew = match UNIX_EPOCH.checked_add(Duration::from_secs(timestamp)) {
        Some(signed_at) => match now.duration_since(signed_at) {
            Ok(past) => past,
            Err(future) => future.duration(),
        },
        None => Duration::MAX,
    };
    if skew <= tolerance {
        return Ok(());
    }
    let now = now.duration_since(UNIX_EPOCH).map_or(0, |d| d.as_secs());
    Err(VerifyError::TimestampOutOfTolerance {
        timestamp,
        now,
        tolerance,
    })
}
