//! The selected host's fields (limits, per-path limits, retry, headers, secrets) as widgets
//! that only read the host and return the edits asked for; [`HostEdit::apply`] makes them
//! after the frame's UI pass, so drawing (opening a section, say) never changes a profile.

use std::collections::BTreeMap;

use egui::RichText;
use url::Url;

use super::draft;
use crate::engine::{Rate, parse_duration};
use crate::profile::{BudgetEntry, BudgetEntryKind, HostProfile, PathOverride, RetryEntry, SecretStatus, SecretStore};

/// Where a list of budgets or a concurrency cap lives.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Scope {
    /// The host's own.
    Host,
    /// The path override at this index.
    Path(usize),
}

/// One change to the selected host (or to its secrets) asked for by a widget this frame.
#[derive(Debug, Clone, PartialEq)]
pub enum HostEdit {
    /// The host's name.
    Name(String),
    /// The host's base URL, as typed.
    BaseUrl(String),
    /// Follow the limits the server publishes, or not.
    Adaptive(bool),
    /// The most requests in flight (`None`: no cap).
    Concurrency(Scope, Option<usize>),
    /// The budget at this index, as it now reads.
    Budget(Scope, usize, BudgetEntry),
    /// A new budget at the end.
    AddBudget(Scope, BudgetEntry),
    /// The budget at this index goes.
    RemoveBudget(Scope, usize),
    /// The path override at this index gets this prefix.
    PathPrefix(usize, String),
    /// A new path override.
    AddPath,
    /// The path override at this index goes.
    RemovePath(usize),
    /// The retry policy as it now reads (a host without one gets it with its first change).
    Retry(RetryEntry),
    /// A plain header (lowercase name) and its value, new or changed.
    Header(String, String),
    /// The plain header of this name goes.
    RemoveHeader(String),
    /// A new secret header (lowercase name); its value is set apart.
    AddSecretHeader(String),
    /// The secret header of this name goes, and its stored value with it.
    RemoveSecretHeader(String),
    /// A new value (or `${VAR}`) for the secret header of this name, for the secret store.
    SetSecret(String, String),
}

impl HostEdit {
    /// Whether it changes limits a running burst should feel at once.
    pub fn touches_limits(&self) -> bool {
        matches!(
            self,
            Self::BaseUrl(_)
                | Self::Concurrency(..)
                | Self::Budget(..)
                | Self::AddBudget(..)
                | Self::RemoveBudget(..)
                | Self::PathPrefix(..)
                | Self::AddPath
                | Self::RemovePath(_)
        )
    }

    /// Makes the change in `host`, and in `secrets` (filed under `profile` and the host's
    /// name) for a secret's value. An index that no longer exists changes nothing.
    pub fn apply(self, host: &mut HostProfile, secrets: &mut SecretStore, profile: &str) {
        match self {
            Self::Name(name) => host.name = name,
            Self::BaseUrl(url) => host.base_url = url,
            Self::Adaptive(on) => host.adaptive = on,
            Self::Concurrency(scope, cap) => {
                if let Some(slot) = concurrency_mut(host, scope) {
                    *slot = cap;
                }
            }
            Self::Budget(scope, index, budget) => {
                if let Some(slot) = budgets_mut(host, scope).and_then(|budgets| budgets.get_mut(index)) {
                    *slot = budget;
                }
            }
            Self::AddBudget(scope, budget) => {
                if let Some(budgets) = budgets_mut(host, scope) {
                    budgets.push(budget);
                }
            }
            Self::RemoveBudget(scope, index) => {
                if let Some(budgets) = budgets_mut(host, scope).filter(|budgets| index < budgets.len()) {
                    budgets.remove(index);
                }
            }
            Self::PathPrefix(index, prefix) => {
                if let Some(path) = host.paths.get_mut(index) {
                    path.prefix = prefix;
                }
            }
            Self::AddPath => {
                host.paths.push(PathOverride { prefix: "/search".into(), concurrency: None, budgets: Vec::new() })
            }
            Self::RemovePath(index) => {
                if index < host.paths.len() {
                    host.paths.remove(index);
                }
            }
            Self::Retry(entry) => host.retry = Some(entry),
            Self::Header(name, value) => {
                host.headers.insert(name, value);
            }
            Self::RemoveHeader(name) => {
                host.headers.remove(&name);
            }
            Self::AddSecretHeader(name) => {
                if !host.secret_headers.contains(&name) {
                    host.secret_headers.push(name);
                }
            }
            Self::RemoveSecretHeader(name) => {
                host.secret_headers.retain(|existing| *existing != name);
                secrets.remove(profile, &host.name, &name);
            }
            Self::SetSecret(name, value) => secrets.set(profile, &host.name, &name, value),
        }
    }
}

