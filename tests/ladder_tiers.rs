//! Black-box ladder tests, one per tier and per ordering rule: the Worker tier end to end
//! through the Worker look-alike (docs/protocol.md §4.2: `/apiws?dst=…&dc=…&media=…`, no
//! subprotocol, plain byte stream), the cfproxy tier (§4.3: `kwsN.<domain>`, subprotocol
//! `binary`, one transport packet per WS message), the `cfproxy-ws` tier (the same names over
//! plain `ws://`, opt-in, after the TLS tiers), fallback order under `--tier-order` and
//! `--cf-priority`, and WS pings toward Cloudflare tiers only (docs/design.md §5).
//!
//! Owns only this file; the rig is tests/common. Loopback only: host names reach 127.0.0.1
//! through a test hosts file and an empty resolv.conf. No fixed sleeps.

mod common;

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use common::fakedc::{query_param, DcConfig, FakeDc, Fault};
use common::{client_opts, closed_port, os_rng, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, Attempt, MtClient, Outcome};
use tg_ws_proxy::mtproto::framing;
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

/// Bound on waits for a condition that should hold almost at once.
const WAIT: Duration = Duration::from_secs(5);
/// The Worker's host name (in the test hosts file).
const WORKER: &str = "w.workers.dev";
/// The Cloudflare-proxied domain; DC 2 is reached as `kws2.example.com`.
const CF_DOMAIN: &str = "example.com";

/// Host names every proxy here can resolve (all → 127.0.0.1).
const NAMES: [&str; 4] = [
    WORKER,
    "kws2.example.com",
    "kws4.example.com",
    "kws2-1.example.com",
];

/// A proxy with the rig's compressed-time ladder flags (no pools: counters stay exact), then
/// `extra` (a later flag wins).
fn proxy(extra: &[String]) -> Proxy {
    common::ladder_proxy(&NAMES, extra)
}

fn s(v: &str) -> String {
    v.to_string()
}

fn worker_flag(w: &FakeDc) -> [String; 2] {
    [s("--cf-worker-domain"), format!("{WORKER}:{}", w.port())]
}

fn tcp_flag(dc: &FakeDc) -> [String; 2] {
    [s("--tcp-dc-ip"), format!("2:{}", dc.addr())]
}

fn ws_flag(addr: SocketAddr) -> [String; 2] {
    [s("--dc-ip"), format!("2:{addr}")]
}

fn probe(p: &Proxy, dc: i16) -> Attempt {
    probe_once(
        &client_opts(p.addr(), SECRET, Tag::Intermediate, dc),
        &mut os_rng(),
    )
}

fn assert_ok(a: &Attempt, p: &Proxy) {
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\nproxy log:\n{}", p.dump());
}

/// `count` intermediate packets of `size` bytes, framed back to back (one buffer).
fn burst(count: u32, size: usize) -> (Vec<Vec<u8>>, Vec<u8>) {
    let mut rng = Rng::from_seed([3; 48]);
    let payloads: Vec<Vec<u8>> = (0..count)
        .map(|i| (0..size).map(|j| (j as u32 * 13 + i) as u8 | 1).collect())
        .collect();
    let mut wire = Vec::new();
    for p in &payloads {
        wire.extend_from_slice(&framing::encode(Tag::Intermediate, p, &mut rng));
    }
    (payloads, wire)
}

/// Connects a client, writes a burst of packets in one write, and checks every echo.
fn echo_burst(p: &Proxy, dc: i16, count: u32, size: usize) {
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, dc);
    let mut c = MtClient::connect_with(&opts, &mut os_rng()).expect("connect to the proxy");
    let (payloads, wire) = burst(count, size);
    c.send_raw_plain(&wire).expect("send burst");
    for (i, want) in payloads.iter().enumerate() {
        let got = c
            .recv_packet()
            .unwrap_or_else(|e| panic!("echo {i}: {e}\nproxy log:\n{}", p.dump()));
        assert_eq!(&got, want, "echo {i}");
    }
}

