//! Text inputs of the resolver: `/etc/hosts`, `/etc/resolv.conf`, host names and pasted URLs.
//!
//! Owns parsing only (pure functions over `&str`); it must not open files or sockets — the
//! `dns` shell reads the files once and hands the text here. Host names are compared in one
//! canonical form everywhere: lowercase ASCII, labels joined by `.`, no trailing dot.

use std::net::{IpAddr, Ipv6Addr, SocketAddr};

/// Nameservers used from resolv.conf (musl and glibc `MAXNS`).
pub const MAX_NAMESERVERS: usize = 3;
/// Longest host name in text form (RFC 1035 §2.3.4: 255 wire bytes).
const MAX_HOST_LEN: usize = 253;

/// Canonical form of a host name: trailing dot dropped, lowercased, every label 1–63 bytes of
/// `[a-z0-9_-]` not starting or ending with `-`, at most 253 bytes in all.
///
/// Errors: a one-line reason (`"empty host name"`, `"invalid label \"…\""`, …).
pub fn canonical_name(name: &str) -> Result<String, String> {
    let name = name.strip_suffix('.').unwrap_or(name);
    if name.is_empty() {
        return Err("empty host name".into());
    }
    if name.len() > MAX_HOST_LEN {
        return Err(format!("host name longer than {MAX_HOST_LEN} bytes"));
    }
    let lower = name.to_ascii_lowercase();
    for label in lower.split('.') {
        let ok = !label.is_empty()
            && label.len() <= 63
            && !label.starts_with('-')
            && !label.ends_with('-')
            && label
                .bytes()
                .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || c == b'-' || c == b'_');
        if !ok {
            return Err(format!("invalid label {label:?} in host name"));
        }
    }
    Ok(lower)
}

