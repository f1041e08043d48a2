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
mod pages;

use std::collections::{BTreeMap, HashSet};
use std::convert::Infallible;
use std::sync::Arc;
use std::time::Duration;

use ::axum::extract::{
    Form, FromRequest, FromRequestParts, NestedPath, Path, Query, RawPathParams, Request, State,
};
use ::axum::http::request::Parts;
use ::axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use ::axum::middleware::{self, Next};
use ::axum::response::{IntoResponse, Redirect, Response};
use ::axum::routing::{Route, get, post};
use ::axum::{Extension, Router};
use bytes::Bytes;
use serde::Deserialize;
use tower_layer::Layer;
use tower_service::Service;

use self::auth::{Credential, Sessions};
use delivery_core::dead_letter::{AnyDeadLetters, DeadLetter, DeadLetters, Selection};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

/// The shortest bearer token a console accepts.
pub const MIN_TOKEN_LEN: usize = 16;

/// Records read per page while the console scans a dead letter to group it.
const PAGE: usize = 500;

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

/// What every handler shares.
struct Shared {
    credential: Credential,
    /// The browsers signed in.
    sessions: Sessions,
    /// Whether the token (bearer or session cookie) admits requests; `false` behind the service's
    /// own [`Console::auth_layer`].
    token_admits: bool,
    /// Whether a proxy's `X-Forwarded-Proto` and `X-Forwarded-Host` are believed.
    trust_forwarded: bool,
    /// Whether every request came over TLS ([`Console::served_over_tls`]).
    over_tls: bool,
    /// The dead letters in the order they were given (the overview's order).
    order: Vec<AnyDeadLetters>,
    by_name: BTreeMap<String, AnyDeadLetters>,
    scan_limit: usize,
}

type Env = State<Arc<Shared>>;

/// Where the console is mounted (the path before its own routes), the CSRF value of the
/// request's session (or of its bearer token), and the session itself: what every page needs to
/// link and to post within the console.
#[derive(Clone)]
pub(crate) struct Ctx {
    base: String,
    csrf: String,
    /// The cookie value of the session that admitted the request.
    session: Option<String>,
    /// Whether the request came over TLS: its cookie is `Secure`.
    secure: bool,
}

impl Ctx {
    /// The session cookie's attributes: scoped to where the console is mounted.
    fn cookie_attributes(&self) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("Path={}; HttpOnly; SameSite=Strict{secure}", self.home())
    }

    /// The overview's path: where the console is mounted (`/admin`; `nest_service` serves it at
    /// `/admin/` too), or `/`.
    fn home(&self) -> &str {
        if self.base.is_empty() {
            "/"
        } else {
            &self.base
        }
    }
}

/// The largest form the console reads (an edited payload is the largest).
const FORM_LIMIT: usize = 16 << 20;

/// The console's one gate, in front of every route: a `POST` from another site gets `403`, a
/// request without the credential the `401` sign-in page (except the sign-in itself), a `POST`
/// without its session's CSRF value `403`, before any handler runs. Every response is kept out of
/// caches and frames, and its page may run no script.
async fn guard(State(shared): Env, mut req: Request, next: Next) -> Response {
    // Where the service nested the console (axum records it); nowhere: at the root.
    let base = req
        .extensions()
        .get::<NestedPath>()
        .map_or("", |nested| nested.as_str())
        .trim_end_matches('/')
        .to_owned();
    let post = req.method() == Method::POST;
    let signing_in = post && req.uri().path() == "/sign-in";
    let (uri, headers) = (req.uri(), req.headers());
    let secure = shared.over_tls || auth::over_tls(uri, headers, shared.trust_forwarded);
    let mut ctx = Ctx {
        base,
        csrf: String::new(),
        session: None,
        secure,
    };
    let mut response = if post && !auth::same_origin(uri, headers, shared.trust_forwarded) {
        refused("the console acts only on the forms of its own pages, not another site's")
    } else if let Some((csrf, session)) = shared.admit(headers) {
        ctx.csrf = csrf;
        ctx.session = session;
        if post && !signing_in {
            match with_csrf(&ctx.csrf, req).await {
                Ok(mut req) => {
                    req.extensions_mut().insert(ctx);
                    next.run(req).await
                }
                Err(refused) => refused,
            }
        } else {
            req.extensions_mut().insert(ctx);
            next.run(req).await
        }
    } else if signing_in {
        req.extensions_mut().insert(ctx);
        next.run(req).await
    } else {
        (StatusCode::UNAUTHORIZED, pages::sign_in(&ctx, false)).into_response()
    };
    let headers = response.headers_mut();
    headers.insert(header::CACHE_CONTROL, HeaderValue::from_static("no-store"));
    headers.insert("x-frame-options", HeaderValue::from_static("DENY"));
    headers.insert(
        "x-content-type-options",
        HeaderValue::from_static("nosniff"),
    );
    headers.insert(
        header::CONTENT_SECURITY_POLICY,
        HeaderValue::from_static(
            "default-src 'none'; style-src 'unsafe-inline'; form-action 'self'; frame-ancestors 'none'",
        ),
    );
    response
}

