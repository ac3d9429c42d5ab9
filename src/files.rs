//! Writing and reading a user's files: every output goes whole or not at all to the file its
//! path names (through symlinks, into FIFOs and devices, `-` for stdout), and every input is
//! read up to a stated cap.

use std::fs::{self, File, OpenOptions};
use std::io::{self, BufWriter, Read, Write};
use std::path::{Path, PathBuf};
use std::time::{Duration, SystemTime};

/// The prefix and suffix of the temporary files an atomic write leaves behind when it is killed.
const TEMP_PREFIX: &str = ".ratescope-";
const TEMP_SUFFIX: &str = ".tmp";
/// Symlinks followed before a path counts as a loop (Linux's own limit).
const MAX_LINK_HOPS: usize = 40;

/// The largest settings file read (a profile, a mock config, a burst spec): far beyond any real
/// one, small enough to refuse `/dev/zero` or a log given by mistake before it fills memory.
pub const MAX_CONFIG_BYTES: u64 = 1 << 20;

/// Why a file could not be written or read.
#[derive(Debug, thiserror::Error)]
pub enum FileError {
    /// Reading, writing or renaming failed.
    #[error("cannot {action} {}: {source}", path.display())]
    Io {
        /// What was being done (`write`, `read`, `follow the links of`, ...).
        action: &'static str,
        /// The file it was done to.
        path: PathBuf,
        /// The operating system's error.
        #[source]
        source: io::Error,
    },
    /// An input longer than the cap this reader accepts; nothing of it is used.
    #[error("{} is larger than the {} this accepts", path.display(), human_bytes(*cap))]
    TooLarge {
        /// The file.
        path: PathBuf,
        /// The most bytes accepted.
        cap: u64,
    },
}

impl FileError {
    fn io(action: &'static str, path: &Path) -> impl FnOnce(io::Error) -> Self + use<> {
        let path = path.to_owned();
        move |source| Self::Io { action, path, source }
    }

    /// The same error as a failure to write `path`, the file the user named (a temporary file
    /// next to it, or the end of its symlinks, is how it was to be written, not what they asked).
    fn naming(self, path: &Path) -> Self {
        match self {
            Self::Io { source, .. } => Self::Io { action: "write", path: path.to_owned(), source },
            other => other,
        }
    }

    /// The operating system's error, if this is one.
    pub fn io_error(&self) -> Option<&io::Error> {
        match self {
            Self::Io { source, .. } => Some(source),
            Self::TooLarge { .. } => None,
        }
    }
}

/// How a write treats the file it replaces.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct WriteOptions {
    /// Readable by the owner only (mode 0600 on unix, from creation on), whatever was there.
    pub private: bool,
}

/// Where the bytes of a write end up.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Destination {
    /// `-`: standard output.
    Stdout,
    /// A FIFO, a device or a socket: written in place, never replaced.
    Stream(PathBuf),
    /// A regular file (or none yet): replaced atomically by a new file in its directory.
    Replace(PathBuf),
}

/// What a path given for output names, symlinks followed to the file they point at.
pub fn destination(path: &Path) -> Result<Destination, FileError> {
    if path == Path::new("-") {
        return Ok(Destination::Stdout);
    }
    if path.as_os_str().is_empty() {
        let source = io::Error::new(io::ErrorKind::InvalidInput, "an empty name names no file");
        return Err(FileError::Io { action: "write", path: path.to_owned(), source });
    }
    let target = follow_links(path)?;
    match fs::metadata(&target) {
        Ok(meta) if meta.is_dir() => Err(FileError::Io {
            action: "write",
            path: path.to_owned(),
            source: io::Error::new(io::ErrorKind::IsADirectory, "it is a directory"),
        }),
        Ok(meta) if meta.is_file() => Ok(Destination::Replace(target)),
        Ok(_) => Ok(Destination::Stream(target)),
        Err(err) if err.kind() == io::ErrorKind::NotFound => Ok(Destination::Replace(target)),
        Err(err) => Err(FileError::io("inspect", path)(err)),
    }
}

