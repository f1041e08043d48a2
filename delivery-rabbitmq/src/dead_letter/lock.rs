//! One reader at a time: the dead letter's lock (this process's, then the broker's exclusive
//! consumer of the lock queue), and the depth read under it.

use std::collections::HashMap;
use std::sync::{Arc, LazyLock, Mutex as StdMutex};
use std::time::Duration;

use lapin::options::{BasicConsumeOptions, QueueDeclareOptions};
use lapin::protocol::{AMQPErrorKind, AMQPSoftError};
use lapin::types::{AMQPValue, FieldTable};
use lapin::{Channel, ErrorKind};
use tokio::sync::OwnedMutexGuard;
use tokio::time::Instant;

use crate::connector::{Leased, close_channel};
use delivery_core::transport::TransportError;

use super::queue::RabbitDeadLetters;

/// How long an operation waits for another reader to release the dead letter.
pub(super) const LOCK_WAIT: Duration = Duration::from_secs(60);

/// The consumer tag of a snapshot, and of the lock.
pub(super) const READER: &str = "delivery-dead-letter-reader";

/// How long the lock queue outlives its last use (`x-expires`): one hour.
pub(super) const LOCK_EXPIRES_MS: i64 = 3_600_000;

/// The readers of this process, one per dead-letter queue at a time: the broker's lock is held
/// by a connection, and operations on your connection share it.
pub(super) static LOCAL: LazyLock<StdMutex<HashMap<String, Arc<tokio::sync::Mutex<()>>>>> =
    LazyLock::new(StdMutex::default);

impl RabbitDeadLetters {
    /// The queue whose exclusive consumer is the dead letter's one reader.
    pub(super) fn lock_queue(&self) -> String {
        format!("{}.reader", self.dead_letter_queue)
    }

    /// Takes the dead letter's lock: this process's, then the broker's (see the type docs),
    /// waiting up to [`LOCK_WAIT`] for another reader.
    pub(super) async fn hold(&self) -> Result<Reading, TransportError> {
        let local = Arc::clone(
            LOCAL
                .lock()
                .unwrap_or_else(|p| p.into_inner())
                .entry(self.dead_letter_queue.clone())
                .or_default(),
        );
        let guard = local.lock_owned().await;
        let connection = self.connector.open().await?;
        let lock = self.lock_queue();
        let deadline = Instant::now() + LOCK_WAIT;
        loop {
            let control = match connection.create_channel().await {
                Ok(channel) => channel,
                Err(error) => {
                    connection.close("done").await;
                    return Err(crate::error::LAPIN.error("opening a channel", error));
                }
            };
            // A refusal closes the channel that asked: each step that may be refused is tried
            // on a channel of its own.
            let taken = match self.lock_exists(&connection, &lock).await {
                Ok(()) => {
                    let options = BasicConsumeOptions {
                        exclusive: true,
                        no_ack: true,
                        ..BasicConsumeOptions::default()
                    };
                    control
                        .basic_consume(
                            lock.as_str().into(),
                            READER.into(),
                            options,
                            FieldTable::default(),
                        )
                        .await
                }
                Err(error) => Err(error),
            };
            let error = match taken {
                Ok(consumer) => {
                    return Ok(Reading {
                        _local: guard,
                        _lock: Some(consumer),
                        connection,
                        control,
                    });
                }
                Err(error) => error,
            };
            let held = soft(&error, AMQPSoftError::ACCESSREFUSED)
                && error.to_string().contains("exclusive use");
            // The lock queue expired between the two steps: declare it again.
            let gone = soft(&error, AMQPSoftError::NOTFOUND);
            if (held || gone) && Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            if soft(&error, AMQPSoftError::ACCESSREFUSED) && !held {
                // Credentials without the permissions on the lock's name: read without the
                // broker's lock rather than not at all.
                tracing::warn!(
                    dead_letter = self.dead_letter_queue,
                    %error,
                    "the dead letter's lock queue `{lock}` may not be used with these \
                     credentials: reading without it, so a reader in another process may make \
                     a count or a listing miss the units it holds"
                );
                return match connection.create_channel().await {
                    Ok(control) => Ok(Reading {
                        _local: guard,
                        _lock: None,
                        connection,
                        control,
                    }),
                    Err(error) => {
                        connection.close("done").await;
                        Err(crate::error::LAPIN.error("opening a channel", error))
                    }
                };
            }
            connection.close("done").await;
            return Err(if held {
                TransportError::msg(
                    "reading the dead letter",
                    format!(
                        "another reader has held `{}` for {}s (its lock is the exclusive \
                         consumer of `{lock}`): try again once it is done",
                        self.dead_letter_queue,
                        LOCK_WAIT.as_secs()
                    ),
                )
            } else {
                crate::error::LAPIN.error("taking the dead letter's lock", error)
            });
        }
    }

    /// Makes sure the lock queue exists: looked up (a passive declare, which changes nothing on
    /// the broker), declared where it is missing — not durable, and dropped by the broker once
    /// no reader used it for [`LOCK_EXPIRES_MS`].
    pub(super) async fn lock_exists(
        &self,
        connection: &Leased,
        lock: &str,
    ) -> Result<(), lapin::Error> {
        let declare = async |passive: bool| {
            let channel = connection.create_channel().await?;
            let mut arguments = FieldTable::default();
            if !passive {
                arguments.insert("x-expires".into(), AMQPValue::LongLongInt(LOCK_EXPIRES_MS));
            }
            let options = QueueDeclareOptions {
                passive,
                ..QueueDeclareOptions::default()
            };
            let declared = channel
                .queue_declare(lock.into(), options, arguments)
                .await
                .map(drop);
            close_channel(&channel, "done").await;
            declared
        };
        match declare(true).await {
            Err(error) if soft(&error, AMQPSoftError::NOTFOUND) => declare(false).await,
            looked_up => looked_up,
        }
    }

    /// The units ready in the dead-letter queue (a passive `queue.declare`).
    pub(super) async fn ready(&self, channel: &Channel) -> Result<u64, TransportError> {
        let queue = channel
            .queue_declare(
                self.dead_letter_queue.as_str().into(),
                QueueDeclareOptions {
                    passive: true,
                    ..QueueDeclareOptions::default()
                },
                FieldTable::default(),
            )
            .await
            .map_err(|e| crate::error::LAPIN.error("reading the dead letter's depth", e))?;
        Ok(u64::from(queue.message_count()))
    }
}

/// Whether the broker refused with `kind` (`ACCESS_REFUSED`: another reader holds the lock, or
/// the credentials may not use it; `NOT_FOUND`: the lock queue expired).
pub(super) fn soft(error: &lapin::Error, kind: AMQPSoftError) -> bool {
    matches!(error.kind(), ErrorKind::ProtocolError(e) if *e.kind() == AMQPErrorKind::Soft(kind))
}

/// An operation's hold on the dead letter (see [`RabbitDeadLetters::hold`]).
pub(super) struct Reading {
    pub(super) _local: OwnedMutexGuard<()>,
    /// The exclusive consumer of the lock queue (dropped, lapin cancels it), unless the
    /// credentials may not use it.
    pub(super) _lock: Option<lapin::Consumer>,
    pub(super) connection: Leased,
    /// The channel whose exclusive consumer of the lock queue is the lock (closing it releases
    /// the lock); it also reads the depth.
    pub(super) control: Channel,
}

impl Reading {
    /// Closes the lock's channel, which ends its consumer (your connection stays open; a
    /// connection of its own is closed).
    pub(super) async fn release(self) {
        close_channel(&self.control, "done").await;
        self.connection.close("done").await;
    }
}
