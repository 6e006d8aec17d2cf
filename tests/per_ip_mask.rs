//! Black-box: the per-client limits do not give an `ee` port away (issue 19 §2; docs/operating.md
//! "Per-client limits"). A site answers every connection; a port that closes connections over
//! `--max-per-ip` or the rate before their first byte answers 64 of 100 probes from one address.
//! With an `ee` secret a connection over a limit is handled like a client that is not ours —
//! its hello read and masked, ours included — within `--per-ip-mask` such connections at once;
//! past that budget it is closed at once as before.
//!
//! The mask site here is the test's own: it answers `SITE:` and echoes every byte it gets, so
//! a probe knows its own hello reached it exactly and the answer is the site's. Counts come
//! from `ctl status --json`. Real sockets on 127.0.0.1, no fixed sleeps.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::{Duration, Instant};

use rustls::pki_types::ServerName;
use rustls::ClientConnection;

use common::eebed::{ee_key, ee_secret, ee_session, EE_DOMAIN};
use common::fakedc::{DcConfig, FakeDc};
use common::faketls::{build_hello, HelloSpec};
use common::{os_rng, run_bin, temp_dir, test_client_tls, wait_until, Proxy};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

const WAIT: Duration = Duration::from_secs(10);

/// What the site sends first on every connection that sent it something.
const SITE: &[u8] = b"SITE:";

/// The test's mask site: answers [`SITE`], then echoes every byte, until the other side ends.
/// Counts connections.
struct EchoSite {
    addr: SocketAddr,
    visits: Arc<AtomicUsize>,
}

impl EchoSite {
    fn start() -> EchoSite {
        let l = TcpListener::bind("127.0.0.1:0").expect("site: bind");
        let addr = l.local_addr().unwrap();
        let visits = Arc::new(AtomicUsize::new(0));
        let n = visits.clone();
        thread::spawn(move || {
            for c in l.incoming() {
                let Ok(mut c) = c else { continue };
                n.fetch_add(1, Ordering::SeqCst);
                thread::spawn(move || {
                    let mut buf = [0u8; 4096];
                    let mut first = true;
                    while let Ok(k) = c.read(&mut buf) {
                        if k == 0 {
                            break;
                        }
                        if std::mem::take(&mut first) && c.write_all(SITE).is_err() {
                            break;
                        }
                        if c.write_all(&buf[..k]).is_err() {
                            break;
                        }
                    }
                });
            }
        });
        EchoSite { addr, visits }
    }
}

/// A ClientHello as a real TLS client sends it (rustls, SNI the `ee` domain): valid TLS, not
/// ours.
fn real_tls_hello() -> Vec<u8> {
    let name = ServerName::try_from(EE_DOMAIN).unwrap();
    let mut c = ClientConnection::new(test_client_tls(), name).expect("rustls client");
    let mut out = Vec::new();
    c.write_tls(&mut out).expect("client hello");
    out
}

/// One prober: a connection that sent `hello`.
struct Probe {
    sock: TcpStream,
    hello: Vec<u8>,
}

impl Probe {
    fn send(addr: SocketAddr, hello: Vec<u8>) -> Probe {
        let mut sock = TcpStream::connect(addr).expect("connect");
        sock.write_all(&hello).expect("write hello");
        Probe { sock, hello }
    }

    /// The site's answer came: `SITE:` and the hello echoed exactly. Else what came (an empty
    /// answer: closed without a byte).
    fn answered(&mut self) -> Result<(), Vec<u8>> {
        self.sock.set_read_timeout(Some(WAIT)).unwrap();
        let want = [SITE, &self.hello[..]].concat();
        let mut got = vec![0u8; want.len()];
        let mut n = 0;
        while n < got.len() {
            match self.sock.read(&mut got[n..]) {
                Ok(0) | Err(_) => break,
                Ok(k) => n += k,
            }
        }
        got.truncate(n);
        if got == want {
            Ok(())
        } else {
            Err(got)
        }
    }
}

