//! Whether the wall clock may be trusted to refuse a ClientHello on its timestamp: the
//! router-without-RTC rule. A home router boots with its clock at the firmware's build date (or
//! 1970) until NTP sets it, and NTP may itself need our proxy; refusing every hello as stale
//! then would lock the user out. Sans-IO: readings are passed in.

/// This release's date, 2026-11-01T00:00:00Z in Unix seconds: a wall clock reading earlier than
/// this is certainly unset. Update it with every release (a later floor only helps).
pub const CLOCK_FLOOR: u64 = 1_793_491_200;

/// A change between the wall clock and the monotonic clock larger than this is a step (NTP or a
/// user set the clock), not drift: 10 s.
pub const JUMP_S: i64 = 10;

/// Something about the wall clock worth one log line.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClockEvent {
    /// The clock is not trusted and looks unset: it reads before [`CLOCK_FLOOR`], or a client
    /// whose hello was otherwise valid disagreed with it by more than the window. `wall_s` is
    /// the reading. Reported once per process.
    LooksUnset {
        /// Unix seconds read.
        wall_s: u64,
    },
    /// The wall clock moved `by_s` seconds (signed) against the monotonic clock; trust is
    /// re-evaluated (a step after the floor makes it trusted).
    Jumped {
        /// Seconds, positive = forward.
        by_s: i64,
    },
    /// An accepted hello's timestamp agreed with the clock within the window: trusted now.
    Confirmed,
}

impl std::fmt::Display for ClockEvent {
    /// One log line's text, e.g. "wall clock looks unset (reads 1600000000): fake-TLS
    /// timestamps are not checked until it is set or a client confirms it".
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ClockEvent::LooksUnset { wall_s } => write!(
                f,
                "wall clock looks unset (reads {wall_s}): fake-TLS timestamps are not checked \
                 until it is set or a client confirms it"
            ),
            ClockEvent::Jumped { by_s } => write!(f, "wall clock jumped by {by_s:+} s"),
            ClockEvent::Confirmed => {
                f.write_str("wall clock confirmed by a client: fake-TLS timestamps are checked")
            }
        }
    }
}

/// Is the wall clock trustworthy?
///
/// The rule (for `--help`): the wall clock is trusted once it reads later than this release's
/// date AND either it was stepped since start (it moved more than 10 s against the monotonic
/// clock: NTP has set it) or a client's valid hello carried a timestamp within
/// --tls-time-window of it. Until then a hello is never refused on its timestamp alone, and
/// "clock looks unset" is logged once. A later step is logged and trust is re-evaluated by the
/// same rule.
#[derive(Clone, Debug)]
pub struct ClockTrust {
    /// `wall_s − mono_s` at the previous reading, seconds.
    offset_s: i64,
    /// Last wall reading, Unix seconds.
    wall_s: u64,
    /// The clock was stepped since start.
    stepped: bool,
    /// A client's hello agreed with the clock.
    confirmed: bool,
    /// LooksUnset was reported (or queued).
    unset_reported: bool,
    /// An event waiting for the next `observe` (LooksUnset found at `new`).
    pending: Option<ClockEvent>,
}

impl ClockTrust {
    /// `wall_s`: Unix seconds now; `mono_ms`: the reactor's monotonic ms now. A reading before
    /// [`CLOCK_FLOOR`] queues `LooksUnset`, returned by the next [`ClockTrust::observe`].
    pub fn new(wall_s: u64, mono_ms: u64) -> ClockTrust {
        let mut c = ClockTrust {
            offset_s: offset(wall_s, mono_ms),
            wall_s,
            stepped: false,
            confirmed: false,
            unset_reported: false,
            pending: None,
        };
        if wall_s <= CLOCK_FLOOR {
            c.pending = c.unset(wall_s);
        }
        c
    }

    /// Feeds a fresh reading; returns Some(event) once per change worth one log line: `Jumped`
    /// when the wall clock moved more than [`JUMP_S`] against the monotonic one (then trust is
    /// re-evaluated; a jump to before the floor leaves it untrusted and may report
    /// `LooksUnset` on a later call), else a queued `LooksUnset`.
    pub fn observe(&mut self, wall_s: u64, mono_ms: u64) -> Option<ClockEvent> {
        let now = offset(wall_s, mono_ms);
        let by_s = now.saturating_sub(self.offset_s);
        self.wall_s = wall_s;
        // compared with the previous reading, so slow drift never adds up to a step
        self.offset_s = now;
        if by_s.abs() > JUMP_S {
            self.stepped = true;
            if wall_s <= CLOCK_FLOOR && self.pending.is_none() {
                self.pending = self.unset(wall_s);
            }
            return Some(ClockEvent::Jumped { by_s });
        }
        self.pending.take()
    }

    /// True when a hello may be refused on its timestamp alone: the last reading is after
    /// [`CLOCK_FLOOR`] and the clock was stepped or confirmed.
    pub fn trusted(&self) -> bool {
        self.wall_s > CLOCK_FLOOR && (self.stepped || self.confirmed)
    }

    /// An accepted hello's timestamp was `skew_s` seconds from the clock (`window_s` > 0; call
    /// only while not trusted). Agreement within the window after the floor confirms the clock
    /// (`Confirmed`); disagreement reports `LooksUnset` once.
    pub fn hello_agreed(&mut self, skew_s: i64, window_s: u64) -> Option<ClockEvent> {
        let within = skew_s.unsigned_abs() <= window_s;
        if within && self.wall_s > CLOCK_FLOOR {
            if self.confirmed {
                return None;
            }
            self.confirmed = true;
            return Some(ClockEvent::Confirmed);
        }
        self.unset(self.wall_s)
    }

    /// `LooksUnset` the first time only.
    fn unset(&mut self, wall_s: u64) -> Option<ClockEvent> {
        if self.unset_reported {
            return None;
        }
        self.unset_reported = true;
        Some(ClockEvent::LooksUnset { wall_s })
    }
}

/// `wall_s − mono_ms / 1000` as signed seconds (saturating; both are far below i64::MAX).
fn offset(wall_s: u64, mono_ms: u64) -> i64 {
    let w = i64::try_from(wall_s).unwrap_or(i64::MAX);
    let m = i64::try_from(mono_ms / 1000).unwrap_or(i64::MAX);
    w.saturating_sub(m)
}
