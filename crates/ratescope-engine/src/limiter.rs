//! One key's limiter: budgets, a concurrency cap and priority lanes, admitting requests in order.
//!
//! How admission works: a request that finds nobody waiting and every budget
//! willing is admitted on the spot. Otherwise it joins its lane. Only the
//! request at the head of the queue (highest lane first, FIFO within a lane,
//! promoted when older than the starvation guard) ever arms a timer: it sleeps
//! until the earliest instant every budget allows it, then admits itself and
//! wakes the next head. Every event that can change the answer (a permit
//! returned, a cancellation, a reconfiguration, a pause) wakes the head, so
//! no waiter is ever forgotten and no tokens are spent by a request that is
//! dropped before it was admitted.

use std::future::Future;
use std::ops::{Deref, DerefMut};
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering, fence};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::{Mutex, MutexGuard};
use slab::Slab;
use tokio::time::{Instant, Sleep};

use super::budget::{BudgetState, duration_nanos};
use super::check::{AdmissionCheck, CheckReadiness};
use super::config::LimiterConfig;
use super::error::{AcquireError, ConfigError, TryAcquireError};
use super::fast::{FastBucket, PARKED};
use super::priority::{Lanes, Priority, Ticket};
use super::snapshot::{Blocked, BudgetSnapshot, HeadSnapshot, PauseSnapshot, Snapshot};
use super::unit::{CompactCost, Cost, Unit};

/// The concurrency "limit" used when a config has no cap.
const UNCAPPED: usize = usize::MAX;

/// A limiter for one key. Cheap to clone; clones share the same budgets and queue.
#[derive(Debug, Clone)]
pub struct Limiter {
    inner: Arc<Inner>,
}

/// In declaration order (`repr(C)`): what the lock-free path reads and writes comes first and
/// fits in 64 bytes (a test checks it), so with the `Arc`'s two counts it spans 80 bytes: two
/// cache lines wherever the allocator (16-byte aligned) puts it, never three.
#[derive(Debug)]
#[repr(C)]
struct Inner {
    /// That bucket's state while the limiter is idle, or `PARKED` while the lock owns it.
    fast_word: AtomicU64,
    /// Admitted and not yet finished, counting every permit however it was admitted.
    in_flight: AtomicUsize,
    /// The concurrency cap (`UNCAPPED` without one); written under the lock. Without a cap a
    /// returning permit can unblock nobody.
    limit: AtomicUsize,
    /// Time zero of every budget's nanosecond clock.
    epoch: Instant,
    /// The lock-free path's constants, when the limiter was built as one token bucket (its cap,
    /// if any, is `limit`).
    fast: Option<FastBucket>,
    /// Waiters in all lanes; lets a returning permit skip the lock when nobody waits.
    queued: AtomicUsize,
    key: String,
    state: Mutex<State>,
}

#[derive(Debug)]
struct State {
    epoch: Instant,
    config: LimiterConfig,
    budgets: Vec<BudgetState>,
    lanes: Lanes,
    waiters: Slab<Waiter>,
    next_id: u64,
    pause: Option<(Instant, String)>,
    /// A check beside the budgets (the server's mirrored budget); disables the lock-free path.
    check: Option<Box<dyn AdmissionCheck>>,
    /// Whether the config in force is the one `Inner::fast` was built for (and no check is installed).
    fast_config: bool,
    /// The most requests one admission may count that every budget of the config in force can
    /// hold: a requests-only cost up to it needs no check budget by budget.
    requests_fit: u64,
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    priority: Priority,
    cost: CompactCost,
    enqueued: Instant,
    waker: Option<Waker>,
}

/// Whether the head request can go now, and if not, until when.
enum Readiness {
    Now,
    At(Instant, Blocked),
    Concurrency,
    /// The check waits for news (a response); it wakes the head when it has some.
    Check(Blocked),
    Never(AcquireError),
}

impl Limiter {
    /// A limiter for `key` (a name for snapshots and events) enforcing `config`.
    pub fn new(key: impl Into<String>, config: LimiterConfig) -> Result<Self, ConfigError> {
        config.validate()?;
        Ok(Self::from_valid(key.into(), config))
    }

