//! End-to-end demo on loopback, no Telegram needed:
//!
//! ```text
//! cargo build --release && cargo run --release --example demo -- target/release/tg-ws-proxy
//! ```
//!
//! Starts a fake Telegram DC (a TLS + WebSocket front like `kwsN.web.telegram.org`, plus a raw
//! obfuscated2 port), runs the real proxy binary against it with the test-only CA, prints the
//! `tg://` link, runs the `probe` applet (what the Telegram app does to judge a proxy), and shows
//! what the fake DC saw. Exits with the probe's status. Owns nothing but this file; the fake DC
//! is tests/common/fakedc.rs, shared with the black-box tests.

#[path = "../tests/common/fakedc.rs"]
mod fakedc;

use std::io::{BufRead, BufReader};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitCode, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use fakedc::{DcConfig, FakeDc};
use tg_ws_proxy::mtproto::obfs2::Secret;
use tg_ws_proxy::rng::Rng;

const START_TIMEOUT: Duration = Duration::from_secs(10);

fn section(title: &str) {
    println!("\n=== {title} ===");
}

/// Lines of the proxy's stdout/stderr, with a condition variable for waiting on them.
#[derive(Default)]
struct Logs {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Logs {
    fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// The port from a `listening on 127.0.0.1:PORT` line, waiting up to `timeout`.
    fn wait_port(&self, child: &mut Child, timeout: Duration) -> Option<u16> {
        let deadline = Instant::now() + timeout;
        let mut g = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            let found = g.iter().find_map(|l| {
                let rest = &l[l.find("listening on ")? + "listening on ".len()..];
                let word = rest.split_whitespace().next()?;
                let addr: std::net::SocketAddr = word.trim_end_matches([',', ';']).parse().ok()?;
                Some(addr.port())
            });
            if found.is_some() {
                return found;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() || matches!(child.try_wait(), Ok(Some(_))) {
                return None;
            }
            // Wake at least every 100 ms to notice an early exit of the child.
            let step = left.min(Duration::from_millis(100));
            g = self
                .grew
                .wait_timeout(g, step)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

fn collect(r: impl std::io::Read + Send + 'static, logs: Arc<Logs>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines().map_while(Result::ok) {
            logs.lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(line);
            logs.grew.notify_all();
        }
    })
}

fn indent(text: &str) {
    for l in text.lines() {
        println!("  {l}");
    }
}

fn main() -> ExitCode {
    let Some(proxy) = std::env::args_os().nth(1).map(PathBuf::from) else {
        eprintln!("usage: cargo run --release --example demo -- PATH_TO/tg-ws-proxy");
        return ExitCode::from(2);
    };
    if !proxy.is_file() {
        eprintln!(
            "demo: {} is not a file (build it with `cargo build --release`)",
            proxy.display()
        );
        return ExitCode::from(2);
    }
    let ca = Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ca.pem");

    section("1. Fake Telegram DC on loopback");
    let ws_dc = FakeDc::start_tls_ws(DcConfig::default());
    let tcp_dc = FakeDc::start_tcp(DcConfig::default());
    println!(
        "  WebSocket front (TLS, like kwsN.web.telegram.org/apiws): {}",
        ws_dc.addr()
    );
    println!(
        "  raw obfuscated2 DC port (the last-resort tcp tier):       {}",
        tcp_dc.addr()
    );
    println!(
        "  its certificate is signed by the TEST-ONLY CA {}",
        ca.display()
    );

    let mut rng = match Rng::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("demo: no OS randomness: {e}");
            return ExitCode::from(1);
        }
    };
    let secret = Secret::generate(&mut rng);
    let key = secret.key_hex();

    section("2. Start the proxy");
    let ws_ip = |dc: u8| format!("{dc}:127.0.0.1:{}", ws_dc.port());
    let args: Vec<String> = vec![
        "run".into(),
        "--host".into(),
        "127.0.0.1".into(),
        "--port".into(),
        "0".into(),
        "--secret".into(),
        key.clone(),
        // Every DC on a closed loopback port first (later entries win per DC): the proxy probes
        // DCs 1-5 at start, and nothing may leave 127.0.0.1.
        "--dc-ip".into(),
        LOOPBACK_DEAD_DCS.into(),
        "--tcp-dc-ip".into(),
        LOOPBACK_DEAD_DCS.into(),
        // The shared CF domain list is fetched from GitHub by default: not in the demo.
        "--cf-domain-list".into(),
        "off".into(),
        "--dc-ip".into(),
        ws_ip(2),
        "--dc-ip".into(),
        ws_ip(4),
        "--tcp-dc-ip".into(),
        format!("2:127.0.0.1:{}", tcp_dc.port()),
        "--ca-file".into(),
        ca.display().to_string(),
    ];
    println!(
        "  $ {} {}",
        proxy.display(),
        args.join(" ").replace(&key, &secret.masked())
    );
    let mut child = match Command::new(&proxy)
        .args(&args)
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
    {
        Ok(c) => c,
        Err(e) => {
            eprintln!("demo: cannot start {}: {e}", proxy.display());
            return ExitCode::from(1);
        }
    };
    let logs = Arc::new(Logs::default());
    let mut readers = Vec::new();
    if let Some(o) = child.stdout.take() {
        readers.push(collect(o, logs.clone()));
    }
    if let Some(e) = child.stderr.take() {
        readers.push(collect(e, logs.clone()));
    }
    let Some(port) = logs.wait_port(&mut child, START_TIMEOUT) else {
        println!(
            "  the proxy did not print `listening on ADDR` within {START_TIMEOUT:?}; its output:"
        );
        indent(&logs.lines().join("\n"));
        let _ = child.kill();
        let _ = child.wait();
        return ExitCode::from(1);
    };
    println!("  listening on 127.0.0.1:{port}");

    section("3. The link a user would open in Telegram");
    let link_out = Command::new(&proxy)
        .args([
            "link",
            "--server",
            "127.0.0.1",
            "--port",
            &port.to_string(),
            "--secret",
            &key,
        ])
        .stdin(Stdio::null())
        .output();
    match link_out {
        Ok(o) if o.status.success() && String::from_utf8_lossy(&o.stdout).contains("tg://") => {
            indent(&String::from_utf8_lossy(&o.stdout));
        }
        _ => {
            println!("  (the `link` applet is not available; built here instead)");
            println!(
                "  tg://proxy?server=127.0.0.1&port={port}&secret={}",
                secret.link_hex()
            );
        }
    }

    section("4. Probe: obfuscated2 init + req_pq_multi -> resPQ, 5 times");
    let probe = Command::new(&proxy)
        .args([
            "probe",
            "--server",
            &format!("127.0.0.1:{port}"),
            "--secret",
            &key,
        ])
        .args(["--count", "5", "--interval", "0.2"])
        .stdin(Stdio::null())
        .output();
    let probe_code = match probe {
        Ok(o) => {
            indent(&String::from_utf8_lossy(&o.stdout));
            indent(&String::from_utf8_lossy(&o.stderr));
            o.status.code().unwrap_or(1)
        }
        Err(e) => {
            println!("  cannot run the probe applet: {e}");
            1
        }
    };

    section("5. What the fake DC saw");
    let msgs = ws_dc.messages();
    let single = msgs.iter().filter(|m| m.one_packet).count();
    println!(
        "  WS front: {} TCP connection(s), {} upgrade(s), {} relay init(s) {:?}",
        ws_dc.connections(),
        ws_dc.upgrades(),
        ws_dc.inits(),
        ws_dc.init_dcs()
    );
    println!(
        "  WS messages after the init: {} ({single} held exactly one MTProto packet)",
        msgs.len()
    );
    println!("  SNI: {:?}  paths: {:?}", ws_dc.snis(), ws_dc.paths());
    println!(
        "  tcp port: {} connection(s), {} relay init(s)",
        tcp_dc.connections(),
        tcp_dc.inits()
    );
    let violations = [ws_dc.violations(), tcp_dc.violations()].concat();
    if !violations.is_empty() {
        println!("  protocol violations: {violations:?}");
    }

    section("6. Stop the proxy (SIGTERM: it drains, writes its last lines and exits); its log");
    stop(&mut child);
    for r in readers {
        let _ = r.join();
    }
    indent(&logs.lines().join("\n"));

    println!(
        "\nprobe exit status {probe_code}: {}",
        if probe_code == 0 {
            "every attempt got a resPQ through the proxy"
        } else {
            "FAILED"
        }
    );
    ExitCode::from(u8::try_from(probe_code).unwrap_or(1))
}

/// Every DC mapped to the discard port on loopback, where nothing listens.
const LOOPBACK_DEAD_DCS: &str =
    "1:127.0.0.1:9,2:127.0.0.1:9,3:127.0.0.1:9,4:127.0.0.1:9,5:127.0.0.1:9,203:127.0.0.1:9";

/// SIGTERM, then wait up to 10 s for the drain to end (the proxy logs its final stats line and
/// the sessions' close lines); SIGKILL if it is still there.
fn stop(child: &mut std::process::Child) {
    // SAFETY: kill(2) on our own child's pid; no memory is touched.
    unsafe {
        libc::kill(child.id() as libc::pid_t, libc::SIGTERM);
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while std::time::Instant::now() < deadline {
        if matches!(child.try_wait(), Ok(Some(_))) {
            return;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let _ = child.kill();
    let _ = child.wait();
}
