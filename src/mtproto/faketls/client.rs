//! The client side of fake-TLS (docs/protocol.md "Fake-TLS", §2.5, §4.4, §6 item 9): a signed
//! ClientHello shaped as a current stable Chrome's (docs/protocol.md §2.6), and the check of a
//! server's answer. Used by the `mtproto` upstream tier and the probe applet. Sans-IO: buffers,
//! `wall_s` and a random source in.

use std::fmt;

use super::{
    ct_eq, digest_zeroed, hello::is_grease, CT_APPDATA, CT_CCS, CT_HANDSHAKE, MAX_RECORD_IN,
    RANDOM_AT, RECORD_HEADER,
};

/// Longest SNI domain [`client_hello`] writes (a DNS name's limit): 253 bytes.
pub const MAX_DOMAIN: usize = 253;
/// Most bytes [`client_hello`] writes (either [`Shape`], the longest name): 2048. Below our own
/// inbound's 5 + 8192 (`hello::MAX_HELLO_RECORD`) and MTProxy's 4096 read window.
pub const MAX_CLIENT_HELLO: usize = 2048;
/// Most records [`check_server_hello`] reads before the first AppData record is due.
pub const MAX_ANSWER_RECORDS: usize = 20;

/// Which Chrome hello [`client_hello`] writes (docs/protocol.md §2.6).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Shape {
    /// Chrome ≥ 131 as shipped: the X25519MLKEM768 group and its 1216-byte key share first
    /// (about 1.7 KB, no padding extension). The official MTProxy refuses it (its record length
    /// must be 512..=767, docs/protocol.md §2.1); mtg, mtprotoproxy and our own inbound accept it.
    Chrome,
    /// The same Chrome with post-quantum key agreement off (its enterprise policy): no
    /// X25519MLKEM768, so the hello is padded (RFC 7685, BoringSSL's rule) to a 512-byte
    /// payload and stays within 512..=767 for any name: every known server accepts it.
    ChromeClassic,
}

/// Chrome's cipher suites after its GREASE suite, in its order (docs/protocol.md §2.6).
const SUITES: [u16; 15] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c,
    0x009d, 0x002f, 0x0035,
];
/// Chrome's signature_algorithms, in its order.
const SIG_ALGS: [u16; 8] = [
    0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
];
/// The hybrid post-quantum group X25519MLKEM768 (draft-ietf-tls-ecdhe-mlkem).
pub const X25519_MLKEM768: u16 = 0x11ec;
/// Its client key share: an ML-KEM-768 encapsulation key (1184) then an x25519 key (32).
pub const MLKEM_SHARE: usize = 1184 + 32;
/// ML-KEM's modulus q: every packed 12-bit coefficient is below it (FIPS 203 §7.2 check).
pub const MLKEM_Q: u16 = 3329;
/// The application_settings (ALPS) codepoint current Chrome sends.
const ALPS: u16 = 0x44cd;
/// Length of the ECH GREASE extension's random payload (docs/protocol.md §2.6).
const ECH_PAYLOAD: usize = 144;

/// Why a server's answer is not a fake-TLS ServerHello for our key.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientError {
    /// More bytes are needed (not an error yet: read more and call again).
    NeedMore,
    /// The first record is not a handshake record (03 03) carrying a ServerHello.
    NotServerHello,
    /// A record of a type other than handshake, CCS or AppData, or a version other than 03 03.
    BadRecord,
    /// A record longer than `MAX_RECORD_IN`.
    TooLong,
    /// No AppData record within [`MAX_ANSWER_RECORDS`] records.
    TooManyRecords,
    /// The server random is not HMAC(key, client random ‖ answer): not our key (or not a proxy).
    BadDigest,
}

impl fmt::Display for ClientError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ClientError::NeedMore => "answer incomplete",
            ClientError::NotServerHello => "not a tls server hello",
            ClientError::BadRecord => "unexpected tls record",
            ClientError::TooLong => "tls record too long",
            ClientError::TooManyRecords => "no application data record",
            ClientError::BadDigest => "server hello digest mismatch (wrong secret or not a proxy)",
        })
    }
}

impl std::error::Error for ClientError {}

/// A byte source: fills its argument with random bytes.
type Fill<'a> = &'a mut dyn FnMut(&mut [u8]);

/// A random u16 from `fill`.
fn rand_u16(fill: Fill<'_>) -> u16 {
    let mut b = [0u8; 2];
    fill(&mut b);
    u16::from_be_bytes(b)
}

