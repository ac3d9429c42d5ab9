//! The desktop app driven through egui_kittest: the demo API starts by itself, a click fires a
//! burst through the real engine over loopback, fields validate as typed, Ctrl+S saves, Esc cancels.
#![cfg(feature = "gui")]

mod redis_support;

use std::path::Path;
use std::sync::mpsc::Receiver;
use std::time::{Duration, Instant};

use egui_kittest::Harness;
use egui_kittest::kittest::Queryable;
use ratescope::gui::charts::{EMPTY_TEXT, PROXY_EMPTY_TEXT};
use ratescope::gui::quit::{QUIT_TITLE, Quit};
use ratescope::gui::{App, AppOptions, ArrivalChoice, DemoStatus, FIRE_TARGET, ProxyStatus, RunStatus, Tab};

thread_local! {
    /// Signalled by the app's background whenever it has news (the app's repaint request).
    static NEWS: std::cell::RefCell<Option<Receiver<()>>> = const { std::cell::RefCell::new(None) };
}

fn app(config_dir: &Path) -> App {
    let (news, receiver) = std::sync::mpsc::channel();
    NEWS.with(|slot| *slot.borrow_mut() = Some(receiver));
    let repaint = move || {
        let _ = news.send(());
    };
    App::new(
        repaint,
        AppOptions {
            demo_port: 0,
            config_dir: Some(config_dir.to_owned()),
            close_after: None,
            screenshot: None,
            last_profile: None,
        },
    )
    .unwrap()
}

fn harness_for(dir: &Path) -> Harness<'static, App> {
    harness(app(dir))
}

fn harness(app: App) -> Harness<'static, App> {
    harness_sized(app, egui::vec2(1400.0, 900.0))
}

fn harness_sized(app: App, size: egui::Vec2) -> Harness<'static, App> {
    Harness::builder().with_size(size).build_ui_state(|ui, app: &mut App| app.frame_ui(ui), app)
}

/// Waits for the background's next repaint request (at most a short while), without sleeping.
fn await_news() {
    NEWS.with(|slot| {
        if let Some(receiver) = slot.borrow().as_ref() {
            let _ = receiver.recv_timeout(Duration::from_millis(100));
        }
    });
}

/// Steps frames until `done` holds; the background runs on its own threads in real time.
fn step_until(harness: &mut Harness<'_, App>, what: &str, done: impl Fn(&App) -> bool) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while !done(harness.state()) {
        assert!(Instant::now() < deadline, "timed out waiting for {what}");
        harness.step();
        await_news();
    }
    harness.step();
}

fn ready(harness: &mut Harness<'_, App>) {
    step_until(harness, "the demo API and the profiles", |app| {
        matches!(app.demo(), DemoStatus::Running { .. }) && app.editor().loaded
    });
}

#[test]
fn a_newcomer_fires_a_burst_at_the_demo_api_with_one_click() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    assert!(dir.path().join("profiles/demo.toml").exists(), "the demo profile was written on first start");
    assert_eq!(harness.state().editor().profile().map(|p| p.name.as_str()), Some("demo"));
    type_key_by_key(&mut harness, "request count", "12");
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the burst to finish", |app| matches!(app.run(), RunStatus::Done { .. }));
    let summary = harness.state().summary().cloned().unwrap();
    assert_eq!((summary.requests, summary.succeeded, summary.failed), (12, 12, 0));
    assert_eq!(summary.status_counts.get("429"), None, "the demo profile's limits keep the demo API happy");
    assert!(harness.state().telemetry().log.len() >= 12, "every attempt is in the request log");
    assert!(!harness.state().telemetry().tokens.is_empty(), "token charts were sampled");
    harness.get_by_label("Summary");
    harness.get_by_label("Export CSV…");
}

#[test]
fn a_narrow_window_keeps_the_toolbars_inside_it_and_apart() {
    let dir = tempfile::tempdir().unwrap();
    let width = 1024.0;
    let mut harness = harness_sized(app(dir.path()), egui::vec2(width, 640.0));
    ready(&mut harness);
    harness.run_steps(2);
    for label in ["Import…", "Fire", "Discover…", "share budgets via Redis"] {
        let rect = harness.get_by_label(label).rect();
        assert!(rect.right() <= width, "'{label}' ends at {} in a {width}-point window", rect.right());
    }
    // The lane-share sliders wrap to the next row with their labels instead of running off the edge.
    let sliders: Vec<egui::Rect> =
        harness.get_all_by_role(egui::accesskit::Role::Slider).map(|slider| slider.rect()).collect();
    assert!(sliders.len() >= 2, "the composer's two lane-share sliders");
    for rect in sliders {
        assert!(rect.right() <= width, "a slider ends at {} in a {width}-point window", rect.right());
    }
    // The demo API's status has the status bar at the window's foot to itself, whole, instead
    // of shrinking to "d…" beside the profile buttons.
    let status = harness.get_by_label_contains("demo API running at").rect();
    let log = harness.get_by_label("Request log").rect();
    assert!(status.top() > log.bottom() && status.bottom() <= 640.0, "status {status:?}, log {log:?}");
    assert!(status.width() > 200.0, "the status reads whole: {status:?}");
}

#[test]
fn fields_validate_as_typed_and_ctrl_s_saves() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    // As a person does: click into the field, select all, delete, then type key by key.
    let set_rate = |harness: &mut Harness<'_, App>, rate: &str| {
        harness.get_by_label("refill rate").focus();
        harness.run_steps(2);
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
        harness.key_press(egui::Key::Backspace);
        harness.run_steps(1);
        for key in rate.chars() {
            harness.get_by_label("refill rate").type_text(&key.to_string());
            harness.run_steps(1);
        }
        let editor = &harness.state().editor();
        let typed = editor.profiles[editor.current].profile.hosts[editor.host].budgets[0].rate.clone();
        assert_eq!(typed.as_deref(), Some(rate), "the field kept every key");
    };
    set_rate(&mut harness, "0/1s");
    harness.run_steps(2);
    harness.get_by_label_contains("a rate of zero never refills");
    set_rate(&mut harness, "7/1s");
    harness.run_steps(2);
    assert!(harness.query_by_label_contains("a rate of zero never refills").is_none());
    assert!(
        harness.state().editor().profiles[harness.state().editor().current].is_dirty(),
        "an unsaved-changes marker"
    );
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    let file = dir.path().join("profiles/demo.toml");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !std::fs::read_to_string(&file).unwrap_or_default().contains("7/1s") {
        assert!(Instant::now() < deadline, "the profile was not saved");
        harness.step();
        await_news();
    }
    assert!(dir.path().join("profiles/demo.toml.bak").exists(), "the previous version is kept");
    // The marker goes when the background confirms the write.
    step_until(&mut harness, "the save's confirmation", |app| !app.editor().profiles[app.editor().current].is_dirty());

    // A restarted app reads the saved profile back.
    let mut reloaded = harness_for(dir.path());
    ready(&mut reloaded);
    let editor = &reloaded.state().editor();
    let rate = editor.profiles[editor.current].profile.hosts[editor.host].budgets[0].rate.clone();
    assert_eq!(rate.as_deref(), Some("7/1s"));
}

