//! A profile's limits as code people run: a Bottleneck module (Node), an aiolimiter module
//! (Python asyncio), a governor function (Rust) or a `golang.org/x/time/rate` function (Go), or
//! the profile's own TOML.
//!
//! [`render`] exports one host (or one of its path overrides, [`Selection`]): each budget that
//! counts requests becomes a limiter, converted by one rule for every target (`plan`): what a
//! target cannot say exactly (a sliding window in a token-bucket library) becomes something never
//! more permissive, and the file says so in a comment. Budgets in other units (tokens, points)
//! are left out and named. The concurrency cap is a semaphore (a Bottleneck `maxConcurrent`).
//!
//! The output is deterministic (the same profile gives the same bytes), names the profile, the
//! host and the ratescope version, and holds no header at all: secret headers are not limits.

mod aiolimiter;
mod bottleneck;
mod go;
mod governor;
mod plan;

use std::fmt;
use std::time::Duration;

use super::error::ProfileError;
use super::model::{HostProfile, Profile, normalize_prefix};
use crate::engine::{LimiterConfig, format_period};

pub use plan::{Plan, PlanError, Stage};

/// What `ratescope profile export --as FORMAT` writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default, clap::ValueEnum)]
pub enum ExportFormat {
    /// The profile's own TOML (comments included when the CLI copies the saved file).
    #[default]
    Toml,
    /// A CommonJS module exporting a Bottleneck limiter (Node).
    Bottleneck,
    /// A Python module defining `limiter`, for `async with limiter:` (aiolimiter, asyncio).
    Aiolimiter,
    /// A Rust function returning governor limiters.
    Governor,
    /// A Go function returning `golang.org/x/time/rate` limiters.
    Go,
}

impl ExportFormat {
    /// Every format, in the order menus list them.
    pub const ALL: [ExportFormat; 5] = [Self::Toml, Self::Bottleneck, Self::Aiolimiter, Self::Governor, Self::Go];

    /// The file name extension for this format, without the dot (`js`, `py`, `rs`, `go`, `toml`).
    pub fn extension(self) -> &'static str {
        match self {
            Self::Toml => "toml",
            Self::Bottleneck => "js",
            Self::Aiolimiter => "py",
            Self::Governor => "rs",
            Self::Go => "go",
        }
    }

    /// The name `--as` takes (`toml`, `bottleneck`, ...).
    pub fn as_str(self) -> &'static str {
        match self {
            Self::Toml => "toml",
            Self::Bottleneck => "bottleneck",
            Self::Aiolimiter => "aiolimiter",
            Self::Governor => "governor",
            Self::Go => "go",
        }
    }

    /// What a menu shows: `Bottleneck (Node)`, `governor (Rust)`, ...
    pub fn label(self) -> &'static str {
        match self {
            Self::Toml => "TOML profile",
            Self::Bottleneck => "Bottleneck (Node)",
            Self::Aiolimiter => "aiolimiter (Python asyncio)",
            Self::Governor => "governor (Rust)",
            Self::Go => "golang.org/x/time/rate (Go)",
        }
    }
}

impl fmt::Display for ExportFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Which limits of a profile a code export covers.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Selection<'a> {
    /// The host, by name; may be left out when the profile has exactly one.
    pub host: Option<&'a str>,
    /// A path override of that host (`/search`), to export its limits instead of the host's.
    pub path: Option<&'a str>,
}

impl<'a> Selection<'a> {
    /// The host named `host` (its own limits, not a path's).
    pub fn host(host: &'a str) -> Self {
        Self { host: Some(host), path: None }
    }
}

