//! Throughput and CPU scenario (docs/design.md §8 "CPU per GiB relayed", issue 7 "Targets"):
//! `--streams` sessions move ≥ `--gib` GiB through the proxy on the ws tier (TLS + WebSocket
//! toward the fake DC) and on the tcp tier (raw obfuscated2), downstream and upstream in separate
//! transfers (download: one `BULK` request for 1 MiB packets; upload: 1 MiB `SINK` packets the DC
//! drops, then one echo). Over each transfer it reads the proxy's user and system CPU
//! (`/proc/PID/stat`) and its read/write system calls (`/proc/PID/io` `syscr`/`syscw`), and
//! compares the CPU with the bare crypto for the same byte count (`bench/crypto.rs`), measured in
//! this process right before and right after the transfer (half the bytes each) so machine noise
//! hits both sides of the ratio alike.
//!
//! `/proc/PID/io` counts only read/readv/write/writev-like calls, not recv/send: a separate
//! transfer per tier and direction (`--strace-mib` MiB, not timed) runs with `strace -c` attached
//! to the proxy and counts every socket read and write call and `epoll_wait`. Bench code; results
//! go into the report only.

use std::fmt::Write as _;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use tg_ws_proxy::applet::probe::MtClient;

use super::fakedc::FakeDc;
use super::{
    check_live, client, crypto, procfs, start_proxy, step, tier_args, tier_dc, Opts, ProxyProc,
    GIB, MIB,
};

/// Packet size of both directions (one WS message each on the ws tier).
pub const PACKET: usize = 1 << 20;
/// The targets: proxy CPU ≤ this × the baseline (ws: 2×CTR + one TLS pass; tcp: 2×CTR).
pub const TARGET_RATIO: f64 = 1.3;

/// Which way the payload flows.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Dir {
    /// DC → client (`BULK` replies).
    Down,
    /// Client → DC (`SINK` packets).
    Up,
}

impl Dir {
    pub fn name(self) -> &'static str {
        match self {
            Dir::Down => "download",
            Dir::Up => "upload",
        }
    }
}

/// One transfer on one tier in one direction and its adjacent baselines.
pub struct CpuRun {
    pub rep: usize,
    pub tier: &'static str,
    pub dir: Dir,
    pub up: u64,
    pub down: u64,
    pub secs: f64,
    /// Proxy CPU over the transfer, clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Proxy CPU over the transfer from schedstat, ns (cross-check of the tick counts).
    pub sched_ns: u64,
    /// Proxy read-like / write-like system calls over the transfer (`/proc/PID/io`).
    pub syscr: u64,
    pub syscw: u64,
    /// 2 × AES-256-CTR over the relayed byte count (half before, half after the transfer).
    pub ctr: crypto::Cost,
    /// ws only: one TLS pass over the relayed byte count (½ of write + read), and the suite.
    pub tls: Option<(crypto::Cost, String)>,
}

impl CpuRun {
    pub fn bytes(&self) -> u64 {
        self.up + self.down
    }
    pub fn gib(&self) -> f64 {
        self.bytes() as f64 / GIB
    }
    fn secs_of(ticks: u64) -> f64 {
        ticks as f64 / procfs::clk_tck() as f64
    }
    pub fn user_s(&self) -> f64 {
        Self::secs_of(self.utime)
    }
    pub fn sys_s(&self) -> f64 {
        Self::secs_of(self.stime)
    }
    pub fn cpu_s(&self) -> f64 {
        Self::secs_of(self.utime + self.stime)
    }
    pub fn ctr_s(&self) -> f64 {
        self.ctr.cpu_ns as f64 / 1e9
    }
    pub fn tls_s(&self) -> f64 {
        self.tls
            .as_ref()
            .map_or(0.0, |(c, _)| c.cpu_ns as f64 / 2e9)
    }
    /// The target's baseline: 2×CTR, plus one TLS pass on the ws tier.
    pub fn base_s(&self) -> f64 {
        self.ctr_s() + self.tls_s()
    }
}

/// Per-stream packets of [`PACKET`] bytes: together ≥ `--gib` GiB over all streams.
pub fn per_stream_packets(gib: f64, streams: usize) -> u32 {
    ((gib * 1024.0 / streams as f64).ceil() as u32).max(1)
}

/// Client-side wire bytes (up, down) one stream moves: intermediate transport, 4-byte length
/// headers; download = `BULK` request (16 B) + replies; upload = packets + an 8-byte echo back.
pub fn planned(dir: Dir, packets: u32) -> (u64, u64) {
    let bulk = packets as u64 * (4 + PACKET as u64);
    match dir {
        Dir::Down => (4 + 16, bulk),
        Dir::Up => (bulk + 4 + 8, 4 + 8),
    }
}

