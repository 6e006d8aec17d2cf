//! The `link` applet: print the `tg://proxy` and `https://t.me/proxy` links for every
//! configured secret (docs/protocol.md §1.6).
//!
//! Owns choosing the link's server host, including LAN IPv4 detection from
//! `/proc/net/fib_trie` (no packet is sent, no socket opened). Accepts every `run` flag so the
//! same command line (or environment) works for both; it must not start the proxy. Flags go
//! through `cli::parse_run`, so a missing `--secret-file` is created here just as `run` would.

use std::net::Ipv4Addr;

use pico_args::Arguments;

use crate::cli::{self, CliError};

/// `tg-ws-proxy link --help`.
pub const HELP: &str = "\
tg-ws-proxy link: print the tg:// and https://t.me/proxy links for every configured secret

Usage: tg-ws-proxy link [--server HOST] [FLAGS]

      --server HOST             host name or IP the clients should dial (default: --link-ip,
                                else --host, else, when --host is 0.0.0.0/:: or not given, the
                                machine's first LAN IPv4, else 127.0.0.1)
      --link-ip HOST            same as --server [TG_LINK_IP]
  -H, --host IP                 the proxy's listen address [TG_HOST]
  -p, --port N                  the proxy's port [TG_PORT] (1443)
  -s, --secret S[,S...]         secrets, repeatable [TG_SECRET]
      --secret-file PATH        secrets file; created with a fresh secret if missing
                                [TG_SECRET_FILE]
  -h, --help                    this text

Every other `tg-ws-proxy run` flag is accepted too (and checked), so the command line and
environment of `run` work unchanged. Links go to stdout, two lines per secret; notes to stderr.
";

/// Prints the links. Exit code 0, or 2 on bad usage.
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{HELP}");
        return 0;
    }
    match links(args) {
        Ok(lines) => {
            for line in lines {
                println!("{line}");
            }
            0
        }
        Err(e) => {
            eprintln!("tg-ws-proxy: {e}");
            2
        }
    }
}

fn links(mut args: Arguments) -> Result<Vec<String>, CliError> {
    let server: Option<String> = args
        .opt_value_from_str("--server")
        .map_err(cli::pico_error)?;
    let server = match server {
        Some(s) => Some(cli::parse_link_host(&s).map_err(|m| CliError::flag("--server", m))?),
        None => None,
    };
    let parsed = cli::parse_run(args, "link", &cli::process_env)?;
    for (_, note) in &parsed.notes {
        eprintln!("tg-ws-proxy: {note}");
    }
    let c = &parsed.config;
    let port = c.listen.port();
    if port == 0 {
        return Err(CliError::flag(
            "--port",
            "0 (any free port) cannot be put in a link",
        ));
    }
    let ip = c.listen.ip();
    let host = match server.or_else(|| c.link_ip.clone()) {
        Some(h) => h,
        None if parsed.host_given && !ip.is_unspecified() => ip.to_string(),
        None => {
            match lan_ipv4() {
                Some(a) => a.to_string(),
                None => {
                    eprintln!("tg-ws-proxy: no LAN IPv4 address found; using 127.0.0.1 (pass --server HOST)");
                    Ipv4Addr::LOCALHOST.to_string()
                }
            }
        }
    };
    let mut out = Vec::new();
    for s in &c.secrets {
        out.extend(link_urls(&host, port, &s.link_hex()));
    }
    Ok(out)
}

/// `[tg://proxy?…, https://t.me/proxy?…]` for one secret in link form (hex).
pub fn link_urls(host: &str, port: u16, secret_hex: &str) -> [String; 2] {
    let query = format!("server={host}&port={port}&secret={secret_hex}");
    [
        format!("tg://proxy?{query}"),
        format!("https://t.me/proxy?{query}"),
    ]
}

/// The machine's preferred LAN IPv4 from `/proc/net/fib_trie`; `None` if unreadable or none.
pub fn lan_ipv4() -> Option<Ipv4Addr> {
    pick_lan_ipv4(&std::fs::read_to_string("/proc/net/fib_trie").ok()?)
}

