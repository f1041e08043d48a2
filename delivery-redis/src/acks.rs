//! Acknowledgements combined per source: at most one `XACK` of a source is in flight at a time,
//! and the ids settled while it is travel together in the next one,
//! `XACK <stream> <group> <id1> … <idN>`.
//!
//! Each settle still returns `Ok` only once Redis answered the `XACK` that carried its id (rule 1:
//! an acknowledgement is never assumed). One unit at a time, every `XACK` carries one id, as
//! before; with units in flight, the acknowledgements of a whole batch cost one or two commands
//! instead of one each.
//!
//! There is no task of its own: the settle that finds no `XACK` in flight sends one at once; the
//! ones that find one in flight queue their id and wait for their answer. When an `XACK` is
//! answered, one of the waiting settles is woken and sends the next `XACK` for all the ids queued
//! meanwhile, its own among them. A settle dropped while it is sending (a cancelled future) puts
//! the others' ids back in the queue for the next sender; acknowledging an id twice is harmless.

use std::sync::{Mutex, MutexGuard};

use tokio::sync::{Notify, oneshot};

use delivery_core::transport::TransportError;

/// What a waiting settle receives: the outcome of the `XACK` that carried its id.
type Answer = Result<(), String>;

/// The acknowledgements of one source: the queue and whose turn it is to send.
#[derive(Default)]
pub(super) struct Acks {
    state: Mutex<State>,
    /// Wakes one waiting settle when an `XACK` was answered and ids are queued.
    turn: Notify,
}

#[derive(Default)]
struct State {
    /// An `XACK` is in flight.
    sending: bool,
    /// Ids queued for the next `XACK`, each with where its answer goes.
    ids: Vec<String>,
    answers: Vec<oneshot::Sender<Answer>>,
}

/// How a settle takes part: it sends now, or waits for a turn or its answer.
pub(super) enum Joined<'a> {
    Send(Turn<'a>),
    Wait(Waiting<'a>),
}

/// The right to send the one `XACK` in flight, for the ids it holds. Finish it with the outcome;
/// dropped unfinished, it puts the waiting ids back in the queue.
pub(super) struct Turn<'a> {
    acks: &'a Acks,
    /// The sender's own id, if it did not queue it (it gets the outcome as the return value).
    own: Option<String>,
    ids: Vec<String>,
    answers: Vec<oneshot::Sender<Answer>>,
    /// Finished: the next `XACK` may go.
    done: bool,
}

/// A queued id waiting for its answer (or for its turn to send).
pub(super) struct Waiting<'a> {
    acks: &'a Acks,
    answer: oneshot::Receiver<Answer>,
}

/// What a waiting settle gets next.
pub(super) enum Next<'a> {
    /// The `XACK` carrying its id was answered.
    Answered(Result<(), TransportError>),
    /// It is its turn to send the queued ids (its own among them); it waits again afterwards.
    Send(Turn<'a>),
}

impl Acks {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(|p| p.into_inner())
    }

    /// Joins `id` to the acknowledgements: sends it now if no `XACK` is in flight (with any ids
    /// left queued by cancelled senders), else queues it.
    pub(super) fn join(&self, id: String) -> Joined<'_> {
        let mut state = self.lock();
        if state.sending {
            let (tx, rx) = oneshot::channel();
            state.ids.push(id);
            state.answers.push(tx);
            return Joined::Wait(Waiting {
                acks: self,
                answer: rx,
            });
        }
        state.sending = true;
        let ids = std::mem::take(&mut state.ids);
        let answers = std::mem::take(&mut state.answers);
        drop(state);
        Joined::Send(Turn {
            acks: self,
            own: Some(id),
            ids,
            answers,
            done: false,
        })
    }

    /// The turn to send the queued ids, if none is in flight and some are queued.
    fn take_turn(&self) -> Option<Turn<'_>> {
        let mut state = self.lock();
        if state.sending || state.ids.is_empty() {
            return None;
        }
        state.sending = true;
        let ids = std::mem::take(&mut state.ids);
        let answers = std::mem::take(&mut state.answers);
        Some(Turn {
            acks: self,
            own: None,
            ids,
            answers,
            done: false,
        })
    }

    /// Ends the `XACK` in flight, putting `ids` back in the queue, and wakes a waiting settle
    /// to send them if any are queued.
    fn release(&self, ids: Vec<String>, answers: Vec<oneshot::Sender<Answer>>) {
        let mut state = self.lock();
        state.sending = false;
        state.ids.extend(ids);
        state.answers.extend(answers);
        let queued = !state.ids.is_empty();
        drop(state);
        if queued {
            self.turn.notify_one();
        }
    }
}

impl Turn<'_> {
    /// The ids this `XACK` carries.
    pub(super) fn ids(&self) -> impl Iterator<Item = &str> {
        self.own.iter().chain(&self.ids).map(String::as_str)
    }

    /// Redis answered (or failed) the `XACK`: lets the next one go, then gives every queued id
    /// its answer.
    pub(super) fn finish(mut self, outcome: &Result<(), TransportError>) {
        self.done = true;
        let answers = std::mem::take(&mut self.answers);
        self.acks.release(Vec::new(), Vec::new());
        let answer: Answer = outcome.as_ref().map(|_| ()).map_err(|e| {
            let text = e.to_string();
            match text.strip_prefix(e.context()) {
                Some(rest) => rest.trim_start_matches(": ").to_owned(),
                None => text,
            }
        });
        for tx in answers {
            // A settle that stopped waiting (a cancelled future) no longer needs its answer.
            let _ = tx.send(answer.clone());
        }
    }
}

impl Drop for Turn<'_> {
    fn drop(&mut self) {
        if self.done {
            return;
        }
        // Dropped before the outcome was known (its settle was cancelled): the queued ids go back
        // to the queue for the next sender. The sender's own id is not put back: its settle was
        // dropped, which leaves the entry pending.
        let (ids, answers) = (
            std::mem::take(&mut self.ids),
            std::mem::take(&mut self.answers),
        );
        self.acks.release(ids, answers);
    }
}

impl<'a> Waiting<'a> {
    /// Waits for this id's answer, or for the turn to send the queued ids.
    pub(super) async fn next(&mut self) -> Next<'a> {
        loop {
            tokio::select! {
                biased;
                answer = &mut self.answer => {
                    return Next::Answered(match answer {
                        Ok(Ok(())) => Ok(()),
                        Ok(Err(error)) => Err(TransportError::msg("acknowledging (XACK)", error)),
                        // Not expected: a turn dropped unfinished puts the queued answers back,
                        // and `finish` answers every one.
                        Err(_) => Err(TransportError::msg(
                            "acknowledging (XACK)",
                            "the acknowledgement was abandoned before Redis answered; the entry \
                             may still be pending and is then claimed back",
                        )),
                    });
                }
                () = self.acks.turn.notified() => {
                    if let Some(turn) = self.acks.take_turn() {
                        return Next::Send(turn);
                    }
                }
            }
        }
    }
}
