//! `make bench-pit` driver (run by `bench/pit.sh`): the field investigation's A/B
//! (docs/design.md §1) on loopback, against the REAL `tg-ws-proxy` binary, for the
//! docs/design.md §8 rows "the pit" and "flapping", plus the Worker request count behind the
//! "requests/day" row.
//!
//! Every scenario gets its own proxy process and fake peers: a fake TCP DC, a Cloudflare Worker
//! look-alike tunnelling to it (`FakeDc::start_worker`, the healthy fallback), and a direct `ws`
//! tier that is healthy (baseline), black-holed (the pit: SYNs dropped by a full accept queue,
//! `tests/common/blackhole.rs`), or flapping (`bench_pit/flapper.rs`: half of the connections
//! held silent). The proxy runs with `--tier-order ws,worker` (the seed's two tiers),
//! `--cooldown-base 20 --cooldown-max 20` (a cooldown expires every ~20 s, the seed's metronome
//! compressed from 600 s), and `--ws-connect-timeout` 4 s or 1 s (the seed's before/after). A
//! probe client (`applet::probe::probe_once`: obfuscated2 + `req_pq_multi` → `resPQ`, a fresh
//! connection each time, what the Telegram app does to judge a proxy) runs once per second,
//! the first time as soon as the proxy logs `listening on`. The proxy keeps its default startup
//! probes (every DC it could dial is on 127.0.0.1, see `bench_pit/proc.rs`), and the pit is
//! judged against docs/design.md §8: max ≤ healthy p99 + 50 ms, the first attempt included.
//!
//! The budget run uses default settings except a compressed `--probe-interval`: a few clients
//! make the routes hot, then the proxy idles and every Worker request it makes is counted
//! (the look-alike's own counter) and classified from the proxy's debug log.
//!
//! Scenarios run in parallel (each is a few requests per second). Bench code: loopback only,
//! every wait bounded; setup failures end the run with a message. Proxy logs are kept in
//! `--logs DIR` for explaining any missed target.

#[path = "../tests/common/blackhole.rs"]
mod blackhole;
#[path = "../tests/common/fakedc.rs"]
mod fakedc;

#[path = "bench_pit/flapper.rs"]
mod flapper;
#[path = "bench_pit/pool.rs"]
mod pool;
#[path = "bench_pit/proc.rs"]
mod proc;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tg_ws_proxy::applet::probe::{probe_once, Attempt, ClientOptions, Outcome, Summary};
use tg_ws_proxy::mtproto::obfs2::{Secret, Tag};
use tg_ws_proxy::rng::Rng;

use blackhole::BlackHole;
use fakedc::{DcConfig, FakeDc};
use flapper::Flapper;
use proc::Proxy;

/// The client secret (plain form) the probes use.
const SECRET: &str = "0123456789abcdef0123456789abcdef";
/// The Worker's name (the test certificate covers `*.workers.dev`); a hosts file maps it to
/// 127.0.0.1.
const WORKER_NAME: &str = "pit.workers.dev";
/// Bound on one probe attempt: long enough to see the whole pit, as the field investigation's
/// probe did.
const PROBE_TIMEOUT: Duration = Duration::from_secs(10);
/// Compressed probe interval of the budget run, scaled back to the 300 s default.
const BUDGET_PROBE_INTERVAL_S: u64 = 20;
const DEFAULT_PROBE_INTERVAL_S: u64 = 300;
/// The default `--cooldown-max`: a Down route is re-probed at most this often in steady state.
const DEFAULT_COOLDOWN_MAX_S: u64 = 600;
/// The Worker routes the budget run's clients make hot (`DC2 ` with its space: not `DC2m`).
const HOT_WORKER_ROUTES: [&str; 2] = ["probe worker:DC2 ", "probe worker:DC2m "];
/// docs/design.md §8 targets. The pit: max ≤ healthy p99 + this, the first attempt after start
/// included, and no attempt over 1 s.
const PIT_MARGIN_MS: u64 = 50;
const FLAP_P99_MS: u64 = 500;
const WORKER_PER_DAY: f64 = 5000.0;
/// Slow attempts shown with their proxy log lines in the report.
const EXCERPTS: usize = 4;
/// Log lines left out of the excerpts.
const NOISE: [&str; 4] = [" stats: ", "init ok", "applet::run", "warm upstream ready"];

