//! What a client's first bytes say before any key is tried: an HTTP request or a TLS record,
//! which no Telegram client sends as the start of an obfuscated2 init (docs/protocol.md §1.7,
//! §1.9). Shared by the proxy handshake (`conn::handshake`, to reject early with the right
//! reason) and the direct-transport classifier (`mtproto::direct`, to relay web traffic to a
//! Telegram address untouched).
//!
//! Pure predicates over a prefix; no state, no keys.

/// Prefixes a Telegram client never sends as the start of an init (docs/protocol.md §3.1), so they
/// can be rejected before 64 bytes arrive.
pub const HTTP_PREFIXES: [&[u8; 4]; 4] = [b"GET ", b"POST", b"HEAD", b"OPTI"];

/// Longer starts of HTTP that a client is not barred from sending as the first bytes of an init
/// (an `HTTP CONNECT` and the HTTP/2 connection preface, RFC 9113 §3.4): rejected once this many
/// bytes match, a chance of 2^-64 or less for a random init, instead of holding a slot until the
/// handshake deadline.
pub const HTTP_STARTS: [&[u8]; 2] = [b"CONNECT ", b"PRI * HTTP/2.0\r\n"];

/// HTTP methods (RFC 9110 §9) a client is not barred from sending as the start of an init: they
/// only count once a whole init (64 bytes) failed to open.
pub const HTTP_OTHER_METHODS: [&[u8]; 4] = [b"PUT ", b"DELETE ", b"PATCH ", b"TRACE "];

/// True if `prefix` (the first bytes a client sent) is already known to be HTTP: one of
/// [`HTTP_PREFIXES`] in its first 4 bytes, or a whole [`HTTP_STARTS`] entry.
pub fn is_http(prefix: &[u8]) -> bool {
    (prefix.len() >= 4 && HTTP_PREFIXES.iter().any(|p| &prefix[..4] == *p))
        || HTTP_STARTS.iter().any(|p| prefix.starts_with(p))
}

/// True if `prefix` starts like any HTTP request we know: [`is_http`] or one of
/// [`HTTP_OTHER_METHODS`]. For bytes that already failed to open as an init.
pub fn looks_http(prefix: &[u8]) -> bool {
    is_http(prefix) || HTTP_OTHER_METHODS.iter().any(|p| prefix.starts_with(p))
}

/// The length of a TLS record whose 5-byte header `prefix` starts with (RFC 8446 §5.1: type
/// 0x16 handshake, legacy version `03 00`–`03 04`, u16 BE length), header included; `None` if
/// the first bytes are not such a header, or fewer than 5 bytes are here and the ones that are
/// do not rule it out (see [`could_be_tls_record`]).
pub fn tls_record_len(prefix: &[u8]) -> Option<usize> {
    if prefix.len() < 5 || prefix[0] != 0x16 || prefix[1] != 0x03 || prefix[2] > 0x04 {
        return None;
    }
    Some(5 + usize::from(u16::from_be_bytes([prefix[3], prefix[4]])))
}

/// True while the bytes so far (fewer than 5 are fine) could still be the start of a TLS
/// handshake record header (`16 03 0x`).
pub fn could_be_tls_record(prefix: &[u8]) -> bool {
    let want = [0x16, 0x03];
    let n = prefix.len().min(2);
    prefix[..n] == want[..n] && (prefix.len() < 3 || prefix[2] <= 0x04)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn http_early_and_late() {
        assert!(is_http(b"GET / HTTP/1.1\r\n"));
        assert!(is_http(b"OPTI"));
        assert!(!is_http(b"GE"));
        assert!(is_http(b"CONNECT kws2.web.telegram.org:443 HTTP/1.1\r\n"));
        // Too short to tell from a random init yet.
        assert!(!is_http(b"CONNECT") && !is_http(b"PRI * HTTP/2.0\r"));
        assert!(!is_http(b"PUT /x HTTP/1.1\r\n"));
        assert!(looks_http(b"PUT /x HTTP/1.1\r\n"));
        assert!(looks_http(b"DELETE /x HTTP/1.1\r\n"));
        assert!(!looks_http(&[0u8; 64]));
    }

    #[test]
    fn tls_record_header() {
        assert_eq!(tls_record_len(&[0x16, 0x03, 0x01, 0x02, 0x00]), Some(517));
        assert_eq!(tls_record_len(&[0x16, 0x03, 0x03, 0x00, 0x30, 9]), Some(53));
        assert_eq!(tls_record_len(&[0x16, 0x03, 0x05, 0x00, 0x30]), None);
        assert_eq!(tls_record_len(&[0x17, 0x03, 0x03, 0x00, 0x30]), None);
        assert_eq!(tls_record_len(&[0x16, 0x03, 0x01, 0x02]), None);
        assert!(could_be_tls_record(&[]));
        assert!(could_be_tls_record(&[0x16]));
        assert!(could_be_tls_record(&[0x16, 0x03, 0x01]));
        assert!(!could_be_tls_record(&[0x16, 0x04]));
        assert!(!could_be_tls_record(&[0x16, 0x03, 0x07]));
        assert!(!could_be_tls_record(&[0xef]));
    }
}
