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

/// `eprintln!` that never panics: a closed stderr (the reader went away) loses the line, not
/// the command.
macro_rules! errln {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr().lock(), $($arg)*);
    }};
}

/// `bail!` for a command line that asks for something impossible: the command exits with
/// status 2, as for clap's own usage errors.
macro_rules! usage {
    ($($arg:tt)*) => {
        return Err(anyhow::Error::new($crate::cli::UsageError(format!($($arg)*))))
    };
}

mod burst;
mod headers;
mod install;
mod limits;
mod mock;
mod pace;
mod probe;
mod profile;
mod proxy;
mod replay;
mod shared;
mod sim;
mod tune;

use std::process::ExitCode;

use clap::{Parser, Subcommand};
use http::{HeaderMap, HeaderName, HeaderValue};

pub use limits::{LimitArgs, RateFlag};

/// `ratescope --version`: the package's version, and the commit it was built from when built
/// from a git checkout (`build.rs`).
pub const VERSION: &str = concat!(env!("CARGO_PKG_VERSION"), env!("RATESCOPE_BUILD_COMMIT"));

/// Explore and respect HTTP API rate limits.
#[derive(Debug, Parser)]
#[command(name = "ratescope", version = VERSION, about, long_about = None)]
pub struct Cli {
    /// The subcommand; none opens the app.
    #[command(subcommand)]
    pub command: Option<Command>,
    /// Open the app, fire the demo burst, save a PNG of the window to FILE and exit.
    #[arg(long, value_name = "FILE")]
    pub screenshot: Option<std::path::PathBuf>,
    /// With --screenshot: seconds to let the burst run before the capture.
    #[arg(long, value_name = "SECONDS", default_value_t = 4.0, requires = "screenshot")]
    pub after: f64,
    /// How log lines on stderr are written: text for people, or one JSON object a line for log
    /// shippers (then the proxy logs every request, and says what it does as JSON too).
    #[arg(long, value_enum, global = true, default_value_t = LogFormat::Text)]
    pub log_format: LogFormat,
}

/// `--log-format`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, clap::ValueEnum)]
pub enum LogFormat {
    /// Human-readable lines.
    #[default]
    Text,
    /// One JSON object a line: `timestamp`, `level`, `target`, `message` and the event's fields.
    Json,
}

/// The log format the command line chose ([`main`] sets it once, before any command runs).
static LOG_FORMAT: std::sync::OnceLock<LogFormat> = std::sync::OnceLock::new();

/// The log format in use.
pub(crate) fn log_format() -> LogFormat {
    LOG_FORMAT.get().copied().unwrap_or_default()
}

/// The subcommands.
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
    /// Replay recorded traffic (a HAR file, JSON lines, an access log) in virtual time through the
    /// limiter against a model of the server: what each request would have met.
    Replay(Box<replay::ReplayArgs>),
    /// Find an API's limits: ramp carefully, read its headers, suggest limiter settings.
    Probe(probe::ProbeArgs),
    /// Find the best limiter setting for a burst before spending real quota: sweep settings
    /// against a model of the server in virtual time and rank them.
    Tune(Box<tune::TuneArgs>),
    /// Run a rate-limiting proxy that holds the API key and paces every caller through the limiter.
    Proxy(Box<proxy::ProxyArgs>),
    /// Print the shell completion script for bash, zsh, fish, powershell or elvish.
    Completions(install::CompletionsArgs),
    /// Print the manual page (roff), or write one page per command into a directory.
    Man(install::ManArgs),
}

