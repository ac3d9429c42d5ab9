//! `ratescope proxy`: hold the API key and pace everyone's requests to an upstream.

use std::process::ExitCode;
use std::sync::Arc;
use std::time::Duration;

use anyhow::Context;
use clap::Args;
use http::{HeaderName, HeaderValue};

use super::burst::{duration_arg, load_profile};
use super::shared::SharedArgs;
use super::{LimitArgs, LogFormat};
use crate::engine::{Registry, Unit, format_wait};
use crate::http::Adaptive;
use crate::http::cache::CacheConfig;
use crate::profile::SecretStore;
use crate::proxy::{DEFAULT_LISTEN, ProxyConfig, ProxyServer, Reloader, Route, Shedding};

/// `127.0.0.1:8788`, `[::1]:8788` or `localhost:8788`: a name is resolved, and of its
/// addresses an IPv4 one is taken first (as `localhost` means 127.0.0.1 to most tools).
fn listen_arg(text: &str) -> Result<std::net::SocketAddr, String> {
    use std::net::ToSocketAddrs;
    if let Ok(address) = text.parse() {
        return Ok(address);
    }
    let addresses: Vec<std::net::SocketAddr> =
        text.to_socket_addrs().map_err(|err| format!("'{text}' is not ADDR:PORT or HOST:PORT ({err})"))?.collect();
    addresses
        .iter()
        .find(|address| address.is_ipv4())
        .or(addresses.first())
        .copied()
        .ok_or_else(|| format!("'{text}' names no address"))
}

#[derive(Debug, Args)]
pub struct ProxyArgs {
    /// Address to listen on (an IP or a host name such as localhost, and a port); loopback
    /// unless --allow-remote.
    #[arg(long, default_value = DEFAULT_LISTEN, value_name = "ADDR:PORT", value_parser = listen_arg)]
    pub listen: std::net::SocketAddr,
    /// Listen on a non-loopback address (anyone who reaches it spends your key).
    #[arg(long)]
    pub allow_remote: bool,
    /// Serve GET /metrics (Prometheus text, or OpenMetrics when asked), /healthz and /readyz on
    /// this address, apart from the callers' (loopback unless --allow-remote).
    #[arg(long, value_name = "ADDR:PORT", value_parser = listen_arg)]
    pub admin: Option<std::net::SocketAddr>,
    /// PREFIX=UPSTREAM: http://LISTEN/PREFIX/rest?query goes to UPSTREAM/rest?query; repeat for several.
    #[arg(long = "route", required = true, value_name = "PREFIX=UPSTREAM")]
    pub routes: Vec<String>,
    #[command(flatten)]
    pub limits: LimitArgs,
    /// Retries per request after the first attempt (Retry-After always wins over backoff).
    #[arg(long, value_name = "K")]
    pub retries: Option<u32>,
    /// Limits, retry policy and secret headers per upstream host from a profile: a file, or the
    /// name of a saved profile.
    #[arg(long, value_name = "FILE|NAME", conflicts_with_all = ["rate", "burst", "windows", "concurrency"])]
    pub profile: Option<String>,
    /// HEADER=VAR: send header HEADER with the value of environment variable VAR on every route
    /// (replacing any caller value); repeat for several.
    #[arg(long = "secret-env", value_name = "HEADER=VAR")]
    pub secret_env: Vec<String>,
    /// Refuse (429) a request expected to wait longer than this in its limiter.
    #[arg(long, default_value = "30s", value_parser = duration_arg, value_name = "DURATION")]
    pub max_queue_wait: Duration,
    /// Refuse (429) a request when this many already wait for the same upstream key.
    #[arg(long = "max-queue", default_value_t = 1000, value_name = "N")]
    pub max_queue: usize,
    /// Keep a response cache in front of the upstreams (HTTP caching rules).
    #[arg(long)]
    pub cache: bool,
    /// Follow the limits each upstream publishes in its headers (scout first, then the server's
    /// remaining as the allowance), as `burst --adaptive`
    #[arg(long)]
    pub adaptive: bool,
    /// Longest a caller may take to send a request head, or keep a connection idle between
    /// requests; then the connection is closed (slow or stalled callers free their socket).
    #[arg(long, default_value = "10s", value_parser = duration_arg, value_name = "DURATION")]
    pub head_timeout: Duration,
    /// Longest wait for an upstream's response head (then 504).
    #[arg(long, default_value = "60s", value_parser = duration_arg, value_name = "DURATION")]
    pub upstream_timeout: Duration,
    #[command(flatten)]
    pub shared: SharedArgs,
    /// Threads serving callers' connections, each with its connections and their upstream
    /// connections (as nginx's `worker_processes`); one per core unless given.
    #[arg(long, value_name = "N")]
    pub threads: Option<usize>,
    /// On Ctrl+C or SIGTERM, how long requests in flight may take to finish.
    #[arg(long, default_value = "10s", value_parser = duration_arg, value_name = "DURATION")]
    pub drain: Duration,
    /// Every DURATION, write a line to stderr: requests in flight, open connections and the
    /// tokio tasks alive in the process (for soak tests and leak hunts).
    #[arg(long, value_parser = period_arg, value_name = "DURATION")]
    pub stats_every: Option<Duration>,
}

