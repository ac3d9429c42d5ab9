//! The command line: argument definitions (clap) and dispatch to each subcommand.

/// `println!` that returns the write's error instead of panicking: a closed pipe (`| head -1`)
/// then ends the command quietly (see [`main`]).
/// `print!` likewise.
macro_rules! out {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        write!(std::io::stdout().lock(), $($arg)*)
    }};
}

macro_rules! outln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        writeln!(std::io::stdout().lock(), $($arg)*)
    }};
}

mod burst;
mod headers;
mod limits;
mod mock;
mod pace;
mod probe;
mod profile;
mod proxy;
mod shared;
mod sim;

use std::process::ExitCode;

use anyhow::Context;
use clap::{Parser, Subcommand};
use http::{HeaderMap, HeaderName, HeaderValue};

pub use limits::LimitArgs;

/// Explore and respect HTTP API rate limits.
#[derive(Debug, Parser)]
#[command(name = "ratescope", version, about, long_about = None)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Open the app, fire the demo burst, save a PNG of the window to FILE and exit.
    #[arg(long, value_name = "FILE")]
    pub screenshot: Option<std::path::PathBuf>,
    /// With --screenshot: seconds to let the burst run before the capture.
    #[arg(long, value_name = "SECONDS", default_value_t = 4.0, requires = "screenshot")]
    pub after: f64,
}

#[derive(Debug, Subcommand)]
pub enum Command {
    /// Send N simulated requests through the limiter (no network) and show when each is admitted.
    Pace(pace::PaceArgs),
    /// Fire a burst of requests at an API through the limiter (or raw) and summarise what happened.
    Burst(Box<burst::BurstArgs>),
    /// Explain the rate-limit headers of a response head pasted from any provider.
    Headers(headers::HeadersArgs),
    /// Run the embedded demo API: a rate-limited HTTP server on loopback.
    Mock(mock::MockArgs),
    /// List, show, import and export saved profiles.
    Profile(profile::ProfileArgs),
    /// Run a burst spec in virtual time against a model of a server (milliseconds for minutes).
    Sim(sim::SimArgs),
    /// Find an API's limits: ramp carefully, read its headers, suggest limiter settings.
    Probe(probe::ProbeArgs),
    /// Run a rate-limiting proxy that holds the API key and paces every caller through the limiter.
    Proxy(Box<proxy::ProxyArgs>),
}

/// When the command line started running (for the app's time-to-first-frame report).
pub static PROCESS_START: std::sync::OnceLock<std::time::Instant> = std::sync::OnceLock::new();

/// Runs the command line; errors are printed on stderr and become a non-zero exit status.
pub fn main(cli: Cli) -> ExitCode {
    let _ = PROCESS_START.set(std::time::Instant::now());
    init_tracing();
    let result = match cli.command {
        Some(Command::Pace(args)) => pace::run(args),
        Some(Command::Headers(args)) => headers::run(args),
        Some(Command::Burst(args)) => burst::run(*args),
        Some(Command::Mock(args)) => mock::run(args),
        Some(Command::Profile(args)) => profile::run(args),
        Some(Command::Sim(args)) => sim::run(args),
        Some(Command::Probe(args)) => probe::run(args),
        Some(Command::Proxy(args)) => proxy::run(*args),
        None => open_app(cli.screenshot, cli.after),
    };
    match result {
        Ok(code) => code,
        // The reader went away (`| head -1`): nothing more to say, and nobody to say it to.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            eprintln!("error: {err:#}");
            ExitCode::FAILURE
        }
    }
}

/// Whether `err` comes from writing to a pipe whose reader has closed it.
fn is_broken_pipe(err: &anyhow::Error) -> bool {
    err.chain()
        .filter_map(|cause| cause.downcast_ref::<std::io::Error>())
        .any(|io| io.kind() == std::io::ErrorKind::BrokenPipe)
}

/// With no subcommand: the desktop app, or the help where it was built without one.
fn open_app(screenshot: Option<std::path::PathBuf>, after: f64) -> anyhow::Result<ExitCode> {
    if !after.is_finite() || !(0.0..=3600.0).contains(&after) {
        anyhow::bail!("--after {after} is not a number of seconds between 0 and 3600");
    }
    #[cfg(feature = "gui")]
    {
        crate::gui::run(screenshot.map(|path| (path, std::time::Duration::from_secs_f64(after))))?;
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "gui"))]
    {
        use clap::CommandFactory;
        if screenshot.is_some() {
            anyhow::bail!("--screenshot needs the desktop app: build with the default feature `gui`");
        }
        Cli::command().print_help()?;
        println!("\n(this build has no desktop app: build with the default feature `gui`)");
        Ok(ExitCode::SUCCESS)
    }
}

fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_env("RATESCOPE_LOG")
        // What adaptive mode learns (scouting, windows, paces) is worth a line on stderr.
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("warn,ratescope::http::adaptive=info"));
    // Colour only on a terminal: a log redirected to a file stays plain text.
    let ansi = std::io::IsTerminal::is_terminal(&std::io::stderr());
    let _ = tracing_subscriber::fmt().with_env_filter(filter).with_ansi(ansi).with_writer(std::io::stderr).try_init();
}

/// `-H 'Name: value'` flags as a header map.
fn header_map(flags: &[String]) -> anyhow::Result<HeaderMap> {
    let mut headers = HeaderMap::new();
    for header in flags {
        let (name, value) = header.split_once(':').with_context(|| format!("-H '{header}' is not 'Name: value'"))?;
        let name: HeaderName = name.trim().parse().with_context(|| format!("-H '{header}': bad header name"))?;
        let value: HeaderValue = value.trim().parse().with_context(|| format!("-H '{header}': bad header value"))?;
        headers.append(name, value);
    }
    Ok(headers)
}

/// A multi-threaded tokio runtime for a command.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}
