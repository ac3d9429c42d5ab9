//! One request's life in the client: the steps it takes before its first attempt (prepare,
//! the cache), the steps the attempt loop ([`attempts::run`]) asks of the client's faces
//! (admission, interpretation, recording, the end as a response or an error), and the
//! client's own face, [`OnWire`]: attempts on the client's wire, each kept in a log.

use std::borrow::Cow;
use std::future::Future;
use std::time::{Duration, SystemTime};

use bytes::Bytes;
use http::{HeaderMap, StatusCode};
use tokio::time::Instant;
use url::Url;

use super::wire::WireOutcome;
use super::{
    AttemptRecord, ClientError, LimitedClient, LimitedResponse, RequestSpec, ResponseHead, Settlement, cached_response,
    outcome_text,
};
use crate::engine::{Cost, Limiter, Overload, Unit};
use crate::http::admission::{Admission, AdmissionStep, Refusal};
use crate::http::attempts::{self, Face, Steps};
use crate::http::cache::CachedResponse;
use crate::http::coalesce::FlightKey;
use crate::http::cost;
use crate::http::events::EventKind;
use crate::http::headers::RateLimitInfo;
use crate::http::policy::Routed;
use crate::http::report::{Reporter, SharedDue};
use crate::http::retry::{Decision, GiveUpReason, RetryPolicy};

/// A request on its way: what was decided about it before the first attempt, and what its
/// attempts have added up to.
pub(super) struct Request<'c> {
    client: &'c LimitedClient,
    spec: RequestSpec,
    limiter: Option<Limiter>,
    /// Whether the key follows the server's budgets (its limiter has a mirror).
    adaptive: bool,
    retry: &'c RetryPolicy,
    /// The client's headers for the host, then the caller's (and the cache's validators).
    headers: HeaderMap,
    /// The URL as an `http::Uri`, only when there is a cache (which keys on it).
    uri: Option<http::Uri>,
    /// Its events, built only when someone listens.
    report: Reporter<'c>,
    started: Instant,
    queue_wait: Duration,
    /// What the request reserves in every budget: its requests and its rules' estimates.
    estimate: Cost,
}

/// One attempt on the wire, read: the response and what its headers say, or why none came.
pub(super) type Sent = attempts::Sent<Received>;

/// What the client holds of a response besides its status: its headers, and its body when it
/// was read (`None`: streamed on to the caller unseen).
pub(super) struct Received {
    pub(super) headers: HeaderMap,
    pub(super) body: Option<Bytes>,
}

/// What an attempt's exchange ended with, as every face reads it.
pub(super) type Answer = crate::http::answer::Answer<Received>;

impl<'c> Request<'c> {
    /// Everything decided once per request: its host (lower case), its key's limiter and
    /// retry policy, whether the key is adaptive (then it gets its mirror before the first
    /// admission, so the key's first request goes alone as a scout), and its headers.
    pub(super) fn prepare(client: &'c LimitedClient, spec: RequestSpec) -> Result<Self, ClientError> {
        let inner = &*client.inner;
        if spec.url.host_str().is_none() {
            return Err(ClientError::NoHost(spec.url.clone()));
        }
        let Routed { limiter, adaptive, retry, report } =
            inner.policy.routed(client.limiter_for(&spec.url), &inner.next_id);
        let uri = match &inner.cache {
            Some(_) => Some(spec.url.as_str().parse().map_err(|_| ClientError::NoHost(spec.url.clone()))?),
            None => None,
        };
        let headers = client.headers_for(&spec.url, &spec.headers);
        let estimate = cost::estimate(spec.cost, &spec.cost_rules, spec.body.as_deref());
        Ok(Self {
            client,
            spec,
            estimate,
            limiter,
            adaptive,
            retry,
            headers,
            uri,
            report,
            started: Instant::now(),
            queue_wait: Duration::ZERO,
        })
    }

    /// The request's host, lower case (for errors).
    fn host(&self) -> String {
        lower_case(self.spec.url.host_str().unwrap_or_default(), &self.spec.url).into_owned()
    }

