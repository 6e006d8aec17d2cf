//! White-box tests of `faketls::server_hello` and `faketls::client`: our answer verifies with
//! the client-side check, its layout, and the client check's refusals.

use super::client::{
    check_server_hello, client_hello, ClientError, Shape, MAX_CLIENT_HELLO, MAX_DOMAIN,
};
use super::gate::{Accept, EeKey, Gate};
use super::server_hello::{server_hello, APPDATA_MAX, APPDATA_MIN, MAX_SERVER_HELLO};
use super::tests_hello::{rng, signed, DOMAIN, KEY, NOW};
use super::{CCS_RECORD, MAX_RECORD_IN};

fn accepted(seed: u8) -> Accept {
    let mut g = Gate::new(120, 64, NOW, 0);
    let keys = [EeKey {
        index: 0,
        key: KEY,
        domain: DOMAIN.into(),
    }];
    g.check(&signed(&KEY, DOMAIN, NOW, seed), &keys, NOW, 0)
        .unwrap()
}

fn answer(acc: &Accept, seed: u8) -> Vec<u8> {
    let mut out = vec![0u8; MAX_SERVER_HELLO];
    let mut r = rng(seed);
    let n = server_hello(&mut out, acc, &mut |b| r.fill(b));
    assert!(n > 0);
    out.truncate(n);
    out
}

#[test]
fn server_hello_verifies_with_client_check_server_hello() {
    let acc = accepted(1);
    let a = answer(&acc, 2);
    assert_eq!(check_server_hello(&a, &KEY, &acc.random), Ok(a.len()));
    // more bytes after the answer belong to the record layer
    let mut more = a.clone();
    more.extend_from_slice(&[0x17, 3, 3, 0, 1, 0]);
    assert_eq!(check_server_hello(&more, &KEY, &acc.random), Ok(a.len()));
}

#[test]
fn server_hello_layout_echoes_session_id_and_cipher_then_ccs_then_appdata() {
    let mut acc = accepted(3);
    acc.cipher = 0x1302;
    let a = answer(&acc, 4);
    assert_eq!(&a[..5], &[0x16, 0x03, 0x03, 0x00, 0x7a]);
    assert_eq!(&a[5..11], &[0x02, 0x00, 0x00, 0x76, 0x03, 0x03]);
    assert_eq!(a[43], 32);
    assert_eq!(&a[44..76], &acc.session_id[..]);
    assert_eq!(&a[76..79], &[0x13, 0x02, 0x00]);
    assert_eq!(
        &a[79..89],
        &[0x00, 0x2e, 0x00, 0x33, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20]
    );
    assert_eq!(&a[121..127], &[0x00, 0x2b, 0x00, 0x02, 0x03, 0x04]);
    assert_eq!(&a[127..133], &CCS_RECORD);
    assert_eq!(&a[133..136], &[0x17, 0x03, 0x03]);
    let n = u16::from_be_bytes([a[136], a[137]]) as usize;
    assert_eq!(a.len(), 138 + n);
    // a shorter session id is echoed with its own length
    acc.session_id_len = 0;
    let b = answer(&acc, 5);
    assert_eq!((b[4], b[43], &b[44..46]), (0x5a, 0, &[0x13, 0x02][..]));
    assert_eq!(check_server_hello(&b, &KEY, &acc.random), Ok(b.len()));
}

#[test]
fn server_hello_appdata_length_is_spread_over_the_whole_range() {
    let acc = accepted(6);
    let (mut lo, mut hi) = (usize::MAX, 0);
    for seed in 0..200u8 {
        let a = answer(&acc, seed);
        let n = a.len() - 138;
        assert!((APPDATA_MIN..=APPDATA_MAX).contains(&n));
        lo = lo.min(n);
        hi = hi.max(n);
    }
    assert!(
        lo < APPDATA_MIN + 200 && hi > APPDATA_MAX - 200,
        "{lo}..{hi}"
    );
}

#[test]
fn server_hello_refuses_a_short_buffer() {
    let acc = accepted(7);
    let mut out = vec![0u8; MAX_SERVER_HELLO - 1];
    assert_eq!(server_hello(&mut out, &acc, &mut |b| b.fill(1)), 0);
}

#[test]
fn client_check_refuses_wrong_key_and_any_tampered_byte() {
    let acc = accepted(8);
    let a = answer(&acc, 9);
    assert_eq!(
        check_server_hello(&a, &[0; 16], &acc.random),
        Err(ClientError::BadDigest)
    );
    let mut other = acc.random;
    other[0] ^= 1;
    assert_eq!(
        check_server_hello(&a, &KEY, &other),
        Err(ClientError::BadDigest)
    );
    for at in [11, 60, 100, 132, 500, a.len() - 1] {
        let mut m = a.clone();
        m[at] ^= 0x40;
        assert_eq!(
            check_server_hello(&m, &KEY, &acc.random),
            Err(ClientError::BadDigest)
        );
    }
}

