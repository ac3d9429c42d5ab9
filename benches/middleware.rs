//! Requests per second through `RateLimitMiddleware` against plain reqwest, to the demo API's
//! unlimited route (`/open`), in one run: the cost the middleware adds to a real loopback
//! exchange.
//!
//! Run: `cargo bench --bench middleware`. Each iteration sends 32 GETs at once and waits for
//! all of them (bodies read); criterion reports elements (requests) per second. After the
//! criterion groups, an interleaved comparison runs the clients in turns (rotating which goes
//! first) and prints each one's median requests/s and the median over rounds of its ratio to
//! plain reqwest in the same round: on a shared machine whose load drifts, turns side by side
//! are the fair comparison. Five clients:
//! plain reqwest; the same reqwest in a `reqwest_middleware` chain with no middleware (what the
//! chain itself costs); a chain with a middleware that only passes requests on (what any
//! middleware costs); the middleware with no limit for the host (the request's life without a
//! limiter: cache and coalescing off, headers read); the middleware with a limit that never
//! binds (a bucket of a million per second and a cap of 64: admission and permit on every
//! request).
//!
//! Wall-clock ratios on a shared VM move by several percent between runs. For a figure that
//! does not, `RATESCOPE_BENCH_SEQUENTIAL=CLIENT:N` (CLIENT one of `plain`, `empty_chain`,
//! `pass_through`, `no_limit`, `never_binds`) skips criterion and sends N GETs one after another through that client, the
//! demo API on the same single thread: run it under `valgrind --tool=callgrind` with N = 0 and
//! N = 1000 and the difference over 1000 is the instructions per request, client and server.

use std::net::SocketAddr;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group};
use futures_util::future::join_all;
use ratescope::engine::{LimitKey, LimiterConfig, Registry};
use ratescope::http::{LimitedClient, RateLimitMiddleware};
use ratescope::mock::{MockConfig, MockServer};
use reqwest_middleware::ClientWithMiddleware;

const AT_ONCE: usize = 32;

async fn plain(http: &reqwest::Client, url: &url::Url) {
    let sends = (0..AT_ONCE).map(|_| async {
        let response = http.get(url.clone()).send().await.expect("a response");
        response.bytes().await.expect("a body")
    });
    join_all(sends).await;
}

async fn chained(http: &ClientWithMiddleware, url: &url::Url) {
    let sends = (0..AT_ONCE).map(|_| async {
        let response = http.get(url.clone()).send().await.expect("a response");
        response.bytes().await.expect("a body")
    });
    join_all(sends).await;
}

/// A middleware that only passes each request on: what any middleware in the chain costs.
struct PassThrough;

#[async_trait::async_trait]
impl reqwest_middleware::Middleware for PassThrough {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut http::Extensions,
        next: reqwest_middleware::Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        next.run(request, extensions).await
    }
}

fn chain(reqwest: &reqwest::Client, limited: LimitedClient) -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest.clone()).with(RateLimitMiddleware::new(limited)).build()
}

/// The demo API and the clients under test, on one runtime.
struct Bench {
    runtime: tokio::runtime::Runtime,
    url: url::Url,
    reqwest: reqwest::Client,
    empty_chain: ClientWithMiddleware,
    pass_through: ClientWithMiddleware,
    without_limit: ClientWithMiddleware,
    with_limit: ClientWithMiddleware,
    _demo: MockServer,
}

fn setup() -> Bench {
    let runtime = tokio::runtime::Builder::new_multi_thread().enable_all().build().expect("a runtime");
    let demo = runtime
        .block_on(MockServer::start(
            MockConfig::demo().expect("the demo config"),
            SocketAddr::from(([127, 0, 0, 1], 0)),
        ))
        .expect("the demo API starts");
    let url = demo.url().join("open").expect("a URL");
    let unlimited = LimitedClient::builder().build().expect("a client");
    let key: LimitKey = demo.addr().to_string().parse().expect("a key");
    let never_binds = LimiterConfig::parse_described("bucket 1000000 @ 1000000/1s, concurrency 64").expect("limits");
    let registry = Registry::from_table([(key, never_binds)]).expect("a registry");
    let limited = LimitedClient::builder().registry(Arc::new(registry)).build().expect("a client");
    let reqwest = reqwest::Client::new();
    let (without_limit, with_limit) = (chain(&reqwest, unlimited), chain(&reqwest, limited));
    let empty_chain = reqwest_middleware::ClientBuilder::new(reqwest.clone()).build();
    let pass_through = reqwest_middleware::ClientBuilder::new(reqwest.clone()).with(PassThrough).build();
    Bench { runtime, url, reqwest, empty_chain, pass_through, without_limit, with_limit, _demo: demo }
}