/// 100 hellos that are not ours: half signed with another key, half a real TLS client's.
fn hellos(rng: &mut Rng) -> Vec<Vec<u8>> {
    (0..100)
        .map(|i| {
            if i % 2 == 0 {
                build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), rng).bytes
            } else {
                real_tls_hello()
            }
        })
        .collect()
}

/// Opens every probe at once, then reads every answer: how many got the site's.
fn burst(addr: SocketAddr, hellos: &[Vec<u8>]) -> usize {
    let mut probes: Vec<Probe> = hellos
        .iter()
        .map(|h| Probe::send(addr, h.clone()))
        .collect();
    probes
        .iter_mut()
        .map(|p| p.answered())
        .filter(Result::is_ok)
        .count()
}

fn ctl_path() -> PathBuf {
    temp_dir().join("ctl.sock")
}

/// `ctl status --json`'s counters.
fn counters(p: &Proxy, sock: &Path) -> serde_json::Value {
    let path = sock.to_str().unwrap();
    let r = run_bin(
        &["ctl", "status", "--json", "--control-socket", path],
        &[],
        WAIT,
    );
    assert_eq!(r.code, Some(0), "ctl: {r:?}\n{}", p.dump());
    let v: serde_json::Value = serde_json::from_str(&r.stdout).expect("status JSON");
    v["counters"].clone()
}

/// The number `counters[group][key]` (0 when absent).
fn count(c: &serde_json::Value, group: &str, key: &str) -> u64 {
    c[group][key].as_u64().unwrap_or(0)
}

