//! Big-WS-message scenario (docs/design.md §8 "RSS while 100 sessions each receive 1 MiB WS frames:
//! flat"): with one proxy process, first `--bulk-sessions` sessions each pull packets of 64 KiB
//! (control), then a fresh set of as many sessions each pull `--bulk-packets` packets of 1 MiB —
//! one WS message each on the ws tier. RSS is sampled every 5 ms during both transfers. If the
//! proxy buffered whole messages, the 1 MiB phase would need ≥ 1 MiB more per session than the
//! control; streaming keeps the two peaks level. Bench code; results go into the report only.

use std::fmt::Write as _;
use std::time::Duration;

use super::fakedc::{DcConfig, FakeDc};
use super::proxy::ProxyProc;
use super::{check_live, client, kib_per, start_proxy, step, Opts, MIB};

/// Control packet size and count per session.
const CONTROL_SIZE: usize = 64 * 1024;
const CONTROL_PACKETS: u32 = 64;
/// Big packet size (the 1 MiB WS messages).
const BIG_SIZE: usize = 1 << 20;

/// One transfer phase.
pub struct Phase {
    /// RSS with the phase's sessions open and warmed, before its transfer (KiB).
    pub before: u64,
    /// Peak RSS during the transfer (KiB) and the number of samples taken.
    pub peak: u64,
    pub samples: u64,
    pub bytes: u64,
    pub secs: f64,
}

pub struct BigFrames {
    pub idle: u64,
    pub control: Phase,
    pub big: Phase,
    pub after: u64,
}

pub fn run(o: &Opts) -> Result<BigFrames, String> {
    let n = o.bulk_sessions;
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let mut p = start_proxy(o, &dc, "ws", n + 100)?;
    std::thread::sleep(Duration::from_millis(300));
    let idle = p.settled_rss_kib();
    step(&format!(
        "big frames: control, {n} sessions × {CONTROL_PACKETS} × 64 KiB"
    ));
    let control = phase(&mut p, &dc, n, 0, (CONTROL_PACKETS, CONTROL_SIZE))?;
    if !super::wait_for(Duration::from_secs(10), || {
        dc.live_sessions() <= super::POOL_SLACK
    }) {
        return Err("big frames: control sessions did not close".into());
    }
    step(&format!(
        "big frames: {n} sessions × {} × 1 MiB WS messages",
        o.bulk_packets
    ));
    let big = phase(&mut p, &dc, n, n, (o.bulk_packets, BIG_SIZE))?;
    let after = p.settled_rss_kib();
    Ok(BigFrames {
        idle,
        control,
        big,
        after,
    })
}

/// Opens `n` sessions (indices from `first`), warms them, then all pull `bulk` at once.
fn phase(
    p: &mut ProxyProc,
    dc: &FakeDc,
    n: usize,
    first: usize,
    bulk: (u32, usize),
) -> Result<Phase, String> {
    let mut clients = client::open_many(p.addr(), first, n, 4)?;
    client::exercise_all(&mut clients, 4)?;
    check_live(p, dc, n, "big frames")?;
    let before = p.settled_rss_kib();
    let (moved, peak, samples) = p.peak_rss_during(|| client::transfer_all(clients, bulk, (0, 0)));
    let (moved, secs) = moved.map_err(|e| format!("big frames: {e}"))?;
    if !p.alive() {
        return Err(format!("big frames: proxy exited; log tail:\n{}", p.tail()));
    }
    let bytes = moved.down;
    Ok(Phase {
        before,
        peak,
        samples,
        bytes,
        secs,
    })
}

/// The report section.
pub fn report(r: &mut String, o: &Opts, b: &BigFrames) {
    let n = o.bulk_sessions;
    let _ = writeln!(
        r,
        "### Big WS messages (ws tier, one proxy process, {n} concurrent sessions per phase)\n"
    );
    let _ = writeln!(r, "| phase | RSS before (sessions open, warmed) | peak RSS during transfer | (peak − idle) / session | moved |");
    let _ = writeln!(r, "|---|---:|---:|---:|---:|");
    let row = |r: &mut String, what: String, ph: &Phase| {
        let _ = writeln!(
            r,
            "| {what} | {} KiB | {} KiB ({} samples) | {:.1} KiB | {:.0} MiB in {:.1} s ({:.0} MiB/s) |",
            ph.before, ph.peak, ph.samples, kib_per(ph.peak, b.idle, n), ph.bytes as f64 / MIB, ph.secs,
            ph.bytes as f64 / MIB / ph.secs
        );
    };
    row(
        r,
        format!("control: {CONTROL_PACKETS} × 64 KiB messages per session"),
        &b.control,
    );
    row(
        r,
        format!("{} × 1 MiB messages per session", o.bulk_packets),
        &b.big,
    );
    let d = b.big.peak as i64 - b.control.peak as i64;
    let _ = writeln!(
        r,
        "\nIdle RSS of this process: {} KiB; after both phases: {} KiB. Peak with 1 MiB messages − peak with 64 KiB messages: {d:+} KiB ({:+.1} KiB per session); whole-message buffering would add ≥ {} KiB.\n",
        b.idle, b.after, d as f64 / n as f64, n * 1024
    );
}
