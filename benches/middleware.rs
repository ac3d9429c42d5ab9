//! Requests per second through `RateLimitMiddleware` against plain reqwest, to the demo API's
//! unlimited route (`/open`), in one run: the cost the middleware adds to a real loopback
//! exchange.
//!
//! Run: `cargo bench --bench middleware`. Each iteration sends 32 GETs at once and waits for
//! all of them (bodies read); criterion reports elements (requests) per second. Three clients:
//! plain reqwest; the middleware with no limit for the host (the request's life without a
//! limiter: cache and coalescing off, headers read); the middleware with a limit that never
//! binds (a bucket of a million per second and a cap of 64: admission and permit on every
//! request).

use std::net::SocketAddr;
use std::sync::Arc;

use criterion::{Criterion, Throughput, criterion_group, criterion_main};
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

fn chain(reqwest: &reqwest::Client, limited: LimitedClient) -> ClientWithMiddleware {
    reqwest_middleware::ClientBuilder::new(reqwest.clone()).with(RateLimitMiddleware::new(limited)).build()
}

fn middleware_overhead(c: &mut Criterion) {
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

    let mut group = c.benchmark_group("middleware_overhead");
    group.throughput(Throughput::Elements(AT_ONCE as u64));
    group.bench_function("plain_reqwest", |b| b.to_async(&runtime).iter(|| plain(&reqwest, &url)));
    group.bench_function("middleware_no_limit", |b| b.to_async(&runtime).iter(|| chained(&without_limit, &url)));
    group.bench_function("middleware_limit_never_binds", |b| b.to_async(&runtime).iter(|| chained(&with_limit, &url)));
    group.finish();
}

criterion_group!(benches, middleware_overhead);
criterion_main!(benches);
