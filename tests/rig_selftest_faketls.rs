//! Self-tests of the fake-TLS half of the rig (tests/common/faketls.rs, mtsession.rs,
//! masksite.rs), the companion of tests/rig_selftest.rs (kept apart for its size): the
//! ClientHello against the wire facts of docs/protocol.md §2.1 and the app's shape, the
//! digest round trip with our own verifier, the answer check (§2.2) against a server answer
//! built here by the spec and against a real TLS server (the mask site, whose answer must fail
//! the digest), the record layer of [`TlsClient`] against a tiny `ee` echo server written here,
//! and the mask site itself (certificate, page, recorded bytes, SNI; `openssl s_client` if
//! present). No proxy binary: if these fail, the fake-TLS black-box tests mean nothing.

mod common;

use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::process::{Command, Stdio};
use std::thread::JoinHandle;
use std::time::Duration;

use common::faketls::{
    build_hello, check_answer, check_hello, hello_sni, hmac_sha256, now_unix, read_answer,
    AnswerError, ConnectError, HelloSpec, TlsClient, CCS, CT_APPDATA, CT_CCS, CT_HANDSHAKE,
    MAX_PAYLOAD, RANDOM_AT,
};
use common::masksite::{mask_cert_der, tls_get, MaskSite, MASK_DOMAIN, PAGE};
use common::mtsession::MtSession;
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

const KEY: [u8; 16] = *b"0123456789abcdef";
const WAIT: Duration = Duration::from_secs(5);

fn rng(n: u8) -> Rng {
    Rng::from_seed([n; 48])
}

#[test]
fn client_hello_has_the_app_shape_and_our_digest() {
    let mut r = rng(1);
    for payload_len in [512, 600, 767] {
        let spec = HelloSpec {
            payload_len,
            ..HelloSpec::new(KEY, MASK_DOMAIN)
        };
        let h = build_hello(&spec, &mut r);
        let b = &h.bytes;
        assert_eq!(b.len(), payload_len + 5, "record = header + asked payload");
        assert_eq!(
            &b[..4],
            &[0x16, 0x03, 0x01, 0x02],
            "MTProxy's first four bytes"
        );
        assert_eq!(u16::from_be_bytes([b[3], b[4]]) as usize, payload_len);
        assert_eq!(b[5], 0x01, "ClientHello");
        let hs = u32::from_be_bytes([0, b[6], b[7], b[8]]) as usize;
        assert_eq!(hs, payload_len - 4, "handshake length");
        assert_eq!(&b[9..11], &[3, 3], "client version");
        assert_eq!(&b[11..43], &h.random, "random at [11..43)");
        assert_eq!(b[43], 32, "32-byte session id");
        assert_eq!(&b[44..76], &h.session_id);
        assert_eq!(&b[78..80], &[0x13, 0x01], "13 01 is the first suite");
        assert_eq!(hello_sni(b).as_deref(), Some(MASK_DOMAIN));
        // Our verifier: the timestamp comes back; the wrong key or any flipped byte fails.
        assert_eq!(check_hello(b, &KEY), Ok(h.timestamp));
        assert!(h.timestamp.abs_diff(now_unix() as u32) <= 2);
        assert!(check_hello(b, b"fedcba9876543210").is_err());
        for at in [0, 5, 12, 100, b.len() - 1] {
            let mut bad = b.clone();
            bad[at] ^= 1;
            assert!(check_hello(&bad, &KEY).is_err(), "flip at {at} passed");
        }
        // The digest is HMAC(key, record with a zero random)[0..28), by hand.
        let mut zero = b.clone();
        zero[11..43].fill(0);
        assert_eq!(&hmac_sha256(&KEY, &[&zero])[..28], &h.random[..28]);
    }
    // Knobs: no SNI, a stale timestamp, two hellos never share a random or session id.
    let mut spec = HelloSpec::new(KEY, MASK_DOMAIN);
    spec.sni = None;
    spec.ts_offset_s = -3600;
    let h = build_hello(&spec, &mut r);
    assert_eq!(hello_sni(&h.bytes), None);
    assert_eq!(h.bytes.len(), 517);
    let ts = check_hello(&h.bytes, &KEY).expect("signed");
    assert!((now_unix() as i64 - 3600 - ts as i64).abs() <= 2, "{ts}");
    let h2 = build_hello(&spec, &mut r);
    assert_ne!(h.random, h2.random);
    assert_ne!(h.session_id, h2.session_id);
}

