//! A Standard Webhooks receiver on axum that records each event in PostgreSQL, once.
//!
//!     WEBHOOK_SECRET=whsec_MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLaSw \
//!         cargo run --example axum_webhook --features axum
//!
//! Configuration, from the environment:
//! - `WEBHOOK_SECRET` (required): the endpoint's Standard Webhooks signing secret, `whsec_<base64>`.
//!   The service refuses to start without a usable one, saying so.
//! - `PORT` (default `3000`): it listens on `127.0.0.1:PORT`.
//! - `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//!
//! `POST /webhooks` takes a signed delivery whose body is `{"type": "...", "data": {...}}`. Its
//! effect is one row in `webhook_events(webhook_id text primary key, event_type text, payload
//! jsonb)` — `webhook_id` the delivery's `webhook-id`, `event_type` its `type`, `payload` its
//! `data` — written with `ON CONFLICT (webhook_id) DO NOTHING`, so a redelivery answers `200` and
//! writes nothing new (rule 3). The table is created at startup (or, if the database cannot be
//! reached then, by the first delivery that reaches it).
//!
//! Statuses: `200` applied or already applied; `401` a signature or timestamp that does not
//! verify (nothing is written); `413` a body over 1 MiB; `400` a verified body that is not such an
//! event; `503` the database cannot be reached (the sender delivers again later).

use std::net::SocketAddr;
use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use delivery::{HandlerError, Json, State, UnitId, webhook};
use serde::Deserialize;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;
use tokio::sync::OnceCell;

const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS webhook_events (
    webhook_id text PRIMARY KEY,
    event_type text NOT NULL,
    payload jsonb NOT NULL
)";

#[derive(Clone)]
struct App {
    pool: PgPool,
    /// Set once the table is known to exist.
    table: Arc<OnceCell<()>>,
}

impl App {
    /// Creates the table unless it is known to exist; a failure is retried on the next call.
    async fn ensure_table(&self) -> Result<(), sqlx::Error> {
        self.table
            .get_or_try_init(|| async {
                sqlx::query(CREATE_TABLE).execute(&self.pool).await?;
                Ok::<(), sqlx::Error>(())
            })
            .await?;
        Ok(())
    }
}

#[derive(Deserialize)]
struct Event {
    r#type: String,
    data: serde_json::Value,
}

/// One delivery, verified over its raw body before it was parsed. The row is keyed by the
/// delivery's `webhook-id`, which every redelivery repeats: the second insert changes nothing.
/// Any database error is returned with `?`: the sender gets `503` and delivers again.
#[webhook(scheme = standard_webhooks, secret = env("WEBHOOK_SECRET"))]
async fn receive(
    State(app): State<App>,
    webhook_id: UnitId,
    Json(event): Json<Event>,
) -> Result<(), HandlerError> {
    app.ensure_table().await?;
    let inserted = sqlx::query(
        "INSERT INTO webhook_events (webhook_id, event_type, payload) VALUES ($1, $2, $3) \
         ON CONFLICT (webhook_id) DO NOTHING",
    )
    .bind(webhook_id.as_str())
    .bind(&event.r#type)
    .bind(sqlx::types::Json(&event.data))
    .execute(&app.pool)
    .await?
    .rows_affected();
    if inserted == 0 {
        tracing::info!(%webhook_id, "already recorded; nothing written");
    }
    Ok(())
}

// `pub`: tests/axum_webhook_example.rs runs this very function as the example's process.
#[tokio::main]
pub async fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| "info,delivery_core=debug".into()),
        )
        .init();
    match run().await {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("axum_webhook: {error}");
            ExitCode::FAILURE
        }
    }
}

async fn run() -> Result<(), String> {
    let port: u16 = match std::env::var("PORT") {
        Ok(port) => port
            .parse()
            .map_err(|_| format!("PORT must be a port number, not {port:?}"))?,
        Err(_) => 3000,
    };
    let url = std::env::var("DATABASE_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned());

    // Connections are opened when needed: an unreachable database answers deliveries with 503
    // rather than keeping the service down.
    let pool = PgPoolOptions::new()
        .max_connections(5)
        .acquire_timeout(Duration::from_secs(3))
        .connect_lazy(&url)
        .map_err(|e| format!("DATABASE_URL is not a PostgreSQL URL: {e}"))?;
    let app = App {
        pool,
        table: Arc::default(),
    };

    // The secret is read and checked here, at startup: unset or unusable, the service stops now.
    let route = delivery::webhook::route(receive, &app).map_err(|e| {
        format!(
            "{e}; set WEBHOOK_SECRET to the endpoint's Standard Webhooks signing secret (whsec_...)"
        )
    })?;
    let router = Router::new()
        .route("/webhooks", route)
        .with_state(app.clone());

    if let Err(error) = app.ensure_table().await {
        tracing::warn!(%error, "the database cannot be reached; deliveries are answered 503 until it can");
    }

    let address = SocketAddr::from(([127, 0, 0, 1], port));
    let listener = tokio::net::TcpListener::bind(address)
        .await
        .map_err(|e| format!("cannot listen on {address}: {e}"))?;
    tracing::info!(%address, "receiving Standard Webhooks deliveries on POST /webhooks");
    // Stopped by a signal, a delivery in flight gets no answer, so its sender delivers it again:
    // nothing is acknowledged before its row is committed (rule 1).
    axum::serve(listener, router)
        .await
        .map_err(|e| format!("server error: {e}"))
}
