// #[consumer]'s checks apply: an id minted on receipt makes every delivery a new record (rule 3).
use delivery::{HandlerError, Json, webhook};

mod uuid {
    pub struct Uuid;
    impl Uuid {
        pub fn new_v4() -> Self {
            Uuid
        }
    }
}

#[webhook(scheme = github, secret = env("GITHUB_WEBHOOK_SECRET"))]
async fn push(Json(event): Json<serde_json::Value>) -> Result<(), HandlerError> {
    let _record_id = uuid::Uuid::new_v4();
    let _ = event;
    Ok(())
}

fn main() {}
