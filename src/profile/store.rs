//! Profiles on disk: one `<slug>.toml` per profile, written atomically and readable by its owner
//! only (a profile may hold what came from a paste), the previous version kept as
//! `<slug>.toml.bak`, a broken file never overwritten, and a saved file's comments and layout
//! kept through later saves.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::error::ProfileError;
use super::keep;
use super::model::Profile;
use super::{DEMO_TOML, config_dir};
use crate::files::{self, WriteOptions};

/// The largest profile file read ([`files::MAX_CONFIG_BYTES`]).
pub const MAX_PROFILE_BYTES: u64 = files::MAX_CONFIG_BYTES;
/// How old a temporary file left by an interrupted save must be before a start removes it.
const STALE_TEMP_AGE: Duration = Duration::from_secs(60);

/// The file name of a profile: lower case ASCII letters, digits and single dashes
/// (`"demo API"` → `demo-api`). Refuses a name with no letter or digit.
pub fn slug(name: &str) -> Result<String, ProfileError> {
    let mut slug = String::with_capacity(name.len());
    for c in name.chars() {
        if c.is_ascii_alphanumeric() {
            slug.push(c.to_ascii_lowercase());
        } else if !slug.is_empty() && !slug.ends_with('-') {
            slug.push('-');
        }
    }
    while slug.ends_with('-') {
        slug.pop();
    }
    if slug.is_empty() { Err(ProfileError::BadName(name.to_owned())) } else { Ok(slug) }
}

/// One line of [`ProfileStore::list`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProfileSummary {
    /// The profile's name.
    pub name: String,
    /// Its file.
    pub path: PathBuf,
    /// How many hosts it has.
    pub hosts: usize,
}

/// A directory of profiles.
#[derive(Debug, Clone)]
pub struct ProfileStore {
    dir: PathBuf,
}

impl ProfileStore {
    /// `profiles/` in the user's config directory ([`config_dir`]).
    /// Removes what saves killed midway left there (see [`remove_stale_temp_files`](Self::remove_stale_temp_files)).
    pub fn default_location() -> Result<Self, ProfileError> {
        let store = Self::at(config_dir()?.join("profiles"));
        store.remove_stale_temp_files();
        Ok(store)
    }

    /// Removes the temporary files that saves killed midway left in the directory (older than a
    /// minute, so a save running in another process keeps its own); returns how many.
    pub fn remove_stale_temp_files(&self) -> usize {
        files::remove_stale_temp_files(&self.dir, STALE_TEMP_AGE)
    }

    /// The profiles in `dir` (created on the first save).
    pub fn at(dir: impl Into<PathBuf>) -> Self {
        Self { dir: dir.into() }
    }

    /// The directory the profiles are in.
    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds (or would hold) the profile named `name`.
    pub fn path_of(&self, name: &str) -> Result<PathBuf, ProfileError> {
        Ok(self.dir.join(format!("{}.toml", slug(name)?)))
    }

    /// Every profile file, sorted by file name. A broken file is reported in its place, with
    /// its name, line and column; the others are listed all the same.
    pub fn list(&self) -> Result<Vec<Result<ProfileSummary, ProfileError>>, ProfileError> {
        let entries = match fs::read_dir(&self.dir) {
            Ok(entries) => entries,
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(Vec::new()),
            Err(err) => return Err(ProfileError::io("read the directory", &self.dir)(err)),
        };
        let mut paths = Vec::new();
        for entry in entries {
            let entry = entry.map_err(ProfileError::io("read the directory", &self.dir))?;
            let path = entry.path();
            let visible = entry.file_name().to_str().is_some_and(|name| !name.starts_with('.'));
            if visible && path.extension().is_some_and(|ext| ext == "toml") && path.is_file() {
                paths.push(path);
            }
        }
        paths.sort();
        Ok(paths
            .into_iter()
            .map(|path| {
                let profile = read_profile(&path)?;
                Ok(ProfileSummary { name: profile.name, hosts: profile.hosts.len(), path })
            })
            .collect())
    }

    /// Whether a file for `name` exists (readable or not).
    pub fn exists(&self, name: &str) -> Result<bool, ProfileError> {
        Ok(self.path_of(name)?.exists())
    }

    /// The saved profile named exactly `name`, or `None` when there is none. One rule for every
    /// command that adds to or makes a profile: a file that holds another profile whose name
    /// makes the same file name (`a/b` for `a-b`) is [`ProfileError::NameClash`], never merged into.
    pub fn find(&self, name: &str) -> Result<Option<Profile>, ProfileError> {
        let path = self.path_of(name)?;
        if !path.exists() {
            return Ok(None);
        }
        let profile = read_profile(&path)?;
        if profile.name != name {
            return Err(ProfileError::NameClash { new: name.to_owned(), existing: profile.name, path });
        }
        Ok(Some(profile))
    }

