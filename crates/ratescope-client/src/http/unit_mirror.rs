//! The server's budgets in units other than requests (tokens, points) as a live allowance:
//! the newest report's remaining, less the estimates (or, once settled, the actual costs) of
//! the requests the server may not have counted in it yet. Part of the adaptive mirror.
//!
//! # The rules
//!
//! - **Newest report wins.** A report from the request with ticket `t` replaces one from an
//!   older ticket; an older answer arriving late changes nothing.
//! - **What the report may not include counts against it**: every request admitted after `t`,
//!   and every earlier one still unanswered when the report came, each with what it spends of
//!   the budget's unit: its estimate until its permit is settled, then the actual amount.
//! - **A request fits or waits.** A request whose estimate is above the allowance waits for
//!   the budget's reset; a request spending none of the unit is never held by it.
//! - **Never early.** At the reported reset (plus the slack the request mirror learned) one
//!   request spending the unit goes as a scout and its answer is the new state. Budgets that
//!   refill continuously (OpenAI's and Anthropic's, whose reset is "until full") are treated
//!   the same way: between reports nothing is assumed to have come back, and every report
//!   brings in what did.

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use tokio::time::Instant;

use super::headers::{RateLimitInfo, ServerBudget};
use super::mirror::MirroredBudget;
use crate::engine::{Cost, Unit};

/// How long a budget with no reset of its own stays spent before a scout asks again.
const UNKNOWN_RESET: Duration = Duration::from_secs(1);

/// The unit budgets of one key.
#[derive(Debug, Default)]
pub struct UnitMirror {
    budgets: Vec<UnitBudget>,
    /// What each request the budgets may still count spends, per named unit.
    spends: BTreeMap<u64, Vec<(Unit, u64)>>,
    /// Admitted and not yet answered or ended.
    in_flight: BTreeSet<u64>,
}

#[derive(Debug, Clone)]
struct UnitBudget {
    name: String,
    unit: Unit,
    limit: Option<u64>,
    remaining: u64,
    /// The ticket whose answer gave `remaining`.
    report_ticket: u64,
    /// Requests the report may not include.
    counted: BTreeSet<u64>,
    reset_at: Instant,
    /// The reset passed with no limit to restore to: the scout sent since, if any.
    scouting: Option<Option<u64>>,
}

impl UnitBudget {
    fn allowance(&self, spends: &BTreeMap<u64, Vec<(Unit, u64)>>) -> u64 {
        let held =
            self.counted.iter().fold(0u64, |held, ticket| held.saturating_add(spent(spends, *ticket, &self.unit)));
        self.remaining.saturating_sub(held)
    }
}

/// Why a request waits for a unit budget.
#[derive(Debug, Clone, PartialEq)]
pub enum UnitWait {
    /// Until this instant (the budget's reset).
    Until(Instant, String),
    /// Until the scout's answer comes.
    Answer(String),
}

fn spent(spends: &BTreeMap<u64, Vec<(Unit, u64)>>, ticket: u64, unit: &Unit) -> u64 {
    spends.get(&ticket).map_or(0, |units| {
        units.iter().filter(|(named, _)| named == unit).fold(0u64, |sum, (_, n)| sum.saturating_add(*n))
    })
}

fn named_units(cost: &Cost) -> Vec<(Unit, u64)> {
    cost.units.iter().filter(|(unit, amount)| *unit != Unit::Requests && *amount > 0).cloned().collect()
}

