//! One endpoint's request as the composer edits it (method, headers, body, cost rules) and the
//! "Import curl" panel that turns a pasted command into a host, an endpoint and secrets.

use std::path::{Path, PathBuf};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{HeaderMap, HeaderName, HeaderValue, Method};

use super::body_file::body_path;
use crate::http::CostRule;
use crate::http::header_cap::check_header_count;
use crate::profile::{CurlImport, EndpointEntry, parse_curl};
use crate::redact::looks_secret;
use crate::run::content_type_of;

/// Methods an endpoint may pick for itself.
const METHODS: [Method; 6] = [Method::GET, Method::HEAD, Method::POST, Method::PUT, Method::PATCH, Method::DELETE];

/// A request's method, headers (one `Name: value` a line) and body (text, sent as is).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RequestDraft {
    /// The method it is sent with: its own, else the burst's (the composer keeps it current).
    pub method: Method,
    /// Its own method; `None` follows the burst's method menu.
    pub own_method: Option<Method>,
    pub headers: String,
    pub body: String,
    /// A file to load the body from, as typed.
    pub body_file: String,
    /// Where loading the body from `body_file` stands.
    pub load: BodyLoad,
    /// Cost rules, one `UNIT=ESTIMATE[->ACTUAL]` a line (`tokens=body/4->field:usage.total_tokens`).
    pub costs: String,
}

impl Default for RequestDraft {
    fn default() -> Self {
        Self {
            method: Method::GET,
            own_method: None,
            headers: String::new(),
            body: String::new(),
            body_file: String::new(),
            load: BodyLoad::Idle,
            costs: String::new(),
        }
    }
}

/// Where loading a request's body from its file stands. The backend reads the file; the UI
/// only asks and waits, so a slow or huge file never stalls a frame.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum BodyLoad {
    /// Nothing asked, or the last load went well.
    #[default]
    Idle,
    /// Load body was pressed (or a profile endpoint names the file): the app asks the backend
    /// for this file next.
    Wanted(PathBuf),
    /// The backend is reading this file; the body comes with its answer.
    Reading(PathBuf),
    /// The last load failed, for this reason; the body is as it was.
    Failed(String),
}

/// A request draft checked: what the burst sends for the endpoint.
#[derive(Debug, Clone, PartialEq)]
pub struct RequestParts {
    pub method: Method,
    pub headers: HeaderMap,
    pub body: Option<Bytes>,
    /// What the request is estimated to spend of other units, and where its answer says the truth.
    pub cost_rules: Vec<CostRule>,
}

impl RequestDraft {
    /// The draft of a profile endpoint; a body file it names is asked for (the backend reads it).
    pub fn from_entry(entry: &EndpointEntry) -> Self {
        let own_method = entry.method.as_deref().and_then(|m| Method::from_bytes(m.as_bytes()).ok());
        let method = own_method.clone().unwrap_or(Method::GET);
        let headers = entry.headers.iter().map(|(name, value)| format!("{name}: {value}\n")).collect();
        let body_file = entry.body_file.clone().unwrap_or_default();
        let mut draft = Self {
            method,
            own_method,
            headers,
            body: entry.body.clone().unwrap_or_default(),
            body_file,
            load: BodyLoad::Idle,
            costs: entry.costs.iter().map(|rule| format!("{rule}\n")).collect(),
        };
        if entry.body_file.is_some() {
            draft.want_body();
        }
        draft
    }

    /// Asks for the body to be loaded from `body_file` (by the backend, through the app); a
    /// blank field or `-` fails at once.
    pub fn want_body(&mut self) {
        self.load = match body_path(&self.body_file) {
            Ok(path) => BodyLoad::Wanted(path),
            Err(err) => BodyLoad::Failed(err.to_string()),
        };
    }

    /// The file the backend should read for this draft, if one is wanted; the draft then
    /// waits for the answer.
    pub fn take_wanted(&mut self) -> Option<PathBuf> {
        let BodyLoad::Wanted(path) = &self.load else { return None };
        let path = path.clone();
        self.load = BodyLoad::Reading(path.clone());
        Some(path)
    }

    /// The backend's answer for `path`: the body's text, or why there is none (the body then
    /// stays as it was). Ignored unless this draft waits for that file.
    pub fn body_read(&mut self, path: &Path, read: &Result<String, String>) {
        if !matches!(&self.load, BodyLoad::Reading(waiting) if waiting == path) {
            return;
        }
        self.load = match read {
            Ok(text) => {
                self.body.clone_from(text);
                BodyLoad::Idle
            }
            Err(err) => BodyLoad::Failed(err.clone()),
        };
    }

