//! The one table of `run` flags ([`RUN_OPTIONS`]): each flag is declared here once — long name,
//! short name, old aliases, `TG_*` variables, the default as users see it, help text, and its
//! kind with the writer that stores the value in the configuration under construction.
//!
//! `parse` drives pico-args and the environment from this table, `help` renders the option
//! part of `run --help` from it, `flags_doc` renders docs/flags.md from it (a test keeps the
//! committed file current), and the tests below hold it to `Config`'s real defaults.
//! Rules that join several flags (`--cf-priority` yielding to `--tier-order`, `-v` against
//! `-q`, `--cooldown-max` and `--outbound-proxy-backoff-max` at least their bases, the secret
//! file read last) live in `parse` (`Draft::settle`, `Draft::finish`); value grammars live in
//! `values` and `duration`; range checks live in the writers here. Adding a flag: one entry here
//! (or in `table_more`, which holds the Ladder, Clients and Logging sections and is joined after
//! this file's entries at compile time) and the `Config` field its writer sets; then regenerate
//! docs/flags.md (`TG_UPDATE_DOCS=1 cargo test --locked --lib flags_doc`), with a
//! `flags_doc::DOCS` entry where the help text is too short for the reference. The entry's
//! shape (`Opt`, `Kind`, `Group`, `Reload`) and the shared value checks live in `opt`.

use super::opt::positive;
use super::values::{
    check_readable_file, parse_cf_endpoint, parse_dc_addr, parse_ip, parse_tier_order,
    parse_worker_endpoint,
};
use crate::mtproto::obfs2::Secret;
use crate::net::tls::CipherPref;

use super::table_more::LADDER_CLIENTS_LOGGING;
use Group::{Listen, Upstream};
use Kind::{List, Path, Switch, Value};
use Reload::Live;

pub use super::opt::MAX_CONNECTIONS_LIMIT;
pub(crate) use super::opt::{Group, Kind, Opt, Reload};

