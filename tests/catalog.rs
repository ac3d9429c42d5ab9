//! The catalogue of known APIs from the command line: `profile catalog`, `profile new --from`,
//! and `probe --profile` saying whether a profile's budgets hold against the demo API.
//!
//! Every test runs the built binary with `RATESCOPE_CONFIG_DIR` in its own temporary directory.

use std::fs;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Output};

use ratescope::mock::{MockConfig, MockServer};
use ratescope::profile::{BudgetEntry, HostProfile, Profile, ProfileStore, SecretStatus, SecretStore, catalog};

fn ratescope(config_dir: &Path, args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratescope")).args(args).env("RATESCOPE_CONFIG_DIR", config_dir).output().unwrap()
}

fn text(output: &Output) -> (String, String) {
    (String::from_utf8_lossy(&output.stdout).into_owned(), String::from_utf8_lossy(&output.stderr).into_owned())
}

#[test]
fn the_catalogue_lists_every_entry_with_its_documentation() {
    let dir = tempfile::tempdir().unwrap();
    let output = ratescope(dir.path(), &["profile", "catalog"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    for entry in catalog::entries().unwrap() {
        let line = stdout.lines().find(|line| line.starts_with(&format!("{} ", entry.id))).expect(entry.id);
        assert!(line.contains(&entry.info.title) && line.ends_with(&entry.info.docs), "{line}");
    }
    let output = ratescope(dir.path(), &["profile", "catalog", "--json"]);
    let json: serde_json::Value = serde_json::from_slice(&output.stdout).unwrap();
    let entries = json.as_array().unwrap();
    assert_eq!(entries.len(), catalog::ids().count());
    let openai = entries.iter().find(|entry| entry["id"] == "openai").unwrap();
    assert_eq!(openai["dialect"], "openai");
    assert_eq!(openai["env"], serde_json::json!(["OPENAI_API_KEY"]));
    assert!(openai["tier"].as_str().unwrap().contains("tier 1"));
    assert_eq!(openai["base_url"], "https://api.openai.com");
}

#[test]
fn a_new_profile_from_an_entry_is_written_with_env_references_and_never_overwritten_unasked() {
    let dir = tempfile::tempdir().unwrap();
    let output = ratescope(dir.path(), &["profile", "new", "gh", "--from", "github-rest"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stderr}");
    assert!(stdout.contains("made profile 'gh' from github-rest"), "{stdout}");
    assert!(stdout.contains("https://docs.github.com/"), "the documentation page is named: {stdout}");
    assert!(stdout.contains("ratescope probe 'https://api.github.com/user' --profile 'gh'"), "{stdout}");

    let store = ProfileStore::at(dir.path().join("profiles"));
    let made = store.load("gh").unwrap();
    let entry = catalog::entry("github-rest").unwrap();
    assert_eq!(made.hosts, entry.profile.hosts, "the entry's host, budgets, retry and endpoints");
    let secrets = SecretStore::open(&dir.path().join("secrets.toml")).unwrap();
    assert_eq!(
        secrets.status("gh", "GitHub REST", "authorization"),
        SecretStatus::FromEnv(vec!["GITHUB_TOKEN".into()])
    );

    let path = store.path_of("gh").unwrap();
    fs::write(&path, fs::read_to_string(&path).unwrap().replace("limit = 5000", "limit = 4000")).unwrap();
    let edited = fs::read_to_string(&path).unwrap();
    let output = ratescope(dir.path(), &["profile", "new", "gh", "--from", "stripe"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(1), "{stderr}");
    assert!(stderr.contains("already exists") && stderr.contains("--force"), "{stderr}");
    assert_eq!(fs::read_to_string(&path).unwrap(), edited, "the existing profile is untouched");

    let output = ratescope(dir.path(), &["profile", "new", "gh", "--from", "stripe", "--force"]);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    assert_eq!(store.load("gh").unwrap().hosts[0].name, "Stripe");
    assert_eq!(fs::read_to_string(path.with_file_name("gh.toml.bak")).unwrap(), edited, "the old one is kept");
}

#[test]
fn a_base_url_replaces_the_entrys_placeholder() {
    let dir = tempfile::tempdir().unwrap();
    let args = ["profile", "new", "shop", "--from", "shopify-admin-rest", "--base-url", "https://acme.myshopify.com/"];
    let output = ratescope(dir.path(), &args);
    assert_eq!(output.status.code(), Some(0), "{}", text(&output).1);
    let made = ProfileStore::at(dir.path().join("profiles")).load("shop").unwrap();
    assert_eq!(made.hosts[0].base_url, "https://acme.myshopify.com");
}

#[test]
fn an_unknown_id_is_a_usage_error_naming_the_close_ones() {
    let dir = tempfile::tempdir().unwrap();
    let output = ratescope(dir.path(), &["profile", "new", "gh", "--from", "github"]);
    let (_, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(2), "{stderr}");
    assert!(stderr.contains("no catalogue entry 'github'"), "{stderr}");
    assert!(stderr.contains("'github-rest'") && stderr.contains("'github-graphql'"), "{stderr}");
    assert!(!dir.path().join("profiles").exists(), "nothing written");
}

/// The demo API with `/api` allowing 10 requests a minute, published in IETF headers.
fn ten_a_minute() -> MockConfig {
    let text = "[[routes]]\nprefix = \"/api\"\ndialect = \"ietf\"\n\n[[routes.policies]]\nname = \"minute\"\n\
                kind = \"fixed_window\"\nlimit = 10\nwindow = \"1m\"\n";
    MockConfig::from_toml(text).unwrap()
}

/// Probes the demo API's `/api` with `--profile` holding `budget` for its host; returns the
/// JSON report.
fn probe_against(budget: BudgetEntry) -> serde_json::Value {
    let runtime = tokio::runtime::Builder::new_multi_thread().worker_threads(2).enable_all().build().unwrap();
    let server = runtime.block_on(MockServer::start(ten_a_minute(), SocketAddr::from(([127, 0, 0, 1], 0)))).unwrap();
    let dir = tempfile::tempdir().unwrap();
    let mut host = HostProfile::new("demo", server.url().as_str().trim_end_matches('/'));
    host.budgets = vec![budget];
    let mut profile = Profile::new("checked");
    profile.hosts.push(host);
    ProfileStore::at(dir.path().join("profiles")).save(&profile).unwrap();
    let url = format!("{}api", server.url());
    let output = ratescope(dir.path(), &["probe", &url, "--max-requests", "5", "--json", "--profile", "checked"]);
    let (stdout, stderr) = text(&output);
    assert_eq!(output.status.code(), Some(0), "{stdout}\n{stderr}");
    drop(server);
    serde_json::from_str(&stdout).unwrap()
}

#[test]
fn the_probe_says_a_budget_above_the_servers_is_too_high() {
    let json = probe_against(BudgetEntry::sliding_window("minute", 100, "1m"));
    let check = &json["profile_check"];
    assert_eq!(check["profile"], "checked");
    let first = &check["checks"][0];
    assert_eq!(first["verdict"], "too_high", "{check:#}");
    assert!(first["advice"].as_str().unwrap().contains("lets 100 go at once where the server allows 10"), "{check:#}");
    assert!(json["suggested"]["budgets"].is_array(), "the report itself is still there");
}

#[test]
fn the_probe_confirms_a_budget_that_matches() {
    let json = probe_against(BudgetEntry::sliding_window("minute", 10, "1m"));
    assert_eq!(json["profile_check"]["checks"][0]["verdict"], "confirmed", "{json:#}");
}
