//! Stripe: `Stripe-Signature: t=<unix>,v1=<hex>[,v1=<hex>...][,v0=...]` over `{t}.{body}`.

use http::{HeaderMap, HeaderName};

use super::error::VerifyError;
use super::parse::{Signed, Tags, hex_tag, malformed, required, signed_value, timestamp};
use super::secret::Key;

static SIGNATURE: HeaderName = HeaderName::from_static("stripe-signature");

/// The signed content.
const LAYOUT: &str = "{timestamp}.{body}";

/// Every `v1=` entry is a candidate (Stripe sends one per secret while a secret is being rolled);
/// other schemes (`v0=`) are ignored, and so is a `v1=` entry that is not 64 hex digits, as
/// Stripe's libraries do — but a header with no usable `v1=` at all is malformed.
pub(super) fn parse(headers: &HeaderMap) -> Result<Signed<'_>, VerifyError> {
    let value = required(headers, &SIGNATURE)?;
    let mut t = None;
    let mut saw_v1 = false;
    let mut signatures = Tags::default();
    for item in value.split(',') {
        // Visible ASCII (`required`), so `trim_ascii` is `trim`.
        let Some((key, val)) = item.trim_ascii().split_once('=') else {
            return Err(malformed(&SIGNATURE, "an entry is not `key=value`"));
        };
        match key {
            "t" if t.is_some() => return Err(malformed(&SIGNATURE, "more than one `t=`")),
            "t" => t = Some(val),
            "v1" => {
                saw_v1 = true;
                signatures.extend(hex_tag(val));
            }
            _ => {}
        }
    }
    let t = t.ok_or_else(|| malformed(&SIGNATURE, "no `t=` timestamp"))?;
    let ts = timestamp(t).ok_or_else(|| malformed(&SIGNATURE, "`t=` is not Unix seconds"))?;
    if !saw_v1 {
        return Err(malformed(&SIGNATURE, "no `v1=` signature"));
    }
    if signatures.is_empty() {
        return Err(malformed(&SIGNATURE, "no `v1=` signature is 64 hex digits"));
    }
    Ok(Signed {
        signatures,
        layout: LAYOUT,
        timestamp_text: t,
        id: "",
        timestamp: Some(ts),
    })
}

/// The header Stripe sends for `body`: `Stripe-Signature: t=<timestamp>,v1=<hex>`. The inverse of
/// `parse`.
pub(super) fn sign(
    key: &Key,
    body: &[u8],
    timestamp: &str,
    headers: &mut HeaderMap,
) -> Result<(), &'static str> {
    let tag = Signed::to_sign(LAYOUT, timestamp, "").tag(key, body);
    let value = format!("t={timestamp},v1={}", hex::encode(tag));
    headers.insert(&SIGNATURE, signed_value(&value)?);
    Ok(())
}
