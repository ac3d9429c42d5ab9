//! `ratescope burst`: fire requests at an API through the limiter (or raw) and summarise.

use std::path::{Path, PathBuf};
use std::process::ExitCode;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use http::Method;
use http::header::CONTENT_TYPE;
use indicatif::{ProgressBar, ProgressStyle};
use url::Url;

use super::LimitArgs;
use super::shared::SharedArgs;
use crate::engine::{Rate, parse_duration};
use crate::files::{self, WriteOptions};
use crate::http::{BatchPlan, CostRule, LimitedClient, RetryPolicy, redact_url};
use crate::profile::{MAX_BODY_BYTES, Profile, ProfileStore, SecretStore};
use crate::run::{ArrivalPattern, Burst, BurstSpec, Endpoint, PriorityMix, content_type_of, write_csv};
use crate::store::{FailPolicy, SharedSettings};

#[derive(Debug, Args)]
pub struct BurstArgs {
    /// Target URL(s); several spread the requests by --weights.
    #[arg(required_unless_present = "endpoints", value_name = "URL")]
    pub urls: Vec<Url>,
    /// A profile endpoint to fire (method, path, headers and body from the profile); repeat for
    /// several, spread by their weights. Needs --profile.
    #[arg(long = "endpoint", value_name = "NAME", requires = "profile")]
    pub endpoints: Vec<String>,
    /// Relative weights of the URLs, e.g. 3,1.
    #[arg(long, value_delimiter = ',')]
    pub weights: Vec<u32>,
    /// Number of requests.
    #[arg(short = 'n', long = "requests", default_value_t = 200)]
    pub requests: usize,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Send without any limiter, to compare against paced sending (-c still caps requests in flight).
    #[arg(long, conflicts_with_all = ["rate", "burst", "windows", "adaptive", "redis"])]
    pub no_limit: bool,
    /// Retries per request after the first attempt (Retry-After always wins over backoff).
    #[arg(long, value_name = "K")]
    pub retries: Option<u32>,
    /// Follow the limits the server publishes in its headers (tightening, never loosening).
    #[arg(long)]
    pub adaptive: bool,
    /// Keep cacheable responses (HTTP caching rules): a fresh copy answers without a request.
    #[arg(long)]
    pub cache: bool,
    /// Identical GETs in flight at the same time share one request (the others get a copy).
    #[arg(long)]
    pub coalesce: bool,
    /// Batch item requests, PARAM:SIZE:WAIT, e.g. ids:50:20ms: request i asks for item i+1,
    /// and up to SIZE items (or what WAIT after the first brings) go in one GET with
    /// ?PARAM=1,2,3, split back per item. Applies to every URL and endpoint (a profile
    /// endpoint's own batch template otherwise).
    #[arg(long, value_name = "PARAM:SIZE:WAIT")]
    pub batch: Option<BatchPlan>,
    /// HTTP method (default GET, or POST with --data, as curl does).
    #[arg(short = 'm', short_alias = 'X', long, alias = "request")]
    pub method: Option<Method>,
    /// Request body: text, `@FILE` or `@-` (standard input), up to 16 MiB; its Content-Type is
    /// guessed (JSON, else text) unless -H sets one.
    #[arg(short = 'd', long = "data", value_name = "TEXT|@FILE")]
    pub data: Option<String>,
    /// Reserve units other than requests and settle them from each answer, e.g.
    /// tokens=field:max_tokens+body/4->field:usage.total_tokens (repeat for several units);
    /// the actual is a JSON field of the answer or drop:HEADER, the fall of a remaining-units
    /// header since the last answer. Budgets count them with --window 200000/1m:tokens.
    #[arg(long = "cost", value_name = "UNIT=ESTIMATE[->ACTUAL]")]
    pub costs: Vec<CostRule>,
    /// Extra request header, `Name: value`; repeat for several.
    #[arg(short = 'H', long = "header", value_name = "NAME: VALUE")]
    pub headers: Vec<String>,
    /// Arrivals at a fixed rate (e.g. 50/1s) instead of all at once.
    #[arg(long, value_name = "N/DURATION", conflicts_with = "ramp")]
    pub arrival_rate: Option<Rate>,
    /// With --arrival-rate: keep arriving for this long (the count follows), e.g. 30s.
    #[arg(long, value_parser = duration_arg, requires = "arrival_rate")]
    pub duration: Option<Duration>,
    /// Arrival rate ramping linearly, FROM:TO:OVER in requests per second, e.g. 1:50:30s.
    #[arg(long, value_name = "FROM:TO:OVER")]
    pub ramp: Option<String>,
    /// Shares of the high and low lanes (the rest is normal), e.g. --high 0.2 --low 0.3.
    #[arg(long, default_value_t = 0.0, value_parser = super::share_arg)]
    pub high: f64,
    #[arg(long, default_value_t = 0.0, value_parser = super::share_arg)]
    pub low: f64,
    /// Take the limits, retry policy and headers for the URLs' hosts from a profile: a file, or
    /// the name of a saved profile.
    #[arg(long, value_name = "FILE|NAME", conflicts_with_all = ["rate", "burst", "windows", "concurrency", "no_limit"])]
    pub profile: Option<String>,
    #[command(flatten)]
    pub shared: SharedArgs,
    /// Print the summary as one JSON object (schema in ratescope::run::Summary).
    #[arg(long)]
    pub json: bool,
    /// The longest wait for each attempt's response, connecting included (e.g. 5s); a stalled
    /// server then fails the attempt as "no response" after this long instead of a minute.
    #[arg(long, value_parser = duration_arg, value_name = "DURATION", default_value = "60s")]
    pub timeout: Duration,
    /// Write one row per HTTP attempt to this CSV file.
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
}

