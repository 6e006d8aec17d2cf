//! The client listener's lifecycle: the first bind and `--bind-retry` (an address not assigned
//! yet at boot), the swap to a new address at reload (the new one is bound before the old one
//! is closed), and closing it for the drain.
//!
//! [`BindRetry`] is the sans-IO part (which bind errors are retried, and when), and so is
//! [`bind_error`], the one wording of a failed bind (the address, the OS error and the likely
//! fix) for every listener (`--host`/`--port`, `--transparent`, `--socks5`), at start and at a
//! reload; the [`Reactor`] methods here are its shell. Owns nothing else: accepting is
//! `mod.rs`'s.

use std::io;
use std::net::SocketAddr;

use log::{info, warn};
use mio::net::TcpListener;
use mio::{Interest, Registry};

use super::Reactor;
use crate::token::LISTENER;

/// What to do after a failed bind (see [`BindRetry::failed`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum AfterBindError {
    /// Keep running without a listener; try again at this time (ms).
    RetryAt(u64),
    /// Give up: the error is fatal at start (or rejects a reload).
    Fatal,
}

/// `--bind-retry` (0 = off) and the time of the next attempt while the listener is not bound.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BindRetry {
    every_ms: u64,
    next_at: Option<u64>,
}

impl BindRetry {
    /// Retry every `every_ms` (0 = never retry).
    pub fn new(every_ms: u64) -> BindRetry {
        BindRetry {
            every_ms,
            next_at: None,
        }
    }

    /// A bind failed with `e` at `now` (ms): only "address not available" (EADDRNOTAVAIL: the
    /// interface is not up or has not got its address yet) is retried, and only with a retry
    /// interval; every other error (in use, permission) is fatal.
    pub fn failed(&mut self, e: &io::Error, now: u64) -> AfterBindError {
        if self.every_ms == 0 || e.kind() != io::ErrorKind::AddrNotAvailable {
            self.next_at = None;
            return AfterBindError::Fatal;
        }
        let at = now + self.every_ms;
        self.next_at = Some(at);
        AfterBindError::RetryAt(at)
    }

    /// Schedules the next attempt one interval after `now` (ms), whatever the last error was
    /// (the process is already running without a listener).
    pub fn schedule(&mut self, now: u64) {
        self.next_at = Some(now + self.every_ms.max(1));
    }

    /// The bind succeeded: no more retries.
    pub fn bound(&mut self) {
        self.next_at = None;
    }

    /// When the next attempt is due (ms), while one is scheduled.
    pub fn next_deadline(&self) -> Option<u64> {
        self.next_at
    }

    /// Whether an attempt is due at `now`.
    pub fn due(&self, now: u64) -> bool {
        self.next_at.is_some_and(|t| t <= now)
    }

    /// A reload's new interval (ms); a scheduled attempt keeps its time.
    pub fn set_every(&mut self, every_ms: u64) {
        self.every_ms = every_ms;
    }

    /// Whether the listener is waiting for its address.
    pub fn waiting(&self) -> bool {
        self.next_at.is_some()
    }
}

/// The flags that set a listener's address, for [`bind_error`]'s hint: the proxy listener's
/// (`--host`, `--port`) or an extra way's (`--transparent`, `--socks5`, which carry both).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ListenFlags {
    /// The flag naming the address (`--host`).
    pub host: &'static str,
    /// The flag naming the port (`--port`).
    pub port: &'static str,
    /// What listens there, said after the address (`""`, ` (transparent)`).
    pub what: &'static str,
}

/// The proxy listener's flags.
pub const PROXY_FLAGS: ListenFlags = ListenFlags {
    host: "--host",
    port: "--port",
    what: "",
};

