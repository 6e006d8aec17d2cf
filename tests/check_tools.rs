//! Black-box tests of `.ci/check-tools` (issue 23 §7 "Tests start in seconds"): `make test`
//! checks the host tools the black-box tests run before anything compiles, and when one is
//! missing it stops within seconds naming the tool, its Debian package and the one
//! `apt-get install` line. The script runs under `/bin/sh` with a crafted `PATH` (a directory of
//! stand-ins: only presence is checked) and `TG_BUSYBOX` pointing where busybox-static's
//! binary is expected.
//!
//! Owns only this file. Nothing is installed, nothing leaves the machine.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

/// Every tool the script looks for on PATH.
const TOOLS: &[&str] = &[
    "openssl",
    "busybox",
    "shellcheck",
    "microsocks",
    "tinyproxy",
    "curl",
    "nft",
    "ip",
    "unshare",
];

/// A tool of the host (for stand-ins and `ldd`), found on the usual directories.
fn host_tool(name: &str) -> PathBuf {
    ["/usr/bin", "/bin", "/usr/sbin", "/sbin"]
        .iter()
        .map(|d| Path::new(d).join(name))
        .find(|p| p.is_file())
        .unwrap_or_else(|| panic!("{name} not found on this host"))
}

/// A directory of stand-ins for `TOOLS` minus `without`, plus `extra` host tools.
fn path_without(tag: &str, without: &[&str], extra: &[&str]) -> PathBuf {
    let dir = common::temp_dir().join(tag);
    std::fs::create_dir_all(&dir).unwrap();
    let stand_in = host_tool("true");
    for t in TOOLS.iter().filter(|t| !without.contains(t)) {
        std::os::unix::fs::symlink(&stand_in, dir.join(t)).unwrap();
    }
    for t in extra {
        std::os::unix::fs::symlink(host_tool(t), dir.join(t)).unwrap();
    }
    dir
}

/// Runs the script with `PATH=path` and `TG_BUSYBOX=busybox`; returns its output and time.
fn check(path: &Path, busybox: &Path) -> (Output, Duration) {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/check-tools");
    let t0 = Instant::now();
    let out = Command::new("/bin/sh")
        .arg(&script)
        .env_clear()
        .env("PATH", path)
        .env("TG_BUSYBOX", busybox)
        .output()
        .expect("run .ci/check-tools");
    (out, t0.elapsed())
}

/// The `apt-get install` lines of `stderr`, and the packages of the only one.
fn install_line(stderr: &str) -> Vec<String> {
    let lines: Vec<&str> = stderr
        .lines()
        .filter(|l| l.contains("apt-get install"))
        .collect();
    assert_eq!(lines.len(), 1, "not exactly one apt-get line:\n{stderr}");
    lines[0]
        .split_whitespace()
        .skip_while(|w| *w != "install")
        .skip(1)
        .filter(|w| !w.starts_with('-'))
        .map(str::to_string)
        .collect()
}

/// Every tool there: silent, exit 0.
#[test]
fn all_tools_present_passes_silently() {
    let dir = path_without("all", &[], &[]);
    let (out, took) = check(&dir, &dir.join("busybox"));
    assert_eq!(out.status.code(), Some(0), "{out:?}");
    assert!(out.stdout.is_empty() && out.stderr.is_empty(), "{out:?}");
    assert!(took < Duration::from_secs(5), "took {took:?}");
}

/// Issue 23: `make test` compiled for 17 min, then failed because shellcheck was missing and
/// named the wrong test. Now the check stops at once: the tool, its package, and one
/// `apt-get install` line with exactly the missing packages; exit 1.
#[test]
fn a_missing_tool_is_named_with_the_one_apt_get_line() {
    for (tool, package) in [
        ("shellcheck", "shellcheck"),
        ("microsocks", "microsocks"),
        ("nft", "nftables"),
        ("ip", "iproute2"),
        ("openssl", "openssl"),
    ] {
        let dir = path_without(&format!("no-{tool}"), &[tool], &[]);
        let (out, took) = check(&dir, &dir.join("busybox"));
        let err = String::from_utf8_lossy(&out.stderr);
        assert_eq!(out.status.code(), Some(1), "{tool}: {err}");
        assert!(took < Duration::from_secs(5), "took {took:?}");
        assert!(
            err.lines().any(|l| l
                .trim_start()
                .starts_with(&format!("{tool} (package {package})"))),
            "{tool} not named with its package:\n{err}"
        );
        assert_eq!(install_line(&err), vec![package.to_string()], "{err}");
    }
}

/// Several missing, busybox-static's binary among them: each named, each package once, all on
/// the one line.
#[test]
fn several_missing_tools_share_one_apt_get_line() {
    let dir = path_without("several", &["busybox", "tinyproxy", "curl"], &[]);
    let (out, _) = check(&dir, &dir.join("no-such-busybox"));
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert_eq!(
        install_line(&err),
        vec!["busybox-static", "tinyproxy", "curl"],
        "{err}"
    );
    assert!(
        err.contains("no-such-busybox (package busybox-static)"),
        "{err}"
    );
}

/// Debian's dynamic `busybox` at /bin/busybox is not busybox-static: tests copy it into a
/// chroot. With `ldd` on PATH, a dynamically linked binary there is named.
#[test]
fn a_dynamic_busybox_asks_for_busybox_static() {
    let dir = path_without("dynamic", &[], &["ldd"]);
    // Any dynamically linked host program stands in for a dynamic busybox.
    let dynamic = host_tool("ls");
    let (out, _) = check(&dir, &dynamic);
    let err = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{err}");
    assert!(err.contains("a dynamic build"), "{err}");
    assert_eq!(install_line(&err), vec!["busybox-static"], "{err}");
}

/// `make test` (README's test command) runs the check before cargo, and `.ci/run` runs it
/// after installing the packages.
#[test]
fn make_test_and_ci_run_the_check_first() {
    let root = Path::new(env!("CARGO_MANIFEST_DIR"));
    let make = std::fs::read_to_string(root.join("Makefile")).unwrap();
    assert!(
        make.lines().any(|l| l.trim() == "test: check-tools"),
        "Makefile's test target does not depend on check-tools"
    );
    assert!(make.contains("\t.ci/check-tools"), "no check-tools recipe");
    let readme = std::fs::read_to_string(root.join("README.md")).unwrap();
    assert!(readme.contains("make test"), "README's test command moved");
    let ci = std::fs::read_to_string(root.join(".ci/run")).unwrap();
    let (check, test) = (
        ci.find("\n.ci/check-tools")
            .expect(".ci/run runs .ci/check-tools"),
        ci.find("\nmake test").expect(".ci/run runs make test"),
    );
    assert!(check < test, ".ci/run checks the tools after the tests");
}

/// The script itself is shellcheck-clean (as the packaging scripts are).
#[test]
fn check_tools_is_shellcheck_clean() {
    let script = Path::new(env!("CARGO_MANIFEST_DIR")).join(".ci/check-tools");
    let out = Command::new("shellcheck")
        .arg(&script)
        .output()
        .unwrap_or_else(|e| {
            panic!("shellcheck: {e} (apt-get install shellcheck; .ci/run installs it)")
        });
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stdout)
    );
}
