//! "Memory returned" scenario (issue 19 §5, docs/design.md §8: "RSS after a burst of masked or
//! relayed sessions has ended: back within 2 MiB of before, within a minute"). For each build
//! (the release binary, and the static x86_64 musl build when one is there) and each burst kind,
//! a fresh proxy:
//!
//! * **masked**: an `ee` secret with `--mask-host` at this driver's own site
//!   (`bench/slowsite.rs`); `--returned N` slow probers that are not ours (a foreign TLS hello or
//!   an HTTP line) connect, get the site's 16 KiB answer through the proxy, and trickle one byte
//!   a second each for `--returned-hold` seconds, all alive at once; then all leave.
//! * **relayed**: the plain secret on the ws tier against the fake TLS + WS front; N sessions
//!   open (resPQ, echo), each pulls 2 × 256 KiB and echoes 2 × 16 KiB (every buffer it has
//!   grown), all alive at once; then all leave.
//!
//! Before each burst a warm-up of 20 sessions of the same kind comes and goes (one-time
//! allocations: resolver cache, route state, TLS session cache), then 2 s to settle and the
//! pre-burst RSS. The peak is sampled every 5 ms during the burst. "Ended" is when the proxy
//! closed every session (the site or the fake front sees none left besides the warm pool); RSS
//! is then read every `--returned-every` seconds for `--returned-secs` (60). The verdict is the
//! last reading against pre-burst + 2 MiB. Bench code: loopback only, every wait bounded.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use super::fakedc::{DcConfig, FakeDc};
use super::proxy::ProxyProc;
use super::slowsite::{Probers, Site};
use super::{client, procfs, start_proxy_bin, step, wait_for, Opts, POOL_SLACK};

/// The target: RSS back within this of the pre-burst RSS (KiB).
pub const TARGET_KIB: u64 = 2048;
/// Sessions of the warm-up before the pre-burst RSS.
const WARMUP: usize = 20;
/// Bound on every wait for sessions to open or close.
const WAIT: Duration = Duration::from_secs(30);

/// One proxy's burst and what its RSS did.
pub struct Run {
    pub build: String,
    pub bin: PathBuf,
    pub kind: &'static str,
    pub n: usize,
    /// VmRSS (KiB) before the burst (after the warm-up), at the peak, when the burst ended.
    pub pre: u64,
    pub peak: u64,
    /// (seconds after the end, VmRSS KiB, RssAnon KiB), the first at 0.
    pub after: Vec<(u64, u64, u64)>,
    pub pre_anon: u64,
    /// Seconds the burst took, from the first connect to the last session closed.
    pub burst_secs: f64,
    /// Resident KiB by mapping at the last reading, largest first (where what stayed lives).
    pub maps_after: Vec<(String, u64)>,
}

impl Run {
    fn last(&self) -> u64 {
        self.after.last().map_or(0, |a| a.1)
    }

    fn met(&self) -> bool {
        self.last() <= self.pre + TARGET_KIB
    }
}

/// Every build × both kinds; a build that fails is reported in `notes`.
pub fn runs(o: &Opts, musl: Option<PathBuf>, notes: &mut Vec<String>) -> Vec<Run> {
    let mut bins = vec![("glibc (--proxy)".to_string(), o.proxy.clone())];
    if let Some(m) = musl {
        bins.push(("x86_64 musl static".to_string(), m));
    }
    let mut out = Vec::new();
    for (build, bin) in &bins {
        for kind in ["masked", "relayed"] {
            step(&format!(
                "returned: {build}, {} {kind} sessions, then {} s",
                o.returned_n, o.returned_secs
            ));
            let r = if kind == "masked" {
                masked(o, build, bin)
            } else {
                relayed(o, build, bin)
            };
            match r {
                Ok(r) => out.push(r),
                Err(e) => notes.push(format!("{build}, {kind}: not measured ({e})")),
            }
        }
    }
    out
}

