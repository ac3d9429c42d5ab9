//! `ratescope replay`: recorded traffic replayed in virtual time through the limiter against a
//! model of the server, and what each request would have met.

use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::{ArgGroup, Args};
use url::Url;

use super::LimitArgs;
use super::burst::load_profile;
use crate::files::{FileError, read_capped};
use crate::http::redact_url;
use crate::mock::{Latency, MockConfig};
use crate::sim::model::{from_probe_file, with_latency};
use crate::sim::replay::{
    Format, MAX_RECORDING_BYTES, ReadOptions, Recording, RecordingError, Replay, ReplaySettings, read, replay,
};
use crate::sim::{DEFAULT_BASE_URL, SimOptions};

#[derive(Debug, Args)]
#[command(group(
    ArgGroup::new("limiter")
        .required(true)
        .multiple(true)
        .args(["no_limit", "rate", "windows", "concurrency", "profile"])
))]
#[command(group(ArgGroup::new("model").required(true).args(["server", "from_probe"])))]
pub struct ReplayArgs {
    /// The recording: a HAR file (saved by a browser's developer tools), JSON lines
    /// ({"t": SECONDS, "method": "GET", "url": "https://…"} a line) or an access log in the
    /// common or combined format; `-` reads standard input. The format is told by the content.
    #[arg(value_name = "FILE")]
    pub file: PathBuf,
    /// The format, when telling it by the content is not wanted: har, jsonl or access-log.
    #[arg(long, value_parser = format_arg, value_name = "FORMAT")]
    pub format: Option<Format>,
    /// Replay the requests to this host (a name, or name:port); default the host with the most
    /// requests (a page load also hits CDNs and trackers; the limiter is per host).
    #[arg(long, value_name = "HOST")]
    pub host: Option<String>,
    /// Where relative URLs point (an access log's paths, JSON lines' "/path"): its scheme, host
    /// and port. Default the demo API's address, http://127.0.0.1:8787.
    #[arg(long, value_name = "URL")]
    pub base_url: Option<Url>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Replay without a limiter: each request at its recorded time, as it was sent (-c caps
    /// requests in flight).
    #[arg(long, conflicts_with_all = ["rate", "burst", "windows", "adaptive"])]
    pub no_limit: bool,
    /// Take the limits and retry policy of the replayed host from a profile: a file, or the
    /// name of a saved profile.
    #[arg(long, value_name = "FILE|NAME", conflicts_with_all = ["rate", "burst", "windows", "concurrency", "no_limit"])]
    pub profile: Option<String>,
    /// Retries per request after the first attempt (Retry-After always wins over backoff).
    #[arg(long, value_name = "K")]
    pub retries: Option<u32>,
    /// Also follow the limits the server model publishes in its headers.
    #[arg(long)]
    pub adaptive: bool,
    /// The server: a demo API config (TOML, as for `ratescope mock --config` and `sim --server`).
    #[arg(long, value_name = "CONFIG")]
    pub server: Option<PathBuf>,
    /// The server modelled on what `ratescope probe --json` found (saved to a file): one route
    /// for every path, enforcing the limits found.
    #[arg(long, value_name = "PROBE.json")]
    pub from_probe: Option<PathBuf>,
    /// How long the --from-probe model takes to answer, e.g. 80ms (a probe does not say; a
    /// --server config sets each route's own).
    #[arg(long, value_parser = super::burst::duration_arg, value_name = "DURATION", requires = "from_probe")]
    pub latency: Option<std::time::Duration>,
    /// Seed of the client's jitter (and the server's, when its config has none).
    #[arg(long, default_value_t = SimOptions::default().seed)]
    pub seed: u64,
    /// Print the summary as one JSON object: `burst --json`'s schema plus host, format,
    /// recorded_span_s, served, refused, failed_other, delayed, added_delay_ms and skipped.
    #[arg(long)]
    pub json: bool,
}

fn format_arg(text: &str) -> Result<Format, String> {
    Format::ALL.into_iter().find(|format| format.name() == text.trim()).ok_or_else(|| {
        let names: Vec<&str> = Format::ALL.iter().map(|format| format.name()).collect();
        format!("'{}' is not a format: {}", super::clipped_name(text), names.join(", "))
    })
}

pub fn run(args: ReplayArgs) -> anyhow::Result<ExitCode> {
    let server = server_model(&args)?;
    let recording = recording(&args)?;
    tell_what_is_replayed(&args, &recording);
    let settings = settings(&args, &recording)?;
    let options = SimOptions { seed: args.seed, ..SimOptions::default() };
    let replayed = replay(&recording, &settings, &server, &options)?;
    print(&args, &replayed)?;
    let burst = &replayed.summary.burst;
    Ok(if burst.failed > 0 || burst.cancelled > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}

/// The server model of `--server` or `--from-probe`.
fn server_model(args: &ReplayArgs) -> anyhow::Result<MockConfig> {
    match (&args.server, &args.from_probe) {
        (Some(path), _) => Ok(MockConfig::from_file(path)?),
        (None, Some(path)) => {
            let model = from_probe_file(path)?;
            Ok(match args.latency {
                Some(fixed) => with_latency(model, Latency { fixed, jitter: std::time::Duration::ZERO }),
                None => model,
            })
        }
        (None, None) => usage!("give the server model: --server CONFIG or --from-probe PROBE.json"),
    }
}

/// The recording's requests to the host replayed.
fn recording(args: &ReplayArgs) -> anyhow::Result<Recording> {
    let bytes = read_capped(&args.file, MAX_RECORDING_BYTES).map_err(|err| match err {
        FileError::TooLarge { .. } => {
            anyhow::anyhow!("{err}: save the HAR file without response bodies, or cut the recording into parts")
        }
        err => anyhow::Error::new(err),
    })?;
    let base = match &args.base_url {
        Some(base) if !matches!(base.scheme(), "http" | "https") || base.host_str().is_none() => {
            usage!("--base-url {} is not an http or https URL with a host", redact_url(base))
        }
        Some(base) => base.clone(),
        None => Url::parse(DEFAULT_BASE_URL)?,
    };
    let parsed =
        read(&bytes, &ReadOptions { format: args.format, base }).with_context(|| args.file.display().to_string())?;
    parsed.select(args.host.as_deref()).map_err(|err| match err {
        RecordingError::NoSuchHost { .. } => super::as_usage(anyhow::Error::new(err).context("--host")),
        err => anyhow::Error::new(err).context(args.file.display().to_string()),
    })
}

/// Says on stderr what of the file is replayed and what is not.
fn tell_what_is_replayed(args: &ReplayArgs, recording: &Recording) {
    if !recording.other_hosts.is_empty() {
        let others: Vec<String> =
            recording.other_hosts.iter().take(5).map(|host| format!("{} ({})", host.host, host.requests)).collect();
        let more = recording.other_hosts.len().saturating_sub(5);
        let more = if more > 0 { format!(" and {more} more") } else { String::new() };
        let how = if recording.chosen_by_caller {
            "as asked"
        } else {
            "the host with the most requests; pick another with --host"
        };
        errln!(
            "replaying {} ({} requests), {how}; not replayed: {}{more}",
            recording.host,
            recording.requests.len(),
            others.join(", ")
        );
    }
    if recording.problems.count > 0 {
        errln!(
            "skipped {} that could not be read: {}",
            plural(recording.problems.count, "entry or line", "entries or lines"),
            recording.problems
        );
    }
    if !recording.skipped.is_empty() {
        let schemes: Vec<String> = recording.skipped.iter().map(|(scheme, n)| format!("{scheme}: {n}")).collect();
        errln!("skipped requests that are not http or https ({})", schemes.join(", "));
    }
    if recording.joined_to_base > 0 && args.base_url.is_none() {
        errln!(
            "{} joined to {DEFAULT_BASE_URL} (give --base-url with your API's address, such as https://api.example.com)",
            plural(recording.joined_to_base, "path", "paths")
        );
    }
}

fn plural(count: usize, one: &str, many: &str) -> String {
    if count == 1 { format!("1 {one}") } else { format!("{count} {many}") }
}

/// The limiter and retry policy of the flags, or of the profile's host.
fn settings(args: &ReplayArgs, recording: &Recording) -> anyhow::Result<ReplaySettings> {
    let mut settings = if args.no_limit {
        ReplaySettings { raw_concurrency: args.limits.concurrency, ..ReplaySettings::default() }
    } else if let Some(reference) = &args.profile {
        profile_settings(reference, recording)?
    } else {
        ReplaySettings { limits: Some(args.limits.to_requests_config("replay")?), ..ReplaySettings::default() }
    };
    if let Some(retries) = args.retries {
        settings.retry.max_attempts = retries.saturating_add(1);
    }
    settings.adaptive |= args.adaptive;
    Ok(settings)
}

/// The profile's limits, retry policy and adaptive mode for the replayed host (its own limits:
/// a path override of the host is not applied, and that is said).
fn profile_settings(reference: &str, recording: &Recording) -> anyhow::Result<ReplaySettings> {
    let profile = load_profile(reference)?;
    let Some(mut url) = recording.requests.first().map(|request| request.url.clone()) else {
        anyhow::bail!("no request to replay");
    };
    url.set_path("/");
    url.set_query(None);
    let (host, _, limits) = super::probe::limits_for(&profile, &url).map_err(|err| {
        if err.is::<super::UsageError>() {
            let hint = "(recordings without hosts: give --base-url with the address of one of them)";
            super::as_usage(anyhow::anyhow!("{} {hint}", super::error_text(&err)))
        } else {
            err
        }
    })?;
    if !host.paths.is_empty() {
        let prefixes: Vec<&str> = host.paths.iter().map(|path| path.prefix.as_str()).collect();
        errln!(
            "profile '{}' has limits of its own under {} of host '{}': a replay applies the host's limits to every request",
            profile.name,
            prefixes.join(", "),
            host.name
        );
    }
    Ok(ReplaySettings {
        limits: Some(limits),
        raw_concurrency: None,
        retry: host.retry_policy()?,
        adaptive: host.adaptive,
    })
}

fn print(args: &ReplayArgs, replayed: &Replay) -> anyhow::Result<()> {
    let summary = &replayed.summary;
    if args.json {
        outln!("{}", serde_json::to_string_pretty(summary)?)?;
        return Ok(());
    }
    outln!(
        "replayed:      {}, {} recorded over {:.3}s ({})",
        summary.host,
        plural(summary.burst.requests, "request", "requests"),
        summary.recorded_span_s,
        summary.format
    )?;
    out!("{}", summary.burst)?;
    outln!(
        "met:           {} served, {} refused (429/503), {} failed otherwise; {} sent later than recorded",
        summary.served,
        summary.refused,
        summary.failed_other,
        summary.delayed
    )?;
    let delay = summary.added_delay_ms;
    outln!(
        "added delay   {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1} {:>9.1}   (ms: min mean p50 p95 p99 max)",
        delay.min,
        delay.mean,
        delay.p50,
        delay.p95,
        delay.p99,
        delay.max
    )?;
    outln!(
        "simulated:     {:.3}s of traffic in {:.1} ms of real time",
        summary.burst.elapsed_s,
        replayed.simulation.real_time.as_secs_f64() * 1000.0
    )?;
    Ok(())
}
