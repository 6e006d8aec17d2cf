//! Soak scenario (issue 10: "1,000 concurrent held sessions with default flags (all
//! established), and a churn of 20 new sessions per second for 30 minutes; fds and RSS sampled
//! every 30 s, reported with their slope; p99 setup latency reported"). Run only when named
//! (`--only soak`, what `bench/soak.sh` and `make bench-soak` run): it takes `--soak-secs`.
//!
//! One fake TLS + WS front and one proxy at its default flags plus the seams the burst uses
//! (`--dc-ip 2:<front> --tier-order ws`, every other DC on the closed port 127.0.0.1:9, see
//! [`super::burst`]). Then:
//! * `--soak-held` (1,000) sessions are opened with [`client::open`] (init, `req_pq_multi` →
//!   `resPQ`, one echo: established) and held; a holder thread echoes 64 bytes on a rotating
//!   slice of them every second, so each one carries a packet about every `--soak-interval`;
//! * `--soak-rate` (20) new sessions per second arrive for `--soak-secs` (1,800): each connects,
//!   sends its init and a `req_pq_multi`, waits for the `resPQ` (its setup latency, from the
//!   connect call), echoes 256 bytes and closes. [`CHURN_THREADS`] blocking threads share the
//!   schedule (session `i` is due at `t0 + i / rate`; how late each started is reported);
//! * every `--soak-interval` (30 s) the proxy's open descriptors (`/proc/PID/fd`) and `VmRSS`
//!   are sampled; the report gives every sample and the least-squares slope of both per hour.
//!
//! Every failure (a held session's echo, a churn session's connect, init, `resPQ` or echo) is
//! counted and the first few are quoted; the target is zero. Bench code: loopback only, bounded
//! by socket timeouts and the run's deadline; nothing here panics on what the proxy sends.

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tg_ws_proxy::rng::Rng;

use super::burst::percentile;
use super::fakedc::{DcConfig, FakeDc};
use super::proxy::ProxyProc;
use super::{client, procfs, step, Opts};

/// Blocking threads that run the churn sessions (one session at a time each).
const CHURN_THREADS: usize = 8;
/// Threads that open the held sessions.
const OPEN_THREADS: usize = 8;
/// Failure texts kept for the report.
const KEEP_ERRORS: usize = 10;
/// Descriptors this needs beyond 3 per held session (the proxy's default --max-connections is
/// (limit − 32) / 3; this process holds each client and the front's 2 per upstream).
const FD_SPARE: u64 = 512;

/// What the soak measured.
pub struct Soak {
    held: usize,
    rate: u32,
    secs: u64,
    interval: u64,
    /// Held sessions established (of `held`) and how long opening them took, s.
    established: usize,
    open_s: f64,
    /// (seconds since the churn started, fds, VmRSS KiB, fake-DC live sessions).
    samples: Vec<(f64, u64, u64, usize)>,
    /// Churn sessions: served setup latencies (µs, ascending), failures, start lags (µs, asc).
    setups_us: Vec<u64>,
    churn_failed: usize,
    lags_us: Vec<u64>,
    /// Held sessions' echoes done and failed.
    held_pings: u64,
    held_failed: usize,
    errors: Vec<String>,
    proxy_cpu_s: f64,
    load_before: String,
    load_after: String,
    proxy_alive: bool,
    /// Frozen sessions and routes left suspect or down at the end (`ctl metrics`; target 0).
    frozen: Option<u64>,
    routes_out: Option<u64>,
}

