//! `Telemetry`: folds client events and limiter snapshots into chart series and a bounded request log.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};

use http::HeaderMap;
use tokio::time::Instant;

use super::{OutcomeRates, RetryRates, Series};
use crate::engine::{Snapshot, Unit};
use crate::http::{Event, EventKind, RateLimitInfo};
use crate::store::StoreState;

/// How far back (in log rows) a failure looks for the response row of its last attempt.
const FAILURE_LOOKBACK: usize = 4096;
/// How many adaptive-mode notes the recorder keeps.
const ADAPTIVE_NOTES: usize = 64;

/// One attempt in the request log.
#[derive(Debug, Clone, PartialEq)]
pub struct LogRow {
    /// Seconds since the recording started.
    pub at: f64,
    /// The request it belongs to.
    pub request_id: u64,
    /// The attempt, from 1.
    pub attempt: u32,
    /// The limiter key that paced it, if any.
    pub key: Option<String>,
    /// The method.
    pub method: String,
    /// The path, without the query.
    pub path: String,
    /// The status; `None` until it answers or when it failed.
    pub status: Option<u16>,
    /// Send to response, once answered.
    pub service_ms: Option<f64>,
    /// Time in the limiter before it was sent.
    pub queue_wait_ms: f64,
    /// What the server said is left of its tightest budget.
    pub remaining: Option<f64>,
    /// The server's `Retry-After`, in seconds.
    pub retry_after_s: Option<f64>,
    /// The transport error, when it failed.
    pub error: Option<String>,
    /// The response's headers (cookie values masked).
    pub headers: HeaderMap,
    /// What those headers say about rate limits.
    pub info: Option<RateLimitInfo>,
}

/// What is known of an attempt before its response.
#[derive(Debug, Clone, Default)]
struct Pending {
    queue_wait_ms: f64,
    method: String,
    path: String,
}

/// The parts of a `Response` event the recorder keeps.
struct ResponseFields<'a> {
    attempt: u32,
    status: u16,
    service_time: std::time::Duration,
    info: &'a crate::http::RateLimitInfo,
    headers: &'a HeaderMap,
}

/// Everything the charts and the request log show, bounded in memory.
#[derive(Debug, Clone)]
pub struct Telemetry {
    origin: Instant,
    capacity: usize,
    log_capacity: usize,
    /// Client-side tokens per `key/budget`.
    pub tokens: BTreeMap<String, Series>,
    /// Each `key/budget`'s capacity (a bucket's burst, a window's limit), newest seen.
    pub token_capacity: BTreeMap<String, f64>,
    /// What the server reported remaining per budget name.
    pub server_remaining: BTreeMap<String, Series>,
    /// The limit the server reported per budget name, newest seen.
    pub server_limit: BTreeMap<String, f64>,
    /// The unit of every client budget series that counts something else than requests.
    pub units: BTreeMap<String, String>,
    /// The unit of every server budget that counts something else than requests, by name.
    pub server_units: BTreeMap<String, String>,
    /// Requests waiting in the limiters, over time.
    pub queued: Series,
    /// Requests in flight, over time.
    pub in_flight: Series,
    /// Requests started and not yet finished, counted from the client's events (so it is
    /// known without a limiter too): queued, in flight or waiting to retry.
    pub open: Series,
    /// Responses per second: succeeded, 429, other errors.
    pub outcomes: OutcomeRates,
    /// Retries scheduled per second, by the cause of the attempt before.
    pub retries: RetryRates,
    /// Send to response of each attempt, in milliseconds.
    pub service_ms: Series,
    /// First queued to final response of each request, in milliseconds.
    pub total_ms: Series,
    /// The newest attempts, oldest first (bounded).
    pub log: VecDeque<LogRow>,
    /// The newest rate-limit information a server sent, and from which key.
    pub latest_server: Option<(Option<String>, RateLimitInfo)>,
    /// When the newest rate-limit information arrived, in seconds (its waits count from then).
    pub latest_server_at: f64,
    /// Client events lost because the recorder fell behind.
    pub events_dropped: u64,
    /// The shared budget store's latest state, when a key's budgets are shared.
    pub store_state: Option<StoreState>,
    /// Requests admitted by shared budgets, per way through (store, fail-open, local fallback).
    pub shared_admissions: BTreeMap<&'static str, u64>,
    /// What adaptive mode learned (scouting, windows, paces), newest last: (seconds, key, note).
    pub adaptive_notes: VecDeque<(f64, Option<String>, String)>,
    pending: HashMap<(u64, u32), Pending>,
    /// Requests started and not finished, with what was sent (a failure after a response
    /// still names its method and path).
    requests: HashMap<u64, Pending>,
    /// Requests whose last attempt got a response: the attempt, so a give-up after it marks
    /// that row rather than adding one with the same selection key.
    answered: HashSet<(u64, u32)>,
}

