//! The server address put in links: [`choose_server`] (sans-IO: the configuration's facts and
//! the machine's interface addresses in, the host and a note out) and [`interface_addresses`]
//! (the one read: `getifaddrs(3)`, no socket opened, no packet sent).
//!
//! Rules, in order: `--server` / `--link-ip` as given; else `run`'s listen address when `--host`
//! names a specific one, or when `--host` is not given (`run` then listens on 127.0.0.1 only,
//! so only a 127.0.0.1 link works; the note names this machine's LAN address to pass as
//! `--host`); else (`--host 0.0.0.0` / `::`) a guess among this machine's **private** addresses — RFC 1918
//! IPv4 (`10/8`, `172.16/12`, `192.168/16`) and, when listening on `::`, IPv6 ULA (`fc00::/7`).
//! Carrier-grade NAT space (`100.64/10`) is the ISP's side of a router, so it is not private
//! here; neither is any public address. A guess prefers the OpenWrt LAN bridge (`br-lan`), then
//! 192.168, 10, 172.16, ULA, and puts container bridges (`docker*`, `veth*`, `virbr*`) last. A
//! machine with only public addresses gets an error asking for `--link-ip`; one with only
//! loopback gets 127.0.0.1 with a note saying so.

use std::ffi::CStr;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

/// At most this many interface addresses are looked at (a router has a handful).
pub const MAX_INTERFACE_ADDRS: usize = 256;

/// One address of one interface of this machine.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Candidate {
    /// Interface name (`br-lan`, `eth0`).
    pub interface: String,
    /// Its address.
    pub ip: IpAddr,
}

/// What the link's server is chosen from.
#[derive(Clone, Copy, Debug)]
pub struct Facts<'a> {
    /// `--server`, else `--link-ip` (`TG_LINK_IP`, or the config file's `link-ip`).
    pub explicit: Option<&'a str>,
    /// `run`'s listen address (`--host`, default 127.0.0.1).
    pub listen: IpAddr,
    /// `--host` was given (flag, variable or file).
    pub host_given: bool,
    /// The flag `listen` came from, for the note: `--host`, or `--socks5` for its links.
    pub flag: &'static str,
}

/// [`choose_server`] with this machine's addresses, read only when a guess is needed: with
/// `--server`/`--link-ip` or a specific `--host` no interface is listed (no netlink request,
/// which also hangs under qemu-user's emulation of big-endian MIPS).
pub fn server(facts: Facts<'_>) -> Result<(String, Option<String>), String> {
    if facts.explicit.is_some() || (facts.host_given && !facts.listen.is_unspecified()) {
        return choose_server(facts, &[]);
    }
    choose_server(facts, &interface_addresses())
}