/// A period for `--stats-every`: longer than zero (a zero period would tick without end).
fn period_arg(text: &str) -> Result<Duration, String> {
    match duration_arg(text)? {
        period if period.is_zero() => Err("the period must be longer than zero".to_owned()),
        period => Ok(period),
    }
}

impl ProxyArgs {
    fn config(&self) -> anyhow::Result<ProxyConfig> {
        let mut routes = self
            .routes
            .iter()
            .map(|text| text.parse::<Route>())
            .collect::<Result<Vec<_>, _>>()
            .map_err(|err| super::as_usage(err.into()))?;
        for text in &self.secret_env {
            let (name, var) =
                text.split_once('=').with_context(|| format!("--secret-env '{text}' is not HEADER=VAR"))?;
            let name: HeaderName =
                name.trim().parse().with_context(|| format!("--secret-env: '{}' is not a header name", name.trim()))?;
            let value = std::env::var(var.trim())
                .with_context(|| format!("--secret-env {name}: environment variable '{}' is not set", var.trim()))?;
            let value = HeaderValue::from_str(&value).with_context(|| {
                format!("--secret-env {name}: the value of '{}' is not a valid header value", var.trim())
            })?;
            routes = routes
                .into_iter()
                .map(|route| route.with_secret(name.clone(), value.clone()))
                .collect::<Result<_, _>>()
                .map_err(|err| super::as_usage(err.into()))?;
        }
        let mut config = ProxyConfig::new(Vec::new());
        if let Some(retries) = self.retries {
            config.policy.retry.max_attempts = retries.saturating_add(1);
        }
        config.routes = routes;
        if self.adaptive {
            config.policy.adaptive = Adaptive::All;
        }
        match &self.profile {
            Some(reference) => {
                let profile = load_profile(reference)?;
                let secrets = SecretStore::open_default()?;
                config = config.with_profile(&profile, &secrets)?;
                config.shared = self.shared.settings(profile.shared_settings_with(&secrets)?)?;
            }
            None => {
                config.shared = self.shared.settings(None)?;
                let limits = self.limits.to_requests_config("the proxy")?;
                if !limits.budgets.is_empty() || limits.concurrency.is_some() {
                    let registry = Registry::new();
                    for route in &config.routes {
                        registry.set(route.key()?, limits.clone())?;
                    }
                    config.policy.registry = Arc::new(registry);
                }
            }
        }
        config.listen = self.listen;
        config.allow_remote = self.allow_remote;
        config.admin = self.admin;
        config.shedding = Shedding { max_queue_wait: self.max_queue_wait, max_queue_len: self.max_queue };
        config.cache = self.cache.then(CacheConfig::default);
        config.head_timeout = Some(self.head_timeout);
        config.upstream_timeout = Some(self.upstream_timeout);
        config.drain_deadline = self.drain;
        config.threads = self.threads;
        config.validate()?;
        Ok(config)
    }
}

