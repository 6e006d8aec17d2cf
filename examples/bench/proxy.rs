//! The proxy under measurement: the real `tg-ws-proxy` binary started as a separate process
//! (`run --host 127.0.0.1 --port 0 --ca-file … --stats-interval 0 <args>`, secret through
//! `TG_SECRET`), its stderr/stdout drained by reader threads so it never blocks on a pipe (every
//! line kept, up to [`MAX_LINES`], for scenarios that explain outcomes from the proxy's own log),
//! and killed (SIGKILL) and reaped on drop, or ended with SIGTERM ([`ProxyProc::terminate`]) when
//! it runs under a wrapper that must write its results (valgrind). Loopback only. Owns nothing
//! else.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader, Read};
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::procfs;

/// How long to wait for the `listening on ADDR` line.
const START_TIMEOUT: Duration = Duration::from_secs(10);
/// Log lines kept for diagnostics.
const KEEP_LINES: usize = 40;
/// Bound on the full log kept in memory (one session line each is ~200 bytes).
pub const MAX_LINES: usize = 100_000;

/// A running proxy child process.
pub struct ProxyProc {
    child: Child,
    addr: SocketAddr,
    tail: Arc<Mutex<VecDeque<String>>>,
    /// Every line in arrival order, the first [`MAX_LINES`] of them.
    lines: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

impl ProxyProc {
    /// Spawns `bin run …` and waits for it to report its listening address.
    /// Errors: spawn failure, or no `listening on` line within 10 s (with the output seen).
    pub fn start(
        bin: &Path,
        ca: &Path,
        secret: &str,
        args: &[String],
    ) -> Result<ProxyProc, String> {
        Self::start_wrapped(&[], START_TIMEOUT, bin, ca, secret, args, None)
    }

    /// [`ProxyProc::start`] as `wrapper… bin run …` (e.g. `valgrind --tool=callgrind …`; empty:
    /// none), waiting up to `timeout` for the `listening on` line; with `events`, the session
    /// records (`TG_EVENTS`, one JSON object per line) are appended to that file.
    pub fn start_wrapped(
        wrapper: &[String],
        timeout: Duration,
        bin: &Path,
        ca: &Path,
        secret: &str,
        args: &[String],
        events: Option<&Path>,
    ) -> Result<ProxyProc, String> {
        let mut cmd = match wrapper.split_first() {
            Some((w, rest)) => {
                let mut c = Command::new(w);
                c.args(rest).arg(bin);
                c
            }
            None => Command::new(bin),
        };
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TG_") {
                cmd.env_remove(k);
            }
        }
        cmd.args([
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            "0",
            "--stats-interval",
            "0",
            // Every DC on a closed loopback port unless the bench points it at a fake peer (a
            // later `--dc-ip 2:…` wins for its DC): startup probes and any DC a driver did not
            // name must never leave loopback.
            "--dc-ip",
            LOOPBACK_DEAD_DCS,
            "--tcp-dc-ip",
            LOOPBACK_DEAD_DCS,
            // No shared CF domain list from GitHub (a driver's own `--cf-domain-list` wins).
            "--cf-domain-list",
            "off",
        ])
        .arg("--ca-file")
        .arg(ca)
        .args(args)
        .env("TG_SECRET", secret)
        .envs(events.map(|e| ("TG_EVENTS", e)))
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
        let mut child = cmd
            .spawn()
            .map_err(|e| format!("spawn {}: {e}", bin.display()))?;
        let tail = Arc::new(Mutex::new(VecDeque::new()));
        let lines = Arc::new(Mutex::new(Vec::new()));
        let (tx, rx) = mpsc::channel();
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(drain(out, tail.clone(), lines.clone(), tx.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(drain(err, tail.clone(), lines.clone(), tx));
        }
        let mut p = ProxyProc {
            child,
            addr: ([0, 0, 0, 0], 0).into(),
            tail,
            lines,
            readers,
        };
        match rx.recv_timeout(timeout) {
            Ok(addr) => {
                p.addr = addr;
                Ok(p)
            }
            Err(_) => {
                p.stop();
                Err(format!(
                    "proxy did not report `listening on`; args {args:?}; output:\n{}",
                    p.tail()
                ))
            }
        }
    }

    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// `VmRSS` in KiB (0 if unreadable, e.g. the proxy died).
    pub fn rss_kib(&self) -> u64 {
        procfs::vm_rss_kib(self.pid()).unwrap_or(0)
    }

