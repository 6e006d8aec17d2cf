//! DNS over HTTPS (RFC 8484), sans-IO: the request path of a GET exchange ([`get_path`]: the
//! query's wire form with id 0, base64url without padding, as the `dns` parameter) and the
//! check of an answer body ([`check_reply`]). The HTTPS exchange itself is the reactor's
//! (`reactor::doh`, over the shared HTTPS GET machinery); the cache decisions are `cache`'s.

use super::wire::{self, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A};

/// The media type of a DNS message over HTTPS (RFC 8484 §6): asked for in `Accept` and
/// required of an answer's `Content-Type`.
pub const MEDIA_TYPE: &str = "application/dns-message";

/// Largest answer body taken (bytes): an A answer with a CNAME chain fits many times over.
pub const MAX_BODY: usize = 8 * 1024;

/// The path and query of the GET for `packet` (a query as `wire::encode_query` builds it) on
/// a server whose URL path is `path`: `path?dns=…` (`&dns=…` when `path` has a query). The id
/// is sent as 0 (RFC 8484 §4.1: answers stay cacheable; the exchange pairs them anyway).
pub fn get_path(path: &str, packet: &[u8]) -> String {
    let mut msg = packet.to_vec();
    if msg.len() >= 2 {
        msg[0] = 0;
        msg[1] = 0;
    }
    let b64url = base64url(&msg);
    let sep = if path.contains('?') { '&' } else { '?' };
    format!("{path}{sep}dns={b64url}")
}

/// base64url without padding (RFC 4648 §5), as RFC 8484 §4.1 wants the `dns` parameter.
fn base64url(data: &[u8]) -> String {
    const ABC: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            *chunk.get(1).unwrap_or(&0),
            *chunk.get(2).unwrap_or(&0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        // 1 byte → 2 characters, 2 → 3, 3 → 4: no padding.
        for k in 0..=chunk.len() {
            out.push(ABC[(n >> (18 - 6 * k) & 63) as usize] as char);
        }
    }
    out
}

/// Judges an answer body to an A query for `asked` (canonical name; `None` when the query
/// ended meanwhile and only the server's health is judged): `Ok` with the response when it is
/// a well-formed DNS response to that question with RCODE NOERROR or NXDOMAIN and no TC bit.
/// Errors (one line, for the log and `ctl status`): not a DNS response, another name or type,
/// truncated, another RCODE.
pub fn check_reply(body: &[u8], asked: Option<&str>) -> Result<wire::Response, String> {
    let resp = wire::parse_response(body)
        .map_err(|e| format!("answer is not a DNS response ({} bytes: {e})", body.len()))?;
    if let Some(name) = asked {
        if resp.qname != name {
            return Err(format!(
                "answer is for {:?}, not the name asked ({name:?})",
                resp.qname
            ));
        }
    }
    if resp.qtype != TYPE_A {
        return Err(format!("answer is for type {}, not A", resp.qtype));
    }
    if resp.truncated {
        return Err("answer is truncated (TC)".into());
    }
    match resp.rcode {
        RCODE_NOERROR | RCODE_NXDOMAIN => Ok(resp),
        c => Err(format!("{} (rcode {c})", wire::rcode_name(c))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dns::wire::tests::response;

    fn query(name: &str) -> Vec<u8> {
        wire::encode_query(0x1234, name, TYPE_A).unwrap()
    }

    #[test]
    fn the_get_path_carries_the_query_base64url_with_id_zero() {
        let q = query("kws1.example.com");
        let p = get_path("/dns-query", &q);
        let b64 = p.strip_prefix("/dns-query?dns=").unwrap();
        assert!(!b64.contains(['=', '+', '/']), "{b64}");
        let mut zero = q.clone();
        zero[0] = 0;
        zero[1] = 0;
        assert_eq!(b64, base64url(&zero));
        // RFC 4648 §10 vectors, unpadded, and the two characters base64url changes.
        let v = ["", "Zg", "Zm8", "Zm9v", "Zm9vYg", "Zm9vYmE", "Zm9vYmFy"];
        for (n, want) in v.iter().enumerate() {
            assert_eq!(base64url(&b"foobar"[..n]), *want);
        }
        assert_eq!(base64url(&[0xfb, 0xff]), "-_8");
        assert!(get_path("/q?x=1", &q).starts_with("/q?x=1&dns="));
    }

    #[test]
    fn a_good_answer_an_nxdomain_and_each_bad_one() {
        let q = query("w.example.dev");
        let ok = response(&q, 0x8180, &[(&[0xc0, 12], TYPE_A, 300, &[127, 0, 0, 9])]);
        let r = check_reply(&ok, Some("w.example.dev")).unwrap();
        assert_eq!(r.addrs, vec![std::net::IpAddr::from([127, 0, 0, 9])]);
        assert_eq!(r.ttl, 300);
        let nx = response(&q, 0x8183, &[]);
        assert_eq!(check_reply(&nx, Some("w.example.dev")).unwrap().rcode, 3);

        let other = response(&query("evil.example"), 0x8180, &[]);
        let e = check_reply(&other, Some("w.example.dev")).unwrap_err();
        assert!(
            e.contains("evil.example") && e.contains("w.example.dev"),
            "{e}"
        );
        assert!(check_reply(&other, None).is_ok(), "no name to compare");

        let e = check_reply(b"<html>hello</html>", Some("w.example.dev")).unwrap_err();
        assert!(e.contains("not a DNS response"), "{e}");
        let e = check_reply(&response(&q, 0x8182, &[]), Some("w.example.dev")).unwrap_err();
        assert!(e.contains("SERVFAIL"), "{e}");
        let e = check_reply(&response(&q, 0x8380, &[]), Some("w.example.dev")).unwrap_err();
        assert!(e.contains("truncated"), "{e}");
        let e = check_reply(&q, Some("w.example.dev")).unwrap_err();
        assert!(e.contains("not a DNS response"), "a query echoed back: {e}");
    }
}