/// What the proxy says while it runs, on stderr: a plain line, or with `--log-format json` a
/// log line like its others.
fn say(text: String) {
    match super::log_format() {
        LogFormat::Text => errln!("{text}"),
        LogFormat::Json => tracing::info!("{text}"),
    }
}

/// A warning on stderr, as [`say`] writes it.
fn warn(text: String) {
    match super::log_format() {
        LogFormat::Text => errln!("warning: {text}"),
        LogFormat::Json => tracing::warn!("{text}"),
    }
}

pub fn run(args: ProxyArgs) -> anyhow::Result<ExitCode> {
    let config = args.config()?;
    if !config.listen.ip().to_canonical().is_loopback() {
        warn(format!(
            "listening on {}, which is not loopback: anyone who can reach it uses your API key",
            config.listen
        ));
    }
    super::runtime()?.block_on(async move {
        // Described before starting: shared budgets then move from the registry into Redis.
        let table = config.policy.registry.entries();
        for (key, limits) in &table {
            for budget in limits.budgets.iter().filter(|budget| budget.unit != Unit::Requests) {
                warn(format!(
                    "{key}: budget '{}' counts {}, which the proxy never spends (it has no cost rules); only budgets of requests apply",
                    budget.name, budget.unit
                ));
            }
        }
        let stop_signal = stop_signal()?;
        // Listened for before the proxy says it is listening: a SIGHUP from then on reloads
        // (its default action would end the process).
        let hangup = hangup_signal();
        let server = ProxyServer::start(config).await?;
        let _ = outln!("ratescope proxy listening on {}", server.url());
        if let Some(admin) = server.admin_addr() {
            let _ = outln!("  admin: http://{admin}/metrics, /healthz, /readyz, POST /reload");
        }
        for route in server.routes() {
            let limits = route
                .key()
                .ok()
                .and_then(|key| table.iter().find(|(k, _)| *k == key))
                .map_or_else(|| "no limits".to_owned(), |(_, config)| config.describe());
            let names: Vec<&str> = route.secrets.keys().map(HeaderName::as_str).collect();
            let injected = if names.is_empty() { String::new() } else { format!("; adds {}", names.join(", ")) };
            let _ = outln!(
                "  {}{}/  ->  {}  ({limits}{injected})",
                server.url().as_str().trim_end_matches('/'),
                route.prefix,
                route.upstream
            );
        }
        if let Some(shared) = server.shared() {
            let _ = outln!(
                "  budgets shared in {} as {} (on Redis failure: {})",
                shared.url,
                shared.keys.join(", "),
                shared.policy
            );
        }
        let stats_every = args.stats_every;
        let drain = args.drain;
        // A reload (SIGHUP, POST /reload) rereads the profile, the flags' files and the secrets'
        // variables, as the start did.
        let args = Arc::new(args);
        server.set_reloader(Reloader::new(move || args.config().map_err(|err| super::error_text(&err))));
        let server = Arc::new(server);
        let stats = stats_every.map(|every| tokio::spawn(print_stats(Arc::clone(&server), every)));
        let hangups = tokio::spawn(reload_on_hangup(Arc::clone(&server), hangup));
        let signal = stop_signal.await;
        hangups.abort();
        let _ = hangups.await;
        if let Some(stats) = stats {
            stats.abort();
            let _ = stats.await;
        }
        let server = Arc::into_inner(server).context("the proxy is still shared at shutdown")?;
        let deadline = drain;
        say(format!(
            "shutting down ({signal}): draining {} request(s) in flight (up to {})",
            server.in_flight(),
            format_wait(deadline)
        ));
        let drained = server.shutdown().await?;
        if drained.cut_off > 0 {
            say(format!("stopped: {} request(s) were still running at the deadline and were cut off", drained.cut_off));
            return Ok(ExitCode::FAILURE);
        }
        say("stopped: every request in flight finished".to_owned());
        Ok(ExitCode::SUCCESS)
    })
}

