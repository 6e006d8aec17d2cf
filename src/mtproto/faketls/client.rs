//! The client side of fake-TLS (docs/protocol.md "Fake-TLS", §4.4, §6 item 9): a
//! signed ClientHello that MTProxy also accepts, and the check of a server's answer. Used by the
//! probe applet now (and an upstream-proxy tier later). Sans-IO: buffers and `wall_s` in.

use std::fmt;

use super::{
    ct_eq, digest_zeroed, put, CT_APPDATA, CT_CCS, CT_HANDSHAKE, MAX_RECORD_IN, RANDOM_AT,
    RECORD_HEADER,
};

/// Longest SNI domain [`client_hello`] writes (a DNS name's limit): 253 bytes.
pub const MAX_DOMAIN: usize = 253;
/// The ClientHello record's payload length: 512, so its first four bytes are `16 03 01 02`
/// (MTProxy requires 512..=767, docs/protocol.md §6 item 9), reached with a padding extension
/// (RFC 7685) as browsers do.
pub const HELLO_PAYLOAD: usize = 512;
/// Length of the record [`client_hello`] writes (`out` must hold it): 517.
pub const CLIENT_HELLO_LEN: usize = RECORD_HEADER + HELLO_PAYLOAD;
/// Most records [`check_server_hello`] reads before the first AppData record is due.
pub const MAX_ANSWER_RECORDS: usize = 20;

/// Cipher suites offered, TLS 1.3 first (MTProxy wants the first to be 13 01..13 03).
const SUITES: [u16; 15] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c,
    0x009d, 0x002f, 0x0035,
];

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

/// The extensions of [`client_hello`] after server_name, up to the key_share extension.
const AFTER_SERVER_NAME: [&[u8]; 12] = [
    &[0x00, 0x17, 0x00, 0x00],       // extended_master_secret
    &[0xff, 0x01, 0x00, 0x01, 0x00], // renegotiation_info
    &[
        0x00, 0x0a, 0x00, 0x08, 0x00, 0x06, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18,
    ], // supported_groups
    &[0x00, 0x0b, 0x00, 0x02, 0x01, 0x00], // ec_point_formats
    &[0x00, 0x23, 0x00, 0x00],       // session_ticket
    &[0x00, 0x0d, 0x00, 0x12, 0x00, 0x10], // signature_algorithms, then its 8 schemes:
    &[0x04, 0x03, 0x08, 0x04, 0x04, 0x01, 0x05, 0x03],
    &[0x08, 0x05, 0x05, 0x01, 0x08, 0x06, 0x06, 0x01],
    &[0x00, 0x10, 0x00, 0x0e, 0x00, 0x0c, 0x02, b'h', b'2'], // ALPN: h2,
    &[0x08, b'h', b't', b't', b'p', b'/', b'1', b'.', b'1'], // http/1.1
    &[0x00, 0x2b, 0x00, 0x05, 0x04, 0x03, 0x04, 0x03, 0x03], // supported_versions
    &[0x00, 0x2d, 0x00, 0x02, 0x01, 0x01],                   // psk_key_exchange_modes
];

/// The key_share extension's head (x25519); its 32 key bytes are random, filled per hello.
const KEY_SHARE_HEAD: [u8; 10] = [0x00, 0x33, 0x00, 0x26, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20];

/// Builds a signed ClientHello record for `key`/`domain` at `wall_s` (Unix seconds) into
/// `out`; returns (length, client random). The record: `16 03 01 02 00`, client_hello, version
/// 03 03, a 32-byte random session id, [`SUITES`] with 13 01 first, null compression, then
/// server_name (`domain`), extended_master_secret, renegotiation_info, supported_groups,
/// ec_point_formats, session_ticket, signature_algorithms, ALPN (h2, http/1.1),
/// supported_versions (03 04, 03 03), psk_key_exchange_modes, key_share (x25519, 32 random
/// bytes) and padding to [`HELLO_PAYLOAD`]. Signed per docs/protocol.md §4.4: with H =
/// HMAC-SHA256(key, record with a zero random), random[0..28) = H[0..28) and random[28..32) =
/// H[28..32) XOR u32 LE(wall_s). Returns (0, zeros) without writing when `out` is shorter than
/// [`CLIENT_HELLO_LEN`] or `domain` is empty or longer than [`MAX_DOMAIN`].
pub fn client_hello(
    out: &mut [u8],
    key: &[u8; 16],
    domain: &str,
    wall_s: u64,
    fill: &mut dyn FnMut(&mut [u8]),
) -> (usize, [u8; 32]) {
    let name = domain.as_bytes();
    if out.len() < CLIENT_HELLO_LEN || name.is_empty() || name.len() > MAX_DOMAIN {
        return (0, [0; 32]);
    }
    let out = &mut out[..CLIENT_HELLO_LEN];
    let mut w = 0;
    let u16b = |v: usize| (v as u16).to_be_bytes();
    put(out, &mut w, &[CT_HANDSHAKE, 0x03, 0x01]);
    put(out, &mut w, &u16b(HELLO_PAYLOAD));
    put(out, &mut w, &[0x01, 0x00]);
    put(out, &mut w, &u16b(HELLO_PAYLOAD - 4));
    put(out, &mut w, &[0x03, 0x03]);
    put(out, &mut w, &[0u8; 32]);
    put(out, &mut w, &[32]);
    let sid_at = w;
    put(out, &mut w, &[0u8; 32]);
    put(out, &mut w, &u16b(SUITES.len() * 2));
    for s in SUITES {
        put(out, &mut w, &s.to_be_bytes());
    }
    put(out, &mut w, &[0x01, 0x00]);
    let ext_len_at = w;
    put(out, &mut w, &[0, 0]);
    // server_name: list (2), type 0, name length (2), name
    put(out, &mut w, &[0x00, 0x00]);
    put(out, &mut w, &u16b(name.len() + 5));
    put(out, &mut w, &u16b(name.len() + 3));
    put(out, &mut w, &[0x00]);
    put(out, &mut w, &u16b(name.len()));
    put(out, &mut w, name);
    for part in AFTER_SERVER_NAME {
        put(out, &mut w, part);
    }
    put(out, &mut w, &KEY_SHARE_HEAD);
    let share_at = w;
    put(out, &mut w, &[0u8; 32]);
    // padding (RFC 7685) to the fixed payload length: everything before it is 249 bytes plus
    // the name, so a 253-byte name still leaves 517 − 502 − 4 = 11 bytes (client_hello_domain_bounds)
    let pad = CLIENT_HELLO_LEN - w - 4;
    put(out, &mut w, &[0x00, 0x15]);
    put(out, &mut w, &u16b(pad));
    w += pad;
    debug_assert_eq!(w, CLIENT_HELLO_LEN);
    let ext_len = w - ext_len_at - 2;
    out[ext_len_at..ext_len_at + 2].copy_from_slice(&u16b(ext_len));
    out[w - pad..w].fill(0);
    fill(&mut out[sid_at..sid_at + 32]);
    fill(&mut out[share_at..share_at + 32]);
    let h = digest_zeroed(key, &[], out);
    let mut random = h;
    let ts = (wall_s as u32).to_le_bytes();
    for j in 0..4 {
        random[28 + j] ^= ts[j];
    }
    out[RANDOM_AT..RANDOM_AT + 32].copy_from_slice(&random);
    (w, random)
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
