//! `make bench` driver (run by `bench/run.sh`): measures the docs/design.md §8 resource numbers of
//! the real `tg-ws-proxy` binary against the fake Telegram DC, on loopback, in one run, and
//! prints a Markdown report (also written to `--out`).
//!
//! Scenarios, each with a fresh proxy process and fake DC:
//! * memory — idle RSS, then RSS with 100 and 500 relaying sessions (ws tier, then tcp tier),
//!   light traffic and after every session moved enough to fill every buffer it has
//!   (`bench/memory.rs`);
//! * big frames — 100 sessions each receiving 64 KiB packets (control), then 100 fresh ones each
//!   receiving `--bulk-packets` × 1 MiB packets (one WS message each), RSS peak sampled every
//!   5 ms (`bench/frames.rs`);
//! * cpu — ≥ `--gib` GiB relayed on the ws tier and on the tcp tier, download and upload
//!   separately, proxy user/sys CPU from `/proc/PID/stat` and read/write system calls from
//!   `/proc/PID/io`, compared with the bare crypto measured in this process (`bench/cpu.rs`);
//! * callgrind — the proxy under `valgrind --tool=callgrind` for `--cg-mib` MiB each way on each
//!   tier: instructions per relayed byte next to the baseline crypto's (`bench/callgrind.rs`);
//!   `--cg-ee` adds each tier with an ee (fake-TLS) secret, `--cg-handshakes N` the Ir per
//!   session of N sessions opened and closed (plain, and ee with `--cg-ee`); `--cg-ee` also
//!   adds ee to the strace transfers of `cpu`, which `--only strace` runs without the timed runs;
//! * direct — issue 21's cheap relay end to end: on the tcp and the ws tier, a proxy client
//!   with the secret (`reencrypt`), a SOCKS5 direct client (`passthrough`) and a SOCKS5 plain
//!   abridged one (`plain`), each relaying `--gib` GiB over `--streams` sessions (proxy CPU
//!   s/GiB) and `--cg-mib` MiB each way under callgrind (Ir per byte), with ratios to the proxy
//!   client; the session records' `relay_mode` is checked per row (`bench/direct.rs`);
//! * ee-idle — only when named (`--only ee-idle`): idle RSS with the plain and the ee secret,
//!   and after `--ee-idle-n` sessions opened and closed (`bench/memory.rs`);
//! * size — the release binary, and musl cross builds if `make cross-test` left any;
//! * burst — `--burst` (default 500@100,1000@200): N new sessions arriving at R per second for
//!   DC 2 over the ws tier, through a proxy at default flags, against a fake front that answers
//!   each upgrade at once or `--burst-front-ms` later (default 0,50); served / closed and setup
//!   median, p99, max (`bench/burst.rs`); `--burst-ref` adds a `--handshake-pace 0` run of each;
//! * returned — issue 19 §5: a burst of `--returned` (600) slow masked probers, then one of as
//!   many relayed sessions (ws tier), each against a fresh proxy; RSS before, at the peak, and
//!   every `--returned-every` s for `--returned-secs` after the burst ended, for the release
//!   binary and the static musl build (`bench/returned.rs`, `bench/slowsite.rs`);
//! * soak — only when named (`--only soak`, `bench/soak.sh`): `--soak-held` held sessions and
//!   `--soak-rate` new ones per second for `--soak-secs`, proxy fds and RSS every
//!   `--soak-interval` seconds with their slope, churn setup p50/p99/max (`bench/soak.rs`).
//!
//! The baselines must be built at `opt-level = 3` (`bench/run.sh` builds this driver so, in its
//! own target dir); built otherwise, the report shows the CPU targets as not judged.
//! `--ir-baseline ctr|tls:BYTES` runs one baseline and exits (what the callgrind scenario runs
//! under valgrind).
//!
//! Bench code: it never edits the proxy, binds only 127.0.0.0/8, and every loop is bounded
//! (socket timeouts, deadlines). Setup failures end the run with a message, not a panic.

