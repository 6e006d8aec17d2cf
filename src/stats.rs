//! Counters and the periodic stats line.
//!
//! Plain `u64` counters owned by the reactor thread (no atomics: MIPS32 has no 64-bit ones).
//! Closes are counted here per reason ([`Stats::record_close`]); the per-session close line
//! itself is written by `conn` when a session ends. Formatting only; nothing here does I/O
//! except reading `/proc/self/smaps_rollup` (or `/proc/self/statm`) for RSS.

use std::net::SocketAddr;

use crate::error::{CloseReason, Freeze};

/// Frozen sessions remembered for `ctl status` (the most recent ones).
pub const RECENT_FROZEN: usize = 8;

/// One frozen session, for `ctl status` (docs/design.md §4 rule 7).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrozenSession {
    /// The client.
    pub peer: SocketAddr,
    /// The route it was relayed over (`#N` in `ctl`).
    pub route: usize,
    /// How it froze.
    pub freeze: Freeze,
    /// Payload bytes down before it froze.
    pub after_bytes: u64,
    /// When (ms on the reactor's clock).
    pub at_ms: u64,
}

/// Process-wide counters since start.
#[derive(Default, Debug)]
pub struct Stats {
    /// Client connections accepted (including refused-when-full).
    pub accepted: u64,
    /// Sessions closed, per [`CloseReason::index`].
    pub closed: [u64; CloseReason::ALL.len()],
    /// Sessions the client closed after receiving zero bytes (the seed's key signal).
    pub zero_byte_closes: u64,
    /// Payload bytes client → Telegram.
    pub bytes_up: u64,
    /// Payload bytes Telegram → client.
    pub bytes_down: u64,
    /// Upstream attempts started, per tier (`Tier::index`).
    pub attempts: [u64; crate::config::Tier::COUNT],
    /// Attempts that won (the session relayed over them), per tier.
    pub attempts_ok: [u64; crate::config::Tier::COUNT],
    /// Failed attempts per tier.
    pub attempts_failed: [u64; crate::config::Tier::COUNT],
    /// Attempts cancelled because another one won the race, per tier.
    pub attempts_cancelled: [u64; crate::config::Tier::COUNT],
    /// Hedges started (a second route raced because the first was slow).
    pub hedges: u64,
    /// Background probes started / succeeded / failed.
    pub probes: [u64; 3],
    /// Probes and pool fills put off because a Worker's request budget was spent (copied from
    /// the ladder when the line is written; shown as `deferred=N` when not 0).
    pub probes_deferred: u64,
    /// Failures of the outbound proxy itself (copied from the ladder when the line is written;
    /// shown as `proxy-fail=N` when not 0).
    pub proxy_failures: u64,
    /// Client handshakes that started at once because their pacing turn was past
    /// `--pace-max-wait` (copied from the ladder; shown as `unpaced=N` when not 0).
    pub unpaced: u64,
    /// Pool fills started, and sessions that took a warm upstream.
    pub pool_fills: u64,
    /// Sessions served from a warm pool.
    pub pool_hits: u64,
    /// Bad client inits (wrong secret, HTTP, TLS, garbage) whose log line was suppressed.
    pub bad_suppressed: u64,
    /// Sessions whose pooled upstream stayed silent past `--pool-first-byte-timeout` and were
    /// replayed on a fresh route (shown as `retried=N` when not 0).
    pub pool_retries: u64,
    /// Times freed memory was given back to the OS after a burst ended (`mem::trim`; shown as
    /// `trims=N` when not 0).
    pub memory_trims: u64,
    /// Clients handed to the mask host, per reason in [`MASK_WHY_NAMES`] order (shown as
    /// `masked-REASON=N` when not 0; their ends are counted as close reasons too).
    pub masked: [u64; MASK_WHY_NAMES.len()],
    /// Fake-TLS hellos accepted (shown with the three gate counters below as
    /// `tls=accepted/replays/stale/unchecked` when any is not 0).
    pub tls_accepted: u64,
    /// Fake-TLS hellos refused as replays (copied from the gate when the line is written).
    pub tls_replays: u64,
    /// Fake-TLS hellos refused as stale (copied from the gate).
    pub tls_stale: u64,
    /// Fake-TLS hellos accepted while the clock was not trusted, their timestamp unchecked
    /// (copied from the gate).
    pub tls_unchecked: u64,
    /// Replay cache entries pushed out by a full cache (copied from the gate; shown as
    /// `replay-evicted=N` when not 0: a hello recorded before the oldest entry can be replayed;
    /// raise `--replay-cache` if it grows within hours).
    pub tls_replay_evicted: u64,
    /// Reloads applied (SIGHUP, `ctl reload`); shown as `reloads=N` when not 0.
    pub reloads: u64,
    /// Reloads rejected (the old configuration stayed); shown as `reloads-rejected=N` when not 0.
    pub reloads_rejected: u64,
    /// Sessions whose upstream froze (docs/design.md §4 rule 7), per form in
    /// [`Freeze::ALL`] order (shown as `frozen=N` when not 0).
    pub frozen: [u64; Freeze::ALL.len()],
    /// The last [`RECENT_FROZEN`] frozen sessions, oldest first.
    pub recent_frozen: Vec<FrozenSession>,
}