fn budgets_mut(host: &mut HostProfile, scope: Scope) -> Option<&mut Vec<BudgetEntry>> {
    match scope {
        Scope::Host => Some(&mut host.budgets),
        Scope::Path(index) => host.paths.get_mut(index).map(|path| &mut path.budgets),
    }
}

fn concurrency_mut(host: &mut HostProfile, scope: Scope) -> Option<&mut Option<usize>> {
    match scope {
        Scope::Host => Some(&mut host.concurrency),
        Scope::Path(index) => host.paths.get_mut(index).map(|path| &mut path.concurrency),
    }
}

/// What is being typed in the Headers and Secrets sections and not yet asked for: a new
/// header's name and value, new secret values per header, a new secret header's name.
#[derive(Debug, Default)]
pub struct HostDrafts {
    new_header: (String, String),
    secret_values: BTreeMap<String, String>,
    new_secret_name: String,
}

/// Everything of one host below its name: limits, per-path limits, retry, headers and
/// secrets (their state read from `secrets` under `profile`). Returns the edits asked for.
pub fn host_ui(
    ui: &mut egui::Ui,
    host: &HostProfile,
    profile: &str,
    secrets: &SecretStore,
    drafts: &mut HostDrafts,
) -> Vec<HostEdit> {
    let mut edits = host_limits_ui(ui, host);
    egui::CollapsingHeader::new("Per-path limits")
        .default_open(!host.paths.is_empty())
        .show(ui, |ui| edits.extend(paths_ui(ui, &host.paths)));
    egui::CollapsingHeader::new("Retry")
        .show(ui, |ui| edits.extend(retry_ui(ui, host.retry.as_ref()).map(HostEdit::Retry)));
    egui::CollapsingHeader::new("Headers").show(ui, |ui| edits.extend(headers_ui(ui, &host.headers, drafts)));
    egui::CollapsingHeader::new("Secrets").show(ui, |ui| edits.extend(secrets_ui(ui, host, profile, secrets, drafts)));
    edits
}

fn error_label(ui: &mut egui::Ui, error: Option<String>) {
    if let Some(error) = error {
        ui.label(RichText::new(error).color(super::palette::status_colors(ui.visuals()).error).small());
    }
}

fn rate_error(text: &str) -> Option<String> {
    text.parse::<Rate>().err().map(|err| err.to_string())
}

fn duration_error(text: &str) -> Option<String> {
    match parse_duration(text) {
        Ok(duration) if duration.is_zero() => Some("must be longer than zero".into()),
        Ok(_) => None,
        Err(err) => Some(err.to_string()),
    }
}

fn base_url_error(text: &str) -> Option<String> {
    match Url::parse(text.trim()) {
        Ok(url) if !matches!(url.scheme(), "http" | "https") => Some("use http:// or https://".into()),
        Ok(url) if url.host_str().is_none() => Some("a base URL needs a host".into()),
        Ok(_) => None,
        Err(err) => Some(format!("not a URL: {err}")),
    }
}

/// A `limit/window` pair such as `100/1m`.
fn parse_window(text: &str) -> Result<(u64, String), String> {
    let (limit, window) = text.split_once('/').ok_or("write it as LIMIT/WINDOW, e.g. 1000/1h")?;
    let limit: u64 = limit.trim().parse().map_err(|_| format!("'{}' is not a whole number", limit.trim()))?;
    if limit == 0 {
        return Err("a limit of 0 lets nothing through".into());
    }
    if let Some(error) = duration_error(window) {
        return Err(error);
    }
    Ok((limit, window.trim().to_owned()))
}

/// A single-line text field over a copy of `value`; returns the new text when it was edited.
fn text_field_ui(ui: &mut egui::Ui, value: &str, name: &str, width: Option<f32>) -> Option<String> {
    let mut text = value.to_owned();
    let mut field = egui::TextEdit::singleline(&mut text);
    if let Some(width) = width {
        field = field.desired_width(width);
    }
    ui.add(field).accessible_name(name).changed().then_some(text)
}

