//! The `run` applet: parse flags, start logging, log the configuration, hand over to the reactor.
//!
//! Owns startup order, the `run --help` text ([`HELP`]), the startup summary lines and the
//! mapping of outcomes to exit codes (0 clean stop, 1 runtime failure such as a failed bind,
//! 2 bad usage). It must not open sockets itself (the reactor
//! does, and logs `listening on ADDR`), and it must never log a secret unmasked.

use std::io::ErrorKind;
use std::time::Duration;

use pico_args::Arguments;

use crate::cli;
use crate::config::Config;
use crate::logging;

/// `tg-ws-proxy run --help`. Lists every flag `cli::parse_run` accepts, with its environment
/// variable and default (a unit test in `cli` checks the names stay in sync).
pub const HELP: &str = "\
tg-ws-proxy run: serve Telegram clients (the default applet)

Usage: tg-ws-proxy [run] [FLAGS]

Every flag can also be set by the environment variable in brackets; a flag wins over its
variable and an empty variable counts as unset. Defaults in parentheses.
Durations: 10, 0.5, 250ms, 2s, 1m, 1h (seconds without a unit; at most 24h).

Listening and secrets:
  -H, --host IP                 listen address, IPv4 or IPv6 [TG_HOST] (127.0.0.1)
  -p, --port N                  listen port, 0 = any free port [TG_PORT] (1443)
  -s, --secret S[,S...]         client secret: 32 hex, dd + 32 hex, or ee + 32 hex + hex(domain);
                                repeatable [TG_SECRET] (none; `ps` shows the command line, so
                                prefer TG_SECRET or --secret-file)
      --secret-file PATH        secrets, one per line or comma-separated, # comments; if PATH is
                                missing it is created with a fresh secret, mode 0600
                                [TG_SECRET_FILE] (none)
  At least one secret is required (`tg-ws-proxy genkey` makes one).

Upstream:
      --dc-ip DC:IP[:PORT]      WebSocket front for a DC, IPv6 in brackets, port 443 if omitted;
                                repeatable, comma list; replaces the defaults [TG_DC_IP]
                                (2:149.154.167.220, 4:149.154.167.220)
      --tcp-dc-ip DC:IP[:PORT]  raw TCP target for a DC, same forms [TG_TCP_DC_IP]
                                (built-in DC table, port 443)
      --cf-worker-domain HOST   Cloudflare Worker (a pasted URL is fine), repeatable, comma
                                list; alias --cfproxy-worker-domain [TG_CF_WORKER_DOMAIN] (none)
      --cf-domain DOMAIN        Cloudflare-proxied domain with kwsN records, repeatable
                                [TG_CF_DOMAIN] (none)
      --tier-order LIST         tiers to try, in order: ws, worker, cfproxy, tcp
                                [TG_TIER_ORDER] (ws,worker,cfproxy,tcp)
      --cf-priority             Cloudflare tiers first: worker,cfproxy,ws,tcp
                                [TG_CF_PRIORITY=1] (off)
      --ws-connect-timeout D    bound on TCP + TLS + upgrade of one ws attempt
                                [TG_WS_CONNECT_TIMEOUT] (10s)
      --cf-connect-timeout D    the same for worker and cfproxy attempts
                                [TG_CF_CONNECT_TIMEOUT] (10s)
      --tcp-connect-timeout D   bound on one tcp tier connect; alias --tcp-fallback-timeout
                                [TG_TCP_CONNECT_TIMEOUT or TG_TCP_FALLBACK_TIMEOUT] (10s)
      --ca-file PATH            extra trusted CA certificates, PEM; must be readable
                                [TG_CA_FILE] (none: bundled web PKI roots only)
      --danger-accept-invalid-certs
                                do not verify upstream TLS certificates (testing only)
                                [TG_SKIP_TLS_VERIFY=1] (off)

