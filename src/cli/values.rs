//! Value grammars of the `run` flags other than durations: booleans, IP addresses, `DC:IP[:PORT]`,
//! Cloudflare endpoints, tier lists, link hosts, bounded whole numbers, readable files.
//!
//! Each parser takes the value's text and returns the value or a message without the flag's
//! name (the caller adds it, see [`CliError`](super::CliError)). The only I/O is
//! [`check_readable_file`] opening a file to see that it can be read.

use std::net::{IpAddr, SocketAddr};
use std::path::Path;

use crate::config::{CfEndpoint, Tier};

/// `1`, `true`, `yes`, `on` → true; `0`, `false`, `no`, `off` → false (any case).
pub fn parse_bool(s: &str) -> Result<bool, String> {
    match s.trim().to_ascii_lowercase().as_str() {
        "1" | "true" | "yes" | "on" => Ok(true),
        "0" | "false" | "no" | "off" => Ok(false),
        _ => Err(format!(
            "'{s}' is not a boolean (use 1/true/yes/on or 0/false/no/off)"
        )),
    }
}

/// An IP address, IPv6 optionally in brackets (`[::]`).
pub fn parse_ip(s: &str) -> Result<IpAddr, String> {
    let inner = s
        .strip_prefix('[')
        .and_then(|r| r.strip_suffix(']'))
        .unwrap_or(s);
    inner
        .parse()
        .map_err(|_| format!("'{s}' is not an IP address"))
}

/// `HOST:PORT` of a listener (`--transparent`, `--socks5`): an IPv4 address or a bracketed IPv6
/// one and a port (0 = any free port); `off` = no listener.
pub fn parse_listen_addr(s: &str) -> Result<Option<SocketAddr>, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    s.parse::<SocketAddr>()
        .map(Some)
        .map_err(|_| format!("'{s}' is not HOST:PORT (IPv6 in brackets: [::1]:1080) or off"))
}

/// `ADDR[/LEN]` (`--transparent-skip`): an IPv4 or IPv6 address, a missing length is the whole
/// address (/32, /128); host bits are cleared.
pub fn parse_prefix(s: &str) -> Result<(IpAddr, u8), String> {
    let (addr, len) = match s.split_once('/') {
        Some((a, l)) => (a, Some(l)),
        None => (s, None),
    };
    let ip = parse_ip(addr)?;
    let max = if ip.is_ipv4() { 32 } else { 128 };
    let len = match len {
        None => max,
        Some(l) => match l.parse::<u8>() {
            Ok(n) if n <= max => n,
            _ => return Err(format!("'{s}': prefix length must be 0-{max}")),
        },
    };
    Ok((crate::route::tgranges::mask(ip, len), len))
}

/// A network interface name (`--lan-iface`): what our nftables table may name
/// (`route::firewall::valid_iface`: 1–15 bytes of letters, digits, `-`, `_`, `.`, not `.` or
/// `..`), so a name the flag takes is one `firewall install` takes too.
pub fn parse_iface(s: &str) -> Result<String, String> {
    if crate::route::firewall::valid_iface(s) {
        Ok(s.to_string())
    } else {
        Err(format!(
            "'{s}' is not an interface name (1-15 letters, digits, - _ .)"
        ))
    }
}

/// An `http://` or `https://` URL, or `off` (`None`).
pub fn parse_url_or_off(s: &str) -> Result<Option<String>, String> {
    if s.eq_ignore_ascii_case("off") {
        return Ok(None);
    }
    let rest = s
        .strip_prefix("https://")
        .or_else(|| s.strip_prefix("http://"));
    match rest {
        Some(r) if !r.is_empty() && !r.starts_with('/') && !s.contains(char::is_whitespace) => {
            Ok(Some(s.to_string()))
        }
        _ => Err(format!("'{s}' is not an http(s) URL or off")),
    }
}