#[path = "../tests/common/fakedc.rs"]
mod fakedc;
// The rig's packet session: plain (unobfuscated) and secretless clients for `direct`.
#[allow(dead_code)]
#[path = "../tests/common/mtsession.rs"]
mod mtsession;

#[path = "bench/burst.rs"]
mod burst;
#[path = "bench/callgrind.rs"]
mod callgrind;
#[path = "bench/client.rs"]
mod client;
#[path = "bench/cpu.rs"]
mod cpu;
#[path = "bench/crypto.rs"]
mod crypto;
#[path = "bench/direct.rs"]
mod direct;
#[path = "bench/frames.rs"]
mod frames;
#[path = "bench/memory.rs"]
mod memory;
#[path = "bench/procfs.rs"]
mod procfs;
#[path = "bench/proxy.rs"]
mod proxy;
#[path = "bench/returned.rs"]
mod returned;
#[path = "bench/slowsite.rs"]
mod slowsite;
#[path = "bench/soak.rs"]
mod soak;

use std::fmt::Write as _;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use fakedc::{DcConfig, FakeDc};
use proxy::ProxyProc;

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
/// Where `make cross-test` leaves its builds (`TARGET/release/tg-ws-proxy`); `BENCH_CROSS_DIR`
/// overrides it.
fn cross_dir() -> PathBuf {
    std::env::var_os("BENCH_CROSS_DIR").map_or_else(
        || PathBuf::from("/var/tmp/tg-ws-proxy-cross"),
        PathBuf::from,
    )
}

struct Opts {
    proxy: PathBuf,
    ca: PathBuf,
    out: Option<PathBuf>,
    small: usize,
    large: usize,
    bulk_sessions: usize,
    bulk_packets: u32,
    gib: f64,
    streams: usize,
    reps: usize,
    /// Bursts to run (`--burst 500@100,1000@200`).
    bursts: Vec<burst::Spec>,
    /// Fake-front upgrade delays to run every burst against (`--burst-front-ms 0,50`), ms.
    burst_front_ms: Vec<u64>,
    /// Also run each burst with `--handshake-pace 0` (`--burst-ref`).
    burst_ref: bool,
    /// Where the burst runs' proxy logs go (`--burst-logs DIR`); none = not written.
    burst_logs: Option<PathBuf>,
    /// MiB per direction and tier of the `strace -c` transfers (`--strace-mib`, default 256).
    strace_mib: f64,
    /// MiB per direction and tier in the callgrind scenario (`--cg-mib`, default 32).
    cg_mib: f64,
    /// Callgrind and the strace transfers also with the ee (fake-TLS) secret, and plain read
    /// through MtClient as its reference (`--cg-ee`); also the ee rows of `--cg-handshakes`.
    cg_ee: bool,
    /// Callgrind: also this many sessions opened and closed one after another, Ir per session
    /// (`--cg-handshakes N`, default 0 = not run).
    cg_handshakes: usize,
    /// `ee-idle` (only when named): ee sessions opened and closed before the last RSS read
    /// (`--ee-idle-n`, default 1000).
    ee_idle_n: usize,
    /// `--ir-baseline ctr|tls:BYTES`: run one baseline and exit.
    ir_baseline: Option<String>,
    /// Soak (`--only soak`): held sessions, new sessions per second, seconds, sample interval
    /// in seconds (`--soak-held 1000 --soak-rate 20 --soak-secs 1800 --soak-interval 30`).
    soak_held: usize,
    soak_rate: u32,
    soak_secs: u64,
    soak_interval: u64,
    /// Memory returned (issue 19 §5): sessions per burst, seconds sampled after it, the
    /// sampling interval, and how long the masked probers trickle while all are alive
    /// (`--returned 600 --returned-secs 60 --returned-every 5 --returned-hold 5`).
    returned_n: usize,
    returned_secs: u64,
    returned_every: u64,
    returned_hold: u64,
    /// Scenarios to run (`--only memory,frames,cpu,callgrind,direct,size,burst,returned,soak`); empty = all
    /// but the soak, which runs only when named.
    only: Vec<String>,
}

