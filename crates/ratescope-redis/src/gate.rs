//! `SharedGate`: a key's budgets decided in a shared store, waited for exactly, with a fail policy for when the store is away.
//!
//! A request first passes its key's local limiter (lanes, concurrency), then the gate: one
//! atomic decision in Redis over all the key's budgets. Denied, it sleeps exactly the
//! retry-after Redis computed, then asks again; only one request per key and process asks
//! at a time (the others queue behind it in order), so a process never polls Redis in a loop.
//!
//! When Redis cannot answer, the key's [`FailPolicy`] acts: wait until Redis is back, let the
//! request through (counted), or pace it by an in-process share of the budgets. While the
//! store is degraded it is asked again at most every [`PROBE_INTERVAL`], so a dead server
//! costs one timeout per interval rather than one per request.
//!
//! An admission by the store comes with its [`Reservation`]; [`SharedGate::settle`] corrects
//! it to the actual cost in one round trip. A settlement that cannot reach the store is
//! counted and logged, never waited for past the command timeout: the estimate then stands.

use std::fmt;
use std::str::FromStr;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use parking_lot::{Mutex, RwLock};
use tokio::sync::watch;
use tokio::time::Instant;

use super::{RedisStore, Reservation, Settled, SharedSpec, StoreError};
use ratescope_engine::{BudgetKind, BudgetSpec, Cost, Limiter, LimiterConfig, Priority, Rate, Unit};

/// How often a degraded store is asked again.
pub const PROBE_INTERVAL: Duration = Duration::from_millis(500);

/// The most instances a local fallback may divide a budget by.
pub const MAX_INSTANCES: u32 = 10_000;

/// The largest token lease: requests' worth taken from the store in one round trip.
pub const MAX_LEASE: u64 = 1_000;

/// The longest a denied request sleeps on a key with a budget of another unit than requests
/// before asking again: another process's settlement may refund units sooner than the
/// retry-after the store computed (which counted that process's estimate).
pub const REFUND_RECHECK: Duration = Duration::from_millis(250);

/// What a gate does when the store cannot answer.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum FailPolicy {
    /// Wait until the store answers again: never over the shared budget, but stalls while it is down.
    #[default]
    Closed,
    /// Let requests through unchecked (each is counted): keeps working, may overrun.
    Open,
    /// Pace by an in-process budget: each budget divided by the expected number of instances.
    Local {
        /// How many processes share the budget (at least 1).
        instances: u32,
    },
}

impl FailPolicy {
    /// The policy's name as written in profiles and on the command line.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Closed => "fail-closed",
            Self::Open => "fail-open",
            Self::Local { .. } => "local",
        }
    }

    /// Refuses a local fallback over zero or absurdly many instances.
    pub fn validate(&self) -> Result<(), StoreError> {
        if let Self::Local { instances } = *self
            && !(1..=MAX_INSTANCES).contains(&instances)
        {
            return Err(StoreError::InvalidSettings(format!(
                "a local fallback divides the budget between 1 and {MAX_INSTANCES} instances, not {instances}"
            )));
        }
        Ok(())
    }
}

impl fmt::Display for FailPolicy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Local { instances } => write!(f, "local (budget / {instances})"),
            other => f.write_str(other.name()),
        }
    }
}

impl FromStr for FailPolicy {
    type Err = StoreError;

    /// `fail-closed` (or `closed`), `fail-open` (or `open`), `local` or `local/N` (N instances, default 2).
    fn from_str(text: &str) -> Result<Self, StoreError> {
        let text = text.trim().to_ascii_lowercase();
        let policy = match text.as_str() {
            "fail-closed" | "closed" => Self::Closed,
            "fail-open" | "open" => Self::Open,
            "local" => Self::Local { instances: 2 },
            other => match other.strip_prefix("local/") {
                Some(count) => Self::Local {
                    instances: count.trim().parse().map_err(|_| {
                        StoreError::InvalidSettings(format!("'{count}' is not a number of instances (local/N)"))
                    })?,
                },
                None => {
                    return Err(StoreError::InvalidSettings(format!(
                        "'{text}' is not a fail policy: use fail-closed, fail-open, local or local/N"
                    )));
                }
            },
        };
        policy.validate()?;
        Ok(policy)
    }
}