Ladder (route health is learned in the background; clients never wait on a dead route):
      --hedge-delay D           start the next route in parallel if the first is not ready by
                                then; a route's 2 x p95 once known [TG_HEDGE_DELAY] (250ms)
      --connect-budget D        bound on a client's whole connect phase; past it the client is
                                closed so it reconnects [TG_CONNECT_BUDGET] (3s)
      --handshake-pace D        minimum gap between handshakes to one address, 0 = off
                                [TG_HANDSHAKE_PACE] (20ms)
      --cooldown-base D         first cooldown of a failed route, doubled per failure, +-20%
                                jitter; alias --ip-fail-cooldown [TG_COOLDOWN_BASE or
                                TG_IP_FAIL_COOLDOWN] (10s)
      --cooldown-max D          cooldown cap [TG_COOLDOWN_MAX] (600s)
      --flap-quarantine D       minimum cooldown of a route that went down 3 times in 10 min
                                [TG_FLAP_QUARANTINE] (1800s)
      --redirect-ttl D          how long a 30x from a WS front keeps its route down; alias
                                --ws-redirect-cooldown [TG_REDIRECT_TTL or
                                TG_WS_REDIRECT_COOLDOWN] (3600s)
      --probe-interval D        liveness probe of an Up route with no recent traffic
                                [TG_PROBE_INTERVAL] (300s)
      --probe-timeout D         bound on one background probe [TG_PROBE_TIMEOUT] (5s)
      --worker-budget N         probe + pool requests per day per Worker, 1-100000
                                [TG_WORKER_BUDGET] (5000)
      --pool-size N             warm upstreams (TLS + upgrade done) kept per hot route, 0-16;
                                Workers at most 1, none for tcp [TG_POOL_SIZE] (2)
      --pool-max-age D          drop a warm upstream after D, before the front's idle close
                                [TG_POOL_MAX_AGE] (50s)
      --ws-ping-interval D      WS ping toward Telegram's front, 0 = never
                                [TG_WS_PING_INTERVAL] (0)
      --cf-ping-interval D      WS ping toward Worker/cfproxy, 0 = never
                                [TG_CF_PING_INTERVAL] (30s)
      --tcp-keepalive D         TCP keepalive idle time on every socket, 0 = off
                                [TG_TCP_KEEPALIVE] (60s)
      --hosts-file PATH         hosts file for the resolver [TG_HOSTS_FILE] (/etc/hosts)
      --resolv-conf PATH        nameservers for the resolver [TG_RESOLV_CONF] (/etc/resolv.conf)

Clients and resources:
      --handshake-timeout D     deadline for a client's 64-byte init [TG_HANDSHAKE_TIMEOUT] (10s)
      --idle-timeout D          close a session with no payload either way for D
                                [TG_IDLE_TIMEOUT] (600s)
      --bad-client-drain D      read and discard a rejected client for D, 0 = close at once
                                [TG_BAD_CLIENT_DRAIN] (2s)
      --close-linger D          after one side closes, keep flushing the other for at most D
                                [TG_CLOSE_LINGER] (2s)
      --max-connections N       concurrent client sessions, 1-65536 [TG_MAX_CONNECTIONS]
                                ((open-files limit - 32) / 3, at least 4; 512 if unknown)
      --buf-kb N                relay buffer size in KiB, two per session, 4-1024
                                [TG_BUF_KB] (16)

Logging:
  -v, --verbose                 debug lines; twice for trace [TG_VERBOSE=1] (off)
  -q, --quiet                   warnings and errors only [TG_QUIET=1] (off)
      --log-file PATH           append to PATH instead of stderr [TG_LOG_FILE] (stderr)
      --log-max-kb N            past N KiB, PATH is renamed to PATH.1 (one rotation), 1-4194304
                                [TG_LOG_MAX_KB] (1024)
      --stats-interval D        period of the stats line, 0 = never [TG_STATS_INTERVAL] (300s)
      --link-ip HOST            host name or IP put in `tg-ws-proxy link` output
                                [TG_LINK_IP] (detected)
  -h, --help                    this text

