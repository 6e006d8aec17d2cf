//! `make bench-freeze` driver (run by `bench/freeze.sh`): the "16 KB freeze" (issue 19 §1,
//! docs/design.md §4 rule 7 and the §8 row) against the REAL `tg-ws-proxy` binary — this one or
//! an older one, for a before/after table — with only flags every version since issue 11 has.
//!
//! One scenario per run: a ladder `ws,worker` for DC 2 whose direct front freezes every
//! connection after 16 KiB from it, in one of two forms, with a healthy Worker look-alike behind
//! it (relaying to a fake TCP DC); clients do one thing over and over
//! (`tests/common/freezeclient.rs`): ask for 256 KiB and wait 30 s, give up after 5 s, or
//! re-ask every 2 s for 30 s. Printed: one Markdown table row — transfers completed, sessions
//! that hung on the frozen front, those the proxy ended within 10 s of their last byte.
//!
//! * `--form middlebox`: the front stops writing mid-frame, mid-packet (`Fault::
//!   FreezeAfterBytes`), the kernel still ACKs.
//! * `--form kernel`: every packet from the front dropped once its connection carried 16 KiB
//!   (nftables on conntrack's reply bytes, ACKs included), inside a user and network namespace
//!   the driver makes for itself (`unshare -rn`, loopback only, MTU 1500); it re-runs itself in
//!   there (`--inner`).
//!
//! Loopback only; every wait bounded.

#[path = "../tests/common/fakedc.rs"]
mod fakedc;
#[path = "../tests/common/freezeclient.rs"]
mod freezeclient;
// Shared with the pit bench, which uses all of it.
#[allow(dead_code)]
#[path = "bench_pit/proc.rs"]
mod proc;

use std::path::PathBuf;
use std::process::Command;
use std::time::{Duration, Instant};

use fakedc::{DcConfig, FakeDc, Fault};
use freezeclient::Client;

/// The client secret (plain form).
const SECRET: &str = "0123456789abcdef0123456789abcdef";
/// The Worker's name (the test certificate covers `*.workers.dev`).
const WORKER: &str = "freeze.workers.dev";
/// Bytes from the front before it freezes.
const FREEZE: usize = 16 * 1024;

struct Opts {
    proxy: PathBuf,
    ca: PathBuf,
    form: String,
    client: String,
    attempts: usize,
    gap: Duration,
    logs: PathBuf,
    label: String,
    inner: bool,
}

fn parse() -> Result<Opts, String> {
    let mut a = pico_args::Arguments::from_env();
    let e = |x: pico_args::Error| x.to_string();
    Ok(Opts {
        proxy: a.value_from_str("--proxy").map_err(e)?,
        ca: a.value_from_str("--ca").map_err(e)?,
        form: a.value_from_str("--form").map_err(e)?,
        client: a.value_from_str("--client").map_err(e)?,
        attempts: a.opt_value_from_str("--attempts").map_err(e)?.unwrap_or(20),
        gap: Duration::from_secs_f64(a.opt_value_from_str("--gap").map_err(e)?.unwrap_or(2.0)),
        logs: a
            .opt_value_from_str("--logs")
            .map_err(e)?
            .unwrap_or_else(|| PathBuf::from("target/bench/freeze")),
        label: a
            .opt_value_from_str("--label")
            .map_err(e)?
            .unwrap_or_else(|| "this tree".into()),
        inner: a.contains("--inner"),
    })
}

fn main() {
    let o = match parse() {
        Ok(o) => o,
        Err(e) => {
            eprintln!("bench_freeze: {e}");
            std::process::exit(2);
        }
    };
    if o.form == "kernel" && !o.inner {
        std::process::exit(reexec_in_netns());
    }
    match run(&o) {
        Ok(row) => println!("{row}"),
        Err(e) => {
            eprintln!("bench_freeze: FAILED: {e}");
            std::process::exit(1);
        }
    }
}

/// Runs this driver again with `--inner` inside a fresh user + network namespace (loopback up,
/// MTU 1500, conntrack counting bytes); its exit status.
fn reexec_in_netns() -> i32 {
    let exe = std::env::current_exe().expect("own path");
    let script = "ip link set lo mtu 1500 up && \
                  echo 1 > /proc/sys/net/netfilter/nf_conntrack_acct && exec \"$0\" \"$@\" --inner";
    let status = Command::new("unshare")
        .args(["-rn", "sh", "-c", script])
        .arg(exe)
        .args(std::env::args().skip(1))
        .status();
    match status {
        Ok(s) => s.code().unwrap_or(1),
        Err(e) => {
            eprintln!("bench_freeze: unshare -rn: {e}");
            1
        }
    }
}

