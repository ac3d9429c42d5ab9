//! Replay: recorded traffic (a HAR file, JSON lines, an access log) run in virtual time
//! through the limiter against a model of the server, to see what each request would have met.
//!
//! Three steps, each its own module:
//!
//! 1. **Read** a recording ([`read`]): the format is told by the content ([`Format::detect`]),
//!    one parser per format (`har`, `lines`, `access_log`) turns it into
//!    [`Recorded`] requests. A bad entry or line is counted and named ([`Problems`]), never
//!    fatal unless nothing is left; URLs that are not `http`/`https` (`data:`, `blob:`, `ws:`,
//!    browser extensions) are skipped and counted by scheme.
//! 2. **Pick a host** ([`Parsed::select`]): a page load hits CDNs and trackers as well as the
//!    API, but the limiter is per host and the server model is one API, so one host's requests
//!    are replayed: the one asked for, or else the one with the most requests.
//! 3. **Replay** ([`replay`]): each request arrives at its recorded offset (from the first
//!    request of the host), through the same [`simulate`](crate::sim::simulate) a burst runs in:
//!    the same limiter, retry policy and server model, on the paused clock.
//!
//! Offsets are relative to the earliest request, whatever the order in the file: browsers write
//! HAR entries in the order requests were made, or finished, or by page.

mod access_log;
mod har;
mod hosts;
mod lines;
mod run;

use std::collections::BTreeMap;
use std::fmt;
use std::time::Duration;

use http::Method;
use serde::Serialize;
use thiserror::Error;
use url::Url;

use super::MAX_SIM_REQUESTS;

pub use hosts::{HostCount, Recording};
pub use run::{Fate, Replay, ReplaySettings, ReplaySummary, Replayed, replay};

/// The largest recording read: a HAR file keeps response bodies, so it is far larger than its
/// requests; past this, save the HAR without content, or cut the log.
pub const MAX_RECORDING_BYTES: u64 = 256 << 20;

/// The most requests read from one file, over all its hosts: four times what one replay runs,
/// so that one host of a busy page still fits.
pub const MAX_RECORDED: usize = 4 * MAX_SIM_REQUESTS;

/// How many problems are kept word for word; the rest are only counted.
const KEPT_PROBLEMS: usize = 5;

/// One recorded request.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Recorded {
    /// When it started, from the earliest request of the recording (after [`Parsed::select`],
    /// of its host).
    pub offset: Duration,
    /// Its method.
    pub method: Method,
    /// Its URL, `http` or `https`, as recorded (query included).
    pub url: Url,
}

/// A recording's format.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Format {
    /// HAR 1.2, as browsers' developer tools save it: `log.entries[]`, each with
    /// `startedDateTime` (RFC 3339), `request.method` and `request.url`.
    Har,
    /// One JSON object a line: `{"t": SECONDS, "method": "GET", "url": "https://…"}`; `method`
    /// is optional (GET), `t` has any origin, a relative `url` is joined to the base URL.
    Jsonl,
    /// An access log in the common or combined format (nginx's and Apache's default):
    /// `host ident user [10/Oct/2000:13:55:36 -0700] "GET /path HTTP/1.1" status bytes …`; its
    /// paths are joined to the base URL.
    AccessLog,
}

impl Format {
    /// The format of `bytes`, told by their content: a JSON document with a `log` is HAR, JSON
    /// objects one a line are JSON lines, a line with `[date] "request"` an access log.
    pub fn detect(bytes: &[u8]) -> Option<Self> {
        let text = bytes.strip_prefix(b"\xef\xbb\xbf").unwrap_or(bytes);
        let first = text
            .split(|&byte| byte == b'\n')
            .map(|line| String::from_utf8_lossy(line).trim().to_owned())
            .find(|line| !line.is_empty() && !line.starts_with('#'))?;
        if first.starts_with('{') {
            // A whole JSON object on the first line: JSON lines, unless it is a one-line HAR.
            return Some(match serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(&first) {
                Ok(object) if object.contains_key("log") => Self::Har,
                Ok(_) => Self::Jsonl,
                Err(_) => Self::Har,
            });
        }
        access_log::looks_like(&first).then_some(Self::AccessLog)
    }

    /// Every format, in the order of [`name`](Self::name)s a command line offers.
    pub const ALL: [Self; 3] = [Self::Har, Self::Jsonl, Self::AccessLog];

    /// How the format is named on the command line and in JSON.
    pub fn name(self) -> &'static str {
        match self {
            Self::Har => "har",
            Self::Jsonl => "jsonl",
            Self::AccessLog => "access-log",
        }
    }
}

impl fmt::Display for Format {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Self::Har => "HAR",
            Self::Jsonl => "JSON lines",
            Self::AccessLog => "access log",
        })
    }
}

/// Where in a file a problem is: an entry of a HAR file or a line of the others, from 1.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Place {
    /// `log.entries[n - 1]` of a HAR file.
    Entry(usize),
    /// Line `n`.
    Line(usize),
}

