//! The `check` applet (docs/design.md §7): probe every configured route of the chosen DCs the way
//! the background prober does — TCP → TLS → WS upgrade → relay init → `req_pq_multi` → `resPQ`,
//! with the proxy's own [`Prober`] — and print one table line per dial option, then one verdict
//! line per DC.
//!
//! After the verdicts, one line per way in (`ways`: the listeners' addresses, transparent
//! mode's ranges and `nft`, SOCKS5's exposure and authentication); they do not change the exit
//! code.
//!
//! Owns: its two flags (`--count`, `--dc`), its own `mio::Poll` (DNS first, then the probes of
//! one round in parallel in a [`Prober`], each bounded by `--probe-timeout`), the outbound
//! setting its dials take and the wall clock they are stamped with, the table and the exit code; `report` formats the results. It takes `run`'s flags through [`cli::parse_run`]
//! so one command line serves both. It must not listen, keep or log route health, spend the proxy's Worker budget, or touch any secret: a
//! check needs none, so `TG_SECRET` is replaced by a placeholder and `--secret-file` /
//! `TG_SECRET_FILE` are ignored (no file is read or created). An upstream proxy's secret
//! (`--mtproto-proxy`) is the one exception: its `mtproto` routes are probed with it, as the
//! proxy's prober does, and it is never printed (labels show `host:port/form`).

use std::collections::{BTreeMap, BTreeSet, VecDeque};
use std::io;
use std::net::IpAddr;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use mio::{Events, Interest, Poll};
use pico_args::Arguments;

use crate::cli::{self, CliError};
use crate::config::{Config, Tier};
use crate::dns::{Lookup, Resolver, ResolverConfig};
use crate::net::dial::DialKind;
use crate::net::outbound::{self, Active, Outbound};
use crate::net::tls;
use crate::rng::Rng;
use crate::route::probe::{Goal, ProbeOutcome};
use crate::route::prober::{Finished, Prober};
use crate::route::table::{Route, Table};
use crate::token::{self, Role, DNS};

mod doh;

mod report;
mod ways;
pub use report::{dc_ids, median, render, verdicts, Attempt, Row, Verdict};

/// Placeholder secret handed to `parse_run` (which requires one); never used on the wire.
const PLACEHOLDER_SECRET: &str = "00000000000000000000000000000001";

/// Gap between two probe starts of one round (ms): a burst of parallel handshakes to one
/// address is what some DPI drops (docs/design.md §4, "handshakes are paced").
const PACE_MS: u64 = 10;

/// Largest `--count`.
const MAX_COUNT: usize = 100;

/// DCs checked by default besides those named in `--dc-ip` / `--tcp-dc-ip`.
const DEFAULT_DCS: [u16; 5] = [1, 2, 3, 4, 5];

/// `tg-ws-proxy check --help`.
pub const HELP: &str = "\
tg-ws-proxy check: probe every configured route and print a table

Usage: tg-ws-proxy check [--count N] [--dc LIST] [RUN FLAGS]

For each DC (non-media and media) every route of the ladder is probed the way the proxy's
background prober does it: TCP, TLS and the WebSocket upgrade where the tier has them, then an
obfuscated2 init, req_pq_multi, and a resPQ with our nonce; then more req_pq_multi until
--stall-probe-bytes (32 KiB) of resPQ replies came down, past the ~16 KB after which a 16 KB
freeze stops a connection (such a route shows as stalled, with the bytes it let through). A ws
route is probed once per kws host name (DPI may treat the two names differently). Probes of one
round run in parallel; each is bounded by --probe-timeout.

      --count N        rounds of probes, 1-100; latency is the median of the OK ones (1)
      --dc LIST        DC numbers to check, comma list, e.g. 2,4 (every production DC named in
                       --dc-ip or --tcp-dc-ip, plus 1-5; test DCs (1000N) are not checked)
  -h, --help           this text

