// Pass: a deterministic id derived from the unit, `Uuid::new_v5(namespace, unit id)` — the same
// on every delivery, so it is allowed (rule 3's own advice).
use delivery::memory::MemoryBroker;
use delivery::{Consumer, HandlerError, Json, State, UnitId, consumer};
use std::collections::HashMap;
use std::sync::{Arc, Mutex};
use uuid::Uuid;

const CUSTOMERS: Uuid = Uuid::from_u128(0x6ba7_b814_9dad_11d1_80b4_00c0_4fd4_30c8);

#[derive(serde::Deserialize)]
struct SignedUp {
    email: String,
}

#[derive(Clone, Default)]
struct App {
    customers: Arc<Mutex<HashMap<Uuid, String>>>,
}

#[consumer]
async fn create_customer(
    State(app): State<App>,
    unit_id: UnitId,
    Json(event): Json<SignedUp>,
) -> Result<(), HandlerError> {
    let customer_id = Uuid::new_v5(&CUSTOMERS, unit_id.as_str().as_bytes());
    let audit_id = Uuid::new_v5(&Uuid::NAMESPACE_OID, event.email.as_bytes());
    app.customers
        .lock()
        .unwrap()
        .entry(customer_id)
        .or_insert(event.email);
    let _ = audit_id;
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("signups"))
        .state(App::default())
        .run(create_customer);
}