/// `DC:IP[:PORT]` with an IPv4 address or a bracketed IPv6 one (`2:[2001:db8::1]:443`); DC is
/// 1..=32767 (fits the init's i16), PORT 1..=65535, default 443.
pub fn parse_dc_addr(s: &str) -> Result<(u16, SocketAddr), String> {
    let shape = "expected DC:IP[:PORT] (IPv6 in brackets)";
    let (dc, rest) = s.split_once(':').ok_or_else(|| format!("'{s}': {shape}"))?;
    let dc: u16 = match dc.trim().parse() {
        Ok(n) if (1..=32_767).contains(&n) => n,
        _ => return Err(format!("'{s}': DC must be a number 1-32767")),
    };
    let (ip, port): (IpAddr, Option<&str>) = if let Some(r) = rest.strip_prefix('[') {
        let (ip, after) = r
            .split_once(']')
            .ok_or_else(|| format!("'{s}': missing ']'"))?;
        let ip = ip
            .parse::<std::net::Ipv6Addr>()
            .map_err(|_| format!("'{s}': bad IPv6 address"))?;
        let port = match after {
            "" => None,
            a => Some(
                a.strip_prefix(':')
                    .ok_or_else(|| format!("'{s}': {shape}"))?,
            ),
        };
        (IpAddr::V6(ip), port)
    } else {
        if rest.matches(':').count() > 1 {
            return Err(format!(
                "'{s}': IPv6 addresses need brackets: DC:[IPv6]:PORT"
            ));
        }
        let (ip, port) = match rest.split_once(':') {
            Some((ip, p)) => (ip, Some(p)),
            None => (rest, None),
        };
        let ip = ip
            .parse::<std::net::Ipv4Addr>()
            .map_err(|_| format!("'{s}': bad IPv4 address"))?;
        (IpAddr::V4(ip), port)
    };
    let port = match port {
        None => 443,
        Some(p) => match p.parse::<u16>() {
            Ok(n) if n > 0 => n,
            _ => return Err(format!("'{s}': port must be 1-65535")),
        },
    };
    Ok((dc, SocketAddr::new(ip, port)))
}

/// A Worker or Cloudflare domain: a host name, IP literal or pasted URL
/// (`https://x.workers.dev/apiws` → `x.workers.dev`), with an optional `:PORT` (443 default;
/// other ports are a test seam).
pub fn parse_cf_endpoint(s: &str) -> Result<CfEndpoint, String> {
    let t = s.trim();
    let after_scheme = t.split_once("://").map_or(t, |(_, r)| r);
    let authority = after_scheme.split(['/', '?', '#']).next().unwrap_or("");
    let port = match authority.rsplit_once(':') {
        Some((h, p)) if !h.ends_with(']') || authority.starts_with('[') => {
            if h.contains(':') && !h.starts_with('[') {
                443 // a bare IPv6 literal: no port
            } else {
                p.parse::<u16>().map_err(|_| format!("bad port in {t:?}"))?
            }
        }
        _ => 443,
    };
    if port == 0 {
        return Err(format!("bad port in {t:?}"));
    }
    let host = crate::dns::normalize_host(t)?;
    Ok(CfEndpoint { host, port })
}

/// A `--cf-worker-domain` value: [`parse_cf_endpoint`], optionally followed by `@ACCOUNT`, the
/// account group its daily quota is shared with (`route::quota`; letters, digits, `.`, `-`, `_`,
/// at most 63). Errors: a bad endpoint, or an empty or odd group name.
pub fn parse_worker_endpoint(s: &str) -> Result<(CfEndpoint, Option<String>), String> {
    let t = s.trim();
    let Some((host, group)) = t.rsplit_once('@') else {
        return Ok((parse_cf_endpoint(t)?, None));
    };
    let ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '.' | '-' | '_');
    if group.is_empty() || group.len() > 63 || !group.chars().all(ok) {
        return Err(format!(
            "{t:?}: the account after '@' must be 1-63 letters, digits, '.', '-' or '_'"
        ));
    }
    Ok((parse_cf_endpoint(host)?, Some(group.to_ascii_lowercase())))
}

/// `ws,tcp`: known tier names, each at most once, at least one.
pub fn parse_tier_order(s: &str) -> Result<Vec<Tier>, String> {
    let mut tiers = Vec::new();
    for name in s.split(',').map(str::trim).filter(|n| !n.is_empty()) {
        let tier = Tier::parse(name)
            .ok_or_else(|| format!("unknown tier '{name}' (known: {})", Tier::names()))?;
        if tiers.contains(&tier) {
            return Err(format!("tier '{name}' listed twice"));
        }
        tiers.push(tier);
    }
    if tiers.is_empty() {
        return Err(format!("must name at least one tier ({})", Tier::names()));
    }
    Ok(tiers)
}

