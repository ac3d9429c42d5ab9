//! What a packager installs beside the binary: shell completions and manual pages generated
//! from the command line's own definitions, a version that names its commit, and the desktop
//! file and icons in `assets/`.

use std::path::Path;
use std::process::{Command, Output, Stdio};

fn ratescope(args: &[&str]) -> Output {
    let config = tempfile::tempdir().unwrap();
    Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .args(args)
        .env("RATESCOPE_CONFIG_DIR", config.path())
        .stdin(Stdio::null())
        .output()
        .expect("the ratescope binary runs")
}

fn stdout(output: &Output) -> String {
    assert!(output.status.success(), "{:?}: {}", output.status, String::from_utf8_lossy(&output.stderr));
    String::from_utf8(output.stdout.clone()).expect("UTF-8")
}

/// Whether `program` can be run here (`--version` answers).
fn installed(program: &str) -> bool {
    Command::new(program).arg("--version").stdout(Stdio::null()).stderr(Stdio::null()).status().is_ok()
}

#[test]
fn completions_name_every_subcommand_in_each_shells_own_form() {
    let marks = [
        ("bash", "complete -F _ratescope"),
        ("zsh", "#compdef ratescope"),
        ("fish", "complete -c ratescope"),
        ("powershell", "Register-ArgumentCompleter"),
        ("elvish", "edit:completion:arg-completer[ratescope]"),
    ];
    for (shell, mark) in marks {
        let script = stdout(&ratescope(&["completions", shell]));
        assert!(script.contains(mark), "{shell}: no {mark:?}");
        for subcommand in ["burst", "probe", "proxy", "profile", "completions", "man"] {
            assert!(script.contains(subcommand), "{shell}: {subcommand} is not completed");
        }
    }
    // Flags of a subcommand complete too.
    assert!(stdout(&ratescope(&["completions", "bash"])).contains("--max-queue-wait"));
}

#[test]
fn the_bash_script_is_valid_bash_and_completes_a_subcommand() {
    if !installed("bash") {
        return;
    }
    let dir = tempfile::tempdir().unwrap();
    let script = dir.path().join("ratescope.bash");
    std::fs::write(&script, stdout(&ratescope(&["completions", "bash"]))).unwrap();
    // Sourced, then asked what `ratescope bu<TAB>` completes to.
    let probe = format!(
        "source {}; COMP_WORDS=(ratescope bu); COMP_CWORD=1; COMP_LINE='ratescope bu'; COMP_POINT=12; \
         _ratescope ratescope bu ratescope; printf '%s\\n' \"${{COMPREPLY[@]}}\"",
        script.display()
    );
    let output = Command::new("bash").arg("-c").arg(probe).output().unwrap();
    let replies = String::from_utf8_lossy(&output.stdout);
    assert!(output.status.success(), "{}", String::from_utf8_lossy(&output.stderr));
    assert_eq!(replies.trim(), "burst", "ratescope bu<TAB>");
}

#[test]
fn an_unknown_shell_is_a_usage_error_naming_the_shells() {
    let output = ratescope(&["completions", "tcsh"]);
    assert_eq!(output.status.code(), Some(2));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("bash") && err.contains("zsh") && err.contains("fish"), "{err}");
    assert!(output.stdout.is_empty());
}

#[test]
fn man_prints_the_page_of_the_whole_command() {
    let page = stdout(&ratescope(&["man"]));
    assert!(page.contains(".TH ratescope 1"), "{page}");
    for section in [".SH NAME", ".SH SYNOPSIS", ".SH SUBCOMMANDS"] {
        assert!(page.contains(section), "no {section}");
    }
    assert!(page.contains("ratescope\\-burst(1)"), "the subcommands' pages are referenced");
}

