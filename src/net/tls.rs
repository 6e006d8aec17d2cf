//! The only rustls user: a non-blocking TLS stream, and (in `tls/config.rs`, re-exported
//! here) the client configuration and the cipher preference.
//!
//! [`client_config_with`] builds one shared `ClientConfig` at start (bundled web PKI roots plus
//! an optional `--ca-file`, or the no-verification mode behind `--danger-accept-invalid-certs`)
//! and orders the offered cipher suites by [`CipherPref`] (`--tls-cipher`): AES-GCM first where
//! the CPU has AES instructions ([`cpu_has_aes`]), ChaCha20-Poly1305 first elsewhere.
//! [`TlsStream`] drives a rustls `ClientConnection` over a mio `TcpStream` and implements
//! `Read`/`Write` with `WouldBlock` passed through, so tungstenite's handshake and the relay can
//! both use it; the preference is logged once at start and each negotiated suite per handshake,
//! both at debug level.
//!
//! Buffers (issue 7): ciphertext is read from the socket in one `read` of the caller's buffer
//! length plus one maximal record ([`RECORD_WIRE`]), at most [`SCRATCH_LEN`], into a
//! thread-wide scratch buffer and fed to rustls from memory (rustls alone reads into its own
//! deframer buffer, 4 KiB to one record at a time); what rustls could not take is kept per
//! stream and fed first next time. So one call brings in at most one record more than was
//! asked for, and what the caller had no room for stays with the stream (rustls caps received
//! plaintext at 16 KiB). A stream that goes idle (the socket would block) gives rustls the
//! chance to shrink an empty deframer buffer back to 4 KiB; `tests/tls_memory.rs` measures what
//! an idle stream that has carried traffic still holds.
//! Outgoing records are capped at [`TLS_BUFFER_LIMIT`] and leave in one `writev` per call;
//! `write_vectored` puts several slices (a WebSocket header and its payload) in one record.
//!
//! [`TlsStream::plain`] is the same stream without TLS (the `cfproxy-ws` tier's `ws://`,
//! docs/protocol.md §4.3): reads and writes go straight to the socket, nothing is queued, so the
//! upgrade, the WS framing and the relay above it are the same code for both.

use std::cell::RefCell;
use std::io::{self, IoSlice, Read, Write};
use std::sync::Arc;

mod config;

pub use config::{
    client_config, client_config_with, cpu_has_aes, cpuinfo_has_aes, order_suites, CipherFamily,
    CipherPref,
};

use mio::net::TcpStream;
use rustls::pki_types::ServerName;
use rustls::{ClientConfig, ClientConnection};

/// Cap on rustls' queued plaintext and ciphertext per connection (bytes): one full record, so
/// a relay write of up to 16 KiB is taken whole when nothing is queued. Bounds memory per
/// upstream; writes past it return `WouldBlock` until the socket drains (the caller keeps the
/// rest in its own buffer).
pub const TLS_BUFFER_LIMIT: usize = 16 * 1024;

/// Largest single socket read (bytes): the size of the thread-wide ciphertext scratch buffer.
pub const SCRATCH_LEN: usize = 64 * 1024;

/// One maximal TLS record on the wire (bytes): 5-byte header, 16 KiB of plaintext and the
/// 2 KiB expansion TLS 1.2 allows (RFC 5246 §6.2.3; TLS 1.3 needs at most 256). A socket read
/// asks for the caller's buffer length plus this, capped at [`SCRATCH_LEN`].
pub const RECORD_WIRE: usize = 5 + 16 * 1024 + 2048;

