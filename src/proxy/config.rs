//! What a proxy is told: its routes (`PREFIX=UPSTREAM`), where it listens, its limits, load
//! shedding, timeouts (request heads, upstreams) and drain deadline; each setting validated
//! before anything binds.

use std::net::SocketAddr;
use std::str::FromStr;
use std::time::Duration;

use http::uri::PathAndQuery;
use http::{HeaderMap, HeaderName, HeaderValue};
use url::Url;

use super::error::ProxyError;
use super::hop;
use super::path::{self, PathRefusal};
use crate::http::Policy;
use crate::http::cache::CacheConfig;
use crate::store::SharedSettings;

/// The default listen address: loopback, port 8788 (the demo API takes 8787).
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8788";
/// How long a caller may take to send a request head (or keep a connection idle between
/// requests) before the proxy closes the connection.
pub const DEFAULT_HEAD_TIMEOUT: Duration = Duration::from_secs(10);
/// A request body up to this size is buffered, so it can be sent again on a retry.
pub const DEFAULT_REPLAY_LIMIT: usize = 1 << 20;
/// Upper bounds that keep a typo from meaning "forever" or "all memory".
const MAX_WAIT: Duration = Duration::from_secs(24 * 3600);
const MAX_QUEUE_LEN: usize = 1_000_000;
const MAX_REPLAY_LIMIT: usize = 64 << 20;
/// The most serving threads a proxy starts (far more than cores only costs memory).
const MAX_THREADS: usize = 1024;

/// One route: requests under `/prefix` go to `upstream` with the rest of their path and query.
#[derive(Clone)]
pub struct Route {
    /// `/name`, on whole segments: `/gh` serves `/gh` and `/gh/x`, never `/ghx`.
    pub prefix: String,
    /// Base URL of the upstream (no query, fragment or credentials).
    pub upstream: Url,
    /// Headers the proxy adds to every request of this route, replacing a caller's of the same
    /// name (API keys): values are marked sensitive and never printed.
    pub secrets: HeaderMap,
    /// The upstream's `host[:port]` (the port when the URL names one): the key its requests
    /// count under in the metrics when it has no limiter, worked out once.
    authority: String,
    /// For a plain-`http` upstream, where its connections go and its `Host` header.
    origin: Option<(http::uri::Authority, HeaderValue)>,
}

impl std::fmt::Debug for Route {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let names: Vec<&str> = self.secrets.keys().map(HeaderName::as_str).collect();
        f.debug_struct("Route")
            .field("prefix", &self.prefix)
            .field("upstream", &self.upstream.as_str())
            .field("secret_headers", &names)
            .finish()
    }
}

impl Route {
    /// A route from a prefix (`gh`, `/gh` or `/gh/`) and an upstream base URL.
    pub fn new(prefix: &str, upstream: &str) -> Result<Self, ProxyError> {
        let trimmed = prefix.trim().trim_matches('/');
        let bad = |problem: String| ProxyError::BadRoute { prefix: prefix.trim().to_owned(), problem };
        if trimmed.is_empty() {
            return Err(bad("the prefix is empty; name it, e.g. api=https://api.example.com".into()));
        }
        if trimmed.chars().any(|c| !(c.is_ascii_alphanumeric() || "-_./~".contains(c))) || trimmed.contains("//") {
            return Err(bad("the prefix may hold only letters, digits, '-', '_', '.', '~' and single '/'".into()));
        }
        if trimmed.split('/').any(|segment| segment == "." || segment == "..") {
            return Err(bad("the prefix may not have '.' or '..' segments".into()));
        }
        let upstream =
            Url::parse(upstream.trim()).map_err(|err| bad(format!("'{}' is not a URL ({err})", upstream.trim())))?;
        if !matches!(upstream.scheme(), "http" | "https") {
            return Err(bad("the upstream must start with http:// or https://".into()));
        }
        if upstream.host_str().is_none_or(str::is_empty) {
            return Err(bad("the upstream has no host".into()));
        }
        if !upstream.username().is_empty() || upstream.password().is_some() {
            return Err(bad("the upstream holds credentials; give the key as a secret header instead".into()));
        }
        if upstream.query().is_some() || upstream.fragment().is_some() {
            return Err(bad("the upstream must not have a query string or fragment".into()));
        }
        let host = upstream.host_str().unwrap_or_default();
        let authority = match upstream.port() {
            Some(port) => format!("{host}:{port}"),
            None => host.to_owned(),
        };
        let origin = match upstream.scheme() {
            "http" => Some(crate::http::origin_of(&upstream).map_err(|err| bad(err.to_string()))?),
            _ => None,
        };
        Ok(Self { prefix: format!("/{trimmed}"), upstream, secrets: HeaderMap::new(), authority, origin })
    }

