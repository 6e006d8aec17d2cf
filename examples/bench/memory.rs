//! Memory scenario (the docs/design.md §8 rows on idle RSS and RSS per session): a fresh proxy
//! and fake DC per tier; idle RSS (with a per-mapping breakdown), then `--small` and `--large`
//! sessions that completed a resPQ round trip and keep echoing small packets, then the same
//! sessions after each moved enough to grow every buffer it has, then after all closed. Bench
//! code; results go into the report only.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::time::Duration;

use super::fakedc::{DcConfig, FakeDc};
use super::{check_live, client, kib_per, procfs, start_proxy_bin, step, tier_dc, wait_for, Opts};

/// What every session pulls at once in the streaming phase: 4 packets of 256 KiB.
pub const STREAM: (u32, usize) = (4, 256 * 1024);

pub struct Memory {
    /// Column label: tier, and the build when it is not the release binary.
    pub label: String,
    pub bin: PathBuf,
    pub idle: u64,
    pub idle_smaps: u64,
    pub idle_anon: u64,
    /// A separate fresh proxy after one session opened and closed, once the
    /// fake DC holds the pool: (VmRSS KiB, RssAnon KiB, live upstreams at the fake DC).
    pub pooled: (u64, u64, usize),
    /// Largest idle mappings by RSS: (name, KiB).
    pub idle_maps: Vec<(String, u64)>,
    pub small_light: u64,
    pub large_light: u64,
    pub large_full: u64,
    /// Peak while all `large` sessions stream [`STREAM`] at once (KiB), and samples taken.
    pub large_streaming: u64,
    pub stream_samples: u64,
    pub after_close: u64,
}

/// Idle RSS and RSS with `small`/`large` relaying sessions through proxy binary `bin` on
/// `tier` ("ws" or "tcp").
pub fn run(o: &Opts, bin: &Path, tier: &str, label: &str) -> Result<Memory, String> {
    step(&format!(
        "memory: idle, {} and {} sessions ({label})",
        o.small, o.large
    ));
    let pooled = pooled_idle(o, bin, tier)?;
    let dc = tier_dc(tier);
    let mut p = start_proxy_bin(o, bin, &dc, tier, o.large + 100)?;
    std::thread::sleep(Duration::from_millis(300));
    let idle = p.settled_rss_kib();
    let idle_smaps = procfs::smaps_rss_kib(p.pid()).unwrap_or(0);
    let idle_anon = procfs::rss_anon_kib(p.pid()).unwrap_or(0);
    let idle_maps = procfs::rss_by_mapping(p.pid());
    let mut clients = client::open_many(p.addr(), 0, o.small, 4)?;
    for r in 0..2 {
        client::ping_all(&mut clients, 512, 1000 * r)?;
    }
    check_live(&mut p, &dc, o.small, "small")?;
    let small_light = p.settled_rss_kib();
    clients.extend(client::open_many(p.addr(), o.small, o.large - o.small, 4)?);
    for r in 0..2 {
        client::ping_all(&mut clients, 512, 1000 * r)?;
    }
    check_live(&mut p, &dc, o.large, "large")?;
    let large_light = p.settled_rss_kib();
    step(&format!(
        "memory: steady state for all {} sessions ({label})",
        o.large
    ));
    client::exercise_all(&mut clients, 4)?;
    client::ping_all(&mut clients, 512, 7)?;
    check_live(&mut p, &dc, o.large, "large/full")?;
    let large_full = p.settled_rss_kib();
    step(&format!(
        "memory: all {} sessions streaming at once ({label})",
        o.large
    ));
    let (moved, large_streaming, stream_samples) =
        p.peak_rss_during(|| client::transfer_all(clients, STREAM, (0, 0)));
    moved.map_err(|e| format!("memory ({label}), streaming: {e}"))?;
    if !wait_for(Duration::from_secs(10), || {
        dc.live_sessions() <= super::POOL_SLACK
    }) {
        return Err("sessions did not close after the clients left".into());
    }
    let after_close = p.settled_rss_kib();
    Ok(Memory {
        label: label.to_string(),
        bin: bin.to_path_buf(),
        idle,
        idle_smaps,
        idle_anon,
        pooled,
        idle_maps,
        small_light,
        large_light,
        large_full,
        large_streaming,
        stream_samples,
        after_close,
    })
}

