//! The command line of each command: its arguments, and the filter a listing selects by.

use std::path::PathBuf;

use clap::{ArgGroup, Args, Subcommand};
use delivery::dead_letter::DeadLetter;
use delivery::disposition::ReasonKind;

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
    pub(super) limit: u32,
    /// Start after this cursor (printed by the previous page).
    #[arg(long, value_name = "CURSOR")]
    pub(super) after: Option<String>,
    /// One JSON object: `dead_letter`, `records`, `next` (the cursor, or null on the last page).
    #[arg(long)]
    pub(super) json: bool,
    #[command(flatten)]
    pub(super) filter: Filter,
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
    pub(super) ids: Vec<String>,
    /// Every unit dead-lettered for this reason: malformed, rejected, exhausted, or unknown.
    #[arg(long, value_parser = reason)]
    pub(super) reason: Option<Reason>,
    /// Every unit in the dead letter.
    #[arg(long)]
    pub(super) all: bool,
    /// Redrive the one id with the payload in FILE (`-`: stdin) in place of its own; the edit is
    /// recorded in its headers (x-delivery-edited, x-delivery-original-sha256).
    #[arg(long, value_name = "FILE", conflicts_with_all = ["reason", "all", "edit"])]
    pub(super) payload: Option<PathBuf>,
    /// Redrive the one id with its payload as edited in $VISUAL or $EDITOR (default vi): JSON
    /// pretty-printed to edit and sent compact; an editor's added final newline dropped. Recorded
    /// in its headers as --payload is.
    #[arg(long, conflicts_with_all = ["reason", "all"])]
    pub(super) edit: bool,
    /// Do not ask for confirmation.
    #[arg(long, short)]
    pub(super) yes: bool,
}

/// A reason to select by: one of [`ReasonKind`], or none recorded (`unknown`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Reason(pub(super) Option<ReasonKind>);

fn reason(s: &str) -> Result<Reason, String> {
    match (s, ReasonKind::parse(s)) {
        (_, Some(kind)) => Ok(Reason(Some(kind))),
        ("unknown", None) => Ok(Reason(None)),
        _ => Err("expected malformed, rejected, exhausted or unknown".into()),
    }
}

impl Filter {
    pub(super) fn everything() -> Self {
        Filter {
            reason: None,
            source: None,
            id_prefix: None,
        }
    }

    pub(super) fn of_reason(reason: Reason) -> Self {
        Filter {
            reason: Some(reason),
            ..Filter::everything()
        }
    }

    pub(super) fn is_everything(&self) -> bool {
        self.reason.is_none() && self.source.is_none() && self.id_prefix.is_none()
    }

    pub(super) fn matches(&self, record: &DeadLetter) -> bool {
        self.reason.is_none_or(|Reason(r)| record.reason == r)
            && self.source.as_ref().is_none_or(|s| record.source == *s)
            && self
                .id_prefix
                .as_ref()
                .is_none_or(|p| record.id().as_str().starts_with(p.as_str()))
    }
}
