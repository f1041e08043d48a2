//! The inbox under concurrent deliveries: `TASKS` transactions deliver one unit at once, each
//! adding 1 to a counter only if the inbox says it is the unit's first time. Run it twice at once
//! and the counter still ends at 1 (`tests/inbox_postgres.rs` runs two such processes).
//!
//!     cargo run --features postgres --example inbox_counter
//!
//! Env: `DATABASE_URL` (default `postgres://postgres@127.0.0.1:5432/test`), `UNIT_ID` (default
//! `u-1`), `CONSUMER` (the inbox's consumer name, default `counter`), `TASKS` (default 16),
//! `HOLD_MS` (a pause between recording the unit and committing, which keeps the other
//! deliveries waiting on the first; default 50), `GATE` (an advisory lock key every transaction
//! waits on before it records the unit, so the tasks of several processes start together;
//! default none).
//!
//! Creates the inbox's table (`delivery_inbox`) and `inbox_counter (unit_id, applied)` if
//! missing. Prints one line per transaction, `applied` or `already applied`, once it committed,
//! and exits 1 if any transaction failed.

use std::time::Duration;

use delivery::UnitId;
use delivery::inbox::Inbox;
use sqlx::PgPool;
use sqlx::postgres::PgPoolOptions;

#[path = "support/env.rs"]
mod env;
use env::{env_num, env_or};

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let database_url = env_or("DATABASE_URL", "postgres://postgres@127.0.0.1:5432/test");
    let unit = UnitId::new(env_or("UNIT_ID", "u-1"));
    let tasks: u32 = env_num("TASKS", 16);
    let hold = Duration::from_millis(env_num("HOLD_MS", 50));
    let gate: Option<i64> = std::env::var("GATE").ok().map(|_| env_num("GATE", 0));

    let db = PgPoolOptions::new()
        .max_connections(tasks.max(1))
        .connect(&database_url)
        .await?;
    let inbox = Inbox::new(env_or("CONSUMER", "counter"));
    inbox.postgres(db.clone()).migrate().await?;
    sqlx::query(
        "CREATE TABLE IF NOT EXISTS inbox_counter (unit_id text PRIMARY KEY, applied bigint NOT NULL)",
    )
    .execute(&db)
    .await?;

    let runs: Vec<_> = (0..tasks)
        .map(|_| tokio::spawn(deliver(db.clone(), inbox.clone(), unit.clone(), gate, hold)))
        .collect();
    let mut failed = 0;
    for run in runs {
        match run.await? {
            Ok(true) => println!("applied"),
            Ok(false) => println!("already applied"),
            Err(error) => {
                eprintln!("error: a delivery failed: {error}");
                failed += 1;
            }
        }
    }
    if failed > 0 {
        return Err(format!("{failed} of {tasks} deliveries failed").into());
    }
    Ok(())
}

/// One delivery of `unit`, as a handler applies it: `true` if it applied the unit, `false` if the
/// unit was already applied (and this delivery wrote nothing). `Ok` only once committed.
async fn deliver(
    db: PgPool,
    inbox: Inbox,
    unit: UnitId,
    gate: Option<i64>,
    hold: Duration,
) -> Result<bool, sqlx::Error> {
    let mut tx = db.begin().await?;
    if let Some(gate) = gate {
        // Every transaction holds the gate shared: they all pass at once when it opens.
        sqlx::query("SELECT pg_advisory_xact_lock_shared($1)")
            .bind(gate)
            .execute(&mut *tx)
            .await?;
    }
    let first = inbox.first_time(&mut tx, &unit).await?;
    if first {
        sqlx::query(
            "INSERT INTO inbox_counter (unit_id, applied) VALUES ($1, 1) \
             ON CONFLICT (unit_id) DO UPDATE SET applied = inbox_counter.applied + 1",
        )
        .bind(unit.as_str())
        .execute(&mut *tx)
        .await?;
        // The others wait on the inbox's key meanwhile.
        tokio::time::sleep(hold).await;
    }
    tx.commit().await?;
    Ok(first)
}