pub(super) fn duration_arg(text: &str) -> Result<Duration, String> {
    parse_duration(text).map_err(|err| err.to_string())
}

impl BurstArgs {
    fn spec(&self, profile: Option<&Profile>) -> anyhow::Result<BurstSpec> {
        if !self.weights.is_empty() && self.weights.len() != self.urls.len() {
            usage!("--weights has {} values for {} URLs", self.weights.len(), self.urls.len());
        }
        let body = self.data.as_deref().map(read_data).transpose()?;
        let mut endpoints: Vec<Endpoint> = self
            .urls
            .iter()
            .enumerate()
            .map(|(i, url)| Endpoint::new(url.clone(), self.weights.get(i).copied().unwrap_or(1)))
            .collect();
        if let Some(profile) = profile {
            for name in &self.endpoints {
                endpoints.push(profile_endpoint(profile, name)?);
            }
        }
        if let Some(unit) = crate::http::cost::duplicate_unit(&self.costs) {
            usage!(
                "--cost gives two rules for {unit}: give one rule per unit (add terms with +, e.g. {unit}=500+body/4)"
            );
        }
        let headers = super::header_map(&self.headers)?;
        if let Some(body) = body {
            for endpoint in &mut endpoints {
                // -H Content-Type (the burst's header) wins over the guess.
                endpoint.headers.remove(CONTENT_TYPE);
                if !headers.contains_key(CONTENT_TYPE) {
                    endpoint.headers.insert(CONTENT_TYPE, content_type_of(&body));
                }
                endpoint.body = Some(body.clone());
            }
        }
        for endpoint in &mut endpoints {
            endpoint.cost_rules.extend(self.costs.iter().cloned());
            if let Some(batch) = &self.batch {
                endpoint.batch = Some(batch.clone());
            }
        }
        let method = match (&self.method, &self.data) {
            (Some(method), _) => {
                for endpoint in &mut endpoints {
                    endpoint.method = None;
                }
                method.clone()
            }
            (None, Some(_)) => Method::POST,
            (None, None) => Method::GET,
        };
        let arrival = match (&self.arrival_rate, self.duration, &self.ramp) {
            (Some(rate), Some(duration), _) => ArrivalPattern::ForDuration { rate: *rate, duration },
            (Some(rate), None, _) => ArrivalPattern::FixedRate(*rate),
            (None, _, Some(ramp)) => {
                ArrivalPattern::parse_ramp(ramp).map_err(|err| super::as_usage(anyhow::anyhow!("--{err}")))?
            }
            (None, _, None) => ArrivalPattern::AllAtOnce,
        };
        if self.high + self.low > 1.0 {
            usage!("--high and --low add up to more than 1");
        }
        let priorities = PriorityMix { high: self.high, normal: 1.0 - self.high - self.low, low: self.low };
        let mut retry = RetryPolicy::default();
        if let Some(retries) = self.retries {
            retry.max_attempts = retries.saturating_add(1);
        }
        let (limits, raw_concurrency) =
            if self.no_limit { (None, self.limits.concurrency) } else { (Some(self.limits.to_config()?), None) };
        Ok(BurstSpec {
            endpoints,
            method,
            headers,
            requests: self.requests,
            arrival,
            priorities,
            limits,
            raw_concurrency,
            retry,
            adaptive: self.adaptive,
            shared: None,
            timeout: Some(self.timeout),
            cache: self.cache,
            coalesce: self.coalesce,
        })
    }
}

