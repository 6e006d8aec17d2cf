//! `check`'s "ways in" lines (issue 21): what each configured listener would do and what it
//! needs — the proxy listener, transparent mode (its ranges, the `nft` binary, whether our table
//! is installed), SOCKS5 (its exposure and authentication) — one line each, after the route
//! table. [`lines`] is the sans-IO part (the facts in, the lines out); [`facts`] gathers the
//! facts (binds each address once to see whether it is free, runs `nft`).

use std::net::SocketAddr;
use std::process::{Command, Stdio};

use crate::config::{Config, WayIn};
use crate::route::firewall::TABLE;

/// What [`lines`] reports on, gathered by [`facts`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Facts {
    /// Per way in ([`WayIn::ALL`] order): `None` = not configured; else whether its address can
    /// be bound now (`Err`: the OS error, e.g. in use by a running proxy).
    pub bind: [Option<Result<(), String>>; 3],
    /// Telegram's ranges in use: source and IPv4 / IPv6 prefix counts.
    pub ranges: (String, usize, usize),
    /// `nft --version`'s first line, or why it did not run.
    pub nft: Result<String, String>,
    /// Whether our table is installed now (`None`: not asked, or `nft` did not run): its
    /// listing (`nft list table`), `Some(None)` when it is not installed.
    pub table: Option<Option<String>>,
    /// LAN interfaces of `--lan-iface` that do not exist now.
    pub missing_ifaces: Vec<String>,
}

/// The facts for `cfg`: each listener address bound and released at once; `nft` asked only
/// with `--transparent`.
pub fn facts(cfg: &Config) -> Facts {
    let bind = WayIn::ALL.map(|w| {
        cfg.listen_of(w).map(|a| {
            std::net::TcpListener::bind(a)
                .map(drop)
                .map_err(|e| e.to_string())
        })
    });
    let (r, source, _) = crate::reactor::load_ranges(cfg);
    let ranges = (source, r.v4().len(), r.v6().len());
    let mut f = Facts {
        bind,
        ranges,
        nft: Err("not needed".into()),
        table: None,
        missing_ifaces: Vec::new(),
    };
    if cfg.transparent.is_none() {
        return f;
    }
    f.missing_ifaces = crate::applet::firewall::missing_ifaces(cfg);
    f.nft = run(cfg, &["--version"]).map(|o| o.lines().next().unwrap_or("").to_string());
    let (family, name) = TABLE.split_once(' ').unwrap_or(("inet", TABLE));
    f.table = f
        .nft
        .is_ok()
        .then(|| run(cfg, &["list", "table", family, name]).ok());
    f
}

/// What an installed table's listing (`nft list table`) says against `cfg`: `Ok` when it
/// redirects to the `--transparent` port from every `--lan-iface`, else what differs (a table
/// left from before a reload that changed them).
pub fn table_matches(listing: &str, cfg: &Config) -> Result<(), String> {
    let want = cfg.transparent.map_or(0, |a| a.port()).to_string();
    let ports: Vec<&str> = listing
        .split("redirect to :")
        .skip(1)
        .map(|rest| {
            rest.split(|c: char| !c.is_ascii_digit())
                .next()
                .unwrap_or("")
        })
        .collect();
    if ports.is_empty() || ports.iter().any(|p| *p != want) {
        let got = ports.first().copied().unwrap_or("?");
        return Err(format!("it redirects to :{got}, not :{want}"));
    }
    let absent: Vec<String> = cfg
        .lan_ifaces()
        .into_iter()
        .filter(|n| !listing.contains(&format!("\"{n}\"")))
        .collect();
    if !absent.is_empty() {
        return Err(format!("it does not redirect from {}", absent.join(", ")));
    }
    Ok(())
}

/// `nft ARGS`: its stdout, or why it failed.
fn run(cfg: &Config, args: &[&str]) -> Result<String, String> {
    let out = Command::new(&cfg.nft)
        .args(args)
        .stdin(Stdio::null())
        .output()
        .map_err(|e| format!("{}: {e}", cfg.nft.display()))?;
    if out.status.success() {
        Ok(String::from_utf8_lossy(&out.stdout).into_owned())
    } else {
        Err(String::from_utf8_lossy(&out.stderr).trim().to_string())
    }
}

/// One line per configured way in (the proxy listener always), each starting `way in NAME:`.
pub fn lines(cfg: &Config, f: &Facts) -> Vec<String> {
    let mut out = Vec::new();
    for w in WayIn::ALL {
        let (Some(addr), Some(bind)) = (cfg.listen_of(w), &f.bind[w.index()]) else {
            continue;
        };
        let free = match bind {
            Ok(()) => "free".to_string(),
            Err(e) => format!("cannot bind now: {e} (a running proxy holds it?)"),
        };
        let what = match w {
            WayIn::Proxy => format!("{addr} ({free})"),
            WayIn::Transparent => transparent(cfg, addr, &free, f),
            WayIn::Socks5 => socks5(cfg, addr, &free),
        };
        out.push(format!("way in {}: {what}", w.name()));
    }
    out
}

