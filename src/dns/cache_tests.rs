//! White-box tests of `dns::cache` with fake time and in-memory datagrams (no sockets).

use super::*;
use crate::dns::wire::tests::response;
use crate::dns::wire::{TYPE_A, TYPE_CNAME};

const NS1: &str = "127.0.0.1:5301";
const NS2: &str = "127.0.0.1:5302";

fn ns(s: &str) -> SocketAddr {
    s.parse().unwrap()
}

/// The nameserver a datagram query goes to.
fn udp(q: &Send) -> SocketAddr {
    match q.to {
        Upstream::Udp(a) => a,
        Upstream::Doh(i) => panic!("a DoH try to server {i}"),
    }
}

fn core_with(cfg: ResolverConfig, servers: &[&str]) -> Core {
    let hosts = vec![("router.lan".to_string(), IpAddr::from([10, 0, 0, 1]))];
    Core::new(
        cfg,
        servers.iter().map(|s| ns(s)).collect(),
        hosts,
        Rng::from_seed([3; 48]),
    )
}

fn core() -> Core {
    core_with(ResolverConfig::default(), &[NS1, NS2])
}

/// An answer to `q` from its destination: A `ip` with `ttl` seconds, or the given rcode.
fn answer(q: &Send, ip: [u8; 4], ttl: u32) -> Vec<u8> {
    response(&q.packet, 0x8180, &[(&[0xc0, 12], TYPE_A, ttl, &ip)])
}

fn rcode(q: &Send, rcode: u16) -> Vec<u8> {
    response(&q.packet, 0x8180 | rcode, &[])
}

const IP1: [u8; 4] = [104, 16, 0, 1];
const IP2: [u8; 4] = [104, 16, 0, 2];

/// Looks `name` up at `now`, answers the query with `ip`/`ttl` from its server.
fn resolve(c: &mut Core, name: &str, ip: [u8; 4], ttl: u32, now: u64) {
    let mut out = Vec::new();
    assert_eq!(c.lookup(name, now, &mut out), Lookup::Pending);
    assert_eq!(out.len(), 1);
    let q = out.pop().unwrap();
    let done = c.on_datagram(udp(&q), &answer(&q, ip, ttl), now, &mut out);
    assert_eq!(done.as_deref(), Some(name));
    assert!(out.is_empty());
    assert_eq!(
        c.lookup(name, now, &mut Vec::new()),
        Lookup::Ready(IpAddr::from(ip))
    );
}

#[test]
fn literals_hosts_and_invalid_names_send_nothing() {
    let mut c = core();
    let mut out = Vec::new();
    assert_eq!(
        c.lookup("1.2.3.4", 0, &mut out),
        Lookup::Ready(IpAddr::from([1, 2, 3, 4]))
    );
    assert_eq!(
        c.lookup("[::1]", 0, &mut out),
        Lookup::Ready("::1".parse().unwrap())
    );
    assert_eq!(
        c.lookup("Router.LAN.", 0, &mut out),
        Lookup::Ready(IpAddr::from([10, 0, 0, 1]))
    );
    assert!(matches!(
        c.lookup("bad..name", 0, &mut out),
        Lookup::Failed(_)
    ));
    assert!(matches!(c.lookup("", 0, &mut out), Lookup::Failed(_)));
    assert!(out.is_empty());
    assert_eq!(c.next_deadline(), None);
}

