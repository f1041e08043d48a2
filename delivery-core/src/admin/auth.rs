//! Where the console's credential is checked: the bearer token or the session cookie on every
//! request, the CSRF token on every POST. Nothing else in the console decides who may act.

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;

use ::axum::http::{HeaderMap, header};

/// The session cookie's name.
pub(super) const COOKIE: &str = "delivery_admin";

/// The console's credential and what is derived from it: the value of a signed-in browser's
/// cookie and the CSRF token its forms carry. Both are HMACs keyed by the token, so neither
/// gives the token away, and changing the token signs every browser out.
#[derive(Clone)]
pub(super) struct Credential {
    token_digest: [u8; 32],
    session: String,
    csrf: String,
}

impl Credential {
    pub(super) fn new(token: &str) -> Self {
        Credential {
            token_digest: Sha256::digest(token.as_bytes()).into(),
            session: derive(token, b"delivery-admin session"),
            csrf: derive(token, b"delivery-admin csrf"),
        }
    }

    /// Whether `token` is the console's (compared as digests in constant time, so neither its
    /// bytes nor its length leak through timing).
    pub(super) fn is_token(&self, token: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        bool::from(digest.ct_eq(&self.token_digest))
    }

    /// Whether the request carries the credential: `Authorization: Bearer <token>`, or the
    /// session cookie a sign-in set.
    pub(super) fn admits(&self, headers: &HeaderMap) -> bool {
        let bearer = headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| self.is_token(token.trim()));
        bearer
            || cookies(headers)
                .filter(|(name, _)| *name == COOKIE)
                .any(|(_, value)| equal(value, &self.session))
    }

    /// The session cookie's value.
    pub(super) fn session(&self) -> &str {
        &self.session
    }

    /// The CSRF token every form of the console carries.
    pub(super) fn csrf(&self) -> &str {
        &self.csrf
    }

    /// Whether a form's `csrf` field is the console's.
    pub(super) fn is_csrf(&self, field: &str) -> bool {
        equal(field, &self.csrf)
    }
}

fn derive(token: &str, label: &[u8]) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(token.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(label);
    hex::encode(mac.finalize().into_bytes())
}

fn equal(a: &str, b: &str) -> bool {
    bool::from(a.as_bytes().ct_eq(b.as_bytes()))
}

/// Every `name=value` pair of the request's `Cookie` headers.
fn cookies(headers: &HeaderMap) -> impl Iterator<Item = (&str, &str)> {
    headers
        .get_all(header::COOKIE)
        .into_iter()
        .filter_map(|v| v.to_str().ok())
        .flat_map(|v| v.split(';'))
        .filter_map(|pair| pair.trim().split_once('='))
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::axum::http::HeaderValue;

    fn with(name: header::HeaderName, value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(name, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn admits_the_bearer_token_and_the_session_cookie_only() {
        let credential = Credential::new("s3cret-token-of-some-length");
        assert!(!credential.admits(&HeaderMap::new()));
        assert!(credential.admits(&with(
            header::AUTHORIZATION,
            "Bearer s3cret-token-of-some-length"
        )));
        assert!(!credential.admits(&with(header::AUTHORIZATION, "Bearer s3cret")));
        assert!(!credential.admits(&with(header::AUTHORIZATION, "Basic s3cret")));
        let cookie = format!("other=1; {COOKIE}={}", credential.session());
        assert!(credential.admits(&with(header::COOKIE, &cookie)));
        let forged = format!("{COOKIE}=s3cret-token-of-some-length");
        assert!(!credential.admits(&with(header::COOKIE, &forged)));
    }

    #[test]
    fn the_cookie_and_the_csrf_token_differ_from_the_token_and_each_other() {
        let credential = Credential::new("s3cret-token-of-some-length");
        assert_ne!(credential.session(), credential.csrf());
        assert!(!credential.session().contains("s3cret"));
        assert!(credential.is_csrf(credential.csrf()));
        assert!(!credential.is_csrf(""));
        assert_ne!(
            Credential::new("another-token-of-some-length").csrf(),
            credential.csrf()
        );
    }
}
