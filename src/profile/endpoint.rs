//! A host's endpoints: the `[[hosts.endpoints]]` entries checked, and turned into the URL,
//! method, headers and body a burst sends.

use std::collections::BTreeMap;
use std::path::Path;

use bytes::Bytes;
use http::{HeaderMap, HeaderName, HeaderValue, Method};
use url::Url;

use super::error::{FieldPath, InvalidSetting, ProfileError};
use super::model::{EndpointEntry, HostProfile};
use crate::engine::{LimitKey, LimiterConfig, Unit, parse_duration};
use crate::files;
use crate::http::cost::{self, duplicate_unit};
use crate::http::header_cap::check_header_count;
use crate::http::{BatchPlan, CostRule};
use crate::redact::{holds_secret, looks_secret, redact_url};

/// The largest body an endpoint sends (a file beyond it is refused, naming the cap).
pub const MAX_BODY_BYTES: u64 = 16 * 1024 * 1024;

/// An endpoint as a burst sends it.
#[derive(Debug, Clone, PartialEq)]
pub struct ResolvedEndpoint {
    /// The endpoint's name.
    pub name: String,
    /// The full URL, query included.
    pub url: Url,
    /// The method.
    pub method: Method,
    /// The endpoint's own headers (the host's default headers come from the client).
    pub headers: HeaderMap,
    /// The body, read from `body_file` when the profile names one.
    pub body: Option<Bytes>,
    /// Its share of a burst over several endpoints.
    pub weight: u32,
    /// What a request reserves of other units, settled from its answer.
    pub cost_rules: Vec<CostRule>,
    /// Item requests sent in batches (ids into one query parameter), when the entry has a template.
    pub batch: Option<BatchPlan>,
}

impl HostProfile {
    /// The endpoint called `name` (compared without case), ready to send.
    pub fn endpoint(&self, name: &str) -> Result<ResolvedEndpoint, ProfileError> {
        let Some(index) = self.endpoints.iter().position(|entry| entry.name.trim().eq_ignore_ascii_case(name.trim()))
        else {
            return Err(ProfileError::invalid(InvalidSetting::new(
                FieldPath::root().key("endpoints"),
                format!("host '{}' has no endpoint '{name}'; its endpoints: {}", self.name, self.endpoint_names()),
            )));
        };
        let at = FieldPath::root().key("endpoints").index(index);
        let in_host = |err: InvalidSetting| ProfileError::invalid(err.in_host(&self.name, &FieldPath::root()));
        let entry = &self.endpoints[index];
        let mut resolved = entry.check(&self.base_url, &at).map_err(in_host)?;
        if let Some(file) = &entry.body_file {
            let bytes = files::read_capped(Path::new(file), MAX_BODY_BYTES).map_err(ProfileError::from)?;
            resolved.body = Some(Bytes::from(bytes));
        }
        Ok(resolved)
    }

    /// Adds `entry`, replacing an endpoint of the same name (compared without case).
    pub fn put_endpoint(&mut self, entry: EndpointEntry) {
        self.endpoints.retain(|known| !known.name.eq_ignore_ascii_case(&entry.name));
        self.endpoints.push(entry);
    }

    /// Puts a request taken from elsewhere (a pasted curl command). An endpoint of another
    /// name with the same method and path (a trailing `/` aside) takes the request's query,
    /// headers and body and keeps its own name, path, weight, costs and batch, so a paste of a request
    /// the host lists already updates it instead of listing it twice; otherwise the request is
    /// put as [`put_endpoint`](Self::put_endpoint) puts it. Returns the endpoint's name.
    pub fn merge_request(&mut self, entry: EndpointEntry) -> String {
        let method = |endpoint: &EndpointEntry| endpoint.method.as_deref().unwrap_or("GET").to_ascii_uppercase();
        let path = |endpoint: &EndpointEntry| endpoint.path.trim_end_matches('/').to_owned();
        let same_request = |known: &&mut EndpointEntry| {
            !known.name.eq_ignore_ascii_case(&entry.name)
                && method(known) == method(&entry)
                && path(known) == path(&entry)
        };
        if let Some(known) = self.endpoints.iter_mut().find(same_request) {
            known.method = entry.method;
            known.query = entry.query;
            known.headers = entry.headers;
            known.body = entry.body;
            known.body_file = entry.body_file;
            return known.name.clone();
        }
        let name = entry.name.clone();
        self.put_endpoint(entry);
        name
    }

    /// `a, b, c`, or `none` when the host lists no endpoint.
    pub fn endpoint_names(&self) -> String {
        if self.endpoints.is_empty() {
            return "none".into();
        }
        self.endpoints.iter().map(|entry| entry.name.as_str()).collect::<Vec<_>>().join(", ")
    }