impl UnitMirror {
    /// Every unit budget at `now`.
    pub fn budgets(&self, now: Instant) -> impl Iterator<Item = MirroredBudget> + '_ {
        self.budgets.iter().map(move |budget| MirroredBudget {
            name: budget.name.clone(),
            unit: budget.unit.clone(),
            limit: budget.limit,
            reported_remaining: budget.remaining,
            allowance: budget.scouting.is_none().then(|| budget.allowance(&self.spends)),
            resets_in: budget.reset_at.saturating_duration_since(now),
            window: None,
        })
    }

    /// Whether a request spending `cost` fits every unit budget at `now`; rolls budgets whose
    /// reset passed.
    pub fn readiness(&mut self, now: Instant, cost: &Cost) -> Option<UnitWait> {
        let mut latest: Option<(Instant, String)> = None;
        for budget in &mut self.budgets {
            if budget.scouting.is_none() && budget.reset_at <= now {
                Self::roll(budget);
            }
            let wants = cost.of(&budget.unit);
            if wants == 0 {
                continue;
            }
            match budget.scouting {
                Some(Some(_)) => {
                    return Some(UnitWait::Answer(format!("'{}' reset: waiting for the scout's answer", budget.name)));
                }
                Some(None) => {}
                None if wants <= budget.allowance(&self.spends) => {}
                None => {
                    if latest.as_ref().is_none_or(|(at, _)| budget.reset_at > *at) {
                        let left = budget.allowance(&self.spends);
                        let reason =
                            format!("server budget '{}' has {left} {} left, {wants} wanted", budget.name, budget.unit);
                        latest = Some((budget.reset_at, reason));
                    }
                }
            }
        }
        latest.map(|(at, reason)| UnitWait::Until(at, reason))
    }

    /// The reset passed: one request spending the unit goes as a scout, and its answer is the
    /// new state. (Restoring the whole limit instead would be early for a budget that refills
    /// continuously and reports "until full", and the next reset is unknown until a report.)
    fn roll(budget: &mut UnitBudget) {
        budget.scouting = Some(None);
        budget.counted.clear();
    }

    /// The request `ticket` spending `cost` was admitted.
    pub fn admit(&mut self, ticket: u64, cost: &Cost) {
        self.in_flight.insert(ticket);
        let units = named_units(cost);
        if !units.is_empty() {
            self.spends.insert(ticket, units);
        }
        for budget in &mut self.budgets {
            match &mut budget.scouting {
                Some(scout @ None) if cost.of(&budget.unit) > 0 => *scout = Some(ticket),
                Some(_) => {}
                None => {
                    budget.counted.insert(ticket);
                }
            }
        }
    }

    /// The request `ticket` actually spent `actual`.
    pub fn settle(&mut self, ticket: u64, actual: &Cost) {
        let units = named_units(actual);
        if units.is_empty() {
            self.spends.remove(&ticket);
        } else {
            self.spends.insert(ticket, units);
        }
    }

    /// The answer to `ticket`: each unit budget it reports is taken if it is the newest.
    /// `slack` is added to every reset (learned by the request mirror from refusals).
    pub fn observe(&mut self, ticket: u64, info: &RateLimitInfo, received_at: Instant, slack: Duration) {
        let earlier_out: BTreeSet<u64> = self.in_flight.range(..ticket).copied().collect();
        self.in_flight.remove(&ticket);
        for reported in info.budgets.iter().filter(|budget| is_unit_budget(budget)) {
            let remaining = reported.remaining.unwrap_or(0.0).floor().max(0.0) as u64;
            let limit = reported.limit.filter(|limit| limit.is_finite() && *limit >= 1.0).map(|l| l.floor() as u64);
            let reset_at = received_at + reported.reset_after.unwrap_or(UNKNOWN_RESET) + slack;
            let position = self.budgets.iter().position(|budget| budget.name == reported.name);
            let budget = match position {
                Some(index) => &mut self.budgets[index],
                None => {
                    self.budgets.push(UnitBudget {
                        name: reported.name.clone(),
                        unit: Unit::named(&reported.unit),
                        limit: None,
                        remaining: 0,
                        report_ticket: ticket,
                        counted: BTreeSet::new(),
                        reset_at,
                        scouting: None,
                    });
                    let last = self.budgets.len() - 1;
                    &mut self.budgets[last]
                }
            };
            let newer = match budget.scouting {
                Some(_) => true,
                None => ticket >= budget.report_ticket,
            };
            if !newer {
                continue;
            }
            budget.limit = limit.or(budget.limit);
            budget.remaining = remaining;
            budget.report_ticket = ticket;
            budget.counted = earlier_out.iter().copied().chain(self.in_flight.range(ticket + 1..).copied()).collect();
            // Answered requests admitted after this one stay counted: their reports were older
            // or silent about this budget.
            budget.counted.extend(self.spends.range(ticket + 1..).map(|(counted, _)| *counted));
            budget.reset_at = reset_at;
            budget.scouting = None;
        }
        self.forget_uncounted();
    }

    /// The permit of `ticket` ended; an unanswered request stays counted where it was.
    pub fn release(&mut self, ticket: u64) {
        self.in_flight.remove(&ticket);
        for budget in &mut self.budgets {
            if budget.scouting == Some(Some(ticket)) {
                budget.scouting = Some(None);
            }
        }
        self.forget_uncounted();
    }

    /// Drops spends no budget counts and no request in flight may still need.
    fn forget_uncounted(&mut self) {
        let budgets = &self.budgets;
        let in_flight = &self.in_flight;
        self.spends.retain(|ticket, _| {
            in_flight.contains(ticket) || budgets.iter().any(|budget| budget.counted.contains(ticket))
        });
    }
}

