//! Unit tests of `mtproto::upstream`: the `--mtproto-proxy` grammar, labels that never show the
//! secret, the forwarded DC index, the init decoded by our own server side, and the fake-TLS
//! client handshake against our own server side (gate + ServerHello) over in-memory pipes.

use std::io::{Read, Write};

use super::hello::{HelloError, TlsHello};
use super::*;
use crate::mtproto::faketls::client::ClientError;
use crate::mtproto::faketls::gate::{EeKey, Gate};
use crate::mtproto::faketls::server_hello::{server_hello, MAX_SERVER_HELLO};
use crate::net::faketls_stream::FakeTlsStream;
use crate::relay::pipe::{pair, PipeEnd};

const KEY_HEX: &str = "0123456789abcdef0123456789abcdef";

fn rng(seed: u8) -> Rng {
    Rng::from_seed([seed; 48])
}

fn ee_hex(domain: &str) -> String {
    let d: String = domain.bytes().map(|b| format!("{b:02x}")).collect();
    format!("ee{KEY_HEX}{d}")
}

#[test]
fn parse_accepts_names_ipv4_and_bracketed_ipv6_with_every_secret_form() {
    let p = MtprotoProxy::parse(&format!("Proxy.Example.net:8443:{KEY_HEX}")).unwrap();
    assert_eq!((p.host.as_str(), p.port), ("proxy.example.net", 8443));
    assert_eq!(p.secret.kind, SecretKind::Plain);
    assert_eq!(p.ip(), None);
    let p = MtprotoProxy::parse(&format!("127.0.0.2:443:dd{KEY_HEX}")).unwrap();
    assert_eq!(p.ip(), Some("127.0.0.2".parse().unwrap()));
    assert_eq!((p.secret.kind.clone(), p.form()), (SecretKind::Dd, "dd"));
    let p = MtprotoProxy::parse(&format!("[::1]:443:{}", ee_hex("a.example"))).unwrap();
    assert_eq!(p.host, "::1");
    assert_eq!(p.tls_domain(), Some("a.example"));
    assert_eq!(p.secret.key_hex(), KEY_HEX);
    assert_eq!(p.to_string(), "[::1]:443/ee");
}

#[test]
fn parse_refuses_bad_input_with_a_reason_and_never_echoes_the_secret() {
    let cases = [
        (format!("::1:443:{KEY_HEX}"), "brackets"),
        (format!("[::1:443:{KEY_HEX}"), "closing bracket"),
        (format!("[nothost]:443:{KEY_HEX}"), "not an IPv6"),
        (format!(":443:{KEY_HEX}"), "host is empty"),
        (format!("h:0:{KEY_HEX}"), "not a port"),
        (format!("h:70000:{KEY_HEX}"), "not a port"),
        (format!("h:x:{KEY_HEX}"), "not a port"),
        (KEY_HEX.to_string(), "HOST:PORT:SECRET"),
        (format!("h:{KEY_HEX}"), "HOST:PORT:SECRET"),
        ("h:443:0123".to_string(), "upstream secret"),
        (
            "h:443:zz23456789abcdef0123456789abcdef".to_string(),
            "non-hex",
        ),
        (format!("h:443:ee{KEY_HEX}"), "upstream secret"),
        (format!("us@h:443:{KEY_HEX}"), "not a host"),
        // An ee domain no fake-TLS hello can carry: refused here, not at every dial.
        (
            format!("h:443:{}", ee_hex(&"a".repeat(254))),
            "fake-TLS domain",
        ),
    ];
    // The longest domain a hello carries is accepted.
    let longest = MtprotoProxy::parse(&format!("h:443:{}", ee_hex(&"a".repeat(253)))).unwrap();
    let key = longest.secret.key;
    let domain = longest.tls_domain().unwrap();
    assert!(TlsHello::new(&key, domain, Shape::ChromeClassic, 1, &mut rng(1)).is_some());
    for (input, want) in cases {
        let err = MtprotoProxy::parse(&input).unwrap_err();
        assert!(err.contains(want), "{input}: {err}");
        assert!(!err.contains(KEY_HEX), "{input}: secret echoed in {err}");
    }
}

#[test]
fn labels_and_debug_never_show_the_key() {
    let p = MtprotoProxy::parse(&format!("10.0.0.1:443:dd{KEY_HEX}")).unwrap();
    assert_eq!(p.to_string(), "10.0.0.1:443/dd");
    let dbg = format!("{p:?}");
    assert!(!dbg.contains(KEY_HEX) && !dbg.contains("456789"), "{dbg}");
}

#[test]
fn client_index_keeps_the_test_offset_and_media_sign() {
    for idx in [1i16, -2, 203, -203, 10002, -10003, 32767, -32767] {
        let dc = DcId::from_index(idx).unwrap();
        assert_eq!(client_index(dc), idx, "{dc}");
    }
    assert_eq!(client_index(DcId::from_index(i16::MIN).unwrap()), -i16::MAX);
}

