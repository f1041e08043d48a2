// Rule 4 (body reads the clock), reach: inside the arguments of an `sqlx::query!`-like macro
// (a local stand-in with the same path; the check reads the invocation's tokens).
use delivery::{HandlerError, Json, consumer};

mod chrono {
    pub struct Utc;
    impl Utc {
        pub fn now() -> i64 {
            0
        }
    }
}

mod sqlx {
    macro_rules! query {
        ($sql:literal $(, $arg:expr)* $(,)?) => {
            ($sql, vec![$(format!("{:?}", $arg)),*])
        };
    }
    pub(crate) use query;
}

#[derive(serde::Deserialize)]
struct OrderPlaced {
    order_id: String,
}

#[consumer]
async fn record_order(Json(order): Json<OrderPlaced>) -> Result<(), HandlerError> {
    let statement = sqlx::query!(
        "INSERT INTO orders (id, created_at) VALUES ($1, $2) ON CONFLICT DO NOTHING",
        order.order_id,
        chrono::Utc::now(),
    );
    drop(statement);
    Ok(())
}

fn main() {}
