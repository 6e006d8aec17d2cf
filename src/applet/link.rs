//! The `link` applet: print the `tg://proxy` and `https://t.me/proxy` links for every
//! configured secret (docs/protocol.md §1.6) and, with `--socks5`, the `tg://socks` and
//! `https://t.me/socks` links of the SOCKS5 listener (§1.10), and with `--qr` a QR code of each
//! `https://` link; plus [`startup_links`], which `run` prints on a terminal.
//!
//! Owns the links' text ([`links_for`], [`socks_links_for`], one place for `link` and `run`) and the applet's
//! flags. The server address is chosen in `address` (sans-IO rule + the `getifaddrs` read; no
//! socket opened), the QR drawing in `qr`. Takes the same configuration as `run` (every `run`
//! flag, `TG_*` variables, `--config FILE`) through `cli::parse_run`, which never creates a
//! secret: a missing `--secret-file` is an error naming the path (exit 2), since a link to a
//! secret nothing serves is worse than none. It must not start the proxy.

pub mod address;
pub mod qr;

use std::io::Write;
use std::net::SocketAddr;

use pico_args::Arguments;

use crate::cli::{self, CliError};
use crate::config::Config;

/// `tg-ws-proxy link --help`.
pub const HELP: &str = "\
tg-ws-proxy link: print the tg:// and https://t.me/proxy links for every configured secret,
and the tg://socks and https://t.me/socks links of the SOCKS5 listener when --socks5 is set

Usage: tg-ws-proxy link [--server HOST] [--qr] [FLAGS]

      --server HOST             host name or IP the clients should dial (same as --link-ip)
      --link-ip HOST            same as --server [TG_LINK_IP]
      --qr                      also draw a QR code of each https:// link (Unicode half
                                blocks, light modules printed: for a dark terminal)
      --config FILE             the configuration file `run` reads [TG_CONFIG]
  -H, --host IP                 the proxy's listen address [TG_HOST]
  -p, --port N                  the proxy's port [TG_PORT] (1443)
  -s, --secret S[,S...]         secrets, repeatable [TG_SECRET]
      --secret-file PATH        secrets file [TG_SECRET_FILE]; never created here: a
                                missing one is an error (`run` creates it on first
                                start, `genkey` makes one)
      --socks5 HOST:PORT        the SOCKS5 listener [TG_SOCKS5]: adds its links
      --socks5-auth FILE        its users [TG_SOCKS5_AUTH]: the first one goes in the links
  -h, --help                    this text

The server is --server/--link-ip if given, else the address `run` listens on (--host) when it
is a specific one. With --host 0.0.0.0/:: or no --host it is guessed among this machine's
private addresses (192.168/16, 10/8, 172.16/12; IPv6 ULA with --host ::; the OpenWrt LAN bridge
br-lan first), and stderr says so and which; a public or carrier-grade NAT (100.64/10) address
is never guessed (exit 2: pass --link-ip). With only loopback, 127.0.0.1 (and a note). The
SOCKS5 links' server is chosen the same way, with --socks5's address in place of --host;
their user and password (percent-encoded) are the first user of --socks5-auth.

Every other `tg-ws-proxy run` flag is accepted too (and checked), so the command line,
environment and configuration file of `run` work unchanged. Links go to stdout, two lines per
secret (then its QR code with --qr), the SOCKS5 pair last; notes to stderr. Exit status: 0,
or 2 on bad usage.
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