impl Telemetry {
    /// A recorder keeping `capacity` points per series and `log_capacity` log rows.
    pub fn new(origin: Instant, capacity: usize, log_capacity: usize) -> Self {
        Self {
            origin,
            capacity,
            log_capacity: log_capacity.max(1),
            tokens: BTreeMap::new(),
            token_capacity: BTreeMap::new(),
            server_remaining: BTreeMap::new(),
            server_limit: BTreeMap::new(),
            units: BTreeMap::new(),
            server_units: BTreeMap::new(),
            queued: Series::new(capacity),
            in_flight: Series::new(capacity),
            open: Series::new(capacity),
            outcomes: OutcomeRates::new(capacity.min(86_400)),
            retries: RetryRates::new(capacity.min(86_400)),
            service_ms: Series::new(capacity),
            total_ms: Series::new(capacity),
            log: VecDeque::new(),
            latest_server: None,
            latest_server_at: 0.0,
            events_dropped: 0,
            store_state: None,
            shared_admissions: BTreeMap::new(),
            adaptive_notes: VecDeque::new(),
            pending: HashMap::new(),
            requests: HashMap::new(),
            answered: HashSet::new(),
        }
    }

    /// Seconds since the origin.
    pub fn seconds(&self, at: Instant) -> f64 {
        at.saturating_duration_since(self.origin).as_secs_f64()
    }

    /// An empty recorder from `origin` keeping what this one keeps (points per series, log
    /// rows): the next run's, while this one may still be shared with a history of runs.
    pub fn fresh(&self, origin: Instant) -> Self {
        Self::new(origin, self.capacity, self.log_capacity)
    }

    /// Folds in one client event.
    pub fn ingest(&mut self, event: &Event) {
        let t = self.seconds(event.at);
        self.track_open(t, event);
        match &event.kind {
            EventKind::Admitted { attempt, queue_wait } => {
                self.pending.entry((event.request_id, *attempt)).or_default().queue_wait_ms =
                    queue_wait.as_secs_f64() * 1000.0;
            }
            EventKind::Sent { attempt, method, path } => {
                let pending = self.pending.entry((event.request_id, *attempt)).or_default();
                pending.method.clone_from(method);
                pending.path.clone_from(path);
                let request = self.requests.entry(event.request_id).or_default();
                request.method.clone_from(method);
                request.path.clone_from(path);
            }
            EventKind::Response { attempt, status, service_time, info, headers } => {
                let response =
                    ResponseFields { attempt: *attempt, status: *status, service_time: *service_time, info, headers };
                self.ingest_response(t, event, response);
            }
            EventKind::RetryScheduled { cause, .. } => self.retries.record_cause(t, cause),
            EventKind::Finished { total, .. } => self.total_ms.push(t, total.as_secs_f64() * 1000.0),
            EventKind::Failed { error, attempts } => self.ingest_failure(t, event, error, *attempts),
            EventKind::Lagged { dropped } => self.events_dropped += dropped,
            EventKind::Queued { .. }
            | EventKind::KeyPaused { .. }
            | EventKind::CacheHit { .. }
            | EventKind::Coalesced
            | EventKind::Settled { .. } => {}
            EventKind::SharedAdmitted { via, .. } => *self.shared_admissions.entry(via.name()).or_default() += 1,
            EventKind::StoreState { state } => self.store_state = Some(state.clone()),
            EventKind::Adaptive { note } => {
                if self.adaptive_notes.len() == ADAPTIVE_NOTES {
                    self.adaptive_notes.pop_front();
                }
                self.adaptive_notes.push_back((self.seconds(event.at), event.key.clone(), note.clone()));
            }
        }
        // A request cancelled mid-way never answers: keep the pending map bounded all the same.
        if self.pending.len() > self.log_capacity * 4 {
            self.pending.clear();
        }
        if self.requests.len() > self.log_capacity * 4 {
            self.requests.clear();
            self.answered.clear();
        }
    }

