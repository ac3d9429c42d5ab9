//! The server's budgets as a live allowance: a mirror of what each budget the server reports
//! has left, reconciled response by response in the order requests were admitted, and an
//! admission check that lets through only what the mirror says still fits.
//!
//! # The rules
//!
//! - **Scout first.** Until the first response is in, one request at a time goes out. Its
//!   headers open the key up to what they allow; a response with no limit headers switches
//!   the key to the unpublished mode (nothing held until the server refuses).
//! - **Remaining is an allowance.** After a report "`R` remaining" from the request with
//!   ticket `t`, the key may still send `R` minus every request admitted after `t`, minus every
//!   earlier one still unanswered then (the server may have counted it after `t`).
//!   An earlier one's own answer settles it: more remaining than the report means the server
//!   counted it before, so it is already in the report and its unit comes back.
//!   Before a budget's reset a newer report never widens the allowance: a window only fills
//!   until it resets, and servers under concurrency do report out of step.
//! - **Newest report wins.** A report is taken only from a request admitted after the one
//!   behind the current report, so a late answer about an old state never overwrites a newer
//!   one. After a reset, only requests admitted since the reset report on the new window.
//! - **Restore at the reset.** Once a budget's reset instant passes: with its limit and
//!   window known, it is whole again, and the key's limiter holds a sliding window of that
//!   limit over the key's own sends (a window and the longest exchange long), which frees a
//!   moving window's slots exactly as the server does and costs a fixed window nothing.
//!   A budget made whole is not whole again before a window has passed; a moving window
//!   still counting the last window's tail frees those slots one by one instead, each a
//!   window and the longest exchange after its send (the sliding window follows the same). Without them the mirror does not guess (a fixed window restores all, a moving window
//!   only what expired): one request goes as a scout and its answer is the new state.
//! - **Never early.** Resets written in whole seconds are upper bounds rounded up (the
//!   convention of every limiter we test against); the mirror refines one with its own send
//!   log (the oldest request the server still counts, plus the window) only when the result
//!   lies inside the value's rounding. A refusal right after a believed reset teaches a slack
//!   added to every later reset, so a wrong guess costs one refusal, not one per window.
//! - **No headers, a careful ramp.** When the server publishes nothing, requests in flight
//!   grow by one per answer (doubling per round trip) from the scout's one, so the first
//!   refusal finds at most about half a round too many; it halves the ramp and paces the key
//!   at the rate the server let through (successes over the time until the retry). Then the
//!   pace grows by 2% per request let through and is cut to 70% by a refusal (once per change:
//!   answers to requests sent at an older pace do not count), an increase-decrease search
//!   around the server's hidden rate.
//! - **Windows from evidence.** A window's length comes from a policy header, or from the
//!   first request of a window (remaining = limit − 1): its reset is the window, known to the
//!   value's rounding; successive windows narrow it, and a whole number of seconds inside the
//!   range is preferred (the largest, so the guess errs late).

use std::any::Any;
use std::collections::{BTreeMap, VecDeque};
use std::time::Duration;

use tokio::time::Instant;

use super::headers::{RateLimitInfo, ServerBudget};
use super::unit_mirror::{UnitMirror, UnitWait};
use crate::engine::{AdmissionCheck, CheckReadiness, Cost, Unit, format_wait};

/// Admissions kept for refining resets: enough for the largest window limits we refine.
const SEND_LOG: usize = 1 << 16;
/// The most slack learned from refusals (a reset is never rounded by more than a second).
const MAX_SLACK: Duration = Duration::from_millis(1500);
/// Unpublished mode: a refusal cuts the pace to this share; each pass grows it by this factor
/// (additive increase in effect: about 2% per request, so a second's traffic probes upward).
const PACE_CUT: f64 = 0.7;
const PACE_GROWTH: f64 = 1.02;
/// The slowest pace learned (one request per 100 s).
const MIN_PACE: f64 = 0.01;

/// How long a budget with no reset of its own stays spent before a scout asks again.
const UNKNOWN_RESET: Duration = Duration::from_secs(1);

/// The server's budgets for one key, as the client believes them now.
#[derive(Debug)]
pub struct ServerMirror {
    next_ticket: u64,
    /// Admitted and not yet answered: ticket → admission instant.
    in_flight: BTreeMap<u64, Instant>,
    /// Recent admissions in ticket order.
    sends: VecDeque<(u64, Instant)>,
    phase: Phase,
    budgets: Vec<Mirrored>,
    /// How much later than a believed reset the server still refused (learned, capped).
    slack: Duration,
    /// The longest admission-to-answer time seen: bounds the one-way trip to the server.
    longest_exchange: Duration,
    refusals: u64,
    /// Unpublished mode: how many may be in flight (grows by one per answered request).
    ramp: u64,
    /// Unpublished mode: answers that were not refusals, the first admission, and the pace
    /// (requests per second) learned from refusals.
    passed: u64,
    first_admitted: Option<Instant>,
    pace: Option<f64>,
    /// The first ticket admitted under the pace last told, and that pace.
    pace_since: u64,
    pace_told: f64,
    /// The server's budgets in other units (tokens, points).
    units: UnitMirror,
}

/// What the mirror knows about the server's way of publishing limits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// Nothing heard yet: one request at a time, `scout` the one out.
    Scouting {
        /// The ticket of the request out, if any.
        scout: Option<u64>,
    },
    /// The server publishes budgets counting requests: the mirror holds them.
    Published,
    /// The server's responses carry no request budgets: nothing is held here (pauses after
    /// refusals and learned pacing act through the limiter).
    Unpublished,
}

/// One budget the server reports, counting requests.
#[derive(Debug, Clone)]
struct Mirrored {
    name: String,
    limit: Option<u64>,
    remaining: u64,
    /// The ticket of the request whose answer gave `remaining`.
    report_ticket: u64,
    /// Admitted since that request, plus earlier ones unanswered when the report came.
    spent_since: u64,
    /// The last reset: the first ticket after it, and when the mirror believed it came.
    last_reset: Option<(u64, Instant)>,
    /// When the budget was last made whole at a reset: the next is a window later at the
    /// earliest (the sliding window over the key's sends frees what expires before that).
    restored_at: Option<Instant>,
    /// How coarsely the server wrote the reset.
    precision: Duration,
    /// The most the window can still hold: the first report of the window, less every
    /// admission since (later reports and settled units never lift the allowance above it).
    ceiling: u64,
    /// Those earlier ones, still unanswered: an answer showing more remaining than the report
    /// proves it was counted before it, and gives its unit back.
    unsure: Vec<u64>,
    /// When the server restores the budget, at the latest (slack included).
    reset_at: Instant,
    /// Before the next whole restore: when each request the newest report counted from before
    /// the last restore leaves a moving window (sent, plus the window, plus the longest
    /// exchange), earliest first. Each gives its unit back then.
    tail: VecDeque<Instant>,
    /// The reset passed: the window rolled, and only a scout admitted since may report on it.
    rolled: Option<Rolled>,
    window: WindowEstimate,
}