struct Opts {
    proxy: PathBuf,
    ca: PathBuf,
    out: Option<PathBuf>,
    logs: PathBuf,
    /// Seconds of probing per latency scenario.
    secs: u64,
    /// Seconds of idling in the budget run.
    idle: u64,
}

fn parse_opts() -> Result<Opts, String> {
    let mut a = pico_args::Arguments::from_env();
    let e = |x: pico_args::Error| x.to_string();
    let o = Opts {
        proxy: a
            .opt_value_from_str("--proxy")
            .map_err(e)?
            .unwrap_or_else(|| "target/release/tg-ws-proxy".into()),
        ca: a
            .opt_value_from_str("--ca")
            .map_err(e)?
            .unwrap_or_else(|| "tests/data/ca.pem".into()),
        out: a.opt_value_from_str("--out").map_err(e)?,
        logs: a
            .opt_value_from_str("--logs")
            .map_err(e)?
            .unwrap_or_else(|| "target/bench/pit".into()),
        secs: a.opt_value_from_str("--secs").map_err(e)?.unwrap_or(70),
        idle: a.opt_value_from_str("--idle").map_err(e)?.unwrap_or(120),
    };
    let rest = a.finish();
    if !rest.is_empty() {
        return Err(format!("unknown arguments {rest:?}"));
    }
    if o.secs < 5 || o.idle < 10 {
        return Err("need --secs ≥ 5 and --idle ≥ 10".into());
    }
    Ok(o)
}

/// What the direct `ws` tier is.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Direct {
    Healthy,
    BlackHole,
    Flapping,
    /// Black-holed, raw TCP too: only the shared CF domain list's domains work (`pool`).
    PoolOnly,
}

/// One latency scenario.
#[derive(Clone)]
struct Spec {
    name: &'static str,
    direct: Direct,
    ws_timeout: &'static str,
}

/// What one latency scenario measured.
struct Measured {
    spec: Spec,
    /// (start offset from the scenario's first probe in ms, attempt).
    attempts: Vec<(u64, Attempt)>,
    worker_requests: usize,
    sessions_worker: usize,
    sessions_ws: usize,
    ws_down: usize,
    ws_probes: usize,
    ws_probe_failed: usize,
    hedges: usize,
    budget_closes: usize,
    flap: Option<(usize, usize)>,
    lines: Vec<proc::Line>,
    /// Bench-clock ms of the first probe start.
    t0: u64,
}

/// What the budget run counted during its idle window.
struct Budget {
    /// The DC behind the Worker keeps idle (pre-init) connections open (lazy forwarder), or
    /// closes them after 10 s (the fake DC as is).
    dc_holds_idle: bool,
    /// Warm-up clients (of 6) that got a resPQ.
    warm_ok: usize,
    /// Length of the idle window (ms).
    idle_ms: u64,
    /// Worker requests during it (the look-alike's counter).
    requests: usize,
    /// Pool fills toward the Worker (log lines `pool worker:… ready` / `fill failed`).
    pool_fills: usize,
    /// Probes toward the Worker (log lines `probe worker:… started`) of the two hot routes
    /// (DC 2 and DC 2m): liveness probes, on the `--probe-interval` schedule.
    worker_probes: usize,
    /// Probes toward the Worker of the other routes: the ones the startup probes created (DCs
    /// 1, 3, 4, 5), which no client uses. The bench maps those DCs to a closed loopback port,
    /// so they are Down and re-probed on their cooldown schedule, not `--probe-interval`.
    other_probes: usize,
    /// How many such other Worker routes were probed at all during the run.
    other_routes: usize,
    /// Probes of the black-holed ws route (not Worker requests).
    ws_probes: usize,
    /// Client sessions closed during the window (should be 0).
    sessions: usize,
    /// Pool sweeps that found every pooled upstream dead (log line "network change").
    dead_sweeps: usize,
}

fn main() {
    let o = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench-pit: {e}");
            std::process::exit(2);
        }
    };
    match run(&o) {
        Ok(report) => {
            print!("{report}");
            if let Some(out) = &o.out {
                if let Err(e) = std::fs::write(out, &report) {
                    eprintln!("bench-pit: write {}: {e}", out.display());
                    std::process::exit(1);
                }
            }
        }
        Err(e) => {
            eprintln!("bench-pit: FAILED: {e}");
            std::process::exit(1);
        }
    }
}

