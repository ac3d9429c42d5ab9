//! Discovery: find an API's limits with as few requests (and refusals) as possible, and
//! suggest limiter settings with a safety margin, a confidence and the reasons.
//!
//! The probe sends one request at a time through a [`LimitedClient`] that neither limits nor
//! retries (so every 429 it meets is its own), never more than [`ProbeOptions::max_requests`],
//! and reads every response with the header parser ([`RateLimitInfo`]). Three paths:
//!
//! 1. **The headers publish every limit with its window** (IETF `RateLimit-Policy`, one item
//!    per policy): one request is enough. Each policy becomes a sliding window of its size
//!    (safe whether the server counts with a bucket, a fixed or a sliding window); several
//!    policies are stacked windows, and all are kept. A structured policy with a quota but
//!    neither window nor reset is read as a concurrency limit, as the demo API publishes one;
//!    a quota from any other dialect (`X-RateLimit-Limit` alone) never is.
//! 2. **The headers give limit, remaining and reset but no window** (`X-RateLimit-*`,
//!    GitHub, the older IETF trio): requests go one after another while `remaining` says
//!    there is room, so no request is refused; when it reaches 0 the probe waits out the
//!    reset and sends one more. The reset when empty is the time to restore the whole quota;
//!    the reset after one request on a restored quota tells a bucket (short: it refills
//!    gradually) from a window (the whole window). Resets are often whole seconds: when the
//!    first request started its window, its reset bounds the window to that rounding, the
//!    request after the reset goes just past the largest whole second in range, and being let
//!    through it bounds the window from above to a round trip (never shorter than the truth).
//! 3. **No rate-limit headers**: requests go one after another until the first refusal; the
//!    number that passed is the burst capacity. If its `Retry-After` is 2 s or more, the
//!    probe waits it out and sends as many again: if all pass, the quota came back at once
//!    (a window of that many per the time it took); if not, it is a slow bucket, whose rate
//!    follows from how many passed. A shorter (or no) `Retry-After` means a fast refill: a
//!    careful ramp (one request per second, 10% faster each time) runs from the refusal
//!    until the next one; the rate lies between the slowest refill that lets every request
//!    that passed through and the one that would have let the refusal through too. A bucket found this way counts as two discoveries, its capacity and its
//!    rate, each costing one refusal.
//!
//! Headers are believed only as far as they are possible (`trust`): a limit beyond any plausible
//! quota, more remaining than the limit, a window or reset of years, values the parser dropped
//! (negative, not a number) or two dialects contradicting each other are named in the reasons,
//! make the confidence low, and the budgets they touch are not used (the probe measures instead).
//! Whatever is suggested is a valid limiter configuration (`--save` can save it).
//!
//! Every suggestion keeps a margin below what was found ([`ProbeOptions::margin`], 5% by
//! default): fewer requests per window, or, where that would round to the same whole
//! number, a longer window.

mod check;
mod report;
mod trust;

use std::time::Duration;

use http::{HeaderMap, Method};
use thiserror::Error;
use tokio::time::Instant;
use url::Url;

pub use check::{LimitCheck, ProfileCheck, Verdict};
pub use report::{Confidence, ProbeReport, SuggestedBudget, Suggestion, UnitBudget};

use crate::engine::{LimiterConfig, format_wait};
use crate::http::headers::ServerBudget;
use crate::http::{ClientBuilder, ClientError, LimitedClient, RateLimitInfo, RequestSpec, RetryPolicy, redact_url};
use report::trim;

/// Tries for a first answer when the server errs or drops the connection.
const FIRST_TRIES: usize = 3;

/// Each request of a ramp comes this much sooner than the one before.
const RAMP_STEP: f64 = 1.1;

/// How a probe runs.
#[derive(Debug, Clone)]
pub struct ProbeOptions {
    /// The most requests the probe may send (it never sends more).
    pub max_requests: usize,
    /// The share kept below what was found, between 0 and 0.5.
    pub margin: f64,
    /// The method of every probe request (GET by default).
    pub method: Method,
    /// Sent with every request (an API key, for instance).
    pub headers: HeaderMap,
    /// The longest single wait (for a reset or a Retry-After); a longer one ends the probe.
    pub max_wait: Duration,
}

impl Default for ProbeOptions {
    fn default() -> Self {
        Self {
            max_requests: 100,
            margin: 0.05,
            method: Method::GET,
            headers: HeaderMap::new(),
            max_wait: Duration::from_secs(15 * 60),
        }
    }
}

/// Why a probe could not run or finish.
#[derive(Debug, Error)]
pub enum ProbeError {
    /// Too small a request allowance to find anything.
    #[error("the probe needs at least {min} requests (--max-requests {given})")]
    TooFewRequests {
        /// The fewest the probe needs.
        min: usize,
        /// The allowance given.
        given: usize,
    },
    /// A margin outside 0 to 0.5.
    #[error("margin {} is not a share between 0 and 0.5", crate::engine::format_amount(*.0))]
    Margin(f64),
    /// The URL did not answer with a success to begin with, so there is nothing to measure.
    #[error(
        "{} did not answer the first requests with a success (last: {last}); probe a URL that answers 2xx",
        redact_url(url)
    )]
    FirstStatus {
        /// The URL probed.
        url: Url,
        /// The last status or error it gave.
        last: String,
    },
    /// The host never answered the first tries (refused, reset, unknown name).
    #[error("could not reach {host}: {message} ({tries} tries); check the URL and that the server is up")]
    Unreachable {
        /// The host and port tried.
        host: String,
        /// How many requests were sent.
        tries: usize,
        /// Why the last one got no answer.
        message: String,
    },
    /// A probe request failed without a response.
    #[error(transparent)]
    Client(#[from] ClientError),
}

