//! Unit tests of the PROXY header parser: valid v1/v2 headers, every truncation, garbage,
//! oversize, LOCAL/UNKNOWN, mapped addresses, and a seeded random/mutation run.

use super::*;
use crate::rng::Rng;

fn v2(cmd: u8, fam: u8, addr: &[u8], tlv: &[u8]) -> Vec<u8> {
    let mut h = V2_SIG.to_vec();
    h.push(0x20 | cmd);
    h.push(fam);
    let len = (addr.len() + tlv.len()) as u16;
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(addr);
    h.extend_from_slice(tlv);
    h
}

fn v2_inet(src: [u8; 4], sport: u16) -> Vec<u8> {
    let mut a = src.to_vec();
    a.extend_from_slice(&[127, 0, 0, 1]);
    a.extend_from_slice(&sport.to_be_bytes());
    a.extend_from_slice(&443u16.to_be_bytes());
    v2(1, 0x11, &a, &[])
}

fn v2_inet6(src: Ipv6Addr, sport: u16) -> Vec<u8> {
    let mut a = src.octets().to_vec();
    a.extend_from_slice(&Ipv6Addr::LOCALHOST.octets());
    a.extend_from_slice(&sport.to_be_bytes());
    a.extend_from_slice(&443u16.to_be_bytes());
    v2(1, 0x21, &a, &[])
}

fn done(buf: &[u8]) -> (Option<SocketAddr>, usize) {
    match parse(buf) {
        Ok(Parsed::Done {
            source, consumed, ..
        }) => (source, consumed),
        other => panic!("{:?}: {other:?}", String::from_utf8_lossy(buf)),
    }
}

/// Every strict prefix of a valid header asks for more, never errs, and never claims more than
/// the header's length.
fn assert_prefixes_need_more(h: &[u8]) {
    for cut in 0..h.len() {
        match parse(&h[..cut]) {
            Ok(Parsed::NeedMore { at_least }) => {
                assert!(
                    at_least > cut && at_least <= h.len(),
                    "cut {cut}: {at_least}"
                )
            }
            other => panic!("cut {cut} of {:?}: {other:?}", String::from_utf8_lossy(h)),
        }
    }
}

#[test]
fn v1_tcp4_tcp6_unknown() {
    let line = b"PROXY TCP4 192.0.2.7 127.0.0.1 51000 443\r\nHELLO";
    let (src, n) = done(line);
    assert_eq!(src, Some("192.0.2.7:51000".parse().unwrap()));
    assert_eq!(&line[n..], b"HELLO");
    let line = b"PROXY TCP6 2001:db8::1 ::1 65535 443\r\n";
    assert_eq!(
        done(line),
        (Some("[2001:db8::1]:65535".parse().unwrap()), line.len())
    );
    assert_eq!(done(b"PROXY UNKNOWN\r\n"), (None, 15));
    let junk = b"PROXY UNKNOWN ffff:: whatever 1 2\r\nX";
    assert_eq!(done(junk), (None, junk.len() - 1));
    // The spec's worst case: UNKNOWN with two full IPv6 addresses is exactly V1_MAX.
    let full = "ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff";
    let line = format!("PROXY UNKNOWN {full} {full} 65535 65535\r\n");
    assert_eq!(line.len(), V1_MAX);
    assert_eq!(done(line.as_bytes()), (None, V1_MAX));
    assert_prefixes_need_more(line.as_bytes());
    let line = format!("PROXY TCP6 {full} {full} 65535 65535\r\n");
    assert_eq!(done(line.as_bytes()).0.unwrap().port(), 65535);
    assert_prefixes_need_more(b"PROXY TCP4 192.0.2.7 127.0.0.1 51000 443\r\n");
    assert_prefixes_need_more(b"PROXY UNKNOWN\r\n");
}

#[test]
fn v1_mapped_address_is_kept_as_sent() {
    let (src, _) = done(b"PROXY TCP6 ::ffff:192.0.2.9 ::1 1000 443\r\n");
    let src = src.unwrap();
    assert_eq!(src.port(), 1000);
    match src.ip() {
        IpAddr::V6(v6) => assert_eq!(v6.to_ipv4_mapped(), Some(Ipv4Addr::new(192, 0, 2, 9))),
        other => panic!("{other}"),
    }
}

