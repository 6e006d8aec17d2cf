//! Black-box: the extra ways in share the proxy's lifecycle and limits (issue 21 part 4). A
//! SIGHUP adds, moves and removes the SOCKS5 and transparent listeners (the new address bound
//! before the old one closes) without touching a live SOCKS5 session; the drain closes them
//! while that session finishes; `--max-per-ip` counts a client's sessions over every listener.
//! Outcomes from `reload` events, `ctl status --json` and real connections on 127.0.0.0/8.

mod common;

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::time::Duration;

use common::ctl::Ctl;
use common::fakedc::{DcConfig, FakeDc};
use common::mtsession::MtSession;
use common::{data_path, os_rng, temp_dir, wait_until, Proxy, LOOPBACK_DEAD_DCS, SECRET};
use tg_ws_proxy::mtproto::obfs2::Tag;

const T: Duration = Duration::from_secs(10);

/// The address SOCKS5 clients ask for: DC 2 by `--dc-addr` (never dialled: the tcp tier goes
/// to the fake DC).
const DC2: &str = "127.0.0.3:443";

fn config(path: &Path, dc: &FakeDc, ctl: &Ctl, extra: &[String]) {
    let [c1, c2] = ctl.args();
    let mut lines = vec![
        "host 127.0.0.1".to_string(),
        "port 0".into(),
        format!("secret {SECRET}"),
        "pool-size 0".into(),
        "startup-probes off".into(),
        "max-per-ip 0".into(),
        "per-ip-rate 0".into(),
        format!("dc-ip {LOOPBACK_DEAD_DCS}"),
        format!("tcp-dc-ip 2:{}", dc.addr()),
        "tier-order tcp".into(),
        "dc-addr 127.0.0.3=2".into(),
        "tg-ranges-url off".into(),
        "drain-timeout 20s".into(),
        format!("ca-file {}", data_path("ca.pem").display()),
        format!("{} {c2}", c1.trim_start_matches("--")),
    ];
    // An `extra` line replaces the default of its setting (a file names each once).
    lines.retain(|l| {
        let key = l.split(' ').next().unwrap_or("");
        !extra.iter().any(|e| e.split(' ').next() == Some(key))
    });
    lines.extend(extra.iter().cloned());
    std::fs::write(path, lines.join("\n") + "\n").unwrap();
}

fn signal(p: &Proxy, sig: libc::c_int) {
    // SAFETY: kill(2) on our own child's pid.
    let rc = unsafe { libc::kill(p.pid() as libc::pid_t, sig) };
    assert_eq!(rc, 0, "kill: {}", io::Error::last_os_error());
}

fn reload(p: &Proxy, n: usize) -> serde_json::Value {
    signal(p, libc::SIGHUP);
    let mut ev = None;
    assert!(
        wait_until(T, || {
            ev = p.events("reload").into_iter().nth(n - 1);
            ev.is_some()
        }),
        "reload #{n}\n{}",
        p.dump()
    );
    let ev = ev.unwrap();
    assert_eq!(ev["result"], "applied", "{ev}\n{}", p.dump());
    ev
}

fn listen(st: &serde_json::Value, way: &str) -> Option<SocketAddr> {
    st["ways"][way]["listen"]
        .as_str()
        .map(|a| a.parse().unwrap())
}

/// A SOCKS5 CONNECT (no authentication) to `dst` through `at`: the stream after REP 00.
fn socks_connect(at: SocketAddr, dst: &str) -> io::Result<TcpStream> {
    let mut s = TcpStream::connect_timeout(&at, T)?;
    s.set_read_timeout(Some(T))?;
    let dst: SocketAddr = dst.parse().unwrap();
    let SocketAddr::V4(v4) = dst else {
        unreachable!()
    };
    s.write_all(&common::socks5::noauth_connect(v4))?;
    let mut back = [0u8; 12];
    s.read_exact(&mut back)?;
    assert_eq!(&back[..2], &[5, 0], "method 00 chosen");
    assert_eq!(back[3], 0, "REP 00: {back:?}");
    Ok(s)
}

/// A direct client through SOCKS5 that exchanged one resPQ (held open).
fn socks_session(at: SocketAddr) -> MtSession<TcpStream> {
    let s = socks_connect(at, DC2).expect("SOCKS5 CONNECT");
    let mut m = MtSession::direct(s, Tag::Intermediate, 2, &mut os_rng());
    m.send_init().unwrap();
    m.req_pq().expect("resPQ through SOCKS5");
    m
}