/// A failed bind of `addr` as one line: `cannot listen on ADDR: OS error: likely fix`. The
/// error keeps `e`'s kind (the caller's exit code and retry rule read it). The fixes:
/// address in use → another program (often a second proxy) holds the port: stop it, ask a
/// running proxy with `ctl status`, or pick another port; permission denied on a port below
/// 1024 → root (or `CAP_NET_BIND_SERVICE`) or a port of 1024 and up; address not available →
/// not an address of this machine: check the host flag (`--bind-retry` waits for it at boot).
pub fn bind_error(e: &io::Error, addr: SocketAddr, flags: ListenFlags) -> io::Error {
    let ListenFlags { host, port, what } = flags;
    let n = addr.port();
    let hint = match e.kind() {
        io::ErrorKind::AddrInUse => format!(
            "another program holds port {n} (a tg-ws-proxy already running? `tg-ws-proxy ctl \
             status` asks it, `ss -ltnp 'sport = :{n}'` names it): stop it, or pick another \
             {port}"
        ),
        io::ErrorKind::PermissionDenied if n < 1024 => format!(
            "ports below 1024 need root (or CAP_NET_BIND_SERVICE): run as root, or use a \
             {port} of 1024 or more (the default is 1443)"
        ),
        io::ErrorKind::PermissionDenied => {
            "refused by the system's policy (SELinux, AppArmor, a sandbox)".to_string()
        }
        io::ErrorKind::AddrNotAvailable => format!(
            "{} is not an address of this machine: check {host} (`ip addr` lists the \
             addresses; 0.0.0.0 listens on all), or let --bind-retry D wait for it at boot",
            addr.ip()
        ),
        _ => return io::Error::new(e.kind(), format!("cannot listen on {addr}{what}: {e}")),
    };
    io::Error::new(
        e.kind(),
        format!("cannot listen on {addr}{what}: {e}: {hint}"),
    )
}

/// Binds a listener at `addr` and registers it under `LISTENER`.
///
/// Errors: the OS bind/listen error, or a registration failure.
pub fn bind(addr: SocketAddr, registry: &Registry) -> io::Result<TcpListener> {
    let mut l = TcpListener::bind(addr)?;
    registry.register(&mut l, LISTENER, Interest::READABLE)?;
    Ok(l)
}

impl Reactor {
    /// A due `--bind-retry` attempt (or a SIGHUP while waiting): binds `cfg.listen`; on success
    /// logs `listening on ADDR` and the ladder learns the address; on another EADDRNOTAVAIL
    /// schedules the next try; any other error is logged and retried too (the process is
    /// already up without a listener; the line says why).
    pub(super) fn retry_bind(&mut self) {
        let addr = self.s.cfg.listen;
        match bind(addr, self.poll.registry()) {
            Ok(l) => {
                self.bind_retry.bound();
                let listen = l.local_addr().unwrap_or(addr);
                self.listener = Some(l);
                self.accept = super::Accept::Pending;
                info!("listening on {listen} (max {} sessions)", self.capacity);
                if listen != self.s.listen {
                    self.s.listen = listen;
                    let mut ladder_cfg = self.s.cfg.clone();
                    ladder_cfg.listen = listen;
                    self.s.ladder.reconfigure(&ladder_cfg, self.now);
                }
            }
            Err(e) => {
                // Still waiting: only an error other than "not assigned yet" is worth a line.
                if e.kind() != io::ErrorKind::AddrNotAvailable {
                    warn!("{} (retrying)", bind_error(&e, addr, PROXY_FLAGS));
                }
                self.bind_retry.schedule(self.now);
            }
        }
    }

    /// Reload's listen address change, step 1: a new listener bound at `addr` (registered
    /// under `LISTENER` beside the old one).
    ///
    /// Errors: the bind error, as a one-line reason naming the address.
    pub(super) fn bind_new(&mut self, addr: SocketAddr) -> Result<TcpListener, String> {
        bind(addr, self.poll.registry()).map_err(|e| bind_error(&e, addr, PROXY_FLAGS).to_string())
    }

    /// Reload's listen address change, step 2: the new listener replaces the old one, which is
    /// deregistered and closed (connections it had not accepted yet are refused by the OS; live
    /// sessions are untouched). Returns the new local address.
    pub(super) fn swap_listener(&mut self, new: TcpListener) -> SocketAddr {
        self.close_listener();
        let addr = new.local_addr().unwrap_or(self.s.cfg.listen);
        self.listener = Some(new);
        self.accept = super::Accept::Pending;
        info!("listening on {addr} (max {} sessions)", self.capacity);
        addr
    }

