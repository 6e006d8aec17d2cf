//! Black-box: `req_pq_multi` → `resPQ` (plus echoed packets) through the built binary for every
//! transport tag × secret form × media/non-media DC, over the ws tier and (a subset) the tcp tier,
//! and the test-DC path. Asserts what the fake DC saw on the wire: path, SNI, `Host`, `binary`
//! subprotocol, relay init DC index, one transport packet per WS message, no violations.
//!
//! Owns only this file; the rig lives in tests/common (not edited here). Real sockets on
//! 127.0.0.1, no fixed sleeps.

mod common;

use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, Proxy, SECRET};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::framing;
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

const TAGS: [Tag; 3] = [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate];

/// A second, different secret (plain form).
const OTHER: &str = "fedcba9876543210fedcba9876543210";

/// WS messages one [`exchange`] sends after the init: `req_pq_multi`, three coalesced packets,
/// one packet split across two writes, one packet with the quick-ack flag set.
const MSGS_PER_EXCHANGE: usize = 6;

/// Payload sizes of the three packets sent in ONE write (abridged long header at 600 bytes).
const COALESCED: [usize; 3] = [4, 600, 64];

/// Size of the packet whose header is split across two writes.
const SPLIT: usize = 1000;

/// Size of the packet sent with the quick-ack flag (docs/protocol.md §3.5) in its length header.
const QUICK_ACK: usize = 40;

fn os_rng() -> Rng {
    Rng::new().expect("OS randomness")
}

/// A recognisable payload of `len` bytes (a multiple of 4, so every tag carries it unpadded).
/// Starts with 0xA5 so the fake DC never takes it for `req_pq_multi`, `BULK` or `QUIT`.
fn payload(seed: u32, len: usize) -> Vec<u8> {
    let mut p: Vec<u8> = (0..len)
        .map(|i| {
            (i as u32)
                .wrapping_mul(13)
                .wrapping_add(seed.wrapping_mul(101)) as u8
        })
        .collect();
    if let Some(b) = p.first_mut() {
        *b = 0xA5;
    }
    p
}

/// One full client session through the proxy: `req_pq_multi` → `resPQ` for our nonce, then three
/// packets in a single write, one packet whose length header is split across two writes and one
/// with the quick-ack flag, each echoed back byte-exact (padded intermediate may append padding).
/// Errors as text.
fn exchange(proxy: &Proxy, secret: &str, tag: Tag, dc: i16, rng: &mut Rng) -> Result<(), String> {
    let opts = client_opts(proxy.addr(), secret, tag, dc);
    let mut c = MtClient::connect_with(&opts, rng).map_err(|e| format!("connect: {e}"))?;
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .map_err(|e| format!("send req_pq_multi: {e}"))?;
    let reply = c
        .recv_packet()
        .map_err(|e| format!("waiting for resPQ: {e}"))?;
    packet::parse_res_pq(&reply, &nonce).map_err(|e| format!("bad resPQ: {e:?}"))?;

    let sent: Vec<Vec<u8>> = COALESCED
        .iter()
        .enumerate()
        .map(|(i, &n)| payload(i as u32, n))
        .collect();
    let mut wire = Vec::new();
    for p in &sent {
        wire.extend(framing::encode(tag, p, rng));
    }
    c.send_raw_plain(&wire)
        .map_err(|e| format!("send coalesced: {e}"))?;
    let split = payload(9, SPLIT);
    let wire = framing::encode(tag, &split, rng);
    c.send_raw_plain(&wire[..2])
        .map_err(|e| format!("send split head: {e}"))?;
    c.send_raw_plain(&wire[2..])
        .map_err(|e| format!("send split tail: {e}"))?;
    let acked = payload(11, QUICK_ACK);
    let mut wire = framing::encode(tag, &acked, rng);
    match tag {
        // Abridged: top bit of the (short) length byte; others: top bit of the 32-bit length.
        Tag::Abridged => wire[0] |= 0x80,
        _ => wire[3] |= 0x80,
    }
    c.send_raw_plain(&wire)
        .map_err(|e| format!("send quick-ack packet: {e}"))?;

    for want in sent.iter().chain([&split, &acked]) {
        let got = c
            .recv_packet()
            .map_err(|e| format!("waiting for echo: {e}"))?;
        let extra = got.len().checked_sub(want.len());
        let pad_ok = match tag {
            // Client padding echoed plus the DC's own: at most 15 + 15 bytes.
            Tag::PaddedIntermediate => extra.is_some_and(|x| x <= 30),
            _ => extra == Some(0),
        };
        if !pad_ok || got[..want.len()] != want[..] {
            return Err(format!(
                "echo mismatch: sent {} bytes, got {} bytes",
                want.len(),
                got.len()
            ));
        }
    }
    Ok(())
}