impl fmt::Display for Place {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Self::Entry(n) => write!(f, "entry {n}"),
            Self::Line(n) => write!(f, "line {n}"),
        }
    }
}

/// Entries or lines that could not be read: how many, and the first few in words.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Problems {
    /// How many there were.
    pub count: usize,
    /// The first few, each naming its place: `entry 17: startedDateTime '…' is not a date`.
    pub first: Vec<String>,
}

impl Problems {
    fn add(&mut self, place: Place, problem: impl fmt::Display) {
        self.count += 1;
        if self.first.len() < KEPT_PROBLEMS {
            self.first.push(format!("{place}: {problem}"));
        }
    }
}

impl fmt::Display for Problems {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (count, shown) = (self.count, self.first.join("; "));
        match count - self.first.len().min(count) {
            0 => write!(f, "{shown}"),
            more => write!(f, "{shown}; and {more} more"),
        }
    }
}

/// What reading a recording gave, over all its hosts.
#[derive(Debug, Clone)]
pub struct Parsed {
    /// Its format.
    pub format: Format,
    /// Its `http` and `https` requests, ordered by start, offsets from the earliest.
    pub requests: Vec<Recorded>,
    /// Entries or lines that could not be read.
    pub problems: Problems,
    /// Requests to URLs that cannot be replayed (`data`, `blob`, `ws`, `chrome-extension`, …),
    /// counted by scheme.
    pub skipped: BTreeMap<String, usize>,
    /// Relative URLs (access logs, JSON lines) joined to the base URL.
    pub joined_to_base: usize,
}

/// How to read a recording.
#[derive(Debug, Clone)]
pub struct ReadOptions {
    /// The format; `None` tells it by the content ([`Format::detect`]).
    pub format: Option<Format>,
    /// What relative URLs (an access log's paths, a JSON line's `"url": "/items"`) are joined
    /// to: its scheme, host and port.
    pub base: Url,
}

/// Why a recording cannot be replayed.
#[derive(Debug, Error)]
pub enum RecordingError {
    /// The content is none of the formats.
    #[error(
        "this is not a recording ratescope reads: not a HAR file (a JSON document with log.entries), JSON lines ({{\"t\": SECONDS, \"method\": \"GET\", \"url\": \"https://…\"}} a line) or an access log in the common or combined format; its first line: {first_line}"
    )]
    NotRecognised {
        /// The first line, cut to 120 characters (or that the file is empty).
        first_line: String,
    },
    /// A HAR file whose document cannot be read at all.
    #[error("not a HAR 1.2 file: {0}")]
    Har(String),
    /// Nothing could be replayed.
    #[error("nothing to replay in this {format} file{}", nothing_left(problems, skipped))]
    NothingLeft {
        /// The format read.
        format: Format,
        /// Entries or lines that could not be read.
        problems: Problems,
        /// Requests skipped by scheme.
        skipped: BTreeMap<String, usize>,
    },
    /// More requests than a file may hold.
    #[error(
        "more than {MAX_RECORDED} requests in this file: cut it (such as head -n 250000 for a log, or one page's requests for a HAR file)"
    )]
    TooMany,
    /// `--host` names a host the recording has no request to.
    #[error("no request in the recording goes to {host}; its hosts: {}", hosts::describe(hosts))]
    NoSuchHost {
        /// The host asked for.
        host: String,
        /// The recording's hosts, the busiest first.
        hosts: Vec<HostCount>,
    },
    /// The chosen host has more requests than one replay runs.
    #[error("{host} has {count} requests; a replay runs at most {MAX_SIM_REQUESTS}: cut the recording to a part of it")]
    HostTooLarge {
        /// The host.
        host: String,
        /// Its requests.
        count: usize,
    },
}

fn nothing_left(problems: &Problems, skipped: &BTreeMap<String, usize>) -> String {
    let mut parts = Vec::new();
    if problems.count > 0 {
        parts.push(format!("{} could not be read ({problems})", problems.count));
    }
    if !skipped.is_empty() {
        let schemes: Vec<String> = skipped.iter().map(|(scheme, n)| format!("{n} {scheme}:")).collect();
        parts.push(format!("skipped, not http or https: {}", schemes.join(", ")));
    }
    if parts.is_empty() { String::new() } else { format!(": {}", parts.join("; ")) }
}

/// A request as a parser found it, before the recording's order and origin are known.
#[derive(Debug)]
struct Found {
    /// Its start, in nanoseconds from any origin common to the file.
    at: i128,
    method: Method,
    url: Url,
}

/// What a parser gathers as it reads.
#[derive(Debug, Default)]
struct Gathered {
    found: Vec<Found>,
    problems: Problems,
    skipped: BTreeMap<String, usize>,
    joined_to_base: usize,
}

impl Gathered {
    /// Keeps a request to `url` (a parsed URL, absolute), or counts it skipped by its scheme.
    fn keep(&mut self, at: i128, method: Method, url: Url) -> Result<(), RecordingError> {
        if !matches!(url.scheme(), "http" | "https") {
            *self.skipped.entry(url.scheme().to_owned()).or_default() += 1;
            return Ok(());
        }
        if self.found.len() >= MAX_RECORDED {
            return Err(RecordingError::TooMany);
        }
        self.found.push(Found { at, method, url });
        Ok(())
    }

