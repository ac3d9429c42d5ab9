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
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering, fence};
use std::task::{Context, Poll, Waker};
use std::time::Duration;

use parking_lot::Mutex;
use slab::Slab;
use tokio::sync::{OwnedSemaphorePermit, Semaphore};
use tokio::time::{Instant, Sleep};

use super::budget::{BudgetState, duration_nanos};
use super::config::LimiterConfig;
use super::error::{AcquireError, ConfigError, TryAcquireError};
use super::priority::{Lanes, Priority, Ticket};
use super::snapshot::{Blocked, BudgetSnapshot, HeadSnapshot, PauseSnapshot, Snapshot};

/// The concurrency "limit" used when a config has no cap.
const UNCAPPED: usize = Semaphore::MAX_PERMITS;

/// A limiter for one key. Cheap to clone; clones share the same budgets and queue.
#[derive(Debug, Clone)]
pub struct Limiter {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    key: String,
    state: Mutex<State>,
    semaphore: Arc<Semaphore>,
    in_flight: AtomicUsize,
    /// Permits to forget instead of returning, after the cap was lowered below what is in flight.
    debt: AtomicUsize,
    /// Waiters in all lanes; lets a returning permit skip the lock when nobody waits.
    queued: AtomicUsize,
    /// Whether a concurrency cap is set; without one a returning permit can unblock nobody.
    capped: AtomicBool,
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
}

#[derive(Debug)]
struct Waiter {
    id: u64,
    priority: Priority,
    cost: u64,
    enqueued: Instant,
    waker: Option<Waker>,
}

