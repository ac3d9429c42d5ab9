//! What a request carries for the limiter in `http::Extensions` when it comes through another
//! client's stack (the reqwest-middleware adapter, the tower layer): its priority lane, its
//! cost in requests, and the rules that estimate and settle other units.
//!
//! Insert them on the request (`request.extensions_mut().insert(Priority::High)`, or
//! `reqwest_middleware::RequestBuilder::with_extension`); a request without them goes in the
//! normal lane, costing one request and no other unit.

use crate::engine::Priority;
use crate::http::cost::CostRule;

/// What one request spends of every requests budget (more than 1 for an endpoint the server
/// counts as several calls). Zero is refused by the limiter.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RequestCost(pub u64);

/// Estimates of units other than requests (tokens, points) reserved before sending and
/// settled from the answer, as in a profile endpoint's `costs`.
#[derive(Debug, Clone, Default)]
pub struct CostRules(pub Vec<CostRule>);

/// The limiter's view of a request's extensions: lane, cost in requests, cost rules.
#[cfg_attr(not(any(feature = "middleware", feature = "tower")), allow(dead_code))]
pub(crate) fn limits_of(extensions: &http::Extensions) -> (Priority, u64, Vec<CostRule>) {
    let priority = extensions.get::<Priority>().copied().unwrap_or(Priority::Normal);
    let cost = extensions.get::<RequestCost>().map_or(1, |cost| cost.0);
    let rules = extensions.get::<CostRules>().map(|rules| rules.0.clone()).unwrap_or_default();
    (priority, cost, rules)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_request_without_extensions_is_normal_and_costs_one() {
        let (priority, cost, rules) = limits_of(&http::Extensions::new());
        assert_eq!((priority, cost, rules.len()), (Priority::Normal, 1, 0));
        let mut extensions = http::Extensions::new();
        extensions.insert(Priority::High);
        extensions.insert(RequestCost(5));
        extensions.insert(CostRules(vec!["tokens=100".parse::<CostRule>().unwrap()]));
        let (priority, cost, rules) = limits_of(&extensions);
        assert_eq!((priority, cost, rules.len()), (Priority::High, 5, 1));
    }
}
