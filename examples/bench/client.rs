//! Client side of the bench: Telegram-like sessions through the proxy, built on the probe
//! applet's [`MtClient`] (obfuscated2 with the secret, intermediate transport, DC 2), plus a raw
//! bulk reader that counts and checks packets without assembling them.
//!
//! Blocking sockets and threads (bench code). Sessions come from distinct loopback source
//! addresses (127.0.0.2, .3, …; [`PER_SOURCE`] each) so a per-client-IP cap in the proxy would
//! not distort the session counts. Errors are returned as text; nothing here panics on what the
//! proxy sends.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use socket2::{Domain, Protocol, Socket, Type};
use tg_ws_proxy::applet::probe::{ClientOptions, MtClient};
use tg_ws_proxy::mtproto::obfs2::{Secret, Tag};
use tg_ws_proxy::mtproto::packet;
use tg_ws_proxy::rng::Rng;

use super::fakedc::{bulk_request, BULK_KEY, SINK};
use super::mtsession::MtSession;

/// The bench secret (plain 32 hex); the proxy gets it through `TG_SECRET`.
pub const SECRET: &str = "00112233445566778899aabbccddeeff";
/// The same key as an `ee` (fake-TLS) secret, domain `localhost` (`--cg-ee`, the ee idle/handshake
/// rows); the client then speaks fake-TLS through [`MtClient`]. The proxy gets it through
/// `TG_SECRET` too, with `--mask-host 127.0.0.1:9` so nothing it masks leaves loopback.
pub const EE_SECRET: &str = "ee00112233445566778899aabbccddeeff6c6f63616c686f7374";
/// Sessions per loopback source address.
pub const PER_SOURCE: usize = 50;
/// Per-operation socket timeout of setup and ping traffic.
const OP_TIMEOUT: Duration = Duration::from_secs(10);
/// Socket timeout during bulk transfers (a sender may wait while the DC streams a big reply).
pub const BULK_TIMEOUT: Duration = Duration::from_secs(60);
/// Read size of the raw bulk reader.
const READ_CHUNK: usize = 64 * 1024;

/// Opens session `index`: TCP from 127.0.0.(2 + index / PER_SOURCE), init, one `req_pq_multi` →
/// `resPQ` round trip, one 256-byte echo round trip.
/// `secret`: [`SECRET`] or [`EE_SECRET`].
pub fn open_with(
    proxy: SocketAddr,
    index: usize,
    rng: &mut Rng,
    secret: &str,
) -> Result<MtClient, String> {
    let src_host = 2 + (index / PER_SOURCE) % 250;
    let src = SocketAddr::from(([127, 0, 0, src_host as u8], 0));
    let mut c = init_with(proxy, src, rng, secret)?;
    res_pq(&mut c, rng)?;
    echo(&mut c, 256, index as u32)?;
    Ok(c)
}

/// TCP from `src` to `proxy` (connect within `OP_TIMEOUT`), then the init as intermediate
/// client of DC 2 with [`SECRET`].
pub fn init_from(proxy: SocketAddr, src: SocketAddr, rng: &mut Rng) -> Result<MtClient, String> {
    init_with(proxy, src, rng, SECRET)
}

/// [`init_from`] with `secret` (an `ee` one: the fake-TLS handshake first).
pub fn init_with(
    proxy: SocketAddr,
    src: SocketAddr,
    rng: &mut Rng,
    secret: &str,
) -> Result<MtClient, String> {
    let sock = Socket::new(Domain::IPV4, Type::STREAM, Some(Protocol::TCP))
        .map_err(|e| format!("socket: {e}"))?;
    sock.bind(&src.into())
        .map_err(|e| format!("bind {src}: {e}"))?;
    sock.connect_timeout(&proxy.into(), OP_TIMEOUT)
        .map_err(|e| format!("connect: {e}"))?;
    let stream: TcpStream = sock.into();
    let opts = ClientOptions {
        addr: proxy,
        secret: Some(Secret::parse(secret).map_err(|e| format!("secret: {e:?}"))?),
        tag: Tag::Intermediate,
        dc: 2,
        timeout: OP_TIMEOUT,
    };
    MtClient::handshake(stream, &opts, rng).map_err(|e| format!("init: {e}"))
}

