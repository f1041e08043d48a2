//! HTTP sink (reqwest): POST with `Idempotency-Key: <record id>`, optionally signed as a
//! [Standard Webhooks](https://www.standardwebhooks.com/) sender.
//!
//! [`HttpSink::send`] POSTs a record's payload, byte for byte, to the record's endpoint with the
//! header `Idempotency-Key` set to the record id — the same on every attempt, so the receiver
//! deduplicates (rule 6) — and returns a [`Receipt`] only for a 2xx answer.
//!
//! | answer | failure |
//! |---|---|
//! | 2xx | none: a receipt |
//! | 408, 429, 5xx, a timeout, a connection error | [`HandlerError::retry`], with the receiver's `Retry-After` (seconds or HTTP-date) as [`HandlerError::after`] |
//! | 3xx | [`HandlerError::reject`]: redirects are not followed (a `303` would turn the POST into a GET) |
//! | any other 4xx | [`HandlerError::reject`]: the receiver refused the record; the relay marks it dead at once, its status and the start of its body in the dead record's detail |
//!
//! # Signed webhooks (rules 5 and 6)
//!
//! With [`HttpSink::standard_webhooks`] the sink is a webhook sender any Standard Webhooks
//! receiver accepts — this crate's own `#[webhook(scheme = standard_webhooks, ..)]`, Svix's
//! libraries, the standard's reference verifiers. Every attempt carries, beside
//! `Idempotency-Key`:
//!
//! | header | value |
//! |---|---|
//! | `webhook-id` | the record id: the same on every attempt, so the receiver deduplicates by it (rule 3 on its side) |
//! | `webhook-timestamp` | the attempt's send time, Unix seconds: a retry is signed afresh, never refused as a replay |
//! | `webhook-signature` | `v1,<base64 HMAC-SHA256>` over `{id}.{timestamp}.{body}`, keyed with the base64-decoded part of the `whsec_` secret; one space-separated entry per secret while a secret is rotated ([`HttpSink::also_sign_with`]) |
//!
//! The signature is computed by the same code, over the same layout and keys, as
//! [`Verifier`](delivery_core::webhook::Verifier) checks it with: the sender and the receiver cannot
//! drift apart.
//!
//! The sink speaks plain `http://` with reqwest's default features off. For `https://`, enable a
//! TLS feature of reqwest in your own `Cargo.toml` (for example
//! `reqwest = { version = "0.13", features = ["rustls"] }`); Cargo unifies the features.

#![warn(missing_docs, unreachable_pub, rust_2018_idioms)]
#![cfg_attr(docsrs, feature(doc_cfg))]

use std::fmt;
use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use http::StatusCode;
use http::header::{CONTENT_TYPE, HeaderMap, HeaderName, HeaderValue, LOCATION, RETRY_AFTER};
use reqwest::{Client, IntoUrl, Url};
use tracing::debug;

use delivery_core::HandlerError;
use delivery_core::outbox::{Receipt, Record, Sink};
use delivery_core::webhook::{Secret, StandardSigner};

/// The header carrying the record id.
pub const IDEMPOTENCY_KEY: HeaderName = HeaderName::from_static("idempotency-key");

/// How long one POST may take, connect to last body byte, unless told otherwise.
pub const DEFAULT_HTTP_TIMEOUT: Duration = Duration::from_secs(30);

/// The longest `Retry-After` honoured; a receiver asking for more gets this.
pub const MAX_RETRY_AFTER: Duration = Duration::from_secs(24 * 60 * 60);

/// How much of a refusing receiver's body is kept in the error (and so in the dead record).
const BODY_EXCERPT: usize = 512;