    fn emit(&self, kind: EventKind) {
        self.report.emit(kind);
    }

    /// A fresh cached response, returned without touching the limiter; a stale one adds its
    /// validators (If-None-Match, If-Modified-Since) to the request's headers instead.
    pub(super) fn cached(&mut self) -> Option<LimitedResponse> {
        let (Some(cache), Some(uri)) = (&self.client.inner.cache, &self.uri) else { return None };
        let cached = cache.serve(&self.spec.method, uri, &mut self.headers, &self.report, self.started)?;
        let rate_limit = RateLimitInfo::parse(Some(cached.status.as_u16()), &cached.headers, None, SystemTime::now());
        Some(cached_response(cached, rate_limit, 0, Duration::ZERO, Duration::ZERO, self.started.elapsed()))
    }

    /// The request as the caller described it.
    #[cfg(feature = "middleware")]
    pub(super) fn spec(&self) -> &RequestSpec {
        &self.spec
    }

    /// Whether [`headers`](Self::headers) may differ from the caller's: the client adds its
    /// own (defaults, the host's), or its cache may add validators.
    #[cfg(feature = "middleware")]
    pub(super) fn adds_headers(&self) -> bool {
        self.uri.is_some() || self.client.adds_headers_for(&self.spec.url)
    }

    /// The headers the request goes out with: the client's for its host, then the caller's.
    #[cfg(feature = "middleware")]
    pub(super) fn headers(&self) -> &HeaderMap {
        &self.headers
    }

    /// What makes the request identical to another in flight, when it may share one exchange.
    pub(super) fn flight_key(&self) -> Option<FlightKey> {
        FlightKey::of(&self.spec.method, &self.spec.url, &self.headers, self.spec.body.is_some())
    }

