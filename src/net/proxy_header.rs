//! PROXY protocol header (HAProxy's "PROXY protocol" spec, versions 1 and 2; the facts we rely on
//! and our bounds are in docs/protocol.md §1.8): a sans-IO parser
//! of the header a load balancer (nginx `ssl_preread` + `proxy_protocol on`, HAProxy
//! `send-proxy`/`send-proxy-v2`) puts before the client's bytes, so the proxy learns the real
//! client address.
//!
//! Owns only the wire format: feed [`parse`] every byte read so far and it says whether more are
//! needed, what the header carried and how long it was, or what is wrong. No sockets, no clock;
//! the session step that reads the header lives in `conn::proxy_step`. Bounds: a v1 line is at
//! most [`V1_MAX`] bytes with its CRLF; a v2 header at most 16 + [`V2_MAX_LEN`] bytes, so a
//! caller needs at most [`MAX_HEADER`] bytes of buffer and never reads past the header when it
//! peeks that much and then reads exactly `consumed`.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// Longest v1 header line, `PROXY ` to CRLF included (the spec's 107-byte worst case:
/// `PROXY TCP6` + two full IPv6 addresses + two 5-digit ports + spaces + CRLF).
pub const V1_MAX: usize = 107;

/// The 12-byte v2 signature.
pub const V2_SIG: [u8; 12] = *b"\r\n\r\n\0\r\nQUIT\n";

/// Largest v2 length field we accept (address block + TLVs), bytes. An AF_UNIX address block is
/// 216 bytes, the TLVs HAProxy and cloud balancers send (ALPN, authority = the SNI ≤ 255, SSL
/// info, unique id ≤ 128, a VPC endpoint id) add a few hundred more: 1024 holds all of them
/// while keeping the buffer a session needs for the header small and fixed.
pub const V2_MAX_LEN: usize = 1024;

/// Most bytes a header can take: the v2 fixed part (16) plus [`V2_MAX_LEN`] (v1 is shorter).
pub const MAX_HEADER: usize = 16 + V2_MAX_LEN;

/// What the bytes read so far say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Parsed {
    /// A valid prefix of a header: read more. `at_least` is the total length the header is
    /// known to need (the whole v2 header once its fixed part is in; for v1 one more byte).
    NeedMore { at_least: usize },
    /// A complete, valid header of `consumed` bytes; the client's own bytes follow it.
    /// `source`: the client's address; `None` for v2 LOCAL (a health check by the balancer
    /// itself), v1 `UNKNOWN`, or a v2 family we do not route (AF_UNSPEC, AF_UNIX). `dest`: the
    /// address the client connected to (the balancer's), given exactly when `source` is.
    Done {
        source: Option<SocketAddr>,
        dest: Option<SocketAddr>,
        consumed: usize,
    },
}

/// Why the bytes are not a valid PROXY header (Display: a short lowercase phrase for the log).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ProxyError {
    /// Neither `PROXY ` nor the v2 signature.
    NotProxy,
    /// A v1 line longer than [`V1_MAX`] without its CRLF.
    V1TooLong,
    /// A v1 line with a byte that is not printable ASCII, or a CR not followed by LF.
    V1BadByte,
    /// v1 protocol other than `TCP4`, `TCP6`, `UNKNOWN`.
    V1BadProtocol,
    /// v1 fields missing, extra, or separated by anything but one space.
    V1BadFields,
    /// A v1 address that does not parse, or whose family is not the protocol's.
    V1BadAddress,
    /// A v1 port that is not decimal 0..=65535 without leading zeros.
    V1BadPort,
    /// v2 version nibble other than 2.
    V2BadVersion,
    /// v2 command other than LOCAL (0) and PROXY (1).
    V2BadCommand,
    /// v2 address family or transport nibble not defined by the spec, or a datagram transport.
    V2BadFamily,
    /// v2 length field above [`V2_MAX_LEN`].
    V2TooLong,
    /// v2 length shorter than the family's address block (12 for IPv4, 36 for IPv6).
    V2ShortAddress,
}