/// A client for probing: no limiter and no retries, whatever `builder` held.
fn client(builder: ClientBuilder) -> Result<LimitedClient, ClientError> {
    let never = RetryPolicy { max_attempts: 1, retry_statuses: Vec::new(), ..RetryPolicy::default() };
    builder.registry(Default::default()).adaptive(Default::default()).retry(never).build()
}

impl ProbeOptions {
    /// Refuses a request allowance below two and a margin outside 0..=0.5 (NaN included).
    pub fn validate(&self) -> Result<(), ProbeError> {
        if self.max_requests < 2 {
            return Err(ProbeError::TooFewRequests { min: 2, given: self.max_requests });
        }
        if !(0.0..=0.5).contains(&self.margin) {
            return Err(ProbeError::Margin(self.margin));
        }
        Ok(())
    }
}

/// Probes `url`. `builder` supplies the transport settings (tests pass one without timers, or
/// with an in-process transport); its limits and retry policy are replaced.
pub async fn probe(builder: ClientBuilder, url: &Url, options: &ProbeOptions) -> Result<ProbeReport, ProbeError> {
    options.validate()?;
    let mut prober = Prober {
        client: client(builder)?,
        url: url.clone(),
        options: options.clone(),
        start: Instant::now(),
        samples: Vec::new(),
        evidence: Vec::new(),
        doubts: trust::Doubts::default(),
        notes: Vec::new(),
        last_failure: None,
    };
    let found = prober.run().await?;
    Ok(prober.report(found))
}

/// What spending a reported quota found (`Prober::spend`).
struct Spent {
    name: String,
    limit: u64,
    /// What the last answer said is left.
    remaining: f64,
    /// The last answer's reset, its first one's, and the longest seen.
    reset: Duration,
    first_reset: Duration,
    longest_reset: Duration,
    /// Requests spent on the quota (the one that reported it included).
    spent: u64,
    /// The sample index where the spending began.
    drain_start: usize,
    /// Refused although room was said to remain, or the budget stopped being reported.
    interrupted: bool,
}

/// One response.
#[derive(Debug, Clone)]
struct Sample {
    /// When it was sent, in seconds since the probe started.
    sent: f64,
    /// When it was answered.
    answered: f64,
    status: u16,
    info: RateLimitInfo,
    /// The answer has a structured `RateLimit-Policy` field (and not the older trio), where a
    /// quota without window or reset is a concurrency limit ([`trust::published_concurrency`]).
    structured_policy: bool,
}

impl Sample {
    fn refused(&self) -> bool {
        self.info.throttled || self.status == 429
    }

    /// Answered normally: what counts as a request the limit let through.
    fn passed(&self) -> bool {
        (200..400).contains(&self.status) && !self.refused()
    }
}

/// What a path concluded, before the report is assembled: what was found, before the margin.
struct Found {
    found: Suggestion,
    confidence: Confidence,
    reasons: Vec<String>,
    discovered: usize,
}

struct Prober {
    client: LimitedClient,
    url: Url,
    options: ProbeOptions,
    start: Instant,
    samples: Vec<Sample>,
    evidence: Vec<String>,
    /// What the answers gave reason to doubt.
    doubts: trust::Doubts,
    /// Reasons about the headers to give whatever path is taken.
    notes: Vec<String>,
    /// Why the last request that got no response got none.
    last_failure: Option<String>,
}

impl Prober {
    fn now(&self) -> f64 {
        self.start.elapsed().as_secs_f64()
    }

    fn left(&self) -> usize {
        self.options.max_requests.saturating_sub(self.samples.len())
    }

    /// Sends one request; `None` when the maximum is reached.
    async fn send(&mut self) -> Result<Option<Sample>, ProbeError> {
        if self.left() == 0 {
            return Ok(None);
        }
        let mut request = RequestSpec::new(self.options.method.clone(), self.url.clone());
        request.headers = self.options.headers.clone();
        let sent = self.now();
        let sample = match self.client.send(request).await {
            Ok(response) => Sample {
                sent,
                answered: self.now(),
                status: response.status.as_u16(),
                structured_policy: response.headers.contains_key("ratelimit-policy")
                    && !response.headers.contains_key("ratelimit-limit"),
                info: response.rate_limit,
            },
            // A dropped connection is not a refusal: note it and go on.
            Err(ClientError::Transport { message, .. }) => {
                self.evidence.push(format!("request {}: no response ({message})", self.samples.len() + 1));
                self.last_failure = Some(message);
                Sample {
                    sent,
                    answered: self.now(),
                    status: 0,
                    info: RateLimitInfo::parse(None, &HeaderMap::new(), None, std::time::SystemTime::now()),
                    structured_policy: false,
                }
            }
            Err(err) => return Err(err.into()),
        };
        self.doubts.note(&sample.info);
        self.samples.push(sample.clone());
        Ok(Some(sample))
    }

    /// Waits `wait`, unless it is longer than allowed (then says so and returns `false`).
    async fn wait(&mut self, wait: Duration) -> bool {
        if wait > self.options.max_wait {
            self.evidence.push(format!(
                "the next step needs a wait of {}, longer than the {} allowed: stopped",
                format_wait(wait),
                format_wait(self.options.max_wait)
            ));
            return false;
        }
        tokio::time::sleep(wait).await;
        true
    }

