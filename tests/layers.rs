//! The layers of `src/` and their one-way arrows (ARCHITECTURE.md, "Layers"): a module may use
//! modules of lower layers only, never one of its own layer or above (the few same-layer
//! arrows are listed). A wrong-way `crate::` path anywhere outside `#[cfg(test)]` fails here.
//!
//! The lowest layer's limiter is its own crate, `crates/ratescope-engine`, re-exported as
//! `crate::engine`: the compiler keeps it from naming anything of `src/`, and its manifest is
//! checked here to name nothing that speaks HTTP, reaches Redis, draws, or runs tokio beyond
//! its timers.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

use syn::visit::Visit;

/// Lowest first. Each top-level module of `src/` is in exactly one layer (`engine` is the
/// `ratescope-engine` crate, re-exported).
const LAYERS: &[&[&str]] = &[
    &["files", "engine", "redact", "allocator"],
    &["store"],
    &["http"],
    &["mock", "telemetry"],
    &["profile"],
    &["run", "layer"],
    &["probe"],
    &["sim", "proxy"],
    &["tune"],
    &["gui"],
    &["cli"],
];

fn layer_of(module: &str) -> Option<usize> {
    LAYERS.iter().position(|layer| layer.contains(&module))
}

/// Every `.rs` file under `dir`.
fn sources(dir: &Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    for entry in std::fs::read_dir(dir).unwrap() {
        let path = entry.unwrap().path();
        if path.is_dir() {
            files.extend(sources(&path));
        } else if path.extension().is_some_and(|ext| ext == "rs") {
            files.push(path);
        }
    }
    files
}

/// The top-level module a file of `src/` belongs to (`src/http/client/mod.rs` → `http`).
fn module_of(src: &Path, file: &Path) -> Option<String> {
    let relative = file.strip_prefix(src).ok()?;
    let first = relative.components().next()?.as_os_str().to_str()?;
    Some(first.trim_end_matches(".rs").to_owned())
}

/// The modules a source file names as `crate::NAME` outside code compiled only for tests
/// (items under `#[cfg(test)]`): in `use` trees (`use crate::{http::X, gui}` names both), in
/// paths of code and types, inside macro calls (but not a macro's own `$crate::`), and in
/// doc comments (an intra-doc link is an arrow too).
fn uses(text: &str) -> BTreeSet<String> {
    let file = syn::parse_file(text).unwrap_or_else(|err| panic!("not Rust: {err}"));
    let mut arrows = Arrows::default();
    arrows.visit_file(&file);
    arrows.found
}

/// Collects the modules named after `crate::`.
#[derive(Default)]
struct Arrows {
    found: BTreeSet<String>,
}

/// Whether `attrs` hold `#[cfg(test)]`.
fn test_only(attrs: &[syn::Attribute]) -> bool {
    attrs.iter().any(|attr| {
        attr.path().is_ident("cfg") && attr.parse_args::<syn::Ident>().is_ok_and(|predicate| predicate == "test")
    })
}

/// The attributes of an item, where it has any (`#[cfg(test)]` is looked for there).
fn item_attrs(item: &syn::Item) -> &[syn::Attribute] {
    use syn::Item;
    match item {
        Item::Const(item) => &item.attrs,
        Item::Enum(item) => &item.attrs,
        Item::Fn(item) => &item.attrs,
        Item::Impl(item) => &item.attrs,
        Item::Macro(item) => &item.attrs,
        Item::Mod(item) => &item.attrs,
        Item::Static(item) => &item.attrs,
        Item::Struct(item) => &item.attrs,
        Item::Trait(item) => &item.attrs,
        Item::Type(item) => &item.attrs,
        Item::Use(item) => &item.attrs,
        _ => &[],
    }
}