/// Where the shared store stands, as events, the CLI summary and the app show it.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum StoreState {
    /// Not asked yet.
    #[default]
    Idle,
    /// The last decision came from the store.
    Connected,
    /// The store could not answer; `policy` is acting since the failure `error`.
    Degraded {
        /// The fail policy acting meanwhile.
        policy: FailPolicy,
        /// The failure that started it.
        error: String,
    },
}

impl fmt::Display for StoreState {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Idle => f.write_str("not used yet"),
            Self::Connected => f.write_str("connected"),
            Self::Degraded { policy, error } => write!(f, "degraded, {policy} acting ({error})"),
        }
    }
}

/// How a request got through the gate.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum AdmittedVia {
    /// The shared store admitted it.
    Store,
    /// The store was away and the policy is fail-open: let through unchecked.
    FailOpen,
    /// The store was away and the local fallback budget admitted it.
    LocalFallback,
}

impl AdmittedVia {
    /// A short name for summaries: `store`, `fail-open` or `local fallback`.
    pub fn name(&self) -> &'static str {
        match self {
            Self::Store => "store",
            Self::FailOpen => "fail-open",
            Self::LocalFallback => "local fallback",
        }
    }
}

/// One request through the gate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedAdmission {
    /// Who admitted it.
    pub via: AdmittedVia,
    /// Time spent in the gate (waiting for the turn, the store's retry-after, or the fallback).
    pub waited: Duration,
    /// What the store said is left (after this request), when the store decided.
    pub remaining: Option<u64>,
    /// The store's state when this request changed it (connected again, or degraded).
    pub state_change: Option<StoreState>,
    /// What the store reserved for this request alone, to [`settle`](SharedGate::settle) once
    /// the actual cost is known. `None` when the store did not decide it alone: fail-open, the
    /// local fallback, a lease (then the key counts requests only, known up front).
    pub reservation: Option<Reservation>,
}

/// What became of one settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SharedSettlement {
    /// What the store did; `None` when it could not be asked (away, or degraded and not yet due
    /// for a probe): the reservation then keeps counting what it counted before.
    pub settled: Option<Settled>,
    /// The store's state when this settlement changed it (connected again, or degraded).
    pub state_change: Option<StoreState>,
}

/// Counters of everything the gates of one store did; read them with [`StoreHealth::counts`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, serde::Serialize)]
pub struct SharedCounts {
    /// Round trips to the store that got an answer.
    pub round_trips: u64,
    /// Requests the store admitted.
    pub admitted: u64,
    /// Answers that said "not yet" (each followed by exactly one sleep).
    pub denied: u64,
    /// Asks that failed because the store was away.
    pub unavailable: u64,
    /// Requests let through unchecked by fail-open.
    pub failed_open: u64,
    /// Requests paced by the local fallback.
    pub local_fallback: u64,
    /// Requests admitted from a token lease held in this process (no round trip); also in `admitted`.
    pub leased: u64,
    /// Times the store answered again after being away: a restart, a reconnect, or a failover
    /// to a promoted replica. Each one is also a `StoreState` change to connected.
    pub recoveries: u64,
    /// Settlements the store applied (each one round trip).
    pub settled: u64,
    /// Settlements that could not reach the store: those requests keep counting their estimate.
    pub settles_lost: u64,
}

impl fmt::Display for SharedCounts {
    /// `12 admitted by the store, 3 denials waited out, 15 round trips; 0 store failures, ...`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{} admitted by the store ({} from leases), {} denials waited out, {} round trips; {} store failures, {} recoveries, {} let through open, {} paced locally",
            self.admitted,
            self.leased,
            self.denied,
            self.round_trips,
            self.unavailable,
            self.recoveries,
            self.failed_open,
            self.local_fallback
        )?;
        if self.settled + self.settles_lost > 0 {
            write!(f, "; {} settled, {} settlements lost", self.settled, self.settles_lost)?;
        }
        Ok(())
    }
}

