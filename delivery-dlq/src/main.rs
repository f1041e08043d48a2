//! `delivery-dlq`: the operator's command line over a dead letter, whatever holds it — a RabbitMQ
//! dead-letter queue, a Redis or JetStream dead-letter stream, a Kafka dead-letter topic, an
//! outbox table's dead records (PostgreSQL, SQLite).
//!
//! A redrive sends a unit back under its own id, its deliveries counted afresh; `redrive ID
//! --payload FILE` or `--edit` (in `$VISUAL` or `$EDITOR`) sends it with an operator's corrected
//! payload instead, the edit recorded in its headers (`x-delivery-edited`, and the original's
//! digest in `x-delivery-original-sha256`) through
//! [`DeadLetters::redrive_edited`](delivery::dead_letter::DeadLetters::redrive_edited).
//!
//! The commands are written once, over [`DeadLetters`](delivery::dead_letter::DeadLetters)
//! ([`commands::run`]); this file only parses the command line and builds the dead letter it
//! names.

mod commands;
mod render;

use std::io::{IsTerminal, Write};
use std::process::ExitCode;

use clap::{Args, Parser, ValueEnum};
use delivery::kafka::{KafkaDeadLetters, KafkaTopology};
use delivery::nats::{NatsDeadLetters, NatsTopology};
use delivery::outbox::Outbox;
use delivery::rabbitmq::{RabbitDeadLetters, RabbitTopology};
use delivery::redis::{RedisDeadLetters, RedisTopology};

use commands::{Command, Outcome, Ui};

const AFTER_HELP: &str = "\
Exit codes:
  0  success
  1  error: the dead letter could not be read or changed, the command line is wrong, a
     confirmation was declined, or an edited payload is empty or unchanged
  2  nothing matched: no such id, no record selected, an empty dead letter to redrive
  3  partial failure: some ids were not found or could not be redriven or purged

Bulk actions (redrive of several ids, --reason or --all; every purge) and an edited redrive
(--payload FILE, --edit) ask for confirmation on the terminal unless --yes is given; without a
terminal and without --yes they refuse. An edited redrive keeps the unit's id and records the
edit in its headers: x-delivery-edited, x-delivery-original-sha256.

Examples:
  delivery-dlq --transport rabbitmq --queue orders count
  delivery-dlq --transport redis --stream orders --group billing list --reason malformed
  delivery-dlq --transport kafka --topic orders --group billing list --json --limit 100
  delivery-dlq --transport postgres --table delivery_outbox show order-42
  DLQ_TRANSPORT=nats STREAM=ORDERS delivery-dlq redrive --all --yes
  delivery-dlq --transport rabbitmq --queue orders redrive order-42 --payload fixed.json
  EDITOR=\"code -w\" delivery-dlq --transport redis --stream orders redrive order-42 --edit";

/// Read and redrive a delivery dead letter: count, list, show, redrive, purge.
///
/// A redrive sends each unit back to where it came from under its own id, with its own payload
/// and headers (or, with --payload or --edit, one unit with a corrected payload, the edit recorded
/// in its headers), and removes it from the dead letter only once its source holds it; a purge
/// removes units for good. Listing, showing and counting consume nothing.
#[derive(Debug, Parser)]
#[command(name = "delivery-dlq", version, after_help = AFTER_HELP)]
struct Cli {
    #[command(flatten)]
    target: Target,

    #[command(subcommand)]
    command: Command,
}

/// Which dead letter: the transport, where it runs, and the name its dead letter belongs to.
#[derive(Debug, Args)]
#[command(next_help_heading = "Which dead letter")]
struct Target {
    /// What holds the dead letter.
    #[arg(long, env = "DLQ_TRANSPORT", value_enum, default_value_t = Transport::Rabbitmq, global = true)]
    transport: Transport,

    /// RabbitMQ: the broker's URL.
    #[arg(
        long,
        env = "AMQP_URL",
        default_value = "amqp://guest:guest@127.0.0.1:5672/%2f",
        hide_env_values = true,
        global = true
    )]
    amqp_url: String,

    /// Redis: the server's URL.
    #[arg(
        long,
        env = "REDIS_URL",
        default_value = "redis://127.0.0.1:6379",
        hide_env_values = true,
        global = true
    )]
    redis_url: String,

    /// NATS: the server's URL.
    #[arg(
        long,
        env = "NATS_URL",
        default_value = "nats://127.0.0.1:4222",
        hide_env_values = true,
        global = true
    )]
    nats_url: String,

    /// Kafka: the bootstrap brokers (`host:port,...`).
    #[arg(
        long,
        env = "KAFKA_BROKERS",
        default_value = "127.0.0.1:9092",
        global = true
    )]
    kafka_brokers: String,

    /// PostgreSQL or SQLite (outbox): the database's URL (`postgres://...`, `sqlite://path`).
    #[arg(long, env = "DATABASE_URL", hide_env_values = true, global = true)]
    database_url: Option<String>,

    /// RabbitMQ: the consumed queue (its dead letter is `<queue>.dlq` unless --dead-letter).
    #[arg(long, env = "QUEUE", global = true)]
    queue: Option<String>,

    /// Redis, NATS: the consumed stream (dead letter `<stream>.dlq` on Redis, `<stream>_DLQ` on
    /// NATS, unless --dead-letter).
    #[arg(long, env = "STREAM", global = true)]
    stream: Option<String>,

    /// Kafka: the consumed topic (dead letter `<topic>.<group>.dlq` unless --dead-letter).
    #[arg(long, env = "TOPIC", global = true)]
    topic: Option<String>,

    /// Kafka: the consumer group (part of the dead-letter topic's name).
    #[arg(long, env = "GROUP", global = true)]
    group: Option<String>,

    /// The dead letter's own name, where it is not the default one derived from the source.
    #[arg(long, env = "DEAD_LETTER", global = true)]
    dead_letter: Option<String>,

    /// PostgreSQL, SQLite: the outbox table (`name` or `schema.name`).
    #[arg(long, env = "OUTBOX_TABLE", default_value = "delivery_outbox", value_parser = table_name, global = true)]
    table: String,
}

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum Transport {
    Rabbitmq,
    Redis,
    Nats,
    Kafka,
    Postgres,
    Sqlite,
}

