//! Shared black-box test rig: spawn the built `tg-ws-proxy` binary ([`Proxy`]), fake peers
//! ([`fakedc`], [`blackhole`], the mask site [`masksite`]), the rig's own fake-TLS client
//! ([`faketls`], with [`mtsession`] for MTProto over any stream), a one-connection mask server
//! and an MTProto session after leading bytes ([`plainrig`]), a local balancer ([`balancer`]),
//! a test (or a test body) run inside a network namespace of its own ([`netns`]), condition
//! waits, and client helpers built on the probe applet's
//! [`MtClient`](tg_ws_proxy::applet::probe::MtClient).
//!
//! Test code: panics on local setup failure are the point (a broken rig must fail loudly).
//! It never touches the real network (127.0.0.1 only) and never sleeps for correctness: waits
//! poll a condition against a deadline. Used as `mod common;` from each `tests/*.rs`.
#![allow(dead_code)]

pub mod balancer;
pub mod blackhole;
pub mod ctl;
pub mod dnsreply;
pub mod eebed;
pub mod fakedc;
pub mod faketls;
pub mod freezeclient;
pub mod https_head;
pub mod masksite;
pub mod mtsession;
pub mod netns;
pub mod outproxy;
pub mod plainrig;
pub mod reader;
pub mod records;
pub mod signals;
pub mod socks5;
pub mod world;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::{Arc, Condvar, Mutex};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{ClientConfig, ClientConnection, RootCertStore, StreamOwned};
use tungstenite::client::IntoClientRequest;
use tungstenite::http::HeaderValue;
use tungstenite::WebSocket;

use tg_ws_proxy::applet::probe::ClientOptions;
use tg_ws_proxy::mtproto::obfs2::{Secret, Tag};

/// A fixed test secret (plain form, 32 hex). Links print it as `dd` + this.
pub const SECRET: &str = "0123456789abcdef0123456789abcdef";

/// Every DC mapped to a closed loopback port (the discard port, nothing listens there).
pub const LOOPBACK_DEAD_DCS: &str =
    "1:127.0.0.1:9,2:127.0.0.1:9,3:127.0.0.1:9,4:127.0.0.1:9,5:127.0.0.1:9,203:127.0.0.1:9";

/// Test DCs 1–3 (init indices 1000N) mapped to the same closed port: a test DC takes only its
/// own `--tcp-dc-ip 1000N:` entry, never DC N's, so without these it would use the built-in
/// test DC table (the real network).
pub const LOOPBACK_DEAD_TEST_DCS: &str = "10001:127.0.0.1:9,10002:127.0.0.1:9,10003:127.0.0.1:9";

/// How long [`Proxy::start`] waits for the `listening on` line.
const START_TIMEOUT: Duration = Duration::from_secs(10);

/// The built proxy binary.
pub fn bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_tg-ws-proxy"))
}

/// Absolute path of a file under tests/data.
pub fn data_path(name: &str) -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("tests/data")
        .join(name)
}

/// Polls `cond` every 2 ms until it is true (→ true) or `timeout` passes (→ false; `cond` is
/// checked once more at the deadline).
pub fn wait_until(timeout: Duration, mut cond: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + timeout;
    loop {
        if cond() {
            return true;
        }
        if Instant::now() >= deadline {
            return cond();
        }
        std::thread::sleep(Duration::from_millis(2));
    }
}

/// Client options for talking to the proxy at `addr` with a secret in any accepted form,
/// 5 s timeout.
pub fn client_opts(addr: SocketAddr, secret: &str, tag: Tag, dc: i16) -> ClientOptions {
    ClientOptions {
        addr,
        secret: Some(Secret::parse(secret).expect("client_opts: bad test secret")),
        tag,
        dc,
        timeout: Duration::from_secs(5),
    }
}

/// Client options for talking obfuscated2 straight to a (fake) DC: raw relay init, no secret.
pub fn raw_opts(addr: SocketAddr, tag: Tag, dc: i16) -> ClientOptions {
    ClientOptions {
        addr,
        secret: None,
        tag,
        dc,
        timeout: Duration::from_secs(5),
    }
}

/// Log lines shared between the reader threads and the test.
#[derive(Default)]
struct Logs {
    lines: Mutex<Vec<String>>,
    grew: Condvar,
}