/// The state of one store as seen by all its gates, and their counters. Cheap to share.
#[derive(Debug, Default)]
pub struct StoreHealth {
    state: watch::Sender<StoreState>,
    last_failure: Mutex<Option<Instant>>,
    round_trips: AtomicU64,
    admitted: AtomicU64,
    denied: AtomicU64,
    unavailable: AtomicU64,
    failed_open: AtomicU64,
    local_fallback: AtomicU64,
    recoveries: AtomicU64,
    leased: AtomicU64,
    settled: AtomicU64,
    settles_lost: AtomicU64,
}

impl StoreHealth {
    /// Counts at zero, state idle.
    pub fn new() -> Arc<Self> {
        Arc::new(Self::default())
    }

    /// The current state.
    pub fn state(&self) -> StoreState {
        self.state.borrow().clone()
    }

    /// A receiver that sees every change of state (for the app and the CLI).
    pub fn subscribe(&self) -> watch::Receiver<StoreState> {
        self.state.subscribe()
    }

    /// Everything counted so far.
    pub fn counts(&self) -> SharedCounts {
        let load = |counter: &AtomicU64| counter.load(Ordering::Relaxed);
        SharedCounts {
            round_trips: load(&self.round_trips),
            admitted: load(&self.admitted),
            denied: load(&self.denied),
            unavailable: load(&self.unavailable),
            failed_open: load(&self.failed_open),
            local_fallback: load(&self.local_fallback),
            recoveries: load(&self.recoveries),
            leased: load(&self.leased),
            settled: load(&self.settled),
            settles_lost: load(&self.settles_lost),
        }
    }

    /// When degraded and probed recently: the instant the store may be asked again (else ask now).
    fn degraded_until(&self, now: Instant) -> Option<Instant> {
        let last_failure = *self.last_failure.lock();
        match last_failure {
            Some(at) if now < at + PROBE_INTERVAL => Some(at + PROBE_INTERVAL),
            _ => None,
        }
    }

    /// Counts an answer; true when it changed the state (to connected).
    fn answered(&self) -> bool {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        *self.last_failure.lock() = None;
        self.state.send_if_modified(|state| {
            let changed = *state != StoreState::Connected;
            let recovered = matches!(state, StoreState::Degraded { .. });
            *state = StoreState::Connected;
            if recovered {
                self.recoveries.fetch_add(1, Ordering::Relaxed);
                tracing::info!("shared budget store answers again");
            }
            changed
        })
    }

    /// Counts a failure; true when it changed the state (to degraded with `policy` acting).
    fn failed(&self, error: &StoreError, policy: FailPolicy) -> bool {
        self.unavailable.fetch_add(1, Ordering::Relaxed);
        *self.last_failure.lock() = Some(Instant::now());
        let error = error.to_string();
        tracing::warn!(%policy, %error, "shared budget store unavailable");
        self.state.send_if_modified(|state| {
            let changed = !matches!(state, StoreState::Degraded { policy: acting, .. } if *acting == policy);
            if changed {
                *state = StoreState::Degraded { policy, error };
            }
            changed
        })
    }
}

/// The shared budgets of one key, decided in a store. Cheap to clone.
#[derive(Debug, Clone)]
pub struct SharedGate {
    inner: Arc<GateInner>,
}

#[derive(Debug)]
struct GateInner {
    store: RedisStore,
    health: Arc<StoreHealth>,
    key: String,
    policy: FailPolicy,
    /// Replaced whole on reconfiguration, so a decision takes a cheap snapshot (an `Arc`).
    budgets: RwLock<Arc<Budgets>>,
    /// One asker per key at a time; the others wait here in order.
    turn: tokio::sync::Mutex<()>,
    /// Requests' worth taken per round trip (1: no lease) and how long the rest stays usable.
    lease: (u64, Duration),
    /// What is left of the last lease (in units of request cost) and until when it may be used.
    held: Mutex<(u64, Instant)>,
}