/// The host's name, base URL, budgets, concurrency cap and adaptive switch.
fn host_limits_ui(ui: &mut egui::Ui, host: &HostProfile) -> Vec<HostEdit> {
    let mut edits = Vec::new();
    ui.heading(format!("Limits · {}", host.name));
    ui.horizontal(|ui| {
        ui.label("name");
        edits.extend(text_field_ui(ui, &host.name, "host name", None).map(HostEdit::Name));
    });
    ui.horizontal(|ui| {
        ui.label("base URL");
        edits.extend(text_field_ui(ui, &host.base_url, "base URL", None).map(HostEdit::BaseUrl));
    });
    error_label(ui, base_url_error(&host.base_url));
    ui.add_space(4.0);
    edits.extend(budgets_ui(ui, &host.budgets, Scope::Host));
    edits.extend(concurrency_ui(ui, host.concurrency).map(|cap| HostEdit::Concurrency(Scope::Host, cap)));
    let mut adaptive = host.adaptive;
    let switch = ui.checkbox(&mut adaptive, "adaptive: follow the limits the server publishes").on_hover_text(
        "Server budgets tighten these limits, never loosen them; an exhausted budget pauses the host until it resets.",
    );
    if switch.changed() {
        edits.push(HostEdit::Adaptive(adaptive));
    }
    if host.budgets.is_empty() && host.concurrency.is_none() {
        ui.weak(super::editor::no_limits_text(host.adaptive));
    }
    edits
}

/// The budgets of a host or path override, each with its remove button, and the add buttons.
fn budgets_ui(ui: &mut egui::Ui, budgets: &[BudgetEntry], scope: Scope) -> Vec<HostEdit> {
    let mut edits = Vec::new();
    let salt = match scope {
        Scope::Host => "host",
        Scope::Path(_) => "path",
    };
    for (index, budget) in budgets.iter().enumerate() {
        ui.push_id((salt, index), |ui| {
            let (header, remove) = budget_header_ui(ui, budget);
            let body = match budget.kind {
                BudgetEntryKind::TokenBucket => token_bucket_ui(ui, budget),
                BudgetEntryKind::SlidingWindow => sliding_window_ui(ui, budget),
            };
            edits.extend(header.or(body).map(|budget| HostEdit::Budget(scope, index, budget)));
            if remove {
                edits.push(HostEdit::RemoveBudget(scope, index));
            }
            ui.add_space(4.0);
        });
    }
    edits.extend(add_budget_ui(ui, budgets).map(|budget| HostEdit::AddBudget(scope, budget)));
    edits
}

/// A new budget of `kind` with the numbers a person starts from.
fn fresh_budget(kind: BudgetEntryKind, name: String) -> BudgetEntry {
    match kind {
        BudgetEntryKind::TokenBucket => BudgetEntry::token_bucket(name, 10, "10/1s"),
        BudgetEntryKind::SlidingWindow => BudgetEntry::sliding_window(name, 1000, "1h"),
    }
}

/// `budget` as a budget of `kind`: that kind's starting numbers in place of the other kind's
/// fields (which it would refuse), its name, cost and unit kept.
fn with_kind(budget: &BudgetEntry, kind: BudgetEntryKind) -> BudgetEntry {
    if budget.kind == kind {
        return budget.clone();
    }
    BudgetEntry { cost: budget.cost, unit: budget.unit.clone(), ..fresh_budget(kind, budget.name.clone()) }
}

/// A budget's name, kind and remove button: the budget as edited, if it was, and whether it
/// is to go.
fn budget_header_ui(ui: &mut egui::Ui, budget: &BudgetEntry) -> (Option<BudgetEntry>, bool) {
    let mut edited = None;
    let mut remove = false;
    ui.horizontal(|ui| {
        if let Some(name) = text_field_ui(ui, &budget.name, "budget name", Some(70.0)) {
            edited = Some(BudgetEntry { name, ..budget.clone() });
        }
        let mut kind = budget.kind;
        let menu = egui::ComboBox::from_id_salt("kind")
            .width(110.0)
            .selected_text(match kind {
                BudgetEntryKind::TokenBucket => "token bucket",
                BudgetEntryKind::SlidingWindow => "sliding window",
            })
            .show_ui(ui, |ui| {
                ui.selectable_value(&mut kind, BudgetEntryKind::TokenBucket, "token bucket");
                ui.selectable_value(&mut kind, BudgetEntryKind::SlidingWindow, "sliding window");
            });
        let _ = menu.response.accessible_name("budget kind");
        if kind != budget.kind {
            edited = Some(with_kind(budget, kind));
        }
        remove = ui
            .small_button("x")
            .on_hover_text("remove this budget")
            .accessible_name(format!("remove budget {}", budget.name))
            .clicked();
    });
    (edited, remove)
}

