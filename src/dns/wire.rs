//! DNS message codec (RFC 1035 §4): one-question queries out, responses in. Pure bytes.
//!
//! Owns the wire format only: building a recursive query for one A (or AAAA) question, and
//! parsing a response into its id, RCODE, TC bit, question and the address set at the end of
//! the answer's CNAME chain. It must not touch sockets, clocks or the cache (`dns::cache` decides
//! what an outcome means). Every read is bounds-checked; malformed input is an `Err`, never a
//! panic: compression pointers must point strictly backwards and are capped in number, names
//! are capped at 255 wire bytes, record counts beyond the packet are an error.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// RR type A (RFC 1035 §3.2.2).
pub const TYPE_A: u16 = 1;
/// RR type CNAME (RFC 1035 §3.2.2).
pub const TYPE_CNAME: u16 = 5;
/// RR type AAAA (RFC 3596 §2.1).
pub const TYPE_AAAA: u16 = 28;
/// SOA (RFC 1035 §3.3.13): in the authority section of a negative answer it gives the zone's
/// negative TTL (RFC 2308 §5).
pub const TYPE_SOA: u16 = 6;
/// Class IN.
const CLASS_IN: u16 = 1;

/// RCODE values we act on (RFC 1035 §4.1.1).
pub const RCODE_NOERROR: u8 = 0;
pub const RCODE_SERVFAIL: u8 = 2;
pub const RCODE_NXDOMAIN: u8 = 3;

/// Fixed header length in bytes.
const HEADER_LEN: usize = 12;
/// Largest name on the wire, length bytes included (RFC 1035 §2.3.4).
const MAX_NAME_WIRE: usize = 255;
/// Compression pointers followed while reading one name.
const MAX_JUMPS: usize = 32;
/// Answer records examined; a larger ANCOUNT is read only this far.
const MAX_ANSWERS: usize = 64;
/// CNAME links followed inside one response.
const MAX_CNAME_HOPS: usize = 8;

/// Why a packet could not be encoded or parsed.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WireError {
    /// The packet ends inside a header, name, question or record.
    Truncated,
    /// A label length byte uses the reserved 0x40/0x80 forms.
    BadLabel,
    /// A compression pointer points forwards or at itself, or too many pointers in one name.
    BadPointer,
    /// A name longer than 255 wire bytes, or a label longer than 63.
    NameTooLong,
    /// A label holds a dot, a control byte, a space or a non-ASCII byte; or an empty label in
    /// a name being encoded.
    BadName,
    /// QR is 0 (a query), the opcode is not QUERY, or QDCOUNT is not 1.
    NotResponse,
    /// An A/AAAA record with the wrong RDLENGTH, or a CNAME whose name overruns its RDATA.
    BadRecord,
}

impl fmt::Display for WireError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let s = match self {
            WireError::Truncated => "truncated message",
            WireError::BadLabel => "reserved label type",
            WireError::BadPointer => "bad compression pointer",
            WireError::NameTooLong => "name too long",
            WireError::BadName => "invalid name",
            WireError::NotResponse => "not a one-question response",
            WireError::BadRecord => "malformed record",
        };
        f.write_str(s)
    }
}

/// A parsed response.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Response {
    /// Transaction id from the header.
    pub id: u16,
    /// RCODE (low 4 bits of the flags).
    pub rcode: u8,
    /// TC bit: the server truncated the answer (it would need TCP).
    pub truncated: bool,
    /// Question name, lowercase ASCII, labels joined by `.`, no trailing dot.
    pub qname: String,
    /// Question type.
    pub qtype: u16,
    /// Addresses of type `qtype` owned by the end of the CNAME chain that starts at `qname`
    /// (in answer order; empty for NODATA or a chain that leaves the response).
    pub addrs: Vec<IpAddr>,
    /// Smallest TTL (seconds) along the chain and over `addrs`; 0 when `addrs` is empty. TTLs
    /// with the top bit set count as 0 (RFC 2181 §8).
    pub ttl: u32,
    /// The zone's negative TTL (seconds) when the authority section carries its SOA: the lesser
    /// of the SOA record's TTL and its MINIMUM field (RFC 2308 §5). `None` without one (or when
    /// the answer section was longer than we read).
    pub negative_ttl: Option<u32>,
}

