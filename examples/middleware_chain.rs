//! The limiter as a `reqwest_middleware` middleware, beside another one: a chain that logs
//! every attempt on the wire, with ratescope's demo profile deciding when each may go.
//! Twenty requests from four tasks to the demo API's `/items` and `/search` (two per second,
//! one at a time): the chain paces them, and the wire sees no 429.
//!
//! ```sh
//! cargo run --example middleware_chain
//! ```

use std::net::SocketAddr;

use anyhow::Context;
use http::Extensions;
use ratescope::engine::Priority;
use ratescope::http::RateLimitMiddleware;
use ratescope::mock::{MockConfig, MockServer};
use ratescope::{Profile, SecretStore};
use reqwest_middleware::{ClientBuilder, Middleware, Next};
use tokio::time::Instant;

/// Prints each attempt that reaches the wire: placed after the limiter, it sees retries too.
struct LogAttempts {
    started: Instant,
}

#[async_trait::async_trait]
impl Middleware for LogAttempts {
    async fn handle(
        &self,
        request: reqwest::Request,
        extensions: &mut Extensions,
        next: Next<'_>,
    ) -> reqwest_middleware::Result<reqwest::Response> {
        let path = request.url().path().to_owned();
        let response = next.run(request, extensions).await;
        let status = response.as_ref().map_or_else(|err| err.to_string(), |r| r.status().to_string());
        println!("{:>6} ms  {path:<8} {status}", self.started.elapsed().as_millis());
        response
    }
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    // The demo profile names 127.0.0.1:8787; this demo API listens wherever the OS put it.
    let profile = Profile::demo_at(&demo.url())?;
    let limited = profile.client_builder(&SecretStore::in_memory())?.build()?;
    let http = ClientBuilder::new(reqwest::Client::new())
        .with(RateLimitMiddleware::new(limited))
        .with(LogAttempts { started: Instant::now() })
        .build();
    let tasks = (0..4).map(|task| {
        let (http, base) = (http.clone(), demo.url());
        tokio::spawn(async move {
            for i in 0..5 {
                let path = if i % 2 == 0 { "items" } else { "search" };
                // The lane rides on the request: task 0's requests jump the queue.
                let lane = if task == 0 { Priority::High } else { Priority::Normal };
                let response = http.get(base.join(path)?).with_extension(lane).send().await?;
                anyhow::ensure!(response.status().is_success(), "{path}: {}", response.status());
            }
            anyhow::Ok(())
        })
    });
    for task in tasks {
        task.await.context("a task panicked")??;
    }
    let refused = demo
        .arrivals()
        .iter()
        .filter(|arrival| matches!(arrival.outcome, ratescope::mock::Outcome::Limited(_)))
        .count();
    println!("20 requests served; the server refused {refused} attempts (expect 0)");
    demo.shutdown().await?;
    Ok(())
}