/// One `req_pq_multi` → `resPQ` round trip with a fresh nonce.
pub fn res_pq(c: &mut MtClient, rng: &mut Rng) -> Result<(), String> {
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    let ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as u64);
    c.send_packet(&packet::req_pq_multi(&nonce, packet::msg_id(ms)))
        .map_err(|e| format!("send req_pq_multi: {e}"))?;
    let reply = c.recv_packet().map_err(|e| format!("wait resPQ: {e}"))?;
    packet::parse_res_pq(&reply, &nonce)
        .map(|_| ())
        .map_err(|e| format!("resPQ: {e:?}"))
}

/// An echo payload: `ECHO` ‖ seq u32 LE ‖ pattern; `size` is rounded up to a multiple of 4
/// (at least 8).
pub fn echo_payload(size: usize, seq: u32) -> Vec<u8> {
    let size = size.max(8).div_ceil(4) * 4;
    let mut p: Vec<u8> = (0..size)
        .map(|i| (i as u8).wrapping_mul(13).wrapping_add(seq as u8))
        .collect();
    p[..4].copy_from_slice(b"ECHO");
    p[4..8].copy_from_slice(&seq.to_le_bytes());
    p
}

/// Sends one echo packet and checks the reply is identical.
pub fn echo(c: &mut MtClient, size: usize, seq: u32) -> Result<(), String> {
    let p = echo_payload(size, seq);
    c.send_packet(&p).map_err(|e| format!("send echo: {e}"))?;
    let r = c.recv_packet().map_err(|e| format!("wait echo: {e}"))?;
    if r != p {
        return Err(format!(
            "echo mismatch ({} bytes back for {})",
            r.len(),
            p.len()
        ));
    }
    Ok(())
}

/// Opens sessions `first..first + n` with `threads` opener threads (each sequential).
pub fn open_many(
    proxy: SocketAddr,
    first: usize,
    n: usize,
    threads: usize,
) -> Result<Vec<MtClient>, String> {
    open_many_with(proxy, first, n, threads, SECRET)
}

/// [`open_many`] with `secret` ([`SECRET`] or [`EE_SECRET`]).
pub fn open_many_with(
    proxy: SocketAddr,
    first: usize,
    n: usize,
    threads: usize,
    secret: &'static str,
) -> Result<Vec<MtClient>, String> {
    let threads = threads.clamp(1, n.max(1));
    let handles: Vec<_> = (0..threads)
        .map(|t| {
            std::thread::spawn(move || -> Result<Vec<MtClient>, String> {
                let mut rng = Rng::new().map_err(|e| format!("rng: {e}"))?;
                let mut out = Vec::new();
                for i in (first + t..first + n).step_by(threads) {
                    out.push(
                        open_with(proxy, i, &mut rng, secret)
                            .map_err(|e| format!("session {i}: {e}"))?,
                    );
                }
                Ok(out)
            })
        })
        .collect();
    let mut all = Vec::with_capacity(n);
    let mut err = None;
    for h in handles {
        match h.join() {
            Ok(Ok(v)) => all.extend(v),
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some("opener thread panicked".to_string()),
        }
    }
    err.map_or(Ok(all), Err)
}

/// Light relaying on every session: all send a `size`-byte echo, then all read their reply.
pub fn ping_all(clients: &mut [MtClient], size: usize, seq: u32) -> Result<(), String> {
    for (i, c) in clients.iter_mut().enumerate() {
        c.send_packet(&echo_payload(size, seq.wrapping_add(i as u32)))
            .map_err(|e| format!("ping send {i}: {e}"))?;
    }
    for (i, c) in clients.iter_mut().enumerate() {
        let want = echo_payload(size, seq.wrapping_add(i as u32));
        let got = c.recv_packet().map_err(|e| format!("ping recv {i}: {e}"))?;
        if got != want {
            return Err(format!("ping {i}: echo mismatch"));
        }
    }
    Ok(())
}

/// Size of each of the [`EXERCISE_PACKETS`] bulk packets [`exercise_all`] pulls per session.
pub const EXERCISE_SIZE: usize = 256 * 1024;
/// Bulk packets per session in [`exercise_all`].
pub const EXERCISE_PACKETS: u32 = 2;

