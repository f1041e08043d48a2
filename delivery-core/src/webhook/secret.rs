//! The shared secret, kept out of every `Debug`, `Display`, log line and error message.

use std::fmt;

use hmac::{Hmac, KeyInit};
use sha2::Sha256;

/// A webhook signing secret, as the provider hands it out.
///
/// It converts from `&str`, `String`, `&[u8]`, `Vec<u8>` and byte arrays, so
/// [`Verifier::new`](super::Verifier::new) takes any of them. It has no `Display`, and its `Debug`
/// prints `Secret(..redacted..)`: a secret cannot reach a log line through this type.
///
/// ```
/// use delivery_core::webhook::Secret;
///
/// let secret = Secret::from("whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
/// assert_eq!(format!("{secret:?}"), "Secret(..redacted..)");
/// ```
#[derive(Clone)]
pub struct Secret(Box<[u8]>);

impl Secret {
    /// Wraps the secret's bytes.
    pub fn new(bytes: impl Into<Vec<u8>>) -> Self {
        Secret(bytes.into().into_boxed_slice())
    }

    /// The bytes, for deriving the HMAC key.
    pub(super) fn expose(&self) -> &[u8] {
        &self.0
    }
}

/// An HMAC-SHA256 already keyed with a secret: the key schedule runs once, when the verifier is
/// built, and each delivery starts from a copy. As redacted as the secret it came from.
#[derive(Clone)]
pub(super) struct Key(Hmac<Sha256>);

impl Key {
    /// `None` for an empty key, which anyone could sign with.
    pub(super) fn new(key: &[u8]) -> Option<Self> {
        if key.is_empty() {
            return None;
        }
        Hmac::new_from_slice(key).ok().map(Key)
    }

    /// A fresh MAC under this key.
    pub(super) fn mac(&self) -> Hmac<Sha256> {
        self.0.clone()
    }
}

impl fmt::Debug for Key {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..redacted..)")
    }
}

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("Secret(..redacted..)")
    }
}

impl From<&str> for Secret {
    fn from(secret: &str) -> Self {
        Secret::new(secret)
    }
}

impl From<String> for Secret {
    fn from(secret: String) -> Self {
        Secret::new(secret)
    }
}

impl From<&String> for Secret {
    fn from(secret: &String) -> Self {
        Secret::new(secret.as_str())
    }
}

impl From<&[u8]> for Secret {
    fn from(secret: &[u8]) -> Self {
        Secret::new(secret)
    }
}

impl From<Vec<u8>> for Secret {
    fn from(secret: Vec<u8>) -> Self {
        Secret::new(secret)
    }
}

impl<const N: usize> From<&[u8; N]> for Secret {
    fn from(secret: &[u8; N]) -> Self {
        Secret::new(&secret[..])
    }
}