/// `reps` × (ws, tcp) × (download, upload) transfers, each between two half baselines.
pub fn runs(o: &Opts) -> Result<Vec<CpuRun>, String> {
    let packets = per_stream_packets(o.gib, o.streams);
    let mut out = Vec::new();
    for rep in 1..=o.reps {
        for tier in ["ws", "tcp"] {
            for dir in [Dir::Down, Dir::Up] {
                let (pu, pd) = planned(dir, packets);
                let bytes = (pu + pd) * o.streams as u64;
                let before = crypto::ctr_two_pass(bytes / 2);
                let mut run = transfer(o, tier, dir, packets, rep)?;
                let after = crypto::ctr_two_pass(bytes - bytes / 2);
                run.ctr = crypto::Cost {
                    cpu_ns: before.cpu_ns + after.cpu_ns,
                    wall_ns: before.wall_ns + after.wall_ns,
                };
                if tier == "ws" {
                    run.tls = Some(crypto::tls_round(bytes, &o.ca)?);
                }
                if run.bytes() != bytes {
                    return Err(format!(
                        "{tier} {}: moved {} bytes, planned {bytes}",
                        dir.name(),
                        run.bytes()
                    ));
                }
                out.push(run);
            }
        }
    }
    Ok(out)
}

/// Runs `dir`'s transfer of `packets` packets on one session within `limit`; the session is
/// consumed.
pub fn move_one(
    mut c: tg_ws_proxy::applet::probe::MtClient,
    dir: Dir,
    packets: u32,
    limit: Duration,
) -> Result<client::Moved, String> {
    match dir {
        Dir::Down => client::transfer_within(c, (packets, PACKET), (0, 0), limit),
        Dir::Up => client::upload(&mut c, packets, PACKET, limit),
    }
}

/// [`move_one`] for a session of `kind` (`"plain"`, `"plain, MtClient"`, `"ee"`, see
/// `callgrind::IrRun::kind`): downloads other than plain's go through [`client::download`]
/// (`MtClient` unwraps the ee records).
pub fn move_kind(
    mut c: tg_ws_proxy::applet::probe::MtClient,
    kind: &str,
    dir: Dir,
    packets: u32,
    limit: Duration,
) -> Result<client::Moved, String> {
    match (kind, dir) {
        ("plain", _) | (_, Dir::Up) => move_one(c, dir, packets, limit),
        _ => client::download(&mut c, packets, PACKET, limit),
    }
}

/// The session kinds of the callgrind and strace scenarios: plain, and with `--cg-ee` also
/// plain read through `MtClient` and ee.
pub fn kinds(o: &Opts) -> &'static [&'static str] {
    if o.cg_ee {
        &["plain", "plain, MtClient", "ee"]
    } else {
        &["plain"]
    }
}

/// One transfer on `tier` with a fresh fake DC and proxy; CPU and system calls over the
/// transfer only.
fn transfer(
    o: &Opts,
    tier: &'static str,
    dir: Dir,
    packets: u32,
    rep: usize,
) -> Result<CpuRun, String> {
    step(&format!(
        "throughput run {rep} ({tier} tier, {}): {} streams × {packets} × 1 MiB",
        dir.name(),
        o.streams
    ));
    let (_dc, p, clients) = open_streams(o, tier)?; // the fake DC lives to the end of the run
    let (u0, s0) = p.cpu_split();
    let n0 = p.cpu().1;
    let (r0, w0) = procfs::io_syscalls(p.pid()).unwrap_or((0, 0));
    let t0 = Instant::now();
    let hs: Vec<_> = clients
        .into_iter()
        .map(|c| std::thread::spawn(move || move_one(c, dir, packets, client::BULK_TIMEOUT)))
        .collect();
    let moved = client::join_moved(hs);
    let secs = t0.elapsed().as_secs_f64();
    let (u1, s1) = p.cpu_split();
    let n1 = p.cpu().1;
    let (r1, w1) = procfs::io_syscalls(p.pid()).unwrap_or((0, 0));
    let moved = moved.map_err(|e| {
        format!(
            "throughput {tier} {}: {e}; proxy log tail:\n{}",
            dir.name(),
            p.tail()
        )
    })?;
    Ok(CpuRun {
        rep,
        tier,
        dir,
        up: moved.up,
        down: moved.down,
        secs,
        utime: u1.saturating_sub(u0),
        stime: s1.saturating_sub(s0),
        sched_ns: n1.saturating_sub(n0),
        syscr: r1.saturating_sub(r0),
        syscw: w1.saturating_sub(w0),
        ctr: crypto::Cost::default(),
        tls: None,
    })
}

