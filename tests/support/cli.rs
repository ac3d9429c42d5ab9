//! The ratescope binary run as a user runs it: its own config directory, off the runtime's
//! threads in async tests, its exit code and both outputs returned.

use std::ffi::{OsStr, OsString};
use std::io::Write as _;
use std::path::Path;
use std::process::{Command, Stdio};

/// Runs the binary with `args` and its config directory in `config`; stdin is empty.
/// Returns the exit code (-1 when a signal ended it), stdout and stderr.
pub async fn ratescope(config: &Path, args: impl IntoIterator<Item = impl AsRef<OsStr>>) -> (i32, String, String) {
    ratescope_with_stdin(config, args, "").await
}

/// [`ratescope`] with `stdin` piped in.
pub async fn ratescope_with_stdin(
    config: &Path,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    stdin: &str,
) -> (i32, String, String) {
    let args: Vec<OsString> = args.into_iter().map(|arg| arg.as_ref().to_owned()).collect();
    let (config, stdin) = (config.to_owned(), stdin.to_owned());
    tokio::task::spawn_blocking(move || run(Some(&config), &args, &stdin)).await.unwrap()
}

/// Runs the binary on this thread with `stdin` piped in, and its config directory in `config`
/// when given. Returns the exit code (-1 when a signal ended it), stdout and stderr.
pub fn run(
    config: Option<&Path>,
    args: impl IntoIterator<Item = impl AsRef<OsStr>>,
    stdin: &str,
) -> (i32, String, String) {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ratescope"));
    command.args(args).stdin(Stdio::piped()).stdout(Stdio::piped()).stderr(Stdio::piped());
    if let Some(config) = config {
        command.env("RATESCOPE_CONFIG_DIR", config);
    }
    let mut child = command.spawn().unwrap();
    child.stdin.take().unwrap().write_all(stdin.as_bytes()).unwrap();
    let output = child.wait_with_output().unwrap();
    let text = |bytes: &[u8]| String::from_utf8_lossy(bytes).into_owned();
    (output.status.code().unwrap_or(-1), text(&output.stdout), text(&output.stderr))
}
