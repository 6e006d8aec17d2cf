//! Shutdown: what SIGTERM/SIGINT do, and the drain.
//!
//! The first stop signal closes the listener (no more clients), stops the ladder's background
//! work (no probes or fills; pooled upstreams closed), logs `shutdown: draining N sessions for
//! at most D`, writes the stats line and lets open sessions finish. The process exits (the
//! reactor returns `Ok`) when the last session ends (`shutdown: done`) or at `--drain-timeout`
//! (`shutdown: N sessions cut at --drain-timeout`: they are closed as the reactor is dropped).
//! A second stop signal exits at once. SIGHUP reloads (`reload`), also while waiting for the
//! listen address (`listen`, `--bind-retry`). [`Life`] is the state; the timers it needs are
//! reported through [`Reactor::life_deadline`].

use log::{info, warn};

use super::signals::Signal;
use super::Reactor;

/// Running or draining.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Life {
    /// Serving.
    Running,
    /// A stop signal came: no listener, sessions finish until `until` (ms).
    Draining {
        /// The drain's end (ms on the reactor clock).
        until: u64,
    },
}

/// What the loop does next.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Next {
    /// Keep going.
    Go,
    /// Return from the loop (the process exits 0).
    Exit,
}

impl Life {
    /// The state after a stop signal at `now` (ms) with `--drain-timeout` `drain_ms`, and what
    /// the loop does: the first signal starts the drain, a second one exits.
    pub fn on_stop(self, now: u64, drain_ms: u64) -> (Life, Next) {
        match self {
            Life::Running => (
                Life::Draining {
                    until: now + drain_ms,
                },
                Next::Go,
            ),
            Life::Draining { .. } => (self, Next::Exit),
        }
    }

    /// Whether the loop ends at `now` with `sessions` open: a drain ends when the last session
    /// is gone or its time is up.
    pub fn check(self, now: u64, sessions: usize) -> Next {
        match self {
            Life::Draining { until } if sessions == 0 || now >= until => Next::Exit,
            _ => Next::Go,
        }
    }

    /// The drain's end, while draining.
    pub fn deadline(self) -> Option<u64> {
        match self {
            Life::Draining { until } => Some(until),
            Life::Running => None,
        }
    }
}

impl Reactor {
    /// Acts on the signals that arrived. Returns [`Next::Exit`] on a second stop signal (or a
    /// first one with nothing to drain).
    pub(super) fn on_signals(&mut self) -> Next {
        for sig in self.signals.take() {
            match sig {
                Signal::Reload => {
                    if self.bind_retry.waiting() && self.life == Life::Running {
                        self.retry_bind();
                    }
                    let _ = self.reload();
                }
                Signal::Stop => {
                    if self.stop() == Next::Exit {
                        return Next::Exit;
                    }
                }
            }
        }
        self.life_check()
    }

    /// A stop signal: starts the drain, or exits on the second one.
    fn stop(&mut self) -> Next {
        let drain = self.s.cfg.drain_timeout;
        let (life, next) = self.life.on_stop(self.now, drain.as_millis() as u64);
        if next == Next::Exit {
            warn!(
                "shutdown: second signal: exiting at once, {} sessions cut",
                self.slab.len()
            );
            return Next::Exit;
        }
        self.life = life;
        self.close_listener();
        self.close_ways();
        self.bind_retry.bound();
        let pooled = self.s.ladder.stop();
        info!(
            "shutdown: draining {} sessions for at most {drain:?} ({pooled} pooled upstreams closed)",
            self.slab.len()
        );
        self.write_stats();
        Next::Go
    }

    /// The loop's end check, once per iteration: a due `--bind-retry` attempt, the drain's end.
    pub(super) fn life_check(&mut self) -> Next {
        if self.life == Life::Running && self.bind_retry.due(self.now) {
            self.retry_bind();
        }
        let next = self.life.check(self.now, self.slab.len());
        if next == Next::Exit {
            match self.slab.len() {
                0 => info!("shutdown: done"),
                n => warn!("shutdown: {n} sessions cut at --drain-timeout"),
            }
        }
        next
    }

    /// The earliest of the drain's end and the next bind attempt, for the poll timeout.
    pub(super) fn life_deadline(&self) -> Option<u64> {
        [self.life.deadline(), self.bind_retry.next_deadline()]
            .into_iter()
            .flatten()
            .min()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_first_stop_drains_and_the_second_exits() {
        let (life, next) = Life::Running.on_stop(1_000, 5_000);
        assert_eq!((life, next), (Life::Draining { until: 6_000 }, Next::Go));
        assert_eq!(life.deadline(), Some(6_000));
        assert_eq!(life.on_stop(1_500, 5_000), (life, Next::Exit));
    }

    #[test]
    fn a_drain_ends_with_the_last_session_or_at_its_deadline() {
        let life = Life::Draining { until: 6_000 };
        assert_eq!(life.check(2_000, 3), Next::Go);
        assert_eq!(life.check(2_000, 0), Next::Exit, "nothing left");
        assert_eq!(life.check(6_000, 3), Next::Exit, "time is up");
        assert_eq!(Life::Running.check(u64::MAX, 0), Next::Go);
        assert_eq!(Life::Running.deadline(), None);
        // --drain-timeout 0: the drain ends at the signal's own time.
        let (zero, _) = Life::Running.on_stop(7, 0);
        assert_eq!(zero.check(7, 10), Next::Exit);
    }
}