/// The window's `per` field, typed key by key over its text: every key stays, an invalid
/// text is shown with its error instead of snapping back, and the valid one is what is saved.
#[test]
fn a_window_typed_key_by_key_keeps_every_key() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    let field = "window, as limit/length";
    let type_over = |harness: &mut Harness<'_, App>, text: &str| {
        // The host's own window comes first; path overrides have theirs below.
        harness.get_all_by_label(field).next().unwrap().focus();
        harness.run_steps(2);
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
        harness.key_press(egui::Key::Backspace);
        harness.run_steps(1);
        for key in text.chars() {
            harness.get_all_by_label(field).next().unwrap().type_text(&key.to_string());
            harness.run_steps(1);
        }
    };
    let window = |harness: &Harness<'_, App>| {
        let editor = &harness.state().editor();
        let budget = &editor.profiles[editor.current].profile.hosts[editor.host].budgets[1];
        (budget.limit, budget.window.clone())
    };
    type_over(&mut harness, "500/30");
    assert_eq!(harness.get_all_by_label(field).next().unwrap().value().as_deref(), Some("500/30"), "kept as typed");
    harness.get_by_label_contains("not a duration");
    assert_eq!(window(&harness), (Some(100), Some("1m".to_owned())), "nothing invalid reached the model");
    harness.get_all_by_label(field).next().unwrap().type_text("m");
    harness.run_steps(2);
    assert_eq!(window(&harness), (Some(500), Some("30m".to_owned())));
    assert!(harness.query_by_label_contains("not a duration").is_none());
}

#[test]
fn adding_a_host_shows_its_editor_and_refuses_a_bad_base_url() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let hosts_before = harness.state().editor().profile().map_or(0, |p| p.hosts.len());
    harness.get_by_label("+ host").click();
    harness.run_steps(2);
    let editor = &harness.state().editor();
    assert_eq!(editor.profile().map(|p| p.hosts.len()), Some(hosts_before + 1));
    assert_eq!(editor.selected_host().map(|h| h.name.as_str()), Some("host 1"));
    harness.get_by_label("Limits · host 1");
    type_key_by_key(&mut harness, "base URL", "ftp://files.example.com");
    harness.get_by_label("use http:// or https://");
}

#[test]
fn escape_cancels_a_running_burst() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    type_key_by_key(&mut harness, "request count", "400");
    choose(&mut harness, "arrival pattern", "fixed rate");
    type_key_by_key(&mut harness, "arrival rate", "20/1s");
    assert_eq!(harness.state().composer().arrival, ArrivalChoice::FixedRate);
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::Enter);
    step_until(&mut harness, "the burst to start", |app| matches!(app.run(), RunStatus::Running { .. }));
    harness.key_press(egui::Key::Escape);
    step_until(&mut harness, "the cancellation", |app| matches!(app.run(), RunStatus::Done { .. }));
    let summary = harness.state().summary().cloned().unwrap();
    assert!(summary.cancelled > 300, "most of the 400 were dropped: {summary:?}");
}

#[test]
fn the_simulator_tab_compares_two_limits_on_one_workload() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    harness.get_by_label("Simulator").click();
    harness.run_steps(2);
    assert_eq!(harness.state().tab(), Tab::Simulator);
    type_key_by_key(&mut harness, "simulated request count", "60");
    harness.get_by_label("Run both").click();
    step_until(&mut harness, "both simulations", |app| {
        app.simulator().results.is_some() || app.simulator().error.is_some()
    });
    let simulator = &harness.state().simulator();
    assert_eq!(simulator.error, None);
    let results = simulator.results.as_ref().expect("two results");
    let [a, b] = &**results;
    assert_eq!((a.summary.requests, b.summary.requests), (60, 60), "the same workload on both sides");
    assert_eq!(a.summary.status_counts.get("429"), None, "A mirrors the demo API's limits");
    assert!(b.summary.status_counts.contains_key("429"), "B is faster than the server allows");
    assert!(!a.telemetry.tokens.is_empty() && !b.telemetry.log.is_empty(), "charts for both sides");
    harness.get_by_label_contains("A: bucket 5 @ 5/1s");

    type_key_by_key(&mut harness, "limits B", "bucket 0 @ 1/1s");
    harness.get_by_label("Run both").click();
    harness.run_steps(2);
    assert!(harness.state().simulator().error.as_deref().is_some_and(|err| err.starts_with("B:")));
}

#[test]
fn discover_probes_the_demo_api_and_makes_a_profile_in_one_click() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    harness.get_by_label("Discover…").click();
    harness.run_steps(2);
    assert!(harness.state().discover().open);
    assert!(harness.state().discover().url.ends_with("/items"), "{}", harness.state().discover().url);
    harness.get_by_label("Probe").click();
    step_until(&mut harness, "the probe", |app| app.discover().report.is_some());
    let report = harness.state().discover().report.clone().unwrap().unwrap();
    assert_eq!(report.requests_used, 1, "the demo API publishes its policies: {report}");
    assert_eq!(report.suggested.budgets.len(), 2, "burst and minute, stacked: {report}");
    harness.get_by_label("Create profile").click();
    let file = dir.path().join("profiles/discovered.toml");
    let deadline = Instant::now() + Duration::from_secs(20);
    while !file.exists() {
        assert!(Instant::now() < deadline, "the discovered profile was not saved");
        harness.step();
        await_news();
    }
    assert_eq!(harness.state().editor().profile().map(|p| p.name.as_str()), Some("discovered"));
    assert!(!harness.state().discover().open, "the window closes once the profile is made");
}

#[test]
fn the_proxy_tab_starts_a_proxy_from_the_profile_and_shows_its_traffic() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    harness.get_by_label("Proxy").click();
    harness.run_steps(2);
    assert_eq!(harness.state().tab(), Tab::Proxy);
    harness.get_by_label(PROXY_EMPTY_TEXT);
    assert!(harness.query_by_label(EMPTY_TEXT).is_none(), "the Proxy tab does not ask for a burst");
    type_key_by_key(&mut harness, "Port (loopback)", "0");
    harness.get_by_label("Start proxy").click();
    step_until(&mut harness, "the proxy to start", |app| matches!(app.proxy().status, ProxyStatus::Running { .. }));
    let ProxyStatus::Running { routes, .. } = harness.state().proxy().status.clone() else { unreachable!() };
    let (caller_url, upstream) = routes[0].clone();
    assert!(caller_url.ends_with("/demo-api/"), "{caller_url}");
    assert!(upstream.starts_with("http://127.0.0.1:"), "{upstream}");
    harness.get_by_label(&format!("listening on {}", caller_url.trim_end_matches("demo-api/")));

    let runtime = tokio::runtime::Builder::new_current_thread().enable_all().build().unwrap();
    let statuses: Vec<u16> = runtime.block_on(async {
        let mut statuses = Vec::new();
        for _ in 0..3 {
            statuses.push(reqwest::get(format!("{caller_url}items")).await.unwrap().status().as_u16());
        }
        statuses
    });
    assert_eq!(statuses, [200, 200, 200]);
    step_until(&mut harness, "the proxy's traffic in the request log", |app| app.telemetry().log.len() >= 3);

    harness.get_by_label("Stop proxy").click();
    step_until(&mut harness, "the proxy to stop", |app| app.proxy().status == ProxyStatus::Stopped);
}

