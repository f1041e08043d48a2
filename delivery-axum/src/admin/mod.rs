//! A web console over dead letters (feature `admin`): an axum [`Router`] a service mounts where
//! it likes, server-rendered HTML with no front-end build.
//!
//! The console shows every dead letter it was given grouped by source and reason with counts, a
//! page per group and per unit (payload — pretty-printed when it is JSON —, headers, reason,
//! detail, delivery count), and acts on them through [`DeadLetters`]: redrive or purge one unit or
//! a whole group, and redrive a unit **edited** (the operator's payload in place of its own, the
//! edit recorded in its headers, [`DeadLetters::redrive_edited`]). A redrive sends a unit back
//! under its own id (rule 3).
//!
//! Secure by default:
//! - Every route, unknown paths included, answers `401` without the credential: the bearer token
//!   the console was made with, sent as `Authorization: Bearer <token>` by a script, or the
//!   session cookie (`HttpOnly`, `SameSite=Strict`, `Secure` when the request came over TLS) a
//!   browser gets by signing in on the `401` page's form. A session is a random value the console
//!   holds in memory with its own CSRF value; it ends at sign-out, after
//!   [`session_ttl`](Console::session_ttl) (12 hours by default), and when the service restarts.
//! - What changes anything is a `POST` carrying the CSRF value of the page it came from; without
//!   it, `403`. A `POST` the browser says came from another site (`Sec-Fetch-Site`, or an
//!   `Origin` or `Referer` naming another host than the request's) is refused (`403`) too, the
//!   sign-in included.
//! - Payloads, headers, ids and details are always HTML-escaped: a payload `<script>…` shows as
//!   that text.
//! - The console reads and changes only the dead letters it was given.
//!
//! A service that signs its operators in some other way (basic auth, an SSO proxy, a session of
//! its own) gives the console its tower layer instead, [`Console::auth_layer`]; a layer put on
//! the router (`console.router().layer(..)`) applies on top of the token's check.
//!
//! ```
//! use delivery::admin::Console;
//! use delivery::memory::MemoryBroker;
//!
//! let broker = MemoryBroker::new();
//! let console = Console::new("change-me-to-a-long-random-token")
//!     .dead_letters(broker.dead_letters("orders"))
//!     .dead_letters(broker.dead_letters("invoices"));
//! // Beside the service's own routes; the console links within wherever it is mounted.
//! let app: axum::Router = axum::Router::new().nest_service("/admin", console.router());
//! # let _ = app;
//! ```
//!
//! Mount it with `nest_service`, which serves `/admin`, `/admin/` and everything below: axum's
//! `nest` serves the nested router's `/` at `/admin` only, and leaves `/admin/` to the service's
//! own fallback (a bare `404`).
//!
//! Behind a reverse proxy that terminates TLS, tell the console to believe the proxy's
//! `X-Forwarded-Proto` and `X-Forwarded-Host` ([`trust_forwarded_headers`](Console::trust_forwarded_headers));
//! a service that serves TLS itself over HTTP/1.1 says so with
//! [`served_over_tls`](Console::served_over_tls), since such a request does not say it.
//!
//! A token shorter than [`MIN_TOKEN_LEN`] is refused when the router is built, so a console is
//! never served behind a guessable credential:
//!
//! ```should_panic
//! let _ = delivery::admin::Console::new("admin").router();
//! ```

mod auth;
mod gate;
mod handlers;
mod model;
mod pages;

use std::collections::BTreeMap;
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ::axum::Router;
use ::axum::extract::Request;
use ::axum::middleware;
use ::axum::response::IntoResponse;
use ::axum::routing::{Route, get, post};
use tower_layer::Layer;
use tower_service::Service;

use self::auth::{Credential, Sessions};
use delivery_core::dead_letter::{AnyDeadLetters, DeadLetters};

use gate::{guard, sign_in, sign_out};
use handlers::{
    edit_unit, group, not_found, overview, purge_group, purge_unit, redrive_group, redrive_unit,
    unit,
};
use model::Shared;