    /// Why the first tries gave nothing to measure: the host never answered, or the URL did
    /// not answer with a success.
    fn no_first_answer(&self) -> ProbeError {
        let url = self.url.clone();
        if self.samples.iter().all(|sample| sample.status == 0) {
            let host = self.url.host_str().unwrap_or_default();
            let host =
                self.url.port_or_known_default().map_or_else(|| host.to_owned(), |port| format!("{host}:{port}"));
            let message = self.last_failure.clone().unwrap_or_else(|| "no response".to_owned());
            return ProbeError::Unreachable { host, tries: self.samples.len(), message };
        }
        let last = self.samples.last().map_or(0, |sample| sample.status);
        let last = if last == 0 { "no response".to_owned() } else { last.to_string() };
        ProbeError::FirstStatus { url, last }
    }

    async fn run(&mut self) -> Result<Found, ProbeError> {
        // A server error or a dropped connection may be passing: the first answer gets three tries.
        let first = loop {
            // `max_requests` is at least 2, so `None` comes after a failed try at the earliest.
            let Some(sample) = self.send().await? else { return Err(self.no_first_answer()) };
            if sample.passed() || sample.refused() {
                break sample;
            }
            let passing = sample.status == 0 || sample.status >= 500;
            if !passing || self.samples.len() >= FIRST_TRIES {
                return Err(self.no_first_answer());
            }
        };
        let budgets = trust::trusted(&first.info);
        self.evidence.push(format!("request {}: {}", self.samples.len(), describe_response(&first)));
        let structured = first.structured_policy;
        let published = |b: &ServerBudget| b.window.is_some() || trust::published_concurrency(b, structured);
        if !budgets.is_empty() && budgets.iter().all(|b| b.limit.is_some() && published(b)) {
            return Ok(self.published(&budgets, structured));
        }
        if let Some(budget) = budgets.iter().find(|b| b.limit.is_some() && b.remaining.is_some()) {
            let budget = (*budget).clone();
            return self.drain(budget).await;
        }
        for budget in budgets.iter().filter(|b| b.limit.is_some() && !published(b)) {
            self.notes.push(format!(
                "{} gives a limit of {} but neither its window nor what remains: a quota over a time the headers do not say (not a concurrency cap), so the limit was measured instead",
                trust::label(budget),
                trim(budget.limit.unwrap_or_default())
            ));
        }
        self.without_headers(first).await
    }

    /// Path 1: every limit and its window is in the headers.
    fn published(&mut self, budgets: &[&ServerBudget], structured: bool) -> Found {
        let margin = self.options.margin;
        let mut found = Suggestion::default();
        for budget in budgets {
            let limit = budget.limit.unwrap_or(1.0).floor().max(1.0) as u64;
            match budget.window {
                Some(window) => {
                    let window_s = window.as_secs_f64();
                    let same = |known: &SuggestedBudget| matches!(known, SuggestedBudget::SlidingWindow { limit: l, window_s: w, .. } if *l == limit && *w == window_s);
                    if found.budgets.iter().any(same) {
                        continue; // two dialects saying the same
                    }
                    let taken = found.budgets.iter().any(|known| known.name() == budget.name);
                    let name = if taken { format!("{}-{}", budget.name, budget.source) } else { budget.name.clone() };
                    found.budgets.push(window_found(&name, limit, window_s));
                }
                None if trust::published_concurrency(budget, structured) => {
                    let cap = limit as usize;
                    found.concurrency = Some(found.concurrency.map_or(cap, |c| c.min(cap)));
                }
                None => {}
            }
        }
        let source = budgets.first().map_or("headers", |b| b.source.as_str()).to_owned();
        let mut reasons =
            vec![format!("the server publishes every limit with its window ({source}): one request was enough")];
        let windows = found.budgets.len();
        if windows > 1 {
            reasons
                .push(format!("stacked windows: {windows} limits apply at once, and the suggestion keeps all of them"));
        }
        reasons.push(
            "a sliding window of the published size is safe whether the server counts with a bucket, a fixed or a sliding window"
                .into(),
        );
        let confidence = if found.concurrency.is_some() {
            reasons.push(
                "a structured policy with a quota but no window, whose remaining has no reset, is read as a concurrency limit (as the demo API publishes one; the IETF draft itself has none)"
                    .into(),
            );
            Confidence::Medium
        } else {
            Confidence::High
        };
        reasons.push(margin_reason(margin));
        Found { discovered: budgets.len(), found, confidence, reasons }
    }

    /// Path 2: limit, remaining and reset, but no window: spend what `remaining` allows, wait
    /// out the reset, look once more.
    async fn drain(&mut self, budget: ServerBudget) -> Result<Found, ProbeError> {
        let spent = self.spend(budget).await?;
        if spent.interrupted {
            return Ok(self.unfinished_window(&spent.name, spent.limit, spent.longest_reset));
        }
        let drain_time =
            self.samples.last().map_or(0.0, |s| s.answered) - self.samples[spent.drain_start.saturating_sub(1)].sent;
        if spent.remaining >= 1.0 {
            return Ok(self.not_drained(&spent, drain_time));
        }
        let Spent { name, limit, reset: empty_reset, longest_reset, .. } = &spent;
        self.evidence.push(format!(
            "'{name}': the quota of {limit} was spent in {} requests over {drain_time:.2}s, none refused; empty, it resets in {}",
            spent.spent,
            format_wait(*empty_reset)
        ));
        let first = self.samples[spent.drain_start.saturating_sub(1)].clone();
        let first_range = self.first_window(&first, &spent);
        let Some(after) = self.send_after_reset(first_range, *empty_reset).await? else {
            return Ok(self.unfinished_window(name, *limit, *longest_reset));
        };
        let restored =
            same_budget(&after.info, name, *limit).filter(|b| b.remaining.is_some_and(|r| r + 1.0 >= *limit as f64));
        let Some(restored) = restored.cloned() else {
            self.evidence.push(format!("after the reset: {}", describe_response(&after)));
            return Ok(self.unfinished_window(name, *limit, *longest_reset));
        };
        Ok(self.found_after_reset(&spent, &first, first_range, &after, &restored))
    }