    /// Every endpoint checked (a body file is read only when the endpoint is used).
    pub(crate) fn check_endpoints(&self) -> Result<Vec<ResolvedEndpoint>, InvalidSetting> {
        let mut names = Vec::with_capacity(self.endpoints.len());
        let mut resolved = Vec::with_capacity(self.endpoints.len());
        for (index, entry) in self.endpoints.iter().enumerate() {
            let at = FieldPath::root().key("endpoints").index(index);
            resolved.push(entry.check(&self.base_url, &at)?);
            let name = entry.name.trim().to_ascii_lowercase();
            if names.contains(&name) {
                return Err(InvalidSetting::new(at.key("name"), format!("endpoint '{}': listed twice", entry.name)));
            }
            names.push(name);
        }
        Ok(resolved)
    }

    /// What the `endpoints` of this host spend against its limits (`config`, and `paths` for the
    /// path overrides): every endpoint's estimate (its `body` as written; a body file counts as
    /// empty until it is read) fits the limits its path falls under, or none of its requests
    /// could ever be sent; and once any endpoint has cost rules, every budget in a unit other
    /// than requests is spent by one of them (else it never binds: a typo such as `token`).
    pub(crate) fn check_costs(
        &self,
        endpoints: &[ResolvedEndpoint],
        config: &LimiterConfig,
        paths: &[(LimitKey, LimiterConfig)],
    ) -> Result<(), InvalidSetting> {
        for (index, endpoint) in endpoints.iter().enumerate() {
            let limits = paths
                .iter()
                .filter(|(key, _)| key.covers_path(endpoint.url.path()))
                .max_by_key(|(key, _)| key.path_prefix.as_ref().map_or(0, String::len))
                .map_or(config, |(_, limits)| limits);
            let estimate = cost::estimate(1, &endpoint.cost_rules, endpoint.body.as_deref());
            if let Some((budget, spent)) = limits.never_fits(&estimate) {
                return Err(InvalidSetting::new(
                    FieldPath::root().key("endpoints").index(index).key("costs"),
                    format!(
                        "endpoint '{}': a request is estimated at {spent} in budget '{}', which holds at most {}, so none could ever be sent",
                        endpoint.name,
                        budget.name,
                        budget.capacity()
                    ),
                ));
            }
        }
        let spent = cost::units_spent(endpoints.iter().flat_map(|endpoint| &endpoint.cost_rules));
        if spent.is_empty() {
            return Ok(());
        }
        let host_budgets = self
            .budgets
            .iter()
            .enumerate()
            .map(|(index, budget)| (FieldPath::root().key("budgets").index(index), budget));
        let path_budgets = self.paths.iter().enumerate().flat_map(|(path, entry)| {
            entry.budgets.iter().enumerate().map(move |(index, budget)| {
                (FieldPath::root().key("paths").index(path).key("budgets").index(index), budget)
            })
        });
        for (at, budget) in host_budgets.chain(path_budgets) {
            let unit = budget.unit.as_deref().map_or(Unit::Requests, Unit::named);
            if unit == Unit::Requests || spent.contains(&unit) {
                continue;
            }
            let names: Vec<&str> = spent.iter().map(Unit::as_str).collect();
            let guess = unit.closest(&spent).map(|closest| format!(": did you mean {closest}?")).unwrap_or_default();
            return Err(InvalidSetting::new(
                at.key("unit"),
                format!(
                    "budget '{}': counts {unit}, but no endpoint of the host spends it (their costs spend {}){guess}",
                    budget.name,
                    names.join(", ")
                ),
            ));
        }
        Ok(())
    }
}

impl EndpointEntry {
    /// A `GET` of `path` named after it.
    pub fn get(path: &str) -> Self {
        Self {
            name: path.to_owned(),
            method: None,
            path: path.to_owned(),
            query: BTreeMap::new(),
            headers: BTreeMap::new(),
            body: None,
            body_file: None,
            weight: None,
            costs: Vec::new(),
            batch: None,
        }
    }