Exit status: 1 runtime failure (e.g. cannot listen), 2 bad usage; SIGTERM/SIGINT end it at once.
";

/// Runs the proxy until a fatal error (SIGTERM/SIGINT end the process). Returns the process exit code (see [`HELP`]).
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{HELP}");
        return 0;
    }
    let parsed = match cli::parse_run(args, "run", &cli::process_env) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tg-ws-proxy: {e}");
            return 2;
        }
    };
    let config = parsed.config;
    if let Err(e) = logging::init(
        config.log_level,
        config.log_file.as_deref(),
        config.log_max_bytes,
    ) {
        eprintln!("tg-ws-proxy: --log-file: {e}");
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
    let listen = config.listen;
    let to_file = config.log_file.is_some();
    match crate::reactor::run(config) {
        Ok(()) => 0,
        Err(e) => {
            let line = match e.kind() {
                ErrorKind::AddrInUse
                | ErrorKind::AddrNotAvailable
                | ErrorKind::PermissionDenied => {
                    format!("cannot listen on {listen}: {e}")
                }
                _ => format!("fatal: {e}"),
            };
            log::error!("{line}");
            if to_file {
                eprintln!("tg-ws-proxy: {line}");
            }
            1
        }
    }
}

/// The startup lines describing `c`; secrets appear only masked.
pub fn summary(c: &Config) -> Vec<String> {
    let secrets: Vec<String> = c.secrets.iter().map(|s| s.masked()).collect();
    // Skip tiers with nothing configured so the line says what will really be tried.
    let tiers: Vec<&str> = c
        .tier_order
        .iter()
        .filter(|t| match t {
            crate::config::Tier::Worker => !c.worker_domains.is_empty(),
            crate::config::Tier::CfProxy => !c.cf_domains.is_empty(),
            _ => true,
        })
        .map(|t| t.name())
        .collect();
    let cf = |eps: &[crate::config::CfEndpoint]| {
        eps.iter()
            .map(|e| crate::route::table::redact(&e.host))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let map = |m: &std::collections::BTreeMap<u16, std::net::SocketAddr>| {
        if m.is_empty() {
            return "built-in".to_string();
        }
        m.iter()
            .map(|(dc, a)| format!("{dc}={a}"))
            .collect::<Vec<_>>()
            .join(" ")
    };
    let mut lines = vec![
        format!(
            "tg-ws-proxy {} on {}: {} secret(s) [{}], tiers {}, max {} sessions, buffers {} KiB",
            env!("CARGO_PKG_VERSION"),
            c.listen,
            c.secrets.len(),
            secrets.join(", "),
            tiers.join(","),
            c.max_connections,
            c.buf_size / 1024,
        ),
        format!(
            "upstream: ws {}; tcp {}; ca-file {}; timeouts ws {} tcp {} handshake {} idle {} \
             drain {}; stats {}",
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
            if c.stats_interval.is_zero() {
                "off".to_string()
            } else {
                fmt_duration(c.stats_interval)
            },
        ),
        format!(
            "ladder: hedge {} budget {} cooldown {}..{} probe every {} (timeout {}) worker budget {}/day",
            fmt_duration(c.hedge_delay),
            fmt_duration(c.connect_budget),
            fmt_duration(Duration::from_millis(c.health.base_ms)),
            fmt_duration(Duration::from_millis(c.health.max_ms)),
            fmt_duration(c.probe_interval),
            fmt_duration(c.probe_timeout),
            c.worker_budget,
        ),
    ];
    if !c.worker_domains.is_empty() || !c.cf_domains.is_empty() {
        lines.push(format!(
            "cloudflare: workers [{}] domains [{}]",
            cf(&c.worker_domains),
            cf(&c.cf_domains)
        ));
    }
    lines
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
    }
}