    /// The profile named `name`.
    pub fn load(&self, name: &str) -> Result<Profile, ProfileError> {
        let path = self.path_of(name)?;
        if !path.exists() {
            return Err(ProfileError::NotFound { name: name.to_owned(), path });
        }
        read_profile(&path)
    }

    /// Validates and writes `profile` (mode 0600), keeping the version it replaces as `<slug>.toml.bak`.
    /// Refuses to replace a file that does not hold a valid profile of the same name.
    ///
    /// Over an existing file the profile is merged into the file's text ([`text_for`](Self::text_for)):
    /// its comments and layout stay where the settings did not change, and a file that already
    /// says exactly this profile is left as it is (not even rewritten).
    pub fn save(&self, profile: &Profile) -> Result<PathBuf, ProfileError> {
        profile.validate()?;
        let path = self.path_of(&profile.name)?;
        let existing = self.replaced(&profile.name, &path)?;
        let text = match &existing {
            Some(bytes) => merged_over(&path, bytes, profile)?,
            None => profile.to_toml()?,
        };
        if existing.as_deref() == Some(text.as_bytes()) {
            tracing::debug!(profile = %profile.name, path = %path.display(), "profile unchanged, not rewritten");
            return Ok(path);
        }
        self.write(&profile.name, &text)
    }

    /// Writes `profile` afresh in the documented layout, as [`save`](Self::save) would write a
    /// new one: for a profile that replaces the saved one rather than edits it (`profile new
    /// --force`), whose comments would describe what is gone.
    pub fn replace(&self, profile: &Profile) -> Result<PathBuf, ProfileError> {
        profile.validate()?;
        self.write(&profile.name, &profile.to_toml()?)
    }

    /// The text [`save`](Self::save) would write for `profile`: merged into the text of its saved
    /// file when there is a valid one of that name (comments kept), else fresh. For exporting a
    /// profile being edited; secret values are never part of it.
    pub fn text_for(&self, profile: &Profile) -> Result<String, ProfileError> {
        let path = self.path_of(&profile.name)?;
        // A broken or clashing file is no base for a copy; the profile itself still is.
        match self.replaced(&profile.name, &path) {
            Ok(Some(bytes)) => merged_over(&path, &bytes, profile),
            Ok(None) | Err(_) => profile.to_toml(),
        }
    }

    /// The text of the saved profile named `name`, comments and all, after the checks of
    /// [`load`](Self::load).
    pub fn text(&self, name: &str) -> Result<String, ProfileError> {
        let path = self.path_of(name)?;
        if !path.exists() {
            return Err(ProfileError::NotFound { name: name.to_owned(), path });
        }
        let bytes = files::read_capped(&path, MAX_PROFILE_BYTES)?;
        parse_bytes(&path, &bytes)?;
        String::from_utf8(bytes).map_err(|_| invalid_utf8().in_file(&path))
    }

    /// Moves the profile's file to `<slug>.toml.bak` (replacing an older backup); returns that path.
    pub fn delete(&self, name: &str) -> Result<PathBuf, ProfileError> {
        let path = self.path_of(name)?;
        if !path.exists() {
            return Err(ProfileError::NotFound { name: name.to_owned(), path });
        }
        let backup = backup_of(&path);
        fs::rename(&path, &backup).map_err(ProfileError::io("move aside", &path))?;
        tracing::info!(profile = name, backup = %backup.display(), "profile deleted (kept as a backup)");
        Ok(backup)
    }

    /// Reads, validates and stores the profile file at `path` (its text is kept as written,
    /// comments included). An existing profile of the same name is replaced only with `overwrite`.
    pub fn import(&self, path: &Path, overwrite: bool) -> Result<Profile, ProfileError> {
        let text = files::read_capped(path, MAX_PROFILE_BYTES)?;
        let text = String::from_utf8(text).map_err(|_| invalid_utf8().in_file(path))?;
        let profile = Profile::from_toml(&text).map_err(|err| err.in_file(path))?;
        let target = self.path_of(&profile.name)?;
        if target.exists() && !overwrite {
            return Err(ProfileError::Exists { name: profile.name, path: target });
        }
        self.write(&profile.name, &text)?;
        Ok(profile)
    }

    /// Writes the profile named `name` to `path`: a copy of its file, comments included. Only
    /// the profile is in it: secret header names, never their values (those live in the secret store).
    pub fn export(&self, name: &str, path: &Path) -> Result<(), ProfileError> {
        let text = self.text(name)?;
        files::write_bytes(path, text.as_bytes(), WriteOptions::default())?;
        Ok(())
    }

    /// Writes the demo profile ([`Profile::demo`]) unless a profile named `demo` exists;
    /// returns whether it wrote it. Never overwrites anything, not even a broken file.
    pub fn ensure_demo(&self) -> Result<bool, ProfileError> {
        let path = self.path_of("demo")?;
        if path.exists() {
            return Ok(false);
        }
        fs::create_dir_all(&self.dir).map_err(ProfileError::io("create", &self.dir))?;
        // Someone else may write it in the meantime: theirs stays.
        Ok(files::write_new(&path, DEMO_TOML.as_bytes())?)
    }

