//! The reactor: the only `mio::Poll`, the only clock read, the loop.
//!
//! Each iteration: poll with a timeout taken from the timer wheel and the resolver (0 when
//! sessions have work left over from the fairness cap), read the monotonic clock once, dispatch
//! socket events, expire timers, resume sessions that yielded, schedule probes that sessions
//! asked for. The slab is sized once at start from `--max-connections`; when it is full a new
//! client is closed at once with a logged reason. Background probes (recovery when a cooldown
//! ends, sparse liveness for idle Up routes) run here in their own small slab: no client ever
//! waits on one.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use log::{debug, error, info, warn};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll};
use slab::Slab;

use crate::config::Config;
use crate::conn::{resolve_now, Conn, Ctx, Status, TimerEv, TimerKind};
use crate::dns::{Resolver, ResolverConfig};
use crate::error::{CloseReason, Failure};
use crate::logging::RateLimited;
use crate::net::tls;
use crate::rng::Rng;
use crate::route::health::Use;
use crate::route::probe::{Probe, ProbeOutcome};
use crate::route::table::Table;
use crate::stats::Stats;
use crate::timer::{TimerId, Wheel};
use crate::token::{self, Role, DNS, LISTENER};

/// Timer wheel resolution (ms) and size: 10 ms × 1024 slots ≈ 10 s per rotation.
const WHEEL_TICK_MS: u64 = 10;
const WHEEL_SLOTS: usize = 1024;

/// Accepts per listener wake-up before other work gets a turn.
const ACCEPT_BATCH: usize = 64;

/// Pause after `EMFILE`/`ENFILE` on accept (ms).
const ACCEPT_PAUSE_MS: u64 = 1_000;

/// Minimum interval between repeated bad-client / refusal / attempt-failure lines (ms).
const BAD_LOG_INTERVAL_MS: u64 = 10_000;

/// Probes running at once, at most.
const MAX_PROBES: usize = 16;

/// Retry delay when a probe cannot start yet (DNS pending, probe slots full), ms.
const PROBE_RETRY_MS: u64 = 1_000;

/// Slot value of global timers.
const GLOBAL: u32 = u32::MAX;

/// DCs whose Cloudflare-proxied names are resolved in the background from the start.
const CF_DCS: [u16; 6] = [1, 2, 3, 4, 5, 203];

/// Background probes in flight.
struct Probes {
    slab: Slab<(Probe, TimerId)>,
    next_id: u32,
}