/// The `run` flags of the `Listen` and `Upstream` sections, in table order.
#[rustfmt::skip]
const LISTEN_UPSTREAM: &[Opt] = &[
    // Listening and secrets.
    Opt {
        reload: Live, long: "--host", short: Some("-H"), aliases: &[], env: &["TG_HOST"],
        meta: "IP", default: "127.0.0.1", group: Listen,
        help: "listen address, IPv4 or IPv6",
        kind: Value(|d, s| parse_ip(s).map(|ip| d.config.listen.set_ip(ip))),
    },
    Opt {
        reload: Live, long: "--port", short: Some("-p"), aliases: &[], env: &["TG_PORT"],
        meta: "N", default: "1443", group: Listen,
        help: "listen port, 0 = any free port",
        kind: Value(|d, s| match s.parse::<u16>() {
            Ok(port) => { d.config.listen.set_port(port); Ok(()) }
            Err(_) => Err("not a port number (0-65535)".into()),
        }),
    },
    Opt {
        reload: Live, long: "--secret", short: Some("-s"), aliases: &[], env: &["TG_SECRET"],
        meta: "S[,S...]", default: "none", group: Listen,
        help: "client secret: 32 hex, dd + 32 hex, or ee + 32 hex + hex(domain); repeatable, \
               comma list; `ps` shows the command line, so prefer TG_SECRET or --secret-file",
        kind: List(|d, s| match Secret::parse(s) {
            Ok(secret) => { d.config.secrets.push(secret); Ok(()) }
            Err(e) => Err(format!("invalid secret: {e}")),
        }),
    },
    Opt {
        reload: Live, long: "--secret-file", short: None, aliases: &[], env: &["TG_SECRET_FILE"],
        meta: "PATH", default: "none", group: Listen,
        help: "secrets, one per line or comma-separated, # comments; if PATH is missing, run \
               creates it at start with a fresh secret, mode 0600 (link and a reload refuse a \
               missing one; check and firewall never read it)",
        kind: Path(|d, p| { d.secret_file = Some(p); Ok(()) }),
    },
    // Upstream.
    Opt {
        reload: Live, long: "--dc-ip", short: None, aliases: &[], env: &["TG_DC_IP"],
        meta: "DC:IP[:PORT]", default: "2:149.154.167.220, 4:149.154.167.220", group: Upstream,
        help: "WebSocket front for a DC, IPv6 in brackets, port 443 if omitted; repeatable, \
               comma list; replaces the defaults; test DC N uses DC N's front unless 1000N is \
               given",
        kind: List(|d, s| parse_dc_addr(s).map(|(dc, a)| { d.config.ws_addrs.insert(dc, a); })),
    },
    Opt {
        reload: Live, long: "--tcp-dc-ip", short: None, aliases: &[], env: &["TG_TCP_DC_IP"],
        meta: "DC:IP[:PORT]", default: "built-in DC table, port 443", group: Upstream,
        help: "raw TCP target for a DC, same forms; repeatable, comma list; test DC N (init \
               index 1000N) is set only as 1000N, never by N",
        kind: List(|d, s| parse_dc_addr(s).map(|(dc, a)| { d.config.tcp_addrs.insert(dc, a); })),
    },
    Opt {
        reload: Live, long: "--fronting-domain", short: None, aliases: &[], env: &["TG_FRONTING_DOMAIN"],
        meta: "NAME", default: "none", group: Upstream,
        help: "domain fronting: tier front dials a DC's WS front with TLS SNI NAME (the \
               certificate is verified against NAME), Host kwsN.web.telegram.org; tried only \
               after the ws route failed at TLS or upgrade; repeatable, comma list",
        kind: List(|d, s| {
            super::values::parse_fronting_domain(s).map(|n| {
                if !d.config.fronting_domains.contains(&n) {
                    d.config.fronting_domains.push(n);
                }
            })
        }),
    },
    Opt {
        reload: Live, long: "--cf-worker-domain", short: None, aliases: &["--cfproxy-worker-domain"],
        env: &["TG_CF_WORKER_DOMAIN"], meta: "HOST[@ACCOUNT]", default: "none", group: Upstream,
        help: "Cloudflare Worker (a pasted URL is fine); @ACCOUNT groups custom domains that share \
               one account's quota; repeatable, comma list",
        kind: List(|d, s| {
            let (ep, group) = parse_worker_endpoint(s)?;
            if let Some(g) = group {
                d.config.worker_groups.push((ep.clone(), g));
            }
            d.config.worker_domains.push(ep);
            Ok(())
        }),
    },
    Opt {
        reload: Live, long: "--cf-domain", short: None, aliases: &[], env: &["TG_CF_DOMAIN"],
        meta: "DOMAIN", default: "none", group: Upstream,
        help: "Cloudflare-proxied domain with kwsN records; repeatable, comma list",
        kind: List(|d, s| parse_cf_endpoint(s).map(|e| d.config.cf_domains.push(e))),
    },
    Opt {
        reload: Live, long: "--cf-ip", short: None, aliases: &[], env: &["TG_CF_IP"],
        meta: "LIST", default: "none", group: Upstream,
        help: "Cloudflare edge for the worker, cfproxy and cfproxy-ws tiers (SNI/Host \
               unchanged): an address, a range to sample from, auto (Cloudflare's IPv4 ranges) \
               or auto6; one route per edge instead of the DNS answer; a failed sampled edge \
               is replaced; at most 8 edges; repeatable, comma list",
        kind: List(|d, s| crate::route::edges::parse_cf_ip(s).map(|i| d.config.cf_ips.push(i))),
    },
    Opt {
        reload: Live, long: "--cf-ip-count", short: None, aliases: &[], env: &["TG_CF_IP_COUNT"],
        meta: "N", default: "3", group: Upstream,
        help: "edges sampled from the --cf-ip ranges at once, 1-8",
        kind: Value(|d, s| {
            super::values::parse_in_range(s, 1, crate::route::edges::MAX_EDGES as u64)
                .map(|n| d.config.cf_ip_count = n as usize)
        }),
    },
    Opt {
        reload: Live, long: "--mtproto-proxy", short: None, aliases: &[], env: &["TG_MTPROTO_PROXY"],
        meta: "HOST:PORT:SECRET", default: "none", group: Upstream,
        help: "upstream MTProto proxy for the mtproto tier (IPv6 in brackets; secret plain, dd \
               or ee); repeatable, comma list",
        kind: List(|d, s| {
            crate::mtproto::upstream::MtprotoProxy::parse(s).map(|p| d.config.mtproto_proxies.push(p))
        }),
    },
    Opt {
        reload: Live, long: "--mtproto-hello", short: None, aliases: &[], env: &["TG_MTPROTO_HELLO"],
        meta: "classic|chrome", default: "classic", group: Upstream,
        help: "ClientHello of the mtproto tier's ee hops: classic = Chrome's with post-quantum \
               key agreement off (517 bytes, every server takes it); chrome = Chrome's as \
               shipped (~1.7 KB, Chrome's JA4; mtg, telemt and this proxy take it, the official \
               MTProxy refuses it)",
        kind: Value(|d, s| match s {
            "classic" => { d.config.mtproto_hello = crate::mtproto::faketls::client::Shape::ChromeClassic; Ok(()) }
            "chrome" => { d.config.mtproto_hello = crate::mtproto::faketls::client::Shape::Chrome; Ok(()) }
            _ => Err("expected classic or chrome".into()),
        }),
    },
    Opt {
        reload: Live, long: "--cf-domain-list", short: None, aliases: &[], env: &["TG_CF_DOMAIN_LIST"],
        meta: "URL|FILE", default: "the original's GitHub list", group: Upstream,
        help: "shared Cloudflare domain list (https URL or file), tried after --cf-domain; off = none",
        kind: Value(|d, s| {
            let src = crate::route::cflist::parse_source(s)?;
            d.config.cf_domain_list = src.map(|_| s.trim().to_string());
            Ok(())
        }),
    },
    Opt {
        reload: Live, long: "--cf-domain-cache", short: None, aliases: &[], env: &["TG_CF_DOMAIN_CACHE"],
        meta: "PATH", default: "none", group: Upstream,
        help: "keep the last accepted shared domain list in PATH: read at start and used until \
               a fetch succeeds; rewritten only when the list changes",
        kind: Path(|d, p| { d.config.cf_domain_cache = Some(p); Ok(()) }),
    },
    Opt {
        reload: Live, long: "--cf-domain-list-refresh", short: None, aliases: &[],
        env: &["TG_CF_DOMAIN_LIST_REFRESH"], meta: "D", default: "1h", group: Upstream,
        help: "fetch the shared domain list again after D (jittered 20%)",
        kind: Value(|d, s| positive(s).map(|v| d.config.cf_domain_list_refresh = v)),
    },
    Opt {
        reload: Live, long: "--cf-domain-list-retry", short: None, aliases: &[],
        env: &["TG_CF_DOMAIN_LIST_RETRY"], meta: "D", default: "60s", group: Upstream,
        help: "first wait after a failed list fetch; doubles up to the refresh interval",
        kind: Value(|d, s| positive(s).map(|v| d.config.cf_domain_list_retry = v)),
    },
    Opt {
        reload: Live, long: "--cf-domain-list-timeout", short: None, aliases: &[],
        env: &["TG_CF_DOMAIN_LIST_TIMEOUT"], meta: "D", default: "10s", group: Upstream,
        help: "bound on one whole list fetch (DNS, TLS, GET, redirects)",
        kind: Value(|d, s| positive(s).map(|v| d.config.cf_domain_list_timeout = v)),
    },
    Opt {
        reload: Live, long: "--cf-domain-list-port", short: None, aliases: &[],
        env: &["TG_CF_DOMAIN_LIST_PORT"], meta: "PORT", default: "443", group: Upstream,
        help: "TCP port the shared list's domains are dialled on",
        kind: Value(|d, s| match s.parse::<u16>() {
            Ok(p) if p > 0 => { d.config.cf_domain_list_port = p; Ok(()) }
            _ => Err("must be a port 1-65535".into()),
        }),
    },
    Opt {
        reload: Live, long: "--cfproxy-ws", short: None, aliases: &[], env: &["TG_CFPROXY_WS"],
        meta: "", default: "off", group: Upstream,
        help: "the cfproxy-ws tier: the --cf-domain (and shared list) names over plain ws:// \
               to --cf-ws-port, no TLS, after the TLS tiers; for networks that throttle TLS \
               to Cloudflare by SNI (MTProto inside stays obfuscated and encrypted)",
        kind: Switch(|d, on| d.config.cfproxy_ws = on),
    },
    Opt {
        reload: Live, long: "--cf-ws-port", short: None, aliases: &[], env: &["TG_CF_WS_PORT"],
        meta: "PORT", default: "80", group: Upstream,
        help: "TCP port of the cfproxy-ws tier (Cloudflare proxies plain HTTP on 80, 8080, \
               8880, 2052, 2082, 2086, 2095)",
        kind: Value(|d, s| match s.parse::<u16>() {
            Ok(p) if p > 0 => { d.config.cf_ws_port = p; Ok(()) }
            _ => Err("must be a port 1-65535".into()),
        }),
    },
    Opt {
        reload: Live, long: "--tier-order", short: None, aliases: &[], env: &["TG_TIER_ORDER"],
        meta: "LIST", default: "ws,front,worker,cfproxy,mtproto,cfproxy-ws,tcp", group: Upstream,
        help: "tiers to try, in order: ws, front, worker, cfproxy, mtproto, cfproxy-ws, tcp \
               (unconfigured tiers are skipped)",
        kind: Value(|d, s| parse_tier_order(s).map(|t| d.config.tier_order = t)),
    },
    Opt {
        reload: Live, long: "--media-tier-order", short: None, aliases: &[], env: &["TG_MEDIA_TIER_ORDER"],
        meta: "LIST", default: "as --tier-order", group: Upstream,
        help: "tiers to try for media DCs (downloads: DC -N), in order, e.g. to keep the heavy \
               traffic off a Worker's daily quota",
        kind: Value(|d, s| parse_tier_order(s).map(|t| d.config.media_tier_order = Some(t))),
    },
    Opt {
        reload: Live, long: "--cf-priority", short: None, aliases: &[], env: &["TG_CF_PRIORITY"],
        meta: "", default: "off", group: Upstream,
        help: "Cloudflare's TLS tiers first: worker,cfproxy,ws,front,mtproto,cfproxy-ws,tcp \
               (--tier-order wins)",
        kind: Switch(|d, on| d.cf_priority = on),
    },
    Opt {
        reload: Live, long: "--ws-connect-timeout", short: None, aliases: &[], env: &["TG_WS_CONNECT_TIMEOUT"],
        meta: "D", default: "10s", group: Upstream,
        help: "bound on TCP + TLS + upgrade of one ws attempt",
        kind: Value(|d, s| positive(s).map(|v| d.config.ws_connect_timeout = v)),
    },
    Opt {
        reload: Live, long: "--cf-connect-timeout", short: None, aliases: &[], env: &["TG_CF_CONNECT_TIMEOUT"],
        meta: "D", default: "10s", group: Upstream,
        help: "the same for worker and cfproxy attempts",
        kind: Value(|d, s| positive(s).map(|v| d.config.cf_connect_timeout = v)),
    },
    Opt {
        reload: Live, long: "--tcp-connect-timeout", short: None, aliases: &["--tcp-fallback-timeout"],
        env: &["TG_TCP_CONNECT_TIMEOUT", "TG_TCP_FALLBACK_TIMEOUT"],
        meta: "D", default: "10s", group: Upstream,
        help: "bound on one tcp tier connect",
        kind: Value(|d, s| positive(s).map(|v| d.config.tcp_connect_timeout = v)),
    },
    Opt {
        reload: Live, long: "--ca-file", short: None, aliases: &[], env: &["TG_CA_FILE"],
        meta: "PATH", default: "none", group: Upstream,
        help: "extra trusted CA certificates (PEM) next to the bundled web PKI roots; must be \
               readable",
        kind: Path(|d, p| check_readable_file(&p).map(|()| d.config.ca_file = Some(p))),
    },
    Opt {
        reload: Live, long: "--danger-accept-invalid-certs", short: None, aliases: &[],
        env: &["TG_SKIP_TLS_VERIFY"], meta: "", default: "off", group: Upstream,
        help: "do not verify upstream TLS certificates (testing only)",
        kind: Switch(|d, on| d.config.accept_invalid_certs = on),
    },
    Opt {
        reload: Live, long: "--tls-cipher", short: None, aliases: &[], env: &["TG_TLS_CIPHER"],
        meta: "C", default: "auto", group: Upstream,
        help: "TLS cipher family offered first: auto (AES-GCM if the CPU has AES instructions, \
               else ChaCha20-Poly1305), aes-gcm or chacha20",
        kind: Value(|d, s| CipherPref::parse(s).map(|v| d.config.tls_cipher = v)),
    },
    Opt {
        reload: Live, long: "--outbound-proxy", short: None, aliases: &[], env: &["TG_OUTBOUND_PROXY"],
        meta: "URL", default: "none", group: Upstream,
        help: "send every upstream connection (all tiers, probes, pool fills, check) through \
               socks5://[user:pass@]HOST:PORT, socks5h://… or http://[user:pass@]HOST:PORT \
               (CONNECT); HOST an address or a name we resolve; none = direct",
        kind: Value(|d, s| {
            crate::net::outbound::parse_flag(s).map(|p| d.config.outbound_proxy = p)
        }),
    },
    Opt {
        reload: Live, long: "--no-outbound-proxy-for", short: None, aliases: &[],
        env: &["TG_NO_OUTBOUND_PROXY_FOR"], meta: "LIST", default: "none", group: Upstream,
        help: "destinations dialled directly despite --outbound-proxy: host, .suffix, *, IP or \
               CIDR; repeatable, comma list",
        kind: List(|d, s| {
            crate::net::outbound::check_bypass_item(s)
                .map(|()| d.config.no_outbound_proxy_for.push(s.to_string()))
        }),
    },
    Opt {
        reload: Live, long: "--outbound-proxy-backoff", short: None, aliases: &[],
        env: &["TG_OUTBOUND_PROXY_BACKOFF"], meta: "D", default: "500ms", group: Upstream,
        help: "while the outbound proxy is down, background work waits and one dial re-checks \
               it after D, doubling per re-check up to --outbound-proxy-backoff-max (each wait \
               80-100% of its step)",
        kind: Value(|d, s| positive(s).map(|v| d.config.outbound_proxy_backoff = v)),
    },
    Opt {
        reload: Live, long: "--outbound-proxy-backoff-max", short: None, aliases: &[],
        env: &["TG_OUTBOUND_PROXY_BACKOFF_MAX"], meta: "D", default: "1.5s", group: Upstream,
        help: "cap of that doubling (at least --outbound-proxy-backoff): a proxy that comes \
               back is found within it",
        kind: Value(|d, s| positive(s).map(|v| d.config.outbound_proxy_backoff_max = v)),
    },
];

