//! `ratescope profile export NAME FILE --as FORMAT [--host H] [--path P]`: exit codes and
//! messages for bad input, stdout for `-`, a file written whole, and TOML as before by default.

use std::fs;
use std::path::Path;
use std::process::{Command, Output, Stdio};

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

/// A config dir holding `profiles/<slug>.toml` with `toml`.
fn config_with(slug: &str, toml: &str) -> tempfile::TempDir {
    let config = tempfile::tempdir().unwrap();
    fs::create_dir(config.path().join("profiles")).unwrap();
    fs::write(config.path().join("profiles").join(format!("{slug}.toml")), toml).unwrap();
    config
}

const TWO_HOSTS: &str = r#"name = "two"

[[hosts]]
name = "api"
base_url = "https://api.example.com"
concurrency = 2
budgets = [{ name = "rate", kind = "token_bucket", capacity = 5, rate = "5/1s" }]
secret_headers = ["x-api-key"]
headers = { "accept" = "application/json" }

[[hosts.paths]]
prefix = "/search"
budgets = [{ name = "search", kind = "sliding_window", limit = 2, window = "1s" }]

[[hosts]]
name = "bare"
base_url = "https://bare.example.com"
"#;

#[test]
fn each_format_goes_to_stdout_for_a_dash() {
    let config = config_with("two", TWO_HOSTS);
    for (format, marker) in [
        ("bottleneck", "require('bottleneck')"),
        ("aiolimiter", "from aiolimiter import AsyncLimiter"),
        ("governor", "pub fn host_limits() -> HostLimits"),
        ("go", "func NewHostLimits() *HostLimits"),
    ] {
        let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", format, "--host", "api"]);
        assert!(out.status.success(), "{format}: {}", text(&out.stderr));
        let stdout = text(&out.stdout);
        assert!(stdout.contains(marker) && stdout.contains("Budget 'rate'"), "{format}: {stdout}");
        assert!(!stdout.contains("x-api-key") && !stdout.contains("application/json"), "{format}: {stdout}");
        assert!(stdout.contains("--path /search"), "{format} says how to export the path: {stdout}");
    }
}

#[test]
fn a_path_override_is_exported_with_path() {
    let config = config_with("two", TWO_HOSTS);
    let out = ratescope(
        config.path(),
        &["profile", "export", "two", "-", "--as", "go", "--host", "api", "--path", "/search"],
    );
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("Budget 'search'") && !stdout.contains("Budget 'rate'"), "{stdout}");
}

#[test]
fn several_hosts_need_host_and_a_wrong_one_is_a_usage_error_listing_them() {
    let config = config_with("two", TWO_HOSTS);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "go"]);
    assert_eq!(out.status.code(), Some(2), "{}", text(&out.stderr));
    assert!(text(&out.stderr).contains("has 2 hosts; pick one with --host: 'api', 'bare'"), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty());
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "go", "--host", "apj"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("no host 'apj'; its hosts: 'api', 'bare'"), "{}", text(&out.stderr));
}

#[test]
fn an_unknown_format_is_a_usage_error_naming_the_formats() {
    let config = config_with("two", TWO_HOSTS);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "ratelimiter"]);
    assert_eq!(out.status.code(), Some(2));
    let stderr = text(&out.stderr);
    for format in ["toml", "bottleneck", "aiolimiter", "governor", "go"] {
        assert!(stderr.contains(format), "{format} missing from: {stderr}");
    }
}

#[test]
fn toml_takes_no_host_and_stays_the_saved_file_by_default() {
    let config = config_with("two", TWO_HOSTS);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--host", "api"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("--as toml writes the whole profile"), "{}", text(&out.stderr));
    let out = ratescope(config.path(), &["profile", "export", "two", "-"]);
    assert!(out.status.success());
    assert_eq!(text(&out.stdout), TWO_HOSTS);
}

#[test]
fn a_host_without_limits_exports_a_limiter_that_says_so() {
    let config = config_with("two", TWO_HOSTS);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "aiolimiter", "--host", "bare"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    let stdout = text(&out.stdout);
    assert!(stdout.contains("no request limits in the profile") && stdout.contains("_BUDGETS = (\n)"), "{stdout}");
}

#[test]
fn a_directory_as_file_fails_and_names_it() {
    let config = config_with("two", TWO_HOSTS);
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().to_str().unwrap();
    let out = ratescope(config.path(), &["profile", "export", "two", target, "--as", "go", "--host", "api"]);
    assert_eq!(out.status.code(), Some(1));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("cannot export profile 'two'") && stderr.contains("directory"), "{stderr}");
}

#[test]
fn a_file_is_written_whole_and_a_replaced_one_is_said() {
    let config = config_with("two", TWO_HOSTS);
    let dir = tempfile::tempdir().unwrap();
    let target = dir.path().join("limits.js");
    let path = target.to_str().unwrap();
    let out = ratescope(config.path(), &["profile", "export", "two", path, "--as", "bottleneck", "--host", "api"]);
    assert!(out.status.success(), "{}", text(&out.stderr));
    assert!(!text(&out.stdout).contains("replaced"), "{}", text(&out.stdout));
    let first = fs::read_to_string(&target).unwrap();
    assert!(first.starts_with("// Rate limits of host 'api'") && first.ends_with(";\n"), "{first}");
    let out = ratescope(config.path(), &["profile", "export", "two", path, "--as", "bottleneck", "--host", "api"]);
    assert!(text(&out.stdout).contains("(it replaced the file that was there)"), "{}", text(&out.stdout));
    assert_eq!(fs::read_to_string(&target).unwrap(), first, "the same profile writes the same bytes");
}

#[test]
fn absurd_values_are_refused_with_what_to_do() {
    let tiny_rate = TWO_HOSTS.replace("rate = \"5/1s\"", "rate = \"0.000000001/1s\"");
    let config = config_with("two", &tiny_rate);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "go", "--host", "api"]);
    assert_eq!(out.status.code(), Some(1), "{}", text(&out.stdout));
    let stderr = text(&out.stderr);
    assert!(stderr.contains("budget 'rate'") && stderr.contains("the smallest is 0.000001/1s"), "{stderr}");
    let huge = TWO_HOSTS.replace("capacity = 5", "capacity = 9223372036854775808");
    let config = config_with("two", &huge);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "governor", "--host", "api"]);
    assert_eq!(out.status.code(), Some(1));
    assert!(text(&out.stderr).contains("line 7"), "{}", text(&out.stderr));
    let month = TWO_HOSTS.replace("capacity = 5, rate = \"5/1s\"", "capacity = 1, rate = \"1/30d\"");
    let config = config_with("two", &month);
    let out = ratescope(config.path(), &["profile", "export", "two", "-", "--as", "bottleneck", "--host", "api"]);
    assert_eq!(out.status.code(), Some(2));
    assert!(text(&out.stderr).contains("longer than Node's timers"), "{}", text(&out.stderr));
    assert!(out.stdout.is_empty(), "nothing half-written to stdout");
}