/// Runs the proxy until a fatal error. Logs `listening on ADDR` once bound.
///
/// Errors: bind/poll failures, or a TLS configuration error (`--ca-file`).
pub fn run(cfg: Config) -> io::Result<()> {
    let tls = tls::client_config(cfg.ca_file.as_deref(), cfg.accept_invalid_certs)
        .map_err(|e| io::Error::new(io::ErrorKind::InvalidInput, e))?;
    let mut rng = Rng::new().map_err(|e| io::Error::other(format!("randomness: {e}")))?;
    let keys: Vec<[u8; 16]> = cfg.secrets.iter().map(|s| s.key).collect();

    let mut poll = Poll::new()?;
    let mut listener = TcpListener::bind(cfg.listen)?;
    poll.registry()
        .register(&mut listener, LISTENER, Interest::READABLE)?;
    let listen = listener.local_addr()?;
    let capacity = cfg.max_connections.min(token::MAX_SLOT);

    let clock = Instant::now();
    let now_ms = || clock.elapsed().as_millis() as u64;
    let mut now = now_ms();

    let mut dns = Resolver::new(ResolverConfig {
        hosts_path: cfg.hosts_file.clone(),
        resolv_path: cfg.resolv_conf.clone(),
        ..ResolverConfig::default()
    })?;
    poll.registry()
        .register(dns.socket(), DNS, Interest::READABLE)?;
    for ep in &cfg.worker_domains {
        dns.watch(&ep.host);
        let _ = resolve_now(&mut dns, &ep.host, now);
    }
    for ep in &cfg.cf_domains {
        for dc in CF_DCS {
            let name = format!("kws{dc}.{}", ep.host);
            dns.watch(&name);
            let _ = resolve_now(&mut dns, &name, now);
        }
    }
    info!("listening on {listen} (max {capacity} sessions)");

    let mut wheel: Wheel<TimerEv> = Wheel::new(WHEEL_TICK_MS, WHEEL_SLOTS, now);
    let mut slab: Slab<Conn> = Slab::with_capacity(capacity);
    let mut routes = Table::new(&cfg, now);
    let mut probes = Probes {
        slab: Slab::with_capacity(MAX_PROBES),
        next_id: 0,
    };
    let mut stats = Stats::default();
    let mut bad_log = RateLimited::new(BAD_LOG_INTERVAL_MS);
    let mut attempt_log = RateLimited::new(BAD_LOG_INTERVAL_MS / 10);
    let mut full_log = RateLimited::new(BAD_LOG_INTERVAL_MS);
    let mut events = Events::with_capacity(256);
    let mut expired: Vec<TimerEv> = Vec::new();
    let mut again: VecDeque<(usize, u32)> = VecDeque::new();
    let mut probe_due: Vec<(usize, u64)> = Vec::new();
    let mut pool_due: Vec<usize> = Vec::new();
    let mut adopt = Vec::new();
    let sweep_ms = (cfg.pool_max_age.as_millis() as u64 / 2).max(1_000);
    let mut last_clocks = (crate::route::pool::uptime_ms().unwrap_or(0), now);
    if cfg.pool_size > 0 {
        wheel.insert(
            now + sweep_ms,
            TimerEv {
                slot: GLOBAL,
                conn_id: 0,
                kind: TimerKind::PoolSweep,
            },
        );
    }
    let mut next_id: u32 = 0;
    let mut accept_paused = false;
    let mut accept_pending = false;
    let stats_ms = cfg.stats_interval.as_millis() as u64;
    if stats_ms > 0 {
        wheel.insert(
            now + stats_ms,
            TimerEv {
                slot: GLOBAL,
                conn_id: 0,
                kind: TimerKind::Stats,
            },
        );
    }

    loop {
        let timeout = if !again.is_empty() || (accept_pending && !accept_paused) {
            Some(Duration::ZERO)
        } else {
            let next = match (wheel.next_deadline(), dns.next_deadline()) {
                (Some(a), Some(b)) => Some(a.min(b)),
                (a, b) => a.or(b),
            };
            next.map(|d| Duration::from_millis(d.saturating_sub(now)))
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        now = now_ms();
        let registry = poll.registry();
        let mut ctx = Ctx {
            now,
            cfg: &cfg,
            keys: &keys,
            registry,
            wheel: &mut wheel,
            rng: &mut rng,
            tls: &tls,
            stats: &mut stats,
            bad_log: &mut bad_log,
            listen,
            routes: &mut routes,
            dns: &mut dns,
            probe_due: &mut probe_due,
            pool_due: &mut pool_due,
            adopt: &mut adopt,
            attempt_log: &mut attempt_log,
        };

        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_pending = true;
                continue;
            }
            if ev.token() == DNS {
                ctx.dns.on_readable(now);
                continue;
            }
            let Some((slot, generation, role)) = token::decode(ev.token()) else {
                continue;
            };
            if role == Role::Probe {
                let Some((p, _)) = probes.slab.get_mut(slot) else {
                    continue;
                };
                if token::generation(p.id) != generation {
                    continue;
                }
                if let Some(outcome) = p.advance(ctx.tls, now, ctx.rng) {
                    finish_probe(&mut probes, slot, outcome, &mut ctx);
                }
                continue;
            }
            let Some(conn) = slab.get_mut(slot) else {
                continue;
            };
            if token::generation(conn.id) != generation {
                continue; // stale: the slot was reused
            }
            let readable = ev.is_readable() || ev.is_read_closed() || ev.is_error();
            let writable = ev.is_writable() || ev.is_write_closed() || ev.is_error();
            let status = conn.on_event(role, readable, writable, &mut ctx);
            finish(&mut slab, slot, status, &mut again);
        }

        if accept_pending && !accept_paused {
            // Stays pending only if the batch ran out before `WouldBlock`.
            let mut drained = false;
            for _ in 0..ACCEPT_BATCH {
                match listener.accept() {
                    Ok((stream, peer)) => {
                        ctx.stats.accepted += 1;
                        if slab.len() >= capacity {
                            ctx.stats.record_close(CloseReason::SlabFull, false);
                            refuse(stream, peer, capacity, &mut full_log, now);
                            continue;
                        }
                        next_id = next_id.wrapping_add(1);
                        let entry = slab.vacant_entry();
                        let slot = entry.key();
                        match Conn::accept(slot, next_id, stream, peer, &mut ctx) {
                            Ok(conn) => {
                                entry.insert(conn);
                                // Data may already be waiting: handle it without another edge.
                                let status =
                                    slab[slot].on_event(Role::Client, true, true, &mut ctx);
                                finish(&mut slab, slot, status, &mut again);
                            }
                            Err(e) => warn!("client {peer}: cannot register: {e}"),
                        }
                    }
                    Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                        drained = true;
                        break;
                    }
                    Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                    Err(e) if matches!(e.raw_os_error(), Some(23) | Some(24)) => {
                        if let Some(n) = full_log.allow(now) {
                            error!(
                                "accept: {e}: out of file descriptors, pausing accepts for {ACCEPT_PAUSE_MS}ms{}",
                                if n > 0 { format!(" ({n} similar suppressed)") } else { String::new() }
                            );
                        }
                        accept_paused = true;
                        ctx.wheel.insert(
                            now + ACCEPT_PAUSE_MS,
                            TimerEv {
                                slot: GLOBAL,
                                conn_id: 0,
                                kind: TimerKind::AcceptResume,
                            },
                        );
                        drained = true;
                        break;
                    }
                    Err(e) => {
                        warn!("accept: {e}");
                        drained = true;
                        break;
                    }
                }
            }
            accept_pending = !drained;
        }

        expired.clear();
        ctx.wheel.expire(now, &mut expired);
        for t in expired.drain(..) {
            match t.kind {
                TimerKind::Stats => {
                    info!("{}", ctx.stats.line(slab.len(), capacity));
                    ctx.wheel.insert(now + stats_ms, t);
                    continue;
                }
                TimerKind::AcceptResume => {
                    accept_paused = false;
                    accept_pending = true;
                    continue;
                }
                TimerKind::PoolSweep => {
                    sweep_pools(&mut probes, &mut last_clocks, &mut ctx);
                    ctx.wheel.insert(now + sweep_ms, t);
                    continue;
                }
                TimerKind::ProbeDue => {
                    probe_due_fired(&mut probes, t.conn_id as usize, &mut ctx);
                    continue;
                }
                TimerKind::ProbeDeadline => {
                    let slot = t.slot as usize;
                    if let Some((p, _)) = probes.slab.get(slot) {
                        if p.id == t.conn_id {
                            let outcome = p.timeout_failure();
                            finish_probe(&mut probes, slot, outcome, &mut ctx);
                        }
                    }
                    continue;
                }
                _ => {}
            }
            let slot = t.slot as usize;
            let Some(conn) = slab.get_mut(slot) else {
                continue;
            };
            if conn.id != t.conn_id {
                continue; // stale timer of a previous session in this slot
            }
            let status = conn.on_timer(t.kind, &mut ctx);
            finish(&mut slab, slot, status, &mut again);
        }
        if ctx.dns.next_deadline().is_some_and(|d| d <= now) {
            ctx.dns.on_tick(now);
        }

        for _ in 0..again.len() {
            let Some((slot, id)) = again.pop_front() else {
                break;
            };
            let Some(conn) = slab.get_mut(slot) else {
                continue;
            };
            if conn.id != id {
                continue;
            }
            let status = conn.resume(&mut ctx);
            finish(&mut slab, slot, status, &mut again);
        }

        let due = std::mem::take(ctx.probe_due);
        for (route, at) in due {
            schedule_probe(ctx.routes, ctx.wheel, route, at);
        }
        let losers = std::mem::take(ctx.adopt);
        for (route, dial, started, deadline) in losers {
            adopt_loser(&mut probes, route, dial, started, deadline, &mut ctx);
        }
        let fills = std::mem::take(ctx.pool_due);
        for route in fills {
            fill_pool(&mut probes, route, &mut ctx);
        }
    }
}