/// Idle RSS with the pool warm. A fresh proxy and DC; one session opens, does a resPQ and an
/// echo, and closes; then wait (≤ 10 s) for the fake DC to hold the pool's upstreams (on ws at
/// least one: the pool keeps as many as sessions started in the last `--pool-max-age`, at least
/// 1; none on tcp), let it settle 500 ms, and read RSS.
fn pooled_idle(o: &Opts, bin: &Path, tier: &str) -> Result<(u64, u64, usize), String> {
    let dc = tier_dc(tier);
    let p = start_proxy_bin(o, bin, &dc, tier, 64)?;
    std::thread::sleep(Duration::from_millis(300));
    let mut clients = client::open_many(p.addr(), 0, 1, 1)?;
    client::ping_all(&mut clients, 512, 1)?;
    drop(clients);
    let ws = tier == "ws";
    wait_for(Duration::from_secs(10), || {
        let live = dc.live_sessions();
        if ws {
            (1..=super::POOL_SLACK).contains(&live)
        } else {
            live == 0
        }
    });
    std::thread::sleep(Duration::from_millis(500));
    let live = dc.live_sessions();
    let rss = p.settled_rss_kib();
    let anon = procfs::rss_anon_kib(p.pid()).unwrap_or(0);
    Ok((rss, anon, live))
}

/// The report section (one column pair per tier).
pub fn report(r: &mut String, o: &Opts, mems: &[Memory]) {
    let _ = writeln!(
        r,
        "### Memory (VmRSS of the proxy process; per session = (RSS − idle) / sessions)\n"
    );
    let mut head = String::from("| measurement |");
    let mut rule = String::from("|---|");
    for m in mems {
        let _ = write!(head, " {t}: RSS | {t}: per session |", t = m.label);
        rule.push_str("---:|---:|");
    }
    let _ = writeln!(r, "{head}\n{rule}");
    let row = |r: &mut String, what: String, f: &dyn Fn(&Memory) -> (u64, Option<usize>)| {
        let _ = write!(r, "| {what} |");
        for m in mems {
            let (v, n) = f(m);
            let per = n.map_or("—".to_string(), |n| {
                format!("{:.1} KiB", kib_per(v, m.idle, n))
            });
            let _ = write!(r, " {v} KiB | {per} |");
        }
        r.push('\n');
    };
    row(
        r,
        "idle after start (listening, no sessions)".into(),
        &|m| (m.idle, None),
    );
    row(
        r,
        format!(
            "{} sessions, light relaying (resPQ + 512 B echoes)",
            o.small
        ),
        &|m| (m.small_light, Some(o.small)),
    );
    row(r, format!("{} sessions, light relaying", o.large), &|m| {
        (m.large_light, Some(o.large))
    });
    row(
        r,
        format!(
            "{} sessions, steady state (each pulled {} × {} KiB, echoed 2 × 16 KiB)",
            o.large,
            client::EXERCISE_PACKETS,
            client::EXERCISE_SIZE / 1024
        ),
        &|m| (m.large_full, Some(o.large)),
    );
    row(
        r,
        format!(
            "{} sessions all streaming at once ({} × {} KiB each): peak",
            o.large,
            STREAM.0,
            STREAM.1 / 1024
        ),
        &|m| (m.large_streaming, Some(o.large)),
    );
    row(r, format!("after all {} sessions closed", o.large), &|m| {
        (m.after_close, None)
    });
    targets(r, o, mems);
    for m in mems {
        let maps: Vec<String> = m
            .idle_maps
            .iter()
            .map(|(n, k)| format!("{n} {k}"))
            .collect();
        let _ = writeln!(
            r,
            "\n{} ({}): streaming peak from {} samples 5 ms apart. Idle: VmRSS {} KiB ({:.2} MiB), smaps_rollup Rss {} KiB, RssAnon {} KiB. Pools warm (separate proxy, one session opened and closed): VmRSS {} KiB, RssAnon {} KiB, {} upstreams live at the fake DC. By mapping (KiB): {}.",
            m.label,
            m.bin.display(),
            m.stream_samples,
            m.idle,
            m.idle as f64 / 1024.0,
            m.idle_smaps,
            m.idle_anon,
            m.pooled.0,
            m.pooled.1,
            m.pooled.2,
            maps.join(", ")
        );
    }
    r.push('\n');
}