fn run(o: &Opts) -> Result<String, String> {
    std::fs::create_dir_all(&o.logs).map_err(|e| format!("mkdir {}: {e}", o.logs.display()))?;
    let names = name_files(&o.logs)?;
    let epoch = Instant::now();
    let specs = [
        Spec {
            name: "healthy",
            direct: Direct::Healthy,
            ws_timeout: "4",
        },
        Spec {
            name: "pit-4s",
            direct: Direct::BlackHole,
            ws_timeout: "4",
        },
        Spec {
            name: "pit-1s",
            direct: Direct::BlackHole,
            ws_timeout: "1",
        },
        Spec {
            name: "flapping",
            direct: Direct::Flapping,
            ws_timeout: "4",
        },
        Spec {
            name: "pool-only",
            direct: Direct::PoolOnly,
            ws_timeout: "1",
        },
    ];
    eprintln!(
        "bench-pit: {} latency scenarios × {} s and the budget run ({} s idle), in parallel",
        specs.len(),
        o.secs,
        o.idle
    );
    let (results, budgets) = std::thread::scope(|s| {
        let budgets = [false, true].map(|holds| {
            let names = &names;
            s.spawn(move || budget_run(o, names, epoch, holds))
        });
        let handles: Vec<_> = specs
            .iter()
            .map(|sp| {
                let names = &names;
                s.spawn(move || latency_run(o, sp.clone(), names, epoch))
            })
            .collect();
        let v: Vec<Result<Measured, String>> = handles
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("scenario thread panicked".into()))
            })
            .collect();
        let b: Vec<Result<Budget, String>> = budgets
            .into_iter()
            .map(|h| {
                h.join()
                    .unwrap_or_else(|_| Err("budget thread panicked".into()))
            })
            .collect();
        (v, b)
    });
    let measured = results.into_iter().collect::<Result<Vec<_>, _>>()?;
    let budgets = budgets.into_iter().collect::<Result<Vec<_>, _>>()?;
    Ok(report(o, &measured, &budgets))
}

/// `--hosts-file` (the Worker name → 127.0.0.1) and a resolv.conf whose one nameserver is an
/// unused loopback address, so nothing leaves the host.
fn name_files(dir: &Path) -> Result<(PathBuf, PathBuf), String> {
    let hosts = dir.join("hosts");
    let resolv = dir.join("resolv.conf");
    std::fs::write(&hosts, format!("127.0.0.1 {WORKER_NAME}\n"))
        .and_then(|()| std::fs::write(&resolv, "nameserver 127.0.0.9\n"))
        .map_err(|e| format!("write name files: {e}"))?;
    Ok((hosts, resolv))
}

/// The proxy flags shared by every scenario.
fn base_args(
    o: &Opts,
    names: &(PathBuf, PathBuf),
    ws: SocketAddr,
    dc: SocketAddr,
    worker: SocketAddr,
) -> Vec<String> {
    let mut v: Vec<String> = vec![
        "--ca-file".into(),
        o.ca.display().to_string(),
        "--dc-ip".into(),
        format!("2:{ws}"),
        "--tcp-dc-ip".into(),
        format!("2:{dc}"),
        "--cf-worker-domain".into(),
        format!("{WORKER_NAME}:{}", worker.port()),
        "--hosts-file".into(),
        names.0.display().to_string(),
        "--resolv-conf".into(),
        names.1.display().to_string(),
        "--tier-order".into(),
        "ws,worker".into(),
        "--stats-interval".into(),
        "10".into(),
        "-v".into(),
    ];
    v.shrink_to_fit();
    v
}

fn client_opts(proxy: SocketAddr) -> Result<ClientOptions, String> {
    Ok(ClientOptions {
        addr: proxy,
        secret: Some(Secret::parse(SECRET).map_err(|e| format!("secret: {e}"))?),
        tag: Tag::Intermediate,
        dc: 2,
        timeout: PROBE_TIMEOUT,
    })
}

