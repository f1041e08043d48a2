//! The commands, written once over [`DeadLetters`]: whatever the transport, `main` builds its dead
//! letter and hands it to [`run`].

use std::collections::{BTreeMap, HashSet};
use std::io::{BufRead, Read, Write};
use std::path::PathBuf;
use std::time::Duration;

use anyhow::{Context, bail};
use clap::{ArgGroup, Args, Subcommand};
use delivery::dead_letter::{Cursor, DeadLetter, DeadLetters, Selection};
use delivery::{UnitId, disposition::ReasonKind, transport::TransportError};
use indicatif::{ProgressBar, ProgressStyle};
use serde_json::Value;

use crate::render;

/// Records read per page while a command scans the whole dead letter (count by reason, a
/// redrive by reason, a purge), or looks past records a filter skips.
const PAGE: usize = 500;

/// Ids per redrive or purge call in a bulk action: the step of its progress bar.
const CHUNK: usize = 50;

#[derive(Debug, Subcommand)]
pub enum Command {
    /// How many units the dead letter holds, in total and by reason.
    Count {
        /// One JSON object: `dead_letter`, `total`, `by_reason`.
        #[arg(long)]
        json: bool,
    },
    /// A page of records, oldest first, without consuming anything; prints the cursor of the
    /// next page.
    List(ListArgs),
    /// One record in full: reason, detail, deliveries, source, time, headers and payload
    /// (pretty-printed when it is JSON, escaped when it is not).
    Show {
        /// The unit's id (the oldest copy is shown if several are held).
        id: String,
        /// The record as one JSON object, as `list --json` prints each.
        #[arg(long)]
        json: bool,
    },
    /// Sends units back to their source under their own ids; each leaves the dead letter only
    /// once its source holds it. With --payload or --edit, one unit with a corrected payload.
    Redrive(RedriveArgs),
    /// Removes units from the dead letter for good.
    Purge {
        /// The ids of the units to remove (every copy of each).
        #[arg(required = true)]
        ids: Vec<String>,
        /// Do not ask for confirmation.
        #[arg(long, short)]
        yes: bool,
    },
}

#[derive(Debug, Args)]
pub struct ListArgs {
    /// At most this many records.
    #[arg(long, default_value_t = 20, value_parser = clap::value_parser!(u32).range(1..))]
    limit: u32,
    /// Start after this cursor (printed by the previous page).
    #[arg(long, value_name = "CURSOR")]
    after: Option<String>,
    /// One JSON object: `dead_letter`, `records`, `next` (the cursor, or null on the last page).
    #[arg(long)]
    json: bool,
    #[command(flatten)]
    filter: Filter,
}

/// Which records a listing shows.
#[derive(Debug, Args)]
pub struct Filter {
    /// Only records dead-lettered for this reason: malformed, rejected, exhausted, or unknown
    /// (no reason recorded).
    #[arg(long, value_parser = reason)]
    reason: Option<Reason>,
    /// Only records that came from this queue, stream, topic (or outbox topic).
    #[arg(long)]
    source: Option<String>,
    /// Only records whose id starts with this.
    #[arg(long)]
    id_prefix: Option<String>,
}

#[derive(Debug, Args)]
#[command(group(ArgGroup::new("which").required(true).args(["ids", "reason", "all"])))]
pub struct RedriveArgs {
    /// The ids of the units to redrive (every copy of each).
    ids: Vec<String>,
    /// Every unit dead-lettered for this reason: malformed, rejected, exhausted, or unknown.
    #[arg(long, value_parser = reason)]
    reason: Option<Reason>,
    /// Every unit in the dead letter.
    #[arg(long)]
    all: bool,
    /// Redrive the one id with the payload in FILE (`-`: stdin) in place of its own; the edit is
    /// recorded in its headers (x-delivery-edited, x-delivery-original-sha256).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["reason", "all", "edit"])]
    payload: Option<PathBuf>,
    /// Redrive the one id with its payload as edited in $VISUAL or $EDITOR (default vi): JSON
    /// pretty-printed to edit and sent compact; an editor's added final newline dropped. Recorded
    /// in its headers as --payload is.
    #[arg(long, conflicts_with_all = ["reason", "all"])]
    edit: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    yes: bool,
}

/// A reason to select by: one of [`ReasonKind`], or none recorded (`unknown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason(Option<ReasonKind>);

fn reason(s: &str) -> Result<Reason, String> {
    match (s, ReasonKind::parse(s)) {
        (_, Some(kind)) => Ok(Reason(Some(kind))),
        ("unknown", None) => Ok(Reason(None)),
        _ => Err("expected malformed, rejected, exhausted or unknown".into()),
    }
}

impl Filter {
    fn everything() -> Self {
        Filter {
            reason: None,
            source: None,
            id_prefix: None,
        }
    }

    fn of_reason(reason: Reason) -> Self {
        Filter {
            reason: Some(reason),
            ..Filter::everything()
        }
    }

