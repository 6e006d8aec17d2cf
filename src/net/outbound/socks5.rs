//! SOCKS5 client handshake (RFC 1928) with username/password authentication (RFC 1929), as a
//! sans-IO core: it queues bytes to send and says exactly how many it can take, so nothing of
//! the destination's stream is read by mistake.
//!
//! Sequence: greeting `05 n methods…` (00 = none; 02 = user/pass when the URL has credentials)
//! → method `05 m`; for `02`: `01 ulen user plen pass` → `01 status`; then
//! `05 01 00 atyp addr port` (CONNECT, IPv4 atyp 1, IPv6 atyp 4, or a name atyp 3 for
//! `socks5h://`) → `05 rep 00 atyp bnd port`.
//! A reply code other than 0 is the proxy failing to reach the destination (RFC 1928 §6).

use std::net::SocketAddr;

use super::{Progress, ProxyError, Target};

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Phase {
    /// Waiting for the 2-byte method choice.
    Method,
    /// Waiting for the 2-byte RFC 1929 status.
    Auth,
    /// Waiting for the 4-byte head of the CONNECT reply.
    ReplyHead,
    /// Waiting for the bound address (`need` bytes in all, head included).
    ReplyAddr,
    /// The tunnel is open.
    Done,
}

/// A SOCKS5 CONNECT handshake in progress.
#[derive(Debug)]
pub struct Socks5 {
    phase: Phase,
    out: Vec<u8>,
    sent: usize,
    got: Vec<u8>,
    need: usize,
    auth: Option<(Vec<u8>, Vec<u8>)>,
    target: Target,
}

impl Socks5 {
    /// A handshake asking for `target` (a name longer than 255 bytes is cut: DNS names are at
    /// most 253), with RFC 1929 credentials `auth` (each 1–255 bytes, as
    /// `OutboundProxy::parse` guarantees). The greeting is queued.
    pub fn new(target: &Target, auth: Option<(&str, &str)>) -> Socks5 {
        let out = if auth.is_some() {
            vec![5, 2, 0x00, 0x02]
        } else {
            vec![5, 1, 0x00]
        };
        Socks5 {
            phase: Phase::Method,
            out,
            sent: 0,
            got: Vec::with_capacity(22),
            need: 2,
            auth: auth.map(|(u, p)| (u.as_bytes().to_vec(), p.as_bytes().to_vec())),
            target: target.clone(),
        }
    }

    /// Bytes waiting to be written.
    pub fn pending(&self) -> &[u8] {
        &self.out[self.sent..]
    }

    /// `n` bytes of [`Socks5::pending`] were written.
    pub fn sent(&mut self, n: usize) {
        self.sent = (self.sent + n).min(self.out.len());
    }

    /// Bytes the current answer still lacks (0 when done).
    pub fn want(&self) -> usize {
        if self.phase == Phase::Done {
            0
        } else {
            self.need - self.got.len()
        }
    }

    /// True while the answer awaited is the proxy's own (its method choice or the status of
    /// the credentials), not the CONNECT reply that waits for the destination.
    pub fn awaits_proxy(&self) -> bool {
        matches!(self.phase, Phase::Method | Phase::Auth)
    }

    /// Takes bytes read from the proxy (at most [`Socks5::want`]; more is a protocol error).
    ///
    /// Errors: auth refused, a reply code ≠ 0, or a malformed answer.
    pub fn feed(&mut self, bytes: &[u8]) -> Result<Progress, ProxyError> {
        if bytes.len() > self.want() {
            return Err(ProxyError::Protocol(
                "SOCKS5 proxy sent more than its answer".into(),
            ));
        }
        self.got.extend_from_slice(bytes);
        while self.phase != Phase::Done && self.got.len() == self.need {
            self.step()?;
        }
        Ok(if self.phase == Phase::Done {
            Progress::Done
        } else {
            Progress::More
        })
    }

    /// Queues the next message (the previous one has been written completely by now: the
    /// proxy answered it).
    fn queue(&mut self, msg: Vec<u8>) {
        self.out = msg;
        self.sent = 0;
    }

    fn expect(&mut self, phase: Phase, need: usize) {
        self.phase = phase;
        self.got.clear();
        self.need = need;
    }

