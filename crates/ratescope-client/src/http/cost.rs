//! Cost rules: how much of a unit (tokens, points) a request is estimated to spend before it
//! is sent, and what it actually spent according to its answer, for reserve-then-settle.
//!
//! Written as text, one rule per unit: `UNIT=ESTIMATE[->ACTUAL]`.
//!
//! - `ESTIMATE` is a sum of terms: a number (`500`), `body/N` (the body's length in bytes
//!   divided by N, rounded up: `body/4` is the usual guess of a prompt's tokens) and
//!   `field:PATH` (a number in the JSON request body, such as `max_tokens`).
//! - `ACTUAL` is where the answer says what was spent, one of
//!   - `field:PATH`, a number in the JSON answer (`usage.total_tokens`,
//!     `extensions.cost.actualQueryCost`);
//!   - `drop:HEADER`, the drop of a remaining-units header (`drop:x-ratelimit-remaining-tokens`)
//!     since the previous answer on the same limiter key (see [`RemainingMemory`]).
//!
//!   Without it, or when the answer does not carry it, the estimate stands; a refused answer
//!   (429) spent none.
//!
//! `PATH` is dotted (`usage.total_tokens`, `choices.0.n`) or a JSON pointer (`/usage/total_tokens`).
//! `UNIT` is an identifier (see [`Unit::parse`]), one rule per unit: two rules for the same
//! unit are refused where rules are given ([`duplicate_unit`] finds them).
//!
//! What an answer says is trusted only so far: a request is counted as spending at most what
//! the largest budget of its unit holds (`LimiterConfig::settle_bound`; a real budget of that
//! size would have refused it), and a budget is never left more than one capacity in debt, so a
//! lying or broken server cannot stall a budget for longer than a whole budget takes to come
//! back. The client logs a capped settlement and reports it in its [`Settlement`](super::Settlement).
//!
//! What a header's drop measures: the client remembers, per limiter key and header, the value
//! of the answer it read last. An answer's actual cost is the previous value minus its own,
//! which is exact when one request is in flight at a time and the budget does not refill in
//! between (a window that resets at once). Otherwise it is the server's count between the two
//! answers as they arrive: with several requests in flight one answer's drop may include
//! another's spending, and a budget that refills continuously (a bucket) returns its refill
//! over the gap, so the drop understates the cost by it. A value that did not fall (the first
//! answer on a key, a reset or a refill, an answer overtaken by a later one) settles nothing:
//! the estimate stands. Prefer a `field:` when the API reports usage in the body.

use std::collections::HashMap;
use std::fmt;
use std::str::FromStr;

use http::{HeaderMap, HeaderName};
use parking_lot::Mutex;
use serde_json::Value;

use crate::engine::{Cost, Unit};

/// One unit's estimate and settlement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CostRule {
    /// The unit it estimates and settles.
    pub unit: Unit,
    /// Terms added up into the estimate before sending.
    pub estimate: Vec<Term>,
    /// Where the answer says what was spent; `None` keeps the estimate.
    pub actual: Option<Actual>,
}

/// Where an answer says what a request spent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Actual {
    /// A number in the JSON answer.
    Field(JsonPath),
    /// The drop of a remaining-units header since the previous answer on the same key.
    HeaderDrop(HeaderName),
}

/// One answer as the settlers read it: a receipt of what the request spent.
#[derive(Debug, Clone, Copy)]
pub struct Receipt<'a> {
    /// The answer's status (a 429 settles to nothing spent).
    pub status: u16,
    /// The answer's headers.
    pub headers: &'a HeaderMap,
    /// The answer's body.
    pub body: &'a [u8],
    /// The limiter key the request went through (or its host): whose headers are compared.
    pub key: &'a str,
    /// Remaining-units values of earlier answers, for `drop:` rules.
    pub memory: &'a RemainingMemory,
}

/// The keys and headers remembered at most; past it, the memory starts again (each key's
/// next answer then settles nothing).
const MAX_REMEMBERED: usize = 10_000;

/// The last value of each remaining-units header per limiter key, kept by a client for
/// `drop:HEADER` settlements.
#[derive(Debug, Default)]
pub struct RemainingMemory {
    last: Mutex<HashMap<(String, HeaderName), u64>>,
}

