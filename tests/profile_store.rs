//! Profiles on disk, secrets kept apart, the client built from a profile, and `ratescope profile`.
//!
//! Every test works in its own `tempfile::tempdir()`; the CLI tests point the child process at
//! it with `RATESCOPE_CONFIG_DIR`, so the real config directory is never touched.

mod support;

use std::fs;
use std::path::Path;
use std::process::Command;

use ratescope::http::EventSink;
use ratescope::http::retry::GiveUpReason;
use ratescope::http::{ClientError, RetryPolicy};
use ratescope::profile::{
    BudgetEntry, DEMO_TOML, HostProfile, PathOverride, Profile, ProfileError, ProfileStore, RetryEntry, SecretStore,
};
use support::TestServer;

const SECRET: &str = "sk-live-7f3a9c1e5b";

fn store() -> (tempfile::TempDir, ProfileStore) {
    let dir = tempfile::tempdir().unwrap();
    let store = ProfileStore::at(dir.path().join("profiles"));
    (dir, store)
}

/// A profile with one of everything.
fn full_profile() -> Profile {
    let mut host = HostProfile::new("partner API", "https://api.partner.example:8443/v2");
    host.concurrency = Some(4);
    host.adaptive = true;
    host.budgets = vec![
        BudgetEntry::token_bucket("rate", 10, "10/1s"),
        BudgetEntry { cost: Some(2), ..BudgetEntry::sliding_window("hour", 1000, "1h") },
    ];
    host.headers.insert("accept".into(), "application/json".into());
    host.secret_headers = vec!["x-api-key".into()];
    host.retry = Some(RetryEntry {
        max_attempts: Some(3),
        base: Some("100ms".into()),
        jitter: Some("equal".into()),
        retry_statuses: Some(vec![429, 502, 503]),
        ..RetryEntry::default()
    });
    host.paths = vec![PathOverride {
        prefix: "/search".into(),
        concurrency: Some(1),
        budgets: vec![BudgetEntry::sliding_window("search", 2, "1s")],
    }];
    let mut profile = Profile::new("Partner");
    profile.hosts = vec![host, HostProfile::new("status page", "https://status.partner.example")];
    profile
}

fn demo_with(budgets: &str) -> String {
    format!("name = \"demo\"\n\n[[hosts]]\nname = \"demo API\"\nbase_url = \"http://127.0.0.1:8787\"\n{budgets}\n")
}

#[test]
fn a_saved_profile_loads_back_equal() {
    let (_dir, store) = store();
    let profile = full_profile();
    let path = store.save(&profile).unwrap();
    assert_eq!(path.file_name().unwrap(), "partner.toml");
    assert_eq!(store.load("Partner").unwrap(), profile);
    let demo = Profile::demo().unwrap();
    store.save(&demo).unwrap();
    assert_eq!(store.load("demo").unwrap(), demo);
}

#[test]
fn the_second_save_keeps_the_first_as_bak() {
    let (_dir, store) = store();
    let mut profile = full_profile();
    let path = store.save(&profile).unwrap();
    let first = fs::read_to_string(&path).unwrap();
    assert!(!path.with_file_name("partner.toml.bak").exists(), "nothing to back up on the first save");
    profile.hosts[0].concurrency = Some(8);
    store.save(&profile).unwrap();
    assert_eq!(fs::read_to_string(path.with_file_name("partner.toml.bak")).unwrap(), first);
    assert_eq!(store.load("partner").unwrap().hosts[0].concurrency, Some(8));
    let leftovers: Vec<_> = fs::read_dir(store.dir()).unwrap().map(|e| e.unwrap().file_name()).collect();
    assert_eq!(leftovers.len(), 2, "no temporary files left behind: {leftovers:?}");
}

