//! Black-box: SIGHUP reloads the configuration for new sessions only. Sources: the secret
//! file (`--secret-file` is read again on every reload) and the `--config` file (every setting
//! in it; the proxy is started with `run --config FILE` only, since a flag would override the
//! file): a 64 MiB download running across a reload that changes the secrets and the tier
//! order finishes byte-exact, and a new session after it reaches the new tier's DC; a new
//! secret is accepted and a removed one refused right after the reload (its `reload` event); a
//! changed listen address (127.0.0.1 → 127.0.0.2) is bound before the old listener closes and
//! a session on the old one keeps working; an invalid secret file or config file is rejected
//! with one line naming the line and the old configuration is still served.
//!
//! Owns only this file; the rig lives in tests/common. Real sockets on 127.0.0.1 and
//! 127.0.0.2, signals through `kill(2)` on the child, no fixed sleeps.

mod common;

use std::io::{self, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc};
use common::mtsession::MtSession;
use common::reader::Reader;
use common::{client_opts, data_path, temp_dir, Proxy, LOOPBACK_DEAD_DCS, LOOPBACK_DEAD_TEST_DCS};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::framing;
use tg_ws_proxy::mtproto::obfs2::{Cipher, Tag};
use tg_ws_proxy::rng::Rng;

const OLD: &str = "0123456789abcdef0123456789abcdef";
const NEW: &str = "fedcba9876543210fedcba9876543210";

const MIB: usize = 1 << 20;

/// How long a reload or a log line may take to show up.
const LOG_WAIT: Duration = Duration::from_secs(10);