/// Probes `proxy` once per second for `secs` seconds on a fixed schedule: each attempt runs in
/// its own thread, so a slow one (up to the 10 s probe timeout) never delays the next start —
/// a Telegram app does not wait for one connection before opening another either. Returns
/// (offset from the first start in ms, attempt) in start order, and the first start on the
/// bench clock.
fn probe_loop(
    proxy: SocketAddr,
    secs: u64,
    epoch: Instant,
) -> Result<(Vec<(u64, Attempt)>, u64), String> {
    let opts = client_opts(proxy)?;
    let start = Instant::now();
    let t0 = epoch.elapsed().as_millis() as u64;
    let mut running = Vec::new();
    for i in 0..secs {
        let at = start + Duration::from_secs(i);
        if let Some(wait) = at.checked_duration_since(Instant::now()) {
            std::thread::sleep(wait);
        }
        let offset = start.elapsed().as_millis() as u64;
        let opts = opts.clone();
        running.push((
            offset,
            std::thread::spawn(move || {
                let mut rng = Rng::new().map_err(|e| format!("randomness: {e}"))?;
                Ok::<Attempt, String>(probe_once(&opts, &mut rng))
            }),
        ));
    }
    let mut out = Vec::new();
    for (offset, h) in running {
        let a = h
            .join()
            .map_err(|_| "probe thread panicked".to_string())??;
        out.push((offset, a));
    }
    Ok((out, t0))
}