Every `tg-ws-proxy run` flag is accepted, so the proxy's command line and TG_* environment
work unchanged; the ones that matter here are --dc-ip, --tcp-dc-ip, --cf-worker-domain,
--cf-domain, --tier-order, --probe-timeout, --ca-file, --danger-accept-invalid-certs,
--hosts-file, --resolv-conf. No secret is needed: --secret-file and TG_SECRET are ignored.

Table columns: DC, route (tier, DC, target; ws shows the kws name), result (OK, FLAKY k/N, or
the failure class: timeout, refused, reset, tls-error, http-CODE, closed-early, stalled,
bad-reply, dns,
network-unreachable, host-unreachable, no-address, local-ports), latency in ms (median of the
OK rounds; of all rounds when none was OK), detail of the first failure. A route works when more than half
of its rounds got a resPQ. A DC whose routes all failed with network-unreachable or no-address
is reported as `network unreachable from this host`: the WAN link, not the routes.

Then one line per way in (`way in proxy|transparent|socks5: ...`): the listener's address and
whether it can be bound now; for --transparent the LAN interfaces, Telegram's ranges in use,
the nft binary (a PROBLEM line without it) and whether our table is installed; for --socks5 its
authentication and exposure. These lines do not change the exit status.

Exit status: 0 if every checked DC, non-media and media, has a working route; 1 otherwise;
2 on bad flags.
";

/// Parsed `check` flags.
#[derive(Clone, Debug)]
pub struct CheckArgs {
    /// The `run` configuration (routes, timeouts, TLS trust, resolver files).
    pub config: Config,
    /// Rounds of probes (`--count`, 1–100).
    pub count: usize,
    /// DC numbers to check, ascending, no duplicates.
    pub dcs: Vec<u16>,
}

/// Runs the applet; returns the exit code (see [`HELP`]).
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{HELP}");
        return 0;
    }
    let parsed = match parse_args(args, &cli::process_env) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tg-ws-proxy: {e}");
            return 2;
        }
    };
    // The table's details carry passed-on error texts that may name a Worker or CF domain.
    crate::logging::set_redactions(crate::route::table::private_names(&parsed.config));
    // The outbound setting of every dial below (`--outbound-proxy`); `plan_rows` sets it.
    let mut outbound = None;
    let mut rows = match plan_rows(&parsed.config, &parsed.dcs, &mut outbound) {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tg-ws-proxy: check: {e}");
            return 1;
        }
    };
    if let Err(e) = run_rounds(&parsed.config, &mut rows, parsed.count, outbound.as_deref()) {
        eprintln!("tg-ws-proxy: check: {e}");
        return 1;
    }
    print!("{}", crate::logging::redact_configured(render(&rows)));
    let verdicts = verdicts(&rows, &parsed.dcs);
    for v in &verdicts {
        println!("{}", crate::logging::redact_configured(v.line.clone()));
    }
    for line in report::edge_lines(&rows) {
        println!("{line}");
    }
    for line in ways::lines(&parsed.config, &ways::facts(&parsed.config)) {
        println!("{line}");
    }
    if verdicts.iter().all(|v| v.ok) {
        0
    } else {
        1
    }
}

