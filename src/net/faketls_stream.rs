//! [`FakeTlsStream`]: an [`Endpoint`] that speaks the fake-TLS record layer over another one
//! (docs/protocol.md §2.3), so the relay core and the handshake run unchanged over an
//! `ee` client.
//!
//! Reads unwrap the client's records in place in the caller's buffer (`record::RecordReader`);
//! a write sends up to `record::BATCH` whole application_data records (each header in front of
//! its payload) in one vectored write (`record::RecordWriter`), so a 64 KiB offer costs one
//! system call as it does without records. Owns no buffer of its own beyond the writer's few
//! 5-byte headers; the only socket calls are on the transport, and registration with mio stays
//! with whoever registered it. The record arithmetic is `mtproto::faketls::record`'s (sans-IO);
//! this file is the I/O side of it.
//! [`FakeTls`] is the state alone, driven over a transport passed to each call (the session's
//! client socket, `conn::client_io`); [`FakeTlsStream`] owns its transport (tests, tools).

use std::io::{self, IoSlice, Read, Write};

use crate::mtproto::faketls::record::{RecordError, RecordReader, RecordWriter, BATCH};
use crate::net::io::Endpoint;

/// The record layer state of one fake-TLS connection, driven over a transport passed to each
/// call (so a session can keep its socket where mio registered it and switch it to fake-TLS in
/// place). [`FakeTlsStream`] pairs it with its transport.
#[derive(Debug)]
pub struct FakeTls {
    reader: RecordReader,
    writer: RecordWriter,
}

impl Default for FakeTls {
    fn default() -> FakeTls {
        FakeTls::new()
    }
}

impl FakeTls {
    /// At a record boundary both ways (right after our ServerHello went out).
    pub fn new() -> FakeTls {
        FakeTls {
            reader: RecordReader::new(),
            writer: RecordWriter::new(),
        }
    }

    /// `Read::read` of [`FakeTlsStream`] over `inner`.
    pub fn read<S: Endpoint + ?Sized>(
        &mut self,
        inner: &mut S,
        buf: &mut [u8],
    ) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // Each round consumes bytes from `inner`, so this ends at its WouldBlock or EOF. No round
        // cap: stopping early would leave bytes in the socket with no readiness edge to come.
        // Rounds without payload are bounded by the reader instead: every application_data
        // record carries a byte, and at most `record::MAX_CCS_RUN` CCS records come in a row.
        loop {
            let n = inner.read(buf)?;
            if n == 0 {
                return Ok(0);
            }
            match self.reader.unwrap_in_place(buf, n) {
                Ok(0) => continue,
                Ok(k) => return Ok(k),
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e)),
            }
        }
    }

    /// `Write::write` of [`FakeTlsStream`] over `inner`.
    pub fn write<S: Endpoint + ?Sized>(&mut self, inner: &mut S, buf: &[u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        // At most RECORD_HEADER + 1 rounds: each one that returns no payload wrote header bytes.
        loop {
            let batch = self.writer.batch(buf.len());
            let mut parts = [IoSlice::new(&[]); 2 * BATCH];
            let (mut k, mut at) = (0, 0);
            for (header, len) in batch.records() {
                parts[k] = IoSlice::new(header);
                parts[k + 1] = IoSlice::new(&buf[at..at + len]);
                (k, at) = (k + 2, at + len);
            }
            // The current record's header may be all out already: no empty slice in front.
            let parts = if parts[0].is_empty() {
                &parts[1..k]
            } else {
                &parts[..k]
            };
            match inner.write_vectored(parts) {
                Ok(0) => {
                    self.writer.unstarted();
                    return Ok(0);
                }
                Ok(n) => {
                    let payload = self.writer.wrote(n);
                    if payload > 0 {
                        return Ok(payload);
                    }
                }
                Err(e) => {
                    self.writer.unstarted();
                    return Err(e);
                }
            }
        }
    }

    /// `Endpoint::flush_backlog` of [`FakeTlsStream`] over `inner`: `inner`'s own backlog, then
    /// the rest of a header partly written.
    pub fn flush_backlog<S: Endpoint + ?Sized>(&mut self, inner: &mut S) -> io::Result<bool> {
        if !inner.flush_backlog()? {
            return Ok(false);
        }
        while !self.writer.backlog().is_empty() {
            match inner.write(self.writer.backlog()) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(n) => {
                    self.writer.wrote(n);
                }
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// True while a header is partly written (its rest goes before any payload).
    pub fn has_backlog(&self) -> bool {
        !self.writer.backlog().is_empty()
    }
}

/// An [`Endpoint`] over `inner` carrying its bytes as fake-TLS application_data records.
///
/// * `read` returns payload only; a read that yields only record headers or change_cipher_spec
///   bytes reads again, so `Ok(0)` means the peer really ended and `WouldBlock` that `inner`
///   has nothing more now. A bad record ([`RecordError`]) is an `io::Error` of kind
///   `InvalidData` whose message names it ([`record_error`] gets it back).
/// * `write` sends what is left of the current record header and up to the rest of that record
///   (records ≤ `MAX_PAYLOAD`), then up to `BATCH - 1` more whole records of what is offered,
///   in one `write_vectored`, and returns the payload bytes taken; the record a short write
///   ended inside carries on with its announced length, a header partly written stays as
///   backlog ([`Endpoint::has_backlog`]) and goes first, records not begun are forgotten.
pub struct FakeTlsStream<S> {
    /// The transport (the client's socket).
    pub inner: S,
    tls: FakeTls,
}

impl<S: Endpoint> FakeTlsStream<S> {
    /// Wraps `inner` at a record boundary both ways (right after our ServerHello went out).
    pub fn new(inner: S) -> FakeTlsStream<S> {
        FakeTlsStream {
            inner,
            tls: FakeTls::new(),
        }
    }
}

/// The record error inside an `io::Error` returned by a fake-TLS `read`, if it is one.
pub fn record_error(e: &io::Error) -> Option<RecordError> {
    if e.kind() != io::ErrorKind::InvalidData {
        return None;
    }
    e.get_ref()?.downcast_ref::<RecordError>().copied()
}

impl<S: Endpoint> Read for FakeTlsStream<S> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        self.tls.read(&mut self.inner, buf)
    }
}

impl<S: Endpoint> Write for FakeTlsStream<S> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.tls.write(&mut self.inner, buf)
    }

    fn flush(&mut self) -> io::Result<()> {
        self.inner.flush()
    }
}

impl<S: Endpoint> Endpoint for FakeTlsStream<S> {
    fn shutdown_write(&mut self) -> io::Result<()> {
        self.inner.shutdown_write()
    }

    fn flush_backlog(&mut self) -> io::Result<bool> {
        self.tls.flush_backlog(&mut self.inner)
    }

    fn has_backlog(&self) -> bool {
        self.tls.has_backlog() || self.inner.has_backlog()
    }
}

#[cfg(test)]
mod tests;
