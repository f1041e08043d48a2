//! What the examples share: settings from the environment, the shutdown signal, and how a
//! failure is reported.
#![allow(dead_code)] // each example uses part of it

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