    fn finish(self, format: Format) -> Result<Parsed, RecordingError> {
        let Self { mut found, problems, skipped, joined_to_base } = self;
        if found.is_empty() {
            return Err(RecordingError::NothingLeft { format, problems, skipped });
        }
        // Stable: requests recorded at the same instant keep the file's order.
        found.sort_by_key(|request| request.at);
        let origin = found.first().map_or(0, |request| request.at);
        let requests = found
            .into_iter()
            .map(|request| Recorded { offset: offset(request.at - origin), method: request.method, url: request.url })
            .collect();
        Ok(Parsed { format, requests, problems, skipped, joined_to_base })
    }
}

/// A non-negative span in nanoseconds as a `Duration` (saturating far past any recording).
fn offset(nanos: i128) -> Duration {
    Duration::from_nanos(u64::try_from(nanos.max(0)).unwrap_or(u64::MAX))
}

/// Reads a recording from `bytes` (the whole file; see [`MAX_RECORDING_BYTES`]).
pub fn read(bytes: &[u8], options: &ReadOptions) -> Result<Parsed, RecordingError> {
    let format = match options.format {
        Some(format) => format,
        None => Format::detect(bytes).ok_or_else(|| RecordingError::NotRecognised { first_line: first_line(bytes) })?,
    };
    let gathered = match format {
        Format::Har => har::parse(bytes)?,
        Format::Jsonl => lines::parse(bytes, &options.base)?,
        Format::AccessLog => access_log::parse(bytes, &options.base)?,
    };
    gathered.finish(format)
}

/// The first non-blank line of `bytes`, cut to 120 characters, for an error.
fn first_line(bytes: &[u8]) -> String {
    let line = bytes.split(|&byte| byte == b'\n').map(String::from_utf8_lossy).find(|line| !line.trim().is_empty());
    match line {
        Some(line) => clip(line.trim(), 120),
        None => "none, the file is empty".to_owned(),
    }
}

/// `text` cut to `max` characters, with an ellipsis when cut; control characters shown escaped.
fn clip(text: &str, max: usize) -> String {
    let mut shown: String = text.chars().take(max).flat_map(char::escape_debug).collect();
    if text.chars().nth(max).is_some() {
        shown.push('…');
    }
    shown
}

/// A URL as written in a recording: absolute, or a path joined to `base`'s origin (scheme,
/// host and port: `//other/x` stays a path on the base's host, it never names another).
fn url_of(text: &str, base: &Url, gathered: &mut Gathered) -> Result<Url, String> {
    if text.starts_with('/') {
        let joined = format!("{}{text}", base.origin().ascii_serialization());
        gathered.joined_to_base += 1;
        return Url::parse(&joined).map_err(|err| format!("'{}' is not a path: {err}", clip(text, 120)));
    }
    Url::parse(text).map_err(|err| match err {
        url::ParseError::RelativeUrlWithoutBase => {
            format!("'{}' is neither a URL nor a path starting with /", clip(text, 120))
        }
        err => format!("'{}' is not a URL: {err}", clip(text, 120)),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_format_is_told_by_the_content() {
        assert_eq!(Format::detect(b"{\n  \"log\": {\"entries\": []}\n}"), Some(Format::Har));
        assert_eq!(Format::detect(b"\xef\xbb\xbf{\"log\": {\"entries\": []}}"), Some(Format::Har));
        assert_eq!(Format::detect(b"\n{\"t\": 0, \"url\": \"http://h/\"}\n"), Some(Format::Jsonl));
        let line = br#"127.0.0.1 - - [10/Oct/2000:13:55:36 -0700] "GET /a HTTP/1.0" 200 2326"#;
        assert_eq!(Format::detect(line), Some(Format::AccessLog));
        assert_eq!(Format::detect(b"GET /a\n"), None);
        assert_eq!(Format::detect(b""), None);
    }

    #[test]
    fn problems_keep_the_first_few_and_count_the_rest() {
        let mut problems = Problems::default();
        for n in 1..=8 {
            problems.add(Place::Line(n), "bad");
        }
        assert_eq!(problems.count, 8);
        assert_eq!(problems.to_string(), "line 1: bad; line 2: bad; line 3: bad; line 4: bad; line 5: bad; and 3 more");
    }

    #[test]
    fn a_path_never_names_another_host() {
        let base: Url = "https://api.example.com:8443/v1/".parse().unwrap();
        let mut gathered = Gathered::default();
        let url = url_of("//evil.example/x?y=1", &base, &mut gathered).unwrap();
        assert_eq!(url.host_str(), Some("api.example.com"));
        assert_eq!(url.port(), Some(8443));
        assert_eq!(url.path(), "//evil.example/x");
        assert_eq!(gathered.joined_to_base, 1);
        assert!(url_of("items", &base, &mut gathered).unwrap_err().contains("neither a URL nor a path"));
    }
}
