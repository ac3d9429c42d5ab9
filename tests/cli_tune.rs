//! `ratescope tune` as a user runs it: the JSON schema, each kind of server model, and clear
//! errors (exit 2 for a usage error, 1 otherwise) for every bad input.

#[allow(dead_code, reason = "this file runs the binary synchronously only")]
#[path = "support/cli.rs"]
mod cli;

use std::path::Path;

use serde_json::Value;

/// A burst spec of `requests` at once to the demo API's `/items`.
fn spec(dir: &Path, requests: usize) -> String {
    let path = dir.join("burst.toml");
    std::fs::write(&path, format!("path = \"/items\"\nrequests = {requests}\n")).unwrap();
    path.display().to_string()
}

fn tune(dir: &Path, args: &[&str]) -> (i32, String, String) {
    let mut all = vec!["tune"];
    all.extend_from_slice(args);
    cli::run(Some(dir), all, "")
}

fn json(stdout: &str) -> Value {
    serde_json::from_str(stdout).unwrap_or_else(|err| panic!("not JSON ({err}): {stdout}"))
}

#[test]
fn the_json_has_the_best_setting_in_probes_shape_its_prediction_and_every_candidate() {
    let dir = tempfile::tempdir().unwrap();
    let burst = spec(dir.path(), 30);
    let (code, stdout, stderr) = tune(dir.path(), &["--burst", &burst, "--steps", "6", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let report = json(&stdout);
    let best = &report["best"];
    assert!(best["budgets"].is_array() && best.get("concurrency").is_some(), "{report:#}");
    assert_eq!(best["budgets"][0]["kind"], "token_bucket");
    assert!(best["budgets"][0]["capacity"].is_u64() && best["budgets"][0]["per_s"].is_f64(), "{report:#}");
    assert_eq!(best["budgets"][1]["kind"], "sliding_window", "the demo's minute is mirrored: {report:#}");
    for key in ["elapsed_s", "status_counts", "p50_ms", "p99_ms"] {
        assert!(report["predicted"].get(key).is_some(), "predicted.{key}: {report:#}");
    }
    assert_eq!(report["predicted"]["status_counts"]["200"], 30, "{report:#}");
    let candidates = report["candidates"].as_array().unwrap();
    assert_eq!(candidates.len(), 36, "6 capacities × 6 rates");
    assert_eq!(candidates[0]["budgets"], best["budgets"], "the best is ranked first");
    // Ranked: no refusal before any refusal, and among clean ones the shortest makespan first.
    let clean: Vec<bool> = candidates.iter().map(|c| c["throttled"] == 0 && c["failed"] == 0).collect();
    assert!(clean.windows(2).all(|pair| pair[0] || !pair[1]), "clean settings come first: {clean:?}");
    let elapsed: Vec<f64> =
        candidates.iter().filter(|c| c["throttled"] == 0).map(|c| c["elapsed_s"].as_f64().unwrap()).collect();
    assert!(elapsed.windows(2).all(|pair| pair[0] <= pair[1]), "{elapsed:?}");
    assert!(clean.contains(&false), "the sweep reaches past the server's pace, where 429s show");
    let flags: Vec<&str> = report["burst_flags"].as_array().unwrap().iter().map(|f| f.as_str().unwrap()).collect();
    assert_eq!(flags[0], "--rate", "{flags:?}");
}

#[test]
fn the_text_names_the_best_its_prediction_and_the_command_that_fires_it() {
    let dir = tempfile::tempdir().unwrap();
    let burst = spec(dir.path(), 20);
    let (code, stdout, stderr) = tune(dir.path(), &["--burst", &burst, "--steps", "4", "--top", "3"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(stdout.contains("swept:      16 settings × 20 requests"), "{stdout}");
    assert!(stdout.contains("predicted:") && stdout.contains("no refusal"), "{stdout}");
    assert!(stdout.contains("fire it:    ratescope burst http://127.0.0.1:8787/items -n 20 --rate "), "{stdout}");
    assert_eq!(stdout.lines().filter(|line| line.trim_start().starts_with(char::is_numeric)).count(), 3, "{stdout}");
}

#[test]
fn a_probe_report_is_a_model() {
    let dir = tempfile::tempdir().unwrap();
    let burst = spec(dir.path(), 40);
    let probe = dir.path().join("probe.json");
    std::fs::write(
        &probe,
        r#"{"suggested": {"budgets": [], "concurrency": null},
            "found": {"budgets": [{"kind": "token_bucket", "capacity": 10, "per_s": 20.0}], "concurrency": 3}}"#,
    )
    .unwrap();
    let (code, stdout, stderr) =
        tune(dir.path(), &["--burst", &burst, "--from-probe", probe.to_str().unwrap(), "--steps", "5", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    let report = json(&stdout);
    assert!(report["model"].as_str().unwrap().contains("bucket 10 @ 20/1s + concurrency 3"), "{report:#}");
    let concurrency = report["best"]["concurrency"].as_u64().expect("a concurrency cap is swept");
    assert!((2..=3).contains(&concurrency), "half the model's limit to it: {report:#}");
    // The server lets 10 through at once and 20 a second after: no setting without a refusal
    // finishes 40 sooner than (40 - 10) / 20 s.
    let predicted = report["predicted"]["elapsed_s"].as_f64().unwrap();
    assert!(predicted >= 1.5, "never faster than the server itself: {report:#}");
}

#[test]
fn a_profile_is_a_model_and_its_host_is_chosen_by_name() {
    let dir = tempfile::tempdir().unwrap();
    let burst = spec(dir.path(), 20);
    let profile = dir.path().join("two.toml");
    std::fs::write(
        &profile,
        r#"name = "two"
[[hosts]]
name = "slow"
base_url = "https://slow.example"
budgets = [{ name = "rate", kind = "token_bucket", capacity = 2, rate = "2/1s" }]
[[hosts]]
name = "fast"
base_url = "https://fast.example"
budgets = [{ name = "rate", kind = "token_bucket", capacity = 50, rate = "50/1s" }]
"#,
    )
    .unwrap();
    let profile = profile.to_str().unwrap();
    let (code, stdout, stderr) =
        tune(dir.path(), &["--burst", &burst, "--profile", profile, "--host", "slow", "--steps", "3", "--json"]);
    assert_eq!(code, 0, "{stderr}");
    assert!(json(&stdout)["model"].as_str().unwrap().starts_with("bucket 2 @ 2/1s"), "{stdout}");
    let (code, _, stderr) = tune(dir.path(), &["--burst", &burst, "--profile", profile, "--host", "nope"]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no host 'nope'") && stderr.contains("slow (https://slow.example)"), "{stderr}");
    // Neither --host nor a host the burst's URL reaches: the hosts are listed.
    let (code, _, stderr) = tune(dir.path(), &["--burst", &burst, "--profile", profile]);
    assert_eq!(code, 2, "{stderr}");
    assert!(stderr.contains("no host for") && stderr.contains("fast (https://fast.example)"), "{stderr}");
}

#[test]
fn bad_inputs_get_a_clear_error_and_the_right_exit_code() {
    let dir = tempfile::tempdir().unwrap();
    let burst = spec(dir.path(), 10);
    let garbage = dir.path().join("garbage.json");
    std::fs::write(&garbage, "<html>not json</html>").unwrap();
    let no_limits = dir.path().join("open.toml");
    std::fs::write(&no_limits, "[[routes]]\nprefix = \"/\"\n").unwrap();
    let garbage = garbage.to_str().unwrap();
    let cases: Vec<(Vec<&str>, i32, &str)> = vec![
        (vec!["--from-probe", garbage], 1, "is not `ratescope probe --json` output"),
        (vec!["--from-probe", "/nonexistent/probe.json"], 1, "cannot read the probe report"),
        (vec!["--server", no_limits.to_str().unwrap()], 2, "has no limit for these requests"),
        (vec!["--steps", "0"], 2, "--steps 0 must be 1 to 200"),
        (vec!["--steps", "100000"], 2, "--steps 100000"),
        (vec!["--margin", "NaN"], 2, "margin"),
        (vec!["--margin", "0.9"], 2, "margin"),
        (vec!["--capacity", "0..5"], 2, "--capacity 0..5 must lie within"),
        (vec!["--capacity", "9..2"], 2, "above the high end"),
        (vec!["--rate", "0..5"], 2, "--rate 0..5"),
        (vec!["--rate", "inf..inf"], 2, "--rate"),
        (vec!["--capacity", "1..18446744073709551615"], 2, "--capacity"),
        (vec!["--steps", "200", "--capacity", "1..500", "--concurrency", "1..500"], 2, "more than one tune sweeps"),
        (vec!["--latency", "5ms"], 2, "--latency is for --from-probe and --profile"),
        (vec!["--from-probe", garbage, "--server", "x.toml"], 2, "cannot be used with"),
    ];
    for (args, expected, message) in cases {
        let mut all = vec!["--burst", burst.as_str()];
        all.extend(args.iter().copied());
        let (code, stdout, stderr) = tune(dir.path(), &all);
        assert_eq!(code, expected, "{args:?}: {stderr}{stdout}");
        assert!(stderr.contains(message), "{args:?}: expected '{message}' in: {stderr}");
        assert!(!stderr.contains("panicked"), "{args:?}: {stderr}");
    }
}

#[test]
fn a_sweep_where_every_setting_is_refused_says_so_and_fails() {
    let dir = tempfile::tempdir().unwrap();
    let burst = spec(dir.path(), 40);
    // Rates far above the demo's 5/s and bursts above its 5: every setting meets 429s.
    let (code, stdout, _) =
        tune(dir.path(), &["--burst", &burst, "--rate", "50..60", "--capacity", "30..40", "--steps", "2", "--json"]);
    assert_eq!(code, 1);
    let report = json(&stdout);
    assert_eq!(report["best"], Value::Null, "{report:#}");
    assert_eq!(report["predicted"], Value::Null, "{report:#}");
    assert!(report["candidates"].as_array().unwrap().iter().all(|c| c["throttled"].as_u64().unwrap() > 0));
}
