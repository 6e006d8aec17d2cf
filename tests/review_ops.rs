//! Black-box review cases of issue 9's operations that the owners' files leave open: a drain
//! with `--drain-timeout 0`, a reload asked for while draining, the control socket file after a
//! second-signal exit, a secret removed then re-added by reload, and a listen address already in
//! use at reload (rejected, the old listener keeps serving), the replay cache kept when every `ee`
//! secret is removed and one re-added; and `ctl` at the control connection cap (found in review,
//! fixed since: the proxy says `error busy`).
//!
//! Owns only this file; the rig lives in tests/common. Real sockets on 127.0.0.0/8 and unix
//! sockets in the test's temp dir, signals through `kill(2)` on the child, no fixed sleeps.

mod common;

use std::io;
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc};
use common::signals::{echo, live_session, must_log, signal, wait_exit};
use common::{client_opts, tcp_dc2_proxy, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

/// How long a log line or an exit may take to show up.
const WAIT: Duration = Duration::from_secs(10);

const OTHER: &str = "fedcba9876543210fedcba9876543210";

/// One `req_pq_multi` → `resPQ` exchange with `secret` toward DC 2 at `addr`.
fn served(addr: SocketAddr, secret: &str) -> Outcome {
    let mut rng = Rng::new().expect("OS randomness");
    let mut opts = client_opts(addr, secret, Tag::Intermediate, 2);
    opts.timeout = Duration::from_secs(3);
    probe_once(&opts, &mut rng).outcome
}

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// Waits for the proxy's `n`-th `reload` event (1-based) → it.
fn nth_reload(proxy: &Proxy, n: usize) -> serde_json::Value {
    let mut ev = None;
    let ok = wait_until(WAIT, || {
        ev = proxy.events("reload").into_iter().nth(n - 1);
        ev.is_some()
    });
    assert!(ok, "no reload #{n}:\n{}", proxy.dump());
    ev.expect("waited for it")
}

/// Waits for the `n`-th reload and asserts it applied exactly a secrets change.
fn secrets_reloaded(proxy: &Proxy, n: usize) {
    let ev = nth_reload(proxy, n);
    assert_eq!(ev["result"], "applied", "{ev}");
    assert_eq!(ev["changed"], "secrets", "{ev}");
}

/// A proxy reading its secrets from a 0600 file holding `text`, relaying DC 2 over TCP to a
/// fake DC; the file's path is returned for the test to rewrite or remove.
fn secret_file_proxy(text: &str) -> (FakeDc, PathBuf, Proxy) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let path = temp_dir().join("secret");
    write_private(&path, text);
    let route = format!("2:{}", dc.addr());
    let file = path.to_str().expect("UTF-8 temp path");
    let proxy = Proxy::start(&[
        "--secret-file",
        file,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
    ]);
    (dc, path, proxy)
}

#[test]
fn drain_timeout_0_cuts_live_sessions_and_exits_at_once() {
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "0"]);
    let mut c = live_session(&proxy);
    let t0 = Instant::now();
    signal(&proxy, libc::SIGTERM);
    let status = wait_exit(&mut proxy, WAIT).expect("exit with --drain-timeout 0");
    assert!(status.success(), "{status:?}");
    assert!(t0.elapsed() < Duration::from_secs(3), "{:?}", t0.elapsed());
    // Kept on the log: the shutdown summary is a line an operator reads.
    must_log(&proxy, "shutdown: 1 sessions cut at --drain-timeout");
    assert!(c.recv_packet().is_err(), "session still open after exit");
}

#[test]
fn a_reload_while_draining_is_refused_and_the_drain_goes_on() {
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "30s"]);
    let mut c = live_session(&proxy);
    signal(&proxy, libc::SIGTERM);
    // Kept on the log: the drain's start line (an operator's) is the signal it began.
    must_log(&proxy, "shutdown: draining 1 sessions");
    signal(&proxy, libc::SIGHUP);
    assert_eq!(nth_reload(&proxy, 1)["result"], "rejected");
    // SIGHUP is not a second stop signal: still draining, the session still relays.
    assert!(proxy.try_wait().is_none(), "SIGHUP ended the drain");
    echo(&mut c, 2, &proxy);
    drop(c);
    let status = wait_exit(&mut proxy, WAIT).expect("exit once the last session ended");
    assert!(status.success(), "{status:?}");
    must_log(&proxy, "shutdown: done"); // kept: the operator's shutdown line
}