/// A form's CSRF field.
#[derive(Deserialize)]
struct Csrf {
    #[serde(default)]
    csrf: String,
}

impl Shared {
    /// What admits the request, if anything: the CSRF value its forms carry, and the session's
    /// cookie value when a session admits it. The service's own layer or the bearer token admit
    /// with the token's CSRF value.
    fn admit(&self, headers: &HeaderMap) -> Option<(String, Option<String>)> {
        if !self.token_admits || self.credential.bears_token(headers) {
            return Some((self.credential.csrf().to_owned(), None));
        }
        let (session, csrf) = self.sessions.of(headers)?;
        Some((csrf, Some(session)))
    }
}

/// `403`, saying why.
fn refused(why: &str) -> Response {
    (StatusCode::FORBIDDEN, why.to_owned()).into_response()
}

/// `req` as it came, once its form's `csrf` field proved to be `csrf`; `403` otherwise.
async fn with_csrf(csrf: &str, req: Request) -> Result<Request, Response> {
    let (parts, body) = req.into_parts();
    let body = ::axum::body::to_bytes(body, FORM_LIMIT)
        .await
        .map_err(|_| refused("the form is too large or could not be read"))?;
    let form =
        Form::<Csrf>::from_request(Request::from_parts(parts.clone(), body.clone().into()), &())
            .await
            .map_err(|_| refused("the console accepts only its own forms"))?;
    if csrf.is_empty() || !auth::equal(&form.csrf, csrf) {
        return Err(refused(
            "the form's CSRF token is missing or wrong: reload the console and try again",
        ));
    }
    Ok(Request::from_parts(parts, body.into()))
}

#[derive(Deserialize)]
struct SignIn {
    token: String,
}

async fn sign_in(
    State(shared): Env,
    Extension(ctx): Extension<Ctx>,
    Form(form): Form<SignIn>,
) -> Response {
    if !shared.credential.is_token(&form.token) {
        return (StatusCode::UNAUTHORIZED, pages::sign_in(&ctx, true)).into_response();
    }
    let Some(opened) = shared.sessions.open() else {
        let why = "the system has no randomness to give a session: nobody was signed in";
        return (StatusCode::INTERNAL_SERVER_ERROR, why).into_response();
    };
    let cookie = format!(
        "{}={}; Max-Age={}; {}",
        auth::COOKIE,
        opened.cookie,
        shared.sessions.ttl().as_secs(),
        ctx.cookie_attributes()
    );
    let mut response = Redirect::to(ctx.home()).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

/// Ends the session on the server (its cookie admits nobody afterwards) and clears the cookie.
async fn sign_out(State(shared): Env, Extension(ctx): Extension<Ctx>) -> Response {
    if let Some(session) = &ctx.session {
        shared.sessions.end(session);
    }
    let cookie = format!("{}=; Max-Age=0; {}", auth::COOKIE, ctx.cookie_attributes());
    let mut response = (StatusCode::UNAUTHORIZED, pages::sign_in(&ctx, false)).into_response();
    if let Ok(cookie) = HeaderValue::from_str(&cookie) {
        response.headers_mut().insert(header::SET_COOKIE, cookie);
    }
    response
}

async fn not_found(Extension(ctx): Extension<Ctx>) -> Response {
    failure(&ctx, StatusCode::NOT_FOUND, "No such page in the console.")
}

/// What the overview says after an action (`?done=…&n=…`): chosen from a fixed set, so a link
/// cannot make the console say anything else.
#[derive(Deserialize, Default)]
pub(crate) struct Done {
    done: Option<String>,
    n: Option<u64>,
}

impl Done {
    fn message(&self) -> Option<String> {
        let n = self.n.unwrap_or(0);
        let units = if n == 1 { "unit" } else { "units" };
        Some(match self.done.as_deref()? {
            "redriven" if n == 1 => {
                "Redrove 1 unit to where it came from, under its own id.".to_owned()
            }
            "redriven" => {
                format!("Redrove {n} units to where they came from, under their own ids.")
            }
            "purged" => format!("Purged {n} {units} for good."),
            "edited" => {
                "Redrove 1 unit with the edited payload (the edit is recorded in its headers)."
                    .to_owned()
            }
            "gone" => "Nothing done: the unit is no longer in the dead letter.".to_owned(),
            _ => return None,
        })
    }

    fn to(ctx: &Ctx, done: &str, n: u64) -> Response {
        Redirect::to(&format!("{}?done={done}&n={n}", ctx.home())).into_response()
    }
}

/// Records of one group: its dead letter's units from `source` dead-lettered for `reason`.
pub(crate) struct Group {
    pub(crate) source: String,
    pub(crate) reason: String,
    pub(crate) records: Vec<DeadLetter>,
}

/// A dead letter as the overview shows it: its count, its groups, or why it could not be read.
pub(crate) struct Summary {
    pub(crate) name: String,
    pub(crate) read: Result<(u64, Vec<Group>, bool), TransportError>,
}

/// The reason a record is grouped under.
fn reason_of(record: &DeadLetter) -> &'static str {
    record.reason.map_or("unknown", |r| r.as_str())
}

