//! Black-box: bad fake-TLS (`ee`) clients of the built binary end in a clean close with a reason
//! in the log, and a good `ee` client running at the same time keeps working: bad records after
//! the handshake (alert, heartbeat type, AppData over 16640 bytes, empty AppData →
//! `tls-record`), hellos that are truncated, oversized (masked as malformed) or dripped past
//! `--handshake-timeout`, silence after our answer, an obfuscated2 init inside TLS made with
//! another secret (`bad-init`); and a hello arriving in small pieces within the deadline is
//! served. Spoken by the rig's own client (tests/common/faketls.rs). PROTOCOL.md §2.3, §2.4.
//!
//! Owns only this file. Real sockets on 127.0.0.1, fake peers, no fixed sleeps (the drip and
//! piece writers' pacing is the case under test, not a wait).

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::eebed::{assert_records_bounded, ee_key, ee_res_pq, tcp_bed, EE_DOMAIN};
use common::faketls::{build_hello, read_to_end, HelloSpec, TlsClient};
use common::os_rng;
use tg_ws_proxy::mtproto::obfs2::Tag;

const WAIT: Duration = Duration::from_secs(5);
/// `--handshake-timeout` for the hello-phase cases, and slack for the close to arrive.
const HANDSHAKE: &str = "1";
const HANDSHAKE_DUR: Duration = Duration::from_secs(1);
const MARGIN: Duration = Duration::from_secs(2);

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