impl Mirrored {
    /// A budget first named by the report from `ticket`; that report fills it in.
    fn first_seen(name: &str, ticket: u64, received_at: Instant) -> Self {
        Self {
            name: name.to_owned(),
            limit: None,
            remaining: 0,
            report_ticket: ticket,
            spent_since: 0,
            ceiling: 0,
            precision: Duration::ZERO,
            last_reset: None,
            restored_at: None,
            unsure: Vec::new(),
            reset_at: received_at,
            tail: VecDeque::new(),
            rolled: None,
            window: WindowEstimate::default(),
        }
    }

    /// The reset passed. With a known limit and window (so the limiter holds a sliding window
    /// over the key's own sends, exact for a moving window), the budget is whole again;
    /// otherwise one scout asks what came back.
    fn roll(&mut self, now: Instant, next_ticket: u64, in_flight: &BTreeMap<u64, Instant>) {
        let believed = self.reset_at;
        self.last_reset = Some((next_ticket, believed));
        match (self.limit, self.window.estimate()) {
            (Some(limit), Some(window)) => {
                // Requests still out may be counted in the new window.
                let out = in_flight.len() as u64;
                self.remaining = limit;
                self.report_ticket = next_ticket.saturating_sub(1);
                self.spent_since = out;
                self.ceiling = limit.saturating_sub(out);
                self.unsure = in_flight.keys().copied().collect();
                self.reset_at = now + window;
                self.restored_at = Some(now);
                self.tail.clear();
            }
            _ => self.rolled = Some(Rolled { since: next_ticket, scout: None }),
        }
    }

    /// What may still be sent at `now`: the newest report's room, never above the ceiling
    /// while nothing can have been restored yet. Near an unpublished window's reset (within
    /// the reset's rounding) the ceiling is lifted: a moving window frees its oldest requests
    /// one by one, and a report showing more room may be true. A published window is the
    /// server's own policy: its room comes back at the reset.
    fn allowance(&self, now: Instant) -> u64 {
        let drained = self.tail.iter().take_while(|leaves| **leaves <= now).count() as u64;
        let left = (self.remaining + drained).saturating_sub(self.spent_since);
        let rising = self.window.exact.is_none() && now + self.precision >= self.reset_at;
        if rising { left } else { left.min(self.ceiling + drained) }
    }

    /// When the next request of the last window's tail leaves the server's window.
    fn next_drain(&self, now: Instant) -> Option<Instant> {
        self.tail.iter().copied().find(|leaves| *leaves > now)
    }
}

#[derive(Debug, Clone, Copy)]
struct Rolled {
    /// The first ticket admitted after the reset.
    since: u64,
    scout: Option<u64>,
}

/// A window's length known to lie in `(lo, hi]`, or exactly.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
struct WindowEstimate {
    range: Option<(Duration, Duration)>,
    exact: Option<Duration>,
}

impl WindowEstimate {
    fn observe(&mut self, lo: Duration, hi: Duration) {
        if self.exact.is_some() || hi <= lo {
            return;
        }
        self.range = Some(match self.range {
            None => (lo, hi),
            Some((old_lo, old_hi)) => {
                let (new_lo, new_hi) = (old_lo.max(lo), old_hi.min(hi));
                if new_lo < new_hi {
                    (new_lo, new_hi)
                } else if hi > old_hi {
                    // Inconsistent evidence (the window changed, or an anchor was not one):
                    // keep the longer reading, which errs late.
                    (lo, hi)
                } else {
                    (old_lo, old_hi)
                }
            }
        });
    }

    /// The length to plan with: exact, else the largest whole second in range (below its top,
    /// which a reset written in whole seconds reaches only by chance), else the top.
    fn estimate(&self) -> Option<Duration> {
        if let Some(exact) = self.exact {
            return Some(exact);
        }
        let (lo, hi) = self.range?;
        let whole = Duration::from_secs(hi.as_secs_f64().ceil() as u64).saturating_sub(Duration::from_secs(1));
        Some(if whole > lo && !whole.is_zero() { whole } else { hi })
    }
}

/// One answer, as the mirror needs it.
#[derive(Debug, Clone, Copy)]
pub struct Report<'a> {
    /// The check's ticket of the request (from its permit).
    pub ticket: u64,
    /// The answer's status.
    pub status: u16,
    /// What its rate-limit headers say.
    pub info: &'a RateLimitInfo,
    /// When it arrived.
    pub received_at: Instant,
}

/// What a report taught, for the owner to act on and to tell the user.
#[derive(Debug, Clone, PartialEq)]
pub enum Learned {
    /// The scout's answer decided how the server publishes its limits.
    Scouted(String),
    /// A budget's window length is now known (published, or measured from resets); `margin`
    /// is how much later than its admission the server may have counted a request.
    Window {
        /// The budget's name.
        name: String,
        /// Its limit.
        limit: u64,
        /// The window's length.
        window: Duration,
        /// True when the server published the window, false when measured from resets.
        published: bool,
        /// How much later than admission the server may count a request.
        margin: Duration,
    },
    /// A refusal right after a believed reset: later resets wait this much longer.
    Slack(Duration),
    /// No published budget and a refusal: pace the key at this many requests per second.
    Pace(f64),
}

/// A budget as the mirror holds it, for snapshots and the app.
#[derive(Debug, Clone, PartialEq)]
pub struct MirroredBudget {
    /// The server's name for the budget (or the header's).
    pub name: String,
    /// What it counts: requests, or the unit the server named (tokens, points).
    pub unit: Unit,
    /// Its limit, when the server said.
    pub limit: Option<u64>,
    /// What the last accepted report said.
    pub reported_remaining: u64,
    /// What may still be sent now.
    pub allowance: Option<u64>,
    /// Until the reset (zero once it passed).
    pub resets_in: Duration,
    /// Its window, when known.
    pub window: Option<Duration>,
}

