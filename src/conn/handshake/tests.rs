//! Unit tests of the handshake's pure steps: first bytes, plain acceptance, bad-input classes.

use super::*;
use crate::mtproto::obfs2::{initiate, Tag};
use crate::rng::Rng;

#[test]
fn first_bytes_tell_a_hello_from_an_init_and_mask_only_when_every_secret_is_ee() {
    let hello = [0x16, 0x03, 0x01, 0x02, 0x00];
    for all_ee in [false, true] {
        assert_eq!(first_bytes(&hello[..3], all_ee), First::NeedMore);
        assert_eq!(first_bytes(&hello, all_ee), First::Hello(5 + 0x200));
    }
    // An init (or HTTP) on a mixed port is read on; on an ee-only port it is masked.
    assert_eq!(first_bytes(b"GET /", false), First::Init(Stage::Init));
    assert_eq!(first_bytes(&[0xef], true), First::Mask(MaskWhy::NotTls));
    // Starts like a handshake record but is no hello we read (version 03 07): an init
    // starts so now and then, so a mixed port tries it as one.
    let bad = [0x16, 0x03, 0x07];
    assert_eq!(first_bytes(&bad, false), First::Init(Stage::InitOrBadHello));
    assert_eq!(
        first_bytes(&bad, true),
        First::Mask(MaskWhy::Hello(Reject::Malformed))
    );
}

#[test]
fn an_ee_secret_never_opens_a_plain_init() {
    let secret = |s: &str| Secret::parse(s).expect("secret parses");
    let secrets = [
        secret("ee0123456789abcdef0123456789abcdef6578616d706c652e636f6d"),
        secret("dd11111111111111111111111111111111"),
    ];
    let keys: Vec<[u8; 16]> = secrets.iter().map(|s| s.key).collect();
    let mut rng = Rng::from_seed([3; 48]);
    let with_ee = initiate(Tag::PaddedIntermediate, 2, Some(&keys[0]), &mut rng);
    assert!(accept_plain(&with_ee.init, &keys, &secrets).is_none());
    assert!(
        obfs2::accept(&with_ee.init, &keys).is_ok(),
        "the key itself opens it"
    );
    let with_dd = initiate(Tag::PaddedIntermediate, 2, Some(&keys[1]), &mut rng);
    let a = accept_plain(&with_dd.init, &keys, &secrets).expect("dd init accepted");
    assert_eq!((a.secret_index, a.dc), (1, 2));
}

#[test]
fn bad_input_is_classified() {
    assert_eq!(
        classify_bad(b"GET / HTTP/1.1\r\n"),
        CloseReason::HttpRequest
    );
    assert_eq!(classify_bad(b"POST /x"), CloseReason::HttpRequest);
    assert_eq!(
        classify_bad(&[0x16, 0x03, 0x01, 0x02, 0x00]),
        CloseReason::TlsClientHello
    );
    assert_eq!(classify_bad(&[0u8; 64]), CloseReason::BadInit);
    assert_eq!(classify_bad(b"GE"), CloseReason::BadInit);
    assert_eq!(
        classify_bad(b"CONNECT kws2.web.telegram.org:443 HTTP/1.1\r\n"),
        CloseReason::HttpRequest
    );
    assert_eq!(
        classify_bad(b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"),
        CloseReason::HttpRequest
    );
    // Too short to tell from a random init yet.
    assert!(!is_http(b"CONNECT") && !is_http(b"PRI * HTTP/2.0\r"));
}
