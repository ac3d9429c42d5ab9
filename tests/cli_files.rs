//! Files named on the command line are written to, never replaced: a symlink stays a symlink
//! (its target gets the text), a FIFO and a device are written in place, a failed write leaves
//! the old file; and a start removes the temporary files a killed save left behind.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};
use std::time::{Duration, SystemTime};

fn ratescope(config: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(args)
        .env("RATESCOPE_CONFIG_DIR", config)
        .stdin(Stdio::null())
        .output()
        .expect("the ratescope binary runs")
}

fn text(bytes: &[u8]) -> String {
    String::from_utf8_lossy(bytes).into_owned()
}

/// A config dir whose demo profile has a `[shared]` table.
fn config_with_shared_demo() -> tempfile::TempDir {
    let config = tempfile::tempdir().unwrap();
    fs::create_dir(config.path().join("profiles")).unwrap();
    let path = config.path().join("profiles/demo.toml");
    let with_shared = ratescope::profile::DEMO_TOML.replacen(
        "\n[[hosts]]",
        "\n[shared]\nredis = \"redis://:${REDIS_PASSWORD}@127.0.0.1:6379\"\nkey = \"team\"\n\n[[hosts]]",
        1,
    );
    fs::write(&path, with_shared).unwrap();
    config
}

#[cfg(unix)]
#[test]
fn export_through_a_symlink_writes_its_target_and_keeps_the_link() {
    let config = config_with_shared_demo();
    let out = tempfile::tempdir().unwrap();
    let target = out.path().join("real.toml");
    fs::write(&target, "old").unwrap();
    let link = out.path().join("link.toml");
    std::os::unix::fs::symlink(&target, &link).unwrap();
    let export = ratescope(config.path(), &["profile", "export", "demo", link.to_str().unwrap()]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    assert!(fs::symlink_metadata(&link).unwrap().file_type().is_symlink(), "the link was replaced by a file");
    let written = fs::read_to_string(&target).unwrap();
    // A copy of the saved file, comments and `[shared]` included (it used to be dropped).
    assert_eq!(written, fs::read_to_string(config.path().join("profiles/demo.toml")).unwrap());
    assert!(written.contains("[shared]") && written.contains("key = \"team\""), "{written}");
}

#[cfg(unix)]
#[test]
fn export_into_a_fifo_streams_and_keeps_the_fifo() {
    use std::os::unix::fs::FileTypeExt;
    let config = config_with_shared_demo();
    let out = tempfile::tempdir().unwrap();
    let fifo = out.path().join("pipe");
    assert!(Command::new("mkfifo").arg(&fifo).status().unwrap().success());
    let reader = {
        let fifo = fifo.clone();
        std::thread::spawn(move || fs::read_to_string(fifo).unwrap())
    };
    let export = ratescope(config.path(), &["profile", "export", "demo", fifo.to_str().unwrap()]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    let received = reader.join().unwrap();
    assert!(received.starts_with("# The demo profile") && received.contains("[shared]"), "{received}");
    assert!(fs::symlink_metadata(&fifo).unwrap().file_type().is_fifo(), "the FIFO was replaced by a file");
}

/// Device nodes of our own (null and full, as in /dev), made only where mknod is allowed (root):
/// a regression then replaces a node in a temporary directory, not the machine's /dev/full.
#[cfg(unix)]
#[test]
fn export_to_a_device_writes_to_it_and_reports_a_full_one() {
    use std::os::unix::fs::FileTypeExt;
    let config = config_with_shared_demo();
    let out = tempfile::tempdir().unwrap();
    let null = out.path().join("null");
    let full = out.path().join("full");
    let made = |path: &Path, minor: &str| {
        Command::new("mknod")
            .arg(path)
            .args(["c", "1", minor])
            .stderr(Stdio::null())
            .status()
            .is_ok_and(|s| s.success())
    };
    if !(made(&null, "3") && made(&full, "7")) {
        // Straight to stderr: libtest would swallow an eprintln! of a passing test.
        let _ = std::io::Write::write_all(
            &mut std::io::stderr(),
            b"NOTICE: mknod is not allowed here (not root); the device case is covered by the FIFO one\n",
        );
        return;
    }
    let export = ratescope(config.path(), &["profile", "export", "demo", null.to_str().unwrap()]);
    assert!(export.status.success(), "{}", text(&export.stderr));
    assert!(fs::metadata(&null).unwrap().file_type().is_char_device());

    let export = ratescope(config.path(), &["profile", "export", "demo", full.to_str().unwrap()]);
    assert_eq!(export.status.code(), Some(1));
    let stderr = text(&export.stderr);
    assert!(stderr.contains("No space left on device"), "{stderr}");
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(fs::metadata(&full).unwrap().file_type().is_char_device(), "the device node was replaced by a file");
}

#[test]
fn show_names_the_shared_table() {
    let config = config_with_shared_demo();
    let show = ratescope(config.path(), &["profile", "show", "demo"]);
    assert!(show.status.success(), "{}", text(&show.stderr));
    let stdout = text(&show.stdout);
    assert!(stdout.contains("shared budgets: key 'team'"), "{stdout}");
}

#[test]
fn a_start_removes_the_temporary_files_of_a_killed_save() {
    let config = tempfile::tempdir().unwrap();
    let profiles = config.path().join("profiles");
    fs::create_dir_all(&profiles).unwrap();
    let stale = profiles.join(".ratescope-killed.tmp");
    let fresh = profiles.join(".ratescope-running.tmp");
    fs::write(&stale, "name = \"half").unwrap();
    fs::write(&fresh, "name = \"half").unwrap();
    let an_hour_ago = SystemTime::now() - Duration::from_secs(3600);
    fs::File::options().write(true).open(&stale).unwrap().set_modified(an_hour_ago).unwrap();
    let list = ratescope(config.path(), &["profile", "list"]);
    assert!(list.status.success(), "{}", text(&list.stderr));
    assert!(!stale.exists(), "a killed save's temporary file is still there");
    assert!(fresh.exists(), "a save that may still be running lost its temporary file");
}

#[test]
fn endless_inputs_are_refused_naming_the_cap() {
    let config = tempfile::tempdir().unwrap();
    let sim_burst = concat!(env!("CARGO_MANIFEST_DIR"), "/assets/sim-burst.toml");
    for args in [
        &["profile", "import", "/dev/zero"][..],
        &["sim", "--server", "/dev/zero", "--burst", sim_burst],
        &["sim", "--burst", "/dev/zero"],
        &["burst", "http://127.0.0.1:9/", "--profile", "/dev/zero"],
        &["headers", "/dev/zero"],
    ] {
        let run = ratescope(config.path(), args);
        assert_eq!(run.status.code(), Some(1), "{args:?}");
        let stderr = text(&run.stderr);
        assert!(stderr.contains("/dev/zero") && stderr.contains("1 MiB"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_simulation_beyond_its_memory_cap_is_refused_before_it_starts() {
    let config = tempfile::tempdir().unwrap();
    let spec = config.path().join("huge.toml");
    fs::write(&spec, "path = \"/open\"\nrequests = 10000000\n").unwrap();
    let run = ratescope(config.path(), &["sim", "--burst", spec.to_str().unwrap()]);
    assert_eq!(run.status.code(), Some(1));
    let stderr = text(&run.stderr);
    assert!(stderr.contains("more than the simulator runs (250000)"), "{stderr}");
}

#[test]
fn usage_errors_exit_2_like_claps_own() {
    let config = tempfile::tempdir().unwrap();
    for args in [
        &["pace", "-n", "3", "--burst", "5"][..],
        &["pace", "-n", "3", "--rate", "5/1s", "--window", "nope"],
        &["burst", "http://127.0.0.1:9/", "-H", "Authorization Bearer s3cret"],
        &["burst", "http://127.0.0.1:9/", "--no-such-flag"],
        &["headers", "--now", "-5"],
        &["burst", "http://127.0.0.1:9/", "--rate", "1/1s", "--redis", "redis://127.0.0.1:9"],
        &["burst", "http://127.0.0.1:9/", "--timeout", "0s"],
        // Refused before the app opens and fires its burst, not when the PNG is written.
        &["--screenshot", "/nonexistent-dir/shot.png"],
    ] {
        let run = ratescope(config.path(), args);
        let stderr = text(&run.stderr);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {stderr}");
        assert!(!stderr.contains("s3cret"), "{args:?} echoed a header value: {stderr}");
    }
}

/// Issue #32, finding 12: refusals echo what was typed (or a compact form of it) and say what
/// is accepted instead.
#[test]
fn refused_numbers_are_echoed_as_typed_and_the_accepted_range_given() {
    let config = tempfile::tempdir().unwrap();
    let refused = |args: &[&str]| {
        let run = ratescope(config.path(), args);
        assert_eq!(run.status.code(), Some(2), "{args:?}: {}", text(&run.stderr));
        text(&run.stderr)
    };
    let stderr = refused(&["pace", "-n", "1", "--rate", "0.0000001/1s"]);
    assert!(!stderr.contains("greater than zero"), "{stderr}");
    assert!(stderr.contains("rounds to zero") && stderr.contains("the smallest is 0.000001/1s"), "{stderr}");
    let stderr = refused(&["pace", "-n", "1", "--rate", "18446744073709551615/1s"]);
    assert!(stderr.contains("'18446744073709551615' is too large"), "{stderr}");
    assert!(stderr.contains("1099511627776") && !stderr.contains("18446744073709552000"), "{stderr}");
    for args in [
        &["pace", "-n", "1", "--rate", "1/1s", "--high", "1e308"][..],
        &["burst", "http://127.0.0.1:9/", "--high", "1e308"],
        &["burst", "http://127.0.0.1:9/", "--low", "1e308"],
    ] {
        let stderr = refused(args);
        assert!(stderr.contains("'1e308' is not a share between 0 and 1"), "{args:?}: {stderr}");
        assert!(stderr.len() < 400, "{stderr}");
    }
    let stderr = refused(&["burst", "http://127.0.0.1:9/", "--rate", "1/1s", "--burst", "18446744073709551615"]);
    assert!(stderr.contains("18446744073709551615 is too large"), "{stderr}");
}

/// Issue #32, finding 12: `--rate 1.5/1s` lets through its amount as written, rounded up (2),
/// as the README says, not the 3 of its lowest terms (3/2s).
#[test]
fn the_burst_defaults_to_the_rates_amount_as_written() {
    let config = tempfile::tempdir().unwrap();
    for (rate, capacity) in [("1.5/1s", "2"), ("10/1s", "10"), ("0.5/1s", "1"), ("2.5/1s", "3")] {
        let run = ratescope(config.path(), &["pace", "-n", "1", "--rate", rate]);
        assert!(run.status.success(), "{}", text(&run.stderr));
        let stdout = text(&run.stdout);
        let limiter = stdout.lines().next().unwrap();
        assert!(limiter.contains(&format!("bucket {capacity} ")), "{rate}: {limiter}");
    }
}
