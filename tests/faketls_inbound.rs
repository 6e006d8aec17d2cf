//! Black-box: fake-TLS (`ee`) clients of the built binary, spoken by the rig's own client
//! (tests/common/faketls.rs, independent of src's faketls). The `ee` link printed by
//! `tg-ws-proxy link` with the proxy's own flags works end to end on every tier the rig fakes
//! (ws front, Worker, cfproxy, tcp); the init may be split across records or share its record
//! with the first packet; 1 MiB each way arrives byte-exact in AppData records of ≤ 16384
//! bytes; bad records after the handshake (alert, heartbeat type, oversize, empty AppData) and
//! bad hellos (truncated, oversized length, slow drip) end in a clean close with a reason in the
//! log while a good `ee` client keeps working. PROTOCOL.md §2; flags per the issue-8 flags file.
//!
//! Owns only this file. Real sockets on 127.0.0.1, fake peers, no fixed sleeps (the drip
//! writer's pacing is the case under test, not a wait).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::eebed::{
    assert_records_bounded, ee_key, ee_proxy, ee_res_pq, ee_session, link_ee, EE_DOMAIN,
};
use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc};
use common::faketls::{build_hello, read_to_end, HelloSpec, TlsClient};
use common::masksite::MaskSite;
use common::{os_rng, LADDER_FAST};
use tg_ws_proxy::mtproto::obfs2::Tag;

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];
const WAIT: Duration = Duration::from_secs(5);
/// `--handshake-timeout` for the hello-phase cases, and slack for the close to arrive.
const HANDSHAKE: &str = "1";
const HANDSHAKE_DUR: Duration = Duration::from_secs(1);
const MARGIN: Duration = Duration::from_secs(2);
const WORKER: &str = "w.workers.dev";

fn s(v: &str) -> String {
    v.to_string()
}

