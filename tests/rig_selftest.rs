//! Self-tests of the black-box rig (tests/common) that need no proxy binary: the fake DC in both
//! modes, its faults (the outage switch included) and records, the black hole, and the probe
//! client against them. If these fail, proxy test failures mean nothing. The fake-TLS half of the
//! rig (faketls, mtsession, masksite) is self-tested in tests/rig_selftest_faketls.rs.

mod common;

use std::io;
use std::net::TcpStream;
use std::time::{Duration, Instant};

use tungstenite::Message;

use common::blackhole::{is_timeout, BlackHole};
use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc, Fault, MsgRecord, QUIT};
use common::{raw_opts, wait_until, ws_client, WsClient};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome, Summary};
use tg_ws_proxy::mtproto::framing::{self, Decoder};
use tg_ws_proxy::mtproto::obfs2::{self, Cipher, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];
const WAIT: Duration = Duration::from_secs(5);

fn rng(n: u8) -> Rng {
    Rng::from_seed([n; 48])
}

/// Sends `req_pq_multi` and checks the `resPQ` echoes the nonce.
fn req_pq_roundtrip(c: &mut MtClient, r: &mut Rng) {
    let mut nonce = [0u8; 16];
    r.fill(&mut nonce);
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .unwrap();
    let reply = c.recv_packet().unwrap();
    packet::parse_res_pq(&reply, &nonce).expect("resPQ for our nonce");
}

#[test]
fn tcp_fake_dc_answers_req_pq_for_every_tag_and_dc_sign() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut r = rng(1);
    let mut expected = Vec::new();
    for tag in TAGS {
        for idx in [2i16, -2, 4, -10002] {
            let mut c = MtClient::connect_with(&raw_opts(dc.addr(), tag, idx), &mut r).unwrap();
            req_pq_roundtrip(&mut c, &mut r);
            expected.push((tag, idx));
        }
    }
    assert_eq!(dc.init_dcs(), expected);
    assert_eq!((dc.connections(), dc.upgrades()), (12, 0));
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
    assert!(wait_until(WAIT, || dc.live_sessions() == 0));
}

#[test]
fn probe_once_against_tcp_fake_dc_is_ok() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut r = rng(2);
    let a: Vec<_> = (0..3)
        .map(|_| probe_once(&raw_opts(dc.addr(), Tag::Intermediate, 2), &mut r))
        .collect();
    for x in &a {
        assert_eq!(x.outcome, Outcome::Ok, "{x:?}");
        // init 64 + header 4 + req_pq_multi 40 up; header 4 + resPQ down.
        assert_eq!(x.bytes_up, 64 + 4 + 40);
        assert!(x.bytes_down > 4 + 40, "{x:?}");
    }
    let s = Summary::from(&a);
    assert_eq!((s.count, s.ok, s.over_1s), (3, 3, 0));
}

#[test]
fn bulk_and_echo_over_tcp_fake_dc() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut r = rng(3);
    for tag in TAGS {
        let mut c = MtClient::connect_with(&raw_opts(dc.addr(), tag, 2), &mut r).unwrap();
        c.send_packet(&bulk_request(3, 100_000)).unwrap();
        for i in 0..3 {
            let p = c.recv_packet().unwrap();
            let want = bulk_payload(i, 100_000);
            // Padded intermediate keeps its 0–15 padding bytes in the payload.
            assert!(
                p.len() >= want.len() && p.len() < want.len() + 16,
                "{tag:?} {}",
                p.len()
            );
            assert_eq!(&p[..want.len()], &want[..], "{tag:?} packet {i}");
        }
        let hello = b"hello, DC! 12345".to_vec(); // 16 bytes: abridged needs a multiple of 4
        c.send_packet(&hello).unwrap();
        let back = c.recv_packet().unwrap();
        assert_eq!(&back[..hello.len()], &hello[..], "{tag:?}");
    }
    assert!(dc.bytes_out() > 900_000);
}

#[test]
fn bulk_sizes_round_up_to_words() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut c =
        MtClient::connect_with(&raw_opts(dc.addr(), Tag::Abridged, 2), &mut rng(4)).unwrap();
    c.send_packet(&bulk_request(1, 14)).unwrap();
    assert_eq!(c.recv_packet().unwrap(), bulk_payload(0, 16));
}