/// Local addresses in `fib_trie` text are leaf lines `|-- A.B.C.D` followed by a `/32 host
/// LOCAL` line. Loopback, link-local, multicast and broadcast are skipped. Preference: the
/// first 192.168/16, then 10/8, then 172.16/12, then any other.
pub fn pick_lan_ipv4(fib_trie: &str) -> Option<Ipv4Addr> {
    let mut current: Option<Ipv4Addr> = None;
    let mut local: Vec<Ipv4Addr> = Vec::new();
    for line in fib_trie.lines() {
        let t = line.trim();
        if let Some(rest) = t.strip_prefix("|--") {
            current = rest.trim().parse().ok();
        } else if t.starts_with("/32 host LOCAL") {
            if let Some(a) = current {
                if !local.contains(&a) {
                    local.push(a);
                }
            }
        }
    }
    let usable = |a: &&Ipv4Addr| {
        !(a.is_loopback()
            || a.is_link_local()
            || a.is_multicast()
            || a.is_broadcast()
            || a.is_unspecified())
    };
    let rank = |a: &Ipv4Addr| match a.octets() {
        [192, 168, ..] => 0,
        [10, ..] => 1,
        [172, b, ..] if (16..32).contains(&b) => 2,
        _ => 3,
    };
    local.iter().filter(usable).min_by_key(|a| rank(a)).copied()
}

#[cfg(test)]
mod tests {
    use super::*;

    const TRIE: &str = "\
Main:
  +-- 0.0.0.0/0 3 0 5
     |-- 0.0.0.0
        /0 universe UNICAST
     +-- 127.0.0.0/8 2 0 2
        +-- 127.0.0.0/31 1 0 0
           |-- 127.0.0.0
              /8 host LOCAL
           |-- 127.0.0.1
              /32 host LOCAL
        |-- 127.255.255.255
           /32 link BROADCAST
     +-- 172.17.0.0/16 2 0 2
        |-- 172.17.0.1
           /32 host LOCAL
     +-- 192.168.1.0/24 2 0 2
        |-- 192.168.1.0
           /24 link UNICAST
        |-- 192.168.1.20
           /32 host LOCAL
        |-- 192.168.1.255
           /32 link BROADCAST
Local:
  +-- 0.0.0.0/0 3 0 5
     |-- 192.168.1.20
        /32 host LOCAL
";

    #[test]
    fn prefers_192_168_over_docker_bridge_and_skips_loopback() {
        assert_eq!(pick_lan_ipv4(TRIE), Some(Ipv4Addr::new(192, 168, 1, 20)));
    }

    #[test]
    fn other_addresses_and_none() {
        let only =
            "Main:\n  |-- 100.64.3.4\n     /32 host LOCAL\n  |-- 172.20.0.9\n     /32 host LOCAL\n";
        assert_eq!(pick_lan_ipv4(only), Some(Ipv4Addr::new(172, 20, 0, 9)));
        let wan = "Main:\n  |-- 203.0.113.7\n     /32 host LOCAL\n";
        assert_eq!(pick_lan_ipv4(wan), Some(Ipv4Addr::new(203, 0, 113, 7)));
        let lo =
            "Main:\n  |-- 127.0.0.1\n     /32 host LOCAL\n  |-- 169.254.1.1\n     /32 host LOCAL\n";
        assert_eq!(pick_lan_ipv4(lo), None);
        assert_eq!(pick_lan_ipv4(""), None);
    }

    #[test]
    fn urls() {
        let [tg, https] = link_urls("192.168.1.1", 1443, "ddab");
        assert_eq!(tg, "tg://proxy?server=192.168.1.1&port=1443&secret=ddab");
        assert_eq!(
            https,
            "https://t.me/proxy?server=192.168.1.1&port=1443&secret=ddab"
        );
    }

    /// Issue 8: an `ee` secret's link is `ee` + key + hex(domain), and a configuration of only
    /// `ee` secrets gives only `ee` links (no `dd` form of the same key).
    #[test]
    fn ee_links_carry_key_and_hex_domain_and_only_ee_secrets_give_only_ee_links() {
        let key = "0123456789abcdef0123456789abcdef";
        let ee1 = format!("ee{key}6578616d706c652e636f6d"); // example.com
        let ee2 = format!("ee{key}612e696f"); // a.io
        let args = Arguments::from_vec(
            ["--server", "192.0.2.1", "-s", &format!("{ee1},{ee2}")]
                .iter()
                .map(|s| s.into())
                .collect(),
        );
        let lines = links(args).unwrap();
        assert_eq!(lines.len(), 4);
        assert_eq!(
            lines[0],
            format!("tg://proxy?server=192.0.2.1&port=1443&secret={ee1}")
        );
        assert_eq!(
            lines[3],
            format!("https://t.me/proxy?server=192.0.2.1&port=1443&secret={ee2}")
        );
        assert!(lines.iter().all(|l| !l.contains("secret=dd")), "{lines:?}");
    }
}