/// A ServerHello + CCS + AppData answer built by the table of docs/protocol.md §2.2, signed.
fn spec_answer(key: &[u8; 16], client_random: &[u8; 32], sid: &[u8], r: &mut Rng) -> Vec<u8> {
    let mut a = vec![0x16, 3, 3, 0, 0x7a, 0x02, 0, 0, 0x76, 3, 3];
    a.extend_from_slice(&[0u8; 32]);
    a.push(32);
    a.extend_from_slice(sid);
    a.extend_from_slice(&[0x13, 0x01, 0x00, 0x00, 0x2e]);
    a.extend_from_slice(&[0x00, 0x33, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20]);
    let mut share = [0u8; 32];
    r.fill(&mut share);
    a.extend_from_slice(&share);
    a.extend_from_slice(&[0x00, 0x2b, 0x00, 0x02, 0x03, 0x04]);
    assert_eq!(a.len(), 127);
    a.extend_from_slice(&CCS);
    let n = 1900 + r.below(200) as usize;
    a.extend_from_slice(&[0x17, 3, 3]);
    a.extend_from_slice(&(n as u16).to_be_bytes());
    let mut dummy = vec![0u8; n];
    r.fill(&mut dummy);
    a.extend_from_slice(&dummy);
    let h = hmac_sha256(key, &[client_random, &a]);
    a[RANDOM_AT..RANDOM_AT + 32].copy_from_slice(&h);
    a
}

/// A one-connection `ee` server by the spec: checks the hello with [`check_hello`], answers
/// with [`spec_answer`], then echoes every AppData payload back in one record, preceded by a
/// CCS record the client must skip. Ends at EOF or any record it does not expect.
fn echo_server() -> (std::net::SocketAddr, JoinHandle<Vec<(u8, usize)>>) {
    let l = TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = l.local_addr().unwrap();
    let t = std::thread::spawn(move || {
        let (mut s, _) = l.accept().unwrap();
        s.set_read_timeout(Some(WAIT)).unwrap();
        let mut h = [0u8; 5];
        s.read_exact(&mut h).unwrap();
        let mut rec = h.to_vec();
        rec.resize(5 + u16::from_be_bytes([h[3], h[4]]) as usize, 0);
        s.read_exact(&mut rec[5..]).unwrap();
        check_hello(&rec, &KEY).expect("our own hello verifies");
        let random: [u8; 32] = rec[11..43].try_into().unwrap();
        s.write_all(&spec_answer(&KEY, &random, &rec[44..76], &mut rng(9)))
            .unwrap();
        let mut seen = Vec::new();
        loop {
            if s.read_exact(&mut h).is_err() {
                return seen;
            }
            let mut body = vec![0u8; u16::from_be_bytes([h[3], h[4]]) as usize];
            s.read_exact(&mut body).unwrap();
            seen.push((h[0], body.len()));
            if h[0] == CT_APPDATA {
                let mut out = CCS.to_vec();
                out.extend_from_slice(&[0x17, 3, 3]);
                out.extend_from_slice(&(body.len() as u16).to_be_bytes());
                out.extend_from_slice(&body);
                s.write_all(&out).unwrap();
            } else if h[0] != CT_CCS {
                return seen;
            }
        }
    });
    (addr, t)
}

#[test]
fn answer_check_and_record_layer_against_a_spec_server() {
    let mut r = rng(2);
    // The answer check alone: by-the-table answer passes, any flipped byte fails the digest.
    let h = build_hello(&HelloSpec::new(KEY, MASK_DOMAIN), &mut r);
    let a = spec_answer(&KEY, &h.random, &h.session_id, &mut r);
    let recs = [(0x16, 122), (0x14, 1), (0x17, a.len() - 127 - 6 - 5)];
    let ok = check_answer(&a, &recs, &KEY, &h.random).expect("spec answer");
    assert_eq!(
        (ok.cipher, ok.session_id.as_slice()),
        (0x1301, &h.session_id[..])
    );
    for at in [20, 100, a.len() - 1] {
        let mut bad = a.clone();
        bad[at] ^= 0x40;
        let e = check_answer(&bad, &recs, &KEY, &h.random).unwrap_err();
        assert_eq!(e, AnswerError::BadDigest, "flip at {at}");
    }
    assert!(check_answer(&a, &recs, b"fedcba9876543210", &h.random).is_err());

    // End to end: the init split across two records with extra bytes after it, then a payload
    // larger than one record; everything comes back through the CCS-interleaved echo.
    let (addr, server) = echo_server();
    let spec = HelloSpec::new(KEY, MASK_DOMAIN);
    let tls = TlsClient::connect(addr, &spec, &mut r, WAIT).expect("spec server handshake");
    tls.sock().set_read_timeout(Some(WAIT)).unwrap();
    let mut s = MtSession::new(tls, &KEY, Tag::Intermediate, 2, &mut r);
    let init = s.init;
    let (req, _) = s.wire_req_pq();
    let mut first = init[40..].to_vec();
    first.extend_from_slice(&req);
    s.stream.write_records(&[&init[..40], &first]).unwrap();
    let big: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
    s.stream.write_all(&big).unwrap();
    let want = [&init[..], &req, &big].concat();
    let mut back = vec![0u8; want.len()];
    s.stream.read_exact(&mut back).unwrap();
    assert_eq!(back, want, "echo through the record layer");
    let mut tls = s.stream;
    assert!(tls
        .records_in
        .iter()
        .all(|&(t, n)| t == CT_APPDATA && n <= MAX_PAYLOAD || (t, n) == (CT_CCS, 1)));
    // A record type the client must not take: an error, not data.
    tls.write_raw(&[0x15, 3, 3, 0, 2, 2, 40]).unwrap();
    let seen = server.join().unwrap();
    let sizes: Vec<(u8, usize)> = [(CT_CCS, 1), (0x17, 40), (0x17, 24 + req.len())]
        .into_iter()
        .chain([
            (0x17, 16384),
            (0x17, 16384),
            (0x17, 40_000 - 32768),
            (0x15, 2),
        ])
        .collect();
    assert_eq!(seen, sizes, "records the server read");
    tls.sock().set_read_timeout(Some(WAIT)).unwrap();
    let mut rest = Vec::new();
    assert!(tls.read_to_end(&mut rest).map_or(true, |_| rest.is_empty()));
}

