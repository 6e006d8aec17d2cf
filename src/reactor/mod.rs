//! The reactor: the only `mio::Poll` of `run` and the loop's one monotonic clock read (the
//! `TG_EVENTS` test stream stamps its own lines), and the loop.
//! It is also the one wall clock read of `run` (fake-TLS timestamps, once per iteration while
//! an `ee` secret or `ee` upstream is configured; a probe's message ids, per probe event): the
//! dialler, the probes and the sessions take both clocks, the outbound setting and their
//! generator from here as parameters.
//!
//! Each iteration: poll with a timeout taken from the earliest of the session timer wheel, the
//! global timers, the resolver, the ladder and the prober (0 when sessions have work left over from
//! the fairness cap or accepts are pending), read the clock once, dispatch socket events, accept,
//! expire timers, resume sessions that yielded, tell the memory trim policy how many sessions are
//! live (`mem::trim`: once a burst has ended it says when to give freed memory back to the OS,
//! `mem::release`), then run the background work the ladder has due through the prober shell. The
//! slab is sized once at start from `--max-connections`; when it is full a new client is closed at
//! once with a logged reason. Owns: the slab, the listener, the global timers ([`Global`]), the
//! accept pause, the per-client-address table (`conn::per_ip`, sized to the slab) and the
//! accept-side mask loop check (a connection that is one of our own mask connections by both ends,
//! `conn::mask::MaskConns`). Holds no ladder policy: every route decision is `route::ladder`'s,
//! reached by sessions through `conn::Ctx` and by the background through `route::prober::Shell`.
//! Split by concern: `start` (building the reactor: what is sized or opened once), `accept` (accept
//! batches, refusals), `listen` (bind, `--bind-retry`, the listener swap), `signals` (SIGHUP,
//! SIGTERM, SIGINT into the loop), `shared` (the state sessions borrow, [`Ctx`]'s source), `reload`
//! (the one path from a `Config` to the live settings, at start and on reload, for new sessions),
//! `drain` (shutdown), `memory` (the hook that gives freed memory back after a burst), `control`
//! (the control socket, `--control-socket`, and its connections; the file is
//! `src/control/server.rs`, beside its core), `cflist` (the shared CF domain list's fetch and
//! cache, `--cf-domain-list`; the file is `src/route/cflist/fetch.rs`, beside the list core),
//! `tgranges` (Telegram's range list in force and its refresh, transparent mode).

mod accept;
#[path = "../route/cflist/fetch.rs"]
mod cflist;
mod doh;
mod drain;
mod listen;
mod memory;
mod reload;
mod shared;
mod signals;
mod start;
mod tgranges;
mod ways;

pub(crate) use cflist::cached_shared_domains;
pub use reload::RESTART_ONLY;
pub(crate) use tgranges::load_ranges;

#[path = "../control/server.rs"]
mod control;

use std::collections::VecDeque;
use std::io;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use log::info;
use mio::net::TcpListener;
use mio::{Events, Poll, Token};
use slab::Slab;

use crate::config::Config;
use crate::conn::mask::mask_target;
use crate::conn::{log_clock_events, Conn, Status, TimerEv};
use crate::logging::RateLimited;
use crate::mem::trim::Trim;
use crate::route::prober::Finished;
use crate::token::{self, Role, DNS, LISTENER, SIGNAL};

use drain::{Life, Next};
use listen::BindRetry;
use shared::Shared;
use signals::SignalPipe;

/// Re-reads the configuration for a reload (`run` builds it from the original argv and the
/// process environment, so `--config` and `--secret-file` are read again): the new
/// configuration and the notes to log (`(level, line)`), or one line saying why it is invalid.
pub type Reload = Box<dyn FnMut() -> Result<(Config, Vec<(log::Level, String)>), String>>;

/// Timer wheel resolution (ms) and size: 10 ms × 1024 slots ≈ 10 s per rotation.
const WHEEL_TICK_MS: u64 = 10;
const WHEEL_SLOTS: usize = 1024;

/// Accepts per listener wake-up before other work gets a turn.
const ACCEPT_BATCH: usize = 64;

/// Pause after `EMFILE`/`ENFILE` on accept (ms).
const ACCEPT_PAUSE_MS: u64 = 1_000;

/// Minimum interval between repeated bad-client and refusal lines (ms); per-client warnings,
/// attempt failures and unserved close lines fold per kind at `--log-fold-interval`.
const BAD_LOG_INTERVAL_MS: u64 = 10_000;

/// Kinds each per-kind fold table keeps apart (call sites, tier × failure class); more share
/// one limiter.
const FOLD_KINDS: usize = 64;

