//! Reading a whole dead letter through `DeadLetters`, a page at a time, as the tests check it.
#![allow(dead_code)] // each test binary uses part of it

use delivery::dead_letter::{DeadLetter, DeadLetters};

/// Every record in `dead_letters`, oldest first, read ten at a time through the cursor.
pub async fn all<D: DeadLetters>(dead_letters: &D) -> Vec<DeadLetter> {
    let mut all = Vec::new();
    let mut after = None;
    loop {
        let page = dead_letters
            .list(10, after.as_ref())
            .await
            .unwrap_or_else(|e| panic!("listing {}: {e}", dead_letters.name()));
        all.extend(page.records);
        match page.next {
            Some(next) => after = Some(next),
            None => return all,
        }
    }
}
