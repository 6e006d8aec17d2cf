//! The freeze watch's shell for one session (docs/design.md §4 rule 7): feeds the sans-IO
//! watch (`relay::stall`) what the relay and the upstream socket show, performs its effects on
//! the socket (the short keepalive), and acts on its verdicts — a session whose upstream froze
//! is ended (it is dead, and the client only recovers by reconnecting), and the freeze is a
//! fact for the ladder ([`Observation::SessionFrozen`]); so is a downstream that is not MTProto
//! ([`Failure::BadReply`]). The decisions are the watch's and the ladder's; the timer kind is
//! [`SessionTimer::Stall`]. The watch and its timer are the relay phase's (`relay::Relaying`),
//! started with the session and carried by the connect phase (nothing feeds it before the relay).

use super::*;
use crate::error::Side;

impl Conn {
    /// Arms the stall check for the watch's next due time, unless one is armed for then or
    /// earlier (a check with nothing to do is harmless; the watch re-arms from it).
    pub(super) fn arm_stall(&mut self, ctx: &mut Ctx<'_>) {
        let ev = self.timer_ev(SessionTimer::Stall);
        let Phase::Relay(r) = &mut self.phase else {
            return;
        };
        let Some(due) = r.stall.due() else {
            return;
        };
        let due = due.max(ctx.now);
        if let Some((t, at)) = r.stall_timer {
            if at <= due {
                return;
            }
            ctx.wheel.cancel(t);
        }
        r.stall_timer = Some((ctx.wheel.insert(due, ev), due));
    }

    /// The stall check is due: read the kernel's view if the watch wants it, perform the
    /// effect, and end the session on a verdict. Only while both sides are open: after one
    /// side ended, silence is the end.
    pub(super) fn stall_due(&mut self, ctx: &mut Ctx<'_>) -> Step {
        let Phase::Relay(r) = &mut self.phase else {
            return Step::Progress;
        };
        r.stall_timer = None;
        if r.wants_linger() {
            return Step::Progress;
        }
        let tcp = if r.stall.wants_tcp(ctx.now) {
            r.tcp_view()
        } else {
            None
        };
        let (effect, verdict) = r.stall.check(ctx.now, tcp);
        let probes = r.stall.bounds().probe_count();
        r.probe_effect(effect, ctx.cfg.tcp_keepalive, probes);
        if let Some(f) = verdict {
            let silent = r.stall.silent_for(ctx.now);
            return self.froze(f, silent, ctx);
        }
        self.arm_stall(ctx);
        Step::Progress
    }

    /// The upstream froze (`f`, after `silent_ms` without a byte down): the ladder and the
    /// stats learn it, the client is told by the close (it reconnects and re-sends), the line
    /// says so (folded per client).
    fn froze(&mut self, f: Freeze, silent_ms: u64, ctx: &mut Ctx<'_>) -> Step {
        self.note_freeze(f, silent_ms, ctx);
        Step::Close(CloseReason::UpstreamFrozen)
    }

    /// Records freeze `f` of this session (`silent_ms` without a byte down): the session
    /// line, the stats, a folded warning and the ladder's fact.
    fn note_freeze(&mut self, f: Freeze, silent_ms: u64, ctx: &mut Ctx<'_>) {
        let after = self.info.meter.bytes_down;
        self.info.froze = Some((f, after));
        let Some(route) = self.info.route else { return };
        ctx.stats.note_frozen(self.peer, route, f, after, ctx.now);
        let label = ctx.ladder.route(route).label();
        let silent = silent_ms as f64 / 1000.0;
        let peer = self.peer;
        ctx.warn_client(
            peer,
            format_args!(
                "upstream {label} froze after {} down ({f}: {silent:.1}s without a byte while \
                 the client waited)",
                human_bytes(after)
            ),
        );
        let obs = Observation::SessionFrozen {
            route,
            freeze: f,
            after_bytes: after,
        };
        ctx.ladder.observe(obs, ctx.now);
    }

    /// At the close of a relaying session: a client that gave up inside a reply is a freeze
    /// (`StallWatch::at_close`), and a downstream that was not MTProto counts against the route.
    pub(super) fn session_verdicts(&mut self, reason: CloseReason, ctx: &mut Ctx<'_>) {
        let Phase::Relay(r) = &self.phase else {
            return;
        };
        if reason == CloseReason::BadReply {
            if let (Some(route), Some(bad)) = (self.info.route, r.bad_reply()) {
                let label = ctx.ladder.route(route).label();
                let peer = self.peer;
                ctx.warn_client(
                    peer,
                    format_args!("upstream {label} sent what is not MTProto: {bad}"),
                );
                let obs = Observation::SessionFailed {
                    route,
                    failure: Failure::BadReply,
                };
                ctx.ladder.observe(obs, ctx.now);
            }
            return;
        }
        let by_client = reason.side() == Side::Client;
        self.judge_give_up(by_client, ctx);
    }

    /// The client ended its side while the relay still runs (the linger begins): the give-up
    /// verdict is taken now.
    pub(super) fn client_left(&mut self, ctx: &mut Ctx<'_>) {
        self.judge_give_up(true, ctx);
    }

    /// `StallWatch::at_close` with the kernel's last view when the check is armed; once per
    /// session (the watch judges only the first call).
    fn judge_give_up(&mut self, by_client: bool, ctx: &mut Ctx<'_>) {
        if self.info.froze.is_some() {
            return;
        }
        let Phase::Relay(r) = &mut self.phase else {
            return;
        };
        let tcp = if by_client && r.stall.armed() {
            r.tcp_view()
        } else {
            None
        };
        if let Some(f) = r.stall.at_close(ctx.now, by_client, tcp) {
            let silent = r.stall.silent_for(ctx.now);
            self.note_freeze(f, silent, ctx);
        }
    }
}