    /// `VmRSS` after the counters settle: the largest of a few reads 20 ms apart (the kernel
    /// folds per-thread RSS counters lazily).
    pub fn settled_rss_kib(&self) -> u64 {
        let mut best = 0;
        for _ in 0..5 {
            best = best.max(self.rss_kib());
            std::thread::sleep(Duration::from_millis(20));
        }
        best
    }

    /// Runs `f` while a sampler thread reads `VmRSS` every 5 ms; returns `f`'s result, the
    /// peak RSS in KiB (the settled RSS right after `f` included) and the number of samples.
    pub fn peak_rss_during<R>(&self, f: impl FnOnce() -> R) -> (R, u64, u64) {
        let stop = Arc::new(AtomicBool::new(false));
        let pid = self.pid();
        let sampler = {
            let stop = stop.clone();
            std::thread::spawn(move || {
                let (mut peak, mut samples) = (0u64, 0u64);
                while !stop.load(Ordering::Relaxed) {
                    peak = peak.max(procfs::vm_rss_kib(pid).unwrap_or(0));
                    samples += 1;
                    std::thread::sleep(Duration::from_millis(5));
                }
                (peak, samples)
            })
        };
        let r = f();
        stop.store(true, Ordering::Relaxed);
        let (peak, samples) = sampler.join().unwrap_or((0, 0));
        (r, peak.max(self.settled_rss_kib()), samples)
    }

    /// (utime + stime in clock ticks, schedstat ns).
    pub fn cpu(&self) -> (u64, u64) {
        let (u, s) = procfs::cpu_ticks(self.pid()).unwrap_or((0, 0));
        (u + s, procfs::sched_ns(self.pid()).unwrap_or(0))
    }

    /// (utime, stime) in clock ticks.
    pub fn cpu_split(&self) -> (u64, u64) {
        procfs::cpu_ticks(self.pid()).unwrap_or((0, 0))
    }

    /// True while the child runs.
    pub fn alive(&mut self) -> bool {
        matches!(self.child.try_wait(), Ok(None))
    }

    /// The last log lines (newline-joined).
    pub fn tail(&self) -> String {
        let t = self.tail.lock().unwrap_or_else(|e| e.into_inner());
        t.iter().cloned().collect::<Vec<_>>().join("\n")
    }

    /// Every log line so far (up to [`MAX_LINES`]), in arrival order.
    pub fn lines(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// SIGTERM (through `kill(1)`: no libc binding here), then waits up to `timeout` for the
    /// exit; SIGKILL if it is still running then. Returns whether it exited on its own.
    pub fn terminate(&mut self, timeout: Duration) -> bool {
        let _ = Command::new("kill")
            .arg("-TERM")
            .arg(self.pid().to_string())
            .status();
        let end = std::time::Instant::now() + timeout;
        let mut exited = false;
        while std::time::Instant::now() < end {
            if !matches!(self.child.try_wait(), Ok(None)) {
                exited = true;
                break;
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        self.stop();
        exited
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

impl Drop for ProxyProc {
    fn drop(&mut self) {
        self.stop();
    }
}

fn drain(
    r: impl Read + Send + 'static,
    tail: Arc<Mutex<VecDeque<String>>>,
    lines: Arc<Mutex<Vec<String>>>,
    tx: mpsc::Sender<SocketAddr>,
) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            let Ok(line) = line else { break };
            if let Some(addr) = listening_addr(&line) {
                let _ = tx.send(addr);
            }
            {
                let mut all = lines.lock().unwrap_or_else(|e| e.into_inner());
                if all.len() < MAX_LINES {
                    all.push(line.clone());
                }
            }
            let mut t = tail.lock().unwrap_or_else(|e| e.into_inner());
            if t.len() == KEEP_LINES {
                t.pop_front();
            }
            t.push_back(line);
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
pub const LOOPBACK_DEAD_DCS: &str =
    "1:127.0.0.1:9,2:127.0.0.1:9,3:127.0.0.1:9,4:127.0.0.1:9,5:127.0.0.1:9,203:127.0.0.1:9";