#[test]
fn worker_tier_end_to_end_speaks_the_worker_url_and_a_plain_stream() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("worker")];
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);

    // Non-media then media: resPQ comes back through the look-alike and the fake DC.
    assert_ok(&probe(&p, 2), &p);
    assert_ok(&probe(&p, -2), &p);
    assert_eq!(
        dc.init_dcs(),
        vec![(Tag::Intermediate, 2), (Tag::Intermediate, -2)],
        "both relay inits crossed the Worker pipe intact"
    );
    let want_dst = format!("127.0.0.1:{}", dc.port());
    assert_eq!(w.paths(), vec!["/apiws", "/apiws"], "{}", p.dump());
    assert_eq!(w.dsts(), vec![want_dst.clone(), want_dst]);
    let q = w.queries();
    assert_eq!(query_param(&q[0], "dc"), Some("2"), "{q:?}");
    assert_eq!(query_param(&q[0], "media"), Some("0"), "{q:?}");
    assert_eq!(query_param(&q[1], "dc"), Some("2"), "{q:?}");
    assert_eq!(query_param(&q[1], "media"), Some("1"), "{q:?}");
    assert_eq!(
        w.protocols(),
        vec![None, None],
        "no subprotocol toward a Worker"
    );
    assert_eq!(w.snis(), vec![WORKER, WORKER]);
    assert!(
        w.hosts()
            .iter()
            .all(|h| h.split(':').next() == Some(WORKER)),
        "{:?}",
        w.hosts()
    );
    assert_eq!(w.dst_connects(), 2);

    // A plain stream: ten packets written at once may travel in one message (no per-packet
    // split), and the DC still decodes every one.
    let before = w.raw_messages().len();
    echo_burst(&p, 2, 10, 100);
    let msgs = w.raw_messages()[before..].to_vec();
    let total: usize = msgs.iter().sum();
    assert_eq!(
        total,
        64 + 10 * 104,
        "init + ten 104-byte packets: {msgs:?}"
    );
    assert!(
        msgs.iter().any(|&n| n > 104),
        "the burst was split into single packets: {msgs:?}"
    );
    assert!(w.violations().is_empty(), "{:?}", w.violations());
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn cfproxy_tier_end_to_end_uses_kws_names_binary_and_one_packet_per_message() {
    let front = FakeDc::start_tls_ws(DcConfig::default());
    let args = vec![
        s("--tier-order"),
        s("cfproxy"),
        s("--cf-domain"),
        format!("{CF_DOMAIN}:{}", front.port()),
    ];
    let p = proxy(&args);
    assert_ok(&probe(&p, 2), &p);
    assert_eq!(front.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert_eq!(front.snis(), vec!["kws2.example.com"], "{}", p.dump());
    assert_front_speaks_cfproxy(&p, &front);
}

/// What a cfproxy front (TLS or `ws://`) must have seen from `p`: `Host` `kws2.<domain>`, path
/// `/apiws`, subprotocol `binary`; then a burst of 10 packets echoed, one packet per message.
fn assert_front_speaks_cfproxy(p: &Proxy, front: &FakeDc) {
    assert!(
        front
            .hosts()
            .iter()
            .all(|h| h.split(':').next() == Some("kws2.example.com")),
        "{:?}",
        front.hosts()
    );
    assert_eq!(front.paths(), vec!["/apiws"]);
    assert_eq!(front.protocols(), vec![Some(s("binary"))]);
    let before = front.messages().len();
    echo_burst(p, 2, 10, 100);
    let msgs = front.messages()[before..].to_vec();
    assert_eq!(msgs.len(), 10, "one message per packet: {msgs:?}");
    assert!(
        msgs.iter().all(|m| m.one_packet && m.len == 104),
        "{msgs:?}"
    );
    assert!(front.violations().is_empty(), "{:?}", front.violations());
}

/// The `cfproxy-ws` tier (issue 22 part 4, docs/protocol.md §4.3): the cfproxy names over
/// plain `ws://` to `--cf-ws-port` — no TLS at all (the front sees no ClientHello, so no SNI),
/// the same `Host`, path and subprotocol as the TLS cfproxy tier, one packet per message; the
/// session record says it ran without TLS.
#[test]
fn cfproxy_ws_tier_end_to_end_speaks_plain_ws_with_the_cfproxy_names() {
    let front = FakeDc::start_plain_ws(DcConfig::default());
    let args = vec![
        s("--tier-order"),
        s("cfproxy-ws"),
        s("--cfproxy-ws"),
        s("--cf-domain"),
        s(CF_DOMAIN),
        s("--cf-ws-port"),
        front.port().to_string(),
    ];
    let p = proxy(&args);
    assert_ok(&probe(&p, 2), &p);
    assert_eq!(
        front.init_dcs(),
        vec![(Tag::Intermediate, 2)],
        "{}",
        p.dump()
    );
    assert!(front.snis().is_empty(), "no TLS: {:?}", front.snis());
    assert_front_speaks_cfproxy(&p, &front);
    let session = p.wait_event("session", WAIT, |e| e["tier"] == "cfproxy-ws");
    let session = session.unwrap_or_else(|| panic!("{:?}", p.events("session")));
    assert_eq!(session["plain_ws"], true, "{session}");
    assert!(
        session["target"]
            .as_str()
            .is_some_and(|t| t.starts_with("ws://kws2.")),
        "{session}"
    );
}

/// `cfproxy-ws` is opt-in and comes after the TLS tiers: with every TLS tier refused (the
/// TLS cfproxy front included) and a healthy raw DC, the default order carries the session
/// over `tcp` while the switch is off — the plain front is never dialled — and over
/// `cfproxy-ws` once `--cfproxy-ws` is given.
#[test]
fn cfproxy_ws_is_opt_in_and_tried_after_the_tls_tiers() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let plain = FakeDc::start_plain_ws(DcConfig::default());
    let mut args = Vec::new();
    args.extend(ws_flag(closed_port()));
    args.extend(tcp_flag(&dc));
    args.extend([
        s("--cf-domain"),
        format!("{CF_DOMAIN}:{}", closed_port().port()),
    ]);
    args.extend([s("--cf-ws-port"), plain.port().to_string()]);

    let off = proxy(&args);
    assert_ok(&probe(&off, 2), &off);
    let session = off.wait_event("session", WAIT, |e| !e["tier"].is_null());
    let session = session.unwrap_or_else(|| panic!("{:?}", off.events("session")));
    assert_eq!(
        session["tier"],
        "tcp",
        "{session}
{}",
        off.dump()
    );
    assert_eq!(session["plain_ws"], false, "{session}");
    assert_eq!(plain.connections(), 0, "off by default: {}", off.dump());
    drop(off);

    args.push(s("--cfproxy-ws"));
    let on = proxy(&args);
    assert_ok(&probe(&on, 2), &on);
    let session = on.wait_event("session", WAIT, |e| !e["tier"].is_null());
    let session = session.unwrap_or_else(|| panic!("{:?}", on.events("session")));
    assert_eq!(
        session["tier"],
        "cfproxy-ws",
        "{session}
{}",
        on.dump()
    );
    assert_eq!(session["plain_ws"], true, "{session}");
    assert!(plain.upgrades() >= 1, "{}", on.dump());
}

