//! The prober: the thin I/O shell that runs the ladder's background work.
//!
//! Owns: the slab of running probes and pool fills (each a [`Probe`] with its deadline), their
//! tokens (`Role::Probe`, slot + id generation, so stale events are dropped), the suspend check
//! of the pool sweep (the one reader of the boot clock, `/proc/uptime`), and feeding every
//! outcome back to the ladder. Decides nothing: what runs, when, and what an outcome means are
//! `route::ladder`'s. The reactor drives it the way it drives
//! the resolver (events, [`Prober::next_deadline`], [`Prober::expire`]); the `check` applet runs
//! its own rounds over the same [`Prober`].

use std::sync::Arc;

use log::debug;
use mio::Registry;
use slab::Slab;

use crate::dns::Resolver;
use crate::error::Failure;
use crate::mtproto::dc::DcId;
use crate::net::dial::{Dial, DialSpec, Upstream};
use crate::net::outbound::{self, Outbound};
use crate::rng::Rng;
use crate::route::ladder::{Ladder, Observation, RouteId, Work};
use crate::route::pool::Pooled;
use crate::route::probe::{Goal, Probe, ProbeOutcome};
use crate::stats::Stats;
use crate::token::{self, Role};

impl Pooled for Upstream {
    fn idle_and_alive(&mut self) -> bool {
        Upstream::idle_and_alive(self)
    }

    fn close(&mut self) {
        self.shutdown();
    }
}

/// Where a job came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Origin {
    /// Work the ladder handed out (a probe or a fill, on the background budget).
    Work,
    /// A client's dial adopted after it lost its race (or its client left).
    Loser,
}

/// One running job.
struct Job {
    probe: Probe,
    deadline: u64,
    origin: Origin,
}

/// A job that ended: its route, how far it was meant to go, when it began, what came of it.
pub struct Finished {
    /// Route (or, in `check`, row) index.
    pub route: RouteId,
    /// Probe to `resPQ`, or fill to the upgrade.
    pub goal: Goal,
    /// Handed out by the ladder, or a client's adopted dial.
    pub origin: Origin,
    /// When its dial began (ms).
    pub started: u64,
    /// The outcome (a deadline is reported as its timeout failure).
    pub outcome: ProbeOutcome,
    /// Its dial went through the outbound proxy.
    pub via_proxy: bool,
}

/// Running probes and fills.
pub struct Prober {
    slab: Slab<Job>,
    next_id: u32,
}

impl Prober {
    /// An empty prober with room for `capacity` jobs before its slab grows.
    pub fn new(capacity: usize) -> Prober {
        Prober {
            slab: Slab::with_capacity(capacity),
            next_id: 0,
        }
    }

    /// Jobs running.
    pub fn len(&self) -> usize {
        self.slab.len()
    }

    /// True when nothing runs.
    pub fn is_empty(&self) -> bool {
        self.slab.is_empty()
    }

    fn next_id(&mut self) -> u32 {
        self.next_id = self.next_id.wrapping_add(1);
        self.next_id
    }

    /// Starts dialling `spec` for `route` toward `goal`, giving up at `deadline` (ms). `pull`
    /// is a probe's byte goal ([`Probe::pulling`]; 0 = one `resPQ`).
    ///
    /// Errors: the socket could not be created or registered.
    #[allow(clippy::too_many_arguments)]
    pub fn launch(
        &mut self,
        route: RouteId,
        dc: DcId,
        spec: &DialSpec,
        (goal, pull): (Goal, usize),
        deadline: u64,
        (registry, outbound): (&Registry, Option<&Outbound>),
        now: u64,
    ) -> Result<(), Failure> {
        let id = self.next_id();
        let entry = self.slab.vacant_entry();
        let token = token::encode(entry.key(), id, Role::Probe);
        let dial = Dial::start(spec, outbound, registry, token, std::time::Duration::ZERO)?;
        let probe = Probe::start(route, id, dc, spec, dial, goal, now).pulling(pull);
        entry.insert(Job {
            probe,
            deadline,
            origin: Origin::Work,
        });
        Ok(())
    }

    /// Takes over a client's losing WS dial of `route` (begun at `started`) as a fill that
    /// gives up at `deadline`.
    ///
    /// Errors: re-registering its socket failed (the dial is dropped).
    pub fn adopt(
        &mut self,
        route: RouteId,
        dc: DcId,
        mut dial: Dial,
        started: u64,
        deadline: u64,
        registry: &Registry,
    ) -> std::io::Result<()> {
        let id = self.next_id();
        let entry = self.slab.vacant_entry();
        dial.retoken(registry, token::encode(entry.key(), id, Role::Probe))?;
        let probe = Probe::adopt(route, id, dc, dial, started);
        entry.insert(Job {
            probe,
            deadline,
            origin: Origin::Loser,
        });
        Ok(())
    }

