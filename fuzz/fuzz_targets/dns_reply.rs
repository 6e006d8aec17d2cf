//! The DNS reply (src/dns/wire.rs): what a nameserver (or anyone who can reach our UDP port)
//! sends back.
//!
//! Input: a whole UDP payload, given to `parse_response`. Invariants on an accepted reply: the
//! question name is lowercase, dot-joined, ≤ 253 bytes, without empty labels; addresses only of
//! the asked type (A → IPv4, AAAA → IPv6, nothing else); no addresses → TTL 0; TTL never has its
//! top bit. Then a round trip with the input as a name: a query that `encode_query` accepts,
//! turned into a reply with one A record for a compressed pointer to the question, parses back to
//! the same id, name, address and TTL.
#![no_main]

use std::net::IpAddr;

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::dns::wire::{encode_query, parse_response};

fuzz_target!(|pkt: &[u8]| {
    if let Ok(r) = parse_response(pkt) {
        assert!(r.qname.len() <= 253, "name of {} bytes", r.qname.len());
        assert!(!r.qname.bytes().any(|b| b.is_ascii_uppercase()));
        assert!(r.qname.is_empty() || r.qname.split('.').all(|l| !l.is_empty()));
        assert!(r.rcode < 16);
        for a in &r.addrs {
            match (r.qtype, a) {
                (1, IpAddr::V4(_)) | (28, IpAddr::V6(_)) => {}
                _ => panic!("address {a} for qtype {}", r.qtype),
            }
        }
        if r.addrs.is_empty() {
            assert_eq!(r.ttl, 0);
        }
        assert!(r.ttl & 0x8000_0000 == 0);
    }

    // Round trip: the input's first bytes as id, TTL and address, the rest as a name.
    let [i0, i1, t0, t1, t2, t3, a0, a1, a2, a3, name @ ..] = pkt else {
        return;
    };
    let Ok(name) = std::str::from_utf8(name) else {
        return;
    };
    let id = u16::from_be_bytes([*i0, *i1]);
    let Ok(mut q) = encode_query(id, name, 1) else {
        return;
    };
    q[2] |= 0x80; // QR: a response
    q[7] = 1; // ANCOUNT = 1
    q.extend_from_slice(&[
        0xc0, 0x0c, 0, 1, 0, 1, *t0, *t1, *t2, *t3, 0, 4, *a0, *a1, *a2, *a3,
    ]);
    let r = parse_response(&q).expect("a well-formed reply parses");
    assert_eq!(r.id, id);
    assert_eq!(r.qname, name.to_ascii_lowercase());
    assert_eq!(r.qtype, 1);
    assert_eq!(r.addrs, vec![IpAddr::from([*a0, *a1, *a2, *a3])]);
    let ttl = u32::from_be_bytes([*t0, *t1, *t2, *t3]);
    assert_eq!(r.ttl, if ttl & 0x8000_0000 != 0 { 0 } else { ttl });
});
