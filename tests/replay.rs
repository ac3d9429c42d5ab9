//! Replays in virtual time (the simulator's paused clock): a known schedule through a known
//! limiter meets known delays; without a limiter, a server model that refuses has its
//! refusals counted; a retried request's wait is its added delay; a recorded replay gives the
//! charts their events and snapshots.

use std::collections::BTreeMap;
use std::time::Duration;

use http::Method;
use ratescope::engine::{BudgetSpec, LimiterConfig};
use ratescope::http::RetryPolicy;
use ratescope::mock::{MockConfig, Outcome};
use ratescope::sim::SimOptions;
use ratescope::sim::replay::{Fate, Format, Problems, Recorded, Recording, ReplaySettings, replay};

/// A recording of `(ms, method, path)` on api.example.com.
fn recording(requests: &[(u64, Method, &str)]) -> Recording {
    Recording {
        host: "api.example.com".to_owned(),
        chosen_by_caller: false,
        requests: requests
            .iter()
            .map(|(ms, method, path)| Recorded {
                offset: Duration::from_millis(*ms),
                method: method.clone(),
                url: format!("https://api.example.com{path}").parse().unwrap(),
            })
            .collect(),
        other_hosts: Vec::new(),
        format: Format::Har,
        problems: Problems::default(),
        skipped: BTreeMap::new(),
        joined_to_base: 0,
    }
}

/// One route for every path, answering after 20 ms, with `policies` (TOML) and `extra` settings.
fn server(extra: &str, policies: &str) -> MockConfig {
    MockConfig::from_toml(&format!("[[routes]]\nprefix = \"/\"\nlatency = {{ fixed = \"20ms\" }}\n{extra}\n{policies}"))
        .unwrap()
}

fn bucket(capacity: u64, rate: &str) -> LimiterConfig {
    LimiterConfig::new().with_budget(BudgetSpec::token_bucket("rate", capacity, rate.parse().unwrap()).unwrap())
}

fn no_retries() -> RetryPolicy {
    RetryPolicy { max_attempts: 1, ..RetryPolicy::default() }
}

fn assert_about(actual: Duration, expected_ms: u64) {
    let expected = Duration::from_millis(expected_ms);
    let off = actual.abs_diff(expected);
    assert!(off <= Duration::from_millis(1), "{actual:?}, expected {expected:?}");
}

#[test]
fn a_known_schedule_through_a_known_limiter_meets_known_delays() {
    // Six at once, then one ten seconds later; a bucket of 2 refilling 2 a second.
    let mut requests: Vec<(u64, Method, &str)> = (0..6).map(|_| (0, Method::GET, "/items?page=1")).collect();
    requests.push((10_000, Method::POST, "/search"));
    let recording = recording(&requests);
    let limited = ReplaySettings { limits: Some(bucket(2, "2/1s")), retry: no_retries(), ..ReplaySettings::default() };
    let run = replay(&recording, &limited, &server("", ""), &SimOptions::default()).unwrap();

    let delays: Vec<Duration> = run.requests.iter().map(|r| r.added_delay).collect();
    for (delay, expected) in delays.iter().zip([0, 0, 500, 1000, 1500, 2000, 0]) {
        assert_about(*delay, expected);
    }
    assert!(run.requests.iter().all(|r| r.fate == Fate::Served && r.status == Some(200) && r.attempts == 1));
    assert_eq!(run.requests[6].method, Method::POST, "each request keeps its method");
    assert_eq!(&*run.requests[6].path, "/search");
    assert_eq!(run.requests[6].recorded_at, Duration::from_secs(10));
    let summary = &run.summary;
    assert_eq!((summary.served, summary.refused, summary.failed_other, summary.delayed), (7, 0, 0, 4));
    assert!((summary.added_delay_ms.max - 2000.0).abs() <= 1.0, "{:?}", summary.added_delay_ms);
    assert_eq!(summary.added_delay_ms.min, 0.0);
    assert_eq!(summary.burst.requests, 7);
    assert_eq!(summary.host, "api.example.com");
    // The server saw the recorded schedule, paced: the seventh at its own time.
    let arrivals = &run.simulation.arrivals;
    assert_eq!(arrivals.len(), 7);
    assert_about(arrivals[6].at - arrivals[0].at, 10_000);

    // The raw side: every request at its recorded time.
    let raw = ReplaySettings { retry: no_retries(), ..ReplaySettings::default() };
    let run = replay(&recording, &raw, &server("", ""), &SimOptions::default()).unwrap();
    assert!(run.requests.iter().all(|r| r.added_delay.is_zero()), "{:?}", run.requests);
    assert_eq!((run.summary.delayed, run.summary.burst.limiter.as_str()), (0, "none"));
}