#[test]
fn tier_order_ws_refused_then_worker_carries_the_session() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let cf = FakeDc::start_tls_ws(DcConfig::default());
    let mut args = vec![s("--tier-order"), s("ws,worker,cfproxy,tcp")];
    args.extend(ws_flag(closed_port()));
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    args.extend([s("--cf-domain"), format!("{CF_DOMAIN}:{}", cf.port())]);
    let p = proxy(&args);
    assert_ok(&probe(&p, 2), &p);
    assert_eq!(w.upgrades(), 1, "the Worker is next after ws: {}", p.dump());
    assert_eq!(cf.connections(), 0, "cfproxy is after the Worker");
    assert_eq!(
        dc.init_dcs(),
        vec![(Tag::Intermediate, 2)],
        "via the Worker pipe"
    );
    let refused = p.wait_event("route", WAIT, |e| {
        e["label"].as_str().is_some_and(|l| l.starts_with("ws:DC2")) && e["failure"] == "refused"
    });
    assert!(refused.is_some(), "{:?}\n{}", p.events("route"), p.dump());
}

#[test]
fn cf_priority_puts_the_worker_before_a_healthy_ws_front() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let mut args = vec![s("--cf-priority")];
    args.extend(ws_flag(ws.addr()));
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    assert_ok(&probe(&p, 2), &p);
    assert_eq!(w.upgrades(), 1, "{}", p.dump());
    assert_eq!(ws.connections(), 0, "ws comes after the Cloudflare tiers");
    assert_eq!(dc.inits(), 1);
}