impl Arrows {
    /// `crate :: NAME` in a token stream, not preceded by `$`.
    fn scan_tokens(&mut self, tokens: proc_macro2::TokenStream) {
        use proc_macro2::TokenTree;
        let tokens: Vec<TokenTree> = tokens.into_iter().collect();
        for (at, token) in tokens.iter().enumerate() {
            match token {
                TokenTree::Group(group) => self.scan_tokens(group.stream()),
                TokenTree::Ident(ident) if ident == "crate" => {
                    let dollar = at > 0 && matches!(&tokens[at - 1], TokenTree::Punct(punct) if punct.as_char() == '$');
                    let colons = tokens.get(at + 1..at + 3).is_some_and(|pair| {
                        pair.iter().all(|token| matches!(token, TokenTree::Punct(punct) if punct.as_char() == ':'))
                    });
                    if let (false, true, Some(TokenTree::Ident(name))) = (dollar, colons, tokens.get(at + 3)) {
                        self.found.insert(name.to_string());
                    }
                }
                _ => {}
            }
        }
    }

    /// `crate::NAME` in a doc comment's text.
    fn scan_doc(&mut self, text: &str) {
        for (at, _) in text.match_indices("crate::") {
            let rest = &text[at + "crate::".len()..];
            let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
            if !name.is_empty() && !text[..at].ends_with('$') {
                self.found.insert(name);
            }
        }
    }

    /// The first names of a `use crate::…` tree.
    fn use_names(&mut self, tree: &syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) => {
                self.found.insert(path.ident.to_string());
            }
            syn::UseTree::Name(name) => {
                self.found.insert(name.ident.to_string());
            }
            syn::UseTree::Rename(rename) => {
                self.found.insert(rename.ident.to_string());
            }
            syn::UseTree::Group(group) => group.items.iter().for_each(|tree| self.use_names(tree)),
            syn::UseTree::Glob(_) => {}
        }
    }
}

impl<'ast> Visit<'ast> for Arrows {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_impl_item(&mut self, item: &'ast syn::ImplItem) {
        let attrs = match item {
            syn::ImplItem::Const(item) => &item.attrs,
            syn::ImplItem::Fn(item) => &item.attrs,
            syn::ImplItem::Type(item) => &item.attrs,
            _ => return syn::visit::visit_impl_item(self, item),
        };
        if !test_only(attrs) {
            syn::visit::visit_impl_item(self, item);
        }
    }

    fn visit_stmt(&mut self, stmt: &'ast syn::Stmt) {
        let skip = match stmt {
            syn::Stmt::Local(local) => test_only(&local.attrs),
            syn::Stmt::Macro(mac) => test_only(&mac.attrs),
            _ => false,
        };
        if !skip {
            syn::visit::visit_stmt(self, stmt);
        }
    }

    fn visit_use_tree(&mut self, tree: &'ast syn::UseTree) {
        match tree {
            syn::UseTree::Path(path) if path.ident == "crate" => self.use_names(&path.tree),
            _ => syn::visit::visit_use_tree(self, tree),
        }
    }

    fn visit_path(&mut self, path: &'ast syn::Path) {
        let mut segments = path.segments.iter();
        if let (Some(first), Some(second)) = (segments.next(), segments.next())
            && first.ident == "crate"
        {
            self.found.insert(second.ident.to_string());
        }
        syn::visit::visit_path(self, path);
    }

    fn visit_macro(&mut self, mac: &'ast syn::Macro) {
        self.scan_tokens(mac.tokens.clone());
        syn::visit::visit_macro(self, mac);
    }

    fn visit_attribute(&mut self, attr: &'ast syn::Attribute) {
        if let syn::Meta::NameValue(doc) = &attr.meta
            && doc.path.is_ident("doc")
            && let syn::Expr::Lit(syn::ExprLit { lit: syn::Lit::Str(text), .. }) = &doc.value
        {
            self.scan_doc(&text.value());
        }
        syn::visit::visit_attribute(self, attr);
    }
}

