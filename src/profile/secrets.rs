//! Secret header values, kept apart from profiles in `<config dir>/secrets.toml` (mode 0600).
//!
//! ```toml
//! # profile -> host -> header name -> value
//! [demo."demo API"]
//! x-api-key = "abc123"
//! authorization = "Bearer ${DEMO_TOKEN}"   # resolved from the environment when a client is built
//! ```
//!
//! A value never appears in `Debug` output, error messages, logs, `ratescope profile show` or an
//! exported profile. `${NAME}` anywhere in a value is replaced by the environment variable `NAME`
//! (letters, digits and `_`) when a client is built; an unset variable is an error naming it.

use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use http::{HeaderMap, HeaderName, HeaderValue};

use super::config_dir;
use super::error::{Position, ProfileError};
use super::model::{HostProfile, Profile};
use crate::files::{self, WriteOptions};

/// A secret value: `Debug` shows `***`.
#[derive(Clone, PartialEq, Eq)]
struct Secret(String);

impl fmt::Debug for Secret {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("***")
    }
}

/// profile -> host -> lower-case header name -> value.
type Table = BTreeMap<String, BTreeMap<String, BTreeMap<String, Secret>>>;

/// What the store holds for one secret header, without the value.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SecretStatus {
    /// No value: a client cannot be built.
    Missing,
    /// A value written in the store.
    Stored,
    /// A value taken from these environment variables when a client is built.
    FromEnv(Vec<String>),
}

/// What [`SecretStore::file_import`] did, header by header (lower-case names).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Filed {
    /// Headers that had no value and now have one.
    pub added: Vec<String>,
    /// Headers that held the same value already.
    pub unchanged: Vec<String>,
    /// Headers whose different value was replaced (asked for).
    pub replaced: Vec<String>,
    /// Headers whose different value was kept (replacing was not asked for).
    pub kept: Vec<String>,
}

/// Secret header values of every profile, and the file they live in.
#[derive(Clone, Default)]
pub struct SecretStore {
    path: Option<PathBuf>,
    secrets: Table,
}

impl fmt::Debug for SecretStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // Names only; `Secret` prints `***` for every value.
        f.debug_struct("SecretStore").field("path", &self.path).field("secrets", &self.secrets).finish()
    }
}

impl SecretStore {
    /// `secrets.toml` in the user's config directory.
    pub fn default_location() -> Result<PathBuf, ProfileError> {
        Ok(config_dir()?.join("secrets.toml"))
    }

    /// The store at [`default_location`](Self::default_location).
    pub fn open_default() -> Result<Self, ProfileError> {
        Self::open(&Self::default_location()?)
    }

    /// A store that lives in memory only.
    pub fn in_memory() -> Self {
        Self::default()
    }

    /// The store in the file at `path`; empty when the file does not exist yet. Refuses a file
    /// that other users may read or write.
    pub fn open(path: &Path) -> Result<Self, ProfileError> {
        let bytes = match fs::read(path) {
            Ok(bytes) => bytes,
            Err(err) if err.kind() == io::ErrorKind::NotFound => {
                return Ok(Self { path: Some(path.to_owned()), secrets: Table::new() });
            }
            Err(err) => return Err(ProfileError::io("read", path)(err)),
        };
        check_private(path)?;
        // Parse errors say where, never what: the offending text may be a secret.
        let syntax = |position| ProfileError::SecretsSyntax { path: path.to_owned(), position };
        let text = std::str::from_utf8(&bytes).map_err(|_| syntax(None))?;
        let raw: BTreeMap<String, BTreeMap<String, BTreeMap<String, String>>> =
            toml::from_str(text).map_err(|err| syntax(err.span().map(|span| Position::of_offset(text, span.start))))?;
        let secrets = raw
            .into_iter()
            .map(|(profile, hosts)| {
                let hosts = hosts
                    .into_iter()
                    .map(|(host, headers)| {
                        let headers = headers
                            .into_iter()
                            .map(|(header, value)| (header.trim().to_ascii_lowercase(), Secret(value)))
                            .collect();
                        (host, headers)
                    })
                    .collect();
                (profile, hosts)
            })
            .collect();
        Ok(Self { path: Some(path.to_owned()), secrets })
    }

