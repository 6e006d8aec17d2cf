//! Transparent mode's firewall, sans-IO: the text of OUR nftables table (`table inet
//! tg_ws_proxy`) that redirects LAN TCP toward Telegram's ranges to the `--transparent` port
//! ([`install_script`]), its removal ([`REMOVE_SCRIPT`]), the sets-only update a range refresh
//! applies ([`sets_update_script`]), and the equivalent iptables/ip6tables commands for routers
//! without nftables ([`iptables_script`], printed for the operator, never run by us).
//!
//! Owns the table's layout and the validation of what goes into it (interface names, skip
//! prefixes, the port). Runs nothing: the `firewall` applet (`applet::firewall`) feeds the
//! scripts to `nft -c -f -` then `nft -f -`, and the reactor's range refresh runs the sets
//! update. The ranges themselves are `route::tgranges`'s.
//!
//! The table (nftables wiki "Performing Network Address Translation", `redirect`):
//!
//! ```text
//! table inet tg_ws_proxy {
//!     set tg4 { type ipv4_addr; flags interval; elements = { Telegram's v4 prefixes } }
//!     set tg6 { type ipv6_addr; flags interval; elements = { Telegram's v6 prefixes } }
//!     set skip4 { ... --transparent-skip v4 ... }   set skip6 { ... v6 ... }
//!     chain prerouting {
//!         type nat hook prerouting priority dstnat; policy accept;
//!         iifname != { LAN interfaces } return
//!         ip saddr @skip4 return
//!         ip6 saddr @skip6 return
//!         ip daddr @tg4 meta l4proto tcp redirect to :PORT
//!         ip6 daddr @tg6 meta l4proto tcp redirect to :PORT
//!     }
//! }
//! ```
//!
//! [`install_script`] is one nft transaction: it declares the table (no error if it exists),
//! deletes it (so no error if it did not), then adds the full table — `nft -f` applies a file
//! atomically, so the router never has half a table, and a refused file changes nothing.

use std::fmt::{self, Write as _};
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr};

use super::dc_table::normalise;
use super::tgranges::TgRanges;

/// nftables family and name of our table.
pub const TABLE: &str = "inet tg_ws_proxy";

/// The set of Telegram's IPv4 prefixes.
pub const SET_TG4: &str = "tg4";

/// The set of Telegram's IPv6 prefixes.
pub const SET_TG6: &str = "tg6";

/// The set of LAN IPv4 sources that go direct (`--transparent-skip`).
pub const SET_SKIP4: &str = "skip4";

/// The set of LAN IPv6 sources that go direct.
pub const SET_SKIP6: &str = "skip6";

/// The iptables chain (nat table) of [`iptables_script`].
pub const IPT_CHAIN: &str = "TG_WS_PROXY";

/// Longest interface name (bytes): Linux's IFNAMSIZ (16) less the NUL.
pub const MAX_IFACE: usize = 15;

/// Most LAN interfaces.
pub const MAX_IFACES: usize = 32;

/// Most skip entries.
pub const MAX_SKIP: usize = 1024;

/// Deletes our table and nothing else, in one transaction; a missing table is no error
/// (declaring it first makes the delete always find it).
pub const REMOVE_SCRIPT: &str = "table inet tg_ws_proxy {}\ndelete table inet tg_ws_proxy\n";

/// What the table is built from.
#[derive(Clone, Copy, Debug)]
pub struct Spec<'a> {
    /// The `--transparent` listener's port: matching LAN TCP is redirected to it on the
    /// address it arrived at (`redirect to :PORT`).
    pub port: u16,
    /// LAN interfaces (`--lan-iface`) whose incoming TCP is redirected.
    pub lan_ifaces: &'a [String],
    /// LAN sources that go direct (`--transparent-skip`): address and prefix length.
    pub skip: &'a [(IpAddr, u8)],
    /// Telegram's ranges: the destinations redirected.
    pub ranges: &'a TgRanges,
}