/// A TLS client connection over a non-blocking socket.
pub struct TlsStream {
    /// The TCP socket (registered with the reactor by its owner).
    pub sock: TcpStream,
    /// The TLS client; `None` for a [`TlsStream::plain`] stream (no TLS at all).
    tls: Option<ClientConnection>,
    /// Ciphertext read from the socket that rustls could not take yet (its plaintext buffer
    /// was full and the caller's buffer too); fed before the socket is read again. Empty, and
    /// unallocated, almost always.
    stash: Vec<u8>,
    /// Where the record framing of everything read from the socket stands.
    edge: RecordEdge,
    /// Bytes read from the socket so far (ciphertext, handshake included).
    raw_in: u64,
    /// While an HTTP response head is being read ([`TlsStream::stop_at_head`]): where the
    /// search for the blank line that ends it stands (see `next_progress`).
    head: Option<u8>,
    /// Plaintext that came after the head, handed out before anything else is read.
    held: Vec<u8>,
}

/// The TLS record framing of a ciphertext stream (RFC 8446 §5.1: a 5-byte header whose last
/// two bytes are the length, then that many bytes): whether the stream stopped inside a
/// record. rustls decrypts whole records only, so the bytes of one cut short by a frozen path
/// never reach the relay; this is how the relay still knows a reply was under way.
#[derive(Clone, Copy, Debug, Default)]
struct RecordEdge {
    /// Header bytes of the next record so far, and how many.
    hdr: [u8; 5],
    n: u8,
    /// Bytes of the current record's body still to come.
    left: u32,
}

impl RecordEdge {
    fn feed(&mut self, mut bytes: &[u8]) {
        while !bytes.is_empty() {
            if self.left > 0 {
                let take = bytes.len().min(self.left as usize);
                self.left -= take as u32;
                bytes = &bytes[take..];
                continue;
            }
            self.hdr[self.n as usize] = bytes[0];
            self.n += 1;
            bytes = &bytes[1..];
            if self.n == 5 {
                self.n = 0;
                self.left = u32::from(u16::from_be_bytes([self.hdr[3], self.hdr[4]]));
            }
        }
    }

    fn inside(&self) -> bool {
        self.left > 0 || self.n > 0
    }
}

thread_local! {
    /// The ciphertext scratch every [`TlsStream`] on this thread reads the socket into
    /// ([`SCRATCH_LEN`] bytes, allocated on first use). Nothing stays in it between calls.
    static SCRATCH: RefCell<Vec<u8>> = const { RefCell::new(Vec::new()) };
}

/// Runs `f` on the first `len` (≤ [`SCRATCH_LEN`]) bytes of this thread's scratch.
fn with_scratch<T>(len: usize, f: impl FnOnce(&mut [u8]) -> T) -> T {
    SCRATCH.with(|cell| match cell.try_borrow_mut() {
        Ok(mut v) => {
            if v.len() < SCRATCH_LEN {
                v.resize(SCRATCH_LEN, 0);
            }
            f(&mut v[..len])
        }
        // Not reachable (nothing below `f` reads a TlsStream); a fresh buffer keeps it safe.
        Err(_) => f(&mut vec![0; len]),
    })
}

/// A reader that is never ready: `read_tls` with it only lets rustls resize its deframer
/// buffer (back to 4 KiB when it holds no partial record).
struct NotReady;

impl Read for NotReady {
    fn read(&mut self, _buf: &mut [u8]) -> io::Result<usize> {
        Err(io::ErrorKind::WouldBlock.into())
    }
}

impl TlsStream {
    /// Starts a TLS client on a connected (or connecting) socket with SNI `host`.
    ///
    /// Errors: `host` is not a valid DNS name or IP literal.
    pub fn new(config: &Arc<ClientConfig>, host: &str, sock: TcpStream) -> io::Result<TlsStream> {
        let name = ServerName::try_from(host.to_owned())
            .map_err(|_| io::Error::new(io::ErrorKind::InvalidInput, "bad TLS server name"))?;
        let mut tls = ClientConnection::new(config.clone(), name).map_err(tls_error)?;
        tls.set_buffer_limit(Some(TLS_BUFFER_LIMIT));
        Ok(TlsStream {
            sock,
            tls: Some(tls),
            stash: Vec::new(),
            edge: RecordEdge::default(),
            raw_in: 0,
            head: None,
            held: Vec::new(),
        })
    }

