//! Batches: how a [`BatchHandler`] runs under the consumer runtime, unchanged.
//!
//! Each unit still has a run of its own in the receive loop — received, kept alive, ordered by
//! key, settled by the [`Settler`](super::settle::Settler) with its own handle, released at the
//! drain deadline — and its handler is [`Batched`]: it decodes the unit (a malformed one ends its
//! run at once), then joins the batch being gathered. The unit that opened the batch leads it:
//! once the batch is full, or the source has no unit waiting ([`Handler::source_idle`]), or
//! `max_wait` after it opened — and a place to run it is free — it runs the handler over the batch
//! ([`run_batch`]: halving a failed batch down to single units) and answers every unit's run with
//! that unit's own outcome. Each unit is then settled by its own run, after the handler returned
//! (rule 1).

use std::future::Future;
use std::marker::PhantomData;
use std::mem;
use std::ops::Range;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::sync::{Notify, Semaphore, oneshot};

use super::builder::Consumer;
use super::report::Report;
use crate::batch::{Batch, BatchHandler, BatchOutcome, Item};
use crate::disposition::Outcome;
use crate::extract::FromUnit;
use crate::handler::Handler;
use crate::runtime::{guard, guarded};
use crate::source::Source;
use crate::unit::{Stamp, Unit};

/// A consumer of batches: [`Consumer::batch`], then [`run`](Batches::run).
#[must_use = "a consumer does nothing until `.run(handler)` is awaited"]
pub struct Batches<Src, S> {
    consumer: Consumer<Src, S>,
    max_size: usize,
    max_wait: Duration,
}

impl<Src: Source, S> Consumer<Src, S> {
    /// Runs a batch handler (a `#[consumer]` taking a [`Batch`](crate::Batch)): up to
    /// `max_size` units per run of the handler (at least 1). A batch runs once it is full; or,
    /// while a place to run it is free, as soon as the source has no unit waiting; and at the
    /// latest `max_wait` after its first unit arrived: a unit never waits longer for its batch to
    /// fill. So at a low rate a unit runs at once, and under load, with every place taken,
    /// batches fill. Set the consumer's other settings first; `.run(handler)` follows.
    ///
    /// Up to [`concurrency`](Self::concurrency) batches run at once, and one more fills
    /// meanwhile (each unit held unsettled until its batch settled it: on RabbitMQ, give the
    /// channel a prefetch of at least twice `max_size`, or batches never fill and each waits out
    /// `max_wait`). A batch ready to run while every place is taken keeps filling until one frees. Ordered by key
    /// ([`order_by_key`](Self::order_by_key)), a batch holds at most one unit of a key, and a
    /// key's next unit joins a later batch once the one before settled. A
    /// [`handler_timeout`](Self::handler_timeout) bounds each unit's wait for its batch and the
    /// batch's run.
    ///
    /// See [`delivery::batch`](crate::batch) for what each unit's outcome is.
    pub fn batch(self, max_size: usize, max_wait: Duration) -> Batches<Src, S> {
        Batches {
            consumer: self,
            max_size: max_size.max(1),
            max_wait,
        }
    }
}

impl<Src: Source, S: Send + Sync + 'static> Batches<Src, S> {
    /// Runs `handler` until the shutdown signal or the end of the source, and reports what it
    /// did, unit by unit (as [`Consumer::run`]).
    pub async fn run<H: BatchHandler<S>>(self, handler: H) -> Report {
        let Batches {
            consumer,
            max_size,
            max_wait,
        } = self;
        // The loop's capacity, in units: every batch that may run, and as many more units
        // gathering into the next ones.
        let at_once = consumer.concurrency;
        let capacity = at_once.saturating_add(1).saturating_mul(max_size);
        let consumer = consumer.map_state(Arc::new).concurrency(capacity);
        let batched = Batched {
            handler: Arc::new(handler),
            gather: Arc::new(Gather {
                open: Mutex::new(None),
                max_size,
                max_wait,
                running: Semaphore::new(at_once),
                idle: AtomicBool::new(false),
            }),
            state: PhantomData,
        };
        consumer.run(batched).await
    }
}

/// A [`BatchHandler`] as the unit handler the runtime runs: each unit's call joins the batch
/// being gathered, and the unit that opened it runs it.
struct Batched<H: BatchHandler<S>, S> {
    handler: Arc<H>,
    gather: Arc<Gather<H::Item>>,
    state: PhantomData<fn(&S)>,
}

/// The batch being gathered, if one is open.
struct Gather<I> {
    open: Mutex<Option<Arc<Forming<I>>>>,
    max_size: usize,
    max_wait: Duration,
    /// A place per batch that may run at once (the consumer's concurrency): a batch ready to run
    /// waits here, still open to units until it is full.
    running: Semaphore,
    /// The source had no unit waiting, and none arrived since.
    idle: AtomicBool,
}

