//! docs/architecture.md lists every module under `src/`: this test walks the tree (from
//! `CARGO_MANIFEST_DIR`) and fails, naming each one, when a module is missing from the page or
//! the page names a module file that no longer exists.
//!
//! A module's entry is its path in backticks: `src/x/` for a directory module (`src/x/mod.rs`),
//! `src/x/y.rs` for a file module. Test-only files (`tests.rs`, `*_tests.rs`, `tests_*.rs`,
//! anything under a `tests/` directory) belong to the module beside them and need no entry.

use std::fs;
use std::path::{Path, PathBuf};

/// Page entries (`src/...` in backticks) for every non-test module file under `dir`.
fn modules(root: &Path, dir: &Path, out: &mut Vec<String>) {
    let mut entries: Vec<PathBuf> = fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("read {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").path())
        .collect();
    entries.sort();
    for path in entries {
        let name = path.file_name().and_then(|n| n.to_str()).unwrap_or("");
        if path.is_dir() {
            if name != "tests" {
                modules(root, &path, out);
            }
            continue;
        }
        let Some(stem) = name.strip_suffix(".rs") else {
            continue;
        };
        if stem == "tests" || stem.ends_with("_tests") || stem.starts_with("tests_") {
            continue;
        }
        let rel = path
            .strip_prefix(root)
            .expect("under the manifest dir")
            .to_string_lossy()
            .replace('\\', "/");
        out.push(match rel.strip_suffix("mod.rs") {
            Some(dir) => dir.to_string(),
            None => rel,
        });
    }
}

fn page() -> String {
    let path = Path::new(env!("CARGO_MANIFEST_DIR")).join("docs/architecture.md");
    fs::read_to_string(&path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn every_module_under_src_is_on_the_architecture_page() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut found = Vec::new();
    modules(root, &root.join("src"), &mut found);
    assert!(found.len() > 50, "walked too few modules: {found:?}");
    let page = page();
    let missing: Vec<&String> = found
        .iter()
        .filter(|m| !page.contains(&format!("`{m}`")))
        .collect();
    assert!(
        missing.is_empty(),
        "docs/architecture.md has no entry for {} module(s); add a table row (the path in \
         backticks | its job | who may call it) for each of:\n{}",
        missing.len(),
        missing
            .iter()
            .map(|m| format!("  `{m}`"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}

#[test]
fn every_module_on_the_architecture_page_exists() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let page = page();
    let gone: Vec<&str> = page
        .split('`')
        .skip(1)
        .step_by(2)
        .filter(|s| {
            s.len() > 4 && s.starts_with("src/") && (s.ends_with(".rs") || s.ends_with('/'))
        })
        .filter(|s| {
            let p = root.join(s);
            if s.ends_with('/') {
                !p.join("mod.rs").is_file()
            } else {
                !p.is_file()
            }
        })
        .collect();
    assert!(
        gone.is_empty(),
        "docs/architecture.md names module(s) that are not under src/ any more (remove or \
         rename the row):\n{}",
        gone.iter()
            .map(|m| format!("  `{m}`"))
            .collect::<Vec<_>>()
            .join("\n")
    );
}