fn refused(a: SocketAddr) -> bool {
    matches!(
        TcpStream::connect_timeout(&a, Duration::from_secs(3)),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused
    )
}

#[test]
fn reload_adds_moves_and_removes_listeners_and_the_drain_closes_them() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let path = temp_dir().join("proxy.conf");
    let socks = |ip: &str| vec![format!("socks5 {ip}:0")];
    config(&path, &dc, &ctl, &socks("127.0.0.1"));
    let proxy = Proxy::start_argv(&["run", "--config", path.to_str().unwrap()]);
    let st = ctl.status(&proxy);
    let first = listen(&st, "socks5").expect("SOCKS5 listener at start");
    assert_eq!(listen(&st, "transparent"), None);
    let mut held = socks_session(first);

    // Moved: the new address serves, the old one refuses, the live session goes on.
    config(&path, &dc, &ctl, &socks("127.0.0.2"));
    let ev = reload(&proxy, 1);
    assert!(ev.to_string().contains("socks5"), "{ev}");
    let moved = listen(&ctl.status(&proxy), "socks5").expect("moved listener");
    assert_eq!(moved.ip().to_string(), "127.0.0.2");
    assert!(refused(first), "the old SOCKS5 address closed");
    drop(socks_session(moved));
    held.req_pq()
        .expect("the live session is untouched by the move");

    // Removed, and transparent added, in one reload.
    config(&path, &dc, &ctl, &["transparent 127.0.0.1:0".to_string()]);
    reload(&proxy, 2);
    // The table is the owner's to follow (the proxy may not be root): said once.
    assert!(
        proxy.wait_log(
            "reload: transparent changed: run `tg-ws-proxy firewall install`",
            T
        ),
        "{}",
        proxy.dump()
    );
    // And the loopback address that never gets a redirected connection is warned about.
    assert!(proxy.wait_log(
        "--transparent 127.0.0.1:0: a loopback address never receives",
        T
    ));
    let st = ctl.status(&proxy);
    assert_eq!(listen(&st, "socks5"), None, "{st}");
    let transparent = listen(&st, "transparent").expect("transparent listener added");
    assert!(refused(moved), "the removed SOCKS5 listener refuses");
    held.req_pq()
        .expect("the live session is untouched by the removal");
    assert_eq!(
        st["ways"]["socks5"]["sessions"], 1,
        "still counted under its way: {st}"
    );

    // The drain: no listener of any way accepts; the live session still relays.
    signal(&proxy, libc::SIGTERM);
    assert!(
        wait_until(T, || refused(transparent) && refused(proxy.addr())),
        "listeners closed by the drain\n{}",
        proxy.dump()
    );
    held.req_pq()
        .expect("the live session finishes during the drain");
    assert_eq!(
        dc.init_dcs().len(),
        2,
        "each SOCKS5 session reached the DC once"
    );
}

#[test]
fn the_per_client_limit_counts_sessions_over_every_way_in() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let path = temp_dir().join("proxy.conf");
    let extra = ["socks5 127.0.0.1:0".to_string(), "max-per-ip 1".into()];
    config(&path, &dc, &ctl, &extra);
    let proxy = Proxy::start_argv(&["run", "--config", path.to_str().unwrap()]);
    let at = listen(&ctl.status(&proxy), "socks5").unwrap();
    let _first = socks_session(at);
    // A second session from 127.0.0.1, through the proxy listener this time: over the limit.
    let mut opts = common::client_opts(proxy.addr(), SECRET, Tag::Intermediate, 2);
    opts.timeout = Duration::from_secs(3);
    let out = tg_ws_proxy::applet::probe::probe_once(&opts, &mut os_rng()).outcome;
    assert_ne!(out, tg_ws_proxy::applet::probe::Outcome::Ok);
    let st = ctl
        .wait(&proxy, T, |s| {
            s["counters"]["closed_by_reason"]["per-ip-limit"].as_u64() >= Some(1)
        })
        .unwrap_or_else(|| panic!("per-ip-limit counted\n{}", proxy.dump()));
    assert_eq!(st["ways"]["socks5"]["sessions"], 1, "{st}");
}