#[test]
fn v1_errors() {
    let cases: &[(&[u8], ProxyError)] = &[
        (b"GET / HTTP/1.1\r\n", ProxyError::NotProxy),
        (b"PROXX", ProxyError::NotProxy),
        (b"\x16\x03\x01", ProxyError::NotProxy),
        (
            b"PROXY TCP5 1.2.3.4 1.2.3.4 1 2\r\n",
            ProxyError::V1BadProtocol,
        ),
        (b"PROXY \r\n", ProxyError::V1BadProtocol),
        (b"PROXY TCP4 1.2.3.4 1.2.3.4 1\r\n", ProxyError::V1BadFields),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 3\r\n",
            ProxyError::V1BadFields,
        ),
        (
            b"PROXY TCP4 1.2.3.4  1.2.3.4 1 2\r\n",
            ProxyError::V1BadFields,
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 1 2 \r\n",
            ProxyError::V1BadFields,
        ),
        (b"PROXY TCP4 ::1 1.2.3.4 1 2\r\n", ProxyError::V1BadAddress),
        (b"PROXY TCP6 1.2.3.4 ::1 1 2\r\n", ProxyError::V1BadAddress),
        (
            b"PROXY TCP4 010.0.0.1 1.2.3.4 1 2\r\n",
            ProxyError::V1BadAddress,
        ),
        (
            b"PROXY TCP4 1.2.3.256 1.2.3.4 1 2\r\n",
            ProxyError::V1BadAddress,
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 65536 2\r\n",
            ProxyError::V1BadPort,
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 080 2\r\n",
            ProxyError::V1BadPort,
        ),
        (
            b"PROXY TCP4 1.2.3.4 1.2.3.4 +80 2\r\n",
            ProxyError::V1BadPort,
        ),
        (b"PROXY TCP4 1.2.3.4 1.2.3.4 1 \r\n", ProxyError::V1BadPort),
        (b"PROXY TCP4 1.2.3.4\rX", ProxyError::V1BadByte),
        (b"PROXY TCP4 1.2.3.4\n", ProxyError::V1BadByte),
        (b"PROXY TCP4\t1.2.3.4", ProxyError::V1BadByte),
        (b"PROXY TCP4 \xff", ProxyError::V1BadByte),
    ];
    for (input, want) in cases {
        assert_eq!(
            parse(input),
            Err(*want),
            "{:?}",
            String::from_utf8_lossy(input)
        );
    }
    // No CRLF within 107 bytes.
    let long = format!("PROXY UNKNOWN {}", "a".repeat(200));
    assert_eq!(parse(long.as_bytes()), Err(ProxyError::V1TooLong));
    assert_eq!(
        parse(&long.as_bytes()[..V1_MAX]),
        Err(ProxyError::V1TooLong)
    );
    assert!(matches!(
        parse(&long.as_bytes()[..V1_MAX - 1]),
        Ok(Parsed::NeedMore { .. })
    ));
    // A CR at the last allowed byte whose LF would be the 108th.
    let mut edge = long.as_bytes()[..V1_MAX - 1].to_vec();
    edge.extend_from_slice(b"\r\n");
    assert_eq!(parse(&edge), Err(ProxyError::V1TooLong));
}

#[test]
fn v2_proxy_inet_inet6_with_tlvs() {
    let h = v2_inet([198, 51, 100, 4], 40000);
    assert_eq!(done(&h), (Some("198.51.100.4:40000".parse().unwrap()), 28));
    assert_prefixes_need_more(&h);
    let ip: Ipv6Addr = "2001:db8:1:2::5".parse().unwrap();
    let h = v2_inet6(ip, 7);
    assert_eq!(
        done(&h),
        (Some(SocketAddr::new(IpAddr::V6(ip), 7)), 16 + 36)
    );
    assert_prefixes_need_more(&h);
    // TLVs after the address block are skipped; the client's bytes follow.
    let mut a = vec![10, 0, 0, 1, 127, 0, 0, 1, 0, 80, 1, 187];
    let tlv = [
        0x02, 0x00, 0x0b, b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm',
    ];
    a.truncate(12);
    let mut h = v2(1, 0x11, &a, &tlv);
    let len = h.len();
    h.extend_from_slice(b"client bytes");
    assert_eq!(done(&h), (Some("10.0.0.1:80".parse().unwrap()), len));
    // Mapped IPv6 source is reported as sent.
    let mapped = Ipv4Addr::new(192, 0, 2, 1).to_ipv6_mapped();
    let (src, _) = done(&v2_inet6(mapped, 9));
    assert_eq!(src, Some(SocketAddr::new(IpAddr::V6(mapped), 9)));
}

#[test]
fn v2_local_unspec_unix() {
    // LOCAL: the address block (if any) is ignored.
    assert_eq!(done(&v2(0, 0x00, &[], &[])), (None, 16));
    assert_eq!(done(&v2(0, 0x11, &[1; 12], &[])).0, None);
    assert_eq!(done(&v2(0, 0x11, &[], &[])).0, None);
    // PROXY over UNSPEC or UNIX: no address we route by.
    assert_eq!(done(&v2(1, 0x00, &[], &[])), (None, 16));
    assert_eq!(done(&v2(1, 0x31, &[0; 216], &[])), (None, 16 + 216));
    // Longest accepted length.
    assert_eq!(done(&v2(1, 0x11, &[0; V2_MAX_LEN], &[])).1, MAX_HEADER);
}

