//! The one table of `run` flags ([`RUN_OPTIONS`]): each flag is declared here once — long name,
//! short name, old aliases, `TG_*` variables, the default as users see it, help text, and its
//! kind with the writer that stores the value in the configuration under construction.
//!
//! `parse` drives pico-args and the environment from this table, `help` renders the option
//! part of `run --help` from it, and the tests below hold it to `Config`'s real defaults and
//! to README's flag table.
//! Rules that join several flags (`--cf-priority` yielding to `--tier-order`, `-v` against
//! `-q`, `--cooldown-max` and `--outbound-proxy-backoff-max` at least their bases, the secret
//! file read last) live in `parse`
//! (`Draft::settle`, `Draft::finish`); value grammars live in `values` and `duration`;
//! range checks live in the writers here. Adding a flag: one entry here, the `Config` field its
//! writer sets, one README row.

use std::path::PathBuf;
use std::time::Duration;

use super::draft::Draft;
use super::duration::parse_duration;
use super::values::{
    check_readable_file, parse_bool, parse_cf_endpoint, parse_dc_addr, parse_in_range, parse_ip,
    parse_link_host, parse_tier_order,
};
use crate::mtproto::obfs2::Secret;
use crate::net::tls::CipherPref;

/// Upper bound of `--max-connections` (the slab is allocated once at this size).
pub const MAX_CONNECTIONS_LIMIT: usize = 65_536;

/// A writer: stores one (trimmed) value or list item in the draft, or says what is wrong with
/// it (a message without the flag's name; the driver adds flag and variable).
pub(crate) type Write = fn(&mut Draft, &str) -> Result<(), String>;

/// How a flag takes its value, and how its environment variable is read.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// One value, trimmed: the last command-line occurrence wins, else the first set variable.
    Value(Write),
    /// One file path, taken verbatim (not trimmed); otherwise like `Value`.
    Path(fn(&mut Draft, PathBuf) -> Result<(), String>),
    /// Repeatable comma list: the writer sees every item (trimmed, blanks skipped) of every
    /// command-line occurrence in order, else of the first set variable. An occurrence with no
    /// item is an error (`empty value`).
    List(Write),
    /// On or off; the variable is a boolean (`1`/`true`/`yes`/`on`, `0`/`false`/`no`/`off`).
    Switch(fn(&mut Draft, bool)),
    /// Counted per occurrence (`-v -v` is 2); the variable is a boolean, counted 1 or 0.
    Count(fn(&mut Draft, u32)),
}

impl Kind {
    /// True for the kinds that take a value after the flag.
    pub(crate) fn takes_value(self) -> bool {
        matches!(self, Kind::Value(_) | Kind::Path(_) | Kind::List(_))
    }
}

/// The `run --help` section a flag is listed in; sections print in [`Group::ALL`] order, flags
/// in table order within their section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    Listen,
    Upstream,
    Ladder,
    Clients,
    Logging,
}

impl Group {
    /// Every section, in help order.
    pub(crate) const ALL: [Group; 5] = [
        Group::Listen,
        Group::Upstream,
        Group::Ladder,
        Group::Clients,
        Group::Logging,
    ];

    /// The section's heading line.
    pub(crate) fn heading(self) -> &'static str {
        match self {
            Group::Listen => "Listening and secrets:",
            Group::Upstream => "Upstream:",
            Group::Ladder => {
                "Ladder (route health is learned in the background; clients never wait on a dead \
                 route):"
            }
            Group::Clients => "Clients and resources:",
            Group::Logging => "Logging:",
        }
    }

    /// A line printed after the section's flags, if any.
    pub(crate) fn note(self) -> Option<&'static str> {
        match self {
            Group::Listen => {
                Some("At least one secret is required (`tg-ws-proxy genkey` makes one).")
            }
            _ => None,
        }
    }
}

/// What a reload (SIGHUP, `ctl reload`) does with a changed value of a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Applied to new sessions at once; "reload: applied (SETTING)" names it.
    Live,
    /// Sized or opened once at start: a reload keeps the old value and says "needs a restart:
    /// SETTING" (`reactor::reload::keep_restart_only`).
    Restart,
}