/// Brings every session to its steady-state footprint: each pulls `BULK(2 × 256 KiB)` (full
/// relay buffers and full-size TLS records downstream) and echoes 2 × 16 KiB (full upstream
/// buffer), spread over `threads` threads.
pub fn exercise_all(clients: &mut [MtClient], threads: usize) -> Result<(), String> {
    let chunk = clients.len().div_ceil(threads.max(1)).max(1);
    std::thread::scope(|s| {
        let hs: Vec<_> = clients
            .chunks_mut(chunk)
            .map(|part| {
                s.spawn(move || -> Result<(), String> {
                    for c in part.iter_mut() {
                        c.send_packet(&bulk_request(EXERCISE_PACKETS, EXERCISE_SIZE as u32))
                            .map_err(|e| format!("bulk send: {e}"))?;
                        for i in 0..EXERCISE_PACKETS {
                            let p = c.recv_packet().map_err(|e| format!("bulk recv: {e}"))?;
                            if p.len() != EXERCISE_SIZE || p[8..12] != i.to_le_bytes() {
                                return Err(format!("bulk packet {i}: bad ({} bytes)", p.len()));
                            }
                        }
                        echo(c, 16 * 1024, 1)?;
                        echo(c, 16 * 1024, 2)?;
                    }
                    Ok(())
                })
            })
            .collect();
        // The scope joins every thread anyway; the first failure is reported.
        hs.into_iter().try_for_each(|h| {
            h.join()
                .unwrap_or_else(|_| Err("exercise thread panicked".into()))
        })
    })
}

/// What one bulk transfer moved (client-side wire bytes; every one of them crossed the proxy).
#[derive(Debug, Default, Clone, Copy)]
pub struct Moved {
    pub up: u64,
    pub down: u64,
}

/// Streams on one session: asks for `bulk.0` packets of `bulk.1` bytes, and (from a writer
/// thread) sends `echo.0` echo packets of `echo.1` bytes; reads until every reply arrived,
/// checking packet lengths and the bulk packets' order. The session is consumed.
pub fn transfer(c: MtClient, bulk: (u32, usize), echo: (u32, usize)) -> Result<Moved, String> {
    transfer_within(c, bulk, echo, BULK_TIMEOUT)
}

/// [`transfer`] with `limit` as the socket timeouts and the bound on the whole transfer (a proxy
/// under callgrind relays at a few MiB/s).
pub fn transfer_within(
    mut c: MtClient,
    bulk: (u32, usize),
    echo: (u32, usize),
    limit: Duration,
) -> Result<Moved, String> {
    let setup = c.bytes_up();
    if bulk.0 > 0 {
        c.send_packet(&bulk_request(bulk.0, bulk.1 as u32))
            .map_err(|e| format!("bulk request: {e}"))?;
    }
    let up0 = (c.bytes_up() - setup) as u64;
    let (stream, mut enc, mut dec) = c.into_parts();
    let _ = stream.set_read_timeout(Some(limit));
    let _ = stream.set_write_timeout(Some(limit));
    let mut w = stream.try_clone().map_err(|e| format!("clone: {e}"))?;
    let writer = std::thread::spawn(move || -> io::Result<u64> {
        let mut sent = 0u64;
        for i in 0..echo.0 {
            let p = echo_payload(echo.1, i);
            let mut wire = Vec::with_capacity(4 + p.len());
            wire.extend_from_slice(&(p.len() as u32).to_le_bytes());
            wire.extend_from_slice(&p);
            enc.apply(&mut wire);
            w.write_all(&wire)?;
            sent += wire.len() as u64;
        }
        Ok(sent)
    });
    let mut r = stream;
    let mut parser = Parser::default();
    let echo_len = echo_payload(echo.1, 0).len();
    let want = bulk.0 as u64 + echo.0 as u64;
    let deadline = Instant::now() + limit;
    let mut buf = vec![0u8; READ_CHUNK];
    let mut down = 0u64;
    let mut failure = None;
    while parser.bulk + parser.echo < want {
        if Instant::now() > deadline {
            failure = Some("transfer deadline".to_string());
            break;
        }
        let n = match r.read(&mut buf) {
            Ok(0) => {
                failure = Some(format!(
                    "EOF after {} bulk + {} echo packets",
                    parser.bulk, parser.echo
                ));
                break;
            }
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => {
                failure = Some(format!("read: {e}"));
                break;
            }
        };
        down += n as u64;
        dec.apply(&mut buf[..n]);
        if let Err(e) = parser.push(&buf[..n], bulk.1, echo_len) {
            failure = Some(e);
            break;
        }
    }
    if failure.is_some() {
        let _ = r.shutdown(std::net::Shutdown::Both); // unblocks the writer
    }
    let sent = writer.join().map_err(|_| "writer panicked".to_string())?;
    if let Some(f) = failure {
        return Err(f);
    }
    let sent = sent.map_err(|e| format!("echo write: {e}"))?;
    Ok(Moved {
        up: up0 + sent,
        down,
    })
}