    /// The file this store is saved to (`None` in memory).
    pub fn path(&self) -> Option<&Path> {
        self.path.as_deref()
    }

    /// Writes the store to its file atomically, readable by its owner only.
    pub fn save(&self) -> Result<(), ProfileError> {
        let path = self.path.as_deref().ok_or(ProfileError::NoSecretsFile)?;
        let raw: BTreeMap<&str, BTreeMap<&str, BTreeMap<&str, &str>>> = self
            .secrets
            .iter()
            .map(|(profile, hosts)| {
                let hosts = hosts
                    .iter()
                    .map(|(host, headers)| {
                        (host.as_str(), headers.iter().map(|(name, value)| (name.as_str(), value.0.as_str())).collect())
                    })
                    .collect();
                (profile.as_str(), hosts)
            })
            .collect();
        let text = toml::to_string(&raw)?;
        if let Some(dir) = path.parent().filter(|dir| !dir.as_os_str().is_empty()) {
            create_private_dir(dir)?;
        }
        files::write_bytes(path, text.as_bytes(), WriteOptions { private: true })?;
        Ok(())
    }

    /// Takes `profile`'s secrets from `edited` (the app's copy, edited since the file was read):
    /// each secret header of each of its hosts, as `edited` holds it, and nothing else of that
    /// profile, so a deleted host's or header's secret goes with it. Other profiles' secrets stay
    /// as this store holds them: they follow their own profile's save. Returns whether anything
    /// changed.
    pub fn adopt_profile(&mut self, edited: &SecretStore, profile: &Profile) -> bool {
        let mut adopted: BTreeMap<String, BTreeMap<String, Secret>> = BTreeMap::new();
        for host in &profile.hosts {
            for header in &host.secret_headers {
                if let Some(secret) = edited.raw(&profile.name, &host.name, header) {
                    adopted
                        .entry(host.name.clone())
                        .or_default()
                        .insert(header.trim().to_ascii_lowercase(), secret.clone());
                }
            }
        }
        let before = self.secrets.get(&profile.name);
        if before == Some(&adopted) || (before.is_none() && adopted.is_empty()) {
            return false;
        }
        if adopted.is_empty() {
            self.secrets.remove(&profile.name);
        } else {
            self.secrets.insert(profile.name.clone(), adopted);
        }
        true
    }

    /// Sets the value of `header` for `host` of `profile` (`${VAR}` references allowed).
    pub fn set(&mut self, profile: &str, host: &str, header: &str, value: impl Into<String>) {
        self.secrets
            .entry(profile.to_owned())
            .or_default()
            .entry(host.to_owned())
            .or_default()
            .insert(header.trim().to_ascii_lowercase(), Secret(value.into()));
    }

    /// Files an import's secret headers (`(name, value)`) under `host` of `profile`. A stored
    /// value is never overwritten without the caller saying so: a header that already holds a
    /// different value keeps it unless `replace`, and the result names it either way. An empty
    /// value is no secret and is skipped.
    pub fn file_import(&mut self, profile: &str, host: &str, secrets: &[(String, String)], replace: bool) -> Filed {
        let mut filed = Filed::default();
        for (header, value) in secrets {
            if value.trim().is_empty() {
                continue;
            }
            let name = header.trim().to_ascii_lowercase();
            let list = match self.raw(profile, host, &name) {
                None => &mut filed.added,
                Some(known) if known.0 == *value => {
                    filed.unchanged.push(name);
                    continue;
                }
                Some(_) if replace => &mut filed.replaced,
                Some(_) => {
                    filed.kept.push(name);
                    continue;
                }
            };
            list.push(name.clone());
            self.set(profile, host, &name, value.clone());
        }
        filed
    }

