//! Black-box: masking on an `ee` port. A hello that is not ours — wrong key, wrong SNI, stale
//! timestamp once the clock is trusted, a replay of an accepted hello's exact bytes — and plain
//! HTTP on an ee-only port go to the mask site (`--mask-host`), which receives the client's
//! bytes exactly; a real TLS client (rustls trusting the test CA, and `openssl s_client`) gets
//! the mask site's certificate and page through the proxy; a TLS hello on a port without `ee`
//! secrets is closed as before (`tls-to-plain-port`). Each masking is counted in `ctl status
//! --json` under `counters.masked.REASON` (not-tls, malformed, wrong-key, wrong-sni, stale,
//! replay), its end as the close reason `masked`, and recorded with `mask_why` REASON.
//! docs/protocol.md §2.1, §2.4; flags per the issue-8 flags file.
//!
//! Owns only this file. Real sockets on 127.0.0.1, fake peers, no fixed sleeps.

mod common;

use std::io::Write;
use std::net::TcpStream;
use std::time::Duration;

use common::ctl::Ctl;
use common::eebed::{ee_key, ee_proxy, ee_res_pq, ee_session, EE_DOMAIN};
use common::fakedc::{DcConfig, FakeDc};
use common::faketls::{
    build_hello, check_answer, read_answer, read_to_end, AnswerError, Hello, HelloSpec, CT_CCS,
    CT_HANDSHAKE,
};
use common::masksite::{mask_cert_der, tls_get, MaskSite, MASK_DOMAIN, PAGE};
use common::{os_rng, Proxy};
use tg_ws_proxy::mtproto::obfs2::Tag;

const WAIT: Duration = Duration::from_secs(5);

fn s(v: &str) -> String {
    v.to_string()
}

/// A tcp-tier `ee` proxy masking to `mask`, with a control socket, `extra` after.
fn bed(mask: &MaskSite, extra: &[&str]) -> (FakeDc, Proxy, Ctl) {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let ctl = Ctl::new();
    let mut flags = vec![
        s("--tcp-dc-ip"),
        format!("2:{}", dc.addr()),
        s("--tier-order"),
        s("tcp"),
    ];
    flags.extend(ctl.args());
    flags.extend(extra.iter().map(|a| s(a)));
    let p = ee_proxy(mask, &flags);
    (dc, p, ctl)
}

/// Sends `hello` on a fresh connection and expects it masked: visit `visit` of the mask site
/// receives exactly its bytes, the mask site's own TLS answer comes back (ServerHello, CCS, …)
/// and it is not a fake-TLS answer under our key; the counters count it under
/// `masked.REASON`, the `nth` so far (1-based), and `nth` session records say `mask_why` REASON.
fn assert_masked(
    (proxy, ctl): (&Proxy, &Ctl),
    mask: &MaskSite,
    visit: usize,
    hello: &Hello,
    reason: &str,
    nth: u64,
) {
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&hello.bytes).unwrap();
    let v = mask
        .wait_bytes(visit, hello.bytes.len(), WAIT)
        .unwrap_or_else(|| panic!("{reason}: mask site got no hello\n{}", proxy.dump()));
    assert!(
        v.first_bytes == hello.bytes,
        "{reason}: the mask site got {} bytes, not the hello's {} exactly",
        v.first_bytes.len(),
        hello.bytes.len()
    );
    let (bytes, recs) = read_answer(&mut sock, WAIT).unwrap_or_else(|e| {
        panic!(
            "{reason}: no answer through the mask: {e:?}\n{}",
            proxy.dump()
        )
    });
    let kinds: Vec<u8> = recs.iter().map(|r| r.0).collect();
    assert_eq!(&kinds[..2], &[CT_HANDSHAKE, CT_CCS], "{reason}: {recs:?}");
    assert_eq!(
        check_answer(&bytes, &recs, &ee_key(), &hello.random).unwrap_err(),
        AnswerError::BadDigest,
        "{reason}: the answer is the mask site's, not a fake-TLS ServerHello"
    );
    drop(sock);
    assert_stat(proxy, ctl, "masked", reason, nth);
    let recs = proxy.wait_sessions(nth as usize, WAIT, |e| {
        e["masked"] == true && e["mask_why"] == reason && e["reason"] == "masked"
    });
    assert!(
        recs.len() as u64 >= nth,
        "{reason}: {} session records, want {nth}\n{}",
        recs.len(),
        proxy.dump()
    );
}