impl fmt::Display for ProxyError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            ProxyError::NotProxy => "not a PROXY header",
            ProxyError::V1TooLong => "v1 line longer than 107 bytes",
            ProxyError::V1BadByte => "v1 line has a non-printable byte or a bare CR",
            ProxyError::V1BadProtocol => "v1 protocol is not TCP4, TCP6 or UNKNOWN",
            ProxyError::V1BadFields => "v1 fields malformed",
            ProxyError::V1BadAddress => "v1 address invalid or of the wrong family",
            ProxyError::V1BadPort => "v1 port invalid",
            ProxyError::V2BadVersion => "v2 version is not 2",
            ProxyError::V2BadCommand => "v2 command is not LOCAL or PROXY",
            ProxyError::V2BadFamily => "v2 family or transport invalid",
            ProxyError::V2TooLong => "v2 length above 1024",
            ProxyError::V2ShortAddress => "v2 address block too short for its family",
        })
    }
}

const V1_PREFIX: &[u8] = b"PROXY ";

/// Parses the bytes a client sent so far (`buf`, from its first byte). Never panics, never
/// looks past `MAX_HEADER` bytes.
///
/// Errors: [`ProxyError`] as soon as the bytes cannot become a valid header.
pub fn parse(buf: &[u8]) -> Result<Parsed, ProxyError> {
    if buf.is_empty() {
        return Ok(Parsed::NeedMore { at_least: 1 });
    }
    let n = buf.len().min(V2_SIG.len());
    if buf[..n] == V2_SIG[..n] {
        return if buf.len() < V2_SIG.len() {
            Ok(Parsed::NeedMore { at_least: 16 })
        } else {
            parse_v2(buf)
        };
    }
    let n = buf.len().min(V1_PREFIX.len());
    if buf[..n] == V1_PREFIX[..n] {
        return parse_v1(buf);
    }
    Err(ProxyError::NotProxy)
}

fn parse_v1(buf: &[u8]) -> Result<Parsed, ProxyError> {
    let window = &buf[..buf.len().min(V1_MAX)];
    for (i, &b) in window.iter().enumerate() {
        match b {
            b'\r' => {
                return match window.get(i + 1) {
                    None if i + 1 < V1_MAX => Ok(Parsed::NeedMore { at_least: i + 2 }),
                    None => Err(ProxyError::V1TooLong),
                    // `i` ≥ 6: a CR is not in the prefix matched above.
                    Some(b'\n') => v1_line(window.get(V1_PREFIX.len()..i).unwrap_or(&[]), i + 2),
                    Some(_) => Err(ProxyError::V1BadByte),
                };
            }
            0x20..=0x7e => {}
            _ => return Err(ProxyError::V1BadByte),
        }
    }
    if window.len() >= V1_MAX {
        Err(ProxyError::V1TooLong)
    } else {
        Ok(Parsed::NeedMore {
            at_least: window.len() + 1,
        })
    }
}

/// The fields after `PROXY ` up to (not including) the CRLF.
fn v1_line(fields: &[u8], consumed: usize) -> Result<Parsed, ProxyError> {
    // Printable ASCII only (checked by the caller), so this is valid UTF-8.
    let text = std::str::from_utf8(fields).map_err(|_| ProxyError::V1BadByte)?;
    if text == "UNKNOWN" || text.starts_with("UNKNOWN ") {
        // The spec: a receiver ignores whatever follows UNKNOWN on the line.
        return Ok(Parsed::Done {
            source: None,
            dest: None,
            consumed,
        });
    }
    let mut parts = text.split(' ');
    let v6 = match parts.next() {
        Some("TCP4") => false,
        Some("TCP6") => true,
        _ => return Err(ProxyError::V1BadProtocol),
    };
    let fields: Vec<&str> = parts.collect();
    let [src, dst, sport, dport] = fields[..] else {
        return Err(ProxyError::V1BadFields);
    };
    let src = v1_addr(src, v6)?;
    let dst = v1_addr(dst, v6)?;
    let sport = v1_port(sport)?;
    let dport = v1_port(dport)?;
    Ok(Parsed::Done {
        source: Some(SocketAddr::new(src, sport)),
        dest: Some(SocketAddr::new(dst, dport)),
        consumed,
    })
}