/// Six distinct GREASE values (RFC 8701: 0x?A?A), one per place Chrome puts one: cipher suite,
/// group (also in key_share), first extension, last extension, supported_versions, spare.
fn greases(fill: Fill<'_>) -> [u16; 6] {
    let mut out = [0u16; 6];
    for i in 0..out.len() {
        // a random start, then the next free value (a constant source still ends)
        let mut hi = (rand_u16(fill) as u8 & 0xf0) | 0x0a;
        while out[..i].contains(&u16::from_be_bytes([hi, hi])) {
            hi = hi.wrapping_add(0x10);
        }
        out[i] = u16::from_be_bytes([hi, hi]);
    }
    debug_assert!(out.iter().all(|&g| is_grease(g)));
    out
}

/// A well-formed ML-KEM-768 encapsulation key (FIPS 203: three polynomials of 256 coefficients
/// below [`MLKEM_Q`], 12 bits each packed little-endian two per three bytes, then a 32-byte
/// seed) of random content, into `out` (1184 bytes).
pub fn mlkem768_public_key(out: &mut [u8], fill: Fill<'_>) {
    debug_assert_eq!(out.len(), 1184);
    let mut coeffs = [0u16; 2];
    let mut have = 0;
    let mut w = 0;
    let mut pool = [0u8; 64];
    let mut at = pool.len();
    let mut rejected = 0;
    while w < 1152 {
        if at + 2 > pool.len() {
            fill(&mut pool);
            at = 0;
        }
        let mut v = u16::from_le_bytes([pool[at], pool[at + 1]]) & 0x0fff;
        at += 2;
        if v >= MLKEM_Q {
            rejected += 1;
            if rejected < 4 {
                continue; // rejection sampling: uniform below q
            }
            v %= MLKEM_Q; // a source stuck high still ends
        }
        rejected = 0;
        coeffs[have] = v;
        have += 1;
        if have == 2 {
            let (a, b) = (coeffs[0], coeffs[1]);
            out[w] = a as u8;
            out[w + 1] = ((a >> 8) as u8) | (((b & 0x0f) as u8) << 4);
            out[w + 2] = (b >> 4) as u8;
            w += 3;
            have = 0;
        }
    }
    fill(&mut out[1152..1184]);
}

/// Appends one extension (type, u16 length, body).
fn ext(out: &mut Vec<u8>, ty: u16, body: &[u8]) {
    out.extend_from_slice(&ty.to_be_bytes());
    out.extend_from_slice(&(body.len() as u16).to_be_bytes());
    out.extend_from_slice(body);
}