    /// Spends the quota `budget` reports, one request at a time, until it is empty, a request
    /// is refused although room was said to remain, the budget stops being reported, or the
    /// probe's request allowance runs out.
    async fn spend(&mut self, budget: ServerBudget) -> Result<Spent, ProbeError> {
        let reset = budget.reset_after.unwrap_or_default();
        let mut spent = Spent {
            limit: budget.limit.unwrap_or(1.0).floor().max(1.0) as u64,
            name: budget.name,
            remaining: budget.remaining.unwrap_or(0.0),
            reset,
            first_reset: reset,
            longest_reset: reset,
            spent: 1,
            drain_start: self.samples.len(),
            interrupted: false,
        };
        while spent.remaining >= 1.0 {
            let Some(sample) = self.send().await? else { break };
            if sample.status == 0 {
                continue;
            }
            if sample.refused() {
                spent.interrupted = true;
                let message = format!(
                    "request {}: refused although {} were said to remain",
                    self.samples.len(),
                    trim(spent.remaining)
                );
                self.evidence.push(message);
                break;
            }
            let Some(now) = same_budget(&sample.info, &spent.name, spent.limit) else {
                self.evidence.push(format!("request {}: {}", self.samples.len(), describe_response(&sample)));
                spent.interrupted = true;
                break;
            };
            spent.spent += 1;
            spent.remaining = now.remaining.unwrap_or(0.0);
            spent.reset = now.reset_after.unwrap_or_default();
            spent.longest_reset = spent.longest_reset.max(spent.reset);
        }
        Ok(spent)
    }

    /// The probe ran out of requests before the quota did. A reset that grew as requests were
    /// spent is a bucket's time to refill: stretch it as if the rest had been spent too. One
    /// that did not is a window's end: the window is at least that long; take the next whole
    /// second, minute, hour or day.
    fn not_drained(&mut self, spent: &Spent, drain_time: f64) -> Found {
        let Spent { name, limit, remaining, first_reset, longest_reset, .. } = spent;
        self.evidence.push(format!(
            "'{name}': {} requests in {drain_time:.2}s left {} of {limit}; the maximum was reached before it ran out",
            spent.spent,
            trim(*remaining)
        ));
        let grew = *longest_reset > *first_reset + Duration::from_secs(1);
        let (period, how) = if grew {
            (
                longest_reset.as_secs_f64().max(1.0) * *limit as f64 / spent.spent.max(1) as f64,
                "the reset grew as requests were spent (a refill): it is scaled as if all had been spent",
            )
        } else {
            (
                natural_period(longest_reset.as_secs_f64()),
                "the reset did not grow (a window's end): the window is taken as the next whole second, minute, hour or day",
            )
        };
        Found {
            found: Suggestion { budgets: vec![window_found(name, *limit, period)], concurrency: None },
            confidence: Confidence::Low,
            reasons: vec![
                format!(
                    "the headers give a limit of {limit} but no window, and --max-requests was too small to spend it"
                ),
                how.into(),
                margin_reason(self.options.margin),
            ],
            discovered: 1,
        }
    }

    /// The window the quota's first request started, as a range, when it did start one: only
    /// if the window it implies ends when the spent quota says it does (a sliding counter's
    /// first reset is a refill, not a window).
    fn first_window(&self, first: &Sample, spent: &Spent) -> Option<(f64, f64)> {
        let (name, limit) = (&spent.name, spent.limit);
        let last = self.samples.last().unwrap_or(first);
        let emptied_end = same_budget(&last.info, name, limit).and_then(|budget| window_range(last, budget));
        same_budget(&first.info, name, limit)
            .filter(|budget| budget.remaining.is_some_and(|r| r + 1.0 == limit as f64))
            .and_then(|budget| window_range(first, budget))
            .filter(|(lo, hi)| {
                emptied_end.is_some_and(|(end_lo, end_hi)| {
                    let (end_lo, end_hi) = (last.sent + end_lo, last.answered + end_hi);
                    first.sent + lo < end_hi && end_lo < first.answered + hi
                })
            })
    }

    /// What the quota is, from how long it took to come back empty and how soon one request
    /// on the restored quota resets: a bucket when that is much shorter, else a window.
    fn found_after_reset(
        &mut self,
        spent: &Spent,
        first: &Sample,
        first_range: Option<(f64, f64)>,
        after: &Sample,
        restored: &ServerBudget,
    ) -> Found {
        let Spent { name, limit, reset: empty_reset, .. } = spent;
        let one_reset = restored.reset_after.unwrap_or_default();
        self.evidence.push(format!(
            "after waiting out the reset, one request on the restored quota resets in {}",
            format_wait(one_reset)
        ));
        let empty = match window_range(after, restored) {
            Some(restored_range) => measured_window(first_range, restored_range, after.answered - first.sent),
            None => empty_reset.as_secs_f64().max(one_reset.as_secs_f64()),
        }
        .max(0.001);
        let (budget, kind) = if one_reset.as_secs_f64() * 2.0 < empty_reset.as_secs_f64() {
            let per_s = *limit as f64 / empty_reset.as_secs_f64();
            (bucket_found(name, *limit, per_s), format!("a bucket of {limit} refilling {}/s", trim(per_s)))
        } else {
            (window_found(name, *limit, empty), format!("a window of {limit} per {}s", trim(empty)))
        };
        let reasons = vec![
            format!("the headers ({}) give the limit and the reset but no window", source_of(&after.info, name)),
            format!(
                "empty, the quota took {} to come back; after one request on a full quota, {}: {kind}",
                format_wait(*empty_reset),
                format_wait(one_reset)
            ),
            "a window is the first request's reset, known to the value's rounding; a request just past the whole second \
             inside that range, let through, bounds it from above (so what is found is never shorter than the window)"
                .into(),
            margin_reason(self.options.margin),
        ];
        Found {
            found: Suggestion { budgets: vec![budget], concurrency: None },
            confidence: Confidence::Medium,
            reasons,
            discovered: 1,
        }
    }