fn v1_addr(s: &str, v6: bool) -> Result<IpAddr, ProxyError> {
    let ip = if v6 {
        s.parse::<Ipv6Addr>().map(IpAddr::V6)
    } else {
        // std refuses octets with leading zeros, so `010.0.0.1` is not read as octal.
        s.parse::<Ipv4Addr>().map(IpAddr::V4)
    };
    ip.map_err(|_| ProxyError::V1BadAddress)
}

fn v1_port(s: &str) -> Result<u16, ProxyError> {
    let digits = !s.is_empty() && s.len() <= 5 && s.bytes().all(|b| b.is_ascii_digit());
    if !digits || (s.len() > 1 && s.starts_with('0')) {
        return Err(ProxyError::V1BadPort);
    }
    s.parse().map_err(|_| ProxyError::V1BadPort)
}

fn parse_v2(buf: &[u8]) -> Result<Parsed, ProxyError> {
    if let Some(&ver_cmd) = buf.get(12) {
        if ver_cmd >> 4 != 2 {
            return Err(ProxyError::V2BadVersion);
        }
        if ver_cmd & 0x0f > 1 {
            return Err(ProxyError::V2BadCommand);
        }
    }
    if let Some(&fam) = buf.get(13) {
        // Families 0..=3 (UNSPEC, INET, INET6, UNIX), transports 0..=2 (UNSPEC, STREAM, DGRAM).
        if fam >> 4 > 3 || fam & 0x0f > 2 {
            return Err(ProxyError::V2BadFamily);
        }
    }
    if buf.len() < 16 {
        return Ok(Parsed::NeedMore { at_least: 16 });
    }
    let len = usize::from(u16::from_be_bytes([buf[14], buf[15]]));
    if len > V2_MAX_LEN {
        return Err(ProxyError::V2TooLong);
    }
    let total = 16 + len;
    let local = buf[12] & 0x0f == 0;
    let (family, transport) = (buf[13] >> 4, buf[13] & 0x0f);
    let need = match family {
        1 => 12,
        2 => 36,
        _ => 0,
    };
    if !local && len < need {
        return Err(ProxyError::V2ShortAddress);
    }
    if !local && need > 0 && transport == 2 {
        return Err(ProxyError::V2BadFamily);
    }
    if buf.len() < total {
        return Ok(Parsed::NeedMore { at_least: total });
    }
    let a = &buf[16..total];
    let port = |at: usize| u16::from_be_bytes([a[at], a[at + 1]]);
    let (source, dest) = match (local, family) {
        (true, _) => (None, None),
        (false, 1) => {
            let ip = |at: usize| IpAddr::V4(Ipv4Addr::new(a[at], a[at + 1], a[at + 2], a[at + 3]));
            let src = SocketAddr::new(ip(0), port(8));
            (Some(src), Some(SocketAddr::new(ip(4), port(10))))
        }
        (false, 2) => {
            let ip = |at: usize| {
                let mut o = [0u8; 16];
                o.copy_from_slice(&a[at..at + 16]);
                IpAddr::V6(Ipv6Addr::from(o))
            };
            let src = SocketAddr::new(ip(0), port(32));
            (Some(src), Some(SocketAddr::new(ip(16), port(34))))
        }
        _ => (None, None),
    };
    Ok(Parsed::Done {
        source,
        dest,
        consumed: total,
    })
}

#[cfg(test)]
mod tests;
