//! A DNS answer for the test nameservers (tests/dns_resolver.rs, tests/genkey.rs,
//! tests/outbound_proxy.rs), written from RFC 1035 §4.1, independent of src/dns.
//! Test files that do not need the rest of the rig include it by path.

/// Header and question copied from `query`, QR+RD+RA and `rcode`, plus an optional A answer
/// (`ip`, TTL in seconds) whose owner is a pointer to the question name.
pub fn reply(query: &[u8], rcode: u8, a: Option<([u8; 4], u32)>) -> Vec<u8> {
    let mut p = query.to_vec();
    p[2] = 0x81;
    p[3] = 0x80 | rcode;
    p[6..12].fill(0);
    if let Some((ip, ttl)) = a {
        p[7] = 1;
        p.extend_from_slice(&[0xc0, 12, 0, 1, 0, 1]);
        p.extend_from_slice(&ttl.to_be_bytes());
        p.extend_from_slice(&[0, 4]);
        p.extend_from_slice(&ip);
    }
    p
}