/// A reported budget this mirror holds: another unit than requests, with what remains.
pub fn is_unit_budget(budget: &ServerBudget) -> bool {
    budget.unit != "requests" && budget.remaining.is_some_and(f64::is_finite)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tokens(amount: u64) -> Cost {
        Cost::requests(1).with(Unit::tokens(), amount)
    }

    fn report(limit: u64, remaining: u64, reset: Duration) -> RateLimitInfo {
        RateLimitInfo {
            status: Some(200),
            budgets: vec![
                ServerBudget {
                    limit: Some(100.0),
                    remaining: Some(90.0),
                    reset_after: Some(Duration::from_secs(1)),
                    ..ServerBudget::new("requests", "openai")
                },
                ServerBudget {
                    limit: Some(limit as f64),
                    remaining: Some(remaining as f64),
                    reset_after: Some(reset),
                    unit: "tokens".into(),
                    ..ServerBudget::new("tokens", "openai")
                },
            ],
            retry_after: None,
            throttled: false,
            warnings: vec![],
            date_lag: None,
        }
    }

    fn allowance(mirror: &UnitMirror, now: Instant) -> Option<u64> {
        mirror.budgets(now).next().and_then(|budget| budget.allowance)
    }

    #[tokio::test(start_paused = true)]
    async fn a_request_waits_while_its_estimate_is_above_what_the_server_has_left() {
        let t0 = Instant::now();
        let mut mirror = UnitMirror::default();
        mirror.admit(0, &tokens(100));
        mirror.observe(0, &report(1000, 600, Duration::from_secs(10)), t0, Duration::ZERO);
        mirror.admit(1, &tokens(400));
        assert_eq!(allowance(&mirror, t0), Some(200), "600 left, less the 400 sent since");
        assert_eq!(mirror.readiness(t0, &tokens(200)), None, "200 fit");
        let Some(UnitWait::Until(at, reason)) = mirror.readiness(t0, &tokens(201)) else { panic!("201 must wait") };
        assert_eq!(at, t0 + Duration::from_secs(10), "until the reset");
        assert!(reason.contains("200 tokens left, 201 wanted"), "{reason}");
        assert_eq!(mirror.readiness(t0, &Cost::requests(1)), None, "a request spending no tokens is not held");
    }

    #[tokio::test(start_paused = true)]
    async fn settling_gives_back_what_an_estimate_held_too_much_and_charges_what_it_held_too_little() {
        let t0 = Instant::now();
        let mut mirror = UnitMirror::default();
        mirror.admit(0, &tokens(10));
        mirror.observe(0, &report(1000, 900, Duration::from_secs(10)), t0, Duration::ZERO);
        mirror.admit(1, &tokens(400));
        assert_eq!(allowance(&mirror, t0), Some(500));
        mirror.settle(1, &tokens(100));
        assert_eq!(allowance(&mirror, t0), Some(800), "the answer said 100, not 400");
        mirror.settle(1, &tokens(700));
        assert_eq!(allowance(&mirror, t0), Some(200), "or 700");
        mirror.settle(1, &Cost::requests(1));
        assert_eq!(allowance(&mirror, t0), Some(900), "a refusal spent none");
    }

    #[tokio::test(start_paused = true)]
    async fn the_newest_report_wins_and_earlier_requests_still_out_count_against_it() {
        let t0 = Instant::now();
        let mut mirror = UnitMirror::default();
        for ticket in 0..3 {
            mirror.admit(ticket, &tokens(100));
        }
        mirror.observe(2, &report(1000, 500, Duration::from_secs(10)), t0, Duration::ZERO);
        assert_eq!(allowance(&mirror, t0), Some(300), "0 and 1 may not be in the report yet");
        mirror.observe(0, &report(1000, 900, Duration::from_secs(10)), t0, Duration::ZERO);
        assert_eq!(allowance(&mirror, t0), Some(300), "an older report changes nothing");
        mirror.admit(3, &tokens(50));
        mirror.observe(3, &report(1000, 350, Duration::from_secs(9)), t0, Duration::ZERO);
        assert_eq!(allowance(&mirror, t0), Some(250), "a newer report replaces it; 1 is still out");
        mirror.release(1);
        assert_eq!(allowance(&mirror, t0), Some(250), "an unanswered request that ended stays counted");
    }

    #[tokio::test(start_paused = true)]
    async fn after_the_reset_one_scout_asks_and_its_answer_is_the_new_state() {
        let t0 = Instant::now();
        let mut mirror = UnitMirror::default();
        mirror.admit(0, &tokens(100));
        mirror.observe(0, &report(1000, 50, Duration::from_secs(2)), t0, Duration::from_millis(30));
        assert!(matches!(mirror.readiness(t0, &tokens(100)), Some(UnitWait::Until(..))));
        let after = t0 + Duration::from_millis(2030);
        assert_eq!(mirror.readiness(after, &tokens(100)), None, "the reset (with the slack) passed: a scout goes");
        mirror.admit(1, &tokens(100));
        assert!(matches!(mirror.readiness(after, &tokens(100)), Some(UnitWait::Answer(_))), "one scout at a time");
        assert_eq!(mirror.readiness(after, &Cost::requests(1)), None, "requests without tokens still go");
        mirror.release(1);
        assert_eq!(mirror.readiness(after, &tokens(100)), None, "a scout that ended unanswered lets the next scout");
        mirror.admit(2, &tokens(100));
        mirror.observe(2, &report(1000, 880, Duration::from_secs(1)), after, Duration::ZERO);
        assert_eq!(allowance(&mirror, after), Some(880));
    }
}