    /// Everything but the body file, checked and resolved against the host's `base_url`.
    fn check(&self, base_url: &str, at: &FieldPath) -> Result<ResolvedEndpoint, InvalidSetting> {
        let label = format!("endpoint '{}'", self.name);
        let fail =
            |field: &str, message: String| Err(InvalidSetting::new(at.key(field), format!("{label}: {message}")));
        if self.name.trim().is_empty() {
            return Err(InvalidSetting::new(at.key("name"), "endpoint: an endpoint needs a name"));
        }
        let method = match self.method.as_deref().map(str::trim) {
            None | Some("") => Method::GET,
            Some(text) => match Method::from_bytes(text.to_ascii_uppercase().as_bytes()) {
                Ok(method) => method,
                Err(_) => return fail("method", format!("'{text}' is not an HTTP method (GET, POST, PUT, ...)")),
            },
        };
        if !self.path.starts_with('/') {
            return fail("path", format!("'{}' must start with '/', such as /items", redact_url(&self.path)));
        }
        let Ok(base) = Url::parse(base_url.trim()) else {
            return fail("path", "the host's base_url is not a URL".into());
        };
        let Ok(mut url) = base.join(&format!("{}{}", base.path().trim_end_matches('/'), self.path)) else {
            let (path, base) = (redact_url(&self.path), redact_url(base_url));
            return fail("path", format!("'{path}' does not make a URL under {base}"));
        };
        if url.fragment().is_some() {
            return fail("path", "must not have a fragment (#...)".into());
        }
        // An empty value is no secret (`?token=` asks for none).
        if url.query_pairs().any(|(name, value)| holds_secret(&name, &value))
            || self.query.iter().any(|(name, value)| holds_secret(name, value))
        {
            return fail(
                "query",
                "a query parameter looks like a secret (keys in URLs leak into logs); send it in a secret header"
                    .into(),
            );
        }
        if !self.query.is_empty() {
            url.query_pairs_mut().extend_pairs(&self.query);
        }
        let headers = checked_headers(&self.headers, &at.key("headers"), &label)?;
        if self.body.is_some() && self.body_file.is_some() {
            return fail("body_file", "give body or body_file, not both".into());
        }
        let body = self.body.clone().map(Bytes::from);
        if body.is_some() && method == Method::GET {
            return fail(
                "body",
                "a GET with a body is ignored by most servers; set method = \"POST\" (or PUT, ...)".into(),
            );
        }
        let weight = self.weight.unwrap_or(1);
        let cost_rules = self
            .costs
            .iter()
            .enumerate()
            .map(|(index, rule)| {
                rule.parse::<CostRule>()
                    .map_err(|err| InvalidSetting::new(at.key("costs").index(index), format!("{label}: {err}")))
            })
            .collect::<Result<Vec<_>, _>>()?;
        if let Some(unit) = duplicate_unit(&cost_rules) {
            let index = cost_rules.iter().rposition(|rule| rule.unit == *unit).unwrap_or_default();
            return Err(InvalidSetting::new(
                at.key("costs").index(index),
                format!(
                    "{label}: two cost rules for {unit}; give one rule per unit (add terms with +, e.g. {unit}=500+body/4)"
                ),
            ));
        }
        let batch = match &self.batch {
            None => None,
            Some(entry) => {
                if method != Method::GET {
                    return fail("batch", format!("a batch is sent as one GET; the endpoint's method is {method}"));
                }
                let wait = parse_duration(&entry.max_wait).map_err(|err| {
                    InvalidSetting::new(at.key("batch").key("max_wait"), format!("{label}: batch: {err}"))
                })?;
                let plan = BatchPlan::new(&entry.param, entry.separator.as_deref(), entry.max_size, wait);
                Some(plan.map_err(|err| InvalidSetting::new(at.key("batch"), format!("{label}: batch: {err}")))?)
            }
        };
        Ok(ResolvedEndpoint {
            name: self.name.trim().to_owned(),
            url,
            method,
            headers,
            body,
            weight,
            cost_rules,
            batch,
        })
    }
}