/// The body `--data` names: the text itself, or `@FILE` / `@-` read up to the body cap.
fn read_data(data: &str) -> anyhow::Result<bytes::Bytes> {
    let Some(file) = data.strip_prefix('@') else { return Ok(bytes::Bytes::copy_from_slice(data.as_bytes())) };
    if file.is_empty() {
        usage!("--data @ needs a file name after the @ (or @- for standard input)");
    }
    Ok(bytes::Bytes::from(files::read_capped(Path::new(file), MAX_BODY_BYTES)?))
}

/// The endpoint called `name` in whichever host of `profile` has one.
fn profile_endpoint(profile: &Profile, name: &str) -> anyhow::Result<Endpoint> {
    let hosts: Vec<_> = profile
        .hosts
        .iter()
        .filter(|host| host.endpoints.iter().any(|entry| entry.name.trim().eq_ignore_ascii_case(name.trim())))
        .collect();
    let host = match hosts.as_slice() {
        [host] => host,
        [] => {
            let known: Vec<String> =
                profile.hosts.iter().map(|host| format!("{}: {}", host.name, host.endpoint_names())).collect();
            usage!("profile '{}' has no endpoint '{name}' (endpoints by host: {})", profile.name, known.join("; "));
        }
        several => {
            let names: Vec<&str> = several.iter().map(|host| host.name.as_str()).collect();
            usage!("endpoint '{name}' is in several hosts ({}); rename one to pick it", names.join(", "));
        }
    };
    let resolved = host.endpoint(name)?;
    let mut endpoint = Endpoint::new(resolved.url, resolved.weight);
    endpoint.method = Some(resolved.method);
    endpoint.headers = resolved.headers;
    endpoint.cost_rules = resolved.cost_rules;
    endpoint.batch = resolved.batch;
    if let Some(body) = resolved.body {
        endpoint = endpoint.with_body(body);
    }
    Ok(endpoint)
}

/// Writes `results` as CSV to what `path` names, whole or not at all ([`files::write_with`]).
fn save_csv(path: &Path, results: &[crate::run::RequestResult]) -> anyhow::Result<()> {
    files::write_with(path, WriteOptions::default(), |out| {
        write_csv(out, results).map_err(|err| match err.into_kind() {
            csv::ErrorKind::Io(err) => err,
            other => std::io::Error::other(format!("{other:?}")),
        })
    })?;
    Ok(())
}

/// The profile named by `--profile`: a file when one exists at that path, else a saved profile.
pub(super) fn load_profile(reference: &str) -> anyhow::Result<Profile> {
    let path = Path::new(reference);
    if path.exists() {
        return Ok(Profile::from_file(path)?);
    }
    Ok(ProfileStore::default_location()?.load(reference)?)
}

/// A client from the profile (its budgets shared if the profile or the flags say so), and the
/// limits it applies to the burst's hosts (for the summary). Needs the runtime entered.
fn profile_client(profile: &Profile, args: &BurstArgs, spec: &mut BurstSpec) -> anyhow::Result<LimitedClient> {
    let entries = profile.entries()?;
    for endpoint in &spec.endpoints {
        let host = endpoint.url.host_str().unwrap_or_default();
        let with_port = endpoint.url.port_or_known_default().map(|port| format!("{host}:{port}"));
        let on_host = |key: &crate::engine::LimitKey| key.host == host || Some(&key.host) == with_port.as_ref();
        let covered = entries.iter().any(|(entry, _)| on_host(entry));
        // The limits its requests meet (the longest path prefix covering them): an estimate
        // one of their budgets can never hold is refused before anything is sent.
        let limits = entries
            .iter()
            .filter(|(key, _)| on_host(key) && key.covers_path(endpoint.url.path()))
            .max_by_key(|(key, _)| key.path_prefix.as_ref().map_or(0, String::len));
        let estimate = crate::http::cost::estimate(1, &endpoint.cost_rules, endpoint.body.as_deref());
        if let Some((budget, spent)) = limits.and_then(|(_, limits)| limits.never_fits(&estimate)) {
            usage!(
                "{}: each request is estimated at {spent} in budget '{}' of profile '{}', which holds at most {}, so none could ever be sent",
                endpoint.url,
                budget.name,
                profile.name,
                budget.capacity()
            );
        }
        if !covered {
            usage!(
                "profile '{}' has no host for {}; its hosts: {}",
                profile.name,
                redact_url(&endpoint.url),
                describe_hosts(profile)
            );
        }
    }
    spec.limits = entries.iter().find(|(key, _)| key.path_prefix.is_none()).map(|(_, config)| config.clone());
    let secrets = SecretStore::open_default()?;
    let mut builder = spec.savings(profile.client_builder(&secrets)?.request_timeout(args.timeout));
    if let Some(shared) = args.shared.settings(profile.shared_settings_with(&secrets)?)? {
        check_store(&shared)?;
        builder = builder.share_budgets(&shared)?.0;
    }
    Ok(builder.build()?)
}

