//! The unencrypted MTProto messages the probe and the fake DC need: `req_pq_multi` and `resPQ`.
//! Layout (docs/protocol.md §3.6): auth_key_id = 0 (8 bytes), message_id (u64 LE),
//! message_data_length (u32 LE), then the TL-serialised data (little-endian ints).
//!
//! These are transport payloads: framing (`framing`) and obfs2 are applied by the caller.
//! Parsers never panic and tolerate trailing bytes (padded intermediate padding). No DH, no
//! encrypted messages.

use std::fmt;

/// TL constructor of `req_pq_multi#be7e8ef1 nonce:int128 = ResPQ`.
pub const REQ_PQ_MULTI: u32 = 0xbe7e8ef1;
/// TL constructor of `resPQ#05162463`.
pub const RES_PQ: u32 = 0x05162463;
/// TL constructor of the boxed `Vector t`.
pub const VECTOR: u32 = 0x1cb5c415;

/// `pq` sent by [`res_pq`]: a product of two primes, 8 bytes big-endian.
const FAKE_PQ: u64 = 0x17ED_4894_1A08_F981;
/// Server public key fingerprint sent by [`res_pq`] (arbitrary; nothing checks it in tests).
const FAKE_FINGERPRINT: u64 = 0xc3b4_2b02_6ce8_6b21;

/// Bytes before the data: auth_key_id, message_id, message_data_length.
const HEADER: usize = 20;

fn unencrypted(msg_id: u64, data: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER + data.len());
    out.extend_from_slice(&[0u8; 8]);
    out.extend_from_slice(&msg_id.to_le_bytes());
    out.extend_from_slice(&(data.len() as u32).to_le_bytes());
    out.extend_from_slice(data);
    out
}

/// The data part of an unencrypted message, or why not. Trailing bytes after
/// message_data_length are ignored.
fn data_of(msg: &[u8]) -> Result<&[u8], BadReply> {
    if msg.len() < HEADER {
        return Err(BadReply::Short);
    }
    if msg[..8] != [0u8; 8] {
        return Err(BadReply::NonZeroAuthKey);
    }
    let len = u32::from_le_bytes([msg[16], msg[17], msg[18], msg[19]]);
    let body = &msg[HEADER..];
    // try_from: a u32 length always fits a 32-bit usize, but stay explicit.
    match usize::try_from(len) {
        Ok(n) if n <= body.len() => Ok(&body[..n]),
        _ => Err(BadReply::Short),
    }
}

/// `req_pq_multi` as an unencrypted message: 40 bytes.
pub fn req_pq_multi(nonce: &[u8; 16], msg_id: u64) -> Vec<u8> {
    let mut data = [0u8; 20];
    data[..4].copy_from_slice(&REQ_PQ_MULTI.to_le_bytes());
    data[4..].copy_from_slice(nonce);
    unencrypted(msg_id, &data)
}

/// The nonce of a `req_pq_multi` message, or `None` if `msg` is anything else. Trailing bytes
/// are tolerated.
pub fn parse_req_pq_multi(msg: &[u8]) -> Option<[u8; 16]> {
    let data = data_of(msg).ok()?;
    if data.len() < 20 || data[..4] != REQ_PQ_MULTI.to_le_bytes() {
        return None;
    }
    let mut nonce = [0u8; 16];
    nonce.copy_from_slice(&data[4..20]);
    Some(nonce)
}

/// A well-formed `resPQ` as an unencrypted message: nonce, server_nonce, `pq` as TL bytes
/// (8-byte big-endian product of two primes), and a vector of one key fingerprint.
pub fn res_pq(nonce: &[u8; 16], server_nonce: &[u8; 16], msg_id: u64) -> Vec<u8> {
    let mut data = Vec::with_capacity(64);
    data.extend_from_slice(&RES_PQ.to_le_bytes());
    data.extend_from_slice(nonce);
    data.extend_from_slice(server_nonce);
    // TL bytes: length byte 8, 8 bytes, pad 1 + 8 = 9 up to 12.
    data.push(8);
    data.extend_from_slice(&FAKE_PQ.to_be_bytes());
    data.extend_from_slice(&[0u8; 3]);
    data.extend_from_slice(&VECTOR.to_le_bytes());
    data.extend_from_slice(&1u32.to_le_bytes());
    data.extend_from_slice(&FAKE_FINGERPRINT.to_le_bytes());
    unencrypted(msg_id, &data)
}