    /// A limiter from a config that passed `validate`.
    pub(crate) fn from_valid(key: String, config: LimiterConfig) -> Self {
        let budgets = config.budgets.iter().map(|spec| BudgetState::new(&spec.kind)).collect();
        let limit = config.concurrency.unwrap_or(UNCAPPED);
        let fast = FastBucket::for_config(&config);
        let fast_config = fast.is_some();
        let epoch = Instant::now();
        let requests_fit = requests_fit(&config);
        let state = State {
            epoch,
            requests_fit,
            config,
            budgets,
            lanes: Lanes::default(),
            waiters: Slab::new(),
            next_id: 0,
            pause: None,
            check: None,
            fast_config,
        };
        Self {
            inner: Arc::new(Inner {
                key,
                epoch,
                state: Mutex::new(state),
                fast,
                // A new bucket is full: its theoretical arrival time is the epoch.
                fast_word: AtomicU64::new(if fast_config { 0 } else { PARKED }),
                in_flight: AtomicUsize::new(0),
                limit: AtomicUsize::new(limit),
                queued: AtomicUsize::new(0),
            }),
        }
    }

    /// The key this limiter serves.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// Waits for admission in `priority`'s lane for a request counting as `cost` requests
    /// (usually 1).
    ///
    /// Dropping the future cancels: nothing is spent and its place in the queue is freed.
    pub fn acquire(&self, priority: Priority, cost: u64) -> Acquire {
        self.acquire_compact(priority, CompactCost::Requests(cost))
    }

    /// Like [`acquire`](Self::acquire) for a cost in several units (requests and, say, an
    /// estimate of tokens); [`Permit::settle`] corrects the estimate once it is known.
    pub fn acquire_cost(&self, priority: Priority, cost: Cost) -> Acquire {
        self.acquire_compact(priority, CompactCost::from(cost))
    }

    fn acquire_compact(&self, priority: Priority, cost: CompactCost) -> Acquire {
        Acquire { inner: Arc::clone(&self.inner), priority, cost, ticket: None, sleep: None }
    }

    /// Like [`acquire`](Self::acquire), but gives up cleanly at `deadline`.
    pub async fn acquire_until(
        &self,
        priority: Priority,
        cost: u64,
        deadline: Instant,
    ) -> Result<Permit, AcquireError> {
        let started = Instant::now();
        match tokio::time::timeout_at(deadline, self.acquire(priority, cost)).await {
            Ok(result) => result,
            Err(_) => Err(AcquireError::DeadlineExceeded { waited: started.elapsed() }),
        }
    }

    /// Admits now or says why not; never waits. Fails while others are queued, to keep their order.
    pub fn try_acquire(&self, cost: u64) -> Result<Permit, TryAcquireError> {
        if let Some(permit) = Inner::try_fast_requests(&self.inner, cost) {
            return Ok(permit);
        }
        self.try_acquire_locked(&CompactCost::Requests(cost))
    }

    /// Spends `cost` requests now for work that holds no slot (a message sent, a log line
    /// written), or says why not; never waits. The same decision as `try_acquire(cost)` with
    /// its permit dropped at once: it needs room in every budget and a free slot under a cap,
    /// and fails while others are queued. What it saves is the permit's bookkeeping (a
    /// reference to the limiter and the in-flight count, each up and down), so on a lone
    /// bucket it is one compare-and-swap, as governor's `check` is. A cost in other units
    /// takes [`try_acquire_cost`](Self::try_acquire_cost) and a dropped permit.
    // Inline: the caller's loop then holds the lock-free attempt, and only the locked half is
    // a call.
    #[inline]
    pub fn try_spend(&self, cost: u64) -> Result<(), TryAcquireError> {
        if self.inner.try_fast_spend_requests(cost) {
            return Ok(());
        }
        self.try_spend_locked(cost)
    }

    /// The locked half of `try_spend`.
    #[cold]
    #[inline(never)]
    fn try_spend_locked(&self, cost: u64) -> Result<(), TryAcquireError> {
        self.try_acquire_locked(&CompactCost::Requests(cost)).map(drop)
    }

    /// Like [`try_acquire`](Self::try_acquire) for a cost in several units.
    pub fn try_acquire_cost(&self, cost: Cost) -> Result<Permit, TryAcquireError> {
        let cost = CompactCost::from(cost);
        if let Some(permit) = Inner::try_fast(&self.inner, &cost) {
            return Ok(permit);
        }
        self.try_acquire_locked(&cost)
    }

    /// The locked half of `try_acquire`: queue, pause, check and every budget.
    fn try_acquire_locked(&self, cost: &CompactCost) -> Result<Permit, TryAcquireError> {
        let now = Instant::now();
        let mut state = self.inner.lock();
        state.check_cost(cost)?;
        if state.lanes.total() > 0 {
            let blocked = state.head_blocked(now, &self.inner).unwrap_or(Blocked::Ready);
            return Err(TryAcquireError::WouldWait(blocked));
        }
        match state.readiness_checked(cost, now, &self.inner) {
            Readiness::Now => match state.admit(cost, now, &self.inner) {
                Some(permit) => Ok(permit),
                None => Err(TryAcquireError::WouldWait(state.concurrency_blocked())),
            },
            Readiness::At(_, blocked) | Readiness::Check(blocked) => Err(TryAcquireError::WouldWait(blocked)),
            Readiness::Concurrency => Err(TryAcquireError::WouldWait(state.concurrency_blocked())),
            Readiness::Never(err) => Err(err.into()),
        }
    }