/// A batch being gathered: its units so far, and the signal that it is full.
struct Forming<I> {
    members: Mutex<Vec<Member<I>>>,
    /// Closed to new units: full, or the source idle while it holds a place.
    full: Notify,
    /// It holds a place to run: the source found idle closes it.
    placed: AtomicBool,
}

/// A unit of a batch: the unit, its item (taken for the first run), and where its run waits for
/// its outcome (`None` for the unit leading the batch).
struct Member<I> {
    unit: Unit,
    item: Option<I>,
    answer: Option<oneshot::Sender<Outcome>>,
}

/// How a unit joined a batch.
enum Joined<I> {
    /// It opened the batch, and runs it.
    Leads(Arc<Forming<I>>),
    /// Another unit runs it, and answers here.
    Follows(oneshot::Receiver<Outcome>),
}

impl<I> Gather<I> {
    fn join(&self, unit: Unit, item: I) -> Joined<I> {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        self.idle.store(false, Ordering::Relaxed);
        let (forming, answer, joined) = match &*open {
            Some(forming) => {
                let (answer, waiting) = oneshot::channel();
                (forming.clone(), Some(answer), Joined::Follows(waiting))
            }
            None => {
                let forming = Arc::new(Forming {
                    members: Mutex::new(Vec::with_capacity(self.max_size)),
                    full: Notify::new(),
                    placed: AtomicBool::new(false),
                });
                *open = Some(forming.clone());
                (forming.clone(), None, Joined::Leads(forming))
            }
        };
        let mut members = forming.members.lock().unwrap_or_else(|e| e.into_inner());
        members.push(Member {
            unit,
            item: Some(item),
            answer,
        });
        if members.len() >= self.max_size {
            *open = None;
            forming.full.notify_one();
        }
        joined
    }

    /// Closes `forming` to new units, if it is still the batch open.
    fn close(&self, forming: &Arc<Forming<I>>) {
        let mut open = self.open.lock().unwrap_or_else(|e| e.into_inner());
        if open.as_ref().is_some_and(|open| Arc::ptr_eq(open, forming)) {
            *open = None;
        }
    }
}

/// Closes the batch a leading unit opened when its run is dropped before it took the batch (its
/// unit abandoned, its timeout passed): the units that joined are answered by their channels
/// closing, instead of waiting for a leader that is gone.
struct Leading<'a, I> {
    gather: &'a Gather<I>,
    forming: Arc<Forming<I>>,
}

impl<I> Leading<'_, I> {
    /// Closes the batch to new units and takes its members.
    fn take(&self) -> Vec<Member<I>> {
        self.gather.close(&self.forming);
        let mut members = self
            .forming
            .members
            .lock()
            .unwrap_or_else(|e| e.into_inner());
        mem::take(&mut *members)
    }
}

impl<I> Drop for Leading<'_, I> {
    fn drop(&mut self) {
        drop(self.take());
    }
}

impl<S, H> Handler<Arc<S>> for Batched<H, S>
where
    S: Send + Sync + 'static,
    H: BatchHandler<S>,
{
    /// The source has no unit waiting: the batch gathering runs now if it holds a place, rather
    /// than wait for units that are not there (under load, every place is taken and batches
    /// fill; at a low rate, a unit runs at once).
    fn source_idle(&self) {
        let mut open = self.gather.open.lock().unwrap_or_else(|e| e.into_inner());
        self.gather.idle.store(true, Ordering::Relaxed);
        if let Some(forming) = open.take_if(|forming| forming.placed.load(Ordering::Relaxed)) {
            forming.full.notify_one();
        }
    }

    fn call(&self, unit: &Unit, state: &Arc<S>) -> impl Future<Output = Outcome> + Send + 'static {
        // A stamp no store can hold, or a unit that does not decode: malformed, never batched.
        let decoded = <Option<Stamp> as FromUnit<S>>::from_unit(unit, state)
            .and_then(|_| self.handler.decode(unit, state));
        let joined = decoded
            .map(|item| self.gather.join(unit.clone(), item))
            .map_err(|malformed| Outcome::Malformed(malformed.to_string()));
        let (handler, state, gather) = (self.handler.clone(), state.clone(), self.gather.clone());
        async move {
            match joined {
                Err(malformed) => malformed,
                Ok(Joined::Follows(answer)) => answer.await.unwrap_or_else(|_| {
                    Outcome::Failed("its batch stopped before it finished".to_owned())
                }),
                // Out of line: every unit's run holds this future, and only one in a batch
                // leads it.
                Ok(Joined::Leads(forming)) => Box::pin(lead(gather, forming, handler, state)).await,
            }
        }
    }
}