/// With the fail-closed policy, a shared store that cannot be reached when the burst starts is
/// an error before anything is sent: waiting for it would hang a mistyped URL forever. (Once
/// the burst runs, a store that goes away is waited for, as the policy says.)
fn check_store(shared: &SharedSettings) -> anyhow::Result<()> {
    if shared.policy != FailPolicy::Closed {
        return Ok(());
    }
    // The runtime is entered, not running a task here, so blocking on it is allowed (as `run`
    // does for the burst itself).
    tokio::runtime::Handle::current().block_on(shared.check_reachable()).with_context(|| {
        format!(
            "the shared budget store at {} cannot be reached; start it or fix the URL, or pass --on-redis-failure fail-open (or local/N) to send without it",
            shared.display_url()
        )
    })
}

fn describe_hosts(profile: &Profile) -> String {
    profile.hosts.iter().map(|host| host.base_url.as_str()).collect::<Vec<_>>().join(", ")
}

/// Refuses, before anything is sent, a `--csv` that could not be written at the end.
fn check_csv(args: &BurstArgs) -> anyhow::Result<()> {
    let Some(path) = &args.csv else { return Ok(()) };
    if args.json && path == Path::new("-") {
        usage!("--csv - and --json would both write to standard output: give --csv a file");
    }
    files::check_writable(path).map_err(|err| super::as_usage(anyhow::Error::new(err).context("--csv")))
}

pub fn run(args: BurstArgs) -> anyhow::Result<ExitCode> {
    check_csv(&args)?;
    let profile = args.profile.as_deref().map(load_profile).transpose()?;
    let mut spec = args.spec(profile.as_ref())?;
    let runtime = super::runtime()?;
    // Shared budgets connect lazily from inside the runtime.
    let _entered = runtime.enter();
    let client = match &profile {
        Some(profile) => Some(profile_client(profile, &args, &mut spec)?),
        None => {
            spec.shared = args.shared.settings(None)?;
            if spec.shared.is_some() && spec.limits.as_ref().is_none_or(|limits| limits.budgets.is_empty()) {
                usage!("--redis shares the burst's budgets, but it has none: add --rate and/or --window");
            }
            if let Some(shared) = &spec.shared {
                check_store(shared)?;
            }
            None
        }
    };
    spec.validate().map_err(|err| super::as_usage(err.into()))?;
    if profile.is_none() {
        // The flags' limits apply to every URL: each unit they count must be spent by a --cost.
        spec.check_costs().map_err(|err| super::as_usage(err.into()))?;
    }
    let (summary, results) = runtime.block_on(async {
        let mut burst = match client {
            Some(client) => Burst::start(spec, client)?,
            None => Burst::start_with_own_client(spec)?,
        };
        let bar = ProgressBar::new(burst.progress().planned as u64);
        bar.set_style(
            ProgressStyle::with_template("{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} done  {msg}")
                .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        let mut ticker = tokio::time::interval(Duration::from_millis(100));
        let mut interrupted = false;
        loop {
            tokio::select! {
                // The end is awaited, not found by the next tick: a script's burst of one
                // request returns when it has its answer, not up to a tick later.
                () = burst.ended() => break,
                _ = ticker.tick() => {
                    let progress = burst.progress();
                    bar.set_position(progress.done as u64);
                    bar.set_message(format!("{} in flight or queued, {} failed", progress.launched - progress.done, progress.failed));
                }
                _ = tokio::signal::ctrl_c(), if !interrupted => {
                    interrupted = true;
                    bar.println("interrupted: cancelling queued and in-flight requests");
                    burst.cancel();
                }
            }
        }
        bar.finish_and_clear();
        anyhow::Ok(burst.finish().await)
    })?;
    // A CSV that cannot be written after all loses the rows, never the summary.
    let csv = args.csv.as_deref().map(|path| save_csv(path, &results)).transpose();
    if args.json {
        outln!("{}", serde_json::to_string_pretty(&summary.to_json())?)?;
    } else {
        out!("{summary}")?;
    }
    if let Err(err) = csv {
        errln!("error: --csv: {}", super::error_text(&err));
        return Ok(ExitCode::from(super::OUTPUT_NOT_WRITTEN));
    }
    Ok(if summary.failed > 0 || summary.cancelled > 0 { ExitCode::FAILURE } else { ExitCode::SUCCESS })
}
