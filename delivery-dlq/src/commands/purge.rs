//! `purge`: units out of the dead letter for good.

use std::collections::HashSet;
use std::io::Write;

use delivery::UnitId;
use delivery::dead_letter::{DeadLetter, DeadLetters};

use super::args::Filter;
use super::select::scan;
use super::tally::{in_chunks, joined, units};
use super::ui::{Outcome, Ui};

pub(super) async fn purge<D: DeadLetters>(
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
