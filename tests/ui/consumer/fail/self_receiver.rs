// A handler is a free function: a `self` receiver is refused (take the state as `State<S>`).
use delivery::{HandlerError, Json, consumer};

struct Orders;

impl Orders {
    #[consumer]
    async fn record(&self, Json(id): Json<String>) -> Result<(), HandlerError> {
        let _ = id;
        Ok(())
    }
}

fn main() {}
