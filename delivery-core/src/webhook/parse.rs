//! Reading a delivery's headers: one value per header, visible ASCII, decoded signatures.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::Mac;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::error::VerifyError;
use super::secret::Key;

/// An HMAC-SHA256 tag.
pub(super) type Tag = [u8; 32];

/// What a delivery's headers say: the signatures to compare, the signed content's layout with
/// the values it names, and the signed timestamp where the scheme has one.
pub(super) struct Signed<'a> {
    pub(super) signatures: Tags,
    /// The layout of the signed bytes: `{body}`, `{timestamp}`, `{id}` and literal text.
    pub(super) layout: &'a str,
    /// `{timestamp}`, as sent.
    pub(super) timestamp_text: &'a str,
    /// `{id}`, as sent.
    pub(super) id: &'a str,
    /// The timestamp, for the tolerance check.
    pub(super) timestamp: Option<u64>,
}

/// The signatures a delivery carries: the first two inline, any more on the heap, so that reading
/// the usual one (or one per secret during a rotation) allocates nothing.
#[derive(Default)]
pub(super) struct Tags {
    inline: [Tag; 2],
    len: usize,
    more: Vec<Tag>,
}

impl Tags {
    pub(super) fn one(tag: Tag) -> Self {
        let mut tags = Tags::default();
        tags.push(tag);
        tags
    }

    pub(super) fn push(&mut self, tag: Tag) {
        match self.inline.get_mut(self.len) {
            Some(slot) => *slot = tag,
            None => self.more.push(tag),
        }
        self.len += 1;
    }

    pub(super) fn is_empty(&self) -> bool {
        self.len == 0
    }
}

impl Extend<Tag> for Tags {
    fn extend<I: IntoIterator<Item = Tag>>(&mut self, tags: I) {
        tags.into_iter().for_each(|tag| self.push(tag));
    }
}

impl FromIterator<Tag> for Tags {
    fn from_iter<I: IntoIterator<Item = Tag>>(tags: I) -> Self {
        let mut all = Tags::default();
        all.extend(tags);
        all
    }
}

impl<'t> IntoIterator for &'t Tags {
    type Item = &'t Tag;
    type IntoIter = std::iter::Chain<std::slice::Iter<'t, Tag>, std::slice::Iter<'t, Tag>>;

    fn into_iter(self) -> Self::IntoIter {
        let inline = &self.inline[..self.len.min(self.inline.len())];
        inline.iter().chain(self.more.iter())
    }
}

/// A header value a signed delivery carries, as the verifier reads it back: visible ASCII (spaces
/// inside allowed), nothing HTTP would trim at either end.
pub(super) fn signed_value(text: &str) -> Result<HeaderValue, &'static str> {
    let visible = text.bytes().all(|b| b == b' ' || b.is_ascii_graphic());
    if !visible || text.trim() != text {
        return Err("a header value is not visible ASCII, or has spaces at either end");
    }
    HeaderValue::from_str(text).map_err(|_| "a header value is not visible ASCII")
}

pub(super) const BODY: &str = "{body}";
pub(super) const TIMESTAMP: &str = "{timestamp}";
pub(super) const ID: &str = "{id}";

impl<'a> Signed<'a> {
    /// The signed content of a delivery being signed rather than verified (the HTTP sink's
    /// Standard Webhooks signatures, `testing::sign`).
    pub(super) fn to_sign(layout: &'a str, timestamp_text: &'a str, id: &'a str) -> Self {
        Signed {
            signatures: Tags::default(),
            layout,
            timestamp_text,
            id,
            timestamp: None,
        }
    }

    /// The HMAC-SHA256 of the signed content under `key`: the one place a tag is computed, for
    /// verifying a delivery and for signing one (the HTTP sink, `testing::sign`).
    pub(super) fn tag(&self, key: &Key, body: &[u8]) -> Tag {
        let mut mac = key.mac();
        // The short pieces (a timestamp, an id, the separators) go to the MAC together, in one
        // call rather than one each: the same bytes, in the same order.
        let mut short = Gather::default();
        self.content(body, |piece| short.feed(&mut mac, piece));
        short.flush(&mut mac);
        mac.finalize().into_bytes().into()
    }

    /// Feeds the signed content to `sink` in pieces, the body in place of `{body}`: nothing is
    /// copied.
    pub(super) fn content(&self, body: &[u8], mut sink: impl FnMut(&[u8])) {
        let mut rest = self.layout;
        while let Some(start) = rest.bytes().position(|b| b == b'{') {
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

/// Consecutive short pieces of signed content, gathered to be fed to the MAC at once.
struct Gather {
    buf: [u8; 64],
    len: usize,
}

impl Default for Gather {
    fn default() -> Self {
        Gather {
            buf: [0; 64],
            len: 0,
        }
    }
}

impl Gather {
    fn feed(&mut self, mac: &mut impl Mac, piece: &[u8]) {
        if piece.len() > self.buf.len() - self.len {
            self.flush(mac);
            if piece.len() > self.buf.len() {
                mac.update(piece);
                return;
            }
        }
        self.buf[self.len..self.len + piece.len()].copy_from_slice(piece);
        self.len += piece.len();
    }

    fn flush(&mut self, mac: &mut impl Mac) {
        if self.len > 0 {
            mac.update(&self.buf[..self.len]);
            self.len = 0;
        }
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
    // Visible ASCII, so its only white space is ASCII: `trim_ascii` is `trim`, without decoding.
    Ok(Some(text.trim_ascii()))
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
    if text.is_empty() {
        return None;
    }
    text.bytes().try_fold(0u64, |n, b| {
        let digit = b.wrapping_sub(b'0');
        (digit < 10).then_some(())?;
        n.checked_mul(10)?.checked_add(u64::from(digit))
    })
}

/// Exactly 64 hex digits, either case.
pub(super) fn hex_tag(text: &str) -> Option<Tag> {
    let mut tag = [0; 32];
    hex::decode_to_slice(text, &mut tag).ok()?;
    Some(tag)
}

/// Padded standard base64 of exactly 32 bytes.
pub(super) fn base64_tag(text: &[u8]) -> Option<Tag> {
    // One byte of slack: the decoder wants room for its estimate (33 bytes for 44 characters).
    let mut buf = [0; 33];
    let n = STANDARD.decode_slice(text, &mut buf).ok()?;
    buf[..n].try_into().ok()
}
