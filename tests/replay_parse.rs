//! Recordings read: real HAR files saved by Firefox and Chromium, a real nginx access log and
//! JSON lines (tests/fixtures/replay/README.md says how each was made), each read into the
//! same requests; no secret left in the fixtures; no input, however hostile, panics a parser.

use std::time::Duration;

use proptest::prelude::*;
use ratescope::sim::replay::{Format, Parsed, ReadOptions, read};
use url::Url;

const FIXTURES: &str = concat!(env!("CARGO_MANIFEST_DIR"), "/tests/fixtures/replay");

fn fixture(name: &str) -> Vec<u8> {
    std::fs::read(format!("{FIXTURES}/{name}")).unwrap()
}

fn options(format: Option<Format>) -> ReadOptions {
    ReadOptions { format, base: "http://127.0.0.1:8080".parse().unwrap() }
}

fn parse(name: &str) -> Parsed {
    read(&fixture(name), &options(None)).unwrap()
}

/// (offset in ms, method, URL) of each request.
fn seen(parsed: &Parsed) -> Vec<(u128, String, String)> {
    parsed.requests.iter().map(|r| (r.offset.as_millis(), r.method.to_string(), r.url.to_string())).collect()
}

#[test]
fn firefox_har_is_read_entry_by_entry_with_its_offset() {
    let parsed = parse("firefox-esr-153.har");
    assert_eq!(parsed.format, Format::Har);
    assert_eq!((parsed.requests.len(), parsed.problems.count), (44, 0));
    assert!(parsed.skipped.is_empty());
    let hosts: Vec<(String, usize)> = parsed.hosts().into_iter().map(|h| (h.host, h.requests)).collect();
    assert_eq!(hosts, [("127.0.0.1".to_owned(), 42), ("localhost".to_owned(), 2)]);
    let requests = seen(&parsed);
    assert_eq!(requests[0], (0, "GET".to_owned(), "http://127.0.0.1:8000/".to_owned()));
    assert_eq!(requests.iter().filter(|(_, method, _)| method == "POST").count(), 3);
    // The page's scroll phase: one request every 150 ms or so, and 4 s from first to last.
    let last = requests.last().unwrap().0;
    assert!((3_900..=4_200).contains(&last), "{last} ms");
    assert!(parsed.requests.windows(2).all(|pair| pair[0].offset <= pair[1].offset));
}

#[test]
fn the_json_lines_of_the_firefox_har_are_the_same_requests() {
    // firefox-esr-153.jsonl was written by Python from the HAR's +01:00 dates: reading both
    // the same way holds the date parser to another implementation's.
    let har = parse("firefox-esr-153.har");
    let lines = parse("firefox-esr-153.jsonl");
    assert_eq!(lines.format, Format::Jsonl);
    assert_eq!(seen(&har), seen(&lines));
    assert_eq!(lines.joined_to_base, 0);
}

#[test]
fn chromium_har_is_read_with_its_private_fields_ignored() {
    let parsed = parse("chromium-156.har");
    assert_eq!(parsed.format, Format::Har);
    assert_eq!((parsed.requests.len(), parsed.problems.count), (43, 0));
    let hosts: Vec<(String, usize)> = parsed.hosts().into_iter().map(|h| (h.host, h.requests)).collect();
    assert_eq!(hosts, [("127.0.0.1".to_owned(), 41), ("localhost".to_owned(), 2)]);
    let recording = parsed.select(None).unwrap();
    assert_eq!(recording.host, "127.0.0.1");
    assert_eq!(recording.other_hosts.len(), 1);
    assert!(recording.requests.iter().all(|r| r.url.host_str() == Some("127.0.0.1")));
    assert_eq!(recording.requests[0].offset, Duration::ZERO);
    assert!((3_900..=4_200).contains(&recording.span().as_millis()), "{:?}", recording.span());
}

#[test]
fn nginx_combined_log_is_read_onto_the_base_url() {
    let parsed = parse("nginx-combined.log");
    assert_eq!(parsed.format, Format::AccessLog);
    assert_eq!((parsed.requests.len(), parsed.problems.count, parsed.joined_to_base), (42, 0, 42));
    let requests = seen(&parsed);
    assert_eq!(requests[0], (0, "GET".to_owned(), "http://127.0.0.1:8080/".to_owned()));
    assert!(requests.iter().all(|(ms, _, _)| ms % 1000 == 0), "whole seconds: {requests:?}");
    assert_eq!(requests.last().unwrap().0, 4000);
    assert_eq!(requests.iter().filter(|(_, method, _)| method == "POST").count(), 3);
    // The base's origin, whatever its path.
    let base: Url = "https://api.example.com:8443/v2/".parse().unwrap();
    let parsed = read(&fixture("nginx-combined.log"), &ReadOptions { format: None, base }).unwrap();
    assert!(parsed.requests[2].url.as_str().starts_with("https://api.example.com:8443/api/items?page="));
}

