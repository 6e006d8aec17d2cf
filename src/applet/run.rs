//! The `run` applet: parse flags, start logging, log the configuration, hand over to the reactor.
//!
//! Owns startup order, the `run --help` text ([`HELP`]), the startup summary lines (and, on a
//! terminal, the links, drawn by `applet::link`), the reload closure (the original argv parsed
//! again, `reactor::Reload`) and the mapping of outcomes to exit codes (0 clean stop after a stop
//! signal's drain, 1 runtime failure such as a failed bind, 2 bad usage). It must not open
//! sockets itself (the reactor
//! does, and logs `listening on ADDR`), and it must never log a secret unmasked.

use std::time::Duration;

use pico_args::Arguments;

use crate::cli;
use crate::config::Config;
use crate::logging;

/// `tg-ws-proxy run --help` before the option list.
const HELP_HEAD: &str = "\
tg-ws-proxy run: serve Telegram clients (the default applet)

Usage: tg-ws-proxy [run] [FLAGS]

Every flag can also be set by the environment variable in brackets, and in the --config file
as `NAME VALUE` (NAME = the long flag without --); a flag wins over its variable, a variable
over the file, and an empty variable counts as unset. Defaults in parentheses. When stdout is a
terminal, the tg:// and https://t.me/proxy links are printed once at start (see `link --help`).
";

/// `tg-ws-proxy run --help` after the option list.
const HELP_TAIL: &str = "\
Signals: SIGHUP reloads the configuration (flags, variables, --config and --secret-file read
again) for new sessions only; live sessions are untouched, an invalid configuration is rejected
and the old one stays. Every setting applies at a reload except the flags whose help says \"a
reload keeps the old value\". SIGTERM/SIGINT stop accepting, write the stats line and let sessions
finish for at most --drain-timeout; a second one exits at once.
Exit status: 0 after a stop signal, 1 runtime failure (e.g. cannot listen), 2 bad usage.
";

/// `tg-ws-proxy run --help`: usage, the duration grammar, every flag `cli::parse_run` accepts
/// with its variables and default (rendered from the option table), exit status.
pub fn help() -> String {
    format!(
        "{HELP_HEAD}{}\n\n{}\n{HELP_TAIL}",
        cli::DURATION_HELP,
        cli::run_options_help()
    )
}

/// Runs the proxy until a stop signal's drain ends (0) or a fatal error. Returns the process
/// exit code (see [`help`]).
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{}", help());
        return 0;
    }
    // The binary's entry restored SIGPIPE's default for the printing applets; the proxy must
    // never die of one (a closed log pipe; sockets use MSG_NOSIGNAL anyway).
    // SAFETY: SIG_IGN installs no handler; the reactor has not started.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_IGN);
    }
    // Kept for reloads: SIGHUP parses the same argv again (with the process environment), so
    // `--config` and `--secret-file` are read again.
    let argv = args.finish();
    let parsed = match cli::parse_run_start(Arguments::from_vec(argv.clone()), &cli::process_env) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tg-ws-proxy: {e}");
            return 2;
        }
    };
    let config = parsed.config;
    if let Err(e) = logging::init(
        config.log_level,
        config.log_time,
        config.log_file.as_deref(),
        config.log_max_bytes,
    ) {
        eprintln!("tg-ws-proxy: --log-file: {e}");
        return 2;
    }
    logging::set_redactions(crate::route::table::private_names(&config));
    if let Err(e) = logging::events::open_from_env() {
        eprintln!("tg-ws-proxy: {e}");
        return 2;
    }
    for (level, note) in &parsed.notes {
        log::log!(*level, "{note}");
    }
    if config.accept_invalid_certs {
        log::warn!(
            "--danger-accept-invalid-certs is set: upstream TLS certificates are NOT verified, \
             anyone on the path can read and alter relayed traffic"
        );
    }
    for line in summary(&config) {
        log::info!("{line}");
    }
    if let Some(line) = loopback_note(&config) {
        log::info!("{line}");
    }
    crate::applet::link::print_startup_links(&config, parsed.host_given);
    let to_file = config.log_file.is_some();
    let reload: crate::reactor::Reload = Box::new(move || {
        cli::parse_run_reload(Arguments::from_vec(argv.clone()), &cli::process_env)
            .map(|p| (p.config, p.notes))
            .map_err(|e| e.to_string())
    });
    match crate::reactor::run(config, Some(reload)) {
        Ok(()) => 0,
        Err(e) => {
            // A failed bind says the address and the likely fix itself (reactor/listen.rs).
            let text = e.to_string();
            let line = if text.starts_with("cannot listen on ") {
                text
            } else {
                format!("fatal: {text}")
            };
            log::error!("{line}");
            if to_file {
                logging::write_stderr(format!("tg-ws-proxy: {line}\n").as_bytes());
            }
            1
        }
    }
}

