//! Batching: many callers' items collected into one request, each caller answered with its part.
//!
//! A [`Batcher`] runs one background task. The first item submitted opens a batch; the batch is
//! flushed when it holds [`BatchSettings::max_size`] items or [`BatchSettings::max_wait`] after
//! its first item, whichever comes first. The flush (a [`Flush`]: any async closure over a
//! `Vec` of items) runs on a task of its own, so a slow batch never holds up the next one; it
//! answers by position, and each caller's future resolves with its own part. A batch that
//! fails as a whole gives its error to every one of its callers and to no one else. A caller
//! that stops waiting is left out of its batch if it has not been flushed yet, and its answer
//! is dropped otherwise; the others are untouched.
//!
//! Batching sits in front of the limiter: a flush sends one request through a
//! [`LimitedClient`](crate::http::LimitedClient), so the limiter admits (and paces) batches,
//! not items. [`BatchTemplate`] is the ready-made flush for APIs that take a list of ids in a
//! query parameter (`/items?ids=1,2,3`).

mod plan;
mod template;

use std::future::Future;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use futures_util::future::BoxFuture;
use thiserror::Error;
use tokio::sync::{mpsc, oneshot};
use tokio::time::Instant;

pub use plan::BatchPlan;

pub use template::{BatchFormat, BatchTemplate, IdsQuery, TemplateError};

/// The largest batch a [`Batcher`] may be set to collect.
pub const MAX_BATCH_SIZE: usize = 10_000;
/// The longest a batch may be set to wait for more items.
pub const MAX_BATCH_WAIT: Duration = Duration::from_secs(60);

/// When a batch is flushed: at `max_size` items, or `max_wait` after its first item.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct BatchSettings {
    /// The most items one batch carries (1 to [`MAX_BATCH_SIZE`]).
    pub max_size: usize,
    /// How long a batch waits for more items after its first (above zero, at most [`MAX_BATCH_WAIT`]).
    pub max_wait: Duration,
}

/// A [`BatchSettings`] that can never work.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchSettingsError {
    /// `max_size` 0.
    #[error("a batch must hold at least one item (max size 0)")]
    ZeroSize,
    /// `max_size` above [`MAX_BATCH_SIZE`].
    #[error("a batch of {0} items is more than the {MAX_BATCH_SIZE} allowed")]
    TooLarge(usize),
    /// `max_wait` zero.
    #[error("a batch's max wait must be above zero (use max size 1 to send every item alone)")]
    ZeroWait,
    /// `max_wait` above [`MAX_BATCH_WAIT`].
    #[error("a batch's max wait of {0:?} is above the {MAX_BATCH_WAIT:?} allowed: callers would wait that long")]
    WaitTooLong(Duration),
}

impl BatchSettings {
    /// Settings flushing at `max_size` items or after `max_wait`, checked.
    pub fn new(max_size: usize, max_wait: Duration) -> Result<Self, BatchSettingsError> {
        let settings = Self { max_size, max_wait };
        settings.validate()?;
        Ok(settings)
    }

    /// Refuses a zero or too large size and a zero or too long wait.
    pub fn validate(&self) -> Result<(), BatchSettingsError> {
        if self.max_size == 0 {
            return Err(BatchSettingsError::ZeroSize);
        }
        if self.max_size > MAX_BATCH_SIZE {
            return Err(BatchSettingsError::TooLarge(self.max_size));
        }
        if self.max_wait.is_zero() {
            return Err(BatchSettingsError::ZeroWait);
        }
        if self.max_wait > MAX_BATCH_WAIT {
            return Err(BatchSettingsError::WaitTooLong(self.max_wait));
        }
        Ok(())
    }
}