    /// Waits for a permit, then runs `work` holding it; the permit is returned however `work` ends.
    pub async fn run<F: Future>(&self, priority: Priority, cost: u64, work: F) -> Result<F::Output, AcquireError> {
        let _permit = self.acquire(priority, cost).await?;
        Ok(work.await)
    }

    /// The server said "come back later": nothing of this key is admitted before `until`.
    /// A later pause extends an earlier one; an earlier one never shortens it.
    pub fn pause_until(&self, until: Instant, reason: impl Into<String>) {
        let mut state = self.inner.lock();
        if state.pause.as_ref().is_none_or(|(current, _)| until > *current) {
            state.pause = Some((until, reason.into()));
        }
        state.wake_head(Instant::now());
    }

    /// Replaces budgets, concurrency and the starvation guard while requests wait.
    /// Budgets keep what was spent (matched by name); waiters keep their order and
    /// are re-evaluated at once.
    pub fn reconfigure(&self, config: LimiterConfig) -> Result<(), ConfigError> {
        config.validate()?;
        let now = Instant::now();
        let mut state = self.inner.lock();
        let now_ns = state.nanos(now);
        let State { config: current, budgets, .. } = &mut *state;
        let mut old: Vec<(String, BudgetState)> =
            current.budgets.iter().map(|spec| spec.name.clone()).zip(budgets.drain(..)).collect();
        state.budgets = config
            .budgets
            .iter()
            .map(|spec| match old.iter().position(|(name, _)| *name == spec.name) {
                Some(index) => old.swap_remove(index).1.reconfigured(&spec.kind, now_ns),
                None => BudgetState::new(&spec.kind),
            })
            .collect();
        // Permits in flight above a lowered cap simply hold the next admission back until
        // enough of them finish.
        self.inner.limit.store(config.concurrency.unwrap_or(UNCAPPED), Ordering::SeqCst);
        state.fast_config =
            state.check.is_none() && self.inner.fast.is_some() && FastBucket::for_config(&config) == self.inner.fast;
        state.requests_fit = requests_fit(&config);
        state.config = config;
        state.wake_head(now);
        Ok(())
    }

    /// Installs `make()` as this limiter's admission check, unless it has one already; from now
    /// on every request also needs the check's word. Returns whether a check was installed.
    pub fn install_check(&self, make: impl FnOnce() -> Box<dyn AdmissionCheck>) -> bool {
        let mut state = self.inner.lock();
        if state.check.is_some() {
            return false;
        }
        state.check = Some(make());
        state.fast_config = false;
        state.wake_head(Instant::now());
        true
    }

    /// Runs `update` on the check under the limiter's lock, then lets the head re-evaluate.
    /// `None` when no check is installed.
    pub fn update_check<R>(&self, update: impl FnOnce(&mut dyn AdmissionCheck) -> R) -> Option<R> {
        let mut state = self.inner.lock();
        let result = update(state.check.as_deref_mut()?);
        state.wake_head(Instant::now());
        Some(result)
    }

    /// The settings in force.
    pub fn config(&self) -> LimiterConfig {
        self.inner.lock().config.clone()
    }

    /// Requests admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.inner.in_flight.load(Ordering::Acquire)
    }

    /// The limiter's state now: tokens, window usage, queues, pause, and what blocks the head.
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let mut state = self.inner.lock();
        let now_ns = state.nanos(now);
        let State { config, budgets, .. } = &mut *state;
        let budgets = config
            .budgets
            .iter()
            .zip(budgets.iter_mut())
            .map(|(spec, budget)| BudgetSnapshot {
                name: spec.name.clone(),
                kind: spec.kind,
                unit: spec.unit.clone(),
                available: budget.available(now_ns),
                capacity: spec.capacity(),
                window_used: budget.window_used(now_ns),
            })
            .collect();
        let paused = state.pause.as_ref().filter(|(until, _)| *until > now).map(|(until, reason)| PauseSnapshot {
            until: *until,
            remaining: *until - now,
            reason: reason.clone(),
        });
        let head = state.head(now).and_then(|ticket| {
            let waiter = state.waiters.get(ticket.0)?;
            let (priority, cost, enqueued) = (waiter.priority, waiter.cost.requests(), waiter.enqueued);
            let blocked = state.head_blocked(now, &self.inner)?;
            Some(HeadSnapshot { priority, cost, waited: now - enqueued, blocked })
        });
        Snapshot {
            key: self.inner.key.clone(),
            at: now,
            budgets,
            queued: state.lanes.counts(),
            in_flight: self.in_flight(),
            concurrency: state.config.concurrency,
            paused,
            head,
        }
    }
}