    /// The stream without TLS: plaintext straight over `sock` (a `ws://` upstream). Nothing is
    /// ever queued, [`TlsStream::mid_record`] is always false and [`TlsStream::raw_in`] counts
    /// the bytes read.
    pub fn plain(sock: TcpStream) -> TlsStream {
        TlsStream {
            sock,
            tls: None,
            stash: Vec::new(),
            edge: RecordEdge::default(),
            raw_in: 0,
            head: None,
            held: Vec::new(),
        }
    }

    /// True for a [`TlsStream::plain`] stream.
    pub fn is_plain(&self) -> bool {
        self.tls.is_none()
    }

    /// Writes queued TLS records to the socket until it would block (each attempt is one
    /// `writev` of every queued record). Returns `Ok(true)` when nothing is left queued.
    pub fn flush_tls(&mut self) -> io::Result<bool> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(true);
        };
        while tls.wants_write() {
            match tls.write_tls(&mut self.sock) {
                Ok(0) => return Err(io::ErrorKind::WriteZero.into()),
                Ok(_) => {}
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(e),
            }
        }
        Ok(true)
    }

    /// True while TLS records are queued for the socket.
    pub fn wants_write(&self) -> bool {
        self.tls.as_ref().is_some_and(|t| t.wants_write())
    }

    /// Makes reads stop at the end of an HTTP response head (the blank line) until one has
    /// been read: what the peer sent right after it (a front that speaks at once after its
    /// `101`) is held and handed out by the next reads, so the WebSocket upgrade, which reads
    /// in chunks and keeps what it read past the head to itself, cannot swallow it.
    pub fn stop_at_head(&mut self) {
        self.head = Some(0);
    }

    /// Bytes read from the socket so far (ciphertext): a reply arriving on a slow path moves
    /// this long before a whole record, and so its plaintext, reaches the relay.
    pub fn raw_in(&self) -> u64 {
        self.raw_in
    }

    /// True when the bytes read from the socket so far end inside a TLS record: part of a
    /// record came and the rest has not (a reply under way that rustls cannot decrypt yet).
    pub fn mid_record(&self) -> bool {
        self.edge.inside()
    }

    /// Queues a TLS close_notify (best effort; the caller flushes).
    pub fn send_close_notify(&mut self) {
        if let Some(tls) = self.tls.as_mut() {
            tls.send_close_notify();
        }
    }

    /// The negotiated suite's IANA name (`TLS13_CHACHA20_POLY1305_SHA256`), once the handshake
    /// has chosen one.
    pub fn cipher_suite(&self) -> Option<&'static str> {
        self.tls
            .as_ref()?
            .negotiated_cipher_suite()?
            .suite()
            .as_str()
    }

    /// Decrypted plaintext into `buf`: `Some(n)` with data or `Some(0)` at a clean end
    /// (close_notify), `None` when there is none yet. Errors: TCP ended without close_notify
    /// (`UnexpectedEof`).
    fn take_plaintext(&mut self, buf: &mut [u8]) -> io::Result<Option<usize>> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(None);
        };
        match tls.reader().read(buf) {
            Ok(n) => Ok(Some(n)),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    }

    /// Feeds ciphertext `data` to rustls, moving plaintext into `buf` as records complete.
    /// Returns (bytes of `data` taken, plaintext bytes written to `buf`). Stops early only when
    /// rustls' plaintext buffer and `buf` are both full, or after close_notify (the rest is
    /// dropped, as rustls would). Errors: TLS failures (after trying to send the alert).
    fn feed(&mut self, data: &[u8], buf: &mut [u8]) -> io::Result<(usize, usize)> {
        let mut rest = data;
        let mut filled = 0;
        while !rest.is_empty() {
            let Some(tls) = self.tls.as_mut() else {
                break; // never fed: a plain stream reads the socket straight into `buf`
            };
            match tls.read_tls(&mut rest) {
                // After close_notify rustls takes nothing more.
                Ok(0) => {
                    rest = &[];
                    break;
                }
                Ok(_) => {}
                // `Other` is rustls' "received plaintext buffer full".
                Err(e) if e.kind() == io::ErrorKind::Other && filled < buf.len() => {}
                Err(e) if e.kind() == io::ErrorKind::Other => break,
                Err(e) => return Err(e),
            }
            let was_handshaking = tls.is_handshaking();
            if let Err(e) = tls.process_new_packets() {
                // Try to tell the peer why (alert), then fail.
                let _ = self.flush_tls();
                return Err(tls_error(e));
            }
            let done = was_handshaking && !tls.is_handshaking();
            if done && log::log_enabled!(log::Level::Debug) {
                let peer = self.sock.peer_addr().map(|a| a.to_string());
                log::debug!(
                    "TLS: negotiated {} with {}",
                    self.cipher_suite().unwrap_or("an unnamed suite"),
                    peer.as_deref().unwrap_or("?")
                );
            }
            if filled < buf.len() {
                if let Ok(Some(n)) = self.take_plaintext(&mut buf[filled..]) {
                    filled += n;
                }
            }
        }
        // Handshake messages, alerts, key-update answers.
        self.flush_tls()?;
        Ok((data.len() - rest.len(), filled))
    }

    /// Feeds the stash; returns plaintext bytes written to `buf`.
    fn feed_stash(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let stash = std::mem::take(&mut self.stash);
        let (used, n) = self.feed(&stash, buf)?;
        if used < stash.len() {
            self.stash = stash[used..].to_vec();
        }
        Ok(n)
    }

    /// The socket hit its end: rustls learns of it; plaintext left, or `UnexpectedEof` if the
    /// peer did not send close_notify (`Ok(0)` if it did).
    fn at_eof(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(tls) = self.tls.as_mut() else {
            return Ok(0); // plain: the socket's end is the stream's end
        };
        tls.read_tls(&mut io::empty())?;
        tls.process_new_packets().map_err(tls_error)?;
        match self.take_plaintext(buf)? {
            Some(n) => Ok(n),
            None => Err(io::ErrorKind::UnexpectedEof.into()),
        }
    }
}