fn run(o: &Opts) -> Result<String, String> {
    let how = match o.client.as_str() {
        "once" => Client::AskOnce(Duration::from_secs(30)),
        "give-up" => Client::GivesUp(Duration::from_secs(5)),
        "re-ask" => Client::ReAsks(Duration::from_secs(2), Duration::from_secs(30)),
        other => return Err(format!("--client {other}: once, give-up or re-ask")),
    };
    let front = match o.form.as_str() {
        "middlebox" => FakeDc::start_tls_ws(DcConfig::with_fault(Fault::FreezeAfterBytes(FREEZE))),
        "kernel" => {
            let f = FakeDc::start_tls_ws(DcConfig::default());
            nft_freeze(f.port())?;
            f
        }
        other => return Err(format!("--form {other}: middlebox or kernel")),
    };
    let dc = FakeDc::start_tcp(DcConfig::default());
    let worker = FakeDc::start_worker(DcConfig::default());
    std::fs::create_dir_all(&o.logs).map_err(|e| format!("{}: {e}", o.logs.display()))?;
    let hosts = o.logs.join("hosts");
    std::fs::write(&hosts, format!("127.0.0.1 {WORKER}\n")).map_err(|e| e.to_string())?;
    let resolv = o.logs.join("resolv.conf");
    std::fs::write(&resolv, "").map_err(|e| e.to_string())?;
    let args: Vec<String> = [
        "--tier-order",
        "ws,worker",
        "--dc-ip",
        &format!("2:{}", front.addr()),
        "--tcp-dc-ip",
        &format!("2:{}", dc.addr()),
        "--cf-worker-domain",
        &format!("{WORKER}:{}", worker.port()),
        "--hosts-file",
        &hosts.display().to_string(),
        "--resolv-conf",
        &resolv.display().to_string(),
        "--ca-file",
        &o.ca.display().to_string(),
        "--startup-probes",
        "off",
        "--pool-size",
        "0",
        "--cooldown-base",
        "0.3",
        "--cooldown-max",
        "2",
        "--probe-timeout",
        "0.5",
        "--hedge-delay",
        "0.1",
        "--max-per-ip",
        "0",
        "--per-ip-rate",
        "0",
    ]
    .iter()
    .map(|s| s.to_string())
    .collect();
    let log = o.logs.join(format!(
        "{}-{}-{}.log",
        o.label.replace(' ', "_"),
        o.form,
        o.client
    ));
    let mut p = proc::Proxy::start(&o.proxy, SECRET, &args, &log, Instant::now())?;
    let runs = freezeclient::attempts(p.addr(), SECRET, how, o.attempts, o.gap, false)?;
    p.stop();
    let done = runs.iter().filter(|a| a.complete).count();
    let hung = runs.len() - done;
    let ended = runs
        .iter()
        .filter(|a| !a.complete)
        .filter(|a| {
            a.close_after_last_byte()
                .is_some_and(|d| d <= Duration::from_secs(10))
        })
        .count();
    Ok(format!(
        "| {} | {} | {} | **{done} of {}** | {hung} | {ended} of {hung} | {} |",
        o.label,
        o.form,
        o.client,
        runs.len(),
        worker.upgrades()
    ))
}

/// The kernel form of the freeze for connections to `port` (inside the namespace).
fn nft_freeze(port: u16) -> Result<(), String> {
    use std::io::Write;
    let rules = format!(
        "table inet freeze {{\n\tchain out {{\n\t\ttype filter hook output priority 0; policy \
         accept;\n\t\ttcp sport {port} ct reply bytes > {FREEZE} drop\n\t}}\n}}\n"
    );
    let mut child = Command::new("nft")
        .args(["-f", "-"])
        .stdin(std::process::Stdio::piped())
        .spawn()
        .map_err(|e| format!("nft: {e}"))?;
    if let Some(mut i) = child.stdin.take() {
        i.write_all(rules.as_bytes()).map_err(|e| e.to_string())?;
    }
    let s = child.wait().map_err(|e| e.to_string())?;
    if !s.success() {
        return Err(format!("nft: {s}"));
    }
    Ok(())
}