    /// The attempts of a request that goes upstream itself, on the client's wire, each
    /// appended to `log`, until a response or an error ends it. The loop's own future, not
    /// one around it: each layer of future a request's state passes through is one more copy.
    /// Borrowed, not moved: the request stays where it was prepared, and the loop's state
    /// holds two pointers to it and the log.
    pub(super) fn attempts<'r, 'l>(
        &'r mut self,
        log: &'l mut Vec<AttemptRecord>,
    ) -> impl Future<Output = Result<LimitedResponse, ClientError>> + Send + use<'r, 'c, 'l> {
        attempts::run(OnWire { request: self, log })
    }

    /// What the attempt loop reads of the request.
    pub(super) fn steps(&self) -> Steps<'_> {
        Steps {
            limiter: self.limiter.as_ref(),
            retry: self.retry,
            method: &self.spec.method,
            report: &self.report,
            rng: &self.client.inner.rng,
        }
    }

    /// The end of a request that followed an identical one in flight: a copy of its outcome,
    /// marked coalesced, with this request's own timing; it sent nothing.
    pub(super) fn followed(
        self,
        outcome: Result<LimitedResponse, ClientError>,
    ) -> Result<LimitedResponse, ClientError> {
        self.emit(EventKind::Coalesced);
        let total = self.started.elapsed();
        match outcome {
            Ok(response) => {
                self.emit(EventKind::Finished { status: response.status.as_u16(), attempts: 0, total });
                let shared_wait = response.queue_wait;
                Ok(LimitedResponse { attempts: 0, coalesced: true, queue_wait: shared_wait, total, ..response })
            }
            Err(err) => Err(self.fail(err.to_string(), err, 0)),
        }
    }

    /// Attempt `attempt`'s admission ([`AdmissionStep`]): at once when the limiter has room
    /// and no shared budget must be asked, else after the wait; a key without a limiter goes
    /// straight on. A refusal is the request's failure.
    pub(super) async fn admission(&mut self, attempt: u32) -> Result<Admission, ClientError> {
        let Some(limiter) = &self.limiter else {
            return Ok(Admission::at_once(None));
        };
        let inner = &*self.client.inner;
        let step = AdmissionStep {
            limiter,
            priority: self.spec.priority,
            estimate: &self.estimate,
            shedding: inner.shedding.as_ref().map(|shedding| (&inner.queues, shedding)),
            shared: inner.gates.get(limiter.key()),
        };
        match step.admit(attempt, &self.report).await {
            Ok(admission) => {
                self.queue_wait += admission.waited;
                Ok(admission)
            }
            Err(refusal) => {
                let err = match refusal {
                    Refusal::Limiter(err) | Refusal::Shed(Overload::Invalid(err)) => ClientError::Limiter(err),
                    Refusal::Shared(err) => ClientError::Shared(err),
                    shed => ClientError::Shed { key: limiter.key().to_owned(), reason: shed.to_string() },
                };
                let message = match &err {
                    ClientError::Limiter(err) => err.to_string(),
                    ClientError::Shared(err) => err.to_string(),
                    other => other.to_string(),
                };
                Err(self.fail(message, err, attempt - 1))
            }
        }
    }

    /// Sends the attempt (following redirects as the host's policy says) and reads the
    /// answer: its rate-limit headers, and, for an adaptive key, what the mirror makes of it.
    pub(super) async fn exchange(&self, attempt: u32, admission: &Admission) -> Sent {
        let sent_at = self.sending(attempt);
        // Boxed: the HTTP exchange is the largest state, and only in-flight requests need it
        // (thousands may wait in the limiter with a small future each). Written into its box
        // once made: `Box::pin` builds it on the stack first and copies all of it (kilobytes,
        // of which only the arguments are set yet).
        let exchange = Box::write(Box::new_uninit(), self.client.send_once(&self.spec, &self.headers));
        let result = Box::into_pin(exchange).await;
        self.answered(attempt, sent_at, result, admission)
    }

    /// The attempt leaves (on any wire, [`exchange`](Self::exchange)'s or a caller's): reported
    /// as `Sent`; returns when it left.
    pub(super) fn sending(&self, attempt: u32) -> Instant {
        let spec = &self.spec;
        if self.report.listening() {
            self.emit(EventKind::Sent { attempt, method: spec.method.to_string(), path: spec.url.path().to_owned() });
        }
        Instant::now()
    }

    /// What came back for an attempt sent at `sent_at`, read: its rate-limit headers, and, for
    /// an adaptive key, what the mirror makes of them.
    pub(super) fn answered(&self, attempt: u32, sent_at: Instant, result: WireOutcome, admission: &Admission) -> Sent {
        let service_time = sent_at.elapsed();
        let answer = match result {
            WireOutcome::Response { status, headers, body } => {
                let info = self.interpret(attempt, service_time, status, &headers, body.as_deref(), admission);
                Answer::Response { status, info, held: Received { headers, body } }
            }
            WireOutcome::ConnectionError(message) => Answer::ConnectionError(message),
            WireOutcome::Timeout => Answer::Timeout,
        };
        Sent { sent_at, service_time, answer }
    }

    fn interpret(
        &self,
        attempt: u32,
        service_time: Duration,
        status: StatusCode,
        headers: &HeaderMap,
        body: Option<&[u8]>,
        admission: &Admission,
    ) -> RateLimitInfo {
        let head = ResponseHead { status, headers, body };
        let mirror =
            self.limiter.as_ref().filter(|_| self.adaptive).map(|limiter| (limiter, admission.permit.as_ref()));
        head.interpret(attempt, service_time, &self.report, mirror)
    }

    /// Settles the attempt's reservation in the limiter by what its answer says it spent (its
    /// cost rules), and appends the attempt to `log` when there is one. Returns the shared
    /// store's settlement when one is due.
    pub(super) fn record(
        &self,
        attempt: u32,
        admission: &mut Admission,
        sent: &Sent,
        decision: &Decision,
        log: Option<&mut Vec<AttemptRecord>>,
    ) -> Option<SharedDue> {
        let mut shared_due = None;
        let settlement = match (admission.permit.as_mut(), &sent.answer) {
            (Some(permit), Answer::Response { status, held: Received { headers, body }, .. })
                if !self.spec.cost_rules.is_empty() =>
            {
                let body = body.clone().unwrap_or_default();
                let body = &body;
                let memory = &self.client.inner.remaining_seen;
                let receipt = cost::Receipt { status: status.as_u16(), headers, body, key: permit.key(), memory };
                let said = cost::settled(&self.estimate, &self.spec.cost_rules, &receipt);
                let mut actual = permit.settle(said.clone());
                if let Some((gate, _)) = &admission.shared {
                    // Budgets shared in a store are not the limiter's: cap by theirs too.
                    actual = capped_by(&actual, |unit| gate.settle_bound(unit));
                }
                let capped = capped_units(&said, &actual);
                for (unit, amount) in &capped {
                    tracing::warn!(
                        key = permit.key(),
                        %unit,
                        said = amount,
                        counted = actual.of(unit),
                        "an answer says a request spent more {unit} than any budget of it holds: counted as a whole budget"
                    );
                }
                self.emit(EventKind::Settled { attempt, reserved: self.estimate.clone(), actual: actual.clone() });
                if let Some((gate, reservation)) = admission.shared.take() {
                    shared_due = Some(SharedDue { gate, reservation, actual: actual.clone() });
                }
                Some(Settlement { reserved: self.estimate.clone(), actual, capped })
            }
            _ => None,
        };
        let info = sent.answer.info();
        if let Some(log) = log {
            log.push(AttemptRecord {
                attempt,
                sent_at: sent.sent_at,
                queue_wait: admission.waited,
                service_time: sent.service_time,
                status: sent.answer.status().map(|status| status.as_u16()),
                error: info.is_none().then(|| outcome_text(&sent.answer.outcome())),
                retry_delay: match decision {
                    Decision::Retry { delay, .. } => Some(*delay),
                    _ => None,
                },
                server_remaining: info.and_then(|info| info.most_restrictive()?.remaining),
                retry_after: info.and_then(|info| info.retry_after),
                settlement,
            });
        }
        shared_due
    }

    /// The final response: stored in the cache when it may be (a 304 then serves the cached
    /// body), reported as `Finished`.
    pub(super) fn finish(&self, attempt: u32, sent: Sent) -> Result<LimitedResponse, ClientError> {
        let Answer::Response { status, info, held: Received { headers, body } } = sent.answer else {
            // The policy only finishes on a response; anything else is a give-up.
            return Err(self.give_up(attempt, sent, GiveUpReason::NotRetryable));
        };
        let fresh = CachedResponse { status, headers, body: body.unwrap_or_default() };
        let (served, revalidated) = match (&self.client.inner.cache, &self.uri) {
            (Some(cache), Some(uri)) => cache.keep(&self.spec.method, uri, &self.headers, fresh, &self.report),
            _ => (fresh, false),
        };
        let total = self.total(sent.sent_at, sent.service_time);
        self.emit(EventKind::Finished { status: served.status.as_u16(), attempts: attempt, total });
        let mut response = cached_response(served, info, attempt, self.queue_wait, sent.service_time, total);
        response.from_cache = revalidated;
        Ok(response)
    }

    /// The end of a request whose response streams on to the caller unread (no cache to store
    /// it in): reported as `Finished`; returns the response's headers, lent to the steps.
    #[cfg(feature = "middleware")]
    pub(super) fn finish_streamed(self, attempt: u32, sent: Sent) -> HeaderMap {
        let Answer::Response { status, held: Received { headers, .. }, .. } = sent.answer else {
            return HeaderMap::new();
        };
        // Reported only to a listener: the caller measures its own streamed body.
        if self.report.listening() {
            let total = self.total(sent.sent_at, sent.service_time);
            self.emit(EventKind::Finished { status: status.as_u16(), attempts: attempt, total });
        }
        headers
    }

    /// The request's time until its final answer came: that attempt's send time and service
    /// time say when, so the clock is not read again.
    fn total(&self, sent_at: Instant, service_time: Duration) -> Duration {
        sent_at.saturating_duration_since(self.started) + service_time
    }

    /// The error the request ends with: no response at all names the cause on the wire
    /// (could not connect, or none in time); otherwise the policy's reason and the last status.
    pub(super) fn give_up(&self, attempt: u32, sent: Sent, reason: GiveUpReason) -> ClientError {
        let err = match (&sent.answer, reason) {
            (Answer::Timeout, GiveUpReason::NotRetryable) => {
                ClientError::NoResponse { host: self.host(), attempts: attempt }
            }
            (Answer::ConnectionError(_), GiveUpReason::NotRetryable) => ClientError::Transport {
                host: self.host(),
                message: outcome_text(&sent.answer.outcome()),
                attempts: attempt,
            },
            (answer, reason) => {
                ClientError::GaveUp { reason, last_status: answer.status().map(|s| s.as_u16()), attempts: attempt }
            }
        };
        let message = match &err {
            ClientError::GaveUp { reason, .. } => reason.to_string(),
            other => other.to_string(),
        };
        self.fail(message, err, attempt)
    }

    /// Reports `message` as the request's `Failed` event after `attempts` attempts, and
    /// returns `err`.
    fn fail(&self, message: String, err: ClientError, attempts: u32) -> ClientError {
        self.emit(EventKind::Failed { error: message, attempts });
        err
    }
}