/// The path at the end of `path`'s chain of symlinks (which need not exist yet).
fn follow_links(path: &Path) -> Result<PathBuf, FileError> {
    let mut current = path.to_owned();
    for _ in 0..MAX_LINK_HOPS {
        match fs::symlink_metadata(&current) {
            Ok(meta) if meta.file_type().is_symlink() => {
                let link = fs::read_link(&current).map_err(FileError::io("follow the link", &current))?;
                current = match current.parent() {
                    Some(dir) if link.is_relative() => dir.join(link),
                    _ => link,
                };
            }
            Ok(_) => return Ok(current),
            Err(err) if err.kind() == io::ErrorKind::NotFound => return Ok(current),
            Err(err) => return Err(FileError::io("inspect", &current)(err)),
        }
    }
    Err(FileError::Io {
        action: "follow the links of",
        path: path.to_owned(),
        source: io::Error::other("too many levels of symbolic links"),
    })
}

/// Writes `bytes` to what `path` names (see [`write_with`]).
pub fn write_bytes(path: &Path, bytes: &[u8], options: WriteOptions) -> Result<Destination, FileError> {
    write_with(path, options, |out| out.write_all(bytes))
}

/// Writes what `fill` produces to what `path` names: `-` is standard output, a FIFO or device
/// is written in place, and a regular file (at the end of any symlinks) is replaced atomically
/// (a temporary file in its directory, flushed, renamed over it) keeping its permissions, so a
/// reader sees the old file or the new one and a failed write leaves the old one untouched.
pub fn write_with(
    path: &Path,
    options: WriteOptions,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<Destination, FileError> {
    let destination = destination(path)?;
    match &destination {
        Destination::Stdout => {
            let mut out = io::stdout().lock();
            fill(&mut out).and_then(|()| out.flush()).map_err(FileError::io("write", path))?;
        }
        Destination::Stream(target) => {
            let file = OpenOptions::new().write(true).open(target).map_err(FileError::io("open", target))?;
            let mut out = BufWriter::new(file);
            fill(&mut out).and_then(|()| out.flush()).map_err(FileError::io("write", target))?;
        }
        Destination::Replace(target) => replace(target, options, fill).map_err(|err| err.naming(path))?,
    }
    Ok(destination)
}

/// Checks, before any work whose result is to be written there, that `path` can be written
/// as [`write_with`] would: `-`, an existing FIFO or device, or a regular file (or none yet)
/// in a directory where a new file can be made (one is made and removed to be sure).
pub fn check_writable(path: &Path) -> Result<(), FileError> {
    match destination(path)? {
        Destination::Stdout | Destination::Stream(_) => Ok(()),
        Destination::Replace(target) => {
            temp_file_in(parent_dir(&target), false).map_err(|err| err.naming(path))?;
            Ok(())
        }
    }
}

/// The directory a file at `path` lives in (`.` for a bare name).
fn parent_dir(path: &Path) -> &Path {
    match path.parent() {
        Some(dir) if !dir.as_os_str().is_empty() => dir,
        _ => Path::new("."),
    }
}

fn replace(
    target: &Path,
    options: WriteOptions,
    fill: impl FnOnce(&mut dyn Write) -> io::Result<()>,
) -> Result<(), FileError> {
    let dir = parent_dir(target);
    let kept_permissions = fs::metadata(target).ok().map(|meta| meta.permissions());
    let mut file = temp_file_in(dir, options.private)?;
    {
        let mut out = BufWriter::new(file.as_file_mut());
        fill(&mut out).and_then(|()| out.flush()).map_err(FileError::io("write", target))?;
    }
    if let (Some(permissions), false) = (kept_permissions, options.private) {
        file.as_file().set_permissions(permissions).map_err(FileError::io("set the permissions of", target))?;
    }
    file.as_file().sync_all().map_err(FileError::io("write", target))?;
    file.persist(target).map_err(|err| FileError::io("replace", target)(without_path(err.error)))?;
    sync_dir(dir);
    Ok(())
}

/// Writes `bytes` as a new file at `path` unless one exists; returns whether it wrote it.
/// Never replaces anything, not even a broken file (another writer's file wins a race).
pub fn write_new(path: &Path, bytes: &[u8]) -> Result<bool, FileError> {
    let dir = parent_dir(path);
    let mut file = temp_file_in(dir, false)?;
    file.write_all(bytes).and_then(|()| file.as_file().sync_all()).map_err(FileError::io("write", path))?;
    match file.persist_noclobber(path) {
        Ok(_) => {
            sync_dir(dir);
            Ok(true)
        }
        Err(err) if err.error.kind() == io::ErrorKind::AlreadyExists => Ok(false),
        Err(err) => Err(FileError::io("write", path)(err.error)),
    }
}

fn temp_file_in(dir: &Path, private: bool) -> Result<tempfile::NamedTempFile, FileError> {
    let mut builder = tempfile::Builder::new();
    builder.prefix(TEMP_PREFIX).suffix(TEMP_SUFFIX);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        builder.permissions(fs::Permissions::from_mode(if private { 0o600 } else { 0o644 }));
    }
    #[cfg(not(unix))]
    let _ = private;
    builder.tempfile_in(dir).map_err(|err| FileError::io("create a file in", dir)(without_path(err)))
}