    /// Removes one value; returns whether there was one.
    pub fn remove(&mut self, profile: &str, host: &str, header: &str) -> bool {
        let Some(hosts) = self.secrets.get_mut(profile) else { return false };
        let Some(headers) = hosts.get_mut(host) else { return false };
        let removed = headers.remove(&header.trim().to_ascii_lowercase()).is_some();
        if headers.is_empty() {
            hosts.remove(host);
        }
        if hosts.is_empty() {
            self.secrets.remove(profile);
        }
        removed
    }

    /// Removes every value of `profile`; returns whether there were any.
    pub fn remove_profile(&mut self, profile: &str) -> bool {
        self.secrets.remove(profile).is_some()
    }

    /// What is stored for one header, without its value.
    pub fn status(&self, profile: &str, host: &str, header: &str) -> SecretStatus {
        match self.raw(profile, host, header) {
            None => SecretStatus::Missing,
            Some(secret) => {
                let variables = references(&secret.0);
                if variables.is_empty() { SecretStatus::Stored } else { SecretStatus::FromEnv(variables) }
            }
        }
    }

    /// The secret headers of `host` (a host of `profile`), resolved against the process environment.
    pub fn headers_for(&self, profile: &str, host: &HostProfile) -> Result<HeaderMap, ProfileError> {
        self.headers_for_with_env(profile, host, |name| std::env::var(name).ok())
    }

    /// As [`headers_for`](Self::headers_for), with `env` answering `${VAR}` references.
    /// Every value is marked sensitive (`Debug` hides it; HTTP/2 never indexes it).
    pub fn headers_for_with_env(
        &self,
        profile: &str,
        host: &HostProfile,
        env: impl Fn(&str) -> Option<String>,
    ) -> Result<HeaderMap, ProfileError> {
        crate::http::header_cap::check_header_count(host.secret_headers.len()).map_err(|err| {
            ProfileError::BadSecret {
                host: host.name.clone(),
                header: "secret_headers".into(),
                problem: err.to_string(),
            }
        })?;
        let mut headers = HeaderMap::new();
        for name in &host.secret_headers {
            let header = name.trim().to_ascii_lowercase();
            let bad = |problem: &str| ProfileError::BadSecret {
                host: host.name.clone(),
                header: header.clone(),
                problem: problem.to_owned(),
            };
            let Some(secret) = self.raw(profile, &host.name, &header) else {
                return Err(ProfileError::MissingSecret {
                    profile: profile.to_owned(),
                    host: host.name.clone(),
                    header,
                    store: self
                        .path
                        .as_ref()
                        .map_or_else(|| "the secret store".to_owned(), |p| p.display().to_string()),
                });
            };
            let value = resolve(&secret.0, &env).map_err(|err| match err {
                Unresolved::Unset(variable) => {
                    ProfileError::UnsetVariable { host: host.name.clone(), header: header.clone(), variable }
                }
                Unresolved::Malformed => bad("a '${' has no matching '}' or no variable name (write ${NAME})"),
            })?;
            let name = HeaderName::from_bytes(header.as_bytes()).map_err(|_| bad("not a valid header name"))?;
            let mut value = HeaderValue::from_str(&value)
                .map_err(|_| bad("the value cannot be sent in a header (control characters or non-ASCII text)"))?;
            value.set_sensitive(true);
            headers.insert(name, value);
        }
        Ok(headers)
    }

    /// The password of `profile`'s shared Redis (`[PROFILE.shared] redis-password = "..."`,
    /// `${VAR}` resolved), if the store holds one.
    pub fn redis_password(&self, profile: &str) -> Result<Option<String>, ProfileError> {
        let (host, name) = ("shared", "redis-password");
        let Some(secret) = self.raw(profile, host, name) else { return Ok(None) };
        let value = resolve(&secret.0, &|variable| std::env::var(variable).ok()).map_err(|err| match err {
            Unresolved::Unset(variable) => {
                ProfileError::UnsetVariable { host: host.into(), header: name.into(), variable }
            }
            Unresolved::Malformed => ProfileError::BadSecret {
                host: host.into(),
                header: name.into(),
                problem: "a '${' has no matching '}' or no variable name (write ${NAME})".into(),
            },
        })?;
        Ok(Some(value))
    }

