//! Instructions per relayed byte (issue 7 "Targets"): the proxy runs under `valgrind
//! --tool=callgrind` (instruction counts are deterministic, so this works on a noisy machine)
//! for one session moving `--cg-mib` MiB of 1 MiB packets down, then in a fresh process up, on
//! the ws and the tcp tier, plus one run per tier that only opens and closes the session. Ir per
//! relayed byte = (Ir of the transfer run − Ir of the open-only run) / relayed bytes, which
//! removes start-up, handshakes and exit. The baseline crypto gets the same treatment: this
//! driver re-runs itself under callgrind with `--ir-baseline ctr|tls:BYTES` for BYTES and for 0.
//!
//! The proxy runs with `--pool-size 0` here, so no warm upstream is opened, aged out or refilled
//! at a time that depends on how slow valgrind is. Runs end with SIGTERM (valgrind then writes its
//! counts; SIGKILL would lose them). Output files go to `target/bench/callgrind/`. Bench code:
//! failures are returned as text; a missing valgrind skips the section with a note.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Duration;

use super::cpu::{self, Dir};
use super::fakedc::{DcConfig, FakeDc};
use super::proxy::ProxyProc;
use super::{check_live, client, crypto, step, tier_dc, Opts, MIB};

/// Waits under valgrind: start-up and the `listening on` line, and the exit after SIGTERM.
pub const VG_START: Duration = Duration::from_secs(120);
pub const VG_EXIT: Duration = Duration::from_secs(120);
/// Bound on one transfer under callgrind (about 1 MiB/s at opt-level "z").
pub const VG_TRANSFER: Duration = Duration::from_secs(600);

/// One callgrind measurement of the proxy.
pub struct IrRun {
    pub tier: &'static str,
    /// Secret and client reader: "plain" (the raw reader down), "plain, MtClient" (down read
    /// through [`client::download`], the reference for ee), "ee" (fake-TLS; down through
    /// [`client::download`]).
    pub kind: &'static str,
    pub dir: Dir,
    /// Client-side wire bytes relayed (up + down).
    pub bytes: u64,
    /// Ir of the transfer run and of the tier's open-only run.
    pub ir: u64,
    pub ir_null: u64,
}

impl IrRun {
    pub fn per_byte(&self) -> f64 {
        self.ir.saturating_sub(self.ir_null) as f64 / self.bytes as f64
    }
}

/// Ir per session of `n` sessions opened one after another and closed (`--cg-handshakes`).
pub struct HsRun {
    pub kind: &'static str,
    pub n: usize,
    pub ir: u64,
    pub ir_null: u64,
}

/// The section's results: proxy runs and the baselines' Ir per byte (2×CTR, one TLS side).
pub struct Ir {
    pub runs: Vec<IrRun>,
    pub handshakes: Vec<HsRun>,
    pub ctr_per_byte: f64,
    pub tls_per_byte: f64,
    pub secs: f64,
}

fn out_dir() -> PathBuf {
    PathBuf::from("target/bench/callgrind")
}

pub fn valgrind(out: &Path) -> Vec<String> {
    vec![
        "valgrind".into(),
        "--tool=callgrind".into(),
        "--quiet".into(),
        format!("--callgrind-out-file={}", out.display()),
    ]
}

/// The `totals:` (or `summary:`) Ir count of a callgrind output file.
pub fn total_ir(out: &Path) -> Result<u64, String> {
    let text = std::fs::read_to_string(out).map_err(|e| format!("read {}: {e}", out.display()))?;
    text.lines()
        .rev()
        .find_map(|l| {
            l.strip_prefix("totals:")
                .or_else(|| l.strip_prefix("summary:"))
        })
        .and_then(|v| v.split_whitespace().next()?.parse().ok())
        .ok_or_else(|| format!("{}: no totals line", out.display()))
}

/// Whether valgrind can be run at all.
pub fn available() -> bool {
    Command::new("valgrind")
        .arg("--version")
        .output()
        .is_ok_and(|o| o.status.success())
}