/// Why no table was rendered.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum FwError {
    /// `--transparent` has port 0 (unknown before the bind: no redirect target).
    PortZero,
    /// No `--lan-iface`.
    NoIface,
    /// More than [`MAX_IFACES`] interfaces or [`MAX_SKIP`] skip entries.
    TooMany(&'static str),
    /// An interface name that is empty, longer than [`MAX_IFACE`] bytes, `.`/`..`, or has a
    /// character other than ASCII letters, digits, `-`, `_`, `.`.
    BadIface(String),
    /// A skip prefix whose length is past the family's (32 or 128).
    BadSkip(IpAddr, u8),
}

impl fmt::Display for FwError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            FwError::PortZero => write!(f, "--transparent: port 0 cannot be a redirect target"),
            FwError::NoIface => write!(f, "--lan-iface: no LAN interface given"),
            FwError::TooMany(what) => write!(f, "{what}: too many entries"),
            FwError::BadIface(n) => write!(
                f,
                "--lan-iface: {n:?} is not an interface name (1-{MAX_IFACE} bytes of letters, \
                 digits, '-', '_', '.')"
            ),
            FwError::BadSkip(a, len) => {
                write!(f, "--transparent-skip: {a}/{len}: prefix length too long")
            }
        }
    }
}

impl std::error::Error for FwError {}

/// True for a name Linux could give an interface and nft takes quoted: 1–15 bytes of ASCII
/// letters, digits, `-`, `_`, `.`, not `.` or `..`.
pub fn valid_iface(name: &str) -> bool {
    (1..=MAX_IFACE).contains(&name.len())
        && name != "."
        && name != ".."
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
}

/// The validated content of the table: prefixes with host bits cleared, IPv4-mapped skip
/// addresses as IPv4, and no prefix inside another of its set (an nft interval set refuses
/// overlapping elements).
struct Parts {
    port: u16,
    ifaces: Vec<String>,
    tg4: Vec<(Ipv4Addr, u8)>,
    tg6: Vec<(Ipv6Addr, u8)>,
    skip4: Vec<(Ipv4Addr, u8)>,
    skip6: Vec<(Ipv6Addr, u8)>,
}

fn parts(spec: &Spec<'_>) -> Result<Parts, FwError> {
    if spec.port == 0 {
        return Err(FwError::PortZero);
    }
    if spec.lan_ifaces.is_empty() {
        return Err(FwError::NoIface);
    }
    if spec.lan_ifaces.len() > MAX_IFACES {
        return Err(FwError::TooMany("--lan-iface"));
    }
    if spec.skip.len() > MAX_SKIP {
        return Err(FwError::TooMany("--transparent-skip"));
    }
    let mut ifaces: Vec<String> = Vec::new();
    for n in spec.lan_ifaces {
        if !valid_iface(n) {
            return Err(FwError::BadIface(n.clone()));
        }
        if !ifaces.contains(n) {
            ifaces.push(n.clone());
        }
    }
    let (mut skip4, mut skip6) = (Vec::new(), Vec::new());
    for &(a, len) in spec.skip {
        match (normalise(a), a) {
            // A mapped address's length counts the 96 bits before its IPv4 part.
            (IpAddr::V4(v4), IpAddr::V6(_)) if (96..=128).contains(&len) => {
                skip4.push((v4, len - 96))
            }
            (IpAddr::V4(v4), IpAddr::V4(_)) if len <= 32 => skip4.push((v4, len)),
            (IpAddr::V6(v6), _) if len <= 128 => skip6.push((v6, len)),
            _ => return Err(FwError::BadSkip(a, len)),
        }
    }
    Ok(Parts {
        port: spec.port,
        ifaces,
        tg4: outermost4(spec.ranges.v4()),
        tg6: outermost6(spec.ranges.v6()),
        skip4: outermost4(&skip4),
        skip6: outermost6(&skip6),
    })
}

