//! The README's first command-line example does what its comment says: the paced burst
//! against a fresh demo API gets no 429 (run twice, each against its own fresh server).

use std::net::SocketAddr;
use std::process::Command;

use ratescope::mock::{MockConfig, MockServer};

/// The README's paced `burst` line, as its arguments after `--`.
fn readme_burst_args() -> Vec<String> {
    let readme = include_str!("../README.md");
    let line = readme
        .lines()
        .find(|line| line.contains(" burst http://127.0.0.1:8787/items") && line.contains("--rate"))
        .expect("the README shows a paced burst against the demo API");
    let command = line.split('#').next().unwrap_or_default();
    let (_, args) = command.split_once(" -- ").expect("a `cargo run --release -- ...` line");
    args.split_whitespace().map(str::to_owned).collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_readme_paced_burst_gets_no_429_from_a_fresh_demo_api() {
    let args = readme_burst_args();
    assert!(args.contains(&"--rate".to_owned()), "{args:?}");
    for run in 1..=2 {
        let server =
            MockServer::start(MockConfig::demo().unwrap(), SocketAddr::from(([127, 0, 0, 1], 0))).await.unwrap();
        let address = server.addr().to_string();
        let mut args: Vec<String> = args.iter().map(|arg| arg.replace("127.0.0.1:8787", &address)).collect();
        args.push("--json".to_owned());
        let output = tokio::task::spawn_blocking(move || {
            Command::new(env!("CARGO_BIN_EXE_ratescope")).args(&args).output().unwrap()
        })
        .await
        .unwrap();
        let stdout = String::from_utf8_lossy(&output.stdout);
        assert!(output.status.success(), "run {run}: {stdout}{}", String::from_utf8_lossy(&output.stderr));
        let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
        assert_eq!(json["status_counts"].get("429"), None, "run {run}: {json}");
        assert_eq!(json["succeeded"], json["requests"], "run {run}: {json}");
        server.shutdown().await.unwrap();
    }
}
