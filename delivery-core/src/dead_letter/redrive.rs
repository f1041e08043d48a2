//! The redrive, written once: each selected unit sent back to its source, and its dead-letter copy
//! removed only once the source confirmed it holds the unit (rule 2: never in neither). A
//! transport implements [`RedriveLog`], its dead letter's primitives; [`redrive`] and
//! [`redrive_edited`] are its [`DeadLetters::redrive`](super::DeadLetters::redrive) and
//! [`DeadLetters::redrive_edited`](super::DeadLetters::redrive_edited).

use std::future::Future;

use bytes::Bytes;

use super::api::{DeadLetter, RedriveReport, Selection};
use crate::transport_error::TransportError;
use crate::unit::UnitId;

/// One page of a [`RedriveLog`]: its entries, oldest first, each with its record, and whether
/// more follow.
pub type Page<E> = (Vec<(E, DeadLetter)>, bool);

/// What became of one unit a redrive sent back to its source.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Republished {
    /// The source confirmed it holds the unit: its dead-letter copy may go.
    Confirmed,
    /// Not sent back, for this reason (e.g. refused as a duplicate): the unit stays in the dead
    /// letter, the redrive goes on with the others and then fails naming it.
    Left(String),
}

/// A dead letter's primitives for a redrive: read what it holds a page at a time, send one unit
/// back to its source intact, remove one dead-letter copy. The loop that composes them —
/// selection, order, "removed only once republished", the report and its errors — is
/// [`redrive`]'s, the same for every transport.
pub trait RedriveLog: Send + Sync {
    /// What one redrive holds while it runs: a scan's place, a snapshot held unacknowledged, a
    /// producer.
    type Pass: Send;
    /// One dead-letter copy as the pass read it: what [`republish`](Self::republish) sends and
    /// [`remove`](Self::remove) removes.
    type Entry: Send + Sync;

    /// Starts a redrive.
    fn open(&self) -> impl Future<Output = Result<Self::Pass, TransportError>> + Send;

    /// The next entries of the dead letter, oldest first, each with its record, and whether more
    /// follow: `false` once the pass saw every entry it holds (those added while it runs — a
    /// redriven unit dead-lettered again — are not seen). A backend that reads the whole dead
    /// letter at once answers one page.
    fn next_page(
        &self,
        pass: &mut Self::Pass,
    ) -> impl Future<Output = Result<Page<Self::Entry>, TransportError>> + Send;

    /// Sends the unit of `entry` (`record`) back to its source under its own id, without the
    /// dead letter's headers — with `edit` as its payload and the
    /// [`edit_headers`](super::edit_headers) in place of any earlier edit's, if given — and
    /// waits for the source to confirm it.
    fn republish(
        &self,
        pass: &mut Self::Pass,
        entry: &Self::Entry,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> impl Future<Output = Result<Republished, TransportError>> + Send;

    /// Removes the dead-letter copy `entry` for good.
    fn remove(
        &self,
        pass: &mut Self::Pass,
        entry: Self::Entry,
    ) -> impl Future<Output = Result<(), TransportError>> + Send;

    /// Ends a redrive, whatever it came to (hands back what it held, closes what it opened).
    fn close(&self, pass: Self::Pass) -> impl Future<Output = ()> + Send {
        drop(pass);
        async {}
    }
}

/// Sends the units `selection` picks back to their source, in the dead letter's order, each
/// removed from the dead letter only once its source confirmed it: what
/// [`DeadLetters::redrive`](super::DeadLetters::redrive) does over a [`RedriveLog`].
///
/// A unit that could not be sent back stops the redrive with an error naming it and how many were
/// redriven before it; one the source confirmed but whose copy could not be removed, with an
/// error saying it is in both. A unit [`Left`](Republished::Left) stays, the others go on, and
/// the redrive then fails naming what it moved and what it left.
pub async fn redrive<L: RedriveLog>(
    log: &L,
    selection: Selection<'_>,
) -> Result<RedriveReport, TransportError> {
    let redriven = run(log, selection, None).await?;
    Ok(RedriveReport::of(selection, redriven))
}

/// Sends every copy of the unit `id` back to its source with `payload` as its payload and the edit
/// recorded in its headers: what [`DeadLetters::redrive_edited`](super::DeadLetters::redrive_edited)
/// does over a [`RedriveLog`]. `false`: the dead letter holds no unit with `id`.
pub async fn redrive_edited<L: RedriveLog>(
    log: &L,
    id: &UnitId,
    payload: Bytes,
) -> Result<bool, TransportError> {
    let selection = Selection::Ids(std::slice::from_ref(id));
    Ok(!run(log, selection, Some(&payload)).await?.is_empty())
}

/// The loop: one pass, ended whatever it came to. Returns the ids redriven.
async fn run<L: RedriveLog>(
    log: &L,
    selection: Selection<'_>,
    edit: Option<&Bytes>,
) -> Result<Vec<UnitId>, TransportError> {
    let mut pass = log.open().await?;
    let mut moved = Moved::default();
    let result = moved.all(log, &mut pass, selection, edit).await;
    log.close(pass).await;
    result?;
    if moved.left.is_empty() {
        return Ok(moved.redriven);
    }
    Err(TransportError::msg(
        "redriving",
        format!(
            "redriven: [{}]; left in the dead letter: {} — redrive them again later",
            moved
                .redriven
                .iter()
                .map(UnitId::as_str)
                .collect::<Vec<_>>()
                .join(", "),
            moved.left.join(", ")
        ),
    ))
}

/// What a redrive moved so far, and what it left.
#[derive(Default)]
struct Moved {
    redriven: Vec<UnitId>,
    left: Vec<String>,
}

impl Moved {
    async fn all<L: RedriveLog>(
        &mut self,
        log: &L,
        pass: &mut L::Pass,
        selection: Selection<'_>,
        edit: Option<&Bytes>,
    ) -> Result<(), TransportError> {
        loop {
            let (page, more) = log.next_page(pass).await?;
            for (entry, record) in page {
                if selection.contains(record.id()) {
                    self.one(log, pass, entry, &record, edit).await?;
                }
            }
            if !more {
                return Ok(());
            }
        }
    }

    async fn one<L: RedriveLog>(
        &mut self,
        log: &L,
        pass: &mut L::Pass,
        entry: L::Entry,
        record: &DeadLetter,
        edit: Option<&Bytes>,
    ) -> Result<(), TransportError> {
        let id = record.id();
        let target = &record.source;
        let before = self.redriven.len();
        let republished = log.republish(pass, &entry, record, edit).await;
        match republished.map_err(|e| {
            TransportError::msg(
                "redriving",
                format!(
                    "{id} was not moved to `{target}` and stays in the dead letter ({before} \
                     units were redriven before it): {e}"
                ),
            )
        })? {
            Republished::Confirmed => {}
            Republished::Left(why) => {
                self.left.push(format!("{id} ({why})"));
                return Ok(());
            }
        }
        log.remove(pass, entry).await.map_err(|e| {
            TransportError::msg(
                "redriving",
                format!(
                    "{id} was moved to `{target}` but its dead-letter copy was not removed ({e}); \
                     it is in both ({before} units were redriven before it)"
                ),
            )
        })?;
        self.redriven.push(id.clone());
        Ok(())
    }
}