/// Parses `--count`, `--dc` and every `run` flag (`env` is the `TG_*` lookup). No secret is
/// required: `TG_SECRET` reads as a placeholder, `--secret-file`/`TG_SECRET_FILE` are dropped.
///
/// Errors: one-line usage errors as [`cli::parse_run`] gives them (exit code 2).
pub fn parse_args(mut args: Arguments, env: cli::Env) -> Result<CheckArgs, CliError> {
    let count: Option<String> = args
        .opt_value_from_str("--count")
        .map_err(cli::pico_error)?;
    let count = match count {
        None => 1,
        Some(s) => match s.parse::<usize>() {
            Ok(n) if (1..=MAX_COUNT).contains(&n) => n,
            _ => {
                return Err(CliError::flag(
                    "--count",
                    format!("expected 1-{MAX_COUNT}, got '{s}'"),
                ))
            }
        },
    };
    let dc_list: Option<String> = args.opt_value_from_str("--dc").map_err(cli::pico_error)?;
    let dcs = match &dc_list {
        Some(s) => parse_dc_list(s).map_err(|m| CliError::flag("--dc", m))?,
        None => Vec::new(),
    };
    // The secret file is not ours to read or create here.
    let _: Vec<String> = args
        .values_from_str("--secret-file")
        .map_err(cli::pico_error)?;
    let no_secret = |name: &str| match name {
        "TG_SECRET" => Some(PLACEHOLDER_SECRET.to_string()),
        "TG_SECRET_FILE" => None,
        other => env(other),
    };
    let mut config = cli::parse_run_without_secret_file(args, "check", &no_secret)?.config;
    // The shared CF domain list as cached by `run` (never fetched here).
    config.cf_shared_domains = crate::reactor::cached_shared_domains(&config);
    let dcs = if dcs.is_empty() {
        default_dcs(&config)
    } else {
        dcs
    };
    Ok(CheckArgs { config, count, dcs })
}

/// `2,4` → `[2, 4]` (sorted, deduplicated). Each DC is 1–9999 (test DCs are not checked).
pub fn parse_dc_list(s: &str) -> Result<Vec<u16>, String> {
    let mut out = BTreeSet::new();
    for item in s.split(',').map(str::trim) {
        match item.parse::<u16>() {
            Ok(n) if (1..10_000).contains(&n) => {
                out.insert(n);
            }
            _ => {
                return Err(format!(
                    "expected DC numbers 1-9999 separated by commas, got '{item}'"
                ))
            }
        }
    }
    Ok(out.into_iter().collect())
}

/// Every production DC named in `--dc-ip` or `--tcp-dc-ip`, plus DCs 1–5, ascending (keys of
/// 10000 and up name test DCs, which `check` does not probe).
pub fn default_dcs(cfg: &Config) -> Vec<u16> {
    let mut set: BTreeSet<u16> = DEFAULT_DCS.into_iter().collect();
    set.extend(cfg.ws_addrs.keys().copied().filter(|&k| k < 10_000));
    set.extend(cfg.tcp_addrs.keys().copied().filter(|&k| k < 10_000));
    set.into_iter().collect()
}

/// Builds the rows for `dcs` × {non-media, media} from the route table (tier order kept) and
/// resolves the Worker / CF host names, waiting at most `--probe-timeout` for DNS. Makes
/// `cfg`'s outbound setting the one in `outbound` (its proxy's name resolved here), for
/// [`run_rounds`].
///
/// Errors: the resolver's UDP socket or the poll cannot be created.
pub fn plan_rows(cfg: &Config, dcs: &[u16], outbound: &mut Active) -> io::Result<Vec<Row>> {
    let mut table = Table::new();
    if !cfg.cf_ips.is_empty() {
        let mut rng = Rng::new().map_err(|e| io::Error::other(e.to_string()))?;
        let (edges, _) = crate::route::edges::Edges::new(&cfg.cf_ips, cfg.cf_ip_count, &mut rng);
        table.set_edges(edges, cfg, cfg.listen);
    }
    let mut routes = Vec::new();
    for dc in dc_ids(dcs) {
        routes.extend(table.routes_for(dc, cfg, cfg.listen));
    }
    let hosts: BTreeSet<String> = routes
        .iter()
        .flat_map(|&id| table.routes[id].hosts().into_iter().map(str::to_string))
        .collect();
    // Names the outbound proxy resolves (`socks5h://`) are not looked up here.
    outbound::activate(
        outbound,
        cfg.outbound_proxy.as_ref(),
        &cfg.no_outbound_proxy_for,
    );
    let mut hosts: BTreeSet<String> = hosts
        .into_iter()
        .filter(|h| outbound::remote_name(outbound.as_deref(), h).is_none())
        .collect();
    // An outbound proxy given by name is always resolved here (never by the proxy itself).
    let proxy_host = outbound::proxy_host(outbound.as_deref());
    hosts.extend(proxy_host.clone());
    let names = resolve_all(cfg, &hosts)?;
    if let Some(h) = &proxy_host {
        match names.get(h) {
            Some(Ok(_)) => {
                outbound::resolve_proxy(outbound, |h| names.get(h)?.as_ref().ok().copied());
            }
            // Said on stderr (check logs nothing by default): every dial through it will fail.
            Some(Err(e)) => eprintln!(
                "tg-ws-proxy: check: outbound proxy {h}: {e}; dials through it cannot start"
            ),
            None => eprintln!(
                "tg-ws-proxy: check: outbound proxy {h}: no answer; dials through it cannot start"
            ),
        }
    }
    Ok(routes
        .into_iter()
        .flat_map(|id| route_rows(&table.routes[id], &names, outbound.as_deref()))
        .collect())
}

