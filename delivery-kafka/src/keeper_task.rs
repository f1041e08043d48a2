//! The keeper task (see [`crate::keeper`] for the design): it holds every assigned partition
//! paused and polls the consumer while the source does not, and hands the units that still arrive
//! to the source.

use std::sync::atomic::Ordering;
use std::sync::{Arc, Weak};
use std::time::Duration;

use rdkafka::TopicPartitionList;
use rdkafka::consumer::Consumer;
use tokio::sync::mpsc::UnboundedSender;

use crate::admit::{Admitted, admit};
use crate::shared::Shared;

/// The keeper task: takes the poll over whenever the source has not polled for
/// [`Keeper::after`](crate::keeper::Keeper::after), until the source is gone.
pub(crate) async fn keep_polling(
    shared: Weak<Shared>,
    after: Duration,
    stash: UnboundedSender<Admitted>,
) {
    let mut wait = after;
    loop {
        tokio::time::sleep(wait).await;
        let Some(shared) = shared.upgrade() else {
            return;
        };
        let keeper = &shared.keeper;
        if keeper.closed.load(Ordering::Relaxed) {
            return;
        }
        wait = match keeper.polling.clone().try_lock_owned() {
            // The source is polling.
            Err(_) => after,
            Ok(guard) => {
                let away = guard.elapsed();
                if away >= after {
                    hold(&shared, after, &stash).await;
                    drop(guard);
                    // Looked at again at once: if the source did not take the poll (it woke the
                    // keeper after all), the keeper holds it again.
                    Duration::ZERO
                } else {
                    after - away
                }
            }
        };
    }
}

/// Holds every assigned partition paused and polls the consumer until the source wants the poll
/// back (or is gone).
async fn hold(shared: &Arc<Shared>, after: Duration, stash: &UnboundedSender<Admitted>) {
    let consumer = &shared.consumer;
    let context = consumer.context();
    // Before pausing: a rebalance is served only by this task's polls, below, and pauses what it
    // assigns from now on.
    context.held.store(true, Ordering::Relaxed);
    match consumer.assignment() {
        Ok(assigned) => {
            if let Err(error) = consumer.pause(&assigned) {
                tracing::warn!(%error, "pausing the partitions while the handlers are busy failed");
            }
            tracing::info!(
                partitions = assigned.count(),
                "every handler busy: partitions paused, the consumer polled meanwhile to keep its place in the group"
            );
        }
        Err(error) => tracing::warn!(%error, "reading the assignment to pause it failed"),
    }
    let every = after / 2;
    loop {
        tokio::select! {
            biased;
            () = shared.keeper.wanted.notified() => return,
            message = consumer.recv() => match message {
                Ok(message) => {
                    let admitted = admit(shared, &message);
                    drop(message);
                    tracing::debug!(unit.id = admitted.0.id().as_str(), "received while paused: stashed");
                    // Refused once the source is gone (with its receiving end): the unit is then
                    // dropped, as closing the keeper drops the stash.
                    let _ = stash.send(admitted);
                }
                Err(error) => tracing::warn!(%error, "polling Kafka while the handlers are busy failed"),
            },
            // Polled again: each poll is what librdkafka watches.
            () = tokio::time::sleep(every) => {}
        }
        if shared.keeper.closed.load(Ordering::Relaxed) {
            return;
        }
    }
}

/// The source took the poll back: resumes every assigned partition the keeper paused, except
/// those `keep_paused` names (paused by the source itself). Nothing to do unless the keeper held
/// them.
pub(crate) fn resume_held(shared: &Shared, keep_paused: impl Fn(&str, i32) -> bool) {
    let consumer = &shared.consumer;
    let context = consumer.context();
    if !context.held.load(Ordering::Relaxed) {
        return;
    }
    // Held until the resume went through: tried again by the next `receive`.
    let assigned = match consumer.assignment() {
        Ok(assigned) => assigned,
        Err(error) => {
            tracing::warn!(%error, "reading the assignment to resume it failed");
            return;
        }
    };
    let mut resume = TopicPartitionList::new();
    for element in assigned.elements() {
        if !keep_paused(element.topic(), element.partition()) {
            resume.add_partition(element.topic(), element.partition());
        }
    }
    match consumer.resume(&resume) {
        Ok(()) => {
            context.held.store(false, Ordering::Relaxed);
            tracing::info!(
                partitions = resume.count(),
                "a handler free: partitions resumed"
            );
        }
        Err(error) => {
            tracing::warn!(%error, "resuming the partitions paused while the handlers were busy failed")
        }
    }
}