/// A token bucket's burst and refill rate: the budget as edited, if it was. A value the
/// budget lacks shows its default and reaches the budget with the first edit.
fn token_bucket_ui(ui: &mut egui::Ui, budget: &BudgetEntry) -> Option<BudgetEntry> {
    let mut edited = None;
    let mut capacity = budget.capacity.unwrap_or(1);
    ui.horizontal(|ui| {
        ui.label("burst");
        // A drag value whose step grows with the value: a few points move 5 to 6 or 7, not to
        // 400 as a logarithmic slider over 1–10,000 did; a double-click types a number.
        let speed = (capacity as f64 * 0.02).max(0.05);
        if ui
            .add(egui::DragValue::new(&mut capacity).range(1..=1_000_000).speed(speed))
            .accessible_name("burst capacity")
            .on_hover_text("capacity: how many go through at once (drag, or double-click to type)")
            .changed()
        {
            edited = Some(BudgetEntry { capacity: Some(capacity), ..budget.clone() });
        }
    });
    let mut rate = budget.rate.clone().unwrap_or_default();
    ui.horizontal(|ui| {
        ui.label("refill");
        if ui
            .add(egui::TextEdit::singleline(&mut rate).desired_width(90.0).hint_text("10/1s"))
            .accessible_name("refill rate")
            .on_hover_text("AMOUNT/DURATION: 10/1s, 600/1m, 2.5/1s")
            .changed()
        {
            edited = Some(BudgetEntry { capacity: Some(capacity), rate: Some(rate.clone()), ..budget.clone() });
        }
        if let Ok(parsed) = rate.parse::<Rate>() {
            ui.weak(format!("{:.2}/s", parsed.per_second()));
        }
    });
    error_label(ui, rate_error(&rate));
    edited
}

/// A sliding window's limit and length: the budget as edited, if it was. A value the budget
/// lacks shows its default and reaches the budget with the first edit.
fn sliding_window_ui(ui: &mut egui::Ui, budget: &BudgetEntry) -> Option<BudgetEntry> {
    let mut edited = None;
    let mut limit = budget.limit.unwrap_or(1);
    let window = || budget.window.clone().unwrap_or_else(|| "1m".to_owned());
    ui.horizontal(|ui| {
        ui.label("limit");
        let slider =
            ui.add(egui::Slider::new(&mut limit, 1..=1_000_000).logarithmic(true)).accessible_name("window limit");
        if slider.changed() {
            edited = Some(BudgetEntry { limit: Some(limit), window: Some(window()), ..budget.clone() });
        }
    });
    let model = || format!("{}/{}", limit, window());
    let (typed, error) = ui
        .horizontal(|ui| {
            ui.label("per").on_hover_text("LIMIT/WINDOW: 100/1m, 1000/1h, 10000/1d");
            draft::parsed_text_ui(ui, "window, as limit/length", 90.0, model, parse_window)
        })
        .inner;
    if let Some((limit, window)) = typed {
        edited = Some(BudgetEntry { limit: Some(limit), window: Some(window), ..budget.clone() });
    }
    error_label(ui, error);
    edited
}

/// The buttons that add a budget: the budget added, if one was.
fn add_budget_ui(ui: &mut egui::Ui, budgets: &[BudgetEntry]) -> Option<BudgetEntry> {
    let fresh_name = |prefix: &str| {
        (1..).map(|i| format!("{prefix}{i}")).find(|name| budgets.iter().all(|b| &b.name != name)).unwrap_or_default()
    };
    ui.horizontal(|ui| {
        let mut added = None;
        if ui.button("+ token bucket").clicked() {
            added = Some(fresh_budget(BudgetEntryKind::TokenBucket, fresh_name("rate")));
        }
        if ui.button("+ sliding window").clicked() {
            added = Some(fresh_budget(BudgetEntryKind::SlidingWindow, fresh_name("window")));
        }
        added
    })
    .inner
}