    /// Checked: every header line `Name: value` and not a credential, a body only with a
    /// method that sends one; the body's `Content-Type` guessed unless a header sets it.
    pub fn parts(&self) -> Result<RequestParts, String> {
        if let BodyLoad::Wanted(path) | BodyLoad::Reading(path) = &self.load {
            return Err(format!("the body is still being read from {}", path.display()));
        }
        let count = self.headers.lines().filter(|line| !line.trim().is_empty()).count();
        check_header_count(count).map_err(|err| err.to_string())?;
        let mut headers = HeaderMap::new();
        for (number, line) in self.headers.lines().enumerate().map(|(i, line)| (i + 1, line.trim())) {
            if line.is_empty() {
                continue;
            }
            let Some((name, value)) = line.split_once(':') else {
                return Err(format!("header line {number} is not 'Name: value'"));
            };
            let Ok(name) = HeaderName::from_bytes(name.trim().as_bytes()) else {
                let shown = crate::redact::redact_header_line(name.trim());
                return Err(format!("header line {number}: '{shown}' is not a header name"));
            };
            if looks_secret(name.as_str()) {
                return Err(format!(
                    "header '{name}' carries a credential: add it to the host's secret headers, which keep it out of the profile"
                ));
            }
            let Ok(value) = HeaderValue::from_str(value.trim()) else {
                return Err(format!("header '{name}': the value has characters a header cannot carry"));
            };
            headers.append(name, value);
        }
        let body = (!self.body.is_empty()).then(|| Bytes::from(self.body.clone()));
        if let Some(body) = &body {
            if matches!(self.method, Method::GET | Method::HEAD) {
                return Err(format!("a {} sends no body: pick POST, PUT or PATCH, or clear the body", self.method));
            }
            if !headers.contains_key(CONTENT_TYPE) {
                headers.insert(CONTENT_TYPE, content_type_of(body));
            }
        }
        let cost_rules = self.cost_rules()?;
        Ok(RequestParts { method: self.method.clone(), headers, body, cost_rules })
    }

    /// The cost rules, each line checked; a unit named twice is refused.
    pub fn cost_rules(&self) -> Result<Vec<CostRule>, String> {
        let mut rules: Vec<CostRule> = Vec::new();
        for (number, line) in self.costs.lines().enumerate().map(|(i, line)| (i + 1, line.trim())) {
            if line.is_empty() {
                continue;
            }
            let rule: CostRule = line.parse().map_err(|err| format!("cost line {number}: {err}"))?;
            if rules.iter().any(|earlier| earlier.unit == rule.unit) {
                return Err(format!("cost line {number}: '{}' has a rule already", rule.unit));
            }
            rules.push(rule);
        }
        Ok(rules)
    }

    /// The cost lines as a profile keeps them.
    pub fn cost_lines(&self) -> Vec<String> {
        self.costs.lines().map(str::trim).filter(|line| !line.is_empty()).map(str::to_owned).collect()
    }

    /// One line for the endpoint row: `POST · 2 headers · body 17 B`.
    pub fn summary(&self) -> String {
        let mut text = self.method.to_string();
        let headers = self.headers.lines().filter(|line| !line.trim().is_empty()).count();
        if headers > 0 {
            text.push_str(&format!(" · {headers} header{}", if headers == 1 { "" } else { "s" }));
        }
        if !self.body.is_empty() {
            text.push_str(&format!(" · body {} B", self.body.len()));
        }
        let units: Vec<&str> =
            self.costs.lines().filter_map(|line| line.split_once('=')).map(|(unit, _)| unit.trim()).collect();
        if !units.is_empty() {
            text.push_str(&format!(" · costs {}", units.join(", ")));
        }
        text
    }
}