/// Why a caller got no answer of its own. Cloneable: every caller of a failed batch gets it.
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum BatchError {
    /// The whole batch failed (no answer, a refused request, an unreadable answer).
    #[error("the batch failed: {0}")]
    Batch(String),
    /// The batch was answered, but not for this item.
    #[error("{0}")]
    Item(String),
    /// The flush answered fewer items than it was given.
    #[error("the batch's answer had no part for item {position} of {items}")]
    Unanswered {
        /// The item's position in its batch (0-based).
        position: usize,
        /// Items in the batch.
        items: usize,
    },
    /// The batcher stopped (its runtime shut down, or a flush panicked) before answering.
    #[error("the batcher stopped before answering")]
    Closed,
}

/// What a flush returns: one answer per item, by position, or the batch's error.
pub type FlushResult<O> = Result<Vec<Result<O, BatchError>>, BatchError>;

/// Sends one batch and answers each of its items by position. Any
/// `Fn(Vec<I>) -> impl Future<Output = FlushResult<O>>` is one; the batch's error ([`Err`],
/// usually a [`BatchError::Batch`]) is given to every caller of the batch.
pub trait Flush<I, O>: Send + Sync + 'static {
    /// Sends `items` as one batch.
    fn flush(&self, items: Vec<I>) -> BoxFuture<'static, FlushResult<O>>;
}

impl<I, O, F, Fut> Flush<I, O> for F
where
    F: Fn(Vec<I>) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = FlushResult<O>> + Send + 'static,
{
    fn flush(&self, items: Vec<I>) -> BoxFuture<'static, FlushResult<O>> {
        Box::pin(self(items))
    }
}

/// How much a batcher has sent: items flushed, batches flushed, and what that saved.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct BatchCounts {
    /// Items handed to a flush.
    pub items: u64,
    /// Flushes (requests sent, when a flush sends one request).
    pub batches: u64,
}

impl BatchCounts {
    /// Requests saved by batching: items that did not need a request of their own.
    pub fn saved(&self) -> u64 {
        self.items.saturating_sub(self.batches)
    }
}

#[derive(Debug, Default)]
struct Counters {
    items: AtomicU64,
    batches: AtomicU64,
}

/// One waiting caller.
struct Pending<I, O> {
    item: I,
    reply: oneshot::Sender<Result<O, BatchError>>,
}

/// Collects items submitted from many tasks into batches (see the [module](self) docs).
/// Cheap to clone: clones share the batches. The background task ends when every clone is
/// dropped, after flushing the batch it holds.
pub struct Batcher<I, O> {
    queue: mpsc::Sender<Pending<I, O>>,
    counters: Arc<Counters>,
    settings: BatchSettings,
}

impl<I, O> Clone for Batcher<I, O> {
    fn clone(&self) -> Self {
        Self { queue: self.queue.clone(), counters: Arc::clone(&self.counters), settings: self.settings }
    }
}

impl<I, O> std::fmt::Debug for Batcher<I, O> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Batcher").field("settings", &self.settings).field("counts", &self.counts()).finish()
    }
}

impl<I: Send + 'static, O: Send + 'static> Batcher<I, O> {
    /// Starts the collecting task on the current tokio runtime (panics outside one, like
    /// `tokio::spawn`); `flush` sends each batch.
    pub fn new(settings: BatchSettings, flush: impl Flush<I, O>) -> Result<Self, BatchSettingsError> {
        settings.validate()?;
        // Room for a few batches: submitters wait (back-pressure) beyond that.
        let (queue, incoming) = mpsc::channel(settings.max_size.saturating_mul(4).max(16));
        let counters = Arc::new(Counters::default());
        tokio::spawn(collect(incoming, settings, Arc::new(flush), Arc::clone(&counters)));
        Ok(Self { queue, counters, settings })
    }

    /// Adds `item` to the open batch and waits for its own answer. Dropping the future leaves
    /// the batch (or, once flushed, drops its answer) without disturbing the other callers.
    pub async fn submit(&self, item: I) -> Result<O, BatchError> {
        let (reply, answer) = oneshot::channel();
        self.queue.send(Pending { item, reply }).await.map_err(|_| BatchError::Closed)?;
        answer.await.unwrap_or(Err(BatchError::Closed))
    }
}