    /// Takes over a client's losing WS dial of `route` (begun at `started`) as a background
    /// fill that gives up at `deadline`, so its outcome still teaches the ladder; dropped when
    /// the ladder's job slots are full.
    pub fn take_loser(
        &mut self,
        ladder: &mut Ladder<Upstream>,
        registry: &Registry,
        route: RouteId,
        dial: Dial,
        (started, deadline): (u64, u64),
        now: u64,
    ) {
        if !ladder.adopt(route) {
            return;
        }
        let dc = ladder.route(route).dc;
        if self
            .adopt(route, dc, dial, started, deadline, registry)
            .is_err()
        {
            let obs = Observation::NotStarted {
                route,
                probe: false,
                failure: None,
            };
            ladder.observe(obs, now);
        }
    }

    /// A readiness event for job `slot` whose token carried `generation`: advances it and
    /// returns it if it ended (`now` in ms on the caller's monotonic clock, `wall_ms` the Unix
    /// time in ms: [`Probe::advance`]). Stale events (slot reused) are dropped.
    pub fn on_event(
        &mut self,
        slot: usize,
        generation: u8,
        tls: &Arc<rustls::ClientConfig>,
        (now, wall_ms): (u64, u64),
        rng: &mut Rng,
    ) -> Option<Finished> {
        let job = self.slab.get_mut(slot)?;
        if token::generation(job.probe.id) != generation {
            return None;
        }
        let outcome = job.probe.advance(tls, (now, wall_ms), rng)?;
        Some(self.remove(slot, outcome))
    }

    /// Ends every job whose deadline is at or before `now`, appending them to `out`.
    pub fn expire(&mut self, now: u64, out: &mut Vec<Finished>) {
        let due: Vec<usize> = self
            .slab
            .iter()
            .filter(|(_, j)| j.deadline <= now)
            .map(|(k, _)| k)
            .collect();
        for slot in due {
            let outcome = self.slab[slot].probe.timeout_failure();
            out.push(self.remove(slot, outcome));
        }
    }

    /// The earliest job deadline (ms).
    pub fn next_deadline(&self) -> Option<u64> {
        self.slab.iter().map(|(_, j)| j.deadline).min()
    }

    fn remove(&mut self, slot: usize, outcome: ProbeOutcome) -> Finished {
        let mut job = self.slab.remove(slot);
        drop(job.probe.take_upstream());
        Finished {
            route: job.probe.route,
            goal: job.probe.goal(),
            origin: job.origin,
            started: job.probe.started,
            outcome,
            via_proxy: job.probe.via_proxy(),
        }
    }
}

/// The boot-time and monotonic clocks at the last sweep, for suspend detection.
pub struct SuspendWatch {
    uptime: u64,
    mono: u64,
}

impl SuspendWatch {
    /// Starts watching at monotonic time `now` (ms).
    pub fn new(now: u64) -> SuspendWatch {
        SuspendWatch {
            uptime: uptime_ms().unwrap_or(0),
            mono: now,
        }
    }

    /// True if the machine slept since the last call (the boot clock jumped past the
    /// monotonic one).
    pub fn slept(&mut self, now: u64) -> bool {
        let uptime = uptime_ms().unwrap_or(self.uptime);
        let slept = suspended(self.uptime, uptime, self.mono, now);
        (self.uptime, self.mono) = (uptime, now);
        slept
    }
}

/// Detects a suspend/resume: the boot-time clock (`/proc/uptime`, which counts suspended time)
/// moved more than the monotonic clock since the last call. Pure arithmetic on the two deltas.
pub fn suspended(prev_uptime_ms: u64, uptime_ms: u64, prev_mono_ms: u64, mono_ms: u64) -> bool {
    let up = uptime_ms.saturating_sub(prev_uptime_ms);
    let mono = mono_ms.saturating_sub(prev_mono_ms);
    up > mono + 5_000
}

/// `/proc/uptime` in ms (boot time including suspend), if readable.
pub fn uptime_ms() -> Option<u64> {
    let text = std::fs::read_to_string("/proc/uptime").ok()?;
    let secs: f64 = text.split_whitespace().next()?.parse().ok()?;
    Some((secs * 1000.0) as u64)
}

/// What the background shell needs from the reactor for one round.
pub struct Shell<'a> {
    /// Running jobs.
    pub prober: &'a mut Prober,
    /// For registering job sockets.
    pub registry: &'a Registry,
    /// Resolver (cache lookups only).
    pub dns: &'a mut Resolver,
    /// The outbound setting every dial takes (`None` = direct).
    pub outbound: Option<&'a Outbound>,
    /// Counters.
    pub stats: &'a mut Stats,
    /// Suspend detection for the sweep.
    pub watch: &'a mut SuspendWatch,
}

