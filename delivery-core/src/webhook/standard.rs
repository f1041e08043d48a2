//! Standard Webhooks (and Svix, its origin): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64> [v1,<base64>...]` over `{id}.{timestamp}.{body}`.

use base64::Engine as _;
use http::{HeaderMap, HeaderName};

use super::error::VerifyError;
use super::parse::{
    Signed, Tags, base64_tag, malformed, optional, required, signed_value, timestamp,
};
use super::secret::Key;

/// The signed content.
const LAYOUT: &str = "{id}.{timestamp}.{body}";

/// The length of `v1,` and the padded base64 of a 32-byte tag.
pub(super) const ONE_SIGNATURE: usize = 3 + 44;

/// One family of header names: the standard's, or Svix's.
struct Names {
    id: HeaderName,
    timestamp: HeaderName,
    signature: HeaderName,
}

static STANDARD: Names = Names {
    id: HeaderName::from_static("webhook-id"),
    timestamp: HeaderName::from_static("webhook-timestamp"),
    signature: HeaderName::from_static("webhook-signature"),
};

static SVIX: Names = Names {
    id: HeaderName::from_static("svix-id"),
    timestamp: HeaderName::from_static("svix-timestamp"),
    signature: HeaderName::from_static("svix-signature"),
};

/// The standard's names, unless the delivery carries none of them and some of Svix's.
fn names(headers: &HeaderMap) -> &'static Names {
    let has = |n: &Names| {
        [&n.id, &n.timestamp, &n.signature]
            .iter()
            .any(|h| headers.contains_key(*h))
    };
    if !has(&STANDARD) && has(&SVIX) {
        &SVIX
    } else {
        &STANDARD
    }
}

/// The delivery's id (`webhook-id`, or `svix-id`): the unit's identity for idempotency.
pub(super) fn id(headers: &HeaderMap) -> Option<&str> {
    optional(headers, &names(headers).id).ok().flatten()
}

/// Every `v1,` entry is a candidate (one per secret during a rotation); other versions
/// (`v1a,` and future ones) are ignored, as is a `v1,` entry that is not the base64 of 32 bytes —
/// but a header with no usable `v1,` entry at all is malformed.
pub(super) fn parse(headers: &HeaderMap) -> Result<Signed<'_>, VerifyError> {
    // A delivery with `webhook-signature` uses the standard's names: no need to look for others.
    let (names, list) = match optional(headers, &STANDARD.signature)? {
        Some(list) => (&STANDARD, list),
        None => {
            let names = names(headers);
            let list = required(headers, &names.signature)?;
            (names, list)
        }
    };
    let id = required(headers, &names.id)?;
    let ts_text = required(headers, &names.timestamp)?;
    let ts = timestamp(ts_text).ok_or_else(|| malformed(&names.timestamp, "not Unix seconds"))?;
    let signatures: Tags = if list.len() == ONE_SIGNATURE && list.starts_with("v1,") {
        // The usual list, one signature: read without splitting. (Were there a space in it, no
        // entry of the split list could be the 44 characters of a tag either.)
        base64_tag(&list.as_bytes()[3..]).into_iter().collect()
    } else {
        list.split(' ')
            .filter_map(|entry| entry.strip_prefix("v1,"))
            .map(str::as_bytes)
            .filter_map(base64_tag)
            .collect()
    };
    if signatures.is_empty() {
        return Err(malformed(
            &names.signature,
            "no `v1,` entry is the base64 of a 32-byte HMAC",
        ));
    }
    Ok(Signed {
        signatures,
        layout: LAYOUT,
        timestamp_text: ts_text,
        id,
        timestamp: Some(ts),
    })
}

/// The headers a Standard Webhooks sender sends for `body`: `webhook-id`, `webhook-timestamp` and
/// `webhook-signature: v1,<base64>`, one space-separated `v1,` entry per key (several while a
/// secret is rotated). The inverse of `parse`, and the one place a delivery is signed: for the
/// outbox's HTTP sink (`StandardSigner`) and for `testing::sign` alike.
pub(super) fn sign(
    keys: &[Key],
    body: &[u8],
    timestamp: &str,
    id: &str,
    headers: &mut HeaderMap,
) -> Result<(), &'static str> {
    if keys.is_empty() {
        return Err("no secret to sign with");
    }
    let content = Signed::to_sign(LAYOUT, timestamp, id);
    let mut signatures = String::with_capacity(keys.len() * (ONE_SIGNATURE + 1));
    for key in keys {
        if !signatures.is_empty() {
            signatures.push(' ');
        }
        signatures.push_str("v1,");
        base64::engine::general_purpose::STANDARD
            .encode_string(content.tag(key, body), &mut signatures);
    }
    headers.insert(&STANDARD.id, signed_value(id)?);
    headers.insert(&STANDARD.timestamp, signed_value(timestamp)?);
    headers.insert(&STANDARD.signature, signed_value(&signatures)?);
    Ok(())
}