/// Every measurement of the section.
pub fn run(o: &Opts) -> Result<Ir, String> {
    let t0 = std::time::Instant::now();
    std::fs::create_dir_all(out_dir()).map_err(|e| format!("mkdir: {e}"))?;
    let packets = (o.cg_mib.max(1.0).ceil()) as u32;
    let mut runs = Vec::new();
    // `--cg-ee`: each tier also with the ee secret, and plain read through MtClient as its
    // like-for-like reference (the raw reader cannot unwrap TLS records).
    for tier in ["ws", "tcp"] {
        for &kind in cpu::kinds(o) {
            let null = proxy_ir(o, tier, kind, Dir::Down, 0)?.0;
            for dir in [Dir::Down, Dir::Up] {
                if kind == "plain, MtClient" && dir == Dir::Up {
                    continue; // the upload already goes through MtClient in "plain"
                }
                let (ir, bytes) = proxy_ir(o, tier, kind, dir, packets)?;
                runs.push(IrRun {
                    tier,
                    kind,
                    dir,
                    bytes,
                    ir,
                    ir_null: null,
                });
            }
        }
    }
    let mut handshakes = Vec::new();
    if o.cg_handshakes > 0 {
        let hs_kinds: &[&'static str] = if o.cg_ee {
            &["plain", "ee"]
        } else {
            &["plain"]
        };
        for &kind in hs_kinds {
            let ir_null = handshake_ir(o, kind, 0)?;
            let ir = handshake_ir(o, kind, o.cg_handshakes)?;
            handshakes.push(HsRun {
                kind,
                n: o.cg_handshakes,
                ir,
                ir_null,
            });
        }
    }
    let bytes = packets as u64 * MIB as u64;
    let ctr = baseline_ir(o, "ctr", bytes)?;
    let tls = baseline_ir(o, "tls", bytes)?;
    Ok(Ir {
        runs,
        handshakes,
        ctr_per_byte: ctr,
        // The TLS baseline runs both sides (server writes, client reads): one side is half.
        tls_per_byte: tls / 2.0,
        secs: t0.elapsed().as_secs_f64(),
    })
}

/// Ir of one proxy process under callgrind that relays `packets` × 1 MiB in `dir` on one
/// session (0: the session is opened and closed only); returns (Ir, relayed bytes).
fn proxy_ir(
    o: &Opts,
    tier: &'static str,
    kind: &'static str,
    dir: Dir,
    packets: u32,
) -> Result<(u64, u64), String> {
    step(&format!(
        "callgrind: {tier} tier, {kind}, {} of {packets} MiB",
        dir.name()
    ));
    let tag = kind.replace(", ", "-");
    let out = out_dir().join(format!("proxy-{tier}-{tag}-{}-{packets}.out", dir.name()));
    let _ = std::fs::remove_file(&out);
    let dc = tier_dc(tier);
    let secret = secret_of(kind);
    let mut p = ProxyProc::start_wrapped(
        &valgrind(&out),
        VG_START,
        &o.proxy,
        &o.ca,
        secret,
        &proxy_args(tier, &dc, kind, 16),
        None,
    )?;
    let mut clients = client::open_many_with(p.addr(), 0, 1, 1, secret)?;
    check_live(&mut p, &dc, 1, tier)?;
    let c = clients.pop().ok_or("no session")?;
    let moved = cpu::move_kind(c, kind, dir, packets, VG_TRANSFER)
        .map_err(|e| format!("callgrind {tier} {}: {e}; log:\n{}", dir.name(), p.tail()))?;
    // The client socket is closed by now; let the proxy end the session before the exit.
    super::wait_for(Duration::from_secs(30), || dc.live_sessions() == 0);
    if !p.terminate(VG_EXIT) {
        return Err(format!(
            "callgrind {tier}: proxy did not exit after SIGTERM"
        ));
    }
    Ok((total_ir(&out)?, moved.up + moved.down))
}

fn secret_of(kind: &str) -> &'static str {
    if kind == "ee" {
        client::EE_SECRET
    } else {
        client::SECRET
    }
}

/// The proxy's arguments under callgrind: `--pool-size 0`; with ee, `--mask-host` on loopback
/// (only given then, so a proxy from before fake-TLS takes the plain runs' arguments).
pub fn proxy_args(tier: &str, dc: &FakeDc, kind: &str, max: usize) -> Vec<String> {
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
        "--pool-size",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    if kind == "ee" {
        args.extend(["--mask-host".to_string(), "127.0.0.1:9".to_string()]);
    }
    args
}

/// Ir of one proxy process under callgrind (tcp tier) through which `n` sessions are opened one
/// after another (init, resPQ, one 256-byte echo; with ee the fake-TLS handshake first) and
/// closed, each close awaited at the fake DC before the next opens.
fn handshake_ir(o: &Opts, kind: &'static str, n: usize) -> Result<u64, String> {
    step(&format!(
        "callgrind: {n} {kind} sessions opened and closed (tcp tier)"
    ));
    let out = out_dir().join(format!("handshakes-{kind}-{n}.out"));
    let _ = std::fs::remove_file(&out);
    let dc = FakeDc::start_tcp(DcConfig::default());
    let secret = secret_of(kind);
    let mut p = ProxyProc::start_wrapped(
        &valgrind(&out),
        VG_START,
        &o.proxy,
        &o.ca,
        secret,
        &proxy_args("tcp", &dc, kind, 64),
        None,
    )?;
    let mut rng = tg_ws_proxy::rng::Rng::new().map_err(|e| format!("rng: {e}"))?;
    for i in 0..n {
        let c = client::open_with(p.addr(), i, &mut rng, secret)
            .map_err(|e| format!("handshakes {kind} session {i}: {e}; log:\n{}", p.tail()))?;
        drop(c);
        super::wait_for(Duration::from_secs(30), || dc.live_sessions() == 0);
    }
    if !p.terminate(VG_EXIT) {
        return Err(format!(
            "callgrind handshakes {kind}: proxy did not exit after SIGTERM"
        ));
    }
    total_ir(&out)
}

