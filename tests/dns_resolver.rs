//! The DNS resolver driven by a real mio `Poll` against fake nameservers on 127.0.0.1.
//!
//! Owns the fake DNS server (a thread with a std UDP socket, our own minimal responder) and a
//! small reactor-like loop (`Driver`) that does what the proxy's reactor does: register the
//! resolver's socket, poll with its deadline, call `on_readable`/`on_tick`, wake on the names
//! they return. Loopback only; waits are bounded by deadlines, never fixed sleeps.

#[path = "common/dnsreply.rs"]
mod dnsreply;

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr, UdpSocket};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use dnsreply::reply;
use mio::{Events, Interest, Poll, Token};
use tg_ws_proxy::dns::{normalize_host, Lookup, Resolver, ResolverConfig};

const DNS: Token = Token(7);
/// Longest single poll (ms) so a test's own deadlines are checked often.
const MAX_STEP: Duration = Duration::from_millis(50);

#[derive(Clone, Copy, Debug)]
enum Rec {
    A([u8; 4], u32),
    Nx,
    /// NXDOMAIN with the zone's SOA in the authority section: its TTL and MINIMUM (seconds).
    NxSoa(u32, u32),
    ServFail,
}

#[derive(Default)]
struct State {
    zone: HashMap<String, Rec>,
    /// (name, when) of every query received.
    log: Vec<(String, Instant)>,
    /// Before each real answer, send a wrong-id reply and a right-id reply from another port.
    spoof: bool,
}

/// A fake recursive nameserver on 127.0.0.1:ephemeral. Unknown names get NXDOMAIN.
struct FakeDns {
    addr: SocketAddr,
    state: Arc<Mutex<State>>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl FakeDns {
    fn start() -> FakeDns {
        let sock = UdpSocket::bind("127.0.0.1:0").unwrap();
        sock.set_read_timeout(Some(Duration::from_millis(20)))
            .unwrap();
        let addr = sock.local_addr().unwrap();
        let state = Arc::new(Mutex::new(State::default()));
        let stop = Arc::new(AtomicBool::new(false));
        let (st, sp) = (state.clone(), stop.clone());
        let thread = std::thread::spawn(move || serve(sock, st, sp));
        FakeDns {
            addr,
            state,
            stop,
            thread: Some(thread),
        }
    }

    fn set(&self, name: &str, rec: Rec) {
        self.state
            .lock()
            .unwrap()
            .zone
            .insert(name.to_string(), rec);
    }

    fn spoof(&self, on: bool) {
        self.state.lock().unwrap().spoof = on;
    }

    fn queries(&self, name: &str) -> Vec<Instant> {
        let st = self.state.lock().unwrap();
        st.log
            .iter()
            .filter(|(n, _)| n == name)
            .map(|(_, t)| *t)
            .collect()
    }
}

impl Drop for FakeDns {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve(sock: UdpSocket, state: Arc<Mutex<State>>, stop: Arc<AtomicBool>) {
    let spoofer = UdpSocket::bind("127.0.0.1:0").unwrap();
    let mut buf = [0u8; 512];
    while !stop.load(Ordering::Relaxed) {
        let Ok((n, from)) = sock.recv_from(&mut buf) else {
            continue;
        };
        let Some((name, qend)) = parse_query(&buf[..n]) else {
            continue;
        };
        let query = &buf[..qend];
        let (rec, spoof) = {
            let mut st = state.lock().unwrap();
            st.log.push((name.clone(), Instant::now()));
            (st.zone.get(&name).copied().unwrap_or(Rec::Nx), st.spoof)
        };
        match rec {
            Rec::Nx => drop(sock.send_to(&reply(query, 3, None), from)),
            Rec::NxSoa(ttl, minimum) => {
                drop(sock.send_to(&with_soa(reply(query, 3, None), ttl, minimum), from))
            }
            Rec::ServFail => drop(sock.send_to(&reply(query, 2, None), from)),
            Rec::A(ip, ttl) => {
                if spoof {
                    let evil = reply(query, 0, Some(([6, 6, 6, 6], ttl)));
                    let mut wrong_id = evil.clone();
                    wrong_id[1] ^= 0x5a;
                    sock.send_to(&wrong_id, from).unwrap();
                    spoofer.send_to(&evil, from).unwrap();
                }
                sock.send_to(&reply(query, 0, Some((ip, ttl))), from)
                    .unwrap();
            }
        }
    }
}

/// `p` (a reply with no records) with one SOA in its authority section (RFC 1035 §3.3.13):
/// owner the question name, record TTL `ttl`, MINIMUM `minimum`.
fn with_soa(mut p: Vec<u8>, ttl: u32, minimum: u32) -> Vec<u8> {
    p[9] = 1; // NSCOUNT
    p.extend_from_slice(&[0xc0, 12, 0, 6, 0, 1]);
    p.extend_from_slice(&ttl.to_be_bytes());
    let mut rdata = b"\x02ns\x00\x04host\x00".to_vec();
    for v in [1u32, 7200, 3600, 1_209_600, minimum] {
        rdata.extend_from_slice(&v.to_be_bytes());
    }
    p.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    p.extend_from_slice(&rdata);
    p
}

/// (lowercase question name, end of the question section) of a query.
fn parse_query(p: &[u8]) -> Option<(String, usize)> {
    let mut pos = 12;
    let mut labels = Vec::new();
    loop {
        let n = *p.get(pos)? as usize;
        if n == 0 {
            break;
        }
        labels.push(String::from_utf8_lossy(p.get(pos + 1..pos + 1 + n)?).to_ascii_lowercase());
        pos += 1 + n;
    }
    let end = pos + 5;
    (p.len() >= end).then(|| (labels.join("."), end))
}

/// The reactor's part: one Poll, the resolver's socket registered, its deadline honoured.
struct Driver {
    poll: Poll,
    events: Events,
    res: Resolver,
    clock: Instant,
}

impl Driver {
    fn new(cfg: ResolverConfig) -> Driver {
        let poll = Poll::new().unwrap();
        let dir = cfg.hosts_path.parent().map(PathBuf::from);
        let mut res = Resolver::new(cfg).unwrap();
        // The files are read once, in `new`: the per-test directory can go now.
        if let Some(dir) = dir.filter(|d| d.to_string_lossy().contains("tgwsp-dns-")) {
            let _ = std::fs::remove_dir_all(dir);
        }
        poll.registry()
            .register(res.socket(), DNS, Interest::READABLE)
            .unwrap();
        Driver {
            poll,
            events: Events::with_capacity(16),
            res,
            clock: Instant::now(),
        }
    }

