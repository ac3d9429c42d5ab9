//! Requests as real APIs need them, from the command line: `burst -d/--data` (text, @file,
//! @-), `-X`, profile endpoints (`--endpoint`), and `profile import-curl`, checked by what a
//! recording server on loopback received.

mod support;

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use support::cli::ratescope_with_stdin;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{OriginalUri, State};
use axum::http::{HeaderMap, Method};

/// One request as the server saw it.
#[derive(Debug, Clone)]
struct Seen {
    method: Method,
    uri: String,
    headers: HeaderMap,
    body: Bytes,
}

type Log = Arc<Mutex<Vec<Seen>>>;

/// Keeps the request and answers with a usage block: a token per 8 bytes of body.
async fn record(
    State(log): State<Log>,
    method: Method,
    OriginalUri(uri): OriginalUri,
    headers: HeaderMap,
    body: Bytes,
) -> String {
    let tokens = body.len() / 8;
    log.lock().unwrap().push(Seen { method, uri: uri.to_string(), headers, body });
    format!(r#"{{"usage": {{"total_tokens": {tokens}}}}}"#)
}

/// A server answering 200 (and its usage) to everything and keeping what it got.
async fn recorder() -> (SocketAddr, Log) {
    let log = Log::default();
    let app = Router::new().fallback(record).with_state(log.clone());
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move { axum::serve(listener, app).await.unwrap() });
    (addr, log)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn data_is_sent_as_curl_would_and_the_content_type_is_guessed_unless_given() {
    let (addr, log) = recorder().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{addr}/items?page=2");
    let (code, _, stderr) =
        ratescope_with_stdin(dir.path(), &["burst", &url, "-n", "3", "-d", r#"{"name":"x"}"#], "").await;
    assert_eq!(code, 0, "{stderr}");
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 3);
    for request in &seen {
        assert_eq!(request.method, Method::POST, "data means POST");
        assert_eq!(request.uri, "/items?page=2");
        assert_eq!(request.headers["content-type"], "application/json");
        assert_eq!(&request.body[..], br#"{"name":"x"}"#);
    }

    log.lock().unwrap().clear();
    let file = dir.path().join("rows.csv");
    std::fs::write(&file, "a,b\n1,2\n").unwrap();
    let data = format!("@{}", file.display());
    let args = ["burst", &url, "-n", "1", "-X", "PUT", "-d", &data, "-H", "Content-Type: text/csv"];
    let (code, _, stderr) = ratescope_with_stdin(dir.path(), &args, "").await;
    assert_eq!(code, 0, "{stderr}");
    let put = log.lock().unwrap()[0].clone();
    assert_eq!(put.method, Method::PUT);
    assert_eq!(put.headers.get_all("content-type").iter().collect::<Vec<_>>(), ["text/csv"], "-H wins, once");
    assert_eq!(&put.body[..], b"a,b\n1,2\n");

    log.lock().unwrap().clear();
    let (code, _, stderr) =
        ratescope_with_stdin(dir.path(), &["burst", &url, "-n", "1", "-d", "@-"], "plain words").await;
    assert_eq!(code, 0, "{stderr}");
    let piped = log.lock().unwrap()[0].clone();
    assert_eq!(piped.headers["content-type"], "text/plain; charset=utf-8");
    assert_eq!(&piped.body[..], b"plain words");

    let missing = format!("@{}", dir.path().join("nope.json").display());
    let (code, _, stderr) = ratescope_with_stdin(dir.path(), &["burst", &url, "-n", "1", "-d", &missing], "").await;
    assert_ne!(code, 0);
    assert!(stderr.contains("nope.json"), "the error names the file: {stderr}");
    assert_eq!(log.lock().unwrap().len(), 1, "nothing sent after a bad --data");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pasted_curl_becomes_an_endpoint_whose_secret_stays_out_of_the_profile() {
    let (addr, log) = recorder().await;
    let dir = tempfile::tempdir().unwrap();
    let curl = format!(
        "curl -sS 'http://{addr}/v1/chat?stream=false' \\\n  -H 'Authorization: Bearer sk-live-123' \\\n  -H 'Content-Type: application/json' \\\n  --data-raw '{{\"max_tokens\": 5}}'"
    );
    let (code, stdout, stderr) = ratescope_with_stdin(dir.path(), &["profile", "import-curl", "llm", &curl], "").await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("POST /v1/chat") && stdout.contains("authorization"), "{stdout}");
    let profile = std::fs::read_to_string(dir.path().join("profiles/llm.toml")).unwrap();
    assert!(!profile.contains("sk-live"), "no secret in the profile:\n{profile}");
    assert!(profile.contains("[[hosts.endpoints]]") && profile.contains("max_tokens"), "{profile}");
    let secrets = std::fs::read_to_string(dir.path().join("secrets.toml")).unwrap();
    assert!(secrets.contains("sk-live-123"), "the secret is in the secret store");

    let (code, stdout, stderr) = ratescope_with_stdin(dir.path(), &["profile", "show", "llm"], "").await;
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("endpoint 'POST /v1/chat': POST /v1/chat?stream=false, body of 17 bytes"), "{stdout}");
    assert!(!stdout.contains("sk-live"), "{stdout}");

    let args = ["burst", "--profile", "llm", "--endpoint", "post /v1/chat", "-n", "2", "--json"];
    let (code, _, stderr) = ratescope_with_stdin(dir.path(), &args, "").await;
    assert_eq!(code, 0, "{stderr}");
    let seen = log.lock().unwrap().clone();
    assert_eq!(seen.len(), 2);
    for request in &seen {
        assert_eq!(request.method, Method::POST);
        assert_eq!(request.uri, "/v1/chat?stream=false");
        assert_eq!(request.headers["authorization"], "Bearer sk-live-123", "the secret comes from the store");
        assert_eq!(&request.body[..], br#"{"max_tokens": 5}"#);
    }

    let (code, _, stderr) =
        ratescope_with_stdin(dir.path(), &["burst", "--profile", "llm", "--endpoint", "nope"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no endpoint 'nope'") && stderr.contains("POST /v1/chat"), "{stderr}");
    let (code, _, stderr) =
        ratescope_with_stdin(dir.path(), &["profile", "import-curl", "llm", "wget http://x/"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a curl command"), "{stderr}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tokens_reserved_from_the_body_are_settled_from_the_answers_usage() {
    let (addr, log) = recorder().await;
    let dir = tempfile::tempdir().unwrap();
    let url = format!("http://{addr}/v1/chat");
    let prompt = "p".repeat(40);
    let args = [
        "burst",
        &url,
        "-n",
        "9",
        "-d",
        &prompt,
        "--window",
        "50/1m:tokens",
        "--cost",
        "tokens=body/4->field:usage.total_tokens",
        "--json",
    ];
    let (code, stdout, stderr) = ratescope_with_stdin(dir.path(), &args, "").await;
    assert_eq!(code, 0, "{stderr}");
    let summary: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    assert_eq!(summary["succeeded"], 9, "{summary:#}");
    // 10 tokens reserved each (40 bytes / 4), 5 spent (40 / 8): 90 reserved, 45 settled. Without
    // settlement the sixth would wait a minute for the window; with it all nine fit in 50.
    let tokens = &summary["units"]["tokens"];
    assert_eq!(tokens["reserved"], 90, "{summary:#}");
    assert_eq!(tokens["settled"], 45);
    assert_eq!(tokens["refunded"], 45);
    assert_eq!(tokens["charged_more"], 0);
    assert_eq!(log.lock().unwrap().len(), 9);
    let (code, _, stderr) = ratescope_with_stdin(dir.path(), &["burst", &url, "--cost", "tokens=lots"], "").await;
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("not a number, body/N or field:PATH"), "{stderr}");
}
