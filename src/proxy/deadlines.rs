//! A caller connection's deadlines on one timer: its head timeout (no request of it in progress
//! for that long, as when a caller trickles a head, sends nothing, or idles between requests:
//! the connection closes) and the upstream timeout of its request's attempt in progress (the
//! attempt ends as answered too late).
//!
//! Requests write their deadlines as numbers ([`Deadlines`]); the connection's one timer
//! ([`Watchdog`]) is re-armed only when it fires or when a deadline comes before the one it is
//! armed for: a deadline later than the armed one is found when the timer fires. A kept-alive
//! connection's timer then fires about once a head timeout, where a timer armed and dropped for
//! each head and each attempt cost two timer-wheel insertions and removals and an allocation a
//! request.

use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::task::{Context, Poll};
use std::time::Duration;

use tokio::time::{Instant, Sleep};

/// No deadline: nanoseconds past the end of any clock.
const NEVER: u64 = u64::MAX;

/// One connection's deadlines, as nanoseconds after its start. Shared by its serving task and
/// its requests, which run in that task: every access is from one thread at a time, and the
/// atomics are there for `Send`, not for contention.
#[derive(Debug)]
pub(crate) struct Deadlines {
    origin: Instant,
    head_timeout: u64,
    upstream_timeout: u64,
    /// Requests whose answer is not yet wholly handed to the connection (0 or 1 for HTTP/1.1).
    busy: AtomicUsize,
    /// When the connection last had no request in progress (its start, or an answer's end).
    idle_since: AtomicU64,
    /// The attempt in progress must have its answer's head by then.
    upstream_by: AtomicU64,
    /// Set when `upstream_by` passed: the attempt ends, answered too late, when next polled.
    upstream_expired: AtomicBool,
}

/// What a firing of the connection's timer found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Expired {
    /// No request in progress for the head timeout: close the connection.
    Head,
    /// The attempt in progress got no answer in time: poll it again, and it ends.
    Upstream,
}

impl Deadlines {
    /// A connection starting now, waiting for its first head; `None` is no limit.
    pub(crate) fn new(head_timeout: Option<Duration>, upstream_timeout: Option<Duration>) -> Arc<Self> {
        Arc::new(Self {
            origin: Instant::now(),
            head_timeout: nanos(head_timeout),
            upstream_timeout: nanos(upstream_timeout),
            busy: AtomicUsize::new(0),
            idle_since: AtomicU64::new(0),
            upstream_by: AtomicU64::new(NEVER),
            upstream_expired: AtomicBool::new(false),
        })
    }

    /// A request of this connection is in progress until the guard is dropped, after its answer.
    pub(crate) fn answering(self: &Arc<Self>) -> Answering {
        self.busy.fetch_add(1, Ordering::Relaxed);
        Answering(Arc::clone(self))
    }

    /// `exchange`, sent at `sent_at`, unless the upstream timeout passes first (`None`). Taken
    /// pinned where it was made: an exchange is most of a request's state, and a move copies
    /// all of it. The attempt's own start is the deadline's: the clock is read once for both.
    pub(crate) async fn within_upstream_timeout<T>(
        &self,
        sent_at: Instant,
        mut exchange: Pin<&mut impl Future<Output = T>>,
    ) -> Option<T> {
        if self.upstream_timeout == NEVER {
            return Some(exchange.await);
        }
        self.upstream_by.store(self.at(sent_at).saturating_add(self.upstream_timeout), Ordering::Relaxed);
        self.upstream_expired.store(false, Ordering::Relaxed);
        let _waiting = UpstreamWait(self);
        std::future::poll_fn(|cx| {
            if self.upstream_expired.load(Ordering::Relaxed) {
                return Poll::Ready(None);
            }
            exchange.as_mut().poll(cx).map(Some)
        })
        .await
    }

    /// `instant` in this connection's nanoseconds (from its start).
    fn at(&self, instant: Instant) -> u64 {
        nanos(Some(instant.saturating_duration_since(self.origin)))
    }

    fn now(&self) -> u64 {
        self.at(Instant::now())
    }