/// Waits until `ctl status --json`'s `counters.GROUP.KEY` is at least `n` (`masked.wrong-key`,
/// `closed_by_reason.masked`, `tls.unchecked`).
fn assert_stat(proxy: &Proxy, ctl: &Ctl, group: &str, key: &str, n: u64) {
    let mut last = serde_json::Value::Null;
    let ok = common::wait_until(WAIT, || {
        last = ctl.status(proxy)["counters"][group][key].clone();
        last.as_u64().is_some_and(|v| v >= n)
    });
    assert!(
        ok,
        "counters.{group}.{key} not >= {n}: {last}\n{}",
        proxy.dump()
    );
}

/// The sum of `ctl status --json`'s `counters.masked` (every masking reason).
fn masked_total(proxy: &Proxy, ctl: &Ctl) -> u64 {
    let st = ctl.status(proxy);
    st["counters"]["masked"]
        .as_object()
        .map_or(0, |m| m.values().filter_map(|v| v.as_u64()).sum())
}

#[test]
fn wrong_key_and_wrong_sni_are_masked_with_the_exact_hello() {
    let mask = MaskSite::start_tls();
    let (dc, proxy, ctl) = bed(&mask, &[]);
    let mut rng = os_rng();
    let wrong = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), &mut rng);
    assert_masked((&proxy, &ctl), &mask, 0, &wrong, "wrong-key", 1);
    let mut spec = HelloSpec::new(ee_key(), EE_DOMAIN);
    spec.sni = Some("other.example.org".into());
    let other = build_hello(&spec, &mut rng);
    assert_masked((&proxy, &ctl), &mask, 1, &other, "wrong-sni", 1);
    let v = mask.wait_bytes(1, 1, WAIT).unwrap();
    assert_eq!(v.hello_sni().as_deref(), Some("other.example.org"), "{v:?}");
    assert_eq!(dc.connections(), 0, "a masked client never dials Telegram");
    // Their ends are counted as the close reason `masked` too.
    assert_stat(&proxy, &ctl, "closed_by_reason", "masked", 2);
    // The proxy still serves its own clients.
    ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
}

#[test]
fn stale_hellos_are_masked_once_the_clock_is_trusted() {
    let mask = MaskSite::start_tls();
    let (_dc, proxy, ctl) = bed(&mask, &["--tls-time-window", "60"]);
    let mut rng = os_rng();
    // The clock rule: the wall clock is past 2026-11-01 and a valid hello agrees with it.
    assert!(
        common::faketls::now_unix() > 1_793_491_200,
        "this machine's clock looks unset"
    );
    // Before any hello agreed with the clock, a timestamp alone refuses nobody (a router
    // without a real-time clock): a stale but otherwise valid hello is served, counted as
    // accepted with its timestamp unchecked (`tls=accepted/replays/stale/unchecked`).
    let mut spec = HelloSpec::new(ee_key(), EE_DOMAIN);
    spec.ts_offset_s = -1000;
    let early = common::faketls::TlsClient::connect(proxy.addr(), &spec, &mut rng, WAIT);
    assert!(
        early.is_ok(),
        "a stale hello was refused while the clock was untrusted: {:?}\n{}",
        early.err().map(|e| e.to_string()),
        proxy.dump()
    );
    assert_tls_counter(&proxy, &ctl, "accepted", 1);
    assert_tls_counter(&proxy, &ctl, "unchecked", 1);
    assert_eq!(mask.connections(), 0, "nothing masked yet");
    // A fresh valid hello confirms the clock; from then on stale ones are masked.
    ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    for (k, offset) in [-1000i64, 1000].into_iter().enumerate() {
        let mut spec = HelloSpec::new(ee_key(), EE_DOMAIN);
        spec.ts_offset_s = offset;
        let stale = build_hello(&spec, &mut rng);
        assert_masked((&proxy, &ctl), &mask, k, &stale, "stale", k as u64 + 1);
    }
    // Within the window is fine.
    let mut spec = HelloSpec::new(ee_key(), EE_DOMAIN);
    spec.ts_offset_s = -30;
    let tls = common::faketls::TlsClient::connect(proxy.addr(), &spec, &mut rng, WAIT);
    assert!(
        tls.is_ok(),
        "30 s skew refused: {:?}\n{}",
        tls.err().map(|e| e.to_string()),
        proxy.dump()
    );
    assert_stat(&proxy, &ctl, "masked", "stale", 2);
    assert_tls_counter(&proxy, &ctl, "stale", 2);
}

