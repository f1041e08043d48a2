//! What the bulk actions share: running in chunks, tallying what they did, and wording counts.

use std::collections::HashSet;
use std::io::Write;

use delivery::UnitId;
use delivery::dead_letter::DeadLetter;
use delivery::transport::TransportError;
use indicatif::ProgressBar;

use super::ui::Outcome;

/// Ids per redrive or purge call in a bulk action: the step of its progress bar.
const CHUNK: usize = 50;

/// What a bulk action did, chunk by chunk.
#[derive(Default)]
pub(super) struct Tally {
    /// Units redriven or purged.
    pub(super) done: u64,
    /// Ids the dead letter did not hold.
    pub(super) not_found: Vec<UnitId>,
    /// The chunks that failed: their ids and the error.
    pub(super) failed: Vec<(Vec<UnitId>, anyhow::Error)>,
}

impl Tally {
    /// Prints the summary line and tells how the action ended.
    pub(super) fn summary(
        mut self,
        verb: &str,
        name: &str,
        out: &mut impl Write,
    ) -> anyhow::Result<Outcome> {
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
pub(super) async fn in_chunks(
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
pub(super) fn unit_ids(ids: Vec<String>) -> Vec<UnitId> {
    distinct(ids.into_iter().map(UnitId::new))
}

pub(super) fn distinct(ids: impl Iterator<Item = UnitId>) -> Vec<UnitId> {
    let mut seen = HashSet::new();
    ids.filter(|id| seen.insert(id.clone())).collect()
}

/// How many of `held` have one of `ids`: all of them, and those `selected` picks.
pub(super) fn copies_of(
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
pub(super) fn copies(n: u64) -> String {
    format!("{n} cop{}", if n == 1 { "y" } else { "ies" })
}

/// `1 id`, `2 ids`.
pub(super) fn ids_text(n: usize) -> String {
    format!("{n} id{}", if n == 1 { "" } else { "s" })
}

/// `1 unit`, `2 units`.
pub(super) fn units(n: u64) -> String {
    format!("{n} unit{}", if n == 1 { "" } else { "s" })
}

pub(super) fn joined(ids: &[UnitId]) -> String {
    ids.iter().map(UnitId::as_str).collect::<Vec<_>>().join(" ")
}
