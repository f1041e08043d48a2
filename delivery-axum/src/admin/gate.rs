//! The console's gate in front of every route (same origin, credential, CSRF), and signing in
//! and out.

use ::axum::Extension;
use ::axum::extract::{Form, FromRequest, NestedPath, Request, State};
use ::axum::http::{HeaderMap, HeaderValue, Method, StatusCode, header};
use ::axum::middleware::Next;
use ::axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::{self};

use super::model::{Ctx, Env, Shared};
use super::pages;

/// The largest form the console reads (an edited payload is the largest).
pub(super) const FORM_LIMIT: usize = 16 << 20;

/// The console's one gate, in front of every route: a `POST` from another site gets `403`, a
/// request without the credential the `401` sign-in page (except the sign-in itself), a `POST`
/// without its session's CSRF value `403`, before any handler runs. Every response is kept out of
/// caches and frames, and its page may run no script.
pub(super) async fn guard(State(shared): Env, mut req: Request, next: Next) -> Response {
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
pub(super) struct Csrf {
    #[serde(default)]
    pub(super) csrf: String,
}

impl Shared {
    /// What admits the request, if anything: the CSRF value its forms carry, and the session's
    /// cookie value when a session admits it. The service's own layer or the bearer token admit
    /// with the token's CSRF value.
    pub(super) fn admit(&self, headers: &HeaderMap) -> Option<(String, Option<String>)> {
        if !self.token_admits || self.credential.bears_token(headers) {
            return Some((self.credential.csrf().to_owned(), None));
        }
        let (session, csrf) = self.sessions.of(headers)?;
        Some((csrf, Some(session)))
    }
}

/// `403`, saying why.
pub(super) fn refused(why: &str) -> Response {
    (StatusCode::FORBIDDEN, why.to_owned()).into_response()
}

/// `req` as it came, once its form's `csrf` field proved to be `csrf`; `403` otherwise.
pub(super) async fn with_csrf(csrf: &str, req: Request) -> Result<Request, Response> {
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
pub(super) struct SignIn {
    pub(super) token: String,
}

pub(super) async fn sign_in(
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
pub(super) async fn sign_out(State(shared): Env, Extension(ctx): Extension<Ctx>) -> Response {
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