/// #34 item 3: a save over a commented file keeps its comments, with the guarantees of any
/// save (the old version as `.bak`, owner-only, reads back as saved); an unchanged one is left.
#[test]
fn a_save_over_a_commented_file_keeps_its_comments() {
    let (_dir, store) = store();
    assert!(store.ensure_demo().unwrap());
    let path = store.path_of("demo").unwrap();
    let mut demo = store.load("demo").unwrap();
    assert_eq!(store.save(&demo).unwrap(), path);
    assert_eq!(fs::read_to_string(&path).unwrap(), DEMO_TOML, "nothing changed: the same bytes");
    assert!(!path.with_file_name("demo.toml.bak").exists(), "and not rewritten");

    demo.hosts[0].budgets[0].capacity = Some(4);
    assert_eq!(store.text_for(&demo).unwrap(), DEMO_TOML.replacen("capacity = 5", "capacity = 4", 1));
    store.save(&demo).unwrap();
    let text = fs::read_to_string(&path).unwrap();
    assert_eq!(text, DEMO_TOML.replacen("capacity = 5", "capacity = 4", 1), "only that number changed");
    assert_eq!(store.load("demo").unwrap(), demo);
    assert_eq!(fs::read_to_string(path.with_file_name("demo.toml.bak")).unwrap(), DEMO_TOML);
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    }
    assert_eq!(store.text("demo").unwrap(), text, "the file's own text");
}

#[test]
fn a_corrupt_file_is_reported_with_its_line_and_never_overwritten() {
    let (_dir, store) = store();
    fs::create_dir_all(store.dir()).unwrap();
    let path = store.dir().join("demo.toml");
    let corrupt = "name = \"demo\"\n[[hosts]]\nname = \"demo API\nbase_url = \"http://127.0.0.1:8787\"\n";
    fs::write(&path, corrupt).unwrap();

    let err = store.load("demo").unwrap_err().to_string();
    assert!(err.contains("demo.toml") && err.contains("line 3"), "{err}");

    let err = store.save(&Profile::demo().unwrap()).unwrap_err();
    assert!(matches!(err, ProfileError::Broken { .. }), "{err:?}");
    let message = err.to_string();
    assert!(message.contains("demo.toml") && message.contains("line 3"), "{message}");
    assert!(message.contains("fix it or delete it"), "{message}");
    assert_eq!(fs::read_to_string(&path).unwrap(), corrupt, "the broken file is untouched");
    assert!(!path.with_file_name("demo.toml.bak").exists());
}

#[test]
fn a_file_with_absurd_settings_is_broken_too() {
    let (_dir, store) = store();
    fs::create_dir_all(store.dir()).unwrap();
    let path = store.dir().join("demo.toml");
    let text = demo_with("concurrency = 0");
    fs::write(&path, &text).unwrap();
    let err = store.save(&Profile::demo().unwrap()).unwrap_err().to_string();
    assert!(err.contains("demo.toml") && err.contains("line 6, column 15"), "{err}");
    assert!(err.contains("host 'demo API': concurrency: 0 would never let a request through"), "{err}");
    assert_eq!(fs::read_to_string(&path).unwrap(), text);
}

#[test]
fn absurd_settings_are_refused_naming_the_host() {
    let bucket = |capacity: &str, rate: &str| {
        demo_with(&format!(
            "budgets = [{{ name = \"rate\", kind = \"token_bucket\", capacity = {capacity}, rate = \"{rate}\" }}]"
        ))
    };
    let cases = [
        (bucket("0", "5/1s"), "budget 'rate': capacity 0 would never let a request through"),
        (bucket("5", "0/1s"), "budget 'rate': rate \"0/1s\": a rate of zero never refills"),
        (bucket("5", "NaN/1s"), "budget 'rate': rate \"NaN/1s\": NaN is not a finite number"),
        (demo_with("concurrency = 0"), "concurrency: 0 would never let a request through"),
        (demo_with("[hosts.retry]\njitter = \"wobbly\""), "retry: unknown jitter \"wobbly\""),
        (
            demo_with(
                "[[hosts.paths]]\nprefix = \"/s\"\nbudgets = [{ name = \"w\", kind = \"sliding_window\", limit = 2, window = \"0s\" }]",
            ),
            "path '/s': budget 'w': window \"0s\": a duration of zero",
        ),
    ];
    for (text, expected) in cases {
        let err = Profile::from_toml(&text).unwrap_err();
        let message = err.to_string();
        assert!(message.contains(&format!("host 'demo API': {expected}")), "{message}");
        assert!(err.position().is_some_and(|p| p.line >= 6), "placed on the offending line: {message}");
    }
    // The same checks guard profiles built in code.
    let mut profile = Profile::demo().unwrap();
    profile.hosts[0].budgets[0].rate = Some("NaN/1s".into());
    let err = profile.validate().unwrap_err().to_string();
    assert!(err.starts_with("host 'demo API': budget 'rate': rate \"NaN/1s\""), "{err}");
    let (_dir, store) = store();
    assert!(store.save(&profile).is_err(), "an invalid profile is never saved");
    assert!(!store.dir().join("demo.toml").exists());
}

