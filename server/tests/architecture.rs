//! The shape of the server's source, checked: the controllers live in wings, the wings import
//! each other without a circle, and nothing in `controllers/` or `simulation/` reaches up into
//! the API layer. Reads the source files as text (the code outside each file's test module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const WINGS: &[&str] = &["runtime", "shared", "propagation", "members", "failover"];
/// The files that may sit directly in `controllers/`.
const TOP_LEVEL: &[&str] = &["mod.rs", "settings.rs", "wiring.rs", "context.rs"];

fn src() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("src")
}

fn rust_files(dir: &Path) -> Vec<PathBuf> {
    let mut out = Vec::new();
    let mut dirs = vec![dir.to_path_buf()];
    while let Some(d) = dirs.pop() {
        for entry in std::fs::read_dir(&d).expect("source folder is readable") {
            let path = entry.expect("source entry is readable").path();
            if path.is_dir() {
                dirs.push(path);
            } else if path.extension().is_some_and(|e| e == "rs") {
                out.push(path);
            }
        }
    }
    out.sort();
    out
}

/// A file's code before its `#[cfg(test)] mod tests` (tests may wire anything together),
/// without its comments; nothing of a `tests.rs`, a test module in a file of its own.
fn production_code(path: &Path) -> String {
    if path.file_name().is_some_and(|n| n == "tests.rs") {
        return String::new();
    }
    let text = std::fs::read_to_string(path).expect("source file is readable");
    let code = match text.find("#[cfg(test)]\nmod tests") {
        Some(i) => &text[..i],
        None => &text,
    };
    code.lines()
        .filter(|l| !l.trim_start().starts_with("//"))
        .collect::<Vec<_>>()
        .join("\n")
}

/// The wing a file under `controllers/` belongs to (`None` for the top-level files).
fn wing_of(path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src().join("controllers")).ok()?;
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?.to_string();
    parts.next().map(|_| first)
}

/// The wings a piece of code names through `crate::controllers::<wing>`.
fn wings_named(code: &str) -> BTreeSet<String> {
    WINGS
        .iter()
        .filter(|w| code.contains(&format!("crate::controllers::{w}")))
        .map(|w| w.to_string())
        .collect()
}

#[test]
fn controllers_has_only_the_list_its_settings_wiring_and_context_at_its_top() {
    let dir = src().join("controllers");
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("controllers/ is readable") {
        let path = entry.expect("entry is readable").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            assert!(
                WINGS.contains(&name),
                "controllers/{name}/ is no wing: {WINGS:?}"
            );
            assert!(
                path.join("mod.rs").exists(),
                "controllers/{name}/ has no mod.rs"
            );
        } else {
            files.push(name.to_string());
        }
    }
    for f in &files {
        assert!(
            TOP_LEVEL.contains(&f.as_str()),
            "controllers/{f} belongs in a wing"
        );
    }
}

#[test]
fn every_wing_says_what_it_owns() {
    for wing in WINGS {
        let text = std::fs::read_to_string(src().join("controllers").join(wing).join("mod.rs"))
            .expect("wing mod.rs is readable");
        assert!(
            text.starts_with("//! "),
            "controllers/{wing}/mod.rs opens with no doc comment"
        );
    }
}

#[test]
fn the_wings_import_each_other_without_a_circle() {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(&src().join("controllers")) {
        let Some(wing) = wing_of(&path) else { continue };
        // The test world is built out of every part; only tests use it.
        if path.ends_with("runtime/testing.rs") {
            continue;
        }
        let named = wings_named(&production_code(&path));
        let entry = edges.entry(wing.clone()).or_default();
        entry.extend(named.into_iter().filter(|w| *w != wing));
    }
    // Depth-first search for a back edge.
    fn visit(
        w: &str,
        edges: &BTreeMap<String, BTreeSet<String>>,
        path: &mut Vec<String>,
        done: &mut BTreeSet<String>,
    ) {
        if done.contains(w) {
            return;
        }
        if let Some(i) = path.iter().position(|p| p == w) {
            panic!(
                "the wings import in a circle: {} -> {w}",
                path[i..].join(" -> ")
            );
        }
        path.push(w.to_string());
        for next in edges.get(w).into_iter().flatten() {
            visit(next, edges, path, done);
        }
        path.pop();
        done.insert(w.to_string());
    }
    let mut done = BTreeSet::new();
    for w in edges.keys() {
        visit(w, &edges, &mut Vec::new(), &mut done);
    }
    // The runtime and the shared helpers are the floor every wing stands on.
    for low in ["runtime", "shared"] {
        for high in ["propagation", "members", "failover"] {
            assert!(
                !edges.get(low).is_some_and(|e| e.contains(high)),
                "{low} imports {high}: {edges:?}"
            );
        }
    }
}

#[test]
fn nothing_below_the_api_imports_it() {
    for dir in [
        "controllers",
        "simulation",
        "scheduler",
        "store",
        "probes",
        "interpreter",
    ] {
        for path in rust_files(&src().join(dir)) {
            let code = production_code(&path);
            assert!(
                !code.contains("crate::api::") && !code.contains("use crate::api"),
                "{} imports the API layer",
                path.display()
            );
        }
    }
    for path in rust_files(&src().join("probes")) {
        assert!(
            !production_code(&path).contains("crate::controllers"),
            "{} imports the controllers",
            path.display()
        );
    }
}
