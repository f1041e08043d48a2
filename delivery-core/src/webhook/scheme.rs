//! Which provider signed the delivery, and how each one lays its signature out.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName};

use super::error::VerifyError;
use super::generic::HmacScheme;
use super::parse::{Signed, optional, signed_value};
use super::secret::Key;
use super::secret::Secret;
use super::{standard, stripe};

/// A signing scheme, each exactly as its provider publishes it.
///
/// | scheme | headers | signed bytes | secret | unit id ([`Verifier::unit_id`](super::Verifier::unit_id)) |
/// |---|---|---|---|---|
/// | `GitHub` | `X-Hub-Signature-256: sha256=<hex>` | body | as given | `sha256:<hex>` of the body (`X-GitHub-Delivery` is unsigned) |
/// | `Stripe` | `Stripe-Signature: t=<unix>,v1=<hex>[,v1=...]` | `{t}.{body}` | the whole `whsec_...` string | the event's `id` |
/// | `StandardWebhooks` | `webhook-id`, `webhook-timestamp`, `webhook-signature: v1,<base64> ...` (or `svix-*`) | `{id}.{timestamp}.{body}` | `whsec_<base64>`, decoded (prefix optional) | `webhook-id` |
/// | `Slack` | `X-Slack-Signature: v0=<hex>`, `X-Slack-Request-Timestamp` | `v0:{timestamp}:{body}` | as given | the event's `event_id` |
/// | `Shopify` | `X-Shopify-Hmac-Sha256: <base64>` | body | as given | `sha256:<hex>` of the body (`X-Shopify-Webhook-Id` is unsigned) |
/// | `Hmac(..)` | configured ([`HmacScheme`]) | configured | as given | the id header if `{id}` is signed, else `sha256:<hex>` of the body |
///
/// All are HMAC-SHA256. Schemes with a timestamp reject one outside the verifier's tolerance
/// (default 300 s) in the past or the future.
///
/// # Replays
///
/// A captured delivery can be sent again by whoever captured it. What stops it:
///
/// | scheme | replay window | a replay inside the window |
/// |---|---|---|
/// | `Stripe`, `StandardWebhooks`, `Slack`, `Hmac(..)` with a timestamp header | the signed timestamp ± the [tolerance](super::Verifier::tolerance) (300 s by default); outside it the delivery is refused (`401`) | carries the same signed id (the event's `id`, `webhook-id`, `event_id`; a Slack delivery without one: the body's digest), so it is the same unit: deduplicated by id |
/// | `GitHub`, `Shopify`, `Hmac(..)` without a timestamp | none: no timestamp is signed, so the signature verifies forever | the delivery-id header is not signed and can be changed, so the unit id is derived from the signed body instead (`sha256:<hex>`): every replay is the same unit, deduplicated by id as long as the id is remembered |
///
/// The unit's id is therefore always something the signature covers; deduplicating by it is
/// sound whatever the sender's headers say. The unsigned header id is still in the unit's
/// headers and in [`Verifier::delivery_id`](super::Verifier::delivery_id), for logs.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Scheme {
    /// GitHub: `X-Hub-Signature-256: sha256=<hex>` over the raw body; no timestamp, and the
    /// `X-GitHub-Delivery` id outside the signature: the unit id is `sha256:<hex>` of the body.
    GitHub,
    /// Stripe: `Stripe-Signature: t=<unix>,v1=<hex>` over `{t}.{body}`, keyed with the whole
    /// `whsec_...` string (not decoded); any `v1` may match.
    Stripe,
    /// [Standard Webhooks](https://www.standardwebhooks.com/) (and Svix): `webhook-id`,
    /// `webhook-timestamp`, `webhook-signature` (a space-separated `v1,<base64>` list) over
    /// `{id}.{timestamp}.{body}`, keyed with the base64-decoded `whsec_` secret. The `svix-*`
    /// header names are accepted too.
    StandardWebhooks,
    /// Slack: `X-Slack-Signature: v0=<hex>` over `v0:{timestamp}:{body}`, with the timestamp in
    /// `X-Slack-Request-Timestamp`.
    Slack,
    /// Shopify: `X-Shopify-Hmac-Sha256: <base64>` over the raw body; no timestamp, and the
    /// `X-Shopify-Webhook-Id` outside the signature: the unit id is `sha256:<hex>` of the body.
    Shopify,
    /// Any other HMAC-SHA256 scheme, configured with [`HmacScheme`].
    Hmac(HmacScheme),
}

static GITHUB: HmacScheme =
    HmacScheme::preset("x-hub-signature-256", false, "sha256=", None, "{body}");
static SHOPIFY: HmacScheme = HmacScheme::preset("x-shopify-hmac-sha256", true, "", None, "{body}");
static SLACK: HmacScheme = HmacScheme::preset(
    "x-slack-signature",
    false,
    "v0=",
    Some("x-slack-request-timestamp"),
    "v0:{timestamp}:{body}",
);

