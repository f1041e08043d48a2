//! Reading a whole dead letter through [`DeadLetters`], whatever the transport.
#![allow(dead_code)] // each test binary uses part of it

use delivery::dead_letter::{DeadLetter, DeadLetters};

/// Every record in `dead`, oldest first.
pub async fn all(dead: &impl DeadLetters) -> Vec<DeadLetter> {
    in_pages(dead, 500).await
}

/// Every record in `dead`, oldest first, listed `size` at a time (each page checked to hold at
/// most that).
pub async fn in_pages(dead: &impl DeadLetters, size: usize) -> Vec<DeadLetter> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = dead
            .list(size, after.as_ref())
            .await
            .unwrap_or_else(|e| panic!("listing {}: {e}", dead.name()));
        assert!(page.records.len() <= size, "a page holds at most its limit");
        all.extend(page.records);
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
}