/// A session through the proxy that has echoed one packet (so it is relaying).
fn relaying_session(p: &Proxy) -> MtClient {
    let opts = client_opts(p.addr(), SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::connect_with(&opts, &mut os_rng()).expect("connect");
    c.send_packet(&[7u8; 64]).expect("send");
    let back = c
        .recv_packet()
        .unwrap_or_else(|e| panic!("echo: {e}\n{}", p.dump()));
    assert_eq!(back, vec![7u8; 64]);
    c
}

/// The session still relays after its idle spell.
fn assert_still_relaying(c: &mut MtClient, p: &Proxy) {
    c.send_packet(&[9u8; 64]).expect("send after idle");
    let back = c
        .recv_packet()
        .unwrap_or_else(|e| panic!("echo after idle: {e}\n{}", p.dump()));
    assert_eq!(back, vec![9u8; 64]);
}

#[test]
fn cf_ping_interval_pings_the_worker_while_idle() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("worker"),
        s("--cf-ping-interval"),
        s("0.3"),
    ];
    args.extend(worker_flag(&w));
    args.extend(tcp_flag(&dc));
    let p = proxy(&args);
    let mut c = relaying_session(&p);
    let idle_from = Instant::now();
    // Idle: nothing either way; only the proxy's keepalive moves.
    assert!(
        wait_until(Duration::from_millis(1_200), || w.pings() >= 2),
        "{} pings in 1.2 s at a 0.3 s interval\n{}",
        w.pings(),
        p.dump()
    );
    // The second ping is due 0.6 s into the session, which began just before `idle_from`.
    assert!(
        idle_from.elapsed() >= Duration::from_millis(450),
        "pings faster than the interval: {:?}",
        idle_from.elapsed()
    );
    assert_still_relaying(&mut c, &p);
    assert!(w.violations().is_empty(), "{:?}", w.violations());
}

#[test]
fn no_ws_pings_toward_telegrams_front_by_default() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let mut args = vec![
        s("--tier-order"),
        s("ws"),
        s("--cf-ping-interval"),
        s("0.3"),
    ];
    args.extend(ws_flag(ws.addr()));
    let p = proxy(&args);
    let mut c = relaying_session(&p);
    // Absence needs a window: a second of idleness, three Cloudflare ping intervals.
    let pinged = wait_until(Duration::from_secs(1), || ws.pings() > 0);
    assert!(
        !pinged,
        "{} pings toward the ws tier\n{}",
        ws.pings(),
        p.dump()
    );
    assert_still_relaying(&mut c, &p);
    assert_eq!(ws.inits(), 1, "the session ran over ws");
}

#[test]
fn worker_look_alike_refuses_what_a_real_worker_refuses() {
    // The rig itself: a request that is not an upgrade gets 426, a wrong path 404, and a
    // refused upgrade never reaches `dst`.
    let w = FakeDc::start_worker(DcConfig::default());
    let err = common::ws_client(w.addr(), WORKER, "/other?dst=127.0.0.1", false)
        .expect_err("wrong path refused");
    assert!(err.contains("404"), "{err}");
    let err = common::ws_client(w.addr(), WORKER, "/apiws", false).expect_err("no dst refused");
    assert!(err.contains("400"), "{err}");
    w.set_fault(Fault::HttpRetryAfter {
        status: 429,
        secs: 7,
    });
    let err =
        common::ws_client(w.addr(), WORKER, "/apiws?dst=127.0.0.1:9", false).expect_err("429");
    assert!(
        err.contains("429") && err.contains("retry-after: 7"),
        "{err}"
    );
    let status = plain_get(&w, "/apiws?dst=127.0.0.1:9");
    assert!(status.starts_with("HTTP/1.1 426"), "{status}");
    assert_eq!(w.requests(), 4);
    assert_eq!((w.upgrades(), w.dst_connects()), (0, 0));
}

/// Sends a plain (non-upgrade) GET over TLS to the look-alike; returns the status line.
fn plain_get(w: &FakeDc, path: &str) -> String {
    use std::io::{BufRead, BufReader, Write};
    let sock = std::net::TcpStream::connect(w.addr()).expect("connect");
    sock.set_read_timeout(Some(WAIT)).expect("timeout");
    let name = rustls::pki_types::ServerName::try_from(WORKER).expect("name");
    let conn = rustls::ClientConnection::new(common::test_client_tls(), name).expect("TLS");
    let mut tls = rustls::StreamOwned::new(conn, sock);
    write!(tls, "GET {path} HTTP/1.1\r\nHost: {WORKER}\r\n\r\n").expect("write");
    tls.flush().expect("flush");
    let mut line = String::new();
    BufReader::new(tls)
        .read_line(&mut line)
        .expect("status line");
    line
}

