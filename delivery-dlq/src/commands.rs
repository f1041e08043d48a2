//! The commands, written once over [`DeadLetters`]: whatever the transport, `main` builds its dead
//! letter and hands it to [`run`].

mod args;
mod purge;
mod read;
mod redrive;
mod select;
mod tally;
mod ui;

use std::io::Write;

use delivery::UnitId;
use delivery::dead_letter::DeadLetters;

use purge::purge;
use read::{count, list, show};
use redrive::redrive;
use tally::unit_ids;

pub use args::Command;
pub use ui::{Outcome, Ui};

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