/// Why clients were masked, as the stats line names them (the order of `conn::mask::MaskWhy`'s
/// index): non-TLS bytes on an ee-only port, then the fake-TLS gate's reasons, then a
/// connection over a per-client limit (`--per-ip-mask`).
pub const MASK_WHY_NAMES: [&str; 8] = [
    "not-tls",
    "malformed",
    "wrong-key",
    "wrong-sni",
    "stale",
    "replay",
    "over-limit",
    "not-mtproto",
];

impl Stats {
    /// Records one closed session.
    pub fn record_close(&mut self, reason: CloseReason, zero_byte_client_close: bool) {
        self.closed[reason.index()] += 1;
        if zero_byte_client_close {
            self.zero_byte_closes += 1;
        }
    }

    /// Records a frozen session (the count per form and the recent list, bounded).
    pub fn note_frozen(
        &mut self,
        peer: SocketAddr,
        route: usize,
        freeze: Freeze,
        after_bytes: u64,
        at_ms: u64,
    ) {
        self.frozen[freeze.index()] += 1;
        if self.recent_frozen.len() == RECENT_FROZEN {
            self.recent_frozen.remove(0);
        }
        self.recent_frozen.push(FrozenSession {
            peer,
            route,
            freeze,
            after_bytes,
            at_ms,
        });
    }

    /// Copies the fake-TLS gate's counters (before the line is written).
    pub fn set_gate(&mut self, c: crate::mtproto::faketls::gate::GateCounters) {
        self.tls_replays = c.replays;
        self.tls_stale = c.stale;
        self.tls_unchecked = c.accepted_unchecked;
        self.tls_replay_evicted = c.evicted_early;
    }

    /// Total closed sessions.
    pub fn total_closed(&self) -> u64 {
        self.closed.iter().sum()
    }

    /// The periodic stats line (without the log prefix).
    pub fn line(&self, active: usize, capacity: usize) -> String {
        let mut s = format!(
            "stats: active={active}/{capacity} accepted={} closed={} zero-byte-closes={} up={} down={} hedges={} probes={}/{}/{} pool={}/{}",
            self.accepted,
            self.total_closed(),
            self.zero_byte_closes,
            human_bytes(self.bytes_up),
            human_bytes(self.bytes_down),
            self.hedges,
            self.probes[0],
            self.probes[1],
            self.probes[2],
            self.pool_hits,
            self.pool_fills,
        );
        for tier in crate::config::Tier::ALL {
            let i = tier.index();
            if self.attempts[i] > 0 {
                s.push_str(&format!(
                    " {}={}/{}/{}/{}",
                    tier.name(),
                    self.attempts[i],
                    self.attempts_ok[i],
                    self.attempts_failed[i],
                    self.attempts_cancelled[i]
                ));
            }
        }
        let background = [
            ("deferred", self.probes_deferred),
            ("unpaced", self.unpaced),
            ("proxy-fail", self.proxy_failures),
            ("retried", self.pool_retries),
            ("trims", self.memory_trims),
        ];
        push_nonzero(&mut s, &background);
        for (name, n) in MASK_WHY_NAMES.iter().zip(self.masked) {
            if n > 0 {
                s.push_str(&format!(" masked-{name}={n}"));
            }
        }
        let tls = [
            self.tls_accepted,
            self.tls_replays,
            self.tls_stale,
            self.tls_unchecked,
        ];
        if tls.iter().any(|&n| n > 0) {
            s.push_str(&format!(" tls={}/{}/{}/{}", tls[0], tls[1], tls[2], tls[3]));
        }
        if self.tls_replay_evicted > 0 {
            s.push_str(&format!(" replay-evicted={}", self.tls_replay_evicted));
        }
        for r in CloseReason::ALL {
            let n = self.closed[r.index()];
            if n > 0 {
                s.push_str(&format!(" {}={n}", r.name()));
            }
        }
        let process = [
            ("reloads", self.reloads),
            ("reloads-rejected", self.reloads_rejected),
            ("frozen", self.frozen.iter().sum()),
            ("log-lost", crate::logging::lost_lines() as u64),
        ];
        push_nonzero(&mut s, &process);
        if let Some(kib) = rss_kib() {
            s.push_str(&format!(" rss={kib}KiB"));
        }
        s
    }
}

