//! The commands that only read: `count`, `list`, `show`.

use std::collections::BTreeMap;
use std::io::Write;

use anyhow::Context;
use delivery::UnitId;
use delivery::dead_letter::{Cursor, DeadLetters};

use super::args::{Filter, ListArgs};
use super::select::{PAGE, scan, select};
use super::ui::Outcome;
use crate::render;

pub(super) async fn count<D: DeadLetters>(
    dead: &D,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let total = dead
        .count()
        .await
        .with_context(|| format!("counting {}", dead.name()))?;
    let mut by_reason: BTreeMap<&str, u64> = BTreeMap::new();
    for record in scan(dead, &Filter::everything()).await? {
        *by_reason.entry(render::reason(record.reason)).or_default() += 1;
    }
    if json {
        let value = serde_json::json!({
            "dead_letter": dead.name(),
            "total": total,
            "by_reason": by_reason,
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        let mut rows = vec![
            vec!["dead letter".to_owned(), dead.name().to_owned()],
            vec!["total".to_owned(), total.to_string()],
        ];
        rows.extend(
            by_reason
                .iter()
                .map(|(r, n)| vec![format!("  {r}"), n.to_string()]),
        );
        render::table(out, &[], &rows)?;
    }
    Ok(Outcome::Done)
}

pub(super) async fn list<D: DeadLetters>(
    dead: &D,
    args: ListArgs,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let limit = args.limit as usize;
    let page = if args.filter.is_everything() {
        limit
    } else {
        limit.max(PAGE)
    };
    let (records, next) =
        select(dead, &args.filter, limit, page, args.after.map(Cursor::new)).await?;
    if args.json {
        let value = serde_json::json!({
            "dead_letter": dead.name(),
            "records": records.iter().map(render::record_json).collect::<Vec<_>>(),
            "next": next.as_ref().map(Cursor::as_str),
        });
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else if records.is_empty() {
        writeln!(out, "no records in {}", dead.name())?;
    } else {
        render::records(out, &records)?;
        if let Some(next) = &next {
            writeln!(out, "next: --after {}", next.as_str())?;
        }
    }
    Ok(if records.is_empty() {
        Outcome::NothingMatched
    } else {
        Outcome::Done
    })
}

pub(super) async fn show<D: DeadLetters>(
    dead: &D,
    id: &UnitId,
    json: bool,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let record = dead
        .peek(id)
        .await
        .with_context(|| format!("reading {} from {}", id, dead.name()))?;
    let Some(record) = record else {
        eprintln!("not in {}: {id}", dead.name());
        return Ok(Outcome::NothingMatched);
    };
    if json {
        let value = render::record_json(&record);
        writeln!(out, "{}", serde_json::to_string_pretty(&value)?)?;
    } else {
        render::show(out, dead.name(), &record)?;
    }
    Ok(Outcome::Done)
}