/// DCs whose Cloudflare-proxied names are resolved in the background from the start.
const CF_DCS: [u16; 6] = [1, 2, 3, 4, 5, 203];

/// The reactor's own timers.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Global {
    /// Write the periodic stats line.
    Stats,
    /// Resume accepting after descriptor exhaustion.
    AcceptResume,
}

/// Whether the listener has connections waiting.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Accept {
    /// Nothing known to be waiting.
    Idle,
    /// Readable, or the last batch ran out before `WouldBlock`.
    Pending,
    /// Descriptors ran out; [`Global::AcceptResume`] ends the pause.
    Paused,
}

/// The running proxy.
struct Reactor {
    poll: Poll,
    /// `None` while draining, or while `--bind-retry` waits for the address.
    listener: Option<TcpListener>,
    slab: Slab<Conn>,
    capacity: usize,
    s: Shared,
    clock: Instant,
    now: u64,
    events: Events,
    /// (token, readable, writable) of this iteration's events.
    ready: Vec<(Token, bool, bool)>,
    /// Sessions that hit the fairness cap: (slot, connection id).
    again: VecDeque<(usize, u32)>,
    expired: Vec<TimerEv>,
    finished: Vec<Finished>,
    globals: [Option<u64>; 2],
    accept: Accept,
    next_id: u32,
    full_log: RateLimited,
    /// Folds the descriptor-exhaustion line of accept (`--log-fold-interval`), apart from the
    /// refusals `full_log` folds.
    fd_log: RateLimited,
    /// SIGHUP, SIGTERM, SIGINT (`signals`).
    signals: SignalPipe,
    /// The signal pipe is readable.
    signalled: bool,
    /// Re-reads the configuration (`reload`); `None`: reloads are refused.
    reloader: Option<Reload>,
    /// Running or draining (`drain`).
    life: Life,
    /// `--bind-retry` while the listen address is not available (`listen`).
    bind_retry: BindRetry,
    /// The control socket (`--control-socket`), if configured.
    control: Option<control::Control>,
    /// The shared CF domain list (`--cf-domain-list`).
    cflist: cflist::CfList,
    /// Telegram's range list refresh (`--tg-ranges-url`, transparent mode).
    tgranges: tgranges::TgRefresh,
    /// The DNS-over-HTTPS exchanges (`--doh`).
    doh: doh::Doh,
    /// The transparent and SOCKS5 listeners (`ways`).
    ways: ways::Ways,
    /// When to give freed memory back after a burst (`mem::trim`, `--mem-trim-delay`).
    trim: Trim,
}

/// Runs the proxy until a stop signal's drain ends (`Ok`) or a fatal error. Logs `listening on
/// ADDR` once bound. SIGHUP calls `reload` (`None`: every reload is rejected).
///
/// Errors: bind/poll failures (an unassigned address only without `--bind-retry`), the signal
/// handlers, or a TLS configuration error (`--ca-file`).
pub fn run(cfg: Config, reload: Option<Reload>) -> io::Result<()> {
    let mut r = Reactor::new(cfg)?;
    r.reloader = reload;
    r.run()
}

impl Reactor {
    /// The loop. Returns at the drain's end (`Ok`) or on a poll failure.
    fn run(&mut self) -> io::Result<()> {
        // Background work due at start (the startup probes) goes out before the first client
        // is accepted: a client already waiting in the backlog then finds its routes' first
        // probes in flight and hedges at once past an unproven one (docs/design.md §4).
        let (mut shell, ladder) = self.s.shell(self.poll.registry());
        shell.run_due(ladder, self.now);
        loop {
            let timeout = self.poll_timeout();
            if let Err(e) = self.poll.poll(&mut self.events, timeout) {
                if e.kind() == io::ErrorKind::Interrupted {
                    continue;
                }
                return Err(e);
            }
            // +1: time 0 is "never" to the ladder (a route's last state change).
            self.now = self.clock.elapsed().as_millis() as u64 + 1;
            // Only fake-TLS timestamps need the wall clock: without an ee secret or an ee
            // upstream, no read.
            if self.s.wall_clock {
                self.s.wall_s = wall_clock_s();
            }
            // Workers' quotas reset at 00:00 UTC and count per UTC day (`route::quota`).
            if !self.s.cfg.worker_domains.is_empty() {
                self.s.ladder.set_wall_ms(wall_clock_ms());
            }
            if !self.s.ee_keys.is_empty() {
                self.s.gate.observe_clock(self.s.wall_s, self.now);
                log_clock_events(&mut self.s.gate, &self.s.cfg);
            }
            self.dispatch();
            if std::mem::take(&mut self.signalled) && self.on_signals() == Next::Exit {
                return Ok(());
            }
            if self.accept == Accept::Pending {
                self.accept_batch();
            }
            if self.ways.any_pending() {
                self.accept_ways();
            }
            self.expire();
            self.resume_again();
            self.trim_memory();
            let (mut shell, ladder) = self.s.shell(self.poll.registry());
            shell.run_due(ladder, self.now);
            if self.life_check() == Next::Exit {
                return Ok(());
            }
        }
    }