/// A packet session the bulk helpers ([`download`], [`upload`]) drive: the probe applet's
/// [`MtClient`] (proxy secret, ee, or none), or the test rig's `MtSession` over a
/// [`Counted`] socket (a plain, unobfuscated transport too; `bench/direct.rs`).
pub trait Wire {
    /// Frames (and encrypts, if the transport does) one packet and writes it.
    fn send_packet(&mut self, payload: &[u8]) -> io::Result<()>;
    /// The next whole packet's payload, waiting until `deadline` at most.
    fn recv_packet_until(&mut self, deadline: Instant) -> io::Result<Vec<u8>>;
    /// Socket bytes written / read so far.
    fn bytes_up(&self) -> usize;
    fn bytes_down(&self) -> usize;
    /// The socket (timeouts).
    fn stream(&self) -> &TcpStream;
}

impl Wire for MtClient {
    fn send_packet(&mut self, payload: &[u8]) -> io::Result<()> {
        MtClient::send_packet(self, payload)
    }
    fn recv_packet_until(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        MtClient::recv_packet_until(self, deadline)
    }
    fn bytes_up(&self) -> usize {
        MtClient::bytes_up(self)
    }
    fn bytes_down(&self) -> usize {
        MtClient::bytes_down(self)
    }
    fn stream(&self) -> &TcpStream {
        MtClient::stream(self)
    }
}

/// A TCP socket that counts the bytes written to and read from it.
pub struct Counted {
    pub sock: TcpStream,
    pub up: usize,
    pub down: usize,
}

impl Counted {
    pub fn new(sock: TcpStream) -> Counted {
        Counted {
            sock,
            up: 0,
            down: 0,
        }
    }
}

impl Read for Counted {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let n = self.sock.read(buf)?;
        self.down += n;
        Ok(n)
    }
}

impl Write for Counted {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let n = self.sock.write(buf)?;
        self.up += n;
        Ok(n)
    }
    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

impl Wire for MtSession<Counted> {
    fn send_packet(&mut self, payload: &[u8]) -> io::Result<()> {
        MtSession::send_packet(self, payload)
    }
    /// `MtSession` reads with the socket's own timeout: set to what is left before each packet.
    fn recv_packet_until(&mut self, deadline: Instant) -> io::Result<Vec<u8>> {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        self.stream.sock.set_read_timeout(Some(left))?;
        self.recv_packet()
    }
    fn bytes_up(&self) -> usize {
        self.stream.up
    }
    fn bytes_down(&self) -> usize {
        self.stream.down
    }
    fn stream(&self) -> &TcpStream {
        &self.stream.sock
    }
}

/// Download only, packet by packet through `c` (so it works with an `ee` secret, whose stream
/// [`transfer_within`]'s raw reader cannot unwrap, and with any transport tag): asks for
/// `count` packets of `size` bytes and reads them, checking each one's length and sequence
/// number. `limit` bounds the whole wait. The bytes are socket bytes (with `ee`: TLS record
/// headers included).
pub fn download(
    c: &mut impl Wire,
    count: u32,
    size: usize,
    limit: Duration,
) -> Result<Moved, String> {
    let (up0, down0) = (c.bytes_up(), c.bytes_down());
    c.send_packet(&bulk_request(count, size as u32))
        .map_err(|e| format!("bulk request: {e}"))?;
    let deadline = Instant::now() + limit;
    for i in 0..count {
        let p = c
            .recv_packet_until(deadline)
            .map_err(|e| format!("bulk packet {i}: {e}"))?;
        if p.len() != size || p[8..12] != i.to_le_bytes() {
            return Err(format!("bulk packet {i}: bad ({} bytes)", p.len()));
        }
    }
    Ok(Moved {
        up: (c.bytes_up() - up0) as u64,
        down: (c.bytes_down() - down0) as u64,
    })
}

