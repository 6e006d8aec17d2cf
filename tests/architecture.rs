//! docs/architecture.md lists every module under `src/`: this test walks the tree (from
//! `CARGO_MANIFEST_DIR`) and fails, naming each one, when a module is missing from the page or
//! the page names a module file that no longer exists.
//!
//! A module's entry is its path in backticks: `src/x/` for a directory module (`src/x/mod.rs`),
//! `src/x/y.rs` for a file module. Test-only files (`tests.rs`, `*_tests.rs`, `tests_*.rs`,
//! anything under a `tests/` directory) belong to the module beside them and need no entry.
//!
//! The page's layer diagram (its first code block: groups of top-level modules joined by `→`)
//! is checked too: the module tree is read from `src/lib.rs` down (`mod` declarations, with
//! `#[path]`), every `crate::…`, `super::…` and `use` path outside comments, strings and
//! `#[cfg(test)]` items is an import, and the test fails naming each import of a higher layer
//! and each import circle, between top-level modules or between the children of one module.

use std::collections::{BTreeMap, BTreeSet};
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

/// `text` without comments, with every string and char literal emptied (`""`, `' '`).
fn code_only(text: &str) -> String {
    let b = text.as_bytes();
    let at = |i: usize, s: &str| b[i..].starts_with(s.as_bytes());
    let mut out = Vec::with_capacity(b.len());
    let mut i = 0;
    while i < b.len() {
        let word_before = i > 0 && (b[i - 1].is_ascii_alphanumeric() || b[i - 1] == b'_');
        if at(i, "//") {
            i = b[i..]
                .iter()
                .position(|&c| c == b'\n')
                .map_or(b.len(), |e| i + e);
        } else if at(i, "/*") {
            i = text[i..].find("*/").map_or(b.len(), |e| i + e + 2);
        } else if b[i] == b'"' || (!word_before && (at(i, "r\"") || at(i, "r#\""))) {
            let raw = b[i] == b'r';
            let hashes = b[i + usize::from(raw)..]
                .iter()
                .take_while(|&&c| c == b'#')
                .count();
            let close = format!("\"{}", "#".repeat(hashes));
            let mut j = i + usize::from(raw) + hashes + 1;
            while j < b.len() && !at(j, &close) {
                j += if !raw && b[j] == b'\\' { 2 } else { 1 };
            }
            i = (j + close.len()).min(b.len());
            out.extend_from_slice(b"\"\"");
        } else if b[i] == b'\'' {
            // A char literal ('x', '\n', '\u{1F600}', 'é'); a lifetime ('a) has no closing quote.
            let body = &b[i + 1..];
            let len = if body.first() == Some(&b'\\') {
                body.iter().skip(1).position(|&c| c == b'\'').map(|e| e + 1)
            } else {
                let n = text[i + 1..].chars().next().map_or(1, char::len_utf8);
                (body.get(n) == Some(&b'\'')).then_some(n)
            };
            match len {
                Some(n) => {
                    i += n + 2;
                    out.extend_from_slice(b"' '");
                }
                None => {
                    out.push(b'\'');
                    i += 1;
                }
            }
        } else {
            out.push(b[i]);
            i += 1;
        }
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// `code` without `#[cfg(test)]` items (a block to its closing brace, or a line to its `;`).
fn without_tests(code: &str) -> String {
    let mut out = String::new();
    let mut rest = code;
    while let Some(at) = rest.find("#[cfg(test)]") {
        out.push_str(&rest[..at]);
        let item = &rest[at..];
        let end = match item.find(['{', ';']) {
            Some(open) if item.as_bytes()[open] == b'{' => {
                let mut depth = 0;
                let mut end = item.len();
                for (k, c) in item[open..].char_indices() {
                    match c {
                        '{' => depth += 1,
                        '}' => {
                            depth -= 1;
                            if depth == 0 {
                                end = open + k + 1;
                                break;
                            }
                        }
                        _ => {}
                    }
                }
                end
            }
            Some(semi) => semi + 1,
            None => item.len(),
        };
        rest = &item[end..];
    }
    out.push_str(rest);
    out
}

type ModPath = Vec<String>;

/// The name a `mod NAME;` line declares (any visibility), if it is one.
fn mod_decl(line: &str) -> Option<&str> {
    let decl = match line.strip_prefix("pub") {
        Some(r) if r.starts_with(' ') => r.trim_start(),
        Some(r) if r.starts_with('(') => r.split_once(')')?.1.trim_start(),
        _ => line,
    };
    decl.strip_prefix("mod ")?.strip_suffix(';').map(str::trim)
}

/// Every module of the crate (path from the root → its code, tests cut), from `src/lib.rs` down.
fn module_tree() -> BTreeMap<ModPath, String> {
    fn load(path: ModPath, file: &Path, dir: &Path, out: &mut BTreeMap<ModPath, String>) {
        let raw =
            fs::read_to_string(file).unwrap_or_else(|e| panic!("read {}: {e}", file.display()));
        let code = without_tests(&code_only(&raw));
        // `mod` name → its `#[path = "..."]` value (the literal is emptied in `code`).
        let mut at_path: BTreeMap<String, String> = BTreeMap::new();
        let mut pending = None;
        for line in raw.lines().map(str::trim) {
            if let Some(v) = line.strip_prefix("#[path = \"") {
                pending = v.split('"').next().map(str::to_string);
            } else if let Some(name) = mod_decl(line) {
                if let Some(v) = pending.take() {
                    at_path.insert(name.to_string(), v);
                }
            } else if !line.starts_with("#[") {
                pending = None;
            }
        }
        for name in code.lines().filter_map(|l| mod_decl(l.trim())) {
            let mut child_path = path.clone();
            child_path.push(name.to_string());
            let child = match at_path.get(name) {
                Some(v) => file.parent().expect("a parent dir").join(v),
                None if dir.join(format!("{name}.rs")).is_file() => dir.join(format!("{name}.rs")),
                None => dir.join(name).join("mod.rs"),
            };
            // A `mod.rs` file, or one named by `#[path]`, has its children beside it.
            let child_dir = if child.ends_with("mod.rs") || at_path.contains_key(name) {
                child.parent().expect("a parent dir").to_path_buf()
            } else {
                child.with_extension("")
            };
            load(child_path, &child, &child_dir, out);
        }
        out.insert(path, code);
    }
    let src = Path::new(env!("CARGO_MANIFEST_DIR")).join("src");
    let mut out = BTreeMap::new();
    load(Vec::new(), &src.join("lib.rs"), &src, &mut out);
    out
}

/// Paths (segments) a `use` tree names: `a::{b, c::{d}}` → `a::b`, `a::c::d`.
fn use_paths(tree: &str) -> Vec<Vec<String>> {
    fn walk(s: &[u8], i: &mut usize, prefix: &[String], out: &mut Vec<Vec<String>>) {
        let mut seg = String::new();
        while *i < s.len() {
            match s[*i] {
                b'{' => {
                    *i += 1;
                    let mut base = prefix.to_vec();
                    base.extend(
                        seg.split("::")
                            .filter(|x| !x.is_empty())
                            .map(str::to_string),
                    );
                    loop {
                        walk(s, i, &base, out);
                        match s.get(*i) {
                            Some(b',') => *i += 1,
                            Some(b'}') => {
                                *i += 1;
                                return;
                            }
                            _ => return,
                        }
                    }
                }
                b',' | b'}' => break,
                c => {
                    seg.push(char::from(c));
                    *i += 1;
                }
            }
        }
        let mut p = prefix.to_vec();
        p.extend(
            seg.split("::")
                .filter(|x| !x.is_empty())
                .map(|x| x.split(" as ").next().unwrap_or(x).to_string()),
        );
        if !p.is_empty() {
            out.push(p);
        }
    }
    let flat: String = tree.split_whitespace().collect::<Vec<_>>().join(" ");
    let flat = flat
        .replace(" :: ", "::")
        .replace(":: ", "::")
        .replace(" ::", "::")
        .replace(", ", ",")
        .replace("{ ", "{")
        .replace(" }", "}");
    let mut out = Vec::new();
    walk(flat.as_bytes(), &mut 0, &[], &mut out);
    out
}

/// The module a `crate::`/`super::`/`self::` path names, seen from module `at`.
fn resolve(at: &[String], path: &[String], modules: &BTreeMap<ModPath, String>) -> Option<ModPath> {
    let (mut full, rest): (ModPath, &[String]) = match path.first()?.as_str() {
        "crate" => (Vec::new(), &path[1..]),
        "super" | "self" => {
            let mut base = at.to_vec();
            let mut k = 0;
            while let Some(s) = path.get(k).filter(|s| *s == "super" || *s == "self") {
                if s == "super" {
                    base.pop();
                }
                k += 1;
            }
            (base, &path[k..])
        }
        _ => return None,
    };
    full.extend(rest.iter().cloned());
    (0..=full.len())
        .rev()
        .map(|k| full[..k].to_vec())
        .find(|p| modules.contains_key(p))
}

/// Module → the modules its non-test code imports.
fn imports(modules: &BTreeMap<ModPath, String>) -> BTreeMap<ModPath, BTreeSet<ModPath>> {
    let mut graph = BTreeMap::new();
    for (at, code) in modules {
        let mut to = BTreeSet::new();
        let mut add = |p: Vec<String>| {
            if let Some(m) = resolve(at, &p, modules) {
                to.insert(m);
            }
        };
        let b = code.as_bytes();
        let starts_word =
            |k: usize| k == 0 || !(b[k - 1].is_ascii_alphanumeric() || b[k - 1] == b'_');
        for (k, _) in code.match_indices("use ").filter(|(k, _)| starts_word(*k)) {
            if let Some(tree) = code[k + 4..].split(';').next() {
                use_paths(tree).into_iter().for_each(&mut add);
            }
        }
        for kw in ["crate::", "super::", "self::"] {
            for (k, _) in code.match_indices(kw) {
                if !starts_word(k) || (k > 0 && b[k - 1] == b':') {
                    continue;
                }
                let end = code[k..]
                    .find(|c: char| !(c.is_ascii_alphanumeric() || c == '_' || c == ':'))
                    .map_or(code.len(), |e| k + e);
                add(code[k..end]
                    .split("::")
                    .filter(|s| !s.is_empty())
                    .map(str::to_string)
                    .collect());
            }
        }
        graph.insert(at.clone(), to);
    }
    graph
}

/// Circles in `graph`: each strongly connected set of more than one node.
fn circles(graph: &BTreeMap<String, BTreeSet<String>>) -> Vec<BTreeSet<String>> {
    let reach = |from: &String| {
        let mut seen = BTreeSet::new();
        let mut todo = vec![from.clone()];
        while let Some(n) = todo.pop() {
            for m in graph.get(&n).into_iter().flatten() {
                if seen.insert(m.clone()) {
                    todo.push(m.clone());
                }
            }
        }
        seen
    };
    let reached: BTreeMap<&String, BTreeSet<String>> =
        graph.keys().map(|n| (n, reach(n))).collect();
    let mut out: Vec<BTreeSet<String>> = Vec::new();
    for (n, r) in &reached {
        let set: BTreeSet<String> = r
            .iter()
            .filter(|m| reached.get(m).is_some_and(|b| b.contains(*n)))
            .cloned()
            .collect();
        if set.len() > 1 && !out.contains(&set) {
            out.push(set);
        }
    }
    out
}

/// The layers of the page's diagram, lowest first.
fn layers(page: &str) -> Vec<Vec<String>> {
    let block = page
        .split("```")
        .nth(1)
        .expect("docs/architecture.md has a layer diagram");
    block
        .split('→')
        .map(|l| {
            l.split(',')
                .map(|m| m.split_whitespace().next().unwrap_or("").to_string())
                .filter(|m| !m.is_empty())
                .collect()
        })
        .collect()
}

#[test]
fn no_module_imports_a_higher_layer_or_its_own_importer() {
    let modules = module_tree();
    assert!(
        modules.len() > 50,
        "read too few modules: {}",
        modules.len()
    );
    let graph = imports(&modules);
    let name = |p: &[String]| p.join("::");
    let mut problems = Vec::new();

    // Layers: every top-level module is in the diagram; no import of a higher layer.
    let layers = layers(&page());
    let layer_of = |m: &str| layers.iter().position(|l| l.iter().any(|x| x == m));
    let mut top: BTreeMap<String, BTreeSet<String>> = BTreeMap::new();
    for (from, tos) in &graph {
        let Some(a) = from.first() else { continue };
        if layer_of(a).is_none() {
            problems.push(format!(
                "top-level module `{a}` is not in the layer diagram"
            ));
        }
        for to in tos {
            let Some(b) = to.first().filter(|b| *b != a) else {
                continue;
            };
            top.entry(a.clone()).or_default().insert(b.clone());
            if let (Some(la), Some(lb)) = (layer_of(a), layer_of(b)) {
                if lb > la {
                    problems.push(format!(
                        "`{}` imports `{}`, a higher layer",
                        name(from),
                        name(to)
                    ));
                }
            }
        }
    }
    problems.sort();
    problems.dedup();

    // Circles between top-level modules, and between the children of each module.
    for c in circles(&top) {
        problems.push(format!("import circle between top-level modules: {c:?}"));
    }
    let mut siblings: BTreeMap<ModPath, BTreeMap<String, BTreeSet<String>>> = BTreeMap::new();
    for (from, tos) in &graph {
        for to in tos {
            let common = from.iter().zip(to).take_while(|(x, y)| x == y).count();
            if common == 0 || common >= from.len() || common >= to.len() {
                continue; // different top-level modules (above), or a module and its ancestor
            }
            siblings
                .entry(from[..common].to_vec())
                .or_default()
                .entry(from[common].clone())
                .or_default()
                .insert(to[common].clone());
        }
    }
    for (parent, g) in &siblings {
        for c in circles(g) {
            problems.push(format!(
                "import circle between children of `{}`: {c:?}",
                name(parent)
            ));
        }
    }
    assert!(
        problems.is_empty(),
        "the layering on docs/architecture.md does not hold (move the shared item down to a \
         module both sides may import):\n  {}",
        problems.join("\n  ")
    );
}

#[test]
fn the_import_reader_sees_use_trees_and_paths() {
    let got = use_paths("crate::{a::b, c::{d, e as f}}, self");
    let want: Vec<Vec<String>> = [
        &["crate", "a", "b"][..],
        &["crate", "c", "d"],
        &["crate", "c", "e"],
    ]
    .iter()
    .map(|p| p.iter().map(|s| s.to_string()).collect())
    .collect();
    assert_eq!(got[..3], want[..]);
    let code =
        code_only("use crate::x; // crate::y\nlet s = \"crate::z\"; let c = '\"';\n/* crate::w */");
    assert!(
        code.contains("crate::x")
            && !code.contains("crate::y")
            && !code.contains("crate::z")
            && !code.contains("crate::w"),
        "{code}"
    );
    let cut = without_tests(
        "fn a() {}\n#[cfg(test)]\nmod tests { use crate::q; fn b() { {} } }\nfn c() {}",
    );
    assert!(!cut.contains("crate::q") && cut.contains("fn c()"), "{cut}");
    let g: BTreeMap<String, BTreeSet<String>> = [("a", "b"), ("b", "c"), ("c", "a"), ("c", "d")]
        .iter()
        .fold(BTreeMap::new(), |mut g, (x, y)| {
            g.entry(x.to_string())
                .or_insert_with(BTreeSet::new)
                .insert(y.to_string());
            g
        });
    assert_eq!(
        circles(&g),
        vec![["a", "b", "c"]
            .iter()
            .map(|s| s.to_string())
            .collect::<BTreeSet<_>>()]
    );
}