fn middleware_overhead(c: &mut Criterion) {
    let Bench { runtime, url, reqwest, empty_chain, pass_through, without_limit, with_limit, _demo } = setup();
    let mut group = c.benchmark_group("middleware_overhead");
    group.throughput(Throughput::Elements(AT_ONCE as u64));
    group.bench_function("plain_reqwest", |b| b.to_async(&runtime).iter(|| plain(&reqwest, &url)));
    group.bench_function("chain_without_middleware", |b| b.to_async(&runtime).iter(|| chained(&empty_chain, &url)));
    group.bench_function("pass_through_middleware", |b| b.to_async(&runtime).iter(|| chained(&pass_through, &url)));
    group.bench_function("middleware_no_limit", |b| b.to_async(&runtime).iter(|| chained(&without_limit, &url)));
    group.bench_function("middleware_limit_never_binds", |b| b.to_async(&runtime).iter(|| chained(&with_limit, &url)));
    group.finish();
}

/// Rounds of `BATCHES` iterations per client, the clients taking turns; prints each client's
/// median rate, and the median over rounds of its rate over plain reqwest's in the same round
/// (the steadier ratio when the machine's speed drifts between rounds).
fn interleaved() {
    const ROUNDS: usize = 61;
    const BATCHES: usize = 60;
    let bench = setup();
    let names = [
        "plain_reqwest",
        "chain_without_middleware",
        "pass_through_middleware",
        "middleware_no_limit",
        "middleware_limit_never_binds",
    ];
    let mut rates: [Vec<f64>; 5] = Default::default();
    for round in 0..ROUNDS {
        for turn in 0..names.len() {
            let which = (round + turn) % names.len();
            let started = std::time::Instant::now();
            bench.runtime.block_on(async {
                for _ in 0..BATCHES {
                    match which {
                        0 => plain(&bench.reqwest, &bench.url).await,
                        1 => chained(&bench.empty_chain, &bench.url).await,
                        2 => chained(&bench.pass_through, &bench.url).await,
                        3 => chained(&bench.without_limit, &bench.url).await,
                        _ => chained(&bench.with_limit, &bench.url).await,
                    }
                }
            });
            rates[which].push((BATCHES * AT_ONCE) as f64 / started.elapsed().as_secs_f64());
        }
    }
    let median = |mut values: Vec<f64>| {
        values.sort_by(f64::total_cmp);
        values[values.len() / 2]
    };
    println!("interleaved, {ROUNDS} rounds of {BATCHES}×{AT_ONCE} requests per client:");
    for (name, client_rates) in names.iter().zip(&rates) {
        let ratios = client_rates.iter().zip(&rates[0]).map(|(rate, plain)| rate / plain).collect();
        let (rate, ratio) = (median(client_rates.clone()), median(ratios));
        println!("  {name:<30} {rate:>9.0} requests/s (median)  {ratio:.3}× plain (median of rounds)");
    }
}

criterion_group!(benches, middleware_overhead);

/// N GETs one after another through one client, on one thread with the demo API: for an
/// instruction count under callgrind (see the module docs).
fn sequential(client: &str, count: usize) {
    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().expect("a runtime");
    runtime.block_on(async {
        let demo =
            MockServer::start(MockConfig::demo().expect("the demo config"), SocketAddr::from(([127, 0, 0, 1], 0)))
                .await
                .expect("the demo API starts");
        let url = demo.url().join("open").expect("a URL");
        let key: LimitKey = demo.addr().to_string().parse().expect("a key");
        let never_binds =
            LimiterConfig::parse_described("bucket 1000000 @ 1000000/1s, concurrency 64").expect("limits");
        let registry = Registry::from_table([(key, never_binds)]).expect("a registry");
        let limited = match client {
            "never_binds" => LimitedClient::builder().registry(Arc::new(registry)).build(),
            _ => LimitedClient::builder().build(),
        };
        // Built after the client, which installs the TLS provider reqwest needs.
        let limited = limited.expect("a client");
        let reqwest = reqwest::Client::new();
        let chain = match client {
            "empty_chain" => reqwest_middleware::ClientBuilder::new(reqwest.clone()).build(),
            "pass_through" => reqwest_middleware::ClientBuilder::new(reqwest.clone()).with(PassThrough).build(),
            _ => self::chain(&reqwest, limited),
        };
        // One exchange before counting opens the connection both kinds of client then reuse.
        reqwest.get(url.clone()).send().await.expect("a response").bytes().await.expect("a body");
        for _ in 0..count {
            let sent = match client {
                "plain" => reqwest.get(url.clone()).send().await.expect("a response"),
                _ => chain.get(url.clone()).send().await.expect("a response"),
            };
            sent.bytes().await.expect("a body");
        }
    });
}

fn main() {
    if let Ok(spec) = std::env::var("RATESCOPE_BENCH_SEQUENTIAL") {
        let (client, count) = spec.split_once(':').expect("RATESCOPE_BENCH_SEQUENTIAL=CLIENT:N");
        assert!(
            ["plain", "empty_chain", "pass_through", "no_limit", "never_binds"].contains(&client),
            "unknown client {client}"
        );
        sequential(client, count.parse().expect("a request count"));
        return;
    }
    benches();
    interleaved();
    Criterion::default().configure_from_args().final_summary();
}