/// Runs the soak.
pub fn run(o: &Opts) -> Result<Soak, String> {
    let need = 3 * o.soak_held as u64 + FD_SPARE;
    if let Some(have) = procfs::nofile() {
        if have < need {
            return Err(format!(
                "soak: open-file soft limit {have} is below the {need} this needs: `ulimit -n \
                 {need}` or more (bench/soak.sh raises it to 8192)"
            ));
        }
    }
    step(&format!(
        "soak: {} held sessions, {} new/s for {} s, samples every {} s",
        o.soak_held, o.soak_rate, o.soak_secs, o.soak_interval
    ));
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ctl = std::env::temp_dir().join(format!("tg-ws-proxy-soak-{}.sock", std::process::id()));
    let _ = std::fs::remove_file(&ctl);
    let args: Vec<String> = vec![
        "--dc-ip".into(),
        format!("2:{}", dc.addr()),
        "--tier-order".into(),
        "ws".into(),
        "--control-socket".into(),
        ctl.display().to_string(),
    ];
    let mut p = ProxyProc::start(&o.proxy, &o.ca, client::SECRET, &args)?;
    let proxy = p.addr();
    let pid = p.pid();

    let t_open = Instant::now();
    let mut clients = client::open_many(proxy, 0, o.soak_held, OPEN_THREADS)
        .map_err(|e| format!("soak: opening the held sessions: {e}"))?;
    let open_s = t_open.elapsed().as_secs_f64();
    let established = clients.len();
    step(&format!(
        "soak: {established} held sessions open in {open_s:.1} s"
    ));

    let stop = Arc::new(AtomicBool::new(false));
    let errors = Arc::new(Mutex::new(Vec::new()));
    let pings = Arc::new(AtomicU64::new(0));
    let note = {
        let errors = errors.clone();
        move |e: String| {
            let mut v = errors.lock().unwrap_or_else(|x| x.into_inner());
            if v.len() < KEEP_ERRORS {
                v.push(e);
            }
        }
    };

    // The holder: each second, one echo on the next slice of held sessions.
    let holder = {
        let stop = stop.clone();
        let pings = pings.clone();
        let note = note.clone();
        let per_tick = clients
            .len()
            .div_ceil(o.soak_interval.max(1) as usize)
            .max(1);
        std::thread::spawn(move || -> usize {
            let mut failed = 0;
            let mut next = 0usize;
            let mut seq = 0u32;
            while !stop.load(Ordering::Relaxed) {
                let tick = Instant::now();
                let mut k = 0;
                while k < per_tick && !clients.is_empty() {
                    next %= clients.len();
                    seq = seq.wrapping_add(1);
                    match client::echo(&mut clients[next], 64, seq) {
                        Ok(()) => {
                            pings.fetch_add(1, Ordering::Relaxed);
                            next += 1;
                        }
                        Err(e) => {
                            failed += 1;
                            note(format!("held session: {e}"));
                            clients.swap_remove(next);
                        }
                    }
                    k += 1;
                }
                let left = Duration::from_secs(1).saturating_sub(tick.elapsed());
                std::thread::sleep(left);
            }
            drop(clients); // the held sessions close when the soak ends
            failed
        })
    };

    // The churn.
    let load_before = procfs::loadavg();
    let cpu0 = p.cpu_split();
    let gap_ns = 1_000_000_000u64 / u64::from(o.soak_rate.max(1));
    let total = o.soak_secs * u64::from(o.soak_rate);
    let t0 = Instant::now() + Duration::from_millis(50);
    let churn: Vec<_> = (0..CHURN_THREADS)
        .map(|t| {
            let stop = stop.clone();
            let note = note.clone();
            std::thread::spawn(move || -> (Vec<u64>, Vec<u64>, usize) {
                let (mut setups, mut lags, mut failed) = (Vec::new(), Vec::new(), 0);
                let Ok(mut rng) = Rng::new() else {
                    note("churn: rng unavailable".into());
                    return (setups, lags, usize::MAX);
                };
                let mut i = t as u64;
                while i < total && !stop.load(Ordering::Relaxed) {
                    let due = t0 + Duration::from_nanos(i * gap_ns);
                    std::thread::sleep(due.saturating_duration_since(Instant::now()));
                    lags.push(due.elapsed().as_micros() as u64);
                    match churn_session(proxy, i, &mut rng) {
                        Ok(us) => setups.push(us),
                        Err(e) => {
                            failed += 1;
                            note(format!("churn session {i}: {e}"));
                        }
                    }
                    i += CHURN_THREADS as u64;
                }
                (setups, lags, failed)
            })
        })
        .collect();

    // The sampler (this thread): t = 0 right as the churn starts, then every interval.
    let mut samples = Vec::new();
    let end = t0 + Duration::from_secs(o.soak_secs);
    let mut k = 0u64;
    loop {
        let at = t0 + Duration::from_secs(k * o.soak_interval);
        if at > end {
            break;
        }
        std::thread::sleep(at.saturating_duration_since(Instant::now()));
        let fds = count_fds(pid);
        let rss = procfs::vm_rss_kib(pid).unwrap_or(0);
        let t = at.saturating_duration_since(t0).as_secs_f64();
        samples.push((t, fds, rss, dc.live_sessions()));
        step(&format!(
            "soak: t={t:.0} s fds={fds} rss={rss} KiB dc-live={} pings={}",
            dc.live_sessions(),
            pings.load(Ordering::Relaxed)
        ));
        if !p.alive() {
            break;
        }
        k += 1;
    }
    let mut setups_us = Vec::new();
    let mut lags_us = Vec::new();
    let mut churn_failed = 0usize;
    for h in churn {
        match h.join() {
            Ok((s, l, f)) => {
                setups_us.extend(s);
                lags_us.extend(l);
                churn_failed = churn_failed.saturating_add(f);
            }
            Err(_) => return Err("soak: churn thread panicked".into()),
        }
    }
    let cpu1 = p.cpu_split();
    let load_after = procfs::loadavg();
    let proxy_alive = p.alive();
    stop.store(true, Ordering::Relaxed);
    let held_failed = holder
        .join()
        .map_err(|_| "soak: holder thread panicked".to_string())?;
    setups_us.sort_unstable();
    lags_us.sort_unstable();
    let (frozen, routes_out) = freeze_facts(&o.proxy, &ctl);
    let _ = std::fs::remove_file(&ctl);
    let tail = p.tail();
    p.stop();
    if !proxy_alive {
        return Err(format!("soak: the proxy exited; log tail:\n{tail}"));
    }
    let ticks = (cpu1.0 + cpu1.1).saturating_sub(cpu0.0 + cpu0.1);
    let errors = errors.lock().unwrap_or_else(|x| x.into_inner()).clone();
    Ok(Soak {
        held: o.soak_held,
        rate: o.soak_rate,
        secs: o.soak_secs,
        interval: o.soak_interval,
        established,
        open_s,
        samples,
        setups_us,
        churn_failed,
        lags_us,
        held_pings: pings.load(Ordering::Relaxed),
        held_failed,
        errors,
        proxy_cpu_s: ticks as f64 / procfs::clk_tck() as f64,
        load_before,
        load_after,
        proxy_alive,
        frozen,
        routes_out,
    })
}

