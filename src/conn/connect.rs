//! Connect phase: try upstream routes in tier order until one is ready for relaying.
//!
//! A plan is the ordered list of concrete attempts for this session's DC (`ws` on both `kws`
//! host names of the `--dc-ip` address, then `tcp` to the DC table address). Each attempt has
//! its own deadline timer and token role (`Up(0)`/`Up(1)`), so the phase can run two attempts at
//! once (the ladder issue races them); today they run one after another. Client bytes that
//! arrive meanwhile are decrypted into the session's upstream buffer and wait there.

use std::net::SocketAddr;

use log::{debug, warn};
use mio::net::TcpStream;
use mio::Interest;

use super::relay::{Relay, Upstream};
use super::{Conn, Ctx, Phase, Ready, Step, TimerEv, TimerKind};
use crate::buf::RelayBuf;
use crate::config::Tier;
use crate::error::{CloseReason, Failure};
use crate::mtproto::dc::DcId;
use crate::mtproto::obfs2::Accepted;
use crate::net::io::{is_reset, read_once, Io};
use crate::net::tcp::{self, ConnectState};
use crate::net::tls::{is_tls_error, TlsStream};
use crate::net::ws::{self, Upgrade, UpgradeError};
use crate::stats::tier_index;
use crate::timer::TimerId;
use crate::token::{self, Role};

/// `Origin` sent on upgrades to Telegram's web front (what Telegram Web sends).
const WEB_ORIGIN: &str = "https://web.telegram.org";

/// One concrete way to reach the session's DC.
#[derive(Clone, Debug)]
pub struct Plan {
    /// Tier of the ladder.
    pub tier: Tier,
    /// TCP target.
    pub addr: SocketAddr,
    /// TLS SNI and HTTP `Host` (ws); empty for tcp.
    pub host: String,
    /// WebSocket path (ws).
    pub path: &'static str,
}

impl Plan {
    /// `kws2.web.telegram.org@149.154.167.220:443` or `149.154.167.50:443`.
    pub fn target(&self) -> String {
        if self.host.is_empty() {
            self.addr.to_string()
        } else {
            format!("{}@{}", self.host, self.addr)
        }
    }
}

/// Builds the ordered plan for `dc` from the configuration, skipping our own listen address.
pub fn plan(dc: DcId, ctx: &Ctx<'_>) -> Vec<Plan> {
    let mut plans = Vec::new();
    for &tier in &ctx.cfg.tier_order {
        match tier {
            Tier::Ws => {
                if let Some(&addr) = ctx.cfg.ws_addrs.get(&dc.dc) {
                    for host in dc.ws_hosts() {
                        plans.push(Plan { tier, addr, host, path: dc.ws_path() });
                    }
                }
            }
            Tier::Tcp => {
                let addr = ctx.cfg.tcp_addrs.get(&dc.dc).copied().or_else(|| {
                    dc.table_ip().map(|ip| SocketAddr::from((ip, 443)))
                });
                if let Some(addr) = addr {
                    plans.push(Plan { tier, addr, host: String::new(), path: "" });
                }
            }
        }
    }
    plans.retain(|p| !is_self(p.addr, ctx.listen));
    plans
}

/// True if dialling `addr` would loop back into our own listener.
fn is_self(addr: SocketAddr, listen: SocketAddr) -> bool {
    if addr.port() != listen.port() {
        return false;
    }
    addr.ip() == listen.ip() || (listen.ip().is_unspecified() && addr.ip().is_loopback())
}

enum AttemptState {
    Tcp(TcpStream),
    Upgrading(Upgrade),
    /// Transient while a socket moves between states inside `drive`.
    Moved,
}

struct Attempt {
    plan: usize,
    ready: Ready,
    timer: TimerId,
    started: u64,
    state: AttemptState,
}

/// State of the connect phase.
pub struct Connecting {
    accepted: Accepted,
    dc: DcId,
    plans: Vec<Plan>,
    next: usize,
    attempts: [Option<Attempt>; 2],
    /// Client plaintext (already decrypted) waiting for an upstream.
    up: RelayBuf,
    /// The client half-closed after sending a request: deliver it, then half-close upstream.
    client_eof: bool,
}

impl Connecting {
    /// Starts the phase for a client whose init was accepted.
    pub fn new(accepted: Accepted, dc: DcId, ctx: &Ctx<'_>) -> Connecting {
        Connecting {
            accepted,
            dc,
            plans: plan(dc, ctx),
            next: 0,
            attempts: [None, None],
            up: RelayBuf::new(ctx.cfg.buf_size),
            client_eof: false,
        }
    }

    /// Remembers a readiness edge for attempt `i`.
    pub fn mark_ready(&mut self, i: u8, readable: bool, writable: bool) {
        if let Some(a) = self.attempts[i as usize & 1].as_mut() {
            a.ready.read |= readable;
            a.ready.write |= writable;
        }
    }