#[test]
fn sharing_via_redis_is_one_toggle_and_the_indicator_shows_the_store() {
    let url = redis_support::redis_url();
    let up = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .unwrap()
        .block_on(redis_support::shared_server_up());
    if !up {
        return redis_support::skip_or_fail(&format!("no server answers at {url}"));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    harness.get_by_label("share budgets via Redis").click();
    harness.run_steps(2);
    assert!(harness.state().composer().shared.on);
    let key = format!("gui-test-{:016x}", rand::random::<u64>());
    type_key_by_key(&mut harness, "Redis URL", &url);
    type_key_by_key(&mut harness, "shared key", &key);
    type_key_by_key(&mut harness, "request count", "8");
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the shared burst to finish", |app| matches!(app.run(), RunStatus::Done { .. }));
    let summary = harness.state().summary().cloned().unwrap();
    assert_eq!((summary.succeeded, summary.failed), (8, 0), "{summary}");
    let shared = summary.shared.expect("the summary reports the shared store");
    assert_eq!(shared.counts.admitted, summary.sent, "every attempt was decided in Redis: {shared:?}");
    assert!(shared.keys.iter().all(|shared_key| shared_key.starts_with(&format!("{key}/"))), "{:?}", shared.keys);
    harness.run_steps(2);
    harness.get_by_label("connected");
    harness.get_by_label_contains("shared (Redis)");
}

/// The first widget named `label` that is not a text label (a field, beside its caption).
fn field<'h>(harness: &'h Harness<'_, App>, label: &'h str) -> egui_kittest::Node<'h> {
    let by =
        egui_kittest::kittest::By::new().label(label).predicate(|node| node.role() != egui::accesskit::Role::Label);
    harness.get_all(by).next().unwrap_or_else(|| panic!("no field {label:?}"))
}

/// Focuses the field labelled `label` (the first of several), selects all and deletes, then
/// types `text` one key at a time; after each key the field shows exactly what was typed so
/// far. Enter leaves the field at the end.
fn type_key_by_key(harness: &mut Harness<'_, App>, label: &str, text: &str) {
    field(harness, label).focus();
    harness.run_steps(2);
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
    harness.key_press(egui::Key::Backspace);
    harness.run_steps(1);
    let shown = |harness: &Harness<'_, App>| field(harness, label).value();
    assert_eq!(shown(harness).unwrap_or_default(), "", "{label}: select-all + delete empties the field");
    let mut typed = String::new();
    for key in text.chars() {
        typed.push(key);
        field(harness, label).type_text(&key.to_string());
        harness.run_steps(1);
        assert_eq!(shown(harness).as_deref(), Some(typed.as_str()), "{label}: every key stays as typed");
    }
    harness.key_press(egui::Key::Enter);
    harness.run_steps(2);
}

/// The composer's "limiter" checkbox (the summary has a "limiter" row too).
fn limiter_checkbox<'h>(harness: &'h Harness<'_, App>) -> egui_kittest::Node<'h> {
    harness.get(egui_kittest::kittest::By::new().label("limiter").role(egui::accesskit::Role::CheckBox))
}

/// Opens the combo box named `combo` and clicks `option` in its list, as a person picks one.
fn choose(harness: &mut Harness<'_, App>, combo: &str, option: &str) {
    harness.get_by_label(combo).click();
    harness.run_steps(2);
    harness.get_by_label(option).click();
    harness.run_steps(2);
}

/// Every text field of the app, typed into one key at a time: the field shows each key, and
/// the model holds the typed value at the end.
#[test]
fn every_text_field_keeps_each_key_and_the_model_takes_the_value() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    let host = |app: &App| app.editor().selected_host().cloned().unwrap();
    type_key_by_key(&mut harness, "host name", "api one");
    assert_eq!(host(harness.state()).name, "api one");
    type_key_by_key(&mut harness, "base URL", "http://127.0.0.1:9");
    assert_eq!(host(harness.state()).base_url, "http://127.0.0.1:9");
    type_key_by_key(&mut harness, "budget name", "rate2");
    assert_eq!(host(harness.state()).budgets[0].name, "rate2");
    type_key_by_key(&mut harness, "refill rate", "12/1s");
    assert_eq!(host(harness.state()).budgets[0].rate.as_deref(), Some("12/1s"));
    type_key_by_key(&mut harness, "burst capacity", "17");
    assert_eq!(host(harness.state()).budgets[0].capacity, Some(17));
    type_key_by_key(&mut harness, "window, as limit/length", "250/30m");
    let window = host(harness.state()).budgets[1].clone();
    assert_eq!((window.limit, window.window.as_deref()), (Some(250), Some("30m")));
    type_key_by_key(&mut harness, "path prefix", "/api");
    assert_eq!(host(harness.state()).paths[0].prefix, "/api");
    harness.get_by_label("Retry").click_accesskit();
    harness.run_steps(2);
    for (label, text) in [("base", "250ms"), ("cap", "30s"), ("longest Retry-After", "2m")] {
        type_key_by_key(&mut harness, label, text);
    }
    let retry = host(harness.state()).retry.unwrap();
    assert_eq!(
        (retry.base.as_deref(), retry.cap.as_deref(), retry.max_retry_after.as_deref()),
        (Some("250ms"), Some("30s"), Some("2m"))
    );

    type_key_by_key(&mut harness, "endpoint path", "/search");
    assert_eq!(harness.state().composer().endpoints[0].path, "/search");
    type_key_by_key(&mut harness, "request count", "120");
    assert_eq!(harness.state().composer().count, 120);
    choose(&mut harness, "arrival pattern", "for a duration");
    type_key_by_key(&mut harness, "arrival rate", "30/1s");
    type_key_by_key(&mut harness, "arrival duration", "20s");
    assert_eq!(
        (harness.state().composer().rate.as_str(), harness.state().composer().duration.as_str()),
        ("30/1s", "20s")
    );

    harness.get_by_label("Simulator").click();
    harness.run_steps(2);
    type_key_by_key(&mut harness, "simulated path", "/slow");
    type_key_by_key(&mut harness, "simulated arrival rate", "9/1s");
    type_key_by_key(&mut harness, "limits B", "bucket 3 @ 3/1s");
    let simulator = &harness.state().simulator();
    assert_eq!(
        (simulator.path.as_str(), simulator.arrival_rate.as_str(), simulator.limits[1].as_str()),
        ("/slow", "9/1s", "bucket 3 @ 3/1s")
    );
    type_key_by_key(&mut harness, "limits A", "bucket 2 @ 2/1s");
    harness.run_steps(2);
    assert_eq!(
        harness.state().simulator().limits[0],
        "bucket 2 @ 2/1s",
        "typed limits A are not replaced by the profile's"
    );
}