    /// Adds a secret header (replacing a caller's header of the same name). Headers that frame
    /// the message or belong to one hop (`Content-Length`, `Transfer-Encoding`, `Host`,
    /// `Connection`, ...) are refused: set by the proxy, they would corrupt every request.
    pub fn with_secret(mut self, name: HeaderName, value: HeaderValue) -> Result<Self, ProxyError> {
        self.add_secret(name, value)?;
        Ok(self)
    }

    /// [`with_secret`](Self::with_secret) in place.
    pub(crate) fn add_secret(&mut self, name: HeaderName, mut value: HeaderValue) -> Result<(), ProxyError> {
        check_secret_name(&self.prefix, &name)?;
        value.set_sensitive(true);
        self.secrets.insert(name, value);
        Ok(())
    }

    /// The part of a normalised `path` ([`path::normalise`]) after this route's prefix (`""`, or
    /// starting with `/`), if it matches.
    pub(crate) fn rest<'a>(&self, path: &'a str) -> Option<&'a str> {
        let rest = path.strip_prefix(&self.prefix)?;
        (rest.is_empty() || rest.starts_with('/')).then_some(rest)
    }

    /// The upstream's host (lower case: the URL parser lowers http(s) hosts).
    pub(crate) fn host(&self) -> &str {
        self.upstream.host_str().unwrap_or_default()
    }

    /// The upstream's `host[:port]`, the key of a request without a limiter in the metrics.
    pub(crate) fn authority(&self) -> &str {
        &self.authority
    }

    /// A plain-`http` upstream's authority and `Host` header (`None` for `https`).
    pub(crate) fn origin(&self) -> Option<&(http::uri::Authority, HeaderValue)> {
        self.origin.as_ref()
    }

    /// The upstream request target (origin form) for the rest of a normalised path and an
    /// optional query: the base path, the rest and the query as the caller sent them, checked
    /// once by `http`'s parser (no URL is made: the scheme and host are the upstream's own).
    pub(crate) fn target(&self, rest: &str, query: Option<&str>) -> Result<PathAndQuery, http::uri::InvalidUri> {
        let base = self.upstream.path().trim_end_matches('/');
        let path = if rest.is_empty() && base.is_empty() { "/" } else { rest };
        let mut target = String::with_capacity(base.len() + path.len() + query.map_or(0, |query| query.len() + 1));
        target.push_str(base);
        target.push_str(path);
        if let Some(query) = query {
            target.push('?');
            target.push_str(query);
        }
        PathAndQuery::try_from(target)
    }

    /// The whole upstream URL of `target` (for the HTTPS client, and the cache's key): the
    /// upstream's scheme and authority, `target`'s path and query.
    pub fn url_of(&self, target: &PathAndQuery) -> Result<Url, url::ParseError> {
        if self.upstream.cannot_be_a_base() {
            return Err(url::ParseError::RelativeUrlWithCannotBeABaseBase);
        }
        let mut url = self.upstream.clone();
        url.set_path(target.path());
        url.set_query(target.query());
        url.set_fragment(None);
        Ok(url)
    }
}

impl FromStr for Route {
    type Err = ProxyError;

    /// `PREFIX=UPSTREAM`, e.g. `github=https://api.github.com`.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let (prefix, upstream) =
            text.split_once('=').ok_or_else(|| ProxyError::RouteSyntax { route: text.to_owned() })?;
        Self::new(prefix, upstream)
    }
}