impl Default for ServerMirror {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerMirror {
    /// A mirror that has heard nothing yet (scouting).
    pub fn new() -> Self {
        Self {
            next_ticket: 0,
            in_flight: BTreeMap::new(),
            sends: VecDeque::new(),
            phase: Phase::Scouting { scout: None },
            budgets: Vec::new(),
            slack: Duration::ZERO,
            longest_exchange: Duration::ZERO,
            refusals: 0,
            ramp: 1,
            passed: 0,
            first_admitted: None,
            pace: None,
            pace_since: 0,
            pace_told: 0.0,
            units: UnitMirror::default(),
        }
    }

    /// What it knows so far about how the server publishes limits.
    pub fn phase(&self) -> Phase {
        self.phase
    }

    /// Refusals seen since the mirror was made.
    pub fn refusals(&self) -> u64 {
        self.refusals
    }

    /// The learned slack added to resets.
    pub fn slack(&self) -> Duration {
        self.slack
    }

    /// Every mirrored budget at `now`, requests first, then other units.
    pub fn budgets(&self, now: Instant) -> Vec<MirroredBudget> {
        self.budgets
            .iter()
            .map(|budget| MirroredBudget {
                name: budget.name.clone(),
                unit: Unit::Requests,
                limit: budget.limit,
                reported_remaining: budget.remaining,
                allowance: budget.rolled.is_none().then(|| budget.allowance(now)),
                resets_in: budget.reset_at.saturating_duration_since(now),
                window: budget.window.estimate(),
            })
            .chain(self.units.budgets(now))
            .collect()
    }

    /// Takes in one answer. Returns what it taught (empty most of the time).
    pub fn observe(&mut self, report: Report<'_>) -> Vec<Learned> {
        let Report { ticket, status, info, received_at } = report;
        tracing::trace!(ticket, status, in_flight = self.in_flight.len(), "mirror: an answer");
        let admitted_at = self.in_flight.remove(&ticket).or_else(|| self.sent_at(ticket)).unwrap_or(received_at);
        self.longest_exchange = self.longest_exchange.max(received_at.saturating_duration_since(admitted_at));
        let mut learned = Vec::new();
        let refused = status == 429 || info.throttled;
        if refused {
            self.refusals += 1;
            if let Some(slack) = self.learn_slack(ticket, received_at) {
                learned.push(Learned::Slack(slack));
            }
        }
        let reported: Vec<&ServerBudget> = info
            .budgets
            .iter()
            .filter(|budget| budget.unit == "requests" && budget.remaining.is_some_and(f64::is_finite))
            .collect();
        if let Phase::Scouting { scout } = self.phase {
            if !reported.is_empty() {
                self.phase = Phase::Published;
                let names: Vec<String> = reported.iter().map(|budget| describe_reported(budget)).collect();
                learned.push(Learned::Scouted(format!("the server publishes its budget: {}", names.join(", "))));
            } else if status < 500 {
                self.phase = Phase::Unpublished;
                learned.push(Learned::Scouted(
                    "the server publishes no request budget: sending freely until it refuses".to_owned(),
                ));
            } else if scout == Some(ticket) {
                // A server error says nothing about limits: the next request scouts again.
                self.phase = Phase::Scouting { scout: None };
            }
        }
        if self.phase == Phase::Unpublished {
            learned.extend(self.ramp_after(ticket, refused, received_at, info));
        }
        for budget in reported {
            if let Some(window) = self.take_report(ticket, admitted_at, received_at, budget, info) {
                learned.push(window);
            }
        }
        self.units.observe(ticket, info, received_at, self.slack);
        learned
    }

    /// Unpublished mode: grow the ramp on a pass; halve it and learn a pace on a refusal.
    fn ramp_after(
        &mut self,
        ticket: u64,
        refused: bool,
        received_at: Instant,
        info: &RateLimitInfo,
    ) -> Option<Learned> {
        // Answers to requests admitted before the pace last changed say nothing about it.
        let current = ticket >= self.pace_since;
        if !refused {
            self.passed += 1;
            self.ramp = (self.ramp + 1).min(1 << 20);
            let pace = self.pace.filter(|_| current)? * PACE_GROWTH;
            self.pace = Some(pace);
            return (pace >= self.pace_told * 1.05).then(|| self.tell_pace(pace));
        }
        if self.pace.is_some() && !current {
            return None;
        }
        self.ramp = (self.ramp / 2).max(1);
        let pace = match self.pace {
            Some(pace) => pace * PACE_CUT,
            None => {
                // What the server let through until now, over the time until it takes more.
                // Requests sent before the refused one and still unanswered count as let
                // through: the server took them first, and a refusal often overtakes their
                // answers (counting only answers made the learned pace depend on that race).
                let let_through = self.passed + self.in_flight.range(..ticket).count() as u64;
                let first = self.first_admitted.unwrap_or(received_at);
                let resume = received_at.saturating_duration_since(first) + info.retry_after.unwrap_or(UNKNOWN_RESET);
                let_through.max(1) as f64 / resume.as_secs_f64().max(1e-3)
            }
        }
        .max(MIN_PACE);
        self.pace = Some(pace);
        Some(self.tell_pace(pace))
    }

    /// Announces `pace`: from the next admission on, answers speak of it.
    fn tell_pace(&mut self, pace: f64) -> Learned {
        self.pace_since = self.next_ticket;
        self.pace_told = pace;
        Learned::Pace(pace)
    }

    /// A refusal of a request admitted just after a believed reset: the reset came later.
    fn learn_slack(&mut self, ticket: u64, received_at: Instant) -> Option<Duration> {
        let believed = self
            .budgets
            .iter()
            .filter_map(|budget| budget.last_reset)
            .filter(|(since, _)| ticket >= *since)
            .map(|(_, believed)| believed)
            .max()?;
        for budget in &mut self.budgets {
            budget.last_reset = None;
        }
        let late_by = received_at.saturating_duration_since(believed) + Duration::from_millis(1);
        let slack = (self.slack + late_by).min(MAX_SLACK);
        (slack > self.slack).then(|| {
            self.slack = slack;
            slack
        })
    }