    /// After the quota was spent: waits for the window to end and sends one request. With the
    /// first request's window range known, it goes just past the largest whole second in that
    /// range (counted from the last request spent, so a moving window has let all of them go);
    /// if that was too early (refused), it waits out what the server said and asks once more.
    async fn send_after_reset(
        &mut self,
        first_range: Option<(f64, f64)>,
        empty_reset: Duration,
    ) -> Result<Option<Sample>, ProbeError> {
        const PAST: Duration = Duration::from_millis(20);
        let reported = empty_reset + PAST;
        let emptied = self.samples.last().map_or(0.0, |sample| sample.answered);
        let candidate = first_range.map(|(lo, hi)| {
            let whole = hi.floor();
            let window = if whole > lo && whole > 0.0 { whole } else { hi };
            Duration::from_secs_f64((emptied + window - self.now()).max(0.0)) + PAST
        });
        let early = candidate.filter(|candidate| *candidate < reported);
        if !self.wait(early.unwrap_or(reported)).await {
            return Ok(None);
        }
        let Some(after) = self.send().await? else { return Ok(None) };
        let Some(early) = early.filter(|_| after.refused()) else { return Ok(Some(after)) };
        self.evidence.push(format!(
            "request {}: refused {} after the quota was spent: the window is longer than a whole second in range",
            self.samples.len(),
            format_wait(early)
        ));
        if !self.wait(reported.saturating_sub(early)).await {
            return Ok(None);
        }
        self.send().await
    }

    fn unfinished_window(&self, name: &str, limit: u64, longest_reset: Duration) -> Found {
        let period = longest_reset.as_secs_f64().max(1.0);
        Found {
            found: Suggestion { budgets: vec![window_found(name, limit, period)], concurrency: None },
            confidence: Confidence::Low,
            reasons: vec![
                format!("the quota of {limit} was spent, but how it comes back could not be seen cleanly"),
                "the window is the longest reset seen".into(),
                margin_reason(self.options.margin),
            ],
            discovered: 1,
        }
    }

    /// Path 3: no rate-limit headers: the first refusal shows the burst, then the refill is measured.
    async fn without_headers(&mut self, first: Sample) -> Result<Found, ProbeError> {
        let margin = self.options.margin;
        let mut refusal = first.refused().then_some(first);
        while refusal.is_none() {
            match self.send().await? {
                Some(sample) if sample.refused() => refusal = Some(sample),
                Some(_) => {}
                None => break,
            }
        }
        // Errors and dropped connections were let through (and counted) by the limit too.
        let passed: Vec<Sample> = self.samples.iter().filter(|s| !s.refused()).cloned().collect();
        let Some(refusal) = refusal else {
            let span = self.now();
            self.evidence.push(format!(
                "{} requests one after another over {span:.2}s: all passed, none refused, no usable rate-limit header",
                passed.len()
            ));
            return Ok(Found {
                found: Suggestion::default(),
                confidence: Confidence::Low,
                reasons: vec![
                    "no limit was met within --max-requests sent one at a time, and the headers say nothing usable"
                        .into(),
                    "raise --max-requests to look further, or send concurrently with `ratescope burst`".into(),
                ],
                discovered: 0,
            });
        };
        let n1 = passed.len() as u64;
        if n1 == 0 {
            return Ok(self.refused_at_once(&refusal));
        }
        let t_first = passed[0].sent;
        let t1 = refusal.sent;
        let retry_after = refusal.info.retry_after;
        self.evidence.push(format!(
            "{n1} requests one after another passed in {:.2}s; request {} was refused ({}{})",
            t1 - t_first,
            self.samples.len(),
            refusal.status,
            retry_after
                .map_or_else(|| ", no Retry-After".to_owned(), |ra| format!(", Retry-After {}", format_wait(ra)))
        ));
        match retry_after {
            Some(ra) if ra >= Duration::from_secs(2) => self.window_or_slow_bucket(n1, t_first, &refusal, ra).await,
            _ => self.ramp_refill(n1, t_first, &refusal, retry_after.unwrap_or(Duration::from_secs(1))).await,
        }
        .map(|mut found| {
            found.reasons.push(margin_reason(margin));
            found
        })
    }

    fn refused_at_once(&mut self, refusal: &Sample) -> Found {
        self.evidence.push(format!("the very first request was refused: {}", describe_response(refusal)));
        Found {
            found: Suggestion::default(),
            confidence: Confidence::Low,
            reasons: vec![
                "the API refused the first request: its quota is spent (by someone else?); probe again later".into(),
            ],
            discovered: 0,
        }
    }