/// The fake direct front of a scenario, kept alive for its run.
enum Front {
    Healthy(FakeDc),
    Hole(BlackHole),
    /// The forwarder and the healthy front behind it (kept alive, never read).
    Flap(Flapper, #[allow(dead_code)] FakeDc),
    /// The black-holed front and the shared-pool rig.
    Pool(BlackHole, Box<pool::PoolRig>),
}

impl Front {
    fn addr(&self) -> SocketAddr {
        match self {
            Front::Healthy(d) => d.addr(),
            Front::Hole(h) => h.addr(),
            Front::Flap(f, _) => f.addr(),
            Front::Pool(h, _) => h.addr(),
        }
    }
}

fn latency_run(
    o: &Opts,
    spec: Spec,
    names: &(PathBuf, PathBuf),
    epoch: Instant,
) -> Result<Measured, String> {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let worker = FakeDc::start_worker(DcConfig::default());
    let front = match spec.direct {
        Direct::Healthy => Front::Healthy(FakeDc::start_tls_ws(DcConfig::default())),
        Direct::BlackHole => {
            Front::Hole(BlackHole::try_new().map_err(|e| format!("black hole: {e}"))?)
        }
        Direct::Flapping => {
            let ws = FakeDc::start_tls_ws(DcConfig::default());
            let f = Flapper::start(ws.addr(), 0x5eed_f1a9).map_err(|e| format!("flapper: {e}"))?;
            Front::Flap(f, ws)
        }
        Direct::PoolOnly => Front::Pool(
            BlackHole::try_new().map_err(|e| format!("black hole: {e}"))?,
            Box::new(pool::PoolRig::start(&o.logs)?),
        ),
    };
    let mut args = base_args(o, names, front.addr(), dc.addr(), worker.addr());
    args.extend(
        [
            "--ws-connect-timeout",
            spec.ws_timeout,
            "--cooldown-base",
            "20",
            "--cooldown-max",
            "20",
        ]
        .map(String::from),
    );
    if let Front::Pool(_, rig) = &front {
        args.extend(rig.args());
    }
    let log = o.logs.join(format!("{}.log", spec.name));
    let mut proxy = Proxy::start(&o.proxy, SECRET, &args, &log, epoch)?;
    eprintln!(
        "bench-pit: {}: proxy on {} (log {})",
        spec.name,
        proxy.addr(),
        log.display()
    );
    let (attempts, t0) = probe_loop(proxy.addr(), o.secs, epoch)?;
    // Let the last session close lines arrive.
    std::thread::sleep(Duration::from_millis(300));
    if !proxy.alive() {
        return Err(format!(
            "{}: the proxy died; see {}",
            spec.name,
            log.display()
        ));
    }
    let m = Measured {
        worker_requests: worker.requests(),
        sessions_worker: proxy.count(&["session ", " via worker "]),
        sessions_ws: proxy.count(&["session ", " via ws "]),
        ws_down: proxy.count(&["route ws:DC2 ", "down for"]),
        ws_probes: proxy.count(&["probe ws:DC2 ", "started"]),
        ws_probe_failed: proxy.count(&["probe ws:DC2 ", "failed"]),
        hedges: proxy.count(&["hedging to the next route"]),
        budget_closes: proxy.count(&["connect budget"]),
        flap: match &front {
            Front::Flap(f, _) => Some((
                f.counts.forwarded.load(Ordering::Relaxed),
                f.counts.held.load(Ordering::Relaxed),
            )),
            _ => None,
        },
        lines: proxy.lines(),
        attempts,
        t0,
        spec,
    };
    proxy.stop();
    Ok(m)
}

/// The budget run: pit configuration with default settings except `--probe-interval 20`
/// (`dc_holds_idle`: a lazy forwarder in front of the DC); six clients (one per second, DC 2 and media DC 2) make the routes
/// hot, then the proxy idles for `--idle` seconds while the Worker counts requests.
fn budget_run(
    o: &Opts,
    names: &(PathBuf, PathBuf),
    epoch: Instant,
    dc_holds_idle: bool,
) -> Result<Budget, String> {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let lazy = if dc_holds_idle {
        Some(Flapper::lazy(dc.addr()).map_err(|e| format!("forwarder: {e}"))?)
    } else {
        None
    };
    let dst = lazy.as_ref().map_or(dc.addr(), Flapper::addr);
    let worker = FakeDc::start_worker(DcConfig::default());
    let hole = BlackHole::try_new().map_err(|e| format!("black hole: {e}"))?;
    let mut args = base_args(o, names, hole.addr(), dst, worker.addr());
    args.extend([
        "--probe-interval".to_string(),
        BUDGET_PROBE_INTERVAL_S.to_string(),
    ]);
    let name = if dc_holds_idle {
        "budget-dc-holds"
    } else {
        "budget-dc-closes"
    };
    let log = o.logs.join(format!("{name}.log"));
    let mut proxy = Proxy::start(&o.proxy, SECRET, &args, &log, epoch)?;
    eprintln!(
        "bench-pit: {name}: proxy on {} (log {})",
        proxy.addr(),
        log.display()
    );
    let mut opts = client_opts(proxy.addr())?;
    let mut rng = Rng::new().map_err(|e| format!("randomness: {e}"))?;
    let mut warm_ok = 0;
    for i in 0..6 {
        opts.dc = if i % 2 == 0 { 2 } else { -2 };
        if probe_once(&opts, &mut rng).outcome == Outcome::Ok {
            warm_ok += 1;
        }
        std::thread::sleep(Duration::from_secs(1));
    }
    // Settle: the sessions closed, the pool fills they triggered finished.
    std::thread::sleep(Duration::from_secs(2));
    let idle_from = epoch.elapsed().as_millis() as u64;
    let before = worker.requests();
    std::thread::sleep(Duration::from_secs(o.idle));
    let after = worker.requests();
    let idle_to = epoch.elapsed().as_millis() as u64;
    if !proxy.alive() {
        return Err(format!("{name}: the proxy died; see {}", log.display()));
    }
    let lines = proxy.lines();
    proxy.stop();
    let in_idle = |needles: &[&str]| {
        lines
            .iter()
            .filter(|l| l.at_ms >= idle_from && l.at_ms < idle_to)
            .filter(|l| needles.iter().all(|n| l.text.contains(n)))
            .count()
    };
    Ok(Budget {
        dc_holds_idle,
        warm_ok,
        idle_ms: idle_to - idle_from,
        requests: after - before,
        pool_fills: in_idle(&["pool worker:", "warm upstream ready"])
            + in_idle(&["pool worker:", "fill failed"]),
        worker_probes: HOT_WORKER_ROUTES
            .iter()
            .map(|r| in_idle(&[r, "started"]))
            .sum(),
        other_probes: in_idle(&["probe worker:", "started"])
            - HOT_WORKER_ROUTES
                .iter()
                .map(|r| in_idle(&[r, "started"]))
                .sum::<usize>(),
        other_routes: {
            let mut v: Vec<&str> = lines
                .iter()
                .filter(|l| l.text.contains("probe worker:") && l.text.contains("started"))
                .filter(|l| !HOT_WORKER_ROUTES.iter().any(|r| l.text.contains(r)))
                .filter_map(|l| {
                    let rest = &l.text[l.text.find("probe worker:")? + "probe ".len()..];
                    rest.split_whitespace().next()
                })
                .collect();
            v.sort_unstable();
            v.dedup();
            v.len()
        },
        ws_probes: in_idle(&["probe ws:", "started"]),
        sessions: in_idle(&["session "]),
        dead_sweeps: in_idle(&["every pooled upstream was dead"]),
    })
}

fn verdict(ok: bool) -> &'static str {
    if ok {
        "PASS"
    } else {
        "**FAIL**"
    }
}

