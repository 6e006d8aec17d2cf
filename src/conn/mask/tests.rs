//! Unit tests of masking's pure parts: target choice, loop check, reason names, the splice
//! buffer, the ee-only sniff.

use super::*;
use crate::mtproto::obfs2::Secret;

fn cfg(secrets: &[&str]) -> Config {
    Config::with_secrets(secrets.iter().map(|s| Secret::parse(s).unwrap()).collect())
}

const KEY: &str = "0123456789abcdef0123456789abcdef";

fn ee(domain: &str) -> String {
    let hex: String = domain.bytes().map(|b| format!("{b:02x}")).collect();
    format!("ee{KEY}{hex}")
}

#[test]
fn target_by_flag_then_sni_then_first_ee() {
    let mut c = cfg(&[KEY, &ee("a.example"), &ee("b.example")]);
    assert_eq!(mask_target(&c, None), Some(("a.example".into(), 443)));
    assert_eq!(
        mask_target(&c, Some(b"B.Example")),
        Some(("b.example".into(), 443))
    );
    assert_eq!(
        mask_target(&c, Some(b"other")),
        Some(("a.example".into(), 443))
    );
    c.mask_host = Some(("127.0.0.1".into(), 8443));
    assert_eq!(
        mask_target(&c, Some(b"b.example")),
        Some(("127.0.0.1".into(), 8443))
    );
    assert_eq!(mask_target(&cfg(&[KEY]), None), None);
}

#[test]
fn loop_check() {
    let a = |s: &str| s.parse::<SocketAddr>().unwrap();
    let mut none = |_: IpAddr| false;
    let mut all = |_: IpAddr| true;
    assert!(is_loop(a("127.0.0.1:1443"), a("127.0.0.1:1443"), &mut none));
    assert!(is_loop(
        a("[::ffff:127.0.0.1]:1443"),
        a("127.0.0.1:1443"),
        &mut none
    ));
    assert!(!is_loop(a("127.0.0.1:1444"), a("127.0.0.1:1443"), &mut all));
    assert!(!is_loop(a("127.0.0.2:1443"), a("127.0.0.1:1443"), &mut all));
    // Unspecified listener: loopback or one of our addresses on our port.
    assert!(is_loop(a("127.0.0.9:443"), a("0.0.0.0:443"), &mut none));
    assert!(is_loop(a("[::1]:443"), a("[::]:443"), &mut none));
    assert!(is_loop(a("192.0.2.1:443"), a("0.0.0.0:443"), &mut all));
    assert!(!is_loop(a("192.0.2.1:443"), a("0.0.0.0:443"), &mut none));
    assert!(!is_loop(a("127.0.0.1:80"), a("0.0.0.0:443"), &mut all));
    // The real probe: loopback is ours, a documentation address is not.
    assert!(host_has("127.0.0.1".parse().unwrap()));
    assert!(!host_has("192.0.2.123".parse().unwrap()));
}

#[test]
fn reasons_are_named_like_the_stats_line() {
    let all = [
        MaskWhy::NotTls,
        MaskWhy::Hello(Reject::Malformed),
        MaskWhy::Hello(Reject::WrongKey),
        MaskWhy::Hello(Reject::WrongSni),
        MaskWhy::Hello(Reject::Stale),
        MaskWhy::Hello(Reject::Replay),
    ];
    for (i, w) in all.iter().enumerate() {
        assert_eq!(w.index(), i);
        if let MaskWhy::Hello(r) = w {
            assert_eq!(w.to_string(), r.to_string());
        }
    }
    assert_eq!(MaskWhy::NotTls.to_string(), "not-tls");
}

#[test]
fn splice_sends_the_prefix_first_and_holds_a_block_only_while_bytes_wait() {
    let pool = crate::buf::BufPool::new(2, 4096, 0);
    let scratch = Scratch::new(4 * 4096, Some(pool.clone()));
    let mut b = Splice::with(b"hello".to_vec(), &scratch);
    assert!(b.buf.is_detached(), "no memory before a read");
    assert_eq!(b.pending(), b"hello");
    b.consume(3);
    assert_eq!(b.pending(), b"lo");
    // Bytes read while the prefix is still going out wait behind it.
    assert!(scratch.attach(&mut b.buf));
    assert_eq!(pool.available(), 1);
    b.buf.space()[..2].copy_from_slice(b"AB");
    b.buf.fill(2);
    b.buf.advance(2);
    b.consume(2);
    assert!(
        b.prefix.is_empty() && b.prefix.capacity() == 0,
        "a sent prefix is freed"
    );
    assert_eq!(b.pending(), b"AB");
    assert!(!b.is_empty());
    b.consume(2);
    assert!(b.is_empty());
    assert!(b.buf.is_detached(), "emptied: the block went back");
    assert_eq!(pool.available(), 2);
}

#[test]
fn splice_without_a_pool_uses_a_fixed_heap_buffer() {
    let scratch = Scratch::new(4 * MASK_BUF, None);
    let mut b = Splice::with(Vec::new(), &scratch);
    assert!(b.is_empty() && b.pending().is_empty());
    assert!(scratch.attach(&mut b.buf));
    assert_eq!(b.buf.space().len(), MASK_BUF);
}
