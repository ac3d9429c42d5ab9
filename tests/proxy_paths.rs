//! The proxy's routing against hostile paths, over loopback: a caller's request-target is sent
//! byte for byte (as `curl --path-as-is` would), and an upstream that records every request it
//! gets shows what reached it and with which key. Dot segments in any spelling, backslashes and
//! encoded separators never carry the route's key outside its base path; `.` segments are
//! resolved, and encoded unreserved characters decoded, before the route and the limit are chosen.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use axum::Router;
use axum::extract::State;
use axum::http::{HeaderMap, Uri};
use parking_lot::Mutex;
use ratescope::engine::{BudgetSpec, LimitKey, LimiterConfig, Registry};
use ratescope::http::Policy;
use ratescope::proxy::{ProxyConfig, ProxyServer, Route, Shedding};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const KEY: &str = "Bearer sk-route-c-only";

/// One request as the upstream got it: its path and query, and its `authorization`.
type Request = (String, Option<String>);

/// What the upstream saw, in order.
#[derive(Clone, Default)]
struct Seen(Arc<Mutex<Vec<Request>>>);

async fn record(State(seen): State<Seen>, uri: Uri, headers: HeaderMap) -> &'static str {
    let key = headers.get("authorization").and_then(|value| value.to_str().ok()).map(str::to_owned);
    seen.0.lock().push((uri.to_string(), key));
    "upstream says hi"
}

/// An upstream that answers every path and records it.
async fn recording_upstream() -> (SocketAddr, Seen) {
    let seen = Seen::default();
    let app = Router::new().fallback(record).with_state(seen.clone());
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await });
    (addr, seen)
}

/// A proxy with `routes` (prefix, upstream path) to one recording upstream, the key on route `c`.
async fn proxy(routes: &[(&str, &str)]) -> (ProxyServer, Seen, SocketAddr) {
    let (upstream, seen) = recording_upstream().await;
    let routes = routes
        .iter()
        .map(|(prefix, path)| {
            let route = Route::new(prefix, &format!("http://{upstream}{path}")).unwrap();
            if *prefix == "c" {
                route.with_secret("authorization".parse().unwrap(), KEY.parse().unwrap()).unwrap()
            } else {
                route
            }
        })
        .collect();
    let config = ProxyConfig { listen: "127.0.0.1:0".parse().unwrap(), ..ProxyConfig::new(routes) };
    let server = ProxyServer::start(config).await.unwrap();
    let addr = server.addr();
    (server, seen, addr)
}

/// Sends `GET target` exactly as written and returns the status code and the body.
async fn get_as_is(addr: SocketAddr, target: &str) -> (u16, String) {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let head = format!("GET {target} HTTP/1.1\r\nhost: {addr}\r\nconnection: close\r\n\r\n");
    stream.write_all(head.as_bytes()).await.unwrap();
    let mut answer = Vec::new();
    stream.read_to_end(&mut answer).await.unwrap();
    let answer = String::from_utf8_lossy(&answer).into_owned();
    let status = answer.get(9..12).and_then(|code| code.parse().ok()).unwrap_or(0);
    let body = answer.split_once("\r\n\r\n").map(|(_, body)| body.to_owned()).unwrap_or_default();
    (status, body)
}

#[tokio::test]
async fn dot_segments_in_every_spelling_are_refused_before_the_upstream() {
    let (_server, seen, addr) = proxy(&[("c", "/api/v1")]).await;
    for target in [
        "/c/%2e%2e/%2e%2e/admin/users",
        "/c/../../admin",
        "/c/..%2f..%2fadmin",
        "/c/..%2F..%2Fadmin",
        "/c/..\\..\\admin",
        "/c/..",
        "/c/%2E%2E",
        "/c/.%2e/.%2e/admin",
        "/c/x/../../../admin",
        "/c/%2e%2e%5cadmin",
        // Escapes spelled so that decoding `%32`, `%65` and `%66` would make `%2e` and `%2f`.
        "/c/%%32%65%%32%65/admin",
        "/c/..%%32%66..%%32%66admin",
    ] {
        let (status, body) = get_as_is(addr, target).await;
        assert_eq!(status, 400, "{target} answered {status}: {body}");
        assert!(body.contains("ratescope proxy"), "the refusal says who refused: {body}");
    }
    assert_eq!(seen.0.lock().clone(), [], "nothing reached the upstream");
}