/// Arms (or moves earlier) the probe timer of `route`.
fn schedule_probe(routes: &mut Table, wheel: &mut Wheel<TimerEv>, route: usize, at: u64) {
    let r = &mut routes.routes[route];
    if r.probing {
        return; // its result schedules the next one
    }
    if let Some((t, when)) = r.probe_timer {
        if when <= at {
            return;
        }
        wheel.cancel(t);
    }
    let t = wheel.insert(
        at,
        TimerEv {
            slot: GLOBAL,
            conn_id: route as u32,
            kind: TimerKind::ProbeDue,
        },
    );
    r.probe_timer = Some((t, at));
}

/// A route's probe timer fired: probe it now, or reschedule if it is not due.
fn probe_due_fired(probes: &mut Probes, route: usize, ctx: &mut Ctx<'_>) {
    let now = ctx.now;
    let interval = ctx.cfg.probe_interval.as_millis() as u64;
    {
        let r = &mut ctx.routes.routes[route];
        r.probe_timer = None;
        match r.health.usable(now) {
            Use::Cooling { until } => {
                schedule_probe(ctx.routes, ctx.wheel, route, until);
                return;
            }
            Use::Preferred | Use::Degraded if now.saturating_sub(r.last_ok) < interval => {
                // Real traffic proved it recently: look again one interval after that.
                let at = r.last_ok + ctx.rng.jitter(interval, 20);
                schedule_probe(ctx.routes, ctx.wheel, route, at.max(now + 1));
                return;
            }
            _ => {}
        }
    }
    if probes.slab.len() >= MAX_PROBES {
        schedule_probe(ctx.routes, ctx.wheel, route, now + PROBE_RETRY_MS);
        return;
    }
    if let Some(w) = ctx.routes.worker_index(route, ctx.cfg) {
        let budget = &mut ctx.routes.worker_budgets[w];
        if !budget.try_spend(now) {
            ctx.stats.probes_deferred += 1;
            let at = budget
                .next_available(now)
                .unwrap_or(now + interval)
                .max(now + PROBE_RETRY_MS);
            schedule_probe(ctx.routes, ctx.wheel, route, at);
            return;
        }
    }
    let specs = {
        let dns = &mut *ctx.dns;
        ctx.routes.routes[route].specs_for(&mut |h| resolve_now(dns, h, now), ctx.listen)
    };
    let Some(spec) = specs.first() else {
        schedule_probe(ctx.routes, ctx.wheel, route, now + PROBE_RETRY_MS);
        return;
    };
    let spec = spec.clone();
    match launch(probes, route, &spec, false, ctx) {
        Ok(()) => {
            ctx.routes.routes[route].probing = true;
            ctx.stats.probes[0] += 1;
            debug!("probe {} started", ctx.routes.routes[route].label());
        }
        Err(f) => {
            ctx.stats.probes[0] += 1;
            let outcome = ProbeOutcome::Failed(f, None, "could not start".into());
            apply_probe_outcome(route, outcome, 0, ctx);
        }
    }
}

