//! The replayable prefix of a session that started on a pooled upstream (docs/design.md §4
//! "Pools", §5): until the upstream's first byte, the client's plaintext (client-decrypted, before
//! the relay's own obfuscated2 keys touch it) is kept so that, should the upstream prove dead
//! (a NAT or conntrack flush leaves it silent, no RST), the request can be replayed on a fresh
//! upstream with its own relay init and the client never notices.
//!
//! Bounded: one buffer (a block of the reactor's small replay pool, `--buf-kb`), taken with the
//! client's first bytes (a client that sends nothing holds none) and dropped at the first
//! upstream byte. A client that sends more than that before
//! any answer cannot be replayed ([`Replay::Overflowed`]); the session then only waits for its
//! deadline, counted from the last bytes the upstream took (a large request on a slow uplink is
//! still going out, which says nothing against the upstream). Owns only the prefix and when the wait began; the deadline itself (a flag) and what
//! follows it are the session shell's (`conn`), the blame is the ladder's.

use crate::buf::RelayBuf;

/// Replay state of one relay.
pub enum Replay {
    /// Nothing kept: a dialled upstream, or the upstream has spoken (or ended).
    Off,
    /// A pooled upstream whose client has sent nothing yet: no buffer taken so far (the relay
    /// takes one with the first client bytes, [`Replay::keep`]).
    Armed,
    /// Waiting for the upstream's first byte with every client byte so far in `buf` (plaintext,
    /// as unprocessed bytes). `sent_at`: when client bytes were first written to the upstream
    /// (ms), if yet.
    Keeping {
        /// The client's plaintext since the start of its stream.
        buf: RelayBuf,
        /// First client bytes written upstream at this time (ms).
        sent_at: Option<u64>,
    },
    /// Waiting for the upstream's first byte, but the prefix outgrew its buffer (or no buffer was
    /// free): it cannot be replayed.
    Overflowed {
        /// Client bytes last written upstream at this time (ms), if yet.
        sent_at: Option<u64>,
    },
}

impl Replay {
    /// Starts keeping the prefix in `buf` (an empty buffer with memory; `None`: none was free),
    /// beginning with `plain`, the client plaintext already read.
    pub fn keep(buf: Option<RelayBuf>, plain: &[u8]) -> Replay {
        let mut r = match buf {
            Some(buf) => Replay::Keeping { buf, sent_at: None },
            None => Replay::Overflowed { sent_at: None },
        };
        r.client_read(plain);
        r
    }

    /// Client plaintext `plain` was read: kept, or the prefix overflows (its buffer is dropped).
    pub fn client_read(&mut self, plain: &[u8]) {
        if let Replay::Keeping { buf, sent_at } = self {
            let space = buf.space();
            if plain.len() <= space.len() {
                space[..plain.len()].copy_from_slice(plain);
                buf.fill(plain.len());
            } else {
                *self = Replay::Overflowed { sent_at: *sent_at };
            }
        }
    }

    /// Client bytes went out to the upstream at `now` (ms): the wait for its first byte begins
    /// (the first time only). A prefix that cannot be replayed counts from the last bytes the
    /// upstream took instead: a request too large to replay that is still being taken (a slow
    /// uplink) is no sign of a dead upstream, and closing it would be for nothing.
    pub fn client_sent(&mut self, now: u64) {
        match self {
            Replay::Keeping { sent_at, .. } => {
                sent_at.get_or_insert(now);
            }
            Replay::Overflowed { sent_at } => *sent_at = Some(now),
            Replay::Off | Replay::Armed => {}
        }
    }

    /// The upstream sent something (or ended): nothing more to replay; the buffer is dropped.
    pub fn upstream_spoke(&mut self) {
        *self = Replay::Off;
    }

    /// When the wait for the upstream's first byte began (ms): `Some` while waiting and client
    /// bytes have gone out (the last of them, once the prefix cannot be replayed).
    pub fn waiting_since(&self) -> Option<u64> {
        match self {
            Replay::Off | Replay::Armed => None,
            Replay::Keeping { sent_at, .. } | Replay::Overflowed { sent_at } => *sent_at,
        }
    }

    /// True when the upstream has been silent for `timeout_ms` since the client's first bytes
    /// went out to it, at `now` (ms): the pooled upstream is taken for dead.
    pub fn silent_past(&self, timeout_ms: u64, now: u64) -> bool {
        self.waiting_since()
            .is_some_and(|t| now >= t.saturating_add(timeout_ms))
    }

    /// True while no client byte came yet, so no buffer was taken.
    pub fn armed(&self) -> bool {
        matches!(self, Replay::Armed)
    }

    /// True while the prefix can still be replayed.
    pub fn replayable(&self) -> bool {
        matches!(self, Replay::Keeping { .. })
    }

    /// Takes the prefix (client plaintext, unprocessed), leaving `Off`.
    pub fn take(&mut self) -> Option<RelayBuf> {
        match std::mem::replace(self, Replay::Off) {
            Replay::Keeping { buf, .. } => Some(buf),
            _ => None,
        }
    }
}
