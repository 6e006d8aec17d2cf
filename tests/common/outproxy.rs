//! Real outbound proxies from Debian's packages for the `--outbound-proxy` tests: `microsocks`
//! (SOCKS5, with or without RFC 1929 user/password) and `tinyproxy` (HTTP CONNECT, with its own
//! temporary config: our port, `Listen 127.0.0.1`, `Allow 127.0.0.1`, `ConnectPort` lines, an
//! optional `BasicAuth`), each a child process on a free loopback port (or a given one, to
//! start a stopped proxy again), killed on drop; and [`AcceptCounter`], a listener standing in
//! for a stopped proxy's port that counts the connections made to it.
//!
//! Never the system's tinyproxy service: each instance has its own config and port. A missing
//! binary fails the test with the apt package to install (CI installs both in `.ci/run`).
//! Test code: panics on local setup failure.
#![allow(dead_code)]

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use super::{temp_dir, wait_until};

/// Bound on a proxy starting to accept.
const START: Duration = Duration::from_secs(10);

/// Which program runs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// microsocks: SOCKS5.
    Socks5,
    /// tinyproxy: HTTP CONNECT.
    Http,
}

/// A running outbound proxy.
pub struct OutProxy {
    child: Child,
    addr: SocketAddr,
    kind: Kind,
    auth: Option<(String, String)>,
    logs: Arc<Mutex<Vec<String>>>,
    readers: Vec<JoinHandle<()>>,
}

/// The path of `name` in /usr/bin or /usr/sbin (or on PATH). Panics naming the package.
fn program(name: &str) -> PathBuf {
    for dir in ["/usr/bin", "/usr/sbin", "/usr/local/bin"] {
        let p = Path::new(dir).join(name);
        if p.is_file() {
            return p;
        }
    }
    if let Some(path) = std::env::var_os("PATH") {
        for dir in std::env::split_paths(&path) {
            let p = dir.join(name);
            if p.is_file() {
                return p;
            }
        }
    }
    panic!(
        "{name} is not installed: these tests need the Debian package `{name}` \
         (apt-get install {name}; .ci/run installs it)"
    );
}

/// A loopback port free right now.
fn free_port() -> u16 {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
    l.local_addr().expect("local_addr").port()
}

impl OutProxy {
    /// microsocks on a free loopback port, with `-u user -P pass` when `auth` is given.
    pub fn microsocks(auth: Option<(&str, &str)>) -> OutProxy {
        OutProxy::microsocks_on(free_port(), auth)
    }

    /// microsocks on 127.0.0.1:`port` (a proxy started again where a stopped one was).
    pub fn microsocks_on(port: u16, auth: Option<(&str, &str)>) -> OutProxy {
        let mut cmd = Command::new(program("microsocks"));
        cmd.args(["-i", "127.0.0.1", "-p", &port.to_string()]);
        if let Some((u, p)) = auth {
            cmd.args(["-u", u, "-P", p]);
        }
        OutProxy::spawn(cmd, port, Kind::Socks5, auth)
    }

    /// tinyproxy on a free loopback port allowing CONNECT only to `connect_ports` (tinyproxy
    /// answers 403 for any other port), with `BasicAuth user pass` when `auth` is given.
    pub fn tinyproxy(connect_ports: &[u16], auth: Option<(&str, &str)>) -> OutProxy {
        let port = free_port();
        let mut conf = format!(
            "Port {port}\nListen 127.0.0.1\nTimeout 30\nMaxClients 64\nAllow 127.0.0.1\n\
             LogLevel Connect\n"
        );
        for p in connect_ports {
            conf.push_str(&format!("ConnectPort {p}\n"));
        }
        if let Some((u, p)) = auth {
            conf.push_str(&format!("BasicAuth {u} {p}\n"));
        }
        let path = temp_dir().join("tinyproxy.conf");
        std::fs::write(&path, conf).expect("write tinyproxy.conf");
        let mut cmd = Command::new(program("tinyproxy"));
        cmd.arg("-d").arg("-c").arg(&path);
        OutProxy::spawn(cmd, port, Kind::Http, auth)
    }

    fn spawn(mut cmd: Command, port: u16, kind: Kind, auth: Option<(&str, &str)>) -> OutProxy {
        cmd.stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().unwrap_or_else(|e| panic!("spawn {cmd:?}: {e}"));
        let logs = Arc::new(Mutex::new(Vec::new()));
        let mut readers = Vec::new();
        for out in [
            child
                .stdout
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
            child
                .stderr
                .take()
                .map(|o| Box::new(o) as Box<dyn std::io::Read + Send>),
        ]
        .into_iter()
        .flatten()
        {
            let logs = logs.clone();
            readers.push(std::thread::spawn(move || {
                for line in BufReader::new(out).lines() {
                    match line {
                        Ok(l) => logs.lock().unwrap_or_else(|e| e.into_inner()).push(l),
                        Err(_) => break,
                    }
                }
            }));
        }
        let addr: SocketAddr = ([127, 0, 0, 1], port).into();
        let mut p = OutProxy {
            child,
            addr,
            kind,
            auth: auth.map(|(u, p)| (u.to_string(), p.to_string())),
            logs,
            readers,
        };
        let up = wait_until(START, || {
            if let Ok(Some(_)) = p.child.try_wait() {
                return true;
            }
            TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok()
        });
        if let Ok(Some(status)) = p.child.try_wait() {
            panic!("{cmd:?} exited at start ({status}):\n{}", p.dump());
        }
        assert!(
            up,
            "{cmd:?} did not accept on {addr} within {START:?}:\n{}",
            p.dump()
        );
        p
    }