    /// Cancels every running attempt (session closing).
    pub fn cancel_all(&mut self, ctx: &mut Ctx<'_>) {
        for slot in self.attempts.iter_mut() {
            if let Some(a) = slot.take() {
                ctx.wheel.cancel(a.timer);
            }
        }
    }
}

/// Maps an I/O error during connect/TLS/upgrade to a failure class.
fn classify_io(e: &std::io::Error) -> Failure {
    if is_tls_error(e) {
        Failure::Tls
    } else if e.kind() == std::io::ErrorKind::ConnectionRefused {
        Failure::Refused
    } else if e.kind() == std::io::ErrorKind::TimedOut {
        Failure::Timeout
    } else if is_reset(e) {
        Failure::Reset
    } else {
        Failure::ClosedEarly
    }
}

fn classify_upgrade(e: &UpgradeError) -> Failure {
    match e {
        UpgradeError::Status { code, .. } => Failure::Http(*code),
        UpgradeError::Io(e) => classify_io(e),
        UpgradeError::Protocol(_) => Failure::ClosedEarly,
    }
}

impl Conn {
    pub(super) fn step_connecting(&mut self, ctx: &mut Ctx<'_>) -> Step {
        // 1. Client bytes while we connect: decrypt into the upstream buffer.
        if let Some(step) = self.read_client_while_connecting() {
            return step;
        }
        let slot = self.slot;
        let id = self.id;
        let Phase::Connecting(c) = &mut self.phase else { return Step::Wait };

        // 2. Start an attempt if none is running.
        if c.attempts.iter().all(|a| a.is_none()) {
            loop {
                if c.next >= c.plans.len() {
                    warn!(
                        "client {} {}: every route failed, closing so the client retries",
                        self.peer, c.dc
                    );
                    return Step::Close(CloseReason::UpstreamUnreachable);
                }
                let idx = c.next;
                c.next += 1;
                match start_attempt(c, idx, 0, slot, id, ctx) {
                    Ok(()) => break,
                    Err(f) => {
                        log_failure(&self.peer, c.dc, &c.plans[idx], f, 0, "could not start");
                        if f == Failure::Local {
                            return Step::Close(CloseReason::LocalResource);
                        }
                    }
                }
            }
        }

        // 3. Drive attempts that saw an edge.
        let mut progressed = false;
        for i in 0..2 {
            let Some(a) = c.attempts[i].as_mut() else { continue };
            if !a.ready.read && !a.ready.write {
                continue;
            }
            a.ready = Ready::default();
            progressed = true;
            match drive(a, &c.plans[a.plan], ctx) {
                Drive::Pending => {}
                Drive::Failed(f) => {
                    let a = c.attempts[i].take().expect("attempt present: checked above");
                    ctx.wheel.cancel(a.timer);
                    let plan = c.plans[a.plan].clone();
                    log_failure(&self.peer, c.dc, &plan, f, ctx.now - a.started, "failed");
                    ctx.stats.attempts_failed[tier_index(plan.tier)] += 1;
                    skip_same_address(c, &plan, f);
                }
                Drive::Ready(up) => {
                    let a = c.attempts[i].take().expect("attempt present: checked above");
                    ctx.wheel.cancel(a.timer);
                    let plan = c.plans[a.plan].clone();
                    ctx.stats.attempts_ok[tier_index(plan.tier)] += 1;
                    debug!(
                        "client {} {} connected via {} {} in {}ms",
                        self.peer,
                        c.dc,
                        plan.tier.name(),
                        plan.target(),
                        ctx.now - a.started
                    );
                    return self.start_relay(plan, up, ctx);
                }
            }
        }
        if progressed {
            Step::Progress
        } else {
            Step::Wait
        }
    }

    /// Reads client bytes into the buffer while connecting. `Some(step)` ends the step.
    fn read_client_while_connecting(&mut self) -> Option<Step> {
        let Phase::Connecting(c) = &mut self.phase else { return None };
        while self.client_ready.read && !c.client_eof {
            let space = c.up.space();
            if space.is_empty() {
                break; // backpressure: wait for the upstream
            }
            match read_once(&mut self.client, space) {
                Io::Done(n) => {
                    c.accepted.decrypt.apply(&mut space[..n]);
                    c.up.fill(n);
                    self.info.bytes_up += n as u64;
                }
                Io::Blocked => self.client_ready.read = false,
                Io::Eof if c.up.is_empty() => return Some(Step::Close(CloseReason::ClientEof)),
                Io::Eof => {
                    // Half-close with a request pending: still connect and deliver it.
                    c.client_eof = true;
                    self.client_ready.read = false;
                }
                Io::Failed(_) => return Some(Step::Close(CloseReason::ClientReset)),
            }
        }
        None
    }