#[derive(Debug)]
struct Budgets {
    shared: Vec<SharedSpec>,
    /// Whether every budget counts requests: only then may a lease take several requests'
    /// worth at once (another unit's amount differs request by request and is settled).
    leasable: bool,
    /// The in-process share used by a local fallback.
    fallback: Option<Limiter>,
}

impl SharedGate {
    /// A gate deciding `budgets` for `key` (the name every sharing process uses) in `store`.
    pub fn new(
        store: RedisStore,
        health: Arc<StoreHealth>,
        key: impl Into<String>,
        budgets: &[BudgetSpec],
        policy: FailPolicy,
    ) -> Result<Self, StoreError> {
        let key = key.into();
        if key.is_empty() || key.len() > 200 || key.contains(['{', '}']) {
            return Err(StoreError::InvalidSettings(format!(
                "the shared key {key:?} must be 1 to 200 characters without braces"
            )));
        }
        policy.validate()?;
        let budgets = Budgets::new(&key, budgets, policy)?;
        Ok(Self {
            inner: Arc::new(GateInner {
                store,
                health,
                key,
                policy,
                budgets: RwLock::new(Arc::new(budgets)),
                turn: tokio::sync::Mutex::new(()),
                lease: (1, Duration::ZERO),
                held: Mutex::new((0, Instant::now())),
            }),
        })
    }

    /// Takes `size` requests' worth from the store per round trip and admits the rest from this
    /// process for up to `hold` (then what is left is dropped, unused): a hot key costs a round
    /// trip per `size` requests instead of per request.
    ///
    /// The trade: tokens are spent in the store when leased, not when used, so a process may
    /// send up to `size - 1` requests whose tokens were counted earlier. With P processes
    /// leasing, any window of a sliding-window budget sees at most `limit + P·(size − 1)`
    /// requests, and a bucket at most `capacity + rate·t + P·(size − 1)` in any span t. The
    /// total never exceeds what the store admitted; unused leases only under-spend. A lease
    /// larger than a budget holds, or than what is left, falls back to asking for one request.
    /// A key with a budget of another unit than requests never leases: each request's amount
    /// is its own and is settled later, so every request asks the store. Call before the gate
    /// is cloned.
    pub fn with_lease(mut self, size: u64, hold: Duration) -> Result<Self, StoreError> {
        if !(1..=MAX_LEASE).contains(&size) || hold.is_zero() || hold > Duration::from_secs(3600) {
            return Err(StoreError::InvalidSettings(format!(
                "a token lease takes 1 to {MAX_LEASE} requests' worth, held above zero and at most an hour (not {size} for {hold:?})"
            )));
        }
        let inner = Arc::get_mut(&mut self.inner)
            .ok_or_else(|| StoreError::InvalidSettings("a lease is set before the gate is shared".into()))?;
        inner.lease = (size, hold);
        Ok(self)
    }

    /// The shared key's name.
    pub fn key(&self) -> &str {
        &self.inner.key
    }

    /// The policy acting while the store is away.
    pub fn policy(&self) -> FailPolicy {
        self.inner.policy
    }

    /// The store's state and counts, shared with whoever reports them.
    pub fn health(&self) -> &Arc<StoreHealth> {
        &self.inner.health
    }

    /// The budgets as they are decided in the store.
    pub fn budgets(&self) -> Vec<SharedSpec> {
        self.inner.budgets.read().shared.clone()
    }

    /// The most of `unit` one request is counted as spending in the store: the largest capacity,
    /// in `unit`, of its budgets that count it (as `LimiterConfig::settle_bound` in-process);
    /// `None` when none counts it.
    pub fn settle_bound(&self, unit: &Unit) -> Option<u64> {
        let budgets = self.inner.budgets.read();
        budgets
            .shared
            .iter()
            .filter(|spec| spec.unit == *unit)
            .map(|spec| spec.budget.capacity() / spec.cost.max(1))
            .max()
    }