/// The startup lines describing `c`; secrets appear only masked.
pub fn summary(c: &Config) -> Vec<String> {
    let mut lines = vec![head_line(c), upstream_line(c), ladder_line(c)];
    route_lines(c, &mut lines);
    lines.push(clients_line(c));
    lines
}

/// The start line for a proxy listener on loopback only (no `--host`, or `--host 127.0.0.1`):
/// phones on the LAN cannot connect, so it says so and how to listen on the LAN. `None` for
/// any other address. (`ctl status` shows the same as `listen_loopback_only`.)
pub fn loopback_note(c: &Config) -> Option<String> {
    c.listen.ip().is_loopback().then(|| {
        format!(
            "the proxy port is on loopback only ({}): apps on this machine can connect, phones \
             and other devices on the LAN cannot; to serve the LAN pass --host with this machine's LAN \
             address (e.g. --host 192.168.1.1; TG_HOST or `host` in the --config file too), or \
             --host 0.0.0.0 for every address",
            c.listen
        )
    })
}

/// The first startup line: version, listener, secrets (masked), tiers, limits.
fn head_line(c: &Config) -> String {
    let secrets: Vec<String> = c.secrets.iter().map(|s| s.masked()).collect();
    // Skip tiers with nothing configured so the line says what will really be tried.
    let names = |order: &[crate::config::Tier]| {
        let n: Vec<&str> = order
            .iter()
            .filter(|&&t| c.tier_configured(t))
            .map(|t| t.name())
            .collect();
        n.join(",")
    };
    let mut tiers = names(&c.tier_order);
    if let Some(media) = &c.media_tier_order {
        tiers = format!("{tiers} (media {})", names(media));
    }
    format!(
        "tg-ws-proxy {} on {}: {} secret(s) [{}], tiers {}, max {} sessions, buffers {} KiB",
        env!("CARGO_PKG_VERSION"),
        c.listen,
        c.secrets.len(),
        secrets.join(", "),
        tiers,
        c.max_connections,
        c.buf_size / 1024,
    )
}