/// The parts of a `resPQ` the probe checks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ResPq {
    pub server_nonce: [u8; 16],
    /// `pq` as sent (big-endian bytes).
    pub pq: Vec<u8>,
    pub fingerprints: Vec<u64>,
}

/// Why a reply is not the `resPQ` we asked for.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BadReply {
    /// Shorter than the header, than its message_data_length, or than constructor + nonces.
    Short,
    /// auth_key_id is not 0 (not an unencrypted message).
    NonZeroAuthKey,
    /// The data starts with another TL constructor.
    WrongConstructor(u32),
    /// The echoed nonce is not ours.
    NonceMismatch,
    /// `pq` or the fingerprint vector does not parse within message_data_length.
    Malformed,
}

impl fmt::Display for BadReply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            BadReply::Short => f.write_str("reply too short"),
            BadReply::NonZeroAuthKey => f.write_str("reply is not an unencrypted message"),
            BadReply::WrongConstructor(c) => write!(f, "reply constructor {c:#010x}, not resPQ"),
            BadReply::NonceMismatch => f.write_str("reply nonce does not match"),
            BadReply::Malformed => f.write_str("malformed resPQ"),
        }
    }
}

impl std::error::Error for BadReply {}

/// Little cursor over TL data; every read is bounds-checked.
struct Reader<'a> {
    buf: &'a [u8],
    at: usize,
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        let end = self.at.checked_add(n)?;
        let s = self.buf.get(self.at..end)?;
        self.at = end;
        Some(s)
    }

    fn u32(&mut self) -> Option<u32> {
        self.take(4)
            .map(|b| u32::from_le_bytes([b[0], b[1], b[2], b[3]]))
    }

    fn u64(&mut self) -> Option<u64> {
        let b = self.take(8)?;
        let mut a = [0u8; 8];
        a.copy_from_slice(b);
        Some(u64::from_le_bytes(a))
    }

    /// TL `bytes`: 1-byte length (< 254) or 0xfe + 3-byte LE length, then data, padded to 4.
    fn tl_bytes(&mut self) -> Option<&'a [u8]> {
        let first = *self.take(1)?.first()?;
        let (len, hdr) = match first {
            254 => {
                let b = self.take(3)?;
                (u32::from_le_bytes([b[0], b[1], b[2], 0]) as usize, 4)
            }
            255 => return None,
            n => (usize::from(n), 1),
        };
        let data = self.take(len)?;
        let pad = (4 - (hdr + len) % 4) % 4;
        self.take(pad)?;
        Some(data)
    }
}

/// Parses a `resPQ` reply to our `req_pq_multi` with `nonce`. Trailing bytes are tolerated.
pub fn parse_res_pq(msg: &[u8], nonce: &[u8; 16]) -> Result<ResPq, BadReply> {
    let data = data_of(msg)?;
    let mut r = Reader { buf: data, at: 0 };
    let ctor = r.u32().ok_or(BadReply::Short)?;
    if ctor != RES_PQ {
        return Err(BadReply::WrongConstructor(ctor));
    }
    let echoed = r.take(16).ok_or(BadReply::Short)?;
    if echoed != nonce {
        return Err(BadReply::NonceMismatch);
    }
    let mut server_nonce = [0u8; 16];
    server_nonce.copy_from_slice(r.take(16).ok_or(BadReply::Short)?);
    let pq = r.tl_bytes().ok_or(BadReply::Malformed)?.to_vec();
    if r.u32() != Some(VECTOR) {
        return Err(BadReply::Malformed);
    }
    let count = r.u32().ok_or(BadReply::Malformed)?;
    // Bound the count by the bytes left before allocating.
    let left = data.len() - r.at;
    if usize::try_from(count).map_or(true, |c| c > left / 8) {
        return Err(BadReply::Malformed);
    }
    let mut fingerprints = Vec::with_capacity(count as usize);
    for _ in 0..count {
        fingerprints.push(r.u64().ok_or(BadReply::Malformed)?);
    }
    Ok(ResPq {
        server_nonce,
        pq,
        fingerprints,
    })
}