/// Reduces what a user pasted to a bare host: scheme, user info, port, path, query, fragment
/// and one trailing dot are removed, the rest is [`canonical_name`]d. IP literals come back in
/// their standard text form (IPv6 without brackets).
///
/// `https://x.workers.dev/apiws`, `wss://X.Workers.Dev:443/`, `x.workers.dev.` → `x.workers.dev`.
/// Surrounding whitespace is trimmed. Errors: empty input, inner whitespace, a malformed scheme,
/// port or bracketed IPv6 literal, or an invalid host name.
pub fn normalize_host(input: &str) -> Result<String, String> {
    let s = input.trim();
    if s.is_empty() {
        return Err("empty host".into());
    }
    if s.chars().any(char::is_whitespace) {
        return Err(format!("host {s:?} contains spaces"));
    }
    let rest = match s.find("://") {
        Some(i) => {
            let scheme = &s[..i];
            let valid = scheme.starts_with(|c: char| c.is_ascii_alphabetic())
                && scheme
                    .chars()
                    .all(|c| c.is_ascii_alphanumeric() || "+-.".contains(c));
            if !valid {
                return Err(format!("bad URL scheme in {s:?}"));
            }
            &s[i + 3..]
        }
        None => s,
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let hostport = authority.rsplit_once('@').map_or(authority, |(_, h)| h);
    if let Ok(v6) = hostport.parse::<Ipv6Addr>() {
        return Ok(v6.to_string());
    }
    let host = if let Some(inner) = hostport.strip_prefix('[') {
        let (v6, after) = inner
            .split_once(']')
            .ok_or_else(|| format!("unclosed '[' in {s:?}"))?;
        check_port(after.strip_prefix(':'), after.is_empty(), s)?;
        let ip: Ipv6Addr = v6
            .parse()
            .map_err(|_| format!("bad IPv6 literal in {s:?}"))?;
        return Ok(ip.to_string());
    } else {
        match hostport.rsplit_once(':') {
            Some((h, p)) => {
                check_port(Some(p), false, s)?;
                h
            }
            None => hostport,
        }
    };
    if let Ok(ip) = host.parse::<IpAddr>() {
        return Ok(ip.to_string());
    }
    canonical_name(host)
}

/// `port` must be 1–5 digits fitting in u16, unless `none_ok` and there is no port.
fn check_port(port: Option<&str>, none_ok: bool, input: &str) -> Result<(), String> {
    match port {
        None if none_ok => Ok(()),
        Some(p)
            if !p.is_empty()
                && p.bytes().all(|c| c.is_ascii_digit())
                && p.parse::<u16>().is_ok() =>
        {
            Ok(())
        }
        _ => Err(format!("bad port in {input:?}")),
    }
}

/// Parses hosts(5) text into (canonical name, IPv4 address) pairs, each name once. `#` starts
/// a comment; each line is `ADDRESS NAME [ALIAS…]`; IPv6 lines are skipped (we resolve A
/// only); invalid names are skipped; the first line naming a host wins (glibc and musl order).
pub fn parse_hosts(text: &str) -> Vec<(String, IpAddr)> {
    let mut out: Vec<(String, IpAddr)> = Vec::new();
    for line in text.lines() {
        let line = line.split('#').next().unwrap_or("");
        let mut words = line.split_ascii_whitespace();
        let Some(Ok(ip)) = words.next().map(str::parse::<IpAddr>) else {
            continue;
        };
        if !ip.is_ipv4() {
            continue;
        }
        for name in words {
            if let Ok(n) = canonical_name(name) {
                if !out.iter().any(|(k, _)| *k == n) {
                    out.push((n, ip));
                }
            }
        }
    }
    out
}

/// Nameserver addresses from resolv.conf(5) text: `nameserver ADDR` lines, in order, at most
/// [`MAX_NAMESERVERS`], port 53. `#` and `;` start comments; addresses with a `%scope` and anything
/// that is not an IP literal are skipped. Our extension: `ADDR:PORT` or `[IPv6]:PORT` names
/// another port (for a local resolver on another port, and for tests: glibc and musl skip such
/// lines). `search`, `domain` and `options` are ignored (names are resolved as given: no
/// search list).
pub fn parse_resolv(text: &str) -> Vec<SocketAddr> {
    let mut out = Vec::new();
    for line in text.lines() {
        let line = line.split(['#', ';']).next().unwrap_or("");
        let mut words = line.split_ascii_whitespace();
        if words.next() != Some("nameserver") {
            continue;
        }
        let Some(word) = words.next() else { continue };
        let addr = match word.parse::<IpAddr>() {
            Ok(ip) => Some(SocketAddr::new(ip, 53)),
            Err(_) => word.parse::<SocketAddr>().ok().filter(|a| a.port() != 0),
        };
        if let Some(a) = addr {
            if out.len() < MAX_NAMESERVERS {
                out.push(a);
            }
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalize_pasted_urls() {
        for (input, want) in [
            ("https://x.workers.dev/apiws", "x.workers.dev"),
            ("wss://X.Workers.Dev:443/", "x.workers.dev"),
            ("x.workers.dev.", "x.workers.dev"),
            ("  x.workers.dev\n", "x.workers.dev"),
            (
                "http://user:pw@a-b.example.com:8080/p?q=1#f",
                "a-b.example.com",
            ),
            ("example.com?x", "example.com"),
            ("1.2.3.4:443", "1.2.3.4"),
            ("https://[2001:DB8::1]:443/x", "2001:db8::1"),
            ("::1", "::1"),
            ("_acme.Example.COM", "_acme.example.com"),
        ] {
            assert_eq!(normalize_host(input).as_deref(), Ok(want), "{input}");
        }
    }

    #[test]
    fn normalize_rejects() {
        for input in [
            "",
            "   ",
            "x .workers.dev",
            "https://",
            "https:///path",
            "x..workers.dev",
            "-x.workers.dev",
            "x-.workers.dev",
            "x.workers.dev:",
            "x.workers.dev:99999",
            "x.workers.dev:44a",
            "[::1",
            "[::1]x",
            "[nothost]:1",
            "1x://host",
            "héllo.dev",
            ".",
        ] {
            assert!(
                normalize_host(input).is_err(),
                "{input:?} accepted: {:?}",
                normalize_host(input)
            );
        }
        let long = vec!["a".repeat(63); 4].join(".");
        assert!(normalize_host(&long).is_err());
        assert!(normalize_host(&format!("{}.x", "a".repeat(64))).is_err());
    }

    #[test]
    fn canonical_is_case_insensitive_and_drops_one_dot() {
        assert_eq!(canonical_name("A.B.").as_deref(), Ok("a.b"));
        assert!(canonical_name("a.b..").is_err());
        assert!(canonical_name("").is_err());
    }

    #[test]
    fn hosts_file() {
        let text = "# comment line\n\
                    127.0.0.1\tlocalhost Localhost.localdomain # trailing comment\n\
                    ::1 localhost ip6-localhost\n\
                    10.0.0.5 Router.lan router\n\
                    10.0.0.6 router.lan\n\
                    fe80::1%eth0 linklocal\n\
                    bogus line here\n\
                    10.0.0.7 bad..name good.name\n";
        let h = parse_hosts(text);
        let get = |n: &str| h.iter().find(|(k, _)| k == n).map(|(_, ip)| ip);
        assert_eq!(get("localhost"), Some(&IpAddr::from([127, 0, 0, 1])));
        assert_eq!(
            get("localhost.localdomain"),
            Some(&IpAddr::from([127, 0, 0, 1]))
        );
        assert_eq!(
            get("router.lan"),
            Some(&IpAddr::from([10, 0, 0, 5])),
            "first line wins"
        );
        assert_eq!(get("router"), Some(&IpAddr::from([10, 0, 0, 5])));
        assert_eq!(get("good.name"), Some(&IpAddr::from([10, 0, 0, 7])));
        assert!(get("ip6-localhost").is_none() && get("linklocal").is_none());
        assert_eq!(h.len(), 5);
    }

    #[test]
    fn resolv_conf() {
        let text = "# generated\nsearch lan\nnameserver 192.168.1.1 # router\n\
                    ;nameserver 9.9.9.9\nnameserver fe80::1%br-lan\nnameserver ::1\n\
                    nameserver nonsense\noptions timeout:1\nnameserver 1.1.1.1\nnameserver 8.8.8.8\n";
        let ns = parse_resolv(text);
        assert_eq!(
            ns,
            vec![
                SocketAddr::from(([192, 168, 1, 1], 53)),
                "[::1]:53".parse().unwrap(),
                SocketAddr::from(([1, 1, 1, 1], 53)),
            ]
        );
        assert!(parse_resolv("").is_empty());
        let ported = "nameserver 127.0.0.1:5353\nnameserver [::1]:54\nnameserver 127.0.0.1:0\n";
        assert_eq!(
            parse_resolv(ported),
            vec![
                SocketAddr::from(([127, 0, 0, 1], 5353)),
                "[::1]:54".parse().unwrap()
            ]
        );
    }
}
