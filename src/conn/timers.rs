//! A session's timers: what each [`SessionTimer`] does when it fires (handshake — PROXY header
//! included — and linger deadlines, the mask phase's connect/idle deadline, idleness, the WS
//! ping, a pooled upstream's first-byte deadline; the stall watch's is `freeze`'s) and how they
//! are armed, and the timer settings a session keeps from its start ([`Kept`]). The timer ids
//! live in [`Conn`] (`mod.rs`), the relay phase's own (ping, first byte) in `relay::Relaying`,
//! the connect phase's in `connect::Connecting`; the decisions they lead to in the relay core
//! (`crate::relay`) and the ladder. A silent pooled upstream's replay starts the connect phase
//! again here (`relay::Overdue`).

use super::*;

/// The timer settings a session reads after it started, copied from the configuration at
/// accept: a reload (`reactor::reload`) never shortens or lengthens a live session's idle
/// timeout, close linger, WS ping interval or its first freeze watch's bounds. Milliseconds;
/// 0 = never for the pings.
#[derive(Clone, Copy, Debug)]
pub(super) struct Kept {
    idle_ms: u64,
    linger_ms: u64,
    cf_ping_ms: u64,
    ws_ping_ms: u64,
    stall: StallBounds,
}

impl Kept {
    /// The values of `cfg` (`--idle-timeout`, `--close-linger`, `--cf-ping-interval`,
    /// `--ws-ping-interval`).
    pub(super) fn of(cfg: &Config) -> Kept {
        let ms = |d: std::time::Duration| d.as_millis() as u64;
        Kept {
            idle_ms: ms(cfg.idle_timeout),
            linger_ms: ms(cfg.close_linger),
            cf_ping_ms: ms(cfg.cf_ping_interval),
            ws_ping_ms: ms(cfg.ws_ping_interval),
            stall: super::stall_bounds(cfg),
        }
    }

    /// `--idle-timeout` at the session's start, ms.
    pub(super) fn idle_ms(&self) -> u64 {
        self.idle_ms
    }

    /// `--close-linger` at the session's start, ms.
    pub(super) fn linger_ms(&self) -> u64 {
        self.linger_ms
    }

    /// The freeze watch's bounds at the session's start (`--stall-timeout`,
    /// `--stall-ack-timeout`, `--stall-give-up`).
    pub(super) fn stall(&self) -> StallBounds {
        self.stall
    }
}

impl Conn {
    /// Handles a timer addressed to this session (already checked for staleness).
    pub fn on_timer(&mut self, kind: SessionTimer, ctx: &mut Ctx<'_>) -> Status {
        let step = match kind {
            SessionTimer::Handshake => {
                self.timer = None;
                match self.phase {
                    Phase::Handshake(_) => self.handshake_timeout(ctx),
                    Phase::Pre(_) => self.proxy_header_timeout(ctx),
                    Phase::Direct(_) => self.direct_timeout(ctx),
                    Phase::Socks(_) => Step::Close(CloseReason::HandshakeTimeout),
                    _ => Step::Progress,
                }
            }
            SessionTimer::Mask => {
                self.timer = None;
                self.mask_timer(ctx)
            }
            SessionTimer::Linger => {
                self.timer = None;
                match self.phase {
                    Phase::Draining(reason) => Step::Close(reason),
                    Phase::Relay(ref r) => Step::Close(r.linger_reason()),
                    _ => Step::Progress,
                }
            }
            SessionTimer::Attempt(_)
            | SessionTimer::Hedge
            | SessionTimer::Budget
            | SessionTimer::Pace(_) => self.connect_timer(kind, ctx),
            SessionTimer::Ping => self.ping_timer(ctx),
            SessionTimer::FirstByte => {
                if let Phase::Relay(r) = &mut self.phase {
                    r.first_byte_fired();
                }
                match self.first_byte_overdue(ctx) {
                    relay::Overdue::Step(step) => step,
                    relay::Overdue::Replay(resume, dc) => {
                        let (slot, id, peer) = (self.slot, self.id, self.peer);
                        // The old upstream's silence is not the new one's, and the replay is
                        // not the client asking again: a fresh watch, past the bytes so far.
                        let meter = &self.info.meter;
                        let watch = StallWatch::new(stall_bounds(ctx.cfg), ctx.now)
                            .after(meter.bytes_up, meter.bytes_down);
                        let c = Connecting::retry(*resume, dc, slot, id, peer, watch, ctx);
                        self.phase = Phase::Connecting(Box::new(c));
                        Step::Progress
                    }
                }
            }
            SessionTimer::Stall => self.stall_due(ctx),
            SessionTimer::Idle => {
                self.idle_timer = None;
                let idle_ms = self.kept.idle_ms();
                if ctx.now.saturating_sub(self.last_activity) >= idle_ms {
                    Step::Close(CloseReason::IdleTimeout)
                } else {
                    self.arm_idle(self.last_activity + idle_ms, ctx);
                    Step::Progress
                }
            }
        };
        match step {
            Step::Close(reason) => {
                self.close(reason, ctx);
                Status::Closed
            }
            _ => self.resume(ctx),
        }
    }

