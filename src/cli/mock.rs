//! `ratescope mock`: runs the embedded demo API (or a config of your own) on loopback until Ctrl+C.

use std::io::ErrorKind;
use std::net::{IpAddr, Ipv4Addr, SocketAddr};
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::{Context, bail};
use clap::Args;

use crate::mock::{CountBy, MockConfig, MockError, MockServer};

/// The port `ratescope mock` listens on unless told otherwise.
pub const DEFAULT_PORT: u16 = 8787;

#[derive(Debug, Args)]
pub struct MockArgs {
    /// A TOML file describing the routes (default: the built-in demo, see assets/demo.toml).
    #[arg(long, value_name = "FILE")]
    pub config: Option<PathBuf>,
    /// Port to listen on; 0 picks a free one.
    #[arg(long, default_value_t = DEFAULT_PORT)]
    pub port: u16,
    /// Loopback address to listen on: 127.0.0.1 (or another 127.x.y.z) or ::1.
    #[arg(long, default_value_t = IpAddr::V4(Ipv4Addr::LOCALHOST))]
    pub bind: IpAddr,
}

pub fn run(args: MockArgs) -> anyhow::Result<ExitCode> {
    let (config, source) = match &args.config {
        Some(path) => (MockConfig::from_file(path)?, path.display().to_string()),
        None => (MockConfig::demo()?, "the built-in demo (assets/demo.toml)".to_owned()),
    };
    let addr = SocketAddr::new(args.bind, args.port);
    super::runtime()?.block_on(async {
        let server = match MockServer::start(config, addr).await {
            Ok(server) => server,
            Err(MockError::Bind { source, .. }) if source.kind() == ErrorKind::AddrInUse => bail!(
                "port {} on {} is already in use (another `ratescope mock`?); choose another with --port {}, or --port 0 for any free port",
                addr.port(),
                addr.ip(),
                addr.port().wrapping_add(1).max(1)
            ),
            Err(err) => return Err(err.into()),
        };
        out!("{}", banner(&server, &source))?;
        tokio::signal::ctrl_c().await.context("cannot listen for Ctrl+C")?;
        outln!("\nshutting down (letting requests in flight finish)…")?;
        let served = server.arrivals().len();
        server.shutdown().await?;
        outln!("stopped after {served} request{}", if served == 1 { "" } else { "s" })?;
        Ok(ExitCode::SUCCESS)
    })
}

/// What the server prints on start: its URL, each route with its limits, and a few hints.
fn banner(server: &MockServer, source: &str) -> String {
    let config = server.config();
    let url = server.url();
    let base = url.as_str().trim_end_matches('/');
    let width = config.routes.iter().map(|r| r.prefix.len()).max().unwrap_or(0);
    let mut out = format!("ratescope mock: serving {source}\n  on {base}\n\nroutes:\n");
    for route in &config.routes {
        out.push_str(&format!("  {:<width$}  {}\n", route.prefix, route.describe()));
    }
    if config.routes.iter().any(|r| r.count_by == CountBy::Key) {
        out.push_str(&format!(
            "\n\"per API key\" counts each value of the {} header apart.\n",
            config.server.api_key_header
        ));
    }
    if let Some(first) = config.routes.first() {
        let path = if first.prefix == "/" { "/" } else { first.prefix.as_str() };
        out.push_str(&format!("\ntry:   curl -i {base}{path}\n"));
    }
    out.push_str("log:   RATESCOPE_LOG=ratescope::mock=info prints every request\n");
    out.push_str("Press Ctrl+C to stop.\n");
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn banner_lists_every_route_with_its_policies() {
        let server = MockServer::start(MockConfig::demo().unwrap(), "127.0.0.1:0".parse().unwrap()).await.unwrap();
        let text = banner(&server, "the demo");
        assert!(text.contains(&format!("on http://127.0.0.1:{}\n", server.addr().port())), "{text}");
        // Prefixes are padded to the longest, /v1/chat/completions.
        let line = |prefix: &str, rest: &str| format!("  {prefix:<20}  {rest}");
        for (prefix, rest) in [
            ("/items", "bucket 5 @ 5/1s + fixed 100/1m  headers: ietf  429 + Retry-After"),
            ("/search", "sliding 2/1s  headers: github  429 + Retry-After  per API key"),
            ("/v1/chat/completions", "bucket 60 @ 60/1m + bucket 20000 tokens @ 20000/1m  api: llm  headers: openai"),
            ("/graphql", "bucket 1000 points @ 50/1s  api: graphql  headers: none"),
            ("/open", "no limit  headers: none"),
        ] {
            assert!(text.contains(&line(prefix, rest)), "{prefix}: {text}");
        }
        assert!(text.contains("x-api-key header"), "{text}");
        server.shutdown().await.unwrap();
    }
}
