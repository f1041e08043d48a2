// A handler on a database queue takes the unit's transaction: the runtime begins it before the run
// and commits the acknowledgement in it. `#[consumer]` says so from the parameter's type, behind
// an alias too; a handler without one does not.
use delivery::handler::Handler;
use delivery::queue::{PgTx, SqliteTx};
use delivery::{HandlerError, Json, State, UnitId, consumer};

type Transaction = PgTx;

#[consumer]
async fn in_postgres(
    id: UnitId,
    Json(cents): Json<i64>,
    mut tx: Transaction,
) -> Result<(), HandlerError> {
    sqlx::query("INSERT INTO charges (unit, cents) VALUES ($1, $2)")
        .bind(id.as_str())
        .bind(cents)
        .execute(&mut *tx)
        .await?;
    Ok(())
}

#[consumer]
async fn in_sqlite(State(_): State<u8>, mut tx: SqliteTx) -> Result<(), HandlerError> {
    sqlx::query("UPDATE total SET n = n + 1").execute(&mut *tx).await?;
    Ok(())
}

#[consumer]
async fn without(Json(cents): Json<i64>) -> Result<(), HandlerError> {
    let _ = cents;
    Ok(())
}

fn main() {
    assert!(<in_postgres as Handler<()>>::IN_TRANSACTION);
    assert!(<in_sqlite as Handler<u8>>::IN_TRANSACTION);
    assert!(!<without as Handler<()>>::IN_TRANSACTION);
}
