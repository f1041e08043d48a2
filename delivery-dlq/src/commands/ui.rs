//! How a command ends, and the terminal it asks and shows progress on.

use std::io::BufRead;
use std::time::Duration;

use anyhow::bail;
use indicatif::{ProgressBar, ProgressStyle};

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
    pub(super) fn confirm(&self, yes: bool, question: &str) -> anyhow::Result<()> {
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
    pub(super) fn bar(&self, len: u64, message: &str) -> ProgressBar {
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
    pub(super) fn spinner(&self, message: String) -> ProgressBar {
        if !self.progress {
            return ProgressBar::hidden();
        }
        let spinner = ProgressBar::new_spinner().with_message(message);
        spinner.enable_steady_tick(Duration::from_millis(100));
        spinner
    }
}