    /// Applies one reported budget if the report is the newest about its window.
    fn take_report(
        &mut self,
        ticket: u64,
        admitted_at: Instant,
        received_at: Instant,
        reported: &ServerBudget,
        info: &RateLimitInfo,
    ) -> Option<Learned> {
        let remaining = reported.remaining.unwrap_or(0.0).floor() as u64;
        let limit = reported.limit.filter(|limit| limit.is_finite() && *limit >= 1.0).map(|limit| limit.floor() as u64);
        let index = self.report_index(&reported.name, ticket, remaining, received_at)?;
        let precision = reported.reset_precision;
        let unsure: Vec<u64> = self.in_flight.range(..ticket).map(|(ticket, _)| *ticket).collect();
        let spent_since = self.next_ticket.saturating_sub(ticket + 1) + unsure.len() as u64;
        let current = &self.budgets[index];
        // The first report of a window sets the most it can hold; before the reset a window
        // only fills, so a later report showing more room is a server counting out of step
        // (seen under concurrency), not room.
        let new_window = current.rolled.is_some() || current.report_ticket == ticket;
        let ceiling = if new_window { remaining.saturating_sub(spent_since) } else { current.ceiling };
        let exchange = received_at.saturating_duration_since(admitted_at);
        // A budget that refills continuously reports when it is full again, not a window.
        let anchor = !reported.refills_continuously() && limit.is_some_and(|limit| remaining + 1 == limit);
        let budget = &mut self.budgets[index];
        let window_before = budget.window.estimate();
        if let Some(window) = reported.window.filter(|window| !window.is_zero()) {
            budget.window.exact = Some(window);
        }
        let reset = reported.reset_after.or(info.retry_after.filter(|_| info.status.is_some_and(|s| s < 300)));
        if let (true, Some(reset)) = (anchor, reset) {
            // The first request of a window: its reset is the window, to the value's rounding
            // (the server started the window somewhere between admission and answer, and
            // within the second its Date names).
            let (started_lo, started_hi) = answered_between(admitted_at, received_at, info.date_lag);
            let lo = (reset + received_at.saturating_duration_since(started_hi)).saturating_sub(precision);
            let hi = reset + received_at.saturating_duration_since(started_lo);
            budget.window.observe(lo, hi);
            tracing::debug!(budget = %budget.name, ?lo, ?hi, ?exchange, range = ?budget.window.range, "mirror: window evidence");
        }
        budget.limit = limit.or(budget.limit);
        budget.remaining = remaining;
        budget.report_ticket = ticket;
        budget.spent_since = spent_since;
        budget.ceiling = ceiling;
        budget.precision = precision;
        budget.unsure = unsure;
        budget.rolled = None;
        let upper = received_at + reset.unwrap_or(UNKNOWN_RESET);
        let reset_at = self.modelled_reset(index, ticket, exchange).filter(|modelled| {
            // Only inside the reported value's rounding: never after it, less than it early.
            *modelled <= upper && *modelled + precision >= upper
        });
        let budget = &mut self.budgets[index];
        let earliest = budget.restored_at.zip(budget.window.estimate()).map(|(at, window)| at + window);
        budget.reset_at = (reset_at.unwrap_or(upper) + self.slack).max(earliest.unwrap_or(received_at));
        let tail = self.counted_tail(index, ticket, exchange);
        let budget = &mut self.budgets[index];
        budget.tail = tail;
        let window = budget.window.estimate();
        match (window, budget.limit) {
            (Some(window), Some(limit)) if window_before != Some(window) => Some(Learned::Window {
                name: budget.name.clone(),
                limit,
                window,
                published: budget.window.exact.is_some(),
                margin: self.longest_exchange.max(exchange),
            }),
            _ => None,
        }
    }

    /// The budget the report from `ticket` renews (made on its first report), or `None` when
    /// a newer report holds it (then the answer only settles what it leaves unsure).
    fn report_index(&mut self, name: &str, ticket: u64, remaining: u64, received_at: Instant) -> Option<usize> {
        let Some(index) = self.budgets.iter().position(|budget| budget.name == name) else {
            self.budgets.push(Mirrored::first_seen(name, ticket, received_at));
            return Some(self.budgets.len() - 1);
        };
        let budget = &self.budgets[index];
        let newer = match budget.rolled {
            Some(rolled) => ticket >= rolled.since,
            None => ticket > budget.report_ticket,
        };
        if !newer {
            self.settle_unsure(index, ticket, remaining);
            return None;
        }
        Some(index)
    }

    /// When budget `index` frees its next unit by the key's own send log, after the report
    /// from `ticket`: the oldest request the server still counts expires a window after it
    /// reached the server, no later than its admission plus the longest exchange seen.
    fn modelled_reset(&self, index: usize, ticket: u64, exchange: Duration) -> Option<Instant> {
        let budget = &self.budgets[index];
        let window = budget.window.estimate()?;
        let used = budget.limit?.checked_sub(budget.remaining)?.max(1);
        let oldest_at = self.sent_at((ticket + 1).checked_sub(used)?)?;
        Some(oldest_at + window + self.longest_exchange.max(exchange))
    }

    /// The requests the report from `ticket` counted that were sent before the budget was last
    /// made whole: a moving window still holds them after the restore and frees each a window
    /// after the server counted it (no later than its admission plus the longest exchange),
    /// before the next whole restore.
    fn counted_tail(&self, index: usize, ticket: u64, exchange: Duration) -> VecDeque<Instant> {
        let budget = &self.budgets[index];
        let (Some(limit), Some(window), Some(restored_at)) =
            (budget.limit, budget.window.estimate(), budget.restored_at)
        else {
            return VecDeque::new();
        };
        let used = limit.saturating_sub(budget.remaining);
        let margin = self.longest_exchange.max(exchange);
        ((ticket + 1).saturating_sub(used)..=ticket)
            .filter_map(|counted| self.sent_at(counted))
            .filter(|sent| *sent < restored_at)
            .map(|sent| sent + window + margin)
            .filter(|leaves| *leaves < budget.reset_at)
            .collect()
    }

    /// An earlier request answered after the current report: if the server had more left when
    /// it counted it, it was counted before the report's request and is in the report already.
    fn settle_unsure(&mut self, index: usize, ticket: u64, remaining: u64) {
        let budget = &mut self.budgets[index];
        let Some(position) = budget.unsure.iter().position(|unsure| *unsure == ticket) else { return };
        budget.unsure.swap_remove(position);
        if budget.rolled.is_none() && remaining > budget.remaining {
            budget.spent_since = budget.spent_since.saturating_sub(1);
        }
    }