impl RemainingMemory {
    /// Records `value` as the latest of `header` on `key` and returns how far it fell since
    /// the previous one; `None` for the first value or one that did not fall.
    pub fn drop_to(&self, key: &str, header: &HeaderName, value: u64) -> Option<u64> {
        let mut last = self.last.lock();
        if last.len() >= MAX_REMEMBERED && !last.contains_key(&(key.to_owned(), header.clone())) {
            last.clear();
        }
        let previous = last.insert((key.to_owned(), header.clone()), value)?;
        previous.checked_sub(value).filter(|fell| *fell > 0)
    }
}

/// A part of an estimate.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Term {
    /// A fixed amount.
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

    /// What the answer says was spent: 0 for a refusal, the field when the body has it, the
    /// header's drop when it fell (a header's value is remembered on every answer, refusals too).
    pub fn actual(&self, receipt: &Receipt<'_>) -> Option<u64> {
        let refused = receipt.status == 429;
        let said = match self.actual.as_ref() {
            Some(Actual::HeaderDrop(name)) => {
                header_number(receipt.headers, name).and_then(|value| receipt.memory.drop_to(receipt.key, name, value))
            }
            Some(Actual::Field(path)) if !refused => {
                serde_json::from_slice::<Value>(receipt.body).ok().and_then(|json| path.number_in(&json))
            }
            _ => None,
        };
        if refused { Some(0) } else { said }
    }
}

impl FromStr for CostRule {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        let (unit, rest) = text.split_once('=').ok_or_else(|| {
            format!("cost rule '{text}' is not UNIT=ESTIMATE[->ACTUAL], e.g. tokens=body/4->field:usage.total_tokens")
        })?;
        let unit = Unit::parse(unit).map_err(|err| format!("cost rule '{text}': {err}"))?;
        if unit == Unit::Requests {
            return Err("a cost rule is for another unit than requests (tokens, points, ...)".into());
        }
        let (estimate, actual) = match rest.split_once("->") {
            Some((estimate, actual)) => (estimate, Some(actual)),
            None => (rest, None),
        };
        let estimate = estimate.split('+').map(term).collect::<Result<Vec<_>, _>>()?;
        let actual = actual.map(str::trim).map(actual_form).transpose()?;
        Ok(Self { unit, estimate, actual })
    }
}

fn actual_form(text: &str) -> Result<Actual, String> {
    if let Some(path) = text.strip_prefix("field:") {
        return JsonPath::parse(path).map(Actual::Field);
    }
    if let Some(name) = text.strip_prefix("drop:") {
        let name = name.trim();
        return HeaderName::from_bytes(name.as_bytes())
            .map(Actual::HeaderDrop)
            .map_err(|_| format!("'{name}' in drop:HEADER is not a header name"));
    }
    Err(format!(
        "the actual cost '{text}' is field:PATH (a number in the JSON answer) or drop:HEADER (the fall of a remaining-units header)"
    ))
}

/// A header's value as a whole number (a fraction rounds down: what is surely left).
fn header_number(headers: &HeaderMap, name: &HeaderName) -> Option<u64> {
    let text = headers.get(name)?.to_str().ok()?.trim();
    text.parse::<u64>()
        .ok()
        .or_else(|| text.parse::<f64>().ok().filter(|n| n.is_finite() && *n >= 0.0).map(|n| n.floor() as u64))
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
    text.parse::<u64>().map(Term::Fixed).map_err(|err| match err.kind() {
        std::num::IntErrorKind::PosOverflow => format!("'{text}' is larger than any amount ({})", u64::MAX),
        _ => format!("'{text}' is not a number, body/N or field:PATH"),
    })
}

impl fmt::Display for CostRule {
    /// The rule as it parses back: `tokens=/max_tokens+body/4->field:/usage/total_tokens`
    /// (paths as JSON pointers).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}=", self.unit)?;
        for (index, term) in self.estimate.iter().enumerate() {
            if index > 0 {
                f.write_str("+")?;
            }
            match term {
                Term::Fixed(n) => write!(f, "{n}")?,
                Term::BodyPer(per) => write!(f, "body/{per}")?,
                Term::Field(path) => write!(f, "field:{path}")?,
            }
        }
        match &self.actual {
            None => Ok(()),
            Some(Actual::Field(path)) => write!(f, "->field:{path}"),
            Some(Actual::HeaderDrop(name)) => write!(f, "->drop:{name}"),
        }
    }
}

