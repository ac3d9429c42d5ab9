//! What budgets count and what a request spends: [`Unit`] (requests, tokens, points or any
//! named unit) and [`Cost`] (a number of requests and estimates in other units).

use std::fmt;
use std::sync::Arc;

use thiserror::Error;

/// The longest unit name accepted from a user (`output_tokens` is 13).
pub const MAX_UNIT_LEN: usize = 32;

/// A unit name a user wrote that is not one: units are identifiers, an ASCII letter followed by
/// letters, digits, `_` or `-`, at most [`MAX_UNIT_LEN`] long (they name budgets, Redis keys and
/// summary lines).
#[derive(Debug, Clone, PartialEq, Eq, Error)]
pub enum UnitError {
    /// Nothing where a unit was expected.
    #[error("an empty unit: name it, such as tokens or points")]
    Empty,
    /// Longer than [`MAX_UNIT_LEN`].
    #[error("the unit '{0}…' is longer than {MAX_UNIT_LEN} characters")]
    TooLong(String),
    /// A character a unit may not hold, or a first character that is not a letter.
    #[error("'{0}' is not a unit: an ASCII letter followed by letters, digits, '_' or '-', such as tokens or points")]
    NotAName(String),
}

/// What a budget counts. Budgets of different units stack on one key (500 requests/min and
/// 200,000 tokens/min): each request spends its amount of each budget's unit.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub enum Unit {
    /// Requests: every request spends its request count (usually 1).
    #[default]
    Requests,
    /// Any other unit (`tokens`, `points`, ...), lower case: a request spends what its
    /// [`Cost`] names for it, 0 if nothing.
    Named(Arc<str>),
}

impl Unit {
    /// LLM tokens (OpenAI's and Anthropic's token budgets).
    pub fn tokens() -> Self {
        Self::Named(Arc::from("tokens"))
    }

    /// Query points (GraphQL cost budgets: Shopify, GitHub, Atlassian).
    pub fn points() -> Self {
        Self::Named(Arc::from("points"))
    }

    /// The unit called `name` (trimmed, lower case); `request(s)` or nothing is [`Unit::Requests`].
    pub fn named(name: &str) -> Self {
        let name = name.trim().to_ascii_lowercase();
        match name.as_str() {
            "" | "request" | "requests" => Self::Requests,
            _ => Self::Named(Arc::from(name)),
        }
    }

    /// The unit a user wrote (trimmed, lower case; `request(s)` is [`Unit::Requests`]), refused
    /// unless it is an identifier: an ASCII letter, then letters, digits, `_` or `-`, at most
    /// [`MAX_UNIT_LEN`] in all. What it accepts prints back as itself.
    pub fn parse(text: &str) -> Result<Self, UnitError> {
        let name = text.trim();
        let mut chars = name.chars();
        match chars.next() {
            None => return Err(UnitError::Empty),
            Some(first) if !first.is_ascii_alphabetic() => return Err(UnitError::NotAName(name.to_owned())),
            Some(_) => {}
        }
        if !chars.all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '-') {
            return Err(UnitError::NotAName(name.to_owned()));
        }
        if name.len() > MAX_UNIT_LEN {
            return Err(UnitError::TooLong(name[..MAX_UNIT_LEN].to_owned()));
        }
        Ok(Self::named(name))
    }

    /// Of `candidates`, the one `self` most likely misspells (a few edits away), if any.
    pub fn closest<'a>(&self, candidates: impl IntoIterator<Item = &'a Unit>) -> Option<&'a Unit> {
        let name = self.as_str();
        candidates
            .into_iter()
            .filter(|candidate| *candidate != self)
            .map(|candidate| (strsim::damerau_levenshtein(name, candidate.as_str()), candidate))
            .filter(|(distance, candidate)| *distance <= (name.len().max(candidate.as_str().len()) / 3).max(1))
            .min_by_key(|(distance, _)| *distance)
            .map(|(_, candidate)| candidate)
    }

    /// The unit's name as written in rules and profiles (`requests`, `tokens`, ...).
    pub fn as_str(&self) -> &str {
        match self {
            Self::Requests => "requests",
            Self::Named(name) => name,
        }
    }
}

