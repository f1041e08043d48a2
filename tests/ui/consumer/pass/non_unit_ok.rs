// Pass: the success value need not be `()` — `Result<u64, HandlerError>`, handy when tests call
// `handle` directly.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, consumer};

#[derive(serde::Deserialize)]
struct Invoice {
    lines: Vec<u64>,
}

#[consumer]
async fn total(Json(invoice): Json<Invoice>) -> Result<u64, HandlerError> {
    invoice
        .lines
        .iter()
        .try_fold(0_u64, |sum, line| sum.checked_add(*line))
        .ok_or_else(|| HandlerError::reject("invoice total overflows"))
}

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("invoices")).run(total);
    let sum = total::handle(Json(Invoice { lines: vec![3, 4] }))
        .await
        .unwrap();
    assert_eq!(sum, 7);
}