impl Logs {
    fn push(&self, line: String) {
        self.lines
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .push(line);
        self.grew.notify_all();
    }

    fn snapshot(&self) -> Vec<String> {
        self.lines.lock().unwrap_or_else(|e| e.into_inner()).clone()
    }

    /// Waits until some line satisfies `f` (→ its result) or the timeout passes (→ None).
    fn wait_for<T>(&self, timeout: Duration, mut f: impl FnMut(&str) -> Option<T>) -> Option<T> {
        let deadline = Instant::now() + timeout;
        let mut g = self.lines.lock().unwrap_or_else(|e| e.into_inner());
        loop {
            if let Some(t) = g.iter().find_map(|l| f(l)) {
                return Some(t);
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return None;
            }
            g = self
                .grew
                .wait_timeout(g, left)
                .unwrap_or_else(|e| e.into_inner())
                .0;
        }
    }
}

/// A running `tg-ws-proxy run` child. Killed (SIGKILL) and reaped on drop.
pub struct Proxy {
    child: Child,
    addr: SocketAddr,
    logs: Arc<Logs>,
    readers: Vec<JoinHandle<()>>,
    /// The structured event stream (`TG_EVENTS`) the child writes: see [`Proxy::events`].
    events: PathBuf,
}

impl Proxy {
    /// Spawns `tg-ws-proxy run --host 127.0.0.1 --port 0 --pool-size 0 --startup-probes off
    /// --max-per-ip 0 --per-ip-rate 0 … --ca-file tests/data/ca.pem <args>` ([`run_args`])
    /// with every inherited `TG_*` variable removed, and waits up to 10 s for the
    /// `listening on ADDR` line. Panics (with the logs) if it does not come.
    pub fn start(args: &[&str]) -> Proxy {
        Proxy::start_with_env(args, &[])
    }

    /// [`Proxy::start`] with extra environment variables (e.g. `TG_SECRET`).
    pub fn start_with_env(args: &[&str], env: &[(&str, &str)]) -> Proxy {
        match Proxy::try_start(args, env) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`Proxy::start_with_env`] returning the failure (with all output) instead of panicking.
    pub fn try_start(args: &[&str], env: &[(&str, &str)]) -> Result<Proxy, String> {
        let ca = data_path("ca.pem");
        let ca = ca.to_str().expect("utf-8 data path");
        let mut argv = run_args();
        argv.extend(["--ca-file", ca]);
        argv.extend(args);
        Proxy::try_spawn(&argv, env)
    }