/// The chosen host and, when it was guessed, a note for stderr saying so and which.
/// Errors (one line, no flag name): only public addresses, and `--link-ip` was not given.
pub fn choose_server(
    facts: Facts<'_>,
    candidates: &[Candidate],
) -> Result<(String, Option<String>), String> {
    if let Some(h) = facts.explicit {
        return Ok((h.to_string(), None));
    }
    if facts.host_given && !facts.listen.is_unspecified() {
        return Ok((facts.listen.to_string(), None));
    }
    let family_ok = |ip: &IpAddr| ip.is_ipv4() || facts.listen.is_ipv6();
    let mut private: Vec<(u8, &Candidate)> = candidates
        .iter()
        .filter(|c| family_ok(&c.ip))
        .filter_map(|c| private_rank(c).map(|r| (r, c)))
        .collect();
    private.sort_by_key(|&(r, _)| r); // stable: ties keep the system's order
    if !facts.host_given {
        // `run` listens on loopback only: a link to any other address would not connect.
        let lan = match private.first() {
            Some(&(_, c)) => format!("--host {} (this machine's LAN address)", c.ip),
            None => "--host with this machine's LAN address".to_string(),
        };
        let note = format!(
            "link: --host not given: `run` listens on {} only, so this link works on this \
             machine only; to serve phones on the LAN pass {lan}, or --host 0.0.0.0 (and \
             --link-ip HOST if clients dial another address)",
            facts.listen
        );
        return Ok((facts.listen.to_string(), Some(note)));
    }
    // 0.0.0.0 (or 127.0.0.1 by default) serves IPv4 only; `::` serves both, IPv4 preferred.
    let why = format!("{} is {}", facts.flag, facts.listen);
    let shown = |c: &Candidate| format!("{} ({})", c.ip, c.interface);
    if let Some(&(_, best)) = private.first() {
        let others: Vec<String> = private[1..].iter().map(|&(_, c)| shown(c)).collect();
        let others = if others.is_empty() {
            String::new()
        } else {
            format!("; others: {}", others.join(", "))
        };
        let picked = shown(best);
        let note = format!(
            "link: {why}: guessed the LAN address {picked}{others}; pass --link-ip HOST to \
             choose"
        );
        return Ok((best.ip.to_string(), Some(note)));
    }
    let outside: Vec<String> = candidates
        .iter()
        .filter(|c| family_ok(&c.ip) && is_routable(c.ip))
        .map(shown)
        .collect();
    if !outside.is_empty() {
        return Err(format!(
            "{why} and this machine has no private LAN address, only {}: a link to a \
             non-private address is never guessed; pass --link-ip HOST (the address clients dial)",
            outside.join(", ")
        ));
    }
    let note = format!(
        "link: {why} and this machine has no LAN address: using 127.0.0.1, which only this \
         machine can dial; pass --link-ip HOST"
    );
    Ok((Ipv4Addr::LOCALHOST.to_string(), Some(note)))
}

/// Preference of a private address (lower is better), `None` for any other address.
fn private_rank(c: &Candidate) -> Option<u8> {
    let class = match c.ip {
        IpAddr::V4(a) => match a.octets() {
            [192, 168, ..] => 1,
            [10, ..] => 2,
            [172, b, ..] if (16..32).contains(&b) => 3,
            _ => return None,
        },
        IpAddr::V6(a) if is_ula(a) => 4,
        IpAddr::V6(_) => return None,
    };
    let name = c.interface.as_str();
    Some(if name == "br-lan" {
        0
    } else if ["docker", "veth", "virbr"]
        .iter()
        .any(|p| name.starts_with(p))
    {
        class + 10
    } else {
        class
    })
}

/// `fc00::/7`, unique local IPv6 (RFC 4193).
fn is_ula(a: Ipv6Addr) -> bool {
    a.segments()[0] & 0xfe00 == 0xfc00
}

/// Neither loopback, link-local, multicast nor unspecified: an address other machines could
/// dial (public, CGNAT or private).
fn is_routable(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => {
            !(a.is_loopback()
                || a.is_link_local()
                || a.is_multicast()
                || a.is_broadcast()
                || a.is_unspecified())
        }
        IpAddr::V6(a) => {
            !(a.is_loopback()
                || a.is_multicast()
                || a.is_unspecified()
                || a.segments()[0] & 0xffc0 == 0xfe80)
        }
    }
}

