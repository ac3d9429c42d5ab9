//! `ratescope profile import-curl` as a user runs it, pasting what browsers and API docs give:
//! credentials never reach the profile file (mode 0600), `show` or `export`, no message echoes
//! one, a stored secret is never replaced silently, huge pastes fail naming the cap, and a
//! profile name that only shares a file name is never merged into.

mod support;

use std::path::Path;
use std::process::{Command, Stdio};

use support::cli::run;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/curl");

fn fixture(name: &str) -> String {
    std::fs::read_to_string(Path::new(FIXTURES).join(name)).unwrap()
}

fn read(path: impl AsRef<Path>) -> String {
    std::fs::read_to_string(path).unwrap_or_default()
}

/// Finding 2: a Firefox paste's cookie and CSRF token go to the secret store only; the
/// profile file is private.
#[test]
fn a_browser_paste_keeps_its_credentials_out_of_the_profile_show_and_export() {
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    let (code, stdout, stderr) =
        run(config, ["profile", "import-curl", "shop", "-"], &fixture("firefox-bash-json.txt"));
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("moved cookie, x-csrf-token into the secret store"), "{stdout}");
    assert!(stdout.contains("ignored: --compressed"), "{stdout}");
    let profile = dir.path().join("profiles/shop.toml");
    let text = read(&profile);
    assert!(text.contains("milk\\\\neggs") || text.contains("milk\\neggs"), "{text}");
    let secrets = read(dir.path().join("secrets.toml"));
    assert!(secrets.contains("abc123") && secrets.contains("9f8e7d6c"), "{secrets}");
    let (_, shown, _) = run(config, ["profile", "show", "shop"], "");
    let (_, exported, _) = run(config, ["profile", "export", "shop", "-"], "");
    for (what, text) in [("file", &text), ("show", &shown), ("export", &exported), ("import", &stdout)] {
        assert!(!text.contains("abc123") && !text.contains("9f8e7d6c"), "a secret in the {what}: {text}");
    }
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        let mode = std::fs::metadata(&profile).unwrap().permissions().mode() & 0o777;
        assert_eq!(mode, 0o600, "a profile that came from a paste is its owner's only");
        run(config, ["profile", "import-curl", "shop", "-"], &fixture("chrome-bash-get.txt"));
        let backup = dir.path().join("profiles/shop.toml.bak");
        assert_eq!(std::fs::metadata(&backup).unwrap().permissions().mode() & 0o777, 0o600, "its backup too");
    }

    for (command, field) in [
        ("curl https://h.example/x -H 'X-Auth-Key: SECRETV'", None),
        ("curl https://h.example/token -d 'client_id=a&client_secret=SECRETV'", Some("client_secret")),
        ("curl 'https://h.example/x?access_key=SECRETV'", Some("access_key")),
    ] {
        let (code, stdout, stderr) = run(config, ["profile", "import-curl", "other", command], "");
        assert!(!stdout.contains("SECRETV") && !stderr.contains("SECRETV"), "{command}: {stdout}{stderr}");
        assert!(!read(dir.path().join("profiles/other.toml")).contains("SECRETV"), "{command}");
        match field {
            None => assert_eq!(code, 0, "{stderr}"),
            Some(field) => {
                assert_eq!(code, 2, "{command}: {stderr}");
                assert!(stderr.contains(&format!("'{field}' looks like a secret")), "{stderr}");
            }
        }
    }
}

/// Finding 3: errors and the `ignored:` line show URLs and headers redacted.
#[test]
fn no_message_of_an_import_echoes_a_credential() {
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    for command in [
        "curl https://h.example/ -H 'Authorization Bearer sk-X1'",
        "curl https://u:sk-X1@a.example/ https://v:sk-X1@b.example/",
        "curl 'http://user:sk-X1@h.example:99999/'",
        "curl 'http://user:sk-X1@[::1/'",
    ] {
        let (code, stdout, stderr) = run(config, ["profile", "import-curl", "p", command], "");
        assert_eq!(code, 2, "{command}: {stderr}");
        assert!(!stderr.contains("sk-X1") && !stdout.contains("sk-X1"), "{command}: {stderr}");
    }
    let (code, stdout, stderr) =
        run(config, ["profile", "import-curl", "p", "curl -x http://user:PASS1@proxy:3128 https://h.example/"], "");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("ignored: -x http://user:***@proxy:3128/"), "{stdout}");
    assert!(!stdout.contains("PASS1"), "{stdout}");
}