/// Writes `text` to the secret file at `path` (mode 0600).
fn write_secrets(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write secret file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// A secret file holding `OLD`, in a fresh temp dir.
fn secret_file() -> PathBuf {
    let path = temp_dir().join("secret");
    write_secrets(&path, "# test secret\n0123456789abcdef0123456789abcdef\n");
    path
}

fn sighup(proxy: &Proxy) {
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    let rc = unsafe { libc::kill(proxy.pid() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0, "kill -HUP: {}", io::Error::last_os_error());
}

/// Sends SIGHUP and waits for the `n`-th `reload` event (they accumulate) → that event.
fn reload_and_wait(proxy: &Proxy, n: usize) -> serde_json::Value {
    sighup(proxy);
    let mut ev = None;
    let ok = common::wait_until(LOG_WAIT, || {
        ev = proxy.events("reload").into_iter().nth(n - 1);
        ev.is_some()
    });
    assert!(ok, "no reload #{n} after SIGHUP:\n{}", proxy.dump());
    ev.expect("waited for it")
}

/// The `reload` events whose `result` is `result` so far.
fn reloads(proxy: &Proxy, result: &str) -> usize {
    proxy
        .events("reload")
        .iter()
        .filter(|e| e["result"] == result)
        .count()
}

/// The first log line containing `needle` (waited for up to [`LOG_WAIT`]: a reload's line
/// follows its event), or "" if none came.
fn first_log(proxy: &Proxy, needle: &str) -> String {
    proxy.wait_log(needle, LOG_WAIT);
    proxy
        .logs()
        .into_iter()
        .find(|l| l.contains(needle))
        .unwrap_or_default()
}

/// A ws-tier proxy in front of a fake DC, secrets from `secrets`.
fn setup(secrets: &Path) -> (FakeDc, Proxy) {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ws = format!("2:{}", dc.addr());
    let file = secrets.to_str().expect("utf-8 temp path");
    let proxy = Proxy::start(&[
        "--secret-file",
        file,
        "--dc-ip",
        &ws,
        "--tier-order",
        "ws",
        "--bad-client-drain",
        "100ms",
    ]);
    (dc, proxy)
}

/// The configuration file text: the rig's defaults ([`common::run_args`] as file lines,
/// `--ca-file`, a short `bad-client-drain`), `secret-file SECRETS`, then `extra` lines. A
/// `host …` line in `extra` replaces the default `host 127.0.0.1` (line 1 stays `host`).
fn config_text(secrets: &Path, extra: &[&str]) -> String {
    let ca = data_path("ca.pem");
    let host = extra.iter().find(|l| l.starts_with("host "));
    let mut lines = vec![
        host.map_or("host 127.0.0.1", |h| h).to_string(),
        "port 0".into(),
        "pool-size 0".into(),
        "startup-probes off".into(),
        "max-per-ip 0".into(),
        "per-ip-rate 0".into(),
        format!("dc-ip {LOOPBACK_DEAD_DCS}"),
        format!("tcp-dc-ip {LOOPBACK_DEAD_DCS}"),
        format!("tcp-dc-ip {LOOPBACK_DEAD_TEST_DCS}"),
        format!("ca-file {}", ca.display()),
        "bad-client-drain 100ms".into(),
        format!("secret-file {}", secrets.display()),
    ];
    lines.extend(
        extra
            .iter()
            .filter(|l| !l.starts_with("host "))
            .map(|l| l.to_string()),
    );
    lines.join("\n") + "\n"
}

/// Writes the config file at `path` ([`config_text`]).
fn write_config(path: &Path, secrets: &Path, extra: &[&str]) {
    std::fs::write(path, config_text(secrets, extra)).expect("write config file");
}

/// `run --config FILE` and nothing else on the command line.
fn start_with_config(config: &Path) -> Proxy {
    Proxy::start_argv(&["run", "--config", config.to_str().expect("utf-8 temp path")])
}

/// A proxy started from a config file ([`write_config`] beside a [`secret_file`]) with the ws
/// tier only, in front of a fake DC: the secret file, the config file, the DC, the `dc-ip` line
/// and the proxy.
fn ws_config_proxy() -> (PathBuf, PathBuf, FakeDc, String, Proxy) {
    let secrets = secret_file();
    let config = secrets.with_file_name("proxy.conf");
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ws = format!("dc-ip 2:{}", dc.addr());
    write_config(&config, &secrets, &[&ws, "tier-order ws"]);
    let proxy = start_with_config(&config);
    (secrets, config, dc, ws, proxy)
}

/// One `req_pq_multi` → `resPQ` exchange with `secret`.
fn served(proxy: &Proxy, secret: &str) -> Outcome {
    served_at(proxy.addr(), secret)
}

/// [`served`] against the listener at `addr`.
fn served_at(addr: SocketAddr, secret: &str) -> Outcome {
    let mut rng = Rng::new().expect("OS randomness");
    let mut opts = client_opts(addr, secret, Tag::Intermediate, 2);
    opts.timeout = Duration::from_secs(3);
    probe_once(&opts, &mut rng).outcome
}

#[test]
fn new_secret_is_accepted_and_removed_one_refused_right_after_sighup() {
    let path = secret_file();
    let (_dc, proxy) = setup(&path);
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    assert_ne!(served(&proxy, NEW), Outcome::Ok, "not configured yet");
    write_secrets(&path, &format!("{NEW}\n"));
    let ev = reload_and_wait(&proxy, 1);
    assert_eq!(ev["result"], "applied", "{ev}");
    assert_eq!(ev["changed"], "secrets", "{ev}");
    assert_eq!(served(&proxy, NEW), Outcome::Ok, "{:#?}", proxy.logs());
    assert_ne!(
        served(&proxy, OLD),
        Outcome::Ok,
        "removed secret still served"
    );
    // Kept on the log: the log never names a secret (masking of secrets is the feature).
    let logs = proxy.logs().join("\n");
    assert!(!logs.contains(NEW) && !logs.contains(OLD), "{logs}");
}

#[test]
fn an_invalid_secret_file_is_rejected_and_the_old_secret_stays() {
    let path = secret_file();
    let (_dc, proxy) = setup(&path);
    write_secrets(&path, "not-a-secret\n");
    assert_eq!(reload_and_wait(&proxy, 1)["result"], "rejected");
    // Kept on the log: the line an operator reads names where the file is wrong.
    let line = first_log(&proxy, "reload: rejected: ");
    assert!(line.contains("line 1"), "says where: {line}");
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    // Unreadable (a directory where the file was): rejected too, old secret still served.
    std::fs::remove_file(&path).expect("rm secret file");
    std::fs::create_dir(&path).expect("mkdir in its place");
    assert_eq!(reload_and_wait(&proxy, 2)["result"], "rejected");
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    assert_eq!(reloads(&proxy, "applied"), 0);
}

#[test]
fn a_reload_with_nothing_changed_says_so() {
    let path = secret_file();
    let (_dc, proxy) = setup(&path);
    let ev = reload_and_wait(&proxy, 1);
    assert_eq!(ev["result"], "applied", "{ev}");
    assert_eq!(ev["changed"], "", "{ev}");
    assert_eq!(ev["restart"], "", "{ev}");
    // Kept on the log: "(no changes)" is the listing an operator reads. The line follows the
    // event (the event is written inside the reload, the line by its caller): wait for it.
    proxy.wait_log("reload: applied (no changes)", LOG_WAIT);
    assert_eq!(
        proxy.count_log("reload: applied (no changes)"),
        1,
        "{}",
        proxy.dump()
    );
    assert_eq!(served(&proxy, OLD), Outcome::Ok);
}

/// A session opened with `secret` on `addr`: the client's writer half and its [`Reader`].
fn open_session(addr: SocketAddr, secret: &str) -> (TcpStream, Cipher, Reader) {
    let tag = Tag::Intermediate;
    let mut rng = Rng::new().expect("OS randomness");
    let opts = client_opts(addr, secret, tag, 2);
    let (sock, enc, dec) = MtClient::connect_with(&opts, &mut rng)
        .expect("connect to proxy")
        .into_parts();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let reader = Reader::new(
        sock.try_clone().expect("clone socket"),
        dec,
        tag,
        256 * 1024,
    );
    (sock, enc, reader)
}

/// Asks for `count` BULK packets of `size` bytes on an open session; checks each one.
fn bulk_round(
    sock: &mut TcpStream,
    enc: &mut Cipher,
    reader: &mut Reader,
    count: u32,
    size: usize,
) {
    let mut rng = Rng::new().expect("OS randomness");
    let mut wire = framing::encode(
        Tag::Intermediate,
        &bulk_request(count, size as u32),
        &mut rng,
    );
    enc.apply(&mut wire);
    sock.write_all(&wire).expect("send BULK request");
    for i in 0..count {
        let p = reader
            .next()
            .unwrap_or_else(|e| panic!("packet {i}/{count}: {e}"));
        assert_eq!(&p[..size], &bulk_payload(i, size)[..], "packet {i}");
    }
}

#[test]
fn listen_address_change_by_reload_binds_new_then_closes_old() {
    let (secrets, config, _dc, ws, proxy) = ws_config_proxy();
    let old = proxy.addr();
    assert_eq!(old.ip().to_string(), "127.0.0.1");
    // A session on the old listener, opened before the reload.
    let (mut sock, mut enc, mut reader) = open_session(old, OLD);
    bulk_round(&mut sock, &mut enc, &mut reader, 2, 4096);

    write_config(&config, &secrets, &[&ws, "tier-order ws", "host 127.0.0.2"]);
    let ev = reload_and_wait(&proxy, 1);
    assert_eq!(ev["result"], "applied", "{ev}");
    let new: SocketAddr = ev["listen"]
        .as_str()
        .and_then(|a| a.parse().ok())
        .unwrap_or_else(|| panic!("no listen address in {ev}"));
    assert_eq!(new.ip().to_string(), "127.0.0.2", "{:#?}", proxy.logs());
    // The old port refuses new connections; the new one serves.
    match TcpStream::connect_timeout(&old, Duration::from_secs(3)) {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}"),
        Ok(_) => panic!("old listener {old} still accepts after the reload"),
    }
    assert_eq!(served_at(new, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    // The session opened on the old listener keeps relaying.
    bulk_round(&mut sock, &mut enc, &mut reader, 3, 64 * 1024);
    // Only the probe session on the new listener has ended (its record may lag its reply).
    let probe_closed = common::wait_until(LOG_WAIT, || !proxy.sessions().is_empty());
    assert!(probe_closed, "{:#?}", proxy.logs());
    assert_eq!(
        proxy.sessions().len(),
        1,
        "the session on the old listener was closed: {:#?}",
        proxy.logs()
    );
}

#[test]
fn an_invalid_config_file_at_reload_is_rejected_and_the_old_one_stays() {
    let (secrets, config, _dc, ws, proxy) = ws_config_proxy();
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    // Line 15 (12 rig lines, then the dc-ip and tier-order lines) is an unknown name; the
    // secret would change too if it were applied.
    write_secrets(&secrets, &format!("{NEW}\n"));
    write_config(
        &config,
        &secrets,
        &[&ws, "tier-order tcp", "no-such-setting 1"],
    );
    assert_eq!(reload_and_wait(&proxy, 1)["result"], "rejected");
    // Kept on the log: the line an operator reads says where and what is wrong.
    let line = first_log(&proxy, "reload: rejected: ");
    assert!(line.contains("line 15"), "says where: {line}");
    assert!(line.contains("no-such-setting"), "says what: {line}");
    assert_eq!(reloads(&proxy, "applied"), 0);
    // The old configuration keeps serving: the old secret on the ws tier.
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    assert_ne!(
        served(&proxy, NEW),
        Outcome::Ok,
        "the rejected reload changed the secrets"
    );
}

#[test]
fn download_of_64_mib_survives_reload() {
    let secrets = secret_file();
    let config = secrets.with_file_name("proxy.conf");
    let ws_dc = FakeDc::start_tls_ws(DcConfig::default());
    let tcp_dc = FakeDc::start_tcp(DcConfig::default());
    let ws = format!("dc-ip 2:{}", ws_dc.addr());
    let tcp = format!("tcp-dc-ip 2:{}", tcp_dc.addr());
    write_config(&config, &secrets, &[&ws, &tcp, "tier-order ws"]);
    let proxy = start_with_config(&config);
    let dc = &ws_dc;
    let tag = Tag::Intermediate;
    let mut rng = Rng::new().expect("OS randomness");
    let (mut sock, mut enc, mut reader) = open_session(proxy.addr(), OLD);
    let count = 64u32;
    let mut wire = framing::encode(tag, &bulk_request(count, MIB as u32), &mut rng);
    enc.apply(&mut wire);
    sock.write_all(&wire).expect("send BULK request");
    let (mut got, mut want) = (Sha256::new(), Sha256::new());
    let mut reloaded_at = None;
    for i in 0..count {
        let p = reader
            .next()
            .unwrap_or_else(|e| panic!("packet {i}/{count}: {e}\n{}", proxy.logs().join("\n")));
        assert!(
            p.len() >= MIB && p.len() < MIB + 16,
            "packet {i}: {} B",
            p.len()
        );
        got.update(&p[..MIB]);
        want.update(bulk_payload(i, MIB));
        if i == 4 {
            // Mid-download: the secret this session used is removed, and new sessions go
            // to the tcp tier (its own fake DC) instead of ws.
            write_secrets(&secrets, &format!("{NEW}\n"));
            write_config(&config, &secrets, &[&ws, &tcp, "tier-order tcp"]);
            let ev = reload_and_wait(&proxy, 1);
            assert_eq!(ev["result"], "applied", "{ev}");
            let changed: Vec<&str> = ev["changed"].as_str().unwrap_or("").split(',').collect();
            assert!(
                changed.contains(&"secrets") && changed.contains(&"tier-order"),
                "{ev}"
            );
            reloaded_at = Some(dc.handle().bytes_out());
        }
    }
    assert_eq!(got.finalize(), want.finalize(), "payload differs");
    let sent_by_reload = reloaded_at.expect("reloaded");
    assert!(
        sent_by_reload < (count as u64) * MIB as u64,
        "the download was still running at the reload ({sent_by_reload} B sent)"
    );
    // The session was relaying all along and was not closed by the reload.
    assert_eq!(proxy.sessions().len(), 0, "{}", proxy.logs().join("\n"));
    // A NEW session uses the new tier order: it reaches the tcp DC, not the ws one.
    let (ws_before, tcp_before) = (ws_dc.inits(), tcp_dc.inits());
    assert_eq!(ws_before, 1, "only the download reached the ws DC");
    assert_eq!(served(&proxy, NEW), Outcome::Ok, "{:#?}", proxy.logs());
    assert_eq!(
        tcp_dc.inits(),
        tcp_before + 1,
        "the new session went to the tcp tier"
    );
    assert_eq!(
        ws_dc.inits(),
        ws_before,
        "the new session went to the ws tier"
    );
}

/// The address of the `WAY listener on ADDR` line with `ip` (the newest such line).
fn way_listener(proxy: &Proxy, way: &str, ip: &str) -> SocketAddr {
    let needle = format!("{way} listener on {ip}:");
    let mut found = None;
    let ok = common::wait_until(LOG_WAIT, || {
        found = proxy
            .logs()
            .into_iter()
            .rfind(|l| l.contains(&needle) && !l.ends_with("closed"));
        found.is_some()
    });
    assert!(ok, "no {needle:?} line: {}", proxy.dump());
    let line = found.expect("waited for it");
    let tail = line.rsplit(&format!("{way} listener on ")).next();
    tail.and_then(|a| a.trim().parse().ok())
        .unwrap_or_else(|| panic!("no address in {line:?}"))
}

/// A SOCKS5 direct session to DC 2's address (127.0.0.2 by `dc-addr`) through `socks`, its
/// first `resPQ` received.
fn socks_session(socks: SocketAddr, rng: &mut Rng) -> MtSession<TcpStream> {
    let c = TcpStream::connect(socks).expect("connect");
    c.set_read_timeout(Some(LOG_WAIT)).unwrap();
    let mut s = MtSession::direct(c, Tag::Intermediate, 2, rng);
    let mut hello = common::socks5::noauth_connect(common::socks5::dc2());
    hello.extend_from_slice(s.init_bytes());
    s.stream.write_all(&hello).unwrap();
    let mut answers = [0u8; 12];
    std::io::Read::read_exact(&mut s.stream, &mut answers).expect("SOCKS5 answers");
    assert_eq!(answers[..4], [5, 0, 5, 0], "{answers:?}");
    s.req_pq().expect("resPQ");
    s
}

#[test]
fn socks5_and_transparent_listeners_follow_reloads_and_live_sessions_stay() {
    fn lines(v: &[String]) -> Vec<&str> {
        v.iter().map(String::as_str).collect()
    }
    let secrets = secret_file();
    let config = secrets.with_file_name("proxy.conf");
    let dc = FakeDc::start_tcp(DcConfig::default());
    let tcp = format!("tcp-dc-ip 2:{}", dc.addr());
    let base = [tcp.as_str(), "tier-order tcp", "dc-addr 127.0.0.2=2"];
    let with = |extra: &[&str]| -> Vec<String> {
        base.iter().chain(extra).map(|s| s.to_string()).collect()
    };
    write_config(&config, &secrets, &lines(&with(&["socks5 127.0.0.1:0"])));
    let proxy = start_with_config(&config);
    let mut rng = Rng::new().expect("OS randomness");
    let old = way_listener(&proxy, "socks5", "127.0.0.1");
    let mut live = socks_session(old, &mut rng);
    // Moved, and the transparent listener added.
    let moved = with(&["socks5 127.0.0.3:0", "transparent 127.0.0.4:0"]);
    write_config(&config, &secrets, &lines(&moved));
    let ev = reload_and_wait(&proxy, 1);
    assert_eq!(ev["result"], "applied", "{ev}\n{}", proxy.dump());
    let new = way_listener(&proxy, "socks5", "127.0.0.3");
    let transparent = way_listener(&proxy, "transparent", "127.0.0.4");
    match TcpStream::connect_timeout(&old, Duration::from_secs(3)) {
        Err(e) => assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e}"),
        Ok(_) => panic!("old socks5 listener {old} still accepts after the reload"),
    }
    let mut fresh = socks_session(new, &mut rng);
    assert!(TcpStream::connect(transparent).is_ok());
    live.req_pq().expect("the live session outlives the move");
    // Removed: the listeners close, the sessions stay.
    write_config(&config, &secrets, &lines(&with(&[])));
    let ev = reload_and_wait(&proxy, 2);
    assert_eq!(ev["result"], "applied", "{ev}\n{}", proxy.dump());
    for addr in [new, transparent] {
        let gone = common::wait_until(LOG_WAIT, || {
            TcpStream::connect_timeout(&addr, Duration::from_secs(3))
                .is_err_and(|e| e.kind() == io::ErrorKind::ConnectionRefused)
        });
        assert!(
            gone,
            "{addr} still accepts after the removal\n{}",
            proxy.dump()
        );
    }
    live.req_pq()
        .expect("the live session outlives the removal");
    fresh.req_pq().expect("the second one too");
}