#[test]
fn init_toward_the_upstream_decodes_with_our_server_side() {
    for (form, tag) in [
        (KEY_HEX.to_string(), Tag::Abridged),
        (format!("dd{KEY_HEX}"), Tag::PaddedIntermediate),
        (ee_hex("b.example"), Tag::Intermediate),
    ] {
        let p = MtprotoProxy::parse(&format!("127.0.0.1:1:{form}")).unwrap();
        let mut r = rng(7);
        let mut sent = p.initiate(tag, -10002, &mut r);
        assert!(!obfs2::is_reserved(&sent.init));
        let other = [0x55u8; 16];
        let mut got = obfs2::accept(&sent.init, &[other, p.secret.key]).unwrap();
        assert_eq!((got.tag, got.dc, got.secret_index), (tag, -10002, 1));
        // Both directions continue where the init left them.
        let mut up = *b"req_pq_multi....";
        sent.encrypt.apply(&mut up);
        got.decrypt.apply(&mut up);
        assert_eq!(&up, b"req_pq_multi....");
        let mut down = *b"resPQ...........";
        got.encrypt.apply(&mut down);
        sent.decrypt.apply(&mut down);
        assert_eq!(&down, b"resPQ...........");
        // A raw (Telegram-side) decode does not see the tag: the key is really hashed in.
        assert!(obfs2::accept_raw(&sent.init).map_or(true, |a| a.tag != tag || a.dc != -10002));
    }
}

const NOW: u64 = 1_800_000_000;

/// Our server side of the handshake over `srv`: reads the hello, checks it with the gate,
/// writes our ServerHello. Returns the accepted random.
fn serve(srv: &mut PipeEnd, key: [u8; 16], domain: &str, seed: u8) -> [u8; 32] {
    let mut head = [0u8; 5];
    srv.read_exact(&mut head).unwrap();
    let mut hello = head.to_vec();
    hello.resize(5 + usize::from(u16::from_be_bytes([head[3], head[4]])), 0);
    srv.read_exact(&mut hello[5..]).unwrap();
    let keys = [EeKey {
        index: 0,
        key,
        domain: domain.into(),
    }];
    let acc = Gate::new(120, 64, NOW, 0)
        .check(&hello, &keys, NOW, 0)
        .expect("our gate accepts the upstream hello");
    let mut out = vec![0u8; MAX_SERVER_HELLO];
    let mut r = rng(seed);
    let n = server_hello(&mut out, &acc, &mut |b| r.fill(b));
    srv.write_all(&out[..n]).unwrap();
    acc.random
}

#[test]
fn hello_passes_our_gate_and_verifies_our_answer_then_records_carry_the_stream() {
    let p = MtprotoProxy::parse(&format!("127.0.0.1:1:{}", ee_hex("c.example"))).unwrap();
    let (mut cli, mut srv) = pair(1 << 20, 1 << 20);
    let mut r = rng(1);
    let mut h = TlsHello::new(
        &p.secret.key,
        "c.example",
        Shape::ChromeClassic,
        NOW,
        &mut r,
    )
    .unwrap();
    assert!(!h.drive(&mut cli).unwrap(), "waits for the answer");
    // one record, Chrome's hello with post-quantum key agreement off: 517 bytes, as every
    // known server takes it (docs/protocol.md §2.6)
    let len = h.hello().len();
    assert_eq!(&h.hello()[..3], &[0x16, 0x03, 0x01]);
    assert_eq!(
        usize::from(u16::from_be_bytes([h.hello()[3], h.hello()[4]])),
        len - 5
    );
    assert_eq!(len, 517);
    serve(&mut srv, p.secret.key, "c.example", 2);
    assert!(h.drive(&mut cli).unwrap());
    // After it: application_data records both ways, read back by the server's record layer.
    let mut c = FakeTlsStream::new(cli);
    let mut s = FakeTlsStream::new(srv);
    let big = vec![0xabu8; 40_000];
    let mut at = 0;
    while at < big.len() {
        at += c.write(&big[at..]).unwrap();
    }
    let mut got = vec![0u8; big.len()];
    s.read_exact(&mut got).unwrap();
    assert_eq!(got, big);
    s.write_all(b"down").unwrap();
    let mut four = [0u8; 4];
    c.read_exact(&mut four).unwrap();
    assert_eq!(&four, b"down");
}