impl fmt::Display for Unit {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// What one request spends: `requests` (usually 1, more for a request that counts as several)
/// and amounts of other units, an estimate until the permit is settled with the actual cost.
#[derive(Debug, Clone, Default, PartialEq, Eq, Hash)]
pub struct Cost {
    /// How many requests it counts as (budgets of the requests unit spend this).
    pub requests: u64,
    /// Amounts of named units; a unit named twice adds up.
    pub units: Vec<(Unit, u64)>,
}

impl Cost {
    /// `count` requests and nothing else.
    #[inline]
    pub fn requests(count: u64) -> Self {
        Self { requests: count, units: Vec::new() }
    }

    /// The same cost spending `amount` more of `unit` (requests add to the count).
    #[must_use]
    pub fn with(mut self, unit: Unit, amount: u64) -> Self {
        match unit {
            Unit::Requests => self.requests = self.requests.saturating_add(amount),
            unit => self.units.push((unit, amount)),
        }
        self
    }

    /// How much of `unit` this cost spends.
    #[inline]
    pub fn of(&self, unit: &Unit) -> u64 {
        match unit {
            Unit::Requests => self.requests,
            unit => self.units.iter().filter(|(named, _)| named == unit).fold(0, |sum, (_, n)| sum.saturating_add(*n)),
        }
    }
}

/// A [`Cost`] as the engine carries it: a request count alone, or the whole cost boxed when it
/// names other units. The common requests-only cost stays one word plus a tag, copies without
/// touching the heap, and spends without looking up units.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) enum CompactCost {
    Requests(u64),
    Units(Box<Cost>),
}

impl CompactCost {
    /// The number of requests this cost counts as.
    #[inline]
    pub(crate) fn requests(&self) -> u64 {
        match self {
            Self::Requests(requests) => *requests,
            Self::Units(cost) => cost.requests,
        }
    }

    /// How much of `unit` this cost spends.
    #[inline]
    pub(crate) fn of(&self, unit: &Unit) -> u64 {
        match (self, unit) {
            (Self::Requests(requests), Unit::Requests) => *requests,
            (Self::Requests(_), Unit::Named(_)) => 0,
            (Self::Units(cost), unit) => cost.of(unit),
        }
    }

    /// The whole cost.
    pub(crate) fn cost(&self) -> Cost {
        match self {
            Self::Requests(requests) => Cost::requests(*requests),
            Self::Units(cost) => (**cost).clone(),
        }
    }

    /// Runs `f` on the whole cost without copying one that names units.
    pub(crate) fn with_cost<R>(&self, f: impl FnOnce(&Cost) -> R) -> R {
        match self {
            Self::Requests(requests) => f(&Cost::requests(*requests)),
            Self::Units(cost) => f(cost),
        }
    }
}

impl From<Cost> for CompactCost {
    #[inline]
    fn from(cost: Cost) -> Self {
        if cost.units.is_empty() { Self::Requests(cost.requests) } else { Self::Units(Box::new(cost)) }
    }
}

impl From<u64> for Cost {
    fn from(requests: u64) -> Self {
        Self::requests(requests)
    }
}