    /// When the head timeout passes: `NEVER` while a request is in progress.
    fn head_due(&self) -> u64 {
        match self.busy.load(Ordering::Relaxed) {
            0 => self.idle_since.load(Ordering::Relaxed).saturating_add(self.head_timeout),
            _ => NEVER,
        }
    }

    /// When the attempt in progress times out: `NEVER` without one, or once found passed.
    fn upstream_due(&self) -> u64 {
        match self.upstream_expired.load(Ordering::Relaxed) {
            true => NEVER,
            false => self.upstream_by.load(Ordering::Relaxed),
        }
    }

    /// The earliest deadline not yet found passed.
    fn earliest(&self) -> u64 {
        self.head_due().min(self.upstream_due())
    }

    /// What has passed by `now`, if anything (the head timeout first: nothing is in progress then).
    fn expire(&self, now: u64) -> Option<Expired> {
        if self.head_due() <= now {
            return Some(Expired::Head);
        }
        if self.upstream_due() <= now {
            self.upstream_expired.store(true, Ordering::Relaxed);
            return Some(Expired::Upstream);
        }
        None
    }

    fn instant(&self, at: u64) -> Instant {
        // Past the clock's range (584 years on): a year ahead, re-armed then.
        let year = Duration::from_secs(365 * 24 * 3600);
        let later = self.origin.checked_add(Duration::from_nanos(at));
        later.unwrap_or_else(|| Instant::now() + year)
    }
}

/// A request in progress on its connection; dropped once its answer's body has been handed over.
#[derive(Debug)]
pub(crate) struct Answering(Arc<Deadlines>);

impl Answering {
    pub(crate) fn deadlines(&self) -> &Deadlines {
        &self.0
    }
}

impl Drop for Answering {
    fn drop(&mut self) {
        let deadlines = &self.0;
        if deadlines.busy.fetch_sub(1, Ordering::Relaxed) == 1 {
            deadlines.idle_since.store(deadlines.now(), Ordering::Relaxed);
        }
    }
}

/// An attempt's upstream deadline, cleared when the attempt ends either way.
struct UpstreamWait<'a>(&'a Deadlines);

impl Drop for UpstreamWait<'_> {
    fn drop(&mut self) {
        self.0.upstream_by.store(NEVER, Ordering::Relaxed);
        self.0.upstream_expired.store(false, Ordering::Relaxed);
    }
}

/// The connection's one timer, polled by its serving task after the connection itself.
pub(crate) struct Watchdog<'a> {
    deadlines: &'a Deadlines,
    timer: Pin<&'a mut Sleep>,
    /// Where the timer is armed (`NEVER`: it is not).
    armed: u64,
    /// Whether the timer holds the task's waker since it was armed: it is then polled again
    /// only once it has fired (an atomic load), not on every wake-up of the connection.
    registered: bool,
}

impl<'a> Watchdog<'a> {
    pub(crate) fn new(deadlines: &'a Deadlines, timer: Pin<&'a mut Sleep>) -> Self {
        Self { deadlines, timer, armed: NEVER, registered: false }
    }

    /// Ready with what passed, if anything did; pending (the timer armed for the earliest
    /// deadline, or not at all when there is none) otherwise.
    pub(crate) fn poll(&mut self, cx: &mut Context<'_>) -> Poll<Expired> {
        loop {
            let due = self.deadlines.earliest();
            if due < self.armed {
                self.timer.as_mut().reset(self.deadlines.instant(due));
                (self.armed, self.registered) = (due, false);
            }
            if self.armed == NEVER || (self.registered && !self.timer.is_elapsed()) {
                return Poll::Pending;
            }
            if self.timer.as_mut().poll(cx).is_pending() {
                self.registered = true;
                return Poll::Pending;
            }
            // Fired: whatever is due next is armed on the next turn.
            (self.armed, self.registered) = (NEVER, false);
            if let Some(expired) = self.deadlines.expire(self.deadlines.now()) {
                return Poll::Ready(expired);
            }
        }
    }
}