/// The name of an error RCODE (RFC 1035 §4.1.1), for reasons: `FORMERR`, `SERVFAIL`,
/// `NOTIMP`, `REFUSED`, else `error`.
pub fn rcode_name(rcode: u8) -> &'static str {
    match rcode {
        1 => "FORMERR",
        RCODE_SERVFAIL => "SERVFAIL",
        4 => "NOTIMP",
        5 => "REFUSED",
        _ => "error",
    }
}

/// Builds a standard query (opcode QUERY, RD set) with one question `name`/`qtype`/IN.
///
/// `name` is dot-separated ASCII without a trailing dot (see `dns::conf::canonical_name`).
/// Errors: [`WireError::BadName`] for an empty label or a byte outside `0x21..=0x7e` (or a dot
/// inside a label, which cannot occur here), [`WireError::NameTooLong`].
pub fn encode_query(id: u16, name: &str, qtype: u16) -> Result<Vec<u8>, WireError> {
    let mut out = Vec::with_capacity(HEADER_LEN + name.len() + 6);
    out.extend_from_slice(&id.to_be_bytes());
    out.extend_from_slice(&0x0100u16.to_be_bytes()); // RD
    out.extend_from_slice(&1u16.to_be_bytes()); // QDCOUNT
    out.extend_from_slice(&[0, 0, 0, 0, 0, 0]); // AN, NS, AR counts
    let start = out.len();
    for label in name.split('.') {
        if label.is_empty() || !label.bytes().all(is_label_byte) {
            return Err(WireError::BadName);
        }
        if label.len() > 63 {
            return Err(WireError::NameTooLong);
        }
        out.push(label.len() as u8);
        out.extend_from_slice(label.as_bytes());
    }
    out.push(0);
    if out.len() - start > MAX_NAME_WIRE {
        return Err(WireError::NameTooLong);
    }
    out.extend_from_slice(&qtype.to_be_bytes());
    out.extend_from_slice(&CLASS_IN.to_be_bytes());
    Ok(out)
}

/// Parses a response to a one-question query. See [`Response`] for the result's shape and
/// [`WireError`] for rejections. Trailing bytes after the answer section (authority,
/// additional, or junk) are not examined.
pub fn parse_response(pkt: &[u8]) -> Result<Response, WireError> {
    if pkt.len() < HEADER_LEN {
        return Err(WireError::Truncated);
    }
    let id = be16(pkt, 0)?;
    let flags = be16(pkt, 2)?;
    let qdcount = be16(pkt, 4)?;
    let ancount = be16(pkt, 6)? as usize;
    let is_response = flags & 0x8000 != 0;
    let opcode = (flags >> 11) & 0xf;
    if !is_response || opcode != 0 || qdcount != 1 {
        return Err(WireError::NotResponse);
    }
    let mut qname = String::new();
    let mut pos = read_name(pkt, HEADER_LEN, &mut qname)?;
    let qtype = be16(pkt, pos)?;
    be16(pkt, pos + 2)?; // QCLASS: present, value not checked
    pos += 4;

    let mut records: Vec<Record> = Vec::new();
    for _ in 0..ancount.min(MAX_ANSWERS) {
        let rr = read_rr(pkt, pos)?;
        pos = rr.end;
        let RrHeader {
            owner,
            rtype,
            class,
            ttl,
            rdata_at,
            end,
        } = rr;
        let rdata = &pkt[rdata_at..end];
        if class != CLASS_IN {
            continue;
        }
        let data = match rtype {
            TYPE_A => {
                let b: [u8; 4] = rdata.try_into().map_err(|_| WireError::BadRecord)?;
                Data::Addr(IpAddr::V4(Ipv4Addr::from(b)))
            }
            TYPE_AAAA => {
                let b: [u8; 16] = rdata.try_into().map_err(|_| WireError::BadRecord)?;
                Data::Addr(IpAddr::V6(Ipv6Addr::from(b)))
            }
            TYPE_CNAME => {
                let mut target = String::new();
                // The name may be compressed, but its own bytes must stay inside the RDATA.
                if read_name(pkt, rdata_at, &mut target)? > end {
                    return Err(WireError::BadRecord);
                }
                Data::Cname(target)
            }
            _ => continue,
        };
        records.push(Record {
            owner,
            rtype,
            ttl,
            data,
        });
    }

    let (addrs, ttl) = follow_chain(&records, &qname, qtype);
    let nscount = be16(pkt, 8)? as usize;
    let negative_ttl = if ancount <= MAX_ANSWERS {
        // A malformed authority section spoils no answer: no zone TTL then.
        soa_negative_ttl(pkt, pos, nscount).unwrap_or(None)
    } else {
        None
    };
    Ok(Response {
        id,
        rcode: (flags & 0xf) as u8,
        truncated: flags & 0x0200 != 0,
        qname,
        qtype,
        addrs,
        ttl,
        negative_ttl,
    })
}

