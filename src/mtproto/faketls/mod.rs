//! Fake-TLS (`ee` secrets), sans-IO: the client's first TLS record checked and answered, and the
//! client side of the same handshake. No sockets and no clock reads here: every `now` is a
//! parameter (Unix seconds `wall_s`, the reactor's monotonic `mono_ms`).
//!
//! - `hello`: sniffing the first bytes and strictly parsing one ClientHello record.
//! - `gate`: the whole verdict on one hello (digest against every `ee` key, SNI, timestamp,
//!   replay), over `replay` (bounded cache of accepted client randoms) and `clock` (whether the
//!   wall clock may be trusted, the router-without-RTC rule).
//! - `server_hello`: our answer (ServerHello, CCS, one AppData record), signed.
//! - `client`: a signed ClientHello and the check of a server's answer (the probe applet).
//! - `record`: the record layer after the handshake (unwrapping the client's records in place,
//!   framing ours); `net::faketls_stream` is the `Endpoint` speaking it.
//!
//! Wire facts:
//! docs/protocol.md "Fake-TLS"; docs/protocol.md §2. This module is the only user of
//! `ring` (through [`hmac_sha256`]).

pub mod client;
pub mod clock;
pub mod gate;
pub mod hello;
pub mod record;
pub mod replay;
pub mod server_hello;

/// TLS record header length: content type (1), version (2), payload length (2, big-endian).
pub const RECORD_HEADER: usize = 5;
/// Largest TLS plaintext record payload (RFC 8446 §5.1): 16384 bytes.
pub const MAX_PAYLOAD: usize = 16 * 1024;
/// Largest incoming record payload we accept after the handshake: [`MAX_PAYLOAD`] + 256 (a
/// ciphertext record's expansion allowance, RFC 8446 §5.2), 16640 bytes.
pub const MAX_RECORD_IN: usize = MAX_PAYLOAD + 256;
/// Record content type change_cipher_spec (0x14).
pub const CT_CCS: u8 = 0x14;
/// Record content type alert (0x15).
pub const CT_ALERT: u8 = 0x15;
/// Record content type handshake (0x16).
pub const CT_HANDSHAKE: u8 = 0x16;
/// Record content type application_data (0x17).
pub const CT_APPDATA: u8 = 0x17;
/// The dummy change_cipher_spec record both sides send: `14 03 03 00 01 01`.
pub const CCS_RECORD: [u8; 6] = [CT_CCS, 0x03, 0x03, 0x00, 0x01, 0x01];
/// Offset of the 32-byte random in a ClientHello or ServerHello record (header included):
/// 5 (record header) + 4 (handshake header) + 2 (version).
pub const RANDOM_AT: usize = 11;

/// HMAC-SHA256 (RFC 2104) with `key` over the concatenation of `parts`; 32 bytes. The one user
/// of `ring::hmac`: the fake-TLS digests of docs/protocol.md "Fake-TLS" (docs/protocol.md §2.1, §2.2).
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let key = ring::hmac::Key::new(ring::hmac::HMAC_SHA256, key);
    let mut ctx = ring::hmac::Context::with_key(&key);
    for p in parts {
        ctx.update(p);
    }
    let tag = ctx.sign();
    let mut out = [0u8; 32];
    out.copy_from_slice(tag.as_ref());
    out
}

/// Constant-time equality of two byte strings of the same length (the time depends only on the
/// length); different lengths are unequal at once (lengths are not secret here).
pub fn ct_eq(a: &[u8], b: &[u8]) -> bool {
    if a.len() != b.len() {
        return false;
    }
    let mut acc = 0u8;
    for (x, y) in a.iter().zip(b) {
        acc |= x ^ y;
    }
    core::hint::black_box(acc) == 0
}

/// HMAC over one record with its 32-byte random (at [`RANDOM_AT`]) read as zeros, optionally
/// prefixed by `prefix` (the client random, for a ServerHello). `record.len()` ≥ 43.
pub(crate) fn digest_zeroed(key: &[u8], prefix: &[u8], record: &[u8]) -> [u8; 32] {
    let zeros = [0u8; 32];
    let end = RANDOM_AT + 32;
    hmac_sha256(key, &[prefix, &record[..RANDOM_AT], &zeros, &record[end..]])
}

/// Copies `bytes` into `out` at `*w` and advances `*w` (the caller sized `out`).
pub(crate) fn put(out: &mut [u8], w: &mut usize, bytes: &[u8]) {
    out[*w..*w + bytes.len()].copy_from_slice(bytes);
    *w += bytes.len();
}

#[cfg(test)]
mod tests_answer;
#[cfg(test)]
mod tests_fingerprint;
#[cfg(test)]
mod tests_gate;
#[cfg(test)]
mod tests_hello;

#[cfg(test)]
mod tests {
    use super::*;

    // RFC 4231 test case 2.
    #[test]
    fn hmac_sha256_matches_rfc4231_case_2_in_pieces() {
        let want = "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843";
        let got = hmac_sha256(b"Jefe", &[b"what do ya want ", b"for nothing?"]);
        let hex: String = got.iter().map(|b| format!("{b:02x}")).collect();
        assert_eq!(hex, want);
    }

    #[test]
    fn ct_eq_compares_every_byte() {
        assert!(ct_eq(b"abcd", b"abcd"));
        assert!(!ct_eq(b"abcd", b"abce"));
        assert!(!ct_eq(b"xbcd", b"abcd"));
        assert!(!ct_eq(b"abc", b"abcd"));
    }
}
