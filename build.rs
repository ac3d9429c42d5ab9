//! Names the git commit the binary is built from in `ratescope --version` ("0.1.0 (commit
//! 1a2b3c4 2026-12-05)"); outside a git checkout (a crates.io download) the version stands alone.

use std::path::{Path, PathBuf};
use std::process::Command;

fn main() {
    println!("cargo:rerun-if-changed=build.rs");
    let commit = git(&["log", "-1", "--format=%h %cs"]);
    // Built again when HEAD moves (a commit, a checkout): HEAD itself, the branch it names, and
    // the packed refs a branch may live in.
    if let (Some(git_dir), Some(common_dir)) =
        (git(&["rev-parse", "--git-dir"]), git(&["rev-parse", "--git-common-dir"]))
    {
        let (git_dir, common_dir) = (in_manifest_dir(&git_dir), in_manifest_dir(&common_dir));
        let mut watched = vec![git_dir.join("HEAD"), common_dir.join("packed-refs")];
        if let Some(branch) = git(&["symbolic-ref", "-q", "HEAD"]) {
            watched.push(common_dir.join(branch));
        }
        for path in watched.iter().filter(|path| path.exists()) {
            println!("cargo:rerun-if-changed={}", path.display());
        }
    }
    let suffix = commit.map(|commit| format!(" (commit {commit})")).unwrap_or_default();
    println!("cargo:rustc-env=RATESCOPE_BUILD_COMMIT={suffix}");
}

/// What `git ARGS` prints in the manifest's directory, trimmed; `None` without git or a checkout.
fn git(args: &[&str]) -> Option<String> {
    let output = Command::new("git").args(args).current_dir(manifest_dir()).output().ok()?;
    let text = String::from_utf8(output.stdout).ok()?;
    (output.status.success() && !text.trim().is_empty()).then(|| text.trim().to_owned())
}

fn manifest_dir() -> PathBuf {
    PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").unwrap_or_default())
}

/// A path git printed, relative to the manifest's directory unless absolute.
fn in_manifest_dir(path: &str) -> PathBuf {
    let path = Path::new(path);
    if path.is_absolute() { path.to_owned() } else { manifest_dir().join(path) }
}