/// When callers are turned away with a 429 instead of queued (the engine's shedding decision).
pub use crate::engine::Shedding;

/// Everything a proxy needs.
#[derive(Debug, Clone)]
pub struct ProxyConfig {
    /// The address to listen on (loopback unless `allow_remote`).
    pub listen: SocketAddr,
    /// Listening outside loopback is refused unless this is set (for `admin` too).
    pub allow_remote: bool,
    /// Where the admin listener serves `/metrics`, `/healthz` and `/readyz`; `None`: nowhere.
    pub admin: Option<SocketAddr>,
    /// Where each prefix goes (at least one route, prefixes unique).
    pub routes: Vec<Route>,
    /// What requests are paced and retried by, as a client's are: limits per upstream key
    /// (`host[:port]` or `host[:port]/prefix` of the upstream URL), the keys that follow their
    /// server (as `burst --adaptive`), retry policies (per key over the default) and where the
    /// events of every forwarded request go.
    pub policy: Policy,
    /// When a caller is turned away with a 429 instead of queued.
    pub shedding: Shedding,
    /// Longest a caller may take to send a request head, from the moment its connection waits
    /// for one (on connecting, or after the previous response on a kept-alive connection);
    /// past it the connection is closed. `None`: callers may take forever (slowloris).
    pub head_timeout: Option<Duration>,
    /// A response cache in front of the upstreams.
    pub cache: Option<CacheConfig>,
    /// Longest wait to connect to an upstream (past it the attempt fails like an unreachable one); `None` also keeps idle connections forever.
    pub connect_timeout: Option<Duration>,
    /// Longest wait for an upstream's response head; past it the caller gets a 504.
    pub upstream_timeout: Option<Duration>,
    /// Request bodies up to this many bytes are buffered and can be retried; larger (or
    /// unsized) ones are streamed through once.
    pub replay_limit: usize,
    /// On shutdown, requests in flight get this long to finish.
    pub drain_deadline: Duration,
    /// Share the budgets with sibling proxies (and other processes) through Redis.
    pub shared: Option<SharedSettings>,
    /// Threads serving connections when started on a multi-threaded runtime (`None`: one per
    /// core), as nginx's `worker_processes`. On a single-threaded runtime connections are
    /// served on it.
    pub threads: Option<usize>,
}

impl ProxyConfig {
    /// Defaults for everything but the routes: loopback, no limits, default retries and shedding.
    pub fn new(routes: Vec<Route>) -> Self {
        Self {
            listen: SocketAddr::from(([127, 0, 0, 1], 8788)),
            allow_remote: false,
            admin: None,
            routes,
            policy: Policy::default(),
            shedding: Shedding::default(),
            head_timeout: Some(DEFAULT_HEAD_TIMEOUT),
            cache: None,
            connect_timeout: Some(Duration::from_secs(10)),
            upstream_timeout: Some(Duration::from_secs(60)),
            replay_limit: DEFAULT_REPLAY_LIMIT,
            drain_deadline: Duration::from_secs(10),
            shared: None,
            threads: None,
        }
    }

    /// No timers of the proxy's own (timeouts): for tests on paused tokio time.
    pub fn without_timers(mut self) -> Self {
        self.head_timeout = None;
        self.connect_timeout = None;
        self.upstream_timeout = None;
        self
    }

