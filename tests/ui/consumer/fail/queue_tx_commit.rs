// The unit's transaction is the runtime's to commit, with the acknowledgement: `Tx` hands out the
// connection, never `commit`.
use delivery::queue::PgTx;
use delivery::{HandlerError, Json, consumer};

#[consumer]
async fn apply(Json(cents): Json<i64>, mut tx: PgTx) -> Result<(), HandlerError> {
    sqlx::query("UPDATE total SET cents = cents + $1")
        .bind(cents)
        .execute(&mut *tx)
        .await?;
    tx.commit().await?;
    Ok(())
}

fn main() {}