impl Inner {
    /// Takes the lock; the bucket moves out of the lock-free word for as long as it is held.
    fn lock(&self) -> Locked<'_> {
        let mut guard = self.state.lock();
        // A limiter built without the lock-free path never leaves the word parked; skipping
        // the swap spares a write to a line every thread of this limiter reads.
        if self.fast.is_none() {
            return Locked { guard, inner: self };
        }
        let word = self.fast_word.swap(PARKED, Ordering::AcqRel);
        if word != PARKED
            && let Some(bucket) = guard.budgets.first_mut().and_then(BudgetState::bucket_mut)
        {
            bucket.set_tat(u128::from(word));
        }
        Locked { guard, inner: self }
    }

    /// Admission without the lock: a single bucket (under its cap, if it has one) with nobody
    /// queued and no pause.
    /// `None` means "take the locked path", which decides every other case (a zero request
    /// count is an error only that path reports).
    #[inline]
    fn try_fast(inner: &Arc<Self>, cost: &CompactCost) -> Option<Permit> {
        if let CompactCost::Requests(requests) = *cost {
            return Self::try_fast_requests(inner, requests);
        }
        let fast = inner.fast.as_ref().filter(|_| cost.requests() > 0)?;
        Self::try_fast_spend(inner, fast, cost.of(fast.unit()), || cost.clone())
    }

    /// [`try_fast`](Self::try_fast) for a request count alone: no `Cost` is built.
    // Always: the common `try_acquire` of a limiter without the lock-free path then pays only
    // the inlined check, not a call.
    #[inline(always)]
    fn try_fast_requests(inner: &Arc<Self>, requests: u64) -> Option<Permit> {
        let fast = inner.fast_for_requests(requests)?;
        Self::try_fast_spend(inner, fast, requests, || CompactCost::Requests(requests))
    }

    /// The lock-free path's constants for a cost of `requests` requests alone: `None` without
    /// a lock-free path, for a bucket of another unit, or for a zero count (an error only the
    /// locked path reports).
    #[inline(always)]
    fn fast_for_requests(&self, requests: u64) -> Option<&FastBucket> {
        self.fast.as_ref().filter(|fast| requests > 0 && fast.counts_requests())
    }

    /// Now on the budgets' nanosecond clock.
    #[inline(always)]
    fn now_ns(&self) -> u64 {
        duration_nanos(Instant::now().saturating_duration_since(self.epoch))
    }

    #[inline]
    fn try_fast_spend(
        inner: &Arc<Self>,
        fast: &FastBucket,
        spend: u64,
        charged: impl FnOnce() -> CompactCost,
    ) -> Option<Permit> {
        // Parked also while a check is installed: the lock is never handed back then.
        if inner.fast_word.load(Ordering::Relaxed) == PARKED {
            return None;
        }
        // Counted before the spend: a cap set meanwhile, and the locked path's readiness (it
        // parks the word before it looks, so this spend then fails), already see this request.
        let before = inner.in_flight.fetch_add(1, Ordering::SeqCst);
        if before >= inner.limit.load(Ordering::SeqCst) {
            // At the cap: the locked path decides (and names the wait).
            inner.release_one();
            return None;
        }
        let now = inner.now_ns();
        if fast.try_spend(&inner.fast_word, spend, now) {
            return Some(Permit { inner: Arc::clone(inner), ticket: None, charged: charged(), admitted_ns: now });
        }
        inner.release_one();
        None
    }

    /// [`try_spend`](Limiter::try_spend) without the lock: what `try_fast_requests` decides,
    /// with the in-flight count read instead of taken (the work holds no slot, so the cap only
    /// needs to have had room at one instant). `false` means "ask the locked path".
    #[inline]
    fn try_fast_spend_requests(&self, requests: u64) -> bool {
        let Some(fast) = self.fast_for_requests(requests) else { return false };
        if self.fast_word.load(Ordering::Relaxed) == PARKED
            || self.in_flight.load(Ordering::SeqCst) >= self.limit.load(Ordering::SeqCst)
        {
            return false;
        }
        fast.try_spend(&self.fast_word, requests, self.now_ns())
    }

    /// A permit came back (or a lock-free attempt gave up its count): wakes the head if it may
    /// have waited for this slot.
    fn release_one(&self) {
        self.in_flight.fetch_sub(1, Ordering::SeqCst);
        // Only a returned slot under a cap can unblock a waiter. The cap is stored before any
        // waiter can block on it, so a stale "uncapped" here never loses a wake-up.
        if self.limit.load(Ordering::SeqCst) == UNCAPPED {
            return;
        }
        fence(Ordering::SeqCst);
        if self.queued.load(Ordering::SeqCst) > 0 {
            self.lock().wake_head(Instant::now());
        }
    }
}

