//! What the examples share: settings from the environment, the shutdown signal, and how a
//! failure is reported.
#![allow(dead_code)] // each example uses part of it

use std::time::Duration;

use delivery::Consumer;
use delivery::batch::BatchHandler;
use delivery::consumer::Report;
use delivery::handler::Handler;
use delivery::transport::Source;

/// `name` from the environment, or `default`.
pub fn env_or(name: &str, default: &str) -> String {
    std::env::var(name).unwrap_or_else(|_| default.to_owned())
}

/// `name` from the environment parsed as a number, or `default`; a value that is not a number
/// stops the example (status 2) with a message naming it.
pub fn env_num<T: std::str::FromStr>(name: &str, default: T) -> T {
    match std::env::var(name) {
        Ok(v) => v.parse().unwrap_or_else(|_| {
            eprintln!("error: {name}={v:?} is not a number");
            std::process::exit(2)
        }),
        Err(_) => default,
    }
}

/// SIGTERM or SIGINT. The handlers are installed here, at startup, not when the future is first
/// polled: a signal arriving before that would otherwise kill the process mid-effect.
pub fn shutdown_signal() -> impl std::future::Future<Output = ()> + Send + 'static {
    use tokio::signal::unix::{SignalKind, signal};
    let mut term = signal(SignalKind::terminate()).expect("SIGTERM handler");
    let mut int = signal(SignalKind::interrupt()).expect("SIGINT handler");
    async move {
        tokio::select! {
            _ = term.recv() => {}
            _ = int.recv() => {}
        }
        tracing::info!("signal received; shutting down");
    }
}

/// Ends the example after `run`: an error is printed as its message (`error: connecting to
/// RabbitMQ: ...`), not as a debug dump, and the process exits with status 1.
pub fn exit_on_error(result: Result<(), Box<dyn std::error::Error + Send + Sync>>) {
    if let Err(error) = result {
        eprintln!("error: {error}");
        std::process::exit(1);
    }
}

/// How the orders examples hand units to their handler: `BATCH_SIZE` units per run of the
/// handler (unset or 1: one unit per call, as a unit handler), and `BATCH_WAIT_MS` (default 20),
/// how long a partial batch waits to fill before it runs anyway.
#[derive(Clone, Copy, Debug)]
pub struct Batching {
    /// The most units per run of the handler.
    pub size: usize,
    /// The longest a unit waits for its batch to fill.
    pub wait: Duration,
}

impl Batching {
    /// `BATCH_SIZE` and `BATCH_WAIT_MS` from the environment.
    pub fn from_env() -> Self {
        Batching {
            size: env_num("BATCH_SIZE", 1usize).max(1),
            wait: Duration::from_millis(env_num("BATCH_WAIT_MS", 20)),
        }
    }

    /// Whether units run in batches (`BATCH_SIZE` above 1).
    pub fn batched(&self) -> bool {
        self.size > 1
    }

    /// Runs `consumer` with `one`, a unit per call, or, in batches, with `many`: the same effect.
    pub async fn run<Src, S, H, B>(self, consumer: Consumer<Src, S>, one: H, many: B) -> Report
    where
        Src: Source,
        S: Send + Sync + 'static,
        H: Handler<S>,
        B: BatchHandler<S>,
    {
        if self.batched() {
            consumer.batch(self.size, self.wait).run(many).await
        } else {
            consumer.run(one).await
        }
    }
}
