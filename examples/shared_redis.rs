//! One budget shared by several clients through Redis, as separate processes would share it:
//! three clients, each wanting 10 of the demo API's `/catalog` (10 per minute), get 10 between
//! them, and the server refuses none. Needs a Redis server: `RATESCOPE_REDIS_URL`, else
//! redis://127.0.0.1:6379.
//!
//! ```sh
//! cargo run --example shared_redis
//! ```

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use ratescope::engine::{LimitKey, LimiterConfig, Registry};
use ratescope::http::LimitedClient;
use ratescope::mock::{MockConfig, MockServer, Outcome};
use ratescope::store::{FailPolicy, SharedSettings};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let redis = std::env::var("RATESCOPE_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned());
    let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    // A budget name of this run's own, so an earlier run's count does not carry over.
    let name = format!("example-{}", std::process::id());
    // Fail closed: when Redis is away nobody sends, so the shared count is never exceeded.
    let settings = SharedSettings::new(redis.as_str(), name)?.with_policy(FailPolicy::Closed)?;
    let key: LimitKey = format!("{}/catalog", demo.addr()).parse()?;
    let mut clients = Vec::new();
    for _ in 0..3 {
        let registry = Registry::from_table([(key.clone(), LimiterConfig::parse_described("window 10/1m")?)])?;
        let (builder, _handle) = LimitedClient::builder().registry(Arc::new(registry)).share_budgets(&settings)?;
        clients.push(builder.build()?);
    }
    let url = demo.url().join("catalog")?;
    let mut sends = Vec::new();
    for (n, client) in clients.iter().enumerate() {
        for _ in 0..10 {
            let (client, url) = (client.clone(), url.clone());
            // Whoever is not let in within two seconds gives up: the window is spent until a minute has passed.
            sends.push(tokio::spawn(async move {
                (n, tokio::time::timeout(Duration::from_secs(2), client.get(url)).await)
            }));
        }
    }
    let mut admitted = [0; 3];
    for send in sends {
        match send.await.context("a request task panicked")? {
            (n, Ok(Ok(response))) if response.status.is_success() => admitted[n] += 1,
            (_, Ok(Ok(response))) => println!("answered {}", response.status),
            (_, Ok(Err(err))) => anyhow::bail!("a request failed (is Redis up at {redis}?): {err}"),
            (_, Err(_)) => {} // still waiting for the shared window: expected for 20 of the 30
        }
    }
    let refused = demo.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count();
    println!(
        "admitted per client: {admitted:?}, {} in all (the window holds 10); the server refused {refused}",
        admitted.iter().sum::<u32>()
    );
    demo.shutdown().await?;
    Ok(())
}
