//! Our answer to an accepted ClientHello (docs/protocol.md "Fake-TLS", §2.2): a
//! ServerHello record, the dummy change_cipher_spec record and one application_data record of
//! random bytes standing in for the encrypted certificate flight, signed by the HMAC rule.
//! Sans-IO: writes into a caller's buffer; randomness is a parameter.

use super::gate::Accept;
use super::{digest_zeroed, put, CCS_RECORD, CT_APPDATA, CT_HANDSHAKE, RANDOM_AT, RECORD_HEADER};

/// Shortest dummy AppData payload: 2048 bytes.
pub const APPDATA_MIN: usize = 2048;
/// Longest dummy AppData payload: 4096 bytes.
///
/// Uniform in [`APPDATA_MIN`]..=`APPDATA_MAX`: a real TLS 1.3 server's encrypted
/// EncryptedExtensions + Certificate + CertificateVerify + Finished flight is one to a few KB
/// depending on its chain (one RSA-2048 leaf and intermediate ≈ 2.5–3.5 KB, ECDSA chains less,
/// longer chains more). A narrow fixed range (1900–2100 in other proxies, docs/protocol.md §6 item
/// 8) is a fingerprint; a wide one covers the common chains. It fits one record (≤ 16384).
pub const APPDATA_MAX: usize = 4096;

/// ServerHello record without the session id: header 5, handshake header 4, version 2,
/// random 32, session id length 1, cipher 2, compression 1, extensions length 2, key_share
/// (4 + 2 + 2 + 32) 40, supported_versions (4 + 2) 6.
const HELLO_FIXED: usize = 5 + 4 + 2 + 32 + 1 + 2 + 1 + 2 + 40 + 6;

/// Largest answer [`server_hello`] writes: ServerHello with a 32-byte session id (127), CCS (6),
/// AppData header (5) and [`APPDATA_MAX`] bytes: 4234.
pub const MAX_SERVER_HELLO: usize =
    HELLO_FIXED + 32 + CCS_RECORD.len() + RECORD_HEADER + APPDATA_MAX;

/// Writes the ServerHello record (version 03 03, the client's session id echoed with its own
/// length, `acc.cipher`, null compression, extensions key_share (x25519, 32 random bytes) and
/// supported_versions (03 04)), the CCS record `14 03 03 00 01 01` and one AppData record of
/// [`APPDATA_MIN`]..=[`APPDATA_MAX`] random bytes into `out`, then sets the server random to
/// HMAC-SHA256(key, client random ‖ all those bytes with the server random zeroed). Returns
/// the length written; 0 (nothing written) if `out` is shorter than [`MAX_SERVER_HELLO`] or
/// the session id length is over 32. `fill`: randomness (key share, dummy length and bytes).
pub fn server_hello(out: &mut [u8], acc: &Accept, fill: &mut dyn FnMut(&mut [u8])) -> usize {
    let sid_len = acc.session_id_len as usize;
    if out.len() < MAX_SERVER_HELLO || sid_len > 32 {
        return 0;
    }
    let hello_len = HELLO_FIXED + sid_len;
    let payload = (hello_len - RECORD_HEADER) as u16;
    let body = payload - 4;
    let mut w = 0;
    put(out, &mut w, &[CT_HANDSHAKE, 0x03, 0x03]);
    put(out, &mut w, &payload.to_be_bytes());
    put(out, &mut w, &[0x02, 0x00]);
    put(out, &mut w, &body.to_be_bytes());
    put(out, &mut w, &[0x03, 0x03]);
    put(out, &mut w, &[0u8; 32]);
    put(out, &mut w, &[acc.session_id_len]);
    put(out, &mut w, &acc.session_id[..sid_len]);
    put(out, &mut w, &acc.cipher.to_be_bytes());
    put(out, &mut w, &[0x00]);
    put(out, &mut w, &[0x00, 0x2e]);
    // key_share: type 0x0033, length 36, group x25519 (0x001d), key length 32, key
    put(
        out,
        &mut w,
        &[0x00, 0x33, 0x00, 0x24, 0x00, 0x1d, 0x00, 0x20],
    );
    let key_at = w;
    put(out, &mut w, &[0u8; 32]);
    // supported_versions: type 0x002b, length 2, TLS 1.3
    put(out, &mut w, &[0x00, 0x2b, 0x00, 0x02, 0x03, 0x04]);
    debug_assert_eq!(w, hello_len);
    fill(&mut out[key_at..key_at + 32]);
    put(out, &mut w, &CCS_RECORD);
    let mut r = [0u8; 4];
    fill(&mut r);
    let n = APPDATA_MIN
        + uniform(
            u32::from_le_bytes(r),
            (APPDATA_MAX - APPDATA_MIN + 1) as u32,
        );
    put(out, &mut w, &[CT_APPDATA, 0x03, 0x03]);
    put(out, &mut w, &(n as u16).to_be_bytes());
    fill(&mut out[w..w + n]);
    w += n;
    let h = digest_zeroed(&acc.key, &acc.random, &out[..w]);
    out[RANDOM_AT..RANDOM_AT + 32].copy_from_slice(&h);
    w
}

/// Maps a uniform u32 to `[0, n)` by multiply-and-shift (bias below n / 2^32, under 10^-6 for
/// our ranges: no observable skew in a length).
fn uniform(x: u32, n: u32) -> usize {
    ((u64::from(x) * u64::from(n)) >> 32) as usize
}