/// The shortest bearer token a console accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// A web console over dead letters: made with its credential, given the dead letters it may
/// show and change, served as an axum [`Router`] (see the [module docs](self)).
#[derive(Clone)]
pub struct Console {
    token: String,
    dead_letters: Vec<AnyDeadLetters>,
    scan_limit: usize,
    /// The service's own authentication, in place of the token's ([`Console::auth_layer`]).
    auth_layer: Option<Arc<dyn Fn(Router) -> Router + Send + Sync>>,
    session_ttl: Duration,
    trust_forwarded: bool,
    over_tls: bool,
}

impl std::fmt::Debug for Console {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Console")
            .field("token", &"<redacted>")
            .field("dead_letters", &self.dead_letters)
            .field("scan_limit", &self.scan_limit)
            .field("auth_layer", &self.auth_layer.is_some())
            .field("session_ttl", &self.session_ttl)
            .field("trust_forwarded", &self.trust_forwarded)
            .field("over_tls", &self.over_tls)
            .finish()
    }
}

impl Console {
    /// A console that admits requests bearing `token` (at least [`MIN_TOKEN_LEN`] characters:
    /// [`router`](Self::router) panics on a shorter one).
    pub fn new(token: impl Into<String>) -> Self {
        Console {
            token: token.into(),
            dead_letters: Vec::new(),
            scan_limit: 10_000,
            auth_layer: None,
            session_ttl: Duration::from_secs(12 * 60 * 60),
            trust_forwarded: false,
            over_tls: false,
        }
    }

    /// How long a browser stays signed in after it signs in (12 hours by default): then its
    /// session ends on the server and its cookie expires.
    pub fn session_ttl(mut self, ttl: Duration) -> Self {
        self.session_ttl = ttl.max(Duration::from_secs(1));
        self
    }

    /// Believes the reverse proxy in front of the console (off by default): its
    /// `X-Forwarded-Proto: https` marks the session cookie `Secure`, and its `X-Forwarded-Host`
    /// is the host a browser's `Origin` must name. Only for a console every request of which
    /// comes through a proxy that sets both headers itself, overwriting a client's.
    pub fn trust_forwarded_headers(mut self, trust: bool) -> Self {
        self.trust_forwarded = trust;
        self
    }

    /// Marks every session cookie `Secure`: for a service that serves TLS itself over HTTP/1.1,
    /// where a request does not say it came over TLS. (A request whose URI says `https`, as
    /// HTTP/2's do, gets a `Secure` cookie anyway.)
    pub fn served_over_tls(mut self) -> Self {
        self.over_tls = true;
        self
    }

    /// Admits the requests the service's own tower `layer` lets through, instead of checking the
    /// bearer token and the session cookie: for a service that already signs its operators in
    /// (basic auth, an SSO proxy's header, a session of its own). The layer must refuse what it
    /// does not admit; the console then keeps no sign-in page of its own, and the token only keys
    /// the CSRF token of its forms, which every `POST` still needs.
    ///
    /// ```
    /// use axum::extract::Request;
    /// use axum::http::StatusCode;
    /// use axum::middleware::{self, Next};
    /// use axum::response::{IntoResponse, Response};
    /// use delivery::admin::Console;
    ///
    /// /// The service's own check: here, a header its SSO proxy sets.
    /// async fn operators_only(request: Request, next: Next) -> Response {
    ///     match request.headers().get("x-forwarded-groups") {
    ///         Some(groups) if groups.as_bytes().split(|b| *b == b',').any(|g| g == b"ops") => {
    ///             next.run(request).await
    ///         }
    ///         _ => StatusCode::UNAUTHORIZED.into_response(),
    ///     }
    /// }
    ///
    /// let broker = delivery::memory::MemoryBroker::new();
    /// let console = Console::new("csrf-key-of-sixteen-characters-or-more")
    ///     .dead_letters(broker.dead_letters("orders"))
    ///     .auth_layer(middleware::from_fn(operators_only));
    /// let app: axum::Router = axum::Router::new().nest_service("/admin", console.router());
    /// # let _ = app;
    /// ```
    pub fn auth_layer<L>(mut self, layer: L) -> Self
    where
        L: Layer<Route> + Clone + Send + Sync + 'static,
        L::Service: Service<Request> + Clone + Send + Sync + 'static,
        <L::Service as Service<Request>>::Response: IntoResponse + 'static,
        <L::Service as Service<Request>>::Error: Into<Infallible> + 'static,
        <L::Service as Service<Request>>::Future: Send + 'static,
    {
        self.auth_layer = Some(Arc::new(move |router: Router| router.layer(layer.clone())));
        self
    }

