//! The freeze watch of one session (docs/design.md §4 rule 7, the "16 KB freeze"): sans-IO,
//! time as a parameter (ms). The session shell (`conn`) feeds it the payload counters and the
//! relay's reply state after each relay step ([`StallWatch::observe`]), the kernel's view of the
//! upstream socket when a check is due ([`StallWatch::check`] with a [`TcpView`] from
//! `net::tcp::view`), and how the session ended ([`StallWatch::at_close`]); it arms one timer
//! at [`StallWatch::due`] and performs the [`Effect`]s. This module only decides; route health
//! is the ladder's (the shell reports a [`Freeze`] as a fact).
//!
//! **Waiting.** The client waits on the upstream when nothing it was sent is still held for it
//! (a slow reader's silence is its own) and either a reply packet has begun and not ended
//! (*mid-reply*: a server writes each transport packet whole, so a silence inside one is the
//! path's), or the client sent something since the last byte down.
//!
//! **Verdicts** (each at most once per session):
//! * [`Freeze::NoAck`], the kernel's proof (the field's form: every packet from the server
//!   dropped, ACKs too). One *step* (`--stall-ack-timeout` / 5, 200 ms–1 s) into every quiet
//!   spell that follows traffic — whether or not the client visibly waits: its request may have
//!   been answered in part, at a packet boundary, and acknowledged before the freeze — the shell
//!   arms a short TCP keepalive on the upstream ([`Effect::ArmProbe`]), so something of ours is
//!   in flight, and samples `TCP_INFO` every step. A sample with at least two unanswered
//!   transmissions (RTO retransmissions plus keepalive probes, which the kernel resets on any
//!   ACK) and no ACK for `--stall-ack-timeout` is the verdict: that path carries nothing any
//!   more, whatever the session was doing. Any ACK after the arming proves the path alive
//!   until the next traffic ([`Effect::Relax`] restores the keepalive setting), so a quiet
//!   spell costs one probe round trip and about eight system calls.
//! * [`Freeze::Silent`], the application's proof (the middlebox form: our bytes are ACKed,
//!   nothing is delivered): nothing down for `--stall-timeout` inside a reply; or for
//!   `--stall-timeout` after the latest of at least two client sends; or for twice that since
//!   the first of them when the client sent at most [`REASK_MAX`] bytes (re-asks and pings, not
//!   an upload, which can take long before its answer). A send counts as made when it left:
//!   while the kernel shows bytes of ours still queued on the upstream socket and the peer
//!   taking them (an upload's tail draining over a slow uplink, which can take far longer than
//!   the bound after the proxy read the last of it), the client is still sending, and the
//!   bound after the latest send counts from the last such sample (taken every step once the
//!   bound came due; queued bytes the peer stops taking are no excuse).
//! * [`Freeze::GaveUp`] ([`StallWatch::at_close`]): the client closed while it had waited
//!   `--stall-give-up` inside a reply, or while the kernel check had found nothing of ours
//!   answered for that long. Real clients give up after a few seconds and reconnect, before
//!   any bound above; a healthy server does not leave a reply half-sent for seconds.
//!
//! One unanswered send alone, outside a reply, is never an application-level verdict: a
//! client's `msgs_ack` is never answered, so an idle session usually ends on one. Upstream
//! bytes held for the client count as bytes down. A reply the middlebox form cuts at a packet
//! boundary, for a client that asks once and never pings, looks like an idle session: it is
//! seen only when the client asks again or gives up.

use crate::error::Freeze;
pub use crate::net::tcp::TcpView;

/// Client bytes since the last byte down below which two or more unanswered sends are taken for
/// re-asks (requests, pings) rather than an upload: see the module docs.
pub const REASK_MAX: u64 = 16 * 1024;

/// Unanswered transmissions (retransmissions + keepalive probes) a [`Freeze::NoAck`] needs.
pub const UNANSWERED_MIN: u8 = 2;

/// The watch's bounds, ms; 0 switches a check off.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct StallBounds {
    /// `--stall-timeout`: the application-level silence ([`Freeze::Silent`]).
    pub silent_ms: u64,
    /// `--stall-ack-timeout`: no ACK while something of ours is in flight ([`Freeze::NoAck`]).
    pub ack_ms: u64,
    /// `--stall-give-up`: a client closing after this long inside a reply ([`Freeze::GaveUp`]).
    pub give_up_ms: u64,
}

