//! The bypass list of the outbound proxy (`--no-outbound-proxy-for`, docs/protocol.md §4.7):
//! destinations dialled directly despite `--outbound-proxy`.
//!
//! Owns: the item grammar (`*`, `name`, `.suffix`, an IP literal, a CIDR) and the match of one
//! dial (its address and TLS name) against the list. Pure: no I/O.

use std::net::IpAddr;

use super::UNRESOLVED;

/// One entry of `--no-outbound-proxy-for`.
#[derive(Clone, Debug, PartialEq, Eq)]
enum Rule {
    /// `*`: nothing goes through the proxy.
    All,
    /// `name`: that host name exactly (ASCII case-insensitive).
    Exact(String),
    /// `.suffix`: any name ending in `.suffix`, and `suffix` itself.
    Suffix(String),
    /// An IP literal or CIDR `addr/len`: destination addresses inside it.
    Net(IpAddr, u8),
}

/// The bypass list: destinations dialled directly despite `--outbound-proxy`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Bypass {
    rules: Vec<Rule>,
}

impl Bypass {
    /// Parses the items of `--no-outbound-proxy-for`: `*`, `name`, `.suffix`, an IP literal,
    /// or `addr/len` (CIDR). Errors: an item that is none of these (a port, a bad prefix).
    pub fn parse(items: &[String]) -> Result<Bypass, String> {
        let mut rules = Vec::new();
        for item in items {
            rules.push(parse_rule(item)?);
        }
        Ok(Bypass { rules })
    }

    /// True if a dial to `host` goes direct by a name rule (or `*`).
    pub fn matches_name(&self, host: &str) -> bool {
        self.rules
            .iter()
            .any(|r| !matches!(r, Rule::Net(..)) && self.rule_matches(r, None, Some(host)))
    }

    /// True if a dial to `addr` (SNI or route name `host`, if any) goes direct. An
    /// [`UNRESOLVED`] address is matched by names only.
    pub fn matches(&self, addr: IpAddr, host: Option<&str>) -> bool {
        let addr = (addr != UNRESOLVED).then_some(addr);
        self.rules.iter().any(|r| self.rule_matches(r, addr, host))
    }

    fn rule_matches(&self, r: &Rule, addr: Option<IpAddr>, host: Option<&str>) -> bool {
        match r {
            Rule::All => true,
            Rule::Exact(n) => host.is_some_and(|h| h.eq_ignore_ascii_case(n)),
            Rule::Suffix(s) => host.is_some_and(|h| {
                let h = h.to_ascii_lowercase();
                h == *s || h.ends_with(&format!(".{s}"))
            }),
            Rule::Net(net, len) => addr.is_some_and(|a| in_net(a, *net, *len)),
        }
    }
}

fn parse_rule(item: &str) -> Result<Rule, String> {
    let item = item.trim();
    if item == "*" {
        return Ok(Rule::All);
    }
    if let Some((a, len)) = item.split_once('/') {
        let ip: IpAddr = a
            .parse()
            .map_err(|_| format!("bad CIDR address {item:?}"))?;
        let max = if ip.is_ipv4() { 32 } else { 128 };
        let len: u8 = len
            .parse()
            .ok()
            .filter(|&l| l <= max)
            .ok_or_else(|| format!("bad CIDR prefix length in {item:?}"))?;
        return Ok(Rule::Net(ip, len));
    }
    let bare = item
        .strip_prefix('[')
        .and_then(|h| h.strip_suffix(']'))
        .unwrap_or(item);
    if let Ok(ip) = bare.parse::<IpAddr>() {
        return Ok(Rule::Net(ip, if ip.is_ipv4() { 32 } else { 128 }));
    }
    let name = item.to_ascii_lowercase();
    let valid = |n: &str| {
        !n.is_empty()
            && n.bytes()
                .all(|c| c.is_ascii_alphanumeric() || c == b'-' || c == b'.' || c == b'_')
    };
    match name.strip_prefix('.') {
        Some(s) if valid(s) => Ok(Rule::Suffix(s.to_string())),
        None if valid(&name) => Ok(Rule::Exact(name)),
        _ => Err(format!(
            "{item:?} is not a host name, .suffix, *, IP address or CIDR"
        )),
    }
}

/// True if `ip` is inside `net/len` (both of one family; an IPv4-mapped IPv6 address counts
/// as IPv4).
fn in_net(ip: IpAddr, net: IpAddr, len: u8) -> bool {
    let canon = |a: IpAddr| match a {
        IpAddr::V6(v6) => v6.to_ipv4_mapped().map_or(a, IpAddr::V4),
        v4 => v4,
    };
    match (canon(ip), net) {
        (IpAddr::V4(a), IpAddr::V4(n)) => {
            let mask = if len == 0 { 0 } else { u32::MAX << (32 - len) };
            u32::from(a) & mask == u32::from(n) & mask
        }
        (IpAddr::V6(a), IpAddr::V6(n)) => {
            let mask = if len == 0 {
                0
            } else {
                u128::MAX << (128 - len)
            };
            u128::from(a) & mask == u128::from(n) & mask
        }
        _ => false,
    }
}

/// Checks one `--no-outbound-proxy-for` item (the grammar of [`Bypass::parse`]).
///
/// Errors: what is wrong with it.
pub fn check_bypass_item(item: &str) -> Result<(), String> {
    parse_rule(item).map(|_| ())
}
