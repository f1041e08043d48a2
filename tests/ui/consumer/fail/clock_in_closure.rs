use delivery::{consumer, HandlerError, Json};

#[consumer]
async fn handle(Json(ids): Json<Vec<String>>) -> Result<(), HandlerError> {
    let stamped: Vec<_> = ids.iter().map(|id| (id.clone(), std::time::SystemTime::now())).collect();
    drop(stamped);
    Ok(())
}

fn main() {}
