//! Fixed-capacity relay buffer with three cursors and a small headroom.
//!
//! ```text
//! 0 .. HEADROOM ..... lo ============ mid ------------ hi ........ end
//!                     | ready to send | read, not yet  |  free
//!                     | (processed)   | processed      |
//! ```
//! Bytes are read in at `hi`, transformed in place from `mid` (decrypt, re-encrypt, mask) and
//! sent from `lo`. An empty buffer starts at [`HEADROOM`], so a WebSocket frame header can be
//! put in front of its payload ([`RelayBuf::prepend`]) and both go out in one write. The buffer
//! never grows; a full buffer means "stop reading this side" (backpressure by interest).
//!
//! Relay buffers hold memory only while data is in flight: their storage is a block of the
//! bounded [`BufPool`], taken when a read needs room ([`RelayBuf::attach`]) and given back when
//! the buffer is empty ([`RelayBuf::detach_if_empty`]). The pool's bound is set at start; its
//! memory is `mmap`ed in chunks of 64 blocks (1 MiB at the default 16 KiB) as first needed
//! (untouched pages cost no RSS, and a 32-bit router keeps its address space); a returned block
//! beyond a small warm reserve is handed back to the OS with `madvise(MADV_DONTNEED)`, because
//! freeing 16 KiB heap blocks does not lower RSS with glibc's malloc. An empty pool refuses (the
//! caller stops reading), it never grows. Nothing here knows about sockets or ciphers.

mod pool;

use pool::Block;
pub use pool::BufPool;

/// Bytes kept free in front of an empty buffer's data: room for a WS frame header (≤ 14).
pub const HEADROOM: usize = 16;

/// Where a buffer's bytes live.
enum Storage {
    /// Its own heap allocation (the scratch, tests, tools).
    Heap(Box<[u8]>),
    /// A pool block.
    Pooled(Block),
    /// None while empty; a pool block of `len` bytes is taken when needed.
    Detached(usize),
}

impl Storage {
    fn bytes(&self) -> &[u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Pooled(b) => b.bytes(),
            Storage::Detached(_) => &[],
        }
    }

    fn bytes_mut(&mut self) -> &mut [u8] {
        match self {
            Storage::Heap(b) => b,
            Storage::Pooled(b) => b.bytes_mut(),
            Storage::Detached(_) => &mut [],
        }
    }

    fn len(&self) -> usize {
        match self {
            Storage::Heap(b) => b.len(),
            Storage::Pooled(b) => b.len,
            Storage::Detached(n) => *n,
        }
    }
}

/// A relay buffer of fixed capacity (bytes).
pub struct RelayBuf {
    data: Storage,
    lo: usize,
    mid: usize,
    hi: usize,
}

impl RelayBuf {
    /// Allocates a zeroed heap buffer that holds `cap` bytes (`cap` > 0), plus [`HEADROOM`].
    pub fn new(cap: usize) -> RelayBuf {
        RelayBuf {
            data: Storage::Heap(vec![0u8; cap.max(1) + HEADROOM].into_boxed_slice()),
            lo: HEADROOM,
            mid: HEADROOM,
            hi: HEADROOM,
        }
    }

    /// An empty buffer without memory that takes a block of `pool` when a read needs room
    /// (capacity: the pool's block size minus [`HEADROOM`]).
    pub fn pooled(pool: &BufPool) -> RelayBuf {
        RelayBuf {
            data: Storage::Detached(pool.block_len()),
            lo: HEADROOM,
            mid: HEADROOM,
            hi: HEADROOM,
        }
    }

    /// Capacity in bytes (headroom excluded), with or without memory attached.
    pub fn capacity(&self) -> usize {
        self.data.len() - HEADROOM
    }

    /// True while the buffer has no memory (a detached pool buffer).
    pub fn is_detached(&self) -> bool {
        matches!(self.data, Storage::Detached(_))
    }

    /// Makes sure the buffer has memory: a detached one takes a block of `pool`. `false` when
    /// the pool is exhausted (the buffer stays detached; [`RelayBuf::space`] is empty).
    pub fn attach(&mut self, pool: &BufPool) -> bool {
        if let Storage::Detached(len) = self.data {
            match pool.take() {
                Some(b) if b.len == len => self.data = Storage::Pooled(b),
                _ => return false,
            }
        }
        true
    }