/// A host for links: an IP address or a DNS name (letters, digits, `-`, dots; ≤ 253 chars).
pub fn parse_link_host(s: &str) -> Result<String, String> {
    if let Ok(ip) = parse_ip(s) {
        return Ok(ip.to_string());
    }
    let label_ok = |l: &str| {
        !l.is_empty()
            && l.len() <= 63
            && !l.starts_with('-')
            && !l.ends_with('-')
            && l.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-')
    };
    let name = s.strip_suffix('.').unwrap_or(s);
    if name.len() <= 253 && name.split('.').all(label_ok) {
        Ok(name.to_string())
    } else {
        Err(format!("'{s}' is neither an IP address nor a host name"))
    }
}

/// A whole number `min..=max` (decimal, no sign).
pub(super) fn parse_in_range(s: &str, min: u64, max: u64) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(n) if (min..=max).contains(&n) => Ok(n),
        _ => Err(format!("'{s}' must be a whole number {min}-{max}")),
    }
}

/// Opens `path` to check it is a readable regular file; the message names the path.
pub(super) fn check_readable_file(path: &Path) -> Result<(), String> {
    let f =
        std::fs::File::open(path).map_err(|e| format!("cannot read {}: {e}", path.display()))?;
    match f.metadata() {
        Ok(m) if m.is_file() => Ok(()),
        _ => Err(format!("{} is not a regular file", path.display())),
    }
}

/// A `--fronting-domain`: a DNS name for the TLS SNI of the `front` tier (a pasted URL is
/// reduced to its host, the name lower-cased). Errors: an IP literal (an SNI carries names
/// only, RFC 6066 §3) or anything [`crate::dns::normalize_host`] rejects.
pub fn parse_fronting_domain(s: &str) -> Result<String, String> {
    let host = crate::dns::normalize_host(s)?;
    if host.parse::<IpAddr>().is_ok() {
        return Err(format!(
            "'{}': a fronting domain must be a DNS name (the TLS SNI carries no IP address)",
            s.trim()
        ));
    }
    Ok(host)
}

/// True for an address only this machine or its LAN can reach: loopback (127/8, `::1`), RFC 1918
/// (10/8, 172.16/12, 192.168/16), link-local (169.254/16, `fe80::/10`) and IPv6 unique local
/// (`fc00::/7`, RFC 4193); IPv4-mapped IPv6 judged as IPv4. False for everything else, the
/// any-addresses `0.0.0.0` and `::` (they listen on the WAN side too) and carrier-grade NAT
/// space (100.64/10, the ISP's side of a router) included. Where `--socks5` may listen without
/// `--socks5-public`.
pub fn is_lan_or_loopback(ip: IpAddr) -> bool {
    match ip.to_canonical() {
        IpAddr::V4(a) => a.is_loopback() || a.is_private() || a.is_link_local(),
        IpAddr::V6(a) => {
            a.is_loopback()
                || a.segments()[0] & 0xfe00 == 0xfc00
                || a.segments()[0] & 0xffc0 == 0xfe80
        }
    }
}