    fn is_everything(&self) -> bool {
        self.reason.is_none() && self.source.is_none() && self.id_prefix.is_none()
    }

    fn matches(&self, record: &DeadLetter) -> bool {
        self.reason.is_none_or(|Reason(r)| record.reason == r)
            && self.source.as_ref().is_none_or(|s| record.source == *s)
            && self
                .id_prefix
                .as_ref()
                .is_none_or(|p| record.id().as_str().starts_with(p.as_str()))
    }
}

/// How a command ended, as the process's exit status.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Outcome {
    /// Done (0).
    Done,
    /// Nothing matched: no such id, no record selected, nothing to redrive (2).
    NothingMatched,
    /// Some ids were not found or failed (3).
    Partial,
}

impl Outcome {
    pub fn code(self) -> u8 {
        match self {
            Outcome::Done => 0,
            Outcome::NothingMatched => 2,
            Outcome::Partial => 3,
        }
    }
}

/// The terminal: where confirmations are asked and progress is shown.
pub struct Ui {
    interactive: bool,
    progress: bool,
}

impl Ui {
    /// Asks on the terminal when stdin is one; shows progress when stderr is one.
    pub fn new(stdin_is_terminal: bool, stderr_is_terminal: bool) -> Self {
        Ui {
            interactive: stdin_is_terminal,
            progress: stderr_is_terminal,
        }
    }

    /// Asks `question` (y/N) unless `yes`; refuses without a terminal to ask on.
    fn confirm(&self, yes: bool, question: &str) -> anyhow::Result<()> {
        if yes {
            return Ok(());
        }
        if !self.interactive {
            bail!("{question} Not confirmed (no terminal to ask on): pass --yes");
        }
        eprint!("{question} [y/N] ");
        let mut answer = String::new();
        std::io::stdin().lock().read_line(&mut answer)?;
        match answer.trim() {
            "y" | "Y" | "yes" => Ok(()),
            _ => bail!("not confirmed: nothing was changed"),
        }
    }

    /// A bar over `len` steps, hidden when stderr is not a terminal.
    fn bar(&self, len: u64, message: &str) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let bar = ProgressBar::new(len).with_message(message.to_owned());
        let style = ProgressStyle::with_template("{msg} [{bar:30}] {pos}/{len} ({elapsed})")
            .expect("a valid template")
            .progress_chars("=> ");
        bar.set_style(style);
        bar
    }

    /// A spinner for one long step, hidden when stderr is not a terminal.
    fn spinner(&self, message: String) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let spinner = ProgressBar::new_spinner().with_message(message);
        spinner.enable_steady_tick(Duration::from_millis(100));
        spinner
    }
}

/// Runs `command` against `dead`, writing what it prints to `out`.
pub async fn run<D: DeadLetters>(
    dead: &D,
    command: Command,
    ui: &Ui,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    match command {
        Command::Count { json } => count(dead, json, out).await,
        Command::List(args) => list(dead, args, out).await,
        Command::Show { id, json } => show(dead, &UnitId::new(id), json, out).await,
        Command::Redrive(args) => redrive(dead, args, ui, out).await,
        Command::Purge { ids, yes } => purge(dead, &unit_ids(ids), yes, ui, out).await,
    }
}

/// Up to `limit` records matching `filter` after `after`, read `page` at a time, and the cursor
/// after the last of them when more may follow.
async fn select<D: DeadLetters>(
    dead: &D,
    filter: &Filter,
    limit: usize,
    page: usize,
    mut after: Option<Cursor>,
) -> anyhow::Result<(Vec<DeadLetter>, Option<Cursor>)> {
    let mut found = Vec::new();
    loop {
        let listing = dead
            .list(page, after.as_ref())
            .await
            .with_context(|| format!("listing {}", dead.name()))?;
        let mut records = listing.records.into_iter();
        for record in records.by_ref() {
            if filter.matches(&record) {
                found.push(record);
                if found.len() == limit {
                    break;
                }
            }
        }
        if found.len() == limit {
            let more = !records.as_slice().is_empty() || listing.next.is_some();
            let next = found
                .last()
                .filter(|_| more)
                .map(|r| Cursor::new(r.position.clone()));
            return Ok((found, next));
        }
        match listing.next {
            Some(next) => after = Some(next),
            None => return Ok((found, None)),
        }
    }
}

/// Every record matching `filter`, oldest first.
async fn scan<D: DeadLetters>(dead: &D, filter: &Filter) -> anyhow::Result<Vec<DeadLetter>> {
    Ok(select(dead, filter, usize::MAX, PAGE, None).await?.0)
}