    /// Gives a pool block back when nothing is held. Heap buffers keep their memory.
    pub fn detach_if_empty(&mut self) {
        if self.is_empty() {
            if let Storage::Pooled(b) = &self.data {
                let len = b.len;
                self.data = Storage::Detached(len);
                self.reset();
            }
        }
    }

    /// Drops everything held.
    pub fn clear(&mut self) {
        self.reset();
    }

    fn reset(&mut self) {
        self.lo = HEADROOM;
        self.mid = HEADROOM;
        self.hi = HEADROOM;
    }

    /// Puts `bytes` in front of the unprocessed bytes as ready to send (a frame header before
    /// its payload). Only when nothing is ready; `false` (and nothing changed) if there is no
    /// room in front.
    pub fn prepend(&mut self, bytes: &[u8]) -> bool {
        if self.lo != self.mid || self.lo < bytes.len() || self.is_detached() {
            return false;
        }
        self.lo -= bytes.len();
        self.data.bytes_mut()[self.lo..self.mid].copy_from_slice(bytes);
        true
    }

    /// Moves everything held (ready and unprocessed, cursors kept apart) into the empty `other`
    /// and empties `self`. `false` (and nothing changed) if `other` is not empty or too small.
    pub fn move_into(&mut self, other: &mut RelayBuf) -> bool {
        if !other.is_empty() {
            return false;
        }
        if self.is_empty() {
            self.reset();
            return true;
        }
        let (ready, held) = (self.mid - self.lo, self.hi - self.lo);
        // Keep prepended bytes in front of HEADROOM if there were any.
        let start = if self.lo < HEADROOM {
            self.lo
        } else {
            HEADROOM
        };
        if start + held > other.data.bytes().len() {
            return false;
        }
        other.data.bytes_mut()[start..start + held]
            .copy_from_slice(&self.data.bytes()[self.lo..self.hi]);
        other.lo = start;
        other.mid = start + ready;
        other.hi = start + held;
        self.reset();
        true
    }

    /// Processed bytes waiting to be sent: `[lo, mid)`.
    pub fn ready(&self) -> &[u8] {
        if self.lo == self.mid {
            return &[];
        }
        &self.data.bytes()[self.lo..self.mid]
    }

    /// Marks `n` ready bytes as sent.
    pub fn consume(&mut self, n: usize) {
        debug_assert!(self.lo + n <= self.mid);
        self.lo = (self.lo + n).min(self.mid);
        if self.lo == self.hi {
            self.reset();
        }
    }

    /// Unprocessed bytes: `[mid, hi)`.
    pub fn unprocessed(&self) -> &[u8] {
        if self.mid == self.hi {
            return &[];
        }
        &self.data.bytes()[self.mid..self.hi]
    }

    /// Mutable view of the first `n` unprocessed bytes (for in-place transforms).
    pub fn unprocessed_mut(&mut self, n: usize) -> &mut [u8] {
        let end = (self.mid + n).min(self.hi);
        if end == self.mid {
            return &mut [];
        }
        &mut self.data.bytes_mut()[self.mid..end]
    }

    /// Marks `n` unprocessed bytes as processed (ready to send).
    pub fn advance(&mut self, n: usize) {
        debug_assert!(self.mid + n <= self.hi);
        self.mid = (self.mid + n).min(self.hi);
    }

    /// Drops `n` unprocessed bytes that must not be sent (e.g. a WS frame header). Only
    /// allowed when nothing is waiting to be sent, so the ready region stays contiguous.
    pub fn skip(&mut self, n: usize) {
        debug_assert!(self.lo == self.mid && self.mid + n <= self.hi);
        self.mid = (self.mid + n).min(self.hi);
        self.lo = self.mid;
        if self.lo == self.hi {
            self.reset();
        }
    }

    /// Free space at the tail for a read, compacting first if that makes room. Empty when full.
    pub fn space(&mut self) -> &mut [u8] {
        let end = self.data.bytes().len();
        if end == 0 {
            return &mut [];
        }
        if self.hi == end && self.lo > HEADROOM {
            self.data
                .bytes_mut()
                .copy_within(self.lo..self.hi, HEADROOM);
            self.mid -= self.lo - HEADROOM;
            self.hi -= self.lo - HEADROOM;
            self.lo = HEADROOM;
        }
        &mut self.data.bytes_mut()[self.hi..]
    }

