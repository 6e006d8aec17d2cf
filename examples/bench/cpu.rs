//! Throughput and CPU scenario (docs/design.md §8 "CPU per GiB relayed ≤ 1.3 × the crypto alone"):
//! a few sessions move ≥ `--gib` GiB through the proxy on the ws tier (TLS + WebSocket toward
//! the fake DC) and on the tcp tier (raw obfuscated2), and the proxy's CPU time over the
//! transfer is compared with the bare obfuscated2 crypto for the same byte count, measured in
//! this process right before and right after each transfer (half the bytes each) so machine
//! noise hits both sides of the ratio alike. Bench code; results go into the report only.

use std::fmt::Write as _;
use std::time::Instant;

use super::fakedc::{DcConfig, FakeDc};
use super::{check_live, client, crypto, procfs, start_proxy, step, Opts, GIB, MIB};

/// Bulk packet size (one WS message each on the ws tier).
const BULK_SIZE: usize = 1 << 20;
/// Echo packet size (upstream, and back).
const ECHO_SIZE: usize = 64 * 1024;

/// One transfer on one tier and its adjacent baselines.
pub struct CpuRun {
    pub rep: usize,
    pub tier: &'static str,
    pub up: u64,
    pub down: u64,
    pub secs: f64,
    /// Proxy CPU over the transfer, clock ticks.
    pub utime: u64,
    pub stime: u64,
    /// Proxy CPU over the transfer from schedstat, ns (cross-check of the tick counts).
    pub sched_ns: u64,
    /// 2 × AES-256-CTR over the planned byte count (half before, half after the transfer).
    pub ctr: crypto::Cost,
    /// ws only: one TLS pass over the planned byte count (½ of write + read), and the suite.
    pub tls: Option<(crypto::Cost, String)>,
}

