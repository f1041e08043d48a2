//! Reading a delivery's headers: one value per header, visible ASCII, decoded signatures.

use base64::Engine as _;
use base64::engine::general_purpose::STANDARD;
use hmac::Mac;
use http::{HeaderMap, HeaderName, HeaderValue};

use super::VerifyError;
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
    /// The signed content of a delivery being signed rather than verified (`testing::sign`).
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
    /// verifying a delivery and for signing one (`testing::sign`).
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
    let digits = text.as_bytes();
    if digits.len() != 64 {
        return None;
    }
    let mut tag = [0; 32];
    let mut seen = 0;
    for (byte, pair) in tag.iter_mut().zip(digits.chunks_exact(2)) {
        let (high, low) = (
            HEX_DECODE[usize::from(pair[0])],
            HEX_DECODE[usize::from(pair[1])],
        );
        seen |= high | low;
        *byte = high << 4 | low;
    }
    // A digit is at most 0xf: anything above is `INVALID`.
    (seen <= 0xf).then_some(tag)
}

/// The hex digits' values, either case, `INVALID` for any other byte.
const HEX_DECODE: [u8; 256] = {
    let digits = b"0123456789abcdef";
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < digits.len() {
        table[digits[i] as usize] = i as u8;
        table[digits[i].to_ascii_uppercase() as usize] = i as u8;
        i += 1;
    }
    table
};

/// Padded standard base64 of exactly 32 bytes.
pub(super) fn base64_tag(text: &[u8]) -> Option<Tag> {
    if let Some(tag) = canonical_base64_tag(text) {
        return Some(tag);
    }
    // One byte of slack: the decoder wants room for its estimate (33 bytes for 44 characters).
    let mut buf = [0; 33];
    let n = STANDARD.decode_slice(text, &mut buf).ok()?;
    buf[..n].try_into().ok()
}

/// The fast path of [`base64_tag`] for the form every sender uses: 43 characters of the standard
/// alphabet and one `=`, the last character's two unused bits zero. `None` for anything else,
/// which the general decoder then reads (or refuses) as before: this accepts nothing it does not.
fn canonical_base64_tag(text: &[u8]) -> Option<Tag> {
    let text: &[u8; 44] = text.try_into().ok()?;
    if text[43] != b'=' {
        return None;
    }
    let mut sextets = [0u8; 43];
    let mut seen = 0;
    for (sextet, &c) in sextets.iter_mut().zip(&text[..43]) {
        *sextet = BASE64_DECODE[usize::from(c)];
        seen |= *sextet;
    }
    // A character's value is below 64 (`INVALID` is not), and the last one's two unused bits are
    // zero.
    if seen >= 64 || sextets[42] & 0b11 != 0 {
        return None;
    }
    let mut tag = [0; 32];
    for (bytes, quad) in tag.chunks_exact_mut(3).zip(sextets.chunks_exact(4)) {
        let n = u32::from(quad[0]) << 18
            | u32::from(quad[1]) << 12
            | u32::from(quad[2]) << 6
            | u32::from(quad[3]);
        bytes.copy_from_slice(&n.to_be_bytes()[1..]);
    }
    // The last three characters: 18 bits, the top 16 of them the last two bytes.
    let n =
        (u32::from(sextets[40]) << 12 | u32::from(sextets[41]) << 6 | u32::from(sextets[42])) >> 2;
    tag[30..].copy_from_slice(&n.to_be_bytes()[2..]);
    Some(tag)
}

const INVALID: u8 = 0xff;

/// The standard base64 alphabet's values, `INVALID` for any other byte.
const BASE64_DECODE: [u8; 256] = {
    let alphabet = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut table = [INVALID; 256];
    let mut i = 0;
    while i < alphabet.len() {
        table[alphabet[i] as usize] = i as u8;
        i += 1;
    }
    table
};