    /// `tg-ws-proxy <argv>` exactly (no [`run_args`] prefix: for tests whose settings must
    /// come from a `--config` file, which any command-line flag would override), waiting for
    /// the `listening on ADDR` line like [`Proxy::start`]. Panics (with the logs) on failure.
    pub fn start_argv(argv: &[&str]) -> Proxy {
        match Proxy::try_spawn(argv, &[]) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    /// [`Proxy::start`] under a soft and hard `RLIMIT_NOFILE` of `nofile` (set in the child
    /// before exec, as `ulimit -n` would): for tests of descriptor exhaustion.
    pub fn start_with_nofile(args: &[&str], nofile: u64) -> Proxy {
        let ca = data_path("ca.pem");
        let ca = ca.to_str().expect("utf-8 data path");
        let mut argv = run_args();
        argv.extend(["--ca-file", ca]);
        argv.extend(args);
        let mut cmd = command(&argv);
        {
            use std::os::unix::process::CommandExt;
            // SAFETY: setrlimit is async-signal-safe; the closure touches no allocation or lock.
            unsafe {
                cmd.pre_exec(move || {
                    let lim = libc::rlimit {
                        rlim_cur: nofile as libc::rlim_t,
                        rlim_max: nofile as libc::rlim_t,
                    };
                    if libc::setrlimit(libc::RLIMIT_NOFILE, &lim) != 0 {
                        return Err(std::io::Error::last_os_error());
                    }
                    Ok(())
                });
            }
        }
        match Proxy::spawn_cmd(cmd, &argv) {
            Ok(p) => p,
            Err(e) => panic!("{e}"),
        }
    }

    fn try_spawn(argv: &[&str], env: &[(&str, &str)]) -> Result<Proxy, String> {
        let mut cmd = command(argv);
        cmd.envs(env.iter().copied());
        Proxy::spawn_cmd(cmd, argv)
    }

    fn spawn_cmd(mut cmd: Command, argv: &[&str]) -> Result<Proxy, String> {
        let events = temp_dir().join("events.jsonl");
        cmd.env("TG_EVENTS", &events);
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().map_err(|e| format!("spawn {:?}: {e}", bin()))?;
        let logs = Arc::new(Logs::default());
        let mut readers = Vec::new();
        if let Some(out) = child.stdout.take() {
            readers.push(spawn_reader(out, logs.clone()));
        }
        if let Some(err) = child.stderr.take() {
            readers.push(spawn_reader(err, logs.clone()));
        }
        let found = logs.wait_for(START_TIMEOUT, |l| {
            let rest = &l[l.find("listening on ")? + "listening on ".len()..];
            let word = rest.split_whitespace().next()?;
            word.trim_end_matches([',', ';', ')'])
                .parse::<SocketAddr>()
                .ok()
        });
        let mut proxy = Proxy {
            child,
            addr: found.unwrap_or_else(|| ([0, 0, 0, 0], 0).into()),
            logs,
            readers,
            events,
        };
        if found.is_none() {
            let status = proxy.kill();
            return Err(format!(
                "proxy did not report `listening on ADDR` within {START_TIMEOUT:?} \
                 (exit: {status:?}); argv {argv:?}; output:\n{}",
                proxy.logs().join("\n")
            ));
        }
        Ok(proxy)
    }

    /// The address the proxy actually bound.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    pub fn port(&self) -> u16 {
        self.addr.port()
    }

    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// Every stdout and stderr line so far (interleaved in arrival order).
    pub fn logs(&self) -> Vec<String> {
        self.logs.snapshot()
    }

    /// Waits until a line contains `needle`; false after `timeout`.
    pub fn wait_log(&self, needle: &str, timeout: Duration) -> bool {
        self.logs
            .wait_for(timeout, |l| l.contains(needle).then_some(()))
            .is_some()
    }

    /// Lines containing `needle` so far.
    pub fn count_log(&self, needle: &str) -> usize {
        self.logs
            .snapshot()
            .iter()
            .filter(|l| l.contains(needle))
            .count()
    }

    /// Open file descriptors of the child (Linux `/proc/PID/fd`); `None` if unreadable.
    pub fn fd_count(&self) -> Option<usize> {
        let dir = std::fs::read_dir(format!("/proc/{}/fd", self.pid())).ok()?;
        Some(dir.count())
    }