/// The method, headers and body of one request (typed, or loaded from a file); the error, if
/// any, under them. `burst_method` is what "the burst's" method means.
pub fn request_ui(ui: &mut egui::Ui, draft: &mut RequestDraft, burst_method: &Method) {
    ui.horizontal(|ui| {
        ui.label("method");
        let follow = format!("the burst's ({burst_method})");
        let shown = draft.own_method.as_ref().map_or_else(|| follow.clone(), ToString::to_string);
        let menu = egui::ComboBox::from_id_salt("endpoint method").selected_text(shown).show_ui(ui, |ui| {
            ui.selectable_value(&mut draft.own_method, None, follow);
            for method in METHODS {
                let label = method.to_string();
                ui.selectable_value(&mut draft.own_method, Some(method), label);
            }
        });
        let _ = menu.response.accessible_name("endpoint method");
    });
    draft.method = draft.own_method.clone().unwrap_or_else(|| burst_method.clone());
    ui.label("headers, one 'Name: value' a line (credentials go in the host's secret headers)");
    ui.add(
        egui::TextEdit::multiline(&mut draft.headers)
            .desired_rows(2)
            .desired_width(f32::INFINITY)
            .hint_text("Accept: application/json"),
    )
    .accessible_name("request headers");
    ui.label("body (JSON or text; Content-Type is guessed unless a header sets it)");
    code_field_ui(ui, &mut draft.body, 3, "{\"name\": \"widget\"}", "request body");
    ui.horizontal(|ui| {
        ui.add(egui::TextEdit::singleline(&mut draft.body_file).desired_width(240.0).hint_text("payload.json"))
            .accessible_name("body file");
        if ui.button("Load body").on_hover_text("Read the body from this file (UTF-8 text, up to 16 MiB)").clicked() {
            draft.want_body();
        }
        if let BodyLoad::Wanted(path) | BodyLoad::Reading(path) = &draft.load {
            ui.spinner();
            ui.label(format!("reading {}…", path.display()));
        }
    });
    ui.label(
        "costs in other units, one UNIT=ESTIMATE->ACTUAL a line (reserved before sending, settled from the answer)",
    )
    .on_hover_text(
        "ESTIMATE: a number, body/4 (the body's bytes / 4, a token guess), field:max_tokens (from the JSON body), \
             added with +. ACTUAL: field:usage.total_tokens (from the JSON answer). \
             E.g. tokens=body/4+field:max_tokens->field:usage.total_tokens",
    );
    let hint = "tokens=body/4+field:max_tokens->field:usage.total_tokens";
    code_field_ui(ui, &mut draft.costs, 1, hint, "cost rules");
    if let BodyLoad::Failed(error) = &draft.load {
        ui.colored_label(ui.visuals().error_fg_color, error);
    }
    let loading = matches!(draft.load, BodyLoad::Wanted(_) | BodyLoad::Reading(_));
    if let (false, Err(err)) = (loading, draft.parts()) {
        ui.colored_label(ui.visuals().error_fg_color, err);
    }
}

/// A full-width monospace text area of `rows` lines, named `name` for screen readers and tests.
fn code_field_ui(ui: &mut egui::Ui, text: &mut String, rows: usize, hint: &str, name: &str) {
    ui.add(
        egui::TextEdit::multiline(text).code_editor().desired_rows(rows).desired_width(f32::INFINITY).hint_text(hint),
    )
    .accessible_name(name);
}

/// The "Import curl" panel: a pasted command, its error, and Import.
#[derive(Debug, Clone, Default)]
pub struct CurlPanel {
    pub open: bool,
    pub command: String,
    pub error: Option<String>,
}

impl CurlPanel {
    /// Shows the panel while open; returns the import when Import was pressed on a command
    /// that reads (the panel then closes), else keeps the error beside the text.
    pub fn curl_ui(&mut self, ctx: &egui::Context) -> Option<CurlImport> {
        if !self.open {
            return None;
        }
        let mut open = true;
        let mut imported = None;
        egui::Window::new("Import curl").open(&mut open).collapsible(false).resizable(true).show(ctx, |ui| {
            ui.label("Paste a curl command (from an API's docs or the browser's \"Copy as cURL\"):");
            ui.add(
                egui::TextEdit::multiline(&mut self.command)
                    .code_editor()
                    .desired_rows(5)
                    .desired_width(480.0)
                    .hint_text("curl https://api.example.com/items -H 'Authorization: Bearer ...'"),
            )
            .accessible_name("curl command");
            ui.label("Its host and endpoint go into the profile; Authorization, Cookie and key headers into the secret store.");
            if let Some(error) = &self.error {
                ui.colored_label(ui.visuals().error_fg_color, error);
            }
            if ui.button("Import").clicked() {
                match parse_curl(&self.command) {
                    Ok(import) => imported = Some(import),
                    Err(err) => self.error = Some(err.to_string()),
                }
            }
        });
        if imported.is_some() || !open {
            *self = Self::default();
        }
        imported
    }
}

#[cfg(test)]
mod tests {
    use egui_kittest::Harness;
    use egui_kittest::kittest::Queryable;

    use super::*;