/// `err` without the temporary file's name `tempfile` adds to it: a message names the user's
/// file, not a `.ratescope-XXXX.tmp` they never asked for.
fn without_path(err: io::Error) -> io::Error {
    // tempfile wraps the operating system's error in one that appends ` at path "…"`.
    let inner = err.get_ref().map(ToString::to_string);
    match inner.as_deref().and_then(|text| text.rsplit_once(" at path ")) {
        Some((message, _)) => io::Error::new(err.kind(), message.to_owned()),
        None => err,
    }
}

/// Makes a rename in `dir` durable (best effort: not every platform can open a directory).
fn sync_dir(dir: &Path) {
    #[cfg(unix)]
    if let Ok(handle) = File::open(dir) {
        let _ = handle.sync_all();
    }
    #[cfg(not(unix))]
    let _ = dir;
}

/// Removes the temporary files that writes killed midway left in `dir`, once they are older than
/// `min_age` (a live write finishes in milliseconds); returns how many it removed.
pub fn remove_stale_temp_files(dir: &Path, min_age: Duration) -> usize {
    let Ok(entries) = fs::read_dir(dir) else { return 0 };
    let now = SystemTime::now();
    let mut removed = 0;
    for entry in entries.flatten() {
        let name = entry.file_name();
        let Some(name) = name.to_str() else { continue };
        if !(name.starts_with(TEMP_PREFIX) && name.ends_with(TEMP_SUFFIX)) {
            continue;
        }
        let Ok(meta) = entry.metadata() else { continue };
        let age = meta.modified().ok().and_then(|modified| now.duration_since(modified).ok());
        if meta.is_file() && age.is_some_and(|age| age >= min_age) && fs::remove_file(entry.path()).is_ok() {
            tracing::info!(path = %entry.path().display(), "removed a temporary file left by an interrupted write");
            removed += 1;
        }
    }
    removed
}

/// Reads the whole file at `path` (`-`: standard input), refusing more than `cap` bytes.
pub fn read_capped(path: &Path, cap: u64) -> Result<Vec<u8>, FileError> {
    if path == Path::new("-") {
        return read_all_capped(io::stdin().lock(), path, cap);
    }
    let file = File::open(path).map_err(FileError::io("read", path))?;
    read_all_capped(file, path, cap)
}