/// The most requests one admission may count within every budget of `config` that counts
/// requests (each spends `cost` per request, at most its capacity); `u64::MAX` when none does.
fn requests_fit(config: &LimiterConfig) -> u64 {
    config
        .budgets
        .iter()
        .filter(|spec| spec.unit == Unit::Requests)
        .map(|spec| spec.capacity().checked_div(spec.cost).unwrap_or(u64::MAX))
        .min()
        .unwrap_or(u64::MAX)
}

/// The locked state. On release it hands the bucket back to the lock-free word when the
/// limiter is idle: the built-for config, nobody queued, no pause.
struct Locked<'a> {
    guard: MutexGuard<'a, State>,
    inner: &'a Inner,
}

impl Deref for Locked<'_> {
    type Target = State;

    fn deref(&self) -> &State {
        &self.guard
    }
}

impl DerefMut for Locked<'_> {
    fn deref_mut(&mut self) -> &mut State {
        &mut self.guard
    }
}

impl Drop for Locked<'_> {
    fn drop(&mut self) {
        let state = &mut *self.guard;
        if !state.fast_config || state.pause.is_some() || state.lanes.total() > 0 {
            return;
        }
        if let Some(tat) = state.budgets.first_mut().and_then(BudgetState::bucket_mut).map(|bucket| bucket.tat())
            && let Ok(word) = u64::try_from(tat)
            && word != PARKED
        {
            self.inner.fast_word.store(word, Ordering::Release);
        }
    }
}

impl State {
    fn nanos(&self, at: Instant) -> u64 {
        duration_nanos(at.saturating_duration_since(self.epoch))
    }

    fn instant(&self, nanos: u64) -> Instant {
        self.epoch + Duration::from_nanos(nanos)
    }