    fn harness(draft: RequestDraft) -> Harness<'static, RequestDraft> {
        Harness::builder().with_size(egui::vec2(600.0, 400.0)).build_ui_state(
            |ui, draft: &mut RequestDraft| {
                request_ui(ui, draft, &Method::POST);
                // The app's and the backend's part, done at once: read the file Load body asked for.
                if let Some(path) = draft.take_wanted() {
                    let read = crate::gui::body_file::read_body_file(&path).map_err(|err| err.to_string());
                    draft.body_read(&path, &read);
                }
            },
            draft,
        )
    }

    /// Types `text` into the field `label` one key at a time; after each key the draft's text
    /// (read by `typed`) is exactly what was typed so far.
    fn type_each_key(
        harness: &mut Harness<'static, RequestDraft>,
        label: &str,
        text: &str,
        typed: fn(&RequestDraft) -> &String,
    ) {
        harness.get_by_label(label).focus();
        harness.run();
        for (count, key) in text.chars().enumerate() {
            harness.get_by_label(label).type_text(&key.to_string());
            harness.run();
            let expected: String = text.chars().take(count + 1).collect();
            assert_eq!(typed(harness.state()), &expected, "{label}: after key {}", count + 1);
        }
    }

    #[test]
    fn headers_and_body_typed_key_by_key_keep_every_key_and_become_the_request() {
        let mut harness = harness(RequestDraft { method: Method::POST, ..RequestDraft::default() });
        type_each_key(&mut harness, "request headers", "Accept: text/csv", |draft| &draft.headers);
        let body = r#"{"a": 1}"#;
        harness.get_by_label("request body").focus();
        harness.run();
        for key in body.chars() {
            harness.get_by_label("request body").type_text(&key.to_string());
            harness.run();
        }
        assert_eq!(harness.state().body, body);
        let parts = harness.state().parts().unwrap();
        assert_eq!(parts.headers["accept"], "text/csv");
        assert_eq!(parts.headers["content-type"], "application/json", "guessed from the body");
        assert_eq!(parts.body.as_deref(), Some(body.as_bytes()));
        assert_eq!(harness.state().summary(), "POST · 1 header · body 8 B");

        harness.get_by_label("request body").focus();
        harness.run();
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
        harness.key_press(egui::Key::Backspace);
        harness.run();
        assert_eq!(harness.state().body, "", "select-all + delete empties the body");
    }

    #[test]
    fn a_credential_header_or_a_get_with_a_body_is_refused_on_screen() {
        let harness = harness(RequestDraft {
            headers: "Authorization: Bearer abc
"
            .into(),
            ..RequestDraft::default()
        });
        harness.get_by_label_contains("carries a credential");
        let draft = RequestDraft { body: "x".into(), ..RequestDraft::default() };
        assert!(draft.parts().unwrap_err().contains("sends no body"));
        let bad = RequestDraft { headers: "no colon".into(), ..RequestDraft::default() };
        assert_eq!(bad.parts().unwrap_err(), "header line 1 is not 'Name: value'");
    }

    #[test]
    fn cost_rules_typed_key_by_key_become_the_requests_rules_and_a_bad_one_is_shown() {
        let mut harness = harness(RequestDraft { method: Method::POST, ..RequestDraft::default() });
        let rule = "tokens=body/4+field:max_tokens->field:usage.total_tokens";
        type_each_key(&mut harness, "cost rules", rule, |draft| &draft.costs);
        let rules = harness.state().parts().unwrap().cost_rules;
        assert_eq!(rules.len(), 1);
        assert_eq!(rules[0].unit, crate::engine::Unit::tokens());
        assert_eq!(rules[0].estimate(Some(br#"{"max_tokens": 100}"#)), 100 + 5, "19 bytes / 4, rounded up, plus 100");
        assert_eq!(harness.state().summary(), "POST · costs tokens");
        assert_eq!(harness.state().cost_lines(), [rule]);

        harness.get_by_label("cost rules").type_text("\ntokens=5");
        harness.run();
        harness.get_by_label_contains("cost line 2: 'tokens' has a rule already");
        let bad = RequestDraft { costs: "tokens=lots".into(), ..RequestDraft::default() };
        assert!(bad.parts().unwrap_err().starts_with("cost line 1:"), "{:?}", bad.parts());
    }

    #[test]
    fn a_profile_endpoint_comes_back_as_its_draft() {
        let entry = EndpointEntry {
            method: Some("PATCH".into()),
            headers: [("accept".to_owned(), "application/json".to_owned())].into(),
            body: Some("{}".into()),
            costs: vec!["points=10->field:extensions.cost.actualQueryCost".into()],
            ..EndpointEntry::get("/items/1")
        };
        let draft = RequestDraft::from_entry(&entry);
        assert_eq!(draft.cost_lines(), ["points=10->field:extensions.cost.actualQueryCost"]);
        assert_eq!(draft.method, Method::PATCH);
        assert_eq!(draft.headers, "accept: application/json\n");
        assert_eq!(draft.body, "{}");
    }

    #[test]
    fn a_body_loads_from_a_file_and_a_missing_one_is_named() {
        let dir = tempfile::tempdir().unwrap();
        let file = dir.path().join("payload.json");
        std::fs::write(&file, "[1, 2]").unwrap();
        let mut harness = harness(RequestDraft { method: Method::PUT, ..RequestDraft::default() });
        harness.get_by_label("body file").focus();
        harness.run();
        harness.get_by_label("body file").type_text(&file.display().to_string());
        harness.run();
        harness.get_by_label("Load body").click();
        harness.run();
        assert_eq!(harness.state().body, "[1, 2]");
        std::fs::remove_file(&file).unwrap();
        harness.get_by_label("Load body").click();
        harness.run();
        harness.get_by_label_contains("payload.json");
        assert_eq!(harness.state().body, "[1, 2]", "a failed load keeps the body");
    }

    /// Issue #33 item 6: the UI never reads a body file; a draft asks once, refuses to fire
    /// while it waits, and takes only the answer for the file it asked for.
    #[test]
    fn a_body_file_is_asked_for_and_the_draft_waits_for_its_own_answer() {
        let entry = EndpointEntry {
            method: Some("POST".into()),
            body_file: Some("payload.json".into()),
            ..EndpointEntry::get("/x")
        };
        let mut draft = RequestDraft::from_entry(&entry);
        assert_eq!(draft.load, BodyLoad::Wanted("payload.json".into()), "named, not read on the UI thread");
        assert_eq!(draft.take_wanted(), Some(PathBuf::from("payload.json")));
        assert_eq!(draft.take_wanted(), None, "asked once");
        let waiting = draft.parts().unwrap_err();
        assert_eq!(waiting, "the body is still being read from payload.json");
        draft.body_read(Path::new("other.json"), &Ok("no".into()));
        assert_eq!(draft.body, "", "another file's answer is not this draft's");
        draft.body_read(Path::new("payload.json"), &Ok("{}".into()));
        assert_eq!((draft.body.as_str(), &draft.load), ("{}", &BodyLoad::Idle));
        draft.body_file = " - ".into();
        draft.want_body();
        assert!(matches!(&draft.load, BodyLoad::Failed(err) if err.contains("standard input")), "{:?}", draft.load);
        assert_eq!(draft.take_wanted(), None, "nothing is asked of the backend");
        assert_eq!(draft.body, "{}", "a refused load keeps the body");
    }

    #[test]
    fn the_curl_panel_imports_a_pasted_command_or_keeps_its_error() {
        let panel = CurlPanel { open: true, ..CurlPanel::default() };
        let mut harness = Harness::builder().with_size(egui::vec2(800.0, 600.0)).build_ui_state(
            |ui, (panel, imported): &mut (CurlPanel, Option<CurlImport>)| {
                if let Some(import) = panel.curl_ui(ui.ctx()) {
                    *imported = Some(import);
                }
            },
            (panel, None),
        );
        harness.get_by_label("curl command").focus();
        harness.run();
        harness.get_by_label("curl command").type_text("wget http://h/");
        harness.run();
        harness.get_by_label("Import").click();
        harness.run();
        harness.get_by_label_contains("not a curl command");
        assert!(harness.state().1.is_none());
        harness.get_by_label("curl command").focus();
        harness.run();
        harness.key_press_modifiers(egui::Modifiers::COMMAND, egui::Key::A);
        harness.key_press(egui::Key::Backspace);
        harness.get_by_label("curl command").type_text("curl -X POST http://h:81/x -H 'Cookie: a=1' -d '{}'");
        harness.run();
        harness.get_by_label("Import").click();
        harness.run();
        let (panel, imported) = harness.state();
        let imported = imported.as_ref().expect("imported");
        assert_eq!(imported.endpoint.name, "POST /x");
        assert_eq!(imported.secrets[0].0, "cookie");
        assert!(!panel.open, "the panel closes after an import");
    }
}