/// Takes over a session's losing dial as a background pool fill (dropped if the probe slab is
/// full).
fn adopt_loser(
    probes: &mut Probes,
    route: usize,
    mut dial: crate::net::dial::Dial,
    started: u64,
    deadline: u64,
    ctx: &mut Ctx<'_>,
) {
    if probes.slab.len() >= MAX_PROBES {
        return;
    }
    probes.next_id = probes.next_id.wrapping_add(1);
    let id = probes.next_id;
    let entry = probes.slab.vacant_entry();
    let slot = entry.key();
    if dial
        .retoken(ctx.registry, token::encode(slot, id, Role::Probe))
        .is_err()
    {
        return;
    }
    let dc = ctx.routes.routes[route].dc;
    let p = Probe::adopt(route, id, dc, dial, started);
    let t = ctx.wheel.insert(
        deadline.max(ctx.now + 1),
        TimerEv {
            slot: slot as u32,
            conn_id: id,
            kind: TimerKind::ProbeDeadline,
        },
    );
    entry.insert((p, t));
    ctx.routes.routes[route].pool.filling += 1;
}

/// Starts a probe (or, with `fill`, a pool fill) of `route` over `spec` in the probe slab, with
/// its deadline armed.
fn launch(
    probes: &mut Probes,
    route: usize,
    spec: &crate::net::dial::DialSpec,
    fill: bool,
    ctx: &mut Ctx<'_>,
) -> Result<(), Failure> {
    probes.next_id = probes.next_id.wrapping_add(1);
    let id = probes.next_id;
    let entry = probes.slab.vacant_entry();
    let slot = entry.key();
    let dc = ctx.routes.routes[route].dc;
    let mut p = Probe::start(
        route,
        id,
        dc,
        spec,
        ctx.registry,
        token::encode(slot, id, Role::Probe),
        ctx.now,
    )?;
    p.fill = fill;
    let deadline = ctx.now + ctx.cfg.probe_timeout.as_millis() as u64;
    let t = ctx.wheel.insert(
        deadline,
        TimerEv {
            slot: slot as u32,
            conn_id: id,
            kind: TimerKind::ProbeDeadline,
        },
    );
    entry.insert((p, t));
    Ok(())
}