    /// Counts requests started and not yet ended, as a series.
    fn track_open(&mut self, t: f64, event: &Event) {
        let changed = match &event.kind {
            EventKind::Queued { .. } | EventKind::Admitted { .. } | EventKind::Sent { .. } => {
                match self.requests.entry(event.request_id) {
                    std::collections::hash_map::Entry::Vacant(entry) => {
                        entry.insert(Pending::default());
                        true
                    }
                    std::collections::hash_map::Entry::Occupied(_) => false,
                }
            }
            EventKind::Finished { .. } => {
                self.answered.retain(|(id, _)| *id != event.request_id);
                self.requests.remove(&event.request_id).is_some()
            }
            _ => false,
        };
        if changed {
            self.open.push(t, self.requests.len() as f64);
        }
    }

    /// A response: its service time, status, what the server says is left, and a log row.
    fn ingest_response(&mut self, t: f64, event: &Event, response: ResponseFields<'_>) {
        let service_ms = response.service_time.as_secs_f64() * 1000.0;
        self.service_ms.push(t, service_ms);
        self.outcomes.record(t, Some(response.status));
        for budget in &response.info.budgets {
            if let Some(remaining) = budget.remaining {
                let capacity = self.capacity;
                self.server_remaining
                    .entry(budget.name.clone())
                    .or_insert_with(|| Series::new(capacity))
                    .push(t, remaining);
                if let Some(limit) = budget.limit {
                    self.server_limit.insert(budget.name.clone(), limit);
                }
                if budget.unit != "requests" && self.server_units.get(&budget.name) != Some(&budget.unit) {
                    self.server_units.insert(budget.name.clone(), budget.unit.clone());
                }
            }
        }
        if !response.info.budgets.is_empty() || response.info.retry_after.is_some() {
            self.latest_server = Some((event.key.clone(), (*response.info).clone()));
            self.latest_server_at = t;
        }
        let pending = self.pending.remove(&(event.request_id, response.attempt)).unwrap_or_default();
        self.answered.retain(|(id, _)| *id != event.request_id);
        self.answered.insert((event.request_id, response.attempt));
        self.push_row(LogRow {
            at: t,
            request_id: event.request_id,
            attempt: response.attempt,
            key: event.key.clone(),
            method: pending.method,
            path: pending.path,
            status: Some(response.status),
            service_ms: Some(service_ms),
            queue_wait_ms: pending.queue_wait_ms,
            remaining: response.info.most_restrictive().and_then(|budget| budget.remaining),
            retry_after_s: response.info.retry_after.map(|delay| delay.as_secs_f64()),
            error: None,
            headers: response.headers.clone(),
            info: Some((*response.info).clone()),
        });
    }

    /// A request that ended without a response to return: a failure and a log row.
    fn ingest_failure(&mut self, t: f64, event: &Event, error: &str, attempts: u32) {
        let request = self.requests.remove(&event.request_id);
        if request.is_some() {
            self.open.push(t, self.requests.len() as f64);
        }
        let key = (event.request_id, attempts);
        if self.answered.remove(&key) {
            // Gave up after a response (e.g. the last of several 429s): that attempt's row
            // and outcome are there already; the row now says how the request ended.
            self.answered.retain(|(id, _)| *id != event.request_id);
            let row = self.log.iter_mut().rev().take(FAILURE_LOOKBACK).find(|row| (row.request_id, row.attempt) == key);
            if let Some(row) = row {
                row.error = Some(error.to_owned());
                return;
            }
        }
        let mut pending = self.pending.remove(&key).unwrap_or_default();
        if pending.method.is_empty()
            && let Some(request) = request
        {
            pending.method = request.method;
            pending.path = request.path;
        }
        self.outcomes.record(t, None);
        self.push_row(LogRow {
            at: t,
            request_id: event.request_id,
            attempt: attempts,
            key: event.key.clone(),
            method: pending.method,
            path: pending.path,
            status: None,
            service_ms: None,
            queue_wait_ms: pending.queue_wait_ms,
            remaining: None,
            retry_after_s: None,
            error: Some(error.to_owned()),
            headers: HeaderMap::new(),
            info: None,
        });
    }

