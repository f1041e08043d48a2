//! The configurable HMAC-SHA256 scheme: one signature header, hex or base64, an optional prefix,
//! an optional timestamp and id, and a signed-content layout. GitHub, Shopify and Slack are
//! presets of it.

use std::borrow::Cow;

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName};

use super::error::VerifyError;
use super::parse::{
    BODY, ID, Signed, TIMESTAMP, Tags, base64_tag, hex_tag, malformed, optional, required,
    signed_value, timestamp,
};
use super::secret::Key;

/// A generic HMAC-SHA256 scheme for providers without a preset, used as
/// [`Scheme::Hmac`](super::Scheme::Hmac).
///
/// By default the signature is the hex HMAC-SHA256 of the raw body, in the named header. The
/// builder adds the rest:
///
/// - [`base64`](HmacScheme::base64) — the signature is base64 rather than hex;
/// - [`prefix`](HmacScheme::prefix) — the header's value starts with a fixed text, like `sha256=`;
/// - [`timestamp_header`](HmacScheme::timestamp_header) — a header carries the Unix seconds the
///   delivery was signed at; it is required, it must be within the verifier's tolerance, and
///   the signed content becomes `{timestamp}.{body}` unless set otherwise;
/// - [`id_header`](HmacScheme::id_header) — a header carries the delivery's id, for
///   [`Verifier::unit_id`](super::Verifier::unit_id) and for `{id}` in the signed content;
/// - [`signed_content`](HmacScheme::signed_content) — the layout of the signed bytes, with
///   `{body}` (exactly once), `{timestamp}` and `{id}` placeholders, e.g. `v0:{timestamp}:{body}`.
///
/// ```
/// use delivery_core::webhook::{HmacScheme, Scheme, Verifier};
///
/// // A provider sending `X-Signature: sha256=<base64>` over `{timestamp}.{body}`,
/// // with the timestamp in `X-Timestamp` and the delivery's id in `X-Delivery-Id`.
/// let scheme = HmacScheme::new("X-Signature")
///     .base64()
///     .prefix("sha256=")
///     .timestamp_header("X-Timestamp")
///     .id_header("X-Delivery-Id")
///     .signed_content("{timestamp}.{body}");
/// let verifier = Verifier::new(Scheme::Hmac(scheme), "shared-secret");
/// assert!(verifier.check().is_ok());
/// ```
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HmacScheme {
    signature: HeaderName,
    base64: bool,
    prefix: Cow<'static, str>,
    timestamp: Option<HeaderName>,
    id: Option<HeaderName>,
    template: Option<Cow<'static, str>>,
}

impl HmacScheme {
    /// A scheme whose signature is the hex HMAC-SHA256 of the raw body, in `signature_header`.
    ///
    /// # Panics
    ///
    /// If `signature_header` is not a valid header name (a configuration constant, checked where
    /// the scheme is built, like [`HeaderName::from_static`]).
    pub fn new(signature_header: impl AsRef<str>) -> Self {
        HmacScheme {
            signature: header_name(signature_header.as_ref()),
            base64: false,
            prefix: Cow::Borrowed(""),
            timestamp: None,
            id: None,
            template: None,
        }
    }

    /// The signature is hex (the default), either case.
    pub fn hex(mut self) -> Self {
        self.base64 = false;
        self
    }

    /// The signature is padded standard base64.
    pub fn base64(mut self) -> Self {
        self.base64 = true;
        self
    }