/// An outbox table name as [`Outbox::table`] takes it (it panics on anything else): SQL
/// identifiers of at most 50 characters, optionally `schema.name`.
fn table_name(table: &str) -> Result<String, String> {
    let ident = |s: &str| {
        let mut chars = s.chars();
        matches!(chars.next(), Some(c) if c.is_ascii_alphabetic() || c == '_')
            && chars.all(|c| c.is_ascii_alphanumeric() || c == '_')
            && s.len() <= 50
    };
    let valid = match table.split_once('.') {
        Some((schema, name)) => ident(schema) && ident(name),
        None => ident(table),
    };
    if valid {
        Ok(table.to_owned())
    } else {
        Err("not an SQL identifier (letters, digits, `_`, optionally `schema.name`)".into())
    }
}

/// `value`, or an error naming the flag and variable the transport needs.
fn needed<'a>(
    value: &'a Option<String>,
    flag: &str,
    transport: Transport,
) -> anyhow::Result<&'a str> {
    value.as_deref().ok_or_else(|| {
        let name = transport
            .to_possible_value()
            .expect("no variant is skipped");
        anyhow::anyhow!(
            "--transport {} needs {flag} (or {})",
            name.get_name(),
            flag.trim_start_matches("--")
                .replace('-', "_")
                .to_uppercase()
        )
    })
}

/// Builds the dead letter `target` names and runs `command` on it.
async fn dispatch(
    target: &Target,
    command: Command,
    ui: &Ui,
    out: &mut impl Write,
) -> anyhow::Result<Outcome> {
    let transport = target.transport;
    let dead_letter = target.dead_letter.as_deref();
    match transport {
        Transport::Rabbitmq => {
            let mut topology = RabbitTopology::new(needed(&target.queue, "--queue", transport)?);
            if let Some(name) = dead_letter {
                topology = topology.dead_letter_queue(name);
            }
            let dead = RabbitDeadLetters::new(target.amqp_url.as_str(), &topology);
            commands::run(&dead, command, ui, out).await
        }
        Transport::Redis => {
            let stream = needed(&target.stream, "--stream", transport)?;
            // The dead letter is the stream's, whichever group consumed it.
            let mut topology = RedisTopology::new(stream, target.group.as_deref().unwrap_or(""));
            if let Some(name) = dead_letter {
                topology = topology.dead_letter_stream(name);
            }
            let dead = RedisDeadLetters::new(target.redis_url.as_str(), &topology)?;
            commands::run(&dead, command, ui, out).await
        }
        Transport::Nats => {
            let mut topology = NatsTopology::new(needed(&target.stream, "--stream", transport)?);
            if let Some(name) = dead_letter {
                topology = topology.dead_letter_stream(name);
            }
            let dead = NatsDeadLetters::connect(&target.nats_url, &topology).await?;
            commands::run(&dead, command, ui, out).await
        }
        Transport::Kafka => {
            let topic = needed(&target.topic, "--topic", transport)?;
            let group = needed(&target.group, "--group", transport)?;
            let mut topology = KafkaTopology::new(topic, group);
            if let Some(name) = dead_letter {
                topology = topology.dead_letter_topic(name);
            }
            let dead = KafkaDeadLetters::new(&target.kafka_brokers, &topology);
            commands::run(&dead, command, ui, out).await
        }
        Transport::Postgres => {
            let url = needed(&target.database_url, "--database-url", transport)?;
            let pool = delivery::sqlx::PgPool::connect(url).await?;
            let store = Outbox::table(&target.table).postgres(pool);
            commands::run(&store, command, ui, out).await
        }
        Transport::Sqlite => {
            let url = needed(&target.database_url, "--database-url", transport)?;
            let pool = delivery::sqlx::SqlitePool::connect(url).await?;
            let store = Outbox::table(&target.table).sqlite(pool);
            commands::run(&store, command, ui, out).await
        }
    }
}

fn main() -> ExitCode {
    let cli = match Cli::try_parse() {
        Ok(cli) => cli,
        Err(error) => {
            let _ = error.print();
            // `--help` and `--version` succeed; a wrong command line is an error (1), not
            // clap's 2, which here means "nothing matched".
            return if error.use_stderr() {
                ExitCode::from(1)
            } else {
                ExitCode::SUCCESS
            };
        }
    };
    let runtime = match tokio::runtime::Runtime::new() {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("error: starting the runtime: {error}");
            return ExitCode::from(1);
        }
    };
    let ui = Ui::new(
        std::io::stdin().is_terminal(),
        std::io::stderr().is_terminal(),
    );
    let mut out = std::io::stdout().lock();
    let result = runtime.block_on(dispatch(&cli.target, cli.command, &ui, &mut out));
    let _ = out.flush();
    match result {
        Ok(outcome) => ExitCode::from(outcome.code()),
        Err(error) => {
            eprintln!("error: {error:#}");
            ExitCode::from(1)
        }
    }
}
