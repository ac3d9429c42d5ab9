//! The embedded demo API over real loopback sockets, on paused tokio time.

use std::net::SocketAddr;
use std::time::{Duration, SystemTime};

use ratescope::engine::Unit;
use ratescope::http::RateLimitInfo;
use ratescope::mock::{
    Api, Arrival, CountBy, Dialect, FaultKind, Faults, MockConfig, MockError, MockServer, Outcome, PolicyKind,
    PolicySpec, QueryCost, RouteConfig, Usage, go_duration,
};
use reqwest::Client;
use tokio::time::Instant;

fn client() -> Client {
    ratescope::http::install_tls_provider();
    // No timeouts or idle sweeps: paused time would fire them while a socket is read.
    Client::builder().pool_idle_timeout(None).build().unwrap()
}

fn any_port() -> SocketAddr {
    "127.0.0.1:0".parse().unwrap()
}

fn bucket(name: &str, capacity: u64, rate: &str) -> PolicySpec {
    PolicySpec::new(name, PolicyKind::TokenBucket { capacity, rate: rate.parse().unwrap() })
}

fn config(routes: Vec<RouteConfig>) -> MockConfig {
    MockConfig { server: Default::default(), routes }
}

fn route(prefix: &str, policies: Vec<PolicySpec>) -> RouteConfig {
    RouteConfig { policies, ..RouteConfig::new(prefix) }
}

async fn start(routes: Vec<RouteConfig>) -> MockServer {
    MockServer::start(config(routes), any_port()).await.unwrap()
}

fn url(server: &MockServer, path: &str) -> String {
    server.url().join(path).unwrap().to_string()
}

async fn get(client: &Client, server: &MockServer, path: &str) -> reqwest::Response {
    client.get(url(server, path)).send().await.unwrap()
}

fn info(response: &reqwest::Response) -> RateLimitInfo {
    RateLimitInfo::parse(Some(response.status().as_u16()), response.headers(), None, SystemTime::now())
}

fn outcomes(arrivals: &[Arrival]) -> Vec<Outcome> {
    arrivals.iter().map(|a| a.outcome).collect()
}

