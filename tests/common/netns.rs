//! Network faults that need the kernel, for black-box tests: a test re-runs itself inside a new
//! user and network namespace (`unshare -rn`) whose only interface is a loopback with an MTU of
//! 1500 (realistic segments, so byte counters cut where a router's would) and nftables rules of
//! the test's own. Nothing can leave such a namespace: it has no other interface and no route.
//!
//! ```ignore
//! #[test]
//! fn a_test() {
//!     if !netns::enter("a_test") { return; } // the outer run checked the inner one
//!     // … in the namespace from here on: start the peers, then netns::nft(&rules) …
//! }
//! ```
//! Needs `unshare` (util-linux), `ip` (iproute2) and `nft` (nftables): CI installs them. Only
//! where unprivileged namespaces are refused is the test skipped, with a loud line.
#![allow(dead_code)]

use std::process::{Command, Stdio};

/// The variable that tells the re-run it is the inner one (its value: the test's name).
const INNER: &str = "TG_TEST_IN_NETNS";

/// True inside the namespace (the caller goes on with the test; loopback is up, conntrack
/// counts bytes); false in the outer run, after the inner run passed (it panics with the inner
/// output otherwise) or was skipped loudly. `test` is the test function's name.
pub fn enter(test: &str) -> bool {
    if std::env::var(INNER).is_ok_and(|v| v == test) {
        run("ip", &["link", "set", "lo", "mtu", "1500", "up"], None);
        std::fs::write("/proc/sys/net/netfilter/nf_conntrack_acct", "1")
            .expect("switch conntrack byte accounting on in the namespace");
        return true;
    }
    if let Some(why) = refused() {
        eprintln!(
            "\n*** NOTE: {test} SKIPPED: `unshare -rn` is refused on this machine ({why}); \
             it checks nothing here. ***\n"
        );
        return false;
    }
    let exe = std::env::current_exe().expect("the test binary's path");
    let out = Command::new("unshare")
        .arg("-rn")
        .arg(exe)
        .args(["--exact", test, "--nocapture", "--test-threads=1"])
        .env(INNER, test)
        .stdin(Stdio::null())
        .output()
        .expect("run unshare");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success(),
        "{test} failed inside its network namespace ({}):\n{text}",
        out.status
    );
    assert!(
        text.contains("1 passed"),
        "{test} did not run inside its namespace:\n{text}"
    );
    eprintln!("{text}");
    false
}

/// Why `unshare -rn` cannot be used here, if it cannot.
fn refused() -> Option<String> {
    match Command::new("unshare").args(["-rn", "true"]).output() {
        Ok(o) if o.status.success() => None,
        Ok(o) => Some(format!(
            "{}: {}",
            o.status,
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Some(format!("cannot run unshare: {e}")),
    }
}

/// Loads the `nft -f` ruleset `rules` (inside the namespace only).
pub fn nft(rules: &str) {
    assert!(
        std::env::var(INNER).is_ok(),
        "nft rules outside a test namespace"
    );
    run("nft", &["-f", "-"], Some(rules));
}

fn run(cmd: &str, args: &[&str], stdin: Option<&str>) {
    use std::io::Write;
    let mut c = Command::new(cmd);
    c.args(args)
        .stdin(if stdin.is_some() {
            Stdio::piped()
        } else {
            Stdio::null()
        })
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = c
        .spawn()
        .unwrap_or_else(|e| panic!("{cmd}: {e} (CI installs iproute2 and nftables)"));
    if let (Some(text), Some(mut pipe)) = (stdin, child.stdin.take()) {
        pipe.write_all(text.as_bytes()).expect("write to nft");
    }
    let out = child.wait_with_output().expect("wait");
    assert!(
        out.status.success(),
        "{cmd} {args:?}: {}\n{}",
        out.status,
        String::from_utf8_lossy(&out.stderr)
    );
}

/// The field's "16 KB freeze" of every connection to `port` on loopback: once a connection's
/// reply direction (from `port`) carried more than `bytes` (headers included), every packet
/// from `port` is dropped — data and ACKs alike — with no FIN and no RST.
pub fn freeze_rules(port: u16, bytes: u64) -> String {
    format!(
        "table inet freeze {{\n\
         \tchain out {{\n\
         \t\ttype filter hook output priority 0; policy accept;\n\
         \t\ttcp sport {port} ct reply bytes > {bytes} drop\n\
         \t}}\n\
         }}\n"
    )
}