    /// Adds a dead letter the console shows and acts on, under its
    /// [`name`](DeadLetters::name). Any of this crate's dead letters, or an [`AnyDeadLetters`].
    pub fn dead_letters(mut self, dead_letters: impl Into<AnyDeadLetters>) -> Self {
        self.dead_letters.push(dead_letters.into());
        self
    }

    /// How many records of each dead letter the overview and the group actions read (10 000 by
    /// default): a larger dead letter is shown by its first `limit` records and its full count,
    /// and a group action acts on the group's units among them.
    pub fn scan_limit(mut self, limit: usize) -> Self {
        self.scan_limit = limit.max(1);
        self
    }

    /// The console's routes, every one behind the credential. Mount them with axum's
    /// `nest_service`, which serves the mount point with and without its trailing slash (see
    /// the [module docs](self)).
    ///
    /// # Panics
    ///
    /// If the token is shorter than [`MIN_TOKEN_LEN`], or two dead letters share a name.
    pub fn router(self) -> Router {
        assert!(
            self.token.chars().count() >= MIN_TOKEN_LEN,
            "delivery::admin::Console: the token must have at least {MIN_TOKEN_LEN} characters"
        );
        let mut by_name = BTreeMap::new();
        for dead in &self.dead_letters {
            let name = dead.name().to_owned();
            assert!(
                by_name.insert(name.clone(), dead.clone()).is_none(),
                "delivery::admin::Console: two dead letters are named {name:?}"
            );
        }
        let state = Arc::new(Shared {
            credential: Credential::new(&self.token),
            sessions: Sessions::new(self.session_ttl),
            token_admits: self.auth_layer.is_none(),
            trust_forwarded: self.trust_forwarded,
            over_tls: self.over_tls,
            order: self.dead_letters,
            by_name,
            scan_limit: self.scan_limit,
        });
        let router = Router::new()
            .route("/", get(overview))
            .route("/sign-in", post(sign_in))
            .route("/sign-out", post(sign_out))
            .route("/d/{dead}", get(group))
            .route("/d/{dead}/group/redrive", post(redrive_group))
            .route("/d/{dead}/group/purge", post(purge_group))
            .route("/d/{dead}/u/{id}", get(unit))
            .route("/d/{dead}/u/{id}/redrive", post(redrive_unit))
            .route("/d/{dead}/u/{id}/purge", post(purge_unit))
            .route("/d/{dead}/u/{id}/edit", post(edit_unit))
            .fallback(not_found)
            .layer(middleware::from_fn_with_state(state.clone(), guard))
            .with_state(state);
        match &self.auth_layer {
            Some(layer) => layer(router),
            None => router,
        }
    }
}

/// The console as the conformance suite's
/// [`WebConsole`](delivery_core::testing::conformance::WebConsole) (feature `testing`).
#[cfg(feature = "testing")]
pub mod testing {
    use ::axum::Router;
    use ::axum::body::Body;
    use bytes::Bytes;
    use delivery_core::dead_letter::AnyDeadLetters;
    use delivery_core::testing::conformance::WebConsole;

    use super::Console;

    /// A [`Console`] over `dead` with the bearer token `token`, nested at `/ops`.
    pub fn console(dead: AnyDeadLetters, token: &'static str) -> Served {
        Served(Router::new().nest("/ops", Console::new(token).dead_letters(dead).router()))
    }

    /// The router [`console`] serves.
    #[derive(Clone)]
    pub struct Served(Router);

    impl WebConsole for Served {
        async fn answer(&self, request: http::Request<Bytes>) -> http::Response<Bytes> {
            let response =
                tower_service::Service::call(&mut self.0.clone(), request.map(Body::from))
                    .await
                    .unwrap_or_else(|never| match never {});
            let (parts, body) = response.into_parts();
            let body = ::axum::body::to_bytes(body, 1 << 20)
                .await
                .unwrap_or_default();
            http::Response::from_parts(parts, body)
        }
    }
}
