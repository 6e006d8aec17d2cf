//! The proxy under measurement for `make bench-pit`: the real `tg-ws-proxy` binary started as a
//! child process (`run --host 127.0.0.1 --port 0 …`, secret through `TG_SECRET`, inherited
//! `TG_*` variables removed), with EVERY log line kept in memory (stamped with the bench clock)
//! and copied to a file, so a missed target can be explained from the proxy's own words.
//! Killed (SIGKILL) and reaped on drop. Loopback only; owns nothing else.

use std::fs::File;
use std::io::{BufRead, BufReader, Read, Write};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// How long to wait for the `listening on ADDR` line.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// One log line and when the bench saw it (ms since the bench's epoch).
#[derive(Clone, Debug)]
pub struct Line {
    pub at_ms: u64,
    pub text: String,
}

/// A running proxy child.
pub struct Proxy {
    child: Child,
    addr: SocketAddr,
    lines: Arc<Mutex<Vec<Line>>>,
    readers: Vec<JoinHandle<()>>,
}

impl Proxy {
    /// Spawns `bin run --host 127.0.0.1 --port 0 <args>` with `TG_SECRET=secret`, logging to
    /// `log_path` as well as memory, and waits for its listening address.
    /// Errors: spawn failure or no `listening on` line within 10 s (with the output seen).
    pub fn start(
        bin: &Path,
        secret: &str,
        args: &[String],
        log_path: &Path,
        epoch: Instant,
    ) -> Result<Proxy, String> {
        let mut cmd = Command::new(bin);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TG_") {
                cmd.env_remove(k);
            }
        }
        // Every DC on a closed loopback port unless the bench points it at a fake peer (a later
        // `--dc-ip 2:…` wins for its DC): startup probes must never leave loopback.
        cmd.args(["run", "--host", "127.0.0.1", "--port", "0"])
            .args([
                "--dc-ip",
                LOOPBACK_DEAD_DCS,
                "--tcp-dc-ip",
                LOOPBACK_DEAD_DCS,
                // No shared CF domain list from GitHub (a run's own `--cf-domain-list` wins).
                "--cf-domain-list",
                "off",
            ])
            .args(args)
            .env("TG_SECRET", secret)
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let file =
            File::create(log_path).map_err(|e| format!("create {}: {e}", log_path.display()))?;
        let file = Arc::new(Mutex::new(file));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(drain(out, lines.clone(), file.clone(), tx.clone(), epoch));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(drain(err, lines.clone(), file, tx, epoch));
        }
        let mut p = Proxy {
            child,
            addr: ([0, 0, 0, 0], 0).into(),
            lines,
            readers,
        };
        match rx.recv_timeout(START_TIMEOUT) {
            Ok(addr) => {
                p.addr = addr;
                Ok(p)
            }
            Err(_) => {
                p.stop();
                let text: Vec<String> = p.lines().into_iter().map(|l| l.text).collect();
                Err(format!(
                    "proxy did not report `listening on`; args {args:?}; output:\n{}",
                    text.join("\n")
                ))
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Every line so far, in arrival order.
    pub fn lines(&self) -> Vec<Line> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Lines containing every one of `needles`.
    pub fn count(&self, needles: &[&str]) -> usize {
        let g = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        g.iter()
            .filter(|l| needles.iter().all(|n| l.text.contains(n)))
            .count()
    }

    /// True while the child runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// SIGKILL and reap (idempotent).
    pub fn stop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.stop();
    }
}

fn drain(
    r: impl Read + Send + 'static,
    lines: Arc<Mutex<Vec<Line>>>,
    file: Arc<Mutex<File>>,
    tx: mpsc::Sender<SocketAddr>,
    epoch: Instant,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(text) = line else { break };
            let at_ms = epoch.elapsed().as_millis() as u64;
            if let Some(addr) = listening_addr(&text) {
                let _ = tx.send(addr);
            }
            {
                let mut f = file.lock().unwrap_or_else(|e| e.into_inner());
                let _ = writeln!(f, "[bench +{:>7}ms] {text}", at_ms);
            }
            lines
                .lock()
                .unwrap_or_else(|e| e.into_inner())
                .push(Line { at_ms, text });
        }
    })
}

fn listening_addr(line: &str) -> Option<SocketAddr> {
    let rest = &line[line.find("listening on ")? + "listening on ".len()..];
    rest.split_whitespace()
        .next()?
        .trim_end_matches([',', ';', ')'])
        .parse()
        .ok()
}

/// Every DC mapped to the discard port on loopback, where nothing listens.
const LOOPBACK_DEAD_DCS: &str =
    "1:127.0.0.1:9,2:127.0.0.1:9,3:127.0.0.1:9,4:127.0.0.1:9,5:127.0.0.1:9,203:127.0.0.1:9";
