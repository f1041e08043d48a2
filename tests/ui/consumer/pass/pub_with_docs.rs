// Pass: `pub` visibility, doc comments and other attributes on the handler are kept: the handler
// is usable (and `handle` callable) from another module.
mod handlers {
    use delivery::{HandlerError, Json, consumer};

    /// Records a refund, keyed by the refund's own id.
    ///
    /// A redelivery finds the refund already recorded and changes nothing.
    #[consumer]
    #[must_use = "a handler's result says whether the unit is acknowledged"]
    pub async fn record_refund(Json(refund_id): Json<String>) -> Result<(), HandlerError> {
        let _ = refund_id;
        Ok(())
    }

    #[consumer]
    pub(crate) async fn record_chargeback(Json(id): Json<String>) -> Result<(), HandlerError> {
        let _ = id;
        Ok(())
    }
}

use delivery::memory::MemoryBroker;
use delivery::{Consumer, Json};

#[tokio::main(flavor = "current_thread")]
async fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("refunds")).run(handlers::record_refund);
    let _run =
        Consumer::new(MemoryBroker::new().consume("chargebacks")).run(handlers::record_chargeback);
    handlers::record_refund::handle(Json("r-1".to_string()))
        .await
        .unwrap();
}
