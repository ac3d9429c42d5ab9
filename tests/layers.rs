//! The layers of `src/` and their one-way arrows (ARCHITECTURE.md, "Layers"): a module may use
//! modules of lower layers only, never one of its own layer or above (the few same-layer
//! arrows are listed). A wrong-way `crate::` path anywhere outside `#[cfg(test)]` fails here.

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};

/// Lowest first. Each top-level module of `src/` is in exactly one layer.
const LAYERS: &[&[&str]] = &[
    &["files", "engine", "redact"],
    &["store"],
    &["http"],
    &["mock", "telemetry"],
    &["profile"],
    &["run", "layer"],
    &["probe", "sim", "proxy"],
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

/// The modules `text` names as `crate::NAME`, outside its test module.
fn uses(text: &str) -> BTreeSet<String> {
    let code = text.split("#[cfg(test)]").next().unwrap_or_default();
    let mut found = BTreeSet::new();
    for (at, _) in code.match_indices("crate::") {
        let rest = &code[at + "crate::".len()..];
        let name: String = rest.chars().take_while(|c| c.is_ascii_alphanumeric() || *c == '_').collect();
        // `$crate::cli::...` in a macro of cli's own is cli naming itself.
        if !name.is_empty() && !code[..at].ends_with('$') {
            found.insert(name);
        }
    }
    found
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

#[test]
fn the_check_sees_a_wrong_way_use() {
    let text =
        "use crate::engine::Limiter;\nfn f() { crate::gui::run(None); }\n#[cfg(test)]\nmod tests { use crate::cli; }";
    let found = uses(text);
    assert_eq!(found, BTreeSet::from(["engine".to_owned(), "gui".to_owned()]));
    assert!(layer_of("gui") > layer_of("http"));
    assert_eq!(uses("macro_rules! m { () => { $crate::cli::UsageError } }"), BTreeSet::new());
}