#[test]
fn control_socket_file_is_removed_after_a_second_signal_exit() {
    let sock = temp_dir().join("ctl.sock");
    let s = sock.to_str().expect("UTF-8 temp path");
    let (_dc, mut proxy) = tcp_dc2_proxy(&["--drain-timeout", "60s", "--control-socket", s]);
    assert!(sock.exists(), "no control socket at {s}");
    let _c = live_session(&proxy);
    signal(&proxy, libc::SIGTERM);
    must_log(&proxy, "shutdown: draining 1 sessions"); // kept: the operator's drain line
    signal(&proxy, libc::SIGINT);
    let status = wait_exit(&mut proxy, WAIT).expect("second signal exits at once");
    assert!(status.success(), "{status:?}");
    assert!(!sock.exists(), "socket file left behind after exit");
}

#[test]
fn a_secret_removed_then_re_added_by_reload_is_served_again() {
    let (_dc, path, proxy) = secret_file_proxy(&format!("{SECRET}\n{OTHER}\n"));
    assert_eq!(served(proxy.addr(), OTHER), Outcome::Ok);
    write_private(&path, &format!("{SECRET}\n"));
    signal(&proxy, libc::SIGHUP);
    secrets_reloaded(&proxy, 1);
    assert_ne!(
        served(proxy.addr(), OTHER),
        Outcome::Ok,
        "removed secret served"
    );
    assert_eq!(served(proxy.addr(), SECRET), Outcome::Ok);
    write_private(&path, &format!("{OTHER}\n{SECRET}\n"));
    signal(&proxy, libc::SIGHUP);
    secrets_reloaded(&proxy, 2);
    assert_eq!(served(proxy.addr(), OTHER), Outcome::Ok, "re-added secret");
    assert_eq!(served(proxy.addr(), SECRET), Outcome::Ok);
}

#[test]
fn a_secret_file_deleted_before_a_reload_is_not_replaced_by_a_new_secret() {
    let (_dc, path, proxy) = secret_file_proxy(&format!("{SECRET}\n"));
    assert_eq!(served(proxy.addr(), SECRET), Outcome::Ok);
    std::fs::remove_file(&path).expect("remove the secret file");
    signal(&proxy, libc::SIGHUP);
    assert_eq!(nth_reload(&proxy, 1)["result"], "rejected");
    // Kept on the log: the rejection's reason is what the operator reads.
    must_log(&proxy, "a reload never makes a new secret");
    assert!(!path.exists(), "the reload created a new secret file");
    assert_eq!(
        served(proxy.addr(), SECRET),
        Outcome::Ok,
        "the running secret stays"
    );
}