/// MTProto message id for Unix time `unix_ms` (§3.6): seconds × 2^32 plus the sub-second part
/// as a 32-bit fraction, rounded down to a multiple of 4 (client messages). Callers that send
/// several messages within one millisecond must make ids strictly increasing themselves.
pub fn msg_id(unix_ms: u64) -> u64 {
    let secs = unix_ms / 1000;
    let frac = ((unix_ms % 1000) << 32) / 1000;
    ((secs << 32) | frac) & !3
}

#[cfg(test)]
mod tests {
    use super::*;

    const NONCE: [u8; 16] = [0x11; 16];
    const SNONCE: [u8; 16] = [0x22; 16];

    #[test]
    fn req_pq_multi_layout_and_round_trip() {
        let m = req_pq_multi(&NONCE, 0x0102_0304_0506_0708);
        assert_eq!(m.len(), 40);
        assert_eq!(&m[..8], &[0; 8]);
        assert_eq!(&m[8..16], &[8, 7, 6, 5, 4, 3, 2, 1]);
        assert_eq!(&m[16..20], &[20, 0, 0, 0]);
        assert_eq!(&m[20..24], &[0xf1, 0x8e, 0x7e, 0xbe]);
        assert_eq!(parse_req_pq_multi(&m), Some(NONCE));
        let mut padded = m.clone();
        padded.extend_from_slice(&[0xaa; 15]);
        assert_eq!(parse_req_pq_multi(&padded), Some(NONCE));
        for n in 0..m.len() {
            assert_eq!(parse_req_pq_multi(&m[..n]), None, "prefix {n}");
        }
        let mut wrong = m.clone();
        wrong[20] ^= 1;
        assert_eq!(parse_req_pq_multi(&wrong), None);
        let mut keyed = m;
        keyed[3] = 1;
        assert_eq!(parse_req_pq_multi(&keyed), None);
    }

    #[test]
    fn res_pq_round_trip() {
        let m = res_pq(&NONCE, &SNONCE, msg_id(1_700_000_000_123) | 1);
        assert_eq!(m.len(), 20 + 64);
        let r = parse_res_pq(&m, &NONCE).unwrap();
        assert_eq!(r.server_nonce, SNONCE);
        assert_eq!(r.pq, FAKE_PQ.to_be_bytes().to_vec());
        assert_eq!(r.fingerprints, vec![FAKE_FINGERPRINT]);
        let mut padded = m.clone();
        padded.extend_from_slice(&[0x55; 13]);
        assert_eq!(parse_res_pq(&padded, &NONCE), Ok(r));
    }

    #[test]
    fn fake_pq_is_product_of_two_primes() {
        let is_prime = |n: u64| n > 1 && (2..).take_while(|d| d * d <= n).all(|d| n % d != 0);
        let (p, q) = (1_229_739_323u64, 1_402_015_859u64);
        assert_eq!(p * q, FAKE_PQ);
        assert!(is_prime(p) && is_prime(q));
    }

