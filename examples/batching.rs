//! Batching: 40 callers each want one item of the demo API's `/items`; a `Batcher` collects
//! them (up to 10 per request, or whatever 20 ms after the first brings) into
//! `/items?ids=1,2,3,...` requests through a `LimitedClient`, and hands each caller its own
//! item. The limiter (2 requests a second) paces batches: 4 requests instead of 40, done in
//! about 1.5 s instead of about 20.
//!
//! ```sh
//! cargo run --example batching
//! ```
//! Starts the embedded demo API on a free loopback port; no network needed.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ratescope::engine::{LimitKey, LimiterConfig, Registry};
use ratescope::http::{BatchFormat, BatchSettings, BatchTemplate, IdsQuery, LimitedClient};
use ratescope::mock::{MockConfig, MockServer};
use tokio::time::Instant;

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    // ratescope's reqwest carries no TLS provider choice: make rustls's ring the default.
    ratescope::http::install_tls_provider();
    let key: LimitKey = demo.addr().to_string().parse()?;
    let limits = LimiterConfig::parse_described("bucket 1 @ 2/1s")?;
    let client = LimitedClient::builder().registry(Arc::new(Registry::from_table([(key, limits)])?)).build()?;

    // `?ids=1,2,3` on /items; the demo answers {"items": [{"id": 1, ...}, ...]}.
    let template = BatchTemplate::new(demo.url().join("items")?, IdsQuery::comma("ids")?, BatchFormat::items_by_id());
    let batcher = template.batcher(client, BatchSettings::new(10, Duration::from_millis(20))?)?;

    let started = Instant::now();
    // Every caller starts now (collected, so none waits for the one before it).
    let callers: Vec<_> = (1..=40)
        .map(|id| {
            let batcher = batcher.clone();
            tokio::spawn(async move { (id, batcher.submit(id.to_string()).await, started.elapsed()) })
        })
        .collect();
    for caller in callers {
        let (id, answer, at) = caller.await.context("a caller panicked")?;
        let item = answer?;
        println!("caller {id:>2}: {} after {:>4} ms", item["name"], at.as_millis());
    }
    let counts = batcher.counts();
    println!(
        "{} items in {} requests ({} saved); the demo saw {} requests; took {:.1} s",
        counts.items,
        counts.batches,
        counts.saved(),
        demo.arrivals().len(),
        started.elapsed().as_secs_f64()
    );
    demo.shutdown().await?;
    Ok(())
}