/// Up to `limit` records of `dead`, grouped by source and reason (in that order); `true` when the
/// dead letter holds more than were read.
async fn grouped(
    dead: &AnyDeadLetters,
    limit: usize,
) -> Result<(Vec<Group>, bool), TransportError> {
    let mut groups: BTreeMap<(String, &'static str), Vec<DeadLetter>> = BTreeMap::new();
    let mut read = 0;
    let mut after = None;
    loop {
        let page = dead.list(PAGE.min(limit - read), after.as_ref()).await?;
        read += page.records.len();
        for record in page.records {
            groups
                .entry((record.source.clone(), reason_of(&record)))
                .or_default()
                .push(record);
        }
        match page.next {
            Some(next) if read < limit => after = Some(next),
            next => {
                let groups = groups
                    .into_iter()
                    .map(|((source, reason), records)| Group {
                        source,
                        reason: reason.to_owned(),
                        records,
                    })
                    .collect();
                return Ok((groups, next.is_some()));
            }
        }
    }
}

async fn overview(
    State(shared): Env,
    Extension(ctx): Extension<Ctx>,
    Query(done): Query<Done>,
) -> Response {
    let mut summaries = Vec::with_capacity(shared.order.len());
    for dead in &shared.order {
        let read = async {
            let count = dead.count().await?;
            let (groups, more) = grouped(dead, shared.scan_limit).await?;
            Ok((count, groups, more))
        }
        .await;
        summaries.push(Summary {
            name: dead.name().to_owned(),
            read,
        });
    }
    pages::overview(&ctx, done.message().as_deref(), &summaries).into_response()
}

/// Which group a page or a group action is about.
#[derive(Deserialize)]
struct Which {
    source: String,
    reason: String,
}

/// The dead letter a route's `{dead}` segment names, with the request's [`Ctx`]: taken by every
/// route about one dead letter; a name the console does not hold answers the `404` page.
struct Named {
    ctx: Ctx,
    name: String,
    dead: AnyDeadLetters,
}

impl FromRequestParts<Arc<Shared>> for Named {
    type Rejection = Response;

    async fn from_request_parts(parts: &mut Parts, shared: &Arc<Shared>) -> Result<Self, Response> {
        let ctx = parts
            .extensions
            .get::<Ctx>()
            .cloned()
            .ok_or_else(|| StatusCode::INTERNAL_SERVER_ERROR.into_response())?;
        let params = RawPathParams::from_request_parts(parts, shared)
            .await
            .map_err(IntoResponse::into_response)?;
        let name = params
            .iter()
            .find(|(key, _)| *key == "dead")
            .map(|(_, name)| name.to_owned()) // percent-decoded by axum
            .unwrap_or_default();
        match shared.by_name.get(&name) {
            Some(dead) => Ok(Named {
                dead: dead.clone(),
                name,
                ctx,
            }),
            None => Err(failure(
                &ctx,
                StatusCode::NOT_FOUND,
                "The console holds no dead letter of that name.",
            )),
        }
    }
}

/// What an action did, as the overview says it (`done` and how many), or its error page.
fn answer(ctx: &Ctx, done: Result<(&str, u64), TransportError>) -> Response {
    match done {
        Ok((done, n)) => Done::to(ctx, done, n),
        Err(error) => unreadable(ctx, &error),
    }
}

/// The records of the group `which` names in `dead`, and how many records of other groups have
/// one of their ids: a group action acts on those copies too (it selects by id).
async fn members(
    shared: &Shared,
    dead: &AnyDeadLetters,
    which: &Which,
) -> Result<(Vec<DeadLetter>, usize), TransportError> {
    let (groups, _) = grouped(dead, shared.scan_limit).await?;
    let (mut this, others): (Vec<Group>, Vec<Group>) = groups
        .into_iter()
        .partition(|g| g.source == which.source && g.reason == which.reason);
    let records = this.pop().map(|g| g.records).unwrap_or_default();
    let ids: HashSet<&UnitId> = records.iter().map(DeadLetter::id).collect();
    let elsewhere = others
        .iter()
        .flat_map(|g| &g.records)
        .filter(|r| ids.contains(r.id()))
        .count();
    Ok((records, elsewhere))
}

async fn group(
    State(shared): Env,
    Named { ctx, name, dead }: Named,
    Query(which): Query<Which>,
) -> Response {
    match members(&shared, &dead, &which).await {
        Ok((records, elsewhere)) => pages::group(
            &ctx,
            &Group {
                source: which.source,
                reason: which.reason,
                records,
            },
            elsewhere,
            &name,
        )
        .into_response(),
        Err(error) => unreadable(&ctx, &error),
    }
}

async fn unit(Named { ctx, name, dead }: Named, Path((_, id)): Path<(String, String)>) -> Response {
    match dead.peek(&UnitId::new(id)).await {
        Ok(Some(record)) => pages::unit(&ctx, &name, &record).into_response(),
        Ok(None) => failure(
            &ctx,
            StatusCode::NOT_FOUND,
            "The dead letter holds no unit with that id (redriven or purged since?).",
        ),
        Err(error) => unreadable(&ctx, &error),
    }
}

#[derive(Deserialize)]
struct GroupForm {
    #[serde(flatten)]
    which: Which,
}

async fn redrive_group(State(shared): Env, named: Named, Form(form): Form<GroupForm>) -> Response {
    act_on_group(&shared, &named, &form, true).await
}

async fn purge_group(State(shared): Env, named: Named, Form(form): Form<GroupForm>) -> Response {
    act_on_group(&shared, &named, &form, false).await
}

/// Redrives (`redrive`) or purges the units of a group, then back to the overview.
async fn act_on_group(shared: &Shared, named: &Named, form: &GroupForm, redrive: bool) -> Response {
    let dead = &named.dead;
    let done = async {
        let (records, _) = members(shared, dead, &form.which).await?;
        let mut seen = HashSet::new();
        let ids: Vec<UnitId> = records
            .iter()
            .map(|r| r.id().clone())
            .filter(|id| seen.insert(id.clone()))
            .collect();
        if redrive {
            let report = dead.redrive(Selection::Ids(&ids)).await?;
            Ok(("redriven", report.redriven.len() as u64))
        } else {
            Ok(("purged", dead.purge(&ids).await?))
        }
    }
    .await;
    answer(&named.ctx, done)
}

async fn redrive_unit(
    Named { ctx, dead, .. }: Named,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    let done = dead.redrive(Selection::Ids(&[UnitId::new(id)])).await;
    answer(
        &ctx,
        done.map(|report| match report.redriven.len() as u64 {
            0 => ("gone", 0),
            n => ("redriven", n),
        }),
    )
}

async fn purge_unit(
    Named { ctx, dead, .. }: Named,
    Path((_, id)): Path<(String, String)>,
) -> Response {
    let done = dead.purge(&[UnitId::new(id)]).await;
    answer(
        &ctx,
        done.map(|n| if n == 0 { ("gone", 0) } else { ("purged", n) }),
    )
}

#[derive(Deserialize)]
struct EditForm {
    payload: String,
}

async fn edit_unit(
    Named { ctx, dead, .. }: Named,
    Path((_, id)): Path<(String, String)>,
    Form(form): Form<EditForm>,
) -> Response {
    let id = UnitId::new(id);
    let done = async {
        let Some(record) = dead.peek(&id).await? else {
            return Ok(false);
        };
        let payload = submitted(record.unit.payload(), form.payload);
        dead.redrive_edited(&id, payload).await
    }
    .await;
    answer(
        &ctx,
        done.map(|edited| if edited { ("edited", 1) } else { ("gone", 0) }),
    )
}

/// The payload an operator submitted in place of `original`, byte for byte, except that a
/// browser sends every line break of a textarea as CRLF: where `original` has no CRLF, they are
/// the textarea's, and become LF again.
fn submitted(original: &[u8], edited: String) -> Bytes {
    if original.windows(2).any(|pair| pair == b"\r\n") {
        Bytes::from(edited)
    } else {
        Bytes::from(edited.replace("\r\n", "\n"))
    }
}

/// The page for a dead letter that could not be read or changed: `502`, the error as text.
fn unreadable(ctx: &Ctx, error: &TransportError) -> Response {
    failure(
        ctx,
        StatusCode::BAD_GATEWAY,
        &format!("The dead letter could not be read or changed: {error}"),
    )
}

fn failure(ctx: &Ctx, status: StatusCode, message: &str) -> Response {
    (status, pages::failure(ctx, message)).into_response()
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
            let response = tower_service::Service::call(&mut self.0.clone(), request.map(Body::from))
                .await
                .unwrap_or_else(|never| match never {});
            let (parts, body) = response.into_parts();
            let body = ::axum::body::to_bytes(body, 1 << 20).await.unwrap_or_default();
            http::Response::from_parts(parts, body)
        }
    }
}