#[tokio::test]
async fn the_key_goes_only_to_paths_inside_its_route() {
    let (_server, seen, addr) = proxy(&[("c", "/api/v1"), ("open", "/public")]).await;
    for target in ["/c/items?x=1", "/c", "/c/./items", "/c\\items", "/c//items", "/c/projects/group%2Fname", "/open/x"]
    {
        let (status, body) = get_as_is(addr, target).await;
        assert_eq!((status, body.as_str()), (200, "upstream says hi"), "{target}");
    }
    let seen = seen.0.lock().clone();
    let key = Some(KEY.to_owned());
    assert_eq!(
        seen,
        [
            ("/api/v1/items?x=1".to_owned(), key.clone()),
            ("/api/v1".to_owned(), key.clone()),
            ("/api/v1/items".to_owned(), key.clone()),
            ("/api/v1/items".to_owned(), key.clone()),
            ("/api/v1//items".to_owned(), key.clone()),
            ("/api/v1/projects/group%2Fname".to_owned(), key),
            ("/public/x".to_owned(), None),
        ]
    );
}

#[tokio::test]
async fn the_route_is_chosen_after_normalising() {
    let (_server, seen, addr) = proxy(&[("a", "/from-a"), ("a/b", "/from-ab")]).await;
    for target in ["/a/./b/x", "/a/%2e/b/x", "/a\\b\\x"] {
        assert_eq!(get_as_is(addr, target).await.0, 200, "{target}");
    }
    let paths: Vec<String> = seen.0.lock().iter().map(|(path, _)| path.clone()).collect();
    assert_eq!(paths, ["/from-ab/x", "/from-ab/x", "/from-ab/x"], "all three go to a/b's upstream");
}

#[tokio::test]
async fn a_path_outside_every_route_is_a_404_naming_the_routes() {
    let (_server, seen, addr) = proxy(&[("c", "/api/v1")]).await;
    let (status, body) = get_as_is(addr, "/admin/users").await;
    assert_eq!(status, 404);
    assert!(body.contains("no route for /admin/users; routes: /c"), "{body}");
    let (status, _) = get_as_is(addr, "/cx/y").await;
    assert_eq!(status, 404, "prefixes match whole segments");
    assert_eq!(seen.0.lock().clone(), []);
}

/// A proxy with route `c` to a recording upstream's `/api/v1`, and a limit of one request an
/// hour on the upstream's `/api/v1/search`.
async fn searches_limited() -> (ProxyServer, Seen, SocketAddr) {
    limited_under("/api/v1", "/api/v1/search").await
}

/// A proxy with route `c` to a recording upstream's `base`, and a limit of one request an hour
/// on the upstream's `limited` prefix.
async fn limited_under(base: &str, limited: &str) -> (ProxyServer, Seen, SocketAddr) {
    let (upstream, seen) = recording_upstream().await;
    let registry = Registry::new();
    let hourly = BudgetSpec::token_bucket("hourly", 1, "1/1h".parse().unwrap()).unwrap();
    let key: LimitKey = format!("{upstream}{limited}").parse().unwrap();
    registry.set(key, LimiterConfig::new().with_budget(hourly)).unwrap();
    let route = Route::new("c", &format!("http://{upstream}{base}")).unwrap();
    let config = ProxyConfig {
        listen: "127.0.0.1:0".parse().unwrap(),
        policy: Policy { registry: Arc::new(registry), ..Policy::default() },
        shedding: Shedding { max_queue_wait: Duration::from_secs(1), max_queue_len: 10 },
        ..ProxyConfig::new(vec![route])
    };
    let server = ProxyServer::start(config).await.unwrap();
    let addr = server.addr();
    (server, seen, addr)
}

