//! Running one test inside a user and network namespace of its own (`unshare -rn`), for what
//! needs the namespace's root: its own `ip_local_port_range`, nftables rules (the kernel-level
//! "16 KB freeze": [`FREEZE_SETUP`], [`freeze_rules`], [`nft`]). The test binary
//! runs itself again (`--exact NAME`) inside the namespace with loopback up; nothing in there
//! can reach any other network. Where user namespaces are refused, the test is skipped with a
//! loud line (the only allowed skip).

use std::process::Command;

/// Set in the inner run.
const INNER: &str = "TG_TEST_IN_NETNS";

/// Runs test `name` of this test binary again inside a fresh user + network namespace, after
/// bringing loopback up and running `setup` (shell, as the namespace's root). Returns true in
/// that inner run (go on with the test body) and false in the outer one, after asserting that
/// the inner run passed (its output is echoed). Where `unshare -rn` is refused: a loud
/// `SKIPPED` line and false.
pub fn enter(name: &str, setup: &str) -> bool {
    if std::env::var_os(INNER).is_some() {
        return true;
    }
    let probe = Command::new("unshare").args(["-rn", "true"]).output();
    match probe {
        Ok(o) if o.status.success() => {}
        Ok(o) => {
            eprintln!(
                "SKIPPED {name}: user and network namespaces are refused here (unshare -rn: {})",
                String::from_utf8_lossy(&o.stderr).trim()
            );
            return false;
        }
        Err(e) => {
            eprintln!("SKIPPED {name}: cannot run unshare: {e}");
            return false;
        }
    }
    let exe = std::env::current_exe().expect("test binary path");
    let script = format!("ip link set lo up && {setup} && exec \"$0\" \"$@\"");
    let out = Command::new("unshare")
        .args(["-rn", "sh", "-c", &script])
        .arg(&exe)
        .args([name, "--exact", "--nocapture", "--test-threads", "1"])
        .env(INNER, "1")
        .output()
        .expect("spawn unshare");
    let text = format!(
        "{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        out.status.success() && text.contains("1 passed"),
        "{name} inside its namespace failed ({}):\n{text}",
        out.status
    );
    eprintln!("{name} (in its own network namespace):\n{text}");
    false
}

/// `enter`'s setup for the "16 KB freeze" in the kernel: loopback's MTU at 1500 (segments of a
/// real link, so a byte counter cuts where a router's would) and conntrack's byte accounting
/// on (what `ct reply bytes` reads).
pub const FREEZE_SETUP: &str =
    "ip link set lo mtu 1500 && echo 1 > /proc/sys/net/netfilter/nf_conntrack_acct";

/// Loads the `nft -f` ruleset `rules`; only inside a namespace [`enter`] made.
pub fn nft(rules: &str) {
    use std::io::Write;
    use std::process::Stdio;
    assert!(
        std::env::var_os(INNER).is_some(),
        "nft rules outside a test namespace"
    );
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("nft: {e} (CI installs nftables)"));
    if let Some(mut pipe) = child.stdin.take() {
        pipe.write_all(rules.as_bytes()).expect("write to nft");
    }
    let out = child.wait_with_output().expect("wait for nft");
    assert!(
        out.status.success(),
        "nft: {}\n{}\n{rules}",
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

/// Runs `body` inside a namespace of its own with loopback up (see [`enter`]; `name` is the
/// test function's name): in the inner run the body runs; in the outer one the inner run is
/// started and checked. False only where namespaces are refused (said loudly).
pub fn run_inside(name: &str, body: impl FnOnce()) -> bool {
    if std::env::var_os(INNER).is_some() {
        assert!(enter(name, "true"));
        body();
        return true;
    }
    let refused = Command::new("unshare")
        .args(["-rn", "true"])
        .output()
        .map_or(true, |o| !o.status.success());
    enter(name, "true");
    !refused
}

/// Sets this namespace's ephemeral port range (inside a namespace only).
pub fn set_local_port_range(low: u16, high: u16) {
    assert!(
        std::env::var_os(INNER).is_some(),
        "a port range outside a test namespace"
    );
    std::fs::write(
        "/proc/sys/net/ipv4/ip_local_port_range",
        format!("{low} {high}"),
    )
    .expect("write ip_local_port_range inside the namespace");
}