/// Sends outbox records to an HTTP receiver and returns a [`Receipt`] only for a 2xx answer.
/// Cloning is cheap (the reqwest client is shared).
///
/// ```no_run
/// use delivery::http::HttpSink;
/// use delivery::outbox::Record;
///
/// # async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
/// let sink = HttpSink::new("http://127.0.0.1:8080/events")?;
/// let record = Record::new("order-42-placed", "orders", None, &br#"{"order_id":"42"}"#[..], 0);
/// match sink.send(&record).await {
///     Ok(receipt) => assert_eq!(receipt.record(), record.id()),
///     Err(failure) => println!("retry: {}, after: {:?}", failure.is_retry(), failure.delay()),
/// }
/// # Ok(()) }
/// ```
///
/// One endpoint per topic:
///
/// ```
/// use delivery::http::HttpSink;
/// use delivery::outbox::Record;
///
/// let sink = HttpSink::routed(|record: &Record| match record.topic() {
///     "orders" => "http://orders.internal/events".parse().ok(),
///     "billing" => "http://billing.internal/hooks".parse().ok(),
///     _ => None, // no endpoint: the record is rejected (dead), for an operator to re-queue
/// })
/// .unwrap();
/// # let _ = sink;
/// ```
#[derive(Clone)]
pub struct HttpSink {
    client: Client,
    endpoint: Endpoint,
    content_type: HeaderValue,
    headers: HeaderMap,
    timeout: Duration,
    /// Standard Webhooks signing, when asked for.
    signing: Option<StandardSigner>,
}

/// Why [`HttpSink::standard_webhooks`] or [`HttpSink::also_sign_with`] cannot sign with a secret:
/// it is not base64 after `whsec_`, it is empty, or no secret was given first. Found where the
/// sink is built, at startup, rather than on every record. It never quotes the secret.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("the HTTP sink cannot sign Standard Webhooks: {reason}")]
pub struct SigningError {
    reason: &'static str,
}

impl SigningError {
    /// What is wrong, in words that never include the secret.
    pub fn reason(&self) -> &'static str {
        self.reason
    }
}

type Route = dyn Fn(&Record) -> Option<Url> + Send + Sync;

#[derive(Clone)]
enum Endpoint {
    Fixed(Url),
    Routed(Arc<Route>),
}

impl fmt::Debug for HttpSink {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let endpoint = match &self.endpoint {
            Endpoint::Fixed(url) => url.as_str(),
            Endpoint::Routed(_) => "<per record>",
        };
        f.debug_struct("HttpSink")
            .field("endpoint", &endpoint)
            .field("content_type", &self.content_type)
            .field("timeout", &self.timeout)
            .field("signing", &self.signing)
            .finish_non_exhaustive()
    }
}

impl HttpSink {
    /// A sink POSTing every record to `url`, on a client of its own that follows no redirects.
    /// Fails if `url` does not parse or the client cannot be built.
    pub fn new(url: impl IntoUrl) -> Result<Self, reqwest::Error> {
        Ok(HttpSink::with_endpoint(
            Endpoint::Fixed(url.into_url()?),
            default_client()?,
        ))
    }

    /// A sink POSTing each record to the URL `route` picks for it (by topic, typically). A record
    /// for which `route` answers `None` can never be sent and is rejected.
    pub fn routed(
        route: impl Fn(&Record) -> Option<Url> + Send + Sync + 'static,
    ) -> Result<Self, reqwest::Error> {
        Ok(HttpSink::with_endpoint(
            Endpoint::Routed(Arc::new(route)),
            default_client()?,
        ))
    }

    fn with_endpoint(endpoint: Endpoint, client: Client) -> Self {
        HttpSink {
            client,
            endpoint,
            content_type: HeaderValue::from_static("application/json"),
            headers: HeaderMap::new(),
            timeout: DEFAULT_HTTP_TIMEOUT,
            signing: None,
        }
    }

    /// Sends with `client` instead (proxies, TLS roots, connection pool settings). Build it with
    /// `redirect(reqwest::redirect::Policy::none())`: a followed `303` turns the POST into a GET
    /// whose 2xx would count as the receiver's confirmation.
    pub fn client(mut self, client: Client) -> Self {
        self.client = client;
        self
    }

    /// The `Content-Type` of every POST (default `application/json`).
    pub fn content_type(mut self, content_type: HeaderValue) -> Self {
        self.content_type = content_type;
        self
    }

    /// Adds a header to every POST (an `Authorization`, a tenant). `Content-Type`,
    /// `Idempotency-Key` and, when signing, the `webhook-*` headers are the sink's and cannot be
    /// replaced here.
    pub fn header(mut self, name: HeaderName, value: HeaderValue) -> Self {
        self.headers.append(name, value);
        self
    }

    /// How long one POST may take, from connecting to the last byte of the answer (default
    /// [`DEFAULT_HTTP_TIMEOUT`]); a timeout fails as a retry.
    pub fn timeout(mut self, timeout: Duration) -> Self {
        self.timeout = timeout;
        self
    }

