//! Black-box: the mask loop guard never refuses a real client, and still stops real loops
//! (issue 19 §2; docs/design.md §6). docs/ways-in.md's PROXY protocol layout puts a balancer on the same host in front
//! of the proxy and masks to a web server on 127.0.0.1, so every client arrives from
//! 127.0.0.1 and the kernel gives the balancer's connections the same local ports as live mask
//! connections toward the web server. A loop is the proxy meeting its own mask connection, by
//! both ends: a client is refused as `mask-loop` only then.
//!
//! * Behind a local balancer (this test's own, `common::balancer`), 200 clients — real `ee`
//!   clients and hellos that are not ours, which the site answers — while 40 masked sessions
//!   are held open: none refused. Run in a network namespace of its own with a narrow
//!   `ip_local_port_range`, so the balancer's ports and the mask connections' ports meet for
//!   sure (with the whole range they meet in some runs only).
//! * Real loops: a mask host that is the balancer in front of us (seen by the PROXY header's
//!   two ends), and a mask host an nftables `redirect` sends to our port (seen by the
//!   connection's destination before the rewrite) are each stopped on the first hop.
//!
//! A mask host equal to our own listen address is refused before connecting (tests/
//! masking_plain.rs, tests/faketls_mask.rs). Counts come from `ctl status --json`.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread;
use std::time::Duration;

use common::balancer::Balancer;
use common::eebed::{ee_key, ee_secret, ee_session, EE_DOMAIN};
use common::fakedc::{DcConfig, FakeDc};
use common::faketls::{build_hello, HelloSpec};
use common::{netns, os_rng, run_bin, temp_dir, wait_until, Proxy};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

const WAIT: Duration = Duration::from_secs(10);

/// What the stand-in web server answers to the first bytes of every connection.
const SITE_ANSWER: &[u8] = b"SITE\n";

/// A stand-in for the web server masked clients reach: answers [`SITE_ANSWER`] to a
/// connection's first bytes and holds it until the other side ends. Counts connections.
struct Site {
    addr: SocketAddr,
    visits: Arc<AtomicUsize>,
}

impl Site {
    fn start() -> Site {
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
                    if matches!(c.read(&mut buf), Ok(n) if n > 0) {
                        let _ = c.write_all(SITE_ANSWER);
                        while matches!(c.read(&mut buf), Ok(n) if n > 0) {}
                    }
                });
            }
        });
        Site { addr, visits }
    }
}

/// Sends a hello that is not ours (signed with another key) to `addr` and waits for the
/// site's answer; returns the socket, still open, or what went wrong.
fn not_ours(addr: SocketAddr, rng: &mut Rng) -> Result<TcpStream, String> {
    let mut s = TcpStream::connect(addr).map_err(|e| format!("connect: {e}"))?;
    s.set_read_timeout(Some(WAIT)).unwrap();
    let h = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), rng);
    s.write_all(&h.bytes).map_err(|e| format!("write: {e}"))?;
    let mut got = [0u8; SITE_ANSWER.len()];
    s.read_exact(&mut got)
        .map_err(|e| format!("no site answer: {e}"))?;
    if got != SITE_ANSWER {
        return Err(format!("answer {got:?} is not the site's"));
    }
    Ok(s)
}