/// Runs the command line; errors are printed on stderr and become a non-zero exit status.
pub fn main(cli: Cli) -> ExitCode {
    crate::telemetry::process_start();
    init_tracing(cli.log_format);
    let result = match cli.command {
        Some(Command::Pace(args)) => pace::run(args),
        Some(Command::Headers(args)) => headers::run(args),
        Some(Command::Burst(args)) => burst::run(*args),
        Some(Command::Mock(args)) => mock::run(args),
        Some(Command::Profile(args)) => profile::run(args),
        Some(Command::Sim(args)) => sim::run(args),
        Some(Command::Replay(args)) => replay::run(*args),
        Some(Command::Probe(args)) => probe::run(args),
        Some(Command::Tune(args)) => tune::run(*args),
        Some(Command::Proxy(args)) => proxy::run(*args),
        Some(Command::Completions(args)) => install::completions(args),
        Some(Command::Man(args)) => install::man(args),
        None => open_app(cli.screenshot, cli.after),
    };
    match result {
        Ok(code) => code,
        // The reader went away (`| head -1`): nothing more to say, and nobody to say it to.
        Err(err) if is_broken_pipe(&err) => ExitCode::SUCCESS,
        Err(err) => {
            errln!("error: {}", clipped(&error_text(&err)));
            if err.chain().any(|cause| cause.is::<UsageError>()) { ExitCode::from(2) } else { ExitCode::FAILURE }
        }
    }
}

/// The exit status of a command that did its work but could not write what it was asked to
/// write at the end (`burst --csv`, `probe --save`); what it prints was printed all the same.
pub const OUTPUT_NOT_WRITTEN: u8 = 3;

/// A command line that asks for something impossible (made by the `usage!` macro; the command exits with status 2).
#[derive(Debug, thiserror::Error)]
#[error("{0}")]
pub struct UsageError(pub String);

/// `err` as a usage error (exit status 2), its text kept.
pub(crate) fn as_usage(err: anyhow::Error) -> anyhow::Error {
    anyhow::Error::new(UsageError(error_text(&err)))
}

/// The longest error line printed whole; longer ones (a 5 MB name echoed back) keep their start
/// and end.
const MAX_ERROR_CHARS: usize = 2000;

fn clipped(text: &str) -> std::borrow::Cow<'_, str> {
    let count = text.chars().count();
    if count <= MAX_ERROR_CHARS {
        return text.into();
    }
    let head: String = text.chars().take(MAX_ERROR_CHARS / 2).collect();
    let tail: String = text.chars().skip(count - MAX_ERROR_CHARS / 4).collect();
    format!("{head} […{} characters left out…] {tail}", count - head.chars().count() - tail.chars().count()).into()
}

/// `err` and its causes joined by `: `, each said once: a cause whose text its wrapper already
/// ends with (`cannot bind: Address in use` over `Address in use`) is not repeated.
fn error_text(err: &anyhow::Error) -> String {
    let mut text = String::new();
    for cause in err.chain() {
        let cause = cause.to_string();
        if text.ends_with(&cause) {
            continue;
        }
        if !text.is_empty() {
            text.push_str(": ");
        }
        text.push_str(&cause);
    }
    text
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
        usage!("--after {} is not a number of seconds between 0 and 3600", crate::engine::format_amount(after));
    }
    #[cfg(feature = "gui")]
    {
        if let Some(path) = &screenshot {
            // Refused before the app runs its burst, not after.
            crate::files::check_writable(path)
                .map_err(|err| as_usage(anyhow::Error::new(err).context("--screenshot")))?;
        }
        crate::gui::run(screenshot.map(|path| (path, std::time::Duration::from_secs_f64(after))))?;
        Ok(ExitCode::SUCCESS)
    }
    #[cfg(not(feature = "gui"))]
    {
        use clap::CommandFactory;
        if screenshot.is_some() {
            usage!("--screenshot needs the desktop app: build with the default feature `gui`");
        }
        Cli::command().print_help()?;
        println!("\n(this build has no desktop app: build with the default feature `gui`)");
        Ok(ExitCode::SUCCESS)
    }
}

/// The logger on stderr, filtered by `RATESCOPE_LOG` (`tracing_subscriber::EnvFilter` syntax).
fn init_tracing(format: LogFormat) {
    let _ = LOG_FORMAT.set(format);
    // What adaptive mode learns (scouting, windows, paces) is worth a line on stderr; a log
    // shipper also gets the proxy's line per request and what it says while running.
    let default = match format {
        LogFormat::Text => "warn,ratescope_client::http::adaptive=info",
        LogFormat::Json => "warn,ratescope_client::http::adaptive=info,ratescope::proxy=info,ratescope::cli=info",
    };
    let filter = tracing_subscriber::EnvFilter::try_from_env("RATESCOPE_LOG")
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new(default));
    let logger = tracing_subscriber::fmt().with_env_filter(filter).with_writer(std::io::stderr);
    let _ = match format {
        // Colour only on a terminal: a log redirected to a file stays plain text.
        LogFormat::Text => logger.with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr())).try_init(),
        LogFormat::Json => logger.json().flatten_event(true).with_current_span(false).with_span_list(false).try_init(),
    };
}