    /// Resident set size of the child in KiB (Linux `/proc/PID/status` `VmRSS`).
    pub fn rss_kib(&self) -> Option<u64> {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.pid())).ok()?;
        let line = status.lines().find(|l| l.starts_with("VmRSS:"))?;
        line.split_whitespace().nth(1)?.parse().ok()
    }

    /// `Some(status)` if the child has exited.
    pub fn try_wait(&mut self) -> Option<ExitStatus> {
        self.child.try_wait().ok().flatten()
    }

    /// Sends SIGTERM (via `kill`) and waits up to `timeout` for the exit.
    pub fn terminate(&mut self, timeout: Duration) -> Option<ExitStatus> {
        let _ = Command::new("kill")
            .args(["-TERM", &self.pid().to_string()])
            .status();
        let mut status = None;
        wait_until(timeout, || {
            status = self.try_wait();
            status.is_some()
        });
        status
    }

    /// SIGKILL and reap; returns the exit status if it could be collected.
    pub fn kill(&mut self) -> Option<ExitStatus> {
        let _ = self.child.kill();
        let status = self.child.wait().ok();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
        status
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A proxy on the tcp tier only, `--secret SECRET --tcp-dc-ip <route>` (e.g. `2:127.0.0.1:N`),
/// `extra` arguments after those.
pub fn tcp_tier_proxy(route: &str, extra: &[&str]) -> Proxy {
    let mut args = vec![
        "--secret",
        SECRET,
        "--tcp-dc-ip",
        route,
        "--tier-order",
        "tcp",
    ];
    args.extend_from_slice(extra);
    Proxy::start(&args)
}

/// A plain fake DC on tcp for DC 2 and a [`tcp_tier_proxy`] to it.
pub fn tcp_dc2_proxy(extra: &[&str]) -> (fakedc::FakeDc, Proxy) {
    let dc = fakedc::FakeDc::start_tcp(fakedc::DcConfig::default());
    let proxy = tcp_tier_proxy(&format!("2:{}", dc.addr()), extra);
    (dc, proxy)
}

/// The rig's `run` prefix, which [`Proxy::start`] puts before a test's own arguments (an
/// option later on the line wins). For tests that spawn the binary themselves.
pub fn run_args() -> Vec<&'static str> {
    // No warm pools unless a test asks (`--pool-size N` later on the line wins): pooled
    // upstreams would add connections to the fake peers that most tests count exactly.
    vec![
        "run",
        "--host",
        "127.0.0.1",
        "--port",
        "0",
        "--pool-size",
        "0",
        // No startup probes unless a test asks (`--startup-probes on` later wins): they
        // would add probes to the fake peers that most tests count exactly.
        "--startup-probes",
        "off",
        // No per-client-address limits unless a test asks (`--max-per-ip N`, `--per-ip-rate N`
        // later on the line win): every test client comes from 127.0.0.1, and many tests open
        // more sessions at once than the defaults let one address have.
        "--max-per-ip",
        "0",
        "--per-ip-rate",
        "0",
        // Every upstream defaults to a closed loopback port, so nothing a test forgot to
        // point at a fake peer can reach the real DC table (a test's own `--dc-ip 2:…` or
        // `--tcp-dc-ip 2:…` later on the line replaces the entry for its DC; test DCs are
        // `1000N:`).
        "--dc-ip",
        LOOPBACK_DEAD_DCS,
        "--tcp-dc-ip",
        LOOPBACK_DEAD_DCS,
        "--tcp-dc-ip",
        LOOPBACK_DEAD_TEST_DCS,
        // The shared CF domain list is fetched from GitHub by default: never in a test (a
        // test's own `--cf-domain-list https://127.0.0.1…` later on the line wins).
        "--cf-domain-list",
        "off",
        // Telegram's range list is fetched from core.telegram.org while --transparent is set:
        // never in a test (a test's own loopback `--tg-ranges-url` later on the line wins).
        "--tg-ranges-url",
        "off",
    ]
}

/// `tg-ws-proxy <args>` with stdin closed and inherited `TG_*` variables removed.
pub fn command(args: &[&str]) -> Command {
    let mut cmd = Command::new(bin());
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TG_") {
            cmd.env_remove(k);
        }
    }
    // The shared CF domain list is fetched from GitHub by default: never from a test. A flag
    // (or a test's own `TG_CF_DOMAIN_LIST`) wins over this variable; a config file does not.
    cmd.env("TG_CF_DOMAIN_LIST", "off");
    // Likewise Telegram's range list (transparent mode).
    cmd.env("TG_TG_RANGES_URL", "off");
    cmd.args(args).stdin(Stdio::null());
    cmd
}

/// Output of a short-lived applet run.
#[derive(Debug)]
pub struct Run {
    /// `None` if killed by a signal or by the timeout.
    pub code: Option<i32>,
    pub stdout: String,
    pub stderr: String,
}

/// Runs `tg-ws-proxy <args>` (with `env` added) to completion, killing it after `timeout`.
pub fn run_bin(args: &[&str], env: &[(&str, &str)], timeout: Duration) -> Run {
    let mut cmd = command(args);
    cmd.envs(env.iter().copied())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let mut child = cmd.spawn().expect("spawn tg-ws-proxy");
    let out = child
        .stdout
        .take()
        .map(|o| std::thread::spawn(move || read_all(o)));
    let err = child
        .stderr
        .take()
        .map(|e| std::thread::spawn(move || read_all(e)));
    let mut status = None;
    if !wait_until(timeout, || {
        status = child.try_wait().ok().flatten();
        status.is_some()
    }) {
        let _ = child.kill();
        let _ = child.wait();
    }
    let join = |h: Option<JoinHandle<String>>| h.and_then(|h| h.join().ok()).unwrap_or_default();
    Run {
        code: status.and_then(|s| s.code()),
        stdout: join(out),
        stderr: join(err),
    }
}