/// The negative TTL an SOA in the authority section (its `nscount` records from `pos`) gives:
/// min(TTL, MINIMUM) of the first SOA of class IN (RFC 2308 §5); its RDATA is MNAME, RNAME,
/// then SERIAL, REFRESH, RETRY, EXPIRE, MINIMUM (RFC 1035 §3.3.13).
fn soa_negative_ttl(pkt: &[u8], mut pos: usize, nscount: usize) -> Result<Option<u32>, WireError> {
    for _ in 0..nscount.min(MAX_ANSWERS) {
        let rr = read_rr(pkt, pos)?;
        pos = rr.end;
        if rr.rtype != TYPE_SOA || rr.class != CLASS_IN {
            continue;
        }
        let (mut mname, mut rname) = (String::new(), String::new());
        let at = read_name(pkt, rr.rdata_at, &mut mname)?;
        let at = read_name(pkt, at, &mut rname)?;
        if at + 20 > rr.end {
            return Err(WireError::BadRecord);
        }
        let minimum = u32::from_be_bytes(take::<4>(pkt, at + 16)?);
        return Ok(Some(rr.ttl.min(minimum)));
    }
    Ok(None)
}

/// A resource record's fixed part (RFC 1035 §4.1.3), read by [`read_rr`].
struct RrHeader {
    owner: String,
    rtype: u16,
    class: u16,
    /// Seconds; a TTL with the top bit set counts as 0 (RFC 2181 §8).
    ttl: u32,
    /// Where its RDATA starts.
    rdata_at: usize,
    /// Where its RDATA ends: the next record's start.
    end: usize,
}

/// Reads the record starting at `pos`: owner, type, class, TTL and the RDATA's bounds, which
/// must lie inside `pkt` ([`WireError::Truncated`] otherwise).
fn read_rr(pkt: &[u8], pos: usize) -> Result<RrHeader, WireError> {
    let mut owner = String::new();
    let pos = read_name(pkt, pos, &mut owner)?;
    let rtype = be16(pkt, pos)?;
    let class = be16(pkt, pos + 2)?;
    let raw_ttl = u32::from_be_bytes(take::<4>(pkt, pos + 4)?);
    let rdlen = be16(pkt, pos + 8)? as usize;
    let rdata_at = pos + 10;
    let end = rdata_at + rdlen;
    pkt.get(rdata_at..end).ok_or(WireError::Truncated)?;
    let ttl = if raw_ttl & 0x8000_0000 != 0 {
        0
    } else {
        raw_ttl
    };
    Ok(RrHeader {
        owner,
        rtype,
        class,
        ttl,
        rdata_at,
        end,
    })
}

/// One answer record we care about.
struct Record {
    owner: String,
    rtype: u16,
    ttl: u32,
    data: Data,
}

enum Data {
    Addr(IpAddr),
    Cname(String),
}