/// From `ctl metrics` at the end of the soak: sessions that froze (every form) and DC 2's routes
/// left suspect or down. Both must be 0: held sessions that ping every `--soak-interval` and churn
/// sessions are exactly the quiet and short sessions the freeze watch must never take for
/// frozen (docs/design.md §4 rule 7). `None` when the metrics could not be read.
fn freeze_facts(bin: &std::path::Path, sock: &std::path::Path) -> (Option<u64>, Option<u64>) {
    let out = std::process::Command::new(bin)
        .args(["ctl", "metrics", "--control-socket"])
        .arg(sock)
        .output();
    let Some(out) = out.ok().filter(|o| o.status.success()) else {
        return (None, None);
    };
    let text = String::from_utf8_lossy(&out.stdout);
    let value = |l: &str| l.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
    let mut frozen = 0u64;
    let mut out_routes = 0u64;
    for l in text.lines() {
        if l.starts_with("tgwsproxy_frozen_sessions_total{") {
            frozen += value(l).unwrap_or(0.0) as u64;
        }
        // The soak's own DC only: the other DCs are mapped to a closed port on purpose.
        let bad = l.contains("state=\"suspect\"") || l.contains("state=\"down\"");
        let ours = l.contains("dc=\"DC2\"");
        if l.starts_with("tgwsproxy_route_state{") && ours && bad && value(l) == Some(1.0) {
            out_routes += 1;
        }
    }
    (Some(frozen), Some(out_routes))
}

/// One churn session: connect from 127.0.1.(1 + i % 250), init, `req_pq_multi` → `resPQ` (the
/// setup latency, µs from the connect call), a 256-byte echo, close.
fn churn_session(proxy: SocketAddr, i: u64, rng: &mut Rng) -> Result<u64, String> {
    let started = Instant::now();
    let src = SocketAddr::from(([127, 0, 1, 1 + (i % 250) as u8], 0));
    let mut c = client::init_from(proxy, src, rng)?;
    client::res_pq(&mut c, rng)?;
    let setup = started.elapsed().as_micros() as u64;
    client::echo(&mut c, 256, i as u32)?;
    Ok(setup)
}

/// Open descriptors of `pid` (entries of `/proc/PID/fd`; 0 if unreadable).
fn count_fds(pid: u32) -> u64 {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map_or(0, |d| d.count() as u64)
}

/// Least-squares slope of `y` over `x`; 0 with fewer than two distinct `x`.
fn slope(points: &[(f64, f64)]) -> f64 {
    let n = points.len() as f64;
    if points.len() < 2 {
        return 0.0;
    }
    let mx = points.iter().map(|p| p.0).sum::<f64>() / n;
    let my = points.iter().map(|p| p.1).sum::<f64>() / n;
    let sxx: f64 = points.iter().map(|p| (p.0 - mx) * (p.0 - mx)).sum();
    let sxy: f64 = points.iter().map(|p| (p.0 - mx) * (p.1 - my)).sum();
    if sxx == 0.0 {
        0.0
    } else {
        sxy / sxx
    }
}

fn ms(us: u64) -> String {
    format!("{:.1} ms", us as f64 / 1000.0)
}