fn ws_proxy(dc: &FakeDc, secret: &str, extra: &[&str]) -> Proxy {
    let ws = format!("2:{}", dc.addr());
    let mut args = vec!["--secret", secret, "--dc-ip", &ws, "--tier-order", "ws"];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

/// The `kws` host the proxy must try first for DC 2: `kws2` for non-media, `kws2-1` for media.
fn first_host(dc: i16) -> &'static str {
    if dc < 0 {
        "kws2-1.web.telegram.org"
    } else {
        "kws2.web.telegram.org"
    }
}

/// Asserts the WS fake DC's records for session number `k` (0-based, one connection each).
fn assert_ws_session(dc: &FakeDc, proxy: &Proxy, k: usize, tag: Tag, idx: i16, path: &str) {
    let ctx = || {
        format!(
            "session {k} ({tag:?}, dc {idx})\nproxy log:\n{}",
            proxy.logs().join("\n")
        )
    };
    assert_eq!(
        dc.connections(),
        k + 1,
        "one upstream connection per session; {}",
        ctx()
    );
    assert_eq!(dc.upgrades(), k + 1, "{}", ctx());
    let host = first_host(idx);
    assert_eq!(dc.snis()[k], host, "SNI; {}", ctx());
    assert_eq!(dc.hosts()[k], host, "Host header; {}", ctx());
    assert_eq!(dc.paths()[k], path, "path; {}", ctx());
    assert_eq!(
        dc.protocols()[k].as_deref(),
        Some("binary"),
        "subprotocol; {}",
        ctx()
    );
    // The relay init drops the test offset and keeps the media sign (docs/protocol.md §3.1).
    let relay_idx = if idx < 0 { -2 } else { 2 };
    assert_eq!(dc.init_dcs()[k], (tag, relay_idx), "relay init; {}", ctx());
}

/// Every WS message held exactly one transport packet, the count matches, nothing was flagged.
fn assert_one_packet_per_message(dc: &FakeDc, sessions: usize) {
    let m = dc.messages();
    assert_eq!(m.len(), sessions * MSGS_PER_EXCHANGE, "{m:?}");
    let bad: Vec<_> = m.iter().filter(|r| !r.one_packet).collect();
    assert!(
        bad.is_empty(),
        "messages not holding exactly one packet: {bad:?}"
    );
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn ws_tier_every_tag_secret_form_and_media_flag() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let proxy = ws_proxy(&dc, SECRET, &[]);
    let dd = format!("dd{SECRET}");
    let mut rng = os_rng();
    let mut k = 0;
    for secret in [SECRET, dd.as_str()] {
        for tag in TAGS {
            for idx in [2i16, -2] {
                if let Err(e) = exchange(&proxy, secret, tag, idx, &mut rng) {
                    panic!(
                        "{tag:?} dc {idx} secret {}: {e}\nproxy log:\n{}",
                        &secret[..2],
                        proxy.logs().join("\n")
                    );
                }
                assert_ws_session(&dc, &proxy, k, tag, idx, "/apiws");
                k += 1;
            }
        }
    }
    assert_one_packet_per_message(&dc, k);
}

#[test]
fn ws_tier_proxy_started_with_dd_secret_accepts_both_client_forms() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let dd = format!("dd{SECRET}");
    let proxy = ws_proxy(&dc, &dd, &[]);
    let mut rng = os_rng();
    let cases = [
        (dd.as_str(), Tag::PaddedIntermediate, 2i16),
        (dd.as_str(), Tag::Intermediate, -2),
        (SECRET, Tag::Abridged, 2),
        (SECRET, Tag::PaddedIntermediate, -2),
    ];
    for (k, &(secret, tag, idx)) in cases.iter().enumerate() {
        if let Err(e) = exchange(&proxy, secret, tag, idx, &mut rng) {
            panic!(
                "{tag:?} dc {idx}: {e}\nproxy log:\n{}",
                proxy.logs().join("\n")
            );
        }
        assert_ws_session(&dc, &proxy, k, tag, idx, "/apiws");
    }
    assert_one_packet_per_message(&dc, cases.len());
}