    /// Where it listens.
    pub fn addr(&self) -> SocketAddr {
        self.addr
    }

    /// Stops the proxy process (`SIGSTOP`): a wedged proxy. The kernel still completes TCP
    /// handshakes into its listen queue, but nothing answers. [`OutProxy::resume`] undoes it.
    pub fn pause(&self) {
        self.signal(libc::SIGSTOP);
    }

    /// Lets a [`OutProxy::pause`]d proxy run again (`SIGCONT`).
    pub fn resume(&self) {
        self.signal(libc::SIGCONT);
    }

    fn signal(&self, sig: libc::c_int) {
        // SAFETY: kill(2) on our own child's pid; no memory is shared.
        let rc = unsafe { libc::kill(self.child.id() as libc::pid_t, sig) };
        assert_eq!(rc, 0, "kill({sig}): {}", std::io::Error::last_os_error());
    }

    /// The `--outbound-proxy` URL for it with its own credentials.
    pub fn url(&self) -> String {
        match &self.auth {
            Some((u, p)) => self.url_with(u, p),
            None => format!("{}://{}", self.scheme(), self.addr),
        }
    }

    /// The URL with other credentials (a wrong password).
    pub fn url_with(&self, user: &str, pass: &str) -> String {
        format!("{}://{user}:{pass}@{}", self.scheme(), self.addr)
    }

    fn scheme(&self) -> &'static str {
        match self.kind {
            Kind::Socks5 => "socks5",
            Kind::Http => "http",
        }
    }

    /// Connections it opened to `port` on 127.0.0.1, from its own log (microsocks:
    /// `connected to 127.0.0.1:P`; tinyproxy: `CONNECT 127.0.0.1:P`).
    pub fn connects_to(&self, port: u16) -> usize {
        let needle = match self.kind {
            Kind::Socks5 => format!("connected to 127.0.0.1:{port}"),
            Kind::Http => format!("CONNECT 127.0.0.1:{port} "),
        };
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .iter()
            .filter(|l| l.contains(&needle))
            .count()
    }

    /// Waits until [`OutProxy::connects_to`] reaches `n` (log lines may trail the traffic).
    pub fn wait_connects(&self, port: u16, n: usize, timeout: Duration) -> bool {
        wait_until(timeout, || self.connects_to(port) >= n)
    }

    /// Everything it logged.
    pub fn dump(&self) -> String {
        self.logs
            .lock()
            .unwrap_or_else(|e| e.into_inner())
            .join("\n")
    }
}

/// A listener standing in for a stopped proxy's port: it counts every connection made to it
/// and closes each at once (the dialler sees its proxy handshake cut: the proxy's failure, as
/// with a refused connect), so a test can count the dials a dead proxy gets.
pub struct AcceptCounter {
    count: Arc<AtomicUsize>,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl AcceptCounter {
    /// Listens on `addr` (the port a proxy just left).
    pub fn bind(addr: SocketAddr) -> AcceptCounter {
        let l = TcpListener::bind(addr).unwrap_or_else(|e| panic!("bind {addr}: {e}"));
        l.set_nonblocking(true).expect("nonblocking listener");
        let count = Arc::new(AtomicUsize::new(0));
        let stop = Arc::new(AtomicBool::new(false));
        let (c, s) = (count.clone(), stop.clone());
        let thread = std::thread::spawn(move || {
            while !s.load(Ordering::Relaxed) {
                match l.accept() {
                    Ok((conn, _)) => {
                        c.fetch_add(1, Ordering::Relaxed);
                        drop(conn);
                    }
                    // Polling a nonblocking listener: a short pause between empty polls.
                    Err(_) => std::thread::sleep(Duration::from_millis(2)),
                }
            }
        });
        AcceptCounter {
            count,
            stop,
            thread: Some(thread),
        }
    }

    /// Connections accepted so far.
    pub fn count(&self) -> usize {
        self.count.load(Ordering::Relaxed)
    }

    /// Stops listening (the port is free again); returns the final count.
    pub fn close(mut self) -> usize {
        self.shut();
        self.count()
    }

    fn shut(&mut self) {
        self.stop.store(true, Ordering::Relaxed);
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

impl Drop for AcceptCounter {
    fn drop(&mut self) {
        self.shut();
    }
}

impl Drop for OutProxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
        for r in self.readers.drain(..) {
            let _ = r.join();
        }
    }
}
