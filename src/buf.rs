//! Fixed-capacity relay buffer with three cursors.
//!
//! ```text
//! 0 ........ lo ============ mid ------------ hi ........ cap
//!            | ready to send | read, not yet  |  free
//!            | (processed)   | processed      |
//! ```
//! Bytes are read in at `hi`, transformed in place from `mid` (decrypt, re-encrypt, mask) and
//! sent from `lo`. The buffer never grows; a full buffer means "stop reading this side"
//! (backpressure by interest). Nothing here knows about sockets or ciphers.

/// A relay buffer of fixed capacity (bytes), allocated once.
pub struct RelayBuf {
    data: Box<[u8]>,
    lo: usize,
    mid: usize,
    hi: usize,
}

impl RelayBuf {
    /// Allocates a zeroed buffer of `cap` bytes (`cap` > 0).
    pub fn new(cap: usize) -> RelayBuf {
        RelayBuf {
            data: vec![0u8; cap.max(1)].into_boxed_slice(),
            lo: 0,
            mid: 0,
            hi: 0,
        }
    }

    /// Capacity in bytes.
    pub fn capacity(&self) -> usize {
        self.data.len()
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
            self.lo = 0;
            self.mid = 0;
            self.hi = 0;
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
            self.lo = 0;
            self.mid = 0;
            self.hi = 0;
        }
    }

    /// Free space at the tail for a read, compacting first if that makes room. Empty when full.
    pub fn space(&mut self) -> &mut [u8] {
        if self.hi == self.data.len() && self.lo > 0 {
            self.data.copy_within(self.lo..self.hi, 0);
            self.mid -= self.lo;
            self.hi -= self.lo;
            self.lo = 0;
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
        self.lo == 0 && self.hi == self.data.len()
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
    fn full_buffer_reports_no_space() {
        let mut b = RelayBuf::new(4);
        b.space().copy_from_slice(b"wxyz");
        b.fill(4);
        assert!(b.is_full());
        assert!(b.space().is_empty());
        assert_eq!(b.len(), 4);
    }
}