#[test]
fn v2_errors() {
    let mut h = v2_inet([1, 2, 3, 4], 5);
    h[12] = 0x11;
    assert_eq!(parse(&h[..13]), Err(ProxyError::V2BadVersion));
    h[12] = 0x22;
    assert_eq!(parse(&h[..13]), Err(ProxyError::V2BadCommand));
    h[12] = 0x21;
    h[13] = 0x41;
    assert_eq!(parse(&h[..14]), Err(ProxyError::V2BadFamily));
    h[13] = 0x13;
    assert_eq!(parse(&h), Err(ProxyError::V2BadFamily));
    h[13] = 0x12; // IPv4 over datagrams
    assert_eq!(parse(&h), Err(ProxyError::V2BadFamily));
    assert_eq!(
        parse(&v2(1, 0x11, &[0; V2_MAX_LEN + 1], &[])),
        Err(ProxyError::V2TooLong)
    );
    // The length field alone decides, before the bytes arrive.
    let mut big = v2(1, 0x11, &[], &[]);
    big[14..16].copy_from_slice(&0xffffu16.to_be_bytes());
    assert_eq!(parse(&big), Err(ProxyError::V2TooLong));
    assert_eq!(
        parse(&v2(1, 0x11, &[0; 11], &[])),
        Err(ProxyError::V2ShortAddress)
    );
    assert_eq!(
        parse(&v2(1, 0x21, &[0; 35], &[])),
        Err(ProxyError::V2ShortAddress)
    );
    // A signature that breaks off is not a header.
    let mut sig = V2_SIG.to_vec();
    sig[5] = b'X';
    assert_eq!(parse(&sig), Err(ProxyError::NotProxy));
}

/// Random inputs and mutations of valid headers: no panic, and every verdict is consistent
/// (Done never claims more than it was given or more than MAX_HEADER; NeedMore asks for more
/// than it was given; a Done input keeps its verdict when bytes are appended).
#[test]
fn fuzz_random_and_mutated_inputs() {
    let mut rng = Rng::from_seed([7; 48]);
    let seeds: Vec<Vec<u8>> = vec![
        b"PROXY TCP4 192.0.2.7 127.0.0.1 51000 443\r\n".to_vec(),
        b"PROXY TCP6 2001:db8::1 ::1 65535 443\r\n".to_vec(),
        b"PROXY UNKNOWN\r\n".to_vec(),
        v2_inet([1, 2, 3, 4], 5),
        v2_inet6(Ipv6Addr::LOCALHOST, 6),
        v2(0, 0, &[], &[]),
    ];
    let mut buf = Vec::new();
    for case in 0..20_000u32 {
        buf.clear();
        if case % 2 == 0 {
            let len = rng.below(MAX_HEADER as u32 + 64) as usize;
            buf.resize(len, 0);
            rng.fill(&mut buf);
            if case % 4 == 0 && !buf.is_empty() {
                // Random bodies behind a real start, so the deep branches run too.
                let start: &[u8] = if case % 8 == 0 { &V2_SIG } else { b"PROXY " };
                let n = start.len().min(buf.len());
                buf[..n].copy_from_slice(&start[..n]);
            }
        } else {
            buf.extend_from_slice(&seeds[case as usize % seeds.len()]);
            for _ in 0..=rng.below(4) {
                let at = rng.below(buf.len() as u32) as usize;
                match rng.below(3) {
                    0 => buf[at] = rng.u32() as u8,
                    1 => buf.truncate(at),
                    _ => buf.insert(at, rng.u32() as u8),
                }
                if buf.is_empty() {
                    break;
                }
            }
        }
        match parse(&buf) {
            Ok(Parsed::Done {
                consumed,
                source,
                dest,
            }) => {
                assert_eq!(source.is_some(), dest.is_some());
                assert!(consumed <= buf.len() && consumed <= MAX_HEADER);
                let mut more = buf.clone();
                more.extend_from_slice(b"xyz");
                assert_eq!(parse(&more), parse(&buf));
            }
            Ok(Parsed::NeedMore { at_least }) => {
                assert!(at_least > buf.len() && at_least <= MAX_HEADER)
            }
            Err(_) => {}
        }
    }
}

/// The destination (the address the client connected to) comes with the source, in v1 and in
/// v2 for both families: the mask loop check compares both ends with our mask connections'.
#[test]
fn the_destination_is_reported_with_the_source() {
    let dest = |buf: &[u8]| match parse(buf) {
        Ok(Parsed::Done { source, dest, .. }) => (source, dest),
        other => panic!("{other:?}"),
    };
    let a = |s: &str| Some(s.parse::<SocketAddr>().unwrap());
    assert_eq!(
        dest(b"PROXY TCP4 127.0.0.1 127.0.0.1 40000 8443\r\n"),
        (a("127.0.0.1:40000"), a("127.0.0.1:8443"))
    );
    assert_eq!(
        dest(b"PROXY TCP6 2001:db8::1 2001:db8::2 7 443\r\n"),
        (a("[2001:db8::1]:7"), a("[2001:db8::2]:443"))
    );
    assert_eq!(
        dest(&v2_inet([10, 0, 0, 1], 40000)),
        (a("10.0.0.1:40000"), a("127.0.0.1:443"))
    );
    let src = Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 9);
    assert_eq!(
        dest(&v2_inet6(src, 40000)),
        (a("[2001:db8::9]:40000"), a("[::1]:443"))
    );
    assert_eq!(dest(b"PROXY UNKNOWN\r\n"), (None, None));
}
