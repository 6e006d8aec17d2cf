//! Telegram's published address ranges (core.telegram.org/resources/cidr.txt, docs/protocol.md
//! §1.9): the v4 and v6 prefixes a transparent-mode redirect may lead to. Its web front ends
//! share them, so an address inside is not necessarily MTProto (`mtproto::direct` tells).
//!
//! Sans-IO: [`TgRanges::parse`] takes the file's text and refuses a list too short to be the
//! real one (a truncated or hijacked download must not shrink the firewall's sets);
//! [`TgRanges::builtin`] is the fallback copy. Fetching, caching and the nftables sets built
//! from [`TgRanges::v4`] / [`TgRanges::v6`] live with their shells.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::dc_table::normalise;

/// Default source of the list.
pub const DEFAULT_URL: &str = "https://core.telegram.org/resources/cidr.txt";

/// Fewest IPv4 prefixes a list must have to be accepted.
pub const MIN_V4: usize = 8;

/// Fewest IPv6 prefixes a list must have to be accepted.
pub const MIN_V6: usize = 2;

/// Shortest IPv4 prefix a list may hold: a /0–/7 would send a large part of the internet to
/// us (the real list's widest is a /20).
pub const MIN_V4_LEN: u8 = 8;

/// Shortest IPv6 prefix a list may hold (the real list's widest is a /32).
pub const MIN_V6_LEN: u8 = 16;

/// Most lines a list may have (the real one has 14).
pub const MAX_LINES: usize = 4096;

/// The built-in copy: the content of cidr.txt as published (read 2026-12-05 from public copies
/// of the file: 9 IPv4 and 5 IPv6 prefixes; unchanged since 2023 in those copies).
pub const BUILTIN: &str = "\
# Source: https://core.telegram.org/resources/cidr.txt (as published; read 2026-12-05)
91.108.56.0/22
91.108.4.0/22
91.108.8.0/22
91.108.16.0/22
91.108.12.0/22
149.154.160.0/20
91.105.192.0/23
91.108.20.0/22
185.76.151.0/24
2001:b28:f23d::/48
2001:b28:f23f::/48
2001:67c:4e8::/48
2001:b28:f23c::/48
2a0a:f280::/32
";

/// Why a list was refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RangesError {
    /// A line (1-based) that is not `ADDR/LEN`, blank or a `#` comment.
    BadLine(usize),
    /// Fewer than [`MIN_V4`] IPv4 or [`MIN_V6`] IPv6 prefixes.
    TooFew { v4: usize, v6: usize },
    /// More than [`MAX_LINES`] lines.
    TooLong,
    /// A line (1-based) whose prefix is shorter than [`MIN_V4_LEN`] / [`MIN_V6_LEN`].
    TooWide(usize),
}

impl fmt::Display for RangesError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            RangesError::BadLine(n) => write!(f, "line {n} is not ADDRESS/PREFIX-LENGTH"),
            RangesError::TooFew { v4, v6 } => write!(
                f,
                "too few prefixes ({v4} IPv4, {v6} IPv6; at least {MIN_V4} and {MIN_V6} expected)"
            ),
            RangesError::TooLong => write!(f, "more than {MAX_LINES} lines"),
            RangesError::TooWide(n) => write!(
                f,
                "line {n} is wider than /{MIN_V4_LEN} (IPv4) or /{MIN_V6_LEN} (IPv6): not Telegram's"
            ),
        }
    }
}

impl std::error::Error for RangesError {}

/// A parsed range list. Prefixes keep the file's order, host bits cleared, duplicates dropped.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TgRanges {
    v4: Vec<(Ipv4Addr, u8)>,
    v6: Vec<(Ipv6Addr, u8)>,
}

impl TgRanges {
    /// The built-in copy ([`BUILTIN`]).
    pub fn builtin() -> TgRanges {
        // The built-in text is a constant the unit tests parse.
        TgRanges::parse(BUILTIN).expect("built-in range list parses")
    }