    #[test]
    fn every_bad_reply() {
        let good = res_pq(&NONCE, &SNONCE, 4);
        assert_eq!(parse_res_pq(&good[..19], &NONCE), Err(BadReply::Short));
        let mut x = good.clone();
        x[7] = 1;
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::NonZeroAuthKey));
        let req = req_pq_multi(&NONCE, 4);
        assert_eq!(
            parse_res_pq(&req, &NONCE),
            Err(BadReply::WrongConstructor(REQ_PQ_MULTI))
        );
        assert_eq!(
            parse_res_pq(&good, &[0x12; 16]),
            Err(BadReply::NonceMismatch)
        );
        // Declared data length beyond the message.
        let mut x = good.clone();
        x[16] = 200;
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Short));
        let mut x = good.clone();
        x[16..20].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Short));
        // Data length covering only constructor + nonce: server_nonce missing.
        let mut x = good.clone();
        x[16] = 20;
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Short));
        // pq with length byte 255 / overrunning.
        let mut x = good.clone();
        x[20 + 36] = 255;
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Malformed));
        let mut x = good.clone();
        x[20 + 36] = 250;
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Malformed));
        // Wrong vector constructor.
        let mut x = good.clone();
        x[20 + 48] ^= 1;
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Malformed));
        // Vector count larger than the bytes left.
        let mut x = good.clone();
        x[20 + 52..20 + 56].copy_from_slice(&u32::MAX.to_le_bytes());
        assert_eq!(parse_res_pq(&x, &NONCE), Err(BadReply::Malformed));
        for e in [
            BadReply::Short,
            BadReply::NonZeroAuthKey,
            BadReply::WrongConstructor(1),
            BadReply::NonceMismatch,
            BadReply::Malformed,
        ] {
            assert!(!e.to_string().is_empty());
        }
        assert!(BadReply::WrongConstructor(RES_PQ)
            .to_string()
            .contains("0x05162463"));
    }

    #[test]
    fn long_tl_bytes_form_parses() {
        // Hand-built resPQ with pq in the 0xfe long form (300 bytes) and two fingerprints.
        let mut data = Vec::new();
        data.extend_from_slice(&RES_PQ.to_le_bytes());
        data.extend_from_slice(&NONCE);
        data.extend_from_slice(&SNONCE);
        data.extend_from_slice(&[254, 0x2c, 0x01, 0x00]);
        data.extend_from_slice(&[7u8; 300]);
        data.extend_from_slice(&VECTOR.to_le_bytes());
        data.extend_from_slice(&2u32.to_le_bytes());
        data.extend_from_slice(&5u64.to_le_bytes());
        data.extend_from_slice(&6u64.to_le_bytes());
        let m = unencrypted(8, &data);
        let r = parse_res_pq(&m, &NONCE).unwrap();
        assert_eq!(r.pq, vec![7u8; 300]);
        assert_eq!(r.fingerprints, vec![5, 6]);
    }

    #[test]
    fn truncation_at_every_length_never_panics() {
        let good = res_pq(&NONCE, &SNONCE, 4);
        for n in 0..good.len() {
            assert!(parse_res_pq(&good[..n], &NONCE).is_err(), "prefix {n}");
            // Also with the declared length fixed up to the truncation.
            if n >= HEADER {
                let mut x = good[..n].to_vec();
                x[16..20].copy_from_slice(&((n - HEADER) as u32).to_le_bytes());
                assert!(parse_res_pq(&x, &NONCE).is_err(), "fixed prefix {n}");
                let _ = parse_req_pq_multi(&x);
            }
        }
        let mut rng = crate::rng::Rng::from_seed([5; 48]);
        let mut buf = [0u8; 96];
        for _ in 0..5000 {
            rng.fill(&mut buf);
            buf[..8].fill(0);
            buf[16..20].copy_from_slice(&(rng.below(90)).to_le_bytes());
            buf[20..24].copy_from_slice(&RES_PQ.to_le_bytes());
            buf[24..40].copy_from_slice(&NONCE);
            let _ = parse_res_pq(&buf, &NONCE);
        }
    }

    #[test]
    fn msg_id_rules() {
        let id = msg_id(1_700_000_000_500);
        assert_eq!(id >> 32, 1_700_000_000);
        assert_eq!(id % 4, 0);
        assert_eq!(id & 0xffff_ffff, ((1u64 << 31) & !3));
        assert!(msg_id(1_700_000_000_501) > id);
        assert_eq!(msg_id(1_700_000_000_000), 1_700_000_000u64 << 32);
        assert!(msg_id(1_700_000_000_999) < msg_id(1_700_000_001_000));
    }
}