/// An `ee` proxy on the tcp tier masking to `site`, with a control socket and `extra` flags.
fn proxy(dc: &FakeDc, site: &EchoSite, ctl: &Path, extra: &[&str]) -> Proxy {
    let (secret, mask, dc) = (
        ee_secret(),
        site.addr.to_string(),
        format!("2:{}", dc.addr()),
    );
    let mut args = vec![
        "--secret",
        &secret,
        "--mask-host",
        &mask,
        "--tcp-dc-ip",
        &dc,
        "--tier-order",
        "tcp",
        "--control-socket",
        ctl.to_str().unwrap(),
    ];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

#[test]
fn a_prober_over_the_per_ip_limits_gets_the_sites_answer_every_time() {
    let site = EchoSite::start();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = ctl_path();
    // The default limits (the rig turns them off unless asked).
    let p = proxy(
        &dc,
        &site,
        &ctl,
        &[
            "--max-per-ip",
            "128",
            "--per-ip-rate",
            "20",
            "--per-ip-burst",
            "64",
        ],
    );
    let mut rng = os_rng();
    let hellos = hellos(&mut rng);
    // What the site itself gives 100 probes from one address.
    assert_eq!(burst(site.addr, &hellos), 100);
    let started = Instant::now();
    let through = burst(p.addr(), &hellos);
    let took = started.elapsed();
    let c = counters(&p, &ctl);
    assert_eq!(
        through,
        100,
        "{through} of 100 probes got the site's answer through the proxy\n{c}\n{}",
        p.dump()
    );
    // The burst went over the rate (64 at once, 20/s after): those were masked as over-limit,
    // the others for what their hello was; none was refused.
    let over = count(&c, "masked", "over-limit");
    let max_admitted = 64 + 20 * took.as_secs_f64().ceil() as u64;
    assert!(
        over >= 100u64.saturating_sub(max_admitted) && over > 0,
        "over-limit={over} in {took:?}: {c}"
    );
    let masked: u64 = c["masked"]
        .as_object()
        .expect("masked counters")
        .values()
        .filter_map(|v| v.as_u64())
        .sum();
    assert_eq!(masked, 100, "{c}");
    assert_eq!(count(&c, "closed_by_reason", "per-ip-rate"), 0, "{c}");
    assert_eq!(site.visits.load(Ordering::SeqCst), 200);
    assert_eq!(dc.connections(), 0);
}

#[test]
fn our_own_clients_over_the_limit_are_masked_within_the_budget_then_refused() {
    let site = EchoSite::start();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = ctl_path();
    let p = proxy(
        &dc,
        &site,
        &ctl,
        &[
            "--max-per-ip",
            "2",
            "--per-ip-rate",
            "0",
            "--per-ip-mask",
            "3",
        ],
    );
    let mut rng = os_rng();
    // Two real clients hold the address's sessions.
    let held: Vec<_> = (0..2)
        .map(|_| {
            let mut s = ee_session(
                p.addr(),
                &ee_key(),
                EE_DOMAIN,
                Tag::Intermediate,
                2,
                &mut rng,
            )
            .unwrap_or_else(|e| panic!("ee session: {e}\n{}", p.dump()));
            s.req_pq()
                .unwrap_or_else(|e| panic!("resPQ: {e}\n{}", p.dump()));
            s
        })
        .collect();
    // Valid hellos of our own secret over the cap: masked like any prober's (the site echoes
    // them), three at once; the fourth finds the budget spent and is closed without a byte.
    let ours = |rng: &mut Rng| build_hello(&HelloSpec::new(ee_key(), EE_DOMAIN), rng).bytes;
    let mut masked: Vec<Probe> = (0..3)
        .map(|_| Probe::send(p.addr(), ours(&mut rng)))
        .collect();
    for (i, m) in masked.iter_mut().enumerate() {
        if let Err(got) = m.answered() {
            panic!(
                "over-limit client {i} got {got:?}, not the site\n{}",
                p.dump()
            );
        }
    }
    let mut fourth = Probe::send(p.addr(), ours(&mut rng));
    assert_eq!(fourth.answered(), Err(Vec::new()), "{}", p.dump());
    let c = counters(&p, &ctl);
    assert_eq!(count(&c, "masked", "over-limit"), 3, "{c}");
    assert_eq!(count(&c, "closed_by_reason", "per-ip-limit"), 1, "{c}");
    assert_eq!(
        count(&c, "tls", "accepted"),
        2,
        "over-limit hellos are not judged: {c}"
    );
    // A masked connection's end frees its slot: the next one is masked again.
    drop(masked.pop());
    let freed = wait_until(WAIT, || {
        count(&counters(&p, &ctl), "closed_by_reason", "masked") == 1
    });
    assert!(freed, "{}", p.dump());
    let mut again = Probe::send(p.addr(), ours(&mut rng));
    assert!(again.answered().is_ok(), "{}", p.dump());
    assert_eq!(count(&counters(&p, &ctl), "masked", "over-limit"), 4);
    assert_eq!(
        dc.connections(),
        2,
        "only the two admitted clients reached the DC"
    );
    drop(held);
}

#[test]
fn without_an_ee_secret_over_the_limit_is_still_closed_at_once() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = ctl_path();
    let dc_arg = format!("2:{}", dc.addr());
    let p = Proxy::start(&[
        "--secret",
        common::SECRET,
        "--tcp-dc-ip",
        &dc_arg,
        "--tier-order",
        "tcp",
        "--max-per-ip",
        "1",
        "--per-ip-rate",
        "0",
        "--control-socket",
        ctl.to_str().unwrap(),
    ]);
    let _first = TcpStream::connect(p.addr()).unwrap();
    wait_until(WAIT, || counters(&p, &ctl)["accepted"].as_u64() >= Some(1));
    let mut second = Probe::send(p.addr(), b"GET / HTTP/1.1\r\n\r\n".to_vec());
    assert_eq!(second.answered(), Err(Vec::new()));
    let c = counters(&p, &ctl);
    assert_eq!(count(&c, "closed_by_reason", "per-ip-limit"), 1, "{c}");
    assert_eq!(count(&c, "masked", "over-limit"), 0, "{c}");
}
