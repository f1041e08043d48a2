//! The dead-letter web console mounted beside a RabbitMQ consumer, seeded with real dead letters.
//!
//!     ADMIN_TOKEN=$(openssl rand -hex 16) cargo run --features admin,lapin --example console
//!
//! then open <http://127.0.0.1:8080/admin> and sign in with the token.
//!
//! Env: `ADMIN_TOKEN` (required, at least 16 characters), `AMQP_URL` (default
//! `amqp://guest:guest@127.0.0.1:5672/%2f`), `QUEUE` (default `console-orders`; its dead letter is
//! `$QUEUE.dlq`), `ADDR` (default `127.0.0.1:8080`).
//!
//! On start it declares the queue and, when its dead letter is empty, publishes a few orders
//! `{"order_id": str, "quantity": int}`: good ones, two that are not JSON (one of them a
//! `<script>`, which the console shows as text), and two with a quantity of 0, which the handler
//! rejects until you redrive them edited. The consumer moves the bad ones to the dead letter;
//! the console groups them by reason, shows each, and redrives or purges them. Runs until SIGINT
//! or SIGTERM.

use std::sync::{Arc, Mutex};

use axum::Router;
use axum::routing::get;
use delivery::admin::Console;
use delivery::dead_letter::DeadLetters;
use delivery::rabbitmq::{ConfirmedPublisher, RabbitDeadLetters, RabbitSource, RabbitTopology};
use delivery::{Consumer, HandlerError, Json, State, Unit, UnitId, consumer};
use serde::Deserialize;

#[path = "support/env.rs"]
mod env;
use env::{env_or, shutdown_signal};

#[derive(Deserialize)]
struct Order {
    order_id: String,
    quantity: i64,
}

/// The orders applied, as the service's effect (a real one writes to its database).
#[derive(Clone, Default)]
struct Applied(Arc<Mutex<Vec<String>>>);

/// An order with no quantity cannot be applied: rejected, straight to the dead letter.
#[consumer]
async fn apply(
    Json(order): Json<Order>,
    id: UnitId,
    State(applied): State<Applied>,
) -> Result<(), HandlerError> {
    if order.quantity <= 0 {
        return Err(HandlerError::reject(std::io::Error::other(format!(
            "order {} has quantity {}",
            order.order_id, order.quantity
        ))));
    }
    tracing::info!(%id, order = order.order_id, quantity = order.quantity, "applied");
    applied.0.lock().unwrap().push(order.order_id);
    Ok(())
}

/// Good orders, two that are not JSON and two the handler rejects.
fn seed() -> Vec<Unit> {
    let order = |id: &str, quantity: i64| {
        Unit::new(
            id,
            format!(r#"{{"order_id": "{id}", "quantity": {quantity}}}"#),
        )
    };
    vec![
        order("order-1", 2),
        Unit::new("order-2", "order-2 quantity=3"),
        order("order-3", 0),
        Unit::new("order-4", r#"<script>document.title = "pwned"</script>"#),
        order("order-5", 0),
        order("order-6", 1),
    ]
}

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let shutdown = shutdown_signal();
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env().unwrap_or_else(|_| "info".into()),
        )
        .init();
    let token = std::env::var("ADMIN_TOKEN")
        .map_err(|_| "set ADMIN_TOKEN to the console's token (e.g. `openssl rand -hex 16`)")?;
    if token.chars().count() < delivery::admin::MIN_TOKEN_LEN {
        return Err(format!(
            "ADMIN_TOKEN must have at least {} characters",
            delivery::admin::MIN_TOKEN_LEN
        )
        .into());
    }
    let amqp_url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let queue = env_or("QUEUE", "console-orders");
    let addr = env_or("ADDR", "127.0.0.1:8080");
    let topology = RabbitTopology::new(&queue).delivery_limit(3);
    delivery::rabbitmq::declare(amqp_url.as_str(), &topology).await?;

    let dead = RabbitDeadLetters::new(amqp_url.as_str(), &topology);
    if dead.count().await? == 0 {
        let publisher = ConfirmedPublisher::new(amqp_url.as_str());
        for unit in seed() {
            let properties = delivery::rabbitmq::properties_of(&unit);
            publisher
                .publish(&queue, unit.payload(), properties)
                .await?;
        }
        publisher.close().await;
        tracing::info!(queue, "published the seed orders");
    }

    let console = Console::new(token).dead_letters(dead);
    let app = Router::new()
        .route(
            "/",
            get(|| async { "the service; its dead letters: /admin" }),
        )
        // `nest_service` serves `/admin` and `/admin/` alike (`nest` would leave `/admin/` a 404).
        .nest_service("/admin", console.router());
    let listener = tokio::net::TcpListener::bind(&addr).await?;
    tracing::info!("console on http://{}/admin", listener.local_addr()?);

    let source = RabbitSource::connect(amqp_url.as_str(), topology).await?;
    let (stop_consumer, stopped) = tokio::sync::oneshot::channel::<()>();
    let consumer = tokio::spawn(
        Consumer::new(source)
            .state(Applied::default())
            .shutdown_on(async {
                let _ = stopped.await;
            })
            .run(apply),
    );
    axum::serve(listener, app)
        .with_graceful_shutdown(shutdown)
        .await?;
    let _ = stop_consumer.send(());
    let report = consumer.await?;
    tracing::info!(?report, "stopped");
    Ok(())
}