    /// Deregisters and closes the listener, if any.
    pub(super) fn close_listener(&mut self) {
        if let Some(mut l) = self.listener.take() {
            let _ = self.poll.registry().deregister(&mut l);
        }
        if self.accept == super::Accept::Pending {
            self.accept = super::Accept::Idle;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn only_address_not_available_is_retried_and_only_with_an_interval() {
        let unassigned = io::Error::from(io::ErrorKind::AddrNotAvailable);
        let in_use = io::Error::from(io::ErrorKind::AddrInUse);
        let denied = io::Error::from(io::ErrorKind::PermissionDenied);
        let mut off = BindRetry::new(0);
        assert_eq!(off.failed(&unassigned, 100), AfterBindError::Fatal);
        assert!(!off.waiting());
        let mut r = BindRetry::new(2_000);
        assert_eq!(r.failed(&in_use, 100), AfterBindError::Fatal);
        assert_eq!(r.failed(&denied, 100), AfterBindError::Fatal);
        assert_eq!(r.next_deadline(), None);
        // The OS error code itself (EADDRNOTAVAIL) maps to the same kind.
        let os = io::Error::from_raw_os_error(libc::EADDRNOTAVAIL);
        assert_eq!(r.failed(&os, 100), AfterBindError::RetryAt(2_100));
    }

    /// Issue 23 trap: "address in use" / "permission denied" came without a hint.
    #[test]
    fn bind_errors_name_the_address_and_the_likely_fix_and_keep_their_kind() {
        let addr: SocketAddr = "192.168.1.1:1443".parse().unwrap();
        let os = |code| io::Error::from_raw_os_error(code);
        let e = bind_error(&os(libc::EADDRINUSE), addr, PROXY_FLAGS);
        assert_eq!(e.kind(), io::ErrorKind::AddrInUse);
        let t = e.to_string();
        assert!(t.starts_with("cannot listen on 192.168.1.1:1443: "), "{t}");
        assert!(t.contains("ctl") && t.contains("another --port"), "{t}");
        let low: SocketAddr = "0.0.0.0:443".parse().unwrap();
        let t = bind_error(&os(libc::EACCES), low, PROXY_FLAGS).to_string();
        assert!(t.contains("below 1024") && t.contains("root"), "{t}");
        let t = bind_error(&os(libc::EACCES), addr, PROXY_FLAGS).to_string();
        assert!(!t.contains("below 1024"), "{t}");
        let e = bind_error(&os(libc::EADDRNOTAVAIL), addr, PROXY_FLAGS);
        assert_eq!(e.kind(), io::ErrorKind::AddrNotAvailable);
        assert!(e.to_string().contains("check --host"), "{e}");
        let socks = ListenFlags {
            host: "--socks5",
            port: "--socks5",
            what: " (socks5)",
        };
        let t = bind_error(&os(libc::EADDRINUSE), addr, socks).to_string();
        assert!(
            t.starts_with("cannot listen on 192.168.1.1:1443 (socks5): "),
            "{t}"
        );
        assert!(t.ends_with("another --socks5"), "{t}");
        let other = bind_error(&os(libc::EMFILE), addr, PROXY_FLAGS).to_string();
        assert!(
            other.starts_with("cannot listen on 192.168.1.1:1443: "),
            "{other}"
        );
    }

    #[test]
    fn a_waiting_bind_is_due_every_interval_until_it_binds() {
        let e = io::Error::from(io::ErrorKind::AddrNotAvailable);
        let mut r = BindRetry::new(500);
        assert_eq!(r.failed(&e, 1_000), AfterBindError::RetryAt(1_500));
        assert!(r.waiting() && !r.due(1_499) && r.due(1_500));
        assert_eq!(r.failed(&e, 1_500), AfterBindError::RetryAt(2_000));
        r.set_every(100);
        assert_eq!(
            r.next_deadline(),
            Some(2_000),
            "a scheduled try keeps its time"
        );
        assert_eq!(r.failed(&e, 2_000), AfterBindError::RetryAt(2_100));
        r.bound();
        assert!(!r.waiting() && !r.due(u64::MAX));
    }
}