/// One `run` flag, declared once.
pub(crate) struct Opt {
    /// What a reload does with a changed value (`--help` marks [`Reload::Restart`] flags).
    pub reload: Reload,
    /// Canonical long name (`--port`); errors name it.
    pub long: &'static str,
    /// Short form (`-p`), if any.
    pub short: Option<&'static str>,
    /// Older long spellings still accepted on the command line; their values count after the
    /// long name's (so with both given, the alias's last value wins).
    pub aliases: &'static [&'static str],
    /// Environment variables, canonical first (later ones are compatibility spellings); the
    /// first one set is used when the flag is absent.
    pub env: &'static [&'static str],
    /// The value's placeholder in help (`N`, `D`, `PATH`); empty for switches.
    pub meta: &'static str,
    /// The default exactly as `--help` and README show it: a value the writer accepts and that
    /// leaves the default config unchanged, or words (`none`, `off`, `detected`, …; the
    /// tests keep the list).
    pub default: &'static str,
    /// The help section.
    pub group: Group,
    /// What the flag does, for `--help` (which adds aliases, variables and the default).
    pub help: &'static str,
    /// How the value is taken and where it is stored.
    pub kind: Kind,
}

impl Opt {
    /// The setting this flag sets, as a reload's report names it (`reactor::reload`): the long
    /// name without `--`, except for flags that share one setting (`listen`, `secrets`,
    /// `cooldown`, `verbose`, `tier-order`) and `--config`, which is the source itself.
    pub(crate) fn setting(&self) -> &'static str {
        match self.long {
            "--host" | "--port" => "listen",
            "--secret" | "--secret-file" => "secrets",
            "--cooldown-base"
            | "--cooldown-max"
            | "--flap-quarantine"
            | "--redirect-ttl"
            | "--closed-after-reply-cooldown" => "cooldown",
            "--verbose" | "--quiet" => "verbose",
            "--cf-priority" => "tier-order",
            long => &long[2..],
        }
    }
}

/// Any duration, 0 included.
fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// A duration above 0.
fn positive(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be greater than 0".into()),
        d => Ok(d),
    }
}

/// 0, or whole seconds of at least 1 (fake-TLS timestamps are whole seconds).
fn tls_window(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.subsec_nanos() != 0 => Err("must be whole seconds".into()),
        d => Ok(d),
    }
}

/// A duration above 0, in whole milliseconds (the route health policy's unit).
fn positive_ms(s: &str) -> Result<u64, String> {
    // At most MAX_DURATION (24 h), so the milliseconds fit in u64.
    positive(s).map(|d| d.as_millis() as u64)
}

use Group::{Clients, Ladder, Listen, Logging, Upstream};
use Kind::{Count, List, Path, Switch, Value};
use Reload::{Live, Restart};