/// Why a profile could not be exported; each says what to do instead.
#[derive(Debug, thiserror::Error)]
pub enum ExportError {
    /// The profile does not validate.
    #[error(transparent)]
    Invalid(#[from] ProfileError),
    /// A code export needs a host and the profile has none.
    #[error(
        "profile '{profile}' has no hosts, so it has no limits to export; add one first (ratescope profile import-curl, or the app's editor)"
    )]
    NoHosts {
        /// The profile.
        profile: String,
    },
    /// Several hosts and no `--host`.
    #[error("profile '{profile}' has {} hosts; pick one with --host: {}", hosts.len(), quoted(hosts))]
    HostNeeded {
        /// The profile.
        profile: String,
        /// Its hosts' names.
        hosts: Vec<String>,
    },
    /// No host of that name.
    #[error("profile '{profile}' has no host '{host}'; its hosts: {}", quoted(hosts))]
    UnknownHost {
        /// The profile.
        profile: String,
        /// The name asked for.
        host: String,
        /// Its hosts' names.
        hosts: Vec<String>,
    },
    /// No path override of that prefix.
    #[error("host '{host}' has no path override '{path}'; {}", if paths.is_empty() { "it has none".to_owned() } else { format!("its paths: {}", quoted(paths)) })]
    UnknownPath {
        /// The host.
        host: String,
        /// The prefix asked for.
        path: String,
        /// Its path overrides' prefixes.
        paths: Vec<String>,
    },
    /// `--host`/`--path` with the TOML format, which is always the whole profile.
    #[error(
        "--as toml writes the whole profile; --host and --path pick the limits of a code export (bottleneck, aiolimiter, governor, go)"
    )]
    SelectionForToml,
    /// A budget converts to something no target can count.
    #[error(transparent)]
    Plan(#[from] PlanError),
    /// A budget the chosen target cannot keep, and why.
    #[error("budget '{budget}': {format} {reason}")]
    Target {
        /// The format.
        format: ExportFormat,
        /// The budget.
        budget: String,
        /// Why, and what to do instead.
        reason: String,
    },
}

fn quoted(names: &[String]) -> String {
    names.iter().map(|name| format!("'{name}'")).collect::<Vec<_>>().join(", ")
}

/// The selected limits of `profile` as a file of `format`. TOML is the whole profile in its
/// written layout (`ProfileStore::text` keeps the saved file's comments); the code formats
/// export one host or path ([`Selection`]).
pub fn render(profile: &Profile, selection: Selection<'_>, format: ExportFormat) -> Result<String, ExportError> {
    if format == ExportFormat::Toml {
        if selection != Selection::default() {
            return Err(ExportError::SelectionForToml);
        }
        profile.validate()?;
        return Ok(profile.to_toml()?);
    }
    let export = Export::new(profile, selection)?;
    match format {
        ExportFormat::Toml => Ok(profile.to_toml()?),
        ExportFormat::Bottleneck => bottleneck::render(&export),
        ExportFormat::Aiolimiter => Ok(aiolimiter::render(&export)),
        ExportFormat::Governor => Ok(governor::render(&export)),
        ExportFormat::Go => Ok(go::render(&export)),
    }
}

/// The selected limits, planned, with what the header says about them.
pub(crate) struct Export {
    /// The stages, cap and left-out budgets.
    pub plan: Plan,
    /// The header's lines, without comment markers.
    pub header: Vec<String>,
}

impl Export {
    fn new(profile: &Profile, selection: Selection<'_>) -> Result<Self, ExportError> {
        profile.validate()?;
        let host = pick_host(profile, selection.host)?;
        let (config, path) = match selection.path {
            None => (host.limiter_config()?, None),
            Some(prefix) => {
                let wanted = normalize_prefix(prefix);
                let found = host.paths.iter().position(|path| normalize_prefix(&path.prefix) == wanted);
                let Some(index) = found else {
                    return Err(ExportError::UnknownPath {
                        host: host.name.clone(),
                        path: prefix.to_owned(),
                        paths: host.paths.iter().map(|path| path.prefix.clone()).collect(),
                    });
                };
                let config = host.path_limits()?.swap_remove(index).1;
                (config, Some(normalize_prefix(&host.paths[index].prefix)))
            }
        };
        let mut plan = plan::plan(&config)?;
        // Names are the user's text and go into comments only: no line breaks in them.
        for stage in &mut plan.stages {
            stage.budget = comment_safe(&stage.budget);
            stage.source = comment_safe(&stage.source);
            stage.notes.iter_mut().for_each(|note| *note = comment_safe(note));
        }
        plan.left_out.iter_mut().for_each(|note| *note = comment_safe(note));
        let header = header(profile, host, path.as_deref(), &plan)?;
        Ok(Self { plan, header })
    }
}

