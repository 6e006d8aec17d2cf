//! Black-box tests of the shared Cloudflare domain list (`--cf-domain-list`, docs/protocol.md
//! §4.3 "Shared domain list"): the list served by a fake HTTPS server on 127.0.0.1 (TLS with
//! tests/data/server.pem, verified by the proxy through `--ca-file`), decoded, accepted only
//! with three valid names, cached on disk, and its domains used as cfproxy routes (a fake CF
//! front with tests/data/pool.pem); the rejections: too few valid entries (the old list stays),
//! an oversized body, a slow body, a redirect loop; and a server down at start (the cache is
//! used). The fetch goes through `--outbound-proxy` (microsocks), and with `socks5h://` the
//! list's host name is the proxy's to resolve. Every name is made up; names reach 127.0.0.1 through a test hosts file and an empty
//! resolv.conf. No fixed sleeps.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::fakedc::{tls_config_for, DcConfig, FakeDc, SERVER_KEY, SERVER_PEM};
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
    let _ = sock.set_read_timeout(Some(Duration::from_secs(20)));
    let conn = rustls::ServerConnection::new(cfg.clone()).unwrap();
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut b) {
            Ok(0) | Err(_) => return,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    let text = String::from_utf8_lossy(&head).to_string();
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
            let _ = tls.read(&mut b);
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
    assert!(
        p.wait_line(&["cf-domain-list", "accepted 3 domains"], WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
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
    assert!(
        p.wait_line(&["accepted 3 domains"], WAIT).is_some(),
        "{}",
        p.dump()
    );
    let before = std::fs::read_to_string(&cache).unwrap();
    // Two valid names and junk: rejected at the next refresh.
    list.set(Answer::Body(format!(
        "{}bad_name.com\n-x-.com\n",
        encoded(&POOL[..2])
    )));
    assert!(
        p.wait_line(
            &[
                "cf-domain-list",
                "2 valid host name(s) of 4 entries",
                "keeping the 3"
            ],
            WAIT
        )
        .is_some(),
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
        p.wait_line(&["cf-domain-list", "body larger than 65536 bytes"], WAIT)
            .is_some(),
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
        p.wait_line(
            &["cf-domain-list", "no complete answer within 700 ms"],
            WAIT
        )
        .is_some(),
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
    assert!(
        p.wait_line(&["cf-domain-list", "more than 3 redirects"], WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
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
        assert!(
            p.wait_line(&["accepted 3 domains"], WAIT).is_some(),
            "{}",
            p.dump()
        );
    }
    assert!(cache.exists());
    let down = format!("https://{LIST_HOST}:{}/cf.txt", closed_port().port());
    let p = proxy(&down, &cache, front.port(), &[]);
    assert!(
        p.wait_line(&["cf-domain-list", "using 3 cached domains"], WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
    assert!(
        p.wait_line(&["cf-domain-list", "refused", "keeping the 3"], WAIT)
            .is_some(),
        "{}",
        p.dump()
    );
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
    assert!(
        p.wait_line(
            &["cf-domain-list", "my-list.txt", "accepted 3 domains"],
            WAIT
        )
        .is_some(),
        "{}",
        p.dump()
    );
    assert!(wait_until(WAIT, || session_ok(&p)), "{}", p.dump());
    // A missing file is an OS error named as such, and the domains in use stay.
    let gone = dir.join("missing.txt");
    let q = proxy(gone.to_str().unwrap(), &cache, front.port(), &[]);
    assert!(
        q.wait_line(
            &[
                "cf-domain-list",
                "cannot read",
                "No such file",
                "keeping the 3"
            ],
            WAIT
        )
        .is_some(),
        "{}",
        q.dump()
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
    assert!(
        p.wait_line(&["cf-domain-list", "accepted 3 domains"], WAIT)
            .is_some(),
        "{}\nmicrosocks:\n{}",
        p.dump(),
        out.dump()
    );
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
    assert!(
        p.wait_line(&["cf-domain-list", "accepted 3 domains"], WAIT)
            .is_some(),
        "{}\nmicrosocks:\n{}",
        p.dump(),
        out.dump()
    );
    assert!(
        out.dump()
            .contains(&format!("connected to localhost:{}", list.addr.port())),
        "the outbound proxy was not asked for the name:\n{}",
        out.dump()
    );
}