impl Read for TlsStream {
    /// Plaintext into `buf`: held bytes first ([`TlsStream::stop_at_head`]), then from the
    /// socket (see `read_plain`), cut after the end of an HTTP head while one is awaited.
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if !self.held.is_empty() {
            let n = buf.len().min(self.held.len());
            buf[..n].copy_from_slice(&self.held[..n]);
            self.held.drain(..n);
            return Ok(n);
        }
        let n = self.read_plain(buf)?;
        if let Some(seen) = self.head {
            if let Some(end) = head_end(seen, &buf[..n]) {
                self.held.extend_from_slice(&buf[end..n]);
                self.head = None;
                return Ok(end);
            }
            self.head = Some(blank_line_progress(seen, &buf[..n]));
        }
        Ok(n)
    }
}

/// Where in `data` an HTTP head ends (the index after its blank line), the search having
/// stood at `seen` before `data`.
fn head_end(mut seen: u8, data: &[u8]) -> Option<usize> {
    for (i, &b) in data.iter().enumerate() {
        seen = next_progress(seen, b);
        if seen == HEAD_DONE {
            return Some(i + 1);
        }
    }
    None
}

/// Where the search stands after `data`, from `seen`.
fn blank_line_progress(mut seen: u8, data: &[u8]) -> u8 {
    for &b in data {
        seen = next_progress(seen, b);
    }
    seen
}

/// `next_progress`'s state once the blank line was seen.
const HEAD_DONE: u8 = 3;

/// One step of the search for the blank line ending a head, as HTTP parsers accept it
/// (RFC 9112 §2.2: a bare LF ends a line too): 0 inside a line, 1 just after a line's LF, 2
/// after that LF and a CR; an LF in state 1 or 2 is the blank line.
fn next_progress(seen: u8, b: u8) -> u8 {
    match (seen, b) {
        (1 | 2, b'\n') => HEAD_DONE,
        (_, b'\n') => 1,
        (1, b'\r') => 2,
        _ => 0,
    }
}

