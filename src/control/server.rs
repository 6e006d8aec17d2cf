//! The control socket's shell (`--control-socket PATH`): the unix listener, its connections,
//! and the glue from a request line to the sans-IO core in `crate::control`.
//!
//! Start ([`Control::open`]): a socket file left by a dead instance (connect refused) is
//! removed; one where another instance answers, or a path that is not a socket, refuses the
//! start. The socket is bound, chmod-ed to 0600 and only then listens: `chmod` on the path
//! between `bind` and `listen` (not a process-wide umask, which would race with any other file
//! the process creates) closes the window in which another user could connect, because a unix
//! socket refuses connections until `listen`. The file is removed at exit if it is still ours.
//!
//! Each connection (token `token::control_conn(i)`, at most `token::MAX_CONTROL_CONNS`; one
//! more is accepted and closed at once) sends one request line; it has `--control-timeout`
//! (`Config::control_timeout`, taken at accept) in all to send it and take the reply, which is
//! written without blocking (writable interest kept until done), then the connection is
//! closed. Verbs act through the ladder (`pin`, `unpin`,
//! `probe`), [`Reactor::reload`] (`reload`), or read a [`Status`] snapshot gathered here
//! (`status`, `metrics`): slab, ladder, stats, `/proc/self/fd`, `getrlimit`, RSS.
//!
//! The file lives beside its core, in `src/control/`, but is compiled as the reactor's child
//! module `reactor::control` (`#[path]` in `src/reactor/mod.rs`): it is an `impl Reactor` that
//! reads the slab, the ladder and the stats, and as a child of `control` it would make the
//! core import the reactor (an import circle). The core never imports this file.

use std::fs;
use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::fs::{FileTypeExt, MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};

use log::{debug, info, warn};
use mio::net::{UnixListener, UnixStream};
use mio::{Interest, Registry, Token};
use socket2::{Domain, SockAddr, Socket, Type};

use crate::config::{Tier, WayIn};
use crate::control::request::{self, PinTarget, Request, RouteSel, MAX_REQUEST};
use crate::control::status::{AccountStatus, Counters, Status, TelegramStatus};
use crate::control::{self as core, metrics, render};
use crate::route::ladder::{Pin, ProbeNow, RouteId};
use crate::route::quota::Hold;
use crate::token::{self, CONTROL, MAX_CONTROL_CONNS};

use super::Reactor;

/// Listen backlog of the control socket.
const BACKLOG: i32 = 16;

/// The control listener and its connections.
pub(super) struct Control {
    listener: UnixListener,
    path: PathBuf,
    /// (device, inode) of the socket file bound: removed at exit only if the path still is it.
    ident: (u64, u64),
    conns: Vec<Option<CtlConn>>,
}

/// One control connection.
struct CtlConn {
    stream: UnixStream,
    /// Request bytes so far (at most `MAX_REQUEST + 1`).
    request: Vec<u8>,
    /// The reply, once built, and how much of it is written.
    reply: Option<Vec<u8>>,
    written: usize,
    /// Closed at this time (ms) whatever it is doing.
    deadline: u64,
}

impl Control {
    /// Binds the control socket at `path` (mode 0600) and registers it as `token::CONTROL`.
    /// Errors (each names the path): another instance answers there, the path exists and is
    /// not a socket, or the OS error of `connect`/`unlink`/`bind`/`chmod`/`listen`.
    pub(super) fn open(path: &Path, registry: &Registry) -> io::Result<Control> {
        let named =
            |e: io::Error| io::Error::other(format!("control socket {}: {e}", path.display()));
        clear_stale(path).map_err(named)?;
        let sock = Socket::new(Domain::UNIX, Type::STREAM, None).map_err(named)?;
        sock.bind(&SockAddr::unix(path).map_err(named)?)
            .map_err(named)?;
        let ready = (|| {
            fs::set_permissions(path, fs::Permissions::from_mode(0o600))?;
            sock.listen(BACKLOG)?;
            sock.set_nonblocking(true)?;
            fs::symlink_metadata(path)
        })();
        let meta = match ready {
            Ok(m) => m,
            Err(e) => {
                let _ = fs::remove_file(path);
                return Err(named(e));
            }
        };
        let std = std::os::unix::net::UnixListener::from(OwnedFd::from(sock));
        let mut listener = UnixListener::from_std(std);
        if let Err(e) = registry.register(&mut listener, CONTROL, Interest::READABLE) {
            let _ = fs::remove_file(path);
            return Err(named(e));
        }
        info!("control socket on {} (mode 0600)", path.display());
        Ok(Control {
            listener,
            path: path.to_path_buf(),
            ident: (meta.dev(), meta.ino()),
            conns: (0..MAX_CONTROL_CONNS).map(|_| None).collect(),
        })
    }