/// The "cap in flight" switch and its slider: the new cap (`None`: no cap), if changed.
fn concurrency_ui(ui: &mut egui::Ui, concurrency: Option<usize>) -> Option<Option<usize>> {
    ui.horizontal(|ui| {
        let mut capped = concurrency.is_some();
        if ui.checkbox(&mut capped, "cap in flight").changed() {
            return Some(capped.then_some(concurrency.unwrap_or(4)));
        }
        let mut limit = concurrency?;
        ui.add(egui::Slider::new(&mut limit, 1..=1000).logarithmic(true))
            .accessible_name("most requests in flight")
            .changed()
            .then_some(Some(limit))
    })
    .inner
}

/// A duration field over `value` (showing `default` while it is unset); sets it when edited.
/// Returns whether it was.
fn optional_text_ui(ui: &mut egui::Ui, label: &str, value: &mut Option<String>, default: &str) -> bool {
    let text = value.clone().unwrap_or_else(|| default.to_owned());
    let typed = ui
        .horizontal(|ui| {
            ui.label(label);
            text_field_ui(ui, &text, label, Some(80.0))
        })
        .inner;
    error_label(ui, duration_error(typed.as_deref().unwrap_or(&text)));
    let edited = typed.is_some();
    if typed.is_some() {
        *value = typed;
    }
    edited
}

/// The retry policy (its defaults shown while the host has none): the policy as edited, if it
/// was. Only an edit gives the host a policy of its own; opening the section does not.
fn retry_ui(ui: &mut egui::Ui, retry: Option<&RetryEntry>) -> Option<RetryEntry> {
    let mut entry = retry.cloned().unwrap_or_default();
    let mut changed = false;
    let mut attempts = entry.max_attempts.unwrap_or(5);
    ui.horizontal(|ui| {
        ui.label("attempts");
        if ui
            .add(egui::Slider::new(&mut attempts, 1..=20))
            .accessible_name("attempts")
            .on_hover_text("1 = never retry")
            .changed()
        {
            entry.max_attempts = Some(attempts);
            changed = true;
        }
    });
    changed |= optional_text_ui(ui, "base", &mut entry.base, "300ms");
    changed |= optional_text_ui(ui, "cap", &mut entry.cap, "20s");
    changed |= optional_text_ui(ui, "longest Retry-After", &mut entry.max_retry_after, "5m");
    let mut jitter = entry.jitter.clone().unwrap_or_else(|| "full".to_owned());
    egui::ComboBox::from_label("jitter").selected_text(&jitter).show_ui(ui, |ui| {
        for option in ["full", "equal", "decorrelated", "none"] {
            if ui.selectable_value(&mut jitter, option.to_owned(), option).changed() {
                entry.jitter = Some(jitter.clone());
                changed = true;
            }
        }
    });
    let mut connection = entry.retry_connection_errors.unwrap_or(false);
    if ui.checkbox(&mut connection, "retry connection errors").changed() {
        entry.retry_connection_errors = Some(connection);
        changed = true;
    }
    let mut non_idempotent = entry.retry_non_idempotent.unwrap_or(false);
    if ui.checkbox(&mut non_idempotent, "retry POST/PATCH too").changed() {
        entry.retry_non_idempotent = Some(non_idempotent);
        changed = true;
    }
    changed.then_some(entry)
}

/// Limits of their own for path prefixes, each with its remove button, and the add button.
fn paths_ui(ui: &mut egui::Ui, paths: &[PathOverride]) -> Vec<HostEdit> {
    let mut edits = Vec::new();
    for (index, path) in paths.iter().enumerate() {
        ui.push_id(("path", index), |ui| {
            ui.horizontal(|ui| {
                ui.label("prefix");
                let prefix = text_field_ui(ui, &path.prefix, "path prefix", Some(120.0));
                edits.extend(prefix.map(|prefix| HostEdit::PathPrefix(index, prefix)));
                if ui.small_button("x").accessible_name(format!("remove path {}", path.prefix)).clicked() {
                    edits.push(HostEdit::RemovePath(index));
                }
            });
            if !path.prefix.starts_with('/') {
                error_label(ui, Some("a prefix starts with /".into()));
            }
            edits.extend(budgets_ui(ui, &path.budgets, Scope::Path(index)));
            let cap = concurrency_ui(ui, path.concurrency);
            edits.extend(cap.map(|cap| HostEdit::Concurrency(Scope::Path(index), cap)));
            ui.separator();
        });
    }
    if ui.button("+ path prefix").clicked() {
        edits.push(HostEdit::AddPath);
    }
    edits
}