#[test]
fn every_arrow_points_down() {
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut wrong = Vec::new();
    let mut unplaced = BTreeSet::new();
    for file in sources(&src) {
        let Some(module) = module_of(&src, &file) else { continue };
        if matches!(module.as_str(), "lib" | "main") {
            continue;
        }
        let Some(from) = layer_of(&module) else {
            unplaced.insert(module);
            continue;
        };
        for used in uses(&std::fs::read_to_string(&file).unwrap()) {
            if used == module {
                continue;
            }
            match layer_of(&used) {
                Some(to) if to < from => {}
                Some(_) => wrong.push(format!("{} uses crate::{used}", file.display())),
                None => {
                    unplaced.insert(used);
                }
            }
        }
    }
    assert!(unplaced.is_empty(), "modules in no layer (add them to LAYERS and ARCHITECTURE.md): {unplaced:?}");
    assert!(wrong.is_empty(), "arrows that point up or sideways:\n{}", wrong.join("\n"));
}

/// Dependencies the engine crate may never have: the root package (the arrow would point up),
/// HTTP, Redis, the GUI, and crates that touch the disk or start runtimes of their own.
const NOT_IN_THE_ENGINE: &[&str] = &[
    "ratescope",
    "http",
    "reqwest",
    "hyper",
    "axum",
    "tower",
    "redis",
    "egui",
    "eframe",
    "rfd",
    "directories",
    "tempfile",
];

/// The only tokio features the engine uses: its timers (and their `Instant`) and tokio's sync types.
const ENGINE_TOKIO_FEATURES: &[&str] = &["sync", "time"];

/// The engine's normal dependencies (`[dependencies]` and every `[target.*.dependencies]`),
/// each with its table or version string.
fn engine_dependencies() -> Vec<(String, toml::Value)> {
    dependencies_of("crates/ratescope-engine")
}

/// The normal dependencies of the workspace crate at `dir`, each with its table or version.
fn dependencies_of(dir: &str) -> Vec<(String, toml::Value)> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR")).join(dir).join("Cargo.toml");
    let manifest: toml::Table = toml::from_str(&std::fs::read_to_string(manifest).unwrap()).unwrap();
    let mut tables = vec![manifest.get("dependencies")];
    if let Some(targets) = manifest.get("target").and_then(toml::Value::as_table) {
        tables.extend(targets.values().map(|target| target.get("dependencies")));
    }
    let tables = tables.into_iter().flatten().filter_map(toml::Value::as_table);
    tables.flat_map(|table| table.iter().map(|(name, spec)| (name.clone(), spec.clone()))).collect()
}

/// A dependency's crate name: its `package` key when renamed, else its key.
fn crate_name(key: &str, spec: &toml::Value) -> String {
    spec.get("package").and_then(toml::Value::as_str).unwrap_or(key).to_owned()
}

/// Whether a crate name is one of `NOT_IN_THE_ENGINE` or of its family (`hyper-util`, `egui_plot`).
fn forbidden_in_engine(name: &str) -> bool {
    NOT_IN_THE_ENGINE
        .iter()
        .any(|bad| name == *bad || name.strip_prefix(bad).is_some_and(|rest| rest.starts_with(['-', '_'])))
}

#[test]
fn the_engine_crate_needs_no_http_disk_gui_or_runtime() {
    let dependencies = engine_dependencies();
    assert!(dependencies.iter().any(|(name, _)| name == "tokio"), "the manifest was not read: {dependencies:?}");
    let forbidden: Vec<String> =
        dependencies.iter().map(|(key, spec)| crate_name(key, spec)).filter(|name| forbidden_in_engine(name)).collect();
    assert!(
        forbidden.is_empty(),
        "crates/ratescope-engine depends on {forbidden:?}: the engine stays below HTTP, disk and GUI"
    );

    let (_, tokio) = dependencies.iter().find(|(key, spec)| crate_name(key, spec) == "tokio").unwrap();
    assert_eq!(
        tokio.get("default-features").and_then(toml::Value::as_bool),
        Some(false),
        "the engine's tokio must opt out of default features"
    );
    let features: Vec<&str> = tokio
        .get("features")
        .and_then(toml::Value::as_array)
        .into_iter()
        .flatten()
        .filter_map(toml::Value::as_str)
        .collect();
    let extra: Vec<&&str> = features.iter().filter(|feature| !ENGINE_TOKIO_FEATURES.contains(feature)).collect();
    assert!(
        extra.is_empty(),
        "the engine's tokio needs only {ENGINE_TOKIO_FEATURES:?} (tests may add more as dev-dependencies), not {extra:?}"
    );
}