/// Removes a finished probe (or pool fill) and applies its outcome.
fn finish_probe(probes: &mut Probes, slot: usize, outcome: ProbeOutcome, ctx: &mut Ctx<'_>) {
    let (mut p, timer) = probes.slab.remove(slot);
    ctx.wheel.cancel(timer);
    let route = p.route;
    let started = p.started;
    drop(p.take_upstream());
    if p.fill {
        let r = &mut ctx.routes.routes[route];
        r.pool.filling = r.pool.filling.saturating_sub(1);
        match outcome {
            ProbeOutcome::Filled(mut up, ms) => {
                let _ = ctx.registry.deregister(up.sock());
                // The upgrade completed: the route's path works (this also brings back a
                // route presumed down after it lost a hedged race).
                ctx.routes.on_success(route, ctx.now, ms, "background dial");
                let size = pool_size_for(route, ctx);
                let r = &mut ctx.routes.routes[route];
                if r.pool.len() < size {
                    debug!("pool {}: warm upstream ready in {ms}ms", r.label());
                    r.pool.put(up, ctx.now);
                } else {
                    up.shutdown();
                }
            }
            ProbeOutcome::Failed(f, retry_after, detail) => {
                debug!("pool {}: fill failed: {f} ({detail})", r.label());
                if f == Failure::Http(429) {
                    if let Some(w) = ctx.routes.worker_index(route, ctx.cfg) {
                        ctx.routes.worker_budgets[w].on_throttled(ctx.now, retry_after);
                    }
                }
                if let Some(c) =
                    ctx.routes
                        .on_failure(route, ctx.now, f, retry_after, ctx.cfg, ctx.rng)
                {
                    if let crate::route::health::State::Down { until } = c.to {
                        schedule_probe(ctx.routes, ctx.wheel, route, until);
                    }
                }
            }
            ProbeOutcome::Ok(_) => {}
        }
        return;
    }
    ctx.routes.routes[route].probing = false;
    apply_probe_outcome(route, outcome, started, ctx);
}

/// Pool size for a route: `--pool-size`, at most 1 toward a Worker (its quota), none for raw
/// TCP (nothing to save).
fn pool_size_for(route: usize, ctx: &Ctx<'_>) -> usize {
    match ctx.routes.routes[route].tier {
        crate::config::Tier::Tcp => 0,
        crate::config::Tier::Worker => ctx.cfg.pool_size.min(1),
        _ => ctx.cfg.pool_size,
    }
}

/// Starts background fills so a hot, Up route has its warm upstreams.
fn fill_pool(probes: &mut Probes, route: usize, ctx: &mut Ctx<'_>) {
    let now = ctx.now;
    let size = pool_size_for(route, ctx);
    let wanted = {
        let r = &ctx.routes.routes[route];
        if !matches!(r.health.usable(now), Use::Preferred) {
            return;
        }
        r.pool.wanted(now, size)
    };
    for _ in 0..wanted {
        if probes.slab.len() >= MAX_PROBES {
            return;
        }
        if let Some(w) = ctx.routes.worker_index(route, ctx.cfg) {
            if !ctx.routes.worker_budgets[w].try_spend(now) {
                ctx.stats.probes_deferred += 1;
                return;
            }
        }
        let specs = {
            let dns = &mut *ctx.dns;
            ctx.routes.routes[route].specs_for(&mut |h| resolve_now(dns, h, now), ctx.listen)
        };
        let Some(spec) = specs.first().cloned() else {
            return;
        };
        if launch(probes, route, &spec, true, ctx).is_err() {
            return;
        }
        ctx.routes.routes[route].pool.filling += 1;
        ctx.stats.pool_fills += 1;
    }
}