/// The Tune mode: a sweep drawn as a heatmap; clicking a cell puts that setting into the host
/// being edited, and Undo brings the old limits back.
#[test]
fn tune_sweeps_and_a_clicked_cell_becomes_the_hosts_limits_with_undo() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let before = harness.state().editor().selected_host().unwrap().limiter_config().unwrap();
    harness.get_by_label("Simulator").click();
    harness.run_steps(2);
    type_key_by_key(&mut harness, "simulated request count", "30");
    harness.get_by_label("Tune").click();
    harness.run_steps(2);
    type_key_by_key(&mut harness, "tune steps per axis", "4");
    harness.get_by_label("Run sweep").click();
    step_until(&mut harness, "the sweep", |app| app.simulator().tune.report.is_some());
    let report = match harness.state().simulator().tune.report.as_ref().unwrap() {
        Ok(report) => report.clone(),
        Err(err) => panic!("the sweep failed: {err}"),
    };
    assert_eq!(report.candidates.len(), report.capacities.len() * report.rates.len());
    assert!(report.best().is_some(), "the demo's /items has settings with no 429");
    harness.get_by_label("Apply best");
    harness.run_steps(2);

    // Click the bottom-left cell: the smallest bucket at the slowest rate.
    let memory =
        egui_plot::PlotMemory::load(&harness.ctx, ratescope::gui::tune_view::heatmap_id()).expect("the heatmap");
    let at = memory.transform().position_from_point(&egui_plot::PlotPoint::new(0.5, 0.5));
    harness.hover_at(at);
    harness.run_steps(1);
    harness.drag_at(at);
    harness.step();
    harness.drop_at(at);
    harness.run_steps(2);
    let cell = report.cell(0, 0).unwrap();
    let applied = harness.state().editor().selected_host().unwrap().limiter_config().unwrap();
    assert_eq!(applied.budgets, cell.limits.limiter_config().unwrap().budgets, "the clicked cell's setting");
    assert_ne!(applied.budgets, before.budgets);
    harness.get_by_label("Undo").click();
    harness.run_steps(2);
    let undone = harness.state().editor().selected_host().unwrap().limiter_config().unwrap();
    assert_eq!(undone.budgets, before.budgets, "Undo brings the old limits back");

    // Against a server enforcing the host's own limits instead of the demo API's routes.
    harness.get_by_label("against the demo API").click();
    harness.run_steps(2);
    harness.get_by_label("Run sweep").click();
    step_until(&mut harness, "the sweep against the host's limits", |app| {
        let tune = &app.simulator().tune;
        !tune.running && tune.report.as_ref().is_some_and(|r| r.as_ref().is_ok_and(|r| r.model != report.model))
    });
    let model = harness.state().simulator().tune.report.as_ref().unwrap().as_ref().unwrap().model.clone();
    assert!(model.starts_with("bucket 5 @ 5/1s + sliding 100/1m"), "the demo host's own limits: {model}");
}

/// The Replay mode: a real browser's HAR replayed at its recorded times, through the host's
/// limits and without them, against a server enforcing those limits; both sides charted.
#[test]
fn replay_draws_a_recording_with_the_limiter_on_and_off() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    harness.get_by_label("Simulator").click();
    harness.run_steps(2);
    harness.get_by_label("Replay").click();
    harness.run_steps(2);
    harness.get_by_label("Run replay").click();
    harness.run_steps(2);
    assert!(matches!(&harness.state().simulator().replay.result, Some(Err(err)) if err.contains("type a recording")));
    let har = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/replay/firefox-esr-153.har");
    type_key_by_key(&mut harness, "recording file", &har.display().to_string());
    harness.get_by_label("Run replay").click();
    step_until(&mut harness, "the replay", |app| {
        let replay = &app.simulator().replay;
        !replay.running && replay.result.as_ref().is_some_and(|result| result.is_ok())
    });
    let result = harness.state().simulator().replay.result.as_ref().unwrap().as_ref().unwrap();
    let [on, off] = &*result.sides;
    assert_eq!(on.summary.requests, off.summary.requests, "the same recording on both sides");
    assert_eq!(on.summary.status_counts.get("429"), None, "the host's limits keep the host's server happy");
    assert!(off.summary.status_counts.get("429").is_some_and(|n| *n > 0), "without them the page meets 429s");
    assert!(result.description.contains("requests to 127.0.0.1"), "{}", result.description);
    harness.get_by_label_contains("limiter on: bucket 5 @ 5/1s");
    harness.get_by_label_contains("limiter off: none");

    type_key_by_key(&mut harness, "recording file", "/nonexistent/recording.har");
    harness.get_by_label("Run replay").click();
    step_until(&mut harness, "the error", |app| matches!(app.simulator().replay.result, Some(Err(_))));
    let err = harness.state().simulator().replay.result.as_ref().unwrap().as_ref().unwrap_err();
    assert!(err.contains("/nonexistent/recording.har"), "{err}");
}

/// Limits A of the simulator are the selected host's limits, as they are now.
#[test]
fn simulator_limits_a_follow_the_current_profile() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    type_key_by_key(&mut harness, "refill rate", "7/1s");
    harness.get_by_label("Simulator").click();
    harness.run_steps(2);
    let shown = field(&harness, "limits A").value().unwrap_or_default();
    assert!(shown.contains("@ 7/1s"), "limits A show the profile's edited bucket: {shown:?}");
    let expected = harness.state().editor().selected_host().unwrap().limiter_config().unwrap().describe();
    assert_eq!(shown, expected);
}

/// The burst capacity moves by small steps when dragged a short way (it jumped 5 → 400 in 40 px).
#[test]
fn dragging_the_burst_moves_it_by_small_steps() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    let capacity = |app: &App| app.editor().selected_host().unwrap().budgets[0].capacity.unwrap();
    assert_eq!(capacity(harness.state()), 5);
    let start = harness.get_by_label("burst capacity").rect().center();
    harness.hover_at(start);
    harness.drag_at(start);
    harness.step();
    for step in 1..=8 {
        harness.hover_at(start + egui::vec2(5.0 * step as f32, 0.0));
        harness.step();
    }
    harness.drop_at(start + egui::vec2(40.0, 0.0));
    harness.run_steps(2);
    let moved = capacity(harness.state());
    assert!((6..=15).contains(&moved), "40 px moved the burst from 5 to {moved}");
}

