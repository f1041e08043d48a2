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

mod error;
mod generic;
mod parse;
mod scheme;
mod secret;
mod standard;
mod stripe;
// `#[webhook]` on axum: the route that verifies before it parses.
#[cfg(feature = "axum")]
mod axum;

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::HeaderMap;
use subtle::{Choice, ConstantTimeEq};

#[cfg(feature = "axum")]
#[doc(hidden)]
pub use self::axum::__private;
#[cfg(feature = "axum")]
pub use self::axum::{IntoSecrets, SecretOrigin, WebhookConfigError, WebhookHandler, route};
pub use error::VerifyError;
pub use generic::HmacScheme;
pub use scheme::Scheme;
pub use secret::Secret;

use parse::Signed;
use secret::Key;

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
/// assert_eq!(
///     verifier.unit_id(&headers, b"Hello, World!").as_deref(),
///     Some("72d3162e-cc78-11e3-81ab-4c9367dc0958"),
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
}

impl Verifier {
    /// The default timestamp tolerance, in both directions: 300 s, every provider's own.
    pub const DEFAULT_TOLERANCE: Duration = Duration::from_secs(300);

    /// The default body limit: 1 MiB.
    pub const DEFAULT_MAX_BODY: usize = 1024 * 1024;

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
    pub fn delivery_id(&self, headers: &HeaderMap) -> Option<String> {
        self.scheme
            .header_id(headers)
            .filter(|id| !id.is_empty())
            .map(str::to_owned)
    }

    /// The unit's id for idempotency (rule 3): the same on every redelivery of the delivery.
    ///
    /// The [`delivery_id`](Verifier::delivery_id) from the headers, or, for Stripe, the event's
    /// top-level `"id"` and, for Slack, the Events API's top-level `"event_id"`, read from
    /// `verified_body` — call it only once [`verify`](Verifier::verify) passed. `None` when the
    /// delivery carries no id (a Slack slash command, say).
    pub fn unit_id(&self, headers: &HeaderMap, verified_body: &[u8]) -> Option<String> {
        let Some(field) = self.scheme.body_id_field() else {
            return self.delivery_id(headers);
        };
        let event: serde_json::Value = serde_json::from_slice(verified_body).ok()?;
        let id = event.get(field)?.as_str()?;
        (!id.is_empty()).then(|| id.to_owned())
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
