//! [`Tx`]: the unit's transaction, as a handler parameter.

use std::ops::{Deref, DerefMut};
use std::sync::{Arc, Mutex, PoisonError};

use sqlx::{Database, Transaction};

use delivery_core::extract::{FromUnit, Malformed};
use delivery_core::unit::Unit;

/// The unit's transaction, for a handler consuming a [queue](super): write the effect through
/// it (`&mut *tx` is the connection), return `Ok`, and the runtime marks the unit delivered in
/// this same transaction and commits once. A failure, a panic, a timeout or a crash before that
/// commit rolls the effect back with the acknowledgement: the unit is delivered again, and a
/// crash can never leave an effect applied and its unit pending — no inbox needed, even for an
/// effect with no natural key.
///
/// It hands out the connection, never the transaction's `commit` or `rollback`: the runtime
/// ends it. (Do not run `COMMIT` through it yourself: the acknowledgement would no longer commit
/// with the effect.) Name it per database: `delivery::queue::PgTx`, `delivery::queue::SqliteTx`.
/// A unit from another transport (a broker) has no transaction: it is malformed for a handler
/// that takes one, and goes to the dead letter.
pub struct Tx<DB: Database> {
    tx: Option<Transaction<'static, DB>>,
    slot: Arc<Slot<DB>>,
}

impl<DB: Database> std::fmt::Debug for Tx<DB> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Tx").finish_non_exhaustive()
    }
}

/// Where a unit's transaction waits between its handle (which begins it and ends it) and its
/// handler's [`Tx`]: attached to the unit by the queue's source.
pub(crate) struct Slot<DB: Database>(Mutex<Option<Transaction<'static, DB>>>);

impl<DB: Database> Default for Slot<DB> {
    fn default() -> Self {
        Slot(Mutex::new(None))
    }
}

impl<DB: Database> Slot<DB> {
    pub(crate) fn take(&self) -> Option<Transaction<'static, DB>> {
        self.0.lock().unwrap_or_else(PoisonError::into_inner).take()
    }

    pub(crate) fn put(&self, tx: Transaction<'static, DB>) {
        *self.0.lock().unwrap_or_else(PoisonError::into_inner) = Some(tx);
    }
}

impl<DB: Database, S> FromUnit<S> for Tx<DB> {
    const IN_TRANSACTION: bool = true;

    fn from_unit(unit: &Unit, _: &S) -> Result<Self, Malformed> {
        let slot = unit
            .attached::<Slot<DB>>()
            .ok_or_else(no_transaction::<DB>)?;
        let tx = slot.take().ok_or_else(no_transaction::<DB>)?;
        Ok(Tx { tx: Some(tx), slot })
    }
}

#[cold]
fn no_transaction<DB: Database>() -> Malformed {
    Malformed::new(format!(
        "the handler takes the unit's {} transaction (`Tx`), and this unit has none: only a \
         unit consumed from a {} queue (`delivery::queue`) has one",
        DB::NAME,
        DB::NAME
    ))
}

/// What a handler that tries to end the unit's transaction itself is told: `commit` and
/// `rollback` exist on [`Tx`] only to say this, at compile time.
#[diagnostic::on_unimplemented(
    message = "the unit's transaction is ended by the runtime: it commits it with the unit's acknowledgement",
    label = "not the handler's to end",
    note = "return `Ok(..)`: the runtime marks the unit delivered in this transaction and commits both at once; return an error (or `HandlerError::reject`) and it rolls both back"
)]
pub trait EndedByTheRuntime {}

impl<DB: Database> Tx<DB> {
    /// Refused at compile time ([`EndedByTheRuntime`]): the runtime commits the unit's
    /// transaction with its acknowledgement.
    #[doc(hidden)]
    pub fn commit(self) -> std::future::Ready<Result<(), sqlx::Error>>
    where
        Self: EndedByTheRuntime,
    {
        std::future::ready(Ok(()))
    }

    /// Refused at compile time ([`EndedByTheRuntime`]): return an error to roll back.
    #[doc(hidden)]
    pub fn rollback(self) -> std::future::Ready<Result<(), sqlx::Error>>
    where
        Self: EndedByTheRuntime,
    {
        std::future::ready(Ok(()))
    }
}

/// Back to the slot, however the handler ended (returned, failed, panicked, timed out): the
/// handle commits it with the acknowledgement, or rolls it back.
impl<DB: Database> Drop for Tx<DB> {
    fn drop(&mut self) {
        if let Some(tx) = self.tx.take() {
            self.slot.put(tx);
        }
    }
}

impl<DB: Database> Deref for Tx<DB> {
    type Target = DB::Connection;

    fn deref(&self) -> &DB::Connection {
        self.tx
            .as_ref()
            .expect("a Tx holds its transaction until dropped")
    }
}

impl<DB: Database> DerefMut for Tx<DB> {
    fn deref_mut(&mut self) -> &mut DB::Connection {
        self.tx
            .as_mut()
            .expect("a Tx holds its transaction until dropped")
    }
}