/// Listens for Ctrl+C (SIGINT) and SIGTERM from now on, registered before the server starts
/// so none is missed; resolves to the signal's name. Both drain the same way: a service
/// manager's stop (SIGTERM) must not cut off requests that Ctrl+C would let finish.
fn stop_signal() -> anyhow::Result<impl Future<Output = &'static str>> {
    #[cfg(unix)]
    {
        use tokio::signal::unix::{SignalKind, signal};
        let mut interrupt = signal(SignalKind::interrupt()).context("cannot listen for Ctrl+C")?;
        let mut terminate = signal(SignalKind::terminate()).context("cannot listen for SIGTERM")?;
        Ok(async move {
            tokio::select! {
                _ = interrupt.recv() => "SIGINT",
                _ = terminate.recv() => "SIGTERM",
            }
        })
    }
    #[cfg(not(unix))]
    {
        Ok(async {
            let _ = tokio::signal::ctrl_c().await;
            "Ctrl+C"
        })
    }
}

/// SIGHUP, listened for (`None` where there is none, or it cannot be).
#[cfg(unix)]
fn hangup_signal() -> Option<tokio::signal::unix::Signal> {
    use tokio::signal::unix::{SignalKind, signal};
    match signal(SignalKind::hangup()) {
        Ok(hangup) => Some(hangup),
        Err(err) => {
            warn(format!("cannot listen for SIGHUP ({err}): reload through POST /reload on --admin"));
            None
        }
    }
}

#[cfg(not(unix))]
fn hangup_signal() -> Option<()> {
    None
}

/// Each SIGHUP rereads the routes and limits (the server's reloader); a refused configuration
/// leaves the old one in place and says why. Nothing on systems without SIGHUP.
#[cfg(unix)]
async fn reload_on_hangup(server: Arc<ProxyServer>, hangup: Option<tokio::signal::unix::Signal>) {
    let Some(mut hangup) = hangup else { return };
    while hangup.recv().await.is_some() {
        let reloading = Arc::clone(&server);
        match tokio::task::spawn_blocking(move || reloading.reload_from_source()).await {
            Ok(Ok(reloaded)) => say(format!("SIGHUP: {}", reloaded.describe())),
            Ok(Err(err)) => warn(format!("SIGHUP: reload refused, the old configuration stays: {err}")),
            Err(err) => warn(format!("SIGHUP: the reload failed: {err}")),
        }
    }
}

#[cfg(not(unix))]
async fn reload_on_hangup(_server: Arc<ProxyServer>, _hangup: Option<()>) {}

/// `--stats-every`: one line per period on stderr, `stats: in_flight=N connections=N tasks=N`
/// (tasks: every tokio task alive in the process, this one included). A closed stderr is ignored.
async fn print_stats(server: Arc<ProxyServer>, every: Duration) {
    use std::io::Write;
    let mut ticks = tokio::time::interval(every);
    ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    loop {
        ticks.tick().await;
        // This runtime's and the serving threads': a leak on either shows.
        let tasks = tokio::runtime::Handle::current().metrics().num_alive_tasks() + server.serving_tasks();
        let line =
            format!("stats: in_flight={} connections={} tasks={tasks}", server.in_flight(), server.connections());
        let _ = writeln!(std::io::stderr(), "{line}");
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn listen_takes_addresses_and_host_names() {
        assert_eq!(listen_arg("127.0.0.1:8788").unwrap().to_string(), "127.0.0.1:8788");
        assert_eq!(listen_arg("[::1]:9").unwrap().to_string(), "[::1]:9");
        assert_eq!(listen_arg("localhost:8788").unwrap().to_string(), "127.0.0.1:8788");
        assert!(listen_arg("localhost").unwrap_err().contains("HOST:PORT"));
        assert!(listen_arg("no-such-host.invalid:80").is_err());
    }
}
