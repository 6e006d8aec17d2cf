//! The whole verdict on one ClientHello record (docs/protocol.md "Fake-TLS", §2.1):
//! parse, digest against every `ee` key in constant time, SNI, timestamp (when the clock is
//! trusted), replay cache; in that order. Owns the replay cache and the clock trust state.
//! Sans-IO: `wall_s` and `mono_ms` are passed in; what to do with a refused hello (masking) is
//! the session's (src/conn/).

use std::fmt;

use super::clock::{ClockEvent, ClockTrust};
use super::hello;
use super::replay::ReplayCache;
use super::{ct_eq, digest_zeroed, RANDOM_AT};
use crate::mtproto::obfs2::{Secret, SecretKind};

/// One `ee` secret as the gate sees it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EeKey {
    /// Index into `Config::secrets`.
    pub index: usize,
    /// The 16-byte secret key (the HMAC key).
    pub key: [u8; 16],
    /// The SNI domain the secret carries (compared ASCII case-insensitively).
    pub domain: String,
}

impl EeKey {
    /// The `ee` secrets of `secrets` (e.g. `Config::secrets`), in order, with their indexes
    /// into it; other secrets are skipped.
    pub fn from_secrets(secrets: &[Secret]) -> Vec<EeKey> {
        secrets
            .iter()
            .enumerate()
            .filter_map(|(index, s)| match &s.kind {
                SecretKind::Ee(domain) => Some(EeKey {
                    index,
                    key: s.key,
                    domain: domain.clone(),
                }),
                _ => None,
            })
            .collect()
    }
}

/// Why a hello is not ours (the mask reason).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reject {
    /// Not a well-formed ClientHello record ([`hello::parse`] failed).
    Malformed,
    /// The digest matches no `ee` key.
    WrongKey,
    /// The digest matches a key whose domain differs from the SNI (or there is no SNI).
    WrongSni,
    /// The timestamp is outside ±window of a trusted clock.
    Stale,
    /// The client random was accepted before.
    Replay,
}

impl Reject {
    /// Short kebab-case word for logs and stats.
    pub fn as_str(self) -> &'static str {
        match self {
            Reject::Malformed => "malformed",
            Reject::WrongKey => "wrong-key",
            Reject::WrongSni => "wrong-sni",
            Reject::Stale => "stale",
            Reject::Replay => "replay",
        }
    }
}

impl fmt::Display for Reject {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// An accepted hello: what the ServerHello and the session need.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Accept {
    /// `Config::secrets` index of the matched secret.
    pub index: usize,
    /// Its 16-byte key.
    pub key: [u8; 16],
    /// The client random (record bytes 11..43).
    pub random: [u8; 32],
    /// The client's session id in `[..session_id_len]`, zeros after.
    pub session_id: [u8; 32],
    /// 0..=32.
    pub session_id_len: u8,
    /// The TLS 1.3 suite to answer with (see [`hello::pick_cipher`]).
    pub cipher: u16,
    /// The hello's timestamp minus `wall_s`, seconds (positive = client ahead).
    pub skew_s: i64,
    /// Whether the clock was trusted when the timestamp was looked at (false: not checked).
    pub clock_trusted: bool,
}

/// Gate counters (stats).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct GateCounters {
    /// Hellos refused as replays.
    pub replays: u64,
    /// Hellos refused as stale (trusted clock).
    pub stale: u64,
    /// Hellos accepted while the clock was not trusted and their timestamp did not confirm it
    /// (with `--tls-time-window 0` every accepted hello: timestamps are never checked).
    pub accepted_unchecked: u64,
    /// Replay cache entries pushed out by a full cache (entries never expire by time: see
    /// [`Gate::new`]).
    pub evicted_early: u64,
}

/// Clock events waiting to be logged (a jump and an unset report can come in one call).
const EVENTS: usize = 4;

/// The fake-TLS gate: replay cache, clock trust and the time window.
pub struct Gate {
    window_s: u64,
    replay: ReplayCache,
    clock: ClockTrust,
    events: [Option<ClockEvent>; EVENTS],
    counters: GateCounters,
}

impl Gate {
    /// `window_s`: --tls-time-window in seconds (0 = timestamps never checked);
    /// `replay_capacity`: --replay-cache entries (0 = off); `wall_s`, `mono_ms`: now. Replay
    /// entries never expire by time, only a full cache pushes the oldest out: the timestamp is
    /// XOR-ed into random bytes 28..32, which the digest does not cover, so anyone holding a
    /// recorded hello can move its timestamp to now; an entry dropped after 2 × window would let
    /// that copy in.
    pub fn new(window_s: u64, replay_capacity: usize, wall_s: u64, mono_ms: u64) -> Gate {
        Gate {
            window_s,
            replay: ReplayCache::new(replay_capacity, 0),
            clock: ClockTrust::new(wall_s, mono_ms),
            events: [None; EVENTS],
            counters: GateCounters::default(),
        }
    }