    /// Marks `n` bytes written into [`RelayBuf::space`] as received.
    pub fn fill(&mut self, n: usize) {
        let end = self.data.bytes().len();
        debug_assert!(self.hi + n <= end);
        self.hi = (self.hi + n).min(end.max(HEADROOM));
    }

    /// True when no bytes are held at all.
    pub fn is_empty(&self) -> bool {
        self.hi == self.lo
    }

    /// True when a read would find no room even after compaction.
    pub fn is_full(&self) -> bool {
        self.lo <= HEADROOM && self.hi == self.data.len()
    }

    /// Bytes held (ready + unprocessed).
    pub fn len(&self) -> usize {
        self.hi - self.lo
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursors_move_and_compact() {
        let mut b = RelayBuf::new(8);
        let s = b.space();
        assert_eq!(s.len(), 8);
        s[..6].copy_from_slice(b"abcdef");
        b.fill(6);
        assert_eq!(b.unprocessed(), b"abcdef");
        b.unprocessed_mut(2).copy_from_slice(b"AB");
        b.advance(2);
        assert_eq!(b.ready(), b"AB");
        b.consume(2);
        assert_eq!(b.ready(), b"");
        b.skip(1); // drop 'c'
        assert_eq!(b.unprocessed(), b"def");
        // Fill to the end, then compaction makes room at the tail.
        let s = b.space();
        assert_eq!(s.len(), 2);
        s.copy_from_slice(b"gh");
        b.fill(2);
        assert!(!b.is_full());
        assert_eq!(b.space().len(), 3);
        assert_eq!(b.unprocessed(), b"defgh");
        b.advance(5);
        b.consume(5);
        assert!(b.is_empty());
        assert_eq!(b.space().len(), 8);
    }

    #[test]
    fn prepend_puts_a_header_before_the_payload() {
        let mut b = RelayBuf::new(8);
        b.space()[..3].copy_from_slice(b"pay");
        b.fill(3);
        assert!(b.prepend(b"HD"));
        b.advance(3);
        assert_eq!(b.ready(), b"HDpay");
        assert!(!b.prepend(b"x"), "only when nothing is ready");
        b.consume(5);
        assert!(b.is_empty());
        assert!(!b.prepend(&[0; HEADROOM + 1]), "no room");
        assert_eq!(b.space().len(), 8);
    }

    #[test]
    fn move_into_keeps_ready_and_unprocessed_apart() {
        let mut big = RelayBuf::new(64);
        big.space()[..10].copy_from_slice(b"0123456789");
        big.fill(10);
        big.advance(4);
        big.consume(1);
        let mut small = RelayBuf::new(9);
        assert!(big.move_into(&mut small));
        assert!(big.is_empty());
        assert_eq!(
            (small.ready(), small.unprocessed()),
            (&b"123"[..], &b"456789"[..])
        );
        let mut tiny = RelayBuf::new(8);
        assert!(!small.move_into(&mut tiny), "does not fit");
        assert_eq!(small.len(), 9);
        assert_eq!(small.space().len(), 0, "full: 9 of 9");
        let mut other = RelayBuf::new(16);
        other.space()[0] = 1;
        other.fill(1);
        assert!(!small.move_into(&mut other), "target not empty");
    }

    #[test]
    fn pool_hands_out_its_blocks_once_and_takes_them_back() {
        let pool = BufPool::new(2, 4096, 1);
        assert_eq!(pool.block_len(), 4096);
        let (mut a, mut b, mut c) = (
            RelayBuf::pooled(&pool),
            RelayBuf::pooled(&pool),
            RelayBuf::pooled(&pool),
        );
        assert!(a.is_detached() && a.space().is_empty());
        assert_eq!(a.capacity(), 4096 - HEADROOM);
        assert!(
            a.attach(&pool) && a.attach(&pool),
            "attaching twice takes one block"
        );
        assert!(b.attach(&pool));
        assert_eq!(pool.available(), 0);
        assert!(!c.attach(&pool), "exhausted: refuses, never grows");
        assert!(c.space().is_empty() && c.ready().is_empty() && c.unprocessed().is_empty());
        assert_eq!(a.space().len(), 4096 - HEADROOM);
        a.space()[..3].copy_from_slice(b"abc");
        a.fill(3);
        a.detach_if_empty();
        assert!(!a.is_detached(), "holds data: keeps its block");
        a.advance(3);
        a.consume(3);
        a.detach_if_empty();
        assert!(a.is_detached());
        assert_eq!(pool.available(), 1);
        assert!(c.attach(&pool), "the returned block is reused");
        drop(c);
        drop(b);
        assert_eq!(pool.available(), 2, "dropping a buffer returns its block");
        let mut heap = RelayBuf::new(8);
        heap.detach_if_empty();
        assert!(!heap.is_detached(), "heap buffers keep their memory");
    }

    #[test]
    fn pool_reserves_chunks_as_needed_up_to_its_bound() {
        let pool = BufPool::new(pool::CHUNK_BLOCKS + 6, 4096, 0);
        assert_eq!(pool.available(), pool::CHUNK_BLOCKS + 6);
        let mut held: Vec<RelayBuf> = (0..pool::CHUNK_BLOCKS + 6)
            .map(|i| {
                let mut b = RelayBuf::pooled(&pool);
                assert!(b.attach(&pool), "block {i}");
                b.space()[0] = i as u8; // every block is writable memory of its own
                b.fill(1);
                b
            })
            .collect();
        assert_eq!(pool.available(), 0);
        assert!(!RelayBuf::pooled(&pool).attach(&pool), "bound reached");
        for (i, b) in held.iter().enumerate() {
            assert_eq!(b.unprocessed(), &[i as u8]);
        }
        held.clear();
        assert_eq!(pool.available(), pool::CHUNK_BLOCKS + 6);
    }

    #[test]
    fn blocks_beyond_the_warm_reserve_go_back_to_the_os() {
        // warm = 1: the first block returned stays resident, the second is discarded (its
        // pages read as zeros when it is used again).
        let pool = BufPool::new(2, 8192, 1);
        let (mut a, mut b) = (RelayBuf::pooled(&pool), RelayBuf::pooled(&pool));
        for buf in [&mut a, &mut b] {
            assert!(buf.attach(&pool));
            buf.space().fill(0xaa);
        }
        drop(a); // kept warm
        drop(b); // discarded
                 // The warm block is handed out first, then the discarded one.
        let mut c = RelayBuf::pooled(&pool);
        assert!(c.attach(&pool));
        assert!(
            c.space().iter().all(|&x| x == 0xaa),
            "warm block kept its pages"
        );
        let mut d = RelayBuf::pooled(&pool);
        assert!(d.attach(&pool));
        assert!(
            d.space().iter().all(|&x| x == 0),
            "discarded block comes back zeroed"
        );
    }

    /// Review finding (issue 19 §5): a returned block past the warm reserve was discarded and
    /// put on top of the free list, which hands out the latest first: once more blocks than
    /// the reserve had been out at once (slow clients behind masked or relayed sessions), every
    /// later take got a discarded block while the warm ones lay beneath, so a buffer taken and
    /// given back per read (a masked session's splice, a relay buffer that drains) cost a
    /// `madvise` and fresh zeroed pages each time. The warm blocks come first.
    #[test]
    fn a_block_in_steady_use_stays_warm_after_a_peak() {
        let pool = BufPool::new(4, 8192, 2);
        // A peak: all four out, then back (two kept warm, two discarded).
        let mut peak: Vec<RelayBuf> = (0..4).map(|_| RelayBuf::pooled(&pool)).collect();
        for b in &mut peak {
            assert!(b.attach(&pool));
            b.space().fill(0xaa);
        }
        drop(peak);
        // Steady use of one buffer: its block keeps its pages from one use to the next.
        let mut b = RelayBuf::pooled(&pool);
        for round in 1..=10u8 {
            assert!(b.attach(&pool));
            let space = b.space();
            assert_ne!(
                space[0], 0,
                "round {round}: a discarded block (zeroed pages)"
            );
            space[0] = round;
            b.fill(1);
            b.advance(1);
            b.consume(1);
            b.detach_if_empty();
            assert!(b.is_detached());
        }
    }

    #[test]
    fn full_buffer_reports_no_space() {
        let mut b = RelayBuf::new(4);
        b.space().copy_from_slice(b"wxyz");
        b.fill(4);
        assert!(b.is_full());
        assert!(b.space().is_empty());
        assert_eq!(b.len(), 4);
    }
}