    fn now(&self) -> u64 {
        self.clock.elapsed().as_millis() as u64
    }

    /// One loop iteration; returns the names the resolver reported.
    fn step(&mut self) -> Vec<String> {
        let now = self.now();
        let timeout = self.res.next_deadline().map_or(MAX_STEP, |d| {
            Duration::from_millis(d.saturating_sub(now)).min(MAX_STEP)
        });
        self.poll.poll(&mut self.events, Some(timeout)).unwrap();
        let now = self.now();
        let mut woken = Vec::new();
        if self.events.iter().any(|e| e.token() == DNS) {
            woken.extend(self.res.on_readable(now));
        }
        if self.res.next_deadline().is_some_and(|d| d <= now) {
            woken.extend(self.res.on_tick(now));
        }
        woken
    }

    /// Runs the loop until `name` is reported, then looks it up (must not be Pending).
    fn wait(&mut self, name: &str, limit: Duration) -> Lookup {
        let key = name.trim_end_matches('.').to_ascii_lowercase();
        let until = Instant::now() + limit;
        while !self.step().contains(&key) {
            assert!(
                Instant::now() < until,
                "{name} not reported within {limit:?}"
            );
        }
        let r = self.res.lookup(name, self.now());
        assert_ne!(r, Lookup::Pending, "reported but still pending");
        r
    }