/// The most `-H` options a command takes: as many as any request may carry.
pub use crate::http::header_cap::MAX_REQUEST_HEADERS as MAX_HEADER_FLAGS;

/// `-H 'Name: value'` flags as a header map. Errors never repeat a value (it may be a key).
fn header_map(flags: &[String]) -> anyhow::Result<HeaderMap> {
    if flags.len() > MAX_HEADER_FLAGS {
        usage!("-H is given {} times: a request takes at most {MAX_HEADER_FLAGS} headers", flags.len());
    }
    let mut headers = HeaderMap::new();
    for (i, header) in flags.iter().enumerate() {
        let Some((name, value)) = header.split_once(':') else {
            usage!("-H number {} is not 'Name: value' (it has no ':'; its text is not repeated here)", i + 1)
        };
        let name = name.trim();
        let Ok(parsed_name) = name.parse::<HeaderName>() else {
            usage!("-H number {}: '{}' is not a header name", i + 1, clipped_name(name))
        };
        let Ok(value) = value.trim().parse::<HeaderValue>() else {
            usage!("-H {name}: the value has characters a header cannot carry (it is not repeated here)")
        };
        headers.append(parsed_name, value);
    }
    Ok(headers)
}

/// A name echoed in an error, cut to 64 characters.
fn clipped_name(name: &str) -> String {
    if name.chars().count() <= 64 {
        name.to_owned()
    } else {
        format!("{}…", name.chars().take(64).collect::<String>())
    }
}

/// A share between 0 and 1 (`--high 0.2`); anything else is refused with the text as typed.
fn share_arg(text: &str) -> Result<f64, String> {
    match text.trim().parse::<f64>() {
        Ok(share) if (0.0..=1.0).contains(&share) => Ok(share),
        _ => Err(format!("'{}' is not a share between 0 and 1", clipped_name(text))),
    }
}

/// A multi-threaded tokio runtime for a command.
fn runtime() -> anyhow::Result<tokio::runtime::Runtime> {
    Ok(tokio::runtime::Builder::new_multi_thread().enable_all().build()?)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn error_text_says_each_cause_once() {
        let io = std::io::Error::new(std::io::ErrorKind::AddrInUse, "Address already in use (os error 98)");
        let wrapped = crate::files::FileError::Io { action: "bind", path: "x".into(), source: io };
        let err = anyhow::Error::new(wrapped).context("cannot start the proxy");
        assert_eq!(error_text(&err), "cannot start the proxy: cannot bind x: Address already in use (os error 98)");
        let plain = anyhow::anyhow!("inner").context("outer");
        assert_eq!(error_text(&plain), "outer: inner");
    }

    #[test]
    fn long_errors_keep_their_ends() {
        let text = format!("no profile named '{}' here", "x".repeat(5_000_000));
        let shown = clipped(&text);
        assert!(shown.chars().count() < MAX_ERROR_CHARS + 100, "{}", shown.len());
        assert!(shown.starts_with("no profile named 'xxx") && shown.ends_with("xxx' here"));
        assert!(shown.contains("characters left out"));
    }

    #[test]
    fn bad_headers_are_usage_errors_that_never_echo_the_value() {
        for flag in ["Authorization Bearer s3cret", "X-Key: s3cret\u{7f}\n", "Bad Name: s3cret"] {
            let err = header_map(&[flag.to_owned()]).unwrap_err();
            assert!(err.is::<UsageError>(), "{err}");
            assert!(!error_text(&err).contains("s3cret"), "{err}");
        }
        let headers = header_map(&["X-Key:  v1 ".to_owned()]).unwrap();
        assert_eq!(headers["x-key"], "v1");
    }
}
