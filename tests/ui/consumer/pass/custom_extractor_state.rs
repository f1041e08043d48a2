// Pass: `#[consumer(state = App)]` with the user's own extractor implementing `FromUnit<App>`
// (a tenant resolved from a header and the shared state), and no `State<..>` parameter.
use delivery::memory::MemoryBroker;
use delivery::{Consumer, extract::FromUnit, HandlerError, Json, extract::Malformed, Unit, consumer};
use std::collections::HashMap;
use std::sync::Arc;

#[derive(Clone, Default)]
struct App {
    tenants: Arc<HashMap<String, u32>>,
}

struct Tenant {
    id: u32,
}

impl FromUnit<App> for Tenant {
    fn from_unit(unit: &Unit, app: &App) -> Result<Self, Malformed> {
        let name = unit
            .headers()
            .get_str("tenant")
            .ok_or_else(|| Malformed::new("no tenant header"))?;
        let id = *app
            .tenants
            .get(name)
            .ok_or_else(|| Malformed::new(format!("unknown tenant {name}")))?;
        Ok(Tenant { id })
    }
}

#[consumer(state = App)]
async fn record(tenant: Tenant, Json(order_id): Json<String>) -> Result<(), HandlerError> {
    let _ = (tenant.id, order_id);
    Ok(())
}

fn main() {
    let _run = Consumer::new(MemoryBroker::new().consume("orders"))
        .state(App::default())
        .run(record);
}
