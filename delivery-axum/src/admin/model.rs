//! What the console's handlers and pages share: the console's state ([`Shared`]), the request's
//! context ([`Ctx`]), and the dead letters as the overview shows them.

use std::collections::BTreeMap;
use std::sync::Arc;

use ::axum::extract::State;
use ::axum::response::{IntoResponse, Redirect, Response};
use serde::Deserialize;

use super::auth::{Credential, Sessions};
use delivery_core::dead_letter::{AnyDeadLetters, DeadLetter};
use delivery_core::transport::TransportError;

/// What every handler shares.
pub(super) struct Shared {
    pub(super) credential: Credential,
    /// The browsers signed in.
    pub(super) sessions: Sessions,
    /// Whether the token (bearer or session cookie) admits requests; `false` behind the service's
    /// own [`Console::auth_layer`](super::Console::auth_layer).
    pub(super) token_admits: bool,
    /// Whether a proxy's `X-Forwarded-Proto` and `X-Forwarded-Host` are believed.
    pub(super) trust_forwarded: bool,
    /// Whether every request came over TLS ([`Console::served_over_tls`](super::Console::served_over_tls)).
    pub(super) over_tls: bool,
    /// The dead letters in the order they were given (the overview's order).
    pub(super) order: Vec<AnyDeadLetters>,
    pub(super) by_name: BTreeMap<String, AnyDeadLetters>,
    pub(super) scan_limit: usize,
}

pub(super) type Env = State<Arc<Shared>>;

/// Where the console is mounted (the path before its own routes), the CSRF value of the
/// request's session (or of its bearer token), and the session itself: what every page needs to
/// link and to post within the console.
#[derive(Clone)]
pub(crate) struct Ctx {
    pub(super) base: String,
    pub(super) csrf: String,
    /// The cookie value of the session that admitted the request.
    pub(super) session: Option<String>,
    /// Whether the request came over TLS: its cookie is `Secure`.
    pub(super) secure: bool,
}

impl Ctx {
    /// The session cookie's attributes: scoped to where the console is mounted.
    pub(super) fn cookie_attributes(&self) -> String {
        let secure = if self.secure { "; Secure" } else { "" };
        format!("Path={}; HttpOnly; SameSite=Strict{secure}", self.home())
    }

    /// The overview's path: where the console is mounted (`/admin`; `nest_service` serves it at
    /// `/admin/` too), or `/`.
    pub(super) fn home(&self) -> &str {
        if self.base.is_empty() {
            "/"
        } else {
            &self.base
        }
    }
}

/// What the overview says after an action (`?done=…&n=…`): chosen from a fixed set, so a link
/// cannot make the console say anything else.
#[derive(Deserialize, Default)]
pub(crate) struct Done {
    pub(super) done: Option<String>,
    pub(super) n: Option<u64>,
}

impl Done {
    pub(super) fn message(&self) -> Option<String> {
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

    pub(super) fn to(ctx: &Ctx, done: &str, n: u64) -> Response {
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
pub(super) fn reason_of(record: &DeadLetter) -> &'static str {
    record.reason.map_or("unknown", |r| r.as_str())
}