/// A `--doh` value: an `https://HOST[:PORT][/PATH]` URL (RFC 8484; path `/dns-query` when
/// none is given). Errors: another scheme (DoH is HTTPS only), or what
/// [`parse_url`](crate::route::cflist::parse_url) rejects (user info, bad host or port).
pub fn parse_doh_url(s: &str) -> Result<crate::route::cflist::Url, String> {
    if !s.starts_with("https://") {
        return Err(format!(
            "{s:?}: a DoH server must be an https:// URL (RFC 8484), e.g. \
             https://1.1.1.1/dns-query"
        ));
    }
    let mut url = crate::route::cflist::parse_url(s)?;
    if !s["https://".len()..].contains(['/', '?']) {
        url.path = "/dns-query".into();
    }
    Ok(url)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn way_in_values() {
        assert_eq!(parse_listen_addr("off"), Ok(None));
        assert_eq!(
            parse_listen_addr("[::1]:1080"),
            Ok(Some("[::1]:1080".parse().unwrap()))
        );
        assert!(parse_listen_addr("::1:1080").is_err());
        assert!(parse_listen_addr("127.0.0.1").is_err());
        let p = |s: &str| parse_prefix(s).map(|(ip, len)| format!("{ip}/{len}"));
        assert_eq!(p("192.168.1.7"), Ok("192.168.1.7/32".into()));
        assert_eq!(p("192.168.1.7/24"), Ok("192.168.1.0/24".into()));
        assert_eq!(p("fd00::1/64"), Ok("fd00::/64".into()));
        assert!(p("10.0.0.0/33").is_err() && p("fd00::/129").is_err() && p("x/8").is_err());
        assert_eq!(parse_iface("br-lan"), Ok("br-lan".into()));
        for bad in [
            "",
            "a b",
            "eth0;",
            "sixteen-bytes-xx",
            "\"a\"",
            "a@b",
            ".",
            "..",
        ] {
            assert!(parse_iface(bad).is_err(), "{bad:?}");
        }
        assert_eq!(parse_url_or_off("OFF"), Ok(None));
        assert!(parse_url_or_off("http://127.0.0.1:8/cidr.txt")
            .unwrap()
            .is_some());
        for bad in [
            "ftp://x",
            "https://",
            "https:///x",
            "cidr.txt",
            "https://a b",
        ] {
            assert!(parse_url_or_off(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn lan_or_loopback_addresses() {
        let lan = "127.0.0.1 127.9.9.9 10.0.0.1 172.16.0.1 172.31.255.255 192.168.1.1 \
                   169.254.1.1 ::1 fd00::1 fc12::3 fe80::1 ::ffff:192.168.1.1";
        for a in lan.split_whitespace() {
            assert!(is_lan_or_loopback(a.parse().unwrap()), "{a}");
        }
        let not = "0.0.0.0 :: 8.8.8.8 100.64.0.1 172.32.0.1 192.169.0.1 203.0.113.5 \
                   149.154.167.51 2001:db8::1 2a00::1 ::ffff:8.8.8.8 224.0.0.1 255.255.255.255";
        for a in not.split_whitespace() {
            assert!(!is_lan_or_loopback(a.parse().unwrap()), "{a}");
        }
    }

    #[test]
    fn dc_addr_forms() {
        let ok = |s: &str, dc, a: &str| assert_eq!(parse_dc_addr(s), Ok((dc, a.parse().unwrap())));
        ok("2:149.154.167.220", 2, "149.154.167.220:443");
        ok("4:127.0.0.1:8443", 4, "127.0.0.1:8443");
        ok("203:[2001:db8::1]", 203, "[2001:db8::1]:443");
        ok("5:[::1]:9", 5, "[::1]:9");
        let bad = "2 0:1.2.3.4 40000:1.2.3.4 x:1.2.3.4 2:1.2.3 2:1.2.3.4:0 2:1.2.3.4:70000 \
                   2:2001:db8::1 2:[1.2.3.4] 2:[::1 2:[::1]443 2:host.example 2:";
        for b in bad.split_whitespace() {
            assert!(parse_dc_addr(b).is_err(), "{b:?} accepted");
        }
        assert!(parse_dc_addr("2:2001:db8::1")
            .unwrap_err()
            .contains("brackets"));
    }

    /// Review (issue 22 part 4): the messages naming the known tiers left `cfproxy-ws` out
    /// (`unknown tier 'cfproxy_ws' (known: ws, …, mtproto, tcp)`). Every tier is named, and
    /// each one parses.
    #[test]
    fn tier_order_errors_name_every_tier() {
        let unknown = parse_tier_order("cfproxy_ws").unwrap_err();
        let none = parse_tier_order(" , ").unwrap_err();
        for t in Tier::ALL {
            assert!(unknown.contains(t.name()), "{unknown} misses {}", t.name());
            assert!(none.contains(t.name()), "{none} misses {}", t.name());
            assert_eq!(parse_tier_order(t.name()), Ok(vec![t]));
        }
    }

    #[test]
    fn tier_orders() {
        assert_eq!(parse_tier_order("tcp, ws"), Ok(vec![Tier::Tcp, Tier::Ws]));
        assert_eq!(parse_tier_order("tcp"), Ok(vec![Tier::Tcp]));
        assert!(parse_tier_order("ws,ws").unwrap_err().contains("twice"));
        assert!(parse_tier_order("ws,cloud")
            .unwrap_err()
            .contains("unknown tier 'cloud'"));
        assert_eq!(
            parse_tier_order("worker,cfproxy,ws"),
            Ok(vec![Tier::Worker, Tier::CfProxy, Tier::Ws])
        );
        assert!(parse_tier_order(" , ").is_err());
    }

    #[test]
    fn fronting_domains_are_names_never_addresses() {
        assert_eq!(
            parse_fronting_domain("https://Allowed.Example.org/").unwrap(),
            "allowed.example.org"
        );
        let e = parse_fronting_domain("127.0.0.1").unwrap_err();
        assert!(e.contains("DNS name"), "{e}");
        assert!(parse_fronting_domain("[::1]").is_err());
        assert!(parse_fronting_domain("").is_err());
        assert!(parse_fronting_domain("bad name").is_err());
    }

    #[test]
    fn cf_endpoints_accept_urls_and_ports() {
        let e = parse_cf_endpoint("https://My.Workers.Dev/apiws").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("my.workers.dev", 443));
        let e = parse_cf_endpoint("127.0.0.1:8443").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("127.0.0.1", 8443));
        let e = parse_cf_endpoint("wss://x.example.com:444/").unwrap();
        assert_eq!((e.host.as_str(), e.port), ("x.example.com", 444));
        assert!(parse_cf_endpoint("bad host").is_err());
        assert!(parse_cf_endpoint("x.example.com:0").is_err());
    }

    #[test]
    fn worker_endpoints_may_name_their_account() {
        let (e, g) = parse_worker_endpoint("https://t.example.org/apiws@Alice").unwrap();
        assert_eq!(
            (e.host.as_str(), e.port, g.as_deref()),
            ("t.example.org", 443, Some("alice"))
        );
        let (e, g) = parse_worker_endpoint("t.example.org:8443@bob_2").unwrap();
        assert_eq!((e.port, g.as_deref()), (8443, Some("bob_2")));
        assert_eq!(parse_worker_endpoint("a.b.workers.dev").unwrap().1, None);
        for bad in [
            "t.example.org@",
            "t.example.org@a b",
            "t.example.org@a/b",
            "@alice",
        ] {
            assert!(parse_worker_endpoint(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn bools_and_link_hosts() {
        for t in ["1", "TRUE", "yes", "on"] {
            assert_eq!(parse_bool(t), Ok(true));
        }
        for f in ["0", "false", "No", "off"] {
            assert_eq!(parse_bool(f), Ok(false));
        }
        assert!(parse_bool("2").is_err());
        assert_eq!(parse_link_host("[::1]"), Ok("::1".to_string()));
        assert_eq!(
            parse_link_host("proxy.example.org."),
            Ok("proxy.example.org".into())
        );
        for bad in ["", "-a.b", "a..b", "a_b", "a b", &"x".repeat(64)] {
            assert!(parse_link_host(bad).is_err(), "{bad:?} accepted");
        }
    }

    #[test]
    fn doh_urls_are_https_with_a_default_path() {
        let u = parse_doh_url("https://1.1.1.1").unwrap();
        assert_eq!(
            (u.host.as_str(), u.port, u.path.as_str()),
            ("1.1.1.1", 443, "/dns-query")
        );
        let u = parse_doh_url("https://dns.example:8443/q?x=1").unwrap();
        assert_eq!((u.port, u.path.as_str()), (8443, "/q?x=1"));
        for bad in ["http://1.1.1.1/dns-query", "1.1.1.1", "tls://1.1.1.1"] {
            let e = parse_doh_url(bad).unwrap_err();
            assert!(e.contains("https://"), "{bad}: {e}");
        }
        assert!(parse_doh_url("https://u@1.1.1.1/").is_err());
    }
}