#[test]
fn ws_tier_two_secrets_client_uses_the_second() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let both = format!("{OTHER},{SECRET}");
    let proxy = ws_proxy(&dc, &both, &["--bad-client-drain", "0"]);
    let mut rng = os_rng();
    for (k, (tag, idx)) in [(Tag::Intermediate, 2i16), (Tag::Abridged, -2)]
        .into_iter()
        .enumerate()
    {
        if let Err(e) = exchange(&proxy, SECRET, tag, idx, &mut rng) {
            panic!(
                "{tag:?} dc {idx}: {e}\nproxy log:\n{}",
                proxy.logs().join("\n")
            );
        }
        assert_ws_session(&dc, &proxy, k, tag, idx, "/apiws");
    }
    assert_one_packet_per_message(&dc, 2);
    // A third secret the proxy does not know is refused and never reaches the DC.
    let third = "00112233445566778899aabbccddeeff";
    let mut opts = client_opts(proxy.addr(), third, Tag::Intermediate, 2);
    opts.timeout = Duration::from_secs(3);
    let a = probe_once(&opts, &mut rng);
    assert_ne!(a.outcome, Outcome::Ok, "{a:?}");
    assert_eq!(a.bytes_down, 0, "{a:?}");
    let rec = proxy.wait_session_reason("bad-init", Duration::from_secs(5));
    let rec = rec.unwrap_or_else(|| panic!("no bad-init record\n{}", proxy.dump()));
    assert!(rec["tier"].is_null(), "{rec}");
    assert_eq!(
        dc.connections(),
        2,
        "an unknown secret must not dial upstream"
    );
}

#[test]
fn tcp_tier_tags_and_media_flag() {
    let (dc, proxy) = common::tcp_dc2_proxy(&[]);
    let dd = format!("dd{SECRET}");
    let mut rng = os_rng();
    let mut expected = Vec::new();
    for tag in TAGS {
        for (secret, idx) in [(SECRET, 2i16), (dd.as_str(), -2)] {
            if let Err(e) = exchange(&proxy, secret, tag, idx, &mut rng) {
                panic!(
                    "{tag:?} dc {idx}: {e}\nproxy log:\n{}",
                    proxy.logs().join("\n")
                );
            }
            expected.push((tag, idx));
            assert_eq!(dc.connections(), expected.len());
        }
    }
    assert_eq!(dc.init_dcs(), expected);
    assert_eq!(dc.upgrades(), 0);
    assert!(dc.violations().is_empty(), "{:?}", dc.violations());
}

#[test]
fn test_dc_uses_apiws_test_and_the_dc2_ws_address() {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    // Only the ws tier: a test DC has no production table route to fall back on here.
    let proxy = ws_proxy(&dc, SECRET, &[]);
    let mut rng = os_rng();
    for (k, (tag, idx)) in [(Tag::Intermediate, 10002i16), (Tag::Abridged, -10002)]
        .into_iter()
        .enumerate()
    {
        if let Err(e) = exchange(&proxy, SECRET, tag, idx, &mut rng) {
            panic!(
                "{tag:?} dc {idx}: {e}\nproxy log:\n{}",
                proxy.logs().join("\n")
            );
        }
        assert_ws_session(&dc, &proxy, k, tag, idx, "/apiws_test");
    }
    assert_one_packet_per_message(&dc, 2);
}

#[test]
fn test_dc_over_tcp_tier_uses_its_test_index_override() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    // Test DC 2 is overridden as 10002 (a `2:` override is production DC 2's only).
    let tcp = format!("10002:{}", dc.addr());
    let proxy = common::tcp_tier_proxy(&tcp, &[]);
    let mut rng = os_rng();
    if let Err(e) = exchange(&proxy, SECRET, Tag::Intermediate, 10002, &mut rng) {
        panic!("{e}\nproxy log:\n{}", proxy.logs().join("\n"));
    }
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)]);
}