/// This machine's interface addresses (IPv4 and IPv6, up to [`MAX_INTERFACE_ADDRS`]) in the
/// order `getifaddrs(3)` gives them; empty if it fails.
pub fn interface_addresses() -> Vec<Candidate> {
    let mut head: *mut libc::ifaddrs = std::ptr::null_mut();
    // SAFETY: getifaddrs writes a list head we free below with freeifaddrs, exactly once.
    if unsafe { libc::getifaddrs(&mut head) } != 0 {
        return Vec::new();
    }
    let mut out = Vec::new();
    let mut cur = head;
    while !cur.is_null() && out.len() < MAX_INTERFACE_ADDRS {
        // SAFETY: `cur` is a node of the list getifaddrs returned, alive until freeifaddrs.
        let ifa = unsafe { &*cur };
        cur = ifa.ifa_next;
        if ifa.ifa_addr.is_null() || ifa.ifa_name.is_null() {
            continue;
        }
        // SAFETY: ifa_addr points to a sockaddr whose family says which sockaddr_* it is;
        // ifa_name is a NUL-terminated string; both live as long as the list.
        let (family, name) = unsafe {
            (
                i32::from((*ifa.ifa_addr).sa_family),
                CStr::from_ptr(ifa.ifa_name).to_string_lossy().into_owned(),
            )
        };
        let ip = match family {
            libc::AF_INET => {
                // SAFETY: AF_INET: the sockaddr is a sockaddr_in.
                let sin = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in) };
                // s_addr holds the address in network order: its bytes in memory order.
                IpAddr::V4(Ipv4Addr::from(sin.sin_addr.s_addr.to_ne_bytes()))
            }
            libc::AF_INET6 => {
                // SAFETY: AF_INET6: the sockaddr is a sockaddr_in6.
                let sin6 = unsafe { &*(ifa.ifa_addr as *const libc::sockaddr_in6) };
                IpAddr::V6(Ipv6Addr::from(sin6.sin6_addr.s6_addr))
            }
            _ => continue,
        };
        out.push(Candidate {
            interface: name,
            ip,
        });
    }
    // SAFETY: `head` came from a successful getifaddrs and is freed once.
    unsafe { libc::freeifaddrs(head) };
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn cand(interface: &str, ip: &str) -> Candidate {
        Candidate {
            interface: interface.into(),
            ip: ip.parse().unwrap(),
        }
    }

    fn facts(listen: &str, host_given: bool) -> Facts<'static> {
        Facts {
            flag: "--host",
            explicit: None,
            listen: listen.parse().unwrap(),
            host_given,
        }
    }

    /// A double-NAT router: WAN side behind the ISP's CGNAT and its own LAN bridge.
    fn router() -> Vec<Candidate> {
        vec![
            cand("lo", "127.0.0.1"),
            cand("eth0", "100.64.12.7"),
            cand("docker0", "172.17.0.1"),
            cand("br-lan", "10.1.0.1"),
            cand("wlan0", "192.168.8.20"),
            cand("br-lan", "fd00::1"),
            cand("br-lan", "fe80::1"),
        ]
    }

    #[test]
    fn explicit_and_specific_hosts_are_used_as_given() {
        let mut f = facts("0.0.0.0", true);
        f.explicit = Some("proxy.lan");
        assert_eq!(
            choose_server(f, &router()).unwrap(),
            ("proxy.lan".into(), None)
        );
        let f = facts("203.0.113.9", true);
        assert_eq!(
            choose_server(f, &[]).unwrap(),
            ("203.0.113.9".into(), None),
            "a public --host is the user's choice"
        );
        assert_eq!(choose_server(facts("::1", true), &[]).unwrap().0, "::1");
    }

    #[test]
    fn a_guess_prefers_br_lan_then_192_168_and_says_so() {
        let (host, note) = choose_server(facts("0.0.0.0", true), &router()).unwrap();
        assert_eq!(host, "10.1.0.1", "br-lan first");
        let note = note.expect("a guess is announced");
        assert!(
            note.starts_with("link: --host is 0.0.0.0: guessed the LAN address 10.1.0.1 (br-lan)"),
            "{note}"
        );
        assert!(note.contains("192.168.8.20 (wlan0)") && note.contains("--link-ip"));
        assert!(
            !note.contains("100.64.12.7"),
            "CGNAT is not a LAN address: {note}"
        );
        assert!(
            !note.contains("fd00::1"),
            "0.0.0.0 serves IPv4 only: {note}"
        );
        let no_bridge: Vec<Candidate> = router()
            .into_iter()
            .filter(|c| c.interface != "br-lan")
            .collect();
        let (host, _) = choose_server(facts("0.0.0.0", true), &no_bridge).unwrap();
        assert_eq!(host, "192.168.8.20", "docker's bridge comes last");
        let only_docker = vec![cand("docker0", "172.17.0.1"), cand("eth0", "10.0.0.5")];
        let (host, _) = choose_server(facts("0.0.0.0", true), &only_docker).unwrap();
        assert_eq!(host, "10.0.0.5");
    }

    /// Without `--host`, `run` listens on 127.0.0.1 only: the link is the one that connects
    /// (127.0.0.1, never a LAN address nothing listens on), and the note names the LAN
    /// address to pass as `--host`; on a machine with only public addresses too.
    #[test]
    fn without_host_the_link_is_loopback_and_the_note_names_the_lan_address() {
        let (host, note) = choose_server(facts("127.0.0.1", false), &router()).unwrap();
        assert_eq!(host, "127.0.0.1");
        let note = note.unwrap();
        assert!(note.starts_with("link: --host not given"), "{note}");
        assert!(note.contains("listens on 127.0.0.1 only"), "{note}");
        assert!(
            note.contains("--host 10.1.0.1 (this machine's LAN"),
            "{note}"
        );
        let wan = vec![cand("eth0", "192.0.2.2")];
        let (host, note) = choose_server(facts("127.0.0.1", false), &wan).unwrap();
        assert_eq!(host, "127.0.0.1");
        assert!(note
            .unwrap()
            .contains("--host with this machine's LAN address"));
    }

    #[test]
    fn ipv6_ula_only_when_listening_on_both_families() {
        let v6 = vec![cand("lan", "fd12:3456::1"), cand("wan", "2001:db8::7")];
        let (host, _) = choose_server(facts("::", true), &v6).unwrap();
        assert_eq!(host, "fd12:3456::1");
        let e = choose_server(facts("0.0.0.0", true), &v6).unwrap();
        assert_eq!(e.0, "127.0.0.1", "IPv4 listener, no IPv4 address at all");
        let mixed = vec![cand("lan", "fd12::1"), cand("lan", "192.168.1.1")];
        assert_eq!(
            choose_server(facts("::", true), &mixed).unwrap().0,
            "192.168.1.1"
        );
    }

    #[test]
    fn a_public_or_cgnat_address_is_never_guessed() {
        let wan = vec![
            cand("lo", "127.0.0.1"),
            cand("eth0", "203.0.113.7"),
            cand("ppp0", "100.64.0.9"),
            cand("eth0", "2001:db8::7"),
        ];
        let e = choose_server(facts("::", true), &wan).unwrap_err();
        assert!(
            e.contains("no private LAN address, only 203.0.113.7 (eth0), 100.64.0.9 (ppp0)"),
            "{e}"
        );
        assert!(e.contains("pass --link-ip HOST"), "{e}");
        assert!(choose_server(facts("0.0.0.0", true), &wan).is_err());
    }

    #[test]
    fn only_loopback_falls_back_to_127_0_0_1_with_a_note() {
        let lo = vec![
            cand("lo", "127.0.0.1"),
            cand("lo", "::1"),
            cand("eth0", "169.254.3.3"),
        ];
        let (host, note) = choose_server(facts("0.0.0.0", true), &lo).unwrap();
        assert_eq!(host, "127.0.0.1");
        assert!(note.unwrap().contains("no LAN address"));
        let (host, _) = choose_server(facts("0.0.0.0", true), &[]).unwrap();
        assert_eq!(host, "127.0.0.1");
    }

    #[test]
    fn interface_addresses_include_loopback() {
        // Every Linux machine (and test container) has lo with 127.0.0.1.
        let all = interface_addresses();
        assert!(
            all.iter().any(|c| c.ip == IpAddr::V4(Ipv4Addr::LOCALHOST)),
            "{all:?}"
        );
        assert!(all.len() <= MAX_INTERFACE_ADDRS);
    }
}