impl TlsStream {
    /// Plaintext into `buf`. Reads the socket (once per loop, at most `buf.len()` +
    /// [`RECORD_WIRE`] bytes, capped at [`SCRATCH_LEN`]) until there is plaintext, the socket would block
    /// (`WouldBlock`) or ends. `Ok(0)`: close_notify received; `UnexpectedEof`: TCP ended
    /// without it; `InvalidData` with [`TLS_ERROR_PREFIX`]: a TLS failure.
    fn read_plain(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        if buf.is_empty() {
            return Ok(0);
        }
        if self.tls.is_none() {
            let n = self.sock.read(buf)?;
            self.raw_in += n as u64;
            return Ok(n);
        }
        loop {
            if let Some(n) = self.take_plaintext(buf)? {
                return Ok(n);
            }
            if !self.stash.is_empty() {
                let n = self.feed_stash(buf)?;
                if n > 0 {
                    return Ok(n);
                }
                continue;
            }
            let want = (buf.len() + RECORD_WIRE).min(SCRATCH_LEN);
            let got = with_scratch(want, |scratch| -> io::Result<Option<usize>> {
                let got = match self.sock.read(scratch) {
                    Ok(0) => return Ok(None),
                    Ok(got) => got,
                    Err(e) => return Err(e),
                };
                self.edge.feed(&scratch[..got]);
                self.raw_in += got as u64;
                let (used, n) = self.feed(&scratch[..got], buf)?;
                if used < got {
                    self.stash.extend_from_slice(&scratch[used..got]);
                }
                Ok(Some(n))
            });
            match got {
                Ok(None) => return self.at_eof(buf),
                Ok(Some(0)) => {} // a partial record or handshake only: read on
                Ok(Some(n)) => return Ok(n),
                Err(e) => {
                    if e.kind() == io::ErrorKind::WouldBlock {
                        // Going idle: let rustls shrink an empty deframer buffer to 4 KiB.
                        if let Some(tls) = self.tls.as_mut() {
                            let _ = tls.read_tls(&mut NotReady);
                        }
                    }
                    return Err(e);
                }
            }
        }
    }
}

impl TlsStream {
    /// Queues what rustls accepts of `bufs` (one record per 16 KiB, slices joined), then one
    /// flush; if nothing fitted, flushes first and tries once more.
    fn write_slices(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        let total: usize = bufs.iter().map(|b| b.len()).sum();
        let Some(tls) = self.tls.as_mut() else {
            return self.sock.write_vectored(bufs);
        };
        let mut n = tls.writer().write_vectored(bufs)?;
        self.flush_tls()?;
        if n == 0 && total > 0 {
            let Some(tls) = self.tls.as_mut() else {
                return Ok(0);
            };
            n = tls.writer().write_vectored(bufs)?;
            if n == 0 {
                return Err(io::ErrorKind::WouldBlock.into());
            }
            self.flush_tls()?;
        }
        Ok(n)
    }
}

impl Write for TlsStream {
    /// Encrypts what fits under [`TLS_BUFFER_LIMIT`] and sends queued records in one `writev`.
    /// `WouldBlock` when rustls' buffer is full and the socket takes nothing.
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.write_slices(&[IoSlice::new(buf)])
    }

    /// Like `write`, but the slices share TLS records (a WebSocket frame header and its
    /// payload cost one record and one `writev`, not two).
    fn write_vectored(&mut self, bufs: &[IoSlice<'_>]) -> io::Result<usize> {
        self.write_slices(bufs)
    }

    fn flush(&mut self) -> io::Result<()> {
        if self.flush_tls()? {
            Ok(())
        } else {
            Err(io::ErrorKind::WouldBlock.into())
        }
    }
}

/// Marker text carried by every TLS failure so the connect engine can classify it.
pub const TLS_ERROR_PREFIX: &str = "TLS: ";

