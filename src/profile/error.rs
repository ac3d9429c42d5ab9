//! Errors of profiles and secrets, saying where in which file a problem is.

use std::fmt;
use std::io;
use std::path::PathBuf;

use thiserror::Error;

use crate::http::ClientError;

/// A line and column (both counted from 1; columns in characters) in a TOML text.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Position {
    /// The line, from 1.
    pub line: usize,
    /// The column, from 1, in characters.
    pub column: usize,
}

impl Position {
    /// Where byte `offset` of `text` is (an offset past the end means the end).
    pub fn of_offset(text: &str, offset: usize) -> Self {
        let (line, column) = crate::files::line_column(text, offset);
        Self { line, column }
    }
}

impl fmt::Display for Position {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "line {}, column {}", self.line, self.column)
    }
}

/// One step of a [`FieldPath`]: a table key or an array index.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Segment {
    /// A table key.
    Key(String),
    /// An array index, from 0.
    Index(usize),
}

/// Where a setting sits in a profile document, such as `hosts[0].budgets[1].rate`.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct FieldPath(Vec<Segment>);

impl FieldPath {
    /// The document itself.
    pub fn root() -> Self {
        Self::default()
    }

    /// This path extended by a table key.
    pub fn key(&self, key: &str) -> Self {
        let mut path = self.clone();
        path.0.push(Segment::Key(key.to_owned()));
        path
    }

    /// This path extended by an array index.
    pub fn index(&self, index: usize) -> Self {
        let mut path = self.clone();
        path.0.push(Segment::Index(index));
        path
    }

    /// The steps, outermost first.
    pub fn segments(&self) -> &[Segment] {
        &self.0
    }

    /// `prefix` followed by this path.
    pub(crate) fn under(self, prefix: &FieldPath) -> Self {
        let mut path = prefix.clone();
        path.0.extend(self.0);
        path
    }
}

impl fmt::Display for FieldPath {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, segment) in self.0.iter().enumerate() {
            match segment {
                Segment::Key(key) if i == 0 => f.write_str(key)?,
                Segment::Key(key) => write!(f, ".{key}")?,
                Segment::Index(index) => write!(f, "[{index}]")?,
            }
        }
        Ok(())
    }
}

/// A setting a profile refuses, naming its host and field:
/// `host 'demo API': budget 'rate': rate "0/1s": a rate of zero never refills ...`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InvalidSetting {
    /// The host the setting belongs to, if any.
    pub host: Option<String>,
    /// What is wrong, starting with the field it concerns.
    pub message: String,
    /// Where the setting is in the document.
    pub path: FieldPath,
}

impl InvalidSetting {
    pub(crate) fn new(path: FieldPath, message: impl Into<String>) -> Self {
        Self { host: None, message: message.into(), path }
    }

    /// The same problem, inside host `host` whose table is at `prefix`.
    pub(crate) fn in_host(mut self, host: &str, prefix: &FieldPath) -> Self {
        self.host = Some(host.to_owned());
        self.path = self.path.under(prefix);
        self
    }
}

impl fmt::Display for InvalidSetting {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if let Some(host) = &self.host {
            write!(f, "host '{host}': ")?;
        }
        f.write_str(&self.message)
    }
}

impl std::error::Error for InvalidSetting {}

