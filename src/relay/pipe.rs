//! In-memory byte pipes with capacity limits for the relay's unit tests (no sockets): a full
//! pipe refuses writes with `WouldBlock`, an empty one refuses reads until its writer shuts
//! down (then `Ok(0)`), and either side can reset it. Counts the reads and writes it serves. A
//! vectored write takes bytes across its slices as `writev` does, so a short one may end inside
//! any slice.
//! An end can act like a TLS stream ([`PipeEnd::backlog_cap`]): a write is taken into its own
//! backlog of records and flushed into the pipe as room allows, so it may succeed while the
//! pipe is full and leave a backlog (`Endpoint::has_backlog`). [`push`] feeds a queue into an
//! end as far as it takes.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::io::{self, IoSlice, Read, Write};
use std::rc::Rc;

use crate::net::io::Endpoint;

#[derive(Default)]
struct Chan {
    buf: VecDeque<u8>,
    cap: usize,
    /// The writer sent its end of stream.
    shut: bool,
    /// Reset by either side: every call fails.
    reset: bool,
}

/// One end of a bidirectional pipe.
pub struct PipeEnd {
    rx: Rc<RefCell<Chan>>,
    tx: Rc<RefCell<Chan>>,
    /// `write` calls that moved bytes.
    pub writes: usize,
    /// `read` calls that moved bytes.
    pub reads: usize,
    /// Bytes this end takes into its own backlog per write (0: writes go straight to the pipe).
    pub backlog_cap: usize,
    backlog: VecDeque<u8>,
}

/// Writes as much of `q` as `end` takes (front first); true if anything moved.
pub fn push(end: &mut PipeEnd, q: &mut VecDeque<u8>) -> bool {
    let mut moved = false;
    while !q.is_empty() {
        let (a, _) = q.as_slices();
        match end.write(a) {
            Ok(n) => {
                q.drain(..n);
                moved = true;
            }
            Err(_) => break,
        }
    }
    moved
}

/// A pipe whose a→b direction holds `cap_ab` bytes and b→a `cap_ba`.
pub fn pair(cap_ab: usize, cap_ba: usize) -> (PipeEnd, PipeEnd) {
    let ab = Rc::new(RefCell::new(Chan {
        cap: cap_ab,
        ..Chan::default()
    }));
    let ba = Rc::new(RefCell::new(Chan {
        cap: cap_ba,
        ..Chan::default()
    }));
    (
        PipeEnd {
            rx: ba.clone(),
            tx: ab.clone(),
            writes: 0,
            reads: 0,
            backlog_cap: 0,
            backlog: VecDeque::new(),
        },
        PipeEnd {
            rx: ab,
            tx: ba,
            writes: 0,
            reads: 0,
            backlog_cap: 0,
            backlog: VecDeque::new(),
        },
    )
}

impl PipeEnd {
    /// Resets both directions (the peer's next call fails with `ConnectionReset`).
    pub fn reset(&mut self) {
        self.rx.borrow_mut().reset = true;
        self.tx.borrow_mut().reset = true;
    }

    /// True once the peer shut its sending side and everything it sent was read.
    pub fn at_eof(&self) -> bool {
        let rx = self.rx.borrow();
        rx.shut && rx.buf.is_empty()
    }

    /// Moves backlog bytes into the pipe as room allows; true when none are left.
    fn flush_into_pipe(&mut self) -> bool {
        let mut tx = self.tx.borrow_mut();
        let n = self.backlog.len().min(tx.cap - tx.buf.len());
        tx.buf.extend(self.backlog.drain(..n));
        self.backlog.is_empty()
    }

    /// Bytes waiting to be read at this end.
    pub fn pending(&self) -> usize {
        self.rx.borrow().buf.len()
    }
}

impl Read for PipeEnd {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let mut rx = self.rx.borrow_mut();
        if rx.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if rx.buf.is_empty() {
            return if rx.shut {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        }
        let n = buf.len().min(rx.buf.len());
        for (d, s) in buf.iter_mut().zip(rx.buf.drain(..n)) {
            *d = s;
        }
        self.reads += 1;
        Ok(n)
    }
}

impl Write for PipeEnd {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let mut tx = self.tx.borrow_mut();
        if tx.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if tx.shut {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        if self.backlog_cap == 0 {
            let n = buf.len().min(tx.cap - tx.buf.len());
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            tx.buf.extend(&buf[..n]);
            self.writes += 1;
            return Ok(n);
        }
        drop(tx);
        // As TLS does: take what fits the backlog, flush; if nothing fitted, flush and retry.
        let mut n = buf.len().min(self.backlog_cap - self.backlog.len());
        if n == 0 {
            self.flush_into_pipe();
            n = buf.len().min(self.backlog_cap - self.backlog.len());
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
        }
        self.backlog.extend(&buf[..n]);
        self.flush_into_pipe();
        self.writes += 1;
        Ok(n)
    }

    /// As a socket's `writev`: as many bytes of the slices, in order, as the pipe has room for
    /// (a short write may end inside any slice). A TLS-like end ([`PipeEnd::backlog_cap`])
    /// takes the first non-empty slice, as `Write`'s default does.
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        if self.backlog_cap != 0 {
            let first = bufs
                .iter()
                .find(|b| !b.is_empty())
                .map_or(&[][..], |b| &**b);
            return self.write(first);
        }
        let mut tx = self.tx.borrow_mut();
        if tx.reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        if tx.shut {
            return Err(io::ErrorKind::BrokenPipe.into());
        }
        let room = tx.cap - tx.buf.len();
        let mut n = 0;
        for b in bufs {
            let take = b.len().min(room - n);
            tx.buf.extend(&b[..take]);
            n += take;
        }
        if n == 0 {
            return Err(io::ErrorKind::WouldBlock.into());
        }
        self.writes += 1;
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl Endpoint for PipeEnd {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.tx.borrow_mut().shut = true;
        Ok(())
    }

    fn flush_backlog(&mut self) -> io::Result<bool> {
        if self.tx.borrow().reset {
            return Err(io::ErrorKind::ConnectionReset.into());
        }
        Ok(self.flush_into_pipe())
    }

    fn has_backlog(&self) -> bool {
        !self.backlog.is_empty()
    }
}