async fn count<D: DeadLetters>(
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

async fn list<D: DeadLetters>(
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

async fn show<D: DeadLetters>(
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

async fn redrive<D: DeadLetters>(
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

async fn purge<D: DeadLetters>(
    dead: &D,
    ids: &[UnitId],
    yes: bool,
    ui: &Ui,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let name = dead.name();
    // The dead letter tells how many units it removed, not which ids it did not hold: look first.
    let held = scan(dead, &Filter::everything()).await?;
    let held_ids: HashSet<&UnitId> = held.iter().map(DeadLetter::id).collect();
    let (present, absent): (Vec<UnitId>, Vec<UnitId>) =
        ids.iter().cloned().partition(|id| held_ids.contains(id));
    if present.is_empty() {
        writeln!(out, "nothing to purge: not in {name}: {}", joined(&absent))?;
        return Ok(Outcome::NothingMatched);
    }
    let wanted: HashSet<&UnitId> = present.iter().collect();
    let held_units = held.iter().filter(|r| wanted.contains(r.id())).count();
    ui.confirm(
        yes,
        &format!(
            "Purge {} ({} ids) from {name} for good?",
            units(held_units as u64),
            present.len()
        ),
    )?;
    let bar = ui.bar(present.len() as u64, "purging");
    let mut tally = in_chunks(&present, &bar, async |chunk| {
        Ok((dead.purge(chunk).await?, Vec::new()))
    })
    .await;
    tally.not_found.extend(absent);
    tally.summary("purged", name, out)
}

/// What a bulk action did, chunk by chunk.
#[derive(Default)]
struct Tally {
    /// Units redriven or purged.
    done: u64,
    /// Ids the dead letter did not hold.
    not_found: Vec<UnitId>,
    /// The chunks that failed: their ids and the error.
    failed: Vec<(Vec<UnitId>, anyhow::Error)>,
}

impl Tally {
    /// Prints the summary line and tells how the action ended.
    fn summary(mut self, verb: &str, name: &str, out: &mut impl Write) -> anyhow::Result<Outcome> {
        if self.done == 0 && !self.failed.is_empty() {
            let (ids, error) = self.failed.remove(0);
            return Err(error.context(format!("{verb} none of {}", joined(&ids))));
        }
        let mut line = format!("{verb} {} from {name}", units(self.done));
        if !self.not_found.is_empty() {
            line.push_str(&format!("; not found: {}", joined(&self.not_found)));
        }
        for (ids, error) in &self.failed {
            line.push_str(&format!("; failed: {} ({error:#})", joined(ids)));
        }
        writeln!(out, "{line}")?;
        Ok(if self.done == 0 {
            Outcome::NothingMatched
        } else if self.not_found.is_empty() && self.failed.is_empty() {
            Outcome::Done
        } else {
            Outcome::Partial
        })
    }
}

/// Runs `act` on `ids` a chunk at a time, advancing `bar`; a chunk that fails is recorded and the
/// others go on. `act` answers how many units it handled and which ids it did not find.
async fn in_chunks(
    ids: &[UnitId],
    bar: &ProgressBar,
    mut act: impl AsyncFnMut(&[UnitId]) -> Result<(u64, Vec<UnitId>), TransportError>,
) -> Tally {
    let mut tally = Tally::default();
    for chunk in ids.chunks(CHUNK) {
        match act(chunk).await {
            Ok((done, not_found)) => {
                tally.done += done;
                tally.not_found.extend(not_found);
            }
            Err(error) => {
                bar.suspend(|| eprintln!("error: {error}"));
                tally.failed.push((chunk.to_vec(), error.into()));
            }
        }
        bar.inc(chunk.len() as u64);
    }
    bar.finish_and_clear();
    tally
}

/// `ids` as unit ids, each once, in their order.
fn unit_ids(ids: Vec<String>) -> Vec<UnitId> {
    distinct(ids.into_iter().map(UnitId::new))
}

fn distinct(ids: impl Iterator<Item = UnitId>) -> Vec<UnitId> {
    let mut seen = HashSet::new();
    ids.filter(|id| seen.insert(id.clone())).collect()
}

/// How many of `held` have one of `ids`: all of them, and those `selected` picks.
fn copies_of(
    held: &[DeadLetter],
    ids: &[UnitId],
    selected: impl Fn(&DeadLetter) -> bool,
) -> (u64, u64) {
    let ids: HashSet<&UnitId> = ids.iter().collect();
    held.iter()
        .filter(|r| ids.contains(r.id()))
        .fold((0, 0), |(all, picked), r| {
            (all + 1, picked + u64::from(selected(r)))
        })
}

/// `1 copy`, `2 copies`.
fn copies(n: u64) -> String {
    format!("{n} cop{}", if n == 1 { "y" } else { "ies" })
}

/// `1 id`, `2 ids`.
fn ids_text(n: usize) -> String {
    format!("{n} id{}", if n == 1 { "" } else { "s" })
}

/// `1 unit`, `2 units`.
fn units(n: u64) -> String {
    format!("{n} unit{}", if n == 1 { "" } else { "s" })
}

fn joined(ids: &[UnitId]) -> String {
    ids.iter().map(UnitId::as_str).collect::<Vec<_>>().join(" ")
}