impl CpuRun {
    pub fn gib(&self) -> f64 {
        (self.up + self.down) as f64 / GIB
    }
    fn secs_of(ticks: u64) -> f64 {
        ticks as f64 / procfs::clk_tck() as f64
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
    /// Proxy CPU / 2×CTR for the same bytes.
    pub fn ratio(&self) -> f64 {
        self.cpu_s() / self.ctr_s()
    }
}

/// Per-stream work: (1 MiB bulk packets, 64 KiB echo packets), together ≥ gib / streams GiB.
fn plan(o: &Opts) -> (u32, u32) {
    let per_stream_mib = (o.gib * 1024.0 / o.streams as f64).ceil() as u32;
    let bulk = (per_stream_mib * 4).div_ceil(5).max(1); // ~80% as bulk downstream
    let echo = (per_stream_mib - bulk.min(per_stream_mib)) * 8 + 16; // 64 KiB up and back
    (bulk, echo)
}

/// Client-side wire bytes the plan moves (bulk request + replies + echoes both ways).
fn planned_bytes(o: &Opts) -> u64 {
    let (bulk, echo) = plan(o);
    let per =
        4 + 12 + bulk as u64 * (4 + BULK_SIZE as u64) + 2 * echo as u64 * (4 + ECHO_SIZE as u64);
    per * o.streams as u64
}

/// `reps` × (ws, tcp) transfers, each between two half baselines.
pub fn runs(o: &Opts) -> Result<Vec<CpuRun>, String> {
    let bytes = planned_bytes(o);
    let mut out = Vec::new();
    for rep in 1..=o.reps {
        for tier in ["ws", "tcp"] {
            let before = crypto::ctr_two_pass(bytes / 2);
            let mut run = transfer(o, tier, rep)?;
            let after = crypto::ctr_two_pass(bytes - bytes / 2);
            run.ctr = crypto::Cost {
                cpu_ns: before.cpu_ns + after.cpu_ns,
                wall_ns: before.wall_ns + after.wall_ns,
            };
            if tier == "ws" {
                run.tls = Some(crypto::tls_round(bytes, &o.ca)?);
            }
            if run.up + run.down != bytes {
                return Err(format!(
                    "{tier}: moved {} bytes, planned {bytes}",
                    run.up + run.down
                ));
            }
            out.push(run);
        }
    }
    Ok(out)
}

/// One transfer on `tier` with a fresh fake DC and proxy; CPU over the transfer only.
fn transfer(o: &Opts, tier: &'static str, rep: usize) -> Result<CpuRun, String> {
    let (bulk, echo) = plan(o);
    step(&format!(
        "throughput run {rep} ({tier} tier): {} streams × ({bulk} × 1 MiB down + {echo} × 64 KiB echo)",
        o.streams
    ));
    let dc = if tier == "ws" {
        FakeDc::start_tls_ws(DcConfig::default())
    } else {
        FakeDc::start_tcp(DcConfig::default())
    };
    let mut p = start_proxy(o, &dc, tier, 64)?;
    let clients = client::open_many(p.addr(), 0, o.streams, o.streams)?;
    check_live(&mut p, &dc, o.streams, tier)?;
    let (u0, s0) = p.cpu_split();
    let n0 = p.cpu().1;
    let t0 = Instant::now();
    let hs: Vec<_> = clients
        .into_iter()
        .map(|c| {
            std::thread::spawn(move || client::transfer(c, (bulk, BULK_SIZE), (echo, ECHO_SIZE)))
        })
        .collect();
    let (mut up, mut down, mut err) = (0, 0, None);
    for h in hs {
        match h.join() {
            Ok(Ok(m)) => {
                up += m.up;
                down += m.down;
            }
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some("transfer thread panicked".into()),
        }
    }
    let secs = t0.elapsed().as_secs_f64();
    let (u1, s1) = p.cpu_split();
    let n1 = p.cpu().1;
    if let Some(e) = err {
        return Err(format!(
            "throughput {tier}: {e}; proxy log tail:\n{}",
            p.tail()
        ));
    }
    Ok(CpuRun {
        rep,
        tier,
        up,
        down,
        secs,
        utime: u1.saturating_sub(u0),
        stime: s1.saturating_sub(s0),
        sched_ns: n1.saturating_sub(n0),
        ctr: crypto::Cost::default(),
        tls: None,
    })
}

/// The report section.
pub fn report(r: &mut String, o: &Opts, runs: &[CpuRun]) {
    let tck = procfs::clk_tck() as f64;
    let _ = writeln!(
        r,
        "### Throughput and CPU ({} concurrent sessions; per session {} MiB down as 1 MiB packets + 64 KiB echoes)\n",
        o.streams,
        plan(o).0
    );
    let _ = writeln!(
        r,
        "| run | tier | relayed up + down | wall | MiB/s | proxy user + sys | proxy s/GiB | schedstat s/GiB | 2×CTR s/GiB | TLS 1 side s/GiB |"
    );
    let _ = writeln!(r, "|---|---|---:|---:|---:|---:|---:|---:|---:|---:|");
    for x in runs {
        let g = x.gib();
        let tls = x
            .tls
            .as_ref()
            .map_or("—".to_string(), |_| format!("{:.3}", x.tls_s() / g));
        let _ = writeln!(
            r,
            "| {} | {} | {:.0} + {:.0} MiB = {:.3} GiB | {:.1} s | {:.0} | {:.2} + {:.2} s | {:.3} | {:.3} | {:.3} | {} |",
            x.rep, x.tier, x.up as f64 / MIB, x.down as f64 / MIB, g, x.secs, (x.up + x.down) as f64 / MIB / x.secs,
            x.utime as f64 / tck, x.stime as f64 / tck, x.cpu_s() / g, x.sched_ns as f64 / 1e9 / g, x.ctr_s() / g, tls
        );
    }
    let suite = runs
        .iter()
        .find_map(|x| x.tls.as_ref().map(|(_, s)| s.clone()))
        .unwrap_or_default();
    let _ = writeln!(
        r,
        "\nTLS suite negotiated (in-memory pair, same configs as proxy and fake DC): {suite}.\n"
    );
    let _ = writeln!(r, "| ratio (per run) | tcp tier | ws tier | target |");
    let _ = writeln!(r, "|---|---:|---:|---:|");
    let list = |tier: &str, f: &dyn Fn(&CpuRun) -> f64| {
        runs.iter()
            .filter(|x| x.tier == tier)
            .map(|x| format!("{:.2}", f(x)))
            .collect::<Vec<_>>()
            .join(", ")
    };
    let both = |r: &mut String, what: &str, f: &dyn Fn(&CpuRun) -> f64, target: &str| {
        let _ = writeln!(
            r,
            "| {what} | {} | {} | {target} |",
            list("tcp", f),
            list("ws", f)
        );
    };
    both(r, "proxy CPU (user + sys) / 2×CTR", &|x| x.ratio(), "≤ 1.3");
    both(
        r,
        "proxy CPU (user + sys) / (2×CTR + one TLS pass)",
        &|x| x.cpu_s() / (x.ctr_s() + x.tls_s()),
        "(ws: TLS-inclusive)",
    );
    both(
        r,
        "proxy user CPU only / (2×CTR [+ TLS])",
        &|x| x.utime as f64 / tck / (x.ctr_s() + x.tls_s()),
        "(informational)",
    );
}