/// Ir per byte of one baseline (`ctr`: 2 passes; `tls`: both sides), from this driver run under
/// callgrind for `bytes` and for 0 bytes.
fn baseline_ir(o: &Opts, what: &str, bytes: u64) -> Result<f64, String> {
    step(&format!("callgrind: baseline {what}"));
    let exe = std::env::current_exe().map_err(|e| format!("current_exe: {e}"))?;
    let mut ir = [0u64; 2];
    for (i, n) in [bytes, 0].into_iter().enumerate() {
        let out = out_dir().join(format!("baseline-{what}-{n}.out"));
        let _ = std::fs::remove_file(&out);
        let vg = valgrind(&out);
        let st = Command::new(&vg[0])
            .args(&vg[1..])
            .arg(&exe)
            .arg("--ca")
            .arg(&o.ca)
            .arg("--ir-baseline")
            .arg(format!("{what}:{n}"))
            .status()
            .map_err(|e| format!("valgrind: {e}"))?;
        if !st.success() {
            return Err(format!("baseline {what} under callgrind: {st}"));
        }
        ir[i] = total_ir(&out)?;
    }
    Ok(ir[0].saturating_sub(ir[1]) as f64 / bytes as f64)
}

/// `--ir-baseline ctr|tls:BYTES`: runs one baseline once and exits (what [`baseline_ir`] runs
/// under callgrind).
pub fn baseline_main(spec: &str, ca: &Path) -> Result<(), String> {
    let (what, n) = spec
        .split_once(':')
        .ok_or("--ir-baseline wants ctr:BYTES or tls:BYTES")?;
    let n: u64 = n.parse().map_err(|_| format!("bad byte count {n:?}"))?;
    match what {
        "ctr" => {
            crypto::ctr_two_pass(n);
        }
        "tls" => {
            crypto::tls_round(n, ca)?;
        }
        _ => return Err(format!("unknown baseline {what:?}")),
    }
    Ok(())
}

/// The report section.
pub fn report(r: &mut String, o: &Opts, ir: &Ir) {
    let _ = writeln!(
        r,
        "### Instructions per relayed byte (callgrind; one session, {} MiB of 1 MiB packets per run; {:.0} s)\n",
        o.cg_mib, ir.secs
    );
    let _ = writeln!(
        r,
        "| tier | direction | relayed | Ir (run − open-only run) | Ir / byte | baseline Ir / byte | proxy / baseline |"
    );
    let _ = writeln!(r, "|---|---|---:|---:|---:|---:|---:|");
    for x in &ir.runs {
        let base = ir.ctr_per_byte + if x.tier == "ws" { ir.tls_per_byte } else { 0.0 };
        let tier = if x.kind == "plain" {
            x.tier.to_string()
        } else {
            format!("{} ({})", x.tier, x.kind)
        };
        let _ = writeln!(
            r,
            "| {} | {} | {:.1} MiB | {} − {} | {:.2} | {:.2} ({}) | {:.2} |",
            tier,
            x.dir.name(),
            x.bytes as f64 / MIB,
            x.ir,
            x.ir_null,
            x.per_byte(),
            base,
            if x.tier == "ws" {
                "2×CTR + 1 TLS"
            } else {
                "2×CTR"
            },
            x.per_byte() / base
        );
    }
    let _ = writeln!(
        r,
        "\nBaselines under callgrind (this driver, opt-level {}): 2×CTR {:.2} Ir/byte, one TLS side {:.2} Ir/byte. Output files in target/bench/callgrind/ (`callgrind_annotate` reads them).\n",
        crypto::OPT_LEVEL.unwrap_or("z (Cargo.toml)"),
        ir.ctr_per_byte,
        ir.tls_per_byte
    );
    if !ir.handshakes.is_empty() {
        let _ = writeln!(
            r,
            "Sessions opened one after another and closed, tcp tier (init, resPQ, one 256-byte echo; ee: the fake-TLS handshake first):\n\n| secret | sessions | Ir (run − 0-session run) | Ir per session |\n|---|---:|---:|---:|"
        );
        for h in &ir.handshakes {
            let _ = writeln!(
                r,
                "| {} | {} | {} − {} | {:.0} |",
                h.kind,
                h.n,
                h.ir,
                h.ir_null,
                h.ir.saturating_sub(h.ir_null) as f64 / h.n.max(1) as f64
            );
        }
        let _ = writeln!(r);
    }
}