    /// How long the next poll may sleep.
    fn poll_timeout(&self) -> Option<Duration> {
        let ways_pending = self.ways.any_pending() && self.accept != Accept::Paused;
        if !self.again.is_empty() || self.accept == Accept::Pending || ways_pending {
            return Some(Duration::ZERO);
        }
        let s = &self.s;
        [
            s.wheel.next_deadline(),
            s.dns.next_deadline(),
            s.ladder.next_deadline(),
            s.prober.next_deadline(),
            self.globals[0],
            self.globals[1],
            self.life_deadline(),
            self.control
                .as_ref()
                .and_then(control::Control::next_deadline),
            self.cflist.next_deadline(),
            self.tgranges_deadline(),
            self.doh.next_deadline(),
            self.trim.next_deadline(),
        ]
        .into_iter()
        .flatten()
        .min()
        .map(|d| Duration::from_millis(d.saturating_sub(self.now)))
    }

    /// Socket events: listener, resolver, background jobs, sessions.
    fn dispatch(&mut self) {
        self.ready.clear();
        for ev in self.events.iter() {
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
            self.ready.push((ev.token(), readable, writable));
        }
        let now = self.now;
        for i in 0..self.ready.len() {
            let (tok, readable, writable) = self.ready[i];
            if tok == LISTENER {
                if self.accept == Accept::Idle {
                    self.accept = Accept::Pending;
                }
                continue;
            }
            if let Some(i) = ways::Ways::of_token(tok) {
                self.ways.pending[i] = true;
                continue;
            }
            if tok == DNS {
                if !self.s.dns.on_readable(now).is_empty() {
                    self.s.resolve_outbound_proxy();
                }
                continue;
            }
            if tok == SIGNAL {
                self.signalled = true;
                continue;
            }
            if tok == token::CFLIST {
                self.cflist_event();
                continue;
            }
            if tok == token::TGRANGES {
                self.tgranges_event();
                continue;
            }
            if let Some(i) = token::doh_index(tok) {
                self.doh_event(i);
                continue;
            }
            if tok == token::CONTROL || token::control_index(tok).is_some() {
                self.on_control(tok);
                continue;
            }
            let Some((slot, generation, role)) = token::decode(tok) else {
                continue;
            };
            let mut ctx = self.s.ctx(self.poll.registry(), now);
            if role == Role::Probe {
                let s = &mut ctx;
                // Probes read the wall clock per event, as they always did (message ids in ms).
                let clock = (now, wall_clock_ms());
                if let Some(f) = s.prober.on_event(slot, generation, s.tls, clock, s.rng) {
                    self.finished.push(f);
                }
                continue;
            }
            let Some(conn) = self.slab.get_mut(slot) else {
                continue;
            };
            if token::generation(conn.id) != generation {
                continue; // stale: the slot was reused
            }
            let status = conn.on_event(role, readable, writable, &mut ctx);
            finish(&mut self.slab, slot, status, &mut self.again);
        }
        self.finish_jobs();
    }

    /// Hands finished background jobs to the ladder.
    fn finish_jobs(&mut self) {
        let (mut shell, ladder) = self.s.shell(self.poll.registry());
        for f in self.finished.drain(..) {
            shell.finish(ladder, f, self.now);
        }
    }

    /// Fires due session timers, global timers, job deadlines and the resolver's tick.
    fn expire(&mut self) {
        let now = self.now;
        for g in [Global::Stats, Global::AcceptResume] {
            if self.globals[g as usize].is_some_and(|t| t <= now) {
                self.globals[g as usize] = None;
                self.on_global(g);
            }
        }
        self.expired.clear();
        self.s.wheel.expire(now, &mut self.expired);
        for i in 0..self.expired.len() {
            let t = self.expired[i];
            let slot = t.slot as usize;
            let Some(conn) = self.slab.get_mut(slot) else {
                continue;
            };
            if conn.id != t.conn_id {
                continue; // stale timer of a previous session in this slot
            }
            let mut ctx = self.s.ctx(self.poll.registry(), now);
            let status = conn.on_timer(t.kind, &mut ctx);
            finish(&mut self.slab, slot, status, &mut self.again);
        }
        self.s.prober.expire(now, &mut self.finished);
        self.finish_jobs();
        self.expire_control();
        self.cflist_tick();
        self.tgranges_tick();
        if self.s.dns.next_deadline().is_some_and(|d| d <= now)
            && !self.s.dns.on_tick(now).is_empty()
        {
            self.s.resolve_outbound_proxy();
        }
        self.doh_tick();
    }

