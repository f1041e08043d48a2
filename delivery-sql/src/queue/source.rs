//! The queue's consumer side: claims in batches under a visibility timeout, each claimed row a
//! unit, and the primitives that settle it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::Duration;

use futures_util::StreamExt;
use futures_util::future::BoxFuture;

use delivery_core::disposition::DeadLetterReason;
use delivery_core::outbox::{Claim, Mark, Record, RecordId, Store, Wakeups, row_unit};
use delivery_core::transport::{KeepAlive, Settle, Source, TransportError};
use delivery_core::unit::{DeliveryCount, Unit};

use super::tx::Slot;
use crate::dialect::Dialect;
use crate::driver::{Exec, Sql, Value};
use crate::error::{failed, transport_error};
use crate::outbox::SqlStore;

/// How a queue's consumers claim.
#[derive(Clone, Copy, Debug)]
pub(super) struct Settings {
    pub(super) batch: usize,
    pub(super) visibility: Duration,
    pub(super) keep_alive_at_most: Duration,
    pub(super) poll: Duration,
    pub(super) max_deliveries: Option<std::num::NonZeroU32>,
}

/// A consumer's source of a queue's units ([`SqlQueue::source`](super::SqlQueue::source)): it
/// claims up to a batch of pending rows at a time, oldest first, with `FOR UPDATE SKIP LOCKED`
/// (PostgreSQL), each row invisible to other consumers for the visibility timeout and counted
/// one more delivery in its row; it waits for a `NOTIFY` (PostgreSQL) or the poll when none is
/// pending.
pub struct QueueSource<D: Dialect> {
    shared: Arc<Shared<D>>,
    name: Arc<str>,
    claimed: VecDeque<Record>,
    /// The claim in progress, kept across a cancelled `receive`: the rows it leases are this
    /// source's.
    claiming: Option<BoxFuture<'static, Result<Vec<Record>, TransportError>>>,
    /// Notifications of commits, where the database sends them and a listener is connected.
    wakeups: Option<Wakeups>,
}

/// What every unit's handle shares with its source.
struct Shared<D: Dialect> {
    store: SqlStore<D>,
    /// This source's name on its leases: unique per run.
    owner: String,
    settings: Settings,
}

impl<D: Dialect> QueueSource<D> {
    pub(super) fn new(store: SqlStore<D>, name: Arc<str>, settings: Settings) -> Self {
        let owner = format!("{}-{}", std::process::id(), uuid::Uuid::now_v7().simple());
        QueueSource {
            shared: Arc::new(Shared {
                store,
                owner,
                settings,
            }),
            name,
            claimed: VecDeque::new(),
            claiming: None,
            wakeups: None,
        }
    }

    /// This source's name on the rows it claims (`lease_owner`).
    pub fn owner(&self) -> &str {
        &self.shared.owner
    }

    fn claim(&self) -> BoxFuture<'static, Result<Vec<Record>, TransportError>> {
        let shared = self.shared.clone();
        Box::pin(async move {
            shared
                .store
                .claim(Claim {
                    owner: &shared.owner,
                    limit: shared.settings.batch,
                    lease: shared.settings.visibility,
                    ordered: false,
                })
                .await
        })
    }

    /// Waits for a notification that units were committed, or the poll. Where the database
    /// notifies, a listener that could not connect or ended is tried again at the next wait, so
    /// wake-ups resume after an outage.
    async fn idle(&mut self) {
        if D::NOTIFIES && self.wakeups.is_none() {
            self.wakeups = self.shared.store.wakeups().await;
        }
        let poll = tokio::time::sleep(self.shared.settings.poll);
        match &mut self.wakeups {
            Some(wakeups) => {
                tokio::select! {
                    woken = wakeups.next() => if woken.is_none() {
                        self.wakeups = None;
                    },
                    () = poll => {}
                }
            }
            None => poll.await,
        }
    }

    fn deliver(&self, record: Record) -> (Unit, QueueHandle<D>) {
        let slot = Arc::new(Slot::default());
        let count = DeliveryCount::new(record.attempts().saturating_add(1));
        let unit = row_unit(
            record.id().as_str(),
            record.payload().clone(),
            record.key(),
            record.headers().clone(),
            record.stamp(),
            count,
        )
        .with_attached(slot.clone());
        let handle = QueueHandle {
            shared: self.shared.clone(),
            id: record.id().clone(),
            slot,
            began: false,
        };
        (unit, handle)
    }
}

impl<D: Dialect> Source for QueueSource<D> {
    type Handle = QueueHandle<D>;

    async fn receive(&mut self) -> Result<Option<(Unit, QueueHandle<D>)>, TransportError> {
        loop {
            if let Some(record) = self.claimed.pop_front() {
                return Ok(Some(self.deliver(record)));
            }
            if self.claiming.is_none() {
                self.claiming = Some(self.claim());
            }
            let claimed = self.claiming.as_mut().expect("set above").await;
            self.claiming = None;
            let claimed = claimed?;
            if claimed.is_empty() {
                self.idle().await;
            } else {
                self.claimed.extend(claimed);
            }
        }
    }

    fn max_deliveries(&self) -> Option<std::num::NonZeroU32> {
        self.shared.settings.max_deliveries
    }

    fn name(&self) -> &str {
        &self.name
    }

    fn messaging(&self) -> delivery_core::trace::Messaging {
        delivery_core::trace::Messaging::new(D::SYSTEM, self.name())
    }

    fn keep_alive(&self) -> Option<KeepAlive> {
        let settings = &self.shared.settings;
        Some(KeepAlive::within(
            settings.visibility,
            settings.keep_alive_at_most,
        ))
    }