/// Follows CNAMEs from `qname` (at most [`MAX_CNAME_HOPS`]) and collects the `qtype` addresses
/// of the final owner, with the smallest TTL seen.
fn follow_chain(records: &[Record], qname: &str, qtype: u16) -> (Vec<IpAddr>, u32) {
    let mut target = qname;
    let mut ttl = u32::MAX;
    for _ in 0..=MAX_CNAME_HOPS {
        let mut addrs = Vec::new();
        let mut addr_ttl = ttl;
        for r in records
            .iter()
            .filter(|r| r.owner == target && r.rtype == qtype)
        {
            if let Data::Addr(ip) = r.data {
                addrs.push(ip);
                addr_ttl = addr_ttl.min(r.ttl);
            }
        }
        if !addrs.is_empty() {
            return (addrs, addr_ttl);
        }
        let next = records.iter().find_map(|r| match &r.data {
            Data::Cname(c) if r.owner == target => Some((c.as_str(), r.ttl)),
            _ => None,
        });
        match next {
            Some((c, t)) => {
                target = c;
                ttl = ttl.min(t);
            }
            None => break,
        }
    }
    (Vec::new(), 0)
}

/// Reads a possibly compressed name starting at `pos` into `out` (lowercase, dot-joined, no
/// trailing dot; the root name is ""). Returns the offset just after the name's bytes at `pos`
/// (after the first pointer if the name is compressed).
fn read_name(pkt: &[u8], mut pos: usize, out: &mut String) -> Result<usize, WireError> {
    out.clear();
    let mut end: Option<usize> = None;
    let mut jumps = 0;
    let mut wire_len = 1; // the terminating zero byte
    loop {
        let b = *pkt.get(pos).ok_or(WireError::Truncated)?;
        match b & 0xc0 {
            0x00 if b == 0 => return Ok(end.unwrap_or(pos + 1)),
            0x00 => {
                let n = b as usize;
                wire_len += n + 1;
                if wire_len > MAX_NAME_WIRE {
                    return Err(WireError::NameTooLong);
                }
                let label = pkt.get(pos + 1..pos + 1 + n).ok_or(WireError::Truncated)?;
                if !label.iter().copied().all(is_label_byte) {
                    return Err(WireError::BadName);
                }
                if !out.is_empty() {
                    out.push('.');
                }
                out.extend(label.iter().map(|c| char::from(c.to_ascii_lowercase())));
                pos += 1 + n;
            }
            0xc0 => {
                let lo = *pkt.get(pos + 1).ok_or(WireError::Truncated)?;
                let target = (usize::from(b & 0x3f) << 8) | usize::from(lo);
                // Strictly backwards plus a jump cap: no loop can run forever; the name length
                // cap above bounds the labels read between jumps.
                jumps += 1;
                if target >= pos || jumps > MAX_JUMPS {
                    return Err(WireError::BadPointer);
                }
                if end.is_none() {
                    end = Some(pos + 2);
                }
                pos = target;
            }
            _ => return Err(WireError::BadLabel),
        }
    }
}

/// Bytes allowed inside a label: printable ASCII except the dot.
fn is_label_byte(c: u8) -> bool {
    (0x21..=0x7e).contains(&c) && c != b'.'
}

fn take<const N: usize>(pkt: &[u8], at: usize) -> Result<[u8; N], WireError> {
    let s = pkt
        .get(at..at.checked_add(N).ok_or(WireError::Truncated)?)
        .ok_or(WireError::Truncated)?;
    s.try_into().map_err(|_| WireError::Truncated)
}

fn be16(pkt: &[u8], at: usize) -> Result<u16, WireError> {
    take::<2>(pkt, at).map(u16::from_be_bytes)
}

#[cfg(test)]
pub(crate) mod tests {
    use super::*;
    use crate::rng::Rng;