    /// A long Retry-After: wait it out and send as many again. All pass: a window. Some: a slow bucket.
    async fn window_or_slow_bucket(
        &mut self,
        n1: u64,
        t_first: f64,
        refusal: &Sample,
        ra: Duration,
    ) -> Result<Found, ProbeError> {
        if !self.wait(ra + Duration::from_millis(20)).await {
            return Ok(self.burst_only(n1, ra));
        }
        let reopened = self.now();
        let mut passed = Vec::new();
        let mut refused = false;
        while (passed.len() as u64) < n1 {
            match self.send().await? {
                Some(sample) if sample.refused() => {
                    refused = true;
                    break;
                }
                Some(sample) => passed.push(sample),
                None => break,
            }
        }
        let k = passed.len() as u64;
        if !refused && k == n1 {
            let window = reopened - t_first;
            self.evidence.push(format!(
                "after waiting out Retry-After, all {n1} passed again at once: a window of {n1} per at most {}s",
                trim(window)
            ));
            return Ok(Found {
                found: Suggestion { budgets: vec![window_found("window", n1, window)], concurrency: None },
                confidence: Confidence::Medium,
                reasons: vec![
                    "no usable rate-limit headers: the limit was found by the first refusal".into(),
                    format!("the whole quota came back at once after Retry-After: a window, measured from the first request to its reopening ({}s, Retry-After has whole seconds)", trim(window)),
                    "counting from the first request, the window can only be overestimated, which errs on the safe side".into(),
                ],
                discovered: 1,
            });
        }
        if !refused {
            return Ok(self.burst_only(n1, ra));
        }
        let last = passed.last().map_or(reopened, |s| s.sent);
        let per_s = (k.max(1) as f64) / (last - refusal.sent).max(0.001);
        self.evidence.push(format!(
            "after waiting out Retry-After, {k} of {n1} passed before the next refusal: the quota comes back gradually, about {}/s",
            trim(per_s)
        ));
        let capacity = n1;
        Ok(Found {
            found: Suggestion { budgets: vec![bucket_found("bucket", capacity, per_s)], concurrency: None },
            confidence: if k >= 5 { Confidence::Medium } else { Confidence::Low },
            reasons: vec![
                format!("no usable rate-limit headers: the first refusal showed a burst of {n1}"),
                format!("only {k} came back after Retry-After: a slow bucket, whose rate follows from them"),
                "a bucket costs two refusals to find: one for its capacity, one for its rate".into(),
            ],
            discovered: 2,
        })
    }

    fn burst_only(&mut self, n1: u64, ra: Duration) -> Found {
        let window = ra.as_secs_f64().max(1.0);
        Found {
            found: Suggestion { budgets: vec![window_found("window", n1, window)], concurrency: None },
            confidence: Confidence::Low,
            reasons: vec![
                format!("no usable rate-limit headers: the first refusal showed a burst of {n1}"),
                "what comes back after Retry-After could not be measured: the window is a guess".into(),
            ],
            discovered: 1,
        }
    }

    /// A short (or no) Retry-After: from the refusal on, a careful ramp until the next refusal;
    /// the rate lies between what lets every success through and what would have let the refusal through.
    async fn ramp_refill(
        &mut self,
        n1: u64,
        t_first: f64,
        refusal: &Sample,
        first_gap: Duration,
    ) -> Result<Found, ProbeError> {
        let mut gap = first_gap.max(Duration::from_secs(1));
        let mut passed = Vec::new();
        let mut refused_at = None;
        let cap = (4 * n1 + 20) as usize;
        while passed.len() < cap {
            if !self.wait(gap).await {
                break;
            }
            match self.send().await? {
                Some(sample) if sample.refused() => {
                    refused_at = Some(sample.sent);
                    break;
                }
                Some(sample) => passed.push(sample.sent),
                None => break,
            }
            gap = gap.mul_f64(1.0 / RAMP_STEP);
            if gap < Duration::from_millis(1) {
                gap = Duration::ZERO;
            }
        }
        let t1 = refusal.sent;
        let burst_time = (t1 - t_first).max(0.0);
        let (per_s, upper) = fitted_refill(&passed, refused_at, t1, n1 as f64, burst_time);
        let capacity = ((n1 as f64 + 0.5 - per_s * burst_time).floor() as u64).clamp(1, n1);
        let k = passed.len();
        self.evidence.push(match refused_at {
            Some(at) => format!(
                "from the refusal on, a ramp from one request per {} ({}% faster each time): {k} passed, refused after {:.2}s",
                format_wait(first_gap.max(Duration::from_secs(1))),
                trim((RAMP_STEP - 1.0) * 100.0),
                at - t1
            ),
            None => format!("from the refusal on, a ramp: all {k} passed (no second refusal)"),
        });
        let bracket = upper.map_or_else(|| "at least".to_owned(), |upper| format!("below {}/s and", trim(upper)));
        self.evidence.push(format!(
            "a bucket refilling {bracket} fast enough for all {k} fits at about {}/s; less the refill during the first burst, the capacity is {capacity}",
            trim(per_s)
        ));
        let mut reasons = vec![
            format!("no usable rate-limit headers: the first refusal showed a burst of {n1}"),
            "Retry-After was short: the quota refills gradually (a bucket); a ramp after the refusal measured the refill".into(),
            "a bucket costs two refusals to find: one for its capacity, one for its rate".into(),
        ];
        let confidence = if refused_at.is_some() && k >= 10 {
            Confidence::Medium
        } else {
            reasons.push("few requests passed during the ramp: the rate is rough".into());
            Confidence::Low
        };
        Ok(Found {
            found: Suggestion { budgets: vec![bucket_found("bucket", capacity, per_s)], concurrency: None },
            confidence,
            reasons,
            discovered: if refused_at.is_some() { 2 } else { 1 },
        })
    }