const GITHUB_DELIVERY: HeaderName = HeaderName::from_static("x-github-delivery");
const SHOPIFY_WEBHOOK_ID: HeaderName = HeaderName::from_static("x-shopify-webhook-id");

impl Scheme {
    /// Reads the delivery's signatures, timestamp and signed framing from its headers.
    pub(super) fn parse<'a>(&'a self, headers: &'a HeaderMap) -> Result<Signed<'a>, VerifyError> {
        match self {
            Scheme::GitHub => GITHUB.parse(headers),
            Scheme::Stripe => stripe::parse(headers),
            Scheme::StandardWebhooks => standard::parse(headers),
            Scheme::Slack => SLACK.parse(headers),
            Scheme::Shopify => SHOPIFY.parse(headers),
            Scheme::Hmac(scheme) => scheme.parse(headers),
        }
    }

    /// The HMAC key for a secret as the provider hands it out.
    pub(super) fn key(&self, secret: &Secret) -> Result<Key, &'static str> {
        let raw = secret.expose();
        let key = match self {
            Scheme::StandardWebhooks => {
                let encoded = raw.strip_prefix(b"whsec_").unwrap_or(raw);
                let decoded = STANDARD.decode(encoded);
                Key::new(&decoded.map_err(|_| "a Standard Webhooks secret is not base64")?)
            }
            _ => Key::new(raw),
        };
        key.ok_or("a secret is empty")
    }

    /// The headers this scheme's provider sends for `body`, signed with `secret` at `timestamp`
    /// (Unix seconds), `id` being the delivery's id where the scheme sends one in a header: the
    /// inverse of [`parse`](Scheme::parse), for `testing::sign`. `Err` says why it cannot sign:
    /// a secret the scheme cannot use, a misconfigured generic scheme, an id no header can carry.
    pub(crate) fn sign(
        &self,
        secret: &Secret,
        body: &[u8],
        timestamp: u64,
        id: &str,
    ) -> Result<HeaderMap, &'static str> {
        if let Some(problem) = self.problem() {
            return Err(problem);
        }
        let key = self.key(secret)?;
        let timestamp = timestamp.to_string();
        let mut headers = HeaderMap::new();
        match self {
            Scheme::GitHub => {
                GITHUB.sign(&key, body, &timestamp, id, &mut headers)?;
                headers.insert(GITHUB_DELIVERY, signed_value(id)?);
            }
            Scheme::Stripe => stripe::sign(&key, body, &timestamp, &mut headers)?,
            Scheme::StandardWebhooks => standard::sign(
                std::slice::from_ref(&key),
                body,
                &timestamp,
                id,
                &mut headers,
            )?,
            Scheme::Slack => SLACK.sign(&key, body, &timestamp, id, &mut headers)?,
            Scheme::Shopify => {
                SHOPIFY.sign(&key, body, &timestamp, id, &mut headers)?;
                headers.insert(SHOPIFY_WEBHOOK_ID, signed_value(id)?);
            }
            Scheme::Hmac(scheme) => scheme.sign(&key, body, &timestamp, id, &mut headers)?,
        }
        Ok(headers)
    }

    /// What makes this scheme unusable, if anything.
    pub(super) fn problem(&self) -> Option<&'static str> {
        match self {
            Scheme::Hmac(scheme) => scheme.problem(),
            _ => None,
        }
    }

    /// The delivery's id from its headers, for schemes that put it there.
    pub(super) fn header_id<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        let one = |name| optional(headers, name).ok().flatten();
        match self {
            Scheme::GitHub => one(&GITHUB_DELIVERY),
            Scheme::StandardWebhooks => standard::id(headers),
            Scheme::Shopify => one(&SHOPIFY_WEBHOOK_ID),
            Scheme::Hmac(scheme) => scheme.id(headers),
            Scheme::Stripe | Scheme::Slack => None,
        }
    }

    /// Whether the id [`header_id`](Scheme::header_id) reads is covered by the signature, so
    /// that a replay cannot change it.
    pub(super) fn header_id_is_signed(&self) -> bool {
        match self {
            Scheme::StandardWebhooks => true,
            Scheme::Hmac(scheme) => scheme.id_is_signed(),
            Scheme::GitHub | Scheme::Shopify | Scheme::Stripe | Scheme::Slack => false,
        }
    }

    /// The top-level field of the verified JSON body that carries the event's id, for schemes
    /// that put it there.
    pub(super) fn body_id_field(&self) -> Option<&'static str> {
        match self {
            Scheme::Stripe => Some("id"),
            Scheme::Slack => Some("event_id"),
            _ => None,
        }
    }

    /// The top-level field of the signed body that holds the event's own time, in Unix seconds,
    /// the same on every attempt: Stripe's `created`, Slack's `event_time`.
    pub(super) fn body_stamp_field(&self) -> Option<&'static str> {
        match self {
            Scheme::Stripe => Some("created"),
            Scheme::Slack => Some("event_time"),
            _ => None,
        }
    }
}