/// Periodic pool upkeep: age out and liveness-check entries, refill hot routes, and flush
/// everything after a suspend or when every entry was found dead (the network changed).
fn sweep_pools(probes: &mut Probes, last: &mut (u64, u64), ctx: &mut Ctx<'_>) {
    let now = ctx.now;
    let uptime = crate::route::pool::uptime_ms().unwrap_or(last.0);
    let slept = crate::route::pool::suspended(last.0, uptime, last.1, now);
    *last = (uptime, now);
    let max_age = ctx.cfg.pool_max_age.as_millis() as u64;
    let (mut kept, mut dead) = (0, 0);
    for r in ctx.routes.routes.iter_mut() {
        if slept {
            r.pool.flush();
            continue;
        }
        let (k, d, _aged) = r.pool.sweep(now, max_age);
        kept += k;
        dead += d;
    }
    if slept {
        info!("suspend detected (boot clock jumped): warm pools flushed");
    } else if dead > 1 && kept == 0 {
        // Also what an intermediary closing idle upgraded sockets looks like: not worth more
        // than a debug line; the refill below is the same either way.
        debug!("every pooled upstream was dead ({dead}): refilling the non-Worker pools");
    }
    for route in 0..ctx.routes.routes.len() {
        // Worker pools refill only when a session starts (each fill is a request against the
        // Worker's daily quota); other tiers are kept warm while hot.
        if ctx.routes.routes[route].tier != crate::config::Tier::Worker {
            fill_pool(probes, route, ctx);
        }
    }
}

/// Health update and next schedule after a probe.
fn apply_probe_outcome(route: usize, outcome: ProbeOutcome, started: u64, ctx: &mut Ctx<'_>) {
    let now = ctx.now;
    let interval = ctx.cfg.probe_interval.as_millis() as u64;
    match outcome {
        ProbeOutcome::Ok(rtt) => {
            ctx.stats.probes[1] += 1;
            ctx.routes.on_success(route, now, rtt, "probe");
            let at = now + ctx.rng.jitter(interval, 20);
            schedule_probe(ctx.routes, ctx.wheel, route, at);
        }
        ProbeOutcome::Filled(mut up, _) => up.shutdown(), // not a probe; cannot happen
        ProbeOutcome::Failed(f, retry_after, detail) => {
            ctx.stats.probes[2] += 1;
            debug!(
                "probe {} failed after {}ms: {f} ({detail})",
                ctx.routes.routes[route].label(),
                now.saturating_sub(started)
            );
            if f == Failure::Http(429) {
                if let Some(w) = ctx.routes.worker_index(route, ctx.cfg) {
                    ctx.routes.worker_budgets[w].on_throttled(now, retry_after);
                }
            }
            ctx.routes
                .on_failure(route, now, f, retry_after, ctx.cfg, ctx.rng);
            let at = match ctx.routes.routes[route].health.usable(now) {
                Use::Cooling { until } => until,
                // Still usable after a soft failure (Suspect): look again soon.
                _ => now + ctx.cfg.health.base_ms.min(interval),
            };
            schedule_probe(ctx.routes, ctx.wheel, route, at);
        }
    }
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

/// Closes a client at once because the slab is full (rate-limited log line).
fn refuse(
    stream: mio::net::TcpStream,
    peer: SocketAddr,
    capacity: usize,
    log: &mut RateLimited,
    now: u64,
) {
    if let Some(suppressed) = log.allow(now) {
        warn!(
            "refusing client {peer}: {} ({capacity} sessions in use; raise --max-connections or the nofile limit){}",
            CloseReason::SlabFull,
            if suppressed > 0 { format!(" ({suppressed} similar suppressed)") } else { String::new() }
        );
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
