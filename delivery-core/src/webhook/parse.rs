//! Reading a delivery's headers: one value per header, visible ASCII, decoded signatures.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use http::{HeaderMap, HeaderName};

use super::VerifyError;

/// An HMAC-SHA256 tag.
pub(super) type Tag = [u8; 32];

/// What a delivery's headers say: the signatures to compare, the signed content's layout with
/// the values it names, and the signed timestamp where the scheme has one.
pub(super) struct Signed<'a> {
    pub(super) signatures: Vec<Tag>,
    /// The layout of the signed bytes: `{body}`, `{timestamp}`, `{id}` and literal text.
    pub(super) layout: &'a str,
    /// `{timestamp}`, as sent.
    pub(super) timestamp_text: &'a str,
    /// `{id}`, as sent.
    pub(super) id: &'a str,
    /// The timestamp, for the tolerance check.
    pub(super) timestamp: Option<u64>,
}

pub(super) const BODY: &str = "{body}";
pub(super) const TIMESTAMP: &str = "{timestamp}";
pub(super) const ID: &str = "{id}";

impl Signed<'_> {
    /// Feeds the signed content to `sink` in pieces, the body in place of `{body}`: nothing is
    /// copied.
    pub(super) fn content(&self, body: &[u8], mut sink: impl FnMut(&[u8])) {
        let mut rest = self.layout;
        while let Some(start) = rest.find('{') {
            sink(&rest.as_bytes()[..start]);
            rest = &rest[start..];
            let (value, len) = if rest.starts_with(BODY) {
                (body, BODY.len())
            } else if rest.starts_with(TIMESTAMP) {
                (self.timestamp_text.as_bytes(), TIMESTAMP.len())
            } else if rest.starts_with(ID) {
                (self.id.as_bytes(), ID.len())
            } else {
                (&b"{"[..], 1) // not a placeholder (layouts are checked when built)
            };
            sink(value);
            rest = &rest[len..];
        }
        sink(rest.as_bytes());
    }
}

/// The header's only value, or `None` when it is absent.
pub(super) fn optional<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<Option<&'h str>, VerifyError> {
    let mut values = headers.get_all(name).iter();
    let Some(value) = values.next() else {
        return Ok(None);
    };
    if values.next().is_some() {
        return Err(VerifyError::DuplicateHeader {
            header: name.clone(),
        });
    }
    let text = value
        .to_str()
        .map_err(|_| malformed(name, "not visible ASCII"))?;
    Ok(Some(text.trim()))
}

/// The header's only value; absent is an error.
pub(super) fn required<'h>(
    headers: &'h HeaderMap,
    name: &HeaderName,
) -> Result<&'h str, VerifyError> {
    optional(headers, name)?.ok_or_else(|| VerifyError::MissingHeader {
        header: name.clone(),
    })
}

pub(super) fn malformed(name: &HeaderName, reason: &'static str) -> VerifyError {
    VerifyError::MalformedHeader {
        header: name.clone(),
        reason,
    }
}

/// Unix seconds, digits only (no sign, no fraction).
pub(super) fn timestamp(text: &str) -> Option<u64> {
    if text.is_empty() || !text.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Exactly 64 hex digits, either case.
pub(super) fn hex_tag(text: &str) -> Option<Tag> {
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut tag = [0; 32];
    for (byte, pair) in tag.iter_mut().zip(digits.chunks_exact(2)) {
        *byte = nibble(pair[0])? << 4 | nibble(pair[1])?;
    }
    Some(tag)
}

fn nibble(digit: u8) -> Option<u8> {
    match digit {
        b'0'..=b'9' => Some(digit - b'0'),
        b'a'..=b'f' => Some(digit - b'a' + 10),
        b'A'..=b'F' => Some(digit - b'A' + 10),
        _ => None,
    }
}

/// Padded standard base64 of exactly 32 bytes.
pub(super) fn base64_tag(text: &str) -> Option<Tag> {
    // One byte of slack: the decoder wants room for its estimate (33 bytes for 44 characters).
    let mut buf = [0; 33];
    let n = STANDARD.decode_slice(text, &mut buf).ok()?;
    buf[..n].try_into().ok()
}