/// Reads `reader` to its end, refusing more than `cap` bytes (it stops reading at `cap + 1`).
pub fn read_all_capped(reader: impl Read, path: &Path, cap: u64) -> Result<Vec<u8>, FileError> {
    let mut bytes = Vec::new();
    reader.take(cap.saturating_add(1)).read_to_end(&mut bytes).map_err(FileError::io("read", path))?;
    if bytes.len() as u64 > cap {
        return Err(FileError::TooLarge { path: path.to_owned(), cap });
    }
    Ok(bytes)
}

/// The 1-based line and column (in characters) of byte `offset` of `text`, for errors that
/// point into a file; an offset past the end, or inside a character, counts from before it.
pub fn line_column(text: &str, offset: usize) -> (usize, usize) {
    let mut offset = offset.min(text.len());
    while !text.is_char_boundary(offset) {
        offset -= 1;
    }
    let before = &text[..offset];
    let line_start = before.rfind('\n').map_or(0, |newline| newline + 1);
    (before.matches('\n').count() + 1, before[line_start..].chars().count() + 1)
}

/// `1048576` → `1 MiB`.
pub fn human_bytes(bytes: u64) -> String {
    const UNITS: [(&str, u64); 3] = [("GiB", 1 << 30), ("MiB", 1 << 20), ("KiB", 1 << 10)];
    for (unit, size) in UNITS {
        if bytes >= size && bytes.is_multiple_of(size) {
            return format!("{} {unit}", bytes / size);
        }
    }
    format!("{bytes} bytes")
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_path_is_checked_before_the_work_and_the_check_leaves_nothing() {
        let dir = tempfile::tempdir().unwrap();
        let fine = dir.path().join("out.csv");
        check_writable(&fine).unwrap();
        check_writable(Path::new("-")).unwrap();
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 0, "the check left a file behind");
        let missing = dir.path().join("no-dir/out.csv");
        let empty = PathBuf::new();
        for bad in [&missing, &dir.path().to_owned(), &empty] {
            let err = check_writable(bad).unwrap_err().to_string();
            assert!(err.starts_with(&format!("cannot write {}:", bad.display())), "{err}");
            assert!(!err.contains(TEMP_PREFIX), "a temporary file is named: {err}");
        }
    }

    #[test]
    fn a_regular_file_is_replaced_whole_and_keeps_its_mode() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("out.csv");
        fs::write(&path, "old").unwrap();
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            fs::set_permissions(&path, fs::Permissions::from_mode(0o640)).unwrap();
        }
        let written = write_bytes(&path, b"new", WriteOptions::default()).unwrap();
        assert_eq!(written, Destination::Replace(path.clone()));
        assert_eq!(fs::read_to_string(&path).unwrap(), "new");
        #[cfg(unix)]
        {
            use std::os::unix::fs::PermissionsExt;
            assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o640);
        }
    }

    #[test]
    fn a_failed_fill_leaves_the_old_file_and_no_temporary() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("profile.toml");
        fs::write(&path, "old").unwrap();
        let err = write_with(&path, WriteOptions::default(), |out| {
            out.write_all(b"half")?;
            Err(io::Error::other("disk on fire"))
        })
        .unwrap_err();
        assert!(err.to_string().contains("disk on fire"), "{err}");
        assert_eq!(fs::read_to_string(&path).unwrap(), "old");
        assert_eq!(fs::read_dir(dir.path()).unwrap().count(), 1);
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_is_followed_and_stays_a_symlink() {
        let dir = tempfile::tempdir().unwrap();
        let real = dir.path().join("sub").join("real.toml");
        fs::create_dir(dir.path().join("sub")).unwrap();
        fs::write(&real, "old").unwrap();
        let link = dir.path().join("link.toml");
        std::os::unix::fs::symlink("sub/real.toml", &link).unwrap();
        let written = write_bytes(&link, b"new", WriteOptions::default()).unwrap();
        assert_eq!(written, Destination::Replace(dir.path().join("sub/real.toml")));
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(&real).unwrap(), "new");
    }

    #[cfg(unix)]
    #[test]
    fn a_dangling_symlink_creates_its_target() {
        let dir = tempfile::tempdir().unwrap();
        let link = dir.path().join("link");
        std::os::unix::fs::symlink(dir.path().join("made"), &link).unwrap();
        write_bytes(&link, b"x", WriteOptions::default()).unwrap();
        assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink());
        assert_eq!(fs::read_to_string(dir.path().join("made")).unwrap(), "x");
    }

    #[cfg(unix)]
    #[test]
    fn a_symlink_loop_is_an_error_not_a_hang() {
        let dir = tempfile::tempdir().unwrap();
        let a = dir.path().join("a");
        let b = dir.path().join("b");
        std::os::unix::fs::symlink(&b, &a).unwrap();
        std::os::unix::fs::symlink(&a, &b).unwrap();
        let err = write_bytes(&a, b"x", WriteOptions::default()).unwrap_err();
        assert!(err.to_string().contains("symbolic links"), "{err}");
    }

    #[cfg(unix)]
    #[test]
    fn a_fifo_is_written_in_place() {
        let dir = tempfile::tempdir().unwrap();
        let fifo = dir.path().join("pipe");
        let made = std::process::Command::new("mkfifo").arg(&fifo).status().unwrap();
        assert!(made.success());
        let reader = {
            let fifo = fifo.clone();
            std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
        };
        let written = write_bytes(&fifo, b"through the pipe", WriteOptions::default()).unwrap();
        assert_eq!(written, Destination::Stream(fifo.clone()));
        assert_eq!(reader.join().unwrap(), "through the pipe");
        use std::os::unix::fs::FileTypeExt;
        assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo());
    }

    #[test]
    fn a_directory_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let err = write_bytes(dir.path(), b"x", WriteOptions::default()).unwrap_err();
        assert!(err.to_string().contains("directory"), "{err}");
    }

    #[test]
    fn write_new_never_replaces() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("demo.toml");
        assert!(write_new(&path, b"first").unwrap());
        assert!(!write_new(&path, b"second").unwrap());
        assert_eq!(fs::read_to_string(&path).unwrap(), "first");
    }

    #[test]
    fn stale_temporaries_go_and_fresh_ones_and_others_stay() {
        let dir = tempfile::tempdir().unwrap();
        let stale = dir.path().join(".ratescope-abc.tmp");
        let fresh = dir.path().join(".ratescope-def.tmp");
        let other = dir.path().join("keep.tmp");
        for path in [&stale, &fresh, &other] {
            fs::write(path, "x").unwrap();
        }
        let old = SystemTime::now() - Duration::from_secs(3600);
        for path in [&stale, &other] {
            File::options().write(true).open(path).unwrap().set_modified(old).unwrap();
        }
        assert_eq!(remove_stale_temp_files(dir.path(), Duration::from_secs(60)), 1);
        assert!(!stale.exists());
        assert!(fresh.exists() && other.exists());
    }

    #[test]
    fn offsets_become_lines_and_columns() {
        let text = "a = 1\nnamé = x\n";
        assert_eq!(line_column(text, 0), (1, 1));
        assert_eq!(line_column(text, 6), (2, 1));
        assert_eq!(line_column(text, text.find('x').unwrap()), (2, 8), "columns count characters, not bytes");
        assert_eq!(line_column(text, 10), (2, 4), "inside 'é': from before it");
        assert_eq!(line_column(text, 999), (3, 1), "past the end: the end");
    }

    #[test]
    fn reads_are_capped() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("big");
        fs::write(&path, vec![b'a'; 2048]).unwrap();
        assert_eq!(read_capped(&path, 2048).unwrap().len(), 2048);
        let err = read_capped(&path, 1024).unwrap_err();
        assert_eq!(err.to_string(), format!("{} is larger than the 1 KiB this accepts", path.display()));
        // An endless input stops at the cap instead of filling memory.
        let err = read_all_capped(io::repeat(0), Path::new("/dev/zero"), 1 << 20).unwrap_err();
        assert!(matches!(err, FileError::TooLarge { cap, .. } if cap == 1 << 20));
    }
}