#[test]
fn the_demo_registry_routes_paths_to_their_keys() {
    let registry = Profile::demo().unwrap().registry().unwrap();
    let key = |path: &str| registry.limiter_for("127.0.0.1", Some(8787), path).map(|l| l.key().to_owned());
    assert_eq!(key("/search/x").as_deref(), Some("127.0.0.1:8787/search"));
    assert_eq!(key("/search").as_deref(), Some("127.0.0.1:8787/search"));
    assert_eq!(key("/items").as_deref(), Some("127.0.0.1:8787"));
    assert_eq!(key("/searching").as_deref(), Some("127.0.0.1:8787"), "prefixes match whole segments");
    assert_eq!(key("/slow/1").as_deref(), Some("127.0.0.1:8787/slow"));
    assert!(registry.limiter_for("127.0.0.1", Some(9999), "/items").is_none(), "another port is another host");
    let items = registry.limiter_for("127.0.0.1", Some(8787), "/items").unwrap();
    assert_eq!(items.config().describe(), "bucket 5 @ 5/1s, window 100/1m");
}

#[test]
fn list_reports_a_broken_file_and_lists_the_others() {
    let (_dir, store) = store();
    store.save(&Profile::demo().unwrap()).unwrap();
    store.save(&full_profile()).unwrap();
    fs::write(store.dir().join("broken.toml"), "name = \"broken\"\nhosts = 3\n").unwrap();
    fs::write(store.dir().join("notes.txt"), "not a profile").unwrap();
    let entries = store.list().unwrap();
    assert_eq!(entries.len(), 3, "{entries:?}");
    let err = entries[0].as_ref().unwrap_err().to_string();
    assert!(err.contains("broken.toml") && err.contains("line 2"), "{err}");
    let ok: Vec<(String, usize)> = entries.iter().flatten().map(|s| (s.name.clone(), s.hosts)).collect();
    assert_eq!(ok, [("demo".to_owned(), 1), ("Partner".to_owned(), 2)]);
    assert!(ProfileStore::at(store.dir().join("missing")).list().unwrap().is_empty());
}

#[test]
fn import_refuses_to_replace_unless_asked_and_delete_keeps_a_backup() {
    let (dir, store) = store();
    let file = dir.path().join("incoming.toml");
    fs::write(&file, DEMO_TOML).unwrap();
    store.import(&file, false).unwrap();
    let err = store.import(&file, false).unwrap_err();
    assert!(matches!(err, ProfileError::Exists { .. }), "{err}");
    fs::write(&file, DEMO_TOML.replace("capacity = 5", "capacity = 7")).unwrap();
    store.import(&file, true).unwrap();
    assert_eq!(store.load("demo").unwrap().hosts[0].budgets[0].capacity, Some(7));
    assert!(fs::read_to_string(store.dir().join("demo.toml")).unwrap().contains("# The demo profile"), "comments kept");

    fs::write(&file, demo_with("concurrency = 0")).unwrap();
    let err = store.import(&file, true).unwrap_err().to_string();
    assert!(err.contains("incoming.toml") && err.contains("line 6"), "{err}");

    let backup = store.delete("demo").unwrap();
    assert!(backup.ends_with("demo.toml.bak") && backup.exists());
    assert!(matches!(store.load("demo"), Err(ProfileError::NotFound { .. })));
    assert!(matches!(store.delete("demo"), Err(ProfileError::NotFound { .. })));
}

#[test]
fn a_file_holding_another_profiles_name_is_refused() {
    let (_dir, store) = store();
    fs::create_dir_all(store.dir()).unwrap();
    fs::write(store.dir().join("mine.toml"), DEMO_TOML).unwrap();
    let err = store.load("mine").unwrap_err().to_string();
    assert!(err.contains("holds profile 'demo'") && err.contains("demo.toml"), "{err}");
    let mut other = Profile::demo().unwrap();
    other.name = "Demo".into();
    store.save(&Profile::demo().unwrap()).unwrap();
    let err = store.save(&other).unwrap_err();
    assert!(matches!(err, ProfileError::NameClash { .. }), "{err}");
}

