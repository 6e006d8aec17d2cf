//! The documents a newcomer reads (issue 23): README.md stays at most 15 KiB and opens with the
//! two commands (`make demo`, `make test`); every relative link in README.md, BENCHMARKS.md,
//! docs/*.md and bench/history/*.md points at a file that exists and, with a `#fragment`, at a
//! heading of that file (GitHub's anchor rules), so the reference that moved out of README stays
//! reachable. docs/flags.md's freshness is `cli::flags_doc`'s unit test.
//!
//! Reads files under `CARGO_MANIFEST_DIR` only; no binary, no sockets.

use std::fs;
use std::path::{Path, PathBuf};

/// README's size cap, in bytes (15 KiB).
const README_MAX: usize = 15 * 1024;

fn root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

fn read(path: &Path) -> String {
    fs::read_to_string(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()))
}

#[test]
fn readme_is_at_most_15_kib() {
    let len = read(&root().join("README.md")).len();
    assert!(
        len <= README_MAX,
        "README.md is {len} bytes, over {README_MAX}: move reference into docs/"
    );
}

#[test]
fn readme_opens_with_the_two_commands() {
    let readme = read(&root().join("README.md"));
    let open = readme.find("```sh\n").expect("a sh block") + "```sh\n".len();
    let block = &readme[open..open + readme[open..].find("```").expect("closed block")];
    let commands: Vec<&str> = block
        .lines()
        .map(|l| l.split('#').next().unwrap_or("").trim())
        .collect();
    assert_eq!(commands, ["make demo", "make test"], "{block}");
    assert!(
        open < 200,
        "the commands come first, before any other section"
    );
    for pkg in ["busybox-static", "shellcheck", "microsocks", "tinyproxy"] {
        assert!(readme.contains(pkg), "README says make test needs {pkg}");
    }
}

/// GitHub's anchor for a heading: lower-cased, letters, digits, `-` and `_` kept, spaces turned
/// into `-`, everything else dropped.
fn slug(heading: &str) -> String {
    heading
        .trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| match c {
            ' ' => Some('-'),
            c if c.is_alphanumeric() || c == '-' || c == '_' => Some(c),
            _ => None,
        })
        .collect()
}

/// The anchors of a markdown file's headings (outside fenced blocks), duplicates numbered as
/// GitHub numbers them (`x`, `x-1`, …).
fn anchors(text: &str) -> Vec<String> {
    let mut out: Vec<String> = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced || !line.starts_with('#') {
            continue;
        }
        let title = line.trim_start_matches('#');
        if !title.starts_with(' ') {
            continue;
        }
        let base = slug(title);
        let mut a = base.clone();
        let mut n = 0;
        while out.contains(&a) {
            n += 1;
            a = format!("{base}-{n}");
        }
        out.push(a);
    }
    out
}

/// Every `](target)` of a markdown file outside fenced blocks.
fn links(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut fenced = false;
    for line in text.lines() {
        if line.trim_start().starts_with("```") {
            fenced = !fenced;
            continue;
        }
        if fenced {
            continue;
        }
        let mut rest = line;
        while let Some(i) = rest.find("](") {
            rest = &rest[i + 2..];
            let end = rest.find(')').unwrap_or(rest.len());
            out.push(rest[..end].to_string());
            rest = &rest[end..];
        }
    }
    out
}

/// The markdown files whose links are checked.
fn documents() -> Vec<PathBuf> {
    let root = root();
    let mut files = vec![root.join("README.md"), root.join("BENCHMARKS.md")];
    for dir in ["docs", "bench/history"] {
        let mut md: Vec<PathBuf> = fs::read_dir(root.join(dir))
            .unwrap_or_else(|e| panic!("read {dir}: {e}"))
            .map(|e| e.expect("entry").path())
            .filter(|p| p.extension().is_some_and(|x| x == "md"))
            .collect();
        md.sort();
        files.extend(md);
    }
    files
}

#[test]
fn relative_links_reach_a_file_and_a_heading() {
    let mut broken = Vec::new();
    let mut checked = 0;
    for doc in documents() {
        let text = read(&doc);
        let dir = doc.parent().expect("a directory");
        for link in links(&text) {
            if link.contains("://") || link.starts_with("mailto:") {
                continue;
            }
            let (file, frag) = match link.split_once('#') {
                Some((f, a)) => (f, Some(a)),
                None => (link.as_str(), None),
            };
            let target = if file.is_empty() {
                doc.clone()
            } else {
                dir.join(file)
            };
            checked += 1;
            if !target.exists() {
                broken.push(format!("{}: {link}: no such file", doc.display()));
                continue;
            }
            if let Some(frag) = frag {
                if target.is_dir() || !anchors(&read(&target)).iter().any(|a| a == frag) {
                    broken.push(format!("{}: {link}: no such heading", doc.display()));
                }
            }
        }
    }
    assert!(
        checked > 50,
        "only {checked} links found: is the parser right?"
    );
    assert!(broken.is_empty(), "broken links:\n{}", broken.join("\n"));
}

#[test]
fn anchors_follow_githubs_rules() {
    assert_eq!(slug(" Fake-TLS (`ee`)"), "fake-tls-ee");
    assert_eq!(
        slug(" Event stream (`TG_EVENTS`)"),
        "event-stream-tg_events"
    );
    assert_eq!(
        anchors("# A\n```\n# not a heading\n```\n## A\n#hashtag\n"),
        ["a", "a-1"]
    );
    assert_eq!(
        links("see [x](a.md#b) and [y](#c)\n```\n[z](d)\n```"),
        ["a.md#b", "#c"]
    );
}
