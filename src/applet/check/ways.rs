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
    /// Whether our table is installed now (`None`: not asked, or `nft` did not run).
    pub table: Option<bool>,
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
    if cfg.transparent.is_none() {
        let nft = Err("not needed".into());
        return Facts {
            bind,
            ranges,
            nft,
            table: None,
        };
    }
    let nft = run(cfg, &["--version"]).map(|o| o.lines().next().unwrap_or("").to_string());
    let (family, name) = TABLE.split_once(' ').unwrap_or(("inet", TABLE));
    let table = nft
        .is_ok()
        .then(|| run(cfg, &["list", "table", family, name]).is_ok());
    Facts {
        bind,
        ranges,
        nft,
        table,
    }
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
    let table = match f.table {
        Some(true) => "our table is installed",
        Some(false) => "our table is NOT installed (`tg-ws-proxy firewall install`)",
        None => "table unknown",
    };
    format!(
        "{addr} ({free}); LAN {}; ranges: {source}, {v4} IPv4 + {v6} IPv6; {nft}; {table}",
        cfg.lan_ifaces().join(",")
    )
}

fn socks5(cfg: &Config, addr: SocketAddr, free: &str) -> String {
    let auth = match &cfg.socks5_users {
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
        assert!(l[2].contains("cannot bind now: Address in use"), "{l:?}");
        assert!(l[2].contains("no authentication"), "{l:?}");
        cfg.transparent = None;
        cfg.socks5 = None;
        assert_eq!(lines(&cfg, &facts_ok()).len(), 1, "only the proxy listener");
    }
}