#[test]
fn black_hole_connect_times_out_instead_of_refusing() {
    let hole = BlackHole::new();
    let t = Instant::now();
    let err = TcpStream::connect_timeout(&hole.addr(), Duration::from_millis(300)).unwrap_err();
    assert!(
        is_timeout(&err),
        "connect to black hole failed fast: {err:?}"
    );
    assert!(
        t.elapsed() >= Duration::from_millis(250),
        "{:?}",
        t.elapsed()
    );
    // And the probe classifies it as a connect failure bounded by its timeout.
    let mut opts = raw_opts(hole.addr(), Tag::Intermediate, 2);
    opts.timeout = Duration::from_millis(200);
    let a = probe_once(&opts, &mut rng(5));
    assert_eq!(a.outcome, Outcome::ConnectFailed, "{a:?}");
    assert!(a.ms >= 150 && a.ms < 2000, "{a:?}");
}

/// A raw-relay WS client session: upgrade, init message, ciphers and decoder.
struct WsSession {
    ws: WsClient,
    tag: Tag,
    enc: Cipher,
    dec: Cipher,
    decoder: Decoder,
    rng: Rng,
}

impl WsSession {
    fn open(dc: &FakeDc, tag: Tag, idx: i16) -> WsSession {
        let (mut ws, resp) = ws_client(dc.addr(), "kws2.web.telegram.org", "/apiws", true)
            .expect("upgrade to fake DC");
        assert_eq!(resp.status(), 101);
        let proto = resp.headers().get("sec-websocket-protocol");
        assert_eq!(proto.map(|v| v.as_bytes()), Some(&b"binary"[..]));
        let mut rng = rng(6);
        let init = obfs2::initiate(tag, idx, None, &mut rng);
        ws.send(Message::binary(init.init.to_vec())).unwrap();
        WsSession {
            ws,
            tag,
            enc: init.encrypt,
            dec: init.decrypt,
            decoder: Decoder::new(tag),
            rng,
        }
    }

    /// Sends the given payloads as packets, all in ONE binary message.
    fn send_packets(&mut self, payloads: &[&[u8]]) {
        let mut wire = Vec::new();
        for p in payloads {
            wire.extend(framing::encode(self.tag, p, &mut self.rng));
        }
        self.enc.apply(&mut wire);
        self.ws.send(Message::binary(wire)).unwrap();
    }

    /// Next packet; also returns the length of the message that completed it.
    fn recv(&mut self) -> (Vec<u8>, usize) {
        loop {
            if let Some(p) = self.decoder.next().unwrap() {
                return (p, 0);
            }
            match self.ws.read().unwrap() {
                Message::Binary(b) => {
                    let mut b = b.to_vec();
                    self.dec.apply(&mut b);
                    self.decoder.push(&b);
                    if let Some(p) = self.decoder.next().unwrap() {
                        return (p, b.len());
                    }
                }
                Message::Pong(_) | Message::Ping(_) => {}
                other => panic!("unexpected message {other:?}"),
            }
        }
    }
}

#[test]
fn tls_ws_fake_dc_upgrade_init_and_one_packet_per_message() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    for tag in TAGS {
        let mut s = WsSession::open(&dc, tag, -4);
        let nonce = [0x42u8; 16];
        s.send_packets(&[&packet::req_pq_multi(
            &nonce,
            packet::msg_id(1_700_000_000_000),
        )]);
        let (reply, _) = s.recv();
        packet::parse_res_pq(&reply, &nonce).expect("resPQ over WS");
    }
    assert_eq!((dc.connections(), dc.upgrades(), dc.inits()), (3, 3, 3));
    assert!(dc.init_dcs().iter().all(|&(_, idx)| idx == -4));
    assert_eq!(dc.snis(), vec!["kws2.web.telegram.org"; 3]);
    assert_eq!(dc.hosts(), vec!["kws2.web.telegram.org"; 3]);
    assert_eq!(dc.paths(), vec!["/apiws"; 3]);
    assert_eq!(dc.protocols(), vec![Some("binary".to_string()); 3]);
    let m = dc.messages();
    assert_eq!(m.len(), 3);
    assert!(m.iter().all(|r| r.one_packet), "{m:?}");
    assert_eq!(m[1].len, 4 + 40, "intermediate req_pq_multi message");
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn tls_ws_fake_dc_flags_batched_messages_and_sends_bulk_as_single_messages() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let mut s = WsSession::open(&dc, Tag::Intermediate, 2);
    let (a, b) = (b"AAAA".to_vec(), b"BBBBBBBB".to_vec());
    s.send_packets(&[&a, &b]); // two packets in one message: a violation of docs/protocol.md §3.5
    assert_eq!(s.recv().0, a);
    assert_eq!(s.recv().0, b);
    assert!(wait_until(WAIT, || dc.messages().len() == 1));
    assert_eq!(
        dc.messages(),
        vec![MsgRecord {
            len: 4 + 4 + 4 + 8,
            one_packet: false
        }]
    );

    // A 1 MiB packet arrives as ONE binary message of exactly header + payload.
    s.send_packets(&[&bulk_request(2, 1 << 20)]);
    for i in 0..2 {
        let (p, msg_len) = s.recv();
        assert_eq!(msg_len, 4 + (1 << 20), "packet {i} not one message");
        assert_eq!(p, bulk_payload(i, 1 << 20));
    }
    // Ping is answered while the session is idle.
    s.ws.send(Message::Ping(b"hi".to_vec().into())).unwrap();
    match s.ws.read().unwrap() {
        Message::Pong(p) => assert_eq!(&p[..], b"hi"),
        other => panic!("expected pong, got {other:?}"),
    }
}

