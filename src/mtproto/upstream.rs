//! The `mtproto` tier's upstream: another MTProto proxy (`--mtproto-proxy HOST:PORT:SECRET`),
//! reached as its client (docs/protocol.md §4.4).
//!
//! Owns: the flag's grammar ([`MtprotoProxy::parse`]), the safe label of an upstream (never the
//! secret), the DC index forwarded to it ([`client_index`]) and the client-side obfuscated2 init
//! toward it ([`MtprotoProxy::initiate`]); `hello` is the client side of the fake-TLS handshake
//! for `ee` secrets (sans-IO core driven over any byte stream). Sockets, routes and health are
//! `net::dial`'s and `route`'s.

pub mod hello;

use std::fmt;
use std::net::{IpAddr, Ipv6Addr};

use crate::mtproto::dc::DcId;
use crate::mtproto::faketls::client::Shape;
use crate::mtproto::obfs2::{self, Initiated, Secret, SecretKind, Tag};
use crate::rng::Rng;

/// One upstream MTProto proxy (docs/protocol.md §4.4). `Debug` masks the secret's key.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MtprotoProxy {
    /// Host (name or IP literal; an IPv6 literal without its brackets).
    pub host: String,
    /// TCP port (never 0).
    pub port: u16,
    /// The upstream's secret: plain, `dd` or `ee` (+ the SNI domain its fake-TLS uses).
    pub secret: Secret,
    /// The ClientHello an `ee` hop sends (`--mtproto-hello`, docs/protocol.md §2.6):
    /// [`Shape::ChromeClassic`] unless the route was built with `chrome`.
    pub hello: Shape,
}

impl MtprotoProxy {
    /// Parses `HOST:PORT:SECRET`, split from the right (the secret is hex, so it has no `:`):
    /// HOST is a name, an IPv4 literal or an IPv6 literal in brackets (`[::1]:443:…`); PORT is
    /// 1–65535; SECRET is one of our own client secret forms (`obfs2::Secret::parse`: 32 hex
    /// digits, `dd` + 32, `ee` + 32 + hex(domain), the domain at most 253 bytes).
    ///
    /// Errors: a sentence naming the part that is wrong (the secret itself is never echoed).
    pub fn parse(s: &str) -> Result<MtprotoProxy, String> {
        let s = s.trim();
        let (rest, secret) = s
            .rsplit_once(':')
            .ok_or("expected HOST:PORT:SECRET (IPv6 in brackets)")?;
        let (host, port) = rest
            .rsplit_once(':')
            .ok_or("expected HOST:PORT:SECRET (IPv6 in brackets)")?;
        let host = if let Some(inner) = host.strip_prefix('[') {
            let inner = inner
                .strip_suffix(']')
                .ok_or_else(|| format!("`{host}`: an IPv6 literal needs its closing bracket"))?;
            inner
                .parse::<Ipv6Addr>()
                .map_err(|_| format!("`{inner}` is not an IPv6 address"))?;
            inner.to_string()
        } else if host.contains(':') {
            return Err(format!(
                "`{host}`: write an IPv6 literal in brackets: [{host}]"
            ));
        } else if host.is_empty() {
            return Err("the host is empty (expected HOST:PORT:SECRET)".into());
        } else if host.contains(['/', '@', ' ', '[', ']']) {
            return Err(format!("`{host}` is not a host name or IP address"));
        } else {
            host.to_ascii_lowercase()
        };
        let port = match port.parse::<u16>() {
            Ok(p) if p > 0 => p,
            _ => return Err(format!("`{port}` is not a port (1-65535)")),
        };
        let secret = Secret::parse(secret).map_err(|e| format!("upstream secret: {e}"))?;
        if let SecretKind::Ee(d) = &secret.kind {
            if d.len() > crate::mtproto::faketls::client::MAX_DOMAIN {
                return Err(format!(
                    "upstream secret: its fake-TLS domain is {} bytes, at most {} fit a hello",
                    d.len(),
                    crate::mtproto::faketls::client::MAX_DOMAIN
                ));
            }
        }
        Ok(MtprotoProxy {
            host,
            port,
            secret,
            hello: Shape::ChromeClassic,
        })
    }

    /// The host as an IP address, if it is a literal (no DNS needed).
    pub fn ip(&self) -> Option<IpAddr> {
        self.host.parse().ok()
    }

    /// The secret's form as a word for labels: `plain`, `dd` or `ee`.
    pub fn form(&self) -> &'static str {
        match self.secret.kind {
            SecretKind::Plain => "plain",
            SecretKind::Dd => "dd",
            SecretKind::Ee(_) => "ee",
        }
    }

    /// The fake-TLS SNI domain for an `ee` secret, else `None`.
    pub fn tls_domain(&self) -> Option<&str> {
        match &self.secret.kind {
            SecretKind::Ee(d) => Some(d),
            _ => None,
        }
    }

    /// The client-side init toward this upstream (docs/protocol.md §4.4, §3.1): 64 random bytes
    /// under the §3.1 rules, key SHA-256(`raw[8..40)` ‖ secret key), IV `raw[40..56)`, the
    /// client's `tag` and DC index `dc` (see [`client_index`]) at `[56..62)` under the
    /// keystream; the encryptor continues at position 64, the decryptor comes from the
    /// reversed 48 bytes hashed with the same key.
    pub fn initiate(&self, tag: Tag, dc: i16, rng: &mut Rng) -> Initiated {
        obfs2::initiate(tag, dc, Some(&self.secret.key), rng)
    }
}

/// `host:port` (IPv6 in brackets) with the secret's form, `[::1]:443/ee`; never the key.
impl fmt::Display for MtprotoProxy {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.host.contains(':') {
            write!(f, "[{}]:{}/{}", self.host, self.port, self.form())
        } else {
            write!(f, "{}:{}/{}", self.host, self.port, self.form())
        }
    }
}

/// The DC index a client would send for `dc` (docs/protocol.md §1.4), forwarded to an upstream
/// proxy: the test offset kept (10000 + N), negated for media. Unlike `DcId::relay_index`
/// (Telegram's DCs take no test offset), an upstream proxy must learn that the client asked
/// for a test DC. Saturates at `i16::MAX` (the decoder only yields DCs that fit).
pub fn client_index(dc: DcId) -> i16 {
    let n = i32::from(dc.dc) + if dc.test { 10_000 } else { 0 };
    let n = i16::try_from(n).unwrap_or(i16::MAX);
    if dc.media {
        -n
    } else {
        n
    }
}

#[cfg(test)]
mod tests;
