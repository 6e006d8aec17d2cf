//! Black-box: fake-TLS (`ee`) clients of the built binary, spoken by the rig's own client
//! (tests/common/faketls.rs, independent of src's faketls). The `ee` link printed by
//! `tg-ws-proxy link` with the proxy's own flags works end to end on every tier the rig fakes
//! (ws front, Worker, cfproxy, tcp); the init may be split across records or share its record
//! with the first packet, a CCS may come mid-stream, a record may be exactly 16640 bytes; 1 MiB
//! each way arrives byte-exact in AppData records of ≤ 16384 bytes; SNI matches ignoring ASCII
//! case; one port serves two `ee` secrets and a plain one. Bad clients: tests/faketls_badclient.rs;
//! masking: tests/faketls_mask.rs. docs/protocol.md §2; flags per the issue-8 flags file.
//!
//! Owns only this file. Real sockets on 127.0.0.1, fake peers, no fixed sleeps.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::eebed::{
    assert_records_bounded, ee_key, ee_proxy, ee_res_pq, ee_session, link_ee, tcp_bed, EE_DOMAIN,
};
use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc};
use common::faketls::{read_to_end, HelloSpec, TlsClient};
use common::masksite::MaskSite;
use common::{os_rng, LADDER_FAST};
use tg_ws_proxy::mtproto::obfs2::Tag;

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];
const WAIT: Duration = Duration::from_secs(5);
const WORKER: &str = "w.workers.dev";

fn s(v: &str) -> String {
    v.to_string()
}

/// Link → key and domain → a proxy with the same flags → resPQ for every tag, both DC signs.
/// Returns the proxy for tier-specific checks.
fn link_end_to_end(mask: &MaskSite, tier_flags: Vec<String>) -> common::Proxy {
    let mut flags = common::eebed::ee_args(mask);
    flags.extend(tier_flags.iter().cloned());
    let (key, domain) = link_ee(&flags).unwrap_or_else(|e| panic!("link: {e}"));
    assert_eq!(
        (key, domain.as_str()),
        (ee_key(), EE_DOMAIN),
        "the link carries the secret"
    );
    let proxy = ee_proxy(mask, &tier_flags);
    let mut rng = os_rng();
    for tag in TAGS {
        for dc in [2i16, -2] {
            let mut c = ee_session(proxy.addr(), &key, &domain, tag, dc, &mut rng)
                .unwrap_or_else(|e| panic!("{tag:?} dc {dc}: {e}\nproxy log:\n{}", proxy.dump()));
            if let Err(e) = c.req_pq() {
                panic!("{tag:?} dc {dc}: {e}\nproxy log:\n{}", proxy.dump());
            }
            let a = &c.stream.answer;
            assert_eq!(a.cipher, 0x1301, "answers with the client's TLS 1.3 suite");
            assert_eq!(
                a.session_id, c.stream.hello.session_id,
                "echoes the session id"
            );
            assert_records_bounded(&c.stream, &proxy);
        }
    }
    assert_eq!(mask.connections(), 0, "nothing masked\n{}", proxy.dump());
    proxy
}

fn want_inits() -> Vec<(Tag, i16)> {
    TAGS.iter().flat_map(|&t| [(t, 2), (t, -2)]).collect()
}

