//! First in, first queued: the tasks of a burst reach the limiter in request order.
//!
//! The limiter admits in the order requests join its queue, but a burst launches each request
//! as a task of its own, and a multi-threaded runtime polls new tasks in an order of its own
//! (the newest one first, idle workers stealing half a queue), so request 19 could queue
//! before request 0. Each task waits for the one launched before it to take its first step;
//! the chain costs one wake-up a request, and a predecessor that was cancelled or panicked
//! lets its successor through as well.

use std::future::Future;
use std::pin::pin;

use tokio::sync::oneshot;

/// The driver's end: hands each new task its place in the chain.
#[derive(Debug, Default)]
pub(super) struct Turnstile {
    /// Dropped or fired by the last task when it has taken its first step.
    previous: Option<oneshot::Receiver<()>>,
}

/// A task's place: wait for the one before it, then let the next one through.
#[derive(Debug)]
pub(super) struct Place {
    after: Option<oneshot::Receiver<()>>,
    before: oneshot::Sender<()>,
}

impl Turnstile {
    /// The place of the next task launched.
    pub(super) fn next_place(&mut self) -> Place {
        let (before, next) = oneshot::channel();
        Place { after: self.previous.replace(next), before }
    }
}

impl Place {
    /// Runs `work` once its predecessor has started, and lets the successor start as soon as
    /// `work` has been polled once (by then it has joined the limiter's queue, or finished).
    pub(super) async fn run<F: Future>(self, work: F) -> F::Output {
        if let Some(after) = self.after {
            // An error means the predecessor is gone without starting: our turn all the same.
            let _ = after.await;
        }
        let mut work = pin!(work);
        let mut before = Some(self.before);
        std::future::poll_fn(|cx| {
            let poll = work.as_mut().poll(cx);
            if let Some(before) = before.take() {
                let _ = before.send(());
            }
            poll
        })
        .await
    }
}

#[cfg(test)]
mod tests {
    use std::sync::{Arc, Mutex};

    use super::*;

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn tasks_take_their_first_step_in_launch_order() {
        let order = Arc::new(Mutex::new(Vec::new()));
        let mut turnstile = Turnstile::default();
        let mut tasks = tokio::task::JoinSet::new();
        for index in 0..200 {
            let place = turnstile.next_place();
            let order = Arc::clone(&order);
            tasks.spawn(place.run(async move {
                order.lock().unwrap().push(index);
                tokio::task::yield_now().await;
            }));
        }
        while tasks.join_next().await.is_some() {}
        let order = order.lock().unwrap().clone();
        assert_eq!(order, (0..200).collect::<Vec<_>>());
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn a_task_aborted_before_its_turn_lets_the_next_through() {
        let mut turnstile = Turnstile::default();
        let first = turnstile.next_place();
        let second = turnstile.next_place();
        let third = turnstile.next_place();
        // The first never runs: its place is dropped with it.
        drop(first);
        let waiting = tokio::spawn(second.run(std::future::pending::<()>()));
        let last = tokio::spawn(third.run(async { 3 }));
        assert_eq!(last.await.unwrap(), 3, "the third passes once the second has started");
        waiting.abort();
    }
}
