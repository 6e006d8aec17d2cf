//! Fixtures shared by the fake-TLS black-box tests (tests/faketls_*.rs): the `ee` secret they
//! run the proxy with, proxies on each tier with `--mask-host` pointed at a [`MaskSite`], the
//! key and domain read back from the `tg-ws-proxy link` output, an `ee` MTProto session
//! ([`ee_session`]) built from the rig's own client ([`super::faketls`]), and the usual bed: a
//! tcp-tier `ee` proxy with its fake DC and mask site ([`tcp_bed`]).
//!
//! Flag names are the lead's (issue 8 flags file): `--mask-host`, `--tls-time-window`,
//! `--replay-cache`, `--handshake-timeout`. Loopback only.

use std::net::SocketAddr;
use std::time::Duration;

use tg_ws_proxy::mtproto::obfs2::{Secret, SecretKind, Tag};
use tg_ws_proxy::rng::Rng;

use super::fakedc::{DcConfig, FakeDc};
use super::faketls::{ConnectError, HelloSpec, TlsClient};
use super::masksite::{MaskSite, MASK_DOMAIN};
use super::mtsession::MtSession;
use super::Proxy;

/// The `ee` key the tests sign with (32 hex digits in the secret).
pub const EE_KEY_HEX: &str = "00112233445566778899aabbccddeeff";
/// The `ee` domain: the mask site's own name, as a real deployment would pick.
pub const EE_DOMAIN: &str = MASK_DOMAIN;
/// Bound on every client socket operation.
pub const IO_WAIT: Duration = Duration::from_secs(5);

/// `ee` + key + hex(domain).
pub fn ee_secret() -> String {
    let dom: String = EE_DOMAIN.bytes().map(|b| format!("{b:02x}")).collect();
    format!("ee{EE_KEY_HEX}{dom}")
}

/// The 16 raw key bytes of [`ee_secret`].
pub fn ee_key() -> [u8; 16] {
    Secret::parse(&ee_secret()).expect("test ee secret").key
}

/// `--secret EE --mask-host 127.0.0.1:PORT -v` (close reasons of pre-session clients are
/// debug lines).
pub fn ee_args(mask: &MaskSite) -> Vec<String> {
    vec![
        "--secret".into(),
        ee_secret(),
        "--mask-host".into(),
        format!("127.0.0.1:{}", mask.port()),
        "-v".into(),
    ]
}

/// A proxy with [`ee_args`] and then `extra` (a later flag wins).
pub fn ee_proxy(mask: &MaskSite, extra: &[String]) -> Proxy {
    let mut args = ee_args(mask);
    args.extend(extra.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Proxy::start(&refs)
}

/// Runs `tg-ws-proxy link --server 127.0.0.1 --port 1443` with the same `flags` a proxy was
/// started with and returns the (key, domain) of the first `ee` link it prints, or why not.
pub fn link_ee(flags: &[String]) -> Result<([u8; 16], String), String> {
    let mut args = vec!["link", "--server", "127.0.0.1", "--port", "1443"];
    args.extend(flags.iter().map(String::as_str));
    let run = super::run_bin(&args, &[], Duration::from_secs(10));
    if run.code != Some(0) {
        return Err(format!("link exited {:?}: {}", run.code, run.stderr));
    }
    let line = run
        .stdout
        .lines()
        .find(|l| l.starts_with("tg://proxy?") && l.contains("secret=ee"))
        .ok_or_else(|| format!("no ee link in:\n{}", run.stdout))?;
    let hex = line
        .split("secret=")
        .nth(1)
        .and_then(|s| s.split('&').next())
        .ok_or("no secret= value")?;
    let s = Secret::parse(hex).map_err(|e| format!("link secret {hex}: {e}"))?;
    match s.kind {
        SecretKind::Ee(domain) => Ok((s.key, domain)),
        k => Err(format!("link secret is {k:?}, not ee")),
    }
}

/// A fake-TLS + obfuscated2 session to `addr` with `key`/`domain` whose init has been sent
/// (CCS, then the init as the first AppData record).
pub fn ee_session(
    addr: SocketAddr,
    key: &[u8; 16],
    domain: &str,
    tag: Tag,
    dc: i16,
    rng: &mut Rng,
) -> Result<MtSession<TlsClient>, String> {
    let spec = HelloSpec::new(*key, domain);
    let tls =
        TlsClient::connect(addr, &spec, rng, IO_WAIT).map_err(|e: ConnectError| e.to_string())?;
    tls.sock()
        .set_read_timeout(Some(IO_WAIT))
        .map_err(|e| e.to_string())?;
    let mut s = MtSession::new(tls, key, tag, dc, rng);
    s.send_init().map_err(|e| format!("send init: {e}"))?;
    Ok(s)
}

/// [`ee_session`] with the test secret, then `req_pq_multi` → `resPQ`; panics with the proxy
/// log on failure.
pub fn ee_res_pq(proxy: &Proxy, tag: Tag, dc: i16, rng: &mut Rng) -> MtSession<TlsClient> {
    let mut s = ee_session(proxy.addr(), &ee_key(), EE_DOMAIN, tag, dc, rng)
        .unwrap_or_else(|e| panic!("ee session: {e}\nproxy log:\n{}", proxy.dump()));
    if let Err(e) = s.req_pq() {
        panic!("ee {tag:?} dc {dc}: {e}\nproxy log:\n{}", proxy.dump());
    }
    s
}

/// Every record the client received after the handshake was AppData of ≤ 16384 bytes.
pub fn assert_records_bounded(c: &TlsClient, proxy: &Proxy) {
    let bad: Vec<_> = c
        .records_in
        .iter()
        .filter(|&&(t, n)| t != 0x17 || n > super::faketls::MAX_PAYLOAD)
        .collect();
    assert!(
        bad.is_empty(),
        "records other than AppData ≤ 16384: {bad:?}\nproxy log:\n{}",
        proxy.dump()
    );
}

/// A tcp-tier `ee` proxy, its fake DC and mask site; `extra` flags after.
pub fn tcp_bed(extra: &[&str]) -> (MaskSite, FakeDc, Proxy) {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut flags = vec![
        "--tcp-dc-ip".to_string(),
        format!("2:{}", dc.addr()),
        "--tier-order".to_string(),
        "tcp".to_string(),
    ];
    flags.extend(extra.iter().map(|a| a.to_string()));
    let p = ee_proxy(&mask, &flags);
    (mask, dc, p)
}