/// System calls of one `strace -c` transfer.
pub struct Calls {
    pub tier: &'static str,
    /// Session kind, see [`kinds`].
    pub kind: &'static str,
    pub dir: Dir,
    pub bytes: u64,
    /// read, readv, recvfrom, recvmsg, recvmmsg.
    pub reads: u64,
    /// write, writev, sendto, sendmsg, sendmmsg.
    pub writes: u64,
    pub epoll_waits: u64,
    /// Every call strace counted.
    pub all: u64,
}

/// One untimed transfer per tier and direction with `strace -c` on the proxy; empty (and a
/// note) when strace is missing or cannot attach.
pub fn strace_runs(o: &Opts) -> Result<Vec<Calls>, String> {
    if !Command::new("strace")
        .arg("-V")
        .stdout(Stdio::null())
        .status()
        .is_ok_and(|s| s.success())
    {
        return Ok(Vec::new());
    }
    let packets = per_stream_packets(o.strace_mib / 1024.0, o.streams);
    let dir_out = std::path::PathBuf::from("target/bench/strace");
    std::fs::create_dir_all(&dir_out).map_err(|e| format!("mkdir: {e}"))?;
    let mut out = Vec::new();
    for tier in ["ws", "tcp"] {
        for (kind, dir) in kinds(o)
            .iter()
            .flat_map(|&k| [(k, Dir::Down), (k, Dir::Up)])
        {
            if kind == "plain, MtClient" && dir == Dir::Up {
                continue; // the upload already goes through MtClient in "plain"
            }
            step(&format!(
                "system calls under strace ({tier} tier, {kind}, {}): {} streams × {packets} × 1 MiB",
                dir.name(),
                o.streams
            ));
            let (_dc, p, clients) = open_streams_kind(o, tier, kind)?; // the fake DC lives to the end of the run
            let tag = if kind == "plain" {
                String::new()
            } else {
                format!("-{}", kind.replace(", ", "-"))
            };
            let file = dir_out.join(format!("{tier}{tag}-{}.txt", dir.name()));
            let _ = std::fs::remove_file(&file);
            let mut st = Command::new("strace")
                .arg("-c")
                .arg("-o")
                .arg(&file)
                .arg("-p")
                .arg(p.pid().to_string())
                .stdin(Stdio::null())
                .stdout(Stdio::null())
                .stderr(Stdio::piped())
                .spawn()
                .map_err(|e| format!("strace: {e}"))?;
            // strace prints "Process PID attached" once it is; wait for that line.
            let attached = st.stderr.take().map(|e| {
                let (tx, rx) = std::sync::mpsc::channel();
                std::thread::spawn(move || {
                    use std::io::BufRead;
                    for l in std::io::BufReader::new(e).lines().map_while(Result::ok) {
                        if l.contains("attached") {
                            let _ = tx.send(());
                        }
                    }
                });
                rx.recv_timeout(Duration::from_secs(10)).is_ok()
            });
            if attached != Some(true) {
                let _ = st.kill();
                let _ = st.wait();
                return Err(format!("strace did not attach to the proxy ({tier})"));
            }
            let hs: Vec<_> = clients
                .into_iter()
                .map(|c| {
                    std::thread::spawn(move || {
                        move_kind(c, kind, dir, packets, client::BULK_TIMEOUT)
                    })
                })
                .collect();
            let mut bytes = 0;
            let mut err = None;
            for h in hs {
                match h.join() {
                    Ok(Ok(m)) => bytes += m.up + m.down,
                    Ok(Err(e)) => err = Some(e),
                    Err(_) => err = Some("transfer thread panicked".into()),
                }
            }
            let _ = Command::new("kill")
                .arg("-INT")
                .arg(st.id().to_string())
                .status();
            let _ = st.wait();
            if let Some(e) = err {
                return Err(format!("strace run {tier} {}: {e}", dir.name()));
            }
            let text = std::fs::read_to_string(&file)
                .map_err(|e| format!("read {}: {e}", file.display()))?;
            let calls = parse_strace(&text);
            let sum = |names: &[&str]| -> u64 {
                calls
                    .iter()
                    .filter(|(n, _)| names.contains(&n.as_str()))
                    .map(|(_, c)| c)
                    .sum()
            };
            out.push(Calls {
                tier,
                kind,
                dir,
                bytes,
                reads: sum(&["read", "readv", "recvfrom", "recvmsg", "recvmmsg"]),
                writes: sum(&["write", "writev", "sendto", "sendmsg", "sendmmsg"]),
                epoll_waits: sum(&["epoll_wait", "epoll_pwait", "epoll_pwait2"]),
                all: calls.iter().map(|(_, c)| c).sum(),
            });
        }
    }
    Ok(out)
}