    /// The earliest connection deadline, ms.
    pub(super) fn next_deadline(&self) -> Option<u64> {
        self.conns.iter().flatten().map(|c| c.deadline).min()
    }
}

impl Drop for Control {
    fn drop(&mut self) {
        let ours = fs::symlink_metadata(&self.path).is_ok_and(|m| (m.dev(), m.ino()) == self.ident);
        if ours {
            let _ = fs::remove_file(&self.path);
        }
    }
}

/// Makes `path` free for a new socket: nothing there → Ok; a socket nobody answers on
/// (connect refused) → removed; a live one or a non-socket → an error saying so.
fn clear_stale(path: &Path) -> io::Result<()> {
    let meta = match fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(e),
    };
    if !meta.file_type().is_socket() {
        return Err(io::Error::other(
            "the path exists and is not a socket; refusing to replace it",
        ));
    }
    match std::os::unix::net::UnixStream::connect(path) {
        Ok(_) => Err(io::Error::other(
            "another instance answers there; refusing to start a second one on it",
        )),
        Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
            fs::remove_file(path)?;
            info!(
                "control socket {}: removed a stale socket file (nobody answered on it)",
                path.display()
            );
            Ok(())
        }
        Err(e) => Err(e),
    }
}

impl Reactor {
    /// A socket event of the control listener or one of its connections.
    pub(super) fn on_control(&mut self, tok: Token) {
        if tok == CONTROL {
            self.accept_control();
        } else if let Some(i) = token::control_index(tok) {
            self.serve_control(i);
        }
    }

    /// Closes control connections past their deadline.
    pub(super) fn expire_control(&mut self) {
        let now = self.now;
        let registry = self.poll.registry();
        let Some(c) = self.control.as_mut() else {
            return;
        };
        for slot in &mut c.conns {
            if slot.as_ref().is_some_and(|k| k.deadline <= now) {
                if let Some(mut k) = slot.take() {
                    debug!("control: a client took longer than --control-timeout; closed");
                    let _ = registry.deregister(&mut k.stream);
                }
            }
        }
    }