impl StallBounds {
    /// The kernel check's step: when the keepalive is armed after the wait began, and the
    /// sampling interval (`ack_ms` / 5, between 200 ms and 1 s).
    pub fn step_ms(&self) -> u64 {
        (self.ack_ms / 5).clamp(200, 1_000)
    }

    /// Keepalive probes (one a second) the kernel must send before it gives a connection up,
    /// so that the no-ack verdict (`ack_ms` without an ACK, sampled every step) comes first:
    /// the bound in seconds plus three (at most the kernel's 127).
    pub fn probe_count(&self) -> u32 {
        (self.ack_ms.div_ceil(1_000) + 3).min(127) as u32
    }
}

/// What the shell does to the upstream socket.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Effect {
    /// Nothing.
    None,
    /// Arm a short TCP keepalive (idle and interval one second, at least
    /// [`StallBounds::probe_count`] probes): a probe goes out at once if the socket has been
    /// quiet that long.
    ArmProbe,
    /// Restore the configured keepalive: the path answered, or the wait is over.
    Relax,
}

/// Where the kernel check of the current quiet spell is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Kernel {
    /// Not armed; due one step into the next quiet spell after traffic.
    Idle,
    /// Keepalive armed at `at`; next sample due at `next`.
    Armed { at: u64, next: u64 },
    /// An ACK came after the arming: the path is alive until the next traffic.
    Alive,
    /// No kernel view (not a TCP socket the shell can read).
    Blind,
}

/// An upload still going out on the upstream socket (see the module docs).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct Drain {
    /// The peer's acknowledged bytes at the last sample, which found ours still queued.
    acked: u64,
    /// When to sample again (ms).
    next: u64,
    /// Only one sample so far: the verdict waits for the next, which tells whether the peer
    /// takes anything.
    first: bool,
}

/// Watches one session for a frozen upstream. See the module docs.
#[derive(Clone, Copy, Debug)]
pub struct StallWatch {
    b: StallBounds,
    up: u64,
    down: u64,
    /// The last byte down (or the start), ms.
    last_down: u64,
    /// Client bytes at the last byte down.
    up_at_down: u64,
    /// Relay steps that moved bytes up since the last byte down (saturating at 2), and when the
    /// first and the latest of them were.
    sends: u8,
    first_send: u64,
    last_send: u64,
    mid_reply: bool,
    on_client: bool,
    kernel: Kernel,
    /// Traffic either way since the kernel last proved the path alive (or since the start).
    unproven: bool,
    /// The latest kernel sample while armed (for [`StallWatch::at_close`]).
    sample: Option<TcpView>,
    /// An upload still going out (see the module docs), while it is followed.
    drain: Option<Drain>,
    /// A verdict was given.
    done: bool,
}

impl StallWatch {
    /// A watch with `bounds`, starting at `now` (ms).
    pub fn new(bounds: StallBounds, now: u64) -> StallWatch {
        StallWatch {
            b: bounds,
            up: 0,
            down: 0,
            last_down: now,
            up_at_down: 0,
            sends: 0,
            first_send: 0,
            last_send: 0,
            mid_reply: false,
            on_client: false,
            kernel: Kernel::Idle,
            unproven: false,
            sample: None,
            drain: None,
            done: false,
        }
    }

    /// The watch starting from the session's payload totals so far (bytes up, bytes down): a
    /// fresh upstream after a replay counts only what the client sends from then on.
    pub fn after(mut self, bytes_up: u64, bytes_down: u64) -> StallWatch {
        self.up = bytes_up;
        self.down = bytes_down;
        self.up_at_down = bytes_up;
        self
    }