#[test]
fn a_replayed_hello_is_masked() {
    let mask = MaskSite::start_tls();
    let (dc, proxy, ctl) = bed(&mask, &[]);
    let mut rng = os_rng();
    let first = ee_res_pq(&proxy, Tag::Intermediate, 2, &mut rng);
    let hello = first.stream.hello.clone();
    assert_masked((&proxy, &ctl), &mask, 0, &hello, "replay", 1);
    // And again, after the first session ended.
    first
        .stream
        .sock()
        .shutdown(std::net::Shutdown::Both)
        .unwrap();
    assert_masked((&proxy, &ctl), &mask, 1, &hello, "replay", 2);
    assert_eq!(
        dc.connections(),
        1,
        "only the original session reached the DC"
    );
    // The gate's own counter.
    assert_tls_counter(&proxy, &ctl, "replays", 2);
}

/// The gate's own counter `counters.tls.KEY` (`accepted`, `replays`, `stale`, `unchecked`)
/// reaches `n`.
fn assert_tls_counter(proxy: &Proxy, ctl: &Ctl, key: &str, n: u64) {
    assert_stat(proxy, ctl, "tls", key, n);
}

#[test]
fn a_malformed_hello_is_masked() {
    let mask = MaskSite::start_tls();
    let (_dc, proxy, ctl) = bed(&mask, &[]);
    let mut rng = os_rng();
    // Valid record header and digest, but the extensions length overruns the record.
    let mut h = build_hello(&HelloSpec::new(ee_key(), EE_DOMAIN), &mut rng);
    let ext_len_at = 44 + 32 + 2 + 30 + 2;
    h.bytes[ext_len_at..ext_len_at + 2].copy_from_slice(&[0x7f, 0xff]);
    h.random = common::faketls::sign_hello(&mut h.bytes, &ee_key(), h.timestamp);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&h.bytes).unwrap();
    let v = mask
        .wait_bytes(0, h.bytes.len(), WAIT)
        .unwrap_or_else(|| panic!("malformed: not masked\n{}", proxy.dump()));
    assert_eq!(v.first_bytes, h.bytes);
    drop(sock);
    assert_stat(&proxy, &ctl, "masked", "malformed", 1);
    let rec = proxy.wait_event("session", WAIT, |e| e["mask_why"] == "malformed");
    assert!(rec.is_some(), "{}", proxy.dump());
}

#[test]
fn a_real_tls_client_gets_the_mask_sites_certificate_and_page() {
    let mask = MaskSite::start_tls();
    let (dc, proxy, ctl) = bed(&mask, &[]);
    let got = tls_get(proxy.addr(), MASK_DOMAIN, WAIT)
        .unwrap_or_else(|e| panic!("TLS through the proxy: {e}\n{}", proxy.dump()));
    assert_eq!(got.cert, mask_cert_der(), "the mask site's certificate");
    assert!(got.response.ends_with(PAGE), "{}", got.response);
    let v = mask.wait_closed(0, WAIT).expect("the visit ended");
    assert_eq!(v.sni.as_deref(), Some(MASK_DOMAIN));
    assert!(v.tls_ok && v.pages == 1, "{v:?}");
    assert!(
        masked_total(&proxy, &ctl) >= 1,
        "not counted as masked\n{}",
        proxy.dump()
    );
    assert_eq!(dc.connections(), 0);

    // openssl s_client sees the mask certificate's subject too.
    let out = std::process::Command::new("openssl")
        .args([
            "s_client",
            "-connect",
            &proxy.addr().to_string(),
            "-servername",
            MASK_DOMAIN,
        ])
        .stdin(std::process::Stdio::null())
        .output();
    match out {
        Err(e) => eprintln!("SKIPPED the openssl s_client check: openssl not runnable ({e})"),
        Ok(o) => {
            let text = String::from_utf8_lossy(&o.stdout);
            assert!(
                text.contains("subject=CN = mask.example.org"),
                "s_client:\n{text}\n{}\nproxy log:\n{}",
                String::from_utf8_lossy(&o.stderr),
                proxy.dump()
            );
        }
    }
}

#[test]
fn plain_http_on_an_ee_only_port_is_masked() {
    let mask = MaskSite::start_plain();
    let (dc, proxy, ctl) = bed(&mask, &[]);
    let req = b"GET / HTTP/1.1\r\nHost: mask.example.org\r\n\r\n";
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(req).unwrap();
    let (end, got) = read_to_end(&mut sock, WAIT);
    let text = String::from_utf8_lossy(&got);
    assert!(text.ends_with(PAGE), "{end}: {text:?}\n{}", proxy.dump());
    let v = mask.wait_bytes(0, req.len(), WAIT).expect("visit");
    assert_eq!(v.first_bytes, req, "the request replayed exactly");
    assert_stat(&proxy, &ctl, "masked", "not-tls", 1);
    assert_eq!(dc.connections(), 0);
}

