//! The operator's tool over a dead letter, written once over [`DeadLetters`] and wired to a
//! transport by `DLQ_TRANSPORT`.
//!
//!     cargo run --features lapin --example dlq -- count
//!     cargo run --features lapin --example dlq -- list [--limit N] [--after CURSOR]
//!     cargo run --features lapin --example dlq -- show ID
//!     cargo run --features lapin --example dlq -- redrive (--all | ID...)
//!     cargo run --features lapin --example dlq -- purge ID...
//!     DLQ_TRANSPORT=redis cargo run --features lapin,redis --example dlq -- list
//!
//! Env: `DLQ_TRANSPORT` (`rabbitmq`, the default, or `redis`).
//! - RabbitMQ: `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `QUEUE` (default
//!   `orders`; its dead letter is `$QUEUE.dlq`).
//! - Redis: `REDIS_URL` (default `redis://127.0.0.1:6379`), `STREAM` (default `orders`; its dead
//!   letter is `$STREAM.dlq`), `GROUP` (default `billing`).
//!
//! Listing and showing consume nothing. A redrive sends each unit back to where it came from
//! under its own id, and removes it from the dead letter only once its source holds it; a purge
//! removes units for good.

#[path = "support/env.rs"]
mod env;

use std::time::UNIX_EPOCH;

use delivery::UnitId;
use delivery::dead_letter::{Cursor, DeadLetter, DeadLetters, Selection};
use delivery::rabbitmq::{RabbitDeadLetters, RabbitTopology};
use env::env_or;

type Error = Box<dyn std::error::Error + Send + Sync>;

const USAGE: &str = "usage: dlq count | list [--limit N] [--after CURSOR] | show ID | redrive (--all | ID...) | purge ID...";

fn usage() -> ! {
    eprintln!("{USAGE}");
    std::process::exit(2)
}

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

async fn run() -> Result<(), Error> {
    let args: Vec<String> = std::env::args().skip(1).collect();
    match env_or("DLQ_TRANSPORT", "rabbitmq").as_str() {
        "rabbitmq" => {
            let url = env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
            let topology = RabbitTopology::new(env_or("QUEUE", "orders"));
            operate(&RabbitDeadLetters::new(url.as_str(), &topology), &args).await
        }
        #[cfg(feature = "redis")]
        "redis" => {
            use delivery::redis::{RedisDeadLetters, RedisTopology};
            let url = env_or("REDIS_URL", "redis://127.0.0.1:6379");
            let topology = RedisTopology::new(env_or("STREAM", "orders"), env_or("GROUP", "billing"));
            operate(&RedisDeadLetters::new(&url, &topology)?, &args).await
        }
        #[cfg(not(feature = "redis"))]
        "redis" => Err("DLQ_TRANSPORT=redis needs the `redis` feature: cargo run --features lapin,redis --example dlq".into()),
        other => Err(format!("DLQ_TRANSPORT={other:?}: expected `rabbitmq` or `redis`").into()),
    }
}

/// The command in `args`, against `dead`, whatever its transport.
async fn operate<D: DeadLetters>(dead: &D, args: &[String]) -> Result<(), Error> {
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    match args.as_slice() {
        ["count"] => println!("{}\t{}", dead.name(), dead.count().await?),
        ["list", options @ ..] => {
            let (limit, after) = list_options(options);
            let page = dead.list(limit, after.as_ref()).await?;
            for record in &page.records {
                println!("{}\t{record}", record.position);
            }
            if let Some(next) = page.next {
                println!("more: dlq list --limit {limit} --after {}", next.as_str());
            }
        }
        ["show", id] => match dead.peek(&UnitId::new(*id)).await? {
            Some(record) => show(&record),
            None => not_found(dead, &[UnitId::new(*id)]),
        },
        ["redrive", "--all"] => {
            let report = dead.redrive(Selection::All).await?;
            println!(
                "redriven {}: {}",
                report.redriven.len(),
                joined(&report.redriven)
            );
        }
        ["redrive", ids @ ..] if !ids.is_empty() && !ids.iter().any(|a| a.starts_with("--")) => {
            let ids: Vec<UnitId> = ids.iter().map(|id| UnitId::new(*id)).collect();
            let report = dead.redrive(Selection::Ids(&ids)).await?;
            println!(
                "redriven {}: {}",
                report.redriven.len(),
                joined(&report.redriven)
            );
            if !report.not_found.is_empty() {
                not_found(dead, &report.not_found);
            }
        }
        ["purge", ids @ ..] if !ids.is_empty() && !ids.iter().any(|a| a.starts_with("--")) => {
            let ids: Vec<UnitId> = ids.iter().map(|id| UnitId::new(*id)).collect();
            println!("purged {}", dead.purge(&ids).await?);
        }
        _ => usage(),
    }
    Ok(())
}

/// `--limit N` (default 20) and `--after CURSOR`, in any order.
fn list_options(options: &[&str]) -> (usize, Option<Cursor>) {
    let (mut limit, mut after) = (20, None);
    let mut options = options.iter();
    while let Some(option) = options.next() {
        let value = options.next().unwrap_or_else(|| usage());
        match *option {
            "--limit" => limit = value.parse().unwrap_or_else(|_| usage()),
            "--after" => after = Some(Cursor::new(*value)),
            _ => usage(),
        }
    }
    (limit, after)
}

fn show(record: &DeadLetter) {
    println!("id:         {}", record.id());
    println!("position:   {}", record.position);
    println!("source:     {}", record.source);
    println!(
        "reason:     {}",
        record.reason.map_or("unknown", |r| r.as_str())
    );
    println!("detail:     {}", record.detail);
    println!("delivery:   {}", record.delivery_count());
    match record
        .dead_lettered_at
        .and_then(|at| at.duration_since(UNIX_EPOCH).ok())
    {
        Some(at) => println!("dead since: {} (Unix seconds)", at.as_secs()),
        None => println!("dead since: not recorded"),
    }
    for (name, value) in record.unit.headers().iter() {
        println!("header:     {name}: {}", String::from_utf8_lossy(value));
    }
    println!(
        "payload:    {}",
        String::from_utf8_lossy(record.unit.payload())
    );
}

fn joined(ids: &[UnitId]) -> String {
    ids.iter().map(UnitId::as_str).collect::<Vec<_>>().join(" ")
}

fn not_found(dead: &impl DeadLetters, ids: &[UnitId]) -> ! {
    eprintln!("not in {}: {}", dead.name(), joined(ids));
    std::process::exit(1)
}