#[test]
fn mask_site_serves_its_certificate_and_records_hello_and_sni() {
    let site = MaskSite::start_tls();
    let got = tls_get(site.addr(), MASK_DOMAIN, WAIT).expect("GET from the mask site");
    assert_eq!(got.cert, mask_cert_der(), "mask.pem is what it shows");
    assert!(
        got.response.starts_with("HTTP/1.1 200 OK\r\n"),
        "{}",
        got.response
    );
    assert!(got.response.ends_with(PAGE), "{}", got.response);
    let v = site.wait_closed(0, WAIT).expect("visit ended");
    assert!(v.tls_ok && v.pages == 1, "{v:?}");
    assert_eq!(v.sni.as_deref(), Some(MASK_DOMAIN));
    // Our SNI parser agrees with rustls on a ClientHello rustls wrote.
    assert_eq!(v.hello_sni().as_deref(), Some(MASK_DOMAIN));
    assert_eq!(
        v.first_bytes[0], CT_HANDSHAKE,
        "the ClientHello is recorded first"
    );

    // Our fake-TLS hello is good TLS to a real server: it answers ServerHello, CCS, then
    // encrypted records, and that answer fails our digest (no `ee` key there).
    let mut r = rng(3);
    let hello = build_hello(&HelloSpec::new(KEY, MASK_DOMAIN), &mut r);
    let mut s = TcpStream::connect(site.addr()).unwrap();
    s.write_all(&hello.bytes).unwrap();
    let (bytes, recs) = read_answer(&mut s, WAIT).expect("a TLS 1.3 answer");
    let kinds: Vec<u8> = recs.iter().map(|r| r.0).collect();
    assert_eq!(kinds, [CT_HANDSHAKE, CT_CCS, CT_APPDATA], "{recs:?}");
    assert_eq!(
        check_answer(&bytes, &recs, &KEY, &hello.random).unwrap_err(),
        AnswerError::BadDigest
    );
    let v = site
        .wait_bytes(1, hello.bytes.len(), WAIT)
        .expect("recorded");
    assert_eq!(&v.first_bytes[..hello.bytes.len()], &hello.bytes[..]);
    drop(s);
    // TlsClient says the same.
    match TlsClient::connect(site.addr(), &HelloSpec::new(KEY, MASK_DOMAIN), &mut r, WAIT) {
        Err(ConnectError::Answer(AnswerError::BadDigest)) => {}
        Err(e) => panic!("{e}"),
        Ok(_) => panic!("the mask site passed our digest"),
    }

    // The plain recorder answers a request head with the same page.
    let plain = MaskSite::start_plain();
    let mut s = TcpStream::connect(plain.addr()).unwrap();
    s.write_all(b"GET / HTTP/1.1\r\nHost: x\r\n\r\n").unwrap();
    s.shutdown(std::net::Shutdown::Write).unwrap();
    let (end, got) = common::faketls::read_to_end(&mut s, WAIT);
    assert_eq!(end, "eof");
    assert!(String::from_utf8_lossy(&got).ends_with(PAGE));
    let v = plain.wait_closed(0, WAIT).expect("visit ended");
    assert_eq!(v.first_bytes, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n");
}

/// `openssl s_client` against `addr` with SNI `sni`: its output, or None when openssl is
/// missing (the caller skips with a message).
pub fn s_client_subject(addr: std::net::SocketAddr) -> Option<String> {
    let child = Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &addr.to_string(),
            "-servername",
            MASK_DOMAIN,
        ])
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn();
    let mut child = child.ok()?;
    drop(child.stdin.take()); // EOF: s_client ends after the handshake
    let out = child.wait_with_output().ok()?;
    Some(String::from_utf8_lossy(&out.stdout).into_owned())
}

#[test]
fn openssl_s_client_sees_the_mask_certificate() {
    let site = MaskSite::start_tls();
    let Some(out) = s_client_subject(site.addr()) else {
        eprintln!("SKIPPED: openssl is not installed (.ci/run installs it)");
        return;
    };
    assert!(out.contains("subject=CN = mask.example.org"), "{out}");
}