/// A real `ee` client through `addr`: the fake-TLS handshake, the init, `req_pq_multi` →
/// `resPQ`.
fn real_client(addr: SocketAddr, rng: &mut Rng) -> Result<(), String> {
    let mut s = ee_session(addr, &ee_key(), EE_DOMAIN, Tag::Intermediate, 2, rng)?;
    s.req_pq()
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

fn ctl_path() -> PathBuf {
    temp_dir().join("ctl.sock")
}

/// The number `counters[group][key]` (0 when absent).
fn count(c: &serde_json::Value, group: &str, key: &str) -> u64 {
    c[group][key].as_u64().unwrap_or(0)
}

/// Waits until `counters[group][key]` is `n`; the last counters either way.
fn wait_count(p: &Proxy, sock: &Path, group: &str, key: &str, n: u64) -> serde_json::Value {
    let mut last = serde_json::Value::Null;
    wait_until(WAIT, || {
        last = counters(p, sock);
        count(&last, group, key) == n
    });
    last
}

/// An `ee` proxy on the tcp tier to `dc`, masking to `mask`, with a control socket; `extra`
/// after.
fn proxy(dc: &FakeDc, mask: SocketAddr, ctl: &Path, extra: &[&str]) -> Proxy {
    let (secret, mask, dc) = (ee_secret(), mask.to_string(), format!("2:{}", dc.addr()));
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
fn behind_a_local_balancer_real_clients_are_never_taken_for_a_loop() {
    let name = "behind_a_local_balancer_real_clients_are_never_taken_for_a_loop";
    // 500 even ports for connects: the balancer's 240 connections to the proxy walk through
    // the ports of the held mask connections.
    if !netns::enter(
        name,
        "echo '40000 40999' > /proc/sys/net/ipv4/ip_local_port_range",
    ) {
        return;
    }
    let site = Site::start();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = ctl_path();
    let p = proxy(&dc, site.addr, &ctl, &[]);
    let bal = Balancer::start(p.addr(), false);
    let mut rng = os_rng();
    // Masked sessions held open: their mask connections stay live while the clients come.
    let held: Vec<TcpStream> = (0..40)
        .map(|i| {
            not_ours(bal.addr(), &mut rng)
                .unwrap_or_else(|e| panic!("held prober {i}: {e}\n{}", p.dump()))
        })
        .collect();
    let mut refused = Vec::new();
    for i in 0..200 {
        let got = if i % 2 == 0 {
            real_client(bal.addr(), &mut rng)
        } else {
            not_ours(bal.addr(), &mut rng).map(drop)
        };
        if let Err(e) = got {
            refused.push(format!("client {i}: {e}"));
        }
    }
    let c = counters(&p, &ctl);
    assert!(
        refused.is_empty() && count(&c, "closed_by_reason", "mask-loop") == 0,
        "{} of 200 clients refused behind the balancer, mask-loop={}: {refused:?}\n{}",
        refused.len(),
        count(&c, "closed_by_reason", "mask-loop"),
        p.dump()
    );
    assert_eq!(count(&c, "masked", "wrong-key"), 140, "{c}");
    assert_eq!(site.visits.load(Ordering::SeqCst), 140);
    assert_eq!(dc.connections(), 100, "every real client reached the DC");
    drop(held);
}

#[test]
fn a_mask_host_that_is_the_balancer_in_front_of_us_is_a_loop() {
    // The balancer forwards everything to our port with a PROXY header, and the mask host is
    // the balancer itself: our mask connection comes back with a header naming its own ends.
    let port = common::free_port();
    let bal = Balancer::start(port, true);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = ctl_path();
    let p = proxy(
        &dc,
        bal.addr(),
        &ctl,
        &[
            "--port",
            &port.port().to_string(),
            "--proxy-protocol",
            // The old guard let this loop run until the slab was full.
            "--max-connections",
            "64",
        ],
    );
    assert_eq!(p.addr(), port);
    let mut rng = os_rng();
    let mut s = TcpStream::connect(bal.addr()).unwrap();
    let h = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), &mut rng);
    s.write_all(&h.bytes).unwrap();
    let c = wait_count(&p, &ctl, "closed_by_reason", "mask-loop", 1);
    assert_eq!(
        count(&c, "closed_by_reason", "mask-loop"),
        1,
        "{c}\n{}",
        p.dump()
    );
    // Stopped on the first hop: the client's connection and our one mask connection.
    assert_eq!(count(&c, "masked", "wrong-key"), 1, "{c}\n{}", p.dump());
    assert_eq!(bal.accepted(), 2, "{}", p.dump());
    // The prober's connection ends: nothing came back from the "site".
    s.set_read_timeout(Some(WAIT)).unwrap();
    let mut rest = Vec::new();
    assert!(
        s.read_to_end(&mut rest).is_ok() && rest.is_empty(),
        "{rest:?}"
    );
    // A real client through the same balancer is still served.
    real_client_via_header(&p, &bal, &mut rng);
}

/// A real client through the header-sending balancer gets its `resPQ`.
fn real_client_via_header(p: &Proxy, bal: &Balancer, rng: &mut Rng) {
    if let Err(e) = real_client(bal.addr(), rng) {
        panic!("real client behind the balancer: {e}\n{}", p.dump());
    }
}

#[test]
fn a_mask_host_that_nat_redirects_to_our_port_is_a_loop() {
    let name = "a_mask_host_that_nat_redirects_to_our_port_is_a_loop";
    // In the namespace: 127.0.0.1:9443 (the mask host) is redirected to our port 1443.
    let rules = "nft add table ip nat && \
                 nft add chain ip nat out '{ type nat hook output priority -100; }' && \
                 nft add rule ip nat out tcp dport 9443 redirect to :1443";
    if !netns::enter(name, rules) {
        return;
    }
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = ctl_path();
    let mask: SocketAddr = "127.0.0.1:9443".parse().unwrap();
    let p = proxy(
        &dc,
        mask,
        &ctl,
        &["--port", "1443", "--max-connections", "64"],
    );
    let mut rng = os_rng();
    let mut s = TcpStream::connect(p.addr()).unwrap();
    let h = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), &mut rng);
    s.write_all(&h.bytes).unwrap();
    // The mask connection arrives at our port; both it and the prober close as mask-loop.
    let c = wait_count(&p, &ctl, "closed_by_reason", "mask-loop", 2);
    assert_eq!(
        count(&c, "closed_by_reason", "mask-loop"),
        2,
        "{c}\n{}",
        p.dump()
    );
    assert_eq!(count(&c, "masked", "wrong-key"), 1, "{c}\n{}", p.dump());
    assert!(real_client(p.addr(), &mut rng).is_ok(), "{}", p.dump());
}
