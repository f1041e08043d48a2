//! The operator's view of a RabbitMQ dead letter.
//!
//!     cargo run --features lapin --example dlq -- list
//!     cargo run --features lapin --example dlq -- peek 5
//!     cargo run --features lapin --example dlq -- redrive --id order-42
//!     cargo run --features lapin --example dlq -- redrive --all
//!
//! Env: `AMQP_URL` (default `amqp://guest:guest@127.0.0.1:5672/%2f`), `QUEUE` (default `orders`;
//! its dead letter is `$QUEUE.dlq`). Peeking consumes nothing; a redrive moves each unit back to
//! its source queue under the same message id, confirmed by the broker before the dead-letter copy
//! is acknowledged.

#[path = "support/env.rs"]
mod env;

use delivery::rabbitmq::{DeadLetterRecord, RabbitDeadLetters, RabbitTopology};

fn usage() -> ! {
    eprintln!("usage: dlq list | peek N | redrive (--all | --id ID)");
    std::process::exit(2)
}

fn summary(d: &DeadLetterRecord) -> String {
    format!(
        "{}\treason={}\tsource={}\tdelivery={}",
        d.id,
        d.reason.map_or("?", |r| r.as_str()),
        d.source.as_deref().unwrap_or("?"),
        d.delivery_count.map_or("?".to_owned(), |c| c.to_string()),
    )
}

#[tokio::main]
async fn main() {
    env::exit_on_error(run().await);
}

async fn run() -> Result<(), Box<dyn std::error::Error + Send + Sync>> {
    let url = env::env_or("AMQP_URL", "amqp://guest:guest@127.0.0.1:5672/%2f");
    let queue = env::env_or("QUEUE", "orders");
    let dead = RabbitDeadLetters::new(url.as_str(), &RabbitTopology::new(queue));
    let args: Vec<String> = std::env::args().skip(1).collect();
    match args
        .iter()
        .map(String::as_str)
        .collect::<Vec<_>>()
        .as_slice()
    {
        ["list"] => {
            println!("{}: {} unit(s)", dead.name(), dead.count().await?);
            for d in dead.peek(usize::MAX).await? {
                println!("{}", summary(&d));
            }
        }
        ["peek", n] => {
            let n: usize = n.parse().unwrap_or_else(|_| usage());
            for d in dead.peek(n).await? {
                println!("{}", summary(&d));
                if let Some(detail) = &d.detail {
                    println!("  detail: {detail}");
                }
                println!("  body: {}", String::from_utf8_lossy(&d.body));
                for x in &d.x_death {
                    println!(
                        "  x-death: queue={} reason={} count={} exchange={}",
                        x.queue, x.reason, x.count, x.exchange
                    );
                }
            }
        }
        ["redrive", "--all"] => {
            let report = dead.redrive(|_| true).await?;
            println!("moved {} unit(s), kept {}", report.moved.len(), report.kept);
        }
        ["redrive", "--id", id] => {
            let report = dead.redrive(|d| d.id.as_str() == *id).await?;
            if report.moved.is_empty() {
                eprintln!("{id} is not in {}", dead.name());
                std::process::exit(1);
            }
            println!("moved {id}");
        }
        _ => usage(),
    }
    Ok(())
}