#[tokio::test]
async fn an_encoded_spelling_meets_the_same_route_and_path_limit() {
    // `%73earch` (`s` encoded) is the same path.
    let (_server, seen, addr) = searches_limited().await;
    assert_eq!(get_as_is(addr, "/c/search").await.0, 200);
    for target in ["/c/%73earch", "/%63/%73%65arch?q=1", "/c/%73earch/x"] {
        let (status, body) = get_as_is(addr, target).await;
        assert_eq!(status, 429, "{target} is under the spent limit: {body}");
    }
    assert_eq!(get_as_is(addr, "/%63/other%7E").await.0, 200, "another path has no limit");
    let paths: Vec<String> = seen.0.lock().iter().map(|(path, _)| path.clone()).collect();
    assert_eq!(paths, ["/api/v1/search", "/api/v1/other~"]);
}

#[tokio::test]
async fn no_spelling_of_a_limited_path_slips_past_its_limit() {
    // An upstream that decodes `%2F` reads `search%2Fx` as `search/x`, one that merges slashes
    // reads `//search` as `/search`, Tomcat drops `;x=1`: so does the limit (the request goes
    // on as sent).
    let (_server, seen, addr) = searches_limited().await;
    assert_eq!(get_as_is(addr, "/c/search%2Fx?q=1").await.0, 200);
    for target in ["/c/search", "/c/search%2fy", "/c/search%5Cz", "/c/search/x", "/c//search", "/c/%2Fsearch;x=1"] {
        let (status, body) = get_as_is(addr, target).await;
        assert_eq!(status, 429, "{target} is under the spent limit: {body}");
    }
    assert_eq!(get_as_is(addr, "/c/searches%2Fx").await.0, 200, "another path has no limit");
    let paths: Vec<String> = seen.0.lock().iter().map(|(path, _)| path.clone()).collect();
    assert_eq!(paths, ["/api/v1/search%2Fx?q=1", "/api/v1/searches%2Fx"], "forwarded as sent");
}

#[tokio::test]
async fn a_limit_on_a_prefix_spelled_with_an_encoded_slash_still_holds() {
    // GitLab names a project `group%2Fname`: one segment, limited as written.
    let (_server, seen, addr) = limited_under("/api/v4", "/api/v4/projects/group%2Fname").await;
    assert_eq!(get_as_is(addr, "/c/projects/group%2Fname/issues").await.0, 200);
    for target in ["/c/projects/group%2Fname", "/c/projects/group%2fname/issues", "/c/projects//group%2Fname"] {
        let (status, body) = get_as_is(addr, target).await;
        assert_eq!(status, 429, "{target} is under the spent limit: {body}");
    }
    assert_eq!(get_as_is(addr, "/c/projects/other%2Fname").await.0, 200, "another project has no limit");
    let paths: Vec<String> = seen.0.lock().iter().map(|(path, _)| path.clone()).collect();
    assert_eq!(paths, ["/api/v4/projects/group%2Fname/issues", "/api/v4/projects/other%2Fname"]);
}

#[test]
fn framing_and_hop_headers_cannot_be_secrets() {
    let route = Route::new("c", "http://127.0.0.1:9/api").unwrap();
    for name in ["content-length", "transfer-encoding", "host", "connection", "te", "upgrade", "keep-alive"] {
        let refused = route.clone().with_secret(name.parse().unwrap(), "5".parse().unwrap()).unwrap_err();
        assert!(refused.to_string().contains("cannot be a secret header"), "{name}: {refused}");
    }
    assert!(route.with_secret("authorization".parse().unwrap(), "Bearer k".parse().unwrap()).is_ok());
}