fn transparent(cfg: &Config, addr: SocketAddr, free: &str, f: &Facts) -> String {
    let (source, v4, v6) = &f.ranges;
    let nft = match &f.nft {
        Ok(v) => format!("nft: {}", v.trim()),
        Err(e) => format!("PROBLEM nft: {e} (install nftables: `firewall install` needs it)"),
    };
    let table = match &f.table {
        Some(Some(listing)) => match table_matches(listing, cfg) {
            Ok(()) => "our table is installed".to_string(),
            Err(why) => format!(
                "PROBLEM our table is stale: {why} (run `tg-ws-proxy firewall install` after a \
                 change)"
            ),
        },
        Some(None) => "our table is NOT installed (`tg-ws-proxy firewall install`)".into(),
        None => "table unknown".into(),
    };
    let mut problems = String::new();
    if addr.ip().is_loopback() {
        problems.push_str(
            "; PROBLEM a loopback address never gets redirected connections (they arrive at the \
             LAN address): listen on 0.0.0.0, [::] or the LAN address",
        );
    }
    if !f.missing_ifaces.is_empty() {
        problems.push_str(&format!(
            "; PROBLEM no such interface now: {} (nothing is redirected from it)",
            f.missing_ifaces.join(", ")
        ));
    }
    format!(
        "{addr} ({free}); LAN {}; ranges: {source}, {v4} IPv4 + {v6} IPv6; {nft}; {table}{problems}",
        cfg.lan_ifaces().join(",")
    )
}

fn socks5(cfg: &Config, addr: SocketAddr, free: &str) -> String {
    let auth = match &cfg.socks5_users {
        Some(u) if u.len() == 1 => "user/password required (1 user)".to_string(),
        Some(u) => format!("user/password required ({} users)", u.len()),
        None => "no authentication (anyone who reaches the address may use it)".to_string(),
    };
    let exposure = if cfg.socks5_public {
        "public (--socks5-public)"
    } else {
        "loopback/LAN only"
    };
    format!("{addr} ({free}); {auth}; {exposure}; CONNECT to Telegram DC addresses only")
}

#[cfg(test)]
mod tests {
    use super::*;

    fn facts_ok() -> Facts {
        Facts {
            bind: [
                Some(Ok(())),
                Some(Ok(())),
                Some(Err("Address in use".into())),
            ],
            ranges: ("built-in".into(), 9, 5),
            nft: Err("nft: No such file or directory".into()),
            table: None,
            missing_ifaces: vec!["br-lan".into()],
        }
    }

    #[test]
    fn one_line_per_configured_way_with_what_it_needs() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.transparent = Some("[::]:1444".parse().unwrap());
        cfg.socks5 = Some("127.0.0.1:1080".parse().unwrap());
        let l = lines(&cfg, &facts_ok());
        assert_eq!(l.len(), 3, "{l:?}");
        assert!(
            l[0].starts_with("way in proxy: 127.0.0.1:1443 (free)"),
            "{l:?}"
        );
        assert!(
            l[1].contains("LAN br-lan") && l[1].contains("9 IPv4 + 5 IPv6"),
            "{l:?}"
        );
        assert!(l[1].contains("PROBLEM nft"), "{l:?}");
        assert!(
            l[1].contains("PROBLEM no such interface now: br-lan"),
            "{l:?}"
        );
        assert!(!l[1].contains("loopback"), "[::] is not loopback: {l:?}");
        assert!(l[2].contains("cannot bind now: Address in use"), "{l:?}");
        assert!(l[2].contains("no authentication"), "{l:?}");
        cfg.transparent = Some("127.0.0.1:1444".parse().unwrap());
        assert!(lines(&cfg, &facts_ok())[1].contains("PROBLEM a loopback address"));
        cfg.transparent = None;
        cfg.socks5 = None;
        assert_eq!(lines(&cfg, &facts_ok()).len(), 1, "only the proxy listener");
    }

    #[test]
    fn an_installed_table_is_compared_with_the_flags() {
        let mut cfg = Config::with_secrets(Vec::new());
        cfg.transparent = Some("[::]:1444".parse().unwrap());
        let listing = "table inet tg_ws_proxy {\n\tchain prerouting {\n\t\tiifname \"br-lan\" \
                       meta l4proto tcp ip daddr @tg4 redirect to :1444\n\t}\n}\n";
        assert_eq!(table_matches(listing, &cfg), Ok(()));
        cfg.transparent = Some("[::]:1446".parse().unwrap());
        let e = table_matches(listing, &cfg).unwrap_err();
        assert!(e.contains(":1444, not :1446"), "{e}");
        cfg.transparent = Some("[::]:1444".parse().unwrap());
        cfg.lan_ifaces = vec!["eth9".into()];
        let e = table_matches(listing, &cfg).unwrap_err();
        assert!(e.contains("eth9"), "{e}");
    }
}