fn ms_of(a: &[(u64, Attempt)]) -> Vec<Attempt> {
    a.iter().map(|(_, x)| x.clone()).collect()
}

fn report(o: &Opts, ms: &[Measured], budgets: &[Budget]) -> String {
    let mut r = String::new();
    let healthy = ms.iter().find(|m| m.spec.name == "healthy");
    // docs/design.md §8: the pit's limit is the healthy p99 + 50 ms (nearest rank: with 70
    // attempts the healthy p99 is the healthy max).
    let base = healthy.map_or(0, |h| Summary::from(&ms_of(&h.attempts)).p99_ms);
    let limit = base + PIT_MARGIN_MS;
    let _ = writeln!(
        r,
        "### Probe latency (one new probe connection per second, {} s per scenario)\n",
        o.secs
    );
    let _ = writeln!(
        r,
        "Healthy p99 {base} ms, so the pit limit is {limit} ms (healthy p99 + {PIT_MARGIN_MS} ms, \
         docs/design.md §8), the first attempt after start included. \"first\" is the first \
         attempt, started as soon as the proxy logged `listening on`.\n"
    );
    let _ = writeln!(
        r,
        "| scenario | ws tier | --ws-connect-timeout | n | OK | first | median | p90 | p99 | max | > 1 s | > {limit} ms | target | verdict |"
    );
    let _ = writeln!(
        r,
        "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---|---|"
    );
    for m in ms {
        let s = Summary::from(&ms_of(&m.attempts));
        let over = m.attempts.iter().filter(|(_, a)| a.ms > limit).count();
        // The first attempt after start (the cold start), with its outcome when it failed.
        let first = m.attempts.first().map_or("—".to_string(), |(_, a)| {
            if a.outcome == Outcome::Ok {
                a.ms.to_string()
            } else {
                format!("{} ({})", a.ms, a.outcome)
            }
        });
        let (target, ok) = match m.spec.direct {
            Direct::Healthy => ("(baseline)".to_string(), s.ok == s.count),
            Direct::BlackHole => (
                format!("0 over 1 s, max (first included) ≤ {base} + {PIT_MARGIN_MS} = {limit} ms"),
                s.over_1s == 0 && s.max_ms <= limit && s.ok == s.count,
            ),
            Direct::Flapping => (
                format!("p99 ≤ {FLAP_P99_MS} ms"),
                s.p99_ms <= FLAP_P99_MS && s.ok == s.count,
            ),
            Direct::PoolOnly => (
                "0 over 1 s, every attempt OK".to_string(),
                s.over_1s == 0 && s.ok == s.count,
            ),
        };
        let tier = match m.spec.direct {
            Direct::Healthy => "healthy",
            Direct::BlackHole => "black-holed",
            Direct::Flapping => "flapping (½ held)",
            Direct::PoolOnly => "black-holed, tcp too; shared pool only",
        };
        let _ =
            writeln!(
            r,
            "| {} | {tier} | {} s | {} | {} | {first} | {} | {} | {} | {} | {} | {over} | {target} | {} |",
            m.spec.name,
            m.spec.ws_timeout,
            s.count,
            s.ok,
            s.median_ms,
            s.p90_ms,
            s.p99_ms,
            s.max_ms,
            s.over_1s,
            if m.spec.direct == Direct::Healthy { "—" } else { verdict(ok) },
        );
    }
    let _ = writeln!(r, "\n### What the proxy did (from its log)\n");
    let _ = writeln!(
        r,
        "| scenario | sessions via ws | via worker | ws route went down | ws recovery probes (failed) | client hedges | connect-budget closes | Worker requests | Worker requests − worker sessions |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for m in ms {
        let _ = writeln!(
            r,
            "| {} | {} | {} | {} | {} ({}) | {} | {} | {} | {} |",
            m.spec.name,
            m.sessions_ws,
            m.sessions_worker,
            m.ws_down,
            m.ws_probes,
            m.ws_probe_failed,
            m.hedges,
            m.budget_closes,
            m.worker_requests,
            m.worker_requests as i64 - m.sessions_worker as i64,
        );
    }
    for m in ms.iter().filter(|m| m.spec.direct == Direct::PoolOnly) {
        let count = |needles: &[&str]| {
            m.lines
                .iter()
                .filter(|l| needles.iter().all(|n| l.text.contains(n)))
                .count()
        };
        let _ = writeln!(
            r,
            "\nShared pool ({}): {} sessions via cfproxy, {} via tcp; list lines: {} cached, {} accepted.",
            m.spec.name,
            count(&["session ", " via cfproxy "]),
            count(&["session ", " via tcp "]),
            count(&["cf-domain-list", "cached domains"]),
            count(&["cf-domain-list", "accepted"]),
        );
    }
    for m in ms {
        if let Some((fwd, held)) = m.flap {
            let _ = writeln!(
                r,
                "\nFlapper: {fwd} connections forwarded, {held} held silent."
            );
        }
    }
    for m in ms {
        let slow: Vec<&(u64, Attempt)> = m
            .attempts
            .iter()
            .filter(|(_, a)| a.ms > limit || a.outcome != Outcome::Ok)
            .collect();
        if slow.is_empty() || m.spec.direct == Direct::Healthy {
            continue;
        }
        let _ = writeln!(
            r,
            "\n#### {}: attempts over {limit} ms (offset from the first probe)\n",
            m.spec.name
        );
        // The first few with the proxy's lines while they ran; the rest on one line.
        for (off, a) in slow.iter().take(EXCERPTS) {
            let detail = if a.detail.is_empty() {
                String::new()
            } else {
                format!(" ({})", a.detail)
            };
            let _ = writeln!(
                r,
                "- +{:.1} s: {} ms {}{detail}",
                *off as f64 / 1000.0,
                a.ms,
                a.outcome
            );
            let from = m.t0 + off;
            let to = from + a.ms + 50;
            let around = m
                .lines
                .iter()
                .filter(|l| l.at_ms >= from && l.at_ms <= to)
                .filter(|l| !NOISE.iter().any(|n| l.text.contains(n)));
            for l in around.take(8) {
                let _ = writeln!(r, "  - `{}`", strip_stamp(&l.text));
            }
        }
        if slow.len() > EXCERPTS {
            let rest: Vec<String> = slow[EXCERPTS..]
                .iter()
                .map(|(off, a)| format!("+{:.0}s {}ms {}", *off as f64 / 1000.0, a.ms, a.outcome))
                .collect();
            let _ = writeln!(r, "- the other {}: {}", rest.len(), rest.join(", "));
        }
    }

    budget_section(&mut r, budgets);
    r
}