    /// Checks every setting; [`ProxyServer::start`](super::ProxyServer::start) calls it first.
    pub fn validate(&self) -> Result<(), ProxyError> {
        if self.routes.is_empty() {
            return Err(ProxyError::NoRoutes);
        }
        for (i, route) in self.routes.iter().enumerate() {
            if self.routes[..i].iter().any(|other| other.prefix == route.prefix) {
                return Err(ProxyError::DuplicatePrefix(route.prefix.clone()));
            }
            for name in route.secrets.keys() {
                check_secret_name(&route.prefix, name)?;
            }
        }
        for addr in std::iter::once(self.listen).chain(self.admin) {
            if !self.allow_remote && !addr.ip().to_canonical().is_loopback() {
                return Err(ProxyError::NotLoopback(addr));
            }
        }
        let bad = |setting, problem: &str| Err(ProxyError::BadSetting { setting, problem: problem.to_owned() });
        let waits = [
            ("--max-queue-wait", Some(self.shedding.max_queue_wait)),
            ("--head-timeout", self.head_timeout),
            ("--connect-timeout", self.connect_timeout),
            ("--upstream-timeout", self.upstream_timeout),
            ("--drain", Some(self.drain_deadline)),
        ];
        for (setting, wait) in waits {
            match wait {
                Some(wait) if wait.is_zero() => return bad(setting, "must be longer than zero"),
                Some(wait) if wait > MAX_WAIT => return bad(setting, "must be at most 24h"),
                _ => {}
            }
        }
        if self.shedding.max_queue_len == 0 || self.shedding.max_queue_len > MAX_QUEUE_LEN {
            return bad("--max-queue", &format!("must be between 1 and {MAX_QUEUE_LEN}"));
        }
        if let Some(threads) = self.threads
            && !(1..=MAX_THREADS).contains(&threads)
        {
            return bad("--threads", &format!("must be between 1 and {MAX_THREADS}"));
        }
        if self.replay_limit > MAX_REPLAY_LIMIT {
            return bad("--replay-limit", &format!("must be at most {} MiB", MAX_REPLAY_LIMIT >> 20));
        }
        for policy in std::iter::once(&self.policy.retry).chain(self.policy.key_retry.values()) {
            policy.validate().map_err(|err| ProxyError::BadSetting { setting: "retry", problem: err.to_string() })?;
        }
        // A limit's path is compared with normalised paths: one in another form would never
        // match (`%73earch` is decoded, `%2f` is `%2F`, `.` segments are gone).
        for (key, _) in self.policy.registry.entries() {
            let Some(prefix) = key.path_prefix.as_deref() else { continue };
            match path::normalise(prefix) {
                Ok(normalised) if normalised == prefix => {}
                Ok(normalised) => {
                    return bad(
                        "limits",
                        &format!("{key}: write its path as {normalised}, the form requests are matched in"),
                    );
                }
                Err(refusal) => return bad("limits", &format!("{key}: {refusal}")),
            }
        }
        Ok(())
    }

    /// The route serving a normalised `path` (longest prefix on whole segments) and the rest
    /// of the path.
    pub(crate) fn route_for<'a>(&self, path: &'a str) -> Option<(&Route, &'a str)> {
        self.routes
            .iter()
            .filter_map(|route| Some((route, route.rest(path)?)))
            .max_by_key(|(route, _)| route.prefix.len())
    }

    /// The route a caller's request-target names and the request target to send it upstream: the
    /// path normalised first ([`path::normalise`]), the route chosen on the result, and the
    /// target (the route's base path, then the rest and the query as they came) checked to lie
    /// under the route's base path. Anything else is refused, so a route's secrets go only to
    /// requests inside that route.
    pub fn upstream_for(&self, uri: &http::Uri) -> Result<(&Route, PathAndQuery), Unroutable> {
        let path = path::normalise(uri.path()).map_err(Unroutable::Path)?;
        let Some((route, rest)) = self.route_for(&path) else {
            let prefixes: Vec<&str> = self.routes.iter().map(|route| route.prefix.as_str()).collect();
            return Err(Unroutable::NoRoute { path, routes: prefixes.join(", ") });
        };
        let target = route.target(rest, uri.query()).map_err(|err| Unroutable::BadUrl(err.to_string()))?;
        // Under the base by construction (the rest is normalised and starts with '/'); checked
        // all the same, as the one condition every forwarded target meets.
        if !path::is_under(target.path(), route.upstream.path()) {
            return Err(Unroutable::Escapes);
        }
        Ok((route, target))
    }
}