/// The run of the unit that opened a batch: waits for a place to run it (the batch fills
/// meanwhile), then until it is full, the source has nothing more, or its first unit waited
/// `max_wait`; then runs it.
async fn lead<S, H: BatchHandler<S>>(
    gather: Arc<Gather<H::Item>>,
    forming: Arc<Forming<H::Item>>,
    handler: Arc<H>,
    state: Arc<S>,
) -> Outcome {
    let leading = Leading {
        gather: &gather,
        forming,
    };
    let until = tokio::time::Instant::now() + gather.max_wait;
    let Ok(_place) = gather.running.acquire().await else {
        unreachable!("the semaphore is never closed")
    };
    let idle = {
        let _open = gather.open.lock().unwrap_or_else(|e| e.into_inner());
        leading.forming.placed.store(true, Ordering::Relaxed);
        gather.idle.load(Ordering::Relaxed)
    };
    if !idle {
        let closed = leading.forming.full.notified();
        let _ = tokio::time::timeout_at(until, closed).await;
    }
    let members = leading.take();
    run_batch(&*handler, &state, members).await
}

/// Runs `handler` over `members` and answers each with its own outcome; returns the leading
/// unit's (the first member's). A run that fails as a whole is run again in halves, each in turn,
/// down to single units; a unit's outcome is answered as soon as it is known. When more runs fail
/// in a row than a path down to one unit takes (`depth`: the whole batch's, each half's, ..., the
/// unit's; then the next unit's too), the failure is the effect's, and the units not yet
/// answered are answered with it: one poison unit never gets there (the half beside each failed
/// half succeeds), a database that is down gets there in `depth + 1` runs, not `2n - 1`.
async fn run_batch<S, H: BatchHandler<S>>(
    handler: &H,
    state: &S,
    mut members: Vec<Member<H::Item>>,
) -> Outcome {
    let n = members.len();
    let depth = (usize::BITS - n.leading_zeros()) as usize;
    let mut lead = None;
    let mut answer = |members: &mut [Member<H::Item>], i: usize, outcome: Outcome| match members[i]
        .answer
        .take()
    {
        Some(answer) => {
            let _ = answer.send(outcome);
        }
        None if i == 0 => lead = Some(outcome),
        None => {}
    };
    // Ranges still to run, the next at the end.
    let mut pending: Vec<Range<usize>> = Vec::with_capacity(depth + 1);
    pending.push(0..n);
    let mut failed_in_a_row = 0;
    while let Some(range) = pending.pop() {
        if failed_in_a_row > depth {
            let failure = Outcome::Failed(format!(
                "its batch kept failing on every part it was split into ({failed_in_a_row} runs in a row): \
                 the failure looks like the effect's, not a unit's; returned with the batch"
            ));
            for i in pending.drain(..).chain([range]).flatten() {
                answer(&mut members, i, failure.clone());
            }
            break;
        }
        let mut ran = Vec::with_capacity(range.len());
        let mut items = Vec::with_capacity(range.len());
        for i in range.clone() {
            let member = &mut members[i];
            // The first run takes the items decoded on arrival; a rerun decodes its units again.
            let item = match member.item.take() {
                Some(item) => Ok(item),
                None => guard(|| handler.decode(&member.unit, state))
                    .and_then(|decoded| decoded.map_err(|m| Outcome::Malformed(m.to_string()))),
            };
            match item {
                Ok(item) => {
                    items.push(Item::new(item, member.unit.clone()));
                    ran.push(i);
                }
                Err(outcome) => answer(&mut members, i, outcome),
            }
        }
        if ran.is_empty() {
            continue;
        }
        let outcome = match guard(|| handler.call(Batch::new(items), state)) {
            Ok(call) => guarded(call).await.unwrap_or_else(BatchOutcome::whole),
            Err(panicked) => BatchOutcome::whole(panicked),
        };
        match outcome.whole_failure() {
            None => {
                failed_in_a_row = 0;
                for i in ran {
                    let own = outcome.of(members[i].unit.id());
                    answer(&mut members, i, own);
                }
            }
            Some(failure) => {
                failed_in_a_row += 1;
                let waits = matches!(failure, Outcome::RetryAfter { .. });
                if ran.len() == 1 || waits {
                    for i in ran {
                        answer(&mut members, i, failure.clone());
                    }
                } else {
                    let mid = ran.len() / 2;
                    pending.push(ran[mid]..ran[ran.len() - 1] + 1);
                    pending.push(ran[0]..ran[mid - 1] + 1);
                }
            }
        }
    }
    lead.unwrap_or_else(|| Outcome::Failed("its batch ended without its outcome".to_owned()))
}
