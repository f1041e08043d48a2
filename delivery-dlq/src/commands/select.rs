//! Reading the dead letter page by page, keeping the records a filter matches.

use anyhow::Context;
use delivery::dead_letter::{Cursor, DeadLetter, DeadLetters};

use super::args::Filter;

/// Records read per page while a command scans the whole dead letter (count by reason, a
/// redrive by reason, a purge), or looks past records a filter skips.
pub(super) const PAGE: usize = 500;

/// Up to `limit` records matching `filter` after `after`, read `page` at a time, and the cursor
/// after the last of them when more may follow.
pub(super) async fn select<D: DeadLetters>(
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
pub(super) async fn scan<D: DeadLetters>(
    dead: &D,
    filter: &Filter,
) -> anyhow::Result<Vec<DeadLetter>> {
    Ok(select(dead, filter, usize::MAX, PAGE, None).await?.0)
}