/// The upstream line: DC address overrides, CA file, timeouts, stats and memory trim.
fn upstream_line(c: &Config) -> String {
    let map = |m: &std::collections::BTreeMap<u16, std::net::SocketAddr>| {
        if m.is_empty() {
            return "built-in".to_string();
        }
        m.iter()
            .map(|(dc, a)| format!("{dc}={a}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    format!(
        "upstream: ws {}; tcp {}; ca-file {}; timeouts ws {} tcp {} handshake {} idle {} \
         bad-client-drain {}; shutdown drain {}; stats {}; memory trim {}",
        map(&c.ws_addrs),
        map(&c.tcp_addrs),
        c.ca_file
            .as_ref()
            .map_or("none".to_string(), |p| p.display().to_string()),
        fmt_duration(c.ws_connect_timeout),
        fmt_duration(c.tcp_connect_timeout),
        fmt_duration(c.handshake_timeout),
        fmt_duration(c.idle_timeout),
        fmt_duration(c.bad_client_drain),
        fmt_duration(c.drain_timeout),
        if c.stats_interval.is_zero() {
            "off".to_string()
        } else {
            fmt_duration(c.stats_interval)
        },
        if c.mem_trim_delay.is_zero() {
            "off".to_string()
        } else {
            format!("{} after a burst", fmt_duration(c.mem_trim_delay))
        },
    )
}

/// The ladder line: hedge, budget, cooldowns, probes, Worker budget, pacing, pools.
fn ladder_line(c: &Config) -> String {
    format!(
        "ladder: hedge {} budget {} cooldown {}..{} probe every {} (timeout {}) worker budget {}/day; pace {} burst {} max wait {}; pool up to {} for {}; startup probes {}",
        fmt_duration(c.hedge_delay),
        fmt_duration(c.connect_budget),
        fmt_duration(Duration::from_millis(c.health.base_ms)),
        fmt_duration(Duration::from_millis(c.health.max_ms)),
        fmt_duration(c.probe_interval),
        fmt_duration(c.probe_timeout),
        c.worker_budget,
        fmt_duration(c.handshake_pace),
        c.handshake_burst,
        fmt_duration(c.pace_max_wait),
        c.pool_size,
        fmt_duration(c.pool_max_age),
        if c.startup_probes { "on" } else { "off" },
    )
}

/// The lines of the optional routes, each only when configured (Cloudflare, upstream MTProto
/// proxies, fronting); the shared CF domain list always (on by default, a third party's URL).
fn route_lines(c: &Config, lines: &mut Vec<String>) {
    let cf = |eps: &[crate::config::CfEndpoint]| {
        eps.iter()
            .map(|e| crate::route::table::redact(&e.host))
            .collect::<Vec<_>>()
            .join(" ")
    };
    if !c.worker_domains.is_empty() || !c.cf_domains.is_empty() {
        lines.push(format!(
            "cloudflare: workers [{}] domains [{}]",
            cf(&c.worker_domains),
            cf(&c.cf_domains)
        ));
    }
    if !c.mtproto_proxies.is_empty() {
        let proxies: Vec<String> = c
            .mtproto_proxies
            .iter()
            .map(|p| {
                format!(
                    "{} {}",
                    crate::route::table::mtproto_label(p),
                    p.secret.masked()
                )
            })
            .collect();
        lines.push(format!("mtproto proxies: [{}]", proxies.join(", ")));
    }
    // On by default and fetched from a third party's URL: always said (docs/protocol.md §4.3).
    lines.push(match &c.cf_domain_list {
        Some(src) => format!(
            "shared CF domain list: {src} (cache {})",
            c.cf_domain_cache
                .as_ref()
                .map_or("none".to_string(), |p| p.display().to_string())
        ),
        None => "shared CF domain list: off".to_string(),
    });
    if !c.fronting_domains.is_empty() {
        lines.push(format!(
            "fronting: SNI [{}] toward the ws fronts, after a ws TLS/upgrade failure",
            c.fronting_domains.join(", ")
        ));
    }
}

/// The clients line: PROXY header, per-address limits, masking.
fn clients_line(c: &Config) -> String {
    let cap = |n: u64, what: &str| {
        if n == 0 {
            "off".to_string()
        } else {
            format!("{n}{what}")
        }
    };
    let has_ee = c
        .secrets
        .iter()
        .any(|s| matches!(s.kind, crate::mtproto::obfs2::SecretKind::Ee(_)));
    let mask = match (&c.mask_host, c.no_mask) {
        // Only a port with an ee secret masks anything (a TLS start elsewhere is refused).
        _ if !has_ee => "none (no ee secret)".to_string(),
        (_, true) => "off (--no-mask)".to_string(),
        (Some((h, p)), false) => format!("{h}:{p}"),
        (None, false) => "the ee secret's domain:443".to_string(),
    };
    // Over a limit a connection is masked (within --per-ip-mask) only where masking runs.
    let over = if has_ee && !c.no_mask && c.per_ip_mask > 0 {
        format!(", over them masked (up to {} at once)", c.per_ip_mask)
    } else {
        String::new()
    };
    format!(
        "clients: proxy-protocol {}; per address: max {} sessions, rate {} burst {}{over}; mask {} \
         (connect {} idle {})",
        if c.proxy_protocol { "required" } else { "off" },
        cap(c.max_per_ip as u64, ""),
        cap(u64::from(c.per_ip_rate), "/s"),
        c.per_ip_burst,
        mask,
        fmt_duration(c.mask_connect_timeout),
        fmt_duration(c.mask_idle_timeout),
    )
}

/// Short human form: `10s`, `250ms`, `1.5s`, `0s`.
pub fn fmt_duration(d: Duration) -> String {
    let ms = d.as_millis();
    if ms % 1000 == 0 {
        format!("{}s", ms / 1000)
    } else if ms < 1000 {
        format!("{ms}ms")
    } else {
        let s = format!("{}.{:03}", ms / 1000, ms % 1000);
        format!("{}s", s.trim_end_matches('0'))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtproto::obfs2::Secret;

    /// Issue 23 trap: `run` without `--host` listened on 127.0.0.1 only and said nothing.
    #[test]
    fn a_loopback_listener_is_said_with_the_flag_that_opens_the_lan() {
        let mut c = Config::with_secrets(Vec::new());
        for addr in ["127.0.0.1:1443", "[::1]:1443", "127.0.0.2:1"] {
            c.listen = addr.parse().unwrap();
            let line = loopback_note(&c).expect(addr);
            assert!(
                line.contains(addr) && line.contains("--host 192.168.1.1"),
                "{line}"
            );
            assert!(line.contains("--host 0.0.0.0"), "{line}");
        }
        for addr in ["0.0.0.0:1443", "192.168.1.1:1443", "[::]:1443"] {
            c.listen = addr.parse().unwrap();
            assert_eq!(loopback_note(&c), None, "{addr}");
        }
    }

    #[test]
    fn durations_print_short() {
        assert_eq!(fmt_duration(Duration::from_secs(10)), "10s");
        assert_eq!(fmt_duration(Duration::ZERO), "0s");
        assert_eq!(fmt_duration(Duration::from_millis(250)), "250ms");
        assert_eq!(fmt_duration(Duration::from_millis(1500)), "1.5s");
        assert_eq!(fmt_duration(Duration::from_millis(61_005)), "61.005s");
    }

    #[test]
    fn summary_masks_secrets() {
        let key = "0123456789abcdef0123456789abcdef";
        let c = Config::with_secrets(vec![Secret::parse(key).expect("valid secret")]);
        let text = summary(&c).join("\n");
        assert!(!text.contains(key), "{text}");
        assert!(text.contains("127.0.0.1:1443"));
        assert!(text.contains("2=149.154.167.220:443"));
        assert!(text.contains("tiers ws,tcp"), "{text}");
        assert!(
            text.contains(
                "clients: proxy-protocol off; per address: max 128 sessions, rate 20/s burst 64"
            ),
            "{text}"
        );
    }

    #[test]
    fn summary_names_the_shared_list_source_or_says_it_is_off() {
        // On by default and fetched from a third party's URL: the startup lines say so.
        let mut c = Config::with_secrets(Vec::new());
        let text = summary(&c).join("\n");
        assert!(
            text.contains(&format!(
                "shared CF domain list: {} (cache none)",
                crate::config::DEFAULT_CF_DOMAIN_LIST
            )),
            "{text}"
        );
        c.cf_domain_list = None;
        c.cf_domain_cache = Some("/tmp/cf.txt".into());
        let text = summary(&c).join("\n");
        assert!(text.contains("shared CF domain list: off"), "{text}");
    }
}