fn tls_error(e: rustls::Error) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, format!("{TLS_ERROR_PREFIX}{e}"))
}

/// True if `e` came from the TLS layer (bad certificate, alert, protocol error).
pub fn is_tls_error(e: &io::Error) -> bool {
    e.kind() == io::ErrorKind::InvalidData && e.to_string().starts_with(TLS_ERROR_PREFIX)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::CertificateDer;
    use rustls::{CipherSuite, SupportedCipherSuite};

    use super::*;

    #[test]
    fn the_end_of_an_http_head_is_found_across_reads() {
        let resp = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\n\r\n\x82\x05hello";
        let end = resp.len() - 7;
        for cut in 1..resp.len() {
            let (a, b) = resp.split_at(cut);
            let found = match head_end(0, a) {
                Some(e) => Some(e),
                None => head_end(blank_line_progress(0, a), b).map(|e| e + cut),
            };
            assert_eq!(found, Some(end), "cut at {cut}");
        }
        assert_eq!(head_end(0, b"a\r\n\rx\r\n\r\n"), Some(9));
        assert_eq!(head_end(0, b"a\r\r\n\r\n"), Some(6));
        assert_eq!(head_end(0, b"no end\r\n"), None);
        // Bare LF line ends, as parsers accept them.
        assert_eq!(
            head_end(0, b"HTTP/1.1 101 x\nUpgrade: websocket\n\nDATA"),
            Some(35)
        );
        assert_eq!(head_end(0, b"a\n\r\nb"), Some(4));
        assert_eq!(head_end(0, b"a\r\nb\r\nc"), None);
    }

    #[test]
    fn the_record_edge_knows_a_stream_cut_inside_a_record() {
        // Two application_data records (300 and 16384 bytes) fed 5 bytes at a time: inside
        // while a header or a body is incomplete, at the boundary after each record.
        let mut wire = vec![23, 3, 3, 1, 44];
        wire.extend(vec![0xaa; 300]);
        wire.extend([23, 3, 3, 0x40, 0x00]);
        wire.extend(vec![0xbb; 0x4000]);
        let mut e = RecordEdge::default();
        let mut at = 0;
        for (i, chunk) in wire.chunks(5).enumerate() {
            e.feed(chunk);
            at += chunk.len();
            let boundary = at == 305 || at == wire.len();
            assert_eq!(e.inside(), !boundary, "after chunk {i} ({at} bytes)");
        }
        assert!(!e.inside());
        e.feed(&[23, 3]);
        assert!(e.inside(), "half a header");
    }

    #[test]
    fn default_config_builds_and_missing_ca_file_is_named() {
        assert!(client_config(None, false).is_ok());
        assert!(client_config(None, true).is_ok());
        let err = client_config(Some(Path::new("/nonexistent/ca.pem")), false).unwrap_err();
        assert!(err.contains("--ca-file"), "{err}");
    }

    #[test]
    fn cipher_pref_parses_the_flag_values() {
        assert_eq!(CipherPref::parse("auto"), Ok(CipherPref::Auto));
        assert_eq!(CipherPref::parse("AES-GCM"), Ok(CipherPref::AesGcm));
        assert_eq!(CipherPref::parse("aes"), Ok(CipherPref::AesGcm));
        assert_eq!(CipherPref::parse("chacha20"), Ok(CipherPref::Chacha20));
        assert_eq!(CipherPref::parse("chacha"), Ok(CipherPref::Chacha20));
        let err = CipherPref::parse("rc4").unwrap_err();
        assert!(err.contains("auto, aes-gcm or chacha20"), "{err}");
        for p in [CipherPref::Auto, CipherPref::AesGcm, CipherPref::Chacha20] {
            assert_eq!(CipherPref::parse(p.name()), Ok(p));
        }
    }

    #[test]
    fn auto_resolves_by_the_cpu_and_forced_values_do_not() {
        assert_eq!(CipherPref::Auto.resolve(true), CipherFamily::AesGcm);
        assert_eq!(CipherPref::Auto.resolve(false), CipherFamily::Chacha20);
        for aes in [true, false] {
            assert_eq!(CipherPref::AesGcm.resolve(aes), CipherFamily::AesGcm);
            assert_eq!(CipherPref::Chacha20.resolve(aes), CipherFamily::Chacha20);
        }
    }

    #[test]
    fn cpuinfo_features_are_read_per_word() {
        // ARMv7 Cortex-A7 (no crypto extension), two cores.
        let a7 = "processor\t: 0\nmodel name\t: ARMv7 Processor rev 5 (v7l)\n\
                  Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt \
                  vfpd32 lpae evtstrm\n\nprocessor\t: 1\n\
                  Features\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4 idiva idivt\n";
        assert!(!cpuinfo_has_aes(a7));
        // Cortex-A53 running a 32-bit kernel: the crypto extension shows as `aes pmull …`.
        let a53 = "processor\t: 0\nFeatures\t: half thumb fastmult vfp edsp neon vfpv3 tls \
                   vfpv4 idiva idivt lpae evtstrm aes pmull sha1 sha2 crc32\n";
        assert!(cpuinfo_has_aes(a53));
        assert!(
            !cpuinfo_has_aes("Features\t: neon aesx vaes\n"),
            "whole words only"
        );
        assert!(!cpuinfo_has_aes(""), "no Features line: no AES");
        assert!(
            !cpuinfo_has_aes("flags\t\t: fpu aes sse2\n"),
            "x86 `flags` is not read"
        );
        let mixed = format!("{a53}\n{a7}");
        assert!(!cpuinfo_has_aes(&mixed), "every core must have it");
    }

    #[cfg(any(target_arch = "mips", target_arch = "mips64"))]
    #[test]
    fn mips_has_no_aes() {
        assert!(!cpu_has_aes());
    }

    fn is_tls12(s: &SupportedCipherSuite) -> bool {
        matches!(s, SupportedCipherSuite::Tls12(_))
    }

    #[test]
    fn suites_are_ordered_per_version_with_the_family_first() {
        let base = rustls::crypto::ring::default_provider().cipher_suites;
        for first in [CipherFamily::AesGcm, CipherFamily::Chacha20] {
            let out = order_suites(&base, first);
            assert_eq!(out.len(), base.len(), "{first:?}: same suites");
            for s in &base {
                assert!(
                    out.iter().any(|o| o.suite() == s.suite()),
                    "{first:?}: lost {s:?}"
                );
            }
            // TLS 1.3 block, then TLS 1.2.
            let split = out
                .iter()
                .position(is_tls12)
                .expect("TLS 1.2 suites present");
            assert!(split > 0, "TLS 1.3 suites present");
            assert!(out[split..].iter().all(is_tls12), "{first:?}: {out:?}");
            for block in [&out[..split], &out[split..]] {
                let fam: Vec<CipherFamily> =
                    block.iter().map(|s| CipherFamily::of(s.suite())).collect();
                let n = fam.iter().take_while(|f| **f == first).count();
                assert!(n > 0, "{first:?} first in {block:?}");
                assert!(fam[n..].iter().all(|f| *f != first), "{first:?}: {block:?}");
            }
        }
        let chacha = order_suites(&base, CipherFamily::Chacha20);
        assert_eq!(
            chacha[0].suite(),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        );
        assert_eq!(
            chacha[chacha.iter().position(is_tls12).unwrap()].suite(),
            CipherSuite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256
        );
        let aes = order_suites(&base, CipherFamily::AesGcm);
        assert_eq!(aes[0].suite(), CipherSuite::TLS13_AES_256_GCM_SHA384);
    }

    #[test]
    fn the_config_carries_the_order() {
        for (pref, first) in [
            (
                CipherPref::Chacha20,
                CipherSuite::TLS13_CHACHA20_POLY1305_SHA256,
            ),
            (CipherPref::AesGcm, CipherSuite::TLS13_AES_256_GCM_SHA384),
        ] {
            let cfg = client_config_with(None, false, pref).unwrap();
            assert_eq!(cfg.crypto_provider().cipher_suites[0].suite(), first);
        }
    }

    /// Test CA and the fake front's certificate (tests/data), for in-memory handshakes.
    fn ca_path() -> std::path::PathBuf {
        Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/data/ca.pem")
    }

    fn server_config(
        versions: &[&'static rustls::SupportedProtocolVersion],
    ) -> Arc<rustls::ServerConfig> {
        use rustls::pki_types::PrivateKeyDer;
        let certs: Vec<CertificateDer<'static>> =
            CertificateDer::pem_slice_iter(include_bytes!("../../tests/data/server.pem"))
                .collect::<Result<_, _>>()
                .unwrap();
        let key =
            PrivateKeyDer::from_pem_slice(include_bytes!("../../tests/data/server.key")).unwrap();
        let provider = Arc::new(rustls::crypto::ring::default_provider());
        let cfg = rustls::ServerConfig::builder_with_provider(provider)
            .with_protocol_versions(versions)
            .unwrap()
            .with_no_client_auth()
            .with_single_cert(certs, key)
            .unwrap();
        Arc::new(cfg)
    }

    /// Moves every queued record from `a` to `b` in memory; `Ok(true)` if anything moved.
    fn pass(a: &mut rustls::Connection, b: &mut rustls::Connection) -> Result<bool, rustls::Error> {
        let mut wire = Vec::new();
        while a.wants_write() {
            a.write_tls(&mut wire).unwrap();
        }
        let mut rest = &wire[..];
        while !rest.is_empty() {
            b.read_tls(&mut rest).unwrap();
            b.process_new_packets()?;
        }
        Ok(!wire.is_empty())
    }

    /// The suite a server that follows the client's order picks, over an in-memory pair.
    fn negotiated(pref: CipherPref, tls12: bool) -> CipherSuite {
        let versions: &[&'static rustls::SupportedProtocolVersion] = if tls12 {
            &[&rustls::version::TLS12]
        } else {
            &[&rustls::version::TLS13]
        };
        let ccfg = client_config_with(Some(&ca_path()), false, pref).unwrap();
        let name = ServerName::try_from("kws2.web.telegram.org").unwrap();
        let mut c: rustls::Connection = ClientConnection::new(ccfg, name).unwrap().into();
        let mut s: rustls::Connection = rustls::ServerConnection::new(server_config(versions))
            .unwrap()
            .into();
        for _ in 0..10 {
            let moved = pass(&mut c, &mut s).unwrap() | pass(&mut s, &mut c).unwrap();
            if !moved {
                break;
            }
        }
        assert!(
            !c.is_handshaking() && !s.is_handshaking(),
            "{pref:?} tls12={tls12}"
        );
        let suite = c.negotiated_cipher_suite().unwrap().suite();
        assert_eq!(Some(suite), s.negotiated_cipher_suite().map(|s| s.suite()));
        suite
    }

    #[test]
    fn a_server_following_our_order_negotiates_the_preferred_family_in_both_versions() {
        assert_eq!(
            negotiated(CipherPref::Chacha20, false),
            CipherSuite::TLS13_CHACHA20_POLY1305_SHA256
        );
        assert_eq!(
            negotiated(CipherPref::AesGcm, false),
            CipherSuite::TLS13_AES_256_GCM_SHA384
        );
        let c12 = negotiated(CipherPref::Chacha20, true);
        let a12 = negotiated(CipherPref::AesGcm, true);
        assert_eq!(CipherFamily::of(c12), CipherFamily::Chacha20, "{c12:?}");
        assert_eq!(CipherFamily::of(a12), CipherFamily::AesGcm, "{a12:?}");
    }

    #[test]
    fn tls_errors_are_classified() {
        let e = tls_error(rustls::Error::General("x".into()));
        assert!(is_tls_error(&e));
        assert!(!is_tls_error(&io::Error::from(io::ErrorKind::InvalidData)));
    }
}