/// Issue 7 / docs/design.md §8 memory targets, for the ws-tier columns.
fn targets(r: &mut String, o: &Opts, mems: &[Memory]) {
    let _ = writeln!(
        r,
        "\n| target (issue 7) | build | measured | target | verdict |"
    );
    let _ = writeln!(r, "|---|---|---:|---:|---|");
    let verdict = |ok: bool| if ok { "**met**" } else { "**missed**" };
    for m in mems.iter().filter(|m| m.label.starts_with("ws")) {
        let held = kib_per(m.large_full, m.idle, o.large);
        let _ = writeln!(
            r,
            "| RSS per held session that relayed traffic and went idle ({} sessions) | {} | {held:.1} KiB | ≤ 20 KiB | {} |",
            o.large,
            m.label,
            verdict(held <= 20.0)
        );
        let streaming = kib_per(m.large_streaming, m.idle, o.large);
        let _ = writeln!(
            r,
            "| RSS per session while all {} stream at once (peak) | {} | {streaming:.1} KiB | ≤ 64 KiB | {} |",
            o.large,
            m.label,
            verdict(streaming <= 64.0)
        );
        if m.label.contains("static") {
            let _ = writeln!(
                r,
                "| idle RSS, static build, pools warm | {} | {} KiB | ≤ 1,536 KiB | {} |",
                m.label,
                m.pooled.0,
                verdict(m.pooled.0 <= 1536)
            );
        }
    }
}

/// One `ee-idle` row: a fresh proxy (tcp tier) with the plain or the ee secret.
pub struct EeIdle {
    pub label: String,
    pub kind: &'static str,
    /// (VmRSS, RssAnon) KiB just after start, and after `n` sessions opened and closed.
    pub start: (u64, u64),
    pub after: (u64, u64),
    pub n: usize,
}

/// Idle RSS of `bin` with the plain and with the ee secret (the fake-TLS replay cache is
/// allocated at start), then after `o.ee_idle_n` sessions of that kind opened one after another
/// (50 per loopback source address, under the per-IP burst) and closed.
/// A kind that fails (e.g. ee on a proxy from before fake-TLS) is reported in `notes`.
pub fn ee_idle(o: &Opts, bin: &Path, label: &str, notes: &mut Vec<String>) -> Vec<EeIdle> {
    let mut rows = Vec::new();
    for kind in ["plain", "ee"] {
        match ee_idle_one(o, bin, label, kind) {
            Ok(r) => rows.push(r),
            Err(e) => notes.push(format!("{label}, {kind}: not measured ({e})")),
        }
    }
    rows
}

fn ee_idle_one(o: &Opts, bin: &Path, label: &str, kind: &'static str) -> Result<EeIdle, String> {
    step(&format!(
        "ee-idle: {label}, {kind}: idle, then {} sessions",
        o.ee_idle_n
    ));
    let dc = FakeDc::start_tcp(DcConfig::default());
    let (secret, mut args) = if kind == "ee" {
        (
            client::EE_SECRET,
            vec!["--mask-host".to_string(), "127.0.0.1:9".to_string()],
        )
    } else {
        (client::SECRET, Vec::new())
    };
    args.extend(
        [
            "--tcp-dc-ip",
            &format!("2:{}", dc.addr()),
            "--tier-order",
            "tcp",
            "--max-connections",
            "256",
        ]
        .iter()
        .map(|s| s.to_string()),
    );
    let mut p = super::proxy::ProxyProc::start(bin, &o.ca, secret, &args)?;
    std::thread::sleep(Duration::from_millis(300));
    let start = (
        p.settled_rss_kib(),
        procfs::rss_anon_kib(p.pid()).unwrap_or(0),
    );
    let mut rng = tg_ws_proxy::rng::Rng::new().map_err(|e| format!("rng: {e}"))?;
    for i in 0..o.ee_idle_n {
        let c = client::open_with(p.addr(), i, &mut rng, secret)
            .map_err(|e| format!("ee-idle {kind} session {i}: {e}; log:\n{}", p.tail()))?;
        drop(c);
        if i % 50 == 49 {
            wait_for(Duration::from_secs(10), || dc.live_sessions() == 0);
        }
    }
    check_live(&mut p, &dc, 0, "ee-idle")?;
    std::thread::sleep(Duration::from_millis(300));
    let after = (
        p.settled_rss_kib(),
        procfs::rss_anon_kib(p.pid()).unwrap_or(0),
    );
    Ok(EeIdle {
        label: label.to_string(),
        kind,
        start,
        after,
        n: o.ee_idle_n,
    })
}

/// The `ee-idle` report section.
pub fn report_ee_idle(r: &mut String, rows: &[EeIdle], notes: &[String]) {
    let _ = writeln!(
        r,
        "### Idle RSS with an ee secret (tcp tier, fresh proxy per row)\n\n| build | secret | VmRSS at start | RssAnon at start | sessions opened and closed | VmRSS after | RssAnon after |\n|---|---|---:|---:|---:|---:|---:|"
    );
    for x in rows {
        let _ = writeln!(
            r,
            "| {} | {} | {} KiB | {} KiB | {} | {} KiB | {} KiB |",
            x.label, x.kind, x.start.0, x.start.1, x.n, x.after.0, x.after.1
        );
    }
    let _ = writeln!(r);
    for n in notes {
        let _ = writeln!(r, "{n}\n");
    }
}