fn read_all(mut r: impl std::io::Read) -> String {
    let mut s = String::new();
    let _ = r.read_to_string(&mut s);
    s
}

fn spawn_reader(r: impl std::io::Read + Send + 'static, logs: Arc<Logs>) -> JoinHandle<()> {
    std::thread::spawn(move || {
        for line in BufReader::new(r).lines() {
            match line {
                Ok(l) => logs.push(l),
                Err(_) => break,
            }
        }
    })
}

/// A rustls client config trusting only tests/data/ca.pem (what `--ca-file` gives the proxy).
pub fn test_client_tls() -> Arc<ClientConfig> {
    let pem = std::fs::read(data_path("ca.pem")).expect("read tests/data/ca.pem");
    let mut roots = RootCertStore::empty();
    for cert in CertificateDer::pem_slice_iter(&pem) {
        roots.add(cert.expect("parse ca.pem")).expect("add ca.pem");
    }
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .expect("protocol versions")
        .with_root_certificates(roots)
        .with_no_client_auth();
    Arc::new(cfg)
}

/// A blocking TLS + WebSocket client session.
pub type WsClient = WebSocket<StreamOwned<ClientConnection, TcpStream>>;

/// Opens TLS to `addr` with SNI/Host `host`, verifies against tests/data/ca.pem, and upgrades on
/// `path` (asking for the `binary` subprotocol if `binary`). Errors as text: an HTTP refusal
/// reads `HTTP error: 429 Too Many Requests (retry-after: 7)` (the suffix only when present).
pub fn ws_client(
    addr: SocketAddr,
    host: &str,
    path: &str,
    binary: bool,
) -> Result<(WsClient, tungstenite::handshake::client::Response), String> {
    let sock =
        TcpStream::connect_timeout(&addr, Duration::from_secs(5)).map_err(|e| e.to_string())?;
    sock.set_read_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    sock.set_write_timeout(Some(Duration::from_secs(5)))
        .map_err(|e| e.to_string())?;
    let name = ServerName::try_from(host.to_string()).map_err(|e| e.to_string())?;
    let conn = ClientConnection::new(test_client_tls(), name).map_err(|e| e.to_string())?;
    let tls = StreamOwned::new(conn, sock);
    let mut req = format!("wss://{host}{path}")
        .into_client_request()
        .map_err(|e| e.to_string())?;
    if binary {
        req.headers_mut()
            .insert("sec-websocket-protocol", HeaderValue::from_static("binary"));
    }
    tungstenite::client::client(req, tls).map_err(|e| match e {
        tungstenite::HandshakeError::Failure(tungstenite::Error::Http(resp)) => {
            let retry = resp.headers().get("retry-after");
            let retry = retry.map(|v| format!(" (retry-after: {})", v.to_str().unwrap_or("?")));
            format!("HTTP error: {}{}", resp.status(), retry.unwrap_or_default())
        }
        tungstenite::HandshakeError::Failure(e) => e.to_string(),
        tungstenite::HandshakeError::Interrupted(_) => "handshake interrupted".to_string(),
    })
}

/// A fresh directory under the system temp dir, unique per process and call
/// (`tg-ws-proxy-test-PID-N`). Left behind on purpose (tiny; useful after a failure).
pub fn temp_dir() -> PathBuf {
    static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
    let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
    let dir = std::env::temp_dir().join(format!("tg-ws-proxy-test-{}-{n}", std::process::id()));
    // A directory of an earlier run whose process had the same pid may still be there, with
    // whatever its test left in it (a directory where a file is expected): start empty.
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).expect("create test temp dir");
    dir
}

/// A hosts file (in a fresh [`temp_dir`]) mapping every name to 127.0.0.1, for
/// `--hosts-file`. Pair it with [`empty_resolv_conf`] so nothing reaches a real nameserver.
pub fn hosts_file(names: &[&str]) -> PathBuf {
    let mut text = String::from("# tg-ws-proxy test hosts\n");
    for n in names {
        text.push_str(&format!("127.0.0.1 {n}\n"));
    }
    let path = temp_dir().join("hosts");
    std::fs::write(&path, text).expect("write test hosts file");
    path
}