/// At 1024×700 and 800×600 nothing overlaps: Fire stays on the first row, the profile
/// buttons stay apart from the status, the request log keeps its status column and its
/// heading on one line, and opening every section of the hosts panel never widens it.
#[test]
fn small_windows_keep_everything_apart() {
    for (width, height) in [(1024.0, 700.0), (800.0, 600.0)] {
        let dir = tempfile::tempdir().unwrap();
        let mut harness = harness_sized(app(dir.path()), egui::vec2(width, height));
        ready(&mut harness);
        harness.run_steps(2);
        let hosts_panel = |harness: &Harness<'_, App>| harness.get_by_label("Hosts").rect().left();
        let fire = harness.get_by_label("Fire").rect();
        let panel_right = field(&harness, "base URL").rect().right();
        let widths: Vec<f32> = ["Retry", "Headers", "Secrets"]
            .into_iter()
            .map(|section| {
                harness.get_by_label(section).click_accesskit();
                harness.run_steps(2);
                field(&harness, "base URL").rect().right()
            })
            .collect();
        assert!(widths.iter().all(|right| (right - panel_right).abs() < 1.0), "{width}: the panel grew: {widths:?}");
        assert!(panel_right <= width * 0.45, "{width}: the hosts panel is capped: {panel_right}");
        assert_eq!(harness.get_by_label("Fire").rect(), fire, "{width}: Fire did not move");
        assert!(fire.left() >= panel_right - 1.0 && fire.right() <= width, "{width}: Fire {fire:?}");
        let import = harness.get_by_label("Import…").rect();
        assert!(import.right() <= width, "{width}: Import… ends at {}", import.right());
        let help = harness.get_by_label("help").rect();
        assert!(
            !help.intersects(import) && help.right() <= width,
            "{width}: help {help:?} lies over Import… {import:?}"
        );
        if let Some(status) = harness.query_by_label_contains("demo API running at") {
            assert!(status.rect().top() >= fire.bottom(), "{width}: the status is not at the window's foot");
        }
        type_key_by_key(&mut harness, "request count", "3");
        harness.get_by_label("Fire").click();
        step_until(&mut harness, "the burst", |app| matches!(app.run(), RunStatus::Done { .. }));
        harness.run_steps(2);
        let log = harness.get_by_label("Request log").rect();
        let line = harness.get_by_label("Fire").rect().height() * 1.5;
        assert!(log.height() <= line, "{width}: 'Request log' wraps: {log:?}");
        let status_column = harness.get_by_label("status").rect();
        let server = harness.get_by_label("What the server says").rect();
        assert!(status_column.right() <= server.left(), "{width}: the log's status column is cut: {status_column:?}");
        assert!(server.right() <= width + 1.0, "{width}: the server panel is inside the window");
        let _ = hosts_panel(&harness);
    }
}

/// The hosts panel folds away with the « button, giving the charts its room.
#[test]
fn the_hosts_panel_collapses() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_sized(app(dir.path()), egui::vec2(1024.0, 700.0));
    ready(&mut harness);
    let before = harness.get_by_label("Fire").rect().left();
    harness.get_by_label("hosts panel").click();
    harness.run();
    assert!(harness.query_by_label("Hosts").is_none(), "the panel is folded");
    assert!(harness.get_by_label("Fire").rect().left() < before - 100.0, "the composer took its room");
}

/// An error about saving goes once the profile is fixed and saved.
#[test]
fn a_save_error_goes_once_the_profile_is_saved() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    type_key_by_key(&mut harness, "base URL", "ftp://x");
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    harness.run_steps(2);
    let error = |app: &App| app.toasts().texts().iter().any(|text| text.starts_with("not saved"));
    assert!(error(harness.state()), "the refusal is shown: {:?}", harness.state().toasts().texts());
    type_key_by_key(&mut harness, "base URL", "http://127.0.0.1:8787");
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    step_until(&mut harness, "the save", |app| app.toasts().texts().iter().any(|text| text.starts_with("saved")));
    assert!(!error(harness.state()), "the error went with the save: {:?}", harness.state().toasts().texts());
}

/// F1 (or ?) opens the list of shortcuts; Esc closes it.
#[test]
fn f1_shows_the_shortcuts() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    harness.key_press(egui::Key::F1);
    harness.run_steps(2);
    harness.get_by_label("Keyboard shortcuts");
    harness.get_by_label("Ctrl+Enter");
    harness.get_by_label("fire the composed burst");
    harness.key_press(egui::Key::Escape);
    harness.run_steps(2);
    assert!(harness.query_by_label("Keyboard shortcuts").is_none());
    assert!(harness.query_by_label_contains("theme: ").is_some(), "the theme button is there");
}

/// Two runs end up in the history with their outcome; the first can be drawn under the
/// second; the summary exports to a typed path (no file dialog needed), and the app says where.
#[test]
fn two_runs_are_compared_and_the_summary_is_saved_to_a_typed_path() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    type_key_by_key(&mut harness, "request count", "8");
    limiter_checkbox(&harness).click();
    harness.run_steps(2);
    assert!(!harness.state().composer().limiter_on, "the limiter is off for the first run");
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the first burst", |app| app.history().runs.len() == 1);
    limiter_checkbox(&harness).click();
    harness.run_steps(2);
    assert!(harness.state().composer().limiter_on);
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the second burst", |app| app.history().runs.len() == 2);
    harness.run_steps(2);
    let first = &harness.state().history().runs[0];
    assert!(first.settings.contains("limiter off") && first.settings.contains("×8"), "{}", first.settings);
    harness.get_by_label("#1");
    harness.get_by_label("#2");
    harness.get_by_label("compare #1").click_accesskit();
    harness.run_steps(2);
    assert!(
        harness.query_all_by_label_contains(ratescope::gui::charts::PREVIOUS_PREFIX).count() > 0,
        "the first run is drawn under the second"
    );

    let server = harness.get_by_label("What the server says").rect();
    let summary = harness.get_by_label("Summary").rect();
    assert!(server.top() < summary.top(), "what the server says stays on top after a run");
    harness.get_by_label("Export JSON…").click_accesskit();
    harness.run_steps(2);
    let target = dir.path().join("summary.json");
    type_key_by_key(&mut harness, "save to path", &target.display().to_string());
    step_until(&mut harness, "the file", |_| target.exists());
    step_until(&mut harness, "the message", |app| {
        app.toasts().texts().iter().any(|text| text.contains("summary.json"))
    });
    let written: serde_json::Value = serde_json::from_slice(&std::fs::read(&target).unwrap()).unwrap();
    assert_eq!(written["requests"], 8);
}

/// "Charts PNG…" before any data says why nothing is saved, instead of doing nothing.
#[test]
fn charts_png_without_charts_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    harness.get_by_label("Charts PNG…").click();
    harness.run_steps(2);
    assert!(
        harness.state().toasts().texts().iter().any(|text| text.contains("no charts to save yet")),
        "{:?}",
        harness.state().toasts().texts()
    );
}

/// Export… opens the Save as window with a path to type (no desktop portal needed), and the
/// app says where the file went.
#[test]
fn export_writes_the_profile_to_a_typed_path_and_says_where() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    harness.get_by_label("Export…").click();
    step_until(&mut harness, "the profile's text", |app| app.save_as().is_some());
    harness.run_steps(2);
    harness.get_by_label("Save the profile 'demo' (no secret values) to:");
    let target = dir.path().join("exported.toml");
    type_key_by_key(&mut harness, "save to path", &target.display().to_string());
    step_until(&mut harness, "the message", |app| {
        app.toasts().texts().iter().any(|text| text.contains("exported.toml"))
    });
    let exported = std::fs::read_to_string(&target).unwrap();
    // The profile as edited (the demo host points at the port the demo API took), with every
    // comment of its saved file.
    let comments: Vec<String> =
        demo_file(dir.path()).lines().filter(|line| line.trim_start().starts_with('#')).map(str::to_owned).collect();
    assert!(comments.len() > 10);
    for comment in comments {
        assert!(exported.contains(&comment), "'{comment}' was lost: {exported}");
    }
    assert!(harness.state().save_as().is_none(), "the window closed");
}

