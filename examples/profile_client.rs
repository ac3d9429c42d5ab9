//! A profile becomes a client: the shipped demo profile (its budgets per host and path, retry
//! policy and headers), pointed at a demo API started here, sends to three routes with
//! different limits; the summary line counts what the server refused.
//!
//! ```sh
//! cargo run --example profile_client
//! ```
//! The same works with a profile saved by the app: `ProfileStore::default_location()?.load("name")`.

use std::net::SocketAddr;

use anyhow::Context;
use ratescope::mock::{MockConfig, MockServer, Outcome};
use ratescope::{Profile, SecretStore};

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let demo = MockServer::start(MockConfig::demo()?, SocketAddr::from(([127, 0, 0, 1], 0))).await?;
    // The demo profile names 127.0.0.1:8787; this demo API listens wherever the OS put it.
    let profile = Profile::demo_at(&demo.url())?;
    // Secrets (tokens named in the profile as ${NAME}) would come from the store or the environment.
    let client = profile.client_builder(&SecretStore::in_memory())?.build()?;
    let mut sends = Vec::new();
    for path in ["items", "items", "items", "search", "catalog"].iter().cycle().take(30) {
        let (client, url) = (client.clone(), demo.url().join(path)?);
        sends.push(tokio::spawn(async move { (url.path().to_owned(), client.get(url).await) }));
    }
    let (mut served, mut refused, mut failed) = (0, 0, 0);
    for send in sends {
        let (path, result) = send.await.context("a request task panicked")?;
        match result {
            Ok(response) if response.status == 429 => refused += 1,
            Ok(response) => {
                served += 1;
                println!(
                    "{path:<9} {} after {} attempt(s), {:>4} ms in the limiter",
                    response.status,
                    response.attempts,
                    response.queue_wait.as_millis()
                );
            }
            Err(err) => {
                failed += 1;
                println!("{path:<9} failed: {err}");
            }
        }
    }
    let wire_429s = demo.arrivals().iter().filter(|arrival| matches!(arrival.outcome, Outcome::Limited(_))).count();
    println!(
        "{served} served, {refused} ended with 429, {failed} failed; the server refused {wire_429s} attempts (expect 0)"
    );
    demo.shutdown().await?;
    Ok(())
}