    fn accept_control(&mut self) {
        let now = self.now;
        let timeout_ms = self.s.cfg.control_timeout.as_millis() as u64;
        let mut fresh = Vec::new();
        {
            let registry = self.poll.registry();
            let Some(c) = self.control.as_mut() else {
                return;
            };
            loop {
                let mut stream = match c.listener.accept() {
                    Ok((s, _)) => s,
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) => {
                        warn!("control socket: accept: {e}");
                        break;
                    }
                };
                let Some(i) = c.conns.iter().position(Option::is_none) else {
                    debug!("control: {MAX_CONTROL_CONNS} connections open; refused a new one");
                    refuse_busy(&mut stream);
                    continue; // dropped: closed at once
                };
                let tok = token::control_conn(i);
                if let Err(e) = registry.register(&mut stream, tok, Interest::READABLE) {
                    warn!("control socket: cannot register a connection: {e}");
                    continue;
                }
                c.conns[i] = Some(CtlConn {
                    stream,
                    request: Vec::with_capacity(64),
                    reply: None,
                    written: 0,
                    deadline: now + timeout_ms,
                });
                fresh.push(i);
            }
        }
        // The request may already be waiting.
        for i in fresh {
            self.serve_control(i);
        }
    }

    /// Reads connection `i`'s request, answers it, writes the reply; closes it when done.
    fn serve_control(&mut self, i: usize) {
        let Some(mut k) = self.control.as_mut().and_then(|c| c.conns[i].take()) else {
            return;
        };
        if self.step_control(&mut k, i) {
            if let Some(c) = self.control.as_mut() {
                c.conns[i] = Some(k);
            }
        } else {
            let _ = self.poll.registry().deregister(&mut k.stream);
        }
    }

    /// One turn of a control connection; false when it is finished (or broken).
    fn step_control(&mut self, k: &mut CtlConn, i: usize) -> bool {
        if k.reply.is_none() {
            let mut buf = [0u8; MAX_REQUEST + 1];
            let mut eof = false;
            while !k.request.contains(&b'\n') && k.request.len() <= MAX_REQUEST {
                let room = MAX_REQUEST + 1 - k.request.len();
                match k.stream.read(&mut buf[..room]) {
                    Ok(0) => {
                        eof = true;
                        break;
                    }
                    Ok(n) => k.request.extend_from_slice(&buf[..n]),
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => break,
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                    Err(e) => {
                        debug!("control: read: {e}");
                        return false;
                    }
                }
            }
            let line = match k.request.iter().position(|&b| b == b'\n') {
                Some(p) => k.request[..=p].to_vec(),
                None if k.request.len() > MAX_REQUEST || (eof && !k.request.is_empty()) => {
                    k.request.clone()
                }
                None if eof => return false,
                None => return true,
            };
            k.reply = Some(self.control_reply(&line));
            let tok = token::control_conn(i);
            if let Err(e) = self
                .poll
                .registry()
                .reregister(&mut k.stream, tok, Interest::WRITABLE)
            {
                debug!("control: reregister: {e}");
                return false;
            }
        }
        let Some(reply) = &k.reply else {
            return false;
        };
        while k.written < reply.len() {
            match k.stream.write(&reply[k.written..]) {
                Ok(0) => return false,
                Ok(n) => k.written += n,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return true,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    debug!("control: write: {e}");
                    return false;
                }
            }
        }
        // Unread bytes past the request (an over-long line) would turn the close into a reset
        // that can beat the reply to the client: discard what is queued (64 KiB at most).
        let mut sink = [0u8; 512];
        for _ in 0..128 {
            if !matches!(k.stream.read(&mut sink), Ok(n) if n > 0) {
                break;
            }
        }
        let _ = k.stream.shutdown(std::net::Shutdown::Write);
        false
    }

    /// The reply to one request line.
    fn control_reply(&mut self, line: &[u8]) -> Vec<u8> {
        let req = match request::parse(line) {
            Ok(r) => r,
            Err(e) => {
                debug!("control: bad request: {e}");
                return core::error(&e);
            }
        };
        match req {
            Request::Status { json } => {
                let s = self.status();
                core::ok(&if json {
                    render::json(&s)
                } else {
                    render::table(&s)
                })
            }
            Request::Metrics => core::ok(&metrics::render(&self.status())),
            Request::Pin(target) => self.pin_reply(target),
            Request::Unpin => match self.s.ladder.unpin() {
                Some(p) => core::ok(&format!("unpinned {p}; new sessions follow the tier order")),
                None => core::ok("nothing was pinned"),
            },
            Request::Probe(sel) => self.probe_reply(sel),
            // `reload` logs its own line and counts it; the reply carries the same line.
            Request::Reload => match self.reload() {
                Ok(line) => core::ok(&line),
                Err(why) => core::error(&format!("reload: rejected: {why}")),
            },
        }
    }

    /// `pin TIER|ROUTE`: the pin set in the ladder, or why not (an unused tier, a selector
    /// matching no route or several).
    fn pin_reply(&mut self, target: PinTarget) -> Vec<u8> {
        let pin = match target {
            PinTarget::Tier(t) => match self.tier_unused(t) {
                Some(why) => return core::error(&format!("pin {}: {why}", t.name())),
                None => Pin::Tier(t),
            },
            PinTarget::Route(sel) => match self.select(sel).as_deref() {
                Ok([id]) => Pin::Route(*id),
                Ok(ids) => {
                    return core::error(&format!(
                        "{} routes match; pin one of them by id ({})",
                        ids.len(),
                        ids.iter()
                            .map(|i| format!("#{i}"))
                            .collect::<Vec<_>>()
                            .join(", ")
                    ))
                }
                Err(e) => return core::error(e),
            },
        };
        match self.s.ladder.pin(pin) {
            Ok(()) => core::ok(&format!(
                "pinned {}; new sessions prefer it while it is usable",
                self.pin_label(pin)
            )),
            Err(e) => core::error(&e),
        }
    }

    /// `probe ROUTE`: a probe of every matching route now; `ok` when at least one started or
    /// was already running, one line per route either way.
    fn probe_reply(&mut self, sel: RouteSel) -> Vec<u8> {
        let now = self.now;
        let ids = match self.select(sel) {
            Ok(ids) => ids,
            Err(e) => return core::error(&e),
        };
        let mut lines = Vec::new();
        let mut any = false;
        for id in ids {
            let label = self.s.ladder.route(id).label();
            match self.s.ladder.probe_now(id, now) {
                Ok(ProbeNow::Scheduled) => {
                    any = true;
                    lines.push(format!("probe #{id} {label}: started"));
                }
                Ok(ProbeNow::AlreadyRunning) => {
                    any = true;
                    lines.push(format!("probe #{id} {label}: already running"));
                }
                Err(e) => lines.push(format!("probe #{id} {label}: not run: {e}")),
            }
        }
        if any {
            core::ok(&lines.join("\n"))
        } else {
            core::error(&lines.join("; "))
        }
    }

    /// The route ids `sel` names. Errors: no such route id; no route of that tier toward
    /// that DC (the tier is not configured).
    fn select(&mut self, sel: RouteSel) -> Result<Vec<RouteId>, String> {
        let ladder = &mut self.s.ladder;
        match sel {
            RouteSel::Id(id) if id < ladder.route_count() => Ok(vec![id]),
            RouteSel::Id(id) => Err(format!(
                "no route #{id} ({} exist; see ctl status)",
                ladder.route_count()
            )),
            RouteSel::TierDc(tier, dc) => {
                let ids = ladder.select(tier, dc);
                if ids.is_empty() {
                    Err(format!(
                        "no {} route toward {dc} (is the tier configured?)",
                        tier.name()
                    ))
                } else {
                    Ok(ids)
                }
            }
        }
    }

    /// Why tier `t` can carry no session here (not in `--tier-order`, or no Worker / CF
    /// domain configured for it), if so.
    fn tier_unused(&self, t: Tier) -> Option<String> {
        let cfg = &self.s.cfg;
        let media = cfg.media_tier_order.as_deref().unwrap_or(&[]);
        if !cfg.tier_order.contains(&t) && !media.contains(&t) {
            let order: Vec<&str> = cfg.tier_order.iter().map(|t| t.name()).collect();
            return Some(format!(
                "the tier is not in --tier-order ({}) or --media-tier-order",
                order.join(",")
            ));
        }
        match t {
            Tier::Worker if cfg.worker_domains.is_empty() => {
                Some("no --cf-worker-domain is configured".into())
            }
            Tier::CfProxy if !cfg.tier_configured(t) => Some("no --cf-domain is configured".into()),
            Tier::CfProxyWs if !cfg.cfproxy_ws => Some("off (--cfproxy-ws turns it on)".into()),
            Tier::CfProxyWs if !cfg.tier_configured(t) => {
                Some("no --cf-domain is configured".into())
            }
            Tier::Front if !cfg.tier_configured(t) => {
                Some("no --fronting-domain is configured".into())
            }
            Tier::Mtproto if !cfg.tier_configured(t) => {
                Some("no --mtproto-proxy is configured".into())
            }
            _ => None,
        }
    }

    /// `tier tcp`, or `route #3 ws:DC2 …` with the route's label.
    fn pin_label(&self, p: Pin) -> String {
        match p {
            Pin::Tier(_) => p.to_string(),
            Pin::Route(id) => format!("{p} {}", self.s.ladder.route(id).label()),
        }
    }

    /// The status snapshot at this loop iteration's `now`.
    fn status(&self) -> Status {
        let now = self.now;
        let s = &self.s;
        let mut per_tier = [0usize; Tier::COUNT];
        let mut waiting_on_client = 0;
        let mut ways = WayIn::ALL.map(|w| (self.way_listen(w), 0));
        let mut dcs = std::collections::BTreeMap::new();
        for (_, conn) in self.slab.iter() {
            if let Some(t) = conn.relaying_tier() {
                per_tier[t.index()] += 1;
            }
            waiting_on_client += usize::from(conn.waits_on_client());
            ways[conn.way().index()].1 += 1;
            if let Some(dc) = conn.dc() {
                *dcs.entry(dc.label()).or_insert(0) += 1;
            }
        }
        let mut counters = Counters::from_stats(&s.stats);
        // What the stats line copies in when it is written, taken fresh.
        counters.probes_deferred = s.ladder.counters.deferred;
        counters.proxy_failures = s.ladder.counters.proxy_failures;
        counters.unpaced = s.ladder.unpaced();
        let g = s.gate.counters();
        counters.tls[1..].copy_from_slice(&[
            g.replays,
            g.stale,
            g.accepted_unchecked,
            g.evicted_early,
        ]);
        let budgets = s
            .cfg
            .worker_domains
            .iter()
            .zip(s.ladder.budgets_left(now))
            .map(|(ep, left)| {
                let host = crate::route::table::redact(&ep.host);
                (format!("{host}:{}", ep.port), left)
            })
            .collect();
        let accounts = s
            .ladder
            .accounts(now)
            .into_iter()
            .map(|g| AccountStatus {
                name: crate::route::quota::redact_account(&g.name),
                workers: g
                    .members
                    .iter()
                    .filter_map(|&w| s.cfg.worker_domains.get(w))
                    .map(|ep| format!("{}:{}", crate::route::table::redact(&ep.host), ep.port))
                    .collect(),
                held: g.held.map(|(h, ms)| {
                    let why = match h {
                        Hold::DailyQuota => "daily-quota",
                        Hold::RetryAfter(_) => "retry-after",
                    };
                    (why, ms)
                }),
                requests_today: g.requests_today,
            })
            .collect();
        Status {
            version: env!("CARGO_PKG_VERSION"),
            uptime_ms: now.saturating_sub(1),
            listen: s.listen,
            pin: s.ladder.pinned().map(|p| self.pin_label(p)),
            sessions_active: self.slab.len(),
            sessions_capacity: self.capacity,
            sessions_per_tier: per_tier,
            sessions_waiting_on_client: waiting_on_client,
            routes: s.ladder.snapshot(now),
            edges: s.ladder.edges_status(now),
            budgets,
            accounts,
            fds_used: fds_used(),
            fds_limit: fds_limit(),
            rss_kib: crate::stats::rss_kib(),
            reloads: Some((s.stats.reloads, s.stats.reloads_rejected)),
            counters,
            shared_list: self.cflist_status(),
            dns: self.doh.status(s.dns.counters(), now),
            tg_ranges: self.tgranges_status(),
            frozen: s
                .stats
                .recent_frozen
                .iter()
                .map(|f| (*f, now.saturating_sub(f.at_ms)))
                .collect(),
            ways,
            dcs: dcs.into_iter().collect(),
            unknown_destinations: (s.unknown_dsts.list().into_iter())
                .map(|(ip, n, at)| (ip, n, now.saturating_sub(at)))
                .collect(),
            learned_dcs: s
                .dc_table
                .learned()
                .map(|(ip, dc)| (ip, dc.label()))
                .collect(),
            telegram: telegram_status(&s.ladder, now),
        }
    }
}

