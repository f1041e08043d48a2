//! `redrive`: units back to their source, as they are or with an edited payload.

use std::io::{Read, Write};

use anyhow::{Context, bail};
use delivery::UnitId;
use delivery::dead_letter::{DeadLetters, Selection};
use serde_json::Value;

use super::args::{Filter, RedriveArgs};
use super::select::scan;
use super::tally::{Tally, copies, copies_of, distinct, ids_text, in_chunks, unit_ids, units};
use super::ui::{Outcome, Ui};
use crate::render;

pub(super) async fn redrive<D: DeadLetters>(
    dead: &D,
    args: RedriveArgs,
    ui: &Ui,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    if args.payload.is_some() || args.edit {
        return redrive_edited(dead, args, ui, out).await;
    }
    let name = dead.name();
    if args.all {
        let total = dead
            .count()
            .await
            .with_context(|| format!("counting {name}"))?;
        if total == 0 {
            writeln!(out, "nothing to redrive: {name} is empty")?;
            return Ok(Outcome::NothingMatched);
        }
        ui.confirm(
            args.yes,
            &format!(
                "Redrive all {} in {name} back to their source?",
                units(total)
            ),
        )?;
        let spinner = ui.spinner(format!("redriving {} from {name}", units(total)));
        let report = dead.redrive(Selection::All).await;
        spinner.finish_and_clear();
        let report = report.with_context(|| format!("redriving {name}"))?;
        let tally = Tally {
            done: report.redriven.len() as u64,
            ..Tally::default()
        };
        return tally.summary("redriven", name, out);
    }
    // A redrive sends back every copy of each id it names: look first, to say how many.
    let held = scan(dead, &Filter::everything()).await?;
    let (ids, question) = match args.reason {
        Some(reason) => {
            let filter = Filter::of_reason(reason);
            let ids = distinct(
                held.iter()
                    .filter(|r| filter.matches(r))
                    .map(|r| r.id().clone()),
            );
            let (total, of_reason) = copies_of(&held, &ids, |r| filter.matches(r));
            let reason = render::reason(reason.0);
            let others = match total - of_reason {
                0 => String::new(),
                n => format!(", {n} of them dead-lettered for another reason"),
            };
            let question = format!(
                "Redrive the {} ids dead-lettered as {reason} from {name}: {} in all, every \
                 copy of each id{others}?",
                ids.len(),
                copies(total)
            );
            (ids, question)
        }
        None => {
            let ids = unit_ids(args.ids);
            let (total, _) = copies_of(&held, &ids, |_| true);
            let question = format!(
                "Redrive {} from {name}: {}, every copy of each id?",
                ids_text(ids.len()),
                copies(total)
            );
            (ids, question)
        }
    };
    if ids.is_empty() {
        writeln!(out, "nothing to redrive: no unit in {name} matches")?;
        return Ok(Outcome::NothingMatched);
    }
    let (total, _) = copies_of(&held, &ids, |_| true);
    if ids.len() > 1 || total > 1 || args.reason.is_some() {
        ui.confirm(args.yes, &question)?;
    }
    let bar = ui.bar(ids.len() as u64, "redriving");
    let tally = in_chunks(&ids, &bar, async |chunk| {
        let report = dead.redrive(Selection::Ids(chunk)).await?;
        Ok((report.redriven.len() as u64, report.not_found))
    })
    .await;
    tally.summary("redriven", name, out)
}