#[test]
fn ensure_demo_writes_once_and_never_overwrites() {
    let (_dir, store) = store();
    assert!(store.ensure_demo().unwrap());
    let path = store.dir().join("demo.toml");
    assert_eq!(fs::read_to_string(&path).unwrap(), DEMO_TOML);
    fs::write(&path, "edited by hand = [").unwrap();
    assert!(!store.ensure_demo().unwrap());
    assert_eq!(fs::read_to_string(&path).unwrap(), "edited by hand = [");
}

#[cfg(unix)]
#[test]
fn the_secrets_file_is_private_and_a_readable_one_is_refused() {
    use std::os::unix::fs::PermissionsExt;
    let dir = tempfile::tempdir().unwrap();
    let path = dir.path().join("config").join("secrets.toml");
    let mut secrets = SecretStore::open(&path).unwrap();
    secrets.set("demo", "demo API", "X-Api-Key", SECRET);
    secrets.save().unwrap();
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600);
    assert_eq!(fs::metadata(path.parent().unwrap()).unwrap().permissions().mode() & 0o777, 0o700);
    secrets.save().unwrap();
    assert_eq!(fs::metadata(&path).unwrap().permissions().mode() & 0o777, 0o600, "still private after a rewrite");
    let reopened = SecretStore::open(&path).unwrap();
    assert_eq!(reopened.status("demo", "demo API", "x-api-key"), ratescope::profile::SecretStatus::Stored);

    fs::set_permissions(&path, fs::Permissions::from_mode(0o644)).unwrap();
    let err = SecretStore::open(&path).unwrap_err().to_string();
    assert!(err.contains("chmod 600") && err.contains("644"), "{err}");
    assert!(!err.contains(SECRET));
}

#[test]
fn environment_references_resolve_and_an_unset_one_is_named() {
    let mut profile = Profile::demo().unwrap();
    profile.hosts[0].secret_headers = vec!["authorization".into(), "x-api-key".into()];
    let mut secrets = SecretStore::in_memory();
    secrets.set("demo", "demo API", "authorization", "Bearer ${DEMO_TOKEN}");
    secrets.set("demo", "demo API", "x-api-key", SECRET);
    let host = &profile.hosts[0];
    let env = |name: &str| (name == "DEMO_TOKEN").then(|| "tok-123".to_owned());
    let headers = secrets.headers_for_with_env("demo", host, env).unwrap();
    assert_eq!(headers["authorization"], "Bearer tok-123");
    assert_eq!(headers["x-api-key"], SECRET);
    assert!(headers["x-api-key"].is_sensitive());

    let err = secrets.headers_for_with_env("demo", host, |_| None).unwrap_err();
    assert!(matches!(&err, ProfileError::UnsetVariable { variable, .. } if variable == "DEMO_TOKEN"));
    assert_eq!(
        err.to_string(),
        "host 'demo API': secret header 'authorization' refers to ${DEMO_TOKEN}, but the environment variable DEMO_TOKEN is not set"
    );
    // The real environment: a variable nobody sets.
    secrets.set("demo", "demo API", "authorization", "${RATESCOPE_TEST_NEVER_SET_4F1C}");
    let err = secrets.headers_for("demo", host).unwrap_err().to_string();
    assert!(err.contains("RATESCOPE_TEST_NEVER_SET_4F1C is not set"), "{err}");
    // A declared secret with no value at all.
    secrets.remove("demo", "demo API", "x-api-key");
    secrets.set("demo", "demo API", "authorization", "plain");
    let err = secrets.headers_for("demo", host).unwrap_err().to_string();
    assert!(err.contains("secret header 'x-api-key' has no value"), "{err}");
}