/// Plain headers sent with every request to the host; a new one is added by name and value.
fn headers_ui(ui: &mut egui::Ui, headers: &BTreeMap<String, String>, drafts: &mut HostDrafts) -> Vec<HostEdit> {
    let mut edits = Vec::new();
    for (name, value) in headers {
        ui.horizontal(|ui| {
            ui.monospace(name.as_str());
            let typed = text_field_ui(ui, value, &format!("value of {name}"), None);
            edits.extend(typed.map(|value| HostEdit::Header(name.clone(), value)));
            if ui.small_button("x").accessible_name(format!("remove header {name}")).clicked() {
                edits.push(HostEdit::RemoveHeader(name.clone()));
            }
        });
    }
    // Sized to the panel: a new header's row never widens it.
    let room = (ui.available_width() - 60.0).max(120.0);
    let new_header = &mut drafts.new_header;
    ui.horizontal(|ui| {
        ui.add(egui::TextEdit::singleline(&mut new_header.0).hint_text("name").desired_width(room * 0.4));
        ui.add(egui::TextEdit::singleline(&mut new_header.1).hint_text("value").desired_width(room * 0.6));
        let valid = http::HeaderName::from_bytes(new_header.0.trim().as_bytes()).is_ok();
        if ui.add_enabled(valid, egui::Button::new("add")).clicked() {
            let (name, value) = std::mem::take(new_header);
            edits.push(HostEdit::Header(name.trim().to_ascii_lowercase(), value));
        }
    });
    edits
}

/// Secret headers: their state (stored, from the environment, missing), new values, and
/// adding or removing one. Values go to the secret store, never into the profile.
fn secrets_ui(
    ui: &mut egui::Ui,
    host: &HostProfile,
    profile: &str,
    secrets: &SecretStore,
    drafts: &mut HostDrafts,
) -> Vec<HostEdit> {
    let mut edits = Vec::new();
    ui.weak("Kept apart from the profile, in a file only you can read; never exported.");
    for name in &host.secret_headers {
        ui.horizontal(|ui| {
            ui.monospace(name.as_str());
            let status = match secrets.status(profile, &host.name, name) {
                SecretStatus::Missing => {
                    RichText::new("missing").color(super::palette::status_colors(ui.visuals()).error)
                }
                SecretStatus::Stored => RichText::new("••••••••"),
                SecretStatus::FromEnv(vars) => RichText::new(format!("from ${}", vars.join(", $"))),
            };
            ui.label(status);
            let draft = drafts.secret_values.entry(name.clone()).or_default();
            ui.add(
                egui::TextEdit::singleline(draft).password(true).hint_text("new value or ${VAR}").desired_width(120.0),
            )
            .accessible_name(format!("new secret value of {name}"));
            if ui.add_enabled(!draft.is_empty(), egui::Button::new("set")).clicked() {
                edits.push(HostEdit::SetSecret(name.clone(), std::mem::take(draft)));
            }
            if ui.small_button("x").accessible_name(format!("remove secret header {name}")).clicked() {
                edits.push(HostEdit::RemoveSecretHeader(name.clone()));
            }
        });
    }
    let new_name = &mut drafts.new_secret_name;
    ui.horizontal_wrapped(|ui| {
        let room = (ui.available_width() - 140.0).max(100.0);
        ui.add(egui::TextEdit::singleline(new_name).hint_text("e.g. authorization").desired_width(room));
        let valid = http::HeaderName::from_bytes(new_name.trim().as_bytes()).is_ok();
        if ui.add_enabled(valid, egui::Button::new("add secret header")).clicked() {
            edits.push(HostEdit::AddSecretHeader(std::mem::take(new_name).trim().to_ascii_lowercase()));
        }
    });
    edits
}