/// Everything that can go wrong with profiles and secrets. Messages never contain a secret value.
#[derive(Debug, Error)]
pub enum ProfileError {
    /// Not TOML, or not the shape of a profile (wrong type, unknown field).
    #[error("{}{}{message}", at(position), host_prefix(host))]
    Syntax {
        /// Where in the text, when known.
        position: Option<Position>,
        /// The host the setting belongs to, when known.
        host: Option<String>,
        /// What is wrong.
        message: String,
    },
    /// Well-formed, but a setting makes no sense.
    #[error("{}{setting}", at(position))]
    Invalid {
        /// The setting and what is wrong with it.
        setting: InvalidSetting,
        /// Where in the text, when known.
        position: Option<Position>,
    },
    /// A problem inside the file at `path`.
    #[error("{}: {error}", path.display())]
    File {
        /// The file.
        path: PathBuf,
        /// The problem.
        error: Box<ProfileError>,
    },
    /// A profile file or directory could not be read or written.
    #[error("cannot {action} {}: {error}", path.display())]
    Io {
        /// What was being done.
        action: &'static str,
        /// The file or directory.
        path: PathBuf,
        /// The operating system's error.
        error: io::Error,
    },
    /// A file is unreadable, or larger than a profile may be.
    #[error(transparent)]
    Files(#[from] crate::files::FileError),
    /// No saved profile has this name.
    #[error("no profile named '{name}' (looked for {})", path.display())]
    NotFound {
        /// The name asked for.
        name: String,
        /// The file looked for.
        path: PathBuf,
    },
    /// A profile of this name exists and was not to be replaced.
    #[error("a profile named '{name}' already exists at {}; import it with overwrite to replace it", path.display())]
    Exists {
        /// The name.
        name: String,
        /// The existing file.
        path: PathBuf,
    },
    /// The file to replace does not parse, so it is kept for its owner to fix.
    #[error("refusing to overwrite {}, which is broken ({error}); fix it or delete it first", path.display())]
    Broken {
        /// The file.
        path: PathBuf,
        /// Why it does not parse.
        error: Box<ProfileError>,
    },
    /// A name with no ASCII letter or digit, so no file name.
    #[error("'{0}' cannot name a profile: a name needs at least one ASCII letter or digit")]
    BadName(String),
    /// A file holds a profile whose name would give another file name.
    #[error("{} holds profile '{found}', whose file would be {expected}; rename the file or the profile", path.display())]
    NameMismatch {
        /// The file.
        path: PathBuf,
        /// The name inside it.
        found: String,
        /// The file name that name gives.
        expected: String,
    },
    /// Two profile names give the same file name.
    #[error(
        "profile '{new}' would replace profile '{existing}' in {} (both names make the same file name); rename one of them",
        path.display()
    )]
    NameClash {
        /// The name being saved.
        new: String,
        /// The name already in that file.
        existing: String,
        /// The file.
        path: PathBuf,
    },
    /// Neither `$RATESCOPE_CONFIG_DIR` nor a platform config directory is available.
    #[error("no configuration directory found for this user; set {} to choose one", super::CONFIG_DIR_ENV)]
    NoConfigDir,
    /// The profile could not be written as TOML.
    #[error("cannot write the profile as TOML: {0}")]
    Serialize(toml::ser::Error),
    /// A secret header the profile declares has no value in the secret store.
    #[error(
        "host '{host}': secret header '{header}' has no value in the secret store (add it under [\"{profile}\".\"{host}\"] in {store})"
    )]
    MissingSecret {
        /// The profile.
        profile: String,
        /// The host.
        host: String,
        /// The header.
        header: String,
        /// The secrets file to add it to.
        store: String,
    },
    /// A secret refers to an environment variable that is not set.
    #[error(
        "host '{host}': secret header '{header}' refers to ${{{variable}}}, but the environment variable {variable} is not set"
    )]
    UnsetVariable {
        /// The host.
        host: String,
        /// The header.
        header: String,
        /// The variable.
        variable: String,
    },
    /// A secret that cannot be sent (its value is never shown).
    #[error("host '{host}': secret header '{header}': {problem}")]
    BadSecret {
        /// The host.
        host: String,
        /// The header.
        header: String,
        /// What is wrong with it (never the value).
        problem: String,
    },
    /// The secrets file can be read or written by other users; nothing is read from it.
    #[error(
        "{} can be read or written by other users (mode {mode:03o}); run `chmod 600 {}` so that only you can",
        path.display(),
        path.display()
    )]
    InsecureSecrets {
        /// The file.
        path: PathBuf,
        /// Its permission bits.
        mode: u32,
    },
    /// The secrets file does not have the shape of one.
    #[error("{}: {}not a secrets file: expected [\"profile\".\"host\"] tables of header = \"value\"", path.display(), at(position))]
    SecretsSyntax {
        /// The file.
        path: PathBuf,
        /// Where in it, when known.
        position: Option<Position>,
    },
    /// An in-memory secret store was asked to save.
    #[error("this secret store lives in memory only and cannot be saved")]
    NoSecretsFile,
    /// A profile whose text would be larger than a profile file may be (it could not be read
    /// back); nothing was written.
    #[error(
        "profile '{name}' would be {size} bytes, more than the {} a profile file may be; nothing was written",
        crate::files::human_bytes(*cap)
    )]
    TooLarge {
        /// The profile.
        name: String,
        /// Its text's length in bytes.
        size: usize,
        /// The most a profile file may hold.
        cap: u64,
    },
    /// The client the profile describes could not be built.
    #[error("could not build the client: {0}")]
    Client(ClientError),
}

// Each message above is complete on its own (the GUI shows `to_string()`), so no variant
// reports a `source()`: printing the chain would repeat it.

impl From<toml::ser::Error> for ProfileError {
    fn from(error: toml::ser::Error) -> Self {
        Self::Serialize(error)
    }
}

impl From<ClientError> for ProfileError {
    fn from(error: ClientError) -> Self {
        Self::Client(error)
    }
}

impl ProfileError {
    pub(crate) fn invalid(setting: InvalidSetting) -> Self {
        Self::Invalid { setting, position: None }
    }

    pub(crate) fn io(action: &'static str, path: impl Into<PathBuf>) -> impl FnOnce(io::Error) -> Self {
        let path = path.into();
        move |error| Self::Io { action, path, error }
    }

    /// The same error, said to be about the file at `path`.
    pub(crate) fn in_file(self, path: impl Into<PathBuf>) -> Self {
        Self::File { path: path.into(), error: Box::new(self) }
    }

    /// Where in its text the problem is, when known.
    pub fn position(&self) -> Option<Position> {
        match self {
            Self::Syntax { position, .. } | Self::Invalid { position, .. } | Self::SecretsSyntax { position, .. } => {
                *position
            }
            Self::File { error, .. } | Self::Broken { error, .. } => error.position(),
            _ => None,
        }
    }
}

impl From<InvalidSetting> for ProfileError {
    fn from(setting: InvalidSetting) -> Self {
        Self::invalid(setting)
    }
}

fn at(position: &Option<Position>) -> String {
    position.map(|position| format!("{position}: ")).unwrap_or_default()
}

fn host_prefix(host: &Option<String>) -> String {
    host.as_ref().map(|host| format!("host '{host}': ")).unwrap_or_default()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nbé = 2\n\nc";
        assert_eq!(Position::of_offset(text, 0), Position { line: 1, column: 1 });
        assert_eq!(Position::of_offset(text, 6), Position { line: 2, column: 1 });
        // "é" is two bytes: the "=" after "bé " is the fourth character.
        assert_eq!(Position::of_offset(text, 10), Position { line: 2, column: 4 });
        assert_eq!(Position::of_offset(text, 8), Position { line: 2, column: 2 }, "inside a character: its start");
        assert_eq!(Position::of_offset(text, 999), Position { line: 4, column: 2 });
    }

    #[test]
    fn field_paths_read_like_toml() {
        let path =
            FieldPath::root().key("budgets").index(1).key("rate").under(&FieldPath::root().key("hosts").index(0));
        assert_eq!(path.to_string(), "hosts[0].budgets[1].rate");
    }
}