    /// After a relay step at `now`: the session's payload totals (bytes up, bytes down),
    /// whether a reply packet is half-delivered (`mid_reply`, `relay::reply`) and whether
    /// upstream bytes wait for the client to take them (`on_client`). Returns what to do to the
    /// upstream socket ([`Effect::Relax`] when a wait with the keepalive armed just ended); the
    /// caller then re-arms its timer if [`StallWatch::due`] moved earlier.
    pub fn observe(
        &mut self,
        now: u64,
        (bytes_up, bytes_down): (u64, u64),
        mid_reply: bool,
        on_client: bool,
    ) -> Effect {
        let went_up = bytes_up > self.up;
        let came_down = bytes_down > self.down || on_client;
        self.up = bytes_up;
        self.down = bytes_down;
        self.mid_reply = mid_reply;
        self.on_client = on_client;
        if came_down {
            // A send in the same step as a byte down is not counted: it may be the request
            // just answered, or an ack of what came.
            self.last_down = now;
            self.up_at_down = bytes_up;
            self.sends = 0;
            return self.new_traffic();
        }
        if went_up {
            if self.sends == 0 {
                self.first_send = now;
            }
            self.last_send = now;
            self.sends = self.sends.saturating_add(1).min(2);
            // An armed check goes on (what the client sent is in flight too); a path proven
            // alive before this send must be proven again.
            if self.kernel == Kernel::Alive {
                self.kernel = Kernel::Idle;
            }
            self.unproven = true;
        }
        Effect::None
    }

    /// Bytes came down: the quiet spell is over, the kernel check starts afresh with the next.
    fn new_traffic(&mut self) -> Effect {
        self.unproven = true;
        self.sample = None;
        self.drain = None;
        match self.kernel {
            Kernel::Armed { .. } => {
                self.kernel = Kernel::Idle;
                Effect::Relax
            }
            Kernel::Alive => {
                self.kernel = Kernel::Idle;
                Effect::None
            }
            Kernel::Idle | Kernel::Blind => Effect::None,
        }
    }

    /// When the current wait began (ms), if the client waits on the upstream.
    fn waiting_since(&self) -> Option<u64> {
        if self.done || self.on_client {
            return None;
        }
        if self.mid_reply {
            Some(self.last_down)
        } else if self.sends > 0 {
            Some(self.first_send)
        } else {
            None
        }
    }

    /// When the application-level verdict falls due, if it can.
    fn silent_due(&self) -> Option<u64> {
        match (self.mid_reply_due(), self.sends_due()) {
            (Some(a), Some(b)) => Some(a.min(b)),
            (a, b) => a.or(b),
        }
    }

    /// When the silence inside a reply is a verdict, if the client waits inside one.
    fn mid_reply_due(&self) -> Option<u64> {
        let silent = self.b.silent_ms;
        (silent > 0 && self.mid_reply && self.waiting_since().is_some())
            .then(|| self.last_down + silent)
    }

    /// When the silence after the client's sends is a verdict, if it sent twice or more.
    fn sends_due(&self) -> Option<u64> {
        let silent = self.b.silent_ms;
        if silent == 0 || self.sends < 2 || self.waiting_since().is_none() {
            return None;
        }
        let latest = self.last_send + silent;
        let due = if self.up - self.up_at_down <= REASK_MAX {
            latest.min(self.first_send + 2 * silent)
        } else {
            latest
        };
        match self.drain {
            Some(d) if d.first => Some(due.max(d.next)),
            _ => Some(due),
        }
    }

    /// When an upload still going out is sampled next, if one is (see the module docs).
    fn drain_due(&self) -> Option<u64> {
        self.drain
            .filter(|_| !self.done && self.sends_due().is_some())
            .map(|d| d.next)
    }

    /// A kernel sample `v` at `now` while the sends' bound is due or an upload drains: bytes
    /// of ours still queued and the peer taking them (its acknowledged count grew since the
    /// last sample) make `now` the latest send. The first sample that finds bytes queued holds
    /// the verdict for one step.
    fn follow_drain(&mut self, now: u64, v: TcpView) {
        if !v.queued {
            if self.drain.take().is_some() {
                // The queue emptied within the last step.
                self.last_send = self.last_send.max(now);
            }
            return;
        }
        let taking = self.drain.is_some_and(|d| v.acked > d.acked);
        if taking {
            self.last_send = self.last_send.max(now);
        }
        self.drain = Some(Drain {
            acked: v.acked,
            next: now + self.b.step_ms(),
            first: self.drain.is_none(),
        });
    }

    /// When the kernel check next needs a look, if it does.
    fn kernel_due(&self) -> Option<u64> {
        if self.b.ack_ms == 0 || self.done || self.on_client {
            return None;
        }
        match self.kernel {
            Kernel::Idle if self.unproven => {
                Some(self.last_down.max(self.last_send) + self.b.step_ms())
            }
            Kernel::Armed { next, .. } => Some(next),
            Kernel::Idle | Kernel::Alive | Kernel::Blind => None,
        }
    }