    fn sent_at(&self, ticket: u64) -> Option<Instant> {
        let first = self.sends.front()?.0;
        let index = usize::try_from(ticket.checked_sub(first)?).ok()?;
        self.sends.get(index).map(|(_, at)| *at)
    }
}

/// When the server handled a request admitted at `admitted` and answered by `received`: no
/// earlier than either bound, and inside the second its `Date` names when it agrees with our
/// clock (`date_lag` before `received` that second began).
fn answered_between(admitted: Instant, received: Instant, date_lag: Option<Duration>) -> (Instant, Instant) {
    let Some(second) = date_lag.and_then(|lag| received.checked_sub(lag)) else { return (admitted, received) };
    let (lo, hi) = (admitted.max(second), received.min(second + Duration::from_secs(1)));
    if lo <= hi { (lo, hi) } else { (admitted, received) }
}

fn describe_reported(budget: &ServerBudget) -> String {
    let mut text = budget.name.clone();
    if let Some(limit) = budget.limit {
        text.push_str(&format!(" {limit}"));
        if let Some(window) = budget.window {
            text.push_str(&format!(" per {}", format_wait(window)));
        }
    }
    if let Some(remaining) = budget.remaining {
        text.push_str(&format!(", {remaining} left"));
    }
    text
}

impl AdmissionCheck for ServerMirror {
    fn readiness(&mut self, now: Instant, cost: &Cost) -> CheckReadiness {
        match self.phase {
            Phase::Scouting { scout: Some(_) } => {
                return CheckReadiness::Wait { reason: "scouting: waiting for the first answer's headers".to_owned() };
            }
            Phase::Unpublished if self.in_flight.len() as u64 >= self.ramp => {
                return CheckReadiness::Wait { reason: format!("ramping up: {} in flight", self.ramp) };
            }
            _ => {}
        }
        let mut latest: Option<(Instant, String)> = None;
        let mut waiting: Option<String> = None;
        let next_ticket = self.next_ticket;
        for budget in &mut self.budgets {
            if budget.rolled.is_none() && budget.reset_at <= now {
                budget.roll(now, next_ticket, &self.in_flight);
            }
            match budget.rolled {
                Some(Rolled { scout: Some(_), .. }) => {
                    waiting = Some(format!("'{}' reset: waiting for the scout's answer", budget.name));
                }
                Some(_) => {}
                None if budget.allowance(now) > 0 => {}
                None => {
                    let frees_at = budget.next_drain(now).unwrap_or(budget.reset_at);
                    if latest.as_ref().is_none_or(|(at, _)| frees_at > *at) {
                        let reason = format!("server budget '{}' spent", budget.name);
                        latest = Some((frees_at, reason));
                    }
                }
            }
        }
        match self.units.readiness(now, cost) {
            Some(UnitWait::Until(at, reason)) if latest.as_ref().is_none_or(|(later, _)| at > *later) => {
                latest = Some((at, reason));
            }
            Some(UnitWait::Answer(reason)) => waiting = waiting.or(Some(reason)),
            _ => {}
        }
        match (latest, waiting) {
            (Some((at, reason)), _) => CheckReadiness::At { at, reason },
            (None, Some(reason)) => CheckReadiness::Wait { reason },
            (None, None) => CheckReadiness::Ready,
        }
    }

    fn admit(&mut self, now: Instant, cost: &Cost) -> u64 {
        let ticket = self.next_ticket;
        self.next_ticket += 1;
        self.units.admit(ticket, cost);
        self.in_flight.insert(ticket, now);
        self.first_admitted.get_or_insert(now);
        if self.sends.len() == SEND_LOG {
            self.sends.pop_front();
        }
        self.sends.push_back((ticket, now));
        if let Phase::Scouting { scout: None } = self.phase {
            self.phase = Phase::Scouting { scout: Some(ticket) };
        }
        for budget in &mut self.budgets {
            match &mut budget.rolled {
                Some(rolled) if rolled.scout.is_none() => rolled.scout = Some(ticket),
                Some(_) => {}
                None => {
                    budget.spent_since += 1;
                    budget.ceiling = budget.ceiling.saturating_sub(1);
                }
            }
        }
        ticket
    }

    fn settle(&mut self, ticket: u64, actual: &Cost) {
        self.units.settle(ticket, actual);
    }

    fn release(&mut self, ticket: u64) {
        self.in_flight.remove(&ticket);
        self.units.release(ticket);
        // An unsure request that ended without a usable answer stays counted.
        for budget in &mut self.budgets {
            budget.unsure.retain(|unsure| *unsure != ticket);
        }
        if self.phase == (Phase::Scouting { scout: Some(ticket) }) {
            self.phase = Phase::Scouting { scout: None };
        }
        for budget in &mut self.budgets {
            if let Some(rolled) = &mut budget.rolled
                && rolled.scout == Some(ticket)
            {
                rolled.scout = None;
            }
        }
    }

