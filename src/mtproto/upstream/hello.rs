//! The client side of the fake-TLS handshake toward an `ee` upstream proxy (docs/protocol.md
//! §4.4, §2.1–§2.2): our signed ClientHello (`faketls::client::client_hello`) out, the server's
//! answer (ServerHello, CCS, the first application_data record) in and checked
//! (`faketls::client::check_server_hello`). After it both ways are application_data records
//! (`net::faketls_stream::FakeTlsStream`).
//!
//! Driven over any non-blocking byte stream (`Read + Write`): the dial's TCP socket, in-memory
//! pipes in the unit tests. No clock reads: the wall time that signs the hello is a parameter.

use std::fmt;
use std::io::{self, Read, Write};

use crate::mtproto::faketls::client::{
    check_server_hello, client_hello, ClientError, Shape, MAX_DOMAIN,
};
use crate::rng::Rng;

/// Most answer bytes held before the first application_data record (64 KiB): a proxy's
/// answer is a few KB (ours ≤ 4.2 KB, docs/protocol.md §2.2); a peer that sends more is not one.
pub const MAX_ANSWER: usize = 64 * 1024;

/// Why the handshake failed.
#[derive(Debug)]
pub enum HelloError {
    /// The socket's error, as the OS reported it.
    Io(io::Error),
    /// The peer closed before its answer was complete.
    Eof,
    /// The answer is not a fake-TLS ServerHello for our key (wrong secret, or not a proxy).
    Answer(ClientError),
    /// Bytes after the answer before we sent anything: no MTProto proxy speaks before the init.
    Early,
    /// More than [`MAX_ANSWER`] bytes without a complete answer.
    TooLong,
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            HelloError::Io(e) => write!(f, "fake-tls handshake: {e}"),
            HelloError::Eof => f.write_str("fake-tls handshake: closed before the server hello"),
            HelloError::Answer(e) => write!(f, "fake-tls handshake: {e}"),
            HelloError::Early => f.write_str("fake-tls handshake: data before our init"),
            HelloError::TooLong => write!(f, "fake-tls handshake: answer over {MAX_ANSWER} bytes"),
        }
    }
}

/// One fake-TLS client handshake in progress.
pub struct TlsHello {
    key: [u8; 16],
    hello: Vec<u8>,
    sent: usize,
    client_random: [u8; 32],
    answer: Vec<u8>,
}

impl fmt::Debug for TlsHello {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TlsHello")
            .field("sent", &self.sent)
            .field("answer", &self.answer.len())
            .finish()
    }
}

impl TlsHello {
    /// A handshake for secret key `key` and SNI `domain`, signed at `wall_s` (Unix seconds),
    /// with Chrome's hello of `shape`: [`Shape::ChromeClassic`] (517 bytes, post-quantum key
    /// agreement off; every known server takes it) or [`Shape::Chrome`] (about 1.7 KB, as
    /// Chrome ships; the official MTProxy refuses it, docs/protocol.md §2.6, §4.4). `None` when
    /// `domain` is empty or longer than 253 bytes (`faketls::client::MAX_DOMAIN`).
    pub fn new(
        key: &[u8; 16],
        domain: &str,
        shape: Shape,
        wall_s: u64,
        rng: &mut Rng,
    ) -> Option<TlsHello> {
        if domain.is_empty() || domain.len() > MAX_DOMAIN {
            return None;
        }
        let (hello, client_random) =
            client_hello(shape, key, domain, wall_s, &mut |b| rng.fill(b))?;
        Some(TlsHello {
            key: *key,
            hello,
            sent: 0,
            client_random,
            answer: Vec::new(),
        })
    }

    /// The ClientHello record (one record, ≤ `faketls::client::MAX_CLIENT_HELLO` bytes), as
    /// sent.
    pub fn hello(&self) -> &[u8] {
        &self.hello
    }

    /// Writes what is left of the hello and reads the answer as far as `sock` allows.
    /// `Ok(true)` when the answer is complete and verified (the record layer starts now),
    /// `Ok(false)` when `sock` would block.
    ///
    /// Errors: [`HelloError`]; a socket error is passed on as it is.
    pub fn drive<S: Read + Write + ?Sized>(&mut self, sock: &mut S) -> Result<bool, HelloError> {
        while self.sent < self.hello.len() {
            match sock.write(&self.hello[self.sent..]) {
                Ok(0) => return Err(HelloError::Io(io::ErrorKind::WriteZero.into())),
                Ok(n) => self.sent += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(HelloError::Io(e)),
            }
        }
        let mut buf = [0u8; 4096];
        loop {
            match sock.read(&mut buf) {
                Ok(0) => return Err(HelloError::Eof),
                Ok(n) => self.answer.extend_from_slice(&buf[..n]),
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(false),
                Err(e) => return Err(HelloError::Io(e)),
            }
            match check_server_hello(&self.answer, &self.key, &self.client_random) {
                Ok(used) if used == self.answer.len() => {
                    self.answer = Vec::new();
                    return Ok(true);
                }
                Ok(_) => return Err(HelloError::Early),
                Err(ClientError::NeedMore) if self.answer.len() > MAX_ANSWER => {
                    return Err(HelloError::TooLong)
                }
                Err(ClientError::NeedMore) => {}
                Err(e) => return Err(HelloError::Answer(e)),
            }
        }
    }
}
