//! Where the console's credential is checked: the bearer token or a session's cookie on every
//! request, the request's origin and the CSRF value on every POST. Nothing else in the console
//! decides who may act.

use std::collections::HashMap;
use std::sync::{Mutex, PoisonError};
use std::time::Duration;

use hmac::{KeyInit, Mac};
use sha2::{Digest, Sha256};
use subtle::ConstantTimeEq;
use tokio::time::Instant;

use ::axum::http::{HeaderMap, Uri, header};

/// The session cookie's name.
pub(super) const COOKIE: &str = "delivery_admin";

/// The console's credential: the token, kept as its digest, and the CSRF value of the requests
/// the token itself admits (a script's bearer token, or the service's own auth layer), an HMAC
/// keyed by the token so it never gives the token away.
#[derive(Clone)]
pub(super) struct Credential {
    token_digest: [u8; 32],
    csrf: String,
}

impl Credential {
    pub(super) fn new(token: &str) -> Self {
        Credential {
            token_digest: Sha256::digest(token.as_bytes()).into(),
            csrf: derive(token, b"delivery-admin csrf"),
        }
    }

    /// Whether `token` is the console's (compared as digests in constant time, so neither its
    /// bytes nor its length leak through timing).
    pub(super) fn is_token(&self, token: &str) -> bool {
        let digest: [u8; 32] = Sha256::digest(token.as_bytes()).into();
        bool::from(digest.ct_eq(&self.token_digest))
    }

    /// Whether the request carries `Authorization: Bearer <token>`.
    pub(super) fn bears_token(&self, headers: &HeaderMap) -> bool {
        headers
            .get(header::AUTHORIZATION)
            .and_then(|v| v.to_str().ok())
            .and_then(|v| v.strip_prefix("Bearer "))
            .is_some_and(|token| self.is_token(token.trim()))
    }

    /// The CSRF value of the forms a request the token admits gets.
    pub(super) fn csrf(&self) -> &str {
        &self.csrf
    }
}

/// A signed-in browser: its CSRF value and when it ends.
struct Session {
    csrf: String,
    ends: Instant,
}

/// The browsers signed in, in memory (they do not survive a restart): each under the SHA-256 of
/// its cookie's random value, so a lookup's timing tells nothing of the values held.
pub(super) struct Sessions {
    ttl: Duration,
    open: Mutex<HashMap<[u8; 32], Session>>,
}

/// A session just opened: the value its cookie holds.
pub(super) struct Opened {
    pub(super) cookie: String,
}

impl Sessions {
    pub(super) fn new(ttl: Duration) -> Self {
        Sessions {
            ttl,
            open: Mutex::new(HashMap::new()),
        }
    }

    /// How long a session lasts from its sign-in.
    pub(super) fn ttl(&self) -> Duration {
        self.ttl
    }

    /// Opens a session (dropping those that ended): `None` when the system has no randomness
    /// to give.
    pub(super) fn open(&self) -> Option<Opened> {
        let cookie = random_hex()?;
        let csrf = random_hex()?;
        let now = Instant::now();
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.retain(|_, session| session.ends > now);
        open.insert(
            key(&cookie),
            Session {
                csrf,
                ends: now + self.ttl,
            },
        );
        Some(Opened { cookie })
    }

    /// The CSRF value of the live session whose cookie the request carries.
    pub(super) fn of(&self, headers: &HeaderMap) -> Option<(String, String)> {
        let now = Instant::now();
        let open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        cookies(headers)
            .filter(|(name, _)| *name == COOKIE)
            .find_map(|(_, value)| {
                let session = open.get(&key(value))?;
                (session.ends > now).then(|| (value.to_owned(), session.csrf.clone()))
            })
    }

    /// Ends the session whose cookie is `cookie`.
    pub(super) fn end(&self, cookie: &str) {
        let mut open = self.open.lock().unwrap_or_else(PoisonError::into_inner);
        open.remove(&key(cookie));
    }
}

fn key(cookie: &str) -> [u8; 32] {
    Sha256::digest(cookie.as_bytes()).into()
}

/// 32 bytes from the operating system's generator, in hex.
fn random_hex() -> Option<String> {
    let mut bytes = [0u8; 32];
    getrandom::fill(&mut bytes).ok()?;
    Some(hex::encode(bytes))
}

fn derive(token: &str, label: &[u8]) -> String {
    let mut mac = hmac::Hmac::<Sha256>::new_from_slice(token.as_bytes())
        .expect("HMAC takes a key of any length");
    mac.update(label);
    hex::encode(mac.finalize().into_bytes())
}

/// Whether two values are equal, compared in constant time.
pub(super) fn equal(a: &str, b: &str) -> bool {
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

/// The first value of a proxy's comma-separated header.
fn forwarded<'a>(headers: &'a HeaderMap, name: &str) -> Option<&'a str> {
    let value = headers.get(name)?.to_str().ok()?;
    value.split(',').next().map(str::trim)
}

