//! `ratescope headers` as a user runs it: a pasted response head in, a table or exact JSON out.

mod support;

/// `ratescope headers ARGS` with `input` on stdin: whether it succeeded, stdout, stderr.
fn headers(args: &[&str], input: &str) -> (bool, String, String) {
    let (code, stdout, stderr) = support::cli::run(None, ["headers"].iter().chain(args), input);
    (code == 0, stdout, stderr)
}

const GITHUB: &str = "HTTP/2 403\r\ndate: Mon, 01 Jan 2024 00:00:00 GMT\r\nx-ratelimit-limit: 60\r\nx-ratelimit-remaining: 0\r\nx-ratelimit-used: 60\r\nx-ratelimit-reset: 1704067260\r\nx-ratelimit-resource: core\r\n\r\n";

#[test]
fn json_has_exactly_the_documented_shape() {
    let (ok, stdout, stderr) = headers(&["--json", "--now", "1704067200"], GITHUB);
    assert!(ok, "{stderr}");
    let json: serde_json::Value = serde_json::from_str(&stdout).unwrap();
    let keys: Vec<&str> = json.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(keys, ["budgets", "retry_after_s", "status", "throttled", "warnings"]);
    assert_eq!(json["status"], 403);
    assert_eq!(json["throttled"], true);
    let budget = &json["budgets"][0];
    let budget_keys: Vec<&str> = budget.as_object().unwrap().keys().map(String::as_str).collect();
    assert_eq!(budget_keys, ["limit", "name", "remaining", "reset_after_s", "unit", "window_s"]);
    assert_eq!((budget["name"].as_str(), budget["limit"].as_f64()), (Some("core"), Some(60.0)));
    assert_eq!((budget["remaining"].as_f64(), budget["reset_after_s"].as_f64()), (Some(0.0), Some(60.0)));
}

#[test]
fn the_table_is_readable_and_malformed_values_become_warnings() {
    let input = "HTTP/1.1 429 Too Many Requests\nRetry-After: 20\nRateLimit-Policy: \"burst\";q=100;w=60\nRateLimit: \"burst\";r=0;t=12\nx-ratelimit-remaining: lots\n\n";
    let (ok, stdout, stderr) = headers(&[], input);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("status: 429"), "{stdout}");
    assert!(stdout.contains("burst") && stdout.contains("100"), "{stdout}");
    assert!(stdout.contains("retry-after: 20s"), "{stdout}");
    assert!(stdout.contains("\"lots\" is not a number"), "{stdout}");
}

#[test]
fn an_unreadable_file_is_a_clear_error() {
    let (ok, _, stderr) = headers(&["/nonexistent/head.txt"], "");
    assert!(!ok);
    assert!(stderr.contains("cannot read /nonexistent/head.txt"), "{stderr}");
}

#[test]
fn forty_thousand_header_lines_are_refused_with_the_line_not_a_panic() {
    let mut input = String::from("HTTP/1.1 200 OK\n");
    for i in 0..40_000 {
        input.push_str(&format!("x-filler-{i}: {i}\n"));
    }
    let (ok, _, stderr) = headers(&[], &input);
    assert!(!ok);
    assert!(!stderr.contains("panicked"), "{stderr}");
    assert!(stderr.contains("more header lines than a response can carry"), "{stderr}");
}

#[test]
fn an_endless_input_is_cut_at_a_mebibyte_with_a_clear_error() {
    let path = std::path::Path::new("/dev/zero");
    if !path.exists() {
        return;
    }
    let (ok, _, stderr) = headers(&["/dev/zero"], "");
    assert!(!ok);
    assert!(stderr.contains("/dev/zero holds more than 1 MiB"), "{stderr}");
}

/// Issue #32, finding 12: a huge number is printed compactly, not as 309 digits.
#[test]
fn huge_numbers_are_printed_compactly() {
    let input = "HTTP/1.1 200 OK\nx-ratelimit-limit: 1e308\nx-ratelimit-remaining: 99999999999999999999999\n\n";
    let (ok, stdout, stderr) = headers(&[], input);
    assert!(ok, "{stderr}");
    assert!(stdout.contains("1e308") && stdout.contains("1e23"), "{stdout}");
    assert!(stdout.lines().all(|line| line.len() < 200), "{stdout}");
    let (ok, _, stderr) = headers(&["--now", "1e308"], input);
    assert!(!ok);
    assert!(stderr.contains("--now 1e308 is not"), "{stderr}");
}