/// The rows of one route: one per dial spec (labelled as `check` prints it), or one saying why
/// none could be made (a host name that did not resolve), `names` being what `resolve_all`
/// found.
fn route_rows(
    r: &Route,
    names: &BTreeMap<String, Result<IpAddr, String>>,
    outbound: Option<&Outbound>,
) -> Vec<Row> {
    let mut failed = None;
    let specs = r.dial_specs(&mut |h| {
        if let Some(unresolved) = outbound::remote_name(outbound, h) {
            return Some(unresolved);
        }
        match names.get(h) {
            Some(Ok(ip)) => Some(*ip),
            Some(Err(e)) => {
                failed = Some(e.clone());
                None
            }
            None => None,
        }
    });
    if specs.is_empty() {
        return vec![Row {
            dc: r.dc,
            tier: r.tier,
            label: r.label(),
            spec: None,
            unresolved: Some(failed.unwrap_or_else(|| "host name did not resolve".into())),
            attempts: Vec::new(),
            edge: r.edge(),
        }];
    }
    let mut rows = Vec::new();
    for spec in specs {
        let label = match (&spec.kind, r.tier) {
            (DialKind::Ws { host, .. }, Tier::Ws) => {
                format!("ws:{} {host}@{}", r.dc, spec.addr)
            }
            // A media cfproxy route dials two names: one row each.
            (DialKind::Ws { .. }, Tier::CfProxy | Tier::CfProxyWs) => {
                format!("{}:{} {}", r.tier.name(), r.dc, r.spec_label(&spec))
            }
            // Fronting: one row per kws name, `SNI/Host@addr`.
            (
                DialKind::Ws {
                    host,
                    sni: Some(sni),
                    ..
                },
                Tier::Front,
            ) => format!("front:{} {sni}/{host}@{}", r.dc, spec.addr),
            _ => r.label(),
        };
        rows.push(Row {
            dc: r.dc,
            tier: r.tier,
            label,
            spec: Some(spec),
            unresolved: None,
            attempts: Vec::new(),
            edge: r.edge(),
        });
    }
    rows
}

