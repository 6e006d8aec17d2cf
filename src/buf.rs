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
//! never grows; a full buffer means "stop reading this side" (backpressure by interest). Nothing
//! here knows about sockets or ciphers.

/// Bytes kept free in front of an empty buffer's data: room for a WS frame header (≤ 14).
pub const HEADROOM: usize = 16;

/// A relay buffer of fixed capacity (bytes), allocated once.
pub struct RelayBuf {
    data: Box<[u8]>,
    lo: usize,
    mid: usize,
    hi: usize,
}

impl RelayBuf {
    /// Allocates a zeroed buffer that holds `cap` bytes (`cap` > 0), plus [`HEADROOM`].
    pub fn new(cap: usize) -> RelayBuf {
        RelayBuf {
            data: vec![0u8; cap.max(1) + HEADROOM].into_boxed_slice(),
            lo: HEADROOM,
            mid: HEADROOM,
            hi: HEADROOM,
        }
    }

    /// Capacity in bytes (headroom excluded).
    pub fn capacity(&self) -> usize {
        self.data.len() - HEADROOM
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
        if self.lo != self.mid || self.lo < bytes.len() {
            return false;
        }
        self.lo -= bytes.len();
        self.data[self.lo..self.mid].copy_from_slice(bytes);
        true
    }

    /// Moves everything held (ready and unprocessed, cursors kept apart) into the empty `other`
    /// and empties `self`. `false` (and nothing changed) if `other` is not empty or too small.
    pub fn move_into(&mut self, other: &mut RelayBuf) -> bool {
        if !other.is_empty() {
            return false;
        }
        let (ready, held) = (self.mid - self.lo, self.hi - self.lo);
        // Keep prepended bytes in front of HEADROOM if there were any.
        let start = if self.lo < HEADROOM {
            self.lo
        } else {
            HEADROOM
        };
        if start + held > other.data.len() {
            return false;
        }
        other.data[start..start + held].copy_from_slice(&self.data[self.lo..self.hi]);
        other.lo = start;
        other.mid = start + ready;
        other.hi = start + held;
        self.reset();
        true
    }

    /// Processed bytes waiting to be sent: `[lo, mid)`.
    pub fn ready(&self) -> &[u8] {
        &self.data[self.lo..self.mid]
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
        &self.data[self.mid..self.hi]
    }

    /// Mutable view of the first `n` unprocessed bytes (for in-place transforms).
    pub fn unprocessed_mut(&mut self, n: usize) -> &mut [u8] {
        let end = (self.mid + n).min(self.hi);
        &mut self.data[self.mid..end]
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
        if self.hi == self.data.len() && self.lo > HEADROOM {
            self.data.copy_within(self.lo..self.hi, HEADROOM);
            self.mid -= self.lo - HEADROOM;
            self.hi -= self.lo - HEADROOM;
            self.lo = HEADROOM;
        }
        &mut self.data[self.hi..]
    }

    /// Marks `n` bytes written into [`RelayBuf::space`] as received.
    pub fn fill(&mut self, n: usize) {
        debug_assert!(self.hi + n <= self.data.len());
        self.hi = (self.hi + n).min(self.data.len());
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
    fn full_buffer_reports_no_space() {
        let mut b = RelayBuf::new(4);
        b.space().copy_from_slice(b"wxyz");
        b.fill(4);
        assert!(b.is_full());
        assert!(b.space().is_empty());
        assert_eq!(b.len(), 4);
    }
}
