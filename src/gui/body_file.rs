//! Load body's file, read by the backend and never on the UI thread: what may be read (a
//! regular file of UTF-8 text, at most 16 MiB) and, when it may not, why in words.

use std::path::{Path, PathBuf};

use crate::files::{FileError, read_capped};
use crate::profile::MAX_BODY_BYTES;

/// Why a body file was not loaded.
#[derive(Debug, thiserror::Error)]
pub enum BodyFileError {
    /// The field is blank.
    #[error("type the body file's path first")]
    NoPath,
    /// `-`, which the command line reads as standard input.
    #[error("'-' is standard input, which the app does not read: name a file")]
    Stdin,
    /// A directory, a FIFO or a device: reading one could wait forever or never end.
    #[error("{} is not a regular file", .0.display())]
    NotAFile(PathBuf),
    /// Bytes that are not UTF-8 cannot be shown or edited as text.
    #[error("{} is not UTF-8 text; send binary bodies with burst -d @FILE", .0.display())]
    NotText(PathBuf),
    /// Missing, unreadable or larger than [`MAX_BODY_BYTES`].
    #[error(transparent)]
    File(#[from] FileError),
}

/// The path typed in the body file field, refused at once when it cannot name a file.
pub fn body_path(typed: &str) -> Result<PathBuf, BodyFileError> {
    match typed.trim() {
        "" => Err(BodyFileError::NoPath),
        "-" => Err(BodyFileError::Stdin),
        path => Ok(PathBuf::from(path)),
    }
}

/// The text of the body file at `path` (symlinks followed): a regular file of UTF-8 text of
/// at most [`MAX_BODY_BYTES`]. It blocks on the disk: the backend calls it on a blocking thread.
pub fn read_body_file(path: &Path) -> Result<String, BodyFileError> {
    let metadata =
        std::fs::metadata(path).map_err(|source| FileError::Io { action: "read", path: path.to_owned(), source })?;
    if !metadata.is_file() {
        return Err(BodyFileError::NotAFile(path.to_owned()));
    }
    let bytes = read_capped(path, MAX_BODY_BYTES)?;
    String::from_utf8(bytes).map_err(|_| BodyFileError::NotText(path.to_owned()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_text_file_is_read_and_every_other_file_is_refused_saying_why() {
        let dir = tempfile::tempdir().unwrap();
        let text = dir.path().join("payload.json");
        std::fs::write(&text, "[1, 2]").unwrap();
        assert_eq!(read_body_file(&text).unwrap(), "[1, 2]");

        let missing = read_body_file(&dir.path().join("gone.json")).unwrap_err().to_string();
        assert!(missing.starts_with("cannot read ") && missing.contains("gone.json"), "{missing}");
        let binary = dir.path().join("image.bin");
        std::fs::write(&binary, [0xff, 0xfe, 0x00]).unwrap();
        let not_text = read_body_file(&binary).unwrap_err().to_string();
        assert!(not_text.ends_with("is not UTF-8 text; send binary bodies with burst -d @FILE"), "{not_text}");
        let folder = read_body_file(dir.path()).unwrap_err().to_string();
        assert!(folder.ends_with("is not a regular file"), "{folder}");

        assert_eq!(body_path("  ").unwrap_err().to_string(), "type the body file's path first");
        assert!(matches!(body_path(" - "), Err(BodyFileError::Stdin)), "standard input would block");
        assert_eq!(body_path(" payload.json ").unwrap(), PathBuf::from("payload.json"));
    }

    #[test]
    fn a_file_over_16_mib_is_refused_with_the_cap_named() {
        let dir = tempfile::tempdir().unwrap();
        let big = dir.path().join("big.json");
        let file = std::fs::File::create(&big).unwrap();
        file.set_len(MAX_BODY_BYTES + 1).unwrap();
        let err = read_body_file(&big).unwrap_err().to_string();
        assert!(err.ends_with("big.json is larger than the 16 MiB this accepts"), "{err}");
        file.set_len(MAX_BODY_BYTES).unwrap();
        assert_eq!(read_body_file(&big).unwrap().len() as u64, MAX_BODY_BYTES, "exactly the cap is read");
    }
}