/// The prefixes with host bits cleared, duplicates and prefixes inside another one dropped,
/// in their first order.
fn outermost4(list: &[(Ipv4Addr, u8)]) -> Vec<(Ipv4Addr, u8)> {
    let wide: Vec<(u128, u8)> = list
        .iter()
        .map(|&(a, len)| (u128::from(u32::from(a)) << 96, len))
        .collect();
    outermost(&wide)
        .into_iter()
        .map(|(a, len)| (Ipv4Addr::from((a >> 96) as u32), len))
        .collect()
}

fn outermost6(list: &[(Ipv6Addr, u8)]) -> Vec<(Ipv6Addr, u8)> {
    let wide: Vec<(u128, u8)> = list.iter().map(|&(a, len)| (u128::from(a), len)).collect();
    outermost(&wide)
        .into_iter()
        .map(|(a, len)| (Ipv6Addr::from(a), len))
        .collect()
}

/// [`outermost4`] on left-aligned 128-bit values; `len` counts from the top bit.
fn outermost(list: &[(u128, u8)]) -> Vec<(u128, u8)> {
    let mask = |len: u8| u128::MAX.checked_shl(128 - u32::from(len)).unwrap_or(0);
    let norm: Vec<(u128, u8)> = list.iter().map(|&(a, len)| (a & mask(len), len)).collect();
    let mut out: Vec<(u128, u8)> = Vec::new();
    for (i, &(a, len)) in norm.iter().enumerate() {
        let inside_other = norm.iter().enumerate().any(|(j, &(b, blen))| {
            let covers = blen <= len && a & mask(blen) == b;
            // An equal prefix counts once: the first copy stays.
            covers && (blen < len || j < i)
        });
        if !inside_other {
            out.push((a, len));
        }
    }
    out
}

/// The install script for `spec`: one nft transaction that replaces our table (or creates it)
/// with the full table shown in the module docs. Feed it to `nft -c -f -`, then `nft -f -`.
///
/// Errors: [`FwError`] for a port 0, no or bad interface names, a bad skip prefix.
pub fn install_script(spec: &Spec<'_>) -> Result<String, FwError> {
    let p = parts(spec)?;
    let mut s = String::new();
    s.push_str("# tg-ws-proxy transparent mode: our table only, replaced atomically\n");
    let _ = writeln!(s, "table {TABLE} {{}}");
    let _ = writeln!(s, "delete table {TABLE}");
    let _ = writeln!(s, "table {TABLE} {{");
    set_decl(&mut s, SET_TG4, "ipv4_addr", &join4(&p.tg4));
    set_decl(&mut s, SET_TG6, "ipv6_addr", &join6(&p.tg6));
    set_decl(&mut s, SET_SKIP4, "ipv4_addr", &join4(&p.skip4));
    set_decl(&mut s, SET_SKIP6, "ipv6_addr", &join6(&p.skip6));
    let ifaces: Vec<String> = p.ifaces.iter().map(|n| format!("\"{n}\"")).collect();
    let port = p.port;
    let _ = write!(
        s,
        "\tchain prerouting {{\n\
         \t\ttype nat hook prerouting priority dstnat; policy accept;\n\
         \t\tiifname != {{ {} }} return\n\
         \t\tip saddr @{SET_SKIP4} return\n\
         \t\tip6 saddr @{SET_SKIP6} return\n\
         \t\tip daddr @{SET_TG4} meta l4proto tcp redirect to :{port}\n\
         \t\tip6 daddr @{SET_TG6} meta l4proto tcp redirect to :{port}\n\
         \t}}\n}}\n",
        ifaces.join(", ")
    );
    Ok(s)
}

fn set_decl(s: &mut String, name: &str, ty: &str, elements: &str) {
    let _ = write!(s, "\tset {name} {{\n\t\ttype {ty}\n\t\tflags interval\n");
    if !elements.is_empty() {
        let _ = writeln!(s, "\t\telements = {{ {elements} }}");
    }
    s.push_str("\t}\n");
}

fn join4(list: &[(Ipv4Addr, u8)]) -> String {
    let v: Vec<String> = list.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    v.join(", ")
}

