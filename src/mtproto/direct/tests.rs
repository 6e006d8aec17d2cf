use super::*;
use crate::mtproto::obfs2::{initiate, Cipher};
use crate::rng::Rng;

fn ks(c: &mut Cipher, n: usize) -> Vec<u8> {
    let mut v = vec![0u8; n];
    c.apply(&mut v);
    v
}

/// A direct client's init as Desktop/tdlib send it: no secret, tag, DC index.
fn direct_init(tag: Tag, dc: i16, rng: &mut Rng) -> [u8; 64] {
    initiate(tag, dc, None, rng).init
}

#[test]
fn secretless_init_is_obfs2_with_its_tag_and_dc() {
    let mut rng = Rng::from_seed([1; 48]);
    for tag in [Tag::Abridged, Tag::Intermediate, Tag::PaddedIntermediate] {
        let init = direct_init(tag, -4, &mut rng);
        match classify(&init) {
            Classified::Obfs2(a) => assert_eq!((a.tag, a.dc), (tag, -4)),
            other => panic!("{other:?}"),
        }
        // Every shorter prefix waits for the whole init.
        for n in 0..64 {
            match classify(&init[..n]) {
                Classified::Need(k) => assert!(k > n && k <= 64, "{n} -> {k}"),
                other => panic!("prefix {n}: {other:?}"),
            }
        }
        // Bytes after the init do not matter.
        let mut more = init.to_vec();
        more.extend_from_slice(b"payload");
        assert!(matches!(classify(&more), Classified::Obfs2(_)));
    }
}

#[test]
fn an_init_made_with_a_secret_is_bad_without_it() {
    let mut rng = Rng::from_seed([2; 48]);
    let init = initiate(Tag::Abridged, 2, Some(&[7; 16]), &mut rng).init;
    assert!(matches!(classify(&init), Classified::Bad));
    assert!(matches!(classify(&[0x11; 64]), Classified::Bad));
}

#[test]
fn plain_transports_by_their_marker() {
    assert!(matches!(
        classify(&[0xef]),
        Classified::Plain(Tag::Abridged)
    ));
    assert!(matches!(
        classify(&[0xef, 0x0a, 1, 2]),
        Classified::Plain(Tag::Abridged)
    ));
    assert!(matches!(classify(&[0xee; 3]), Classified::Need(4)));
    assert!(matches!(
        classify(&[0xee, 0xee, 0xee, 0xee, 8, 0, 0, 0]),
        Classified::Plain(Tag::Intermediate)
    ));
    assert!(matches!(
        classify(&[0xdd; 4]),
        Classified::Plain(Tag::PaddedIntermediate)
    ));
    assert_eq!(plain_marker_len(Tag::Abridged), 1);
    assert_eq!(plain_marker_len(Tag::Intermediate), 4);
    assert_eq!(plain_marker_len(Tag::PaddedIntermediate), 4);
}

#[test]
fn tls_and_http_are_not_mtproto() {
    // A ClientHello record (517 bytes): decided at 64 bytes, not before.
    let mut hello = vec![
        0x16, 0x03, 0x01, 0x02, 0x00, 0x01, 0x00, 0x01, 0xfc, 0x03, 0x03,
    ];
    hello.resize(517, 0x42);
    assert!(matches!(classify(&hello[..1]), Classified::Need(5)));
    assert!(matches!(classify(&hello[..5]), Classified::Need(64)));
    assert!(matches!(classify(&hello[..63]), Classified::Need(64)));
    assert!(matches!(classify(&hello[..64]), Classified::NotMtproto));
    assert!(matches!(classify(&hello), Classified::NotMtproto));
    // A record shorter than an init is decided once it is whole.
    let mut short = vec![0x16, 0x03, 0x03, 0x00, 0x20];
    short.resize(37, 0);
    assert!(matches!(classify(&short[..36]), Classified::Need(37)));
    assert!(matches!(classify(&short), Classified::NotMtproto));
    // HTTP: the four starts no init has at once, other methods at 64 bytes.
    assert!(matches!(
        classify(b"GET / HTTP/1.1\r\n"),
        Classified::NotMtproto
    ));
    assert!(matches!(classify(b"POST"), Classified::NotMtproto));
    assert!(matches!(
        classify(b"PUT /a HTTP/1.1\r\n"),
        Classified::Need(64)
    ));
    let mut put = b"PUT /upload HTTP/1.1\r\nHost: web.telegram.org\r\n".to_vec();
    put.resize(64, b'x');
    assert!(matches!(classify(&put), Classified::NotMtproto));
}

#[test]
fn reserved_start_without_a_valid_tag_is_not_mtproto() {
    // Bytes [4..8) all zero: no client draws such an init (obfs2::is_reserved).
    let mut init = [0x33u8; 64];
    init[4..8].fill(0);
    assert!(matches!(classify(&init), Classified::NotMtproto));
}

#[test]
fn an_init_that_starts_like_tls_still_opens() {
    // One random init in 65,536 starts `16 03`: it must not be taken for TLS.
    let mut rng = Rng::from_seed([3; 48]);
    let init = loop {
        let i = direct_init(Tag::Intermediate, 2, &mut rng);
        if i[0] == 0x16 && i[1] == 0x03 && i[2] <= 0x04 {
            break i;
        }
        // Force the start and re-derive: the first 8 bytes are not key material.
        let mut forced = i;
        forced[..3].copy_from_slice(&[0x16, 0x03, 0x01]);
        if obfs2::accept_raw(&forced).is_ok() {
            break forced;
        }
    };
    match classify(&init) {
        Classified::Obfs2(a) => assert_eq!((a.tag, a.dc), (Tag::Intermediate, 2)),
        other => panic!("{other:?}"),
    }
}

#[test]
fn patch_dc_changes_the_dc_and_nothing_else() {
    let mut rng = Rng::from_seed([4; 48]);
    for (from, to) in [
        (2i16, 4i16),
        (-2, 2),
        (12345, 5),
        (-10003, -3),
        (i16::MIN, 1),
    ] {
        let init = direct_init(Tag::PaddedIntermediate, from, &mut rng);
        let mut a = obfs2::accept_raw(&init).expect("accepted");
        let mut patched = init;
        patch_dc(&mut patched, &a, to);
        assert_eq!(init[..60], patched[..60]);
        assert_eq!(init[62..], patched[62..]);
        let mut b = obfs2::accept_raw(&patched).expect("patched init opens");
        assert_eq!((b.tag, b.dc), (Tag::PaddedIntermediate, to));
        // Same ciphers both ways: the keys and IVs do not cover [56..64).
        assert_eq!(ks(&mut a.decrypt, 300), ks(&mut b.decrypt, 300));
        assert_eq!(ks(&mut a.encrypt, 300), ks(&mut b.encrypt, 300));
    }
}

#[test]
fn patch_dc_to_the_same_dc_is_identity() {
    let mut rng = Rng::from_seed([5; 48]);
    let init = direct_init(Tag::Abridged, 3, &mut rng);
    let a = obfs2::accept_raw(&init).unwrap();
    let mut same = init;
    patch_dc(&mut same, &a, 3);
    assert_eq!(same, init);
}