/// Resident set size of this process in KiB, from `/proc/self/statm` (page size assumed 4 KiB
/// unless the kernel reports otherwise through `/proc/self/smaps_rollup`).
pub fn rss_kib() -> Option<u64> {
    if let Ok(text) = std::fs::read_to_string("/proc/self/smaps_rollup") {
        for line in text.lines() {
            if let Some(rest) = line.strip_prefix("Rss:") {
                return rest.trim().trim_end_matches("kB").trim().parse().ok();
            }
        }
    }
    let text = std::fs::read_to_string("/proc/self/statm").ok()?;
    let pages: u64 = text.split_whitespace().nth(1)?.parse().ok()?;
    Some(pages * 4)
}

/// `1234567` → `1.2MiB`; exact bytes below 1 KiB.
pub fn human_bytes(n: u64) -> String {
    const UNITS: [&str; 4] = ["KiB", "MiB", "GiB", "TiB"];
    if n < 1024 {
        return format!("{n}B");
    }
    let mut v = n as f64 / 1024.0;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < UNITS.len() {
        v /= 1024.0;
        i += 1;
    }
    format!("{v:.1}{}", UNITS[i])
}

/// Appends ` name=n` to `s` for each pair whose count is above 0, in order.
fn push_nonzero(s: &mut String, pairs: &[(&str, u64)]) {
    for (name, n) in pairs {
        if *n > 0 {
            s.push_str(&format!(" {name}={n}"));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_and_formatting() {
        let mut s = Stats::default();
        s.record_close(CloseReason::ClientEof, true);
        s.record_close(CloseReason::BadInit, false);
        assert_eq!(s.total_closed(), 2);
        assert_eq!(s.zero_byte_closes, 1);
        let line = s.line(3, 100);
        assert!(line.contains("active=3/100"), "{line}");
        assert!(
            line.contains("client-eof=1") && line.contains("bad-init=1"),
            "{line}"
        );
        assert!(!line.contains("masked"), "{line}");
        s.masked[2] = 3;
        assert!(
            s.line(0, 1).contains(" masked-wrong-key=3 "),
            "{}",
            s.line(0, 1)
        );
        assert_eq!(human_bytes(100), "100B");
        assert_eq!(human_bytes(1536), "1.5KiB");
        assert_eq!(human_bytes(3 << 20), "3.0MiB");
        assert!(rss_kib().unwrap_or(1) > 0);
    }

    #[test]
    fn fake_tls_fields_show_only_when_not_0() {
        let mut s = Stats::default();
        let line = s.line(0, 1);
        assert!(
            !line.contains("tls=") && !line.contains("replay-evicted"),
            "{line}"
        );
        s.tls_accepted = 5;
        s.set_gate(crate::mtproto::faketls::gate::GateCounters {
            replays: 2,
            stale: 1,
            accepted_unchecked: 3,
            evicted_early: 0,
        });
        let line = s.line(0, 1);
        assert!(line.contains(" tls=5/2/1/3"), "{line}");
        assert!(!line.contains("replay-evicted"), "{line}");
        s.tls_replay_evicted = 7;
        assert!(s.line(0, 1).contains(" replay-evicted=7"));
    }
}