impl fmt::Display for Cost {
    /// `1 request`, `1 request + 1500 tokens`.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let noun = if self.requests == 1 { "request" } else { "requests" };
        write!(f, "{} {noun}", self.requests)?;
        for (unit, amount) in &self.units {
            write!(f, " + {amount} {unit}")?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn units_are_named_without_case_and_requests_is_the_default() {
        assert_eq!(Unit::named(" Tokens "), Unit::tokens());
        assert_eq!(Unit::named("requests"), Unit::Requests);
        assert_eq!(Unit::named("Request"), Unit::Requests);
        assert_eq!(Unit::named(""), Unit::Requests);
        assert_eq!(Unit::named("points").to_string(), "points");
    }

    #[test]
    fn a_unit_written_by_a_user_is_an_identifier() {
        assert_eq!(Unit::parse(" Tokens "), Ok(Unit::tokens()));
        assert_eq!(Unit::parse("requests"), Ok(Unit::Requests));
        assert_eq!(Unit::parse("output_tokens"), Ok(Unit::named("output_tokens")));
        assert_eq!(Unit::parse("x-1"), Ok(Unit::named("x-1")));
        assert_eq!(Unit::parse(""), Err(UnitError::Empty));
        assert_eq!(Unit::parse("  "), Err(UnitError::Empty));
        for bad in ["tok ens", "../x", "to:kens", "1tokens", "_x", "-x", "tökens", "🪙", "a/b", "a{b}", "x\u{0}"] {
            assert!(matches!(Unit::parse(bad), Err(UnitError::NotAName(_))), "{bad:?}");
        }
        let long = "t".repeat(MAX_UNIT_LEN + 1);
        assert!(matches!(Unit::parse(&long), Err(UnitError::TooLong(_))));
        assert_eq!(Unit::parse(&long[1..]).map(|unit| unit.to_string()), Ok(long[1..].to_owned()));
        let err = Unit::parse("tok ens").unwrap_err().to_string();
        assert!(err.contains("'tok ens'") && err.contains("ASCII letter"), "{err}");
    }

    #[test]
    fn the_closest_unit_is_a_few_edits_away() {
        let known = [Unit::tokens(), Unit::points(), Unit::named("input_tokens")];
        assert_eq!(Unit::named("token").closest(&known), Some(&Unit::tokens()));
        assert_eq!(Unit::named("tokesn").closest(&known), Some(&Unit::tokens()));
        assert_eq!(Unit::named("pionts").closest(&known), Some(&Unit::points()));
        assert_eq!(Unit::named("input-tokens").closest(&known), Some(&Unit::named("input_tokens")));
        assert_eq!(Unit::named("credits").closest(&known), None);
        assert_eq!(Unit::tokens().closest(&known), None, "a unit is no misspelling of itself");
    }

    #[test]
    fn a_cost_adds_up_per_unit() {
        let cost = Cost::requests(1).with(Unit::tokens(), 1000).with(Unit::tokens(), 500).with(Unit::Requests, 1);
        assert_eq!(cost.of(&Unit::Requests), 2);
        assert_eq!(cost.of(&Unit::tokens()), 1500);
        assert_eq!(cost.of(&Unit::points()), 0, "a unit not named costs nothing");
        assert_eq!(Cost::requests(1).with(Unit::tokens(), 7).to_string(), "1 request + 7 tokens");
        assert_eq!(Cost::from(3), Cost::requests(3));
    }

    #[test]
    fn the_compact_form_boxes_only_costs_that_name_units() {
        let plain = CompactCost::from(Cost::requests(2));
        assert_eq!(plain, CompactCost::Requests(2));
        assert_eq!((plain.requests(), plain.of(&Unit::Requests), plain.of(&Unit::tokens())), (2, 2, 0));
        assert_eq!(plain.cost(), Cost::requests(2));
        let tokens = Cost::requests(1).with(Unit::tokens(), 700);
        let boxed = CompactCost::from(tokens.clone());
        assert!(matches!(boxed, CompactCost::Units(_)));
        assert_eq!((boxed.requests(), boxed.of(&Unit::tokens()), boxed.of(&Unit::points())), (1, 700, 0));
        assert_eq!(boxed.cost(), tokens);
        assert_eq!(boxed.with_cost(|cost| cost.clone()), tokens);
        assert_ne!(boxed, CompactCost::Requests(1));
    }
}