/// Export for… on the profile menu: the host being edited as a Bottleneck module, offered in
/// the Save as window and written where typed.
#[test]
fn export_for_writes_the_hosts_limits_as_code_for_another_stack() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    harness.get_by_label("Export for…").click();
    harness.run_steps(2);
    harness.get_by_label("Bottleneck (Node)").click();
    harness.run_steps(2);
    assert!(harness.state().save_as().is_some(), "{:?}", harness.state().toasts().texts());
    harness.get_by_label_contains("as Bottleneck (Node) to:");
    let target = dir.path().join("limits.js");
    type_key_by_key(&mut harness, "save to path", &target.display().to_string());
    step_until(&mut harness, "the message", |app| app.toasts().texts().iter().any(|text| text.contains("limits.js")));
    let exported = std::fs::read_to_string(&target).unwrap();
    assert!(exported.contains("require('bottleneck')") || exported.contains("require(\"bottleneck\")"), "{exported}");
    assert!(exported.contains("module.exports"), "{exported}");
    assert!(exported.contains("demo API"), "names the host: {exported}");
}

/// A button of the quit prompt (the composer has a Cancel too, disabled while nothing runs).
fn quit_prompt_button<'h>(harness: &'h Harness<'_, App>, label: &'h str) -> egui_kittest::Node<'h> {
    let by = egui_kittest::kittest::By::new().label(label).predicate(|node| !node.is_disabled());
    harness.get(by)
}

/// Presses the window's close button for one frame; returns what the app told the window.
fn press_close(harness: &mut Harness<'_, App>) -> Vec<egui::ViewportCommand> {
    let root = harness.input_mut().viewports.entry(egui::ViewportId::ROOT).or_default();
    root.events.push(egui::ViewportEvent::Close);
    harness.step();
    window_commands(harness)
}

fn window_commands(harness: &Harness<'_, App>) -> Vec<egui::ViewportCommand> {
    harness.output().viewport_output.get(&egui::ViewportId::ROOT).map(|out| out.commands.clone()).unwrap_or_default()
}

/// Steps frames until the app tells the window to close (at most a short while).
fn step_until_closed(harness: &mut Harness<'_, App>) {
    let deadline = Instant::now() + Duration::from_secs(20);
    while !window_commands(harness).contains(&egui::ViewportCommand::Close) {
        assert!(Instant::now() < deadline, "the window was never closed: {:?}", harness.state().quit());
        harness.step();
        await_news();
    }
}

fn demo_file(dir: &Path) -> String {
    std::fs::read_to_string(dir.join("profiles/demo.toml")).unwrap()
}

#[test]
fn a_clean_app_closes_at_once() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let commands = press_close(&mut harness);
    assert!(!commands.contains(&egui::ViewportCommand::CancelClose), "{commands:?}");
    assert!(harness.query_by_label(QUIT_TITLE).is_none());
}

/// The data loss of the first review: an edited burst, the window closed, the file unchanged.
/// Now the close is held and a prompt asks; Cancel keeps everything, Save and quit writes the
/// file and closes once the write is confirmed.
#[test]
fn quitting_with_unsaved_changes_asks_and_saves_on_request() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    type_key_by_key(&mut harness, "refill rate", "7/1s");
    let commands = press_close(&mut harness);
    assert!(commands.contains(&egui::ViewportCommand::CancelClose), "the close is held: {commands:?}");
    assert_eq!(harness.state().quit(), &Quit::Asking { unsaved: vec!["demo".into()] });
    harness.run_steps(2);
    harness.get_by_label_contains("The profile 'demo' has changes that are not saved");

    quit_prompt_button(&harness, "Cancel").click();
    harness.run_steps(2);
    assert_eq!(harness.state().quit(), &Quit::Staying);
    assert!(harness.query_by_label(QUIT_TITLE).is_none(), "the prompt went");
    assert!(!demo_file(dir.path()).contains("7/1s"));
    assert!(harness.state().editor().profiles[harness.state().editor().current].is_dirty(), "the edit is kept");

    assert!(press_close(&mut harness).contains(&egui::ViewportCommand::CancelClose));
    harness.run_steps(2);
    harness.get_by_label("Save and quit").click();
    step_until_closed(&mut harness);
    assert!(demo_file(dir.path()).contains("7/1s"), "saved before closing");
    assert_eq!(harness.state().quit(), &Quit::Leaving);
}

#[test]
fn quit_without_saving_closes_and_leaves_the_file_alone() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let before = demo_file(dir.path());
    type_key_by_key(&mut harness, "refill rate", "7/1s");
    press_close(&mut harness);
    harness.run_steps(2);
    harness.get_by_label("Quit without saving").click();
    harness.step();
    assert!(window_commands(&harness).contains(&egui::ViewportCommand::Close));
    assert_eq!(demo_file(dir.path()), before);
}

/// A profile that cannot be saved (invalid, or the disk refuses) keeps the window open and says why.
#[test]
fn a_save_that_fails_while_quitting_keeps_the_window_open() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    type_key_by_key(&mut harness, "base URL", "ftp://x");
    press_close(&mut harness);
    harness.run_steps(2);
    harness.get_by_label("Save and quit").click();
    harness.run_steps(2);
    assert_eq!(harness.state().quit(), &Quit::Staying, "an invalid profile stops the quit");
    let texts = harness.state().toasts().texts().join(" | ");
    assert!(texts.contains("'demo' not saved") && texts.contains("quit without saving"), "{texts}");
    assert!(harness.query_by_label(QUIT_TITLE).is_none(), "the prompt went");
    harness.run_steps(3);
    type_key_by_key(&mut harness, "base URL", "http://127.0.0.1:8787");
    // The disk refuses: the profile's file is a directory now.
    let file = dir.path().join("profiles/demo.toml");
    std::fs::remove_file(&file).unwrap();
    std::fs::create_dir(&file).unwrap();
    press_close(&mut harness);
    harness.run_steps(2);
    harness.get_by_label("Save and quit").click();
    step_until(&mut harness, "the failed save", |app| app.quit() == &Quit::Staying);
    assert!(!window_commands(&harness).contains(&egui::ViewportCommand::Close));
    let texts = harness.state().toasts().texts().join(" | ");
    assert!(texts.contains("the window stays open"), "{texts}");
    assert!(harness.state().editor().profiles[harness.state().editor().current].is_dirty(), "still marked unsaved");
}

/// The composer says where Fire goes: the selected host's name and base URL, and whether its
/// limits pace the burst.
#[test]
fn the_composer_names_the_host_fire_will_hit() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let DemoStatus::Running { url, .. } = harness.state().demo().clone() else { unreachable!() };
    let base = url.as_str().trim_end_matches('/');
    harness.get_by_label(&format!("{FIRE_TARGET} demo API  {base} · paced by its limits"));
    limiter_checkbox(&harness).click();
    harness.run_steps(2);
    harness.get_by_label(&format!("{FIRE_TARGET} demo API  {base} · limiter off: sent raw"));
}

