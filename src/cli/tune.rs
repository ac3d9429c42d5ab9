//! `ratescope tune`: limiter settings swept against a server model in virtual time, the best first.

use std::path::PathBuf;
use std::process::ExitCode;
use std::time::Duration;

use clap::Args;
use url::Url;

use crate::engine::format_number;
use crate::mock::{Latency, MockConfig};
use crate::run::BurstSpec;
use crate::sim::burst_from_file;
use crate::sim::model::{from_limits, from_probe_file, with_latency};
use crate::tune::{GridOptions, Span, TuneOptions, TuneReport, tune};

#[derive(Debug, Args)]
#[command(group = clap::ArgGroup::new("model").args(["server", "from_probe", "profile"]))]
pub struct TuneArgs {
    /// What to send: a burst-spec file (TOML, as for `ratescope sim`); its [limits] are what is swept.
    #[arg(long, value_name = "SPEC")]
    pub burst: PathBuf,
    /// The server: a demo API config (TOML, as for `ratescope mock --config`); default the built-in demo.
    #[arg(long, value_name = "CONFIG")]
    pub server: Option<PathBuf>,
    /// The server as `ratescope probe --json` found it (its `found` limits and concurrency).
    #[arg(long, value_name = "PROBE.json")]
    pub from_probe: Option<PathBuf>,
    /// The server as a profile's limits say it is (a file, or a saved profile's name).
    #[arg(long, value_name = "NAME")]
    pub profile: Option<String>,
    /// With --profile: the host (its name in the profile); default the one the burst's URL reaches,
    /// or the profile's only host.
    #[arg(long, value_name = "H", requires = "profile")]
    pub host: Option<String>,
    /// How long the model takes to answer (--from-probe and --profile models; a --server config says its own).
    #[arg(long, value_parser = super::burst::duration_arg, value_name = "DURATION")]
    pub latency: Option<Duration>,
    /// Share the model is tightened by, so the best setting keeps it against the real server.
    #[arg(long, default_value_t = GridOptions::default().margin)]
    pub margin: f64,
    /// Values per axis (capacity and rate: steps × steps settings).
    #[arg(long, default_value_t = GridOptions::default().steps)]
    pub steps: usize,
    /// Bucket capacities to sweep, MIN..MAX (default: 1 to 1.5 × the model's burst).
    #[arg(long, value_name = "MIN..MAX")]
    pub capacity: Option<Span<u64>>,
    /// Bucket rates to sweep, requests per second, MIN..MAX (default: 0.5 to 1.2 × the model's).
    #[arg(long, value_name = "MIN..MAX")]
    pub rate: Option<Span<f64>>,
    /// Limits of the windows mirrored from the model, MIN..MAX (default: the model's own).
    #[arg(long, value_name = "MIN..MAX")]
    pub window_limit: Option<Span<u64>>,
    /// Concurrency caps to sweep, MIN..MAX (default: half the model's limit to it; none without one).
    #[arg(long, value_name = "MIN..MAX")]
    pub concurrency: Option<Span<usize>>,
    /// Threads simulating at once (default: one per core).
    #[arg(long, default_value_t = 0)]
    pub threads: usize,
    /// Seed of every simulation.
    #[arg(long, default_value_t = TuneOptions::default().seed)]
    pub seed: u64,
    /// Settings listed in the text output.
    #[arg(long, default_value_t = 10)]
    pub top: usize,
    /// Print one JSON object: best (probe's `suggested` shape), predicted, candidates.
    #[arg(long)]
    pub json: bool,
}

pub fn run(args: TuneArgs) -> anyhow::Result<ExitCode> {
    let spec = burst_from_file(&args.burst).map_err(anyhow::Error::msg)?;
    let server = model(&args, &spec)?;
    let options = TuneOptions {
        grid: GridOptions {
            steps: args.steps,
            capacity: args.capacity,
            rate: args.rate,
            window_limit: args.window_limit,
            concurrency: args.concurrency,
            margin: args.margin,
        },
        threads: args.threads,
        seed: args.seed,
    };
    let report = tune(&server, &spec, &options).map_err(|err| match err {
        crate::tune::TuneError::Grid(grid) => super::as_usage(anyhow::Error::new(grid)),
        other => anyhow::Error::new(other),
    })?;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&report.to_json())?)?;
    } else {
        print_report(&report, &spec, args.top)?;
    }
    Ok(if report.best().is_some() { ExitCode::SUCCESS } else { ExitCode::FAILURE })
}