    fn is_live(waiters: &Slab<Waiter>) -> impl Fn(Ticket) -> bool + '_ {
        move |(slot, id)| waiters.get(slot).is_some_and(|waiter| waiter.id == id)
    }

    /// The request that goes next: the oldest promoted one, else the front of the highest lane.
    fn head(&mut self, now: Instant) -> Option<Ticket> {
        let fronts = self.lanes.fronts(Self::is_live(&self.waiters));
        if let Some(guard) = self.config.starvation_guard {
            let promoted = fronts
                .iter()
                .flatten()
                .filter_map(|&ticket| Some((self.waiters.get(ticket.0)?.enqueued, ticket)))
                .filter(|(enqueued, _)| now.saturating_duration_since(*enqueued) >= guard)
                // Oldest first; among equals, the one that joined first.
                .min_by_key(|(enqueued, (_, id))| (*enqueued, *id));
            if let Some((_, ticket)) = promoted {
                return Some(ticket);
            }
        }
        fronts.into_iter().flatten().next()
    }

    /// When a lower lane's front will be promoted past the current head, if that is sooner than `at`.
    fn next_promotion(&mut self, now: Instant) -> Option<Instant> {
        let guard = self.config.starvation_guard?;
        let fronts = self.lanes.fronts(Self::is_live(&self.waiters));
        fronts
            .iter()
            .flatten()
            .filter_map(|ticket| self.waiters.get(ticket.0))
            .map(|waiter| waiter.enqueued + guard)
            .filter(|promotion| *promotion > now)
            .min()
    }

    /// Whether a request of `cost` can ever be admitted: no zero request count, nothing above a
    /// budget's capacity.
    #[inline]
    fn check_cost(&self, cost: &CompactCost) -> Result<(), AcquireError> {
        if cost.requests() == 0 {
            return Err(AcquireError::ZeroCost);
        }
        // The common cost, a few requests and nothing else, fits every budget at once.
        if matches!(cost, CompactCost::Requests(requests) if *requests <= self.requests_fit) {
            return Ok(());
        }
        for spec in &self.config.budgets {
            let spent = spec.spend(cost);
            if spent > spec.capacity() {
                return Err(AcquireError::CostExceedsCapacity {
                    budget: spec.name.clone(),
                    cost: spent,
                    capacity: spec.capacity(),
                });
            }
        }
        Ok(())
    }

    /// Whether a request of `cost` could be admitted at `now`, ignoring the queue.
    fn readiness(&mut self, cost: &CompactCost, now: Instant, inner: &Inner) -> Readiness {
        if let Err(err) = self.check_cost(cost) {
            return Readiness::Never(err);
        }
        self.readiness_checked(cost, now, inner)
    }

    /// [`readiness`](Self::readiness) for a cost `check_cost` accepted under this lock.
    fn readiness_checked(&mut self, cost: &CompactCost, now: Instant, inner: &Inner) -> Readiness {
        if let Some((until, reason)) = &self.pause {
            if *until > now {
                return Readiness::At(*until, Blocked::Paused { reason: reason.clone(), wait: *until - now });
            }
            self.pause = None;
        }
        if let Some(check) = self.check.as_mut() {
            match cost.with_cost(|cost| check.readiness(now, cost)) {
                CheckReadiness::Ready => {}
                CheckReadiness::At { at, reason } if at > now => {
                    return Readiness::At(at, Blocked::Server { reason, wait: Some(at - now) });
                }
                CheckReadiness::At { .. } => {}
                CheckReadiness::Wait { reason } => return Readiness::Check(Blocked::Server { reason, wait: None }),
            }
        }
        let now_ns = self.nanos(now);
        let mut latest: Option<(u64, usize)> = None;
        for (index, (spec, budget)) in self.config.budgets.iter().zip(self.budgets.iter_mut()).enumerate() {
            let ready = budget.ready_at(spec.spend(cost), now_ns);
            if ready > now_ns && latest.is_none_or(|(at, _)| ready > at) {
                latest = Some((ready, index));
            }
        }
        if let Some((ready, index)) = latest {
            let name = self.config.budgets[index].name.clone();
            return Readiness::At(
                self.instant(ready),
                Blocked::Budget { name, wait: Duration::from_nanos(ready - now_ns) },
            );
        }
        if inner.in_flight.load(Ordering::SeqCst) >= inner.limit.load(Ordering::SeqCst) {
            return Readiness::Concurrency;
        }
        Readiness::Now
    }

    /// Takes a concurrency slot, then spends `cost` in every budget. The caller checked
    /// readiness. `None`: a lock-free admission counted itself since, and the slot readiness
    /// saw is its; this request waits for a returned permit like any other at the cap.
    fn admit(&mut self, cost: &CompactCost, now: Instant, inner: &Arc<Inner>) -> Option<Permit> {
        // Counted and checked in one step, as the lock-free path does: of any two admissions,
        // the one that counts second sees the first, so a cap never admits past itself.
        // Without a lock-free path every admission happens under this lock, and readiness's
        // look at the count was exact.
        let before = inner.in_flight.fetch_add(1, Ordering::SeqCst);
        if inner.fast.is_some() && before >= inner.limit.load(Ordering::SeqCst) {
            // Under the lock, no waiter saw this count; the lock-free attempt that may have
            // refused because of it takes the locked path and looks again.
            inner.in_flight.fetch_sub(1, Ordering::SeqCst);
            return None;
        }
        let now_ns = self.nanos(now);
        for (spec, budget) in self.config.budgets.iter().zip(self.budgets.iter_mut()) {
            budget.consume(spec.spend(cost), now_ns);
        }
        let ticket = self.check.as_mut().map(|check| cost.with_cost(|cost| check.admit(now, cost)));
        Some(Permit { inner: Arc::clone(inner), ticket, charged: cost.clone(), admitted_ns: now_ns })
    }

    /// Corrects what a permit admitted at `admitted_ns` spent in every budget from `charged`
    /// to `actual` units (times each budget's cost per unit), then lets the head re-evaluate.
    fn settle(
        &mut self,
        ticket: Option<u64>,
        charged: &CompactCost,
        actual: &CompactCost,
        admitted_ns: u64,
        now: Instant,
    ) {
        if let (Some(check), Some(ticket)) = (self.check.as_mut(), ticket) {
            actual.with_cost(|actual| check.settle(ticket, actual));
        }
        let now_ns = self.nanos(now);
        for (spec, budget) in self.config.budgets.iter().zip(self.budgets.iter_mut()) {
            // A request never counts more than a whole budget (see `LimiterConfig::settle_bound`).
            let capacity = spec.capacity();
            let (was, is) = (spec.spend(charged).min(capacity), spec.spend(actual).min(capacity));
            if is < was {
                budget.refund(was - is, admitted_ns, now_ns);
            } else if is > was {
                budget.charge(is - was, admitted_ns, now_ns);
            }
        }
        self.wake_head(now);
    }

    fn concurrency_blocked(&self) -> Blocked {
        Blocked::Concurrency { limit: self.config.concurrency.unwrap_or(UNCAPPED) }
    }

    /// What blocks the head request now, if there is one.
    fn head_blocked(&mut self, now: Instant, inner: &Inner) -> Option<Blocked> {
        let ticket = self.head(now)?;
        let cost = self.waiters.get(ticket.0)?.cost.clone();
        Some(match self.readiness(&cost, now, inner) {
            Readiness::Now | Readiness::Never(_) => Blocked::Ready,
            Readiness::At(_, blocked) | Readiness::Check(blocked) => blocked,
            Readiness::Concurrency => self.concurrency_blocked(),
        })
    }

    /// Wakes the head so it re-evaluates: something changed that may let it go or move its timer.
    fn wake_head(&mut self, now: Instant) {
        if let Some((slot, _)) = self.head(now)
            && let Some(waker) = self.waiters.get(slot).and_then(|waiter| waiter.waker.as_ref())
        {
            waker.wake_by_ref();
        }
    }

    fn enqueue(&mut self, priority: Priority, cost: CompactCost, now: Instant, waker: &Waker, inner: &Inner) -> Ticket {
        let id = self.next_id;
        self.next_id += 1;
        let slot = self.waiters.insert(Waiter { id, priority, cost, enqueued: now, waker: Some(waker.clone()) });
        self.lanes.push(priority, (slot, id));
        // Pairs with the fence in `Permit::drop`: either it sees this waiter, or this
        // waiter's next readiness check sees the slot it returned.
        inner.queued.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        (slot, id)
    }

    /// Takes a waiter out of the queue (admitted or cancelled).
    fn dequeue(&mut self, (slot, id): Ticket, at_front: bool, inner: &Inner) {
        if !Self::is_live(&self.waiters)((slot, id)) {
            return;
        }
        let waiter = self.waiters.remove(slot);
        if at_front {
            self.lanes.pop_front(waiter.priority);
        } else {
            self.lanes.forget(waiter.priority, Self::is_live(&self.waiters));
        }
        inner.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The future returned by [`Limiter::acquire`]. Resolves to a [`Permit`].
#[derive(Debug)]
#[must_use = "a limiter admits nothing until the acquisition is awaited"]
pub struct Acquire {
    inner: Arc<Inner>,
    priority: Priority,
    cost: CompactCost,
    ticket: Option<Ticket>,
    /// Armed only while this request is the head and waits for time to pass.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Future for Acquire {
    type Output = Result<Permit, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        if this.ticket.is_none()
            && let Some(permit) = Inner::try_fast(&this.inner, &this.cost)
        {
            return Poll::Ready(Ok(permit));
        }
        let inner = Arc::clone(&this.inner);
        let mut now = Instant::now();
        let mut state = inner.lock();
        let ticket = match this.ticket {
            Some(ticket) => ticket,
            None => {
                if state.lanes.total() == 0 {
                    match state.readiness(&this.cost, now, &inner) {
                        Readiness::Now => {
                            if let Some(permit) = state.admit(&this.cost, now, &inner) {
                                return Poll::Ready(Ok(permit));
                            }
                        }
                        Readiness::Never(err) => return Poll::Ready(Err(err)),
                        Readiness::At(..) | Readiness::Concurrency | Readiness::Check(_) => {}
                    }
                } else if let Err(err) = state.check_cost(&this.cost) {
                    return Poll::Ready(Err(err));
                }
                let ticket = state.enqueue(this.priority, this.cost.clone(), now, cx.waker(), &inner);
                this.ticket = Some(ticket);
                ticket
            }
        };
        if let Some(waiter) = state.waiters.get_mut(ticket.0)
            && !waiter.waker.as_ref().is_some_and(|waker| waker.will_wake(cx.waker()))
        {
            waiter.waker = Some(cx.waker().clone());
        }
        loop {
            if state.head(now) != Some(ticket) {
                if this.sleep.take().is_some() {
                    // This request's timer belonged to it as head; whoever is head now needs to arm its own.
                    state.wake_head(now);
                }
                return Poll::Pending;
            }
            match state.readiness(&this.cost, now, &inner) {
                Readiness::Now => {
                    let Some(permit) = state.admit(&this.cost, now, &inner) else {
                        // A lock-free admission took the slot: wait for a permit like at the cap.
                        this.sleep = None;
                        return Poll::Pending;
                    };
                    state.dequeue(ticket, true, &inner);
                    this.ticket = None;
                    this.sleep = None;
                    state.wake_head(now);
                    return Poll::Ready(Ok(permit));
                }
                Readiness::Never(err) => {
                    state.dequeue(ticket, true, &inner);
                    this.ticket = None;
                    state.wake_head(now);
                    return Poll::Ready(Err(err));
                }
                Readiness::Concurrency | Readiness::Check(_) => {
                    this.sleep = None;
                    return Poll::Pending;
                }
                Readiness::At(ready, _) => {
                    let wake_at = state.next_promotion(now).map_or(ready, |promotion| promotion.min(ready));
                    match &mut this.sleep {
                        Some(sleep) if sleep.deadline() == wake_at => {}
                        Some(sleep) => sleep.as_mut().reset(wake_at),
                        None => this.sleep = Some(Box::pin(tokio::time::sleep_until(wake_at))),
                    }
                    let Some(sleep) = this.sleep.as_mut() else { return Poll::Pending };
                    if sleep.as_mut().poll(cx).is_pending() {
                        return Poll::Pending;
                    }
                    this.sleep = None;
                    now = Instant::now().max(wake_at);
                }
            }
        }
    }
}

