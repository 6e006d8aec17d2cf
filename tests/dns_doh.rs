//! Black-box tests of DNS over HTTPS for the proxy's own lookups (`--doh`, RFC 8484,
//! docs/design.md §6 "DoH"): a fake nameserver on 127.0.0.1 that poisons every name (answers
//! 127.0.0.66, where nothing listens) and fake DoH servers on 127.0.0.1 (TLS with
//! tests/data/server.pem, trusted through the rig's `--ca-file`) that answer the Worker's name
//! with the Worker look-alike's real address, or misbehave (garbage, another name, another
//! content type). What is asserted: sessions go through the Worker via the DoH answer; with
//! `--doh-fallback off` the poisoning nameserver is never asked for the Worker's name; a
//! failing DoH server shows its reason in `ctl status` (`dns.doh`) while the next server (or
//! another tier) keeps sessions going; `--doh-fallback on` asks the nameserver after the DoH
//! servers; a non-https URL is a start error. Loopback only; no fixed sleeps.

mod common;

use std::io::Write;
use std::net::{SocketAddr, TcpListener, TcpStream, UdpSocket};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::ctl::Ctl;
use common::dnsreply::reply;
use common::fakedc::{tls_config_for, DcConfig, FakeDc, SERVER_KEY, SERVER_PEM};
use common::{client_opts, closed_port, os_rng, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;

const WAIT: Duration = Duration::from_secs(10);
/// The Worker's made-up name (server.pem covers `*.workers.dev`).
const WORKER: &str = "w1.workers.dev";
/// Where the poisoning nameserver points every name: nothing listens there.
const POISON: [u8; 4] = [127, 0, 0, 66];

/// Splits the question name out of a DNS query (RFC 1035 §4.1.2; no compression in a query).
fn qname(q: &[u8]) -> Option<String> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let len = *q.get(pos)? as usize;
        if len == 0 {
            return Some(labels.join("."));
        }
        let l = q.get(pos + 1..pos + 1 + len)?;
        labels.push(String::from_utf8_lossy(l).to_ascii_lowercase());
        pos += 1 + len;
    }
}

/// A query for `name` (type A, class IN) with id `id`, for a reply about another name.
fn query_for(id: [u8; 2], name: &str) -> Vec<u8> {
    let mut q = vec![id[0], id[1], 1, 0, 0, 1, 0, 0, 0, 0, 0, 0];
    for l in name.split('.') {
        q.push(l.len() as u8);
        q.extend_from_slice(l.as_bytes());
    }
    q.extend_from_slice(&[0, 0, 1, 0, 1]);
    q
}

/// A nameserver on 127.0.0.1 answering every A query with [`POISON`]; it logs the names.
struct Poisoner {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
    stop: Arc<AtomicBool>,
}

impl Poisoner {
    fn start() -> Poisoner {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(50)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let stop = Arc::new(AtomicBool::new(false));
        let (a, s) = (asked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut buf = [0u8; 1500];
            while !s.load(Ordering::SeqCst) {
                let Ok((n, from)) = sock.recv_from(&mut buf) else {
                    continue;
                };
                let q = &buf[..n];
                a.lock().unwrap().push(qname(q).unwrap_or_default());
                let _ = sock.send_to(&reply(q, 0, Some((POISON, 300))), from);
            }
        });
        Poisoner { addr, asked, stop }
    }

    fn asked_for(&self, name: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }

    /// A resolv.conf naming it.
    fn resolv_conf(&self) -> String {
        let path = temp_dir().join("resolv.conf");
        std::fs::write(&path, format!("nameserver {}\n", self.addr)).unwrap();
        path.display().to_string()
    }
}

impl Drop for Poisoner {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
    }
}

/// What a fake DoH server answers.
#[derive(Clone, Copy)]
enum Mode {
    /// The asked name → 127.0.0.1 (TTL 300), as `application/dns-message`.
    Right,
    /// 200 `application/dns-message` with bytes that are no DNS message.
    Garbage,
    /// A well-formed answer about another name (`evil.example` → [`POISON`]).
    OtherName,
    /// The right answer labelled `text/html`.
    Html,
}

/// A DoH server on 127.0.0.1 (`https://127.0.0.1:PORT/dns-query`, GET `?dns=`).
struct FakeDoh {
    addr: SocketAddr,
    asked: Arc<Mutex<Vec<String>>>,
}

impl FakeDoh {
    fn start(mode: Mode) -> FakeDoh {
        let l = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = l.local_addr().unwrap();
        let asked = Arc::new(Mutex::new(Vec::new()));
        let a = asked.clone();
        let cfg = tls_config_for(SERVER_PEM, SERVER_KEY);
        std::thread::spawn(move || {
            for sock in l.incoming() {
                let Ok(sock) = sock else { break };
                let (a, cfg) = (a.clone(), cfg.clone());
                std::thread::spawn(move || serve_doh(sock, &cfg, &a, mode));
            }
        });
        FakeDoh { addr, asked }
    }

    fn url(&self) -> String {
        format!("https://127.0.0.1:{}/dns-query", self.addr.port())
    }

