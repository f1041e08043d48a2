//! The console's pages, rendered on the server with maud: every value from a dead letter (ids,
//! payloads, headers, details, names) goes through maud's escaping, so none is ever markup.

use maud::{DOCTYPE, Markup, html};
use percent_encoding::{AsciiSet, NON_ALPHANUMERIC, utf8_percent_encode};

use super::model::{Ctx, Group, Summary, reason_of};
use delivery_core::dead_letter::DeadLetter;

/// What a path segment or a query value keeps unencoded.
const KEEP: &AsciiSet = &NON_ALPHANUMERIC
    .remove(b'-')
    .remove(b'_')
    .remove(b'.')
    .remove(b'~');

/// How much of a payload a group page shows per unit.
const PREVIEW: usize = 120;

fn enc(s: &str) -> impl std::fmt::Display + '_ {
    utf8_percent_encode(s, KEEP)
}

fn group_href(ctx: &Ctx, dead: &str, source: &str, reason: &str) -> String {
    format!(
        "{}/d/{}?source={}&reason={}",
        ctx.base,
        enc(dead),
        enc(source),
        enc(reason)
    )
}

fn unit_href(ctx: &Ctx, dead: &str, id: &str) -> String {
    format!("{}/d/{}/u/{}", ctx.base, enc(dead), enc(id))
}