/// Resolves `hosts` with the proxy's own resolver (hosts file, resolv.conf, and `--doh` as the
/// proxy uses it: DoH tries run here one at a time, blocking, by `doh::exchange`), waiting up
/// to `--probe-timeout`. Names still pending at the deadline map to an error.
fn resolve_all(
    cfg: &Config,
    hosts: &BTreeSet<String>,
) -> io::Result<BTreeMap<String, Result<IpAddr, String>>> {
    let mut out = BTreeMap::new();
    if hosts.is_empty() {
        return Ok(out);
    }
    let doh_servers = doh::servers(cfg);
    let mut dns = Resolver::new(ResolverConfig {
        hosts_path: cfg.hosts_file.clone(),
        resolv_path: cfg.resolv_conf.clone(),
        doh_servers: doh_servers.len(),
        doh_fallback: cfg.doh_fallback,
        doh_timeout_ms: cfg.doh_timeout.as_millis() as u64,
        ..ResolverConfig::default()
    })?;
    let tls = if doh_servers.is_empty() {
        None
    } else {
        let c = tls::client_config_with(
            cfg.ca_file.as_deref(),
            cfg.accept_invalid_certs,
            cfg.tls_cipher,
        )
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
        Some(c)
    };
    let mut poll = Poll::new()?;
    poll.registry()
        .register(dns.socket(), DNS, Interest::READABLE)?;
    let clock = Instant::now();
    let now_ms = || clock.elapsed().as_millis() as u64;
    let deadline = cfg.probe_timeout.as_millis() as u64;
    let mut events = Events::with_capacity(16);
    loop {
        let now = now_ms();
        let mut pending = false;
        for h in hosts {
            if out.contains_key(h) {
                continue;
            }
            match dns.lookup(h, now) {
                Lookup::Ready(ip) => {
                    out.insert(h.clone(), Ok(ip));
                }
                Lookup::Failed(e) => {
                    out.insert(h.clone(), Err(format!("DNS: {e}")));
                }
                Lookup::Pending => pending = true,
            }
        }
        if let Some(tls) = &tls {
            for q in dns.take_doh() {
                let Some(server) = doh_servers.get(usize::from(q.server)) else {
                    continue;
                };
                let got = doh::exchange(server, &q, tls, cfg.doh_timeout);
                let reply = got.as_deref().map_err(Clone::clone);
                let (_, verdict) = dns.on_doh_reply(q.server, q.id, reply, now_ms());
                if let Err(why) = verdict {
                    eprintln!("tg-ws-proxy: check: doh {}: {why}", server.0);
                }
                pending = true; // look again: the answer is in the cache now
            }
        }
        if !pending {
            return Ok(out);
        }
        if now >= deadline {
            for h in hosts {
                if !out.contains_key(h) {
                    out.insert(
                        h.clone(),
                        Err(format!("DNS: no answer within {}ms", deadline)),
                    );
                }
            }
            return Ok(out);
        }
        let wake = dns.next_deadline().map_or(deadline, |d| d.min(deadline));
        poll_until(&mut poll, &mut events, now, wake)?;
        let now = now_ms();
        if events.iter().any(|ev| ev.token() == DNS) {
            dns.on_readable(now);
        }
        if dns.next_deadline().is_some_and(|d| d <= now) {
            dns.on_tick(now);
        }
    }
}

/// Runs `count` rounds over `rows`, appending one [`Attempt`] per row per round, every dial
/// with the outbound setting `outbound` ([`plan_rows`]'s).
///
/// Errors: TLS configuration (`--ca-file`), no OS randomness, or the poll failing.
pub fn run_rounds(
    cfg: &Config,
    rows: &mut [Row],
    count: usize,
    outbound: Option<&Outbound>,
) -> io::Result<()> {
    let tls = tls::client_config_with(
        cfg.ca_file.as_deref(),
        cfg.accept_invalid_certs,
        cfg.tls_cipher,
    )
    .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut rng = Rng::new().map_err(|e| io::Error::other(format!("randomness: {e}")))?;
    let mut poll = Poll::new()?;
    let clock = Instant::now();
    let timeout = cfg.probe_timeout.as_millis() as u64;
    // Past the freeze size, so a route that freezes after ~16 KB shows as such.
    let pull = cfg.stall_probe_bytes as usize;
    for _ in 0..count {
        let io = (&mut poll, outbound);
        run_round(io, &tls, &mut rng, &clock, (timeout, pull), rows)?;
    }
    Ok(())
}

/// The rows a round dials, in order; a row without a dial spec gets its `dns` failure now.
fn queue_rows(rows: &mut [Row]) -> VecDeque<usize> {
    let mut queue = VecDeque::new();
    for (i, row) in rows.iter_mut().enumerate() {
        match (&row.spec, &row.unresolved) {
            (Some(_), _) => queue.push_back(i),
            (None, why) => row.attempts.push(Attempt::Failed {
                class: "dns".into(),
                ms: 0,
                detail: why.clone().unwrap_or_default(),
            }),
        }
    }
    queue
}