    fn raw(&self, profile: &str, host: &str, header: &str) -> Option<&Secret> {
        self.secrets.get(profile)?.get(host)?.get(&header.trim().to_ascii_lowercase())
    }
}

/// Why `${...}` could not be replaced.
#[derive(Debug, PartialEq, Eq)]
pub(crate) enum Unresolved {
    Unset(String),
    Malformed,
}

/// `raw` with every `${NAME}` replaced by `env(NAME)`; replaced text is not scanned again.
pub(crate) fn resolve(raw: &str, env: &impl Fn(&str) -> Option<String>) -> Result<String, Unresolved> {
    let mut out = String::with_capacity(raw.len());
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        out.push_str(&rest[..start]);
        let after = &rest[start + 2..];
        let end = after.find('}').ok_or(Unresolved::Malformed)?;
        let name = &after[..end];
        if !is_variable_name(name) {
            return Err(Unresolved::Malformed);
        }
        out.push_str(&env(name).ok_or_else(|| Unresolved::Unset(name.to_owned()))?);
        rest = &after[end + 1..];
    }
    out.push_str(rest);
    Ok(out)
}

/// The variables a value refers to (well-formed references only).
fn references(raw: &str) -> Vec<String> {
    let mut names = Vec::new();
    let mut rest = raw;
    while let Some(start) = rest.find("${") {
        let after = &rest[start + 2..];
        let Some(end) = after.find('}') else { break };
        if is_variable_name(&after[..end]) {
            names.push(after[..end].to_owned());
        }
        rest = &after[end + 1..];
    }
    names
}

fn is_variable_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic() || c == '_')
        && name.chars().all(|c| c.is_ascii_alphanumeric() || c == '_')
}

/// Refuses a secrets file others may read or write.
fn check_private(path: &Path) -> Result<(), ProfileError> {
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = fs::metadata(path).map_err(ProfileError::io("read", path))?.permissions().mode() & 0o777;
        if mode & 0o077 != 0 {
            return Err(ProfileError::InsecureSecrets { path: path.to_owned(), mode });
        }
    }
    #[cfg(not(unix))]
    let _ = path;
    Ok(())
}

