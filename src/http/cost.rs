//! Cost rules: how much of a unit (tokens, points) a request is estimated to spend before it
//! is sent, and what it actually spent according to its answer, for reserve-then-settle.
//!
//! Written as text, one rule per unit: `UNIT=ESTIMATE[->ACTUAL]`.
//!
//! - `ESTIMATE` is a sum of terms: a number (`500`), `body/N` (the body's length in bytes
//!   divided by N, rounded up: `body/4` is the usual guess of a prompt's tokens) and
//!   `field:PATH` (a number in the JSON request body, such as `max_tokens`).
//! - `ACTUAL` is `field:PATH`, a number in the JSON answer (`usage.total_tokens`,
//!   `extensions.cost.actualQueryCost`). Without it, or when the answer does not carry the
//!   field, the estimate stands; a refused answer (429) spent none.
//!
//! `PATH` is dotted (`usage.total_tokens`, `choices.0.n`) or a JSON pointer (`/usage/total_tokens`).

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use crate::engine::{Cost, Unit};

/// One unit's estimate and settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostRule {
    pub unit: Unit,
    pub estimate: Vec<Term>,
    /// Where the answer says what was spent; `None` keeps the estimate.
    pub actual: Option<JsonPath>,
}

/// A part of an estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    Fixed(u64),
    /// The body's length in bytes divided by this, rounded up.
    BodyPer(u64),
    /// A number in the JSON request body (0 when absent).
    Field(JsonPath),
}

/// A path into a JSON document, kept as a JSON pointer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct JsonPath(String);

impl JsonPath {
    /// `usage.total_tokens` or `/usage/total_tokens`.
    pub fn parse(text: &str) -> Result<Self, String> {
        let text = text.trim();
        if text.is_empty() {
            return Err("an empty field path".into());
        }
        if text.starts_with('/') {
            return Ok(Self(text.to_owned()));
        }
        if text.split('.').any(str::is_empty) {
            return Err(format!("'{text}' has an empty part; write usage.total_tokens"));
        }
        let escaped: Vec<String> = text.split('.').map(|part| part.replace('~', "~0").replace('/', "~1")).collect();
        Ok(Self(format!("/{}", escaped.join("/"))))
    }

    /// The whole number at this path of `json`, if there is one (a fraction rounds up).
    pub fn number_in(&self, json: &Value) -> Option<u64> {
        let value = json.pointer(&self.0)?;
        value.as_u64().or_else(|| value.as_f64().filter(|n| n.is_finite() && *n >= 0.0).map(|n| n.ceil() as u64))
    }
}

impl fmt::Display for JsonPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.0)
    }
}

impl CostRule {
    /// What a request with `body` is expected to spend of this rule's unit.
    pub fn estimate(&self, body: Option<&[u8]>) -> u64 {
        let json = body.and_then(|body| serde_json::from_slice::<Value>(body).ok());
        self.estimate.iter().fold(0u64, |sum, term| {
            let amount = match term {
                Term::Fixed(n) => *n,
                Term::BodyPer(per) => body.map_or(0, |body| (body.len() as u64).div_ceil(*per)),
                Term::Field(path) => json.as_ref().and_then(|json| path.number_in(json)).unwrap_or(0),
            };
            sum.saturating_add(amount)
        })
    }

    /// What the answer says was spent: 0 for a refusal, the field when the body has it.
    pub fn actual(&self, status: u16, body: &[u8]) -> Option<u64> {
        if status == 429 {
            return Some(0);
        }
        let path = self.actual.as_ref()?;
        path.number_in(&serde_json::from_slice::<Value>(body).ok()?)
    }
}