/// A timeout in nanoseconds (`NEVER` for none, or one past what 64 bits hold).
fn nanos(duration: Option<Duration>) -> u64 {
    duration.map_or(NEVER, |duration| u64::try_from(duration.as_nanos()).unwrap_or(NEVER))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Polls `watchdog` until it reports, on the paused clock.
    async fn fired(watchdog: &mut Watchdog<'_>) -> Expired {
        std::future::poll_fn(|cx| watchdog.poll(cx)).await
    }

    #[tokio::test(start_paused = true)]
    async fn an_idle_connection_expires_at_its_head_timeout_counted_from_its_last_answer() {
        let deadlines = Deadlines::new(Some(Duration::from_secs(10)), Some(Duration::from_secs(60)));
        let start = Instant::now();
        let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut watchdog = Watchdog::new(&deadlines, timer.as_mut());
        // A request from 4 s to 7 s: the head timeout runs again from its end.
        tokio::time::sleep(Duration::from_secs(4)).await;
        let answering = deadlines.answering();
        tokio::time::sleep(Duration::from_secs(3)).await;
        drop(answering);
        assert_eq!(fired(&mut watchdog).await, Expired::Head);
        assert_eq!(start.elapsed(), Duration::from_secs(17), "10 s after the answer, not after the start");
    }

    #[tokio::test(start_paused = true)]
    async fn a_connection_with_a_request_in_progress_never_expires_for_its_head() {
        let deadlines = Deadlines::new(Some(Duration::from_secs(1)), None);
        let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut watchdog = Watchdog::new(&deadlines, timer.as_mut());
        let answering = deadlines.answering();
        let waited = tokio::time::timeout(Duration::from_secs(3600), fired(&mut watchdog)).await;
        assert!(waited.is_err(), "a slow answer (a long download) is not a slow head: {waited:?}");
        drop(answering);
        let start = Instant::now();
        assert_eq!(fired(&mut watchdog).await, Expired::Head);
        assert_eq!(start.elapsed(), Duration::from_secs(1));
    }

    #[tokio::test(start_paused = true)]
    async fn an_attempt_ends_at_its_upstream_timeout_even_when_the_timer_was_armed_later() {
        // The upstream timeout (2 s) comes before the head timeout the timer is armed for (10 s).
        let deadlines = Deadlines::new(Some(Duration::from_secs(10)), Some(Duration::from_secs(2)));
        let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut watchdog = Watchdog::new(&deadlines, timer.as_mut());
        assert!(std::future::poll_fn(|cx| Poll::Ready(watchdog.poll(cx))).await.is_pending());
        let _answering = deadlines.answering();
        let start = Instant::now();
        let never = std::pin::pin!(std::future::pending::<()>());
        let mut attempt = std::pin::pin!(deadlines.within_upstream_timeout(Instant::now(), never));
        // The serving task's turn: the attempt, then the watchdog; once it fires, the attempt again.
        let ended = std::future::poll_fn(|cx| {
            loop {
                if let Poll::Ready(answer) = attempt.as_mut().poll(cx) {
                    return Poll::Ready(answer);
                }
                match watchdog.poll(cx) {
                    Poll::Ready(Expired::Upstream) => continue,
                    Poll::Ready(Expired::Head) => panic!("the head timeout passed during a request"),
                    Poll::Pending => return Poll::Pending,
                }
            }
        })
        .await;
        assert_eq!(ended, None, "answered too late");
        assert_eq!(start.elapsed(), Duration::from_secs(2));

        // The next attempt gets the whole timeout again, and an answer in time goes through.
        let in_time = std::pin::pin!(async {
            tokio::time::sleep(Duration::from_millis(1_999)).await;
            "answer"
        });
        assert_eq!(deadlines.within_upstream_timeout(Instant::now(), in_time).await, Some("answer"));
    }

    #[tokio::test(start_paused = true)]
    async fn timeouts_past_what_the_clock_holds_are_none() {
        let deadlines = Deadlines::new(Some(Duration::MAX), Some(Duration::MAX));
        let mut timer = std::pin::pin!(tokio::time::sleep(Duration::ZERO));
        let mut watchdog = Watchdog::new(&deadlines, timer.as_mut());
        let waited = tokio::time::timeout(Duration::from_secs(1_000_000), fired(&mut watchdog)).await;
        assert!(waited.is_err(), "{waited:?}");
        let late = std::pin::pin!(tokio::time::sleep(Duration::from_secs(1_000)));
        assert_eq!(deadlines.within_upstream_timeout(Instant::now(), late).await, Some(()));
    }
}