/// The applet's output lines (links, QR rows); notes go to stderr here.
fn links(mut args: Arguments) -> Result<Vec<String>, CliError> {
    let server: Option<String> = args
        .opt_value_from_str("--server")
        .map_err(cli::pico_error)?;
    let server = match server {
        Some(s) => Some(cli::parse_link_host(&s).map_err(|m| CliError::flag("--server", m))?),
        None => None,
    };
    let want_qr = args.contains("--qr");
    let parsed = cli::parse_run(args, "link", &cli::process_env)?;
    for (_, note) in &parsed.notes {
        eprintln!("tg-ws-proxy: {note}");
    }
    let c = &parsed.config;
    if c.listen.port() == 0 {
        return Err(CliError::flag(
            "--port",
            "0 (any free port) cannot be put in a link",
        ));
    }
    let facts = address::Facts {
        flag: "--host",
        explicit: server.as_deref().or(c.link_ip.as_deref()),
        listen: c.listen.ip(),
        host_given: parsed.host_given,
    };
    let (host, note) = address::server(facts).map_err(|m| CliError::flag("--link-ip", m))?;
    if let Some(note) = note {
        eprintln!("tg-ws-proxy: {note}");
    }
    let mut lines = links_for(c, &host);
    if let Some(socks) = c.socks5 {
        if socks.port() == 0 {
            return Err(CliError::flag(
                "--socks5",
                "port 0 (any free port) cannot be put in a link",
            ));
        }
        let (host, note) = address::server(socks5_facts(c, server.as_deref(), socks))
            .map_err(|m| CliError::flag("--link-ip", m))?;
        if let Some(note) = note {
            eprintln!("tg-ws-proxy: {note}");
        }
        lines.extend(socks_links_for(c, &host));
    }
    let mut out = Vec::new();
    for pair in lines.chunks(2) {
        out.extend(pair.iter().cloned());
        if want_qr {
            let https = pair.last().map_or("", String::as_str);
            out.extend(qr::draw(https).map_err(|m| CliError::flag("--qr", m))?);
        }
    }
    Ok(out)
}

/// What the SOCKS5 links' server is chosen from: as for the proxy links, with the `--socks5`
/// listener's address as the listen address (always given: it is part of the flag).
fn socks5_facts<'a>(
    c: &'a Config,
    server: Option<&'a str>,
    socks: SocketAddr,
) -> address::Facts<'a> {
    address::Facts {
        flag: "--socks5",
        explicit: server.or(c.link_ip.as_deref()),
        listen: socks.ip(),
        host_given: true,
    }
}

/// The SOCKS5 links of `c` for clients dialling `host` on `--socks5`'s port: [`socks_urls`]
/// with the first `--socks5-auth` user; empty without `--socks5`.
pub fn socks_links_for(c: &Config, host: &str) -> Vec<String> {
    let Some(socks) = c.socks5 else {
        return Vec::new();
    };
    let auth = c.socks5_users.as_ref().and_then(|u| u.first());
    socks_urls(host, socks.port(), auth).to_vec()
}

/// The links of every secret of `c` for clients dialling `host` on `c`'s port: for each
/// secret in order `tg://proxy?server=…&port=…&secret=…` then `https://t.me/proxy?…`.
pub fn links_for(c: &Config, host: &str) -> Vec<String> {
    c.secrets
        .iter()
        .flat_map(|s| link_urls(host, c.listen.port(), &s.link_hex()))
        .collect()
}

/// What `run` prints on a terminal at start: [`links_for`] and [`socks_links_for`] with the
/// servers chosen as `link` chooses them (`host_given` as in [`cli::RunArgs`]), and the guess
/// notes if any. Errors: port 0 (not known before the bind), or only public addresses and no
/// `--link-ip`.
pub fn startup_links(
    c: &Config,
    host_given: bool,
) -> Result<(Vec<String>, Option<String>), String> {
    if c.listen.port() == 0 {
        return Err("--port 0: the port is known only once bound".into());
    }
    let facts = address::Facts {
        flag: "--host",
        explicit: c.link_ip.as_deref(),
        listen: c.listen.ip(),
        host_given,
    };
    let (host, note) = address::server(facts)?;
    let mut lines = links_for(c, &host);
    let mut notes: Vec<String> = note.into_iter().collect();
    if let Some(socks) = c.socks5.filter(|a| a.port() != 0) {
        let (host, note) = address::server(socks5_facts(c, None, socks))?;
        lines.extend(socks_links_for(c, &host));
        notes.extend(note);
    }
    let note = (!notes.is_empty()).then(|| notes.join("; "));
    Ok((lines, note))
}