impl<I, O> Batcher<I, O> {
    /// Items and batches flushed so far.
    pub fn counts(&self) -> BatchCounts {
        BatchCounts {
            items: self.counters.items.load(Ordering::Relaxed),
            batches: self.counters.batches.load(Ordering::Relaxed),
        }
    }

    /// The settings it batches by.
    pub fn settings(&self) -> BatchSettings {
        self.settings
    }
}

/// The background task: opens a batch with the first item, fills it until it is full or its
/// wait is over, hands it to a flush task, and starts again.
async fn collect<I: Send + 'static, O: Send + 'static>(
    mut incoming: mpsc::Receiver<Pending<I, O>>,
    settings: BatchSettings,
    flush: Arc<dyn Flush<I, O>>,
    counters: Arc<Counters>,
) {
    while let Some(first) = incoming.recv().await {
        let deadline = Instant::now() + settings.max_wait;
        let mut batch = vec![first];
        let mut open = true;
        while open && batch.len() < settings.max_size {
            tokio::select! {
                biased;
                next = incoming.recv() => match next {
                    Some(pending) => batch.push(pending),
                    None => open = false,
                },
                () = tokio::time::sleep_until(deadline) => break,
            }
        }
        // Callers who stopped waiting are left out; a batch nobody waits for is not sent.
        batch.retain(|pending| !pending.reply.is_closed());
        if !batch.is_empty() {
            counters.items.fetch_add(batch.len() as u64, Ordering::Relaxed);
            counters.batches.fetch_add(1, Ordering::Relaxed);
            tokio::spawn(send(Arc::clone(&flush), batch));
        }
        if !open {
            break;
        }
    }
}

/// Flushes one batch and answers each of its callers.
async fn send<I: Send + 'static, O: Send + 'static>(flush: Arc<dyn Flush<I, O>>, batch: Vec<Pending<I, O>>) {
    let items = batch.len();
    let (values, replies): (Vec<I>, Vec<_>) = batch.into_iter().map(|pending| (pending.item, pending.reply)).unzip();
    match flush.flush(values).await {
        Ok(answers) => {
            let mut answers = answers.into_iter();
            for (position, reply) in replies.into_iter().enumerate() {
                let answer = answers.next().unwrap_or(Err(BatchError::Unanswered { position, items }));
                // A caller that stopped waiting has dropped its receiver: nothing to do.
                let _ = reply.send(answer);
            }
        }
        Err(err) => {
            for reply in replies {
                let _ = reply.send(Err(err.clone()));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn settings_refuse_what_cannot_work() {
        let ms = Duration::from_millis;
        assert_eq!(BatchSettings::new(0, ms(5)), Err(BatchSettingsError::ZeroSize));
        assert_eq!(BatchSettings::new(MAX_BATCH_SIZE + 1, ms(5)), Err(BatchSettingsError::TooLarge(10_001)));
        assert_eq!(BatchSettings::new(5, Duration::ZERO), Err(BatchSettingsError::ZeroWait));
        assert!(matches!(BatchSettings::new(5, Duration::from_secs(61)), Err(BatchSettingsError::WaitTooLong(_))));
        assert!(BatchSettings::new(1, MAX_BATCH_WAIT).is_ok());
    }

    #[tokio::test(start_paused = true)]
    async fn a_short_answer_fails_only_the_unanswered() {
        let settings = BatchSettings::new(3, Duration::from_millis(10)).unwrap();
        let batcher = Batcher::new(settings, |items: Vec<u32>| async move {
            let answers: FlushResult<u32> = Ok(items.into_iter().take(2).map(|item| Ok(item * 10)).collect());
            answers
        })
        .unwrap();
        let (a, b, c) = tokio::join!(batcher.submit(1), batcher.submit(2), batcher.submit(3));
        assert_eq!((a, b), (Ok(10), Ok(20)));
        assert_eq!(c, Err(BatchError::Unanswered { position: 2, items: 3 }));
        assert_eq!(batcher.counts(), BatchCounts { items: 3, batches: 1 });
    }
}