/// The report section.
pub fn report(r: &mut String, s: &Soak) {
    let _ = writeln!(
        r,
        "\n### Soak: {} held sessions + {} new sessions/s for {} s (DC 2, ws tier, fake front on loopback)\n",
        s.held, s.rate, s.secs
    );
    let _ = writeln!(
        r,
        "Proxy at default flags besides the seams (`--dc-ip`/`--tcp-dc-ip` mapping DCs 1-5 and 203 \
         to the closed port 127.0.0.1:9, then `--dc-ip 2:<fake front> --tier-order ws --ca-file \
         tests/data/ca.pem --host 127.0.0.1 --port 0 --stats-interval 0`), its `--max-connections` \
         from the open-file limit. Held sessions: init, `resPQ`, one echo each (established), then \
         one 64-byte echo each about every {} s. Churn: connect, init + `req_pq_multi`, `resPQ` \
         (setup = connect call → decoded `resPQ`), 256-byte echo, close. Samples every {} s from \
         the moment the churn starts.\n",
        s.interval, s.interval
    );
    let _ = writeln!(
        r,
        "- held sessions established: **{}/{}** in {:.1} s; echoes on them during the soak: {}, failed sessions: **{}**",
        s.established, s.held, s.open_s, s.held_pings, s.held_failed
    );
    let served = s.setups_us.len();
    let _ = writeln!(
        r,
        "- churn sessions: **{served} served, {} failed** (of {} scheduled); setup median {}, **p99 {}**, max {}",
        s.churn_failed,
        s.secs * u64::from(s.rate),
        ms(percentile(&s.setups_us, 50)),
        ms(percentile(&s.setups_us, 99)),
        ms(s.setups_us.last().copied().unwrap_or(0))
    );
    let _ = writeln!(
        r,
        "- churn start lag (driver started a session later than scheduled): p99 {}, max {}",
        ms(percentile(&s.lags_us, 99)),
        ms(s.lags_us.last().copied().unwrap_or(0))
    );
    let fd_pts: Vec<(f64, f64)> = s
        .samples
        .iter()
        .map(|x| (x.0 / 3600.0, x.1 as f64))
        .collect();
    let rss_pts: Vec<(f64, f64)> = s
        .samples
        .iter()
        .map(|x| (x.0 / 3600.0, x.2 as f64))
        .collect();
    let minmax = |v: &[(f64, f64)]| {
        let lo = v.iter().map(|p| p.1).fold(f64::INFINITY, f64::min);
        let hi = v.iter().map(|p| p.1).fold(f64::NEG_INFINITY, f64::max);
        (lo, hi)
    };
    let (flo, fhi) = minmax(&fd_pts);
    let (rlo, rhi) = minmax(&rss_pts);
    let _ = writeln!(
        r,
        "- proxy fds: {flo:.0}–{fhi:.0}, least-squares slope **{:+.1} fds/hour**; VmRSS {rlo:.0}–{rhi:.0} KiB, slope **{:+.1} KiB/hour** ({} samples)",
        slope(&fd_pts),
        slope(&rss_pts),
        s.samples.len()
    );
    // The first samples include the start-up steps (the warm pool filling, the allocator's
    // first arenas); the second half shows whether anything still grows.
    let half = s.samples.len() / 2;
    let _ = writeln!(
        r,
        "- over the second half only (t ≥ {:.0} s, {} samples): fds slope **{:+.1} /hour**, VmRSS slope **{:+.1} KiB/hour**",
        s.samples.get(half).map_or(0.0, |x| x.0),
        s.samples.len() - half,
        slope(&fd_pts[half..]),
        slope(&rss_pts[half..])
    );
    let _ = writeln!(
        r,
        "- proxy CPU during the churn {:.1} s; load average {} at the start, {} at the end; proxy alive at the end: {}",
        s.proxy_cpu_s, s.load_before, s.load_after, s.proxy_alive
    );
    let opt = |v: Option<u64>| v.map_or("unknown (ctl metrics failed)".into(), |n| n.to_string());
    let _ = writeln!(
        r,
        "- sessions taken for frozen: **{}**; DC 2 routes left suspect or down: **{}** (both must be 0: \
         the held sessions are idle sessions with pings, docs/design.md §4 rule 7)",
        opt(s.frozen),
        opt(s.routes_out)
    );
    if !s.errors.is_empty() {
        let _ = writeln!(r, "- first failures:");
        for e in &s.errors {
            let _ = writeln!(r, "  - {e}");
        }
    }
    let _ = writeln!(
        r,
        "\n| t (s) | proxy fds | VmRSS (KiB) | fake-DC live sessions |"
    );
    let _ = writeln!(r, "|---:|---:|---:|---:|");
    for (t, fds, rss, live) in &s.samples {
        let _ = writeln!(r, "| {t:.0} | {fds} | {rss} | {live} |");
    }
    let _ = writeln!(r);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slope_of_a_line() {
        let pts = [(0.0, 1.0), (1.0, 3.0), (2.0, 5.0)];
        assert!((slope(&pts) - 2.0).abs() < 1e-9);
        assert_eq!(slope(&[(1.0, 4.0)]), 0.0);
    }
}