    /// Changes the budgets while requests wait; the next decision uses the new ones.
    pub fn reconfigure(&self, budgets: &[BudgetSpec]) -> Result<(), StoreError> {
        let mut next = Budgets::new(&self.inner.key, budgets, self.inner.policy)?;
        let mut current = self.inner.budgets.write();
        // Keep the fallback's state (what it already admitted) across the change.
        if let (Some(limiter), Some(fresh)) = (&current.fallback, &next.fallback) {
            limiter.reconfigure(fresh.config())?;
            next.fallback = Some(limiter.clone());
        }
        *current = Arc::new(next);
        // A lease was counted against the old budgets: drop it.
        self.inner.held.lock().0 = 0;
        Ok(())
    }

    /// Waits until the shared budgets admit `cost` requests (or the fail policy lets them
    /// through), and spends them: [`admit_cost`](Self::admit_cost) for a request of one unit.
    pub async fn admit(&self, cost: u64) -> Result<SharedAdmission, StoreError> {
        self.admit_cost(&Cost::requests(cost)).await
    }

    /// Waits until the shared budgets admit `cost` (each budget its own unit's amount, an
    /// estimate where the actual is known later), or the fail policy lets it through, and
    /// spends it.
    ///
    /// Errors only for a cost the budgets can never hold or a store that answers with an error;
    /// an unreachable store is the fail policy's business. Dropping the future gives up the
    /// turn; a decision already on its way to Redis may still have been spent.
    pub async fn admit_cost(&self, cost: &Cost) -> Result<SharedAdmission, StoreError> {
        let inner = &*self.inner;
        let started = Instant::now();
        let budgets = Arc::clone(&inner.budgets.read());
        let Budgets { shared, leasable, fallback } = &*budgets;
        if shared.is_empty() {
            return Ok(SharedAdmission {
                via: AdmittedVia::Store,
                waited: Duration::ZERO,
                remaining: None,
                state_change: None,
                reservation: None,
            });
        }
        for spec in shared {
            spec.spend(cost)?;
        }
        let _turn = inner.turn.lock().await;
        let mut changed = false;
        let admitted = |via, remaining, changed: bool, reservation| SharedAdmission {
            via,
            waited: started.elapsed(),
            remaining,
            state_change: changed.then(|| inner.health.state()),
            reservation,
        };
        // A lease counts requests: only a key whose budgets all count requests takes one.
        let requests = cost.requests;
        if *leasable && inner.take_held(requests) {
            return Ok(admitted(AdmittedVia::Store, None, false, None));
        }
        let hold = inner.lease.1;
        let mut ask = if *leasable { inner.lease_ask(shared, requests) } else { requests };
        loop {
            let retry_at = inner.health.degraded_until(Instant::now());
            if retry_at.is_none() {
                let asked = if ask == requests { cost.clone() } else { Cost::requests(ask) };
                match inner.store.reserve_all(&inner.key, shared, &asked).await {
                    Ok((decision, reservation)) => {
                        changed |= inner.health.answered();
                        if decision.allowed {
                            inner.health.admitted.fetch_add(1, Ordering::Relaxed);
                            *inner.held.lock() = (ask - requests, Instant::now() + hold);
                            // A lease's reservation covers other requests too: not this one's to settle.
                            let reservation = reservation.filter(|_| ask == requests);
                            return Ok(admitted(AdmittedVia::Store, Some(decision.remaining), changed, reservation));
                        }
                        if ask > requests {
                            // Not a whole lease left: ask for this request alone, at once.
                            ask = requests;
                            continue;
                        }
                        inner.health.denied.fetch_add(1, Ordering::Relaxed);
                        // Redis computed exactly when this cost fits: sleep that, then ask once
                        // more (sooner where a settlement elsewhere may refund units).
                        let wait = decision.retry_after.unwrap_or(Duration::from_micros(1));
                        tokio::time::sleep(if *leasable { wait } else { wait.min(REFUND_RECHECK) }).await;
                        continue;
                    }
                    Err(err) if err.is_unavailable() => changed |= inner.health.failed(&err, inner.policy),
                    Err(err) => return Err(err),
                }
            }
            if let Some(via) = inner.without_store(fallback.as_ref(), cost, retry_at).await? {
                return Ok(admitted(via, None, changed, None));
            }
        }
    }

