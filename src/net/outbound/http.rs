//! HTTP CONNECT client handshake (RFC 9110 §9.3.6), as a sans-IO core.
//!
//! Sends `CONNECT addr:port HTTP/1.1` (or `name:port`) with `Host` and, with credentials, `Proxy-Authorization:
//! Basic base64(user:pass)` (RFC 7617). Reads the response head up to the blank line, never a
//! byte further (what follows is the destination's), and at most [`MAX_RESPONSE`] bytes. Any
//! 2xx opens the tunnel; 407 (or 401, as tinyproxy sends) is refused credentials; every other status is the proxy refusing
//! or failing to reach the destination (403 from an ACL, 502/503/504 when it cannot connect).

use super::{Progress, ProxyError, Target};

/// Largest response head accepted, bytes.
pub const MAX_RESPONSE: usize = 8 * 1024;

/// An HTTP CONNECT handshake in progress.
#[derive(Debug)]
pub struct Connect {
    out: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    done: bool,
}

impl Connect {
    /// A CONNECT to `target` with Basic credentials `auth`; the request is queued.
    pub fn new(target: &Target, auth: Option<(&str, &str)>) -> Connect {
        let mut req = format!("CONNECT {target} HTTP/1.1\r\nHost: {target}\r\n");
        if let Some((user, pass)) = auth {
            req.push_str("Proxy-Authorization: Basic ");
            req.push_str(&base64(format!("{user}:{pass}").as_bytes()));
            req.push_str("\r\n");
        }
        req.push_str("\r\n");
        Connect {
            out: req.into_bytes(),
            sent: 0,
            got: Vec::with_capacity(128),
            done: false,
        }
    }

    /// Bytes waiting to be written.
    pub fn pending(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    /// `n` bytes of [`Connect::pending`] were written.
    pub fn sent(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.out.len());
    }

    /// The fewest bytes that could end the head (`\r\n\r\n`), so a read never takes a byte of
    /// the tunnel; 0 once done.
    pub fn want(&self) -> usize {
        if self.done {
            return 0;
        }
        let tail = |s: &[u8]| self.got.ends_with(s);
        let n = if tail(b"\r\n\r") {
            1
        } else if tail(b"\r\n") {
            2
        } else if tail(b"\r") {
            3
        } else {
            4
        };
        n.min(MAX_RESPONSE - self.got.len()).max(1)
    }

    /// Takes bytes read from the proxy (at most [`Connect::want`]).
    ///
    /// Errors: 407 or 401 (`Auth`), another non-2xx status (`Http`), a malformed or oversize head.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Progress, ProxyError> {
        if self.done || bytes.len() > self.want() {
            return Err(ProxyError::Protocol(
                "HTTP proxy sent more than its response head".into(),
            ));
        }
        self.got.extend_from_slice(bytes);
        if !self.got.ends_with(b"\r\n\r\n") {
            if self.got.len() >= MAX_RESPONSE {
                return Err(ProxyError::Protocol(format!(
                    "CONNECT response head over {MAX_RESPONSE} bytes"
                )));
            }
            return Ok(Progress::More);
        }
        let code = status(&self.got)?;
        match code {
            200..=299 => {
                self.done = true;
                Ok(Progress::Done)
            }
            // 407 is the standard answer; some proxies (tinyproxy's BasicAuth) send 401. A
            // CONNECT response is the proxy's own, so both are about its credentials.
            401 | 407 => Err(ProxyError::Auth(format!(
                "HTTP proxy answered {code}: credentials missing or refused"
            ))),
            _ => Err(ProxyError::Http(code)),
        }
    }
}

/// The status code of an `HTTP/1.x NNN reason` line. Errors: anything else.
fn status(head: &[u8]) -> Result<u16, ProxyError> {
    let line = head.split(|&b| b == b'\n').next().unwrap_or_default();
    let line = String::from_utf8_lossy(line);
    let mut parts = line.trim_end().splitn(3, ' ');
    let version = parts.next().unwrap_or_default();
    let code = parts.next().unwrap_or_default();
    if !version.starts_with("HTTP/1.") || code.len() != 3 {
        return Err(ProxyError::Protocol(format!(
            "not an HTTP response: {:?}",
            line.chars().take(60).collect::<String>()
        )));
    }
    code.parse()
        .ok()
        .filter(|c| (100..=599).contains(c))
        .ok_or_else(|| ProxyError::Protocol(format!("bad HTTP status {code:?}")))
}

/// Standard base64 with padding (RFC 4648 §4).
pub fn base64(data: &[u8]) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
    let mut out = String::with_capacity(data.len().div_ceil(3) * 4);
    for chunk in data.chunks(3) {
        let b = [
            chunk[0],
            chunk.get(1).copied().unwrap_or(0),
            chunk.get(2).copied().unwrap_or(0),
        ];
        let n = (u32::from(b[0]) << 16) | (u32::from(b[1]) << 8) | u32::from(b[2]);
        for (i, shift) in [18, 12, 6, 0].into_iter().enumerate() {
            if i <= chunk.len() {
                out.push(ALPHABET[(n >> shift) as usize & 63] as char);
            } else {
                out.push('=');
            }
        }
    }
    out
}