impl FromStr for CostRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (unit, rest) = text.split_once('=').ok_or_else(|| {
            format!("cost rule '{text}' is not UNIT=ESTIMATE[->ACTUAL], e.g. tokens=body/4->field:usage.total_tokens")
        })?;
        let unit = Unit::named(unit);
        if unit == Unit::Requests {
            return Err("a cost rule is for another unit than requests (tokens, points, ...)".into());
        }
        let (estimate, actual) = match rest.split_once("->") {
            Some((estimate, actual)) => (estimate, Some(actual)),
            None => (rest, None),
        };
        let estimate = estimate.split('+').map(term).collect::<Result<Vec<_>, _>>()?;
        let actual =
            match actual.map(str::trim) {
                None => None,
                Some(actual) => Some(JsonPath::parse(actual.strip_prefix("field:").ok_or_else(|| {
                    format!("the actual cost '{actual}' is field:PATH, a number in the JSON answer")
                })?)?),
            };
        Ok(Self { unit, estimate, actual })
    }
}

fn term(text: &str) -> Result<Term, String> {
    let text = text.trim();
    if let Some(per) = text.strip_prefix("body/") {
        return match per.trim().parse::<u64>() {
            Ok(per) if per > 0 => Ok(Term::BodyPer(per)),
            _ => Err(format!("'{text}': body/N needs a whole N of at least 1")),
        };
    }
    if let Some(path) = text.strip_prefix("field:") {
        return JsonPath::parse(path).map(Term::Field);
    }
    text.parse::<u64>().map(Term::Fixed).map_err(|_| format!("'{text}' is not a number, body/N or field:PATH"))
}

/// The estimate of a request of `requests` with `body` under `rules`.
pub fn estimate(requests: u64, rules: &[CostRule], body: Option<&[u8]>) -> Cost {
    rules.iter().fold(Cost::requests(requests), |cost, rule| cost.with(rule.unit.clone(), rule.estimate(body)))
}

/// The settled cost: `estimated` with each rule's unit replaced by what the answer says.
pub fn settled(estimated: &Cost, rules: &[CostRule], status: u16, body: &[u8]) -> Cost {
    rules.iter().fold(Cost::requests(estimated.requests), |cost, rule| {
        let amount = rule.actual(status, body).unwrap_or_else(|| estimated.of(&rule.unit));
        cost.with(rule.unit.clone(), amount)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn an_openai_style_rule_estimates_from_the_request_and_settles_from_usage() {
        let rule: CostRule = "tokens=field:max_tokens+body/4->field:usage.total_tokens".parse().unwrap();
        let body = br#"{"max_tokens": 100, "messages": [{"content": "hello there"}]}"#;
        assert_eq!(rule.estimate(Some(body)), 100 + (body.len() as u64).div_ceil(4));
        assert_eq!(rule.actual(200, br#"{"usage": {"total_tokens": 42}}"#), Some(42));
        assert_eq!(rule.actual(200, b"not json"), None, "the estimate stands");
        assert_eq!(rule.actual(429, b""), Some(0), "a refusal spent nothing");
        let estimated = estimate(1, std::slice::from_ref(&rule), Some(body));
        let answer = br#"{"usage": {"total_tokens": 42}}"#;
        assert_eq!(settled(&estimated, &[rule], 200, answer), Cost::requests(1).with(Unit::tokens(), 42));
    }

    #[test]
    fn a_graphql_rule_settles_points_from_a_pointer_and_fixed_estimates_add_up() {
        let rule: CostRule = "points=50+10->field:/extensions/cost/actualQueryCost".parse().unwrap();
        assert_eq!(rule.unit, Unit::points());
        assert_eq!(rule.estimate(None), 60);
        assert_eq!(rule.actual(200, br#"{"extensions": {"cost": {"actualQueryCost": 12.5}}}"#), Some(13));
    }

    #[test]
    fn bad_rules_say_what_is_expected() {
        for (text, expected) in [
            ("tokens", "UNIT=ESTIMATE"),
            ("requests=5", "another unit"),
            ("tokens=body/0", "at least 1"),
            ("tokens=lots", "not a number"),
            ("tokens=5->usage", "field:PATH"),
            ("tokens=field:usage..x", "empty part"),
        ] {
            let err = text.parse::<CostRule>().unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