    /// lookup → Pending → wait for the report.
    fn resolve(&mut self, name: &str) -> Lookup {
        assert_eq!(self.res.lookup(name, self.now()), Lookup::Pending);
        self.wait(name, Duration::from_secs(5))
    }
}

/// A per-test directory with a hosts file and a resolv.conf (`nameserver 127.0.0.1`; the
/// override carries the real ports).
fn files(test: &str) -> (PathBuf, PathBuf) {
    let dir = std::env::temp_dir().join(format!("tgwsp-dns-{}-{test}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let hosts = dir.join("hosts");
    let resolv = dir.join("resolv.conf");
    std::fs::write(
        &hosts,
        "127.0.0.1 localhost\n10.1.2.3 Local.Test # router\n::1 v6only.test\n",
    )
    .unwrap();
    std::fs::write(&resolv, "nameserver 127.0.0.1\n").unwrap();
    (hosts, resolv)
}

fn config(test: &str, servers: Vec<SocketAddr>) -> ResolverConfig {
    let (hosts_path, resolv_path) = files(test);
    ResolverConfig {
        hosts_path,
        resolv_path,
        nameservers_override: Some(servers),
        ..ResolverConfig::default()
    }
}

/// A bound socket that never answers (no ICMP unreachable either).
fn black_hole() -> UdpSocket {
    let s = UdpSocket::bind("127.0.0.1:0").unwrap();
    s.set_nonblocking(true).unwrap();
    s
}

fn received(s: &UdpSocket) -> usize {
    let mut buf = [0u8; 512];
    std::iter::from_fn(|| s.recv_from(&mut buf).ok()).count()
}

fn ip(b: [u8; 4]) -> IpAddr {
    IpAddr::from(b)
}

#[test]
fn answer_arrives_and_is_cached() {
    let ns = FakeDns::start();
    ns.set("tg.example.test", Rec::A([203, 0, 113, 7], 300));
    let mut d = Driver::new(config("cached", vec![ns.addr]));
    // Literals and hosts entries never touch the network.
    assert_eq!(
        d.res.lookup("192.0.2.1", d.now()),
        Lookup::Ready(ip([192, 0, 2, 1]))
    );
    assert_eq!(
        d.res.lookup("local.test", d.now()),
        Lookup::Ready(ip([10, 1, 2, 3]))
    );
    assert_eq!(d.res.counters().queries, 0);

    assert_eq!(
        d.resolve("Tg.Example.TEST."),
        Lookup::Ready(ip([203, 0, 113, 7]))
    );
    assert_eq!(
        d.res.lookup("tg.example.test", d.now()),
        Lookup::Ready(ip([203, 0, 113, 7]))
    );
    assert_eq!(
        ns.queries("tg.example.test").len(),
        1,
        "two lookups, one query"
    );
    assert_eq!(d.res.counters().queries, 1);
    // Nothing due for a long time: the next deadline is the refresh at 80 % of 300 s.
    assert!(d
        .res
        .next_deadline()
        .is_some_and(|t| t >= d.now() + 200_000));
}

#[test]
fn nxdomain_is_negatively_cached() {
    let ns = FakeDns::start();
    let mut d = Driver::new(config("nx", vec![ns.addr]));
    assert_eq!(d.resolve("nx.test"), Lookup::Failed("NXDOMAIN".into()));
    assert_eq!(
        d.res.lookup("nx.test", d.now()),
        Lookup::Failed("NXDOMAIN".into())
    );
    assert_eq!(ns.queries("nx.test").len(), 1);
}

#[test]
fn nxdomain_is_cached_for_the_zones_negative_ttl_not_the_default() {
    // A kwsN-1 name the CF domain does not have: the zone says 1 s (min(TTL 1, MINIMUM 900)),
    // the resolver's own default is 60 s. Asked again right after 1 s, never before.
    let ns = FakeDns::start();
    ns.set("kws2-1.example.com", Rec::NxSoa(1, 900));
    let mut d = Driver::new(config("nxsoa", vec![ns.addr]));
    let name = "kws2-1.example.com";
    assert_eq!(d.resolve(name), Lookup::Failed("NXDOMAIN".into()));
    let first = Instant::now();
    while first.elapsed() < Duration::from_millis(800) {
        assert_eq!(
            d.res.lookup(name, d.now()),
            Lookup::Failed("NXDOMAIN".into())
        );
        d.step();
    }
    assert_eq!(
        ns.queries(name).len(),
        1,
        "no query inside the zone's negative TTL"
    );
    let until = Instant::now() + Duration::from_secs(5);
    while d.res.lookup(name, d.now()) != Lookup::Pending {
        assert!(
            Instant::now() < until,
            "not asked again after the zone's 1 s"
        );
        d.step();
    }
    d.wait(name, Duration::from_secs(5));
    assert_eq!(ns.queries(name).len(), 2);
}

#[test]
fn timeout_moves_to_next_server_then_fails() {
    let ns = FakeDns::start();
    ns.set("slow.test", Rec::A([198, 51, 100, 1], 300));
    let hole = black_hole();
    let cfg = ResolverConfig {
        timeout_ms: 300,
        attempts: 1,
        ..config("timeout", vec![hole.local_addr().unwrap(), ns.addr])
    };
    let mut d = Driver::new(cfg);
    let t0 = Instant::now();
    assert_eq!(d.resolve("slow.test"), Lookup::Ready(ip([198, 51, 100, 1])));
    assert!(
        t0.elapsed() >= Duration::from_millis(300),
        "answered only after the first try timed out"
    );
    assert_eq!(received(&hole), 1);
    assert_eq!(ns.queries("slow.test").len(), 1);

    let (h1, h2) = (black_hole(), black_hole());
    let cfg = ResolverConfig {
        timeout_ms: 200,
        attempts: 1,
        ..config(
            "timeout2",
            vec![h1.local_addr().unwrap(), h2.local_addr().unwrap()],
        )
    };
    let mut d = Driver::new(cfg);
    let t0 = Instant::now();
    assert_eq!(
        d.resolve("dead.test"),
        Lookup::Failed("no answer within 200 ms".into())
    );
    assert!(t0.elapsed() >= Duration::from_millis(400));
    assert_eq!((received(&h1), received(&h2)), (1, 1));
    // Negatively cached: no new query.
    assert!(matches!(
        d.res.lookup("dead.test", d.now()),
        Lookup::Failed(_)
    ));
    assert_eq!(d.res.counters().queries, 2);
}

#[test]
fn servfail_moves_to_next_server() {
    let (bad, good) = (FakeDns::start(), FakeDns::start());
    bad.set("sf.test", Rec::ServFail);
    good.set("sf.test", Rec::A([198, 51, 100, 9], 300));
    let mut d = Driver::new(config("servfail", vec![bad.addr, good.addr]));
    assert_eq!(d.resolve("sf.test"), Lookup::Ready(ip([198, 51, 100, 9])));
    assert_eq!(
        (bad.queries("sf.test").len(), good.queries("sf.test").len()),
        (1, 1)
    );
}

#[test]
fn refresh_before_expiry_serves_old_answer_meanwhile() {
    let ns = FakeDns::start();
    ns.set("short.test", Rec::A([192, 0, 2, 10], 2));
    // TTL 2 s, refresh at 50 %: due 1 s after the answer, expiry 1 s later.
    let cfg = ResolverConfig {
        min_ttl_ms: 0,
        refresh_ahead_pct: 50,
        ..config("refresh", vec![ns.addr])
    };
    let mut d = Driver::new(cfg);
    assert_eq!(d.resolve("short.test"), Lookup::Ready(ip([192, 0, 2, 10])));
    let answered = ns.queries("short.test")[0];
    ns.set("short.test", Rec::A([192, 0, 2, 20], 2));

    let until = Instant::now() + Duration::from_secs(5);
    let mut refreshed = false;
    while !refreshed {
        assert!(Instant::now() < until, "no refresh within 5 s");
        refreshed = d.step().contains(&"short.test".to_string());
        // Every lookup meanwhile is answered from the cache, old or new.
        match d.res.lookup("short.test", d.now()) {
            Lookup::Ready(a) if a == ip([192, 0, 2, 10]) => assert!(!refreshed),
            Lookup::Ready(a) if a == ip([192, 0, 2, 20]) => assert!(refreshed),
            other => panic!("lookup during refresh gave {other:?}"),
        }
    }
    let q = ns.queries("short.test");
    assert_eq!(q.len(), 2, "exactly one refresh query");
    let after = q[1] - answered;
    assert!(
        after >= Duration::from_millis(990),
        "refreshed too early: {after:?}"
    );
    assert!(
        after < Duration::from_millis(2_000),
        "refreshed only after expiry: {after:?}"
    );
}

#[test]
fn spoofed_replies_are_ignored() {
    let ns = FakeDns::start();
    ns.set("target.test", Rec::A([192, 0, 2, 33], 300));
    ns.spoof(true);
    let mut d = Driver::new(config("spoof", vec![ns.addr]));
    assert_eq!(d.resolve("target.test"), Lookup::Ready(ip([192, 0, 2, 33])));
    // Wrong id from the server's port, right id from another port: both dropped.
    assert_eq!(d.res.counters().ignored, 2);
    assert_eq!(d.res.counters().answers, 1);
}

#[test]
fn watched_name_resolves_without_a_lookup() {
    let ns = FakeDns::start();
    ns.set("worker.test", Rec::A([192, 0, 2, 44], 300));
    let mut d = Driver::new(config("watch", vec![ns.addr]));
    d.res
        .watch(&normalize_host("https://Worker.Test/apiws").unwrap());
    assert_eq!(d.res.next_deadline(), Some(0));
    assert_eq!(
        d.wait("worker.test", Duration::from_secs(5)),
        Lookup::Ready(ip([192, 0, 2, 44]))
    );
    assert_eq!(d.res.cached("worker.test"), Some(ip([192, 0, 2, 44])));
    assert_eq!(ns.queries("worker.test").len(), 1);
}