    /// A reload's new `--tls-time-window` (seconds, 0 = timestamps never checked); the replay
    /// cache and the clock trust are kept.
    pub fn set_window(&mut self, window_s: u64) {
        self.window_s = window_s;
    }

    /// Checks one whole ClientHello record against every `ee` key, in this order: parse
    /// (`Malformed`); the digest of every key, computed for all of them and compared in
    /// constant time (`WrongKey`); SNI equal to the matching key's domain, ASCII
    /// case-insensitive, a hello without SNI never matching (`WrongSni`); the timestamp within
    /// ±window if the clock is trusted and the window is not 0 (`Stale`: it stops a recorded
    /// hello sent as it was, not one whose timestamp bytes were moved); the replay cache
    /// (`Replay`; only accepted hellos are inserted). `wall_s`, `mono_ms`: now (also fed to the
    /// clock trust). An untrusted clock never refuses a hello: it is accepted and counted in
    /// `accepted_unchecked`, and its timestamp may confirm the clock.
    pub fn check(
        &mut self,
        record: &[u8],
        keys: &[EeKey],
        wall_s: u64,
        mono_ms: u64,
    ) -> Result<Accept, Reject> {
        if let Some(ev) = self.clock.observe(wall_s, mono_ms) {
            self.push(ev);
        }
        let hello = hello::parse(record).map_err(|_| Reject::Malformed)?;
        let sent = &hello.random;
        // Every key's digest, no early exit; prefer a key whose domain matches the SNI (two
        // secrets may share a key under different domains).
        let mut matched: Option<(usize, [u8; 32])> = None;
        let mut any_digest = false;
        for (i, k) in keys.iter().enumerate() {
            let h = digest_zeroed(&k.key, &[], record);
            let ok = ct_eq(&h[..28], &sent[..28]);
            any_digest |= ok;
            let sni_ok = hello
                .sni
                .is_some_and(|s| s.eq_ignore_ascii_case(k.domain.as_bytes()));
            if ok && sni_ok && matched.is_none() {
                matched = Some((i, h));
            }
        }
        let Some((i, h)) = matched else {
            return Err(if any_digest {
                Reject::WrongSni
            } else {
                Reject::WrongKey
            });
        };
        let mut ts = [0u8; 4];
        for (j, t) in ts.iter_mut().enumerate() {
            *t = sent[28 + j] ^ h[28 + j];
        }
        let skew_s = i64::from(u32::from_le_bytes(ts)) - i64::try_from(wall_s).unwrap_or(i64::MAX);
        let trusted = self.clock.trusted();
        let checking = self.window_s > 0;
        if checking && trusted && skew_s.unsigned_abs() > self.window_s {
            self.counters.stale += 1;
            return Err(Reject::Stale);
        }
        let evicted = self.replay.evicted_early();
        let replay = self.replay.check_and_insert(sent, mono_ms);
        self.counters.evicted_early += self.replay.evicted_early() - evicted;
        if replay {
            self.counters.replays += 1;
            return Err(Reject::Replay);
        }
        if !trusted {
            let ev = if checking {
                self.clock.hello_agreed(skew_s, self.window_s)
            } else {
                None
            };
            if ev != Some(ClockEvent::Confirmed) {
                self.counters.accepted_unchecked += 1;
            }
            if let Some(ev) = ev {
                self.push(ev);
            }
        }
        let mut session_id = [0u8; 32];
        session_id[..hello.session_id.len()].copy_from_slice(hello.session_id);
        debug_assert!(record.len() >= RANDOM_AT + 32);
        Ok(Accept {
            index: keys[i].index,
            key: keys[i].key,
            random: hello.random,
            session_id,
            session_id_len: hello.session_id.len() as u8,
            cipher: hello.cipher,
            skew_s,
            clock_trusted: trusted,
        })
    }

    /// Feeds a clock reading without a hello (e.g. once per stats interval) so jumps are
    /// noticed and reported promptly.
    pub fn observe_clock(&mut self, wall_s: u64, mono_ms: u64) {
        if let Some(ev) = self.clock.observe(wall_s, mono_ms) {
            self.push(ev);
        }
    }

    /// Clock events to log (each once), oldest first, drained by the caller.
    pub fn take_clock_event(&mut self) -> Option<ClockEvent> {
        let ev = self.events[0].take();
        self.events.rotate_left(1);
        ev
    }

    /// True when the clock is trusted now (see [`ClockTrust`]).
    pub fn clock_trusted(&self) -> bool {
        self.clock.trusted()
    }

    /// Counters: replays refused, stale refused, accepted unchecked, replay entries evicted
    /// early.
    pub fn counters(&self) -> GateCounters {
        self.counters
    }

    /// The replay cache (its size for stats).
    pub fn replay_cache(&self) -> &ReplayCache {
        &self.replay
    }

    /// Queues an event; a full queue drops the newest (bounded; events are rare).
    fn push(&mut self, ev: ClockEvent) {
        if let Some(slot) = self.events.iter_mut().find(|e| e.is_none()) {
            *slot = Some(ev);
        }
    }
}