/// Whether the head request can go now, and if not, until when.
enum Readiness {
    Now,
    At(Instant, Blocked),
    Concurrency,
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
        let permits = config.concurrency.unwrap_or(UNCAPPED);
        let state = State {
            epoch: Instant::now(),
            config,
            budgets,
            lanes: Lanes::default(),
            waiters: Slab::new(),
            next_id: 0,
            pause: None,
        };
        Self {
            shared: Arc::new(Shared {
                key,
                state: Mutex::new(state),
                semaphore: Arc::new(Semaphore::new(permits)),
                in_flight: AtomicUsize::new(0),
                debt: AtomicUsize::new(0),
                queued: AtomicUsize::new(0),
                capped: AtomicBool::new(permits != UNCAPPED),
            }),
        }
    }

    /// The key this limiter serves.
    pub fn key(&self) -> &str {
        &self.shared.key
    }

    /// Waits for admission in `priority`'s lane for a request of `cost` (usually 1).
    ///
    /// Dropping the future cancels: nothing is spent and its place in the queue is freed.
    pub fn acquire(&self, priority: Priority, cost: u64) -> Acquire {
        Acquire { shared: Arc::clone(&self.shared), priority, cost, ticket: None, sleep: None }
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
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        state.check_cost(cost)?;
        if state.lanes.total() > 0 {
            let blocked = state.head_blocked(now, &self.shared).unwrap_or(Blocked::Ready);
            return Err(TryAcquireError::WouldWait(blocked));
        }
        match state.readiness(cost, now, &self.shared) {
            Readiness::Now => Ok(state.admit(cost, now, &self.shared)),
            Readiness::At(_, blocked) => Err(TryAcquireError::WouldWait(blocked)),
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
        let mut state = self.shared.state.lock();
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
        let mut state = self.shared.state.lock();
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
        let previous = state.config.concurrency.unwrap_or(UNCAPPED);
        let next = config.concurrency.unwrap_or(UNCAPPED);
        self.shared.capped.store(next != UNCAPPED, Ordering::SeqCst);
        self.shared.resize_concurrency(previous, next);
        state.config = config;
        state.wake_head(now);
        Ok(())
    }

    /// The settings in force.
    pub fn config(&self) -> LimiterConfig {
        self.shared.state.lock().config.clone()
    }

    /// Requests admitted and not yet finished.
    pub fn in_flight(&self) -> usize {
        self.shared.in_flight.load(Ordering::Acquire)
    }

    /// The limiter's state now: tokens, window usage, queues, pause, and what blocks the head.
    pub fn snapshot(&self) -> Snapshot {
        let now = Instant::now();
        let mut state = self.shared.state.lock();
        let now_ns = state.nanos(now);
        let State { config, budgets, .. } = &mut *state;
        let budgets = config
            .budgets
            .iter()
            .zip(budgets.iter_mut())
            .map(|(spec, budget)| BudgetSnapshot {
                name: spec.name.clone(),
                kind: spec.kind,
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
            let (priority, cost, enqueued) = (waiter.priority, waiter.cost, waiter.enqueued);
            let blocked = state.head_blocked(now, &self.shared)?;
            Some(HeadSnapshot { priority, cost, waited: now - enqueued, blocked })
        });
        Snapshot {
            key: self.shared.key.clone(),
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

impl Shared {
    /// Moves the semaphore from `previous` to `next` slots; slots still in flight above the new
    /// cap are recorded as debt and forgotten as they come back.
    fn resize_concurrency(&self, previous: usize, next: usize) {
        if next > previous {
            let mut grow = next - previous;
            let mut debt = self.debt.load(Ordering::Acquire);
            while debt > 0 {
                let paid = debt.min(grow);
                match self.debt.compare_exchange(debt, debt - paid, Ordering::AcqRel, Ordering::Acquire) {
                    Ok(_) => {
                        grow -= paid;
                        break;
                    }
                    Err(actual) => debt = actual,
                }
            }
            self.semaphore.add_permits(grow);
        } else if next < previous {
            let shrink = previous - next;
            let forgotten = self.semaphore.forget_permits(shrink);
            self.debt.fetch_add(shrink - forgotten, Ordering::AcqRel);
        }
    }

    /// Takes one unit of debt if there is any.
    fn take_debt(&self) -> bool {
        self.debt.fetch_update(Ordering::AcqRel, Ordering::Acquire, |debt| debt.checked_sub(1)).is_ok()
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

    fn check_cost(&self, cost: u64) -> Result<(), AcquireError> {
        if cost == 0 {
            return Err(AcquireError::ZeroCost);
        }
        for spec in &self.config.budgets {
            let spent = cost.saturating_mul(spec.cost);
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
    fn readiness(&mut self, cost: u64, now: Instant, shared: &Shared) -> Readiness {
        if let Err(err) = self.check_cost(cost) {
            return Readiness::Never(err);
        }
        if let Some((until, reason)) = &self.pause
            && *until > now
        {
            return Readiness::At(*until, Blocked::Paused { reason: reason.clone(), wait: *until - now });
        }
        let now_ns = self.nanos(now);
        let mut latest: Option<(u64, usize)> = None;
        for (index, (spec, budget)) in self.config.budgets.iter().zip(self.budgets.iter_mut()).enumerate() {
            let ready = budget.ready_at(cost * spec.cost, now_ns);
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
        if shared.semaphore.available_permits() == 0 {
            return Readiness::Concurrency;
        }
        Readiness::Now
    }

    /// Spends `cost` in every budget and takes a concurrency slot. The caller checked readiness.
    fn admit(&mut self, cost: u64, now: Instant, shared: &Arc<Shared>) -> Permit {
        let now_ns = self.nanos(now);
        for (spec, budget) in self.config.budgets.iter().zip(self.budgets.iter_mut()) {
            budget.consume(cost * spec.cost, now_ns);
        }
        // Readiness saw a free slot under this lock, and only admission (under this lock) takes slots.
        let slot = Arc::clone(&shared.semaphore).try_acquire_owned().ok();
        shared.in_flight.fetch_add(1, Ordering::AcqRel);
        Permit { shared: Arc::clone(shared), slot }
    }

    fn concurrency_blocked(&self) -> Blocked {
        Blocked::Concurrency { limit: self.config.concurrency.unwrap_or(UNCAPPED) }
    }

    /// What blocks the head request now, if there is one.
    fn head_blocked(&mut self, now: Instant, shared: &Shared) -> Option<Blocked> {
        let ticket = self.head(now)?;
        let cost = self.waiters.get(ticket.0)?.cost;
        Some(match self.readiness(cost, now, shared) {
            Readiness::Now | Readiness::Never(_) => Blocked::Ready,
            Readiness::At(_, blocked) => blocked,
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

    fn enqueue(&mut self, priority: Priority, cost: u64, now: Instant, waker: &Waker, shared: &Shared) -> Ticket {
        let id = self.next_id;
        self.next_id += 1;
        let slot = self.waiters.insert(Waiter { id, priority, cost, enqueued: now, waker: Some(waker.clone()) });
        self.lanes.push(priority, (slot, id));
        // Pairs with the fence in `Permit::drop`: either it sees this waiter, or this
        // waiter's next readiness check sees the slot it returned.
        shared.queued.fetch_add(1, Ordering::SeqCst);
        fence(Ordering::SeqCst);
        (slot, id)
    }

    /// Takes a waiter out of the queue (admitted or cancelled).
    fn dequeue(&mut self, (slot, id): Ticket, at_front: bool, shared: &Shared) {
        if !Self::is_live(&self.waiters)((slot, id)) {
            return;
        }
        let waiter = self.waiters.remove(slot);
        if at_front {
            self.lanes.pop_front(waiter.priority);
        } else {
            self.lanes.forget(waiter.priority, Self::is_live(&self.waiters));
        }
        shared.queued.fetch_sub(1, Ordering::AcqRel);
    }
}

/// The future returned by [`Limiter::acquire`]. Resolves to a [`Permit`].
#[derive(Debug)]
#[must_use = "a limiter admits nothing until the acquisition is awaited"]
pub struct Acquire {
    shared: Arc<Shared>,
    priority: Priority,
    cost: u64,
    ticket: Option<Ticket>,
    /// Armed only while this request is the head and waits for time to pass.
    sleep: Option<Pin<Box<Sleep>>>,
}

impl Future for Acquire {
    type Output = Result<Permit, AcquireError>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        let this = self.get_mut();
        let shared = Arc::clone(&this.shared);
        let mut now = Instant::now();
        let mut state = shared.state.lock();
        let ticket = match this.ticket {
            Some(ticket) => ticket,
            None => {
                if state.lanes.total() == 0 {
                    match state.readiness(this.cost, now, &shared) {
                        Readiness::Now => return Poll::Ready(Ok(state.admit(this.cost, now, &shared))),
                        Readiness::Never(err) => return Poll::Ready(Err(err)),
                        Readiness::At(..) | Readiness::Concurrency => {}
                    }
                } else if let Err(err) = state.check_cost(this.cost) {
                    return Poll::Ready(Err(err));
                }
                let ticket = state.enqueue(this.priority, this.cost, now, cx.waker(), &shared);
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
            match state.readiness(this.cost, now, &shared) {
                Readiness::Now => {
                    state.dequeue(ticket, true, &shared);
                    this.ticket = None;
                    this.sleep = None;
                    let permit = state.admit(this.cost, now, &shared);
                    state.wake_head(now);
                    return Poll::Ready(Ok(permit));
                }
                Readiness::Never(err) => {
                    state.dequeue(ticket, true, &shared);
                    this.ticket = None;
                    state.wake_head(now);
                    return Poll::Ready(Err(err));
                }
                Readiness::Concurrency => {
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
            let mut state = self.shared.state.lock();
            state.dequeue(ticket, false, &self.shared);
            state.wake_head(Instant::now());
        }
    }
}

/// Admission to send one request. Holds a concurrency slot until dropped, however the
/// request ends: success, error, panic or cancellation.
#[derive(Debug)]
#[must_use = "dropping a permit at once ends the request it admitted"]
pub struct Permit {
    shared: Arc<Shared>,
    slot: Option<OwnedSemaphorePermit>,
}

impl Permit {
    /// The key of the limiter that admitted this request.
    pub fn key(&self) -> &str {
        &self.shared.key
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        self.shared.in_flight.fetch_sub(1, Ordering::AcqRel);
        if let Some(slot) = self.slot.take() {
            if self.shared.take_debt() {
                slot.forget();
            } else {
                drop(slot);
            }
        }
        // Only a returned slot can unblock a waiter, and only when there is a cap. Set before
        // any waiter can block on concurrency, so a stale `false` here never loses a wake-up.
        if !self.shared.capped.load(Ordering::SeqCst) {
            return;
        }
        fence(Ordering::SeqCst);
        if self.shared.queued.load(Ordering::SeqCst) > 0 {
            self.shared.state.lock().wake_head(Instant::now());
        }
    }
}