#[test]
fn no_secret_is_left_in_the_fixtures() {
    for name in ["firefox-esr-153.har", "chromium-156.har", "nginx-combined.log", "firefox-esr-153.jsonl"] {
        let text = String::from_utf8(fixture(name)).unwrap();
        for secret in ["fixture-key-123", "fixture-token-456", "fixture-session-789"] {
            assert!(!text.contains(secret), "{name} holds {secret}");
        }
    }
    for name in ["firefox-esr-153.har", "chromium-156.har"] {
        let har: serde_json::Value = serde_json::from_slice(&fixture(name)).unwrap();
        let mut secret_named = 0;
        for entry in har["log"]["entries"].as_array().unwrap() {
            for side in ["request", "response"] {
                for list in ["headers", "cookies", "queryString"] {
                    for pair in entry[side][list].as_array().into_iter().flatten() {
                        let name = pair["name"].as_str().unwrap();
                        if ratescope::redact::looks_secret(name) || name.eq_ignore_ascii_case("cookie") {
                            secret_named += 1;
                            assert_eq!(pair["value"], "scrubbed", "{name}");
                        }
                    }
                }
            }
        }
        assert!(secret_named > 0, "{name}: the api_key parameter at least is there, scrubbed");
    }
}

#[test]
fn a_file_of_no_known_format_is_refused_naming_its_first_line() {
    let err = read(b"\n\nGET /items HTTP/1.1\nHost: x\n", &options(None)).unwrap_err();
    let text = err.to_string();
    assert!(text.contains("not a recording ratescope reads"), "{text}");
    assert!(text.ends_with("its first line: GET /items HTTP/1.1"), "{text}");
    // Only bad lines: nothing left, and the first problems named.
    let log = b"1.2.3.4 - - [10/Oct/2000:13:55:36 -0700] \"-\" 400 0\n";
    let err = read(log, &options(None)).unwrap_err();
    assert_eq!(
        err.to_string(),
        "nothing to replay in this access log file: 1 could not be read (line 1: request \"-\" is not METHOD TARGET PROTOCOL)"
    );
}

/// Lines of every format, cut and spliced by proptest into hostile inputs.
fn pieces() -> Vec<String> {
    let mut pieces: Vec<String> =
        String::from_utf8(fixture("nginx-combined.log")).unwrap().lines().take(3).map(str::to_owned).collect();
    pieces.extend(String::from_utf8(fixture("firefox-esr-153.jsonl")).unwrap().lines().take(3).map(str::to_owned));
    pieces.extend(
        [
            "{\"log\": {\"entries\": [",
            "{\"startedDateTime\": \"2024-05-01T10:00:00.1234567891234Z\", \"request\": {\"method\": \"GET\", \"url\": \"http://h/\"}}",
            "]}}",
            "{\"t\": -1e11, \"url\": \"/\"}",
            "{\"t\": 18446744073709551616, \"url\": \"http://h/\"}",
            "[99/Zzz/99999:99:99:99 +9999] \"GET // HTTP/1.1\"",
            "\"\\\\\\\"",
            "\u{feff}\u{0}\u{7f}",
        ]
        .map(str::to_owned),
    );
    pieces
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(400))]

    #[test]
    fn no_input_panics_a_parser(bytes in proptest::collection::vec(any::<u8>(), 0..400), format in 0usize..4) {
        let format = [None, Some(Format::Har), Some(Format::Jsonl), Some(Format::AccessLog)][format];
        let _ = read(&bytes, &options(format));
    }

    #[test]
    fn no_splice_of_real_lines_panics_a_parser(
        picks in proptest::collection::vec((0usize..16, 0usize..200, 0usize..200), 1..8),
        format in 0usize..4,
    ) {
        let pieces = pieces();
        let mut text = String::new();
        for (piece, start, end) in picks {
            let piece = &pieces[piece % pieces.len()];
            let cut = |at: usize| (0..=at.min(piece.len())).rev().find(|&at| piece.is_char_boundary(at)).unwrap_or(0);
            let (start, end) = (cut(start.min(end)), cut(start.max(end)));
            text.push_str(&piece[start..end]);
            text.push('\n');
        }
        let format = [None, Some(Format::Har), Some(Format::Jsonl), Some(Format::AccessLog)][format];
        if let Ok(parsed) = read(text.as_bytes(), &options(format)) {
            prop_assert!(!parsed.requests.is_empty());
            prop_assert!(parsed.requests.windows(2).all(|pair| pair[0].offset <= pair[1].offset));
            let _ = parsed.select(None);
        }
    }
}