    fn report(&self, mut found: Found) -> ProbeReport {
        let margin = self.options.margin;
        let mut reasons = self.doubts.reasons();
        reasons.extend(self.notes.iter().cloned());
        reasons.append(&mut found.reasons);
        if !self.doubts.is_empty() {
            found.confidence = Confidence::Low;
        }
        if let Some(left_out) = configurable(&mut found.found, margin) {
            reasons.push(left_out);
            found.confidence = Confidence::Low;
        }
        ProbeReport {
            suggested: found.found.with_margin(margin),
            found: found.found.with_margin(0.0),
            evidence: self.evidence.clone(),
            requests_used: self.samples.len(),
            confidence: found.confidence,
            reasons,
            throttled: self.samples.iter().filter(|s| s.refused()).count(),
            discovered: found.discovered,
            elapsed_s: self.now(),
            unit_budgets: self.unit_budgets(),
        }
    }

    /// Every budget in another unit than requests the answers reported, as last seen.
    fn unit_budgets(&self) -> Vec<UnitBudget> {
        let mut seen: Vec<UnitBudget> = Vec::new();
        for budget in self.samples.iter().flat_map(|sample| &sample.info.budgets).filter(|b| b.unit != "requests") {
            let last = UnitBudget {
                name: budget.name.clone(),
                unit: budget.unit.clone(),
                limit: budget.limit,
                remaining: budget.remaining,
                resets_in_s: budget.reset_after.map(|reset| reset.as_secs_f64()),
                window_s: budget.window.map(|window| window.as_secs_f64()),
                source: budget.source.clone(),
            };
            match seen.iter_mut().find(|known| known.name == last.name && known.unit == last.unit) {
                Some(known) => *known = last,
                None => seen.push(last),
            }
        }
        seen
    }
}

/// Leaves out of `found` what, less `margin`, a limiter could not be configured with (a budget
/// of an impossible size, a concurrency cap beyond the engine's), so the suggestion can always
/// be saved; says what was left out.
fn configurable(found: &mut Suggestion, margin: f64) -> Option<String> {
    let mut left_out = Vec::new();
    found.budgets.retain(|budget| match budget.with_margin(margin).to_spec() {
        Ok(_) => true,
        Err(err) => {
            left_out.push(format!("{} ({err})", budget.describe()));
            false
        }
    });
    if let Some(cap) = found.concurrency.filter(|cap| LimiterConfig::new().with_concurrency(*cap).validate().is_err()) {
        left_out.push(format!("concurrency {cap}"));
        found.concurrency = None;
    }
    let config = ProbeReport::config_of(&found.with_margin(margin));
    if let Err(err) = config {
        left_out.push(format!("every budget ({err})"));
        found.budgets.clear();
    }
    (!left_out.is_empty()).then(|| format!("left out, as no limiter can hold it: {}", left_out.join(", ")))
}

/// A bucket that was refused at `t0` (holding half a token then) and refills at `rate`, up to
/// `n1 + 0.5 - rate * burst_time` (the capacity that explains a burst of `n1` over `burst_time`
/// ending in a refusal): does it admit a request at each of `times`?
fn bucket_admits(times: &[f64], t0: f64, n1: f64, burst_time: f64, rate: f64) -> bool {
    let capacity = (n1 + 0.5 - rate * burst_time).max(1.0);
    let (mut tokens, mut last) = (0.5f64, t0);
    times.iter().all(|&t| {
        tokens = (tokens + rate * (t - last).max(0.0)).min(capacity);
        last = t;
        let ok = tokens >= 1.0 - 1e-9;
        tokens -= 1.0;
        ok
    })
}

/// The smallest rate for which `admits` holds (it holds for every faster one), by bisection.
fn smallest_rate(admits: impl Fn(f64) -> bool) -> Option<f64> {
    let (mut low, mut high) = (1e-6f64, 1e6f64);
    if !admits(high) {
        return None;
    }
    if admits(low) {
        return Some(low);
    }
    for _ in 0..100 {
        let mid = (low * high).sqrt();
        if admits(mid) { high = mid } else { low = mid }
    }
    Some(high)
}

/// The refill rate that explains a ramp: at least what lets every success through, less than
/// what would have let the refusal through too; the middle of the two when both are known.
fn fitted_refill(passed: &[f64], refused_at: Option<f64>, t0: f64, n1: f64, burst_time: f64) -> (f64, Option<f64>) {
    let lowest = smallest_rate(|rate| bucket_admits(passed, t0, n1, burst_time, rate)).unwrap_or(1e-6);
    let highest = refused_at.and_then(|at| {
        let mut all = passed.to_vec();
        all.push(at);
        smallest_rate(|rate| bucket_admits(&all, t0, n1, burst_time, rate))
    });
    (highest.map_or(lowest, |high| (lowest + high) / 2.0), highest)
}

/// Where a window that `sample` (the first request of its window) started may end: its reset,
/// less the value's rounding, to its reset plus the round trip (the server started the window
/// somewhere between send and answer), in seconds.
fn window_range(sample: &Sample, budget: &ServerBudget) -> Option<(f64, f64)> {
    let reset = budget.reset_after?.as_secs_f64();
    Some((reset - budget.reset_precision.as_secs_f64(), reset + (sample.answered - sample.sent)))
}

/// The window, never shorter than the truth: the restored request's range bounds it from above;
/// when the first request's range agrees with it (the first request started its window), so
/// do that range and `proof`, the time from the first request's send to the answer of the
/// restored one (whose window had ended by then).
fn measured_window(first: Option<(f64, f64)>, restored: (f64, f64), proof: f64) -> f64 {
    match first {
        Some((lo, hi)) if lo < restored.1 && restored.0 < hi => hi.min(restored.1).min(proof),
        _ => restored.1,
    }
}