/// Finding 4: a second import never wipes or silently replaces the host's stored secret.
#[test]
fn a_stored_secret_is_kept_unless_replacing_is_asked_for() {
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    let secrets = || read(dir.path().join("secrets.toml"));
    let import = |args: &[&str]| {
        let mut all = vec!["profile", "import-curl", "api"];
        all.extend_from_slice(args);
        run(config, all, "")
    };
    let (code, _, stderr) = import(&["curl https://api.example.com/a -H 'Authorization: Bearer TOKEN_A'"]);
    assert_eq!(code, 0, "{stderr}");
    let (code, stdout, stderr) = import(&["curl https://api.example.com/b -H 'Authorization:'"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(!stdout.contains("secret store"), "an empty header is no secret: {stdout}");
    assert!(secrets().contains("TOKEN_A"), "curl's way to drop a header wipes nothing: {}", secrets());

    let (code, _, stderr) = import(&["curl https://api.example.com/c -H 'Authorization: Bearer TOKEN_B'"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(
        stderr.contains("already has a different authorization") && stderr.contains("--replace-secrets"),
        "{stderr}"
    );
    assert!(!stderr.contains("TOKEN"), "{stderr}");
    assert!(secrets().contains("TOKEN_A") && !secrets().contains("TOKEN_B"));
    assert!(!read(dir.path().join("profiles/api.toml")).contains("/c"), "nothing changed");

    let (code, stdout, stderr) =
        import(&["curl https://api.example.com/c -H 'Authorization: Bearer TOKEN_B'", "--replace-secrets"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("replaced the stored authorization"), "{stdout}");
    assert!(secrets().contains("TOKEN_B") && !secrets().contains("TOKEN_A"));
    let (code, stdout, _) = import(&["curl https://api.example.com/c -H 'Authorization: Bearer TOKEN_B'"]);
    assert_eq!(code, 0);
    assert!(stdout.contains("already holds this authorization"), "{stdout}");
}

/// Finding 7: tens of thousands of headers are refused naming the cap, never a panic.
#[test]
fn too_many_headers_fail_naming_the_cap() {
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    let headers: String = (0..24_577).map(|index| format!("-H 'X-A{index}: 1' ")).collect();
    let command = format!("curl https://h.example/ {headers}");
    let (code, _, stderr) = run(config, ["profile", "import-curl", "p", "-"], &command);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("more than the 256 a request may carry"), "{stderr}");

    let mut profile = String::from(
        "name = \"big\"\n\n[[hosts]]\nname = \"h\"\nbase_url = \"https://h.example\"\n\n[[hosts.endpoints]]\nname = \"e\"\npath = \"/\"\n\n[hosts.endpoints.headers]\n",
    );
    for index in 0..40_000 {
        profile.push_str(&format!("x-h{index} = \"1\"\n"));
    }
    let file = dir.path().join("big.toml");
    std::fs::write(&file, profile).unwrap();
    let (code, _, stderr) = run(config, ["profile", "import", file.to_str().unwrap()], "");
    assert!(code != 0 && code != 101, "exit {code}: {stderr}");
    assert!(stderr.contains("more than the 256 a request may carry"), "{stderr}");
}

/// A paste that would make the profile too large to read back is refused, and the profile
/// it would have joined is kept as it was.
#[test]
fn an_import_that_would_make_the_profile_unreadable_writes_nothing() {
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    let big = |path: &str| format!("curl https://h.example/{path} -H 'X-Big: {}'", "v".repeat(600_000));
    let (code, _, stderr) = run(config, ["profile", "import-curl", "p", "-"], &big("a"));
    assert_eq!(code, 0, "{stderr}");
    let before = read(dir.path().join("profiles/p.toml"));
    let command = big("b");
    let (code, _, stderr) = run(config, ["profile", "import-curl", "p", "-"], &command);
    assert_eq!(code, 1, "{stderr}");
    assert!(stderr.contains("more than the 1 MiB a profile file may be; nothing was written"), "{stderr}");
    assert_eq!(read(dir.path().join("profiles/p.toml")), before);
    let (code, _, stderr) = run(config, ["profile", "show", "p"], "");
    assert_eq!(code, 0, "{stderr}");
}

/// Finding 11: `-d @FILE` is read where the command runs and its text kept in the profile.
#[test]
fn a_body_file_is_read_from_the_directory_the_command_runs_in() {
    let dir = tempfile::tempdir().unwrap();
    let work = dir.path().join("work");
    std::fs::create_dir(&work).unwrap();
    std::fs::write(work.join("body.json"), "{\"a\":\n 1}\n").unwrap();
    std::fs::write(work.join("blob.bin"), [0u8, 159, 146, 150]).unwrap();
    let import = |command: &str| {
        let output = Command::new(env!("CARGO_BIN_EXE_ratescope"))
            .args(["profile", "import-curl", "p", command])
            .env("RATESCOPE_CONFIG_DIR", dir.path())
            .current_dir(&work)
            .stdin(Stdio::null())
            .output()
            .unwrap();
        (output.status.code().unwrap_or(-1), String::from_utf8_lossy(&output.stderr).into_owned())
    };
    let (code, stderr) = import("curl https://h.example/a -d @body.json");
    assert_eq!(code, 0, "{stderr}");
    let (code, stderr) = import("curl https://h.example/b --data-binary @blob.bin");
    assert_eq!(code, 0, "{stderr}");
    let text = read(dir.path().join("profiles/p.toml"));
    assert!(text.contains(r#"body = '{"a": 1}'"#), "-d drops line breaks, as curl does: {text}");
    let absolute = work.join("blob.bin").canonicalize().unwrap();
    assert!(text.contains(&format!("body_file = \"{}\"", absolute.display())), "{text}");
}

/// Finding 12: one name rule for import-curl and new; an empty paste says so.
#[test]
fn a_name_that_only_shares_a_file_name_is_refused_and_an_empty_paste_named() {
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    let (code, _, stderr) = run(config, ["profile", "import-curl", "a/b", "curl https://h.example/one"], "");
    assert_eq!(code, 0, "{stderr}");
    let before = read(dir.path().join("profiles/a-b.toml"));
    let (code, _, stderr) = run(config, ["profile", "import-curl", "a-b", "curl https://h.example/two"], "");
    assert_ne!(code, 0);
    assert!(stderr.contains("would replace profile 'a/b'"), "{stderr}");
    assert_eq!(read(dir.path().join("profiles/a-b.toml")), before, "not merged into");
    let (code, _, stderr) = run(config, ["profile", "new", "a-b", "--from", "github-rest", "--force"], "");
    assert_ne!(code, 0);
    assert!(stderr.contains("would replace profile 'a/b'"), "{stderr}");

    let (code, _, stderr) = run(config, ["profile", "import-curl", "p", "-"], "  \n");
    assert_eq!(code, 2);
    assert!(stderr.contains("the command is empty") && !stderr.contains("''"), "{stderr}");
}

/// #34 item 3: a profile written by hand keeps every comment, its explicit defaults and its
/// layout when `import-curl` adds to it; `export` copies the file as it is.
#[test]
fn adding_to_a_commented_profile_keeps_its_comments() {
    const COMMENTED: &str = r#"# Our shop's API, as its support described it.
name = "shop"

# The storefront: 2 requests a second, bursts of 10.
[[hosts]]
name = "storefront"
base_url = "https://shop.example"
adaptive = false # they publish no rate-limit headers
budgets = [
    # the bucket support told us about
    { name = "rate", kind = "token_bucket", capacity = 10, rate = "2/1s" },
]

# Reports are slow on their side.
[[hosts.paths]]
prefix = "/reports"
concurrency = 1 # one report at a time
"#;
    let comments = |text: &str| -> Vec<String> {
        text.lines().filter_map(|line| line.find('#').map(|at| line[at..].to_owned())).collect()
    };
    let dir = tempfile::tempdir().unwrap();
    let config = Some(dir.path());
    let profile = dir.path().join("profiles/shop.toml");
    std::fs::create_dir_all(profile.parent().unwrap()).unwrap();
    std::fs::write(&profile, COMMENTED).unwrap();

    let (code, stdout, stderr) =
        run(config, ["profile", "import-curl", "shop", "curl https://shop.example/items?page=2"], "");
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("added endpoint") && stdout.contains("host 'storefront'"), "{stdout}");
    let text = read(&profile);
    assert!(text.starts_with(COMMENTED), "the file as it was, the endpoint after it:\n{text}");
    assert!(text[COMMENTED.len()..].starts_with("\n[[hosts.endpoints]]\n"), "{text}");
    assert_eq!(read(dir.path().join("profiles/shop.toml.bak")), COMMENTED, "the previous version is kept");

    let command = "curl https://shop.example/orders -H 'Authorization: Bearer sk-test-7f3a'";
    let (code, _, stderr) = run(config, ["profile", "import-curl", "shop", command], "");
    assert_eq!(code, 0, "{stderr}");
    let text = read(&profile);
    assert_eq!(comments(&text), comments(COMMENTED), "{text}");
    assert!(text.contains("adaptive = false # they publish no rate-limit headers\n"), "{text}");
    assert!(text.contains("secret_headers = [\"authorization\"]") && !text.contains("sk-test-7f3a"), "{text}");
    let saved = ratescope::profile::Profile::from_toml(&text).unwrap();
    assert_eq!(saved.hosts[0].endpoints.len(), 2, "{text}");

    let (code, exported, stderr) = run(config, ["profile", "export", "shop", "-"], "");
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(exported, text, "export copies the file, comments included");
}