/// The masked burst against a fresh proxy.
fn masked(o: &Opts, build: &str, bin: &Path) -> Result<Run, String> {
    let site = Site::start()?;
    let args: Vec<String> = [
        "--mask-host",
        &site.addr().to_string(),
        "--max-connections",
        &(o.returned_n + 100).to_string(),
        // Every DC on a closed port ([`ProxyProc`]); no upstream is ever used.
        "--tier-order",
        "tcp",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let mut p = ProxyProc::start(bin, &o.ca, client::EE_SECRET, &args)?;
    let cycle = |p: &ProxyProc, n: usize, first: usize, hold: u64| {
        let base = site.accepted();
        let mut probers = Probers::open(p.addr(), first, n)?;
        if !wait_for(WAIT, || {
            probers.read_all();
            probers.answered() == probers.len()
        }) {
            return Err(format!(
                "{} of {n} probers got the site's answer; proxy log:\n{}",
                probers.answered(),
                p.tail()
            ));
        }
        if site.accepted() - base != n {
            return Err(format!(
                "the site saw {} of {n} probers",
                site.accepted() - base
            ));
        }
        for _ in 0..hold {
            std::thread::sleep(Duration::from_secs(1));
            probers.trickle();
        }
        if site.live() < n {
            return Err(format!("only {} of {n} masked sessions alive", site.live()));
        }
        drop(probers);
        if !wait_for(WAIT, || site.live() == 0) {
            return Err(format!("{} masked sessions still open", site.live()));
        }
        Ok(())
    };
    cycle(&p, WARMUP, 0, 1)?;
    let (pre, pre_anon) = settle(&p);
    let t0 = Instant::now();
    let (r, peak, _) = p.peak_rss_during(|| cycle(&p, o.returned_n, WARMUP, o.returned_hold));
    r?;
    let burst_secs = t0.elapsed().as_secs_f64();
    let after = sample_after(o, &p);
    let maps_after = procfs::rss_by_mapping(p.pid());
    alive(&mut p)?;
    Ok(Run {
        build: build.to_string(),
        bin: bin.to_path_buf(),
        kind: "masked",
        n: o.returned_n,
        pre,
        peak,
        after,
        pre_anon,
        burst_secs,
        maps_after,
    })
}

/// The relayed burst (ws tier) against a fresh proxy and fake front.
fn relayed(o: &Opts, build: &str, bin: &Path) -> Result<Run, String> {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let mut p = start_proxy_bin(o, bin, &dc, "ws", o.returned_n + 100)?;
    let cycle = |p: &ProxyProc, n: usize, first: usize| -> Result<(), String> {
        let mut clients = client::open_many(p.addr(), first, n, 4)?;
        client::exercise_all(&mut clients, 4)?;
        if dc.live_sessions() < n {
            return Err(format!("only {} of {n} sessions alive", dc.live_sessions()));
        }
        drop(clients);
        if !wait_for(WAIT, || dc.live_sessions() <= POOL_SLACK) {
            return Err(format!("{} sessions still open", dc.live_sessions()));
        }
        Ok(())
    };
    cycle(&p, WARMUP, 0)?;
    let (pre, pre_anon) = settle(&p);
    let t0 = Instant::now();
    let (r, peak, _) = p.peak_rss_during(|| cycle(&p, o.returned_n, WARMUP));
    r?;
    let burst_secs = t0.elapsed().as_secs_f64();
    let after = sample_after(o, &p);
    let maps_after = procfs::rss_by_mapping(p.pid());
    alive(&mut p)?;
    Ok(Run {
        build: build.to_string(),
        bin: bin.to_path_buf(),
        kind: "relayed",
        n: o.returned_n,
        pre,
        peak,
        after,
        pre_anon,
        burst_secs,
        maps_after,
    })
}

/// 2 s to settle, then (VmRSS, RssAnon) KiB.
fn settle(p: &ProxyProc) -> (u64, u64) {
    std::thread::sleep(Duration::from_secs(2));
    (
        p.settled_rss_kib(),
        procfs::rss_anon_kib(p.pid()).unwrap_or(0),
    )
}

/// (seconds, VmRSS, RssAnon) now and every `--returned-every` s up to `--returned-secs`.
fn sample_after(o: &Opts, p: &ProxyProc) -> Vec<(u64, u64, u64)> {
    let start = Instant::now();
    let mut out = Vec::new();
    let mut at = 0;
    loop {
        let wait = Duration::from_secs(at).saturating_sub(start.elapsed());
        std::thread::sleep(wait);
        let anon = procfs::rss_anon_kib(p.pid()).unwrap_or(0);
        out.push((at, p.settled_rss_kib(), anon));
        if at >= o.returned_secs {
            return out;
        }
        at = (at + o.returned_every).min(o.returned_secs);
    }
}

fn alive(p: &mut ProxyProc) -> Result<(), String> {
    if p.alive() {
        Ok(())
    } else {
        Err(format!("proxy exited; log tail:\n{}", p.tail()))
    }
}

/// The report section.
pub fn report(r: &mut String, o: &Opts, runs: &[Run], notes: &[String]) {
    let _ = writeln!(
        r,
        "### Memory returned after a burst (issue 19 §5; VmRSS of the proxy, KiB)\n"
    );
    let _ = writeln!(
        r,
        "{} sessions per burst, all alive at once; RSS read when the proxy had closed every one (\"ended\") and every {} s for {} s. Target: the last reading ≤ pre-burst + {} KiB.\n",
        o.returned_n, o.returned_every, o.returned_secs, TARGET_KIB
    );
    let _ = writeln!(
        r,
        "| build | burst | pre-burst | peak | ended | +{s} s | +{s} s − pre | verdict |\n|---|---|---:|---:|---:|---:|---:|---|",
        s = o.returned_secs
    );
    for x in runs {
        let ended = x.after.first().map_or(0, |a| a.1);
        let _ = writeln!(
            r,
            "| {} | {} × {} | {} | {} | {} | {} | {:+} | {} |",
            x.build,
            x.n,
            x.kind,
            x.pre,
            x.peak,
            ended,
            x.last(),
            x.last() as i64 - x.pre as i64,
            if x.met() { "**met**" } else { "**missed**" }
        );
    }
    r.push('\n');
    for x in runs {
        let series: Vec<String> = x
            .after
            .iter()
            .map(|(s, v, a)| format!("{s}s {v}/{a}"))
            .collect();
        let maps: Vec<String> = (x.maps_after.iter().take(4))
            .map(|(n, k)| format!("{n} {k}"))
            .collect();
        let _ = writeln!(
            r,
            "{}, {} ({}): burst {:.1} s; pre-burst RssAnon {} KiB; after the end, seconds VmRSS/RssAnon: {}; at the last reading by mapping (KiB): {}.\n",
            x.build,
            x.kind,
            x.bin.display(),
            x.burst_secs,
            x.pre_anon,
            series.join(", "),
            maps.join(", ")
        );
    }
    for n in notes {
        let _ = writeln!(r, "{n}\n");
    }
}