    /// Corrects what an admission reserved in the store to its `actual` cost, in one round trip
    /// (nothing is sent when nothing changes). Never waits past the store's command timeout:
    /// a store that is away (or degraded and not yet due for a probe) loses the settlement,
    /// which is counted and logged, and the reservation keeps counting what it did. Errors only
    /// when the store answers with an error.
    pub async fn settle(&self, reservation: &mut Reservation, actual: &Cost) -> Result<SharedSettlement, StoreError> {
        let inner = &*self.inner;
        let health = &inner.health;
        let lost = |state_change| {
            health.settles_lost.fetch_add(1, Ordering::Relaxed);
            Ok(SharedSettlement { settled: None, state_change })
        };
        if health.degraded_until(Instant::now()).is_some() {
            tracing::warn!(key = %inner.key, "shared budget store degraded: a settlement is lost, its estimate stands");
            return lost(None);
        }
        match inner.store.settle(reservation, actual).await {
            Ok(Settled::Unchanged) => Ok(SharedSettlement { settled: Some(Settled::Unchanged), state_change: None }),
            Ok(settled) => {
                let changed = health.answered();
                health.settled.fetch_add(1, Ordering::Relaxed);
                Ok(SharedSettlement { settled: Some(settled), state_change: changed.then(|| health.state()) })
            }
            Err(err) if err.is_unavailable() => {
                let changed = health.failed(&err, inner.policy);
                tracing::warn!(key = %inner.key, "a settlement did not reach the shared budget store: its estimate stands");
                lost(changed.then(|| health.state()))
            }
            Err(err) => Err(err),
        }
    }
}

impl GateInner {
    /// What the fail policy does while the store cannot answer (until `retry_at`, the next
    /// probe, when degraded): let the request through (`Some`), or wait for the next probe
    /// and have the store asked again (`None`).
    async fn without_store(
        &self,
        fallback: Option<&Limiter>,
        cost: &Cost,
        retry_at: Option<Instant>,
    ) -> Result<Option<AdmittedVia>, StoreError> {
        let next_probe = retry_at.unwrap_or_else(|| Instant::now() + PROBE_INTERVAL);
        match (self.policy, fallback) {
            (FailPolicy::Open, _) => {
                self.health.failed_open.fetch_add(1, Ordering::Relaxed);
                Ok(Some(AdmittedVia::FailOpen))
            }
            (FailPolicy::Local { .. }, Some(limiter)) => {
                // Wait for the local share only until the next probe: a request that has
                // spent this process's share must not sit out a whole window while the
                // store (after a restart or a failover) could already answer it.
                let acquire = limiter.acquire_cost(Priority::Normal, cost.clone());
                let Ok(permit) = tokio::time::timeout_at(next_probe, acquire).await else {
                    return Ok(None);
                };
                // The fallback holds budgets only, so its permit is released at once.
                drop(permit?);
                self.health.local_fallback.fetch_add(1, Ordering::Relaxed);
                Ok(Some(AdmittedVia::LocalFallback))
            }
            _ => {
                // Fail-closed: wait for the next probe and ask again.
                tokio::time::sleep_until(next_probe).await;
                Ok(None)
            }
        }
    }

    /// What one decision asks for: a lease of `size` requests' worth, unless a budget could
    /// never hold that much (then the request alone).
    fn lease_ask(&self, shared: &[SharedSpec], cost: u64) -> u64 {
        let ask = cost.saturating_mul(self.lease.0);
        if ask > cost && shared.iter().any(|spec| spec.units(ask).is_err()) { cost } else { ask }
    }

    /// Admits `cost` from the lease this process holds, if enough of it is left and still valid.
    fn take_held(&self, cost: u64) -> bool {
        let mut held = self.held.lock();
        if held.0 < cost || Instant::now() >= held.1 {
            return false;
        }
        held.0 -= cost;
        self.health.admitted.fetch_add(1, Ordering::Relaxed);
        self.health.leased.fetch_add(1, Ordering::Relaxed);
        true
    }
}