    /// The keepalive ping timer of a relaying session: a ping goes up only after real
    /// idleness and while the route may be pinged; the timer is re-armed while relaying.
    fn ping_timer(&mut self, ctx: &mut Ctx<'_>) -> Step {
        if let Phase::Relay(r) = &mut self.phase {
            r.ping_timer = None;
        }
        if let Some(t) = self.info.tier {
            // Only after real idleness: traffic either way since the last ping (or the
            // start) pushes the ping back (lazy re-arm). And only while the route may
            // be pinged: a timer armed before the ladder learned otherwise is void.
            let idle = ctx.now >= self.ping_due(t);
            let allowed = self
                .info
                .route
                .is_none_or(|r| ctx.ladder.pings_allowed(r, ctx.now));
            if let (Phase::Relay(r), true) = (&mut self.phase, idle && allowed) {
                r.queue_ping(ctx.now);
                r.ping_sent = Some((ctx.now, self.info.meter.bytes_down));
            }
            if matches!(self.phase, Phase::Relay(_)) {
                self.arm_ping(t, ctx);
            }
        }
        Step::Progress
    }

    pub(super) fn arm(&mut self, at: u64, kind: SessionTimer, ctx: &mut Ctx<'_>) {
        if let Some(t) = self.timer.take() {
            ctx.wheel.cancel(t);
        }
        self.timer = Some(ctx.wheel.insert(at, self.timer_ev(kind)));
    }

    pub(super) fn arm_idle(&mut self, at: u64, ctx: &mut Ctx<'_>) {
        if let Some(t) = self.idle_timer.take() {
            ctx.wheel.cancel(t);
        }
        self.idle_timer = Some(ctx.wheel.insert(at, self.timer_ev(SessionTimer::Idle)));
    }

    /// The WS keepalive interval of `tier` (docs/design.md §5 keepalive): a Worker, where the
    /// ping ends at the intermediary, `--cf-ping-interval`; Telegram's front, directly or
    /// through a Cloudflare-proxied domain (which passes pings on to it),
    /// `--ws-ping-interval`, off by default; none for raw TCP. Zero = never.
    pub(super) fn ping_every(tier: Tier, kept: &Kept) -> u64 {
        match tier {
            Tier::Worker => kept.cf_ping_ms,
            Tier::Ws | Tier::Front | Tier::CfProxy | Tier::CfProxyWs => kept.ws_ping_ms,
            Tier::Mtproto | Tier::Tcp => 0,
        }
    }

    /// When the next ping is due (ms): one interval after the last payload byte either way,
    /// our last ping, or the relay's start, whichever is latest.
    pub(super) fn ping_due(&self, tier: Tier) -> u64 {
        let since = self
            .last_activity
            .max(self.ping_sent().map_or(0, |(at, _)| at))
            .max(self.info.connected_ms.unwrap_or(0));
        since + Self::ping_every(tier, &self.kept)
    }

    /// Arms the WS keepalive ping (lazily: [`SessionTimer::Ping`] checks real idleness when it
    /// fires). Nothing when the tier pings never or the ladder learned that the route's front
    /// closes sessions after a ping.
    pub(super) fn arm_ping(&mut self, tier: Tier, ctx: &mut Ctx<'_>) {
        let Phase::Relay(r) = &mut self.phase else {
            return;
        };
        if let Some(t) = r.ping_timer.take() {
            ctx.wheel.cancel(t);
        }
        let pings_off = self
            .info
            .route
            .is_some_and(|r| !ctx.ladder.pings_allowed(r, ctx.now));
        if Self::ping_every(tier, &self.kept) == 0 || pings_off {
            return;
        }
        let at = self.ping_due(tier).max(ctx.now + 1);
        let ev = self.timer_ev(SessionTimer::Ping);
        if let Phase::Relay(r) = &mut self.phase {
            r.ping_timer = Some(ctx.wheel.insert(at, ev));
        }
    }

    /// Our last WS ping in the relay phase: when (ms) and the bytes down then.
    pub(super) fn ping_sent(&self) -> Option<(u64, u64)> {
        match &self.phase {
            Phase::Relay(r) => r.ping_sent,
            _ => None,
        }
    }

    pub(super) fn timer_ev(&self, kind: SessionTimer) -> TimerEv {
        TimerEv {
            slot: self.slot as u32,
            conn_id: self.id,
            kind,
        }
    }
}
