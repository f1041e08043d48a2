//! What the dead-letter tests share: a handler that fills a dead letter, and reading a whole dead
//! letter through `DeadLetters`, a page at a time.
#![allow(dead_code)] // each test binary uses part of it

use delivery::dead_letter::{DeadLetter, DeadLetters};
use delivery::{HandlerError, Json, consumer};

/// An order as [`strict`] reads it.
#[derive(serde::Deserialize)]
pub struct Order {
    /// Refused when negative.
    pub amount_cents: i64,
}

/// Refuses an order with a negative amount (`negative amount`), takes any other; a unit that is
/// not an order is malformed.
#[consumer]
pub async fn strict(Json(order): Json<Order>) -> Result<(), HandlerError> {
    if order.amount_cents < 0 {
        return Err(HandlerError::reject("negative amount"));
    }
    Ok(())
}

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