impl Budgets {
    fn new(key: &str, budgets: &[BudgetSpec], policy: FailPolicy) -> Result<Self, StoreError> {
        let shared = budgets.iter().map(SharedSpec::try_from).collect::<Result<Vec<_>, _>>()?;
        let fallback = match policy {
            FailPolicy::Local { instances } if !budgets.is_empty() => {
                let mut config = LimiterConfig::new().with_starvation_guard(None);
                for spec in budgets {
                    config = config.with_budget(local_share(spec, instances)?);
                }
                let limiter = Limiter::new(format!("{key} (local fallback)"), config)?;
                Some(limiter)
            }
            _ => None,
        };
        let leasable = shared.iter().all(|spec| spec.unit == Unit::Requests);
        Ok(Self { shared, leasable, fallback })
    }
}

/// One instance's share of `spec` when `instances` processes split it: sizes divided (rounded
/// down, never below what one request costs), a bucket's refill divided exactly.
pub fn local_share(spec: &BudgetSpec, instances: u32) -> Result<BudgetSpec, StoreError> {
    let instances = u64::from(instances.max(1));
    let floor = |amount: u64| (amount / instances).max(spec.cost).max(1);
    let kind = match spec.kind {
        BudgetKind::TokenBucket { capacity, refill } => {
            let per = refill.per().checked_mul(u32::try_from(instances).unwrap_or(u32::MAX)).ok_or_else(|| {
                StoreError::InvalidSettings(format!("{} divided by {instances} instances is too slow", spec.name))
            })?;
            BudgetKind::TokenBucket { capacity: floor(capacity), refill: Rate::new(refill.amount(), per)? }
        }
        BudgetKind::SlidingWindow { limit, window } => BudgetKind::SlidingWindow { limit: floor(limit), window },
    };
    let share = BudgetSpec { name: spec.name.clone(), kind, unit: spec.unit.clone(), cost: spec.cost };
    share.validate()?;
    Ok(share)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn policies_parse_and_refuse_nonsense() {
        assert_eq!("fail-closed".parse::<FailPolicy>().unwrap(), FailPolicy::Closed);
        assert_eq!("Open".parse::<FailPolicy>().unwrap(), FailPolicy::Open);
        assert_eq!("local".parse::<FailPolicy>().unwrap(), FailPolicy::Local { instances: 2 });
        assert_eq!("local/3".parse::<FailPolicy>().unwrap(), FailPolicy::Local { instances: 3 });
        for bad in ["local/0", "local/-1", "local/x", "local/99999999", "maybe", ""] {
            assert!(bad.parse::<FailPolicy>().is_err(), "{bad} accepted");
        }
    }

    #[test]
    fn a_local_share_divides_sizes_and_rates() {
        let rate = Rate::new(10, Duration::from_secs(1)).unwrap();
        let bucket = BudgetSpec::token_bucket("rate", 9, rate).unwrap();
        let share = local_share(&bucket, 3).unwrap();
        let BudgetKind::TokenBucket { capacity, refill } = share.kind else { panic!("not a bucket") };
        assert_eq!(capacity, 3);
        assert!((refill.per_second() - 10.0 / 3.0).abs() < 1e-9, "{}", refill.per_second());

        let window = BudgetSpec::sliding_window("hour", 5, Duration::from_secs(3600)).unwrap();
        let BudgetKind::SlidingWindow { limit, .. } = local_share(&window, 10).unwrap().kind else {
            panic!("not a window")
        };
        assert_eq!(limit, 1, "never below one request");
        let costly = window.with_cost(4).unwrap();
        assert_eq!(local_share(&costly, 10).unwrap().capacity(), 4, "never below one request's cost");
    }

    #[test]
    fn a_share_the_engine_refuses_is_its_limits_error_not_a_settings_string() {
        let yearly = Rate::new(1, Duration::from_secs(4 * 365 * 86_400)).unwrap();
        let slow = BudgetSpec::token_bucket("slow", 5, yearly).unwrap();
        let err = local_share(&slow, 3).unwrap_err();
        assert!(matches!(err, StoreError::Limits(ratescope_engine::ConfigError::DurationTooLong(_))), "{err}");
        assert!(!err.is_unavailable(), "a refusal is not the store being away");
    }
}
