//! How a request of a burst learns that the burst was cancelled: from the burst's
//! `CancellationToken`, or, for a raw burst's load worker, from a stop flag of its own that
//! one watcher per load runtime raises (a check is an atomic load; the token's is a lock).

use std::future::Future;
use std::sync::atomic::{AtomicBool, Ordering};
use std::task::Poll;

use futures_util::task::AtomicWaker;
use tokio_util::sync::CancellationToken;

/// Something a request races its work against.
pub(super) trait Cancellation: Sync {
    /// Whether the burst has been cancelled.
    fn is_cancelled(&self) -> bool;

    /// Ends once the burst has been cancelled.
    fn cancelled(&self) -> impl Future<Output = ()> + Send + '_;
}

impl Cancellation for CancellationToken {
    fn is_cancelled(&self) -> bool {
        CancellationToken::is_cancelled(self)
    }

    fn cancelled(&self) -> impl Future<Output = ()> + Send + '_ {
        CancellationToken::cancelled(self)
    }
}

/// One load worker's stop flag. The worker sends one request at a time, so one waker is
/// enough: the request in flight (or the arrival it waits for) is the one to wake.
#[derive(Debug, Default)]
pub(super) struct WorkerStop {
    raised: AtomicBool,
    waker: AtomicWaker,
}

impl WorkerStop {
    /// Stops the worker: its request ends where it is, as cancelled.
    pub(super) fn raise(&self) {
        self.raised.store(true, Ordering::Release);
        self.waker.wake();
    }
}

impl Cancellation for WorkerStop {
    fn is_cancelled(&self) -> bool {
        self.raised.load(Ordering::Acquire)
    }

    fn cancelled(&self) -> impl Future<Output = ()> + Send + '_ {
        std::future::poll_fn(move |context| {
            if self.is_cancelled() {
                return Poll::Ready(());
            }
            self.waker.register(context.waker());
            // Raised between the check and the registration: its wake found no waker.
            if self.is_cancelled() { Poll::Ready(()) } else { Poll::Pending }
        })
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;

    #[tokio::test]
    async fn a_raised_stop_wakes_the_request_waiting_on_it() {
        let stop = Arc::new(WorkerStop::default());
        assert!(!stop.is_cancelled());
        let waiting = {
            let stop = Arc::clone(&stop);
            tokio::spawn(async move { stop.cancelled().await })
        };
        tokio::task::yield_now().await;
        assert!(!waiting.is_finished(), "nothing raised the stop yet");
        stop.raise();
        waiting.await.expect("the waiting task ends once the stop is raised");
        assert!(stop.is_cancelled());
        // Raised before anyone waits: the wait ends at once.
        stop.cancelled().await;
    }
}