    /// Parses cidr.txt's format: one `ADDR/LEN` per line (IPv4 or IPv6), blank lines and `#`
    /// comments allowed, surrounding whitespace and CR ignored. Any other line refuses the whole
    /// list, and so does a prefix wider than [`MIN_V4_LEN`] / [`MIN_V6_LEN`] or a list with
    /// fewer than [`MIN_V4`] v4 or [`MIN_V6`] v6 prefixes.
    pub fn parse(text: &str) -> Result<TgRanges, RangesError> {
        let mut r = TgRanges {
            v4: Vec::new(),
            v6: Vec::new(),
        };
        for (i, line) in text.lines().enumerate() {
            if i >= MAX_LINES {
                return Err(RangesError::TooLong);
            }
            let line = line.trim();
            if line.is_empty() || line.starts_with('#') {
                continue;
            }
            let bad = RangesError::BadLine(i + 1);
            let (addr, len) = line.split_once('/').ok_or(bad.clone())?;
            let len: u8 = len.parse().map_err(|_| bad.clone())?;
            let ip = addr.parse::<IpAddr>().map_err(|_| bad.clone())?;
            let min = if ip.is_ipv4() { MIN_V4_LEN } else { MIN_V6_LEN };
            if len < min {
                return Err(RangesError::TooWide(i + 1));
            }
            match ip {
                IpAddr::V4(a) if len <= 32 => {
                    let p = (Ipv4Addr::from(u32::from(a) & mask32(len)), len);
                    if !r.v4.contains(&p) {
                        r.v4.push(p);
                    }
                }
                IpAddr::V6(a) if len <= 128 => {
                    let p = (Ipv6Addr::from(u128::from(a) & mask128(len)), len);
                    if !r.v6.contains(&p) {
                        r.v6.push(p);
                    }
                }
                _ => return Err(bad),
            }
        }
        if r.v4.len() < MIN_V4 || r.v6.len() < MIN_V6 {
            return Err(RangesError::TooFew {
                v4: r.v4.len(),
                v6: r.v6.len(),
            });
        }
        Ok(r)
    }

    /// True if `ip` (an IPv4-mapped IPv6 address counts as its IPv4 form) is inside a prefix.
    pub fn contains(&self, ip: IpAddr) -> bool {
        match normalise(ip) {
            IpAddr::V4(a) => {
                let a = u32::from(a);
                self.v4
                    .iter()
                    .any(|&(n, len)| a & mask32(len) == u32::from(n))
            }
            IpAddr::V6(a) => {
                let a = u128::from(a);
                self.v6
                    .iter()
                    .any(|&(n, len)| a & mask128(len) == u128::from(n))
            }
        }
    }

    /// The IPv4 prefixes (network address, length), in the list's order.
    pub fn v4(&self) -> &[(Ipv4Addr, u8)] {
        &self.v4
    }

    /// The IPv6 prefixes (network address, length), in the list's order.
    pub fn v6(&self) -> &[(Ipv6Addr, u8)] {
        &self.v6
    }

    /// The list in cidr.txt's format (v4 then v6, one `ADDR/LEN` per line), what a cache file
    /// holds; [`TgRanges::parse`] reads it back to an equal value.
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        for (a, len) in &self.v4 {
            s.push_str(&format!("{a}/{len}\n"));
        }
        for (a, len) in &self.v6 {
            s.push_str(&format!("{a}/{len}\n"));
        }
        s
    }
}

/// `ip` with the host bits past `len` cleared (an IPv4-mapped IPv6 address as its IPv4 form;
/// `len` capped at the family's width).
pub fn mask(ip: IpAddr, len: u8) -> IpAddr {
    match normalise(ip) {
        IpAddr::V4(a) => IpAddr::V4(Ipv4Addr::from(u32::from(a) & mask32(len.min(32)))),
        IpAddr::V6(a) => IpAddr::V6(Ipv6Addr::from(u128::from(a) & mask128(len.min(128)))),
    }
}

fn mask32(len: u8) -> u32 {
    u32::MAX.checked_shl(32 - u32::from(len)).unwrap_or(0)
}