/// Opens the look-alike directly with `dst` = the fake DC, sends the relay init and a
/// `req_pq_multi` as ONE message, and returns whether a matching `resPQ` came back.
fn direct_worker_res_pq(w: &FakeDc, dc: &FakeDc) -> Result<(), String> {
    use tg_ws_proxy::mtproto::framing::Decoder;
    use tg_ws_proxy::mtproto::{obfs2, packet};
    let path = format!("/apiws?dst=127.0.0.1:{}&dc=2&media=0", dc.port());
    let (mut ws, resp) = common::ws_client(w.addr(), WORKER, &path, false)?;
    if resp.headers().contains_key("sec-websocket-protocol") {
        return Err("the Worker echoed a subprotocol".into());
    }
    // Loopback answers in milliseconds; a silent Worker fails this fast.
    ws.get_ref()
        .sock
        .set_read_timeout(Some(Duration::from_millis(500)))
        .map_err(|e| e.to_string())?;
    let mut rng = os_rng();
    let mut init = obfs2::initiate(Tag::Intermediate, 2, None, &mut rng);
    let nonce = [0x42u8; 16];
    let mut pkt = framing::encode(
        Tag::Intermediate,
        &packet::req_pq_multi(&nonce, packet::msg_id(1_700_000_000_000)),
        &mut rng,
    );
    init.encrypt.apply(&mut pkt);
    let mut msg = init.init.to_vec();
    msg.extend_from_slice(&pkt);
    ws.send(tungstenite::Message::binary(msg))
        .map_err(|e| e.to_string())?;
    let mut decoder = Decoder::new(Tag::Intermediate);
    loop {
        if let Some(p) = decoder.next().map_err(|e| e.to_string())? {
            return packet::parse_res_pq(&p, &nonce)
                .map(|_| ())
                .map_err(|e| format!("{e:?}"));
        }
        match ws.read().map_err(|e| e.to_string())? {
            tungstenite::Message::Binary(b) => {
                let mut b = b.to_vec();
                init.decrypt.apply(&mut b);
                decoder.push(&b);
            }
            tungstenite::Message::Close(_) => return Err("closed before resPQ".into()),
            _ => {}
        }
    }
}

#[test]
fn worker_look_alike_pipes_a_plain_stream_to_dst_and_obeys_its_faults() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    direct_worker_res_pq(&w, &dc).expect("resPQ through the look-alike");
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)]);
    assert_eq!(w.dsts(), vec![format!("127.0.0.1:{}", dc.port())]);
    assert_eq!((w.upgrades(), w.dst_connects()), (1, 1));
    assert_eq!(
        w.raw_messages(),
        vec![64 + 4 + 40],
        "one message: init + packet"
    );

    // 101 then silence: never reaches dst, never answers.
    w.set_fault(Fault::SilentAfterUpgrade);
    let err = direct_worker_res_pq(&w, &dc).expect_err("silent");
    assert!(
        err.contains("timed out") || err.contains("Resource temporarily"),
        "{err}"
    );
    assert_eq!((w.upgrades(), w.dst_connects()), (2, 1));

    // 101 then close.
    w.set_fault(Fault::CloseAfterUpgrade);
    let err = direct_worker_res_pq(&w, &dc).expect_err("closed");
    assert!(!err.is_empty());
    assert_eq!((w.upgrades(), w.dst_connects()), (3, 1));

    // Refuse: the connection is dropped before TLS.
    w.set_fault(Fault::Refuse);
    assert!(direct_worker_res_pq(&w, &dc).is_err());
    assert_eq!(w.requests(), 3);
    assert_eq!(dc.inits(), 1);
    assert!(w.violations().is_empty(), "{:?}", w.violations());
}

/// `--media-tier-order`: media sessions (DC -2) take their own order, the others keep
/// `--tier-order`; each tier's fake DC sees only its own.
#[test]
fn media_sessions_follow_the_media_tier_order() {
    let ws = FakeDc::start_tls_ws(DcConfig::default());
    let tcp = FakeDc::start_tcp(DcConfig::default());
    let mut extra = vec![
        s("--tier-order"),
        s("ws"),
        s("--media-tier-order"),
        s("tcp"),
    ];
    extra.extend(ws_flag(ws.addr()));
    extra.extend(tcp_flag(&tcp));
    let p = proxy(&extra);
    assert_ok(&probe(&p, 2), &p);
    assert_eq!((ws.inits(), tcp.inits()), (1, 0), "DC 2 over ws");
    assert_ok(&probe(&p, -2), &p);
    assert_eq!((ws.inits(), tcp.inits()), (1, 1), "media DC 2 over tcp");
    assert_eq!(tcp.init_dcs(), vec![(Tag::Intermediate, -2)]);
}
