//! Errors of the mock server: configs it refuses (naming the file, line and route) and addresses it will not bind.

use std::fmt;
use std::io;
use std::net::SocketAddr;
use std::path::PathBuf;

use thiserror::Error;

/// Where a config came from, and the line (and column) an error points at when known.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Location {
    /// A file path, or a description such as `the built-in demo config`.
    pub origin: String,
    /// 1-based line, when the error can be placed.
    pub line: Option<usize>,
    /// 1-based column, when the error can be placed.
    pub column: Option<usize>,
}

impl Location {
    pub(crate) fn new(origin: impl Into<String>) -> Self {
        Self { origin: origin.into(), line: None, column: None }
    }

    /// The same origin, placed at the byte `offset` of `text`.
    pub(crate) fn at(&self, text: &str, offset: usize) -> Self {
        let (line, column) = crate::files::line_column(text, offset);
        Self { origin: self.origin.clone(), line: Some(line), column: Some(column) }
    }
}

impl fmt::Display for Location {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.line, self.column) {
            (Some(line), Some(column)) => write!(f, "{}:{line}:{column}", self.origin),
            (Some(line), None) => write!(f, "{}:{line}", self.origin),
            _ => f.write_str(&self.origin),
        }
    }
}

/// Everything that can go wrong loading a mock config or running the mock server.
#[derive(Debug, Error)]
pub enum MockError {
    /// The config file could not be read.
    #[error("cannot read the mock config {}: {source}", path.display())]
    Read {
        /// The file.
        path: PathBuf,
        /// The operating system's error.
        source: io::Error,
    },
    /// The config file is unreadable or larger than a config may be.
    #[error(transparent)]
    Files(#[from] crate::files::FileError),
    /// The text is not TOML, or does not have the shape of a mock config.
    #[error("{location}: {message}")]
    Toml {
        /// Where in the text (line:column).
        location: Location,
        /// What is wrong.
        message: String,
    },
    /// A route's settings are refused.
    #[error("{location}: route '{route}': {message}")]
    Route {
        /// Where in the text (line:column).
        location: Location,
        /// The route's prefix.
        route: String,
        /// What is wrong.
        message: String,
    },
    /// A setting outside any route is refused.
    #[error("{location}: {message}")]
    Config {
        /// Where in the text (line:column).
        location: Location,
        /// What is wrong.
        message: String,
    },
    /// An address off loopback: the demo API never listens on the network.
    #[error(
        "refusing to listen on {0}: the mock server binds only to loopback (127.0.0.0/8 or ::1), so it is never reachable from the network"
    )]
    NotLoopback(SocketAddr),
    /// The address could not be bound (in use, no permission).
    #[error("cannot listen on {addr}: {source}")]
    Bind {
        /// The address.
        addr: SocketAddr,
        /// The operating system's error.
        source: io::Error,
    },
    /// Serving stopped on an I/O error.
    #[error("the mock server stopped with an error: {0}")]
    Serve(io::Error),
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn location_counts_lines_and_columns_from_one() {
        let text = "a = 1\nbb = x\n";
        let at = Location::new("demo.toml").at(text, text.find('x').unwrap());
        assert_eq!((at.line, at.column), (Some(2), Some(6)));
        assert_eq!(at.to_string(), "demo.toml:2:6");
        assert_eq!(Location::new("demo.toml").to_string(), "demo.toml");
    }
}
