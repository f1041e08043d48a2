// Rule 4 (body reads the clock), reach: deep inside nested loops and an `if`.
use delivery::{HandlerError, Json, consumer};

#[derive(serde::Deserialize)]
struct Batch {
    lines: Vec<Vec<String>>,
}

#[consumer]
async fn record(Json(batch): Json<Batch>) -> Result<(), HandlerError> {
    let mut rows = Vec::new();
    for line in &batch.lines {
        for item in line {
            if !item.is_empty() {
                rows.push((item.clone(), std::time::Instant::now()));
            }
        }
    }
    drop(rows);
    Ok(())
}

fn main() {}