/// The unit of the first rule that repeats an earlier rule's unit: its estimates would add up
/// and each settlement count twice, so rules are one per unit.
pub fn duplicate_unit(rules: &[CostRule]) -> Option<&Unit> {
    rules
        .iter()
        .enumerate()
        .find(|(index, rule)| rules[..*index].iter().any(|earlier| earlier.unit == rule.unit))
        .map(|(_, rule)| &rule.unit)
}

/// The units `rules` spend, each once, in order.
pub fn units_spent<'a>(rules: impl IntoIterator<Item = &'a CostRule>) -> Vec<Unit> {
    let mut units: Vec<Unit> = Vec::new();
    for rule in rules {
        if !units.contains(&rule.unit) {
            units.push(rule.unit.clone());
        }
    }
    units
}

/// The estimate of a request of `requests` with `body` under `rules`.
pub fn estimate(requests: u64, rules: &[CostRule], body: Option<&[u8]>) -> Cost {
    rules.iter().fold(Cost::requests(requests), |cost, rule| cost.with(rule.unit.clone(), rule.estimate(body)))
}

/// The settled cost: `estimated` with each rule's unit replaced by what the answer says (each
/// unit once: of rules repeating a unit, which callers refuse, the first that reads the
/// answer says it, else the estimate stands).
pub fn settled(estimated: &Cost, rules: &[CostRule], receipt: &Receipt<'_>) -> Cost {
    rules.iter().enumerate().fold(Cost::requests(estimated.requests), |cost, (index, rule)| {
        if rules[..index].iter().any(|earlier| earlier.unit == rule.unit) {
            return cost;
        }
        let same_unit = rules[index..].iter().filter(|other| other.unit == rule.unit);
        let amount =
            same_unit.filter_map(|rule| rule.actual(receipt)).next().unwrap_or_else(|| estimated.of(&rule.unit));
        cost.with(rule.unit.clone(), amount)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn receipt<'a>(status: u16, headers: &'a HeaderMap, body: &'a [u8], memory: &'a RemainingMemory) -> Receipt<'a> {
        Receipt { status, headers, body, key: "api.example:443", memory }
    }

    fn remaining(value: &str) -> HeaderMap {
        let mut headers = HeaderMap::new();
        headers.insert("x-ratelimit-remaining-tokens", value.parse().unwrap());
        headers
    }

    #[test]
    fn an_openai_style_rule_estimates_from_the_request_and_settles_from_usage() {
        let rule: CostRule = "tokens=field:max_tokens+body/4->field:usage.total_tokens".parse().unwrap();
        let body = br#"{"max_tokens": 100, "messages": [{"content": "hello there"}]}"#;
        assert_eq!(rule.estimate(Some(body)), 100 + (body.len() as u64).div_ceil(4));
        let (none, memory) = (HeaderMap::new(), RemainingMemory::default());
        let usage = br#"{"usage": {"total_tokens": 42}}"#;
        assert_eq!(rule.actual(&receipt(200, &none, usage, &memory)), Some(42));
        assert_eq!(rule.actual(&receipt(200, &none, b"not json", &memory)), None, "the estimate stands");
        assert_eq!(rule.actual(&receipt(429, &none, b"", &memory)), Some(0), "a refusal spent nothing");
        let estimated = estimate(1, std::slice::from_ref(&rule), Some(body));
        let settled = settled(&estimated, &[rule], &receipt(200, &none, usage, &memory));
        assert_eq!(settled, Cost::requests(1).with(Unit::tokens(), 42));
    }

    #[test]
    fn a_graphql_rule_settles_points_from_a_pointer_and_fixed_estimates_add_up() {
        let rule: CostRule = "points=50+10->field:/extensions/cost/actualQueryCost".parse().unwrap();
        assert_eq!(rule.unit, Unit::points());
        assert_eq!(rule.estimate(None), 60);
        let (none, memory) = (HeaderMap::new(), RemainingMemory::default());
        let body = br#"{"extensions": {"cost": {"actualQueryCost": 12.5}}}"#;
        assert_eq!(rule.actual(&receipt(200, &none, body, &memory)), Some(13));
    }

    #[test]
    fn a_header_drop_settles_from_the_second_answer_and_a_rise_keeps_the_estimate() {
        let rule: CostRule = "tokens=100->drop:x-ratelimit-remaining-tokens".parse().unwrap();
        let memory = RemainingMemory::default();
        let actual = |status, value: &str| rule.actual(&receipt(status, &remaining(value), b"", &memory));
        assert_eq!(actual(200, "1000"), None, "nothing to compare the first answer with");
        assert_eq!(actual(200, "880"), Some(120));
        assert_eq!(actual(200, "990"), None, "a refill: the estimate stands");
        assert_eq!(actual(200, "900"), Some(90), "measured from the refilled value");
        assert_eq!(actual(429, "0"), Some(0), "a refusal spent nothing, and its value is remembered");
        assert_eq!(actual(200, "not a number"), None);
        assert_eq!(actual(200, "0"), None, "no fall since the refusal's 0");
        let headers = remaining("500");
        let other_key = Receipt { key: "other:443", ..receipt(200, &headers, b"", &memory) };
        assert_eq!(rule.actual(&other_key), None, "each key has its own last value");
        assert_eq!(actual(200, "0.5"), None, "a fraction rounds down to what is surely left");
    }

    #[test]
    fn a_rule_prints_as_it_parses_back() {
        for text in [
            "tokens=field:max_tokens+body/4->field:usage.total_tokens",
            "points=50+10->field:/extensions/cost/actualQueryCost",
            "tokens=100->drop:X-RateLimit-Remaining-Tokens",
            "input_tokens=body/4",
            "x-1=field:a~b/c.d+0",
        ] {
            let rule: CostRule = text.parse().unwrap();
            let printed = rule.to_string();
            assert_eq!(printed.parse::<CostRule>(), Ok(rule), "{text} printed as {printed}");
        }
        let rule: CostRule = "Tokens = 5 + body/4 -> field:usage.total_tokens".parse().unwrap();
        assert_eq!(rule.to_string(), "tokens=5+body/4->field:/usage/total_tokens");
    }

    #[test]
    fn rules_repeating_a_unit_are_found_and_settle_each_unit_once() {
        let rules: Vec<CostRule> =
            ["tokens=5", "points=1", "tokens=6->field:n"].iter().map(|text| text.parse().unwrap()).collect();
        assert_eq!(duplicate_unit(&rules), Some(&Unit::tokens()));
        assert_eq!(duplicate_unit(&rules[..2]), None);
        let estimated = estimate(1, &rules, None);
        assert_eq!(estimated.of(&Unit::tokens()), 11);
        let (none, memory) = (HeaderMap::new(), RemainingMemory::default());
        let said = settled(&estimated, &rules, &receipt(200, &none, b"{}", &memory));
        assert_eq!(said.of(&Unit::tokens()), 11, "the estimate stands, counted once");
        let said = settled(&estimated, &rules, &receipt(200, &none, br#"{"n": 40}"#, &memory));
        assert_eq!(said.of(&Unit::tokens()), 40);
    }

    #[test]
    fn bad_rules_say_what_is_expected() {
        for (text, expected) in [
            ("tokens", "UNIT=ESTIMATE"),
            ("requests=5", "another unit"),
            ("tokens=body/0", "at least 1"),
            ("tokens=lots", "not a number"),
            ("tokens=5->usage", "field:PATH"),
            ("tokens=5->usage", "drop:HEADER"),
            ("tokens=5->drop:bad header", "not a header name"),
            ("tokens=field:usage..x", "empty part"),
            ("tokens=99999999999999999999999", "larger than any amount"),
            ("tok ens=5", "not a unit"),
            ("../x=5", "not a unit"),
            ("🪙=5", "not a unit"),
            ("=5", "empty unit"),
        ] {
            let err = text.parse::<CostRule>().unwrap_err();
            assert!(err.contains(expected), "{text}: {err}");
        }
    }
}