    /// Checks, before the work that makes a profile named `name` (a probe), that
    /// [`save`](Self::save) could write it: a valid name, no file of another profile or a
    /// broken one in its place, a directory where a file can be made. Returns its path.
    pub fn check_save(&self, name: &str) -> Result<PathBuf, ProfileError> {
        let path = self.path_of(name)?;
        fs::create_dir_all(&self.dir).map_err(ProfileError::io("create", &self.dir))?;
        self.replaced(name, &path)?;
        files::check_writable(&path)?;
        Ok(path)
    }

    /// The bytes of the file at `path` that a save of `name` would replace (none when there is
    /// no file); refuses a file that does not hold a valid profile of that name.
    fn replaced(&self, name: &str, path: &Path) -> Result<Option<Vec<u8>>, ProfileError> {
        match fs::read(path) {
            Ok(existing) => {
                let current = parse_bytes(path, &existing)
                    .map_err(|error| ProfileError::Broken { path: path.to_owned(), error: Box::new(error) })?;
                if current.name != name {
                    let path = path.to_owned();
                    return Err(ProfileError::NameClash { new: name.to_owned(), existing: current.name, path });
                }
                Ok(Some(existing))
            }
            Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(None),
            Err(err) => Err(ProfileError::io("read", path)(err)),
        }
    }

    /// Writes `text` as the file of profile `name`, after the checks of [`save`](Self::save).
    fn write(&self, name: &str, text: &str) -> Result<PathBuf, ProfileError> {
        let path = self.path_of(name)?;
        // What could not be read back is never written (a paste can make a huge profile).
        if text.len() as u64 > MAX_PROFILE_BYTES {
            return Err(ProfileError::TooLarge { name: name.to_owned(), size: text.len(), cap: MAX_PROFILE_BYTES });
        }
        fs::create_dir_all(&self.dir).map_err(ProfileError::io("create", &self.dir))?;
        if let Some(existing) = self.replaced(name, &path)? {
            files::write_bytes(&backup_of(&path), &existing, WriteOptions { private: true })?;
        }
        files::write_bytes(&path, text.as_bytes(), WriteOptions { private: true })?;
        tracing::debug!(profile = name, path = %path.display(), "profile saved");
        Ok(path)
    }
}

/// `demo.toml` → `demo.toml.bak`.
fn backup_of(path: &Path) -> PathBuf {
    let mut name = path.file_name().unwrap_or_default().to_os_string();
    name.push(".bak");
    path.with_file_name(name)
}

/// `profile` merged into `bytes`, the text of its valid file at `path` ([`keep::merged`]).
fn merged_over(path: &Path, bytes: &[u8], profile: &Profile) -> Result<String, ProfileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| invalid_utf8().in_file(path))?;
    keep::merged(text, profile)
}

/// A profile file: valid TOML, valid settings, and a name that belongs to this file name.
fn read_profile(path: &Path) -> Result<Profile, ProfileError> {
    let bytes = files::read_capped(path, MAX_PROFILE_BYTES)?;
    parse_bytes(path, &bytes)
}

fn parse_bytes(path: &Path, bytes: &[u8]) -> Result<Profile, ProfileError> {
    let text = std::str::from_utf8(bytes).map_err(|_| invalid_utf8().in_file(path))?;
    let profile = Profile::from_toml(text).map_err(|err| err.in_file(path))?;
    let expected = slug(&profile.name)?;
    let stem = path.file_stem().and_then(|stem| stem.to_str()).unwrap_or_default();
    if stem != expected {
        return Err(ProfileError::NameMismatch {
            path: path.to_owned(),
            found: profile.name,
            expected: format!("{expected}.toml"),
        });
    }
    Ok(profile)
}

fn invalid_utf8() -> ProfileError {
    ProfileError::Syntax { position: None, host: None, message: "the file is not UTF-8 text".to_owned() }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slugs_are_lowercase_ascii_with_single_dashes() {
        assert_eq!(slug("demo").unwrap(), "demo");
        assert_eq!(slug("  Demo API v2 ").unwrap(), "demo-api-v2");
        assert_eq!(slug("../../etc/passwd").unwrap(), "etc-passwd");
        assert_eq!(slug("Ünïcode—name").unwrap(), "n-code-name");
        for bad in ["", "   ", "---", "ééé", "/"] {
            assert!(matches!(slug(bad), Err(ProfileError::BadName(_))), "{bad:?}");
        }
    }

    #[test]
    fn backups_sit_beside_the_file() {
        assert_eq!(backup_of(Path::new("/x/demo.toml")), Path::new("/x/demo.toml.bak"));
    }
}