#[test]
fn secrets_stay_out_of_exports_and_debug_output() {
    let (dir, store) = store();
    let mut profile = full_profile();
    profile.name = "partner".into();
    store.save(&profile).unwrap();
    let secrets_path = dir.path().join("secrets.toml");
    let mut secrets = SecretStore::open(&secrets_path).unwrap();
    secrets.set("partner", "partner API", "x-api-key", SECRET);
    secrets.save().unwrap();
    assert!(fs::read_to_string(&secrets_path).unwrap().contains(SECRET), "the store holds the value");

    let exported = dir.path().join("export").join("partner.toml");
    fs::create_dir_all(exported.parent().unwrap()).unwrap();
    store.export("partner", &exported).unwrap();
    let text = fs::read_to_string(&exported).unwrap();
    assert!(!text.contains(SECRET), "{text}");
    assert!(text.contains("secret_headers = [\"x-api-key\"]"), "names are fine: {text}");
    assert_eq!(Profile::from_toml(&text).unwrap(), profile);
    for file in fs::read_dir(store.dir()).unwrap() {
        assert!(!fs::read_to_string(file.unwrap().path()).unwrap().contains(SECRET));
    }

    let debug = format!("{secrets:?} {:?}", SecretStore::open(&secrets_path).unwrap());
    assert!(!debug.contains(SECRET) && debug.contains("***"), "{debug}");
    let headers = secrets.headers_for("partner", &profile.hosts[0]).unwrap();
    assert!(!format!("{headers:?}").contains(SECRET));
}

#[tokio::test(start_paused = true)]
async fn the_client_sends_each_hosts_headers_and_uses_its_retry_policy() {
    let server = TestServer::start(100, std::time::Duration::from_secs(60), 0).await;
    let elsewhere = TestServer::start(100, std::time::Duration::from_secs(60), 0).await;
    let mut host = HostProfile::new("local", format!("http://{}", server.addr));
    host.headers.insert("accept".into(), "application/json".into());
    host.secret_headers = vec!["x-api-key".into()];
    host.retry = Some(RetryEntry { max_attempts: Some(2), ..RetryEntry::default() });
    host.budgets = vec![BudgetEntry::token_bucket("rate", 5, "5/1s")];
    let mut profile = Profile::new("local");
    profile.hosts.push(host);
    let mut secrets = SecretStore::in_memory();
    secrets.set("local", "local", "x-api-key", SECRET);

    let client = profile.client_builder(&secrets).unwrap().without_timers().build().unwrap();
    client.get(server.url("/ok")).await.unwrap();
    let seen = &server.arrivals()[0].headers;
    assert_eq!(seen["x-api-key"], SECRET);
    assert_eq!(seen["accept"], "application/json");

    client.get(elsewhere.url("/ok")).await.unwrap();
    assert!(elsewhere.arrivals()[0].headers.get("x-api-key").is_none(), "secrets go to their own host only");

    let err = client.get(server.url("/always-429")).await.unwrap_err();
    assert!(
        matches!(err, ClientError::GaveUp { reason: GiveUpReason::AttemptsExhausted { attempts: 2, .. }, .. }),
        "the host's max_attempts = 2, not the default {}: {err}",
        RetryPolicy::default().max_attempts
    );
    assert_eq!(server.count_status(429), 2);
    let other = client.get(elsewhere.url("/always-429")).await.unwrap_err();
    assert!(matches!(other, ClientError::GaveUp { attempts: 5, .. }), "other hosts keep the default: {other}");

    assert!(client.registry().limiter_for("127.0.0.1", Some(server.addr.port()), "/ok").is_some());
    assert!(profile.client(&SecretStore::in_memory(), EventSink::none()).is_err(), "a missing secret is an error");
}

// ---- the command line ----

fn ratescope(config: &Path, args: &[&str]) -> (bool, String, String) {
    let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(args)
        .env("RATESCOPE_CONFIG_DIR", config)
        .env_remove("RATESCOPE_LOG")
        .output()
        .unwrap();
    (output.status.success(), String::from_utf8(output.stdout).unwrap(), String::from_utf8(output.stderr).unwrap())
}