#[test]
fn hello_refuses_a_wrong_key_early_data_an_early_close_and_an_endless_answer() {
    let key = [9u8; 16];
    // An answer signed with another key.
    let (mut cli, mut srv) = pair(1 << 20, 1 << 20);
    let mut h = TlsHello::new(&key, "d.example", Shape::ChromeClassic, NOW, &mut rng(3)).unwrap();
    let _ = h.drive(&mut cli).unwrap();
    let mut head = [0u8; 5];
    srv.read_exact(&mut head).unwrap();
    let mut hello = head.to_vec();
    hello.resize(5 + usize::from(u16::from_be_bytes([head[3], head[4]])), 0);
    srv.read_exact(&mut hello[5..]).unwrap();
    // Re-sign the hello with the other key so our gate accepts it and answers with that key.
    let other = [8u8; 16];
    let (mut cli2, mut srv2) = pair(1 << 20, 1 << 20);
    let mut h2 =
        TlsHello::new(&other, "d.example", Shape::ChromeClassic, NOW, &mut rng(3)).unwrap();
    let _ = h2.drive(&mut cli2).unwrap();
    serve(&mut srv2, other, "d.example", 4);
    let mut answer = Vec::new();
    let mut buf = [0u8; 8192];
    while let Ok(n) = cli2.read(&mut buf) {
        answer.extend_from_slice(&buf[..n]);
    }
    srv.write_all(&answer).unwrap();
    match h.drive(&mut cli) {
        Err(HelloError::Answer(ClientError::BadDigest)) => {}
        other => panic!("wrong key: {other:?}"),
    }
    // Our own answer followed by bytes the server sent unasked.
    let (mut cli, mut srv) = pair(1 << 20, 1 << 20);
    let mut h = TlsHello::new(&key, "d.example", Shape::ChromeClassic, NOW, &mut rng(5)).unwrap();
    let _ = h.drive(&mut cli).unwrap();
    serve(&mut srv, key, "d.example", 6);
    srv.write_all(&[0x17, 3, 3, 0, 1, 0]).unwrap();
    assert!(matches!(h.drive(&mut cli), Err(HelloError::Early)));
    // Closed before the answer: an early end, not a wait.
    let (mut cli, mut srv) = pair(1 << 20, 1 << 20);
    let mut h = TlsHello::new(&key, "d.example", Shape::ChromeClassic, NOW, &mut rng(5)).unwrap();
    let _ = h.drive(&mut cli).unwrap();
    srv.write_all(&[0x16, 3, 3]).unwrap();
    crate::net::io::Endpoint::shutdown_write(&mut srv).unwrap();
    assert!(matches!(h.drive(&mut cli), Err(HelloError::Eof)));
    // Not TLS at all.
    let (mut cli, mut srv) = pair(1 << 20, 1 << 20);
    let mut h = TlsHello::new(&key, "d.example", Shape::ChromeClassic, NOW, &mut rng(5)).unwrap();
    let _ = h.drive(&mut cli).unwrap();
    srv.write_all(b"HTTP/1.1 400 Bad Request\r\n\r\n").unwrap();
    assert!(matches!(
        h.drive(&mut cli),
        Err(HelloError::Answer(ClientError::NotServerHello))
    ));
    // Handshake records with no end in sight: refused at the bound, not held.
    let (mut cli, mut srv) = pair(1 << 20, 1 << 20);
    let mut h = TlsHello::new(&key, "d.example", Shape::ChromeClassic, NOW, &mut rng(5)).unwrap();
    let _ = h.drive(&mut cli).unwrap();
    for _ in 0..5 {
        let mut rec = vec![0u8; 5 + 16_000];
        rec[..5].copy_from_slice(&[0x16, 3, 3, 0x3e, 0x80]);
        rec[5] = 0x02;
        srv.write_all(&rec).unwrap();
    }
    assert!(matches!(h.drive(&mut cli), Err(HelloError::TooLong)));
    // A hello with an empty or overlong domain is never built.
    assert!(TlsHello::new(&key, "", Shape::ChromeClassic, NOW, &mut rng(5)).is_none());
    assert!(TlsHello::new(
        &key,
        &"a".repeat(254),
        Shape::ChromeClassic,
        NOW,
        &mut rng(5)
    )
    .is_none());
}

#[test]
fn hello_waits_on_a_full_socket_and_resumes() {
    let key = [4u8; 16];
    // 100 bytes of room: the hello goes out in pieces.
    let (mut cli, mut srv) = pair(100, 1 << 20);
    let mut h = TlsHello::new(&key, "e.example", Shape::ChromeClassic, NOW, &mut rng(9)).unwrap();
    let mut hello = Vec::new();
    let mut buf = [0u8; 64];
    for _ in 0..100 {
        assert!(!h.drive(&mut cli).unwrap());
        while let Ok(n) = srv.read(&mut buf) {
            if n == 0 {
                break;
            }
            hello.extend_from_slice(&buf[..n]);
        }
        if hello.len() == h.hello().len() {
            break;
        }
    }
    assert_eq!(hello, h.hello());
}