/// Creates `dir` (and parents) if missing; a directory created here is private to its owner.
fn create_private_dir(dir: &Path) -> Result<(), ProfileError> {
    if dir.is_dir() {
        return Ok(());
    }
    let mut builder = fs::DirBuilder::new();
    builder.recursive(true);
    #[cfg(unix)]
    {
        use std::os::unix::fs::DirBuilderExt;
        builder.mode(0o700);
    }
    builder.create(dir).map_err(ProfileError::io("create", dir))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn env(name: &str) -> Option<String> {
        (name == "TOKEN").then(|| "t0k3n".to_owned())
    }

    /// Secrets follow their host: a profile's save writes its own hosts' secret headers as
    /// edited, drops those of deleted hosts and headers, and leaves other profiles alone.
    #[test]
    fn a_profiles_save_takes_its_hosts_secrets_and_nothing_else() {
        let mut profile = Profile::new("p");
        let mut kept = HostProfile::new("kept", "https://a.example");
        kept.secret_headers = vec!["authorization".into()];
        profile.hosts.push(kept);
        let mut on_disk = SecretStore::in_memory();
        on_disk.set("p", "kept", "authorization", "old");
        on_disk.set("p", "deleted host", "x-api-key", "gone-with-its-host");
        on_disk.set("other", "h", "authorization", "other-profile");
        let mut edited = on_disk.clone();
        edited.set("p", "kept", "authorization", "new");
        edited.set("p", "kept", "x-dropped-header", "not a secret header of the host any more");
        edited.set("other", "h", "authorization", "edited but not saved");
        assert!(on_disk.adopt_profile(&edited, &profile));
        assert_eq!(on_disk.raw("p", "kept", "authorization").map(|s| s.0.as_str()), Some("new"));
        assert!(on_disk.raw("p", "deleted host", "x-api-key").is_none(), "a deleted host's secret goes");
        assert!(on_disk.raw("p", "kept", "x-dropped-header").is_none());
        assert_eq!(on_disk.raw("other", "h", "authorization").map(|s| s.0.as_str()), Some("other-profile"));
        assert!(!on_disk.adopt_profile(&edited, &profile), "nothing changes the second time");
        profile.hosts.clear();
        assert!(on_disk.adopt_profile(&edited, &profile));
        assert!(!on_disk.secrets.contains_key("p"), "a profile without secret headers keeps none");
    }

    #[test]
    fn references_are_replaced_once_and_unset_ones_are_named() {
        assert_eq!(resolve("Bearer ${TOKEN}", &env).unwrap(), "Bearer t0k3n");
        assert_eq!(resolve("${TOKEN}:${TOKEN}", &env).unwrap(), "t0k3n:t0k3n");
        assert_eq!(resolve("plain $HOME {x}", &env).unwrap(), "plain $HOME {x}");
        assert_eq!(resolve("${NOPE}", &env), Err(Unresolved::Unset("NOPE".into())));
        assert_eq!(resolve("${TOKEN", &env), Err(Unresolved::Malformed));
        assert_eq!(resolve("${1X}", &env), Err(Unresolved::Malformed));
        let sneaky = |_: &str| Some("${TOKEN}".to_owned());
        assert_eq!(resolve("${A}", &sneaky).unwrap(), "${TOKEN}", "a value from the environment is not expanded again");
        assert_eq!(references("a ${A} b ${B_2} ${bad-name}"), ["A", "B_2"]);
    }

    #[test]
    fn an_import_never_overwrites_a_stored_value_unless_asked() {
        let mut store = SecretStore::in_memory();
        let first = [("Authorization".to_owned(), "Bearer TOKEN_A".to_owned())];
        let filed = store.file_import("p", "h", &first, false);
        assert_eq!(filed.added, ["authorization"]);
        let again = store.file_import("p", "h", &first, false);
        assert_eq!(again.unchanged, ["authorization"]);
        let other = [("authorization".to_owned(), "Bearer TOKEN_B".to_owned()), ("cookie".to_owned(), " ".to_owned())];
        let kept = store.file_import("p", "h", &other, false);
        assert_eq!((kept.kept.as_slice(), kept.added.len()), (["authorization".to_owned()].as_slice(), 0));
        assert_eq!(store.raw("p", "h", "authorization").unwrap().0, "Bearer TOKEN_A", "kept");
        assert_eq!(store.status("p", "h", "cookie"), SecretStatus::Missing, "an empty value is no secret");
        let replaced = store.file_import("p", "h", &other, true);
        assert_eq!(replaced.replaced, ["authorization"]);
        assert_eq!(store.raw("p", "h", "authorization").unwrap().0, "Bearer TOKEN_B");
    }

    #[test]
    fn status_tells_stored_from_environment_without_the_value() {
        let mut store = SecretStore::in_memory();
        store.set("p", "h", "X-Api-Key", "abc");
        store.set("p", "h", "authorization", "Bearer ${TOKEN}");
        assert_eq!(store.status("p", "h", "x-api-key"), SecretStatus::Stored);
        assert_eq!(store.status("p", "h", "Authorization"), SecretStatus::FromEnv(vec!["TOKEN".into()]));
        assert_eq!(store.status("p", "other", "x-api-key"), SecretStatus::Missing);
        assert!(store.remove("p", "h", "x-api-key"));
        assert!(store.remove("p", "h", "authorization"));
        assert!(format!("{store:?}").contains("secrets: {}"), "{store:?}");
    }
}