impl Opts {
    fn only(&self, what: &str) -> bool {
        (self.only.is_empty() && what != "soak" && what != "ee-idle")
            || self.only.iter().any(|w| w == what)
    }
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
        small: a.opt_value_from_str("--small").map_err(e)?.unwrap_or(100),
        large: a.opt_value_from_str("--large").map_err(e)?.unwrap_or(500),
        bulk_sessions: a
            .opt_value_from_str("--bulk-sessions")
            .map_err(e)?
            .unwrap_or(100),
        bulk_packets: a
            .opt_value_from_str("--bulk-packets")
            .map_err(e)?
            .unwrap_or(16),
        gib: a.opt_value_from_str("--gib").map_err(e)?.unwrap_or(1.0),
        streams: a.opt_value_from_str("--streams").map_err(e)?.unwrap_or(4),
        reps: a.opt_value_from_str("--reps").map_err(e)?.unwrap_or(2),
        bursts: a
            .opt_value_from_str::<_, String>("--burst")
            .map_err(e)?
            .unwrap_or_else(|| "500@100,1000@200".into())
            .split(',')
            .map(burst::Spec::parse)
            .collect::<Result<_, _>>()?,
        burst_front_ms: a
            .opt_value_from_str::<_, String>("--burst-front-ms")
            .map_err(e)?
            .unwrap_or_else(|| "0,50".into())
            .split(',')
            .map(|v| {
                v.trim()
                    .parse()
                    .map_err(|_| format!("--burst-front-ms: bad number {v:?}"))
            })
            .collect::<Result<_, _>>()?,
        burst_ref: a.contains("--burst-ref"),
        burst_logs: a.opt_value_from_str("--burst-logs").map_err(e)?,
        strace_mib: a
            .opt_value_from_str("--strace-mib")
            .map_err(e)?
            .unwrap_or(256.0),
        cg_mib: a.opt_value_from_str("--cg-mib").map_err(e)?.unwrap_or(32.0),
        cg_ee: a.contains("--cg-ee"),
        cg_handshakes: a
            .opt_value_from_str("--cg-handshakes")
            .map_err(e)?
            .unwrap_or(0),
        ee_idle_n: a
            .opt_value_from_str("--ee-idle-n")
            .map_err(e)?
            .unwrap_or(1000),
        ir_baseline: a.opt_value_from_str("--ir-baseline").map_err(e)?,
        soak_held: a
            .opt_value_from_str("--soak-held")
            .map_err(e)?
            .unwrap_or(1000),
        soak_rate: a
            .opt_value_from_str("--soak-rate")
            .map_err(e)?
            .unwrap_or(20),
        soak_secs: a
            .opt_value_from_str("--soak-secs")
            .map_err(e)?
            .unwrap_or(1800),
        soak_interval: a
            .opt_value_from_str("--soak-interval")
            .map_err(e)?
            .unwrap_or(30),
        returned_n: a
            .opt_value_from_str("--returned")
            .map_err(e)?
            .unwrap_or(600),
        returned_secs: a
            .opt_value_from_str("--returned-secs")
            .map_err(e)?
            .unwrap_or(60),
        returned_every: a
            .opt_value_from_str("--returned-every")
            .map_err(e)?
            .unwrap_or(5),
        returned_hold: a
            .opt_value_from_str("--returned-hold")
            .map_err(e)?
            .unwrap_or(5),
        only: a
            .opt_value_from_str::<_, String>("--only")
            .map_err(e)?
            .map(|s| s.split(',').map(|w| w.trim().to_string()).collect())
            .unwrap_or_default(),
    };
    let rest = a.finish();
    if !rest.is_empty() {
        return Err(format!("unknown arguments {rest:?}"));
    }
    if o.large < o.small
        || o.small == 0
        || o.streams == 0
        || o.reps == 0
        || o.bulk_sessions == 0
        || o.gib <= 0.0
        || o.cg_mib <= 0.0
        || o.strace_mib <= 0.0
        || o.soak_held == 0
        || o.soak_rate == 0
        || o.soak_secs == 0
        || o.soak_interval == 0
        || o.returned_n == 0
        || o.returned_every == 0
    {
        return Err(
            "need 0 < --small ≤ --large, --streams > 0, --reps > 0, --bulk-sessions > 0, --gib > 0, --cg-mib > 0, --strace-mib > 0, --soak-held/-rate/-secs/-interval > 0, --returned > 0, --returned-every > 0"
                .into(),
        );
    }
    Ok(o)
}