/// The ladder's verdict whether Telegram is reachable, as `ctl status` shows it.
fn telegram_status<U: crate::route::pool::Pooled>(
    ladder: &crate::route::ladder::Ladder<U>,
    now: u64,
) -> TelegramStatus {
    let (state, for_ms, tried) = ladder.telegram(now);
    TelegramStatus {
        verdict: state.name(),
        for_ms,
        tried: (tried.into_iter())
            .map(|t| (t.tier.name(), t.routes, t.failure.to_string()))
            .collect(),
    }
}

/// Open descriptors of this process (`/proc/self/fd`, without the one reading it).
fn fds_used() -> Option<u64> {
    let n = fs::read_dir("/proc/self/fd").ok()?.count() as u64;
    Some(n.saturating_sub(1))
}

/// The soft `RLIMIT_NOFILE`; `None` if unknown or unlimited.
fn fds_limit() -> Option<u64> {
    let mut r = libc::rlimit {
        rlim_cur: 0,
        rlim_max: 0,
    };
    // SAFETY: getrlimit writes one `rlimit` through a valid pointer.
    let rc = unsafe { libc::getrlimit(libc::RLIMIT_NOFILE, &mut r) };
    // rlim_t is 32 bits on some 32-bit libcs.
    #[allow(clippy::unnecessary_cast)]
    let cur = r.rlim_cur as u64;
    (rc == 0 && r.rlim_cur != libc::RLIM_INFINITY).then_some(cur)
}

/// A control connection over [`MAX_CONTROL_CONNS`]: one error line (a fresh unix socket's send
/// buffer always has room for it, so the non-blocking write is whole or fails), whatever the
/// client has sent already read and dropped (unread bytes would turn the close into a reset
/// that can overtake the line), then the caller drops (closes) it.
fn refuse_busy(stream: &mut mio::net::UnixStream) {
    use std::io::{Read, Write};
    let line = format!("error busy: {MAX_CONTROL_CONNS} control connections are open; try again\n");
    let _ = stream.write(line.as_bytes());
    let mut sink = [0u8; 256];
    while matches!(stream.read(&mut sink), Ok(n) if n > 0) {}
    let _ = stream.shutdown(std::net::Shutdown::Write);
}