/// Header names and values checked: valid, each once, none that looks like a secret, and no
/// more than [`MAX_REQUEST_HEADERS`](crate::http::header_cap::MAX_REQUEST_HEADERS).
pub(crate) fn checked_headers(
    headers: &BTreeMap<String, String>,
    at: &FieldPath,
    label: &str,
) -> Result<HeaderMap, InvalidSetting> {
    check_header_count(headers.len()).map_err(|err| InvalidSetting::new(at.clone(), format!("{label}: {err}")))?;
    let mut map = HeaderMap::new();
    for (name, value) in headers {
        let fail = |message: String| Err(InvalidSetting::new(at.key(name), format!("{label}: {message}")));
        let Ok(header) = HeaderName::from_bytes(name.trim().as_bytes()) else {
            return fail(format!("'{name}' is not a valid header name"));
        };
        if looks_secret(header.as_str()) {
            return fail(format!(
                "'{header}' looks like a secret; list it in the host's secret_headers and keep its value in the secret store"
            ));
        }
        if map.contains_key(&header) {
            return fail(format!("'{header}' is listed twice"));
        }
        let Ok(value) = HeaderValue::from_str(value) else {
            return fail(format!("the value of '{header}' is not a valid header value"));
        };
        map.insert(header, value);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::profile::BatchEntry;

    fn host(endpoints: Vec<EndpointEntry>) -> HostProfile {
        let mut host = HostProfile::new("api", "https://api.example.com/v1");
        host.endpoints = endpoints;
        host
    }

    #[test]
    fn an_endpoint_resolves_under_the_base_path_with_its_query_method_headers_and_body() {
        let entry = EndpointEntry {
            method: Some("post".into()),
            query: BTreeMap::from([("dry run".into(), "yes & no".into())]),
            headers: BTreeMap::from([("Accept".into(), "application/json".into())]),
            body: Some(r#"{"name":"x"}"#.into()),
            ..EndpointEntry::get("/items?page=2")
        };
        let resolved = host(vec![EndpointEntry { name: "create".into(), ..entry }]).endpoint("Create").unwrap();
        assert_eq!(resolved.url.as_str(), "https://api.example.com/v1/items?page=2&dry+run=yes+%26+no");
        assert_eq!(resolved.method, Method::POST);
        assert_eq!(resolved.headers["accept"], "application/json");
        assert_eq!(resolved.body.as_deref(), Some(br#"{"name":"x"}"#.as_slice()));
        assert_eq!(resolved.weight, 1);
        assert!(resolved.cost_rules.is_empty());
    }

    #[test]
    fn cost_rules_resolve_and_a_bad_one_names_its_place() {
        let rule = "tokens=field:max_tokens+body/4->field:usage.total_tokens";
        let entry =
            EndpointEntry { method: Some("POST".into()), costs: vec![rule.into()], ..EndpointEntry::get("/chat") };
        let resolved = host(vec![entry.clone()]).endpoint("/chat").unwrap();
        assert_eq!(resolved.cost_rules, [rule.parse::<CostRule>().unwrap()]);
        let bad = EndpointEntry { costs: vec![rule.into(), "tokens=lots".into()], ..entry };
        let err = host(vec![bad]).check_endpoints().unwrap_err();
        assert!(err.to_string().contains("endpoint '/chat': 'lots' is not a number"), "{err}");
        let text = "name = \"p\"\n\n[[hosts]]\nname = \"api\"\nbase_url = \"https://api.example.com\"\n\n[[hosts.endpoints]]\nname = \"chat\"\nmethod = \"POST\"\npath = \"/chat\"\ncosts = [\"tokens=lots\"]\n";
        let err = crate::profile::Profile::from_toml(text).unwrap_err().to_string();
        assert!(err.starts_with("line 11") && err.contains("host 'api'") && err.contains("'lots'"), "{err}");
    }

    /// A profile of one host `api` with `budgets` (TOML inline tables) and one endpoint `chat`
    /// with `costs`, or its error.
    fn chat_profile(budgets: &str, costs: &str) -> Result<crate::profile::Profile, String> {
        let text = format!(
            "name = \"p\"\n\n[[hosts]]\nname = \"api\"\nbase_url = \"https://api.example.com\"\nbudgets = [{budgets}]\n\n[[hosts.paths]]\nprefix = \"/big\"\nbudgets = [{{ name = \"big\", kind = \"sliding_window\", limit = 100, window = \"1m\", unit = \"tokens\" }}]\n\n[[hosts.endpoints]]\nname = \"chat\"\nmethod = \"POST\"\npath = \"/chat\"\nbody = '{{\"max_tokens\": 40}}'\ncosts = [{costs}]\n"
        );
        crate::profile::Profile::from_toml(&text).map_err(|err| err.to_string())
    }

    #[test]
    fn a_profiles_costs_are_checked_against_its_budgets() {
        let tokens = r#"{ name = "tpm", kind = "sliding_window", limit = 50, window = "1m", unit = "tokens" }"#;
        chat_profile(tokens, r#""tokens=field:max_tokens+body/4->field:usage.total_tokens""#).unwrap();
        let twice = chat_profile(tokens, r#""tokens=5", "tokens=6""#).unwrap_err();
        assert!(twice.contains("endpoint 'chat': two cost rules for tokens"), "{twice}");
        // 40 from the body's max_tokens and 5 for its 18 bytes: 45 fits; 10 more does not.
        let big = chat_profile(tokens, r#""tokens=10+field:max_tokens+body/4""#).unwrap_err();
        assert!(big.contains("estimated at 55 in budget 'tpm', which holds at most 50"), "{big}");
        let typo = r#"{ name = "tpm", kind = "sliding_window", limit = 50, window = "1m", unit = "token" }"#;
        let unspent = chat_profile(typo, r#""tokens=5""#).unwrap_err();
        assert!(
            unspent.contains("budget 'tpm': counts token") && unspent.contains("did you mean tokens?"),
            "{unspent}"
        );
        let points = r#"{ name = "pts", kind = "sliding_window", limit = 50, window = "1m", unit = "points" }"#;
        let unspent = chat_profile(points, r#""tokens=5""#).unwrap_err();
        assert!(unspent.contains("counts points, but no endpoint of the host spends it"), "{unspent}");
        chat_profile(points, "").unwrap();
    }

    #[test]
    fn bad_endpoints_are_refused_naming_the_field() {
        let cases = [
            (EndpointEntry { method: Some("GE T".into()), ..EndpointEntry::get("/a") }, "not an HTTP method"),
            (EndpointEntry::get("items"), "must start with '/'"),
            (
                EndpointEntry { name: "bad".into(), ..EndpointEntry::get("items?api_key=Bearer x") },
                "must start with '/'",
            ),
            (EndpointEntry::get("/a?api_key=1"), "looks like a secret"),
            (
                EndpointEntry { query: BTreeMap::from([("token".into(), "1".into())]), ..EndpointEntry::get("/a") },
                "looks like a secret",
            ),
            (
                EndpointEntry {
                    headers: BTreeMap::from([("Authorization".into(), "Bearer x".into())]),
                    ..EndpointEntry::get("/a")
                },
                "secret_headers",
            ),
            (EndpointEntry { body: Some("x".into()), ..EndpointEntry::get("/a") }, "GET with a body"),
            (
                EndpointEntry {
                    method: Some("PUT".into()),
                    body: Some("x".into()),
                    body_file: Some("x.json".into()),
                    ..EndpointEntry::get("/a")
                },
                "not both",
            ),
        ];
        for (entry, expected) in cases {
            let err = host(vec![entry.clone()]).check_endpoints().unwrap_err().to_string();
            assert!(err.contains(expected), "{entry:?}: {err}");
            assert!(!err.contains("Bearer x"), "a secret value is never echoed: {err}");
        }
        let twice =
            host(vec![EndpointEntry::get("/a"), EndpointEntry { name: "/A".into(), ..EndpointEntry::get("/b") }]);
        assert!(twice.check_endpoints().unwrap_err().to_string().contains("listed twice"));
        let unknown = host(vec![EndpointEntry::get("/a")]).endpoint("nope").unwrap_err().to_string();
        assert!(unknown.contains("no endpoint 'nope'") && unknown.contains("/a"), "{unknown}");
    }

    #[test]
    fn a_body_file_is_read_when_the_endpoint_is_used_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("payload.json");
        std::fs::write(&file, b"[1,2,3]").unwrap();
        let entry = EndpointEntry {
            method: Some("PUT".into()),
            body_file: Some(file.display().to_string()),
            ..EndpointEntry::get("/a")
        };
        let host = host(vec![entry]);
        assert_eq!(host.endpoint("/a").unwrap().body.as_deref(), Some(b"[1,2,3]".as_slice()));
        std::fs::remove_file(&file).unwrap();
        let err = host.endpoint("/a").unwrap_err().to_string();
        assert!(err.contains("payload.json"), "{err}");
    }

    #[test]
    fn a_batch_template_is_checked_and_resolved() {
        let batch = BatchEntry { param: "ids".into(), max_size: 50, max_wait: "20ms".into(), separator: None };
        let entry = EndpointEntry { batch: Some(batch.clone()), ..EndpointEntry::get("/items") };
        let resolved = host(vec![entry]).endpoint("/items").unwrap();
        let plan = resolved.batch.unwrap();
        assert_eq!((plan.query.param.as_str(), plan.settings.max_size), ("ids", 50));
        assert_eq!(plan.settings.max_wait, std::time::Duration::from_millis(20));
        for (bad, says) in [
            (BatchEntry { max_size: 0, ..batch.clone() }, "at least one item"),
            (BatchEntry { max_wait: "soon".into(), ..batch.clone() }, "not a duration"),
            (BatchEntry { param: String::new(), ..batch.clone() }, "needs a name"),
        ] {
            let entry = EndpointEntry { batch: Some(bad), ..EndpointEntry::get("/items") };
            let err = host(vec![entry]).endpoint("/items").unwrap_err().to_string();
            assert!(err.contains(says), "{err}");
        }
        let post = EndpointEntry { method: Some("POST".into()), batch: Some(batch), ..EndpointEntry::get("/items") };
        assert!(host(vec![post]).endpoint("/items").unwrap_err().to_string().contains("one GET"));
    }
}
