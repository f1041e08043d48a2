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