    fn as_any_mut(&mut self) -> &mut dyn Any {
        self
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// One request and nothing else.
    fn one() -> Cost {
        Cost::requests(1)
    }

    fn budget(limit: u64, remaining: u64, reset: Duration, precision: Duration) -> RateLimitInfo {
        RateLimitInfo {
            status: Some(200),
            budgets: vec![ServerBudget {
                limit: Some(limit as f64),
                remaining: Some(remaining as f64),
                reset_after: Some(reset),
                reset_precision: precision,
                ..ServerBudget::new("default", "test")
            }],
            retry_after: None,
            throttled: false,
            warnings: vec![],
            date_lag: None,
        }
    }

    fn whole(limit: u64, remaining: u64, reset_secs: u64) -> RateLimitInfo {
        budget(limit, remaining, Duration::from_secs(reset_secs), Duration::from_secs(1))
    }

    fn ms(n: u64) -> Duration {
        Duration::from_millis(n)
    }

    fn answer(mirror: &mut ServerMirror, ticket: u64, info: &RateLimitInfo, at: Instant) -> Vec<Learned> {
        mirror.observe(Report { ticket, status: info.status.unwrap_or(200), info, received_at: at })
    }

    /// Admits while the check says ready at `now`; returns the tickets.
    fn admit_all(mirror: &mut ServerMirror, now: Instant) -> Vec<u64> {
        let mut tickets = Vec::new();
        while mirror.readiness(now, &one()) == CheckReadiness::Ready {
            tickets.push(mirror.admit(now, &one()));
            assert!(tickets.len() < 10_000, "the check never said wait");
        }
        tickets
    }

    #[test]
    fn one_scout_then_exactly_what_the_server_says_remains() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        assert_eq!(admit_all(&mut mirror, t0), [0], "one scout while nothing is known");
        assert!(matches!(mirror.readiness(t0, &one()), CheckReadiness::Wait { .. }));
        let learned = answer(&mut mirror, 0, &whole(10, 9, 2), t0 + ms(2));
        assert!(matches!(&learned[0], Learned::Scouted(text) if text.contains("default 10, 9 left")), "{learned:?}");
        assert_eq!(admit_all(&mut mirror, t0 + ms(2)).len(), 9, "remaining 9 is an allowance of 9");
        match mirror.readiness(t0 + ms(3), &one()) {
            CheckReadiness::At { at, reason } => {
                assert!(at <= t0 + ms(2) + Duration::from_secs(2), "never after the reported reset");
                assert!(at >= t0 + Duration::from_secs(2), "never before the window could end");
                assert_eq!(reason, "server budget 'default' spent");
            }
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn a_late_answer_about_an_older_state_never_overwrites_a_newer_one() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &whole(10, 9, 60), t0);
        let tickets = admit_all(&mut mirror, t0);
        assert_eq!(tickets, (1..=9).collect::<Vec<_>>());
        answer(&mut mirror, 5, &whole(10, 4, 60), t0 + ms(1));
        answer(&mut mirror, 2, &whole(10, 7, 60), t0 + ms(2));
        let held = mirror.budgets(t0 + ms(2));
        assert_eq!(held[0].reported_remaining, 4, "ticket 5's report stands");
        // Tickets 6..=9 came after it and 1..=4 (bar 2) were unanswered when it came.
        assert_eq!(held[0].allowance, Some(0));
    }

