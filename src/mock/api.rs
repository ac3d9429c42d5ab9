//! What a route answers (`api`): plain JSON, an LLM-like chat completion, or a GraphQL-like
//! query; and what a request to it spends beyond being one request.

use std::fmt;
use std::str::FromStr;

use serde_json::Value;

use super::config::RouteConfig;
use super::graphql::QueryCost;
use super::llm::Usage;
use super::policy::{Decision, PolicySpec, UnitCharge};
use crate::engine::Unit;

/// The kind of API a route serves.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum Api {
    /// Any method; a small JSON document (or the cacheable one).
    #[default]
    Json,
    /// POST a chat request; usage in tokens (see [`super::llm`]).
    Llm,
    /// POST a query; its cost in points (see [`super::graphql`]).
    Graphql,
}

impl Api {
    /// Every API's name as written in a mock config, in declaration order.
    pub const NAMES: [&'static str; 3] = ["json", "llm", "graphql"];

    /// The name a mock config uses for it.
    pub fn name(self) -> &'static str {
        match self {
            Self::Json => "json",
            Self::Llm => "llm",
            Self::Graphql => "graphql",
        }
    }

    /// The unit other than requests this API's requests spend, if any.
    pub fn unit(self) -> Option<Unit> {
        match self {
            Self::Json => None,
            Self::Llm => Some(Unit::tokens()),
            Self::Graphql => Some(Unit::points()),
        }
    }

    /// Refuses a policy counting a unit this API does not measure.
    pub fn check_policy(self, policy: &PolicySpec) -> Result<(), String> {
        if policy.unit == Unit::Requests || self.unit().as_ref() == Some(&policy.unit) {
            return Ok(());
        }
        let measured = match self.unit() {
            Some(unit) => format!("requests and {unit}"),
            None => "requests only".to_owned(),
        };
        Err(format!(
            "policy '{}' counts {}, but an api = \"{}\" route measures {measured}",
            policy.name,
            policy.unit,
            self.name()
        ))
    }
}

impl fmt::Display for Api {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Api {
    type Err = String;

    fn from_str(text: &str) -> Result<Self, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "json" => Ok(Self::Json),
            "llm" => Ok(Self::Llm),
            "graphql" => Ok(Self::Graphql),
            _ => Err(format!("api {text:?} is not one of {}", Self::NAMES.join(", "))),
        }
    }
}

/// A request as its route's API reads it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Work {
    /// A request to a plain JSON route: spends requests only.
    Plain,
    /// A chat completion and the tokens it uses.
    Chat(Usage),
    /// A GraphQL query and the points it costs.
    Query(QueryCost),
}

impl Work {
    /// Reads a request to a route serving `api` with `policies`; an error is the 400's message.
    pub fn read(api: Api, policies: &[PolicySpec], body: &[u8], seed: u64) -> Result<Self, String> {
        let work = match api {
            Api::Json => return Ok(Self::Plain),
            Api::Llm => Self::Chat(Usage::of(body, seed)?),
            Api::Graphql => Self::Query(QueryCost::of(body)?),
        };
        let unit = api.unit().unwrap_or_default();
        let Some(limit) = policies.iter().filter(|p| p.unit == unit).map(PolicySpec::limit).min() else {
            return Ok(work);
        };
        match work {
            Self::Chat(usage) if usage.ceiling() > limit => Err(format!(
                "the prompt and max_tokens come to {} tokens, above the tokens limit of {limit}: the request could never run",
                usage.ceiling()
            )),
            Self::Query(cost) if cost.requested > limit => Err(format!(
                "MAX_COST_EXCEEDED: the query's requested cost {} is above the points limit of {limit}",
                cost.requested
            )),
            work => Ok(work),
        }
    }

    /// The body of its answer when admitted (`None`: the route's plain JSON).
    pub fn answer(&self, route: &RouteConfig, decision: &Decision) -> Option<Value> {
        match self {
            Self::Plain => None,
            Self::Chat(usage) => Some(usage.answer(&route.prefix)),
            Self::Query(cost) => Some(cost.answer(&decision.policies, &route.policies)),
        }
    }

    /// What it spends beyond one request.
    pub fn charges(&self) -> Vec<UnitCharge> {
        match self {
            Self::Plain => Vec::new(),
            Self::Chat(usage) => usage.charges(),
            Self::Query(cost) => cost.charges(),
        }
    }
}

/// The `error` body of a request an API refuses to read (400).
pub fn bad_request(api: Api, message: String) -> Value {
    match api {
        Api::Graphql => serde_json::json!({"errors": [{"message": message}]}),
        _ => serde_json::json!({"error": message}),
    }
}

/// The highest item id the demo API knows (`/items?ids=1,2,3` answers ids 1 to this).
pub const MAX_ITEM_ID: u64 = 100_000;
/// The most ids one `?ids=` request may ask for.
pub const MAX_IDS: usize = 1_000;

/// A JSON route's answer to `?ids=1,2,3`: one entry per id, in the order asked
/// (`{"items": [{"id": 1, "name": "item 1"}, ...]}`); `None` without an `ids` parameter. An
/// empty, malformed or unknown id, or more than [`MAX_IDS`], is the 400's message. However
/// many ids it names, such a request is one request to the route's limits.
pub fn items_answer(query: Option<&str>) -> Result<Option<Value>, String> {
    let Some(query) = query else { return Ok(None) };
    let Some((_, list)) = url::form_urlencoded::parse(query.as_bytes()).find(|(name, _)| name == "ids") else {
        return Ok(None);
    };
    let ids: Vec<&str> = list.split(',').map(str::trim).collect();
    if ids.len() > MAX_IDS {
        return Err(format!("{} ids asked at once; at most {MAX_IDS} per request", ids.len()));
    }
    let items = ids
        .iter()
        .map(|text| {
            let id: u64 = text
                .parse()
                .map_err(|_| format!("ids: {text:?} is not an item id (ids are whole numbers, like ids=1,2,3)"))?;
            if id == 0 || id > MAX_ITEM_ID {
                return Err(format!("ids: unknown item {id} (items are numbered 1 to {MAX_ITEM_ID})"));
            }
            Ok(serde_json::json!({"id": id, "name": format!("item {id}")}))
        })
        .collect::<Result<Vec<Value>, String>>()?;
    Ok(Some(serde_json::json!({ "items": items })))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ids_answer_one_entry_each_or_a_clear_refusal() {
        let answer = items_answer(Some("x=1&ids=3,1")).unwrap().unwrap();
        assert_eq!(answer["items"][0]["id"], 3);
        assert_eq!(answer["items"][1]["name"], "item 1");
        assert_eq!(items_answer(Some("x=1")), Ok(None));
        assert!(items_answer(Some("ids=1,x")).unwrap_err().contains("\"x\" is not an item id"));
        assert!(items_answer(Some("ids=0")).unwrap_err().contains("unknown item 0"));
        assert!(items_answer(Some("ids=")).is_err());
    }
}
