//! Fuzzes cost rules and units: the first line is a `--cost` rule (and a unit name), the rest a
//! JSON body, both the request's and the answer's. Whatever parses prints back as itself, and a
//! rule's settlement of any answer neither panics nor counts more than the budget holds.
#![no_main]

use std::time::Duration;

use http::HeaderMap;
use libfuzzer_sys::fuzz_target;
use ratescope::engine::{BudgetSpec, LimiterConfig, Unit};
use ratescope::http::CostRule;
use ratescope::http::cost::{self, Receipt, RemainingMemory};

fuzz_target!(|data: &[u8]| {
    let text = String::from_utf8_lossy(data);
    let (line, body) = text.split_once('\n').unwrap_or((&text, ""));
    if let Ok(unit) = Unit::parse(line) {
        assert_eq!(Unit::parse(&unit.to_string()), Ok(unit));
    }
    let Ok(rule) = line.parse::<CostRule>() else { return };
    let printed = rule.to_string();
    assert_eq!(printed.parse::<CostRule>().as_ref(), Ok(&rule), "{line:?} printed as {printed:?}");
    let unit = rule.unit.clone();
    let rules = [rule];
    let estimate = cost::estimate(1, &rules, Some(body.as_bytes()));
    let (headers, memory) = (HeaderMap::new(), RemainingMemory::default());
    let receipt = Receipt { status: 200, headers: &headers, body: body.as_bytes(), key: "api:443", memory: &memory };
    let said = cost::settled(&estimate, &rules, &receipt);
    let window = BudgetSpec::sliding_window("tokens", 1000, Duration::from_secs(60)).unwrap().with_unit(unit.clone());
    let config = LimiterConfig::new().with_budget(window);
    assert!(config.capped(&said).of(&unit) <= 1000, "{said:?}");
});