#[tokio::test(start_paused = true)]
async fn a_burst_of_ten_gets_five_200s_and_five_429s_with_readable_headers() {
    let server = start(vec![route("/items", vec![bucket("burst", 5, "5/1s")])]).await;
    let client = client();
    let mut statuses = Vec::new();
    let mut remaining = Vec::new();
    for i in 0..10 {
        let response = get(&client, &server, &format!("/items/{i}")).await;
        let parsed = info(&response);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let burst = parsed.budgets.iter().find(|b| b.name == "burst").expect("an IETF budget named burst");
        assert_eq!(burst.source, "ietf-draft");
        assert_eq!(burst.limit, Some(5.0));
        assert_eq!(burst.window, Some(Duration::from_secs(1)));
        remaining.push(burst.remaining);
        statuses.push(response.status().as_u16());
        if response.status() == 429 {
            assert_eq!(response.headers()["retry-after"], "1");
            assert_eq!(parsed.retry_after, Some(Duration::from_secs(1)));
            assert!(parsed.throttled);
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body["error"], "rate limited");
            assert_eq!(body["retry_after"], 1);
            assert_eq!(body["policy"], "burst");
        } else {
            assert!(!response.headers().contains_key("retry-after"));
            let body: serde_json::Value = response.json().await.unwrap();
            assert_eq!(body, serde_json::json!({"route": "/items", "path": format!("/items/{i}"), "ok": true}));
        }
    }
    assert_eq!(statuses, [200, 200, 200, 200, 200, 429, 429, 429, 429, 429]);
    let expected: Vec<Option<f64>> = [4.0, 3.0, 2.0, 1.0, 0.0, 0.0, 0.0, 0.0, 0.0, 0.0].map(Some).into();
    assert_eq!(remaining, expected);

    // 200 ms later one token is back.
    tokio::time::sleep(Duration::from_millis(200)).await;
    assert_eq!(get(&client, &server, "/items").await.status(), 200);
    assert_eq!(get(&client, &server, "/items").await.status(), 429);
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn per_key_counting_uses_the_api_key_header() {
    let mut search = route("/search", vec![bucket("search", 2, "1/1m")]);
    search.count_by = CountBy::Key;
    let server = start(vec![search]).await;
    let client = client();
    let send = |key: Option<&'static str>| {
        let mut request = client.get(url(&server, "/search"));
        if let Some(key) = key {
            request = request.header("x-api-key", key);
        }
        async move { request.send().await.unwrap().status().as_u16() }
    };
    let mut statuses = Vec::new();
    for key in [Some("alice"), Some("alice"), Some("alice"), Some("bob"), Some("bob"), None, None, None, Some("bob")] {
        statuses.push(send(key).await);
    }
    assert_eq!(statuses, [200, 200, 429, 200, 200, 200, 200, 429, 429]);
    let arrivals = server.arrivals();
    let keys: Vec<Option<&str>> = arrivals.iter().map(|a| a.key.as_deref()).collect();
    assert_eq!(keys[..4], [Some("alice"), Some("alice"), Some("alice"), Some("bob")]);
    assert_eq!(keys[5], None);
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_route_can_refuse_with_503_and_retry_after() {
    let mut unavailable = route("/busy", vec![bucket("burst", 1, "1/10s")]);
    unavailable.status = 503;
    let server = start(vec![unavailable]).await;
    let client = client();
    assert_eq!(get(&client, &server, "/busy").await.status(), 200);
    let response = get(&client, &server, "/busy").await;
    assert_eq!(response.status(), 503);
    assert_eq!(response.headers()["retry-after"], "10");
    let parsed = info(&response);
    assert!(parsed.throttled, "503 with Retry-After is throttling");
    assert_eq!(parsed.retry_after, Some(Duration::from_secs(10)));
    assert_eq!(outcomes(&server.arrivals()), [Outcome::Served(200), Outcome::Limited(503)]);
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn retry_after_can_be_turned_off() {
    let mut quiet = route("/quiet", vec![bucket("burst", 1, "1/10s")]);
    quiet.retry_after = false;
    let server = start(vec![quiet]).await;
    let client = client();
    get(&client, &server, "/quiet").await;
    let response = get(&client, &server, "/quiet").await;
    assert_eq!(response.status(), 429);
    assert!(!response.headers().contains_key("retry-after"));
    let body: serde_json::Value = response.json().await.unwrap();
    assert!(body.get("retry_after").is_none(), "{body}");
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_arrival_log_records_time_route_path_key_and_outcome() {
    let mut items = route("/items", vec![bucket("burst", 1, "1/1s")]);
    items.dialect = Dialect::None;
    let server = start(vec![items]).await;
    let client = client();
    client.get(url(&server, "/items/7?secret=1")).header("x-api-key", "k1").send().await.unwrap();
    tokio::time::sleep(Duration::from_millis(300)).await;
    get(&client, &server, "/items").await;
    get(&client, &server, "/nowhere").await;
    let arrivals = server.arrivals();
    assert_eq!(arrivals.len(), 3);
    let first = &arrivals[0];
    assert_eq!(
        (first.route.as_str(), first.path.as_str(), first.key.as_deref(), first.outcome),
        ("/items", "/items/7", Some("k1"), Outcome::Served(200))
    );
    assert_eq!((arrivals[1].route.as_str(), arrivals[1].outcome), ("/items", Outcome::Limited(429)));
    assert_eq!(arrivals[1].at - first.at, Duration::from_millis(300));
    assert_eq!((arrivals[2].route.as_str(), arrivals[2].outcome), ("", Outcome::Served(404)));
    server.clear_arrivals();
    assert!(server.arrivals().is_empty());
    server.shutdown().await.unwrap();
}

#[tokio::test]
async fn non_loopback_addresses_are_refused_before_binding() {
    // Hold a port on every interface: if start tried to bind it, it would get "address in use".
    let held = std::net::TcpListener::bind("0.0.0.0:0").unwrap();
    let port = held.local_addr().unwrap().port();
    for addr in [format!("0.0.0.0:{port}"), "10.0.0.1:8787".into(), "[::]:0".into(), "192.168.1.5:0".into()] {
        let addr: SocketAddr = addr.parse().unwrap();
        match MockServer::start(MockConfig::demo().unwrap(), addr).await {
            Err(err @ MockError::NotLoopback(_)) => {
                assert!(err.to_string().contains("binds only to loopback"), "{err}");
                assert!(err.to_string().contains(&addr.to_string()), "{err}");
            }
            other => panic!("{addr} was not refused as non-loopback: {other:?}"),
        }
    }
    drop(held);
    let v6 = MockServer::start(MockConfig::demo().unwrap(), "[::1]:0".parse().unwrap()).await;
    // ::1 is loopback; a machine without IPv6 may still fail to bind it, but never as NotLoopback.
    assert!(!matches!(v6, Err(MockError::NotLoopback(_))));
    if let Ok(server) = v6 {
        assert!(server.url().as_str().starts_with("http://[::1]:"));
        server.shutdown().await.unwrap();
    }
}

#[tokio::test(start_paused = true)]
async fn the_demo_config_loads_and_every_route_answers() {
    let mut demo = MockConfig::demo().unwrap();
    for route in &mut demo.routes {
        route.faults = Faults::default(); // Faults are tested on their own.
    }
    let server = MockServer::start(demo, any_port()).await.unwrap();
    let client = client();
    for route in server.config().routes.iter().filter(|route| route.api == Api::Json) {
        let started = Instant::now();
        let response = get(&client, &server, &route.prefix).await;
        assert_eq!(response.status(), 200, "{}", route.prefix);
        let headers = response.headers().clone();
        assert!(headers.contains_key("date"), "{}", route.prefix);
        let parsed = info(&response);
        assert!(parsed.warnings.is_empty(), "{}: {:?}", route.prefix, parsed.warnings);
        let body: serde_json::Value = response.json().await.unwrap();
        assert_eq!((&body["route"], &body["ok"]), (&serde_json::json!(route.prefix), &serde_json::json!(true)));
        let elapsed = started.elapsed();
        match route.prefix.as_str() {
            "/items" => {
                assert!(headers.contains_key("ratelimit-policy") && headers.contains_key("ratelimit"));
                let names: Vec<&str> = parsed.budgets.iter().map(|b| b.name.as_str()).collect();
                assert_eq!(names, ["burst", "minute"]);
                assert!(elapsed >= Duration::from_millis(20) && elapsed <= Duration::from_millis(31), "{elapsed:?}");
            }
            "/search" => {
                assert_eq!(headers["x-ratelimit-resource"], "core");
                assert_eq!(parsed.budgets[0].source, "github");
                assert_eq!((parsed.budgets[0].limit, parsed.budgets[0].remaining), (Some(2.0), Some(1.0)));
            }
            "/slow" => {
                assert!(elapsed >= Duration::from_millis(200), "{elapsed:?}");
                assert_eq!(parsed.budgets[0].name, "parallel");
            }
            "/flaky" => assert_eq!(headers["x-ratelimit-limit"], "60"),
            "/catalog" => {
                assert_eq!(headers["cache-control"], "max-age=30");
                assert!(headers.contains_key("etag"));
            }
            "/open" => assert!(parsed.budgets.is_empty(), "{:?}", parsed.budgets),
            other => panic!("unexpected demo route {other}"),
        }
    }
    let not_found = get(&client, &server, "/nope").await;
    assert_eq!(not_found.status(), 404);
    let body: serde_json::Value = not_found.json().await.unwrap();
    assert_eq!(body["routes"].as_array().map(Vec::len), Some(8));
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_cacheable_route_answers_304_to_a_matching_etag() {
    let mut catalog = route("/catalog", vec![]);
    catalog.cache = Some(Duration::from_secs(30));
    let server = start(vec![catalog]).await;
    let client = client();
    let first = get(&client, &server, "/catalog").await;
    let etag = first.headers()["etag"].to_str().unwrap().to_owned();
    let first_body = first.text().await.unwrap();
    let again = get(&client, &server, "/catalog").await;
    assert_eq!(again.headers()["etag"].to_str().unwrap(), etag, "the ETag is stable");
    assert_eq!(again.text().await.unwrap(), first_body);
    let revalidated = client.get(url(&server, "/catalog")).header("if-none-match", &etag).send().await.unwrap();
    assert_eq!(revalidated.status(), 304);
    assert_eq!(revalidated.headers()["cache-control"], "max-age=30");
    assert!(revalidated.bytes().await.unwrap().is_empty());
    let changed = client.get(url(&server, "/catalog")).header("if-none-match", "\"other\"").send().await.unwrap();
    assert_eq!(changed.status(), 200);
    let statuses: Vec<Outcome> = outcomes(&server.arrivals());
    assert_eq!(statuses[2], Outcome::Served(304));
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_concurrency_limit_holds_slots_until_bodies_are_done() {
    let mut slow = route("/slow", vec![PolicySpec::new("parallel", PolicyKind::Concurrency { limit: 2 })]);
    slow.latency.fixed = Duration::from_secs(1);
    slow.status = 503;
    let server = start(vec![slow]).await;
    let client = client();
    let started = Instant::now();
    let requests = (0..3).map(|_| {
        let request = client.get(url(&server, "/slow"));
        async move {
            let response = request.send().await.unwrap();
            let status = response.status().as_u16();
            response.bytes().await.unwrap();
            (status, started.elapsed())
        }
    });
    let mut results = futures_util::future::join_all(requests).await;
    results.sort();
    assert_eq!(results.iter().map(|r| r.0).collect::<Vec<_>>(), [200, 200, 503]);
    assert!(results[0].1 >= Duration::from_secs(1) && results[2].1 < Duration::from_secs(1), "{results:?}");
    // Both slots came back with their bodies.
    let again = futures_util::future::join_all((0..2).map(|_| client.get(url(&server, "/slow")).send())).await;
    assert!(again.iter().all(|r| r.as_ref().is_ok_and(|r| r.status() == 200)));
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_concurrency_slot_is_held_until_a_slow_body_is_done() {
    let parallel = PolicySpec::new("parallel", PolicyKind::Concurrency { limit: 1 });
    let slow = Faults { slow_body_rate: 1.0, slow_body: Duration::from_secs(1), ..Faults::default() };
    let server = start(vec![RouteConfig { faults: slow, ..route("/slow", vec![parallel]) }]).await;
    let client = client();
    let first = get(&client, &server, "/slow").await;
    assert_eq!(first.status(), 200, "the head arrives at once");
    assert_eq!(get(&client, &server, "/slow").await.status(), 429, "the body still holds the slot");
    first.bytes().await.unwrap();
    assert_eq!(get(&client, &server, "/slow").await.status(), 200, "the slot came back with the body's end");
    server.shutdown().await.unwrap();
}

fn faulty(faults: Faults) -> RouteConfig {
    RouteConfig { faults, ..route("/flaky", vec![]) }
}

#[tokio::test(start_paused = true)]
async fn injected_errors_resets_and_slow_bodies() {
    let errors = Faults { error_rate: 1.0, error_statuses: vec![502], ..Faults::default() };
    let resets = Faults { reset_rate: 1.0, ..Faults::default() };
    let slow = Faults { slow_body_rate: 1.0, slow_body: Duration::from_secs(2), ..Faults::default() };
    let mut routes = vec![faulty(errors), faulty(resets), faulty(slow)];
    routes[1].prefix = "/reset".into();
    routes[2].prefix = "/trickle".into();
    let server = start(routes).await;
    let client = client();

    let response = get(&client, &server, "/flaky").await;
    assert_eq!(response.status(), 502);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["error"], "injected fault");

    // The connection is dropped before the response head: the client gets no response at all.
    let reset = client.get(url(&server, "/reset")).send().await;
    assert!(reset.as_ref().is_err_and(reqwest::Error::is_request), "a reset must fail at the client: {reset:?}");

    let started = Instant::now();
    let response = get(&client, &server, "/trickle").await;
    assert_eq!(response.status(), 200);
    let body: serde_json::Value = response.json().await.unwrap();
    assert_eq!(body["ok"], true);
    assert!(started.elapsed() >= Duration::from_secs(2), "{:?}", started.elapsed());

    assert_eq!(
        outcomes(&server.arrivals()),
        [Outcome::Fault(FaultKind::Error(502)), Outcome::Fault(FaultKind::Reset), Outcome::Fault(FaultKind::SlowBody)]
    );
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn a_seed_makes_faults_reproducible() {
    async fn run(seed: u64) -> Vec<Outcome> {
        let mut config = config(vec![faulty(Faults { error_rate: 0.5, ..Faults::default() })]);
        config.server.seed = Some(seed);
        let server = MockServer::start(config, any_port()).await.unwrap();
        let client = client();
        for _ in 0..24 {
            get(&client, &server, "/flaky").await;
        }
        let seen = outcomes(&server.arrivals());
        server.shutdown().await.unwrap();
        seen
    }
    let first = run(7).await;
    assert_eq!(first, run(7).await);
    assert!(first.contains(&Outcome::Served(200)));
    assert!(first.iter().any(|o| matches!(o, Outcome::Fault(FaultKind::Error(500 | 502)))));
    assert_ne!(first, run(8).await);
}

#[tokio::test(start_paused = true)]
async fn shutdown_lets_requests_in_flight_finish_then_stops_listening() {
    let mut slow = route("/slow", vec![]);
    slow.latency.fixed = Duration::from_millis(500);
    let server = start(vec![slow]).await;
    let client = client();
    let target = url(&server, "/slow");
    let in_flight = tokio::spawn({
        let request = client.get(&target);
        async move { request.send().await.map(|r| r.status().as_u16()) }
    });
    while server.arrivals().is_empty() {
        tokio::task::yield_now().await;
    }
    let addr = server.addr();
    server.shutdown().await.unwrap();
    assert_eq!(in_flight.await.unwrap().unwrap(), 200);
    assert!(tokio::net::TcpStream::connect(addr).await.is_err(), "nothing listens after shutdown");
}

#[tokio::test]
async fn a_broken_config_file_is_named_with_its_line() {
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("broken.toml");
    std::fs::write(
        &path,
        "[[routes]]\nprefix = \"/a\"\nstatus = 429\n\n[[routes.policies]]\nkind = \"token_bucket\"\ncapacity = \n",
    )
    .unwrap();
    let err = MockConfig::from_file(&path).unwrap_err();
    let text = err.to_string();
    assert!(text.starts_with(&format!("{}:7:", path.display())), "{text}");

    std::fs::write(
        &path,
        "[[routes]]\nprefix = \"/a\"\n\n[[routes.policies]]\nkind = \"token_bucket\"\ncapacity = 0\nrate = \"1/1s\"\n",
    )
    .unwrap();
    let text = MockConfig::from_file(&path).unwrap_err().to_string();
    assert!(text.starts_with(&format!("{}:4:", path.display())), "{text}");
    assert!(text.contains("route '/a'") && text.contains("capacity 0"), "{text}");

    let missing = MockConfig::from_file(dir.path().join("missing.toml")).unwrap_err();
    assert!(matches!(missing, MockError::Read { .. }) && missing.to_string().contains("missing.toml"), "{missing}");
}

fn llm_route(tokens: u64) -> RouteConfig {
    let tokens_rate = format!("{tokens}/1m");
    RouteConfig {
        api: Api::Llm,
        dialect: Dialect::OpenAi,
        ..route(
            "/v1/chat/completions",
            vec![bucket("requests", 60, "60/1m"), bucket("tokens", tokens, &tokens_rate).counting(Unit::tokens())],
        )
    }
}

async fn post(client: &Client, server: &MockServer, path: &str, body: &str) -> reqwest::Response {
    client.post(url(server, path)).body(body.to_owned()).send().await.unwrap()
}

fn chat(n: usize, max_tokens: u64) -> String {
    serde_json::json!({"messages": [{"role": "user", "content": format!("question {n}")}], "max_tokens": max_tokens})
        .to_string()
}

#[tokio::test(start_paused = true)]
async fn the_llm_route_answers_usage_and_openai_headers_and_refuses_once_the_tokens_are_spent() {
    let server = start(vec![llm_route(10_000)]).await;
    let client = client();
    // No latency and no timers: the clock stands still, so nothing refills during the test.
    let mut spent = 0;
    let mut statuses = Vec::new();
    for n in 0..8 {
        let body = chat(n, 4000);
        let usage = Usage::of(body.as_bytes(), 0).unwrap();
        let response = post(&client, &server, "/v1/chat/completions", &body).await;
        let headers = response.headers().clone();
        let status = response.status().as_u16();
        statuses.push(status);
        let parsed = info(&response);
        assert!(parsed.warnings.is_empty(), "{:?}", parsed.warnings);
        let tokens = parsed.budgets.iter().find(|b| b.unit == "tokens").unwrap();
        assert_eq!((tokens.source.as_str(), tokens.limit), ("openai", Some(10_000.0)));
        let json: serde_json::Value = response.json().await.unwrap();
        if spent < 10_000 {
            assert_eq!(status, 200, "request {n}: {spent} of 10000 spent, so a token is left");
            spent += usage.total_tokens();
            let reported = &json["usage"];
            assert_eq!(reported["prompt_tokens"], usage.prompt_tokens);
            assert_eq!(reported["completion_tokens"], usage.completion_tokens);
            assert_eq!(reported["total_tokens"], usage.total_tokens());
            assert!((2000..=4000).contains(&usage.completion_tokens), "{usage:?}");
            assert_eq!(headers["x-ratelimit-remaining-tokens"], 10_000u64.saturating_sub(spent).to_string());
            // A bucket of 10000 a minute refills a token every 6 ms: full again after what is spent.
            let full_again = Duration::from_millis(6 * spent);
            assert_eq!(headers["x-ratelimit-reset-tokens"], go_duration(full_again));
            assert_eq!(headers["x-ratelimit-limit-requests"], "60");
        } else {
            assert_eq!(status, 429, "request {n}: the tokens are overdrawn");
            assert_eq!(headers["x-ratelimit-remaining-tokens"], "0");
            assert!(headers.contains_key("retry-after"));
            assert_eq!(json["policy"], "tokens");
        }
    }
    assert!(statuses.contains(&200) && statuses.ends_with(&[429, 429]), "{statuses:?}");
    let admitted = statuses.iter().filter(|s| **s == 200).count() as u64;
    // Refusals spent no request either: what is left counts only the admitted ones.
    let refused = post(&client, &server, "/v1/chat/completions", &chat(99, 10)).await;
    assert_eq!(refused.headers()["x-ratelimit-remaining-requests"], (60 - admitted).to_string());
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_llm_route_refuses_what_it_cannot_read_or_could_never_fit_without_counting_it() {
    let server = start(vec![llm_route(10_000)]).await;
    let client = client();
    let get = get(&client, &server, "/v1/chat/completions").await;
    assert_eq!(get.status(), 405);
    assert_eq!(get.headers()["allow"], "POST");
    for (body, expected) in [
        ("hello".to_owned(), "not JSON"),
        (r#"{"max_tokens": -1}"#.to_owned(), "max_tokens -1 is not a whole number"),
        (chat(0, 12_000), "could never run"),
    ] {
        let response = post(&client, &server, "/v1/chat/completions", &body).await;
        assert_eq!(response.status(), 400, "{body}");
        let json: serde_json::Value = response.json().await.unwrap();
        assert!(json["error"].as_str().unwrap().contains(expected), "{json}");
    }
    let first = post(&client, &server, "/v1/chat/completions", &chat(0, 10)).await;
    assert_eq!(first.status(), 200);
    assert_eq!(first.headers()["x-ratelimit-remaining-requests"], "59", "the refused requests were not counted");
    server.shutdown().await.unwrap();
}

fn graphql_route() -> RouteConfig {
    RouteConfig {
        api: Api::Graphql,
        dialect: Dialect::None,
        ..route("/graphql", vec![bucket("cost", 1000, "50/1s").counting(Unit::points())])
    }
}

#[tokio::test(start_paused = true)]
async fn the_graphql_route_charges_the_actual_cost_and_throttles_a_query_it_cannot_afford() {
    let server = start(vec![graphql_route()]).await;
    let client = client();
    let query = serde_json::json!({"query": "{ products(first: 250) { edges { node { id } } } }"}).to_string();
    assert_eq!(QueryCost::of(query.as_bytes()).unwrap(), QueryCost { requested: 254, actual: 129 });
    // 1000 points: a query needs 254 available and is charged 129, so six run (1000 - 5 * 129 = 355).
    for n in 1..=6u64 {
        let response = post(&client, &server, "/graphql", &query).await;
        assert_eq!(response.status(), 200, "query {n}");
        let json: serde_json::Value = response.json().await.unwrap();
        let cost = &json["extensions"]["cost"];
        assert_eq!((&cost["requestedQueryCost"], &cost["actualQueryCost"]), (&254.into(), &129.into()));
        let status = &cost["throttleStatus"];
        assert_eq!((&status["maximumAvailable"], &status["restoreRate"]), (&1000.0.into(), &50.0.into()));
        assert_eq!(status["currentlyAvailable"], 1000 - n * 129);
    }
    let throttled = post(&client, &server, "/graphql", &query).await;
    assert_eq!(throttled.status(), 429);
    assert_eq!(throttled.headers()["retry-after"], "1", "28 points short at 50 a second");
    let headers = throttled.headers().clone();
    let body = throttled.bytes().await.unwrap();
    let json: serde_json::Value = serde_json::from_slice(&body).unwrap();
    assert_eq!(json["errors"][0]["extensions"]["code"], "THROTTLED");
    assert_eq!(json["extensions"]["cost"]["actualQueryCost"], serde_json::Value::Null);
    assert_eq!(json["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"], 226);
    let parsed = RateLimitInfo::parse(Some(429), &headers, Some(&body), SystemTime::now());
    let points = parsed.budgets.iter().find(|b| b.unit == "points").expect("the body's throttleStatus");
    assert_eq!((points.limit, points.remaining), (Some(1000.0), Some(226.0)));

    tokio::time::advance(Duration::from_millis(560)).await; // 28 points restored
    assert_eq!(post(&client, &server, "/graphql", &query).await.status(), 200);

    let five_pages = "{ a(first: 250) { x } b(first: 250) { x } c(first: 250) { x } d(last: 250) { x } }";
    let too_costly = post(&client, &server, "/graphql", &serde_json::json!({ "query": five_pages }).to_string()).await;
    assert_eq!(too_costly.status(), 400);
    let json: serde_json::Value = too_costly.json().await.unwrap();
    assert!(json["errors"][0]["message"].as_str().unwrap().contains("MAX_COST_EXCEEDED"), "{json}");
    server.shutdown().await.unwrap();
}

#[tokio::test(start_paused = true)]
async fn the_demo_llm_and_graphql_routes_answer_their_documented_examples() {
    let mut demo = MockConfig::demo().unwrap();
    for route in &mut demo.routes {
        route.latency = Default::default();
    }
    let server = MockServer::start(demo, any_port()).await.unwrap();
    let client = client();
    let chat = r#"{"messages": [{"role": "user", "content": "hello"}], "max_tokens": 200}"#;
    let response = post(&client, &server, "/v1/chat/completions", chat).await;
    assert_eq!(response.status(), 200);
    assert_eq!(response.headers()["x-ratelimit-limit-tokens"], "20000");
    let json: serde_json::Value = response.json().await.unwrap();
    assert_eq!(json["usage"]["total_tokens"], Usage::of(chat.as_bytes(), 0).unwrap().total_tokens());
    let query = r#"{"query": "{ products(first: 50) { edges { node { id title } } } }"}"#;
    let json: serde_json::Value = post(&client, &server, "/graphql", query).await.json().await.unwrap();
    assert_eq!(json["extensions"]["cost"]["requestedQueryCost"], 54);
    assert_eq!(json["extensions"]["cost"]["actualQueryCost"], 29);
    assert_eq!(json["extensions"]["cost"]["throttleStatus"]["currentlyAvailable"], 1000 - 29);
    server.shutdown().await.unwrap();
}