    /// Signs every attempt as a [Standard Webhooks](https://www.standardwebhooks.com/) sender
    /// with `secret`, the receiver's signing secret as it hands it out (`whsec_<base64>`; the
    /// prefix is optional): `webhook-id` is the record id, the same on every attempt;
    /// `webhook-timestamp` the attempt's send time, in Unix seconds; `webhook-signature`
    /// `v1,<base64>` over `{id}.{timestamp}.{body}`. Replaces any secret given before.
    ///
    /// `Err` if the secret is not base64 after the prefix or is empty: a sink that could sign
    /// nothing fails where it is built, not on every record.
    ///
    /// ```
    /// use delivery::http::HttpSink;
    ///
    /// # fn build() -> Result<(), Box<dyn std::error::Error>> {
    /// let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw"; // from your configuration
    /// let sink = HttpSink::new("http://127.0.0.1:8080/webhooks")?.standard_webhooks(secret)?;
    /// # let _ = sink;
    /// assert!(HttpSink::new("http://127.0.0.1:8080/webhooks")?.standard_webhooks("whsec_%%").is_err());
    /// # Ok(()) }
    /// # build().unwrap();
    /// ```
    pub fn standard_webhooks(mut self, secret: impl Into<Secret>) -> Result<Self, SigningError> {
        let mut signing = StandardSigner::new();
        signing
            .add(&secret.into())
            .map_err(|reason| SigningError { reason })?;
        self.signing = Some(signing);
        Ok(self)
    }

    /// Also signs with `secret`, for a rotation: every attempt then carries one `v1,` signature
    /// per secret, space-separated in `webhook-signature`, so a receiver that knows only the old
    /// secret and one that knows only the new one both accept it. Drop the old secret (build the
    /// sink with [`standard_webhooks`](HttpSink::standard_webhooks) alone) once every receiver
    /// has the new one.
    ///
    /// `Err` if the secret cannot be used (as for `standard_webhooks`), or if the sink does not
    /// sign yet: call [`standard_webhooks`](HttpSink::standard_webhooks) first.
    ///
    /// ```
    /// use delivery::http::HttpSink;
    ///
    /// # fn build() -> Result<(), Box<dyn std::error::Error>> {
    /// let (new, old) = ("whsec_dGhlIG5ldyBzZWNyZXQga2V5ICEhIQ==", "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw");
    /// let sink = HttpSink::new("http://127.0.0.1:8080/webhooks")?
    ///     .standard_webhooks(new)?
    ///     .also_sign_with(old)?; // until every receiver has the new secret
    /// # let _ = sink;
    /// # Ok(()) }
    /// # build().unwrap();
    /// ```
    pub fn also_sign_with(mut self, secret: impl Into<Secret>) -> Result<Self, SigningError> {
        let Some(signing) = &mut self.signing else {
            return Err(SigningError {
                reason: "`also_sign_with` adds a secret to a signing sink: call `standard_webhooks` first",
            });
        };
        signing
            .add(&secret.into())
            .map_err(|reason| SigningError { reason })?;
        Ok(self)
    }

