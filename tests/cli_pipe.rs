//! A reader that goes away (`ratescope ... | head -1`) ends a command quietly: no panic, no
//! error, success, as `cat` and `ls` behave.

use std::process::{Command, Stdio};

/// Runs `ratescope ARGS` with its standard output closed before it writes; returns the exit
/// status and what it said on stderr.
fn with_stdout_closed(args: &[&str]) -> (std::process::ExitStatus, String) {
    let config = tempfile::tempdir().expect("a temporary config dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(args)
        .env("RATESCOPE_CONFIG_DIR", config.path())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ratescope binary runs");
    drop(child.stdout.take());
    let output = child.wait_with_output().expect("it ends");
    (output.status, String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn a_closed_pipe_ends_profile_list_quietly() {
    let (status, stderr) = with_stdout_closed(&["profile", "list"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status}: {stderr}");
}

#[test]
fn a_closed_pipe_ends_pace_quietly() {
    let (status, stderr) = with_stdout_closed(&["pace", "-n", "3", "--rate", "100/1s"]);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(status.success(), "{status}: {stderr}");
}

/// Runs `ratescope ARGS` with its standard error closed before it writes; returns the exit code.
fn with_stderr_closed(args: &[&str]) -> Option<i32> {
    let config = tempfile::tempdir().expect("a temporary config dir");
    let mut child = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(args)
        .env("RATESCOPE_CONFIG_DIR", config.path())
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("the ratescope binary runs");
    drop(child.stderr.take());
    child.wait().expect("it ends").code()
}

/// Its error goes nowhere, but the command still ends with its own status, not a panic's 101.
#[test]
fn a_closed_stderr_keeps_the_exit_status_of_an_error() {
    assert_eq!(with_stderr_closed(&["profile", "show", "no-such-profile"]), Some(1));
    assert_eq!(with_stderr_closed(&["burst", "not a url"]), Some(2));
}