/// `a` then `b`, as one array of `N` (= both lengths) entries, at compile time.
const fn concat<const N: usize>(a: &[Opt], b: &[Opt]) -> [Opt; N] {
    let mut out = [a[0]; N];
    let mut i = 0;
    while i < N {
        out[i] = if i < a.len() { a[i] } else { b[i - a.len()] };
        i += 1;
    }
    out
}

/// Every `run` flag (also taken by `link` and `check`), in `--help` order within each section.
pub(crate) static RUN_OPTIONS: &[Opt] = &concat::<
    { LISTEN_UPSTREAM.len() + LADDER_CLIENTS_LOGGING.len() },
>(LISTEN_UPSTREAM, LADDER_CLIENTS_LOGGING);

#[cfg(test)]
mod tests {
    use super::super::draft::{Draft, Source};
    use super::super::parse::Taken;
    use super::*;

    /// Defaults shown as words rather than as a value the flag would accept.
    const DESCRIBED_DEFAULTS: [&str; 10] = [
        "none",
        "as --tier-order",
        "built in",
        "Telegram's cidr.txt",
        "the original's GitHub list",
        "off",
        "stderr",
        "detected",
        "built-in DC table, port 443",
        "from the open-files limit",
    ];

    /// Everything a writer can change, as text.
    fn snapshot(d: &Draft) -> String {
        let extras = (&d.secret_file, d.cf_priority, d.verbose, d.quiet);
        format!("{:?} {extras:?}", d.config)
    }