/// Every `run` flag (also taken by `link` and `check`), in `--help` order within each section.
#[rustfmt::skip]
pub(crate) static RUN_OPTIONS: &[Opt] = &[
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
        help: "secrets, one per line or comma-separated, # comments; if PATH is missing it is \
               created with a fresh secret, mode 0600",
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
        env: &["TG_CF_WORKER_DOMAIN"], meta: "HOST", default: "none", group: Upstream,
        help: "Cloudflare Worker (a pasted URL is fine); repeatable, comma list",
        kind: List(|d, s| parse_cf_endpoint(s).map(|e| d.config.worker_domains.push(e))),
    },
    Opt {
        reload: Live, long: "--cf-domain", short: None, aliases: &[], env: &["TG_CF_DOMAIN"],
        meta: "DOMAIN", default: "none", group: Upstream,
        help: "Cloudflare-proxied domain with kwsN records; repeatable, comma list",
        kind: List(|d, s| parse_cf_endpoint(s).map(|e| d.config.cf_domains.push(e))),
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
        reload: Live, long: "--tier-order", short: None, aliases: &[], env: &["TG_TIER_ORDER"],
        meta: "LIST", default: "ws,front,worker,cfproxy,mtproto,tcp", group: Upstream,
        help: "tiers to try, in order: ws, front, worker, cfproxy, mtproto, tcp (unconfigured tiers are skipped)",
        kind: Value(|d, s| parse_tier_order(s).map(|t| d.config.tier_order = t)),
    },
    Opt {
        reload: Live, long: "--cf-priority", short: None, aliases: &[], env: &["TG_CF_PRIORITY"],
        meta: "", default: "off", group: Upstream,
        help: "Cloudflare tiers first: worker,cfproxy,ws,front,mtproto,tcp (--tier-order wins)",
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
    // Ladder.
    Opt {
        reload: Live, long: "--hedge-delay", short: None, aliases: &[], env: &["TG_HEDGE_DELAY"],
        meta: "D", default: "250ms", group: Ladder,
        help: "start the next route in parallel if the first is not ready by then; a route's \
               2 x p95 once known (2 x its slowest sample before that)",
        kind: Value(|d, s| positive(s).map(|v| d.config.hedge_delay = v)),
    },
    Opt {
        reload: Live, long: "--connect-budget", short: None, aliases: &[], env: &["TG_CONNECT_BUDGET"],
        meta: "D", default: "3s", group: Ladder,
        help: "bound on a client's whole connect phase; past it the client is closed so it \
               reconnects",
        kind: Value(|d, s| positive(s).map(|v| d.config.connect_budget = v)),
    },
    Opt {
        reload: Live, long: "--handshake-pace", short: None, aliases: &[], env: &["TG_HANDSHAKE_PACE"],
        meta: "D", default: "20ms", group: Ladder,
        help: "one handshake per address is earned every D (a burst of --handshake-burst \
               starts at once), 0 = off",
        kind: Value(|d, s| duration(s).map(|v| d.config.handshake_pace = v)),
    },
    Opt {
        reload: Live, long: "--handshake-burst", short: None, aliases: &[], env: &["TG_HANDSHAKE_BURST"],
        meta: "N", default: "8", group: Ladder,
        help: "handshakes an idle address may start at once, 1-1000; background work leaves \
               half of them to clients",
        kind: Value(|d, s| {
            parse_in_range(s, 1, 1_000).map(|n| d.config.handshake_burst = n as u32)
        }),
    },
    Opt {
        reload: Live, long: "--pace-max-wait", short: None, aliases: &[], env: &["TG_PACE_MAX_WAIT"],
        meta: "D", default: "50ms", group: Ladder,
        help: "longest pacing ever delays a client's handshake",
        kind: Value(|d, s| duration(s).map(|v| d.config.pace_max_wait = v)),
    },
    Opt {
        reload: Live, long: "--startup-probes", short: None, aliases: &[], env: &["TG_STARTUP_PROBES"],
        meta: "on|off", default: "on", group: Ladder,
        help: "probe the routes of DCs 1-5 once at start (paced, within the budgets), so the \
               first client finds a proven route",
        kind: Value(|d, s| parse_bool(s).map(|v| d.config.startup_probes = v)),
    },
    Opt {
        reload: Live, long: "--cooldown-base", short: None, aliases: &["--ip-fail-cooldown"],
        env: &["TG_COOLDOWN_BASE", "TG_IP_FAIL_COOLDOWN"], meta: "D", default: "10s",
        group: Ladder,
        help: "first cooldown of a failed route, doubled per failure, +-20% jitter",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.base_ms = v)),
    },
    Opt {
        reload: Live, long: "--cooldown-max", short: None, aliases: &[], env: &["TG_COOLDOWN_MAX"],
        meta: "D", default: "600s", group: Ladder,
        help: "cap of the doubling before the +-20% jitter (at least --cooldown-base)",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.max_ms = v)),
    },
    Opt {
        reload: Live, long: "--flap-quarantine", short: None, aliases: &[], env: &["TG_FLAP_QUARANTINE"],
        meta: "D", default: "1800s", group: Ladder,
        help: "minimum cooldown of a route that went down 3 times in 10 min",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.quarantine_ms = v)),
    },
    Opt {
        reload: Live, long: "--redirect-ttl", short: None, aliases: &["--ws-redirect-cooldown"],
        env: &["TG_REDIRECT_TTL", "TG_WS_REDIRECT_COOLDOWN"], meta: "D", default: "3600s",
        group: Ladder,
        help: "how long a 30x from a WS front keeps its route down",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.redirect_ttl_ms = v)),
    },
    Opt {
        reload: Live, long: "--probe-interval", short: None, aliases: &[], env: &["TG_PROBE_INTERVAL"],
        meta: "D", default: "300s", group: Ladder,
        help: "liveness probe of an Up route that clients have dialled, when it carried no \
               traffic for D",
        kind: Value(|d, s| positive(s).map(|v| d.config.probe_interval = v)),
    },
    Opt {
        reload: Live, long: "--probe-timeout", short: None, aliases: &[], env: &["TG_PROBE_TIMEOUT"],
        meta: "D", default: "5s", group: Ladder,
        help: "bound on one background probe",
        kind: Value(|d, s| positive(s).map(|v| d.config.probe_timeout = v)),
    },
    Opt {
        reload: Live, long: "--worker-budget", short: None, aliases: &[], env: &["TG_WORKER_BUDGET"],
        meta: "N", default: "5000", group: Ladder,
        help: "probe + pool requests per day per Worker, 1-100000",
        kind: Value(|d, s| {
            parse_in_range(s, 1, 100_000).map(|n| d.config.worker_budget = n as u32)
        }),
    },
    Opt {
        reload: Live, long: "--pool-size", short: None, aliases: &[], env: &["TG_POOL_SIZE"],
        meta: "N", default: "4", group: Ladder,
        help: "most warm upstreams (TLS + upgrade done) per hot route, 0-16: as many as sessions \
               started there in the last --pool-max-age, at least 1; 0 = no pools; Workers at \
               most 1, none for tcp",
        kind: Value(|d, s| parse_in_range(s, 0, 16).map(|n| d.config.pool_size = n as usize)),
    },
    Opt {
        reload: Live, long: "--pool-max-age", short: None, aliases: &[], env: &["TG_POOL_MAX_AGE"],
        meta: "D", default: "50s", group: Ladder,
        help: "drop a warm upstream after D, before the front's idle close",
        kind: Value(|d, s| positive(s).map(|v| d.config.pool_max_age = v)),
    },
    Opt {
        reload: Live, long: "--pool-first-byte-timeout", short: None, aliases: &[],
        env: &["TG_POOL_FIRST_BYTE_TIMEOUT"],
        meta: "D", default: "2s", group: Ladder,
        help: "a pooled upstream that sends nothing for D after the client's first bytes is \
               taken for dead (a NAT flush leaves no RST): the client's request (up to one \
               --buf-kb) is replayed once on a freshly dialled route, a larger one is closed D \
               after the last bytes the upstream took; 2s is several slow round trips, well under a client's patience; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.pool_first_byte_timeout = v)),
    },
    Opt {
        reload: Live, long: "--ws-ping-interval", short: None, aliases: &[], env: &["TG_WS_PING_INTERVAL"],
        meta: "D", default: "0", group: Ladder,
        help: "WS ping of a session idle for D toward Telegram's front, directly (ws) or \
               through a Cloudflare-proxied domain (cfproxy, which passes it on); 0 = never: \
               that front reportedly closes on client pings",
        kind: Value(|d, s| duration(s).map(|v| d.config.ws_ping_interval = v)),
    },
    Opt {
        reload: Live, long: "--cf-ping-interval", short: None, aliases: &[], env: &["TG_CF_PING_INTERVAL"],
        meta: "D", default: "30s", group: Ladder,
        help: "WS ping of a session idle for D toward a Worker (it ends at Cloudflare's edge, \
               which closes WS idle for ~100 s); 0 = never. A route whose sessions end right \
               after a ping is not pinged for --pings-off-for",
        kind: Value(|d, s| duration(s).map(|v| d.config.cf_ping_interval = v)),
    },
    Opt {
        reload: Live, long: "--pings-off-for", short: None, aliases: &[], env: &["TG_PINGS_OFF_FOR"],
        meta: "D", default: "1h", group: Ladder,
        help: "a route whose session the upstream ended right after our WS ping is not pinged \
               for D (then tried again)",
        kind: Value(|d, s| positive(s).map(|v| d.config.pings_off_for = v)),
    },
    Opt {
        reload: Live, long: "--tcp-keepalive", short: None, aliases: &[], env: &["TG_TCP_KEEPALIVE"],
        meta: "D", default: "60s", group: Ladder,
        help: "TCP keepalive idle time on every socket, 0 = off",
        kind: Value(|d, s| duration(s).map(|v| d.config.tcp_keepalive = v)),
    },
    Opt {
        reload: Restart, long: "--hosts-file", short: None, aliases: &[], env: &["TG_HOSTS_FILE"],
        meta: "PATH", default: "/etc/hosts", group: Ladder,
        help: "hosts file for the resolver",
        kind: Path(|d, p| { d.config.hosts_file = p; Ok(()) }),
    },
    Opt {
        reload: Restart, long: "--resolv-conf", short: None, aliases: &[], env: &["TG_RESOLV_CONF"],
        meta: "PATH", default: "/etc/resolv.conf", group: Ladder,
        help: "nameservers for the resolver",
        kind: Path(|d, p| { d.config.resolv_conf = p; Ok(()) }),
    },
    Opt {
        reload: Live, long: "--short-session", short: None, aliases: &[], env: &["TG_SHORT_SESSION"],
        meta: "D", default: "3s", group: Ladder,
        help: "a session the upstream ends within D after 24 B to 1 KiB down is short; 3 in a \
               row on one route put it down as closed-after-reply. An upstream close within D \
               after our WS ping turns pings off for the route for --pings-off-for",
        kind: Value(|d, s| positive(s).map(|v| d.config.short_session = v)),
    },
    Opt {
        reload: Live, long: "--closed-after-reply-cooldown", short: None, aliases: &[],
        env: &["TG_CLOSED_AFTER_REPLY_COOLDOWN"], meta: "D", default: "60s", group: Ladder,
        help: "minimum cooldown of a route down for closed-after-reply",
        kind: Value(|d, s| positive_ms(s).map(|v| d.config.health.closed_after_reply_ms = v)),
    },
    Opt {
        reload: Live, long: "--stall-timeout", short: None, aliases: &[], env: &["TG_STALL_TIMEOUT"],
        meta: "D", default: "8s", group: Ladder,
        help: "a session whose upstream sends nothing for D while the client waits (inside a \
               reply, or after it asked twice; twice D for re-asks) froze: it is ended so the \
               client reconnects; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stall_timeout = v)),
    },
    Opt {
        reload: Live, long: "--stall-ack-timeout", short: None, aliases: &[], env: &["TG_STALL_ACK_TIMEOUT"],
        meta: "D", default: "5s", group: Ladder,
        help: "a session whose upstream socket ACKs nothing of ours for D while the client \
               waits (a short keepalive is armed then) froze: it is ended; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stall_ack_timeout = v)),
    },
    Opt {
        reload: Live, long: "--stall-give-up", short: None, aliases: &[], env: &["TG_STALL_GIVE_UP"],
        meta: "D", default: "2s", group: Ladder,
        help: "a client that closes after waiting D inside a reply counts as a frozen \
               session; 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stall_give_up = v)),
    },
    Opt {
        reload: Live, long: "--stall-window", short: None, aliases: &[], env: &["TG_STALL_WINDOW"],
        meta: "D", default: "120s", group: Ladder,
        help: "one frozen session makes its route suspect (a probe that must pull \
               --stall-probe-bytes runs at once); a second within D puts it down as stalled",
        kind: Value(|d, s| positive(s).map(|v| d.config.stall_window = v)),
    },
    Opt {
        reload: Live, long: "--stall-probe-bytes", short: None, aliases: &[], env: &["TG_STALL_PROBE_BYTES"],
        meta: "N", default: "32768", group: Ladder,
        help: "a probe of a route that stalled must pull N bytes down (pipelined resPQ \
               replies) within --probe-timeout, 1024-1048576",
        kind: Value(|d, s| {
            parse_in_range(s, 1024, 1 << 20).map(|n| d.config.stall_probe_bytes = n as u32)
        }),
    },
    // Clients and resources.
    Opt {
        reload: Live, long: "--handshake-timeout", short: None, aliases: &[], env: &["TG_HANDSHAKE_TIMEOUT"],
        meta: "D", default: "10s", group: Clients,
        help: "deadline for a client's 64-byte init, its PROXY header and fake-TLS hello \
               included (a TLS start still incomplete then is masked)",
        kind: Value(|d, s| positive(s).map(|v| d.config.handshake_timeout = v)),
    },
    Opt {
        reload: Live, long: "--idle-timeout", short: None, aliases: &[], env: &["TG_IDLE_TIMEOUT"],
        meta: "D", default: "600s", group: Clients,
        help: "close a session with no payload either way for D",
        kind: Value(|d, s| positive(s).map(|v| d.config.idle_timeout = v)),
    },
    Opt {
        reload: Live, long: "--bad-client-drain", short: None, aliases: &[], env: &["TG_BAD_CLIENT_DRAIN"],
        meta: "D", default: "2s", group: Clients,
        help: "read and discard a rejected client for D, 0 = close at once",
        kind: Value(|d, s| duration(s).map(|v| d.config.bad_client_drain = v)),
    },
    Opt {
        reload: Live, long: "--close-linger", short: None, aliases: &[], env: &["TG_CLOSE_LINGER"],
        meta: "D", default: "2s", group: Clients,
        help: "after one side closes, keep flushing the other for at most D",
        kind: Value(|d, s| duration(s).map(|v| d.config.close_linger = v)),
    },
    Opt {
        reload: Restart, long: "--max-connections", short: None, aliases: &[], env: &["TG_MAX_CONNECTIONS"],
        meta: "N", default: "from the open-files limit", group: Clients,
        help: "concurrent client sessions, 1-65536; the default fits the open-files limit (3 \
               per session, 32 spare), at least 4, or 512 when the limit is unknown",
        kind: Value(|d, s| {
            parse_in_range(s, 1, MAX_CONNECTIONS_LIMIT as u64)
                .map(|n| d.config.max_connections = n as usize)
        }),
    },
    Opt {
        reload: Restart, long: "--buf-kb", short: None, aliases: &[], env: &["TG_BUF_KB"],
        meta: "N", default: "16", group: Clients,
        help: "relay buffer size in KiB (up to two per session, from a pool, only while data waits; \
               one more until a pooled upstream's first byte), 4-1024",
        kind: Value(|d, s| {
            parse_in_range(s, 4, 1024).map(|n| d.config.buf_size = n as usize * 1024)
        }),
    },
    Opt {
        reload: Live, long: "--mem-trim-delay", short: None, aliases: &[], env: &["TG_MEM_TRIM_DELAY"],
        meta: "D", default: "10s", group: Clients,
        help: "once a burst of sessions has ended (at most half as many left, at least 32 gone),                give the memory they freed back to the OS D later, 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.mem_trim_delay = v)),
    },
    Opt {
        reload: Live, long: "--proxy-protocol", short: None, aliases: &[], env: &["TG_PROXY_PROTOCOL"],
        meta: "", default: "off", group: Clients,
        help: "require a PROXY protocol v1 or v2 header first (behind nginx ssl_preread or \
               HAProxy); its client address is used for logs and per-client limits, a \
               connection without a valid one is refused",
        kind: Switch(|d, on| d.config.proxy_protocol = on),
    },
    Opt {
        reload: Live, long: "--max-per-ip", short: None, aliases: &[], env: &["TG_MAX_PER_IP"],
        meta: "N", default: "128", group: Clients,
        help: "concurrent sessions per client address (IPv6: per /64), 0 = no cap, 0-65536",
        kind: Value(|d, s| {
            parse_in_range(s, 0, MAX_CONNECTIONS_LIMIT as u64)
                .map(|n| d.config.max_per_ip = n as usize)
        }),
    },
    Opt {
        reload: Live, long: "--per-ip-rate", short: None, aliases: &[], env: &["TG_PER_IP_RATE"],
        meta: "N", default: "20", group: Clients,
        help: "new connections per second a client address earns (a token bucket of \
               --per-ip-burst), 0 = off, 0-100000",
        kind: Value(|d, s| parse_in_range(s, 0, 100_000).map(|n| d.config.per_ip_rate = n as u32)),
    },
    Opt {
        reload: Live, long: "--per-ip-burst", short: None, aliases: &[], env: &["TG_PER_IP_BURST"],
        meta: "N", default: "64", group: Clients,
        help: "new connections an idle client address may open at once, 1-100000",
        kind: Value(|d, s| parse_in_range(s, 1, 100_000).map(|n| d.config.per_ip_burst = n as u32)),
    },
    Opt {
        reload: Live, long: "--per-ip-mask", short: None, aliases: &[], env: &["TG_PER_IP_MASK"],
        meta: "N", default: "64", group: Clients,
        help: "with an ee secret, a connection over --max-per-ip or the rate is masked like a \
               client that is not ours (a prober sees the site, not a refusal) while fewer \
               than N such are open, all addresses together; past N, or N = 0: closed at once, \
               0-65536",
        kind: Value(|d, s| {
            parse_in_range(s, 0, MAX_CONNECTIONS_LIMIT as u64).map(|n| d.config.per_ip_mask = n as u32)
        }),
    },
    Opt {
        reload: Live, long: "--mask-host", short: None, aliases: &[], env: &["TG_MASK_HOST"],
        meta: "HOST[:PORT]", default: "none", group: Clients,
        help: "relay a client that is not ours (not a fake-TLS hello of any secret, or not TLS \
               on an ee-only port) byte for byte to HOST (port 443 unless given); default the \
               ee secret's domain matching the hello's SNI, else the first ee secret's",
        kind: Value(|d, s| {
            parse_cf_endpoint(s).map(|e| d.config.mask_host = Some((e.host, e.port)))
        }),
    },
    Opt {
        reload: Live, long: "--no-mask", short: None, aliases: &[], env: &["TG_NO_MASK"],
        meta: "", default: "off", group: Clients,
        help: "close a client that is not ours instead of masking it",
        kind: Switch(|d, on| d.config.no_mask = on),
    },
    Opt {
        reload: Live, long: "--mask-connect-timeout", short: None, aliases: &[],
        env: &["TG_MASK_CONNECT_TIMEOUT"], meta: "D", default: "5s", group: Clients,
        help: "bound on the TCP connect to the mask host",
        kind: Value(|d, s| positive(s).map(|v| d.config.mask_connect_timeout = v)),
    },
    Opt {
        reload: Live, long: "--mask-idle-timeout", short: None, aliases: &[], env: &["TG_MASK_IDLE_TIMEOUT"],
        meta: "D", default: "60s", group: Clients,
        help: "close a masked session with no byte either way for D",
        kind: Value(|d, s| positive(s).map(|v| d.config.mask_idle_timeout = v)),
    },
    Opt {
        reload: Live, long: "--tls-time-window", short: None, aliases: &[], env: &["TG_TLS_TIME_WINDOW"],
        meta: "D", default: "120s", group: Clients,
        help: "refuse a fake-TLS (ee) hello whose timestamp is more than D off the clock, whole \
               seconds, 0 = never check; only once the clock is trusted (past this release's date and \
               stepped by NTP or agreeing with a client's hello), so a router without a \
               real-time clock still lets clients in",
        kind: Value(|d, s| tls_window(s).map(|v| d.config.tls_time_window = v)),
    },
    Opt {
        reload: Restart, long: "--replay-cache", short: None, aliases: &[], env: &["TG_REPLAY_CACHE"],
        meta: "N", default: "8192", group: Clients,
        help: "fake-TLS hellos remembered to refuse a replayed one (32 bytes each, allocated at \
               start), 1-1048576; 0 = off, unsafe: a recorded hello is answered again",
        kind: Value(|d, s| {
            parse_in_range(s, 0, 1 << 20).map(|n| d.config.replay_cache = n as usize)
        }),
    },
    // Logging.
    Opt {
        reload: Live, long: "--verbose", short: Some("-v"), aliases: &[], env: &["TG_VERBOSE"],
        meta: "", default: "off", group: Logging,
        help: "debug lines; twice for trace",
        kind: Count(|d, n| d.verbose = n),
    },
    Opt {
        reload: Live, long: "--quiet", short: Some("-q"), aliases: &[], env: &["TG_QUIET"],
        meta: "", default: "off", group: Logging,
        help: "warnings and errors only",
        kind: Count(|d, n| d.quiet = n),
    },
    Opt {
        reload: Restart, long: "--log-file", short: None, aliases: &[], env: &["TG_LOG_FILE"],
        meta: "PATH", default: "stderr", group: Logging,
        help: "append to PATH instead of stderr",
        kind: Path(|d, p| { d.config.log_file = Some(p); Ok(()) }),
    },
    Opt {
        reload: Restart, long: "--log-max-kb", short: None, aliases: &[], env: &["TG_LOG_MAX_KB"],
        meta: "N", default: "1024", group: Logging,
        help: "past N KiB, PATH is renamed to PATH.1 (one rotation), 1-4194304",
        kind: Value(|d, s| {
            parse_in_range(s, 1, 4 * 1024 * 1024).map(|n| d.config.log_max_bytes = n * 1024)
        }),
    },
    Opt {
        reload: Live, long: "--log-fold-interval", short: None, aliases: &[],
        env: &["TG_LOG_FOLD_INTERVAL"], meta: "D", default: "6s", group: Logging,
        help: "a repeatable warning (per kind) is written at most once per D, with the count \
               of the ones folded since; 0 = every line",
        kind: Value(|d, s| duration(s).map(|v| d.config.log_fold_interval = v)),
    },
    Opt {
        reload: Live, long: "--stats-interval", short: None, aliases: &[], env: &["TG_STATS_INTERVAL"],
        meta: "D", default: "300s", group: Logging,
        help: "period of the stats line, 0 = never",
        kind: Value(|d, s| duration(s).map(|v| d.config.stats_interval = v)),
    },
    Opt {
        reload: Live, long: "--link-ip", short: None, aliases: &[], env: &["TG_LINK_IP"],
        meta: "HOST", default: "detected", group: Logging,
        help: "host name or IP put in `tg-ws-proxy link` output",
        kind: Value(|d, s| parse_link_host(s).map(|h| d.config.link_ip = Some(h))),
    },
    Opt {
        reload: Live, long: "--drain-timeout", short: None, aliases: &[], env: &["TG_DRAIN_TIMEOUT"],
        meta: "D", default: "5s", group: Clients,
        help: "on SIGTERM/SIGINT stop accepting, write the stats line, let sessions finish for \
               at most D, then exit (a second signal exits at once; 0 = exit at once)",
        kind: Value(|d, s| duration(s).map(|v| d.config.drain_timeout = v)),
    },
    Opt {
        reload: Live, long: "--bind-retry", short: None, aliases: &[], env: &["TG_BIND_RETRY"],
        meta: "D", default: "0", group: Listen,
        help: "while the listen address is not assigned yet (boot), retry the bind every D \
               instead of exiting (0 = exit at once)",
        kind: Value(|d, s| duration(s).map(|v| d.config.bind_retry = v)),
    },
    Opt {
        reload: Restart, long: "--control-socket", short: None, aliases: &[], env: &["TG_CONTROL_SOCKET"],
        meta: "PATH", default: "none", group: Logging,
        help: "unix socket (mode 0600) for `tg-ws-proxy ctl`: status, metrics, pin, probe, reload",
        kind: Path(|d, p| { d.config.control_socket = Some(p); Ok(()) }),
    },
    Opt {
        reload: Live, long: "--config", short: None, aliases: &[], env: &["TG_CONFIG"],
        meta: "FILE", default: "none", group: Listen,
        help: "read settings from FILE (at most 64 KiB): one `NAME VALUE` per line, NAME a long \
               flag without --, # comment lines; flags and TG_* variables win over it; \
               SIGHUP re-reads it and the secret files for new sessions (an invalid one is \
               refused and the running settings stay)",
        // Read by the driver before every other option (`parse::load_config`).
        kind: Path(|_, _| Ok(())),
    },
    Opt {
        reload: Live, long: "--control-timeout", short: None, aliases: &[], env: &["TG_CONTROL_TIMEOUT"],
        meta: "D", default: "2s", group: Logging,
        help: "a control-socket client has D to send its request and take the reply, then \
               the connection is closed (more than 0)",
        kind: Value(|d, s| {
            let v = duration(s)?;
            if v.is_zero() {
                return Err("must be more than 0".into());
            }
            d.config.control_timeout = v;
            Ok(())
        }),
    },
];