fn pick_host<'p>(profile: &'p Profile, name: Option<&str>) -> Result<&'p HostProfile, ExportError> {
    let names = || profile.hosts.iter().map(|host| host.name.clone()).collect::<Vec<_>>();
    match (name, profile.hosts.as_slice()) {
        (_, []) => Err(ExportError::NoHosts { profile: profile.name.clone() }),
        (None, [only]) => Ok(only),
        (None, _) => Err(ExportError::HostNeeded { profile: profile.name.clone(), hosts: names() }),
        (Some(name), hosts) => hosts.iter().find(|host| host.name == name).ok_or_else(|| ExportError::UnknownHost {
            profile: profile.name.clone(),
            host: name.to_owned(),
            hosts: names(),
        }),
    }
}

/// `text` safe inside a line comment of any target: control characters and line separators
/// (a name with a newline would end the comment and start code) become `?`.
pub(crate) fn comment_safe(text: &str) -> String {
    text.chars().map(|c| if c.is_control() || matches!(c, '\u{2028}' | '\u{2029}') { '?' } else { c }).collect()
}

/// The header every target writes as comments: where the limits come from, each budget and how
/// it was converted, the cap, and what was left out.
fn header(profile: &Profile, host: &HostProfile, path: Option<&str>, plan: &Plan) -> Result<Vec<String>, ExportError> {
    let mut lines = Vec::new();
    let whose = match path {
        Some(path) => format!("requests under '{path}' of host '{}'", host.name),
        None => format!("host '{}'", host.name),
    };
    lines.push(format!("Rate limits of {whose} ({}), profile '{}'.", host.base_url, profile.name));
    lines.push(format!(
        "Exported by ratescope {}; export again after changing the profile rather than editing this file.",
        env!("CARGO_PKG_VERSION")
    ));
    lines.push(String::new());
    if plan.stages.is_empty() && plan.concurrency.is_none() {
        lines.push(
            "This has no request limits in the profile: the limiter below lets every request through at once."
                .to_owned(),
        );
    }
    if !plan.stages.is_empty() {
        let how = if plan.stages.len() == 1 {
            "Its budget"
        } else {
            "Its budgets, in the order each request waits on them (one request at a time)"
        };
        lines.push(format!("{how}:"));
        for stage in &plan.stages {
            lines.push(format!("  '{}' ({}): {}.", stage.budget, stage.source, stage.describe()));
            for note in &stage.notes {
                lines.push(format!("    Conservative: {note}."));
            }
        }
    }
    if let Some(limit) = plan.concurrency {
        lines.push(format!("At most {limit} requests in flight (a request holds its place while it waits)."));
    }
    for note in &plan.left_out {
        lines.push(format!("Left out: {note}."));
    }
    if path.is_none() && !host.paths.is_empty() {
        let paths = host.path_limits()?;
        for (key, limits) in paths {
            let prefix = key.path_prefix.unwrap_or_default();
            lines.push(format!(
                "Left out: requests under '{prefix}' have limits of their own ({}); use this limiter only for requests \
                 outside it, and export that path's with --path {prefix}.",
                describe_limits(&limits)
            ));
        }
    }
    Ok(lines.into_iter().map(|line| comment_safe(&line)).collect())
}

fn describe_limits(config: &LimiterConfig) -> String {
    let text = config.describe();
    if text.is_empty() { "no limits".to_owned() } else { text }
}

/// `0.200000001` seconds: `nanos` as a decimal a float parser reads, rounded up.
pub(crate) fn seconds_literal(nanos: u128) -> String {
    let whole = nanos / 1_000_000_000;
    let frac = nanos % 1_000_000_000;
    if frac == 0 {
        return format!("{whole}.0");
    }
    let digits = format!("{frac:09}");
    format!("{whole}.{}", digits.trim_end_matches('0'))
}

/// An interval lengthened so that a target computing with 64-bit floats (Python, Go) can only
/// round it slower: one part in 2^32 (far beyond a float's 2^-52), plus a nanosecond.
pub(crate) fn float_safe(interval_ns: u64) -> u64 {
    interval_ns.saturating_add(interval_ns >> 32).saturating_add(1)
}

/// `200ms`, for comments.
pub(crate) fn period(nanos: u64) -> String {
    format_period(Duration::from_nanos(nanos))
}

/// One comment line in a target's syntax (`marker` is `//` or `#`): `// text`, or `//` alone
/// for an empty line.
fn comment_line(out: &mut String, marker: &str, line: &str) {
    out.push_str(marker);
    if !line.is_empty() {
        out.push(' ');
        out.push_str(line);
    }
    out.push('\n');
}

#[cfg(test)]
mod tests;