    fn on_global(&mut self, g: Global) {
        match g {
            Global::Stats => {
                self.write_stats();
                let every = self.s.cfg.stats_interval.as_millis() as u64;
                self.globals[Global::Stats as usize] = Some(self.now + every);
            }
            Global::AcceptResume => self.accept = Accept::Pending,
        }
    }

    /// Writes the stats line now.
    fn write_stats(&mut self) {
        self.s.stats.probes_deferred = self.s.ladder.counters.deferred;
        self.s.stats.proxy_failures = self.s.ladder.counters.proxy_failures;
        self.s.stats.unpaced = self.s.ladder.unpaced();
        self.s.stats.set_gate(self.s.gate.counters());
        // Under the `stats` module's target, so the line shows `[stats]` (logging::component).
        let line = self.s.stats.line(self.slab.len(), self.capacity);
        info!(target: concat!(env!("CARGO_CRATE_NAME"), "::stats"), "{line}");
    }

    /// Resumes the sessions that hit the fairness cap last time, once each.
    fn resume_again(&mut self) {
        for _ in 0..self.again.len() {
            let Some((slot, id)) = self.again.pop_front() else {
                break;
            };
            let Some(conn) = self.slab.get_mut(slot) else {
                continue;
            };
            if conn.id != id {
                continue;
            }
            let mut ctx = self.s.ctx(self.poll.registry(), self.now);
            let status = conn.resume(&mut ctx);
            finish(&mut self.slab, slot, status, &mut self.again);
        }
    }
}

/// Unix seconds now on the wall clock (0 if it reads before 1970), for fake-TLS timestamps.
fn wall_clock_s() -> u64 {
    wall_clock_ms() / 1000
}

/// Unix time in ms now (0 if the clock reads before 1970): the one wall clock read, for
/// fake-TLS timestamps ([`wall_clock_s`]) and a probe's message ids.
fn wall_clock_ms() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64)
}

/// Host names resolved in the background for `cfg`: the Workers, the `kwsN` and (for media
/// sessions) `kwsN-1` names of every CF domain, the upstream MTProto proxies' names, and the
/// mask targets (`--mask-host`, or every ee secret's domain).
fn dns_names(cfg: &Config) -> Vec<String> {
    let mut names: Vec<String> = cfg.worker_domains.iter().map(|e| e.host.clone()).collect();
    for ep in cfg.cf_domains.iter().chain(&cfg.cf_shared_domains) {
        names.extend(CF_DCS.iter().map(|dc| format!("kws{dc}.{}", ep.host)));
        names.extend(CF_DCS.iter().map(|dc| format!("kws{dc}-1.{}", ep.host)));
    }
    // An outbound proxy given by name (`--outbound-proxy socks5://proxy.lan:1080`).
    names.extend(cfg.outbound_proxy.iter().filter_map(|p| p.host.clone()));
    // Upstream MTProto proxies given by name (`--mtproto-proxy`).
    names.extend(
        cfg.mtproto_proxies
            .iter()
            .filter(|p| p.ip().is_none())
            .map(|p| p.host.clone()),
    );
    // Mask targets: --mask-host, or every ee secret's domain (the SNI picks one).
    if !cfg.no_mask {
        names.extend(cfg.mask_host.iter().map(|(h, _)| h.clone()));
        if cfg.mask_host.is_none() {
            for s in &cfg.secrets {
                if let crate::mtproto::obfs2::SecretKind::Ee(d) = &s.kind {
                    let sni = Some(d.as_bytes());
                    names.extend(mask_target(cfg, sni).map(|(h, _)| h));
                }
            }
        }
    }
    names
}

/// Applies a session's status after it handled something.
fn finish(slab: &mut Slab<Conn>, slot: usize, status: Status, again: &mut VecDeque<(usize, u32)>) {
    match status {
        Status::Idle => {}
        Status::Again => again.push_back((slot, slab[slot].id)),
        Status::Closed => {
            slab.remove(slot);
        }
    }
}

/// ` (N similar suppressed)` when N > 0.
fn suppressed(n: u64) -> String {
    if n > 0 {
        format!(" ({n} similar suppressed)")
    } else {
        String::new()
    }
}

#[cfg(test)]
mod tests;