const STYLE: &str = "
body { font: 15px/1.45 system-ui, sans-serif; margin: 0; color: #1d232b; background: #f6f7f9; }
header { background: #1d232b; color: #fff; padding: .7rem 1.5rem; display: flex; align-items: center; gap: 1rem; }
header a { color: #fff; text-decoration: none; font-weight: 600; }
header form { margin-left: auto; }
main { padding: 1rem 1.5rem; max-width: 72rem; }
section { background: #fff; border: 1px solid #d8dde3; border-radius: 6px; padding: .5rem 1rem 1rem; margin: 0 0 1rem; }
table { border-collapse: collapse; width: 100%; }
th, td { text-align: left; padding: .35rem .5rem; border-bottom: 1px solid #eceff2; vertical-align: top; }
th { font-weight: 600; color: #56606b; }
td.count { font-variant-numeric: tabular-nums; font-weight: 600; }
td.id { white-space: nowrap; }
form.inline { display: inline; }
button { font: inherit; padding: .2rem .7rem; border: 1px solid #8a96a3; border-radius: 4px; background: #fff; cursor: pointer; }
button.danger { border-color: #b42318; color: #b42318; }
pre, code, textarea { font: 13px/1.4 ui-monospace, monospace; }
pre { background: #f0f2f5; padding: .7rem; border-radius: 4px; white-space: pre-wrap; word-break: break-all; }
textarea { width: 100%; min-height: 10rem; box-sizing: border-box; }
dl { display: grid; grid-template-columns: max-content 1fr; gap: .25rem 1rem; }
dt { color: #56606b; }
dd { margin: 0; }
#flash { background: #e7f6ec; border: 1px solid #9bd3ae; padding: .5rem .8rem; border-radius: 4px; }
.error { background: #fdecea; border: 1px solid #f1a9a0; padding: .5rem .8rem; border-radius: 4px; }
.muted { color: #6b7580; }
";

/// A page of the console: the frame around `body`.
fn page(ctx: &Ctx, title: &str, signed_in: bool, body: Markup) -> Markup {
    html! {
        (DOCTYPE)
        html lang="en" {
            head {
                meta charset="utf-8";
                meta name="viewport" content="width=device-width, initial-scale=1";
                // Within the console only: a browser then names the console's origin on every form it
                // posts (`no-referrer` would make it `null`), and sends nothing to other sites.
                meta name="referrer" content="same-origin";
                title { (title) " · dead letters" }
                style { (maud::PreEscaped(STYLE)) }
            }
            body {
                header {
                    a href=(ctx.home()) { "Dead letters" }
                    @if signed_in {
                        form.inline method="post" action={ (ctx.base) "/sign-out" } {
                            input type="hidden" name="csrf" value=(ctx.csrf);
                            button type="submit" { "Sign out" }
                        }
                    }
                }
                main { (body) }
            }
        }
    }
}

/// The `401` page: a form to sign in with the console's token.
pub(super) fn sign_in(ctx: &Ctx, refused: bool) -> Markup {
    page(
        ctx,
        "Sign in",
        false,
        html! {
            h1 { "Sign in" }
            @if refused { p.error { "That is not the console's token." } }
            p { "This console needs its token (or an " code { "Authorization: Bearer" } " header)." }
            form #sign-in method="post" action={ (ctx.base) "/sign-in" } {
                label { "Token " input type="password" name="token" autocomplete="current-password" autofocus; }
                " "
                button type="submit" { "Sign in" }
            }
        },
    )
}

/// A page that only says what went wrong.
pub(super) fn failure(ctx: &Ctx, message: &str) -> Markup {
    page(
        ctx,
        "Error",
        true,
        html! {
            p.error { (message) }
            p { a href=(ctx.home()) { "Back to the dead letters" } }
        },
    )
}

/// The form of a group action: a `POST` with the group and the CSRF token.
fn group_form(ctx: &Ctx, dead: &str, group: &Group, action: &str, label: &str) -> Markup {
    let danger = action == "purge";
    html! {
        form class={ "inline " (action) "-group" } method="post" action={ (ctx.base) "/d/" (enc(dead)) "/group/" (action) } {
            input type="hidden" name="csrf" value=(ctx.csrf);
            input type="hidden" name="source" value=(group.source);
            input type="hidden" name="reason" value=(group.reason);
            button type="submit" class=[danger.then_some("danger")] { (label) }
        }
    }
}

/// `/`: every dead letter, grouped by source and reason.
pub(super) fn overview(ctx: &Ctx, flash: Option<&str>, summaries: &[Summary]) -> Markup {
    page(
        ctx,
        "Overview",
        true,
        html! {
            @if let Some(flash) = flash { p #flash { (flash) } }
            @if summaries.is_empty() { p.muted { "The console was given no dead letter." } }
            @for summary in summaries {
                section.dead-letter data-name=(summary.name) {
                    @match &summary.read {
                        Err(error) => {
                            h2 { (summary.name) }
                            p.error { "Could not be read: " (error) }
                        }
                        Ok((count, groups, more)) => {
                            h2 { (summary.name) " " span.muted { "(" (count) " unit" @if *count != 1 { "s" } ")" } }
                            @if groups.is_empty() {
                                p.muted { "Empty." }
                            } @else {
                                @if *more { p.muted { "Grouped from the first records only; the count is the whole dead letter's." } }
                                table {
                                    thead { tr { th { "Source" } th { "Reason" } th { "Units" } th {} } }
                                    tbody {
                                        @for group in groups {
                                            tr.group data-source=(group.source) data-reason=(group.reason) {
                                                td { (group.source) }
                                                td { (group.reason) }
                                                td.count { (group.records.len()) }
                                                td {
                                                    a.open-group href=(group_href(ctx, &summary.name, &group.source, &group.reason)) { "Open" }
                                                    " "
                                                    (group_form(ctx, &summary.name, group, "redrive", "Redrive all"))
                                                    " "
                                                    (group_form(ctx, &summary.name, group, "purge", "Purge all"))
                                                }
                                            }
                                        }
                                    }
                                }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The first [`PREVIEW`] characters of a payload, as text.
fn preview(record: &DeadLetter) -> String {
    let text = String::from_utf8_lossy(record.unit.payload());
    match text.char_indices().nth(PREVIEW) {
        Some((cut, _)) => format!("{}…", &text[..cut]),
        None => text.into_owned(),
    }
}

/// A group's units.
/// `elsewhere`: the records of other groups with one of this group's ids, which its actions
/// (by id) act on too.
pub(super) fn group(ctx: &Ctx, group: &Group, elsewhere: usize, dead: &str) -> Markup {
    page(
        ctx,
        dead,
        true,
        html! {
            h1 { (dead) }
            p { "From " code { (group.source) } ", dead-lettered as " strong { (group.reason) } ": " (group.records.len()) " unit(s)." }
            @if elsewhere > 0 {
                p #copies.error {
                    "Some of these ids have " (elsewhere) " more " (if elsewhere == 1 { "copy" } else { "copies" })
                    " in other groups of this dead letter: Redrive all and Purge all act on every copy of each id, "
                    (group.records.len() + elsewhere) " copies in all."
                }
            }
            @if !group.records.is_empty() {
                p { (group_form(ctx, dead, group, "redrive", "Redrive all")) " " (group_form(ctx, dead, group, "purge", "Purge all")) }
                table {
                    thead { tr { th { "Id" } th { "Deliveries" } th { "Detail" } th { "Payload" } } }
                    tbody {
                        @for record in &group.records {
                            tr.unit data-id=(record.id().as_str()) {
                                td.id { a.open-unit href=(unit_href(ctx, dead, record.id().as_str())) { (record.id().as_str()) } }
                                td { (record.delivery_count()) }
                                td { (record.detail) }
                                td { code { (preview(record)) } }
                            }
                        }
                    }
                }
            }
        },
    )
}

/// The payload as an operator reads it: pretty-printed when it is JSON, the text otherwise
/// (lossily, with a note, when it is not UTF-8).
fn readable(payload: &[u8]) -> (String, Option<&'static str>) {
    if let Ok(value) = serde_json::from_slice::<serde_json::Value>(payload)
        && let Ok(pretty) = serde_json::to_string_pretty(&value)
    {
        return (pretty, Some("JSON, pretty-printed"));
    }
    match std::str::from_utf8(payload) {
        Ok(text) => (text.to_owned(), None),
        Err(_) => (
            String::from_utf8_lossy(payload).into_owned(),
            Some("not UTF-8: shown with replacement characters"),
        ),
    }
}

/// One unit: everything the dead letter recorded, and the actions on it.
pub(super) fn unit(ctx: &Ctx, dead: &str, record: &DeadLetter) -> Markup {
    let id = record.id().as_str();
    let action = unit_href(ctx, dead, id);
    let (payload, note) = readable(record.unit.payload());
    let dead_lettered_at = record
        .dead_lettered_at
        .and_then(|at| at.duration_since(std::time::UNIX_EPOCH).ok())
        .map(|since| format!("{} s after the Unix epoch", since.as_secs()));
    page(
        ctx,
        id,
        true,
        html! {
            h1 { "Unit " code { (id) } }
            p { a href=(group_href(ctx, dead, &record.source, reason_of(record))) { "← its group" } }
            dl {
                dt { "Dead letter" } dd { (dead) }
                dt { "Source" } dd #source { (record.source) }
                dt { "Reason" } dd #reason { (reason_of(record)) }
                dt { "Detail" } dd #detail { (record.detail) }
                dt { "Delivery count" } dd #delivery-count { (record.delivery_count()) }
                @if let Some(at) = dead_lettered_at { dt { "Dead-lettered" } dd { (at) } }
                dt { "Position" } dd { code { (record.position) } }
            }
            h2 { "Payload " span.muted { "(" (record.unit.payload().len()) " bytes" @if let Some(note) = note { "; " (note) } ")" } }
            pre #payload { (payload) }
            h2 { "Headers" }
            @if record.unit.headers().is_empty() { p.muted { "None." } }
            table #headers {
                @for (name, value) in record.unit.headers().iter() {
                    tr { th { code { (name) } } td { code { (String::from_utf8_lossy(value)) } } }
                }
            }
            h2 { "Actions" }
            p {
                form #redrive .inline method="post" action={ (action) "/redrive" } {
                    input type="hidden" name="csrf" value=(ctx.csrf);
                    button type="submit" { "Redrive under its id" }
                }
                " "
                form #purge .inline method="post" action={ (action) "/purge" } {
                    input type="hidden" name="csrf" value=(ctx.csrf);
                    button.danger type="submit" { "Purge for good" }
                }
            }
            h3 { "Edit and redrive" }
            p.muted { "Sends the unit back under its id with this payload instead; its headers record that it was edited and the SHA-256 of the payload it replaced." }
            form #edit method="post" action={ (action) "/edit" } {
                input type="hidden" name="csrf" value=(ctx.csrf);
                // A newline first: the HTML parser drops one right after `<textarea>`, and it must
                // not be the payload's own.
                textarea name="payload" spellcheck="false" { "\n" (String::from_utf8_lossy(record.unit.payload())) }
                p { button type="submit" { "Redrive edited" } }
            }
        },
    )
}
