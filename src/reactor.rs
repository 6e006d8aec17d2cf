//! The reactor: the only `mio::Poll`, the only clock read, the loop.
//!
//! Each iteration: poll with a timeout taken from the timer wheel (0 when sessions have work
//! left over from the fairness cap), read the monotonic clock once, dispatch socket events,
//! expire timers, resume sessions that yielded. The slab is sized once at start from
//! `--max-connections`; when it is full a new client is closed at once with a logged reason.

use std::collections::VecDeque;
use std::io;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use log::{error, info, warn};
use mio::net::TcpListener;
use mio::{Events, Interest, Poll};
use slab::Slab;

use crate::config::Config;
use crate::conn::{Conn, Ctx, Status, TimerEv, TimerKind};
use crate::error::CloseReason;
use crate::logging::RateLimited;
use crate::net::tls;
use crate::rng::Rng;
use crate::stats::Stats;
use crate::timer::Wheel;
use crate::token::{self, Role, LISTENER};

/// Timer wheel resolution (ms) and size: 10 ms × 1024 slots ≈ 10 s per rotation.
const WHEEL_TICK_MS: u64 = 10;
const WHEEL_SLOTS: usize = 1024;

/// Accepts per listener wake-up before other work gets a turn.
const ACCEPT_BATCH: usize = 64;

/// Pause after `EMFILE`/`ENFILE` on accept (ms).
const ACCEPT_PAUSE_MS: u64 = 1_000;

/// Minimum interval between repeated bad-client / refusal log lines (ms).
const BAD_LOG_INTERVAL_MS: u64 = 10_000;

/// Slot value of global timers.
const GLOBAL: u32 = u32::MAX;

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
    poll.registry().register(&mut listener, LISTENER, Interest::READABLE)?;
    let listen = listener.local_addr()?;
    let capacity = cfg.max_connections.min(token::MAX_SLOT);
    info!("listening on {listen} (max {capacity} sessions)");

    let clock = Instant::now();
    let now_ms = || clock.elapsed().as_millis() as u64;
    let mut now = now_ms();
    let mut wheel: Wheel<TimerEv> = Wheel::new(WHEEL_TICK_MS, WHEEL_SLOTS, now);
    let mut slab: Slab<Conn> = Slab::with_capacity(capacity);
    let mut stats = Stats::default();
    let mut bad_log = RateLimited::new(BAD_LOG_INTERVAL_MS);
    let mut full_log = RateLimited::new(BAD_LOG_INTERVAL_MS);
    let mut events = Events::with_capacity(256);
    let mut expired: Vec<TimerEv> = Vec::new();
    let mut again: VecDeque<(usize, u32)> = VecDeque::new();
    let mut next_id: u32 = 0;
    let mut accept_paused = false;
    let mut accept_pending = false;
    let stats_ms = cfg.stats_interval.as_millis() as u64;
    if stats_ms > 0 {
        wheel.insert(now + stats_ms, TimerEv { slot: GLOBAL, conn_id: 0, kind: TimerKind::Stats });
    }

    loop {
        let timeout = if !again.is_empty() || (accept_pending && !accept_paused) {
            Some(Duration::ZERO)
        } else {
            wheel.next_deadline().map(|d| Duration::from_millis(d.saturating_sub(now)))
        };
        if let Err(e) = poll.poll(&mut events, timeout) {
            if e.kind() == io::ErrorKind::Interrupted {
                continue;
            }
            return Err(e);
        }
        now = now_ms();
        let mut ctx = Ctx {
            now,
            cfg: &cfg,
            keys: &keys,
            registry: poll.registry(),
            wheel: &mut wheel,
            rng: &mut rng,
            tls: &tls,
            stats: &mut stats,
            bad_log: &mut bad_log,
            listen,
        };

        for ev in events.iter() {
            if ev.token() == LISTENER {
                accept_pending = true;
                continue;
            }
            let Some((slot, generation, role)) = token::decode(ev.token()) else { continue };
            let Some(conn) = slab.get_mut(slot) else { continue };
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
                                let status = slab[slot].on_event(Role::Client, true, true, &mut ctx);
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
                            TimerEv { slot: GLOBAL, conn_id: 0, kind: TimerKind::AcceptResume },
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
            if t.slot == GLOBAL {
                match t.kind {
                    TimerKind::Stats => {
                        info!("{}", ctx.stats.line(slab.len(), capacity));
                        ctx.wheel.insert(now + stats_ms, t);
                    }
                    TimerKind::AcceptResume => {
                        accept_paused = false;
                        accept_pending = true;
                    }
                    _ => {}
                }
                continue;
            }
            let slot = t.slot as usize;
            let Some(conn) = slab.get_mut(slot) else { continue };
            if conn.id != t.conn_id {
                continue; // stale timer of a previous session in this slot
            }
            let status = conn.on_timer(t.kind, &mut ctx);
            finish(&mut slab, slot, status, &mut again);
        }

        for _ in 0..again.len() {
            let Some((slot, id)) = again.pop_front() else { break };
            let Some(conn) = slab.get_mut(slot) else { continue };
            if conn.id != id {
                continue;
            }
            let status = conn.resume(&mut ctx);
            finish(&mut slab, slot, status, &mut again);
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
fn refuse(stream: mio::net::TcpStream, peer: SocketAddr, capacity: usize, log: &mut RateLimited, now: u64) {
    if let Some(suppressed) = log.allow(now) {
        warn!(
            "refusing client {peer}: {} ({capacity} sessions in use; raise --max-connections or the nofile limit){}",
            CloseReason::SlabFull,
            if suppressed > 0 { format!(" ({suppressed} similar suppressed)") } else { String::new() }
        );
    }
    let _ = stream.shutdown(std::net::Shutdown::Both);
}