/// Upload only: sends `count` packets of `size` bytes (multiple of 4, ≥ 8) that the fake DC
/// swallows ([`SINK`]), then one 8-byte echo; its reply proves every packet arrived (one ordered
/// stream). `limit` bounds each socket write and the wait for the echo.
pub fn upload(
    c: &mut impl Wire,
    count: u32,
    size: usize,
    limit: Duration,
) -> Result<Moved, String> {
    let (up0, down0) = (c.bytes_up(), c.bytes_down());
    let _ = c.stream().set_write_timeout(Some(limit));
    let mut p = vec![0x3cu8; size.max(8).div_ceil(4) * 4];
    p[..4].copy_from_slice(SINK);
    for i in 0..count {
        p[4..8].copy_from_slice(&i.to_le_bytes());
        c.send_packet(&p)
            .map_err(|e| format!("sink packet {i}: {e}"))?;
    }
    let e = echo_payload(8, count);
    c.send_packet(&e).map_err(|e| format!("send echo: {e}"))?;
    // What the proxy still holds can take long to drain when it runs under callgrind.
    let r = c
        .recv_packet_until(Instant::now() + limit)
        .map_err(|e| format!("wait for the echo after the upload: {e}"))?;
    if r != e {
        return Err("echo after the upload: mismatch".into());
    }
    Ok(Moved {
        up: (c.bytes_up() - up0) as u64,
        down: (c.bytes_down() - down0) as u64,
    })
}

/// Runs [`transfer`] on every session at once (one thread each); returns the bytes moved and
/// the wall seconds. Every session is consumed; the first failure is returned.
pub fn transfer_all(
    clients: Vec<MtClient>,
    bulk: (u32, usize),
    echo: (u32, usize),
) -> Result<(Moved, f64), String> {
    let t0 = Instant::now();
    let hs: Vec<_> = clients
        .into_iter()
        .map(|c| std::thread::spawn(move || transfer(c, bulk, echo)))
        .collect();
    let total = join_moved(hs);
    let secs = t0.elapsed().as_secs_f64();
    total.map(|t| (t, secs))
}

/// Joins transfer threads and adds up what they moved; a thread's failure (or panic) is the
/// error (the last one seen), after every thread has been joined.
pub fn join_moved(
    hs: Vec<std::thread::JoinHandle<Result<Moved, String>>>,
) -> Result<Moved, String> {
    let mut total = Moved::default();
    let mut err = None;
    for h in hs {
        match h.join() {
            Ok(Ok(m)) => {
                total.up += m.up;
                total.down += m.down;
            }
            Ok(Err(e)) => err = Some(e),
            Err(_) => err = Some("transfer thread panicked".into()),
        }
    }
    err.map_or(Ok(total), Err)
}

/// Incremental intermediate-transport parser that keeps only a packet's first 12 bytes (an
/// echo's `ECHO`, a bulk packet's `BULK_KEY` and index).
#[derive(Default)]
struct Parser {
    hdr: [u8; 4],
    hdr_have: usize,
    len: usize,
    left: usize,
    head: [u8; 12],
    bulk: u64,
    echo: u64,
}

impl Parser {
    fn push(&mut self, mut data: &[u8], bulk_len: usize, echo_len: usize) -> Result<(), String> {
        while !data.is_empty() {
            if self.left == 0 {
                let take = (4 - self.hdr_have).min(data.len());
                self.hdr[self.hdr_have..self.hdr_have + take].copy_from_slice(&data[..take]);
                self.hdr_have += take;
                data = &data[take..];
                if self.hdr_have < 4 {
                    return Ok(());
                }
                self.hdr_have = 0;
                self.len = u32::from_le_bytes(self.hdr) as usize;
                if self.len < 4 {
                    return Err(format!("packet of {} bytes", self.len));
                }
                self.left = self.len;
                continue;
            }
            let done = self.len - self.left;
            let take = self.left.min(data.len());
            if done < self.head.len() {
                let k = (self.head.len() - done).min(take);
                self.head[done..done + k].copy_from_slice(&data[..k]);
            }
            self.left -= take;
            data = &data[take..];
            if self.left == 0 {
                let index =
                    u32::from_le_bytes([self.head[8], self.head[9], self.head[10], self.head[11]]);
                if &self.head[..4] == b"ECHO" && self.len == echo_len {
                    self.echo += 1;
                } else if self.len == bulk_len
                    && self.head[..8] == BULK_KEY
                    && u64::from(index) == self.bulk
                {
                    self.bulk += 1;
                } else {
                    return Err(format!(
                        "unexpected packet: {} bytes, head {:02x?}",
                        self.len, self.head
                    ));
                }
            }
        }
        Ok(())
    }
}