/// Discover's "Create profile" under a name that is taken asks before replacing that profile;
/// "Keep the old one" leaves its file alone, "Replace it" saves the suggestion in its place.
#[test]
fn discover_asks_before_replacing_a_profile_of_the_same_name() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let before = demo_file(dir.path());
    harness.get_by_label("Discover…").click();
    harness.run_steps(2);
    harness.get_by_label("Probe").click();
    step_until(&mut harness, "the probe", |app| app.discover().report.is_some());
    type_key_by_key(&mut harness, "discovered profile name", "demo");
    harness.get_by_label("Create profile").click();
    harness.run_steps(2);
    harness.get_by_label_contains("A profile named 'demo' exists");
    harness.get_by_label("Keep the old one").click();
    harness.run_steps(2);
    assert!(harness.query_by_label_contains("A profile named 'demo' exists").is_none());
    assert_eq!(demo_file(dir.path()), before, "nothing was written");

    harness.get_by_label("Create profile").click();
    harness.run_steps(2);
    harness.get_by_label(ratescope::gui::discover::REPLACE_PROFILE_TEXT).click();
    let deadline = Instant::now() + Duration::from_secs(20);
    while demo_file(dir.path()) == before {
        assert!(Instant::now() < deadline, "the replacement was not saved");
        harness.step();
        await_news();
    }
    assert!(dir.path().join("profiles/demo.toml.bak").exists(), "the old one is kept aside");
    step_until(&mut harness, "the save's confirmation", |app| !app.editor().profiles[app.editor().current].is_dirty());
    assert!(!harness.state().discover().open);
}

/// Pastes `command` into the Import curl panel and imports it.
fn import_curl(harness: &mut Harness<'_, App>, command: &str) {
    harness.get_by_label("Import curl…").click();
    harness.run_steps(2);
    harness.get_by_label("curl command").focus();
    harness.run_steps(1);
    harness.get_by_label("curl command").type_text(command);
    harness.run_steps(1);
    harness.get_by_label("Import").click();
    harness.run_steps(2);
}

/// Secrets follow their host: an import's key reaches `secrets.toml` only when its profile is
/// saved, and a deleted host's key leaves it with the next save.
#[test]
fn secrets_are_written_with_their_profile_and_leave_with_their_host() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let secrets = || std::fs::read_to_string(dir.path().join("secrets.toml")).unwrap_or_default();
    import_curl(&mut harness, "curl https://api.example.com/v1/things -H 'X-Api-Key: sk-follow-1'");
    let texts = harness.state().toasts().texts().join(" | ");
    assert!(texts.contains("kept in the secret store"), "{texts}");
    assert!(!secrets().contains("sk-follow-1"), "not written before the profile is saved");

    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    step_until(&mut harness, "the save", |app| !app.editor().profiles[app.editor().current].is_dirty());
    assert!(secrets().contains("sk-follow-1"), "written with its profile: {}", secrets());

    // Delete the imported host (a confirmation, then the red button), and save.
    harness.get_by_label("delete").click();
    harness.run_steps(2);
    harness.get_by_label_contains("delete 'api.example.com'").click();
    harness.run_steps(2);
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    step_until(&mut harness, "the save", |app| !app.editor().profiles[app.editor().current].is_dirty());
    let hosts: Vec<String> = harness.state().editor().profile().unwrap().hosts.iter().map(|h| h.name.clone()).collect();
    assert!(!hosts.contains(&"api.example.com".to_owned()), "{hosts:?}");
    assert!(!secrets().contains("sk-follow-1"), "the deleted host's key left the file: {}", secrets());
}

/// A new host starts adaptive (no limits are known yet) and says what that means.
#[test]
fn a_new_host_follows_the_server_and_says_so() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    harness.get_by_label("+ host").click();
    harness.run_steps(2);
    let host = harness.state().editor().selected_host().unwrap().clone();
    assert!(host.adaptive && host.budgets.is_empty() && host.concurrency.is_none(), "{host:?}");
    harness.get_by_label(ratescope::gui::no_limits_text(true));
    harness.get_by_label("adaptive: follow the limits the server publishes").click();
    harness.run_steps(2);
    harness.get_by_label(ratescope::gui::no_limits_text(false));
}

/// Completes every screenshot the app asked for this frame with a window-sized image.
fn complete_screenshots(harness: &Harness<'_, App>, size: [usize; 2]) -> usize {
    let mut taken = 0;
    for command in window_commands(harness) {
        if let egui::ViewportCommand::Screenshot(callback) = command {
            let image = egui::ColorImage::new(size, vec![egui::Color32::from_rgb(200, 210, 220); size[0] * size[1]]);
            callback.complete(std::sync::Arc::new(image));
            taken += 1;
        }
    }
    taken
}

/// Charts PNG… holds every chart at the window's width, more than one window of them at
/// 1024×700, drawn page by page without the follow / zoom controls.
#[test]
fn charts_png_holds_every_chart_at_full_width() {
    let dir = tempfile::tempdir().unwrap();
    let (width, height) = (1024.0, 700.0);
    let mut harness = harness_sized(app(dir.path()), egui::vec2(width, height));
    ready(&mut harness);
    type_key_by_key(&mut harness, "request count", "8");
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the burst", |app| app.history().runs.len() == 1);
    harness.get_by_label("Charts PNG…").click();
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut pages = 0;
    while harness.state().save_as().is_none() {
        assert!(Instant::now() < deadline, "the capture never finished after {pages} pages");
        harness.step();
        pages += complete_screenshots(&harness, [width as usize, height as usize]);
    }
    assert_eq!(pages, 3, "five charts at a readable size take three pages of a 700-point window");
    harness.run_steps(2);
    let target = dir.path().join("charts.png");
    type_key_by_key(&mut harness, "save to path", &target.display().to_string());
    step_until(&mut harness, "the file", |_| target.exists());
    let decoder = png::Decoder::new(std::io::Cursor::new(std::fs::read(&target).unwrap()));
    let info = decoder.read_info().unwrap().info().clone();
    assert_eq!(info.width, width as u32, "the whole window's width");
    assert!(info.height > height as u32, "more than one window of charts: {} px", info.height);
}

/// Messages sit in the status bar, apart from every button; a change waiting for Ctrl+S says
/// so until it is saved, and not after.
#[test]
fn messages_never_cover_a_button_and_go_once_saved() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_sized(app(dir.path()), egui::vec2(1280.0, 800.0));
    ready(&mut harness);
    type_key_by_key(&mut harness, "request count", "6");
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the burst", |app| app.history().runs.len() == 1);
    harness.get_by_label("Export JSON…").click_accesskit();
    harness.run_steps(2);
    let target = dir.path().join("summary.json");
    type_key_by_key(&mut harness, "save to path", &target.display().to_string());
    step_until(&mut harness, "the message", |app| {
        app.toasts().texts().iter().any(|text| text.contains("summary.json"))
    });
    harness.run_steps(2);
    let message = harness.get_by_label_contains("summary.json").rect();
    for button in harness.get_all_by_role(egui::accesskit::Role::Button) {
        let rect = button.rect();
        let own = rect.center().y > message.top() - 2.0 && rect.center().y < message.bottom() + 2.0;
        assert!(own || !rect.intersects(message), "a message lies over a button at {rect:?}: {button:?}");
    }
    import_curl(&mut harness, "curl http://127.0.0.1:9/v1/things");
    let unsaved = |app: &App| app.toasts().texts().iter().any(|text| text.contains("Ctrl+S keeps it"));
    assert!(unsaved(harness.state()), "{:?}", harness.state().toasts().texts());
    harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::S);
    step_until(&mut harness, "the save", |app| !app.editor().profiles[app.editor().current].is_dirty());
    assert!(!unsaved(harness.state()), "the reminder went with the save: {:?}", harness.state().toasts().texts());
}