#[test]
fn a_tls_hello_on_a_port_without_ee_secrets_is_closed_as_before() {
    let mask = MaskSite::start_tls();
    let dc = FakeDc::start_tcp(DcConfig::default());
    let route = format!("2:{}", dc.addr());
    let mask_host = format!("127.0.0.1:{}", mask.port());
    let proxy = common::tcp_tier_proxy(&route, &["--mask-host", &mask_host, "-v"]);
    let mut rng = os_rng();
    let hello = build_hello(&HelloSpec::new(ee_key(), EE_DOMAIN), &mut rng);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&hello.bytes).unwrap();
    let (end, got) = read_to_end(&mut sock, WAIT);
    assert!(end == "eof" || end == "reset", "{end}\n{}", proxy.dump());
    assert!(got.is_empty(), "{} bytes came back", got.len());
    let rec = proxy.wait_session_reason("tls-to-plain-port", WAIT);
    assert!(rec.is_some(), "{}", proxy.dump());
    assert!(proxy.sessions_where(|e| e["masked"] == true).is_empty());
    assert_eq!(mask.connections(), 0, "no masking without ee secrets");
    assert_eq!(dc.connections(), 0);
    // An ee client on this port is refused the same way.
    assert!(ee_session(
        proxy.addr(),
        &ee_key(),
        EE_DOMAIN,
        Tag::Intermediate,
        2,
        &mut rng
    )
    .is_err());
}

#[test]
fn a_hello_without_sni_is_masked() {
    let mask = MaskSite::start_tls();
    let (dc, proxy, ctl) = bed(&mask, &[]);
    let mut rng = os_rng();
    let mut spec = HelloSpec::new(ee_key(), EE_DOMAIN);
    spec.sni = None;
    let h = build_hello(&spec, &mut rng);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&h.bytes).unwrap();
    let v = mask
        .wait_bytes(0, h.bytes.len(), WAIT)
        .unwrap_or_else(|| panic!("no SNI: not masked\n{}", proxy.dump()));
    assert_eq!(v.first_bytes, h.bytes);
    assert!(masked_total(&proxy, &ctl) >= 1, "{}", proxy.dump());
    assert_eq!(dc.connections(), 0);
}

/// Sends a wrong-key hello and expects the proxy to close it without masking: nothing back,
/// the mask site never visited, its session record ended for `reason`.
fn assert_closed_unmasked(proxy: &Proxy, mask: &MaskSite, reason: &str) {
    let mut rng = os_rng();
    let h = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), &mut rng);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    let _ = sock.write_all(&h.bytes);
    let (end, got) = read_to_end(&mut sock, WAIT);
    assert!(end == "eof" || end == "reset", "{end}\n{}", proxy.dump());
    assert!(
        got.is_empty(),
        "{} bytes came back\n{}",
        got.len(),
        proxy.dump()
    );
    drop(sock);
    let rec = proxy
        .wait_session_reason(reason, WAIT)
        .unwrap_or_else(|| panic!("no {reason} session record\n{}", proxy.dump()));
    assert_eq!(rec["down"], 0, "{rec}");
    assert_eq!(mask.connections(), 0, "the mask site was visited");
}

#[test]
fn no_mask_closes_a_hello_that_is_not_ours() {
    let mask = MaskSite::start_tls();
    let (_dc, proxy, _ctl) = bed(&mask, &["--no-mask"]);
    assert_closed_unmasked(&proxy, &mask, "bad-init");
    // Its own clients are still served.
    ee_res_pq(&proxy, Tag::Intermediate, 2, &mut os_rng());
}

#[test]
fn an_unreachable_mask_host_closes_the_client() {
    let mask = MaskSite::start_tls();
    let dead = common::closed_port();
    let (_dc, proxy, _ctl) = bed(
        &mask,
        &[
            "--mask-host",
            &dead.to_string(),
            "--mask-connect-timeout",
            "1",
        ],
    );
    assert_closed_unmasked(&proxy, &mask, "mask-unreachable");
}

#[test]
fn masking_to_our_own_listener_is_refused_as_a_loop() {
    let mask = MaskSite::start_tls();
    let own = common::free_port();
    let port = own.port().to_string();
    let (_dc, proxy, _ctl) = bed(&mask, &["--port", &port, "--mask-host", &own.to_string()]);
    assert_eq!(proxy.addr(), own, "the proxy took the port it was given");
    assert_closed_unmasked(&proxy, &mask, "mask-loop");
}