#[test]
fn a_listen_address_in_use_at_reload_is_rejected_and_the_old_listener_serves() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    // The address the new file asks for is taken (by this test) on another loopback address.
    let taken = TcpListener::bind("127.0.0.2:0").expect("bind 127.0.0.2");
    let busy = taken.local_addr().unwrap();
    let cfg = temp_dir().join("proxy.conf");
    let route = format!("2:{}", dc.addr());
    let text = |host: &str, port: u16| {
        format!(
            "host {host}\nport {port}\nsecret {SECRET}\ntcp-dc-ip {route}\ntier-order tcp\n\
             pool-size 0\nstartup-probes off\nmax-per-ip 0\nper-ip-rate 0\n"
        )
    };
    // A port for the first listener: bound and released (the proxy binds it at once).
    let first = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    write_private(&cfg, &text("127.0.0.1", first.port()));
    let mut cmd = common::command(&["run", "--config", cfg.to_str().unwrap()]);
    let mut child = cmd
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("spawn");
    let stderr = child.stderr.take().unwrap();
    let lines = std::sync::Arc::new(std::sync::Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    std::thread::spawn(move || {
        for l in io::BufRead::lines(io::BufReader::new(stderr)).map_while(Result::ok) {
            sink.lock().unwrap().push(l);
        }
    });
    let dump = || lines.lock().unwrap().join("\n");
    let up = wait_until(WAIT, || TcpStream::connect(first).is_ok());
    if !up {
        let _ = child.kill();
        panic!("proxy not listening on {first}:\n{}", dump());
    }
    assert_eq!(served(first, SECRET), Outcome::Ok, "{}", dump());
    write_private(&cfg, &text("127.0.0.2", busy.port()));
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    let rc = unsafe { libc::kill(child.id() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0);
    let rejected = || {
        lines
            .lock()
            .unwrap()
            .iter()
            .find(|l| l.contains("reload: rejected"))
            .cloned()
    };
    let seen = wait_until(WAIT, || rejected().is_some());
    let line = rejected().unwrap_or_default();
    let _guard = KillOnDrop(child);
    assert!(seen, "no rejection:\n{}", dump());
    // Kept on the log: the rejection names the address and the error for the operator.
    assert!(
        line.contains("Address already in use") && line.contains(&busy.to_string()),
        "{line}"
    );
    assert_eq!(
        served(first, SECRET),
        Outcome::Ok,
        "old listener after a rejected reload:\n{}",
        dump()
    );
    drop(taken);
}

/// Kills and reaps the child on drop (also when an assertion fails).
struct KillOnDrop(std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Defect found in review, fixed since: with the control socket's 16 connections taken, the
/// proxy accepted and closed a 17th at once, and `ctl` reported only `reply: Connection reset
/// by peer` (or `request sent: Broken pipe`) instead of saying the proxy is busy. Now the
/// reactor writes `error busy: …` before that close and `ctl` shows a reply that waits after a
/// failed send.
#[test]
fn ctl_at_the_control_connection_cap_says_the_proxy_is_busy() {
    let sock = temp_dir().join("ctl.sock");
    let s = sock.to_str().expect("UTF-8 temp path");
    let (_dc, proxy) = tcp_dc2_proxy(&["--control-socket", s]);
    let held: Vec<_> = (0..16)
        .map(|_| std::os::unix::net::UnixStream::connect(&sock).expect("connect"))
        .collect();
    let r = common::run_bin(&["ctl", "status", "--control-socket", s], &[], WAIT);
    drop(held);
    assert_eq!(r.code, Some(1), "{r:?}");
    assert!(
        r.stderr.contains("busy") || r.stderr.contains("16"),
        "ctl does not say why: {:?}\n{}",
        r.stderr,
        proxy.logs().join("\n")
    );
}

/// docs/operating.md: at reload "the fake-TLS replay cache and clock trust are kept". Removing every `ee`
/// secret and adding one back must not hand out a fresh, empty replay cache: a hello recorded
/// before is still a replay (masked, counted in `counters.tls.replays`), not a new session.
#[test]
fn an_ee_secret_removed_then_re_added_keeps_the_replay_cache() {
    use common::eebed::{ee_res_pq, ee_secret};
    use common::masksite::MaskSite;
    use std::io::Write;
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let path = temp_dir().join("secret");
    write_private(&path, &format!("{}\n{SECRET}\n", ee_secret()));
    let (route, mask_host) = (
        format!("2:{}", dc.addr()),
        format!("127.0.0.1:{}", mask.port()),
    );
    let ctl = common::ctl::Ctl::new();
    let ca = ctl.args();
    let proxy = Proxy::start(&[
        "--secret-file",
        path.to_str().unwrap(),
        "--mask-host",
        &mask_host,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
        &ca[0],
        &ca[1],
    ]);
    let mut rng = common::os_rng();
    let first = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    let hello = first.stream.hello.clone();
    drop(first);
    write_private(&path, &format!("{SECRET}\n"));
    signal(&proxy, libc::SIGHUP);
    secrets_reloaded(&proxy, 1);
    write_private(&path, &format!("{}\n{SECRET}\n", ee_secret()));
    signal(&proxy, libc::SIGHUP);
    secrets_reloaded(&proxy, 2);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&hello.bytes).unwrap();
    // The gate counts the replay (`counters.tls.replays`) and masks it as one.
    let mut last = serde_json::Value::Null;
    let seen = wait_until(WAIT, || {
        last = ctl.status(&proxy)["counters"]["tls"].clone();
        last["replays"].as_u64().is_some_and(|n| n >= 1)
    });
    assert!(
        seen,
        "the replayed hello was not refused; counters.tls: {last}\n{}",
        proxy.dump()
    );
    assert_eq!(dc.connections(), 1, "the replay reached the DC");
}