/// Chrome's extensions in one list, each encoded whole, for `name` (the permuted block of
/// docs/protocol.md §2.6: everything but the two GREASE extensions and padding).
fn chrome_extensions(shape: Shape, name: &[u8], g: &[u16; 6], fill: Fill<'_>) -> Vec<Vec<u8>> {
    let be = |v: u16| v.to_be_bytes();
    let mut list = Vec::with_capacity(16);
    let mut e = Vec::new();
    let mut sni = Vec::new();
    sni.extend_from_slice(&be(name.len() as u16 + 3));
    sni.push(0);
    sni.extend_from_slice(&be(name.len() as u16));
    sni.extend_from_slice(name);
    ext(&mut e, 0x0000, &sni);
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x0017, &[]); // extended_master_secret
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0xff01, &[0]); // renegotiation_info
    list.push(std::mem::take(&mut e));
    let mut groups = vec![g[1]];
    if shape == Shape::Chrome {
        groups.push(X25519_MLKEM768);
    }
    groups.extend_from_slice(&[0x001d, 0x0017, 0x0018]);
    let mut body = be(groups.len() as u16 * 2).to_vec();
    groups.iter().for_each(|v| body.extend_from_slice(&be(*v)));
    ext(&mut e, 0x000a, &body); // supported_groups
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x000b, &[1, 0]); // ec_point_formats: uncompressed
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x0023, &[]); // session_ticket
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x0010, b"\x00\x0c\x02h2\x08http/1.1"); // ALPN
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x0005, &[1, 0, 0, 0, 0]); // status_request: OCSP
    list.push(std::mem::take(&mut e));
    let mut body = be(SIG_ALGS.len() as u16 * 2).to_vec();
    SIG_ALGS
        .iter()
        .for_each(|v| body.extend_from_slice(&be(*v)));
    ext(&mut e, 0x000d, &body); // signature_algorithms
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x0012, &[]); // signed_certificate_timestamp
    list.push(std::mem::take(&mut e));
    // key_share: GREASE (1 byte 0), [X25519MLKEM768], x25519
    let mut shares = Vec::with_capacity(1300);
    shares.extend_from_slice(&be(g[1]));
    shares.extend_from_slice(&[0, 1, 0]);
    if shape == Shape::Chrome {
        shares.extend_from_slice(&be(X25519_MLKEM768));
        shares.extend_from_slice(&be(MLKEM_SHARE as u16));
        let at = shares.len();
        shares.resize(at + MLKEM_SHARE, 0);
        mlkem768_public_key(&mut shares[at..at + 1184], fill);
        fill(&mut shares[at + 1184..at + MLKEM_SHARE]);
    }
    shares.extend_from_slice(&[0x00, 0x1d, 0x00, 0x20]);
    let at = shares.len();
    shares.resize(at + 32, 0);
    fill(&mut shares[at..]);
    let mut body = be(shares.len() as u16).to_vec();
    body.extend_from_slice(&shares);
    ext(&mut e, 0x0033, &body);
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x002d, &[1, 1]); // psk_key_exchange_modes: psk_dhe_ke
    list.push(std::mem::take(&mut e));
    let mut body = vec![6];
    body.extend_from_slice(&be(g[4]));
    body.extend_from_slice(&[3, 4, 3, 3]);
    ext(&mut e, 0x002b, &body); // supported_versions: GREASE, 1.3, 1.2
    list.push(std::mem::take(&mut e));
    ext(&mut e, 0x001b, &[2, 0, 2]); // compress_certificate: brotli
    list.push(std::mem::take(&mut e));
    ext(&mut e, ALPS, b"\x00\x03\x02h2"); // application_settings: h2
    list.push(std::mem::take(&mut e));
    // encrypted_client_hello GREASE: outer, HKDF-SHA256, AES-128-GCM, config id, enc, payload
    let mut body = vec![0, 0, 1, 0, 1, 0, 0, 32];
    body.resize(8 + 32 + 2 + ECH_PAYLOAD, 0);
    fill(&mut body[5..6]);
    fill(&mut body[8..40]);
    body[40..42].copy_from_slice(&be(ECH_PAYLOAD as u16));
    fill(&mut body[42..]);
    ext(&mut e, 0xfe0d, &body);
    list.push(e);
    list
}

/// Shuffles `list` in place (Fisher–Yates) with bytes from `fill`.
fn shuffle<T>(list: &mut [T], fill: Fill<'_>) {
    for i in (1..list.len()).rev() {
        let mut b = [0u8; 4];
        fill(&mut b);
        let j = (u32::from_le_bytes(b) % (i as u32 + 1)) as usize;
        list.swap(i, j);
    }
}