#[test]
fn tls_ws_fake_dc_records_bad_first_message() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let (mut ws, _) =
        ws_client(dc.addr(), "kws2-1.web.telegram.org", "/apiws_test", false).unwrap();
    let mut r = rng(7);
    let init = obfs2::initiate(Tag::Intermediate, 2, None, &mut r);
    let mut first = init.init.to_vec();
    first.extend_from_slice(&[0u8; 8]); // init coalesced with data: must be flagged
    ws.send(Message::binary(first)).unwrap();
    assert!(wait_until(WAIT, || !dc.violations().is_empty()));
    assert!(
        dc.violations()[0].contains("72 bytes"),
        "{:?}",
        dc.violations()
    );
    assert_eq!(dc.protocols(), vec![None]);
    assert_eq!(dc.paths(), vec!["/apiws_test"]);
    assert_eq!(dc.snis(), vec!["kws2-1.web.telegram.org"]);
}

/// The upgrade error text; panics if the upgrade succeeded.
fn refused(dc: &FakeDc, host: &str, path: &str) -> String {
    match ws_client(dc.addr(), host, path, true) {
        Ok(_) => panic!("upgrade on {path} should have been refused"),
        Err(e) => e,
    }
}

#[test]
fn http_status_fault_is_returned_and_changeable_at_runtime() {
    let dc = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::HttpStatus(403)));
    let host = "kws2.web.telegram.org";
    let e = refused(&dc, host, "/apiws");
    assert!(e.contains("403"), "{e}");
    dc.set_fault(Fault::HttpStatus(302));
    let e = refused(&dc, host, "/apiws");
    assert!(e.contains("302"), "{e}");
    let e = refused(&dc, host, "/other");
    assert!(e.contains("404"), "{e}");
    dc.set_fault(Fault::HttpRetryAfter {
        status: 429,
        secs: 7,
    });
    let e = refused(&dc, host, "/apiws");
    assert!(e.contains("429") && e.contains("retry-after: 7"), "{e}");
    dc.set_fault(Fault::None);
    ws_client(dc.addr(), host, "/apiws", true).expect("healthy again");
    assert_eq!((dc.connections(), dc.upgrades()), (5, 1));
}

#[test]
fn tls_ws_close_and_silent_faults() {
    let dc = FakeDc::start_tls_ws(DcConfig::with_fault(Fault::CloseAfterUpgrade));
    let (mut ws, _) = ws_client(dc.addr(), "kws2.web.telegram.org", "/apiws", true).unwrap();
    let r = ws.read();
    assert!(r.is_err() || matches!(r, Ok(Message::Close(_))), "{r:?}");

    dc.set_fault(Fault::SilentAfterUpgrade);
    let mut s = WsSession::open(&dc, Tag::Intermediate, 2);
    s.ws.get_ref()
        .sock
        .set_read_timeout(Some(Duration::from_millis(300)))
        .unwrap();
    s.send_packets(&[b"ECHO"]);
    match s.ws.read() {
        Err(tungstenite::Error::Io(e)) => {
            assert!(matches!(
                e.kind(),
                io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
            ))
        }
        other => panic!("silent DC answered: {other:?}"),
    }
    assert!(wait_until(WAIT, || dc.messages().len() == 1));
}