    /// Test-only response builder: header with `flags`, the question copied from `query`, then
    /// `answers` as (owner wire bytes, type, ttl, rdata). Owner `[0xc0, 12]` is the question.
    pub(crate) fn response(
        query: &[u8],
        flags: u16,
        answers: &[(&[u8], u16, u32, &[u8])],
    ) -> Vec<u8> {
        let mut p = query.to_vec();
        p[2..4].copy_from_slice(&flags.to_be_bytes());
        p[6..8].copy_from_slice(&(answers.len() as u16).to_be_bytes());
        for (owner, t, ttl, rdata) in answers {
            p.extend_from_slice(owner);
            p.extend_from_slice(&t.to_be_bytes());
            p.extend_from_slice(&CLASS_IN.to_be_bytes());
            p.extend_from_slice(&ttl.to_be_bytes());
            p.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            p.extend_from_slice(rdata);
        }
        p
    }

    const QNAME: [u8; 2] = [0xc0, 12];

    fn sample() -> Vec<u8> {
        let q = encode_query(0xbeef, "x.workers.dev", TYPE_A).unwrap();
        response(
            &q,
            0x8180,
            &[
                (&QNAME, TYPE_A, 300, &[104, 16, 1, 2]),
                (&QNAME, TYPE_A, 120, &[104, 16, 1, 3]),
            ],
        )
    }

    #[test]
    fn query_layout() {
        let q = encode_query(0x1234, "ab.c", TYPE_A).unwrap();
        assert_eq!(
            q,
            [0x12, 0x34, 1, 0, 0, 1, 0, 0, 0, 0, 0, 0, 2, b'a', b'b', 1, b'c', 0, 0, 1, 0, 1]
        );
        assert_eq!(encode_query(1, "a..b", TYPE_A), Err(WireError::BadName));
        assert_eq!(encode_query(1, "", TYPE_A), Err(WireError::BadName));
        assert_eq!(encode_query(1, "a b", TYPE_A), Err(WireError::BadName));
        assert_eq!(
            encode_query(1, &"a".repeat(64), TYPE_A),
            Err(WireError::NameTooLong)
        );
        let long = vec!["a".repeat(63); 4].join(".");
        assert_eq!(encode_query(1, &long, TYPE_A), Err(WireError::NameTooLong));
        // A query is not a response.
        assert_eq!(parse_response(&q), Err(WireError::NotResponse));
    }

    #[test]
    fn round_trip_with_two_addresses_and_min_ttl() {
        let r = parse_response(&sample()).unwrap();
        assert_eq!(r.id, 0xbeef);
        assert_eq!(
            (r.rcode, r.truncated, r.qtype),
            (RCODE_NOERROR, false, TYPE_A)
        );
        assert_eq!(r.qname, "x.workers.dev");
        assert_eq!(
            r.addrs,
            vec![IpAddr::from([104, 16, 1, 2]), IpAddr::from([104, 16, 1, 3])]
        );
        assert_eq!(r.ttl, 120);
    }

    #[test]
    fn cname_chain_is_followed_and_case_folded() {
        let q = encode_query(7, "X.Workers.Dev", TYPE_A).unwrap();
        // x.workers.dev CNAME edge.cf.net; edge.cf.net A 1.2.3.4 (owner is a pointer into the
        // first record's RDATA).
        let mut p = response(
            &q,
            0x8180,
            &[(&QNAME, TYPE_CNAME, 600, b"\x04EDGE\x02cf\x03net\x00")],
        );
        let cname_at = (p.len() - 13) as u8;
        p[6..8].copy_from_slice(&2u16.to_be_bytes());
        p.extend_from_slice(&[0xc0, cname_at, 0, 1, 0, 1, 0, 0, 0, 60, 0, 4, 1, 2, 3, 4]);
        let r = parse_response(&p).unwrap();
        assert_eq!(r.qname, "x.workers.dev");
        assert_eq!(r.addrs, vec![IpAddr::from([1, 2, 3, 4])]);
        assert_eq!(r.ttl, 60);
        // A chain that leaves the response is NODATA.
        let p = response(&q, 0x8180, &[(&QNAME, TYPE_CNAME, 600, b"\x01y\x00")]);
        let r = parse_response(&p).unwrap();
        assert!(r.addrs.is_empty());
        assert_eq!(r.ttl, 0);
    }