    /// Gives back the units claimed and not yet received (a claim cut short by a cancelled
    /// `receive` is finished first): visible again at once, this delivery not counted.
    async fn stop(&mut self) {
        if let Some(claiming) = self.claiming.take()
            && let Ok(records) = claiming.await
        {
            self.claimed.extend(records);
        }
        let marks: Vec<Mark> = self
            .claimed
            .drain(..)
            .map(|record| Mark::Release(record.id().clone()))
            .collect();
        if let Err(error) = self.shared.store.mark(&self.shared.owner, &marks).await {
            tracing::warn!(queue = %self.name, %error, "units claimed and not run stay invisible until their visibility timeout");
        }
    }
}

/// The handle of one claimed unit: its row's id, and the slot of its transaction when its
/// handler takes one ([`Tx`](super::Tx)).
pub struct QueueHandle<D: Dialect> {
    shared: Arc<Shared<D>>,
    id: RecordId,
    slot: Arc<Slot<D::Database>>,
    /// The unit's transaction was begun (its handler takes it) and is open until the settle.
    began: bool,
}

impl<D: Dialect> QueueHandle<D> {
    /// Writes `mark` for this unit's row; an error if the row was not this source's to mark any
    /// more (its claim expired and another consumer holds it, or it was settled).
    async fn mark(&self, mark: Mark, what: &'static str) -> Result<(), TransportError> {
        let changed = self.shared.store.mark(&self.shared.owner, &[mark]).await?;
        if changed == 1 {
            Ok(())
        } else {
            Err(lost(what))
        }
    }

    /// Rolls back the unit's transaction, if its handler took one: its effect is not applied.
    async fn roll_back(&self) {
        if let Some(tx) = self.slot.take()
            && let Err(error) = tx.rollback().await
        {
            tracing::debug!(%error, "rolling back a unit's transaction");
        }
    }
}

/// The row changed hands or was settled before this settle: nothing was written.
#[cold]
fn lost(what: &'static str) -> TransportError {
    transport_error(what, sqlx::Error::RowNotFound)
}

impl<D: Dialect> Settle for QueueHandle<D> {
    /// In the unit's transaction when its handler took it (the effect and the acknowledgement
    /// commit together), else on its own.
    async fn ack(self, _: &Unit) -> Result<(), TransportError> {
        let Some(mut tx) = self.slot.take() else {
            return self
                .mark(Mark::Delivered(self.id.clone()), "acknowledging")
                .await;
        };
        let sql = &self.shared.store.statements().complete;
        let args = D::Database::arguments(&[Value::Text(self.id.as_str())])
            .map_err(failed("acknowledging"))?;
        let completed = D::Database::execute(Exec::Conn(&mut *tx), sql, args)
            .await
            .map_err(failed("acknowledging in the unit's transaction"))?;
        if completed != 1 {
            // Settled by another run meanwhile (its claim had expired): that run's effect stands,
            // this one's is rolled back.
            let _ = tx.rollback().await;
            return Err(lost(
                "acknowledging: the unit was settled by another run; this run's effect was rolled back",
            ));
        }
        tx.commit()
            .await
            .map_err(failed("committing the unit's transaction"))
    }

    /// Extends the claim, on a connection of its own. Where the unit's open transaction holds
    /// the database's one write lock ([`Dialect::ONE_WRITER`]), nothing: no other consumer can
    /// claim the unit before that transaction ends, and an extension would only wait for it.
    async fn still_handling(&mut self, _: &Unit) -> Result<(), TransportError> {
        if D::ONE_WRITER && self.began {
            return Ok(());
        }
        let sql = &self.shared.store.statements().extend;
        let args = D::Database::arguments(&[
            Value::Text(self.id.as_str()),
            D::millis(self.shared.settings.visibility),
            Value::Text(&self.shared.owner),
        ])
        .map_err(failed("extending a claim"))?;
        let pool = self.shared.store.pool();
        match D::Database::execute(Exec::Pool(pool), sql, args).await {
            Ok(1) => Ok(()),
            Ok(_) => Err(lost("extending a claim")),
            Err(error) => Err(transport_error("extending a claim", error)),
        }
    }

    async fn give_back(self, _: &Unit, after: Duration) -> Result<(), TransportError> {
        self.roll_back().await;
        let mark = Mark::Retry {
            id: self.id.clone(),
            error: "returned for redelivery".into(),
            after,
        };
        self.mark(mark, "returning").await
    }

    async fn release(self, _: &Unit) -> Result<(), TransportError> {
        self.roll_back().await;
        self.mark(Mark::Release(self.id.clone()), "releasing").await
    }

    /// The row itself becomes the dead letter (`dead`, the reason in `last_error`): intact, and
    /// in one statement, so there is no copy to confirm before the original is settled.
    async fn copy_to_dead_letter(
        &mut self,
        _: &Unit,
        reason: &DeadLetterReason,
    ) -> Result<(), TransportError> {
        self.roll_back().await;
        let mark = Mark::Dead {
            id: self.id.clone(),
            reason: reason.clone(),
        };
        self.mark(mark, "dead-lettering").await
    }

    async fn finish_dead_lettered(self, _: &Unit) -> Result<(), TransportError> {
        Ok(())
    }

    async fn begin(&mut self, _: &Unit) -> Result<(), TransportError> {
        let tx = self
            .shared
            .store
            .pool()
            .begin_with(D::BEGIN)
            .await
            .map_err(failed("beginning the unit's transaction"))?;
        self.slot.put(tx);
        self.began = true;
        Ok(())
    }
}