    /// Folds in a limiter snapshot: tokens per budget, queued, in flight.
    pub fn sample(&mut self, snapshots: &[Snapshot]) {
        let Some(at) = snapshots.first().map(|snapshot| snapshot.at) else { return };
        let t = self.seconds(at);
        let capacity = self.capacity;
        for snapshot in snapshots {
            for budget in &snapshot.budgets {
                let name = format!("{} · {}", snapshot.key, budget.name);
                self.tokens.entry(name.clone()).or_insert_with(|| Series::new(capacity)).push(t, budget.available);
                if budget.unit != Unit::Requests
                    && self.units.get(&name).map(String::as_str) != Some(budget.unit.as_str())
                {
                    self.units.insert(name.clone(), budget.unit.to_string());
                }
                self.token_capacity.insert(name, budget.capacity as f64);
            }
        }
        self.queued.push(t, snapshots.iter().map(Snapshot::queued_total).sum::<usize>() as f64);
        self.in_flight.push(t, snapshots.iter().map(|s| s.in_flight).sum::<usize>() as f64);
    }

    fn push_row(&mut self, row: LogRow) {
        if self.log.len() == self.log_capacity {
            self.log.pop_front();
        }
        self.log.push_back(row);
    }
}

#[cfg(test)]
mod tests {
    use std::time::Duration;

    use super::*;
    use crate::engine::{BudgetSpec, Limiter, LimiterConfig};

    fn event(id: u64, at: Instant, kind: EventKind) -> Event {
        Event { request_id: id, key: Some("api".into()), at, kind }
    }

    #[tokio::test(start_paused = true)]
    async fn events_become_series_and_log_rows() {
        let origin = Instant::now();
        let mut telemetry = Telemetry::new(origin, 1000, 2);
        tokio::time::advance(Duration::from_millis(1500)).await;
        let now = Instant::now();
        telemetry.ingest(&event(1, now, EventKind::Admitted { attempt: 1, queue_wait: Duration::from_millis(250) }));
        telemetry.ingest(&event(1, now, EventKind::Sent { attempt: 1, method: "GET".into(), path: "/items".into() }));
        let info = RateLimitInfo::parse(
            Some(429),
            &{
                let mut h = HeaderMap::new();
                h.insert("retry-after", "3".parse().unwrap());
                h.insert("x-ratelimit-remaining", "0".parse().unwrap());
                h.insert("x-ratelimit-limit", "10".parse().unwrap());
                h
            },
            None,
            std::time::SystemTime::now(),
        );
        let response = EventKind::Response {
            attempt: 1,
            status: 429,
            service_time: Duration::from_millis(40),
            info: Box::new(info),
            headers: Box::new(HeaderMap::new()),
        };
        telemetry.ingest(&event(1, now, response));
        let row = telemetry.log.back().unwrap().clone();
        assert_eq!((row.method.as_str(), row.path.as_str(), row.status), ("GET", "/items", Some(429)));
        assert_eq!((row.queue_wait_ms, row.retry_after_s, row.remaining), (250.0, Some(3.0), Some(0.0)));
        assert_eq!(telemetry.outcomes.totals(), [0, 1, 0]);
        assert_eq!(telemetry.service_ms.last(), Some([1.5, 40.0]));
        assert!(telemetry.latest_server.is_some());
        for id in 2..5 {
            telemetry.ingest(&event(id, now, EventKind::Failed { error: "boom".into(), attempts: 1 }));
        }
        assert_eq!(telemetry.log.len(), 2, "the log is bounded");
        telemetry.ingest(&event(9, now, EventKind::Lagged { dropped: 7 }));
        assert_eq!(telemetry.events_dropped, 7);
    }