    /// Handles an attempt's deadline.
    pub(super) fn attempt_timeout(&mut self, i: u8, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Connecting(c) = &mut self.phase else { return Step::Progress };
        let Some(a) = c.attempts[i as usize & 1].take() else { return Step::Progress };
        let plan = c.plans[a.plan].clone();
        log_failure(&self.peer, c.dc, &plan, Failure::Timeout, ctx.now - a.started, "failed");
        ctx.stats.attempts_failed[tier_index(plan.tier)] += 1;
        skip_same_address(c, &plan, Failure::Timeout);
        Step::Progress
    }

    fn start_relay(&mut self, plan: Plan, up: Upstream, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Connecting(c) = std::mem::replace(&mut self.phase, super::Phase::Closed) else {
            return Step::Wait;
        };
        let c = *c;
        self.info.tier = Some(plan.tier);
        self.info.target = plan.target();
        self.info.connected_ms = Some(ctx.now);
        let relay = Relay::new(c.accepted, c.dc, plan.tier, up, c.up, c.client_eof, ctx);
        self.phase = Phase::Relay(Box::new(relay));
        Step::Progress
    }
}

/// After a connect-level failure (timeout, refused) the same address on the same tier would
/// fail the same way: skip its remaining plans (the other `kws` host name).
fn skip_same_address(c: &mut Connecting, failed: &Plan, f: Failure) {
    if !matches!(f, Failure::Timeout | Failure::Refused) {
        return;
    }
    while c.next < c.plans.len()
        && c.plans[c.next].tier == failed.tier
        && c.plans[c.next].addr == failed.addr
    {
        c.next += 1;
    }
}

fn log_failure(peer: &SocketAddr, dc: DcId, plan: &Plan, f: Failure, ms: u64, what: &str) {
    warn!(
        "client {peer} {dc}: {} {} {what} after {ms}ms: {f}",
        plan.tier.name(),
        plan.target()
    );
}

fn start_attempt(
    c: &mut Connecting,
    idx: usize,
    i: u8,
    slot: usize,
    id: u32,
    ctx: &mut Ctx<'_>,
) -> Result<(), Failure> {
    let plan = &c.plans[idx];
    let mut sock = tcp::start(plan.addr).map_err(|e| {
        if e.raw_os_error() == Some(24) || e.raw_os_error() == Some(23) {
            Failure::Local
        } else {
            classify_io(&e)
        }
    })?;
    ctx.registry
        .register(&mut sock, token::encode(slot, id, Role::Up(i)), Interest::READABLE | Interest::WRITABLE)
        .map_err(|_| Failure::Local)?;
    let timeout = match plan.tier {
        Tier::Ws => ctx.cfg.ws_connect_timeout,
        Tier::Tcp => ctx.cfg.tcp_connect_timeout,
    };
    let timer = ctx.wheel.insert(
        ctx.now + timeout.as_millis() as u64,
        TimerEv { slot: slot as u32, conn_id: id, kind: TimerKind::Attempt(i) },
    );
    ctx.stats.attempts[tier_index(plan.tier)] += 1;
    c.attempts[i as usize] = Some(Attempt {
        plan: idx,
        ready: Ready::default(),
        timer,
        started: ctx.now,
        state: AttemptState::Tcp(sock),
    });
    Ok(())
}

enum Drive {
    Pending,
    Failed(Failure),
    Ready(Upstream),
}

/// Advances one attempt as far as its socket allows.
fn drive(a: &mut Attempt, plan: &Plan, ctx: &mut Ctx<'_>) -> Drive {
    loop {
        match &mut a.state {
            AttemptState::Tcp(sock) => match tcp::check_connected(sock) {
                ConnectState::Pending => return Drive::Pending,
                ConnectState::Failed(e) => return Drive::Failed(classify_io(&e)),
                ConnectState::Connected => {
                    let AttemptState::Tcp(sock) = std::mem::replace(&mut a.state, AttemptState::Moved)
                    else {
                        return Drive::Failed(Failure::Local); // unreachable: matched Tcp above
                    };
                    match plan.tier {
                        Tier::Tcp => return Drive::Ready(Upstream::Tcp(sock)),
                        Tier::Ws => {
                            let tls = match TlsStream::new(ctx.tls, &plan.host, sock) {
                                Ok(t) => t,
                                Err(_) => return Drive::Failed(Failure::Tls),
                            };
                            match Upgrade::start(tls, &plan.host, plan.path, true, Some(WEB_ORIGIN)) {
                                Ok(u) => a.state = AttemptState::Upgrading(u),
                                Err(e) => return Drive::Failed(classify_upgrade(&e)),
                            }
                        }
                    }
                }
            },
            AttemptState::Upgrading(u) => {
                return match u.advance() {
                    ws::Step::Pending => Drive::Pending,
                    ws::Step::Failed(e) => {
                        debug!("upgrade via {} failed: {e}", plan.target());
                        Drive::Failed(classify_upgrade(&e))
                    }
                    ws::Step::Done(tls) => Drive::Ready(Upstream::Ws(tls)),
                };
            }
            AttemptState::Moved => return Drive::Failed(Failure::Local),
        }
    }
}