/// The budget named `name` with limit `limit` in `info`, if the server still reports it.
fn same_budget<'a>(info: &'a RateLimitInfo, name: &str, limit: u64) -> Option<&'a ServerBudget> {
    info.budgets
        .iter()
        .find(|b| b.name == name && b.limit.is_some_and(|l| l.floor() as u64 == limit) && trust::plausible(b))
}

/// The dialect that reported the budget `name` (e.g. `x-ratelimit`, `github`).
fn source_of(info: &RateLimitInfo, name: &str) -> String {
    info.budgets.iter().find(|b| b.name == name).map_or_else(|| "headers".to_owned(), |b| b.source.clone())
}

/// The shortest of 1 s, 1 min, 1 h, 1 day (or whole days) that is at least `seconds`.
fn natural_period(seconds: f64) -> f64 {
    [1.0, 60.0, 3600.0, 86_400.0]
        .into_iter()
        .find(|period| *period >= seconds)
        .unwrap_or_else(|| (seconds / 86_400.0).ceil() * 86_400.0)
}

/// A sliding window of `limit` per `window_s`, as found (the margin comes with the report).
fn window_found(name: &str, limit: u64, window_s: f64) -> SuggestedBudget {
    SuggestedBudget::SlidingWindow { name: name.to_owned(), limit, window_s }
}

/// A token bucket of `capacity` refilling `per_s`, as found.
fn bucket_found(name: &str, capacity: u64, per_s: f64) -> SuggestedBudget {
    SuggestedBudget::TokenBucket { name: name.to_owned(), capacity, per_s }
}

fn margin_reason(margin: f64) -> String {
    format!("a safety margin of {}% below what was found", trim(margin * 100.0))
}

/// `200; ietf-draft: 'burst' 5 per 1s (4 left, full in 1s), ...` or `429; no rate-limit headers; Retry-After 1s`.
fn describe_response(sample: &Sample) -> String {
    let mut text = sample.status.to_string();
    let budgets = &sample.info.budgets;
    if budgets.is_empty() {
        text.push_str("; no rate-limit headers");
    } else {
        let items: Vec<String> = budgets.iter().map(describe_budget).collect();
        text.push_str(&format!("; {}: {}", budgets[0].source, items.join(", ")));
    }
    if let Some(ra) = sample.info.retry_after {
        text.push_str(&format!("; Retry-After {}", format_wait(ra)));
    }
    text
}

fn describe_budget(budget: &ServerBudget) -> String {
    let limit = budget.limit.map_or_else(|| "?".to_owned(), trim);
    let window = budget.window.map_or_else(String::new, |w| format!(" per {}", format_wait(w)));
    let remaining = budget.remaining.map_or_else(String::new, |r| format!(", {} left", trim(r)));
    let reset = budget.reset_after.map_or_else(String::new, |r| format!(", resets in {}", format_wait(r)));
    format!("'{}' {limit}{window}{remaining}{reset}", budget.name)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn margins_cut_requests_or_stretch_the_window() {
        let wide = window_found("m", 100, 60.0).with_margin(0.05);
        assert_eq!(wide, SuggestedBudget::SlidingWindow { name: "m".into(), limit: 95, window_s: 60.0 });
        let small = window_found("s", 5, 1.0).with_margin(0.05);
        assert_eq!(small, SuggestedBudget::SlidingWindow { name: "s".into(), limit: 5, window_s: 1.05 });
        let bucket = bucket_found("b", 10, 4.0).with_margin(0.05);
        assert_eq!(bucket, SuggestedBudget::TokenBucket { name: "b".into(), capacity: 10, per_s: 3.8 });
    }

    #[test]
    fn what_no_limiter_can_hold_is_left_out_and_said() {
        let mut found = Suggestion {
            budgets: vec![window_found("w", 10, 60.0), window_found("years", 10, 1e12), bucket_found("b", 5, 1e300)],
            concurrency: Some(usize::MAX),
        };
        let said = configurable(&mut found, 0.05).unwrap();
        assert_eq!(found.budgets, [window_found("w", 10, 60.0)]);
        assert_eq!(found.concurrency, None);
        assert!(said.contains("window 10/1000000000000s") && said.contains("concurrency"), "{said}");
        assert!(ProbeReport::config_of(&found.with_margin(0.05)).is_ok());
        let mut fine = Suggestion { budgets: vec![window_found("w", 10, 60.0)], concurrency: Some(4) };
        assert_eq!(configurable(&mut fine, 0.05), None);
        // Two budgets of one name cannot share a limiter: none is kept rather than a config that fails.
        let mut twins =
            Suggestion { budgets: vec![window_found("w", 10, 1.0), window_found("w", 100, 60.0)], concurrency: None };
        assert!(configurable(&mut twins, 0.05).is_some_and(|said| said.contains("every budget")));
        assert!(twins.budgets.is_empty());
    }

    #[test]
    fn the_fitted_refill_lies_between_the_successes_and_the_refusal() {
        // From empty at 0, one request every 0.25 s passes until 5 s; one 0.1 s later is refused.
        let passed: Vec<f64> = (1..=20).map(|i| f64::from(i) * 0.25).collect();
        let (rate, upper) = fitted_refill(&passed, Some(5.1), 0.0, 10.0, 0.0);
        let upper = upper.unwrap();
        assert!(rate < upper && (3.5..=4.5).contains(&rate), "{rate} below {upper}");
        assert!(smallest_rate(|_| false).is_none());
    }
}