    fn response(attempt: u32, status: u16) -> EventKind {
        EventKind::Response {
            attempt,
            status,
            service_time: Duration::from_millis(5),
            info: Box::new(RateLimitInfo::parse(Some(status), &HeaderMap::new(), None, std::time::SystemTime::now())),
            headers: Box::default(),
        }
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_that_gives_up_after_429s_marks_its_last_row_and_counts_no_other_error() {
        let now = Instant::now();
        let mut telemetry = Telemetry::new(now, 1000, 100);
        for attempt in 1..=3 {
            telemetry.ingest(&event(7, now, EventKind::Sent { attempt, method: "GET".into(), path: "/items".into() }));
            telemetry.ingest(&event(7, now, response(attempt, 429)));
        }
        let gave_up = EventKind::Failed { error: "gave up after 3 attempts: 429".into(), attempts: 3 };
        telemetry.ingest(&event(7, now, gave_up));
        let rows: Vec<(u32, &str, &str, Option<&str>)> = telemetry
            .log
            .iter()
            .map(|row| (row.attempt, row.method.as_str(), row.path.as_str(), row.error.as_deref()))
            .collect();
        assert_eq!(
            rows,
            [
                (1, "GET", "/items", None),
                (2, "GET", "/items", None),
                (3, "GET", "/items", Some("gave up after 3 attempts: 429"))
            ],
            "one row per attempt, each selection key once, none without method and path"
        );
        assert_eq!(telemetry.outcomes.totals(), [0, 3, 0], "three 429s, no 'other error'");

        // No response at all on the last attempt: a failure row that still names what was sent.
        telemetry.ingest(&event(8, now, EventKind::Sent { attempt: 1, method: "POST".into(), path: "/x".into() }));
        telemetry.ingest(&event(8, now, EventKind::Failed { error: "connection refused".into(), attempts: 1 }));
        let last = telemetry.log.back().unwrap();
        assert_eq!((last.request_id, last.method.as_str(), last.path.as_str()), (8, "POST", "/x"));
        assert_eq!(telemetry.outcomes.totals(), [0, 3, 1]);
    }

    #[tokio::test(start_paused = true)]
    async fn open_requests_are_counted_without_a_limiter() {
        let origin = Instant::now();
        let mut telemetry = Telemetry::new(origin, 1000, 100);
        for id in 0..50 {
            telemetry.ingest(&event(
                id,
                origin,
                EventKind::Sent { attempt: 1, method: "GET".into(), path: "/".into() },
            ));
        }
        assert_eq!(telemetry.open.last(), Some([0.0, 50.0]), "50 sent, none answered, no snapshot at all");
        tokio::time::advance(Duration::from_secs(1)).await;
        let done = EventKind::Finished { status: 200, attempts: 1, total: Duration::from_millis(5) };
        telemetry.ingest(&event(3, Instant::now(), done));
        assert_eq!(telemetry.open.last(), Some([1.0, 49.0]));
        assert!(telemetry.in_flight.is_empty(), "the limiter's series stay empty without a limiter");
    }

    #[tokio::test(start_paused = true)]
    async fn snapshots_become_token_and_queue_series() {
        let origin = Instant::now();
        let config =
            LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", 4, "2/1s".parse().unwrap()).unwrap());
        let limiter = Limiter::new("api", config).unwrap();
        let _held = limiter.try_acquire(3).unwrap();
        let mut telemetry = Telemetry::new(origin, 1000, 10);
        telemetry.sample(&[limiter.snapshot()]);
        tokio::time::advance(Duration::from_millis(500)).await;
        telemetry.sample(&[limiter.snapshot()]);
        let tokens: Vec<[f64; 2]> = telemetry.tokens["api · rate"].iter().copied().collect();
        assert_eq!(tokens, vec![[0.0, 1.0], [0.5, 2.0]]);
        assert_eq!(telemetry.in_flight.last(), Some([0.5, 1.0]));
    }
}