    fn step(&mut self) -> Result<(), ProxyError> {
        let g = std::mem::take(&mut self.got);
        match self.phase {
            Phase::Method => self.on_method(&g)?,
            Phase::Auth => {
                // RFC 1929 says version 1; some servers echo 5.
                if g[0] != 1 && g[0] != 5 {
                    return Err(ProxyError::Protocol(format!(
                        "bad RFC 1929 reply version {}",
                        g[0]
                    )));
                }
                if g[1] != 0 {
                    return Err(ProxyError::Auth(format!(
                        "SOCKS5 user/password refused (status {})",
                        g[1]
                    )));
                }
                self.request();
            }
            Phase::ReplyHead => {
                if g[0] != 5 {
                    return Err(ProxyError::Protocol(format!(
                        "bad SOCKS5 reply version {}",
                        g[0]
                    )));
                }
                if g[1] != 0 {
                    return Err(ProxyError::Socks(g[1]));
                }
                let addr_len = match g[3] {
                    1 => 4,
                    4 => 16,
                    // A domain: one length byte first; read it, then the rest.
                    3 => {
                        self.got = g;
                        self.phase = Phase::ReplyAddr;
                        self.need = 5;
                        return Ok(());
                    }
                    t => {
                        return Err(ProxyError::Protocol(format!(
                            "bad SOCKS5 reply address type {t}"
                        )))
                    }
                };
                self.got = g;
                self.phase = Phase::ReplyAddr;
                self.need = 4 + addr_len + 2;
            }
            Phase::ReplyAddr => {
                // A domain reply: the length byte has arrived, now the name and port.
                if g[3] == 3 && g.len() == 5 {
                    self.need = 5 + g[4] as usize + 2;
                    self.got = g;
                    return Ok(());
                }
                self.phase = Phase::Done;
            }
            Phase::Done => {}
        }
        Ok(())
    }

    /// The proxy's method choice (RFC 1928 §3): CONNECT at once, or user/password first
    /// (RFC 1929). Errors: not SOCKS5, no acceptable method, credentials needed but not given.
    fn on_method(&mut self, g: &[u8]) -> Result<(), ProxyError> {
        if g[0] != 5 {
            return Err(ProxyError::Protocol(format!(
                "not a SOCKS5 proxy (version byte {})",
                g[0]
            )));
        }
        match (g[1], &self.auth) {
            (0x00, _) => self.request(),
            (0x02, Some((user, pass))) => {
                let mut m = vec![1, user.len() as u8];
                m.extend_from_slice(user);
                m.push(pass.len() as u8);
                m.extend_from_slice(pass);
                self.queue(m);
                self.expect(Phase::Auth, 2);
            }
            (0xFF, None) | (0x02, None) => {
                return Err(ProxyError::Auth(
                    "the SOCKS5 proxy requires a user and password".into(),
                ))
            }
            (0xFF, Some(_)) => {
                return Err(ProxyError::Auth(
                    "the SOCKS5 proxy accepts no offered method".into(),
                ))
            }
            (m, _) => {
                return Err(ProxyError::Protocol(format!(
                    "SOCKS5 proxy chose method {m} we did not offer"
                )))
            }
        }
        Ok(())
    }

    /// Queues CONNECT to the target and waits for the reply head.
    fn request(&mut self) {
        let mut m = vec![5, 1, 0];
        let port = match &self.target {
            Target::Addr(SocketAddr::V4(a)) => {
                m.push(1);
                m.extend_from_slice(&a.ip().octets());
                a.port()
            }
            Target::Addr(SocketAddr::V6(a)) => {
                m.push(4);
                m.extend_from_slice(&a.ip().octets());
                a.port()
            }
            Target::Name(host, port) => {
                let name = &host.as_bytes()[..host.len().min(255)];
                m.push(3);
                m.push(name.len() as u8);
                m.extend_from_slice(name);
                *port
            }
        };
        m.extend_from_slice(&port.to_be_bytes());
        self.queue(m);
        self.expect(Phase::ReplyHead, 4);
    }
}

/// RFC 1928 §6 name of a reply code.
pub fn reply_name(code: u8) -> &'static str {
    match code {
        0 => "succeeded",
        1 => "general SOCKS server failure",
        2 => "connection not allowed by ruleset",
        3 => "network unreachable",
        4 => "host unreachable",
        5 => "connection refused",
        6 => "TTL expired",
        7 => "command not supported",
        8 => "address type not supported",
        _ => "unassigned",
    }
}