#[test]
fn ee_link_works_end_to_end_over_the_tcp_tier() {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let flags = vec![
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
        s("--tier-order"),
        s("tcp"),
    ];
    let _p = link_end_to_end(&mask, flags);
    assert_eq!(dc.init_dcs(), want_inits());
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn ee_link_works_end_to_end_over_the_ws_tier() {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let flags = vec![
        s("--dc-ip"),
        format!("2:{}", dc.addr()),
        s("--tier-order"),
        s("ws"),
    ];
    let _p = link_end_to_end(&mask, flags);
    assert_eq!(dc.init_dcs(), want_inits());
    assert_eq!(dc.paths().iter().filter(|p| *p == "/apiws").count(), 6);
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn ee_link_works_end_to_end_over_the_worker_tier() {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let w = FakeDc::start_worker(DcConfig::default());
    let mut flags: Vec<String> = LADDER_FAST.iter().map(|a| s(a)).collect();
    flags.extend(common::name_args(&[WORKER]));
    flags.extend([
        s("--tier-order"),
        s("worker"),
        s("--cf-worker-domain"),
        format!("{WORKER}:{}", w.port()),
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
    ]);
    let _p = link_end_to_end(&mask, flags);
    assert_eq!(dc.init_dcs(), want_inits(), "every init crossed the Worker");
    assert_eq!(w.dst_connects(), 6);
}

#[test]
fn ee_link_works_end_to_end_over_the_cfproxy_tier() {
    let mask = MaskSite::start_tls();
    let front = FakeDc::start_tls_ws(DcConfig::default());
    let mut flags: Vec<String> = LADDER_FAST.iter().map(|a| s(a)).collect();
    flags.extend(common::name_args(&[
        "kws2.example.com",
        "kws2-1.example.com",
    ]));
    flags.extend([
        s("--tier-order"),
        s("cfproxy"),
        s("--cf-domain"),
        format!("example.com:{}", front.port()),
    ]);
    let _p = link_end_to_end(&mask, flags);
    assert_eq!(front.init_dcs(), want_inits());
    assert!(
        front.snis().iter().all(|n| n.ends_with(".example.com")),
        "{:?}",
        front.snis()
    );
}

#[test]
fn init_split_across_records_or_sharing_a_record_with_the_first_packet() {
    let (mask, dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let key = ee_key();
    // Each case: how the 64-byte init and the req_pq_multi packet are cut into records.
    let cases: [&[usize]; 4] = [
        &[1, 63],      // init split, then the packet in its own record(s)
        &[32, 32],     //
        &[64 + 44],    // the init and the whole packet in ONE record (extra data)
        &[10, 60, 38], // the packet starts inside the second record
    ];
    for (k, cuts) in cases.iter().enumerate() {
        let spec = HelloSpec::new(key, EE_DOMAIN);
        let tls = TlsClient::connect(proxy.addr(), &spec, &mut rng, WAIT)
            .unwrap_or_else(|e| panic!("case {k}: {e}\n{}", proxy.dump()));
        tls.sock().set_read_timeout(Some(WAIT)).unwrap();
        let mut c = common::mtsession::MtSession::new(tls, &key, Tag::Intermediate, 2, &mut rng);
        let (req, nonce) = c.wire_req_pq();
        assert_eq!(req.len(), 44, "intermediate req_pq_multi: 4 + 40");
        let wire = [&c.init[..], &req].concat();
        let mut parts = Vec::new();
        let mut at = 0;
        for &n in cuts.iter() {
            parts.push(&wire[at..at + n]);
            at += n;
        }
        if at < wire.len() {
            parts.push(&wire[at..]);
        }
        c.stream.write_records(&parts).unwrap();
        if let Err(e) = c.expect_res_pq(&nonce) {
            panic!("case {k} {cuts:?}: {e}\nproxy log:\n{}", proxy.dump());
        }
        // The session goes on normally afterwards.
        c.req_pq()
            .unwrap_or_else(|e| panic!("case {k}: {e}\n{}", proxy.dump()));
        // A CCS record in mid-stream is skipped, like the first one.
        c.stream.write_raw(&common::faketls::CCS).unwrap();
        c.req_pq()
            .unwrap_or_else(|e| panic!("case {k}, after a CCS: {e}\n{}", proxy.dump()));
        assert_records_bounded(&c.stream, &proxy);
    }
    assert_eq!(dc.inits(), cases.len());
    assert_eq!(mask.connections(), 0);
}

#[test]
fn one_mib_each_way_byte_exact_in_records_of_at_most_16384() {
    let (_mask, dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let mut c = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    // Download: 64 packets of 16 KiB from the DC.
    const N: u32 = 64;
    const SIZE: usize = 16 * 1024;
    c.send_packet(&bulk_request(N, SIZE as u32)).unwrap();
    for i in 0..N {
        let got = c
            .recv_packet()
            .unwrap_or_else(|e| panic!("bulk packet {i}: {e}\n{}", proxy.dump()));
        assert!(got == bulk_payload(i, SIZE), "bulk packet {i} differs");
    }
    // Upload: 64 packets of 16 KiB (each crossing a record boundary), each echoed.
    for i in 0..N {
        let p: Vec<u8> = (0..SIZE)
            .map(|j| (j as u32 * 29 + i * 3) as u8 | 0x80)
            .collect();
        c.send_packet(&p).unwrap();
        let back = c
            .recv_packet()
            .unwrap_or_else(|e| panic!("echo {i}: {e}\n{}", proxy.dump()));
        assert!(back == p, "echo {i} differs");
    }
    assert_records_bounded(&c.stream, &proxy);
    let n = c.stream.records_in.len();
    assert!(n >= 2 * 64 * SIZE / 16384, "{n} records for 2 MiB down");
    assert!(
        dc.bytes_in() >= (N as u64) * SIZE as u64,
        "{}",
        dc.bytes_in()
    );
}

#[test]
fn sni_matches_the_domain_ignoring_ascii_case() {
    let (mask, _dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let mut c = ee_session(
        proxy.addr(),
        &ee_key(),
        &EE_DOMAIN.to_ascii_uppercase(),
        Tag::Abridged,
        2,
        &mut rng,
    )
    .unwrap_or_else(|e| panic!("upper-case SNI: {e}\n{}", proxy.dump()));
    c.req_pq()
        .unwrap_or_else(|e| panic!("upper-case SNI: {e}\n{}", proxy.dump()));
    assert_eq!(mask.connections(), 0);
}

/// Two `ee` secrets with their own domains and a plain one on one port: each `ee` client is
/// served with its key and domain, a plain obfuscated2 client too, and an `ee` key with the
/// other secret's domain is not ours (masked).
#[test]
fn one_port_serves_two_ee_secrets_and_a_plain_one() {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let other_key = *b"another ee key!!";
    let other_dom = "other.example.net";
    let hex = |b: &[u8]| b.iter().map(|x| format!("{x:02x}")).collect::<String>();
    let second = format!("ee{}{}", hex(&other_key), hex(other_dom.as_bytes()));
    let secrets = format!("{},{second},{}", common::eebed::ee_secret(), common::SECRET);
    let route = format!("2:{}", dc.addr());
    let mask_host = format!("127.0.0.1:{}", mask.port());
    let proxy = common::Proxy::start(&[
        "--secret",
        &secrets,
        "--mask-host",
        &mask_host,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
        "-v",
    ]);
    let mut rng = os_rng();
    for (key, dom) in [(ee_key(), EE_DOMAIN), (other_key, other_dom)] {
        let mut c = ee_session(proxy.addr(), &key, dom, Tag::Intermediate, 2, &mut rng)
            .unwrap_or_else(|e| panic!("{dom}: {e}\n{}", proxy.dump()));
        c.req_pq()
            .unwrap_or_else(|e| panic!("{dom}: {e}\n{}", proxy.dump()));
    }
    let opts = common::client_opts(proxy.addr(), common::SECRET, Tag::Intermediate, 2);
    let a = tg_ws_proxy::applet::probe::probe_once(&opts, &mut rng);
    assert_eq!(
        a.outcome,
        tg_ws_proxy::applet::probe::Outcome::Ok,
        "plain client: {a:?}\n{}",
        proxy.dump()
    );
    assert_eq!(dc.inits(), 3);
    assert_eq!(mask.connections(), 0);
    // Not every secret is ee: garbage that is not TLS is a bad init, as on a plain port.
    let mut garbage = [0x42u8; 64];
    rng.fill(&mut garbage[8..]);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&garbage).unwrap();
    let (end, _) = read_to_end(&mut sock, WAIT);
    assert!(
        end == "eof" || end == "reset",
        "garbage: {end}\n{}",
        proxy.dump()
    );
    let rec = proxy.wait_session_reason("bad-init", WAIT);
    let rec = rec.unwrap_or_else(|| panic!("no bad-init record\n{}", proxy.dump()));
    assert_eq!(rec["masked"], false, "{rec}");
    assert_eq!(
        mask.connections(),
        0,
        "non-TLS bytes masked on a mixed port"
    );
    // The second key signing for the first domain: not ours.
    let crossed = ee_session(
        proxy.addr(),
        &other_key,
        EE_DOMAIN,
        Tag::Intermediate,
        2,
        &mut rng,
    );
    assert!(
        crossed.is_err(),
        "a key accepted with another secret's domain"
    );
    assert!(
        mask.wait_bytes(0, 5, WAIT).is_some(),
        "not masked\n{}",
        proxy.dump()
    );
}

#[test]
fn a_record_of_exactly_16640_bytes_is_taken() {
    let (_mask, _dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let mut c = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    // One intermediate packet (4-byte header + 16636) filling a record of MAX_RECORD_IN.
    let p: Vec<u8> = (0..16636u32).map(|i| (i * 11) as u8 | 0x80).collect();
    let wire = c.wire_packet(&p);
    assert_eq!(wire.len(), common::faketls::MAX_RECORD_IN);
    c.stream.write_records(&[&wire]).unwrap();
    let back = c
        .recv_packet()
        .unwrap_or_else(|e| panic!("16640-byte record: {e}\n{}", proxy.dump()));
    assert!(back == p, "echo differs");
    assert_records_bounded(&c.stream, &proxy);
}

/// A client that does not wait for our answer: hello, CCS, the init and the first packet in
/// ONE write. The bytes after the hello record are already queued when the proxy reads it.
#[test]
fn a_pipelined_hello_ccs_init_and_packet_are_served() {
    let (_mask, dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let key = ee_key();
    let hello = common::faketls::build_hello(&HelloSpec::new(key, EE_DOMAIN), &mut rng);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.set_nodelay(true).unwrap();
    // The MTProto layer over an in-memory stream: we place its bytes by hand.
    let mut s = common::mtsession::MtSession::new(
        std::io::Cursor::new(Vec::new()),
        &key,
        Tag::Intermediate,
        2,
        &mut rng,
    );
    let (req, nonce) = s.wire_req_pq();
    let mut wire = hello.bytes.clone();
    wire.extend_from_slice(&common::faketls::CCS);
    let body = [&s.init[..], &req].concat();
    wire.extend_from_slice(&[0x17, 3, 3]);
    wire.extend_from_slice(&(body.len() as u16).to_be_bytes());
    wire.extend_from_slice(&body);
    sock.write_all(&wire).unwrap();
    let (bytes, recs) = common::faketls::read_answer(&mut sock, WAIT)
        .unwrap_or_else(|e| panic!("{e:?}\n{}", proxy.dump()));
    common::faketls::check_answer(&bytes, &recs, &key, &hello.random)
        .unwrap_or_else(|e| panic!("{e:?}\n{}", proxy.dump()));
    // The resPQ comes back in an AppData record.
    let mut h = [0u8; 5];
    sock.set_read_timeout(Some(WAIT)).unwrap();
    std::io::Read::read_exact(&mut sock, &mut h)
        .unwrap_or_else(|e| panic!("no record after the answer: {e}\n{}", proxy.dump()));
    assert_eq!(h[0], 0x17, "{h:02x?}");
    let mut rec = vec![0u8; u16::from_be_bytes([h[3], h[4]]) as usize];
    std::io::Read::read_exact(&mut sock, &mut rec).unwrap();
    s.stream = std::io::Cursor::new(rec);
    s.expect_res_pq(&nonce)
        .unwrap_or_else(|e| panic!("{e}\n{}", proxy.dump()));
    assert_eq!(dc.inits(), 1);
}

/// Hellos of other sizes than the app's 517 bytes (767: the largest with `16 03 01 02`; 1800: a
/// browser-sized hello with a post-quantum key share) are served alike.
#[test]
fn hellos_of_other_sizes_are_served() {
    let (_mask, dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    for payload_len in [767, 1800] {
        let spec = HelloSpec {
            payload_len,
            ..HelloSpec::new(ee_key(), EE_DOMAIN)
        };
        let tls = TlsClient::connect(proxy.addr(), &spec, &mut rng, WAIT)
            .unwrap_or_else(|e| panic!("{payload_len}: {e}\n{}", proxy.dump()));
        assert_eq!(tls.hello.bytes.len(), payload_len + 5);
        tls.sock().set_read_timeout(Some(WAIT)).unwrap();
        let mut c = common::mtsession::MtSession::new(tls, &ee_key(), Tag::Abridged, 2, &mut rng);
        c.send_init().unwrap();
        c.req_pq()
            .unwrap_or_else(|e| panic!("{payload_len}: {e}\n{}", proxy.dump()));
    }
    assert_eq!(dc.inits(), 2);
}

/// Records cut across TCP writes (inside the header at every offset, and inside the payload)
/// are put back together.
#[test]
fn records_split_across_tcp_writes_are_reassembled() {
    let (_mask, _dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let mut c = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    c.stream.sock().set_nodelay(true).unwrap();
    for cut in [1, 2, 3, 4, 5, 20] {
        let (req, nonce) = c.wire_req_pq();
        let mut rec = vec![0x17, 3, 3];
        rec.extend_from_slice(&(req.len() as u16).to_be_bytes());
        rec.extend_from_slice(&req);
        c.stream.write_raw(&rec[..cut]).unwrap();
        std::thread::sleep(Duration::from_millis(5)); // two TCP segments: the case under test
        c.stream.write_raw(&rec[cut..]).unwrap();
        c.expect_res_pq(&nonce)
            .unwrap_or_else(|e| panic!("cut at {cut}: {e}\n{}", proxy.dump()));
    }
}

/// The answer names the client's first TLS 1.3 suite, GREASE skipped (docs/protocol.md §2.2: MTProxy
/// copies the client's `13 0x`), not a fixed `13 01`.
#[test]
fn the_answer_names_the_clients_first_tls13_suite_skipping_grease() {
    let (_mask, _dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let key = ee_key();
    let mut hello = common::faketls::build_hello(&HelloSpec::new(key, EE_DOMAIN), &mut rng);
    // Suites at [78..84) were 13 01, 13 02, 13 03: now GREASE 0a0a, 13 02, 13 01.
    assert_eq!(&hello.bytes[78..84], &[0x13, 1, 0x13, 2, 0x13, 3]);
    hello.bytes[78..84].copy_from_slice(&[0x0a, 0x0a, 0x13, 2, 0x13, 1]);
    hello.random = common::faketls::sign_hello(&mut hello.bytes, &key, hello.timestamp);
    let tls = TlsClient::connect_hello(proxy.addr(), hello, &key, WAIT)
        .unwrap_or_else(|e| panic!("{e}\n{}", proxy.dump()));
    assert_eq!(tls.answer.cipher, 0x1302, "{}", proxy.dump());
}