impl Shell<'_> {
    /// Runs every piece of work the ladder has due at `now`.
    pub fn run_due(&mut self, ladder: &mut Ladder<Upstream>, now: u64) {
        loop {
            let (dns, outbound) = (&mut *self.dns, self.outbound);
            // A name the outbound proxy resolves (`socks5h://`) needs no local answer.
            let work = ladder.next_work(now, &mut |h| {
                outbound::remote_name(outbound, h).or_else(|| crate::dns::cached(dns, h, now))
            });
            let Some(work) = work else { return };
            let (route, spec, deadline, goal, pull) = match work {
                Work::Sweep => {
                    let slept = self.watch.slept(now);
                    ladder.sweep_pools(now, slept);
                    continue;
                }
                Work::Probe {
                    route,
                    spec,
                    deadline,
                    pull_bytes,
                } => (route, spec, deadline, Goal::ResPq, pull_bytes as usize),
                Work::Fill {
                    route,
                    spec,
                    deadline,
                } => (route, spec, deadline, Goal::Upgrade, 0),
            };
            let dc = ladder.route(route).dc;
            if outbound::waits_for_proxy(outbound, spec.addr, spec.kind.host()) {
                // The outbound proxy, given by name, has no address yet: nothing failed, the
                // work is retried shortly (like a route whose own name is not resolved yet).
                debug!(
                    "{}: waits for the outbound proxy's address",
                    ladder.route(route).label()
                );
                let probe = goal == Goal::ResPq;
                let obs = Observation::NotStarted {
                    route,
                    probe,
                    failure: None,
                };
                ladder.observe(obs, now);
                continue;
            }
            match goal {
                Goal::ResPq => self.stats.probes[0] += 1,
                Goal::Upgrade => self.stats.pool_fills += 1,
            }
            let io = (self.registry, self.outbound);
            let launched = (self.prober).launch(route, dc, &spec, (goal, pull), deadline, io, now);
            if let Err(f) = launched {
                debug!("{} could not start: {f}", ladder.route(route).label());
                let probe = goal == Goal::ResPq;
                if probe {
                    self.stats.probes[2] += 1;
                }
                let failure = Some(f);
                ladder.observe(
                    Observation::NotStarted {
                        route,
                        probe,
                        failure,
                    },
                    now,
                );
            }
        }
    }

    /// Feeds a finished job back to the ladder at `now`.
    pub fn finish(&mut self, ladder: &mut Ladder<Upstream>, f: Finished, now: u64) {
        let route = f.route;
        // Through the outbound proxy, anything but the proxy's own failure means it works.
        let at_proxy = matches!(&f.outcome, ProbeOutcome::Failed(fl, ..) if fl.is_proxy());
        if f.via_proxy && !at_proxy {
            ladder.proxy_worked(now, f.started);
        }
        match (f.goal, f.outcome) {
            (Goal::ResPq, ProbeOutcome::Ok(rtt)) => {
                self.stats.probes[1] += 1;
                ladder.observe(
                    Observation::ProbeDone {
                        route,
                        result: Ok(rtt),
                    },
                    now,
                );
            }
            (Goal::ResPq, ProbeOutcome::Failed(fl, retry_after, detail)) => {
                self.stats.probes[2] += 1;
                debug!(
                    "probe {} failed after {}ms: {fl} ({detail})",
                    ladder.route(route).label(),
                    now.saturating_sub(f.started)
                );
                ladder.observe(
                    Observation::ProbeDone {
                        route,
                        result: Err((fl, retry_after)),
                    },
                    now,
                );
            }
            (Goal::Upgrade, ProbeOutcome::Filled(mut up, _)) => {
                let _ = self.registry.deregister(up.sock());
                ladder.fill_ready(route, up, f.started, now);
            }
            // A probe never stops at the upgrade: drop it, retry later.
            (Goal::ResPq, ProbeOutcome::Filled(mut up, _)) => {
                self.stats.probes[2] += 1;
                up.shutdown();
                let obs = Observation::NotStarted {
                    route,
                    probe: true,
                    failure: None,
                };
                ladder.observe(obs, now);
            }
            (Goal::Upgrade, ProbeOutcome::Failed(failure, retry_after, detail)) => {
                debug!(
                    "pool {}: fill failed: {failure} ({detail})",
                    ladder.route(route).label()
                );
                ladder.observe(
                    Observation::FillFailed {
                        route,
                        failure,
                        retry_after,
                        client_dial: f.origin == Origin::Loser,
                    },
                    now,
                );
            }
            // A fill never reaches resPQ.
            (Goal::Upgrade, ProbeOutcome::Ok(_)) => {
                ladder.observe(
                    Observation::NotStarted {
                        route,
                        probe: false,
                        failure: None,
                    },
                    now,
                );
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn suspend_is_a_boot_clock_jump() {
        assert!(!suspended(1_000, 11_000, 500, 10_500));
        assert!(suspended(1_000, 70_000, 500, 10_500));
        assert!(!suspended(5_000, 1_000, 0, 10)); // clock oddities never panic
    }

    #[test]
    fn uptime_is_readable_here() {
        assert!(uptime_ms().is_some_and(|u| u > 0));
    }
}
