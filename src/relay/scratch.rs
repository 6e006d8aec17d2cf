//! The reactor's relay memory handed to [`super::Relay::step`]: the one large scratch buffer a
//! session borrows for a step (fewer, larger reads and writes), the bounded pool its own
//! buffers take memory from (`buf::BufPool`; a masked session's two splice buffers take theirs
//! from it too, `conn::mask`), and the small separate pool of replay buffers
//! (`super::replay`). Decides only who holds the large buffer; what flows through it is the
//! relay core's.

use crate::buf::{BufPool, RelayBuf};

/// The reactor's one large buffer (several relay buffers' worth), lent to a session for one
/// step when its own buffer for a direction is empty and the other side is writable: a large
/// chunk is read, transformed in place and written through, and only what the kernel did not
/// take stays. If that is more than the session's own buffer holds, the session keeps the large
/// buffer and the reactor keeps the session's empty one instead until the rest fits back (at
/// most one session at a time; the others use their own buffers meanwhile). Memory stays
/// `sessions × own + one large`. Also holds the bounded pool the sessions' own buffers take their
/// memory from while data is in flight (`buf::BufPool`).
pub struct Scratch {
    buf: RelayBuf,
    /// Capacity of the large buffer (whoever holds it).
    large: usize,
    pool: Option<BufPool>,
    /// Replay buffers of sessions on pooled upstreams awaiting their first byte; apart from
    /// `pool`, so they never take a block that bounds a session's own two buffers.
    replay: Option<BufPool>,
}

impl Scratch {
    /// A scratch of `cap` bytes (use a multiple of the relay buffer size); own buffers from
    /// `pool` (`None`: own buffers keep their heap memory).
    pub fn new(cap: usize, pool: Option<BufPool>) -> Scratch {
        let buf = RelayBuf::new(cap);
        Scratch {
            large: buf.capacity(),
            buf,
            pool,
            replay: None,
        }
    }

    /// The same scratch with replay buffers from `replay` (see [`Scratch::replay_buffer`]).
    pub fn with_replay(mut self, replay: BufPool) -> Scratch {
        self.replay = Some(replay);
        self
    }

    /// An empty buffer with memory for a replay prefix (one block of the replay pool), or
    /// `None` when there is no replay pool or every block is in use. The block goes back to
    /// the replay pool when the buffer is dropped or emptied.
    pub fn replay_buffer(&self) -> Option<RelayBuf> {
        let pool = self.replay.as_ref()?;
        let mut buf = RelayBuf::pooled(pool);
        buf.attach(pool).then_some(buf)
    }

    /// A session's own buffer: an empty pool buffer, or a heap one of `cap` bytes without a pool.
    pub fn own_buffer(&self, cap: usize) -> RelayBuf {
        match &self.pool {
            Some(p) => RelayBuf::pooled(p),
            None => RelayBuf::new(cap),
        }
    }

    /// Gives `own` memory for a read if it has none; `false` when the pool is exhausted.
    pub fn attach(&self, own: &mut RelayBuf) -> bool {
        match &self.pool {
            Some(p) => own.attach(p),
            None => true,
        }
    }

    /// Capacity in bytes of the buffer it holds now (smaller while a session keeps the large one).
    pub fn capacity(&self) -> usize {
        self.buf.capacity()
    }

    /// Swaps the large buffer in for `own` if `own` is empty and the large one is here.
    pub(super) fn lend(&mut self, own: &mut RelayBuf) -> bool {
        if own.is_empty() && self.buf.capacity() == self.large && own.capacity() < self.large {
            std::mem::swap(own, &mut self.buf);
            return true;
        }
        false
    }

    /// Takes the large buffer back from `own` once what it holds fits the small one here (which
    /// takes pool memory for it first), then lets `own` give its pool memory back if empty.
    pub(super) fn take_back(&mut self, own: &mut RelayBuf) {
        if own.capacity() == self.large
            && self.buf.capacity() < self.large
            && (own.is_empty() || self.attach_small())
            && own.move_into(&mut self.buf)
        {
            std::mem::swap(own, &mut self.buf);
        }
        own.detach_if_empty();
    }

    fn attach_small(&mut self) -> bool {
        match &self.pool {
            Some(p) => self.buf.attach(p),
            None => true,
        }
    }

    /// Takes the large buffer back from a closing session, dropping what it held.
    pub(super) fn reclaim(&mut self, own: &mut RelayBuf) {
        if own.capacity() == self.large && self.buf.capacity() < self.large {
            own.clear();
            std::mem::swap(own, &mut self.buf);
        }
    }
}