/// (syscall, calls) rows of a `strace -c` summary table.
fn parse_strace(text: &str) -> Vec<(String, u64)> {
    text.lines()
        .filter_map(|l| {
            let t: Vec<&str> = l.split_whitespace().collect();
            // "% time  seconds  usecs/call  calls  [errors]  syscall"
            if t.len() < 5 || t[0].parse::<f64>().is_err() {
                return None;
            }
            let name = t.last()?;
            if *name == "total" {
                return None;
            }
            Some((name.to_string(), t[3].parse().ok()?))
        })
        .collect()
}

/// The system-call table.
pub fn report_calls(r: &mut String, o: &Opts, calls: &[Calls]) {
    if calls.is_empty() {
        let _ = writeln!(
            r,
            "System calls under strace: not measured (strace missing).
"
        );
        return;
    }
    let _ = writeln!(
        r,
        "System calls of the proxy per GiB relayed, from `strace -c` attached over a separate, untimed transfer ({} streams, ≥ {} MiB; `/proc/PID/io` above counts read/write/readv/writev only, not recv/send):
",
        o.streams, o.strace_mib
    );
    let _ = writeln!(
        r,
        "| tier | direction | relayed | socket reads/GiB | socket writes/GiB | epoll_wait/GiB | all calls/GiB | bytes per read + write |"
    );
    let _ = writeln!(r, "|---|---|---:|---:|---:|---:|---:|---:|");
    for c in calls {
        let g = c.bytes as f64 / GIB;
        let _ = writeln!(
            r,
            "| {} | {} | {:.3} GiB | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
            if c.kind == "plain" {
                c.tier.to_string()
            } else {
                format!("{} ({})", c.tier, c.kind)
            },
            c.dir.name(),
            g,
            c.reads as f64 / g,
            c.writes as f64 / g,
            c.epoll_waits as f64 / g,
            c.all as f64 / g,
            // Every relayed byte is read once and written once.
            2.0 * c.bytes as f64 / (c.reads + c.writes).max(1) as f64
        );
    }
    r.push('\n');
}

/// Σ proxy CPU / Σ baseline over every run of (tier, dir).
pub fn pooled_ratio(runs: &[CpuRun], tier: &str, dir: Dir) -> Option<f64> {
    let sel: Vec<&CpuRun> = runs
        .iter()
        .filter(|x| x.tier == tier && x.dir == dir)
        .collect();
    let base: f64 = sel.iter().map(|x| x.base_s()).sum();
    (!sel.is_empty() && base > 0.0).then(|| sel.iter().map(|x| x.cpu_s()).sum::<f64>() / base)
}

/// "met" / "missed", or why the target is not judged.
pub fn verdict(ratio: f64) -> String {
    if !crypto::baseline_at_o3() {
        return format!(
            "not judged: baseline built at opt-level {}",
            crypto::OPT_LEVEL.unwrap_or("of Cargo.toml (z)")
        );
    }
    if ratio <= TARGET_RATIO {
        "**met**"
    } else {
        "**missed**"
    }
    .to_string()
}

