// Pass: the router's state holds the handler's state and the secrets apart; both are taken from
// it with `FromRef`, as axum's `State` is. The secret closure names its own state type.
use axum::Router;
use axum::extract::FromRef;
use axum::routing::post;
use delivery::{HandlerError, Json, State, webhook};

#[derive(Clone, Default)]
struct Db {
    rows: std::sync::Arc<std::sync::Mutex<Vec<u64>>>,
}

#[derive(Clone)]
struct Secrets {
    shopify: String,
}

#[derive(Clone)]
struct AppState {
    db: Db,
    secrets: Secrets,
}

impl FromRef<AppState> for Db {
    fn from_ref(state: &AppState) -> Self {
        state.db.clone()
    }
}

impl FromRef<AppState> for Secrets {
    fn from_ref(state: &AppState) -> Self {
        state.secrets.clone()
    }
}

#[derive(serde::Deserialize)]
struct Order {
    id: u64,
}

#[webhook(scheme = shopify, secret = |s: &Secrets| s.shopify.clone())]
async fn orders_create(State(db): State<Db>, Json(order): Json<Order>) -> Result<(), HandlerError> {
    let mut rows = db.rows.lock().unwrap();
    if !rows.contains(&order.id) {
        rows.push(order.id);
    }
    Ok(())
}

fn main() {
    let state = AppState {
        db: Db::default(),
        secrets: Secrets {
            shopify: "shpss_secret".into(),
        },
    };
    let route = delivery::webhook::route(orders_create, &state).expect("the secret is usable");
    let _router: Router = Router::new()
        .route("/webhooks/shopify", route)
        .route("/webhooks/shopify-lazy", post(orders_create))
        .with_state(state);
}