/// Why a caller's request names no upstream URL.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Unroutable {
    /// The path is refused before routing (400).
    #[error("{0}")]
    Path(PathRefusal),
    /// No route's prefix matches (404).
    #[error("no route for {path}; routes: {routes}")]
    NoRoute {
        /// The normalised path.
        path: String,
        /// The routes' prefixes, listed.
        routes: String,
    },
    /// The upstream URL cannot be built (400).
    #[error("cannot build the upstream URL: {0}")]
    BadUrl(String),
    /// The built URL left the route's upstream or base path (400).
    #[error("the path leaves the route's base path")]
    Escapes,
}

impl Unroutable {
    /// The status the caller is answered with.
    pub fn status(&self) -> http::StatusCode {
        match self {
            Self::NoRoute { .. } => http::StatusCode::NOT_FOUND,
            Self::Path(_) | Self::BadUrl(_) | Self::Escapes => http::StatusCode::BAD_REQUEST,
        }
    }
}

/// Refuses a secret header the proxy must not set: the message's framing (`Content-Length`,
/// `Transfer-Encoding`), `Host`, and the hop-by-hop fields.
fn check_secret_name(prefix: &str, name: &HeaderName) -> Result<(), ProxyError> {
    if hop::is_framing_or_hop(name) {
        return Err(ProxyError::BadRoute {
            prefix: prefix.to_owned(),
            problem: format!(
                "'{name}' cannot be a secret header: it frames the message or belongs to one hop, \
                 and the proxy sets it itself"
            ),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    /// The path an upstream that decodes everything before routing would act on: every `%XX`
    /// decoded (twice-encoded ones once), `\` read as `/`, dot segments resolved (clamped at
    /// the root, as the URL parser does).
    fn as_a_decoding_upstream_reads(path: &str) -> String {
        let decoded: Vec<u8> = percent_decode(path.as_bytes());
        let text = String::from_utf8_lossy(&decoded).replace('\\', "/");
        let mut stack: Vec<&str> = Vec::new();
        for segment in text.split('/').skip(1) {
            match segment {
                "." => {}
                ".." => {
                    stack.pop();
                }
                other => stack.push(other),
            }
        }
        format!("/{}", stack.join("/"))
    }

    fn percent_decode(bytes: &[u8]) -> Vec<u8> {
        let mut out = Vec::with_capacity(bytes.len());
        let mut i = 0;
        while i < bytes.len() {
            let hex = |b: u8| (b as char).to_digit(16);
            if bytes[i] == b'%'
                && let (Some(hi), Some(lo)) =
                    (bytes.get(i + 1).copied().and_then(hex), bytes.get(i + 2).copied().and_then(hex))
            {
                out.push((hi * 16 + lo) as u8);
                i += 3;
            } else {
                out.push(bytes[i]);
                i += 1;
            }
        }
        out
    }

    fn segment() -> impl Strategy<Value = String> {
        prop_oneof![
            Just(".".to_owned()),
            Just("..".to_owned()),
            Just("%2e".to_owned()),
            Just("%2E%2e".to_owned()),
            Just(".%2e".to_owned()),
            Just("%2e.".to_owned()),
            Just("..%2f..".to_owned()),
            Just("x%5c..".to_owned()),
            Just("%2F".to_owned()),
            Just("".to_owned()),
            Just("...".to_owned()),
            Just("a".to_owned()),
            Just("b".to_owned()),
            Just("admin".to_owned()),
            "[a-z%2.]{1,6}",
        ]
    }

    fn caller_path() -> impl Strategy<Value = String> {
        proptest::collection::vec((segment(), prop_oneof![Just('/'), Just('\\')]), 0..8).prop_map(|parts| {
            let mut path = String::from("/");
            for (i, (segment, separator)) in parts.iter().enumerate() {
                if i > 0 {
                    path.push(*separator);
                }
                path.push_str(segment);
            }
            path
        })
    }

    fn routes() -> impl Strategy<Value = Vec<(String, String)>> {
        let prefix = prop_oneof![Just("a"), Just("a/b"), Just("c"), Just("b/a"), Just("x.y")];
        let base = prop_oneof![Just("/"), Just("/api/v1"), Just("/a"), Just("/v1/"), Just("/admin")];
        proptest::collection::vec((prefix, base), 1..4).prop_map(|routes| {
            let mut seen = Vec::new();
            routes
                .into_iter()
                .filter(|(prefix, _)| {
                    let fresh = !seen.contains(prefix);
                    seen.push(*prefix);
                    fresh
                })
                .map(|(prefix, base)| (prefix.to_owned(), base.to_owned()))
                .collect()
        })
    }

    proptest! {
        /// Whatever the caller writes, a forwarded target is under its route's base path as it
        /// is sent and as a decoding upstream reads it; made a URL (for HTTPS), it is on the
        /// route's upstream and still under that base path as the URL parser reads it; and its
        /// route is the longest prefix of the normalised path: so a route's key goes nowhere else.
        #[test]
        fn forwarded_paths_never_leave_their_route(routes in routes(), path in caller_path(), query in "(q=[a-z%.]{0,4})?") {
            let routes: Vec<Route> = routes
                .iter()
                .enumerate()
                .map(|(i, (prefix, base))| Route::new(prefix, &format!("http://127.0.0.{}:8080{base}", i + 1)).unwrap())
                .collect();
            let config = ProxyConfig::new(routes);
            let target = if query.is_empty() { path.clone() } else { format!("{path}?{query}") };
            let Ok(uri) = target.parse::<http::Uri>() else { return Ok(()) };
            match config.upstream_for(&uri) {
                Ok((route, target)) => {
                    prop_assert!(path::is_under(target.path(), route.upstream.path()), "{} not under {}", target, route.upstream);
                    let decoded = as_a_decoding_upstream_reads(target.path());
                    let base = as_a_decoding_upstream_reads(route.upstream.path());
                    prop_assert!(path::is_under(&decoded, &base), "{} decodes to {} outside {}", target, decoded, base);
                    prop_assert_eq!(target.query(), uri.query(), "the query goes on as it came");
                    let url = route.url_of(&target).unwrap();
                    prop_assert_eq!(url.host(), route.upstream.host());
                    prop_assert_eq!(url.port(), route.upstream.port());
                    prop_assert!(path::is_under(url.path(), route.upstream.path()), "{} not under {}", url, route.upstream);
                    let decoded = as_a_decoding_upstream_reads(url.path());
                    let base = as_a_decoding_upstream_reads(route.upstream.path());
                    prop_assert!(path::is_under(&decoded, &base), "{} decodes to {} outside {}", url, decoded, base);
                    let normalised = path::normalise(uri.path()).unwrap();
                    let longest = config.routes.iter().filter(|r| r.rest(&normalised).is_some()).map(|r| r.prefix.len()).max();
                    prop_assert_eq!(Some(route.prefix.len()), longest);
                }
                Err(refusal) => {
                    let status = refusal.status().as_u16();
                    prop_assert!(status == 400 || status == 404);
                    prop_assert!(refusal != Unroutable::Escapes, "normalising left a path that escapes: {}", target);
                }
            }
        }
    }

    #[test]
    fn a_limits_path_must_be_in_the_form_requests_are_matched_in() {
        let with_key = |key: &str| {
            let registry = crate::engine::Registry::new();
            registry.set(key.parse().unwrap(), crate::engine::LimiterConfig::default()).unwrap();
            let policy = Policy { registry: std::sync::Arc::new(registry), ..Policy::default() };
            let routes = vec![Route::new("c", "http://api.example/v4").unwrap()];
            ProxyConfig { policy, ..ProxyConfig::new(routes) }.validate()
        };
        for (key, written) in [
            ("api.example/v4/projects/group%2fname", "/v4/projects/group%2Fname"),
            ("api.example/v1/%73earch", "/v1/search"),
            ("api.example/v1/./search", "/v1/search"),
        ] {
            let refused = with_key(key).unwrap_err().to_string();
            assert!(refused.contains(&format!("write its path as {written}")), "{key}: {refused}");
        }
        assert!(with_key("api.example/v1/../admin").unwrap_err().to_string().contains("'..'"));
        for fine in ["api.example/v4/projects/group%2Fname", "api.example/v1/search/", "api.example"] {
            assert!(with_key(fine).is_ok(), "{fine}");
        }
    }

    #[test]
    fn routes_parse_normalise_and_refuse_nonsense() {
        let route: Route = "/gh/=https://api.github.com".parse().unwrap();
        assert_eq!(route.prefix, "/gh");
        for bad in [
            "no-equals",
            "=http://x",
            "a=ftp://x",
            "a=not a url",
            "a=http://u:p@x",
            "a=http://x/?k=1",
            "a b=http://x",
            "../x=http://x",
            "a/./b=http://x",
            ".=http://x",
        ] {
            assert!(bad.parse::<Route>().is_err(), "{bad} should be refused");
        }
    }

    #[test]
    fn targets_keep_the_rest_and_the_query() {
        let route = Route::new("api", "http://127.0.0.1:9/v1/").unwrap();
        assert_eq!(route.rest("/api/items/3"), Some("/items/3"));
        assert_eq!(route.rest("/apix"), None);
        let target = route.target("/items/3", Some("q=1")).unwrap();
        assert_eq!(target.as_str(), "/v1/items/3?q=1");
        assert_eq!(route.url_of(&target).unwrap().as_str(), "http://127.0.0.1:9/v1/items/3?q=1");
        let root = Route::new("api", "http://127.0.0.1:9").unwrap();
        assert_eq!(root.target("", None).unwrap().as_str(), "/");
        assert_eq!(root.url_of(&root.target("", None).unwrap()).unwrap().as_str(), "http://127.0.0.1:9/");
        // Bytes `http` takes in a target but the URL parser would escape go on as the caller
        // sent them (as nginx's `proxy_pass` sends them), and an empty segment stays a path.
        assert_eq!(route.target("/a\"b{c}", Some("x='y'")).unwrap().as_str(), "/v1/a\"b{c}?x='y'");
        assert_eq!(root.target("//evil.example/x", None).unwrap().as_str(), "//evil.example/x");
        assert_eq!(root.url_of(&root.target("//evil.example/x", None).unwrap()).unwrap().host_str(), Some("127.0.0.1"));
    }

    #[test]
    fn longest_prefix_wins_and_settings_are_checked() {
        let config =
            ProxyConfig::new(vec![Route::new("a", "http://x").unwrap(), Route::new("a/b", "http://y").unwrap()]);
        assert_eq!(config.route_for("/a/b/c").map(|(r, rest)| (r.prefix.as_str(), rest)), Some(("/a/b", "/c")));
        assert!(config.validate().is_ok());
        let mut remote = config.clone();
        remote.listen = "0.0.0.0:8788".parse().unwrap();
        assert!(matches!(remote.validate(), Err(ProxyError::NotLoopback(_))));
        remote.allow_remote = true;
        assert!(remote.validate().is_ok());
        let mut zero = config.clone();
        zero.shedding.max_queue_len = 0;
        assert!(zero.validate().is_err());
        let mut no_head_time = config.clone();
        no_head_time.head_timeout = Some(Duration::ZERO);
        let refused = no_head_time.validate().unwrap_err().to_string();
        assert_eq!(refused, "--head-timeout must be longer than zero");
        assert!(matches!(ProxyConfig::new(vec![]).validate(), Err(ProxyError::NoRoutes)));
        for (threads, fine) in
            [(Some(0), false), (Some(1), true), (Some(1024), true), (Some(1025), false), (None, true)]
        {
            let set = ProxyConfig { threads, ..config.clone() };
            assert_eq!(set.validate().is_ok(), fine, "{threads:?}");
        }
        let refused = ProxyConfig { threads: Some(0), ..config.clone() }.validate().unwrap_err().to_string();
        assert!(refused.contains("--threads") && refused.contains("between 1 and 1024"), "{refused}");
    }
}