/// The report section.
pub fn report(r: &mut String, o: &Opts, runs: &[CpuRun]) {
    let _ = writeln!(
        r,
        "### Throughput and CPU ({} concurrent sessions, each {} × 1 MiB packets per transfer; download and upload separately)\n",
        o.streams,
        per_stream_packets(o.gib, o.streams)
    );
    let _ = writeln!(
        r,
        "Baseline crypto compiled at opt-level {} (`CARGO_PROFILE_RELEASE_OPT_LEVEL` of the bench build){}.\n",
        crypto::OPT_LEVEL.unwrap_or("z (Cargo.toml)"),
        if crypto::baseline_at_o3() {
            ""
        } else {
            ": **the targets are not judged** (a slow baseline flatters the ratio; run bench/run.sh)"
        }
    );
    let _ = writeln!(
        r,
        "| run | tier | direction | relayed | wall | MiB/s | proxy user + sys | user s/GiB | sys s/GiB | proxy s/GiB | schedstat s/GiB | syscr/GiB | syscw/GiB | 2×CTR s/GiB | TLS 1 side s/GiB | ratio |"
    );
    let _ = writeln!(
        r,
        "|---|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"
    );
    for x in runs {
        let g = x.gib();
        let tls = x
            .tls
            .as_ref()
            .map_or("—".to_string(), |_| format!("{:.3}", x.tls_s() / g));
        let _ = writeln!(
            r,
            "| {} | {} | {} | {:.3} GiB | {:.1} s | {:.0} | {:.2} + {:.2} s | {:.3} | {:.3} | {:.3} | {:.3} | {:.0} | {:.0} | {:.3} | {} | {:.2} |",
            x.rep,
            x.tier,
            x.dir.name(),
            g,
            x.secs,
            x.bytes() as f64 / MIB / x.secs,
            x.user_s(),
            x.sys_s(),
            x.user_s() / g,
            x.sys_s() / g,
            x.cpu_s() / g,
            x.sched_ns as f64 / 1e9 / g,
            x.syscr as f64 / g,
            x.syscw as f64 / g,
            x.ctr_s() / g,
            tls,
            x.cpu_s() / x.base_s()
        );
    }
    let suite = runs
        .iter()
        .find_map(|x| x.tls.as_ref().map(|(_, s)| s.clone()))
        .unwrap_or_default();
    let _ = writeln!(
        r,
        "\nTLS suite negotiated (in-memory pair, same configs as proxy and fake DC): {suite}. ratio = proxy user + sys / baseline, the baseline being 2×CTR on tcp and 2×CTR + one TLS pass on ws.\n"
    );
    let _ = writeln!(
        r,
        "| target (issue 7) | pooled over runs: proxy s/GiB (user / sys) | baseline s/GiB | ratio (per run) | target | verdict |"
    );
    let _ = writeln!(r, "|---|---:|---:|---:|---:|---|");
    for tier in ["ws", "tcp"] {
        for dir in [Dir::Down, Dir::Up] {
            let sel: Vec<&CpuRun> = runs
                .iter()
                .filter(|x| x.tier == tier && x.dir == dir)
                .collect();
            let Some(ratio) = pooled_ratio(runs, tier, dir) else {
                continue;
            };
            let g: f64 = sel.iter().map(|x| x.gib()).sum();
            let sum = |f: &dyn Fn(&CpuRun) -> f64| sel.iter().map(|x| f(x)).sum::<f64>() / g;
            let each: Vec<String> = sel
                .iter()
                .map(|x| format!("{:.2}", x.cpu_s() / x.base_s()))
                .collect();
            let base = if tier == "ws" {
                "2×CTR + 1 TLS"
            } else {
                "2×CTR"
            };
            let _ = writeln!(
                r,
                "| {tier} {} | {:.3} ({:.3} / {:.3}) | {:.3} ({base}) | {:.2} ({}) | ≤ {TARGET_RATIO} | {} |",
                dir.name(),
                sum(&|x| x.cpu_s()),
                sum(&|x| x.user_s()),
                sum(&|x| x.sys_s()),
                sum(&|x| x.base_s()),
                ratio,
                each.join(", "),
                verdict(ratio)
            );
        }
    }
    r.push('\n');
}

/// A fresh fake DC for `tier` ("ws": TLS + WebSocket front, else raw TCP), a proxy in front of
/// it and `o.streams` live sessions through it (the same setup for the timed and the strace runs).
fn open_streams(o: &Opts, tier: &str) -> Result<(FakeDc, ProxyProc, Vec<MtClient>), String> {
    let dc = tier_dc(tier);
    let mut p = start_proxy(o, &dc, tier, 64)?;
    let clients = client::open_many(p.addr(), 0, o.streams, o.streams)?;
    check_live(&mut p, &dc, o.streams, tier)?;
    Ok((dc, p, clients))
}

/// [`open_streams`] for a session kind (see [`kinds`]): ee sessions get the ee secret, and the
/// proxy also `--mask-host 127.0.0.1:9`.
fn open_streams_kind(
    o: &Opts,
    tier: &str,
    kind: &str,
) -> Result<(FakeDc, ProxyProc, Vec<MtClient>), String> {
    if kind != "ee" {
        return open_streams(o, tier);
    }
    let dc = tier_dc(tier);
    let args = tier_args(&dc, tier, 64, &["--mask-host", "127.0.0.1:9"]);
    let mut p = ProxyProc::start(&o.proxy, &o.ca, client::EE_SECRET, &args)?;
    let clients = client::open_many_with(p.addr(), 0, o.streams, o.streams, client::EE_SECRET)?;
    check_live(&mut p, &dc, o.streams, tier)?;
    Ok((dc, p, clients))
}