    fn asked_for(&self, name: &str) -> usize {
        self.asked
            .lock()
            .unwrap()
            .iter()
            .filter(|n| *n == name)
            .count()
    }
}

/// base64url without padding (RFC 4648 §5), decoded.
fn unbase64url(s: &str) -> Option<Vec<u8>> {
    let mut bits = 0u32;
    let mut n = 0;
    let mut out = Vec::new();
    for c in s.bytes() {
        let v = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        };
        bits = (bits << 6) | u32::from(v);
        n += 6;
        if n >= 8 {
            n -= 8;
            out.push((bits >> n) as u8);
        }
    }
    Some(out)
}

fn serve_doh(
    sock: TcpStream,
    cfg: &Arc<rustls::ServerConfig>,
    asked: &Mutex<Vec<String>>,
    mode: Mode,
) {
    let Some((mut tls, text)) = common::https_head::accept(sock, cfg) else {
        return;
    };
    let path = text.split(' ').nth(1).unwrap_or("");
    let accept_ok = text
        .to_ascii_lowercase()
        .contains("\r\naccept: application/dns-message\r\n");
    let query = path
        .strip_prefix("/dns-query?dns=")
        .and_then(unbase64url)
        .filter(|_| accept_ok);
    let Some(q) = query else {
        let _ = tls.write_all(b"HTTP/1.1 400 Bad Request\r\nContent-Length: 0\r\n\r\n");
        return;
    };
    let name = qname(&q).unwrap_or_default();
    asked.lock().unwrap().push(name);
    let (ctype, body) = match mode {
        Mode::Right => (
            "application/dns-message",
            reply(&q, 0, Some(([127, 0, 0, 1], 300))),
        ),
        Mode::Garbage => ("application/dns-message", b"<html>not dns</html>".to_vec()),
        Mode::OtherName => (
            "application/dns-message",
            reply(
                &query_for([q[0], q[1]], "evil.example"),
                0,
                Some((POISON, 300)),
            ),
        ),
        Mode::Html => ("text/html", reply(&q, 0, Some(([127, 0, 0, 1], 300)))),
    };
    let mut out = format!(
        "HTTP/1.1 200 OK\r\nContent-Type: {ctype}\r\nContent-Length: {}\r\n\r\n",
        body.len()
    )
    .into_bytes();
    out.extend_from_slice(&body);
    let _ = tls.write_all(&out);
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// A proxy whose tiers are `tiers` (the Worker look-alike `worker` for DC 2, the fake DC `dc`
/// on the tcp tier), names from an empty hosts file and the poisoning nameserver, `extra`.
fn proxy(
    tiers: &str,
    worker: &FakeDc,
    dc: &FakeDc,
    dns: &Poisoner,
    ctl: &Ctl,
    extra: &[String],
) -> Proxy {
    let mut args: Vec<String> = [
        "--tier-order",
        tiers,
        "--cf-worker-domain",
        &format!("{WORKER}:{}", worker.port()),
        "--tcp-dc-ip",
        &format!("2:{}", dc.addr()),
        "--resolv-conf",
        &dns.resolv_conf(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(ctl.args());
    args.extend(extra.iter().cloned());
    common::ladder_proxy(&[], &args)
}

fn session_ok(p: &Proxy) -> bool {
    let a = probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, 2),
        &mut os_rng(),
    );
    a.outcome == Outcome::Ok
}

fn s(v: &str) -> String {
    v.to_string()
}

/// The rule "our own lookups go over DoH, and a poisoned plain answer never wins": the first
/// DoH server is down (connection refused), the second answers right; sessions reach the
/// Worker look-alike through its real address; the poisoning nameserver is never asked for the
/// Worker's name; `ctl status` shows server 1 down with its reason and server 2 up.
#[test]
fn doh_answers_carry_sessions_and_the_poisoning_nameserver_is_never_asked() {
    let dns = Poisoner::start();
    let doh = FakeDoh::start(Mode::Right);
    let worker = FakeDc::start_worker(DcConfig::default());
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let down = format!("https://{}/dns-query", closed_port());
    let p = proxy(
        "worker",
        &worker,
        &dc,
        &dns,
        &ctl,
        &[s("--doh"), down.clone(), s("--doh"), doh.url()],
    );
    assert!(
        wait_until(WAIT, || session_ok(&p)),
        "no session through the Worker\n{}",
        p.dump()
    );
    assert!(worker.upgrades() >= 1, "{}", p.dump());
    assert!(doh.asked_for(WORKER) >= 1);
    assert_eq!(dns.asked_for(WORKER), 0, "the plain nameserver was asked");
    let v = ctl.status(&p);
    let d = &v["dns"]["doh"];
    assert_eq!(v["dns"]["doh_fallback"], false);
    assert_eq!(d[0]["url"], down.as_str());
    assert_eq!(d[0]["state"], "down", "{v}");
    assert!(d[0]["last_error"].as_str().is_some_and(|e| !e.is_empty()));
    assert_eq!(d[1]["state"], "up", "{v}");
    assert!(d[1]["answers"].as_u64() >= Some(1));
}

/// A DoH server whose answers are garbage or about another name, or labelled with another
/// content type: each try fails with a reason `ctl status` shows, the name stays unresolved
/// (with fallback off the poisoning nameserver is never asked), the Worker gets nothing, and
/// sessions go on through the tcp tier ("nothing else affected").
#[test]
fn bad_doh_answers_leave_the_name_unresolved_with_the_reason_and_other_tiers_serve() {
    let dns = Poisoner::start();
    let garbage = FakeDoh::start(Mode::Garbage);
    let other = FakeDoh::start(Mode::OtherName);
    let html = FakeDoh::start(Mode::Html);
    let worker = FakeDc::start_worker(DcConfig::default());
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let p = proxy(
        "worker,tcp",
        &worker,
        &dc,
        &dns,
        &ctl,
        &[
            s("--doh"),
            garbage.url(),
            s("--doh"),
            other.url(),
            s("--doh"),
            html.url(),
            s("--doh-fallback"),
            s("off"),
        ],
    );
    let v = ctl.wait(&p, WAIT, |v| {
        let d = &v["dns"]["doh"];
        (0..3).all(|i| d[i]["state"] == "down")
    });
    let v = v.unwrap_or_else(|| panic!("not every DoH server is down\n{}", p.dump()));
    let why = |i: usize| {
        v["dns"]["doh"][i]["last_error"]
            .as_str()
            .unwrap_or("")
            .to_string()
    };
    assert!(why(0).contains("not a DNS response"), "{}", why(0));
    assert!(why(1).contains("evil.example"), "{}", why(1));
    assert!(why(2).contains("text/html"), "{}", why(2));
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
    assert!(dc.inits() >= 1, "the tcp tier served\n{}", p.dump());
    assert_eq!(worker.requests(), 0, "the Worker's name never resolved");
    assert_eq!(
        dns.asked_for(WORKER),
        0,
        "fallback off: never the plain nameserver"
    );
}

/// `--doh-fallback on`: once the DoH servers failed, the plain nameserver is asked too.
#[test]
fn with_fallback_on_the_nameserver_is_asked_after_the_doh_servers() {
    let dns = Poisoner::start();
    let garbage = FakeDoh::start(Mode::Garbage);
    let worker = FakeDc::start_worker(DcConfig::default());
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let p = proxy(
        "worker,tcp",
        &worker,
        &dc,
        &dns,
        &ctl,
        &[s("--doh"), garbage.url(), s("--doh-fallback"), s("on")],
    );
    assert!(
        wait_until(WAIT, || dns.asked_for(WORKER) >= 1),
        "{}",
        p.dump()
    );
    assert!(garbage.asked_for(WORKER) >= 1, "DoH first");
    let v = ctl.status(&p);
    assert_eq!(v["dns"]["doh_fallback"], true);
}

/// A DoH URL that is not https is refused at start with a clear error (exit 2, the flag and
/// the scheme named); a well-formed one with it would have started.
#[test]
fn a_non_https_doh_url_is_a_start_error() {
    for bad in ["http://127.0.0.1:8053/dns-query", "127.0.0.1", "https://"] {
        let r = common::run_bin(
            &["run", "--secret", SECRET, "--port", "0", "--doh", bad],
            &[],
            WAIT,
        );
        assert_eq!(r.code, Some(2), "{bad}: {r:?}");
        assert!(r.stderr.contains("--doh"), "{bad}: {}", r.stderr);
        if !bad.starts_with("https://") {
            assert!(r.stderr.contains("https://"), "{bad}: {}", r.stderr);
        }
    }
}

/// `check` resolves through `--doh` too: with the poisoning nameserver in resolv.conf, the
/// Worker route is proved through the DoH answer and the nameserver is never asked.
#[test]
fn check_resolves_over_doh() {
    let dns = Poisoner::start();
    let doh = FakeDoh::start(Mode::Right);
    let worker = FakeDc::start_worker(DcConfig::default());
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ca = common::data_path("ca.pem").display().to_string();
    let w = format!("{WORKER}:{}", worker.port());
    let d = format!("2:{}", dc.addr());
    let hosts = common::hosts_file(&[]).display().to_string();
    let resolv = dns.resolv_conf();
    let url = doh.url();
    let r = common::run_bin(
        &[
            "check",
            "--dc",
            "2",
            "--ca-file",
            &ca,
            "--cf-worker-domain",
            &w,
            "--tcp-dc-ip",
            &d,
            "--tier-order",
            "worker",
            "--probe-timeout",
            "3",
            "--hosts-file",
            &hosts,
            "--resolv-conf",
            &resolv,
            "--doh",
            &url,
        ],
        &[],
        Duration::from_secs(30),
    );
    assert_eq!(
        r.code,
        Some(0),
        "stdout:\n{}\nstderr:\n{}",
        r.stdout,
        r.stderr
    );
    assert!(worker.requests() >= 1, "{}", r.stdout);
    assert!(doh.asked_for(WORKER) >= 1);
    assert_eq!(dns.asked_for(WORKER), 0, "the plain nameserver was asked");
}
