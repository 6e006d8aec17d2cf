//! The `--cf-ip` items as the configuration holds them (docs/design.md §4 "edges"): an edge
//! address, a CIDR range ([`Cidr`]: parse, contains, size, a random host address inside it),
//! `auto` / `auto6` (Cloudflare's published ranges, [`CF_RANGES_V4`], [`CF_RANGES_V6`]), and
//! the caps on edges. Here, below `route`, because `Config` holds them; the pool of edges in
//! use and its rules are `route::edges`'s.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use crate::rng::Rng;

/// Most edges in use at once (given and sampled together). Each edge multiplies the Worker and
/// cfproxy routes (edges × endpoints × DCs), so the count is capped; given addresses past the
/// cap are ignored (the start log says so).
pub const MAX_EDGES: usize = 8;

/// Default of `--cf-ip-count`: edges sampled from the ranges at once.
pub const DEFAULT_COUNT: usize = 3;

/// Cloudflare's published IPv4 ranges (source: <https://www.cloudflare.com/ips-v4>). This copy
/// is the list as published in 2024 (it had been unchanged for years then); it could not be
/// re-read from the build machine when it was put here (2026-12-06). Also docs/protocol.md §4.8.
pub const CF_RANGES_V4: [&str; 15] = [
    "173.245.48.0/20",
    "103.21.244.0/22",
    "103.22.200.0/22",
    "103.31.4.0/22",
    "141.101.64.0/18",
    "108.162.192.0/18",
    "190.93.240.0/20",
    "188.114.96.0/20",
    "197.234.240.0/22",
    "198.41.128.0/17",
    "162.158.0.0/15",
    "104.16.0.0/13",
    "104.24.0.0/14",
    "172.64.0.0/13",
    "131.0.72.0/22",
];

/// Cloudflare's published IPv6 ranges (source: <https://www.cloudflare.com/ips-v6>, the same
/// copy and date as [`CF_RANGES_V4`]).
pub const CF_RANGES_V6: [&str; 7] = [
    "2400:cb00::/32",
    "2606:4700::/32",
    "2803:f800::/32",
    "2405:b500::/32",
    "2405:8100::/32",
    "2a06:98c0::/29",
    "2c0f:f248::/32",
];

/// An address range: `base` with its host bits cleared, `len` prefix bits.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub struct Cidr {
    /// First address of the range.
    pub base: IpAddr,
    /// Prefix length (0-32 for IPv4, 0-128 for IPv6).
    pub len: u8,
}

impl Cidr {
    /// Parses `ADDR/LEN`; host bits set in `ADDR` are an error (a typo shows, not a surprise).
    pub fn parse(s: &str) -> Result<Cidr, String> {
        let (a, l) = s
            .split_once('/')
            .ok_or_else(|| format!("{s:?}: not ADDR/LEN"))?;
        let base: IpAddr = a
            .parse()
            .map_err(|_| format!("{s:?}: {a:?} is not an IP address"))?;
        let max = bits(base);
        let len: u8 = l
            .parse()
            .ok()
            .filter(|&n| n <= max)
            .ok_or_else(|| format!("{s:?}: prefix length must be 0-{max}"))?;
        let c = Cidr { base, len };
        if to_u128(base) & c.host_mask() != 0 {
            return Err(format!(
                "{s:?}: host bits are set (the range starts at {})",
                c.first()
            ));
        }
        Ok(c)
    }

    /// The mask of the host bits (in the low bits of a u128).
    pub(crate) fn host_mask(&self) -> u128 {
        let host = u32::from(bits(self.base) - self.len);
        if host >= 128 {
            u128::MAX
        } else {
            (1u128 << host) - 1
        }
    }

    /// The first address (the base with host bits cleared).
    pub(crate) fn first(&self) -> IpAddr {
        from_u128(self.base, to_u128(self.base) & !self.host_mask())
    }

    /// True if `ip` is inside the range (same family).
    pub fn contains(&self, ip: IpAddr) -> bool {
        ip.is_ipv4() == self.base.is_ipv4()
            && to_u128(ip) & !self.host_mask() == to_u128(self.base) & !self.host_mask()
    }

    /// Addresses in the range (saturating at `u64::MAX`).
    pub fn size(&self) -> u64 {
        u64::try_from(self.host_mask()).map_or(u64::MAX, |m| m.saturating_add(1))
    }

    /// A uniformly random host address inside the range. An IPv4 range of 4 or more addresses
    /// never yields its first (network) or last (broadcast) address; a /32 or /128 yields itself.
    pub fn sample(&self, rng: &mut Rng) -> IpAddr {
        let mask = self.host_mask();
        let net = to_u128(self.base) & !mask;
        let mut b = [0u8; 16];
        for _ in 0..64 {
            rng.fill(&mut b);
            let host = u128::from_le_bytes(b) & mask;
            let edge_addr = host == 0 || host == mask;
            if self.base.is_ipv4() && mask >= 3 && edge_addr {
                continue;
            }
            return from_u128(self.base, net | host);
        }
        from_u128(self.base, net | 1) // 64 draws of 0/all-ones: a broken generator
    }
}

impl fmt::Display for Cidr {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}/{}", self.base, self.len)
    }
}

/// One `--cf-ip` item.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CfIp {
    /// One edge address, used as given (only ever cooled, never replaced).
    Addr(IpAddr),
    /// A range to sample edges from.
    Range(Cidr),
    /// `auto`: sample from Cloudflare's published IPv4 ranges ([`CF_RANGES_V4`]).
    Auto,
    /// `auto6`: sample from Cloudflare's published IPv6 ranges ([`CF_RANGES_V6`]).
    Auto6,
}

/// Parses one `--cf-ip` item: an IPv4/IPv6 address (IPv6 may be in brackets), a CIDR range
/// (`104.16.0.0/13`), `auto` or `auto6`. The error names the bad item.
pub fn parse_cf_ip(s: &str) -> Result<CfIp, String> {
    let t = s.trim();
    match t.to_ascii_lowercase().as_str() {
        "auto" => return Ok(CfIp::Auto),
        "auto6" => return Ok(CfIp::Auto6),
        _ => {}
    }
    if t.contains('/') {
        return Cidr::parse(t).map(|c| {
            if c.host_mask() == 0 {
                CfIp::Addr(c.base) // a /32 or /128 is one address
            } else {
                CfIp::Range(c)
            }
        });
    }
    let bare = t
        .strip_prefix('[')
        .and_then(|x| x.strip_suffix(']'))
        .unwrap_or(t);
    bare.parse::<IpAddr>()
        .map(CfIp::Addr)
        .map_err(|_| format!("{t:?}: not an IP address, ADDR/LEN range, auto or auto6"))
}

/// Address bits of `ip`'s family.
fn bits(ip: IpAddr) -> u8 {
    if ip.is_ipv4() {
        32
    } else {
        128
    }
}

fn to_u128(ip: IpAddr) -> u128 {
    match ip {
        IpAddr::V4(a) => u128::from(u32::from(a)),
        IpAddr::V6(a) => u128::from(a),
    }
}

fn from_u128(family: IpAddr, v: u128) -> IpAddr {
    match family {
        IpAddr::V4(_) => IpAddr::V4(Ipv4Addr::from(v as u32)),
        IpAddr::V6(_) => IpAddr::V6(Ipv6Addr::from(v)),
    }
}