/// Link → key and domain → a proxy with the same flags → resPQ for every tag, both DC signs.
/// Returns the proxy for tier-specific checks.
fn link_end_to_end(mask: &MaskSite, tier_flags: Vec<String>) -> common::Proxy {
    let mut flags = common::eebed::ee_args(mask);
    flags.extend(tier_flags);
    let (key, domain) = link_ee(&flags).unwrap_or_else(|e| panic!("link: {e}"));
    assert_eq!(
        (key, domain.as_str()),
        (ee_key(), EE_DOMAIN),
        "the link carries the secret"
    );
    let proxy = ee_proxy(mask, &flags[5..]);
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

/// A tcp-tier `ee` proxy, its fake DC and mask site; `extra` flags after.
fn tcp_bed(extra: &[&str]) -> (MaskSite, FakeDc, common::Proxy) {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let mut flags = vec![
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
        s("--tier-order"),
        s("tcp"),
    ];
    flags.extend(extra.iter().map(|a| s(a)));
    let p = ee_proxy(&mask, &flags);
    (mask, dc, p)
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

/// A good `ee` session that must keep working while the bad ones are closed.
fn assert_alive(good: &mut common::mtsession::MtSession<TlsClient>, proxy: &common::Proxy) {
    if let Err(e) = good.req_pq() {
        panic!("the good session broke: {e}\nproxy log:\n{}", proxy.dump());
    }
}

#[test]
fn bad_records_after_the_handshake_close_cleanly_and_others_keep_working() {
    let (_mask, _dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let mut good = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    let mut long = vec![0x17, 3, 3, 0x41, 0x01]; // 16641 > 16640
    long.resize(5 + 16641, 0x5a);
    let cases: [(&str, Vec<u8>); 4] = [
        ("alert", vec![0x15, 3, 3, 0, 2, 2, 40]),
        ("heartbeat type", vec![0x18, 3, 3, 0, 3, 1, 0, 0]),
        ("AppData over 16640", long),
        ("empty AppData", vec![0x17, 3, 3, 0, 0]),
    ];
    for (k, (what, bytes)) in cases.iter().enumerate() {
        let mut c = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
        let start = Instant::now();
        let _ = c.stream.write_raw(bytes);
        let mut sock = c.stream.sock().try_clone().unwrap();
        let (end, _) = read_to_end(&mut sock, WAIT + MARGIN);
        assert!(
            end == "eof" || end == "reset",
            "{what}: {end}\n{}",
            proxy.dump()
        );
        assert!(
            start.elapsed() < WAIT,
            "{what}: closed after {:?}",
            start.elapsed()
        );
        let closes = || proxy.count_log("reason=tls-record");
        assert!(
            common::wait_until(WAIT, || closes() == k + 1),
            "{what}: want {} `reason=tls-record` lines\n{}",
            k + 1,
            proxy.dump()
        );
        assert_alive(&mut good, &proxy);
    }
}

/// Connects, runs `client` on the socket, then expects the proxy to end the connection within
/// `within`; returns the log line naming this client and every word of `reason` (`&[]`: any).
fn assert_hello_phase_close(
    proxy: &common::Proxy,
    what: &str,
    within: Duration,
    reason: &[&str],
    client: impl FnOnce(&mut TcpStream),
) -> String {
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.set_nodelay(true).unwrap();
    let me = sock.local_addr().unwrap().to_string();
    let start = Instant::now();
    client(&mut sock);
    let (end, _) = read_to_end(&mut sock, within + MARGIN);
    assert!(
        end == "eof" || end == "reset",
        "{what}: {end}\n{}",
        proxy.dump()
    );
    assert!(
        start.elapsed() <= within + MARGIN,
        "{what}: closed after {:?}",
        start.elapsed()
    );
    // Our end too: a masked session relays half-closes and is logged once both sides ended.
    drop(sock);
    let mut needles = vec![me.as_str()];
    needles.extend_from_slice(reason);
    proxy
        .wait_line(&needles, WAIT)
        .unwrap_or_else(|| panic!("{what}: no log line with {needles:?}\n{}", proxy.dump()))
}

#[test]
fn truncated_oversized_and_dripped_hellos_close_cleanly() {
    let (_mask, dc, proxy) = tcp_bed(&["--handshake-timeout", HANDSHAKE]);
    let mut rng = os_rng();
    let mut good = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    let hello = build_hello(&HelloSpec::new(ee_key(), EE_DOMAIN), &mut rng);

    // A record header promising 512 bytes, 100 of them sent, then silence.
    let line = assert_hello_phase_close(
        &proxy,
        "truncated",
        HANDSHAKE_DUR,
        &["handshake-timeout"],
        |s| s.write_all(&hello.bytes[..105]).unwrap(),
    );
    eprintln!("truncated hello: {line}");
    assert_alive(&mut good, &proxy);

    // A record length far over any hello bound (16 03 01 ff ff).
    let mut big = hello.bytes.clone();
    big[3..5].copy_from_slice(&[0xff, 0xff]);
    big.resize(4096, 0);
    let line = assert_hello_phase_close(&proxy, "oversized", HANDSHAKE_DUR, &[], |s| {
        let _ = s.write_all(&big);
    });
    eprintln!("oversized hello: {line}");
    assert_alive(&mut good, &proxy);

    // A good hello, one byte per 50 ms: 517 bytes would take 26 s; the deadline ends it.
    let mut w = TcpStream::connect(proxy.addr()).unwrap();
    w.set_nodelay(true).unwrap();
    let me = w.local_addr().unwrap().to_string();
    let mut r = w.try_clone().unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stop_w = stop.clone();
    let bytes = hello.bytes.clone();
    let start = Instant::now();
    let drip = std::thread::spawn(move || {
        for b in bytes {
            if stop_w.load(Ordering::Relaxed) || w.write_all(&[b]).is_err() {
                break;
            }
            std::thread::sleep(Duration::from_millis(50)); // the drip's pace
        }
    });
    let (end, _) = read_to_end(&mut r, HANDSHAKE_DUR + MARGIN);
    stop.store(true, Ordering::Relaxed);
    let _ = drip.join();
    assert!(
        end == "eof" || end == "reset",
        "drip: {end}\n{}",
        proxy.dump()
    );
    assert!(
        start.elapsed() <= HANDSHAKE_DUR + MARGIN,
        "{:?}",
        start.elapsed()
    );
    let line = proxy
        .wait_line(&[me.as_str(), "handshake-timeout"], WAIT)
        .unwrap_or_else(|| panic!("drip: no handshake-timeout line for {me}\n{}", proxy.dump()));
    eprintln!("drip: {line}");
    assert_alive(&mut good, &proxy);
    assert_eq!(dc.inits(), 1, "only the good session reached the DC");
    // Replies to the good session's req_pq came in AppData records only.
    assert_records_bounded(&good.stream, &proxy);
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
    assert!(proxy.wait_log("bad-init", WAIT), "{}", proxy.dump());
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

#[test]
fn a_hello_in_small_pieces_within_the_deadline_is_served() {
    let (_mask, _dc, proxy) = tcp_bed(&[]);
    let mut rng = os_rng();
    let key = ee_key();
    let hello = build_hello(&HelloSpec::new(key, EE_DOMAIN), &mut rng);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.set_nodelay(true).unwrap();
    for piece in hello.bytes.chunks(7) {
        sock.write_all(piece).unwrap();
        std::thread::sleep(Duration::from_millis(3)); // the pieces' pace: the case under test
    }
    let (bytes, recs) = common::faketls::read_answer(&mut sock, WAIT)
        .unwrap_or_else(|e| panic!("{e:?}\n{}", proxy.dump()));
    common::faketls::check_answer(&bytes, &recs, &key, &hello.random)
        .unwrap_or_else(|e| panic!("{e:?}\n{}", proxy.dump()));
}

#[test]
fn after_the_answer_a_silent_client_or_a_wrong_init_is_closed() {
    let (mask, dc, proxy) = tcp_bed(&["--handshake-timeout", HANDSHAKE, "--bad-client-drain", "0"]);
    let mut rng = os_rng();
    let key = ee_key();
    // The answer, then nothing: the handshake deadline still holds.
    let tls = TlsClient::connect(
        proxy.addr(),
        &HelloSpec::new(key, EE_DOMAIN),
        &mut rng,
        WAIT,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", proxy.dump()));
    let me = tls.sock().local_addr().unwrap().to_string();
    let mut sock = tls.sock().try_clone().unwrap();
    let start = Instant::now();
    let (end, _) = read_to_end(&mut sock, HANDSHAKE_DUR + MARGIN);
    assert!(
        end == "eof" || end == "reset",
        "silent: {end}\n{}",
        proxy.dump()
    );
    assert!(
        start.elapsed() <= HANDSHAKE_DUR + MARGIN,
        "{:?}",
        start.elapsed()
    );
    assert!(
        proxy.wait_line(&[&me, "handshake-timeout"], WAIT).is_some(),
        "{}",
        proxy.dump()
    );
    // A valid hello, then an obfuscated2 init made with another secret: a bad init, never
    // dialled, never masked (the hello was ours).
    let tls = TlsClient::connect(
        proxy.addr(),
        &HelloSpec::new(key, EE_DOMAIN),
        &mut rng,
        WAIT,
    )
    .unwrap_or_else(|e| panic!("{e}\n{}", proxy.dump()));
    let mut c =
        common::mtsession::MtSession::new(tls, b"some other key!!", Tag::Intermediate, 2, &mut rng);
    c.send_init().unwrap();
    let mut sock = c.stream.sock().try_clone().unwrap();
    let (end, got) = read_to_end(&mut sock, WAIT);
    assert!(
        end == "eof" || end == "reset",
        "wrong init: {end}\n{}",
        proxy.dump()
    );
    assert!(got.is_empty(), "{} bytes after a wrong init", got.len());
    assert!(proxy.wait_log("bad-init", WAIT), "{}", proxy.dump());
    assert_eq!(dc.connections(), 0);
    assert_eq!(mask.connections(), 0);
}