/// `redrive ID --payload FILE` or `--edit`: the one unit back under its own id with the payload
/// replaced, the dead letter recording the edit in its headers.
async fn redrive_edited<D: DeadLetters>(
    dead: &D,
    args: RedriveArgs,
    ui: &Ui,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let name = dead.name();
    let [id] = args.ids.as_slice() else {
        bail!("--payload and --edit redrive exactly one id");
    };
    let id = UnitId::new(id.as_str());
    let record = dead
        .peek(&id)
        .await
        .with_context(|| format!("reading {id} from {name}"))?;
    let Some(record) = record else {
        eprintln!("not in {name}: {id}");
        return Ok(Outcome::NothingMatched);
    };
    let original = record.unit.payload();
    let payload = match &args.payload {
        Some(file) if file.as_os_str() == "-" => {
            let mut payload = Vec::new();
            std::io::stdin().lock().read_to_end(&mut payload)?;
            payload
        }
        Some(file) => std::fs::read(file).with_context(|| format!("reading {}", file.display()))?,
        None => edit(original)?,
    };
    if payload.trim_ascii().is_empty() {
        bail!("the new payload is empty: nothing was redriven");
    }
    if payload == original[..] {
        bail!(
            "the payload is unchanged: nothing was redriven (`redrive {id}` sends it back as it is)"
        );
    }
    // Every copy of the id goes back with the edited payload: say how many.
    let held = scan(dead, &Filter::everything()).await?;
    let (total, _) = copies_of(&held, std::slice::from_ref(&id), |_| true);
    let (original_is, which) = if total > 1 {
        (
            "original payload (oldest copy)",
            format!("all {}", copies(total)),
        )
    } else {
        ("original payload", "it".to_owned())
    };
    ui.confirm(
        args.yes,
        &format!(
            "{id} in {name}: {}\n  {original_is}: {}\n  edited payload:   {}\n\
             Redrive {which} with the edited payload?",
            copies(total.max(1)),
            render::payload_summary(original),
            render::payload_summary(&payload),
        ),
    )?;
    let redriven = dead
        .redrive_edited(&id, payload.into())
        .await
        .with_context(|| format!("redriving {id} edited from {name}"))?;
    if !redriven {
        eprintln!("not in {name}: {id}");
        return Ok(Outcome::NothingMatched);
    }
    writeln!(
        out,
        "redriven {id} edited from {name}; original payload sha256 {}",
        render::sha256(original)
    )?;
    Ok(Outcome::Done)
}

/// `original` as the operator leaves it in `$VISUAL` or `$EDITOR` (default `vi`), run through
/// the shell (so `EDITOR="code -w"` works) on a temporary file: a JSON payload pretty-printed
/// there and sent back compact (`original` itself when it is the same JSON), any other as it is,
/// less a final newline the editor added.
fn edit(original: &[u8]) -> anyhow::Result<Vec<u8>> {
    let json = serde_json::from_slice::<Value>(original).ok();
    let (text, suffix) = match &json {
        Some(value) => (format!("{value:#}\n").into_bytes(), ".json"),
        None => (original.to_vec(), ".txt"),
    };
    let mut file = tempfile::Builder::new()
        .prefix("delivery-dlq-")
        .suffix(suffix)
        .tempfile()?;
    file.write_all(&text)?;
    let path = file.into_temp_path();
    let editor = ["VISUAL", "EDITOR"]
        .into_iter()
        .filter_map(|name| std::env::var(name).ok())
        .find(|editor| !editor.trim().is_empty())
        .unwrap_or_else(|| "vi".to_owned());
    let status = std::process::Command::new("sh")
        .arg("-c")
        .arg(format!("{editor} \"$1\""))
        .arg("sh")
        .arg(&path)
        .status()
        .with_context(|| format!("running {editor}"))?;
    if !status.success() {
        bail!("{editor} failed ({status}): nothing was redriven");
    }
    let mut edited = std::fs::read(&path).with_context(|| format!("reading {}", path.display()))?;
    match (json, serde_json::from_slice::<Value>(&edited)) {
        (Some(before), Ok(after)) if before == after => Ok(original.to_vec()),
        (Some(_), Ok(after)) => Ok(serde_json::to_vec(&after)?),
        _ => {
            if edited.ends_with(b"\n") && !original.ends_with(b"\n") {
                edited.pop();
            }
            Ok(edited)
        }
    }
}
