//! Black-box tests of the shared Cloudflare domain list (`--cf-domain-list`, docs/protocol.md
//! §4.3 "Shared domain list"): the list served by a fake HTTPS server on 127.0.0.1 (TLS with
//! tests/data/server.pem, verified by the proxy through `--ca-file`), decoded, accepted only
//! with three valid names, cached on disk, and its domains used as cfproxy routes (a fake CF
//! front with tests/data/pool.pem); the rejections: too few valid entries (the old list stays),
//! an oversized body, a slow body, a redirect loop; and a server down at start (the cache is
//! used). End to end, the ladder rules of the list's domains: one answering 429 or 503 backs
//! off alone (one fake front per domain, on 127.0.0.1-3; its hits and `ctl status`), and a
//! changed list retires removed domains and brings in new ones. The fetch goes through
//! `--outbound-proxy` (microsocks), and with `socks5h://` the list's host name is the proxy's to
//! resolve. Every name is made up; names reach loopback (127.0.0.1-3) through a test hosts file
//! and an empty resolv.conf. No fixed sleeps.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fakedc::{tls_config_for, DcConfig, FakeDc, Fault, SERVER_KEY, SERVER_PEM};
use common::{client_opts, closed_port, os_rng, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::route::cflist::encode_entry;

const WAIT: Duration = Duration::from_secs(10);
/// The list server's name (covered by server.pem's `*.example.com`).
const LIST_HOST: &str = "list.example.com";
/// The made-up pool (pool.pem covers `*.` of each).
const POOL: [&str; 3] = [
    "pool-alpha-test.co.uk",
    "pool-bravo-test.co.uk",
    "pool-charlie-test.co.uk",
];

/// What the fake list server answers.
#[derive(Clone)]
enum Answer {
    /// 200 with this body (Content-Length).
    Body(String),
    /// 200, chunked, with this body in 7-byte chunks.
    Chunked(String),
    /// 200 with a Content-Length of `n` bytes, all sent.
    Huge(usize),
    /// 200, head and a few bytes, then nothing (the connection stays open).
    Slow,
    /// 302 to the same URL.
    RedirectLoop,
}

struct ListServer {
    addr: SocketAddr,
    answer: Arc<Mutex<Answer>>,
    requests: Arc<AtomicUsize>,
    paths: Arc<Mutex<Vec<String>>>,
}

impl ListServer {
    fn start(answer: Answer) -> ListServer {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind list server");
        let addr = l.local_addr().unwrap();
        let answer = Arc::new(Mutex::new(answer));
        let requests = Arc::new(AtomicUsize::new(0));
        let paths = Arc::new(Mutex::new(Vec::new()));
        let (a, r, p) = (answer.clone(), requests.clone(), paths.clone());
        let cfg = tls_config_for(SERVER_PEM, SERVER_KEY);
        std::thread::spawn(move || {
            for sock in l.incoming() {
                let Ok(sock) = sock else { break };
                let (a, r, p, cfg) = (a.clone(), r.clone(), p.clone(), cfg.clone());
                std::thread::spawn(move || serve(sock, &cfg, &a, &r, &p, addr));
            }
        });
        ListServer {
            addr,
            answer,
            requests,
            paths,
        }
    }

    fn url(&self) -> String {
        format!("https://{LIST_HOST}:{}/cf.txt", self.addr.port())
    }

    fn set(&self, a: Answer) {
        *self.answer.lock().unwrap() = a;
    }
}

fn serve(
    sock: TcpStream,
    cfg: &Arc<rustls::ServerConfig>,
    answer: &Mutex<Answer>,
    requests: &AtomicUsize,
    paths: &Mutex<Vec<String>>,
    addr: SocketAddr,
) {
    let Some((mut tls, text)) = common::https_head::accept(sock, cfg) else {
        return;
    };
    let path = text.split(' ').nth(1).unwrap_or("").to_string();
    paths.lock().unwrap().push(path);
    requests.fetch_add(1, Ordering::SeqCst);
    let a = answer.lock().unwrap().clone();
    let out: Vec<u8> = match a {
        Answer::Body(body) => format!(
            "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )
        .into_bytes(),
        Answer::Chunked(body) => {
            let mut s = String::from("HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n");
            for c in body.as_bytes().chunks(7) {
                s.push_str(&format!("{:x}\r\n{}\r\n", c.len(), String::from_utf8_lossy(c)));
            }
            s.push_str("0\r\n\r\n");
            s.into_bytes()
        }
        Answer::Huge(n) => {
            let mut v = format!("HTTP/1.1 200 OK\r\nContent-Length: {n}\r\n\r\n").into_bytes();
            v.extend(std::iter::repeat_n(b'a', n));
            v
        }
        Answer::Slow => {
            let _ = tls.write_all(b"HTTP/1.1 200 OK\r\nContent-Length: 100\r\n\r\nabc");
            let _ = tls.flush();
            // Hold the connection until the proxy gives up (its read ends ours).
            let _ = tls.read(&mut [0u8; 1024]);
            return;
        }
        Answer::RedirectLoop => format!(
            "HTTP/1.1 302 Found\r\nLocation: https://{LIST_HOST}:{}/cf.txt\r\nContent-Length: 0\r\n\r\n",
            addr.port()
        )
        .into_bytes(),
    };
    let _ = tls.write_all(&out);
    let _ = tls.flush();
    tls.conn.send_close_notify();
    let _ = tls.flush();
}

/// The encoded list of `names` (one `.com` entry a line, as published), with a comment.
fn encoded(names: &[&str]) -> String {
    let mut s = String::from("# made-up test list\n");
    for n in names {
        s.push_str(&encode_entry(n).expect("a .co.uk name"));
        s.push('\n');
    }
    s
}

fn names() -> Vec<String> {
    let mut v = vec![LIST_HOST.to_string()];
    for d in POOL {
        v.push(format!("kws2.{d}"));
    }
    v
}

/// A proxy with only the cfproxy tier, the list at `url`, the cache at `cache`, a fast
/// refresh/retry schedule and the pool dialled on `pool_port`.
fn proxy(url: &str, cache: &Path, pool_port: u16, extra: &[&str]) -> Proxy {
    let names = names();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let port = pool_port.to_string();
    let cache = cache.display().to_string();
    let mut args: Vec<String> = [
        "--tier-order",
        "cfproxy",
        "--cf-domain-list",
        url,
        "--cf-domain-cache",
        &cache,
        "--cf-domain-list-port",
        &port,
        "--cf-domain-list-timeout",
        "2s",
        "--cf-domain-list-retry",
        "300ms",
        "--cf-domain-list-refresh",
        "1h",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    common::ladder_proxy(&refs, &args)
}

/// Waits for the shared list to be accepted with `kept` names (the `cflist` event).
fn accepted(p: &Proxy, kept: u64) -> bool {
    p.wait_event("cflist", WAIT, |e| {
        e["result"] == "accepted" && e["kept"] == kept
    })
    .is_some()
}

/// Waits for a fetched list to be refused while `in_use` shared domains stay in use, for a
/// reason (the record's `why`, also `ctl status`'s `shared_list.last`) that names `rule`.
fn refused(p: &Proxy, in_use: u64, rule: &str) -> bool {
    p.wait_event("cflist", WAIT, |e| {
        e["result"] == "refused"
            && e["kept"] == in_use
            && e["why"].as_str().is_some_and(|w| w.contains(rule))
    })
    .is_some()
}

fn session_ok(p: &Proxy) -> bool {
    let a = probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, 2),
        &mut os_rng(),
    );
    a.outcome == Outcome::Ok
}

fn pool_front() -> FakeDc {
    FakeDc::start_tls_ws_with_cert(
        DcConfig::default(),
        include_bytes!("data/pool.pem"),
        include_bytes!("data/pool.key"),
    )
}

#[test]
fn a_valid_list_is_decoded_cached_and_its_domains_carry_sessions() {
    let front = pool_front();
    let list = ListServer::start(Answer::Chunked(encoded(&POOL)));
    let cache = temp_dir().join("cf-domains.txt");
    let p = proxy(&list.url(), &cache, front.port(), &[]);
    assert!(accepted(&p, 3), "{}", p.dump());
    let paths = list.paths.lock().unwrap().clone();
    assert!(
        paths[0].starts_with("/cf.txt?cb="),
        "cache-buster: {paths:?}"
    );
    let text = std::fs::read_to_string(&cache).expect("cache written");
    for d in POOL {
        assert!(text.lines().any(|l| l == d), "{text}");
    }
    assert!(
        wait_until(WAIT, || session_ok(&p)),
        "a session over a pool domain: {}",
        p.dump()
    );
    let snis = front.snis();
    assert!(
        snis.iter()
            .all(|s| POOL.iter().any(|d| *s == format!("kws2.{d}")))
            && !snis.is_empty(),
        "{snis:?}"
    );
}

#[test]
fn a_list_with_fewer_than_three_valid_entries_keeps_the_old_one() {
    let front = pool_front();
    let list = ListServer::start(Answer::Body(encoded(&POOL)));
    let cache = temp_dir().join("cf-domains.txt");
    let p = proxy(
        &list.url(),
        &cache,
        front.port(),
        &["--cf-domain-list-refresh", "500ms"],
    );
    assert!(accepted(&p, 3), "{}", p.dump());
    let before = std::fs::read_to_string(&cache).unwrap();
    // Two valid names and junk: rejected at the next refresh.
    list.set(Answer::Body(format!(
        "{}bad_name.com\n-x-.com\n",
        encoded(&POOL[..2])
    )));
    assert!(
        refused(&p, 3, "2 valid host name(s) of 4 entries"),
        "{}",
        p.dump()
    );
    assert_eq!(
        std::fs::read_to_string(&cache).unwrap(),
        before,
        "cache kept"
    );
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
}

#[test]
fn an_oversized_body_is_refused() {
    let list = ListServer::start(Answer::Huge(65 * 1024));
    let cache = temp_dir().join("cf-domains.txt");
    let p = proxy(&list.url(), &cache, closed_port().port(), &[]);
    assert!(
        refused(&p, 0, "body larger than 65536 bytes"),
        "{}",
        p.dump()
    );
    assert!(!cache.exists());
    // Retried on the backoff schedule, not in a loop.
    assert!(wait_until(WAIT, || list.requests.load(Ordering::SeqCst) >= 2));
    assert!(list.requests.load(Ordering::SeqCst) < 20);
}

#[test]
fn a_slow_body_ends_at_the_fetch_timeout() {
    let list = ListServer::start(Answer::Slow);
    let cache = temp_dir().join("cf-domains.txt");
    let p = proxy(
        &list.url(),
        &cache,
        closed_port().port(),
        &["--cf-domain-list-timeout", "700ms"],
    );
    assert!(
        refused(&p, 0, "no complete answer within 700 ms"),
        "{}",
        p.dump()
    );
    assert!(!cache.exists());
}

#[test]
fn a_redirect_loop_stops_after_three_redirects() {
    let list = ListServer::start(Answer::RedirectLoop);
    let cache = temp_dir().join("cf-domains.txt");
    let p = proxy(&list.url(), &cache, closed_port().port(), &[]);
    assert!(refused(&p, 0, "more than 3 redirects"), "{}", p.dump());
    // The first request and three redirects, then it stopped.
    assert!(list.requests.load(Ordering::SeqCst) >= 4);
    assert_eq!(list.paths.lock().unwrap()[1], "/cf.txt", "{:?}", list.paths);
}

#[test]
fn with_the_server_down_at_start_the_cached_list_is_used() {
    let front = pool_front();
    let cache = temp_dir().join("cf-domains.txt");
    // A cache a previous run wrote.
    {
        let list = ListServer::start(Answer::Body(encoded(&POOL)));
        let p = proxy(&list.url(), &cache, front.port(), &[]);
        assert!(accepted(&p, 3), "{}", p.dump());
    }
    assert!(cache.exists());
    let down = format!("https://{LIST_HOST}:{}/cf.txt", closed_port().port());
    let p = proxy(&down, &cache, front.port(), &[]);
    assert!(
        p.wait_event("cflist", WAIT, |e| e["result"] == "cached"
            && e["kept"] == 3)
            .is_some(),
        "{}",
        p.dump()
    );
    assert!(refused(&p, 3, "refused"), "{}", p.dump());
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
}

#[test]
fn a_file_source_is_read_like_a_download() {
    let front = pool_front();
    let dir = temp_dir();
    let file = dir.join("my-list.txt");
    std::fs::write(&file, encoded(&POOL)).unwrap();
    let cache = dir.join("cf-domains.txt");
    let p = proxy(file.to_str().unwrap(), &cache, front.port(), &[]);
    assert!(accepted(&p, 3), "{}", p.dump());
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
    // A missing file is an OS error named as such, and the domains in use stay.
    let gone = dir.join("missing.txt");
    let q = proxy(gone.to_str().unwrap(), &cache, front.port(), &[]);
    assert!(refused(&q, 3, "cannot read"), "{}", q.dump());
}

/// Issue 19 §4: a list longer than the 64 names taken was cut silently. Now the line that
/// accepts it says how many were kept and how many dropped, and so does `ctl status` (text and
/// `--json`).
#[test]
fn a_list_over_the_cap_says_how_many_were_kept_and_dropped() {
    let front = pool_front();
    let dir = temp_dir();
    let file = dir.join("long-list.txt");
    let names: Vec<String> = (0..100).map(|i| format!("pool-{i}-test.co.uk")).collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    std::fs::write(&file, encoded(&refs)).unwrap();
    let cache = dir.join("cf-domains.txt");
    let sock = dir.join("ctl.sock");
    let p = proxy(
        file.to_str().unwrap(),
        &cache,
        front.port(),
        &["--control-socket", sock.to_str().unwrap()],
    );
    assert!(
        p.wait_event("cflist", WAIT, |e| e["result"] == "accepted"
            && e["kept"] == 64
            && e["dropped"] == 36)
            .is_some(),
        "{}",
        p.dump()
    );
    let v = status(&p, &sock);
    let list = &v["shared_list"];
    assert_eq!(
        (list["kept"].as_u64(), list["dropped"].as_u64()),
        (Some(64), Some(36)),
        "{v}"
    );
    let text = common::run_bin(
        &["ctl", "status", "--control-socket", sock.to_str().unwrap()],
        &[],
        WAIT,
    );
    assert!(
        text.stdout.contains("64 kept, 36 dropped"),
        "{}",
        text.stdout
    );
}

/// `check` never fetches the list, but a FILE source is local: its domains are checked as
/// cfproxy routes (named in full, as published), each with its verdict.
#[test]
fn check_lists_the_domains_of_a_file_source_with_their_verdict() {
    let front = pool_front();
    let file = temp_dir().join("my-list.txt");
    std::fs::write(&file, encoded(&POOL)).unwrap();
    let names = names();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let ca = common::data_path("ca.pem").display().to_string();
    let port = front.port().to_string();
    let mut args: Vec<String> = [
        "check",
        "--dc",
        "2",
        "--ca-file",
        &ca,
        "--tier-order",
        "cfproxy",
        "--cf-domain-list",
        file.to_str().unwrap(),
        "--cf-domain-list-port",
        &port,
        "--probe-timeout",
        "3",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(common::name_args(&refs));
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let r = common::run_bin(&args, &[], Duration::from_secs(60));
    for d in POOL {
        let target = format!("kws2.{d}@127.0.0.1:{port}");
        let line = r
            .stdout
            .lines()
            .find(|l| {
                let w: Vec<&str> = l.split_whitespace().collect();
                w.get(1) == Some(&"cfproxy:DC2") && w.get(2) == Some(&target.as_str())
            })
            .unwrap_or_else(|| panic!("no cfproxy:DC2 line for {d}:\n{}\n{}", r.stdout, r.stderr));
        assert_eq!(line.split_whitespace().nth(3), Some("OK"), "{line}");
    }
}

/// One fake cfproxy front per pool domain, all on the same port (the list's domains share
/// `--cf-domain-list-port`), each on its own loopback address: `POOL[i]` on `127.0.0.(i+1)`;
/// `faults[i]` is that front's fault.
fn pool_fronts(faults: [Fault; 3]) -> Vec<FakeDc> {
    for _ in 0..20 {
        let first = pool_front_at("127.0.0.1:0".parse().unwrap(), faults[0]).unwrap();
        let port = first.port();
        let rest: Vec<FakeDc> = (1..3)
            .filter_map(|i| {
                let addr = SocketAddr::from(([127, 0, 0, i as u8 + 1], port));
                pool_front_at(addr, faults[i]).ok()
            })
            .collect();
        if rest.len() == 2 {
            let mut all = vec![first];
            all.extend(rest);
            return all;
        }
        // The port was taken on 127.0.0.2 or .3: try another one.
    }
    panic!("no port free on 127.0.0.1-3 for the pool fronts");
}

fn pool_front_at(addr: SocketAddr, fault: Fault) -> std::io::Result<FakeDc> {
    FakeDc::try_start_tls_ws_at(
        addr,
        DcConfig::with_fault(fault),
        include_bytes!("data/pool.pem"),
        include_bytes!("data/pool.key"),
    )
}

/// A hosts file mapping the list server to 127.0.0.1 and `kws2.POOL[i]` to `127.0.0.(i+1)`.
fn spread_hosts() -> String {
    let mut text = format!("127.0.0.1 {LIST_HOST}\n");
    for (i, d) in POOL.iter().enumerate() {
        text.push_str(&format!("127.0.0.{} kws2.{d}\n", i + 1));
    }
    let path = temp_dir().join("hosts");
    std::fs::write(&path, text).unwrap();
    path.display().to_string()
}

/// Requests for DC 2 (`Host: kws2.<domain>`) a front has seen: sessions and probes of that
/// domain's DC 2 route, whatever the answer.
fn dc2_requests(front: &FakeDc) -> usize {
    front
        .hosts()
        .iter()
        .filter(|h| h.starts_with("kws2."))
        .count()
}

/// `ctl status --json` over `sock`.
fn status(p: &Proxy, sock: &Path) -> serde_json::Value {
    let r = common::run_bin(
        &[
            "ctl",
            "status",
            "--json",
            "--control-socket",
            sock.to_str().unwrap(),
        ],
        &[],
        WAIT,
    );
    assert_eq!(r.code, Some(0), "ctl status: {r:?}\n{}", p.dump());
    serde_json::from_str(&r.stdout).unwrap_or_else(|e| panic!("not JSON: {e}\n{}", r.stdout))
}

/// The DC 2 cfproxy routes in `status` (id order: the list's order), without retired ones.
fn dc2_cf_routes(v: &serde_json::Value) -> Vec<serde_json::Value> {
    v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tier"] == "cfproxy" && r["dc"] == "DC2" && r["retired"] == false)
        .cloned()
        .collect()
}

/// The rule "a pool domain answering 429 or 5xx backs off without affecting the others"
/// (docs/protocol.md §4.3), end to end: the list holds bravo (answers `status` with a long
/// `Retry-After`), alpha and charlie, in that order, so bravo is the first route tried.
fn a_pool_domain_answering_an_error_backs_off_alone(code: u16) {
    let bad = Fault::HttpRetryAfter {
        status: code,
        secs: 3600,
    };
    // POOL order: alpha on .1, bravo on .2, charlie on .3.
    let fronts = pool_fronts([Fault::None, bad, Fault::None]);
    let (alpha, bravo, charlie) = (&fronts[0], &fronts[1], &fronts[2]);
    let list = ListServer::start(Answer::Body(encoded(&[POOL[1], POOL[0], POOL[2]])));
    let dir = temp_dir();
    let sock = dir.join("ctl.sock");
    let hosts = spread_hosts();
    let p = proxy(
        &list.url(),
        &dir.join("cf-domains.txt"),
        alpha.port(),
        &[
            "--hosts-file",
            &hosts,
            "--control-socket",
            sock.to_str().unwrap(),
        ],
    );
    assert!(accepted(&p, 3), "{}", p.dump());
    // The first session tries bravo first, is refused, and is carried by the next domain.
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
    let code_s = code.to_string();
    let failure = format!("http-{code}");
    assert!(
        p.wait_event("route", WAIT, |e| {
            e["label"]
                .as_str()
                .is_some_and(|l| l.starts_with("cfproxy:DC2 kws2."))
                && e["to"] == "down"
                && e["failure"] == failure.as_str()
        })
        .is_some(),
        "bravo's route cooled: {}",
        p.dump()
    );
    let refused = dc2_requests(bravo);
    assert!(refused >= 1, "bravo was tried first");
    assert_eq!(bravo.upgrades(), 0);
    let carried = alpha.inits();
    for _ in 0..6 {
        assert!(session_ok(&p), "{}", p.dump());
    }
    assert!(
        alpha.inits() >= carried + 6,
        "alpha carries the sessions: {} then {}",
        carried,
        alpha.inits()
    );
    assert_eq!(
        dc2_requests(bravo),
        refused,
        "bravo got nothing after its cooldown began: {}",
        p.dump()
    );
    // Only bravo is down; alpha is up; charlie (never needed) is untouched.
    let v = status(&p, &sock);
    let routes = dc2_cf_routes(&v);
    assert_eq!(routes.len(), 3, "{v}");
    assert_eq!(routes[0]["state"], "down", "bravo: {v}");
    assert!(
        routes[0]["cooldown_left_ms"].as_u64().unwrap() > 60_000,
        "Retry-After honoured: {v}"
    );
    let class = routes[0]["last_failure"]["class"].as_str().unwrap_or("");
    assert!(class.contains(&code_s), "{v}");
    assert_eq!(routes[1]["state"], "up", "alpha: {v}");
    assert!(routes[1]["sessions"].as_u64().unwrap() >= 7, "{v}");
    assert_eq!(routes[2]["state"], "unknown", "charlie: {v}");
    assert!(routes[2]["last_failure"].is_null(), "{v}");
    assert_eq!(
        charlie.upgrades(),
        dc2_requests(charlie),
        "charlie never refused"
    );
}

#[test]
fn a_pool_domain_answering_429_backs_off_alone() {
    a_pool_domain_answering_an_error_backs_off_alone(429);
}

#[test]
fn a_pool_domain_answering_503_backs_off_alone() {
    a_pool_domain_answering_an_error_backs_off_alone(503);
}

/// A list refresh (`--cf-domain-list-refresh`) that changes the domains, end to end: the list
/// first holds bravo and two names nothing resolves (they count as valid entries but are never
/// dialled), then charlie instead of bravo. Bravo's route is retired and gets nothing more;
/// new sessions go to charlie.
#[test]
fn a_changed_list_retires_removed_domains_and_adds_new_ones() {
    const UNRESOLVED: [&str; 2] = ["pool-delta-test.co.uk", "pool-echo-test.co.uk"];
    let fronts = pool_fronts([Fault::None; 3]);
    let (bravo, charlie) = (&fronts[1], &fronts[2]);
    let list = ListServer::start(Answer::Body(encoded(&[
        POOL[1],
        UNRESOLVED[0],
        UNRESOLVED[1],
    ])));
    let dir = temp_dir();
    let sock = dir.join("ctl.sock");
    let hosts = spread_hosts();
    let p = proxy(
        &list.url(),
        &dir.join("cf-domains.txt"),
        bravo.port(),
        &[
            "--hosts-file",
            &hosts,
            "--control-socket",
            sock.to_str().unwrap(),
            "--cf-domain-list-refresh",
            "300ms",
        ],
    );
    assert!(accepted(&p, 3), "{}", p.dump());
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
    assert!(
        bravo.inits() >= 1,
        "the first list's domain carries sessions"
    );
    assert_eq!(dc2_requests(charlie), 0);
    let fetched = list.requests.load(Ordering::SeqCst);
    list.set(Answer::Body(encoded(&[
        POOL[2],
        UNRESOLVED[0],
        UNRESOLVED[1],
    ])));
    let retired = || {
        let v = status(&p, &sock);
        let all = v["routes"].as_array().cloned().unwrap_or_default();
        all.iter()
            .filter(|r| r["tier"] == "cfproxy" && r["dc"] == "DC2" && r["retired"] == true)
            .count()
    };
    assert!(
        wait_until(WAIT, || retired() == 1),
        "the new list retired bravo's route: {}",
        p.dump()
    );
    assert!(list.requests.load(Ordering::SeqCst) > fetched);
    let bravo_seen = dc2_requests(bravo);
    for _ in 0..5 {
        assert!(session_ok(&p), "{}", p.dump());
    }
    assert!(
        charlie.inits() >= 5,
        "the new domain carries new sessions: {}",
        p.dump()
    );
    assert_eq!(
        dc2_requests(bravo),
        bravo_seen,
        "the removed domain got nothing: {}",
        p.dump()
    );
    let v = status(&p, &sock);
    let all: Vec<&serde_json::Value> = v["routes"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|r| r["tier"] == "cfproxy" && r["dc"] == "DC2")
        .collect();
    let retired: Vec<_> = all.iter().filter(|r| r["retired"] == true).collect();
    assert_eq!(retired.len(), 1, "{v}");
    assert_eq!(retired[0]["state"], "retired", "{v}");
    let live = dc2_cf_routes(&v);
    assert_eq!(live.len(), 3, "{v}");
    assert!(
        live.iter()
            .any(|r| r["state"] == "up" && r["sessions"].as_u64().unwrap() >= 5),
        "charlie's new route is up with the sessions: {v}"
    );
}

#[test]
fn the_list_is_fetched_through_the_outbound_proxy() {
    let list = ListServer::start(Answer::Body(encoded(&POOL)));
    let out = common::outproxy::OutProxy::microsocks(None);
    let cache = temp_dir().join("cf-domains.txt");
    let p = proxy(
        &list.url(),
        &cache,
        closed_port().port(),
        &["--outbound-proxy", &out.url()],
    );
    assert!(accepted(&p, 3), "{}\nmicrosocks:\n{}", p.dump(), out.dump());
    assert!(
        out.wait_connects(list.addr.port(), 1, WAIT),
        "the fetch did not go through the outbound proxy:\n{}",
        out.dump()
    );
}

#[test]
fn socks5h_hands_the_list_host_to_the_outbound_proxy() {
    // `localhost` is not in the test hosts file and the resolv.conf is empty: only the proxy
    // (microsocks asks the system, /etc/hosts) can resolve it, as socks5h:// means.
    let list = ListServer::start(Answer::Body(encoded(&POOL)));
    let out = common::outproxy::OutProxy::microsocks(None);
    let cache = temp_dir().join("cf-domains.txt");
    let url = format!("https://localhost:{}/cf.txt", list.addr.port());
    let socks5h = format!("socks5h://{}", out.addr());
    let p = proxy(
        &url,
        &cache,
        closed_port().port(),
        &["--outbound-proxy", &socks5h],
    );
    assert!(accepted(&p, 3), "{}\nmicrosocks:\n{}", p.dump(), out.dump());
    assert!(
        out.dump()
            .contains(&format!("connected to localhost:{}", list.addr.port())),
        "the outbound proxy was not asked for the name:\n{}",
        out.dump()
    );
}
