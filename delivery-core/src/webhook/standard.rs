//! Standard Webhooks (and Svix, its origin): `webhook-id`, `webhook-timestamp` and
//! `webhook-signature: v1,<base64> [v1,<base64>...]` over `{id}.{timestamp}.{body}`.

use http::{HeaderMap, HeaderName};

use super::VerifyError;
use super::parse::{Signed, base64_tag, malformed, optional, required, timestamp};

/// One family of header names: the standard's, or Svix's.
struct Names {
    id: HeaderName,
    timestamp: HeaderName,
    signature: HeaderName,
}

const STANDARD: Names = Names {
    id: HeaderName::from_static("webhook-id"),
    timestamp: HeaderName::from_static("webhook-timestamp"),
    signature: HeaderName::from_static("webhook-signature"),
};

const SVIX: Names = Names {
    id: HeaderName::from_static("svix-id"),
    timestamp: HeaderName::from_static("svix-timestamp"),
    signature: HeaderName::from_static("svix-signature"),
};

/// The standard's names, unless the delivery carries none of them and some of Svix's.
fn names(headers: &HeaderMap) -> Names {
    let has = |n: &Names| {
        [&n.id, &n.timestamp, &n.signature]
            .iter()
            .any(|h| headers.contains_key(*h))
    };
    if !has(&STANDARD) && has(&SVIX) {
        SVIX
    } else {
        STANDARD
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
    let names = names(headers);
    let list = required(headers, &names.signature)?;
    let id = required(headers, &names.id)?;
    let ts_text = required(headers, &names.timestamp)?;
    let ts = timestamp(ts_text).ok_or_else(|| malformed(&names.timestamp, "not Unix seconds"))?;
    let signatures: Vec<_> = list
        .split(' ')
        .filter_map(|entry| entry.strip_prefix("v1,"))
        .filter_map(base64_tag)
        .collect();
    if signatures.is_empty() {
        return Err(malformed(
            &names.signature,
            "no `v1,` entry is the base64 of a 32-byte HMAC",
        ));
    }
    Ok(Signed {
        signatures,
        layout: "{id}.{timestamp}.{body}",
        timestamp_text: ts_text,
        id,
        timestamp: Some(ts),
    })
}