    /// POSTs `record`'s payload intact with `Idempotency-Key: <record id>` and, when the sink
    /// [signs](HttpSink::standard_webhooks), the Standard Webhooks headers, signed now.
    ///
    /// `Ok` only for a 2xx. 408, 429, 5xx, timeouts and connection errors fail as
    /// [`HandlerError::retry`], carrying the receiver's `Retry-After` (capped at
    /// [`MAX_RETRY_AFTER`]) as [`HandlerError::after`]; a 3xx or any other 4xx fails as
    /// [`HandlerError::reject`] (its message, and so the dead record's detail, has the status and
    /// the start of the answer's body), as does a record with no endpoint or an id that is not a
    /// valid header value.
    pub async fn send(&self, record: impl AsRef<Record>) -> Result<Receipt, HandlerError> {
        let record = record.as_ref();
        let url = match &self.endpoint {
            Endpoint::Fixed(url) => url.clone(),
            Endpoint::Routed(route) => route(record).ok_or_else(|| {
                HandlerError::reject(format!(
                    "no HTTP endpoint for topic `{}` (record {})",
                    record.topic(),
                    record.id()
                ))
            })?,
        };
        let key = HeaderValue::from_str(record.id().as_str()).map_err(|_| {
            HandlerError::reject(format!(
                "record id {:?} is not a valid Idempotency-Key header value",
                record.id()
            ))
        })?;
        let mut headers = self.headers.clone();
        headers.insert(CONTENT_TYPE, self.content_type.clone());
        headers.insert(IDEMPOTENCY_KEY, key);
        // The record's headers (its trace context, `traceparent`: see `delivery_core::trace`).
        for (name, value) in delivery_core::trace::outgoing("http", record.headers()).iter() {
            if let (Ok(name), Ok(value)) = (
                HeaderName::from_bytes(name.as_bytes()),
                HeaderValue::from_bytes(value),
            ) {
                headers.insert(name, value);
            }
        }
        if let Some(stamp) = record.stamp() {
            // The record's order, for the receiver's store guard (rule 4).
            headers.insert(delivery_core::headers::STAMP, HeaderValue::from(stamp.0));
        }
        if let Some(signing) = &self.signing {
            // The attempt's own time: each retry is signed afresh, under the same id.
            let now = SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |since| since.as_secs());
            signing
                .sign(record.id().as_str(), now, record.payload(), &mut headers)
                .map_err(|reason| {
                    HandlerError::reject(format!(
                        "record {:?} cannot be signed as a Standard Webhook: {reason}",
                        record.id()
                    ))
                })?;
        }
        let sent = self
            .client
            .post(url.clone())
            .headers(headers)
            .body(record.payload().clone())
            .timeout(self.timeout)
            .send()
            .await;
        let response = match sent {
            Ok(response) => response,
            Err(error) => {
                debug!(record = %record.id(), %url, %error, "POST failed");
                let detail = error_chain(&error);
                // A request that cannot even be built (a scheme without its TLS feature) fails
                // the same way on every attempt.
                return Err(if error.is_builder() {
                    HandlerError::reject(format!(
                        "POST of record {} to {url}: {detail}",
                        record.id()
                    ))
                } else {
                    HandlerError::retry(format!(
                        "POST of record {} to {url}: {detail}",
                        record.id()
                    ))
                });
            }
        };
        let status = response.status();
        debug!(record = %record.id(), %url, %status, "POST answered");
        if status.is_success() {
            return Ok(Receipt::confirmed(record.id().clone()));
        }
        let retry_after = retry_after(response.headers(), SystemTime::now());
        let location = response
            .headers()
            .get(LOCATION)
            .map(|value| String::from_utf8_lossy(value.as_bytes()).into_owned());
        let excerpt = excerpt(response).await;
        let message = format!(
            "{url} answered {status} to record {}{}",
            record.id(),
            if excerpt.is_empty() {
                String::new()
            } else {
                format!(": {excerpt}")
            }
        );
        if is_transient(status) {
            let failure = HandlerError::retry(message);
            return Err(match retry_after {
                Some(delay) => failure.after(delay),
                None => failure,
            });
        }
        if status.is_redirection() {
            return Err(HandlerError::reject(format!(
                "{message}; redirect to {} not followed: configure the endpoint's new URL",
                location.as_deref().unwrap_or("(no Location)")
            )));
        }
        Err(HandlerError::reject(message))
    }
}

impl Sink for HttpSink {
    /// [`HttpSink::send`].
    fn send(&self, record: &Record) -> impl Future<Output = Result<Receipt, HandlerError>> + Send {
        HttpSink::send(self, record)
    }
}

fn default_client() -> Result<Client, reqwest::Error> {
    Client::builder()
        .redirect(reqwest::redirect::Policy::none())
        .build()
}

/// 408, 429 and 5xx may pass later; so may a status outside the standard ranges.
fn is_transient(status: StatusCode) -> bool {
    status == StatusCode::REQUEST_TIMEOUT
        || status == StatusCode::TOO_MANY_REQUESTS
        || status.is_server_error()
        || status.as_u16() >= 600
        || status.is_informational()
}

/// The receiver's `Retry-After`: delay-seconds or an HTTP-date (RFC 9110 §10.2.3), relative to
/// `now`; a date in the past is no delay; anything else is ignored.
fn retry_after(headers: &HeaderMap, now: SystemTime) -> Option<Duration> {
    let value = headers.get(RETRY_AFTER)?.to_str().ok()?.trim();
    let delay = if !value.is_empty() && value.bytes().all(|b| b.is_ascii_digit()) {
        // Digits only, so the parse fails only on overflow: a wait longer than any cap.
        value
            .parse::<u64>()
            .map(Duration::from_secs)
            .unwrap_or(MAX_RETRY_AFTER)
    } else {
        let at = httpdate::parse_http_date(value).ok()?;
        at.duration_since(now).unwrap_or(Duration::ZERO)
    };
    Some(delay.min(MAX_RETRY_AFTER))
}