/// A resolv.conf with no nameserver (for `--resolv-conf`): only the hosts file answers.
pub fn empty_resolv_conf() -> PathBuf {
    let path = temp_dir().join("resolv.conf");
    std::fs::write(
        &path,
        "# no nameservers: tests resolve through the hosts file only\n",
    )
    .expect("write test resolv.conf");
    path
}

/// `--hosts-file H --resolv-conf R` for [`hosts_file`]`(names)` and [`empty_resolv_conf`].
pub fn name_args(names: &[&str]) -> Vec<String> {
    vec![
        "--hosts-file".into(),
        hosts_file(names).display().to_string(),
        "--resolv-conf".into(),
        empty_resolv_conf().display().to_string(),
    ]
}

/// Compressed-time ladder flags the ladder tests share (no pools: counters stay exact).
pub const LADDER_FAST: [&str; 16] = [
    "--cooldown-base",
    "0.3",
    "--cooldown-max",
    "2",
    "--probe-timeout",
    "0.5",
    "--probe-interval",
    "30",
    "--hedge-delay",
    "0.1",
    "--connect-budget",
    "2",
    "--ws-connect-timeout",
    "0.3",
    "--pool-size",
    "0",
];

/// A proxy started with `args`, then [`name_args`] for `names`.
pub fn named_proxy(names: &[&str], args: &[&str]) -> Proxy {
    let names = name_args(names);
    let mut all = args.to_vec();
    all.extend(names.iter().map(String::as_str));
    Proxy::start(&all)
}

/// A proxy on [`SECRET`] with [`LADDER_FAST`], [`name_args`]`(names)`, then `extra` (a later
/// flag wins).
pub fn ladder_proxy(names: &[&str], extra: &[String]) -> Proxy {
    let mut args: Vec<String> = vec!["--secret".into(), SECRET.into()];
    args.extend(LADDER_FAST.iter().map(|a| a.to_string()));
    args.extend(name_args(names));
    args.extend(extra.iter().cloned());
    let refs: Vec<&str> = args.iter().map(String::as_str).collect();
    Proxy::start(&refs)
}

/// An address on 127.0.0.1 where nothing listens: connects are refused (RST), and the port
/// stays taken for the rest of the test process. A socket bound but never listening holds it;
/// a port merely bound and released could be handed to the proxy's own `--port 0` listener a
/// moment later, and then a test's "closed" route would be the proxy itself.
pub fn closed_port() -> SocketAddr {
    use socket2::{Domain, Socket, Type};
    let s = Socket::new(Domain::IPV4, Type::STREAM, None).expect("socket");
    let any: SocketAddr = "127.0.0.1:0".parse().expect("address");
    s.bind(&any.into()).expect("bind 127.0.0.1:0");
    let addr = s
        .local_addr()
        .expect("local_addr")
        .as_socket()
        .expect("an IP address");
    // Held, never listened on: the kernel answers a SYN to it with RST.
    std::mem::forget(s);
    addr
}

/// A free port on 127.0.0.1 for a proxy to listen on (`--port`): bound and released, so
/// another bind may take it meanwhile (the proxy then fails to start, loudly). For an address
/// that must refuse connects use [`closed_port`].
pub fn free_port() -> SocketAddr {
    let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr")
}

/// An [`Rng`](tg_ws_proxy::rng::Rng) seeded from the OS.
pub fn os_rng() -> tg_ws_proxy::rng::Rng {
    tg_ws_proxy::rng::Rng::new().expect("OS randomness")
}

impl Proxy {
    /// Lines so far that contain every needle.
    pub fn lines_with(&self, needles: &[&str]) -> Vec<String> {
        self.logs
            .snapshot()
            .into_iter()
            .filter(|l| needles.iter().all(|n| l.contains(n)))
            .collect()
    }

    /// Waits until one line contains every needle (→ that line) or `timeout` passes (→ None).
    pub fn wait_line(&self, needles: &[&str], timeout: Duration) -> Option<String> {
        self.logs.wait_for(timeout, |l| {
            needles.iter().all(|n| l.contains(n)).then(|| l.to_string())
        })
    }

    /// All output so far, one line each, for assertion messages.
    pub fn dump(&self) -> String {
        self.logs.snapshot().join("\n")
    }
}