    #[test]
    fn cname_loop_terminates() {
        let q = encode_query(7, "a", TYPE_A).unwrap();
        let p = response(
            &q,
            0x8180,
            &[
                (&QNAME, TYPE_CNAME, 1, b"\x01b\x00"),
                (b"\x01b\x00", TYPE_CNAME, 1, b"\x01a\x00"),
            ],
        );
        assert!(parse_response(&p).unwrap().addrs.is_empty());
    }

    #[test]
    fn the_zones_negative_ttl_comes_from_the_soa_in_the_authority_section() {
        let q = encode_query(7, "kws2-1.example.com", TYPE_A).unwrap();
        let with_soa = |ttl: u32, minimum: u32, cut: usize| {
            let mut p = response(&q, 0x8183, &[]);
            p[8..10].copy_from_slice(&1u16.to_be_bytes());
            p.extend_from_slice(&QNAME);
            p.extend_from_slice(&TYPE_SOA.to_be_bytes());
            p.extend_from_slice(&CLASS_IN.to_be_bytes());
            p.extend_from_slice(&ttl.to_be_bytes());
            let mut rdata = b"\x02ns\x00\x04host\x00".to_vec();
            for v in [1u32, 2, 3, 4, minimum] {
                rdata.extend_from_slice(&v.to_be_bytes());
            }
            rdata.truncate(rdata.len() - cut);
            p.extend_from_slice(&(rdata.len() as u16).to_be_bytes());
            p.extend_from_slice(&rdata);
            p
        };
        // RFC 2308 §5: the lesser of the SOA's TTL and its MINIMUM.
        assert_eq!(
            parse_response(&with_soa(300, 900, 0)).unwrap().negative_ttl,
            Some(300)
        );
        assert_eq!(
            parse_response(&with_soa(3600, 60, 0)).unwrap().negative_ttl,
            Some(60)
        );
        // A short SOA spoils nothing but the zone TTL.
        let r = parse_response(&with_soa(300, 900, 3)).unwrap();
        assert_eq!((r.rcode, r.negative_ttl), (3, None));
        let bare = parse_response(&response(&q, 0x8183, &[])).unwrap();
        assert_eq!(bare.negative_ttl, None);
    }

    #[test]
    fn flags_rcode_tc_and_high_bit_ttl() {
        let q = encode_query(9, "a.b", TYPE_A).unwrap();
        let r = parse_response(&response(&q, 0x8183, &[])).unwrap();
        assert_eq!(r.rcode, RCODE_NXDOMAIN);
        let r = parse_response(&response(&q, 0x8382, &[])).unwrap();
        assert_eq!((r.rcode, r.truncated), (RCODE_SERVFAIL, true));
        let r = parse_response(&response(
            &q,
            0x8180,
            &[(&QNAME, TYPE_A, 0x8000_0001, &[1, 1, 1, 1])],
        ))
        .unwrap();
        assert_eq!(r.ttl, 0);
        // Opcode other than QUERY.
        assert_eq!(
            parse_response(&response(&q, 0x8980, &[])),
            Err(WireError::NotResponse)
        );
    }