#[test]
fn one_query_for_concurrent_lookups_and_case_folding() {
    let mut c = core();
    let mut out = Vec::new();
    assert_eq!(c.lookup("X.Example.COM.", 0, &mut out), Lookup::Pending);
    assert_eq!(c.lookup("x.example.com", 5, &mut out), Lookup::Pending);
    assert_eq!(out.len(), 1, "second lookup joins the query in flight");
    assert_eq!(out[0].to, Upstream::Udp(ns(NS1)));
    assert_eq!(c.next_deadline(), Some(2_000));
    let q = out.pop().unwrap();
    assert_eq!(
        c.on_datagram(udp(&q), &answer(&q, IP1, 300), 10, &mut out)
            .as_deref(),
        Some("x.example.com")
    );
    assert_eq!(
        c.lookup("x.EXAMPLE.com", 11, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    assert_eq!(c.cached("X.example.com."), Some(IpAddr::from(IP1)));
    assert!(out.is_empty());
    assert_eq!(c.counters.queries, 1);
}

#[test]
fn ttl_is_clamped() {
    // 5 s from the server → 30 s floor: refresh due at 80 % = 24 s.
    let mut c = core();
    resolve(&mut c, "a.example", IP1, 5, 1_000);
    assert_eq!(c.next_deadline(), Some(1_000 + 24_000));
    // 10 days → 1 h ceiling.
    let mut c = core();
    resolve(&mut c, "a.example", IP1, 864_000, 0);
    assert_eq!(c.next_deadline(), Some(3_600_000 * 8 / 10));
    // TTL 0 with a zero floor configured still gets the 1 s hard floor.
    let mut c = core_with(
        ResolverConfig {
            min_ttl_ms: 0,
            ..ResolverConfig::default()
        },
        &[NS1],
    );
    resolve(&mut c, "a.example", IP1, 0, 0);
    assert_eq!(c.next_deadline(), Some(800));
}

#[test]
fn refresh_before_expiry_serves_the_old_answer_meanwhile() {
    let mut c = core();
    let mut out = Vec::new();
    resolve(&mut c, "w.example", IP1, 100, 0);
    // Nothing due before 80 s.
    assert!(c.on_tick(79_999, &mut out).is_empty());
    assert!(out.is_empty());
    assert_eq!(c.next_deadline(), Some(80_000));
    assert!(c.on_tick(80_000, &mut out).is_empty());
    assert_eq!(out.len(), 1, "background refresh sent");
    // Still served from cache, no second query, even past the hard expiry while it runs.
    assert_eq!(
        c.lookup("w.example", 81_000, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    assert_eq!(out.len(), 1);
    let q = out.pop().unwrap();
    assert_eq!(
        c.on_datagram(udp(&q), &answer(&q, IP2, 100), 81_500, &mut out)
            .as_deref(),
        Some("w.example")
    );
    assert_eq!(
        c.lookup("w.example", 81_600, &mut out),
        Lookup::Ready(IpAddr::from(IP2))
    );
    assert_eq!(c.next_deadline(), Some(81_500 + 80_000));
}

#[test]
fn failed_refresh_keeps_old_answer_until_expiry_plus_grace() {
    let cfg = ResolverConfig {
        attempts: 1,
        ..ResolverConfig::default()
    };
    let mut c = core_with(cfg, &[NS1]);
    let mut out = Vec::new();
    c.watch("w.example");
    resolve(&mut c, "w.example", IP1, 100, 0);
    c.on_tick(80_000, &mut out);
    assert_eq!(out.len(), 1);
    out.clear();
    // The only try times out at 82 s: the old answer stays, a retry is planned 30 s later.
    assert_eq!(c.on_tick(82_000, &mut out), vec!["w.example".to_string()]);
    assert_eq!(
        c.lookup("w.example", 82_000, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    assert_eq!(c.next_deadline(), Some(112_000));
    // Past expiry (100 s) but inside the 60 s grace: still served.
    assert_eq!(
        c.lookup("w.example", 110_000, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    assert!(out.is_empty());
    // Second refresh fails after the grace ended (160 s): now a negative answer.
    c.on_tick(112_000, &mut out);
    assert_eq!(out.len(), 1);
    out.clear();
    assert_eq!(
        c.lookup("w.example", 159_000, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    c.on_tick(161_000, &mut Vec::new());
    assert!(
        matches!(c.lookup("w.example", 161_000, &mut out), Lookup::Failed(r) if r.contains("no answer"))
    );
    assert_eq!(c.cached("w.example"), None);
    // Watched: retried after the negative TTL.
    assert_eq!(c.next_deadline(), Some(221_000));
}

#[test]
fn idle_unwatched_name_expires_instead_of_refreshing() {
    let cfg = ResolverConfig {
        idle_ms: 10_000,
        ..ResolverConfig::default()
    };
    let mut c = core_with(cfg, &[NS1]);
    resolve(&mut c, "once.example", IP1, 100, 0);
    assert_eq!(
        c.next_deadline(),
        None,
        "not used within idle_ms of its refresh time"
    );
    let mut out = Vec::new();
    c.on_tick(200_000, &mut out);
    assert!(out.is_empty());
    assert_eq!(c.cached("once.example"), None, "dropped after expiry");
    // Looked up again after its refresh time: served, and the refresh starts from the lookup.
    resolve(&mut c, "again.example", IP1, 100, 200_000);
    assert_eq!(c.next_deadline(), None);
    assert_eq!(
        c.lookup("again.example", 290_000, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    assert_eq!(out.len(), 1, "background refresh started by the lookup");
    assert_eq!(c.next_deadline(), Some(292_000));
    out.clear();
    // A watched one keeps being refreshed.
    c.watch("kept.example");
    assert_eq!(c.next_deadline(), Some(0));
    c.on_tick(200_000, &mut out);
    assert_eq!(out.len(), 1);
}

#[test]
fn nxdomain_is_negatively_cached() {
    let mut c = core();
    let mut out = Vec::new();
    c.lookup("gone.example", 0, &mut out);
    let q = out.pop().unwrap();
    assert!(c.on_datagram(udp(&q), &rcode(&q, 3), 1, &mut out).is_some());
    assert!(out.is_empty(), "NXDOMAIN is final, no failover");
    assert_eq!(
        c.lookup("gone.example", 2, &mut out),
        Lookup::Failed("NXDOMAIN".into())
    );
    assert_eq!(
        c.lookup("gone.example", 60_000, &mut out),
        Lookup::Failed("NXDOMAIN".into())
    );
    assert!(out.is_empty());
    assert_eq!(c.lookup("gone.example", 60_001, &mut out), Lookup::Pending);
    assert_eq!(out.len(), 1, "asked again after the negative TTL");
    // NODATA (a CNAME leading out of the response) is negative too.
    let q = out.pop().unwrap();
    let p = response(
        &q.packet,
        0x8180,
        &[(&[0xc0, 12], TYPE_CNAME, 60, b"\x01z\x00")],
    );
    c.on_datagram(udp(&q), &p, 60_002, &mut out);
    assert_eq!(
        c.lookup("gone.example", 60_003, &mut out),
        Lookup::Failed("no A record".into())
    );
}

#[test]
fn servfail_and_timeout_fail_over_then_fail() {
    let mut c = core(); // 2 servers × 2 attempts = 4 tries
    let mut out = Vec::new();
    c.lookup("x.example", 0, &mut out);
    let q = out.pop().unwrap();
    assert_eq!(q.to, Upstream::Udp(ns(NS1)));
    assert!(c
        .on_datagram(udp(&q), &rcode(&q, 2), 10, &mut out)
        .is_none());
    assert_eq!(out.len(), 1, "SERVFAIL: next server at once");
    assert_eq!(out[0].to, Upstream::Udp(ns(NS2)));
    assert_eq!(out[0].id, q.id, "one id per query");
    out.clear();
    assert_eq!(c.next_deadline(), Some(2_010));
    assert!(c.on_tick(2_010, &mut out).is_empty());
    assert_eq!(out.pop().map(|s| s.to), Some(Upstream::Udp(ns(NS1))));
    assert!(c.on_tick(4_010, &mut out).is_empty());
    assert_eq!(out.pop().map(|s| s.to), Some(Upstream::Udp(ns(NS2))));
    assert_eq!(c.lookup("x.example", 5_000, &mut out), Lookup::Pending);
    assert!(out.is_empty());
    assert_eq!(c.on_tick(6_010, &mut out), vec!["x.example".to_string()]);
    assert!(out.is_empty());
    assert_eq!(
        c.lookup("x.example", 6_010, &mut out),
        Lookup::Failed("no answer within 2000 ms".into())
    );
    assert_eq!(c.counters.queries, 4);
    assert_eq!(c.counters.failures, 1);
    // A late answer to the finished query is ignored.
    assert!(c
        .on_datagram(udp(&q), &answer(&q, IP1, 60), 6_100, &mut out)
        .is_none());
    assert_eq!(c.counters.ignored, 1);
}

#[test]
fn truncated_answer_counts_as_a_failed_try() {
    let mut c = core();
    let mut out = Vec::new();
    c.lookup("big.example", 0, &mut out);
    let q = out.pop().unwrap();
    let p = response(&q.packet, 0x8380, &[(&[0xc0, 12], TYPE_A, 60, &IP1)]);
    assert!(c.on_datagram(udp(&q), &p, 1, &mut out).is_none());
    assert_eq!(out.len(), 1, "TC: next try");
}

#[test]
fn spoofed_and_stray_datagrams_are_ignored() {
    let mut c = core();
    let mut out = Vec::new();
    c.lookup("x.example", 0, &mut out);
    let q = out.pop().unwrap();
    // Wrong id.
    let mut p = answer(&q, IP2, 60);
    p[0] ^= 0xff;
    assert!(c.on_datagram(udp(&q), &p, 1, &mut out).is_none());
    // Right id, wrong source: another port, and the second server (not asked yet).
    let p = answer(&q, IP2, 60);
    assert!(c
        .on_datagram(ns("127.0.0.1:9999"), &p, 1, &mut out)
        .is_none());
    assert!(c.on_datagram(ns(NS2), &p, 1, &mut out).is_none());
    // Right id and source, other question name.
    let other = wire::encode_query(q.id, "y.example", TYPE_A).unwrap();
    let p2 = response(&other, 0x8180, &[(&[0xc0, 12], TYPE_A, 60, &IP2)]);
    assert!(c.on_datagram(udp(&q), &p2, 1, &mut out).is_none());
    // Garbage and our own query echoed back.
    assert!(c
        .on_datagram(udp(&q), b"\x00\x01garbage", 1, &mut out)
        .is_none());
    assert!(c.on_datagram(udp(&q), &q.packet, 1, &mut out).is_none());
    assert_eq!(c.counters.ignored, 6);
    assert_eq!(c.lookup("x.example", 2, &mut out), Lookup::Pending);
    // The genuine answer still works.
    assert!(c
        .on_datagram(udp(&q), &answer(&q, IP1, 60), 3, &mut out)
        .is_some());
    assert_eq!(
        c.lookup("x.example", 4, &mut out),
        Lookup::Ready(IpAddr::from(IP1))
    );
    assert!(out.is_empty());
}

#[test]
fn full_cache_evicts_least_recently_used_unwatched() {
    let cfg = ResolverConfig {
        max_names: 2,
        ..ResolverConfig::default()
    };
    let mut c = core_with(cfg, &[NS1]);
    resolve(&mut c, "a.example", IP1, 300, 0);
    resolve(&mut c, "b.example", IP2, 300, 1);
    let mut out = Vec::new();
    c.lookup("a.example", 2, &mut out); // a is now more recent than b
    assert_eq!(c.lookup("c.example", 3, &mut out), Lookup::Pending);
    assert_eq!(c.cached("b.example"), None);
    assert_eq!(c.cached("a.example"), Some(IpAddr::from(IP1)));
    // c has a query in flight, so d can only evict a; then nothing is evictable.
    assert_eq!(c.lookup("d.example", 4, &mut out), Lookup::Pending);
    assert_eq!(
        c.lookup("e.example", 5, &mut out),
        Lookup::Failed("dns cache full".into())
    );
}

/// An NXDOMAIN for `q` whose authority section holds the zone's SOA with record TTL `ttl` and
/// MINIMUM `minimum` (seconds).
fn nxdomain_with_soa(q: &Send, ttl: u32, minimum: u32) -> Vec<u8> {
    let mut p = response(&q.packet, 0x8183, &[]);
    p[8..10].copy_from_slice(&1u16.to_be_bytes()); // NSCOUNT
    p.extend_from_slice(&[0xc0, 12]); // owner: the question name (close enough for a zone)
    p.extend_from_slice(&6u16.to_be_bytes()); // SOA
    p.extend_from_slice(&1u16.to_be_bytes()); // IN
    p.extend_from_slice(&ttl.to_be_bytes());
    let mut rdata = b"\x02ns\x00\x04host\x00".to_vec(); // MNAME, RNAME
    for v in [1u32, 7200, 3600, 1_209_600, minimum] {
        rdata.extend_from_slice(&v.to_be_bytes()); // SERIAL REFRESH RETRY EXPIRE MINIMUM
    }
    p.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
    p.extend_from_slice(&rdata);
    p
}

#[test]
fn nxdomain_is_cached_for_the_zones_negative_ttl() {
    // kws2-1.<a CF domain> that does not exist: one query per zone negative TTL, however many
    // media sessions ask meanwhile.
    let name = "kws2-1.example.com";
    let mut c = core();
    let mut out = Vec::new();
    let mut queries = 0;
    c.lookup(name, 0, &mut out);
    queries += out.len();
    let q = out.pop().unwrap();
    // min(TTL 300, MINIMUM 900) = 300 s (RFC 2308 §5).
    assert!(c
        .on_datagram(udp(&q), &nxdomain_with_soa(&q, 300, 900), 1, &mut out)
        .is_some());
    for now in (2..300_000).step_by(997) {
        assert_eq!(
            c.lookup(name, now, &mut out),
            Lookup::Failed("NXDOMAIN".into())
        );
    }
    queries += out.len();
    assert_eq!(
        queries, 1,
        "no repeated query inside the zone's negative TTL"
    );
    assert_eq!(c.lookup(name, 300_002, &mut out), Lookup::Pending);
    assert_eq!(out.len(), 1, "asked again once it passed");
    // A zone asking for less than the floor or more than 3 h is held to 1 s .. 3 h.
    let q = out.pop().unwrap();
    c.on_datagram(
        udp(&q),
        &nxdomain_with_soa(&q, 86_400, 86_400),
        300_003,
        &mut out,
    );
    assert_eq!(
        c.lookup(name, 300_002 + 3 * 3600 * 1000, &mut out),
        Lookup::Failed("NXDOMAIN".into())
    );
    assert_eq!(
        c.lookup(name, 300_004 + 3 * 3600 * 1000, &mut out),
        Lookup::Pending
    );
}

/// A core with `doh` DoH servers before the two nameservers, `fallback` as given, and
/// `doh.example` as a DoH server's own name.
fn doh_core(doh: usize, fallback: bool) -> Core {
    let cfg = ResolverConfig {
        doh_servers: doh,
        doh_fallback: fallback,
        doh_timeout_ms: 3_000,
        doh_bootstrap: vec!["doh.example".into()],
        ..ResolverConfig::default()
    };
    core_with(cfg, &[NS1, NS2])
}

#[test]
fn with_doh_and_no_fallback_a_name_is_asked_of_the_doh_servers_only() {
    let mut c = doh_core(2, false);
    let mut out = Vec::new();
    assert_eq!(c.lookup("w.example.dev", 0, &mut out), Lookup::Pending);
    let q = out.pop().unwrap();
    assert_eq!(q.to, Upstream::Doh(0));
    // A (poisoned) datagram from a plain nameserver is not an answer to it.
    let poisoned = answer(&q, [127, 0, 0, 66], 300);
    assert!(c.on_datagram(ns(NS1), &poisoned, 1, &mut out).is_none());
    assert_eq!(c.counters.ignored, 1);
    // The DoH answer is cached with its TTL.
    let good = answer(&q, [127, 0, 0, 9], 300);
    let (done, verdict) = c.on_doh_reply(0, q.id, Ok(&good), 2, &mut out);
    assert_eq!((done.as_deref(), verdict), (Some("w.example.dev"), Ok(())));
    let ip = IpAddr::from([127, 0, 0, 9]);
    assert_eq!(c.lookup("w.example.dev", 3, &mut out), Lookup::Ready(ip));
    assert_eq!(
        c.lookup("w.example.dev", 239_000, &mut out),
        Lookup::Ready(ip)
    );
    assert!(out.is_empty(), "no refresh before 80 % of the TTL");
    // Every DoH try failing (2 servers × 2 attempts) leaves the name unresolved: never a
    // try to a plain nameserver.
    let mut c = doh_core(2, false);
    c.lookup("w.example.dev", 0, &mut out);
    let mut now = 0;
    for k in 0..4u8 {
        let q = out.pop().expect("a try");
        assert_eq!(q.to, Upstream::Doh(k % 2));
        now += 10;
        let (done, v) =
            c.on_doh_reply(k % 2, q.id, Err("connection refused".into()), now, &mut out);
        assert_eq!(v, Err("connection refused".into()));
        assert_eq!(done.is_some(), k == 3);
    }
    assert!(out.is_empty());
    match c.lookup("w.example.dev", now, &mut out) {
        Lookup::Failed(why) => assert!(why.contains("connection refused"), "{why}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_doh_answer_for_another_name_or_garbage_fails_the_try_and_the_next_server_is_asked() {
    let mut c = doh_core(2, false);
    let mut out = Vec::new();
    c.lookup("w.example.dev", 0, &mut out);
    let q = out.pop().unwrap();
    let other = wire::encode_query(q.id, "evil.example", TYPE_A).unwrap();
    let other = answer(
        &Send {
            to: q.to,
            id: q.id,
            packet: other,
        },
        [127, 0, 0, 66],
        300,
    );
    let (done, v) = c.on_doh_reply(0, q.id, Ok(&other), 5, &mut out);
    assert!(done.is_none());
    assert!(v.unwrap_err().contains("evil.example"));
    let q2 = out.pop().expect("the next server is asked at once");
    assert_eq!(q2.to, Upstream::Doh(1));
    assert_eq!(c.lookup("w.example.dev", 6, &mut out), Lookup::Pending);
    // A late failure of the first try changes nothing; garbage from the current one moves on.
    let (_, v) = c.on_doh_reply(0, q.id, Err("timeout".into()), 7, &mut out);
    assert!(v.is_err() && out.is_empty());
    let (_, v) = c.on_doh_reply(1, q.id, Ok(b"garbage"), 8, &mut out);
    assert!(v.unwrap_err().contains("not a DNS response"));
    assert_eq!(out.pop().map(|s| s.to), Some(Upstream::Doh(0)));
}

#[test]
fn with_fallback_the_nameservers_follow_the_doh_servers_and_bootstrap_names_go_plain() {
    let mut c = doh_core(1, true);
    let mut out = Vec::new();
    c.lookup("w.example.dev", 0, &mut out);
    let q = out.pop().unwrap();
    assert_eq!(q.to, Upstream::Doh(0));
    let (_, v) = c.on_doh_reply(0, q.id, Err("refused".into()), 1, &mut out);
    assert!(v.is_err());
    let q = out.pop().unwrap();
    assert_eq!(q.to, Upstream::Udp(ns(NS1)));
    // The try's deadline is the plain one (2 s), a DoH try's was --doh-timeout (3 s).
    assert_eq!(c.next_deadline(), Some(1 + 2_000));
    let done = c.on_datagram(ns(NS1), &answer(&q, [127, 0, 0, 8], 60), 2, &mut out);
    assert_eq!(done.as_deref(), Some("w.example.dev"));

    let mut c = doh_core(2, false);
    c.lookup("doh.example", 0, &mut out);
    let q = out.pop().unwrap();
    assert_eq!(
        q.to,
        Upstream::Udp(ns(NS1)),
        "a DoH server's own name goes plain"
    );
    assert_eq!(c.next_deadline(), Some(2_000));
    let mut c = doh_core(2, false);
    c.lookup("x.example", 0, &mut out);
    assert_eq!(
        c.next_deadline(),
        Some(3_000),
        "a DoH try waits --doh-timeout"
    );
}