impl Drop for Acquire {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket.take() {
            let mut state = self.inner.lock();
            state.dequeue(ticket, false, &self.inner);
            state.wake_head(Instant::now());
        }
    }
}

/// Admission to send one request. Holds a concurrency slot until dropped, however the
/// request ends: success, error, panic or cancellation.
#[derive(Debug)]
#[must_use = "dropping a permit at once ends the request it admitted"]
pub struct Permit {
    inner: Arc<Inner>,
    /// The admission check's ticket for this request, when the limiter has a check.
    ticket: Option<u64>,
    /// What this permit holds in every budget: the estimate it was admitted with, until
    /// [`settle`](Self::settle) corrects it.
    charged: CompactCost,
    /// When it was admitted, on the limiter's nanosecond clock (a window counts it from then).
    admitted_ns: u64,
}

impl Permit {
    /// The key of the limiter that admitted this request.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The admission check's ticket (its admission order), when the limiter has a check.
    pub fn ticket(&self) -> Option<u64> {
        self.ticket
    }

    /// What this permit holds: its estimate, or what the last settlement said.
    pub fn charged(&self) -> Cost {
        self.charged.cost()
    }

    /// The request's true cost is known: every budget that counted the estimate now counts
    /// `actual` units instead, at once and under one lock. Less gives the difference back (a
    /// token bucket refills by it, a sliding window forgets it from the admission's slot, both
    /// never above their capacity); more charges the rest, into debt if need be, which delays
    /// the next admissions until it is paid. A window the admission has already left is not
    /// touched. Settling again corrects the previous settlement; a permit never settled keeps
    /// its estimate. An admission check learns the actual cost too. Budgets shared through a
    /// store live outside the engine: whoever admitted through the store settles them there
    /// (the HTTP client does, after the answer).
    ///
    /// An amount above what any budget of its unit holds is impossible under a real budget of
    /// that size, so it is counted as that much ([`LimiterConfig::capped`]); a budget is never
    /// left more than one capacity in debt however many settlements charge it. Returns the cost
    /// as counted: below `actual` where it was capped.
    pub fn settle(&mut self, actual: Cost) -> Cost {
        let mut state = self.inner.lock();
        let counted = state.config.capped(&actual);
        let compact = CompactCost::from(counted.clone());
        if compact != self.charged {
            state.settle(self.ticket, &self.charged, &compact, self.admitted_ns, Instant::now());
            self.charged = compact;
        }
        counted
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if let Some(ticket) = self.ticket {
            let mut state = self.inner.lock();
            if let Some(check) = state.check.as_mut() {
                check.release(ticket);
            }
            state.wake_head(Instant::now());
        }
        self.inner.release_one();
    }
}

#[cfg(test)]
mod tests {
    use std::mem::{offset_of, size_of};

    use super::*;
    use crate::fast::HOT_BYTES;

    #[test]
    fn what_a_lock_free_admission_reads_fits_in_the_first_64_bytes() {
        assert_eq!(size_of::<Option<FastBucket>>(), size_of::<FastBucket>(), "the option's tag costs no bytes");
        let hot_end = offset_of!(Inner, fast) + HOT_BYTES;
        assert!(hot_end <= 64, "the lock-free path reads {hot_end} bytes of the inner state");
    }
}
