//! The GraphQL-like route (`api = "graphql"`): a query's cost in points from its text, and
//! the `extensions.cost` block that reports it, shaped like Shopify's.
//!
//! A request is `{"query": "..."}`. Its requested cost is 1 per selection set (each `{`) plus
//! `N` per `first: N` or `last: N` argument (a connection asks for N nodes, at most 250); the
//! actual cost counts each connection half full (N/2 rounded up), as a catalogue with fewer
//! items than a page would. A points budget admits the query when it holds the requested cost
//! and is then charged the actual cost (the rest is not taken). A query whose requested cost
//! exceeds a points limit could never run and is refused with 400 (`MAX_COST_EXCEEDED`); a
//! refused one carries a `THROTTLED` error.

use serde_json::{Value, json};

use super::policy::{PolicyKind, PolicyReport, PolicySpec, UnitCharge};
use crate::engine::Unit;

/// The largest page a connection may ask for.
pub const MAX_PAGE: u64 = 250;
/// The longest query text accepted.
const MAX_QUERY_BYTES: usize = 64 * 1024;

/// What one query costs, in points.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct QueryCost {
    /// The points reserved before running the query (the worst case it asks for).
    pub requested: u64,
    /// The points the query really cost (never above `requested`).
    pub actual: u64,
}

impl QueryCost {
    /// The cost of a request with `body`; an error says what is wrong with it.
    pub fn of(body: &[u8]) -> Result<Self, String> {
        let json: Value = serde_json::from_slice(body)
            .map_err(|err| format!("the body is not JSON ({err}); send {{\"query\": \"{{ shop {{ name }} }}\"}}"))?;
        let query = json.get("query").and_then(Value::as_str).ok_or("the body has no \"query\" string")?;
        if query.len() > MAX_QUERY_BYTES {
            return Err(format!("the query is longer than {MAX_QUERY_BYTES} bytes"));
        }
        let (mut depth, mut sets) = (0i64, 0u64);
        for c in query.chars() {
            match c {
                '{' => (depth, sets) = (depth + 1, sets + 1),
                '}' => depth -= 1,
                _ => {}
            }
            if depth < 0 {
                return Err("the query closes a '}' it never opened".into());
            }
        }
        if depth != 0 || sets == 0 {
            return Err("the query's braces do not balance (write { shop { name } })".into());
        }
        let pages = page_sizes(query)?;
        let requested = sets + pages.iter().sum::<u64>();
        let actual = sets + pages.iter().map(|n| n.div_ceil(2)).sum::<u64>();
        Ok(Self { requested, actual })
    }

    /// Admitted when the points budget holds the requested cost; charged the actual cost.
    pub fn charges(&self) -> Vec<UnitCharge> {
        vec![UnitCharge { unit: Unit::points(), needed: self.requested, spent: self.actual }]
    }

    /// The answer of a query that ran.
    pub fn answer(&self, policies: &[PolicyReport], specs: &[PolicySpec]) -> Value {
        json!({
            "data": {"demo": {"nodesAsked": self.requested, "nodesReturned": self.actual}},
            "extensions": {"cost": self.cost_block(Some(self.actual), policies, specs)},
        })
    }

    /// The `errors` and `extensions` of a query refused for want of points.
    pub fn throttled(&self, policies: &[PolicyReport], specs: &[PolicySpec]) -> (Value, Value) {
        let errors = json!([{"message": "Throttled", "extensions": {"code": "THROTTLED"}}]);
        (errors, json!({"cost": self.cost_block(None, policies, specs)}))
    }

    fn cost_block(&self, actual: Option<u64>, policies: &[PolicyReport], specs: &[PolicySpec]) -> Value {
        let mut cost = json!({"requestedQueryCost": self.requested, "actualQueryCost": actual});
        if let Some(status) = throttle_status(policies, specs) {
            cost["throttleStatus"] = status;
        }
        cost
    }
}

/// Shopify's `throttleStatus` from the route's first points bucket (maximum, what is left after
/// this query, and the restore rate per second).
fn throttle_status(policies: &[PolicyReport], specs: &[PolicySpec]) -> Option<Value> {
    let (report, spec) = policies
        .iter()
        .zip(specs)
        .find(|(report, spec)| report.unit == Unit::points() && matches!(spec.kind, PolicyKind::TokenBucket { .. }))?;
    let PolicyKind::TokenBucket { rate, .. } = spec.kind else { return None };
    let per_second = rate.amount() as f64 / rate.per().as_secs_f64();
    Some(json!({
        "maximumAvailable": report.limit as f64,
        "currentlyAvailable": report.remaining,
        "restoreRate": per_second,
    }))
}

/// The `N` of every `first: N` and `last: N` argument.
fn page_sizes(query: &str) -> Result<Vec<u64>, String> {
    let mut pages = Vec::new();
    let bytes = query.as_bytes();
    for word in ["first", "last"] {
        for (at, _) in query.match_indices(word) {
            let before = at.checked_sub(1).map(|i| bytes[i]);
            if before.is_some_and(|b| b.is_ascii_alphanumeric() || b == b'_') {
                continue;
            }
            let Some(rest) = query[at + word.len()..].trim_start().strip_prefix(':') else { continue };
            let rest = rest.trim_start();
            let digits = rest.find(|c: char| !c.is_ascii_digit()).unwrap_or(rest.len());
            let n: u64 = rest[..digits].parse().map_err(|_| format!("{word}: needs a whole number of nodes"))?;
            if n > MAX_PAGE {
                return Err(format!("{word}: {n} asks for more than {MAX_PAGE} nodes"));
            }
            pages.push(n);
        }
    }
    Ok(pages)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cost(query: &str) -> Result<QueryCost, String> {
        QueryCost::of(json!({ "query": query }).to_string().as_bytes())
    }

    #[test]
    fn a_query_costs_its_selection_sets_and_pages_and_connections_come_back_half_full() {
        let query =
            "{ products(first: 10) { edges { node { id title variants(last:5) { edges { node { id } } } } } } }";
        assert_eq!(cost(query).unwrap(), QueryCost { requested: 7 + 10 + 5, actual: 7 + 5 + 3 });
        assert_eq!(cost("{ shop { name } }").unwrap(), QueryCost { requested: 2, actual: 2 });
        assert_eq!(cost("{ firstName lastly { x } }").unwrap().requested, 2, "only whole words with a ':'");
    }

    #[test]
    fn bad_queries_say_what_is_wrong() {
        for (body, expected) in [
            ("nope".to_owned(), "not JSON"),
            (r#"{"q": 1}"#.to_owned(), "no \"query\""),
            (json!({"query": "{ a { b }"}).to_string(), "do not balance"),
            (json!({"query": "} {"}).to_string(), "never opened"),
            (json!({"query": "{ a(first: 1000) { b } }"}).to_string(), "more than 250"),
            (json!({"query": "{ a(first: x) { b } }"}).to_string(), "whole number"),
        ] {
            let err = QueryCost::of(body.as_bytes()).unwrap_err();
            assert!(err.contains(expected), "{body}: {err}");
        }
    }
}