/// Bytes after a hello that is not ours, in the same write, follow it to the mask site in
/// order; so do the bytes of a client that half-closes at once (an active prober).
#[test]
fn bytes_after_a_masked_hello_follow_it_even_after_a_half_close() {
    let mask = MaskSite::start_plain();
    let (_dc, proxy, _ctl) = bed(&mask, &[]);
    let mut rng = os_rng();
    let h = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), &mut rng);
    let mut wire = h.bytes.clone();
    wire.extend_from_slice(b"EXTRA AFTER THE HELLO\r\n\r\n");
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&wire).unwrap();
    sock.shutdown(std::net::Shutdown::Write).unwrap();
    let v = mask
        .wait_bytes(0, wire.len(), WAIT)
        .unwrap_or_else(|| panic!("mask site got {:?}\n{}", mask.visits(), proxy.dump()));
    assert!(
        v.first_bytes == wire,
        "{} bytes, want {}",
        v.first_bytes.len(),
        wire.len()
    );
    // The plain recorder answers the blank line with its page: it reaches the client.
    let (_, got) = read_to_end(&mut sock, WAIT);
    assert!(
        String::from_utf8_lossy(&got).ends_with(PAGE),
        "{got:?}\n{}",
        proxy.dump()
    );
}

/// `--mask-host NAME:PORT` goes through the proxy's resolver (here a test hosts file mapping
/// the name to 127.0.0.1, no nameserver).
#[test]
fn a_mask_host_name_is_resolved() {
    let mask = MaskSite::start_tls();
    let host = format!("{MASK_DOMAIN}:{}", mask.port());
    let mut extra: Vec<String> = common::name_args(&[MASK_DOMAIN]);
    extra.extend([s("--mask-host"), host]);
    let refs: Vec<&str> = extra.iter().map(String::as_str).collect();
    let (_dc, proxy, _ctl) = bed(&mask, &refs);
    let got = tls_get(proxy.addr(), MASK_DOMAIN, WAIT)
        .unwrap_or_else(|e| panic!("TLS through the proxy: {e}\n{}", proxy.dump()));
    assert_eq!(got.cert, mask_cert_der());
    assert!(got.response.ends_with(PAGE), "{}", got.response);
}

/// Behind nginx/HAProxy (`--proxy-protocol`): an `ee` client after a PROXY v1 header is served,
/// and a hello that is not ours is masked without the header (the mask site sees the client's
/// own bytes only).
#[test]
fn behind_a_proxy_header_ee_is_served_and_masking_replays_no_header() {
    let mask = MaskSite::start_tls();
    let (dc, proxy, _ctl) = bed(&mask, &["--proxy-protocol"]);
    let mut rng = os_rng();
    let header = b"PROXY TCP4 192.0.2.7 127.0.0.1 40000 443\r\n";
    let key = ee_key();
    let hello = build_hello(&HelloSpec::new(key, EE_DOMAIN), &mut rng);
    let tls = common::faketls::TlsClient::connect_after(proxy.addr(), header, hello, &key, WAIT)
        .unwrap_or_else(|e| panic!("ee after a PROXY header: {e}\n{}", proxy.dump()));
    tls.sock().set_read_timeout(Some(WAIT)).unwrap();
    let mut c = common::mtsession::MtSession::new(tls, &key, Tag::Intermediate, 2, &mut rng);
    c.send_init().unwrap();
    c.req_pq()
        .unwrap_or_else(|e| panic!("ee after a PROXY header: {e}\n{}", proxy.dump()));
    assert_eq!(dc.inits(), 1);

    let wrong = build_hello(&HelloSpec::new(*b"not the ee key!!", EE_DOMAIN), &mut rng);
    let mut sock = TcpStream::connect(proxy.addr()).unwrap();
    sock.write_all(&[&header[..], &wrong.bytes].concat())
        .unwrap();
    let v = mask
        .wait_bytes(0, wrong.bytes.len(), WAIT)
        .unwrap_or_else(|| panic!("not masked\n{}", proxy.dump()));
    assert!(
        v.first_bytes == wrong.bytes,
        "the mask site got {} bytes",
        v.first_bytes.len()
    );
    drop(sock);
    let rec = proxy.wait_event("session", WAIT, |e| e["masked"] == true);
    let rec = rec.unwrap_or_else(|| panic!("no masked session\n{}", proxy.dump()));
    assert!(
        rec["peer"]
            .as_str()
            .is_some_and(|p| p.starts_with("192.0.2.7:")),
        "the record names the PROXY header's client: {rec}"
    );
}