/// The client's face: attempts on the client's own wire (reqwest, or the direct HTTP/1.1
/// one), each kept in the caller's log.
struct OnWire<'r, 'c, 'l> {
    request: &'r mut Request<'c>,
    log: &'l mut Vec<AttemptRecord>,
}

impl Face for OnWire<'_, '_, '_> {
    type Held = Received;
    type Output = Result<LimitedResponse, ClientError>;

    fn steps(&self) -> Steps<'_> {
        self.request.steps()
    }

    async fn admit(&mut self, attempt: u32) -> Result<Admission, Self::Output> {
        self.request.admission(attempt).await.map_err(Err)
    }

    // The exchange's own future (the largest state), not one around it.
    fn send(&mut self, attempt: u32, admission: &Admission) -> impl Future<Output = Sent> + Send {
        self.request.exchange(attempt, admission)
    }

    fn record(
        &mut self,
        attempt: u32,
        admission: &mut Admission,
        sent: &Sent,
        decision: &Decision,
    ) -> Option<SharedDue> {
        self.request.record(attempt, admission, sent, decision, Some(&mut *self.log))
    }

    fn finish(self, attempt: u32, sent: Sent, admission: Admission) -> impl Future<Output = Self::Output> + Send {
        // The slot goes back before the response is stored in the cache and handed over.
        drop(admission);
        std::future::ready(self.request.finish(attempt, sent))
    }

    async fn give_up(self, attempt: u32, sent: Sent, admission: Admission, reason: GiveUpReason) -> Self::Output {
        drop(admission);
        Err(self.request.give_up(attempt, sent, reason))
    }
}