#[test]
fn the_redis_crate_needs_no_http_gui_or_the_root_package() {
    let dependencies = dependencies_of("crates/ratescope-redis");
    let names: Vec<String> = dependencies.iter().map(|(key, spec)| crate_name(key, spec)).collect();
    assert!(names.iter().any(|name| name == "redis"), "the manifest was not read: {names:?}");
    assert!(names.iter().any(|name| name == "ratescope-engine"), "it decides the engine's budgets: {names:?}");
    let forbidden: Vec<&String> = names
        .iter()
        .filter(|name| !["redis", "ratescope-engine"].contains(&name.as_str()) && forbidden_in_engine(name))
        .collect();
    assert!(
        forbidden.is_empty(),
        "crates/ratescope-redis depends on {forbidden:?}: the store stays below HTTP and GUI"
    );
}

/// What a user of the client crate alone must never compile: the command line, the app, the
/// proxy's server, the burst tools, and the root package itself.
const NOT_IN_THE_CLIENT: &[&str] =
    &["ratescope", "clap", "axum", "eframe", "egui", "indicatif", "mimalloc", "libmimalloc-sys", "csv"];

#[test]
fn the_client_crate_needs_no_command_line_app_or_server() {
    let dependencies = dependencies_of("crates/ratescope-client");
    let names: Vec<String> = dependencies.iter().map(|(key, spec)| crate_name(key, spec)).collect();
    assert!(names.iter().any(|name| name == "reqwest"), "the manifest was not read: {names:?}");
    let forbidden: Vec<&String> = names.iter().filter(|name| NOT_IN_THE_CLIENT.contains(&name.as_str())).collect();
    assert!(forbidden.is_empty(), "crates/ratescope-client depends on {forbidden:?}");
}

#[test]
fn the_engine_check_sees_a_forbidden_dependency() {
    for name in ["ratescope", "http", "hyper-util", "reqwest-middleware", "egui_plot", "redis", "tower"] {
        assert!(forbidden_in_engine(name), "{name}");
    }
    for name in ["tokio", "parking_lot", "httpdate", "towering"] {
        assert!(!forbidden_in_engine(name), "{name}");
    }
    let renamed: toml::Table = toml::from_str("h = { package = \"hyper\", version = \"1\" }").unwrap();
    assert_eq!(crate_name("h", &renamed["h"]), "hyper");
}

#[test]
fn the_check_sees_a_wrong_way_use() {
    let text =
        "use crate::engine::Limiter;\nfn f() { crate::gui::run(None); }\n#[cfg(test)]\nmod tests { use crate::cli; }";
    let found = uses(text);
    assert_eq!(found, BTreeSet::from(["engine".to_owned(), "gui".to_owned()]));
    assert!(layer_of("gui") > layer_of("http"));
    assert_eq!(uses("macro_rules! m { () => { $crate::cli::UsageError } }"), BTreeSet::new());
}

#[test]
fn the_check_reads_use_groups_code_after_a_test_item_macros_and_doc_links() {
    let text = r#"
        use crate::{http::Client, proxy};
        #[cfg(test)]
        fn only_in_tests() { crate::gui::run(None); }
        /// See [`Burst`](crate::run::Burst).
        pub fn after() -> crate::store::SharedGate { tracing::info!("{}", crate::sim::NAME); todo!() }
        impl Thing {
            #[cfg(test)]
            fn helper() { crate::cli::main(); }
        }
    "#;
    let expected = ["http", "proxy", "run", "store", "sim"].map(str::to_owned);
    assert_eq!(uses(text), BTreeSet::from(expected), "gui and cli are used by test code only");
}