/// Builds a signed ClientHello record for `key`/`domain` at `wall_s` (Unix seconds), shaped as
/// Chrome's ([`Shape`], docs/protocol.md §2.6); returns (record, client random). The record:
/// `16 03 01` + length, client_hello, version 03 03, the random, a 32-byte random session id,
/// a GREASE suite then [`SUITES`], null compression, then a GREASE extension, Chrome's 16
/// extensions in a fresh random order ([`chrome_extensions`]), a 1-byte GREASE extension, and
/// (for [`Shape::ChromeClassic`] under a 512-byte payload) padding to 512. Every random part
/// (GREASE values, order, keys, session id, ECH payload) comes from `fill`. Signed per
/// docs/protocol.md §2.1: with H = HMAC-SHA256(key, record with a zero random),
/// random[0..28) = H[0..28) and random[28..32) = H[28..32) XOR u32 LE(wall_s). `None` when
/// `domain` is empty or longer than [`MAX_DOMAIN`]. At most [`MAX_CLIENT_HELLO`] bytes.
pub fn client_hello(
    shape: Shape,
    key: &[u8; 16],
    domain: &str,
    wall_s: u64,
    fill: Fill<'_>,
) -> Option<(Vec<u8>, [u8; 32])> {
    let name = domain.as_bytes();
    if name.is_empty() || name.len() > MAX_DOMAIN {
        return None;
    }
    let g = greases(fill);
    let mut list = chrome_extensions(shape, name, &g, fill);
    shuffle(&mut list, fill);
    let mut exts = Vec::with_capacity(MAX_CLIENT_HELLO);
    ext(&mut exts, g[2], &[]);
    list.iter().for_each(|e| exts.extend_from_slice(e));
    ext(&mut exts, g[3], &[0]);
    // record header 5 + handshake header 4 + version 2 + random 32 + session id 33 + suites
    // 2 + 32 + compression 2 + extensions length 2
    let fixed = 4 + 2 + 32 + 33 + 2 + 2 * (SUITES.len() + 1) + 2 + 2;
    let payload = fixed + exts.len();
    if shape == Shape::ChromeClassic && payload < 512 {
        // BoringSSL's rule: a hello between 256 and 511 bytes is padded to 512 (RFC 7685)
        let pad = (512 - payload).saturating_sub(4).max(1);
        ext(&mut exts, 0x0015, &vec![0; pad]);
    }
    let payload = fixed + exts.len();
    let be = |v: usize| (v as u16).to_be_bytes();
    let mut out = Vec::with_capacity(RECORD_HEADER + payload);
    out.extend_from_slice(&[CT_HANDSHAKE, 0x03, 0x01]);
    out.extend_from_slice(&be(payload));
    out.extend_from_slice(&[0x01, 0x00]);
    out.extend_from_slice(&be(payload - 4));
    out.extend_from_slice(&[0x03, 0x03]);
    out.extend_from_slice(&[0u8; 32]);
    out.push(32);
    let sid_at = out.len();
    out.extend_from_slice(&[0u8; 32]);
    fill(&mut out[sid_at..sid_at + 32]);
    out.extend_from_slice(&be(2 * (SUITES.len() + 1)));
    out.extend_from_slice(&g[0].to_be_bytes());
    SUITES
        .iter()
        .for_each(|s| out.extend_from_slice(&s.to_be_bytes()));
    out.extend_from_slice(&[0x01, 0x00]);
    out.extend_from_slice(&be(exts.len()));
    out.extend_from_slice(&exts);
    debug_assert_eq!(out.len(), RECORD_HEADER + payload);
    debug_assert!(out.len() <= MAX_CLIENT_HELLO);
    let h = digest_zeroed(key, &[], &out);
    let mut random = h;
    let ts = (wall_s as u32).to_le_bytes();
    for j in 0..4 {
        random[28 + j] ^= ts[j];
    }
    out[RANDOM_AT..RANDOM_AT + 32].copy_from_slice(&random);
    Some((out, random))
}

/// Checks the server's answer: records from the start of `answer` up to and including the
/// first AppData record (the first a handshake record (03 03) holding a ServerHello; then any
/// of handshake, CCS; at most [`MAX_ANSWER_RECORDS`], each ≤ `MAX_RECORD_IN`), and the server
/// random = HMAC-SHA256(key, client_random ‖ those bytes with the server random zeroed)
/// (docs/protocol.md §2.2). Returns the bytes consumed (later bytes are the record layer's);
/// `Err(NeedMore)` while the answer is incomplete.
pub fn check_server_hello(
    answer: &[u8],
    key: &[u8; 16],
    client_random: &[u8; 32],
) -> Result<usize, ClientError> {
    let mut at = 0;
    for n in 0..MAX_ANSWER_RECORDS {
        let Some(h) = answer.get(at..at + RECORD_HEADER) else {
            return Err(ClientError::NeedMore);
        };
        let (ct, len) = (h[0], u16::from_be_bytes([h[3], h[4]]) as usize);
        if h[1..3] != [0x03, 0x03] {
            return Err(if n == 0 {
                ClientError::NotServerHello
            } else {
                ClientError::BadRecord
            });
        }
        if len > MAX_RECORD_IN {
            return Err(ClientError::TooLong);
        }
        if n == 0 && (ct != CT_HANDSHAKE || len < 4 + 2 + 32) {
            return Err(ClientError::NotServerHello);
        }
        if n == 0 && answer.get(RECORD_HEADER) != Some(&0x02) && answer.len() > RECORD_HEADER {
            return Err(ClientError::NotServerHello);
        }
        if !matches!(ct, CT_HANDSHAKE | CT_CCS | CT_APPDATA) {
            return Err(ClientError::BadRecord);
        }
        let end = at + RECORD_HEADER + len;
        if answer.len() < end {
            return Err(ClientError::NeedMore);
        }
        at = end;
        if ct == CT_APPDATA {
            let want = digest_zeroed(key, client_random, &answer[..at]);
            let got = &answer[RANDOM_AT..RANDOM_AT + 32];
            return if ct_eq(&want, got) {
                Ok(at)
            } else {
                Err(ClientError::BadDigest)
            };
        }
    }
    Err(ClientError::TooManyRecords)
}