    /// The header's value starts with `prefix` (e.g. `sha256=`), which is not part of the
    /// encoded signature.
    pub fn prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = Cow::Owned(prefix.into());
        self
    }

    /// A header carries the Unix seconds the delivery was signed at. It becomes required, it is
    /// checked against the verifier's tolerance in both directions, and the signed content is
    /// `{timestamp}.{body}` unless [`signed_content`](HmacScheme::signed_content) says otherwise.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name.
    pub fn timestamp_header(mut self, name: impl AsRef<str>) -> Self {
        self.timestamp = Some(header_name(name.as_ref()));
        self
    }

    /// A header carries the delivery's id, the same on every redelivery: `{id}` in the signed
    /// content, and [`Verifier::delivery_id`](super::Verifier::delivery_id). Only when the signed
    /// content has `{id}` is it also the unit's id ([`Verifier::unit_id`](super::Verifier::unit_id));
    /// an id outside the signature can be changed by whoever replays a captured delivery, so the
    /// unit's id is then `sha256:<hex>` of the verified body.
    ///
    /// # Panics
    ///
    /// If `name` is not a valid header name.
    pub fn id_header(mut self, name: impl AsRef<str>) -> Self {
        self.id = Some(header_name(name.as_ref()));
        self
    }

    /// The layout of the signed bytes: literal text with `{body}` exactly once (the raw body,
    /// byte for byte), and optionally `{timestamp}` and `{id}` (the headers' values as sent).
    ///
    /// # Panics
    ///
    /// If `{body}` is not there exactly once, or a `{` does not open one of the three
    /// placeholders.
    pub fn signed_content(mut self, template: impl Into<String>) -> Self {
        let template = template.into();
        if let Err(reason) = check_template(&template) {
            panic!("invalid signed content {template:?}: {reason}");
        }
        self.template = Some(Cow::Owned(template));
        self
    }

    /// A preset, built from constants.
    pub(super) const fn preset(
        signature: &'static str,
        base64: bool,
        prefix: &'static str,
        timestamp: Option<&'static str>,
        template: &'static str,
    ) -> Self {
        HmacScheme {
            signature: HeaderName::from_static(signature),
            base64,
            prefix: Cow::Borrowed(prefix),
            timestamp: match timestamp {
                Some(name) => Some(HeaderName::from_static(name)),
                None => None,
            },
            id: None,
            template: Some(Cow::Borrowed(template)),
        }
    }

    fn template(&self) -> &str {
        match (&self.template, &self.timestamp) {
            (Some(template), _) => template,
            (None, Some(_)) => "{timestamp}.{body}",
            (None, None) => BODY,
        }
    }

    /// What makes this scheme unusable, if anything.
    pub(super) fn problem(&self) -> Option<&'static str> {
        let template = self.template();
        if template.contains(TIMESTAMP) && self.timestamp.is_none() {
            Some("the signed content has `{timestamp}` but no timestamp header is set")
        } else if self.timestamp.is_some() && !template.contains(TIMESTAMP) {
            Some("a timestamp header is set but the signed content has no `{timestamp}`")
        } else if template.contains(ID) && self.id.is_none() {
            Some("the signed content has `{id}` but no id header is set")
        } else {
            None
        }
    }

    /// Whether the id header's value is covered by the signature (`{id}` in the signed content).
    pub(super) fn id_is_signed(&self) -> bool {
        self.id.is_some() && self.template().contains(ID)
    }

    /// The delivery's id, from the id header.
    pub(super) fn id<'h>(&self, headers: &'h HeaderMap) -> Option<&'h str> {
        optional(headers, self.id.as_ref()?).ok().flatten()
    }

    pub(super) fn parse<'a>(&'a self, headers: &'a HeaderMap) -> Result<Signed<'a>, VerifyError> {
        let name = &self.signature;
        let value = required(headers, name)?;
        let encoded = value
            .strip_prefix(&*self.prefix)
            .ok_or_else(|| malformed(name, "does not start with the scheme's prefix"))?;
        let tag = if self.base64 {
            base64_tag(encoded.as_bytes())
                .ok_or_else(|| malformed(name, "not the base64 of a 32-byte HMAC"))?
        } else {
            hex_tag(encoded).ok_or_else(|| malformed(name, "not 64 hex digits"))?
        };
        let (ts_text, ts) = match &self.timestamp {
            Some(name) => {
                let text = required(headers, name)?;
                (
                    text,
                    Some(timestamp(text).ok_or_else(|| malformed(name, "not Unix seconds"))?),
                )
            }
            None => ("", None),
        };
        let template = self.template();
        let id = match &self.id {
            Some(name) if template.contains(ID) => required(headers, name)?,
            _ => "",
        };
        Ok(Signed {
            signatures: Tags::one(tag),
            layout: template,
            timestamp_text: ts_text,
            id,
            timestamp: ts,
        })
    }
}

impl HmacScheme {
    /// The headers the provider sends for `body`: the signature (prefix, then hex or base64), and
    /// the timestamp and the id where the scheme has those headers. The inverse of `parse`.
    pub(super) fn sign(
        &self,
        key: &Key,
        body: &[u8],
        timestamp: &str,
        id: &str,
        headers: &mut HeaderMap,
    ) -> Result<(), &'static str> {
        let tag = Signed::to_sign(self.template(), timestamp, id).tag(key, body);
        let encoded = if self.base64 {
            STANDARD.encode(tag)
        } else {
            hex::encode(tag)
        };
        let signature = signed_value(&format!("{}{encoded}", self.prefix))?;
        headers.insert(self.signature.clone(), signature);
        if let Some(name) = &self.timestamp {
            headers.insert(name.clone(), signed_value(timestamp)?);
        }
        if let Some(name) = &self.id {
            headers.insert(name.clone(), signed_value(id)?);
        }
        Ok(())
    }
}

fn header_name(name: &str) -> HeaderName {
    match HeaderName::from_bytes(name.as_bytes()) {
        Ok(name) => name,
        Err(_) => panic!("{name:?} is not a valid header name"),
    }
}

fn check_template(template: &str) -> Result<(), &'static str> {
    let mut bodies = 0;
    let mut rest = template;
    while let Some(start) = rest.find('{') {
        rest = &rest[start..];
        let Some(placeholder) = [BODY, TIMESTAMP, ID]
            .into_iter()
            .find(|p| rest.starts_with(p))
        else {
            return Err("a `{` opens none of `{body}`, `{timestamp}`, `{id}`");
        };
        bodies += usize::from(placeholder == BODY);
        rest = &rest[placeholder.len()..];
    }
    if bodies == 1 {
        Ok(())
    } else {
        Err("`{body}` must appear exactly once")
    }
}