/// `host` (of `url`) in lower case, copied only when it has capitals: `url` lowercases the
/// hosts of http(s) URLs already, other schemes may keep them.
pub(super) fn lower_case<'h>(host: &'h str, url: &Url) -> Cow<'h, str> {
    if !matches!(url.scheme(), "http" | "https") && host.bytes().any(|byte| byte.is_ascii_uppercase()) {
        Cow::Owned(host.to_ascii_lowercase())
    } else {
        Cow::Borrowed(host)
    }
}

/// `cost` with each named unit's amount at most what `bound` says of it (nothing: as it is).
fn capped_by(cost: &Cost, bound: impl Fn(&Unit) -> Option<u64>) -> Cost {
    let units =
        cost.units.iter().map(|(unit, amount)| (unit.clone(), bound(unit).map_or(*amount, |most| (*amount).min(most))));
    Cost { requests: cost.requests, units: units.collect() }
}

/// The units `said` names more of than `counted` (capped by the budgets), with what it said.
fn capped_units(said: &Cost, counted: &Cost) -> Vec<(Unit, u64)> {
    let mut capped: Vec<(Unit, u64)> = Vec::new();
    for (unit, _) in &said.units {
        let amount = said.of(unit);
        if amount > counted.of(unit) && capped.iter().all(|(seen, _)| seen != unit) {
            capped.push((unit.clone(), amount));
        }
    }
    capped
}
