//! Black-box: `--tls-cipher` decides the suite the proxy's TLS client gets from a front that
//! follows the client's order (the fake TLS front in tests/common, tests/data certificates):
//! `chacha20` → ChaCha20-Poly1305, `aes-gcm` → AES-GCM (also through `TG_TLS_CIPHER`, the flag
//! winning over it), each checked on the suite the front recorded for the upstream of one real
//! session (`req_pq_multi` → `resPQ` through the built binary on the ws tier), and with `-v`
//! the choice and the negotiated suite are logged. The default (`auto`) gets whichever family
//! `net::tls::cpu_has_aes` says this CPU prefers.
//!
//! Owns only this file. Real sockets on 127.0.0.1, no fixed sleeps.

mod common;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, os_rng, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

/// One session through a fresh proxy started with `args` toward a fresh front; the suite the
/// front negotiated for it.
fn suite_with(args: &[&str]) -> String {
    suite_with_env(args, &[]).0
}

/// [`suite_with`] with extra environment variables for the proxy; also the proxy's log.
fn suite_with_env(args: &[&str], env: &[(&str, &str)]) -> (String, Vec<String>) {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ws = format!("2:{}", dc.addr());
    let mut all = vec!["--secret", SECRET, "--dc-ip", &ws, "--tier-order", "ws"];
    all.extend_from_slice(args);
    let proxy = Proxy::start_with_env(&all, env);
    let a = probe_once(
        &client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2),
        &mut os_rng(),
    );
    assert_eq!(
        a.outcome,
        Outcome::Ok,
        "{args:?}: {}\nproxy log:\n{}",
        a.detail,
        proxy.logs().join("\n")
    );
    let suites = dc.suites();
    assert_eq!(
        suites.len(),
        1,
        "{args:?}: one upstream handshake: {suites:?}"
    );
    (suites[0].clone(), proxy.logs())
}

#[test]
fn forced_chacha20_negotiates_chacha20_and_says_so_at_debug_level() {
    let (s, logs) = suite_with_env(&["--tls-cipher", "chacha20", "-v"], &[]);
    assert_eq!(s, "TLS13_CHACHA20_POLY1305_SHA256");
    let said = |needle: &str| logs.iter().any(|l| l.contains(needle));
    assert!(
        said("TLS: chacha20 suites first (--tls-cipher chacha20;"),
        "the choice, once at start:\n{}",
        logs.join("\n")
    );
    assert!(
        said("TLS: negotiated TLS13_CHACHA20_POLY1305_SHA256 with 127.0.0.1:"),
        "the suite of the upstream:\n{}",
        logs.join("\n")
    );
}

#[test]
fn forced_aes_gcm_negotiates_aes_gcm() {
    let s = suite_with(&["--tls-cipher", "aes-gcm"]);
    assert_eq!(s, "TLS13_AES_256_GCM_SHA384");
}

#[test]
fn auto_follows_the_cpu() {
    let want = if tg_ws_proxy::net::tls::cpu_has_aes() {
        "TLS13_AES_256_GCM_SHA384"
    } else {
        "TLS13_CHACHA20_POLY1305_SHA256"
    };
    assert_eq!(suite_with(&[]), want, "default (auto)");
}

#[test]
fn the_variable_forces_it_and_the_flag_wins() {
    let env = [("TG_TLS_CIPHER", "chacha20")];
    assert_eq!(
        suite_with_env(&[], &env).0,
        "TLS13_CHACHA20_POLY1305_SHA256",
        "TG_TLS_CIPHER=chacha20"
    );
    assert_eq!(
        suite_with_env(&["--tls-cipher", "aes-gcm"], &env).0,
        "TLS13_AES_256_GCM_SHA384",
        "--tls-cipher aes-gcm over TG_TLS_CIPHER=chacha20"
    );
}