fn join6(list: &[(Ipv6Addr, u8)]) -> String {
    let v: Vec<String> = list.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    v.join(", ")
}

/// The sets-only update after a range refresh: `tg4` and `tg6` flushed and refilled from
/// `ranges` in one transaction (the chain and skip sets untouched). Against a missing table
/// nft refuses the whole file (transparent mode's table is the applet's to install).
pub fn sets_update_script(ranges: &TgRanges) -> String {
    let tg4 = join4(&outermost4(ranges.v4()));
    let tg6 = join6(&outermost6(ranges.v6()));
    let mut s = String::new();
    for (set, elements) in [(SET_TG4, tg4), (SET_TG6, tg6)] {
        let _ = writeln!(s, "flush set {TABLE} {set}");
        if !elements.is_empty() {
            let _ = writeln!(s, "add element {TABLE} {set} {{ {elements} }}");
        }
    }
    s
}

/// The same redirect as iptables/ip6tables commands (nat table, chain [`IPT_CHAIN`] jumped to
/// from `PREROUTING` for each LAN interface; `REDIRECT --to-ports PORT` per Telegram prefix,
/// `RETURN` per skipped source), as a shell script for the operator to run (Entware and other
/// iptables routers). Re-running it replaces the chain's rules; the removal commands follow as
/// comments. IPv6 needs ip6tables with the nat table (`ip6table_nat`), which many such routers
/// lack: its lines are separate so they can be left out.
///
/// Errors: as [`install_script`].
pub fn iptables_script(spec: &Spec<'_>) -> Result<String, FwError> {
    let p = parts(spec)?;
    let mut s = String::from(
        "#!/bin/sh\n# tg-ws-proxy transparent mode for iptables (printed by \
         `tg-ws-proxy firewall show --iptables`; not run by tg-ws-proxy)\n",
    );
    let port = p.port;
    let skip4: Vec<String> = p.skip4.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    let skip6: Vec<String> = p.skip6.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    let tg4: Vec<String> = p.tg4.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    let tg6: Vec<String> = p.tg6.iter().map(|(a, l)| format!("{a}/{l}")).collect();
    for (cmd, skip, tg) in [("iptables", skip4, tg4), ("ip6tables", skip6, tg6)] {
        let _ = writeln!(s, "\n# {cmd}");
        let _ = writeln!(s, "{cmd} -t nat -N {IPT_CHAIN} 2>/dev/null");
        let _ = writeln!(s, "{cmd} -t nat -F {IPT_CHAIN}");
        for src in &skip {
            let _ = writeln!(s, "{cmd} -t nat -A {IPT_CHAIN} -s {src} -j RETURN");
        }
        for dst in &tg {
            let _ = writeln!(
                s,
                "{cmd} -t nat -A {IPT_CHAIN} -p tcp -d {dst} -j REDIRECT --to-ports {port}"
            );
        }
        for i in &p.ifaces {
            let _ = writeln!(
                s,
                "{cmd} -t nat -C PREROUTING -i {i} -j {IPT_CHAIN} 2>/dev/null || \
                 {cmd} -t nat -A PREROUTING -i {i} -j {IPT_CHAIN}"
            );
        }
    }
    s.push_str("\n# To remove:\n");
    for cmd in ["iptables", "ip6tables"] {
        for i in &p.ifaces {
            let _ = writeln!(s, "#   {cmd} -t nat -D PREROUTING -i {i} -j {IPT_CHAIN}");
        }
        let _ = writeln!(
            s,
            "#   {cmd} -t nat -F {IPT_CHAIN}; {cmd} -t nat -X {IPT_CHAIN}"
        );
    }
    Ok(s)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ip(s: &str) -> IpAddr {
        s.parse().unwrap()
    }

    fn lan() -> Vec<String> {
        vec!["br-lan".to_string(), "lan1".to_string()]
    }

    #[test]
    fn install_script_is_one_replacing_transaction_with_sets_and_redirect() {
        let r = TgRanges::builtin();
        let ifaces = lan();
        let skip = [(ip("192.168.1.10"), 32), (ip("fd00::5"), 128)];
        let spec = Spec {
            port: 1443,
            lan_ifaces: &ifaces,
            skip: &skip,
            ranges: &r,
        };
        let s = install_script(&spec).unwrap();
        let lines: Vec<&str> = s.lines().filter(|l| !l.starts_with('#')).collect();
        assert_eq!(lines[0], "table inet tg_ws_proxy {}");
        assert_eq!(lines[1], "delete table inet tg_ws_proxy");
        assert_eq!(lines[2], "table inet tg_ws_proxy {");
        assert!(s.contains(
            "\t\telements = { 91.108.56.0/22, 91.108.4.0/22, 91.108.8.0/22, 91.108.16.0/22, \
             91.108.12.0/22, 149.154.160.0/20, 91.105.192.0/23, 91.108.20.0/22, 185.76.151.0/24 }"
        ));
        assert!(s.contains("elements = { 2001:b28:f23d::/48, 2001:b28:f23f::/48, "));
        assert!(s.contains("\tset skip4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t\telements = { 192.168.1.10/32 }\n\t}\n"));
        assert!(s.contains("elements = { fd00::5/128 }"));
        assert!(s.contains("type nat hook prerouting priority dstnat; policy accept;"));
        assert!(s.contains("\t\tiifname != { \"br-lan\", \"lan1\" } return\n"));
        assert!(s.contains("ip daddr @tg4 meta l4proto tcp redirect to :1443\n"));
        assert!(s.contains("ip6 daddr @tg6 meta l4proto tcp redirect to :1443\n"));
        // Skips return before any redirect.
        assert!(s.find("@skip4 return").unwrap() < s.find("@tg4").unwrap());
        assert!(s.ends_with("\t}\n}\n"));
    }

    #[test]
    fn empty_skip_sets_have_no_elements_line() {
        let r = TgRanges::builtin();
        let ifaces = vec!["br-lan".to_string()];
        let spec = Spec {
            port: 8443,
            lan_ifaces: &ifaces,
            skip: &[],
            ranges: &r,
        };
        let s = install_script(&spec).unwrap();
        assert!(s.contains("\tset skip4 {\n\t\ttype ipv4_addr\n\t\tflags interval\n\t}\n"));
        assert!(s.contains("\tset skip6 {\n\t\ttype ipv6_addr\n\t\tflags interval\n\t}\n"));
        assert!(!s.contains("elements = {  }"));
    }

    #[test]
    fn skip_prefixes_are_cleared_mapped_and_nested_ones_dropped() {
        let r = TgRanges::builtin();
        let ifaces = lan();
        let skip = [
            (ip("192.168.1.77"), 24),
            (ip("192.168.1.5"), 32),
            (ip("::ffff:10.0.0.9"), 128),
            (ip("192.168.1.0"), 24),
            (ip("fd00::1"), 64),
        ];
        let spec = Spec {
            port: 1443,
            lan_ifaces: &ifaces,
            skip: &skip,
            ranges: &r,
        };
        let s = install_script(&spec).unwrap();
        assert!(
            s.contains("elements = { 192.168.1.0/24, 10.0.0.9/32 }"),
            "{s}"
        );
        assert!(s.contains("elements = { fd00::/64 }"), "{s}");
    }

    fn try_spec(port: u16, ifaces: &[&str], skip: &[(IpAddr, u8)]) -> Result<String, FwError> {
        let r = TgRanges::builtin();
        let v: Vec<String> = ifaces.iter().map(|s| s.to_string()).collect();
        install_script(&Spec {
            port,
            lan_ifaces: &v,
            skip,
            ranges: &r,
        })
    }

    #[test]
    fn bad_inputs_are_refused_with_the_flag_named() {
        assert_eq!(try_spec(0, &["br-lan"], &[]), Err(FwError::PortZero));
        assert_eq!(try_spec(1, &[], &[]), Err(FwError::NoIface));
        for bad in [
            "",
            "sixteen-bytes-xx",
            "br lan",
            "a\"b",
            "x}y",
            "..",
            "eth0;",
            "é",
        ] {
            let e = try_spec(1, &[bad], &[]).unwrap_err();
            assert_eq!(e, FwError::BadIface(bad.to_string()));
            assert!(e.to_string().starts_with("--lan-iface: "), "{e}");
        }
        assert!(valid_iface("fifteen-bytes-x") && valid_iface("eth0.2") && valid_iface("wg_0"));
        assert_eq!(
            try_spec(1, &["br-lan"], &[(ip("10.0.0.1"), 33)]),
            Err(FwError::BadSkip(ip("10.0.0.1"), 33))
        );
        assert!(matches!(
            try_spec(1, &["br-lan"], &[(ip("::ffff:10.0.0.1"), 95)]),
            Err(FwError::BadSkip(..))
        ));
        assert!(try_spec(1, &["br-lan", "br-lan"], &[]).is_ok());
        let many: Vec<String> = (0..=MAX_IFACES).map(|i| format!("lan{i}")).collect();
        let many: Vec<&str> = many.iter().map(String::as_str).collect();
        assert_eq!(
            try_spec(1, &many, &[]),
            Err(FwError::TooMany("--lan-iface"))
        );
    }

    #[test]
    fn nested_range_prefixes_reach_nft_once() {
        let mut text = String::from("91.108.0.0/16\n");
        text.push_str(crate::route::tgranges::BUILTIN);
        text.push_str("2001:b28::/32\n");
        let r = TgRanges::parse(&text).unwrap();
        let s = sets_update_script(&r);
        assert_eq!(
            s,
            "flush set inet tg_ws_proxy tg4\n\
             add element inet tg_ws_proxy tg4 { 91.108.0.0/16, 149.154.160.0/20, \
             91.105.192.0/23, 185.76.151.0/24 }\n\
             flush set inet tg_ws_proxy tg6\n\
             add element inet tg_ws_proxy tg6 { 2001:67c:4e8::/48, 2a0a:f280::/32, \
             2001:b28::/32 }\n"
        );
    }

    #[test]
    fn remove_script_touches_only_our_table() {
        assert_eq!(
            REMOVE_SCRIPT,
            "table inet tg_ws_proxy {}\ndelete table inet tg_ws_proxy\n"
        );
    }

    #[test]
    fn iptables_script_redirects_each_prefix_per_interface() {
        let r = TgRanges::builtin();
        let ifaces = lan();
        let skip = [(ip("192.168.1.10"), 32)];
        let spec = Spec {
            port: 1443,
            lan_ifaces: &ifaces,
            skip: &skip,
            ranges: &r,
        };
        let s = iptables_script(&spec).unwrap();
        assert!(s.contains("iptables -t nat -N TG_WS_PROXY 2>/dev/null\n"));
        assert!(s.contains("iptables -t nat -A TG_WS_PROXY -s 192.168.1.10/32 -j RETURN\n"));
        assert!(s.contains(
            "iptables -t nat -A TG_WS_PROXY -p tcp -d 149.154.160.0/20 -j REDIRECT --to-ports 1443\n"
        ));
        assert!(s.contains(
            "ip6tables -t nat -A TG_WS_PROXY -p tcp -d 2a0a:f280::/32 -j REDIRECT --to-ports 1443\n"
        ));
        assert!(s.contains(
            "iptables -t nat -C PREROUTING -i lan1 -j TG_WS_PROXY 2>/dev/null || \
             iptables -t nat -A PREROUTING -i lan1 -j TG_WS_PROXY\n"
        ));
        assert_eq!(s.matches("-j REDIRECT").count(), 14);
        assert!(s.find("-j RETURN").unwrap() < s.find("-j REDIRECT").unwrap());
        assert!(s.contains("#   iptables -t nat -D PREROUTING -i br-lan -j TG_WS_PROXY\n"));
        assert!(iptables_script(&Spec { port: 0, ..spec }).is_err());
    }
}