/// The Worker-requests table: one column pair per budget run.
fn budget_section(r: &mut String, budgets: &[Budget]) {
    let _ = writeln!(r, "\n### Worker requests while idle (budget runs)\n");
    let _ = writeln!(
        r,
        "Pit configuration (ws black-holed, Worker healthy) with default settings except \
         `--probe-interval {BUDGET_PROBE_INTERVAL_S}`. Six clients \
         (DC2 and DC2m) made the two Worker routes hot, then each proxy idled; the look-alike \
         counted every request. Two runs: behind the Worker, a DC that closes a connection \
         which sent no init within 10 s (the fake DC as is), and one that keeps it open (a \
         forwarder that connects to the fake DC only when the first byte comes).\n"
    );
    let mut head = String::from("| what |");
    let mut rule = String::from("|---|");
    for b in budgets {
        let dc = if b.dc_holds_idle {
            "DC keeps idle connections"
        } else {
            "DC closes idle after 10 s"
        };
        let _ = write!(head, " {dc}: count | per hour | per day |");
        rule.push_str("---:|---:|---:|");
    }
    let _ = writeln!(r, "{head}\n{rule}");
    type Cell<'a> = Box<dyn Fn(&Budget) -> (Option<f64>, Option<f64>, Option<f64>) + 'a>;
    let hours = |b: &Budget| b.idle_ms as f64 / 3_600_000.0;
    let scale = BUDGET_PROBE_INTERVAL_S as f64 / DEFAULT_PROBE_INTERVAL_S as f64;
    let per_h = move |n: usize, b: &Budget| n as f64 / hours(b);
    let rows: Vec<(String, Cell)> = vec![
        ("warm-up clients that got a resPQ (of 6)".into(), Box::new(|b| (Some(b.warm_ok as f64), None, None))),
        ("idle window, s".into(), Box::new(|b| (Some(b.idle_ms as f64 / 1000.0), None, None))),
        (
            "all Worker requests (look-alike's counter)".into(),
            Box::new(move |b| (Some(b.requests as f64), Some(per_h(b.requests, b)), None)),
        ),
        (
            "pool fills toward the Worker (default --pool-size, --pool-max-age)".into(),
            Box::new(move |b| {
                let h = per_h(b.pool_fills, b);
                (Some(b.pool_fills as f64), Some(h), Some(h * 24.0))
            }),
        ),
        (
            format!("liveness probes of the 2 hot Worker routes (DC2, DC2m), at --probe-interval {BUDGET_PROBE_INTERVAL_S} s"),
            Box::new(move |b| (Some(b.worker_probes as f64), Some(per_h(b.worker_probes, b)), None)),
        ),
        (
            format!("the same scaled to the default --probe-interval {DEFAULT_PROBE_INTERVAL_S} s"),
            Box::new(move |b| {
                let h = per_h(b.worker_probes, b) * scale;
                (None, Some(h), Some(h * 24.0))
            }),
        ),
        (
            "probes of the other Worker routes (created by the startup probes, no client uses \
             them; Down here, since the bench maps their DCs to a closed loopback port), as \
             measured (cooldown schedule, not scaled)"
                .into(),
            Box::new(move |b| (Some(b.other_probes as f64), Some(per_h(b.other_probes, b)), None)),
        ),
        (
            format!(
                "those routes at steady state while Down: one probe per --cooldown-max \
                 {DEFAULT_COOLDOWN_MAX_S} s each (count = routes)"
            ),
            Box::new(move |b| {
                let d = b.other_routes as f64 * 86_400.0 / DEFAULT_COOLDOWN_MAX_S as f64;
                (Some(b.other_routes as f64), Some(d / 24.0), Some(d))
            }),
        ),
        (
            "those routes if their DCs were reachable (Up): none after the startup probe \
             (liveness probes are only for routes a session has used; count = routes)"
                .into(),
            Box::new(move |b| (Some(b.other_routes as f64), Some(0.0), Some(0.0))),
        ),
        (
            "Worker requests not explained by those log lines".into(),
            Box::new(|b| {
                let explained = b.pool_fills + b.worker_probes + b.other_probes;
                (Some(b.requests as f64 - explained as f64), None, None)
            }),
        ),
        (
            "pool sweeps that found every entry dead (\"network change\")".into(),
            Box::new(|b| (Some(b.dead_sweeps as f64), None, None)),
        ),
    ];
    let fmt = |v: Option<f64>| v.map_or_else(|| "—".to_string(), |x| format!("{x:.0}"));
    for (what, cell) in rows {
        let mut line = format!("| {what} |");
        for b in budgets {
            let (c, h, d) = cell(b);
            let _ = write!(line, " {} | {} | {} |", fmt(c), fmt(h), fmt(d));
        }
        let _ = writeln!(r, "{line}");
    }
    let _ = writeln!(r);
    for b in budgets {
        let h = hours(b);
        let per_day = (b.pool_fills as f64 / h + b.worker_probes as f64 / h * scale) * 24.0;
        let others_down = b.other_routes as f64 * 86_400.0 / DEFAULT_COOLDOWN_MAX_S as f64;
        // Reachable (Up) but unused, those routes get no liveness probes: the Down schedule
        // is the worst case.
        let worst = per_day + others_down;
        let dc = if b.dc_holds_idle {
            "DC keeps idle connections"
        } else {
            "DC closes idle after 10 s"
        };
        let _ = writeln!(
            r,
            "- {dc}: **{per_day:.0} Worker requests/day** from probes + pool of the two routes \
             kept hot all day, at default settings; with the {} other Worker routes the startup \
             probes created: **{worst:.0}/day** while they are Down (as here; if their DCs are \
             reachable they cost nothing after the startup probe) (target ≤ \
             {WORKER_PER_DAY:.0}: {}); {} client sessions and {} ws recovery probes in the window.",
            b.other_routes,
            verdict(worst <= WORKER_PER_DAY),
            b.sessions,
            b.ws_probes
        );
    }
}

/// Drops simple_logger's leading timestamp for the report.
fn strip_stamp(line: &str) -> &str {
    match line.split_once(' ') {
        Some((first, rest)) if first.len() > 18 && first.as_bytes()[4] == b'-' => rest.trim_start(),
        _ => line,
    }
}