#[cfg(test)]
mod tests {
    use super::super::draft::Source;
    use super::super::parse::Taken;
    use super::*;

    /// Defaults shown as words rather than as a value the flag would accept.
    const DESCRIBED_DEFAULTS: [&str; 7] = [
        "none",
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

    /// README's `run` flag table, one row per flag: `(flag cell, env cell, default cell, meaning)`
    /// with backticks removed from the first three.
    fn readme_rows() -> Vec<(String, String, String, String)> {
        let readme = include_str!("../../README.md");
        let start = readme
            .find("### `run` flags")
            .expect("README has a `run` flags section");
        let rows = readme[start..]
            .lines()
            .skip_while(|l| !l.starts_with('|'))
            .take_while(|l| l.starts_with('|'))
            .skip(2); // header and separator
        let plain = |c: &str| c.replace('`', "").trim().to_string();
        rows.map(|row| {
            let cells: Vec<&str> = row.trim_matches('|').split('|').collect();
            assert_eq!(
                cells.len(),
                4,
                "README row is not flag | env | default | meaning: {row}"
            );
            let meaning = cells[3].trim().to_string();
            (plain(cells[0]), plain(cells[1]), plain(cells[2]), meaning)
        })
        .collect()
    }

    /// Every option appears in README's table with the same names, variables and default;
    /// aliases are mentioned in its meaning; README lists no flag the table lacks.
    #[test]
    fn readme_flag_table_matches_the_option_table() {
        let rows = readme_rows();
        assert!(!rows.is_empty(), "README's run flag table not found");
        let mut documented = Vec::new();
        for (flags, env, default, meaning) in &rows {
            // `-H, --host` or `--dc-ip DC:IP[:PORT]`: names before any placeholder.
            let names: Vec<&str> = flags
                .split(", ")
                .map(|n| n.split(' ').next().unwrap_or(""))
                .collect();
            let long = names.iter().find(|n| n.starts_with("--"));
            let long = *long.unwrap_or_else(|| panic!("README row {flags:?} has no long flag"));
            let o = RUN_OPTIONS
                .iter()
                .find(|o| o.long == long)
                .unwrap_or_else(|| panic!("README lists {long}, the option table does not"));
            assert!(!documented.contains(&long), "README lists {long} twice");
            documented.push(long);
            let short: Vec<&str> = names.iter().copied().filter(|n| *n != long).collect();
            assert_eq!(
                short,
                o.short.into_iter().collect::<Vec<_>>(),
                "{long}: short name"
            );
            assert_eq!(
                env.split(", ").collect::<Vec<_>>(),
                o.env,
                "{long}: variables"
            );
            assert_eq!(default, o.default, "{long}: default");
            for alias in o.aliases {
                assert!(
                    meaning.contains(&format!("`{alias}`")),
                    "{long}: alias {alias} not in README"
                );
            }
        }
        for o in RUN_OPTIONS {
            assert!(
                documented.contains(&o.long),
                "{} missing from README's flag table",
                o.long
            );
        }
    }
}