impl Proxy {
    /// Waits for the first `stats:` line (`--stats-interval`) printed after this call began
    /// and returns it; None after `timeout`.
    pub fn next_stats(&self, timeout: Duration) -> Option<String> {
        let seen = self.count_log("stats: ");
        let mut line = None;
        wait_until(timeout, || {
            line = self
                .logs
                .snapshot()
                .into_iter()
                .filter(|l| l.contains("stats: "))
                .nth(seen);
            line.is_some()
        });
        line
    }
}

/// The numbers of field `key` in a stats line: `ws=3/1/1/1` → `[3, 1, 1, 1]`,
/// `hedges=2` → `[2]`; None if the field is absent (tiers never tried are left out).
pub fn stats_field(line: &str, key: &str) -> Option<Vec<u64>> {
    let prefix = format!("{key}=");
    let word = line.split_whitespace().find(|w| w.starts_with(&prefix))?;
    word[prefix.len()..]
        .split('/')
        .map(|n| n.parse().ok())
        .collect()
}

impl Proxy {
    /// Every event of kind `kind` (`session`, `route`; see `logging::events`) the proxy wrote
    /// to its `TG_EVENTS` stream so far, oldest first.
    pub fn events(&self, kind: &str) -> Vec<serde_json::Value> {
        let text = std::fs::read_to_string(&self.events).unwrap_or_default();
        text.lines()
            // A line still being written has no newline yet: `lines` yields it, JSON rejects it.
            .filter_map(|l| serde_json::from_str::<serde_json::Value>(l).ok())
            .filter(|e| e["event"] == kind)
            .collect()
    }

    /// Waits until an event of kind `kind` satisfies `pred` (→ it) or `timeout` passes.
    pub fn wait_event(
        &self,
        kind: &str,
        timeout: Duration,
        mut pred: impl FnMut(&serde_json::Value) -> bool,
    ) -> Option<serde_json::Value> {
        let mut found = None;
        wait_until(timeout, || {
            found = self.events(kind).into_iter().find(|e| pred(e));
            found.is_some()
        });
        found
    }

    /// The `session` events so far (one per client connection that ended).
    pub fn sessions(&self) -> Vec<serde_json::Value> {
        self.events("session")
    }

    /// Waits for a `session` event whose `reason` is `reason` (→ it).
    pub fn wait_session_reason(
        &self,
        reason: &str,
        timeout: Duration,
    ) -> Option<serde_json::Value> {
        self.wait_event("session", timeout, |e| e["reason"] == reason)
    }

    /// `route` events of the route whose label starts with `prefix` (`ws:DC2`) going `to`
    /// (`down`, `suspect`, `up`) so far.
    pub fn route_events(&self, prefix: &str, to: &str) -> Vec<serde_json::Value> {
        self.events("route")
            .into_iter()
            .filter(|e| route_is(e, prefix) && e["to"] == to)
            .collect()
    }

    /// Waits for the route whose label starts with `prefix` to go down for `failure` (any
    /// failure if `None`) (→ the event).
    pub fn wait_route_down(
        &self,
        prefix: &str,
        failure: Option<&str>,
        timeout: Duration,
    ) -> Option<serde_json::Value> {
        self.wait_event("route", timeout, |e| {
            route_is(e, prefix) && e["to"] == "down" && failure.is_none_or(|f| e["failure"] == f)
        })
    }

    /// Waits for the route whose label starts with `prefix` to come up (proved by a `via`
    /// starting with `via`, any if `None`) (→ the event).
    pub fn wait_route_up(
        &self,
        prefix: &str,
        via: Option<&str>,
        timeout: Duration,
    ) -> Option<serde_json::Value> {
        self.wait_event("route", timeout, |e| {
            route_is(e, prefix)
                && e["to"] == "up"
                && via.is_none_or(|v| e["via"].as_str().is_some_and(|s| s.starts_with(v)))
        })
    }
}

/// True if event `e`'s `label` starts with `prefix` followed by a space, `@` or the end
/// (`ws:DC2` matches `ws:DC2 "x"@…`, not `ws:DC20`).
fn route_is(e: &serde_json::Value, prefix: &str) -> bool {
    e["label"].as_str().is_some_and(|l| {
        l.strip_prefix(prefix)
            .is_some_and(|rest| rest.is_empty() || rest.starts_with([' ', '@', '"']))
    })
}
