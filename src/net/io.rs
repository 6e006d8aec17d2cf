//! `WouldBlock` triage: every socket read/write result becomes a small [`Io`] outcome.
//!
//! `WouldBlock` is a state, not an error: callers clear their readiness flag on
//! [`Io::Blocked`] and wait for the next edge from mio. Interrupted calls are retried here.
//! [`Endpoint`] names what a relay needs from a socket beyond `Read + Write` (half-close, a TLS
//! backlog), so the relay core also runs over in-memory pipes. Nothing in this module knows about
//! sessions or buffers.

use std::io::{self, Read, Write};

/// Outcome of one non-blocking read or write.
#[derive(Debug)]
pub enum Io {
    /// This many bytes moved (never 0 for a non-empty buffer; see [`Io::Eof`]).
    Done(usize),
    /// The socket has no data / no room right now; wait for readiness.
    Blocked,
    /// Orderly end of stream (read returned 0).
    Eof,
    /// Hard error (reset, TLS failure, …).
    Failed(io::Error),
}

/// Reads once into `buf` (non-empty), retrying `Interrupted`.
pub fn read_once<R: Read + ?Sized>(r: &mut R, buf: &mut [u8]) -> Io {
    debug_assert!(!buf.is_empty());
    loop {
        match r.read(buf) {
            Ok(0) => return Io::Eof,
            Ok(n) => return Io::Done(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Io::Blocked,
            Err(e) => return Io::Failed(e),
        }
    }
}

/// Writes once from `buf` (non-empty), retrying `Interrupted`. A 0-byte write is reported as
/// `Failed(WriteZero)`.
pub fn write_once<W: Write + ?Sized>(w: &mut W, buf: &[u8]) -> Io {
    debug_assert!(!buf.is_empty());
    loop {
        match w.write(buf) {
            Ok(0) => return Io::Failed(io::ErrorKind::WriteZero.into()),
            Ok(n) => return Io::Done(n),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Io::Blocked,
            Err(e) => return Io::Failed(e),
        }
    }
}

/// One side of a relay: a byte stream plus what sockets add to `Read + Write`.
///
/// `read` returning `Ok(0)` is the peer's orderly end; `WouldBlock` means wait for readiness.
pub trait Endpoint: Read + Write {
    /// Sends our end of stream (TCP FIN) and keeps reading. Errors: the socket's.
    fn shutdown_write(&mut self) -> io::Result<()>;

    /// Writes bytes the endpoint queued itself (TLS records). `Ok(true)` when none are left,
    /// `Ok(false)` when the socket is full. Errors: the socket's or TLS's.
    fn flush_backlog(&mut self) -> io::Result<bool> {
        Ok(true)
    }

    /// True while the endpoint holds bytes of its own for the socket (TLS records).
    fn has_backlog(&self) -> bool {
        false
    }
}

impl Endpoint for mio::net::TcpStream {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.shutdown(std::net::Shutdown::Write)
    }
}

/// True for errors that mean "the peer reset or vanished" rather than a local fault.
pub fn is_reset(e: &io::Error) -> bool {
    matches!(
        e.kind(),
        io::ErrorKind::ConnectionReset
            | io::ErrorKind::ConnectionAborted
            | io::ErrorKind::BrokenPipe
            | io::ErrorKind::UnexpectedEof
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Script(Vec<io::Result<usize>>);
    impl Read for Script {
        fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
            self.0.remove(0)
        }
    }

    #[test]
    fn interrupted_is_retried_and_wouldblock_is_blocked() {
        let mut s = Script(vec![
            Err(io::ErrorKind::Interrupted.into()),
            Err(io::ErrorKind::WouldBlock.into()),
        ]);
        assert!(matches!(read_once(&mut s, &mut [0u8; 4]), Io::Blocked));
        let mut s = Script(vec![Ok(0)]);
        assert!(matches!(read_once(&mut s, &mut [0u8; 4]), Io::Eof));
        let mut s = Script(vec![Ok(3)]);
        assert!(matches!(read_once(&mut s, &mut [0u8; 4]), Io::Done(3)));
        let mut s = Script(vec![Err(io::ErrorKind::ConnectionReset.into())]);
        match read_once(&mut s, &mut [0u8; 4]) {
            Io::Failed(e) => assert!(is_reset(&e)),
            other => panic!("unexpected {other:?}"),
        }
    }
}