    #[test]
    fn hostile_pointers_and_counts() {
        let q = encode_query(9, "a.b", TYPE_A).unwrap();
        // Answer owner pointing at itself, forwards, and a backwards pointer-to-pointer loop.
        let at = q.len() as u8;
        for owner in [[0xc0, at], [0xc0, at + 5], [0x80, 12], [0x40, 12]] {
            let p = response(&q, 0x8180, &[(&owner, TYPE_A, 1, &[1, 1, 1, 1])]);
            assert!(parse_response(&p).is_err(), "{owner:?}");
        }
        // A backwards chain of 40 pointers (hidden in a skipped record's RDATA) exceeds the
        // jump cap; a chain of 8 is fine.
        for (links, ok) in [(40usize, false), (8, true)] {
            let mut chain = vec![0xc0, 12];
            for k in 1..links {
                let prev = (q.len() + 12 + 2 * (k - 1)) as u16;
                chain.extend_from_slice(&(0xc000 | prev).to_be_bytes());
            }
            let last = ((q.len() + 12 + 2 * (links - 1)) as u16 | 0xc000).to_be_bytes();
            let p = response(
                &q,
                0x8180,
                &[(&QNAME, 99, 1, &chain), (&last, TYPE_A, 1, &[1, 1, 1, 1])],
            );
            let r = parse_response(&p);
            assert_eq!(r.is_ok(), ok, "{links}: {r:?}");
            if ok {
                assert_eq!(r.unwrap().addrs, vec![IpAddr::from([1, 1, 1, 1])]);
            } else {
                assert_eq!(r, Err(WireError::BadPointer));
            }
        }
        // ANCOUNT larger than the records present.
        let mut p = sample();
        p[6..8].copy_from_slice(&3u16.to_be_bytes());
        assert_eq!(parse_response(&p), Err(WireError::Truncated));
        // QDCOUNT 0 or 2.
        let mut p = sample();
        p[4..6].copy_from_slice(&2u16.to_be_bytes());
        assert_eq!(parse_response(&p), Err(WireError::NotResponse));
        // A record with RDLENGTH 5.
        let p = response(&q, 0x8180, &[(&QNAME, TYPE_A, 1, &[1, 1, 1, 1, 1])]);
        assert_eq!(parse_response(&p), Err(WireError::BadRecord));
        // A label with a dot inside.
        let p = response(&q, 0x8180, &[(b"\x03a.b\x00", TYPE_A, 1, &[1, 1, 1, 1])]);
        assert_eq!(parse_response(&p), Err(WireError::BadName));
    }

    #[test]
    fn forward_pointer_to_a_valid_name_is_rejected() {
        // RFC 1035 §4.1.4: a pointer refers to a prior occurrence. Here the owner points ahead
        // to a well-formed "a.b" inside a later (skipped) record.
        let q = encode_query(9, "a.b", TYPE_A).unwrap();
        let fwd = (q.len() + 16 + 12) as u8;
        let p = response(
            &q,
            0x8180,
            &[
                (&[0xc0, fwd], TYPE_A, 1, &[1, 1, 1, 1]),
                (&QNAME, 99, 1, b"\x01a\x01b\x00"),
            ],
        );
        assert_eq!(parse_response(&p), Err(WireError::BadPointer));
        // The same record with a backward pointer parses.
        let p = response(
            &q,
            0x8180,
            &[
                (&QNAME, TYPE_A, 1, &[1, 1, 1, 1]),
                (&QNAME, 99, 1, b"\x01a\x01b\x00"),
            ],
        );
        assert_eq!(
            parse_response(&p).unwrap().addrs,
            vec![IpAddr::from([1, 1, 1, 1])]
        );
    }

    #[test]
    fn every_truncation_is_an_error() {
        let full = sample();
        for n in 0..full.len() {
            assert!(parse_response(&full[..n]).is_err(), "prefix {n}");
        }
    }

    #[test]
    fn fuzz_random_and_mutated_never_panic() {
        let mut rng = Rng::from_seed([7; 48]);
        let mut buf = [0u8; 96];
        for _ in 0..20_000 {
            let n = rng.below(buf.len() as u32) as usize;
            rng.fill(&mut buf[..n]);
            if n > 3 {
                buf[2] |= 0x80; // mostly responses, so the parser gets past the header
            }
            let _ = parse_response(&buf[..n]);
        }
        let base = sample();
        let mut parsed = 0;
        for _ in 0..20_000 {
            let mut p = base.clone();
            for _ in 0..1 + rng.below(4) {
                let i = rng.below(p.len() as u32) as usize;
                p[i] = rng.u32() as u8;
            }
            let cut = p.len() - rng.below(4) as usize;
            if let Ok(r) = parse_response(&p[..cut]) {
                parsed += 1;
                assert!(r.addrs.len() <= MAX_ANSWERS);
            }
        }
        // Many single-byte mutations (e.g. in TTLs or addresses) still parse.
        assert!(parsed > 1_000, "{parsed}");
    }
}