fn main() {
    let opts = match parse_opts() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench: {e}");
            std::process::exit(2);
        }
    };
    if let Some(spec) = &opts.ir_baseline {
        if let Err(e) = callgrind::baseline_main(spec, &opts.ca) {
            eprintln!("bench: --ir-baseline: {e}");
            std::process::exit(1);
        }
        return;
    }
    match run(&opts) {
        Ok(report) => {
            print!("{report}");
            if let Some(out) = &opts.out {
                if let Err(e) = std::fs::write(out, &report) {
                    eprintln!("bench: write {}: {e}", out.display());
                    std::process::exit(1);
                }
            }
        }
        Err(e) => {
            eprintln!("bench: FAILED: {e}");
            std::process::exit(1);
        }
    }
}

fn step(what: &str) {
    eprintln!("bench: {what}");
}

/// Starts the release proxy against `dc` on `tier` ("ws" or "tcp").
fn start_proxy(o: &Opts, dc: &FakeDc, tier: &str, max: usize) -> Result<ProxyProc, String> {
    start_proxy_bin(o, &o.proxy, dc, tier, max)
}

/// Starts the proxy binary `bin` against `dc` on `tier`.
fn start_proxy_bin(
    o: &Opts,
    bin: &std::path::Path,
    dc: &FakeDc,
    tier: &str,
    max: usize,
) -> Result<ProxyProc, String> {
    let args = tier_args(dc, tier, max, &[]);
    ProxyProc::start(bin, &o.ca, client::SECRET, &args)
}

/// A fake DC for `tier`: TLS + WebSocket for `ws`, plain TCP otherwise.
fn tier_dc(tier: &str) -> FakeDc {
    if tier == "ws" {
        FakeDc::start_tls_ws(DcConfig::default())
    } else {
        FakeDc::start_tcp(DcConfig::default())
    }
}