    #[test]
    fn earlier_requests_still_unanswered_count_against_a_report() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &whole(100, 99, 60), t0);
        for _ in 1..=20 {
            mirror.admit(t0, &one());
        }
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(79));
        // Ticket 10 answers first: 11..=20 came later, 1..=9 may have been counted after it.
        answer(&mut mirror, 10, &whole(100, 89, 60), t0 + ms(1));
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(70));
        // Their answers show more left than 89: they were in ticket 10's count all along.
        for ticket in 1..=9 {
            answer(&mut mirror, ticket, &whole(100, 99 - ticket, 60), t0 + ms(2));
        }
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(79));
        // A newer report never widens the room before the reset: a server out of step says
        // 85 with 11..=19 still out, which would be 76; and 85 once they are answered.
        answer(&mut mirror, 20, &whole(100, 85, 60), t0 + ms(3));
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(76));
        for ticket in 11..=19 {
            answer(&mut mirror, ticket, &whole(100, 100 - ticket, 60), t0 + ms(4));
        }
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(79), "each settled, but never past the room before");
        assert_eq!(admit_all(&mut mirror, t0 + ms(4)).len(), 79);
    }

    #[test]
    fn an_earlier_answer_with_more_left_gives_its_unit_back() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &whole(20, 19, 60), t0);
        for _ in 1..=9 {
            mirror.admit(t0, &one());
        }
        // Ticket 9 answers first with 11 left; 1..=8 were unanswered and may come on top.
        answer(&mut mirror, 9, &whole(20, 11, 60), t0);
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(3));
        // 1..=5 had more left when the server counted them: they are in ticket 9's report.
        for ticket in 1..=5 {
            answer(&mut mirror, ticket, &whole(20, 19 - ticket, 60), t0);
        }
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(8), "6, 7 and 8 still out against 11 left");
        answer(&mut mirror, 8, &whole(20, 12, 60), t0);
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(9), "8 was counted before 9");
        // 7 had less left than 9 saw: counted after it, it stays spent; so does 6, which failed.
        answer(&mut mirror, 7, &whole(20, 10, 60), t0);
        mirror.release(6);
        assert_eq!(mirror.budgets(t0)[0].allowance, Some(9));
        assert_eq!(admit_all(&mut mirror, t0).len(), 9);
    }

    #[test]
    fn a_budget_that_refills_continuously_measures_no_window_and_scouts_after_its_reset() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        // OpenAI's requests budget after one request: 59 of 60 left, full again in 1 s. That
        // is a bucket refilling one a second, not a window of 60 a second.
        let mut info = whole(60, 59, 1);
        info.budgets[0].source = "openai".into();
        let learned = answer(&mut mirror, 0, &info, t0 + ms(300));
        assert!(!learned.iter().any(|item| matches!(item, Learned::Window { .. })), "{learned:?}");
        assert_eq!(admit_all(&mut mirror, t0 + ms(300)).len(), 59);
        let after = t0 + ms(1400);
        assert_eq!(admit_all(&mut mirror, after).len(), 1, "after the reset one scout asks, not 60");
    }

    #[test]
    fn after_the_reset_one_scout_asks_and_its_answer_reopens_the_budget() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        // Not the first of its window (someone else spent one): no window to learn.
        answer(&mut mirror, 0, &whole(3, 1, 5), t0 + ms(1));
        assert_eq!(admit_all(&mut mirror, t0 + ms(1)), [1]);
        answer(&mut mirror, 1, &whole(3, 0, 5), t0 + ms(2));
        let after = t0 + Duration::from_secs(6);
        assert_eq!(admit_all(&mut mirror, after), [2], "a single scout after the reset");
        assert!(matches!(mirror.readiness(after, &one()), CheckReadiness::Wait { .. }));
        // An answer from before the reset says nothing about the new window.
        answer(&mut mirror, 1, &whole(3, 0, 1), after);
        assert!(matches!(mirror.readiness(after, &one()), CheckReadiness::Wait { .. }));
        answer(&mut mirror, 2, &whole(3, 2, 5), after + ms(1));
        assert_eq!(admit_all(&mut mirror, after + ms(1)), [3, 4]);
    }

    #[test]
    fn with_limit_and_window_known_the_budget_is_whole_again_at_its_reset() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &whole(3, 2, 5), t0 + ms(1));
        assert_eq!(mirror.budgets(t0)[0].window, Some(Duration::from_secs(5)));
        assert_eq!(admit_all(&mut mirror, t0 + ms(1)), [1, 2]);
        answer(&mut mirror, 1, &whole(3, 1, 5), t0 + ms(2));
        // Ticket 2 is still out at the reset: it may count in the new window.
        let after = t0 + Duration::from_secs(6);
        assert_eq!(admit_all(&mut mirror, after), [3, 4]);
        let budgets = mirror.budgets(after);
        assert_eq!((budgets[0].reported_remaining, budgets[0].allowance), (3, Some(0)));
        assert_eq!(budgets[0].resets_in, Duration::from_secs(5), "the next reset is a window on");
    }

    #[test]
    fn a_budget_made_whole_is_not_whole_again_before_a_window_has_passed() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &whole(3, 2, 5), t0);
        admit_all(&mut mirror, t0);
        answer(&mut mirror, 1, &whole(3, 1, 5), t0);
        answer(&mut mirror, 2, &whole(3, 0, 5), t0);
        let restored = t0 + Duration::from_secs(5);
        assert_eq!(admit_all(&mut mirror, restored), [3, 4, 5]);
        // A moving window still counting the last window's tail says it frees a slot in 1 s:
        // the sliding window over our sends frees it; the budget is whole a window on.
        answer(&mut mirror, 3, &whole(3, 0, 1), restored + ms(1));
        assert_eq!(mirror.budgets(restored)[0].resets_in, Duration::from_secs(5));
    }

    #[test]
    fn the_last_windows_tail_frees_its_units_one_by_one_after_a_restore() {
        // A moving window of 3 per 2 s. The scout at t0 and two more at 10 ms (answered at
        // 50 ms: the longest exchange is 40 ms) fill it; it is made whole when the scout leaves.
        let t0 = Instant::now();
        let published = |remaining, reset_ms| {
            let mut info = budget(3, remaining, ms(reset_ms), ms(1));
            info.budgets[0].window = Some(Duration::from_secs(2));
            info
        };
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &published(2, 2000), t0 + ms(10));
        assert_eq!(admit_all(&mut mirror, t0 + ms(10)), [1, 2]);
        answer(&mut mirror, 1, &published(1, 1960), t0 + ms(50));
        answer(&mut mirror, 2, &published(0, 1960), t0 + ms(50));
        let restored = t0 + ms(2010);
        assert_eq!(
            mirror.readiness(t0 + ms(60), &one()),
            CheckReadiness::At { at: restored, reason: "server budget 'default' spent".into() }
        );
        assert_eq!(mirror.readiness(restored, &one()), CheckReadiness::Ready, "whole again");
        mirror.admit(restored, &one());
        // The server still counts the two sent at 10 ms: no room now, one each as they leave
        // (a window and the longest exchange after their send), not a whole window on.
        answer(&mut mirror, 3, &published(0, 10), restored + ms(5));
        let drained = t0 + ms(2050);
        assert_eq!(
            mirror.readiness(restored + ms(5), &one()),
            CheckReadiness::At { at: drained, reason: "server budget 'default' spent".into() }
        );
        assert_eq!(admit_all(&mut mirror, drained), [4, 5]);
        assert_eq!(mirror.budgets(drained)[0].resets_in, ms(1960), "whole again a window after the restore");
    }

    #[test]
    fn a_published_window_keeps_its_ceiling_up_to_the_reset() {
        // The demo API's bucket: 5 per second published, reset in whole seconds. Answers come
        // back out of order and a later ticket reports more room than an earlier one did.
        let t0 = Instant::now();
        let published = |remaining| RateLimitInfo {
            budgets: vec![ServerBudget {
                window: Some(Duration::from_secs(1)),
                ..whole(5, remaining, 1).budgets[0].clone()
            }],
            ..whole(5, remaining, 1)
        };
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &published(4), t0 + ms(30));
        assert_eq!(admit_all(&mut mirror, t0 + ms(30)).len(), 4);
        for (ticket, remaining) in [(2, 2), (3, 1), (4, 3), (1, 0)] {
            answer(&mut mirror, ticket, &published(remaining), t0 + ms(60));
        }
        assert_eq!(mirror.budgets(t0 + ms(200))[0].allowance, Some(0), "5 were sent: none left before the reset");
        assert!(admit_all(&mut mirror, t0 + ms(200)).is_empty());
    }

    #[test]
    fn a_scout_that_never_answers_lets_the_next_request_scout() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        assert_eq!(admit_all(&mut mirror, t0), [0]);
        mirror.release(0);
        assert_eq!(admit_all(&mut mirror, t0), [1]);
        let error = RateLimitInfo { status: Some(502), ..whole(1, 1, 1) };
        let error = RateLimitInfo { budgets: vec![], ..error };
        answer(&mut mirror, 1, &error, t0);
        assert_eq!(mirror.phase(), Phase::Scouting { scout: None }, "a 502 says nothing about limits");
    }

    #[test]
    fn the_window_is_measured_from_the_first_request_of_a_window_and_refines_coarse_resets() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        // Epoch-second reset read 300 ms into a second: it says 2.7 s for a 2 s window.
        let learned = answer(&mut mirror, 0, &budget(10, 9, ms(2700), Duration::from_secs(1)), t0 + ms(1));
        assert!(
            learned.contains(&Learned::Window {
                name: "default".into(),
                limit: 10,
                window: Duration::from_secs(2),
                published: false,
                margin: ms(1),
            }),
            "{learned:?}"
        );
        let budgets = mirror.budgets(t0 + ms(1));
        assert_eq!(budgets[0].window, Some(Duration::from_secs(2)));
        // The reset is the scout's admission + 2 s + the exchange, not the rounded 2.7 s.
        assert_eq!(budgets[0].resets_in, Duration::from_secs(2));
    }

    #[test]
    fn a_refusal_after_a_believed_reset_teaches_slack_once() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        mirror.admit(t0, &one());
        // Not the first of its window: no window is learned, so the reset is scouted.
        answer(&mut mirror, 0, &budget(3, 1, ms(1000), Duration::from_secs(1)), t0);
        admit_all(&mut mirror, t0);
        let early = t0 + ms(1000);
        assert_eq!(admit_all(&mut mirror, early), [2]);
        let refused = RateLimitInfo { status: Some(429), throttled: true, ..budget(3, 0, ms(400), Duration::ZERO) };
        let learned = answer(&mut mirror, 2, &refused, early + ms(1));
        assert!(matches!(learned[..], [Learned::Slack(slack)] if slack == ms(2)), "{learned:?}");
        assert_eq!(mirror.refusals(), 1);
        assert_eq!(mirror.slack(), ms(2));
        assert_eq!(mirror.budgets(early + ms(1))[0].resets_in, ms(402), "later resets include the slack");
    }

    #[test]
    fn without_headers_the_ramp_grows_per_answer_and_a_refusal_learns_a_pace() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        let none = RateLimitInfo { budgets: vec![], ..whole(1, 1, 1) };
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &none, t0 + ms(1));
        assert_eq!(mirror.phase(), Phase::Unpublished);
        assert_eq!(admit_all(&mut mirror, t0 + ms(1)).len(), 2, "one answer: two may fly");
        answer(&mut mirror, 1, &none, t0 + ms(2));
        answer(&mut mirror, 2, &none, t0 + ms(2));
        assert_eq!(admit_all(&mut mirror, t0 + ms(2)).len(), 4);
        let refused = RateLimitInfo { status: Some(429), throttled: true, retry_after: Some(ms(500)), ..none };
        let learned = answer(&mut mirror, 3, &refused, t0 + ms(4));
        // Three passed by 4 ms, and the server asks for 500 ms more: 3 / 0.504 s.
        assert!(matches!(learned[..], [Learned::Pace(pace)] if (pace - 3.0 / 0.504).abs() < 1e-9), "{learned:?}");
        assert!(
            matches!(mirror.readiness(t0 + ms(4), &one()), CheckReadiness::Wait { .. }),
            "the ramp halved to 2, 3 fly"
        );
    }

    #[test]
    fn a_refusal_that_overtakes_earlier_answers_counts_them_as_let_through() {
        let t0 = Instant::now();
        let none = RateLimitInfo { budgets: vec![], ..whole(1, 1, 1) };
        let refused = RateLimitInfo { status: Some(429), throttled: true, retry_after: Some(ms(1000)), ..none.clone() };
        // The same sends and the same refusal, with the answers to tickets 1 and 2 arriving
        // before it or after it: the server let the same three through either way.
        let mut paces = Vec::new();
        for answers_first in [true, false] {
            let mut mirror = ServerMirror::new();
            mirror.admit(t0, &one());
            answer(&mut mirror, 0, &none, t0);
            assert_eq!(admit_all(&mut mirror, t0), [1, 2]);
            if answers_first {
                answer(&mut mirror, 1, &none, t0);
                answer(&mut mirror, 2, &none, t0);
            }
            let ticket = mirror.admit(t0, &one());
            let learned = answer(&mut mirror, ticket, &refused, t0);
            let [Learned::Pace(pace)] = learned[..] else { panic!("{learned:?}") };
            paces.push(pace);
        }
        assert!((paces[0] - 3.0).abs() < 1e-9 && (paces[1] - 3.0).abs() < 1e-9, "{paces:?}");
    }

    #[test]
    fn without_headers_the_pace_grows_per_pass_and_is_cut_once_per_change() {
        let t0 = Instant::now();
        let mut mirror = ServerMirror::new();
        let none = RateLimitInfo { budgets: vec![], ..whole(1, 1, 1) };
        let refused = RateLimitInfo { status: Some(429), throttled: true, retry_after: Some(ms(1000)), ..none.clone() };
        mirror.admit(t0, &one());
        answer(&mut mirror, 0, &none, t0);
        let tickets = admit_all(&mut mirror, t0);
        assert_eq!(tickets, [1, 2]);
        let learned = answer(&mut mirror, 1, &refused, t0);
        assert!(matches!(learned[..], [Learned::Pace(pace)] if (pace - 1.0).abs() < 1e-9), "one passed in 1 s");
        assert!(answer(&mut mirror, 2, &refused, t0).is_empty(), "sent before the pace: no second cut");
        // Each pass at the new pace grows it by 2%; it is told again once it grew 5%.
        let mut told = Vec::new();
        for _ in 0..4 {
            let ticket = mirror.admit(t0, &one());
            told.extend(answer(&mut mirror, ticket, &none, t0));
        }
        assert!(matches!(told[..], [Learned::Pace(pace)] if (pace - 1.02f64.powi(3)).abs() < 1e-9), "{told:?}");
        let ticket = mirror.admit(t0, &one());
        let learned = answer(&mut mirror, ticket, &refused, t0);
        assert!(matches!(learned[..], [Learned::Pace(pace)] if (pace - 1.02f64.powi(4) * 0.7).abs() < 1e-9));
    }

    #[test]
    fn the_date_second_settles_a_first_answer_that_straddles_a_second() {
        // Flask-Limiter: reset = floor(start + 2 s) + 1. The request went out 10 ms before a
        // second began and was answered 10 ms into it, 2.99 s before the reset it wrote.
        let t0 = Instant::now();
        let straddling = |date_lag: Option<Duration>| {
            let mut mirror = ServerMirror::new();
            mirror.admit(t0, &one());
            let info = RateLimitInfo { date_lag, ..budget(10, 9, ms(2990), Duration::from_secs(1)) };
            answer(&mut mirror, 0, &info, t0 + ms(20));
            mirror.budgets(t0)[0].window
        };
        assert_eq!(straddling(None), Some(Duration::from_secs(3)), "2 s or 3 s: the longer");
        assert_eq!(straddling(Some(ms(10))), Some(Duration::from_secs(2)), "Date: handled in the new second");
    }

    #[test]
    fn window_estimates_prefer_whole_seconds_and_keep_the_longer_reading_when_evidence_conflicts() {
        let mut window = WindowEstimate::default();
        window.observe(ms(1700), ms(2702));
        assert_eq!(window.estimate(), Some(Duration::from_secs(2)));
        window.observe(ms(1100), ms(2100));
        assert_eq!(window.estimate(), Some(Duration::from_secs(2)), "narrowed to (1.7, 2.1]");
        window.observe(ms(2500), ms(2600));
        assert_eq!(window.estimate(), Some(ms(2600)), "conflict: the later reading, no whole second inside");
        window.exact = Some(ms(1500));
        assert_eq!(window.estimate(), Some(ms(1500)));
    }
}