/// Discover's "Apply to this host" puts the suggestion into the host being edited, leaves the
/// file alone until saved, and Undo brings the host's limits back as they were.
#[test]
fn discover_applies_its_suggestion_to_the_host_being_edited_with_undo() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_for(dir.path());
    ready(&mut harness);
    let before = harness.state().editor().selected_host().unwrap().clone();
    let file_before = demo_file(dir.path());
    harness.get_by_label("Discover…").click();
    harness.run_steps(2);
    harness.get_by_label("Probe").click();
    step_until(&mut harness, "the probe", |app| app.discover().report.is_some());
    let suggested = harness.state().discover().report.clone().unwrap().unwrap().limiter_config().unwrap();
    harness.get_by_label(ratescope::gui::discover::APPLY_TO_HOST_TEXT).click();
    harness.run_steps(2);
    let applied = harness.state().editor().selected_host().unwrap().clone();
    assert_eq!(applied.limiter_config().unwrap().describe(), suggested.describe(), "{applied:?}");
    assert_eq!(applied.name, before.name, "the same host, not a new one");
    assert!(!harness.state().discover().open, "the window gives way to the host's editor");
    assert_eq!(demo_file(dir.path()), file_before, "nothing written before Ctrl+S");
    harness.get_by_label("Undo").click();
    harness.run_steps(2);
    assert_eq!(harness.state().editor().selected_host().unwrap(), &before, "Undo restores the host");
    assert!(!harness.state().editor().profiles[harness.state().editor().current].is_dirty());
}

/// How many charts' titles show above the lower panel (or its folded line), and how tall the
/// charts' area is.
fn charts_shown(harness: &Harness<'_, App>) -> (usize, f32) {
    let bottom = harness.get_by_label(ratescope::gui::LOWER_PANEL).rect().top();
    let top = harness.get_by_label("Tokens").rect().top();
    let titles = ["Tokens", "Queue", "Outcomes / s", "Retries / s", "Latency (ms)"];
    let shown = titles.iter().filter(|title| harness.get_by_label(title).rect().bottom() <= bottom).count();
    (shown, bottom - top)
}

/// At 1024×700 the lower panel folds to one line and the charts take its room; unfolded, it
/// comes back as it was.
#[test]
fn folding_the_lower_panel_gives_the_charts_its_room() {
    let dir = tempfile::tempdir().unwrap();
    let mut harness = harness_sized(app(dir.path()), egui::vec2(1024.0, 700.0));
    ready(&mut harness);
    type_key_by_key(&mut harness, "request count", "4");
    harness.get_by_label("Fire").click();
    step_until(&mut harness, "the burst", |app| app.history().runs.len() == 1);
    harness.run_steps(2);
    let (shown, height) = charts_shown(&harness);
    harness.get_by_label(ratescope::gui::LOWER_PANEL).click();
    harness.run_steps(3);
    assert!(harness.query_by_label("What the server says").is_none(), "folded away");
    let (folded_shown, folded_height) = charts_shown(&harness);
    assert!(folded_height > height + 150.0, "the charts' area grew from {height} to {folded_height}");
    assert!(folded_shown > shown, "{folded_shown} charts show folded, {shown} before");
    harness.get_by_label_contains("Request log (").rect();
    harness.get_by_label(ratescope::gui::LOWER_PANEL).click();
    harness.run_steps(3);
    harness.get_by_label("What the server says");
    assert_eq!(charts_shown(&harness), (shown, height), "unfolded as it was");
}

/// A saved profile whose host has no retry policy, no headers and no per-path limits: every
/// section of the editor shows defaults for it.
const PLAIN_PROFILE: &str = r#"name = "plain"

[[hosts]]
name = "plain API"
base_url = "http://127.0.0.1:9"
budgets = [{ name = "rate", kind = "token_bucket", capacity = 3, rate = "3/1s" }]
secret_headers = ["authorization"]
"#;

/// Issue #33 item 5: drawing never writes the model. Opening every section of the editor
/// (per-path limits, retry, headers, secrets, a budget's kind) leaves a saved profile saved;
/// opening Retry used to give a host without a policy one, and with it the unsaved marker.
#[test]
fn opening_every_section_of_the_editor_leaves_a_saved_profile_saved() {
    for profile in ["demo", "plain"] {
        let dir = tempfile::tempdir().unwrap();
        std::fs::create_dir_all(dir.path().join("profiles")).unwrap();
        std::fs::write(dir.path().join("profiles/plain.toml"), PLAIN_PROFILE).unwrap();
        let mut harness = harness(app(dir.path()));
        ready(&mut harness);
        if profile != "demo" {
            choose(&mut harness, "profile", profile);
        }
        assert_eq!(harness.state().editor().profile().map(|p| p.name.as_str()), Some(profile));
        // Open already when the profile shown first (the demo) has per-path limits.
        if harness.query_all_by_label("+ path prefix").next().is_none() {
            harness.get_by_label("Per-path limits").click_accesskit();
            harness.run_steps(2);
        }
        for section in ["Retry", "Headers", "Secrets"] {
            harness.get_by_label(section).click_accesskit();
            harness.run_steps(2);
        }
        field(&harness, "budget kind").click();
        harness.run_steps(2);
        harness.key_press(egui::Key::Escape);
        harness.run_steps(3);
        for shown in ["+ path prefix", "attempts", "add secret header"] {
            field(&harness, shown);
        }
        let editor = harness.state().editor();
        assert!(editor.unsaved().is_empty(), "{profile}: {:?}", editor.unsaved());
        assert!(editor.selected_host().is_some_and(|host| profile == "demo" || host.retry.is_none()), "{profile}");
        assert!(harness.query_all_by_label_contains(" •").next().is_none(), "{profile}: no unsaved marker");
    }
}

/// Issue #33 item 6: Load body asks the backend for the file and the UI keeps drawing; the
/// text arrives as the body, and a file that is gone is named in the error under it.
#[test]
fn load_body_reads_the_file_in_the_background_and_names_a_missing_one() {
    let dir = tempfile::tempdir().unwrap();
    let file = dir.path().join("payload.json");
    std::fs::write(&file, r#"{"n": 1}"#).unwrap();
    let mut harness = harness(app(dir.path()));
    ready(&mut harness);
    harness.get_by_label("request of /items").click();
    harness.run_steps(2);
    type_key_by_key(&mut harness, "body file", &file.display().to_string());
    let body = |app: &App| app.composer().endpoints[0].request.body.clone();
    harness.get_by_label("Load body").click();
    step_until(&mut harness, "the body", |app| body(app) == r#"{"n": 1}"#);
    assert!(harness.query_by_label_contains("reading ").is_none(), "the read is over");

    std::fs::remove_file(&file).unwrap();
    harness.get_by_label("Load body").click();
    harness.step();
    step_until(
        &mut harness,
        "the error",
        |app| !matches!(app.composer().endpoints[0].request.parts(), Err(err) if err.starts_with("the body is still being read")),
    );
    harness.run_steps(2);
    harness.get_by_label_contains("cannot read");
    harness.get_by_label_contains("payload.json: ");
    assert_eq!(body(harness.state()), r#"{"n": 1}"#, "a failed load keeps the body");
}