#[test]
fn cli_import_list_show_export() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let file = dir.path().join("demo.toml");
    fs::write(&file, DEMO_TOML).unwrap();

    let (ok, stdout, stderr) = ratescope(&config, &["profile", "import", file.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("imported profile 'demo' (1 host)"), "{stdout}");
    assert!(config.join("profiles").join("demo.toml").exists(), "RATESCOPE_CONFIG_DIR is the config directory");

    let (ok, _, stderr) = ratescope(&config, &["profile", "import", file.to_str().unwrap()]);
    assert!(!ok && stderr.contains("already exists"), "{stderr}");
    let (ok, _, stderr) = ratescope(&config, &["profile", "import", "--overwrite", file.to_str().unwrap()]);
    assert!(ok, "{stderr}");

    let (ok, stdout, stderr) = ratescope(&config, &["profile", "list"]);
    assert!(ok, "{stderr}");
    assert!(stdout.starts_with("demo  1 host"), "{stdout}");

    let (ok, stdout, stderr) = ratescope(&config, &["profile", "show", "demo"]);
    assert!(ok, "{stderr}");
    for expected in [
        "host 'demo API'  http://127.0.0.1:8787  (key 127.0.0.1:8787)",
        "budget 'rate': bucket 5 @ 5/1s",
        "budget 'minute': window 100/1m",
        "path /search  (key 127.0.0.1:8787/search)",
        "budget 'search': window 2/1s",
        "concurrency: 1",
        "adaptive: on",
        "retry: up to 5 attempts on 429, 503",
    ] {
        assert!(stdout.contains(expected), "missing {expected:?} in:\n{stdout}");
    }

    let out = dir.path().join("out.toml");
    let (ok, _, stderr) = ratescope(&config, &["profile", "export", "demo", out.to_str().unwrap()]);
    assert!(ok, "{stderr}");
    assert_eq!(Profile::from_toml(&fs::read_to_string(&out).unwrap()).unwrap(), Profile::demo().unwrap());
    let (ok, stdout, _) = ratescope(&config, &["profile", "export", "demo", "-"]);
    assert!(ok, "{stdout}");
    assert_eq!(stdout, DEMO_TOML, "the saved file as it is, comments included");
    assert_eq!(fs::read_to_string(&out).unwrap(), DEMO_TOML);
}

#[test]
fn cli_show_masks_secret_values() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let mut profile = Profile::demo().unwrap();
    profile.hosts[0].secret_headers = vec!["x-api-key".into()];
    ProfileStore::at(config.join("profiles")).save(&profile).unwrap();
    let mut secrets = SecretStore::open(&config.join("secrets.toml")).unwrap();
    secrets.set("demo", "demo API", "x-api-key", SECRET);
    secrets.save().unwrap();

    let (ok, stdout, stderr) = ratescope(&config, &["profile", "show", "demo"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("secret header x-api-key: *** (in the secret store)"), "{stdout}");
    assert!(!stdout.contains(SECRET) && !stderr.contains(SECRET), "{stdout}{stderr}");
    let (ok, stdout, _) = ratescope(&config, &["profile", "export", "demo", "-"]);
    assert!(ok && !stdout.contains(SECRET), "{stdout}");
}

#[test]
fn cli_errors_are_clear_and_exit_non_zero() {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("config");
    let profiles = dir.path().join("elsewhere");
    fs::create_dir_all(&profiles).unwrap();
    fs::write(profiles.join("demo.toml"), DEMO_TOML).unwrap();
    fs::write(profiles.join("bad.toml"), "name = \"bad\"\n[[hosts]]\nname = 3\n").unwrap();

    // --profiles-dir works before or after the subcommand.
    let dir_arg = profiles.to_str().unwrap();
    let (ok, stdout, stderr) = ratescope(&config, &["profile", "--profiles-dir", dir_arg, "list"]);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("demo") && !stdout.contains("bad"), "{stdout}");
    assert!(stderr.contains("warning: skipped a broken profile") && stderr.contains("bad.toml: line 3"), "{stderr}");
    let (ok, stdout, _) = ratescope(&config, &["profile", "show", "demo", "--profiles-dir", dir_arg]);
    assert!(ok && stdout.contains("demo API"), "{stdout}");

    let (ok, _, stderr) = ratescope(&config, &["profile", "show", "nope"]);
    assert!(!ok && stderr.contains("no profile named 'nope'"), "{stderr}");
    let (ok, _, stderr) = ratescope(&config, &["profile", "show", "bad", "--profiles-dir", dir_arg]);
    assert!(!ok && stderr.contains("bad.toml: line 3, column 8"), "{stderr}");
    let (ok, _, stderr) = ratescope(&config, &["profile", "import", "/nonexistent/p.toml"]);
    assert!(!ok && stderr.contains("cannot read /nonexistent/p.toml"), "{stderr}");
    assert!(!config.exists(), "failed commands created nothing");
}