#[test]
fn without_a_limiter_a_refusing_model_has_its_refusals_counted() {
    let recording = recording(&(0..10).map(|i| (i * 10, Method::GET, "/items")).collect::<Vec<_>>());
    let raw = ReplaySettings { retry: no_retries(), ..ReplaySettings::default() };
    let policy = "[[routes.policies]]\nkind = \"token_bucket\"\ncapacity = 3\nrate = \"1/1m\"";
    for status in [429, 503] {
        let model = server(&format!("status = {status}"), policy);
        let run = replay(&recording, &raw, &model, &SimOptions::default()).unwrap();
        let summary = &run.summary;
        assert_eq!((summary.served, summary.refused, summary.failed_other), (3, 7, 0), "status {status}");
        assert_eq!(summary.burst.status_counts.get(&status.to_string()), Some(&7));
        assert_eq!(summary.burst.failed, 7);
        let refused: Vec<usize> =
            run.requests.iter().enumerate().filter(|(_, r)| r.fate == Fate::Refused).map(|(i, _)| i).collect();
        assert_eq!(refused, [3, 4, 5, 6, 7, 8, 9], "the first three fit the bucket");
        assert!(run.requests.iter().all(|r| r.added_delay.is_zero()));
        let limited = run.simulation.arrivals.iter().filter(|a| matches!(a.outcome, Outcome::Limited(_))).count();
        assert_eq!(limited, 7, "the model refused them, not the client");
    }

    // The same recording through a limiter as strict as the model: none refused, all delayed.
    let paced = ReplaySettings { limits: Some(bucket(3, "1/1m")), retry: no_retries(), ..ReplaySettings::default() };
    let policy_fast = "[[routes.policies]]\nkind = \"token_bucket\"\ncapacity = 3\nrate = \"1/1s\"";
    let paced_bucket = ReplaySettings { limits: Some(bucket(3, "1/1s")), ..paced };
    let run = replay(&recording, &paced_bucket, &server("", policy_fast), &SimOptions::default()).unwrap();
    assert_eq!((run.summary.served, run.summary.refused), (10, 0));
    assert_eq!(run.summary.delayed, 7);
}

#[test]
fn a_retried_request_is_delayed_by_its_retry_wait() {
    // A bucket of one refilling each second, no limiter: the second request is refused, waits
    // the Retry-After and is served on its second attempt.
    let recording = recording(&[(0, Method::GET, "/a"), (0, Method::GET, "/b")]);
    let policy = "[[routes.policies]]\nkind = \"token_bucket\"\ncapacity = 1\nrate = \"1/1s\"";
    let settings = ReplaySettings {
        retry: RetryPolicy { max_attempts: 3, ..RetryPolicy::default() },
        ..ReplaySettings::default()
    };
    let run = replay(&recording, &settings, &server("", policy), &SimOptions::default()).unwrap();
    let second = &run.requests[1];
    assert_eq!((second.fate, second.attempts), (Fate::Served, 2));
    assert!(
        (Duration::from_millis(990)..=Duration::from_millis(1_100)).contains(&second.added_delay),
        "the first attempt and the Retry-After wait: {:?}",
        second.added_delay
    );
    assert_eq!(run.summary.delayed, 1);
}

#[test]
fn a_recorded_replay_gives_the_charts_events_and_snapshots() {
    let recording = recording(&(0..20).map(|i| (i * 50, Method::GET, "/items")).collect::<Vec<_>>());
    let settings = ReplaySettings { limits: Some(bucket(2, "4/1s")), ..ReplaySettings::default() };
    let options = SimOptions { record: true, ..SimOptions::default() };
    let run = replay(&recording, &settings, &server("", ""), &options).unwrap();
    assert!(run.simulation.events.len() >= 20 * 2, "{} events", run.simulation.events.len());
    assert!(run.simulation.snapshots.len() > 10, "{} snapshots", run.simulation.snapshots.len());
    assert!(
        run.simulation.snapshots.iter().flatten().any(|snapshot| snapshot.queued.iter().sum::<usize>() > 0),
        "the queue is seen"
    );
    // Without recording, none (the command line's replay keeps no events).
    let run = replay(&recording, &settings, &server("", ""), &SimOptions::default()).unwrap();
    assert!(run.simulation.events.is_empty() && run.simulation.snapshots.is_empty());
}

#[test]
fn an_empty_recording_is_refused_not_run() {
    let err = replay(&recording(&[]), &ReplaySettings::default(), &server("", ""), &SimOptions::default()).unwrap_err();
    assert!(err.to_string().contains("0 requests"), "{err}");
}
