//! The limiter as a `tower::Layer` around hyper-util's legacy client: the demo profile's
//! limits, `RetryOnThrottle` outside them, and twenty requests from four tasks to the demo
//! API's `/items` (bursts of 5, 5 per second) and `/search` (2 per second, one at a time).
//! The layer paces them, so the server refuses none; each line is one answer.
//!
//! ```sh
//! cargo run --example tower_layer
//! ```
//! Starts the embedded demo API on a free loopback port; no network needed.

use std::net::SocketAddr;

use anyhow::Context;
use bytes::Bytes;
use http_body_util::{BodyExt, Empty};
use hyper_util::client::legacy::Client;
use hyper_util::rt::TokioExecutor;
use ratescope::Profile;
use ratescope::engine::Priority;
use ratescope::http::EventKind;
use ratescope::http::events::EventSink;
use ratescope::layer::{RateLimitLayer, RetryOnThrottle};
use ratescope::mock::{MockConfig, MockServer, Outcome};
use tokio::time::Instant;
use tower::retry::RetryLayer;
use tower::{Service, ServiceBuilder, ServiceExt};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    // The demo profile names 127.0.0.1:8787; this demo API listens wherever the OS put it.
    let profile = Profile::demo_at(&demo.url())?;
    let (events, mut received) = EventSink::channel(1024);
    let layer = RateLimitLayer::with_policy(profile.policy()?).events(events).build();
    let client = Client::builder(TokioExecutor::new()).build_http::<Empty<Bytes>>();
    let service = ServiceBuilder::new().layer(RetryLayer::new(RetryOnThrottle::default())).layer(layer).service(client);
    let started = Instant::now();
    let tasks = (0..4).map(|task| {
        let (mut service, base) = (service.clone(), demo.url());
        tokio::spawn(async move {
            for i in 0..5 {
                let path = if i % 2 == 0 { "items" } else { "search" };
                let mut request = http::Request::get(base.join(path)?.as_str()).body(Empty::new())?;
                // The lane rides on the request: task 0's requests jump the queue.
                if task == 0 {
                    request.extensions_mut().insert(Priority::High);
                }
                let response = service.ready().await?.call(request).await?;
                let status = response.status();
                // The body holds the request's slot until it is read to its end.
                let body = response.into_body().collect().await?.to_bytes();
                println!(
                    "{:>6} ms  task {task}  /{path:<7} {status} ({} bytes)",
                    started.elapsed().as_millis(),
                    body.len()
                );
                anyhow::ensure!(status.is_success(), "/{path}: {status}");
            }
            anyhow::Ok(())
        })
    });
    for task in tasks {
        task.await.context("a task panicked")??;
    }
    drop(service);
    let mut queued = 0;
    while let Ok(event) = received.try_recv() {
        queued += usize::from(matches!(event.kind, EventKind::Queued { .. }));
    }
    let refused = demo.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count();
    println!(
        "20 requests in {} ms, {queued} waited in a limiter; the server refused {refused} (expect 0)",
        started.elapsed().as_millis()
    );
    demo.shutdown().await?;
    Ok(())
}
