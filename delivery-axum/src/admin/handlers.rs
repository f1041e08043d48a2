//! The console's pages and actions: the overview, a group, a unit, and what redrives, purges or
//! edits them.

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

use ::axum::Extension;
use ::axum::extract::{Form, FromRequestParts, Path, Query, RawPathParams, State};
use ::axum::http::StatusCode;
use ::axum::http::request::Parts;
use ::axum::response::{IntoResponse, Response};
use bytes::Bytes;
use serde::Deserialize;

use delivery_core::dead_letter::{AnyDeadLetters, DeadLetter, DeadLetters, Selection};
use delivery_core::transport::TransportError;
use delivery_core::unit::UnitId;

use super::model::{Ctx, Done, Env, Group, Shared, Summary, reason_of};
use super::pages;

/// Records read per page while the console scans a dead letter to group it.
const PAGE: usize = 500;

pub(super) async fn not_found(Extension(ctx): Extension<Ctx>) -> Response {
    failure(&ctx, StatusCode::NOT_FOUND, "No such page in the console.")
}

/// Up to `limit` records of `dead`, grouped by source and reason (in that order); `true` when the
/// dead letter holds more than were read.
pub(super) async fn grouped(
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

pub(super) async fn overview(
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
pub(super) struct Which {
    pub(super) source: String,
    pub(super) reason: String,
}

/// The dead letter a route's `{dead}` segment names, with the request's [`Ctx`]: taken by every
/// route about one dead letter; a name the console does not hold answers the `404` page.
pub(super) struct Named {
    pub(super) ctx: Ctx,
    pub(super) name: String,
    pub(super) dead: AnyDeadLetters,
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
pub(super) fn answer(ctx: &Ctx, done: Result<(&str, u64), TransportError>) -> Response {
    match done {
        Ok((done, n)) => Done::to(ctx, done, n),
        Err(error) => unreadable(ctx, &error),
    }
}

/// The records of the group `which` names in `dead`, and how many records of other groups have
/// one of their ids: a group action acts on those copies too (it selects by id).
pub(super) async fn members(
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

pub(super) async fn group(
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

pub(super) async fn unit(
    Named { ctx, name, dead }: Named,
    Path((_, id)): Path<(String, String)>,
) -> Response {
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
pub(super) struct GroupForm {
    #[serde(flatten)]
    pub(super) which: Which,
}

pub(super) async fn redrive_group(
    State(shared): Env,
    named: Named,
    Form(form): Form<GroupForm>,
) -> Response {
    act_on_group(&shared, &named, &form, true).await
}

pub(super) async fn purge_group(
    State(shared): Env,
    named: Named,
    Form(form): Form<GroupForm>,
) -> Response {
    act_on_group(&shared, &named, &form, false).await
}

/// Redrives (`redrive`) or purges the units of a group, then back to the overview.
pub(super) async fn act_on_group(
    shared: &Shared,
    named: &Named,
    form: &GroupForm,
    redrive: bool,
) -> Response {
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

pub(super) async fn redrive_unit(
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

pub(super) async fn purge_unit(
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
pub(super) struct EditForm {
    pub(super) payload: String,
}

pub(super) async fn edit_unit(
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
pub(super) fn submitted(original: &[u8], edited: String) -> Bytes {
    if original.windows(2).any(|pair| pair == b"\r\n") {
        Bytes::from(edited)
    } else {
        Bytes::from(edited.replace("\r\n", "\n"))
    }
}

/// The page for a dead letter that could not be read or changed: `502`, the error as text.
pub(super) fn unreadable(ctx: &Ctx, error: &TransportError) -> Response {
    failure(
        ctx,
        StatusCode::BAD_GATEWAY,
        &format!("The dead letter could not be read or changed: {error}"),
    )
}

pub(super) fn failure(ctx: &Ctx, status: StatusCode, message: &str) -> Response {
    (status, pages::failure(ctx, message)).into_response()
}