/// One round: every row's probe (to `resPQ`, then `pull` bytes of them), started [`PACE_MS`] apart, all running together in the same
/// [`Prober`] the proxy's background uses (row index = route id).
fn run_round(
    (poll, outbound): (&mut Poll, Option<&Outbound>),
    tls: &std::sync::Arc<rustls::ClientConfig>,
    rng: &mut Rng,
    clock: &Instant,
    (timeout, pull): (u64, usize),
    rows: &mut [Row],
) -> io::Result<()> {
    let now_ms = || clock.elapsed().as_millis() as u64;
    let mut prober = Prober::new(rows.len());
    let mut queue = queue_rows(rows);
    let mut events = Events::with_capacity(64);
    let mut done: Vec<Finished> = Vec::new();
    let mut next_start = now_ms();
    loop {
        let now = now_ms();
        while now >= next_start {
            let Some(i) = queue.pop_front() else { break };
            let Some(spec) = rows[i].spec.clone() else {
                continue;
            };
            let started = prober.launch(
                i,
                rows[i].dc,
                &spec,
                (Goal::ResPq, pull),
                now + timeout,
                (poll.registry(), outbound),
                now,
            );
            if let Err(f) = started {
                rows[i].attempts.push(Attempt::Failed {
                    class: f.to_string(),
                    ms: 0,
                    detail: "could not start".into(),
                });
            }
            next_start = now + PACE_MS;
        }
        prober.expire(now, &mut done);
        for f in done.drain(..) {
            record(
                &mut rows[f.route],
                f.outcome,
                now.saturating_sub(f.started),
                timeout,
            );
        }
        let wake = match (prober.next_deadline(), queue.is_empty()) {
            (None, true) => return Ok(()),
            (Some(d), true) => d,
            (Some(d), false) => d.min(next_start),
            (None, false) => next_start,
        };
        poll_until(poll, &mut events, now, wake)?;
        let now = now_ms();
        for ev in events.iter() {
            let Some((slot, generation, Role::Probe)) = token::decode(ev.token()) else {
                continue;
            };
            if let Some(f) = prober.on_event(slot, generation, tls, (now, wall_ms()), rng) {
                record(
                    &mut rows[f.route],
                    f.outcome,
                    now.saturating_sub(f.started),
                    timeout,
                );
            }
        }
    }
}

/// Unix time in ms now (0 before 1970): the wall clock a probe's message ids and an `ee`
/// upstream's hello are stamped with (read here, the applet's shell, per event).
fn wall_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Appends a probe outcome to `row`; `elapsed` is the time since the probe started.
fn record(row: &mut Row, outcome: ProbeOutcome, elapsed: u64, timeout: u64) {
    let a = match outcome {
        ProbeOutcome::Ok(ms) => Attempt::Ok(ms),
        ProbeOutcome::Failed(f, retry_after, detail) => {
            let mut detail = match detail.as_str() {
                "deadline" => format!("no resPQ within {timeout}ms"),
                "deadline in TLS/upgrade" => {
                    format!("TCP up, TLS/upgrade not done within {timeout}ms")
                }
                _ => detail,
            };
            if let Some(s) = retry_after {
                detail.push_str(&format!(" (Retry-After {s}s)"));
            }
            Attempt::Failed {
                class: f.to_string(),
                ms: elapsed,
                detail,
            }
        }
        // Pool fills (`Probe::fill`) are never started here; anything else proves nothing.
        #[allow(unreachable_patterns)]
        _ => Attempt::Failed {
            class: "internal".into(),
            ms: elapsed,
            detail: "unexpected probe outcome".into(),
        },
    };
    row.attempts.push(a);
}