/// Whether the request came over TLS: its URI says `https` (HTTP/2's `:scheme`, an absolute
/// request target), or, when the console trusts its proxy, `X-Forwarded-Proto: https`.
pub(super) fn over_tls(uri: &Uri, headers: &HeaderMap, trust_proxy: bool) -> bool {
    uri.scheme_str()
        .is_some_and(|s| s.eq_ignore_ascii_case("https"))
        || (trust_proxy
            && forwarded(headers, "x-forwarded-proto")
                .is_some_and(|p| p.eq_ignore_ascii_case("https")))
}

/// Whether a `POST` comes from the console's own pages, as the browser tells: its
/// `Sec-Fetch-Site` is `same-origin` (or `none`: the user's own doing); without that header (an
/// older browser), its `Origin` — or, without one, its `Referer` — names the host the request was
/// sent to (`Host`, or `X-Forwarded-Host` when the console trusts its proxy). A request with none
/// of these headers comes from no browser (a script with the bearer token) and is let through.
pub(super) fn same_origin(uri: &Uri, headers: &HeaderMap, trust_proxy: bool) -> bool {
    if let Some(site) = headers.get("sec-fetch-site") {
        return site == "same-origin" || site == "none";
    }
    let from = match (headers.get(header::ORIGIN), headers.get(header::REFERER)) {
        (Some(origin), _) => origin,
        (None, Some(referer)) => referer,
        (None, None) => return true,
    };
    let from = from
        .to_str()
        .ok()
        .and_then(|v| v.parse::<Uri>().ok())
        .and_then(|v| v.authority().map(|a| a.as_str().to_ascii_lowercase()));
    let host = trust_proxy
        .then(|| forwarded(headers, "x-forwarded-host"))
        .flatten()
        .or_else(|| headers.get(header::HOST).and_then(|h| h.to_str().ok()))
        .or_else(|| uri.authority().map(|a| a.as_str()));
    match (from, host) {
        (Some(from), Some(host)) => from == host.trim().to_ascii_lowercase(),
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use ::axum::http::HeaderValue;

    fn with(pairs: &[(&'static str, &str)]) -> HeaderMap {
        let mut headers = HeaderMap::new();
        for (name, value) in pairs {
            headers.append(*name, HeaderValue::from_str(value).unwrap());
        }
        headers
    }

    #[test]
    fn admits_the_bearer_token_only() {
        let credential = Credential::new("s3cret-token-of-some-length");
        assert!(!credential.bears_token(&HeaderMap::new()));
        assert!(credential.bears_token(&with(&[(
            "authorization",
            "Bearer s3cret-token-of-some-length"
        )])));
        assert!(!credential.bears_token(&with(&[("authorization", "Bearer s3cret")])));
        assert!(!credential.bears_token(&with(&[("authorization", "Basic s3cret")])));
        assert!(!credential.csrf().contains("s3cret"));
    }

    #[tokio::test]
    async fn a_session_admits_its_cookie_until_it_ends() {
        let sessions = Sessions::new(Duration::from_secs(60));
        let opened = sessions.open().unwrap();
        let cookie = format!("other=1; {COOKIE}={}", opened.cookie);
        let (value, csrf) = sessions.of(&with(&[("cookie", &cookie)])).unwrap();
        assert_eq!(value, opened.cookie);
        assert_ne!(csrf, opened.cookie);
        assert!(
            sessions
                .of(&with(&[("cookie", &format!("{COOKIE}=forged"))]))
                .is_none()
        );
        sessions.end(&opened.cookie);
        assert!(sessions.of(&with(&[("cookie", &cookie)])).is_none());
    }

    #[test]
    fn the_origin_is_the_host_the_request_was_sent_to() {
        let uri: Uri = "/admin/sign-out".parse().unwrap();
        let host = ("host", "console.example:8080");
        assert!(same_origin(&uri, &with(&[host]), false));
        assert!(same_origin(
            &uri,
            &with(&[host, ("origin", "http://Console.example:8080")]),
            false
        ));
        assert!(!same_origin(
            &uri,
            &with(&[host, ("origin", "http://console.example")]),
            false
        ));
        assert!(!same_origin(
            &uri,
            &with(&[host, ("origin", "null")]),
            false
        ));
        assert!(same_origin(
            &uri,
            &with(&[host, ("referer", "https://console.example:8080/admin")]),
            false
        ));
        let proxied = [
            host,
            ("x-forwarded-host", "ops.example"),
            ("origin", "https://ops.example"),
        ];
        assert!(!same_origin(&uri, &with(&proxied), false));
        assert!(same_origin(&uri, &with(&proxied), true));
        assert!(!same_origin(
            &uri,
            &with(&[host, ("sec-fetch-site", "same-site")]),
            false
        ));
    }
}