    #[test]
    fn names_are_unique_and_well_formed() {
        let mut seen = Vec::new();
        for o in RUN_OPTIONS {
            assert!(o.long.starts_with("--") && o.long.len() > 3, "{}", o.long);
            if let Some(s) = o.short {
                assert!(s.len() == 2 && s.starts_with('-'), "{s}");
            }
            for a in o.aliases {
                assert!(a.starts_with("--"), "{a}");
            }
            assert!(!o.env.is_empty(), "{} has no variable", o.long);
            for e in o.env {
                assert!(e.starts_with("TG_"), "{e}");
            }
            let names = [o.long]
                .into_iter()
                .chain(o.short)
                .chain(o.aliases.iter().copied());
            for name in names.chain(o.env.iter().copied()) {
                assert!(!seen.contains(&name), "{name} declared twice");
                seen.push(name);
            }
            assert_eq!(o.meta.is_empty(), !o.kind.takes_value(), "{}: meta", o.long);
            assert!(!o.help.is_empty() && !o.default.is_empty(), "{}", o.long);
        }
    }

    /// Feeding an option its shown default through the real driver leaves the configuration
    /// as it was; a default in words must be one of the known ones (switches: `off`, fed as
    /// their variable set to 0).
    #[test]
    fn shown_defaults_are_the_real_defaults() {
        let mut untouched = Draft::new();
        untouched.settle().unwrap();
        let want = snapshot(&untouched);
        for o in RUN_OPTIONS {
            let mut d = Draft::new();
            let (taken, env): (Taken, Option<&str>) = if !o.kind.takes_value() {
                assert_eq!(o.default, "off", "{}: a switch's default is off", o.long);
                (Taken::default(), Some("0"))
            } else if DESCRIBED_DEFAULTS.contains(&o.default) {
                continue;
            } else {
                let values = vec![o.default.to_string()];
                (Taken { values, count: 0 }, None)
            };
            let lookup = |_: &str| env.map(str::to_string);
            d.apply(o, taken, &lookup)
                .unwrap_or_else(|e| panic!("{}: default {:?}: {e}", o.long, o.default));
            assert!(env.is_none() || d.source(o.long).is_some_and(|s| s != Source::Flag));
            d.settle().unwrap();
            assert_eq!(
                snapshot(&d),
                want,
                "{}: default {:?} is not the real one",
                o.long,
                o.default
            );
        }
    }
}