#[test]
fn man_dir_writes_a_page_per_command_and_replaces_old_ones_whole() {
    let root = tempfile::tempdir().unwrap();
    let dir = root.path().join("man/man1");
    let listed = stdout(&ratescope(&["man", "--dir", dir.to_str().unwrap()]));
    for page in ["ratescope.1", "ratescope-burst.1", "ratescope-profile.1", "ratescope-profile-export.1"] {
        let path = dir.join(page);
        let text = std::fs::read_to_string(&path).unwrap_or_else(|err| panic!("{page}: {err}"));
        assert!(text.contains(".TH"), "{page} is a manual page");
        assert!(listed.contains(path.to_str().unwrap()), "{page} is listed");
    }
    assert!(!dir.join("ratescope-help.1").exists(), "no page for the help subcommand");
    // Again over the same directory: every page replaced, nothing else left there.
    std::fs::write(dir.join("ratescope.1"), "stale").unwrap();
    let before = std::fs::read_dir(&dir).unwrap().count();
    stdout(&ratescope(&["man", "--dir", dir.to_str().unwrap()]));
    assert_eq!(std::fs::read_dir(&dir).unwrap().count(), before, "no temporary files left");
    assert!(std::fs::read_to_string(dir.join("ratescope.1")).unwrap().contains(".TH ratescope 1"));
}

#[test]
fn man_dir_that_cannot_be_made_is_a_clear_error() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("a-file");
    std::fs::write(&file, "x").unwrap();
    let output = ratescope(&["man", "--dir", file.join("man1").to_str().unwrap()]);
    assert_eq!(output.status.code(), Some(1));
    let err = String::from_utf8_lossy(&output.stderr);
    assert!(err.contains("could not create") && err.contains("man1"), "{err}");
}

#[test]
fn the_version_names_the_commit_it_was_built_from() {
    let version = stdout(&ratescope(&["--version"]));
    assert!(version.starts_with(&format!("ratescope {}", env!("CARGO_PKG_VERSION"))), "{version}");
    let head = Command::new("git")
        .args(["log", "-1", "--format=%h"])
        .current_dir(env!("CARGO_MANIFEST_DIR"))
        .output()
        .ok()
        .filter(|output| output.status.success());
    match head {
        Some(head) => {
            let commit = String::from_utf8_lossy(&head.stdout).trim().to_owned();
            assert!(version.contains(&format!("(commit {commit} ")), "{version} names {commit}");
        }
        // Built outside a checkout: the version alone.
        None => assert!(!version.contains("commit"), "{version}"),
    }
}

#[test]
fn the_desktop_file_names_the_installed_binary_and_an_icon_in_every_size() {
    let assets = Path::new(env!("CARGO_MANIFEST_DIR")).join("assets");
    let desktop = std::fs::read_to_string(assets.join("ratescope.desktop")).unwrap();
    for line in ["[Desktop Entry]", "Type=Application", "Exec=ratescope", "Icon=ratescope", "StartupWMClass=ratescope"]
    {
        assert!(desktop.lines().any(|l| l == line), "no {line}");
    }
    for size in [16, 24, 32, 48, 64, 128, 256, 512] {
        let path = assets.join(format!("icons/hicolor/{size}x{size}/apps/ratescope.png"));
        let bytes = std::fs::read(&path).unwrap_or_else(|err| panic!("{}: {err}", path.display()));
        // A PNG's signature, then its IHDR chunk: width and height, big-endian, at 16 and 20.
        assert!(bytes.starts_with(b"\x89PNG\r\n\x1a\n") && &bytes[12..16] == b"IHDR", "{}", path.display());
        let dimension = |at: usize| u32::from_be_bytes(bytes[at..at + 4].try_into().unwrap());
        assert_eq!((dimension(16), dimension(20)), (size, size), "{}", path.display());
    }
    assert!(assets.join("icons/hicolor/scalable/apps/ratescope.svg").is_file());
    if installed("desktop-file-validate") {
        let output = Command::new("desktop-file-validate").arg(assets.join("ratescope.desktop")).output().unwrap();
        let said = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success() && said.trim().is_empty(), "desktop-file-validate: {said}");
    }
}