fn mask128(len: u8) -> u128 {
    u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    #[test]
    fn builtin_has_the_published_prefixes() {
        let r = TgRanges::builtin();
        assert_eq!(r.v4().len(), 9);
        assert_eq!(r.v6().len(), 5);
        assert_eq!(r.v4()[5], (Ipv4Addr::new(149, 154, 160, 0), 20));
        assert_eq!(r.v6()[4], ("2a0a:f280::".parse().unwrap(), 32));
        for inside in [
            "149.154.167.51",
            "149.154.175.50",
            "91.108.56.130",
            "91.105.192.100",
            "185.76.151.1",
            "2001:67c:4e8:f002::a",
            "2001:b28:f23d:f001::a",
            "2001:b28:f23c::1",
            "::ffff:149.154.171.5",
        ] {
            assert!(r.contains(ip(inside)), "{inside}");
        }
        for outside in [
            "149.154.176.1",
            "149.154.159.255",
            "91.108.24.1",
            "95.161.76.100",
            "8.8.8.8",
            "127.0.0.1",
            "2001:b28:f23e::1",
            "2001:67c:4e9::1",
            "::1",
        ] {
            assert!(!r.contains(ip(outside)), "{outside}");
        }
    }

    #[test]
    fn parse_round_trips_and_clears_host_bits() {
        let r = TgRanges::builtin();
        assert_eq!(TgRanges::parse(&r.to_text()), Ok(r.clone()));
        let mut text = BUILTIN.replace("91.108.56.0/22", " 91.108.57.9/22\r");
        text.push_str("\n# trailing comment\n\n91.108.4.0/22\n");
        let q = TgRanges::parse(&text).unwrap();
        assert_eq!(q.v4()[0], (Ipv4Addr::new(91, 108, 56, 0), 22));
        assert_eq!(q.v4().len(), 9, "duplicate dropped");
    }

    #[test]
    fn short_or_bad_lists_are_refused() {
        let v4_only: String = BUILTIN
            .lines()
            .filter(|l| !l.contains(':'))
            .collect::<Vec<_>>()
            .join("\n");
        assert_eq!(
            TgRanges::parse(&v4_only),
            Err(RangesError::TooFew { v4: 9, v6: 0 })
        );
        let few: String = BUILTIN.lines().skip(3).collect::<Vec<_>>().join("\n");
        assert_eq!(
            TgRanges::parse(&few),
            Err(RangesError::TooFew { v4: 7, v6: 5 })
        );
        assert_eq!(
            TgRanges::parse(""),
            Err(RangesError::TooFew { v4: 0, v6: 0 })
        );
        assert_eq!(
            TgRanges::parse("<html>blocked</html>\n"),
            Err(RangesError::BadLine(1))
        );
        let bad_len = BUILTIN.replace("185.76.151.0/24", "185.76.151.0/33");
        assert_eq!(TgRanges::parse(&bad_len), Err(RangesError::BadLine(10)));
        let bad6 = BUILTIN.replace("2a0a:f280::/32", "2a0a:f280::/129");
        assert_eq!(TgRanges::parse(&bad6), Err(RangesError::BadLine(15)));
        assert!(TgRanges::parse(&"#\n".repeat(MAX_LINES + 1)) == Err(RangesError::TooLong));
        // A hijacked list must not send the whole internet here: /0-/7 (v4), /0-/15 (v6).
        let wide4 = BUILTIN.replace("185.76.151.0/24", "0.0.0.0/0");
        assert_eq!(TgRanges::parse(&wide4), Err(RangesError::TooWide(10)));
        let wide6 = BUILTIN.replace("2a0a:f280::/32", "2000::/3");
        assert_eq!(TgRanges::parse(&wide6), Err(RangesError::TooWide(15)));
        let edge = BUILTIN
            .replace("185.76.151.0/24", "10.0.0.0/8")
            .replace("2a0a:f280::/32", "fd00::/16");
        assert!(
            TgRanges::parse(&edge).is_ok(),
            "/8 and /16 are the widest allowed"
        );
        assert!(RangesError::TooFew { v4: 1, v6: 0 }
            .to_string()
            .contains("at least 8"));
    }

    #[test]
    fn masks_keep_the_network_bits_only() {
        assert_eq!(mask(ip("1.2.3.4"), 0), ip("0.0.0.0"));
        assert_eq!(mask(ip("1.2.3.4"), 16), ip("1.2.0.0"));
        assert_eq!(
            mask(ip("::ffff:1.2.3.4"), 24),
            ip("1.2.3.0"),
            "mapped as IPv4"
        );
        assert_eq!(mask(ip("2001:db8::1"), 0), ip("::"));
        assert_eq!(
            mask(ip("2001:db8::1"), 200),
            ip("2001:db8::1"),
            "capped at /128"
        );
    }
}