#[test]
fn client_check_needs_more_at_every_prefix() {
    let acc = accepted(10);
    let a = answer(&acc, 11);
    for n in 0..a.len() {
        assert_eq!(
            check_server_hello(&a[..n], &KEY, &acc.random),
            Err(ClientError::NeedMore),
            "prefix {n}"
        );
    }
}

#[test]
fn client_check_bounds_records_types_and_lengths() {
    let r = [0u8; 32];
    let hello = |len: u16| {
        let mut v = vec![0x16, 3, 3];
        v.extend_from_slice(&len.to_be_bytes());
        v.push(0x02);
        v.resize(5 + len as usize, 0);
        v
    };
    let mut many = hello(90);
    for _ in 0..20 {
        many.extend_from_slice(&CCS_RECORD);
    }
    assert_eq!(
        check_server_hello(&many, &KEY, &r),
        Err(ClientError::TooManyRecords)
    );
    let mut long = hello(90);
    long.extend_from_slice(&[0x17, 3, 3]);
    long.extend_from_slice(&((MAX_RECORD_IN + 1) as u16).to_be_bytes());
    assert_eq!(
        check_server_hello(&long, &KEY, &r),
        Err(ClientError::TooLong)
    );
    let mut alert = hello(90);
    alert.extend_from_slice(&[0x15, 3, 3, 0, 2, 2, 40]);
    assert_eq!(
        check_server_hello(&alert, &KEY, &r),
        Err(ClientError::BadRecord)
    );
    assert_eq!(
        check_server_hello(b"HTTP/1.1 400 Bad Request\r\n", &KEY, &r),
        Err(ClientError::NotServerHello)
    );
    assert_eq!(
        check_server_hello(&[0x15, 3, 3, 0, 2, 2, 40], &KEY, &r),
        Err(ClientError::NotServerHello)
    );
    let mut not_sh = hello(90);
    not_sh[5] = 0x0b;
    assert_eq!(
        check_server_hello(&not_sh, &KEY, &r),
        Err(ClientError::NotServerHello)
    );
}

#[test]
fn classic_client_hello_is_what_mtproxy_requires_and_carries_the_timestamp() {
    for (seed, domain) in [(12, DOMAIN), (13, "a.b"), (14, &*"a".repeat(MAX_DOMAIN))] {
        let mut r = rng(seed);
        let (out, random) =
            client_hello(Shape::ChromeClassic, &KEY, domain, NOW, &mut |b| r.fill(b)).unwrap();
        // MTProxy: the first four bytes 16 03 01 02 (a 512..=767-byte record), ≤ 4096 in all
        assert_eq!(&out[..4], &[0x16, 0x03, 0x01, 0x02], "{domain}");
        assert!(out.len() <= 4096);
        assert_eq!(&out[11..43], &random);
        // a GREASE suite, then 13 01 (MTProxy: the first non-GREASE suite is 13 0x)
        assert_eq!(&out[76..78], &[0x00, 0x20]);
        assert!(super::hello::is_grease(u16::from_be_bytes([
            out[78], out[79]
        ])));
        assert_eq!(&out[80..82], &[0x13, 0x01]);
        let mut g = Gate::new(120, 64, NOW, 0);
        let keys = [EeKey {
            index: 0,
            key: KEY,
            domain: domain.into(),
        }];
        assert_eq!(g.check(&out, &keys, NOW + 7, 0).unwrap().skew_s, -7);
    }
}

#[test]
fn client_hello_domain_bounds() {
    let long = "a".repeat(MAX_DOMAIN);
    for shape in [Shape::Chrome, Shape::ChromeClassic] {
        let (out, _) = client_hello(shape, &KEY, &long, NOW, &mut |b| b.fill(3)).unwrap();
        assert!(out.len() <= MAX_CLIENT_HELLO);
        assert_eq!(
            super::hello::parse(&out).unwrap().sni,
            Some(long.as_bytes())
        );
        let longer = "a".repeat(MAX_DOMAIN + 1);
        assert!(client_hello(shape, &KEY, &longer, NOW, &mut |b| b.fill(3)).is_none());
        assert!(client_hello(shape, &KEY, "", NOW, &mut |b| b.fill(3)).is_none());
        // a source stuck at 0xff still ends (GREASE values distinct, ML-KEM coefficients < q)
        assert!(client_hello(shape, &KEY, DOMAIN, NOW, &mut |b| b.fill(0xff)).is_some());
    }
}
