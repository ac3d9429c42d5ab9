//! The limiter alone, around a plain reqwest client: 20 requests to the demo API's `/items`
//! (5 at once, 5 per second) paced by a token bucket of the same size, so none is refused.
//!
//! ```sh
//! cargo run --example limiter
//! ```
//! Starts the embedded demo API on a free loopback port; no network needed.

use std::net::SocketAddr;

use anyhow::Context;
use ratescope::engine::{Limiter, LimiterConfig, Priority};
use ratescope::mock::{MockConfig, MockServer};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    let url = demo.url().join("items")?;
    // The demo's /items allows bursts of 5 and 5 per second: the same bucket on our side.
    let limiter = Limiter::new("demo", LimiterConfig::parse_described("bucket 5 @ 5/1s, concurrency 4")?)?;
    // ratescope's reqwest carries no TLS provider choice: make rustls's ring the default.
    ratescope::http::install_tls_provider();
    let http = reqwest::Client::new();
    let started = Instant::now();
    let requests = (0..20).map(|i| {
        let (limiter, http, url) = (limiter.clone(), http.clone(), url.clone());
        tokio::spawn(async move {
            let lane = if i % 5 == 0 { Priority::High } else { Priority::Normal };
            // The permit is this request's slot: held until the answer is in, then dropped.
            let permit = limiter.acquire(lane, 1).await?;
            let status = http.get(url).send().await?.status();
            drop(permit);
            anyhow::Ok((i, status.as_u16(), started.elapsed()))
        })
    });
    let mut refused = 0;
    for request in requests {
        let (i, status, at) = request.await.context("a request task panicked")??;
        refused += usize::from(status == 429);
        println!("request {i:>2}: {status} after {:>5} ms", at.as_millis());
    }
    println!("{refused} of 20 refused with 429 (expect 0); took {:.1} s", started.elapsed().as_secs_f64());
    demo.shutdown().await?;
    Ok(())
}