/// The start of a refusing receiver's body, as text, for the error (and the dead record).
async fn excerpt(mut response: reqwest::Response) -> String {
    let mut body = Vec::new();
    while body.len() < BODY_EXCERPT {
        match response.chunk().await {
            Ok(Some(chunk)) => body.extend_from_slice(&chunk),
            _ => break,
        }
    }
    let mut end = body.len().min(BODY_EXCERPT);
    let text = loop {
        // Cut on a character boundary when the excerpt ends inside one.
        match std::str::from_utf8(&body[..end]) {
            Ok(text) => break text.to_owned(),
            Err(error) if error.error_len().is_none() => end = error.valid_up_to(),
            Err(_) => break String::from_utf8_lossy(&body[..end]).into_owned(),
        }
    };
    text.trim().to_owned()
}

fn error_chain(error: &reqwest::Error) -> String {
    let mut text = error.to_string();
    let mut next = std::error::Error::source(error);
    while let Some(cause) = next {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        next = cause.source();
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn headers(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert(RETRY_AFTER, HeaderValue::from_str(value).unwrap());
        headers
    }

    #[test]
    fn retry_after_reads_seconds_and_dates() {
        let now = httpdate::parse_http_date("Sun, 06 Nov 1994 08:49:37 GMT").unwrap();
        assert_eq!(
            retry_after(&headers("120"), now),
            Some(Duration::from_secs(120))
        );
        assert_eq!(retry_after(&headers(" 0 "), now), Some(Duration::ZERO));
        assert_eq!(
            retry_after(&headers("Sun, 06 Nov 1994 08:50:07 GMT"), now),
            Some(Duration::from_secs(30))
        );
        // The obsolete RFC 850 and asctime forms are HTTP-dates too.
        assert_eq!(
            retry_after(&headers("Sunday, 06-Nov-94 08:50:37 GMT"), now),
            Some(Duration::from_secs(60))
        );
        assert_eq!(
            retry_after(&headers("Sun Nov  6 08:49:47 1994"), now),
            Some(Duration::from_secs(10))
        );
        assert_eq!(
            retry_after(&headers("Sat, 05 Nov 1994 08:49:37 GMT"), now),
            Some(Duration::ZERO)
        );
        assert_eq!(
            retry_after(&headers("99999999999999999999999"), now),
            Some(MAX_RETRY_AFTER)
        );
        assert_eq!(retry_after(&headers("-5"), now), None);
        assert_eq!(retry_after(&headers("soon"), now), None);
        assert_eq!(retry_after(&HeaderMap::new(), now), None);
    }

    #[test]
    fn signing_is_configured_at_build_time_and_never_shows_the_secret() {
        let sink = || HttpSink::new("http://127.0.0.1:9/hooks").unwrap();
        let secret = "whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw";
        let signing = sink()
            .standard_webhooks(secret)
            .unwrap()
            .also_sign_with("whsec_dGhlIG5ldyBzZWNyZXQga2V5ICEhIQ==")
            .unwrap();
        let shown = format!("{signing:?}");
        assert!(shown.contains("secrets: 2"), "{shown}");
        assert!(!shown.contains("MfKQ"), "{shown}");

        let not_base64 = sink().standard_webhooks("whsec_not base64!").unwrap_err();
        assert!(
            !not_base64.to_string().contains("not base64!"),
            "{not_base64}"
        );
        assert!(sink().standard_webhooks("whsec_").is_err());
        let first = sink().also_sign_with(secret).unwrap_err();
        assert!(first.reason().contains("standard_webhooks"), "{first}");
        assert!(
            sink()
                .standard_webhooks(secret)
                .unwrap()
                .also_sign_with("")
                .is_err()
        );
    }

    #[test]
    fn transient_statuses() {
        for code in [408, 429, 500, 502, 503, 504] {
            assert!(is_transient(StatusCode::from_u16(code).unwrap()), "{code}");
        }
        for code in [400, 401, 403, 404, 409, 410, 422, 301, 303] {
            assert!(!is_transient(StatusCode::from_u16(code).unwrap()), "{code}");
        }
    }
}