/// `run` at start: when stdout is a terminal (never under procd or in tests, where it is a pipe
/// or a file), prints [`startup_links`] on stdout once; the guess note is logged (info), a
/// reason not to print (port 0, only public addresses) is logged as a warning.
pub fn print_startup_links(c: &Config, host_given: bool) {
    // SAFETY: isatty only inspects the descriptor.
    if unsafe { libc::isatty(1) } != 1 {
        return;
    }
    match startup_links(c, host_given) {
        Ok((lines, note)) => {
            if let Some(note) = note {
                log::info!("{note}");
            }
            let mut out = std::io::stdout().lock();
            for line in lines {
                // A closed terminal is no reason to stop serving.
                if writeln!(out, "{line}").is_err() {
                    break;
                }
            }
            let _ = out.flush();
        }
        Err(e) => log::warn!("links not printed: {e}"),
    }
}

/// `[tg://proxy?…, https://t.me/proxy?…]` for one secret in link form (hex).
pub fn link_urls(host: &str, port: u16, secret_hex: &str) -> [String; 2] {
    let query = format!("server={host}&port={port}&secret={secret_hex}");
    [
        format!("tg://proxy?{query}"),
        format!("https://t.me/proxy?{query}"),
    ]
}

/// `[tg://socks?…, https://t.me/socks?…]`: Telegram's SOCKS5 proxy links for `host:port`,
/// with `&user=…&pass=…` when `auth` is given (percent-encoded, [`query_escape`]).
pub fn socks_urls(host: &str, port: u16, auth: Option<(&str, &str)>) -> [String; 2] {
    let mut query = format!("server={host}&port={port}");
    if let Some((user, pass)) = auth {
        query.push_str(&format!(
            "&user={}&pass={}",
            query_escape(user),
            query_escape(pass)
        ));
    }
    [
        format!("tg://socks?{query}"),
        format!("https://t.me/socks?{query}"),
    ]
}

/// `s` as a URL query value: every byte but RFC 3986 §2.3's unreserved ones (letters, digits,
/// `-._~`) as `%XX` (upper-case hex, §2.1), so `&`, `=`, `#`, `+`, `%`, spaces and non-ASCII
/// survive the trip through the link.
pub fn query_escape(s: &str) -> String {
    let mut out = String::with_capacity(s.len());
    for b in s.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn run_prints_the_socks5_links_after_the_proxy_links() {
        let key = "0123456789abcdef0123456789abcdef";
        let secret = crate::mtproto::obfs2::Secret::parse(key).unwrap();
        let mut c = Config::with_secrets(vec![secret]);
        c.socks5 = Some("127.0.0.2:1080".parse().unwrap());
        c.socks5_users = Some(crate::net::socks5_server::Users::parse("u:p w").unwrap());
        let (lines, note) = startup_links(&c, true).unwrap();
        assert_eq!(note, None);
        assert_eq!(lines.len(), 4, "{lines:?}");
        assert!(lines[0].starts_with("tg://proxy?server=127.0.0.1&port=1443&"));
        assert_eq!(
            lines[2],
            "tg://socks?server=127.0.0.2&port=1080&user=u&pass=p%20w"
        );
        assert_eq!(
            lines[3],
            "https://t.me/socks?server=127.0.0.2&port=1080&user=u&pass=p%20w"
        );
        // Port 0 is known only once bound: no SOCKS5 links then.
        c.socks5 = Some("127.0.0.2:0".parse().unwrap());
        assert_eq!(startup_links(&c, true).unwrap().0.len(), 2);
    }

    #[test]
    fn socks_urls_with_and_without_credentials() {
        let [tg, https] = socks_urls("192.168.1.1", 1080, None);
        assert_eq!(tg, "tg://socks?server=192.168.1.1&port=1080");
        assert_eq!(https, "https://t.me/socks?server=192.168.1.1&port=1080");
        let [tg, https] = socks_urls("192.168.1.1", 1080, Some(("al ice", "p&s=s%#+ü~")));
        let q = "server=192.168.1.1&port=1080&user=al%20ice&pass=p%26s%3Ds%25%23%2B%C3%BC~";
        assert_eq!(tg, format!("tg://socks?{q}"));
        assert_eq!(https, format!("https://t.me/socks?{q}"));
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