/// The proxy's arguments for `dc` on `tier` (`ws` or `tcp`) with at most `max` clients, then
/// `extra`.
fn tier_args(dc: &FakeDc, tier: &str, max: usize, extra: &[&str]) -> Vec<String> {
    let dc_flag = if tier == "ws" {
        "--dc-ip"
    } else {
        "--tcp-dc-ip"
    };
    let mut args: Vec<String> = [
        dc_flag,
        &format!("2:{}", dc.addr()),
        "--tier-order",
        tier,
        "--max-connections",
        &max.to_string(),
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    args.extend(extra.iter().map(|s| s.to_string()));
    args
}

/// The `strace -c` transfers and their report section (part of `cpu`, or `--only strace`).
fn strace_section(r: &mut String, o: &Opts) {
    match cpu::strace_runs(o) {
        Ok(calls) => cpu::report_calls(r, o, &calls),
        Err(e) => {
            let _ = writeln!(r, "System calls under strace: FAILED: {e}\n");
        }
    }
}

/// Waits until `cond` holds or `timeout` passes (polling every 10 ms).
fn wait_for(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let end = Instant::now() + timeout;
    while Instant::now() < end {
        if cond() {
            return true;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    cond()
}

/// Warm upstreams a ws route's pool may hold open at the fake DC besides the clients' sessions:
/// the default `--pool-size` (4).
pub const POOL_SLACK: usize = 4;

fn check_live(p: &mut ProxyProc, dc: &FakeDc, want: usize, what: &str) -> Result<(), String> {
    if !p.alive() {
        return Err(format!("{what}: proxy exited; log tail:\n{}", p.tail()));
    }
    // A ws route keeps up to --pool-size (default 4) warm
    // upstreams open at the fake DC besides the clients' sessions.
    if !wait_for(Duration::from_secs(5), || {
        (want..=want + POOL_SLACK).contains(&dc.live_sessions())
    }) {
        return Err(format!(
            "{what}: fake DC has {} live sessions, expected {want}",
            dc.live_sessions()
        ));
    }
    Ok(())
}

fn run(o: &Opts) -> Result<String, String> {
    let started = Instant::now();
    if !o.proxy.is_file() {
        return Err(format!(
            "{} not found (cargo build --release first)",
            o.proxy.display()
        ));
    }
    let mut r = String::new();
    machine(&mut r, o);
    if o.only("memory") {
        let mut mems = vec![
            memory::run(o, &o.proxy, "ws", "ws")?,
            memory::run(o, &o.proxy, "tcp", "tcp")?,
        ];
        let mut notes = Vec::new();
        // A static x86_64 musl build left by `make cross-test`: the shipping libc and malloc.
        let mut musl = Vec::new();
        find_named(
            &cross_dir().join("x86_64-unknown-linux-musl"),
            "tg-ws-proxy",
            3,
            &mut musl,
        );
        if let Some(bin) = musl.first() {
            match memory::run(o, bin, "ws", "ws, x86_64 musl static") {
                Ok(m) => mems.push(m),
                Err(e) => notes.push(format!("{}: not measured ({e})", bin.display())),
            }
        }
        memory::report(&mut r, o, &mems);
        for n in notes {
            let _ = writeln!(r, "{n}\n");
        }
    }
    if o.only("frames") {
        let b = frames::run(o)?;
        frames::report(&mut r, o, &b);
    }
    if o.only("cpu") {
        let runs = cpu::runs(o)?;
        cpu::report(&mut r, o, &runs);
        strace_section(&mut r, o);
    } else if o.only.iter().any(|w| w == "strace") {
        // `--only strace`: the strace transfers without the timed CPU runs.
        strace_section(&mut r, o);
    }
    if o.only("callgrind") {
        if callgrind::available() {
            match callgrind::run(o) {
                Ok(ir) => callgrind::report(&mut r, o, &ir),
                Err(e) => {
                    let _ = writeln!(r, "### Instructions per relayed byte\n\nFAILED: {e}\n");
                }
            }
        } else {
            let _ = writeln!(
                r,
                "### Instructions per relayed byte\n\nvalgrind not found: not measured.\n"
            );
        }
    }
    if o.only("direct") {
        let rows = direct::run(o)?;
        direct::report(&mut r, o, &rows);
    }
    if o.only("ee-idle") {
        let mut notes = Vec::new();
        let mut rows = memory::ee_idle(o, &o.proxy, "glibc (--proxy)", &mut notes);
        let musl = cross_dir().join("x86_64-unknown-linux-musl/release/tg-ws-proxy");
        if musl.is_file() {
            rows.extend(memory::ee_idle(o, &musl, "x86_64 musl static", &mut notes));
        }
        memory::report_ee_idle(&mut r, &rows, &notes);
    }
    if o.only("size") {
        sizes(&mut r, o);
    }
    if o.only("burst") {
        let runs = burst::runs(o)?;
        burst::report(&mut r, &runs);
    }
    if o.only("returned") {
        let musl = cross_dir().join("x86_64-unknown-linux-musl/release/tg-ws-proxy");
        let mut notes = Vec::new();
        let runs = returned::runs(o, musl.is_file().then_some(musl), &mut notes);
        returned::report(&mut r, o, &runs, &notes);
    }
    if o.only("soak") {
        let s = soak::run(o)?;
        soak::report(&mut r, &s);
    }
    let _ = writeln!(
        r,
        "\nTotal bench time: {:.0} s.",
        started.elapsed().as_secs_f64()
    );
    Ok(r)
}

fn kib_per(delta_kib: u64, base: u64, n: usize) -> f64 {
    delta_kib.saturating_sub(base) as f64 / n as f64
}

/// The machine section.
fn machine(r: &mut String, o: &Opts) {
    let _ = writeln!(r, "### Machine\n");
    let _ = writeln!(
        r,
        "- CPU: {} × {} (aes: {}, vaes: {})",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        procfs::cpu_model(),
        procfs::cpu_flag("aes"),
        procfs::cpu_flag("vaes")
    );
    let _ = writeln!(
        r,
        "- kernel {}, CLK_TCK {}, bench RLIMIT_NOFILE {}",
        procfs::kernel(),
        procfs::clk_tck(),
        procfs::nofile().map_or("?".into(), |n| n.to_string())
    );
    let _ = writeln!(r, "- proxy binary: {}\n", o.proxy.display());
}

/// Binary sizes: the release build, and any cross builds left by `make cross-test`.
fn sizes(r: &mut String, o: &Opts) {
    let _ = writeln!(r, "\n### Binary size\n");
    let _ = writeln!(r, "| binary | bytes | MiB | file |");
    let _ = writeln!(r, "|---|---:|---:|---|");
    let mut bins = vec![o.proxy.clone()];
    let cross = cross_dir();
    find_named(&cross, "tg-ws-proxy", 5, &mut bins);
    for b in bins {
        let Ok(md) = std::fs::metadata(&b) else {
            continue;
        };
        let file = std::process::Command::new("file")
            .arg("-b")
            .arg(&b)
            .output()
            .ok()
            .map(|o| String::from_utf8_lossy(&o.stdout).trim().replace('|', "/"))
            .unwrap_or_else(|| "?".into());
        let _ = writeln!(
            r,
            "| {} | {} | {:.2} | {} |",
            b.display(),
            md.len(),
            md.len() as f64 / MIB,
            file
        );
    }
    if !cross.is_dir() {
        let _ = writeln!(
            r,
            "\n({} absent: no musl cross builds to list.)",
            cross.display()
        );
    }
    let musl = cross.join("x86_64-unknown-linux-musl/release/tg-ws-proxy");
    match std::fs::metadata(&musl) {
        Ok(md) => {
            let _ = writeln!(
                r,
                "\nTarget (issue 7): stripped static x86_64 musl binary ≤ 1.9 MiB ({SIZE_TARGET} B): {} B, {}.",
                md.len(),
                if md.len() <= SIZE_TARGET { "**met**" } else { "**missed**" }
            );
        }
        Err(_) => {
            let _ = writeln!(
                r,
                "\nTarget (issue 7): stripped static x86_64 musl binary ≤ 1.9 MiB: not judged, {} missing.",
                musl.display()
            );
        }
    }
}

/// Stripped static x86_64 musl binary target, bytes (1.9 MiB).
const SIZE_TARGET: u64 = 1_992_294;

fn find_named(dir: &std::path::Path, name: &str, depth: u32, out: &mut Vec<PathBuf>) {
    let Ok(rd) = std::fs::read_dir(dir) else {
        return;
    };
    let mut entries: Vec<_> = rd.flatten().map(|e| e.path()).collect();
    entries.sort();
    for p in entries {
        if p.is_dir() && depth > 0 {
            find_named(&p, name, depth - 1, out);
        } else if p.file_name().is_some_and(|f| f == name) && p.is_file() {
            out.push(p);
        }
    }
}
