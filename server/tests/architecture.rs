//! The shape of the server's source, checked: the controllers and the API live in wings, the
//! wings of each import each other without a circle, the API's floor wings (`access`, `http`)
//! import no other, the API reads the controllers' brake only through its read-only face, and
//! nothing in `controllers/` or `simulation/` reaches up into the API layer. Reads the source
//! files as text (the code outside each file's test module).

use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

const WINGS: &[&str] = &["runtime", "shared", "propagation", "members", "failover"];
/// The files that may sit directly in `controllers/`.
const TOP_LEVEL: &[&str] = &["mod.rs", "settings.rs", "wiring.rs", "context.rs"];
/// The API's wings, from the floor up.
const API_WINGS: &[&str] = &[
    "access", "http", "wire", "write", "computed", "ui", "routes",
];
/// The API's wings that import no other: who asks, and the envelope of a request.
const API_FLOOR: &[&str] = &["access", "http"];
/// The files that may sit directly in `api/`: its state and router list, and its error type.
const API_TOP_LEVEL: &[&str] = &["mod.rs", "error.rs"];

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

/// The wing a file under `<room>/` belongs to (`None` for the room's top-level files).
fn wing_of(room: &str, path: &Path) -> Option<String> {
    let rel = path.strip_prefix(src().join(room)).ok()?;
    let mut parts = rel.components();
    let first = parts.next()?.as_os_str().to_str()?.to_string();
    parts.next().map(|_| first)
}

/// The wings of `room` a piece of code names through `crate::<room>::<wing>`.
fn wings_named(room: &str, wings: &[&str], code: &str) -> BTreeSet<String> {
    wings
        .iter()
        .filter(|w| {
            code.contains(&format!("crate::{room}::{w}::"))
                || code.contains(&format!("crate::{room}::{w};"))
        })
        .map(|w| w.to_string())
        .collect()
}

/// Which wings of `room` each wing's production code imports (itself left out).
fn wing_edges(room: &str, wings: &[&str]) -> BTreeMap<String, BTreeSet<String>> {
    let mut edges: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for path in rust_files(&src().join(room)) {
        let Some(wing) = wing_of(room, &path) else {
            continue;
        };
        // The test world is built out of every part; only tests use it.
        if path.ends_with("runtime/testing.rs") {
            continue;
        }
        let code = production_code(&path);
        assert!(
            !code.contains("super::super"),
            "{} reaches out of its wing with super::super; name the wing",
            path.display()
        );
        assert!(
            !code.contains(&format!("crate::{room}::{{")),
            "{} imports several of {room}'s wings in one brace; name each on its own line",
            path.display()
        );
        let named = wings_named(room, wings, &code);
        let entry = edges.entry(wing.clone()).or_default();
        entry.extend(named.into_iter().filter(|w| *w != wing));
    }
    edges
}

/// Panics with the circle if the wings import in one.
fn assert_no_circle(edges: &BTreeMap<String, BTreeSet<String>>) {
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
        visit(w, edges, &mut Vec::new(), &mut done);
    }
}

/// Every folder of `room` is one of `wings`, with a `mod.rs`; every file directly in `room` is
/// one of `top_level`.
fn assert_room_in_wings(room: &str, wings: &[&str], top_level: &[&str]) {
    for entry in std::fs::read_dir(src().join(room)).expect("the room is readable") {
        let path = entry.expect("entry is readable").path();
        let name = path
            .file_name()
            .and_then(|n| n.to_str())
            .unwrap_or_default();
        if path.is_dir() {
            assert!(
                wings.contains(&name),
                "{room}/{name}/ is no wing: {wings:?}"
            );
            assert!(path.join("mod.rs").exists(), "{room}/{name}/ has no mod.rs");
        } else {
            assert!(
                top_level.contains(&name),
                "{room}/{name} belongs in a wing: {wings:?}"
            );
        }
    }
}

#[test]
fn controllers_has_only_the_list_its_settings_wiring_and_context_at_its_top() {
    assert_room_in_wings("controllers", WINGS, TOP_LEVEL);
}

#[test]
fn every_wing_says_what_it_owns() {
    for (room, wings) in [("controllers", WINGS), ("api", API_WINGS)] {
        for wing in wings {
            let text = std::fs::read_to_string(src().join(room).join(wing).join("mod.rs"))
                .expect("wing mod.rs is readable");
            assert!(
                text.starts_with("//! "),
                "{room}/{wing}/mod.rs opens with no doc comment"
            );
        }
    }
}

#[test]
fn the_wings_import_each_other_without_a_circle() {
    let edges = wing_edges("controllers", WINGS);
    assert_no_circle(&edges);
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
fn the_api_has_only_its_state_and_error_at_its_top() {
    assert_room_in_wings("api", API_WINGS, API_TOP_LEVEL);
}

#[test]
fn the_api_wings_import_each_other_without_a_circle_and_the_floor_imports_none() {
    let edges = wing_edges("api", API_WINGS);
    assert_no_circle(&edges);
    for floor in API_FLOOR {
        let named = edges.get(*floor).cloned().unwrap_or_default();
        assert!(named.is_empty(), "api/{floor} imports the wings {named:?}");
    }
    // The one error type stands beneath every wing.
    let error = production_code(&src().join("api").join("error.rs"));
    let named = wings_named("api", API_WINGS, &error);
    assert!(named.is_empty(), "api/error.rs imports the wings {named:?}");
}

#[test]
fn the_api_reads_the_brake_only_through_its_read_only_face() {
    for path in rust_files(&src().join("api")) {
        let code = production_code(&path);
        assert!(
            !code.contains("failover::brake::"),
            "{} reaches into the controllers' live brake; read it through \
             controllers::failover::brake_reading",
            path.display()
        );
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