/// The server model the flags name.
fn model(args: &TuneArgs, spec: &BurstSpec) -> anyhow::Result<MockConfig> {
    let latency = args.latency.map(|fixed| Latency { fixed, jitter: Duration::ZERO });
    if let Some(path) = &args.server {
        if args.latency.is_some() {
            usage!("--latency is for --from-probe and --profile models; a --server config sets each route's latency");
        }
        return Ok(MockConfig::from_file(path)?);
    }
    let model = if let Some(path) = &args.from_probe {
        from_probe_file(path)?
    } else if let Some(reference) = &args.profile {
        let profile = super::burst::load_profile(reference)?;
        let url = profile_url(&profile, args.host.as_deref(), spec)?;
        let (_, _, limits) = super::probe::limits_for(&profile, &url)?;
        from_limits(&limits)?
    } else {
        if args.latency.is_some() {
            usage!("--latency is for --from-probe and --profile models; the built-in demo sets each route's latency");
        }
        return Ok(MockConfig::demo()?);
    };
    Ok(match latency {
        Some(latency) => with_latency(model, latency),
        None => model,
    })
}

/// The URL whose limits a profile model takes: the burst's path on the host `--host` names, or
/// the host the burst's URL reaches, or the profile's only host.
fn profile_url(profile: &crate::profile::Profile, host: Option<&str>, spec: &BurstSpec) -> anyhow::Result<Url> {
    let burst_url = spec.endpoints.first().map(|endpoint| endpoint.url.clone());
    let chosen = match host {
        Some(name) => match profile.hosts.iter().find(|h| h.name == name) {
            Some(found) => Some(found),
            None => usage!(
                "profile '{}' has no host '{name}'; its hosts: {}",
                profile.name,
                super::probe::host_list(profile)
            ),
        },
        None if profile.hosts.len() == 1 => profile.hosts.first(),
        None => None,
    };
    let Some(chosen) = chosen else {
        return burst_url.ok_or_else(|| anyhow::anyhow!("the burst has no endpoint"));
    };
    let mut url = Url::parse(&chosen.base_url)?;
    if let Some(burst_url) = burst_url {
        url.set_path(burst_url.path());
    }
    Ok(url)
}

fn print_report(report: &TuneReport, spec: &BurstSpec, top: usize) -> anyhow::Result<()> {
    outln!("model:      {}", report.model)?;
    outln!(
        "            judged tightened by {}%: settings that meet no refusal there keep that margin",
        format_number(report.margin * 100.0)
    )?;
    outln!(
        "swept:      {} settings × {} requests in {:.2}s",
        report.candidates.len(),
        report.requests,
        report.real_time_s
    )?;
    match (report.best(), report.predicted()) {
        (Some(best), Some(predicted)) => {
            outln!("best:       {}", best.limits.describe())?;
            outln!(
                "predicted:  {:.3}s, no refusal, p50 {:.1} ms, p99 {:.1} ms",
                predicted.elapsed_s,
                predicted.p50_ms,
                predicted.p99_ms
            )?;
            let url = spec
                .endpoints
                .first()
                .map_or_else(|| "URL".to_owned(), |e| crate::http::redact_url(&e.url).to_string());
            outln!("fire it:    ratescope burst {url} -n {} {}", report.requests, best.burst_flags().join(" "))?;
        }
        _ => {
            outln!("best:       none met zero refusals; widen the sweep toward slower settings (--rate, --capacity)")?;
        }
    }
    outln!("{:>4}  {:<44} {:>10} {:>6} {:>10}", "rank", "setting", "elapsed s", "429s", "p99 ms")?;
    for (rank, outcome) in report.candidates.iter().take(top).enumerate() {
        outln!(
            "{:>4}  {:<44} {:>10.3} {:>6} {:>10.1}",
            rank + 1,
            outcome.limits.describe(),
            outcome.elapsed_s,
            outcome.throttled,
            outcome.p99_ms
        )?;
    }
    Ok(())
}
