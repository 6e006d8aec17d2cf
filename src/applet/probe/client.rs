//! A blocking obfuscated2 MTProto transport client over one TCP connection ([`MtClient`]),
//! what the `probe` applet, the black-box tests and the examples speak to a proxy or a DC.
//!
//! Blocking std sockets are fine here: this is a tool, not the reactor. It owns no wire format:
//! the init and ciphers come from `mtproto::obfs2`, packet boundaries from `mtproto::framing`.
//! With an `ee` secret it speaks fake-TLS first and carries the obfuscated2 stream in TLS
//! records (the blocking handshake and record helpers are `tls`; the wire rules
//! `mtproto::faketls`).

use std::io::{self, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpStream};
use std::time::{Duration, Instant};

use super::tls::{self, Unwrap};
use crate::mtproto::framing::{self, Decoder};
use crate::mtproto::obfs2::{self, Cipher, Secret, SecretKind, Tag};
use crate::rng::Rng;

/// Size of one socket read in [`MtClient::recv_packet`], bytes.
const READ_CHUNK: usize = 16 * 1024;

/// What to connect to and how to speak, for [`MtClient`] and
/// [`probe_once`](super::probe_once).
#[derive(Debug, Clone)]
pub struct ClientOptions {
    /// The proxy (or, with `secret: None`, a DC or fake DC).
    pub addr: SocketAddr,
    /// `Some`: client init hashed with the key, as the Telegram app sends to a proxy (an `ee`
    /// secret: inside fake-TLS, SNI = its domain). `None`: raw relay init, as a proxy sends
    /// to a DC.
    pub secret: Option<Secret>,
    /// Transport inside obfuscated2.
    pub tag: Tag,
    /// Signed DC index written into the init (negative = media, ±10000 = test DC).
    pub dc: i16,
    /// Connect timeout, and the per-operation socket read/write timeout of [`MtClient`];
    /// for [`probe_once`](super::probe_once) the bound on the whole attempt.
    pub timeout: Duration,
}

/// A blocking obfuscated2 MTProto transport client over one TCP connection.
pub struct MtClient {
    stream: TcpStream,
    tag: Tag,
    encrypt: Cipher,
    decrypt: Cipher,
    decoder: Decoder,
    rng: Rng,
    timeout: Duration,
    bytes_up: usize,
    bytes_down: usize,
    /// `Some` with an `ee` secret: the record unwrapper of the server's stream.
    tls: Option<Unwrap>,
    /// The next write is the first after the fake-TLS handshake (gets the CCS record first).
    tls_first: bool,
}

impl MtClient {
    /// Connects (bounded by `opts.timeout`) and sends the 64-byte init. Seeds its own [`Rng`]
    /// from the OS. Errors: connect/write errors as returned by std; no entropy → `Other`.
    pub fn connect(opts: &ClientOptions) -> io::Result<MtClient> {
        let mut rng = Rng::new().map_err(|e| io::Error::other(format!("no OS randomness: {e}")))?;
        MtClient::connect_with(opts, &mut rng)
    }

    /// [`MtClient::connect`] drawing the init and this client's own padding generator from `rng`.
    pub fn connect_with(opts: &ClientOptions, rng: &mut Rng) -> io::Result<MtClient> {
        let stream = TcpStream::connect_timeout(&opts.addr, opts.timeout)?;
        MtClient::handshake(stream, opts, rng)
    }

    /// Sends the init on an already connected `stream` (`opts.addr` is ignored) and sets its
    /// read/write timeouts to `opts.timeout` and `TCP_NODELAY`. With an `ee` secret the
    /// fake-TLS handshake comes first (bounded by `opts.timeout`; an answer that does not
    /// verify is `InvalidData`), then the init goes out after a CCS record in an
    /// application-data record.
    pub fn handshake(
        mut stream: TcpStream,
        opts: &ClientOptions,
        rng: &mut Rng,
    ) -> io::Result<Self> {
        stream.set_nodelay(true)?;
        stream.set_read_timeout(Some(opts.timeout))?;
        stream.set_write_timeout(Some(opts.timeout))?;
        let mut after_hello = None;
        let mut tls_bytes = (0, 0);
        if let Some(Secret {
            key,
            kind: SecretKind::Ee(domain),
        }) = opts.secret.as_ref()
        {
            let deadline = Instant::now() + opts.timeout;
            let (rest, up, down) = tls::handshake(&mut stream, key, domain, deadline, rng)?;
            tls_bytes = (up, down);
            after_hello = Some(rest);
        }
        let key = opts.secret.as_ref().map(|s| &s.key);
        let started = obfs2::initiate(opts.tag, opts.dc, key, rng);
        let mut seed = [0u8; 48];
        rng.fill(&mut seed);
        let mut client = MtClient {
            stream,
            tag: opts.tag,
            encrypt: started.encrypt,
            decrypt: started.decrypt,
            decoder: Decoder::new(opts.tag),
            rng: Rng::from_seed(seed),
            timeout: opts.timeout,
            bytes_up: tls_bytes.0,
            bytes_down: tls_bytes.1,
            tls: after_hello.as_ref().map(|_| Unwrap::default()),
            tls_first: after_hello.is_some(),
        };
        client.write_wire(&started.init)?;
        if let Some(rest) = after_hello {
            client.take_in(rest)?;
        }
        Ok(client)
    }