#[test]
fn tcp_faults_refuse_silent_close_after() {
    let dc = FakeDc::start_tcp(DcConfig::with_fault(Fault::Refuse));
    let mut r = rng(8);
    let a = probe_once(&raw_opts(dc.addr(), Tag::Intermediate, 2), &mut r);
    assert_eq!(a.outcome, Outcome::ClosedEarly, "{a:?}");

    dc.set_fault(Fault::SilentAfterUpgrade);
    let mut opts = raw_opts(dc.addr(), Tag::Intermediate, 2);
    opts.timeout = Duration::from_millis(300);
    let a = probe_once(&opts, &mut r);
    assert_eq!(a.outcome, Outcome::Timeout, "{a:?}");

    // CloseAfterSent: the crossing packet arrives whole, then EOF.
    dc.set_fault(Fault::CloseAfterSent(1000));
    let mut c = MtClient::connect_with(&raw_opts(dc.addr(), Tag::Intermediate, 2), &mut r).unwrap();
    c.send_packet(&bulk_request(5, 800)).unwrap();
    assert_eq!(c.recv_packet().unwrap(), bulk_payload(0, 800));
    assert_eq!(c.recv_packet().unwrap(), bulk_payload(1, 800));
    assert_eq!(
        c.recv_packet().unwrap_err().kind(),
        io::ErrorKind::UnexpectedEof
    );

    // CloseAfterBytes: 64 init + 4 + 8 = 76 ≥ 70, so that packet gets no reply.
    dc.set_fault(Fault::CloseAfterBytes(70));
    let mut c = MtClient::connect_with(&raw_opts(dc.addr(), Tag::Intermediate, 2), &mut r).unwrap();
    c.send_packet(b"12345678").unwrap();
    let e = c.recv_packet().unwrap_err();
    assert_closed(&e);

    // QUIT ends a healthy session.
    dc.set_fault(Fault::None);
    let mut c = MtClient::connect_with(&raw_opts(dc.addr(), Tag::Intermediate, 2), &mut r).unwrap();
    c.send_packet(QUIT).unwrap();
    assert_eq!(
        c.recv_packet().unwrap_err().kind(),
        io::ErrorKind::UnexpectedEof
    );
}

#[test]
fn outage_switch_cuts_sessions_upgraded_before_it_right_after_their_init() {
    // WS front: upgraded while healthy (like a warm pooled upstream), then the outage.
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let (mut ws, _) = ws_client(dc.addr(), "kws2.web.telegram.org", "/apiws", true).unwrap();
    dc.set_outage(true);
    let mut r = rng(9);
    let init = obfs2::initiate(Tag::Intermediate, 2, None, &mut r);
    ws.send(Message::binary(init.init.to_vec())).unwrap();
    loop {
        match ws.read() {
            Err(_) => break,
            Ok(Message::Close(_)) => continue,
            Ok(m) => panic!("a DC in outage sent {m:?}"),
        }
    }
    assert_eq!((dc.upgrades(), dc.inits(), dc.outage_closes()), (1, 1, 1));
    assert_eq!(dc.bytes_out(), 0);
    dc.set_outage(false);
    WsSession::open(&dc, Tag::Intermediate, 2);
    assert!(wait_until(WAIT, || dc.inits() == 2));
    assert_eq!(dc.outage_closes(), 1);

    // Raw TCP DC: connected before the outage, init after it.
    let dc = FakeDc::start_tcp(DcConfig::default());
    let opts = raw_opts(dc.addr(), Tag::Intermediate, 2);
    let sock = TcpStream::connect_timeout(&dc.addr(), WAIT).unwrap();
    assert!(wait_until(WAIT, || dc.connections() == 1));
    dc.set_outage(true);
    let mut c = MtClient::handshake(sock, &opts, &mut r).unwrap();
    let _ = c.send_packet(b"ECHO");
    let e = c.recv_packet().unwrap_err();
    assert_closed(&e);
    assert_eq!((dc.outage_closes(), dc.bytes_out()), (1, 0));
    dc.set_outage(false);
    assert_eq!(probe_once(&opts, &mut r).outcome, Outcome::Ok);
}

#[test]
fn stop_closes_live_sessions_and_listener() {
    let mut dc = FakeDc::start_tls_ws(DcConfig::default());
    let addr = dc.addr();
    let mut s = WsSession::open(&dc, Tag::Intermediate, 2);
    assert!(wait_until(WAIT, || dc.inits() == 1 && dc.live_sessions() == 1));
    let h = dc.handle();
    dc.stop();
    assert_eq!(h.live_sessions(), 0);
    loop {
        match s.ws.read() {
            Err(_) => break,
            Ok(Message::Close(_)) => continue,
            Ok(m) => panic!("stopped DC sent {m:?}"),
        }
    }
    let e = TcpStream::connect_timeout(&addr, Duration::from_secs(1)).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::ConnectionRefused, "{e:?}");
}

/// The fake peer ended the session: EOF or reset, nothing else.
fn assert_closed(e: &io::Error) {
    assert!(
        matches!(
            e.kind(),
            io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
        ),
        "{e:?}"
    );
}