/// Polls until an event or `wake` (ms on the caller's clock, `now` being now). An interrupted
/// poll returns no events (the caller's loop goes round again).
///
/// Errors: the poll failed.
fn poll_until(poll: &mut Poll, events: &mut Events, now: u64, wake: u64) -> io::Result<()> {
    let timeout = Duration::from_millis(wake.saturating_sub(now));
    match poll.poll(events, Some(timeout)) {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => {
            events.clear();
            Ok(())
        }
        other => other,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::mtproto::dc::DcId;

    fn args(s: &str) -> Arguments {
        Arguments::from_vec(s.split_whitespace().map(Into::into).collect())
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn flags_parse_without_a_secret() {
        let a = parse_args(
            args("--count 3 --dc 4,2,2 --dc-ip 2:127.0.0.1:9 --probe-timeout 1"),
            &no_env,
        )
        .unwrap();
        assert_eq!(a.count, 3);
        assert_eq!(a.dcs, vec![2, 4]);
        assert_eq!(a.config.probe_timeout, Duration::from_secs(1));
        // Default DC list: 1-5 plus every configured DC.
        let a = parse_args(
            args("--dc-ip 7:127.0.0.1:9 --tcp-dc-ip 9:127.0.0.1:9"),
            &no_env,
        )
        .unwrap();
        assert_eq!(a.dcs, vec![1, 2, 3, 4, 5, 7, 9]);
        assert_eq!(a.count, 1);
        // A secret file is neither read nor created.
        let path = std::env::temp_dir().join(format!("tgwp-check-{}", std::process::id()));
        let _ = std::fs::remove_file(&path);
        parse_args(args(&format!("--secret-file {}", path.display())), &no_env).unwrap();
        assert!(!path.exists());
    }

    #[test]
    fn bad_flags_are_usage_errors() {
        let e = |s: &str| parse_args(args(s), &no_env).unwrap_err().to_string();
        assert!(
            e("--count 0").starts_with("--count: expected 1-100"),
            "{}",
            e("--count 0")
        );
        assert!(e("--count x").starts_with("--count:"));
        assert!(e("--dc 0").starts_with("--dc: expected DC numbers"));
        assert!(e("--dc 2,,4").starts_with("--dc:"));
        assert!(e("--frobnicate").contains("unknown flag '--frobnicate'"));
        assert!(e("--frobnicate").contains("tg-ws-proxy check --help"));
        assert!(e("--probe-timeout 0").starts_with("--probe-timeout"));
    }

    fn row(dc: u16, media: bool, tier: Tier, attempts: Vec<Attempt>) -> Row {
        Row {
            dc: DcId {
                dc,
                media,
                test: false,
            },
            tier,
            label: format!("{}:DC{dc}", tier.name()),
            spec: None,
            unresolved: None,
            attempts,
            edge: None,
        }
    }

    #[test]
    fn edge_lines_say_which_edges_work_and_why_the_others_failed() {
        let ok = Attempt::Ok(12);
        let mut rows = vec![
            row(2, false, Tier::Worker, vec![ok.clone()]),
            row(2, false, Tier::Worker, vec![fail(5000)]),
            row(4, false, Tier::Worker, vec![fail(5000)]),
            row(2, false, Tier::Tcp, vec![ok]),
        ];
        rows[0].edge = Some("127.0.0.2".parse().unwrap());
        rows[1].edge = Some("127.0.0.3".parse().unwrap());
        rows[2].edge = Some("127.0.0.2".parse().unwrap());
        assert_eq!(
            report::edge_lines(&rows),
            vec![
                "cf edge 127.0.0.2: works (1 of 2 routes)",
                "cf edge 127.0.0.3: failed: timeout: no resPQ within 5000ms",
            ]
        );
    }

    fn fail(ms: u64) -> Attempt {
        Attempt::Failed {
            class: "timeout".into(),
            ms,
            detail: "no resPQ within 5000ms".into(),
        }
    }

    #[test]
    fn results_and_medians() {
        let r = row(
            2,
            false,
            Tier::Ws,
            vec![Attempt::Ok(30), Attempt::Ok(10), Attempt::Ok(20)],
        );
        assert_eq!(
            (r.result().as_str(), r.median_ms(), r.works()),
            ("OK", Some(20), true)
        );
        let r = row(
            2,
            false,
            Tier::Ws,
            vec![Attempt::Ok(30), fail(5000), Attempt::Ok(10)],
        );
        assert_eq!(
            (r.result().as_str(), r.median_ms(), r.works()),
            ("FLAKY 2/3", Some(10), true)
        );
        let r = row(2, false, Tier::Ws, vec![Attempt::Ok(30), fail(5000)]);
        assert!(!r.works(), "half is not a majority");
        let r = row(2, false, Tier::Ws, vec![fail(5000), fail(4000)]);
        assert_eq!(
            (r.result().as_str(), r.median_ms(), r.works()),
            ("timeout", Some(4000), false)
        );
        assert_eq!(median(&mut []), None);
    }

    #[test]
    fn verdict_needs_a_working_route_per_dc_and_media() {
        let rows = vec![
            row(2, false, Tier::Ws, vec![fail(5000)]),
            row(2, false, Tier::Tcp, vec![Attempt::Ok(3)]),
            row(2, true, Tier::Ws, vec![fail(5000)]),
            row(2, true, Tier::Tcp, vec![fail(5000)]),
        ];
        let v = verdicts(&rows, &[2, 7]);
        assert_eq!(v.len(), 4);
        assert!(v[0].ok && v[0].line.contains("ok via tcp"), "{:?}", v[0]);
        assert!(
            !v[1].ok && v[1].line.contains("no working route"),
            "{:?}",
            v[1]
        );
        assert!(
            !v[2].ok && v[2].line.contains("no route configured"),
            "{:?}",
            v[2]
        );
        let table = render(&rows);
        assert_eq!(table.lines().count(), 5);
        assert!(table.lines().nth(2).unwrap().contains("OK"), "{table}");
        assert!(table.lines().nth(1).unwrap().contains("timeout"), "{table}");
    }

    #[test]
    fn rows_follow_the_ladder_and_split_ws_host_names() {
        let a = parse_args(
            args("--dc 2 --dc-ip 2:127.0.0.1:9 --tcp-dc-ip 2:127.0.0.1:10 --tier-order ws,tcp"),
            &no_env,
        )
        .unwrap();
        let rows = plan_rows(&a.config, &a.dcs, &mut None).unwrap();
        let labels: Vec<&str> = rows.iter().map(|r| r.label.as_str()).collect();
        assert_eq!(
            labels,
            vec![
                "ws:DC2 kws2.web.telegram.org@127.0.0.1:9",
                "ws:DC2 kws2-1.web.telegram.org@127.0.0.1:9",
                "tcp:DC2 127.0.0.1:10",
                "ws:DC2m kws2-1.web.telegram.org@127.0.0.1:9",
                "ws:DC2m kws2.web.telegram.org@127.0.0.1:9",
                "tcp:DC2m 127.0.0.1:10",
            ]
        );
    }

    #[test]
    fn a_dead_route_fails_within_the_probe_timeout() {
        // A closed port on loopback: refused at once, never a wait.
        let port = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap().port()
        };
        let a = parse_args(
            args(&format!(
                "--dc 2 --tcp-dc-ip 2:127.0.0.1:{port} --tier-order tcp --probe-timeout 2"
            )),
            &no_env,
        )
        .unwrap();
        let mut rows = plan_rows(&a.config, &a.dcs, &mut None).unwrap();
        let t = Instant::now();
        run_rounds(&a.config, &mut rows, 2, None).unwrap();
        assert!(t.elapsed() < Duration::from_secs(2), "{:?}", t.elapsed());
        assert_eq!(rows.len(), 2);
        for r in &rows {
            assert_eq!(r.attempts.len(), 2);
            assert_eq!(r.result(), "refused", "{r:?}");
        }
    }
}