    /// When to call [`StallWatch::check`] next (ms), if anything is pending.
    pub fn due(&self) -> Option<u64> {
        [self.silent_due(), self.kernel_due(), self.drain_due()]
            .into_iter()
            .flatten()
            .min()
    }

    /// True when a check at `now` would read the kernel's view: the caller samples `TCP_INFO`
    /// only then.
    pub fn wants_tcp(&self, now: u64) -> bool {
        let due = |t: Option<u64>| t.is_some_and(|t| t <= now);
        due(self.kernel_due())
            || (self.kernel != Kernel::Blind && (due(self.sends_due()) || due(self.drain_due())))
    }

    /// A check at `now` (the timer fired), with the kernel's view of the upstream socket when
    /// [`StallWatch::wants_tcp`] asked for it (`None`: not asked, or no view to be had). Returns
    /// the effect on the socket and the verdict, if the session froze.
    pub fn check(&mut self, now: u64, tcp: Option<TcpView>) -> (Effect, Option<Freeze>) {
        if self.done {
            return (Effect::None, None);
        }
        if self.mid_reply_due().is_some_and(|t| t <= now) {
            self.done = true;
            return (Effect::None, Some(Freeze::Silent));
        }
        let sample_due = self.sends_due().is_some_and(|t| t <= now)
            || self.drain_due().is_some_and(|t| t <= now);
        match tcp {
            Some(v) if sample_due => self.follow_drain(now, v),
            // No view to be had: nothing to follow the upload with.
            None if sample_due => self.drain = None,
            _ => {}
        }
        if self.sends_due().is_some_and(|t| t <= now) {
            self.done = true;
            return (Effect::None, Some(Freeze::Silent));
        }
        match self.kernel_due() {
            Some(t) if t <= now => {}
            _ => return (Effect::None, None),
        }
        let Some(v) = tcp else {
            self.kernel = Kernel::Blind;
            return (Effect::None, None);
        };
        if v.unanswered >= UNANSWERED_MIN && v.last_ack_ms >= self.b.ack_ms {
            self.done = true;
            return (Effect::None, Some(Freeze::NoAck));
        }
        let next = now + self.b.step_ms();
        match self.kernel {
            Kernel::Armed { at, .. } if v.last_ack_ms < now - at => {
                self.kernel = Kernel::Alive;
                self.unproven = false;
                self.sample = None;
                (Effect::Relax, None)
            }
            Kernel::Armed { at, .. } => {
                self.kernel = Kernel::Armed { at, next };
                self.sample = Some(v);
                (Effect::None, None)
            }
            _ => {
                self.kernel = Kernel::Armed { at: now, next };
                self.sample = Some(v);
                (Effect::ArmProbe, None)
            }
        }
    }

    /// The session is closing at `now`, by the client (`by_client`) or otherwise, with the
    /// kernel's last view of the upstream socket if the shell could take one (`tcp`): a client
    /// that gave up after waiting `--stall-give-up` inside a reply, or while the armed kernel
    /// check saw nothing of ours answered for that long, is a [`Freeze::GaveUp`].
    /// Judged once: the first call (the client's EOF, or the close when nothing came before)
    /// decides, and later ones return `None`.
    pub fn at_close(&mut self, now: u64, by_client: bool, tcp: Option<TcpView>) -> Option<Freeze> {
        let give_up = self.b.give_up_ms;
        if self.done || !by_client || give_up == 0 {
            return None;
        }
        let inside = self.mid_reply
            && self.waiting_since().is_some()
            && now.saturating_sub(self.last_down) >= give_up;
        let unanswered = matches!(self.kernel, Kernel::Armed { .. })
            && tcp
                .or(self.sample)
                .is_some_and(|v| v.unanswered >= 1 && v.last_ack_ms >= give_up);
        // Judged now: a linger after the client's EOF must not add to its wait.
        self.done = true;
        (inside || unanswered).then_some(Freeze::GaveUp)
    }

    /// The bounds this watch was made with.
    pub fn bounds(&self) -> StallBounds {
        self.b
    }

    /// True while the kernel check is armed (the shell samples the socket at close then).
    pub fn armed(&self) -> bool {
        matches!(self.kernel, Kernel::Armed { .. })
    }

    /// Milliseconds since the last byte down at `now` (the freeze's silence so far).
    pub fn silent_for(&self, now: u64) -> u64 {
        now.saturating_sub(self.last_down)
    }
}

#[cfg(test)]
mod tests;