    /// Transport-encodes `payload` as one packet of this client's tag (padded intermediate adds
    /// 0–15 random bytes), encrypts and writes it. `payload.len()` ≤ `framing::MAX_PACKET`;
    /// abridged payloads should be a multiple of 4 (they are zero-padded otherwise).
    pub fn send_packet(&mut self, payload: &[u8]) -> io::Result<()> {
        if payload.len() > framing::MAX_PACKET {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                "payload over MAX_PACKET",
            ));
        }
        let mut wire = framing::encode(self.tag, payload, &mut self.rng);
        self.encrypt.apply(&mut wire);
        self.write_wire(&wire)
    }

    /// Encrypts and writes bytes the caller already framed (or deliberately mis-framed).
    pub fn send_raw_plain(&mut self, plain: &[u8]) -> io::Result<()> {
        let mut wire = plain.to_vec();
        self.encrypt.apply(&mut wire);
        self.write_wire(&wire)
    }

    /// Reads, decrypts and decodes the next packet; each socket read waits at most the
    /// configured timeout. Returns the payload without its length header (padded intermediate:
    /// padding included). Errors: EOF → `UnexpectedEof`; timeout → `TimedOut`; a bad length
    /// header → `InvalidData`.
    pub fn recv_packet(&mut self) -> io::Result<Vec<u8>> {
        self.recv_packet_until(Instant::now() + self.timeout)
    }

    /// [`MtClient::recv_packet`] bounded by an absolute monotonic `deadline` instead.
    pub fn recv_packet_until(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match self.decoder.next() {
                Ok(Some(p)) => return Ok(p),
                Ok(None) => {}
                Err(e) => return Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string())),
            }
            let left = deadline.saturating_duration_since(Instant::now());
            if left.is_zero() {
                return Err(io::ErrorKind::TimedOut.into());
            }
            self.stream.set_read_timeout(Some(left))?;
            let n = match self.stream.read(&mut buf) {
                Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
                Ok(n) => n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                    return Err(io::ErrorKind::TimedOut.into())
                }
                Err(e) => return Err(e),
            };
            self.bytes_down += n;
            let raw = buf[..n].to_vec();
            self.take_in(raw)?;
        }
    }

    /// Socket bytes in: unwrapped from records with `ee`, decrypted, fed to the decoder.
    fn take_in(&mut self, mut raw: Vec<u8>) -> io::Result<()> {
        if let Some(u) = self.tls.as_mut() {
            let mut plain = Vec::with_capacity(raw.len());
            u.push(&raw, &mut plain)?;
            raw = plain;
        }
        self.decrypt.apply(&mut raw);
        self.decoder.push(&raw);
        Ok(())
    }

    /// Half-closes: no more bytes from us; the peer sees EOF.
    pub fn shutdown_write(&mut self) -> io::Result<()> {
        self.stream.shutdown(Shutdown::Write)
    }

    /// The transport this client speaks.
    pub fn tag(&self) -> Tag {
        self.tag
    }

    /// The socket (for peer/local addresses or timeouts).
    pub fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// Bytes written so far, init included.
    pub fn bytes_up(&self) -> usize {
        self.bytes_up
    }

    /// Bytes read from the socket so far.
    pub fn bytes_down(&self) -> usize {
        self.bytes_down
    }

    /// Decrypted bytes read but not yet returned as a packet.
    pub fn buffered(&self) -> usize {
        self.decoder.buffered()
    }

    /// The socket and the two ciphers (encrypt = us→peer, decrypt = peer→us), for tests that
    /// drive the stream by hand. Bytes already buffered by the decoder are dropped. With an
    /// `ee` secret the socket still carries TLS records (wrap with `tls::wrap`).
    pub fn into_parts(self) -> (TcpStream, Cipher, Cipher) {
        (self.stream, self.encrypt, self.decrypt)
    }

    /// The socket alone.
    pub fn into_stream(self) -> TcpStream {
        self.stream
    }

    fn write_wire(&mut self, wire: &[u8]) -> io::Result<()> {
        let wrapped;
        let wire = if self.tls.is_some() {
            wrapped = tls::wrap(wire, self.tls_first);
            self.tls_first = false;
            &wrapped[..]
        } else {
            wire
        };
        self.stream.write_all(wire).map_err(|e| match e.kind() {
            io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut.into(),
            _ => e,
        })?;
        self.bytes_up += wire.len();
        Ok(())
    }
}
