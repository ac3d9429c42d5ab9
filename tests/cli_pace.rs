//! `ratescope pace` runs on a virtual clock: an hour-long schedule prints at once and exactly,
//! fractional rates keep a bucket of one, and absurd work times are refused.

use std::process::{Command, Output, Stdio};

fn pace(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_ratescope"))
        .arg("pace")
        .args(args)
        .stdin(Stdio::null())
        .output()
        .expect("the ratescope binary runs")
}

/// The admission times (seconds) of the table's rows.
fn times(output: &Output) -> Vec<f64> {
    String::from_utf8_lossy(&output.stdout)
        .lines()
        .filter_map(|line| line.trim().split_once("s ")?.0.parse().ok())
        .collect()
}

#[test]
fn an_hour_of_pacing_is_simulated_not_waited() {
    // In real time this would take two hours; the test would hang instead of failing fast.
    let run = pace(&["-n", "3", "--rate", "1/1h", "--work", "1s"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    assert_eq!(times(&run), vec![0.0, 3600.0, 7200.0]);
    assert!(String::from_utf8_lossy(&run.stdout).contains("of simulated time"));
}

#[test]
fn half_a_request_per_second_is_one_every_two_seconds() {
    let run = pace(&["-n", "4", "--rate", "0.5/1s"]);
    assert!(run.status.success(), "{}", String::from_utf8_lossy(&run.stderr));
    let stdout = String::from_utf8_lossy(&run.stdout);
    assert!(stdout.contains("bucket 1 @ 1/2s"), "{stdout}");
    assert_eq!(times(&run), vec![0.0, 2.0, 4.0, 6.0], "{stdout}");
}

#[test]
fn absurd_work_is_a_usage_error() {
    let run = pace(&["-n", "3", "--work", "1000000000d"]);
    assert_eq!(run.status.code(), Some(2));
    assert!(String::from_utf8_lossy(&run.stderr).contains("longer than a day"));
}