/// Each step of a request's life has one home (ARCHITECTURE.md, `http/`: `attempts.rs`): the calls
/// that make a step, and the only files outside tests allowed to make them. A fifth copy of
/// the retry loop, or a face that admits or reads answers its own way, fails here.
const ONE_HOME: &[(&str, &[&str])] = &[
    // The retry policy's word on an attempt: the loop, and tower's retry policy.
    ("decide", &["http/attempts.rs", "layer/retry.rs"]),
    ("wait_to_retry", &["http/attempts.rs"]),
    // The key's pause after a throttling answer: the loop, and the layer's one call.
    ("pause_key", &["http/attempts.rs", "layer/call.rs"]),
    // Admission: the step, and the middleware's direct path (a permit taken at once when
    // nothing listens and nothing reads the answer; anything else goes through the step).
    ("acquire_cost", &["http/admission.rs"]),
    ("try_acquire_cost", &["http/admission.rs", "http/client/middleware/direct.rs"]),
    ("admit_shared", &["http/admission.rs"]),
    // Reading an answer: what the adaptive mirror makes of its headers.
    ("adaptive::observe", &["http/client/mod.rs"]),
];

/// The method names and function paths (`adaptive::observe`) a source file calls outside
/// `#[cfg(test)]` items.
#[derive(Default)]
struct Calls {
    names: BTreeSet<String>,
}

impl<'ast> Visit<'ast> for Calls {
    fn visit_item(&mut self, item: &'ast syn::Item) {
        if !test_only(item_attrs(item)) {
            syn::visit::visit_item(self, item);
        }
    }

    fn visit_expr_method_call(&mut self, call: &'ast syn::ExprMethodCall) {
        self.names.insert(call.method.to_string());
        syn::visit::visit_expr_method_call(self, call);
    }

    fn visit_expr_call(&mut self, call: &'ast syn::ExprCall) {
        if let syn::Expr::Path(path) = &*call.func {
            let segments: Vec<String> = path.path.segments.iter().map(|segment| segment.ident.to_string()).collect();
            self.names.insert(segments.join("::"));
        }
        syn::visit::visit_expr_call(self, call);
    }
}

fn calls(text: &str) -> BTreeSet<String> {
    let file = syn::parse_file(text).unwrap_or_else(|err| panic!("not Rust: {err}"));
    let mut calls = Calls::default();
    calls.visit_file(&file);
    calls.names
}

/// The files of the root package and the client crate whose calls `ONE_HOME` is checked
/// against, each with its path under its `src/`.
fn pipeline_sources() -> Vec<(String, String)> {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut files = Vec::new();
    for src in [root.join("src"), root.join("crates/ratescope-client/src")] {
        for file in sources(&src) {
            let relative = file.strip_prefix(&src).unwrap().to_string_lossy().replace('\\', "/");
            files.push((relative, std::fs::read_to_string(&file).unwrap()));
        }
    }
    files
}

/// The calls of `ONE_HOME` made outside their homes, as "file calls name".
fn homeless(files: &[(String, String)]) -> Vec<String> {
    let mut strays = Vec::new();
    for (path, text) in files {
        let called = calls(text);
        for (name, homes) in ONE_HOME {
            // A function by its path's end (`super::adaptive::observe` is `adaptive::observe`).
            let calls_it = called.iter().any(|call| call == name || call.ends_with(&format!("::{name}")));
            if calls_it && !homes.contains(&path.as_str()) {
                strays.push(format!("{path} calls {name}"));
            }
        }
    }
    strays
}

#[test]
fn each_step_of_a_request_has_one_home() {
    let files = pipeline_sources();
    assert!(files.iter().any(|(path, _)| path == "http/attempts.rs"), "the client crate's sources were read");
    let strays = homeless(&files);
    assert!(strays.is_empty(), "steps made outside their one place:\n{}", strays.join("\n"));
}

#[test]
fn the_one_home_check_sees_a_second_retry_loop() {
    let proxy = "fn forward(retry: &RetryPolicy) { let d = retry.decide(1, &o, &m, None, &mut r); }
        #[cfg(test)] mod tests { fn t() { policy.decide(1, &o, &m, None, &mut r); } }";
    let tested = "#[cfg(test)] mod tests { fn t() { adaptive::observe(l, None, 200, &i, now); } }";
    let files = [("proxy/forward.rs".to_owned(), proxy.to_owned()), ("http/mirror.rs".to_owned(), tested.to_owned())];
    assert_eq!(homeless(&files), ["proxy/forward.rs calls decide"]);
}
