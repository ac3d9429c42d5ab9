//! `ratescope probe`: find an API's limits and suggest limiter settings.

use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use http::Method;
use url::Url;

use crate::engine::parse_duration;
use crate::http::LimitedClient;
use crate::probe::{ProbeOptions, probe};
use crate::profile::ProfileStore;

#[derive(Debug, Args)]
pub struct ProbeArgs {
    /// The URL to probe (a cheap, idempotent GET is best).
    pub url: Url,
    /// The most requests the probe may send.
    #[arg(long, default_value_t = ProbeOptions::default().max_requests)]
    pub max_requests: usize,
    /// Share kept below what was found, e.g. 0.05 for 5%.
    #[arg(long, default_value_t = ProbeOptions::default().margin)]
    pub margin: f64,
    /// The longest single wait (for a reset or Retry-After), e.g. 2m.
    #[arg(long, value_parser = duration_arg, default_value = "15m")]
    pub max_wait: Duration,
    /// HTTP method.
    #[arg(short = 'm', long, default_value = "GET")]
    pub method: Method,
    /// Extra request header, `Name: value`; repeat for several.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Save the suggestion as a profile of this name (in the config directory).
    #[arg(long, value_name = "NAME")]
    pub save: Option<String>,
    /// Print the report as one JSON object.
    #[arg(long)]
    pub json: bool,
}

fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|err| err.to_string())
}

pub fn run(args: ProbeArgs) -> anyhow::Result<ExitCode> {
    let options = ProbeOptions {
        max_requests: args.max_requests,
        margin: args.margin,
        method: args.method.clone(),
        headers: super::header_map(&args.headers)?,
        max_wait: args.max_wait,
    };
    if !args.json {
        eprintln!("probing {} (at most {} requests)…", args.url, options.max_requests);
    }
    let report = super::runtime()?.block_on(probe(LimitedClient::builder(), &args.url, &options))?;
    if let Some(name) = &args.save {
        let base = args.url.origin().ascii_serialization();
        let profile = report.to_profile(name, &base)?;
        let path = ProfileStore::default_location()?.save(&profile)?;
        if !args.json {
            outln!("saved as profile '{name}' in {}", path.display())?;
        }
    }
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report)?)?;
    } else {
        out!("{report}")?;
    }
    Ok(ExitCode::SUCCESS)
}
