//! The test rig's own fake-TLS (`ee`) client, written from the wire facts in
//! docs/protocol.md §2 (ClientHello digest §2.1, server answer §2.2, record layer §2.3)
//! and independent of the proxy's `mtproto::faketls` so the black-box tests judge that code.
//!
//! Owns: building a ClientHello shaped like the Telegram app's ([`build_hello`]: record
//! `16 03 01 02 xx`, 512..=767 payload bytes with a padding extension, SNI, `13 01` first,
//! supported_versions, an x25519 key share, a 32-byte session id) and signing it
//! ([`sign_hello`]); our own verifier of that digest ([`check_hello`], for the rig self-test);
//! reading and checking the proxy's answer ([`read_answer`], [`check_answer`]); and
//! [`TlsClient`], a blocking `Read + Write` stream that sends the CCS, wraps writes in AppData
//! records and unwraps incoming ones, logging every record it receives. The MTProto layer
//! inside (obfuscated2 init, packets) is [`super::mtsession`]'s. Test code: 127.0.0.1 only.

use std::io::{self, Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hmac::{Hmac, Mac};
use sha2::Sha256;

use tg_ws_proxy::rng::Rng;

/// TLS record header: type, version (2), length BE (2).
pub const RECORD_HEADER: usize = 5;
/// Largest plaintext record payload (RFC 8446 §5.1); the proxy's records must not exceed it.
pub const MAX_PAYLOAD: usize = 16 * 1024;
/// Largest record payload the proxy accepts from a client after the handshake (§2.3: 16640).
pub const MAX_RECORD_IN: usize = MAX_PAYLOAD + 256;
/// Record content types.
pub const CT_CCS: u8 = 0x14;
pub const CT_ALERT: u8 = 0x15;
pub const CT_HANDSHAKE: u8 = 0x16;
pub const CT_APPDATA: u8 = 0x17;
/// The client's dummy ChangeCipherSpec record (§2.3), sent before the first AppData record.
pub const CCS: [u8; 6] = [0x14, 0x03, 0x03, 0x00, 0x01, 0x01];
/// Offset and length of the client/server random in a hello record (§2.1, §2.2).
pub const RANDOM_AT: usize = 11;
pub const RANDOM_LEN: usize = 32;
/// Bound on the proxy's whole answer (ServerHello + CCS + first AppData record) we read.
pub const MAX_ANSWER: usize = 64 * 1024;
/// Bound on the number of records in that answer.
pub const MAX_ANSWER_RECORDS: usize = 8;

/// HMAC-SHA256 of the concatenation of `parts` under `key`.
pub fn hmac_sha256(key: &[u8], parts: &[&[u8]]) -> [u8; 32] {
    let mut m = <Hmac<Sha256> as Mac>::new_from_slice(key).expect("HMAC takes any key length");
    for p in parts {
        m.update(p);
    }
    m.finalize().into_bytes().into()
}

/// Unix seconds now.
pub fn now_unix() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// What [`build_hello`] makes.
#[derive(Clone, Debug)]
pub struct HelloSpec {
    /// The `ee` secret's 16-byte key the digest is made with.
    pub key: [u8; 16],
    /// SNI host name; `None` = no server_name extension.
    pub sni: Option<String>,
    /// Added to the wall clock for the signed timestamp, seconds (negative = in the past).
    pub ts_offset_s: i64,
    /// Record payload length (header excluded); the app's hellos are 512..=767, so the first
    /// four bytes read `16 03 01 02`. Raised to what the extensions need if smaller.
    pub payload_len: usize,
}

impl HelloSpec {
    /// A hello for `key` with SNI `domain`, the clock as is, 512 payload bytes.
    pub fn new(key: [u8; 16], domain: &str) -> HelloSpec {
        HelloSpec {
            key,
            sni: Some(domain.to_string()),
            ts_offset_s: 0,
            payload_len: 512,
        }
    }
}

/// A signed ClientHello record and what went into it.
#[derive(Clone, Debug)]
pub struct Hello {
    /// The whole record, header included, exactly as sent.
    pub bytes: Vec<u8>,
    /// The client random (digest ‖ masked timestamp) = `bytes[11..43)`.
    pub random: [u8; 32],
    /// The 32-byte session id at `bytes[44..76)`.
    pub session_id: [u8; 32],
    /// The Unix seconds signed into the random.
    pub timestamp: u32,
}

fn put_u16(v: &mut Vec<u8>, n: usize) {
    v.extend_from_slice(&(n as u16).to_be_bytes());
}

/// Appends extension `ty` with body `body`.
fn ext(v: &mut Vec<u8>, ty: u16, body: &[u8]) {
    v.extend_from_slice(&ty.to_be_bytes());
    put_u16(v, body.len());
    v.extend_from_slice(body);
}

/// Cipher suites offered, TLS 1.3 first (`13 01` leads, as MTProxy requires, §6 item 9).
const SUITES: [u16; 15] = [
    0x1301, 0x1302, 0x1303, 0xc02b, 0xc02f, 0xc02c, 0xc030, 0xcca9, 0xcca8, 0xc013, 0xc014, 0x009c,
    0x009d, 0x002f, 0x0035,
];

/// An unsigned ClientHello record (random all zero) for `sni`, `payload_len` record payload
/// bytes (see [`HelloSpec::payload_len`]); returns it with its session id.
pub fn unsigned_hello(sni: Option<&str>, payload_len: usize, rng: &mut Rng) -> (Vec<u8>, [u8; 32]) {
    let mut session_id = [0u8; 32];
    rng.fill(&mut session_id);
    let mut key_share = [0u8; 32];
    rng.fill(&mut key_share);

    let mut exts = Vec::new();
    if let Some(name) = sni {
        let n = name.as_bytes();
        let mut b = Vec::new();
        put_u16(&mut b, n.len() + 3);
        b.push(0); // host_name
        put_u16(&mut b, n.len());
        b.extend_from_slice(n);
        ext(&mut exts, 0x0000, &b);
    }
    ext(&mut exts, 0x0017, &[]); // extended_master_secret
    ext(&mut exts, 0xff01, &[0]); // renegotiation_info
    ext(
        &mut exts,
        0x000a,
        &[0, 6, 0x00, 0x1d, 0x00, 0x17, 0x00, 0x18],
    ); // groups
    ext(&mut exts, 0x000b, &[1, 0]); // ec_point_formats: uncompressed
    ext(&mut exts, 0x0023, &[]); // session_ticket
    ext(&mut exts, 0x0010, b"\x00\x0c\x02h2\x08http/1.1"); // ALPN
    ext(&mut exts, 0x0005, &[1, 0, 0, 0, 0]); // status_request
    let sig: [u16; 8] = [
        0x0403, 0x0804, 0x0401, 0x0503, 0x0805, 0x0501, 0x0806, 0x0601,
    ];
    let mut b = Vec::new();
    put_u16(&mut b, sig.len() * 2);
    sig.iter()
        .for_each(|s| b.extend_from_slice(&s.to_be_bytes()));
    ext(&mut exts, 0x000d, &b);
    let mut b = vec![0, 36, 0x00, 0x1d, 0, 32];
    b.extend_from_slice(&key_share);
    ext(&mut exts, 0x0033, &b); // key_share: x25519
    ext(&mut exts, 0x002d, &[1, 1]); // psk_key_exchange_modes: psk_dhe_ke
    ext(&mut exts, 0x002b, &[4, 0x03, 0x04, 0x03, 0x03]); // supported_versions 1.3, 1.2

    let mut body = vec![0x03, 0x03];
    body.extend_from_slice(&[0u8; RANDOM_LEN]);
    body.push(32);
    body.extend_from_slice(&session_id);
    put_u16(&mut body, SUITES.len() * 2);
    SUITES
        .iter()
        .for_each(|s| body.extend_from_slice(&s.to_be_bytes()));
    body.extend_from_slice(&[1, 0]); // compression: null

    // Record payload = 4 (handshake header) + body + 2 (extensions length) + extensions.
    let bare = 4 + body.len() + 2 + exts.len();
    if payload_len >= bare + 4 {
        ext(&mut exts, 0x0015, &vec![0u8; payload_len - bare - 4]); // padding
    }
    put_u16(&mut body, exts.len());
    body.extend_from_slice(&exts);

    let mut rec = vec![CT_HANDSHAKE, 0x03, 0x01];
    put_u16(&mut rec, body.len() + 4);
    rec.push(0x01); // ClientHello
    rec.extend_from_slice(&(body.len() as u32).to_be_bytes()[1..]);
    rec.extend_from_slice(&body);
    (rec, session_id)
}

/// Signs a hello record in place (§2.1): `random[0..28) = H[0..28)`, `random[28..32) =
/// H[28..32) XOR timestamp u32 LE`, `H = HMAC-SHA256(key, record with the random zeroed)`.
/// Returns the random written.
pub fn sign_hello(record: &mut [u8], key: &[u8; 16], timestamp: u32) -> [u8; 32] {
    record[RANDOM_AT..RANDOM_AT + RANDOM_LEN].fill(0);
    let h = hmac_sha256(key, &[record]);
    let mut random = h;
    for (i, b) in timestamp.to_le_bytes().iter().enumerate() {
        random[28 + i] ^= b;
    }
    record[RANDOM_AT..RANDOM_AT + RANDOM_LEN].copy_from_slice(&random);
    random
}

/// A signed hello per `spec`, stamped with the wall clock plus `spec.ts_offset_s`.
pub fn build_hello(spec: &HelloSpec, rng: &mut Rng) -> Hello {
    let (mut bytes, session_id) = unsigned_hello(spec.sni.as_deref(), spec.payload_len, rng);
    let ts = (now_unix() as i64 + spec.ts_offset_s).clamp(0, u32::MAX as i64) as u32;
    let random = sign_hello(&mut bytes, &spec.key, ts);
    Hello {
        bytes,
        random,
        session_id,
        timestamp: ts,
    }
}

/// Our own verifier of a hello record's digest (§2.1): structure of the record header, then
/// `random[0..28)` against the HMAC; Ok(timestamp) or why not.
pub fn check_hello(record: &[u8], key: &[u8; 16]) -> Result<u32, String> {
    if record.len() < RANDOM_AT + RANDOM_LEN + 1 || record[0] != CT_HANDSHAKE || record[5] != 1 {
        return Err("not a ClientHello record".into());
    }
    let len = u16::from_be_bytes([record[3], record[4]]) as usize;
    if len + RECORD_HEADER != record.len() {
        return Err(format!("record length {len} ≠ {} bytes", record.len() - 5));
    }
    let mut zeroed = record.to_vec();
    zeroed[RANDOM_AT..RANDOM_AT + RANDOM_LEN].fill(0);
    let h = hmac_sha256(key, &[&zeroed]);
    let random = &record[RANDOM_AT..RANDOM_AT + RANDOM_LEN];
    if random[..28] != h[..28] {
        return Err("digest mismatch".into());
    }
    let mut ts = [0u8; 4];
    for i in 0..4 {
        ts[i] = random[28 + i] ^ h[28 + i];
    }
    Ok(u32::from_le_bytes(ts))
}

/// The SNI host name of a ClientHello record (walks the layout of §2.1), if any; None for
/// anything else (never panics on short or odd input).
pub fn hello_sni(record: &[u8]) -> Option<String> {
    if record.first() != Some(&CT_HANDSHAKE) || record.get(5) != Some(&1) {
        return None;
    }
    let mut at = 43;
    let sid = *record.get(at)? as usize;
    at += 1 + sid;
    let suites = u16::from_be_bytes([*record.get(at)?, *record.get(at + 1)?]) as usize;
    at += 2 + suites;
    at += 1 + *record.get(at)? as usize;
    let total = u16::from_be_bytes([*record.get(at)?, *record.get(at + 1)?]) as usize;
    at += 2;
    let end = at + total;
    while at + 4 <= end {
        let head = record.get(at..at + 4)?;
        let ty = u16::from_be_bytes([head[0], head[1]]);
        let n = u16::from_be_bytes([head[2], head[3]]) as usize;
        let body = record.get(at + 4..at + 4 + n)?;
        if ty == 0 {
            let name_len = u16::from_be_bytes([*body.get(3)?, *body.get(4)?]) as usize;
            return String::from_utf8(body.get(5..5 + name_len)?.to_vec()).ok();
        }
        at += 4 + n;
    }
    None
}

/// (content type, payload length) of each record seen, in order.
pub type Records = Vec<(u8, usize)>;

/// Why the proxy's answer was not what §2.2 describes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AnswerError {
    /// The socket failed or ended before a whole answer (text of the error, or `eof`).
    Io(String),
    /// A record type/version or layout that is not ServerHello, CCS, AppData in that order.
    Layout(String),
    /// Well formed, but the server random is not our HMAC: some other server answered
    /// (e.g. the mask site).
    BadDigest,
}

/// The proxy's answer, checked.
#[derive(Debug, Clone)]
pub struct Answer {
    /// Bytes up to and including the first AppData record.
    pub bytes: Vec<u8>,
    /// (type, payload length) of each record in it.
    pub records: Vec<(u8, usize)>,
    /// The cipher suite the ServerHello names.
    pub cipher: u16,
    /// The session id it echoes.
    pub session_id: Vec<u8>,
}

/// Reads one record (header + payload) from `sock` into `out`; its (type, payload length).
fn read_record(sock: &mut TcpStream, out: &mut Vec<u8>) -> Result<(u8, usize), AnswerError> {
    let io = |e: io::Error| AnswerError::Io(e.to_string());
    let mut h = [0u8; RECORD_HEADER];
    sock.read_exact(&mut h).map_err(io)?;
    let len = u16::from_be_bytes([h[3], h[4]]) as usize;
    if len > MAX_RECORD_IN || out.len() + RECORD_HEADER + len > MAX_ANSWER {
        return Err(AnswerError::Layout(format!(
            "record of {len} bytes: {h:02x?}"
        )));
    }
    out.extend_from_slice(&h);
    let at = out.len();
    out.resize(at + len, 0);
    sock.read_exact(&mut out[at..]).map_err(io)?;
    Ok((h[0], len))
}

/// Reads the answer to a hello: records until the first AppData (or alert) record (at most
/// [`MAX_ANSWER_RECORDS`], [`MAX_ANSWER`] bytes), each read bounded by `timeout`. Returns the
/// raw bytes and the record list; no checks of content (see [`check_answer`]).
pub fn read_answer(
    sock: &mut TcpStream,
    timeout: Duration,
) -> Result<(Vec<u8>, Records), AnswerError> {
    sock.set_read_timeout(Some(timeout))
        .map_err(|e| AnswerError::Io(e.to_string()))?;
    let mut out = Vec::new();
    let mut records = Vec::new();
    while records.len() < MAX_ANSWER_RECORDS {
        let r = read_record(sock, &mut out)?;
        records.push(r);
        if r.0 == CT_APPDATA || r.0 == CT_ALERT {
            return Ok((out, records));
        }
    }
    Err(AnswerError::Layout(format!(
        "no AppData record in {records:?}"
    )))
}

/// Checks an answer (§2.2): ServerHello record `16 03 03`, then CCS `14 03 03 00 01 01`, then
/// AppData `17 03 03`, nothing else; the server random = `HMAC(key, client_random ‖ answer with
/// [11..43) zeroed)`.
pub fn check_answer(
    bytes: &[u8],
    records: &[(u8, usize)],
    key: &[u8; 16],
    client_random: &[u8; 32],
) -> Result<Answer, AnswerError> {
    let kinds: Vec<u8> = records.iter().map(|r| r.0).collect();
    if kinds != [CT_HANDSHAKE, CT_CCS, CT_APPDATA] {
        return Err(AnswerError::Layout(format!("record types {kinds:02x?}")));
    }
    let sh = records[0].1;
    let bad =
        |what: &str| AnswerError::Layout(format!("{what}: {:02x?}", &bytes[..12.min(bytes.len())]));
    if bytes[1..3] != [3, 3] || sh < 40 + 32 || bytes[5] != 0x02 || bytes[9..11] != [3, 3] {
        return Err(bad("not a TLS 1.2-framed ServerHello"));
    }
    let ccs_at = RECORD_HEADER + sh;
    if bytes[ccs_at..ccs_at + 6] != CCS {
        return Err(bad("the second record is not the CCS 14 03 03 00 01 01"));
    }
    if bytes[ccs_at + 6..ccs_at + 9] != [CT_APPDATA, 3, 3] {
        return Err(bad("the third record is not AppData 17 03 03"));
    }
    let sid_len = bytes[43] as usize;
    let session_id = bytes[44..44 + sid_len].to_vec();
    let c = 44 + sid_len;
    let cipher = u16::from_be_bytes([bytes[c], bytes[c + 1]]);
    let mut zeroed = bytes.to_vec();
    zeroed[RANDOM_AT..RANDOM_AT + RANDOM_LEN].fill(0);
    let h = hmac_sha256(key, &[client_random, &zeroed]);
    if bytes[RANDOM_AT..RANDOM_AT + RANDOM_LEN] != h {
        return Err(AnswerError::BadDigest);
    }
    Ok(Answer {
        bytes: bytes.to_vec(),
        records: records.to_vec(),
        cipher,
        session_id,
    })
}

/// A fake-TLS session to the proxy after a verified answer: a blocking `Read + Write` stream.
/// Writes become AppData records (≤ [`MAX_PAYLOAD`] each; the CCS goes first, once); reads
/// return AppData payload bytes, skipping CCS records; any other record type, or an AppData
/// record over [`MAX_RECORD_IN`], is an `InvalidData` error. Every record received after the
/// answer is logged in [`TlsClient::records_in`].
pub struct TlsClient {
    sock: TcpStream,
    raw: Vec<u8>,
    plain: Vec<u8>,
    plain_at: usize,
    ccs_sent: bool,
    /// (type, payload length) of every record received after the answer.
    pub records_in: Vec<(u8, usize)>,
    /// The hello sent.
    pub hello: Hello,
    /// The proxy's checked answer.
    pub answer: Answer,
}

/// Why [`TlsClient::connect`] failed.
#[derive(Debug)]
pub enum ConnectError {
    Connect(io::Error),
    Answer(AnswerError),
}

impl std::fmt::Display for ConnectError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            ConnectError::Connect(e) => write!(f, "connect: {e}"),
            ConnectError::Answer(e) => write!(f, "server answer: {e:?}"),
        }
    }
}

impl TlsClient {
    /// Connects to `addr`, sends a hello built from `spec`, reads and checks the answer; every
    /// socket operation bounded by `timeout`.
    pub fn connect(
        addr: SocketAddr,
        spec: &HelloSpec,
        rng: &mut Rng,
        timeout: Duration,
    ) -> Result<TlsClient, ConnectError> {
        let hello = build_hello(spec, rng);
        TlsClient::connect_hello(addr, hello, &spec.key, timeout)
    }

    /// [`TlsClient::connect`] sending an already built (or replayed) `hello` as is.
    pub fn connect_hello(
        addr: SocketAddr,
        hello: Hello,
        key: &[u8; 16],
        timeout: Duration,
    ) -> Result<TlsClient, ConnectError> {
        TlsClient::connect_after(addr, &[], hello, key, timeout)
    }

    /// [`TlsClient::connect_hello`] writing `prefix` (e.g. a PROXY protocol header) first, in
    /// the same write as the hello.
    pub fn connect_after(
        addr: SocketAddr,
        prefix: &[u8],
        hello: Hello,
        key: &[u8; 16],
        timeout: Duration,
    ) -> Result<TlsClient, ConnectError> {
        let mut sock = TcpStream::connect_timeout(&addr, timeout).map_err(ConnectError::Connect)?;
        let setup = |s: &TcpStream| {
            s.set_nodelay(true)?;
            s.set_write_timeout(Some(timeout))
        };
        setup(&sock).map_err(ConnectError::Connect)?;
        sock.write_all(&[prefix, &hello.bytes].concat())
            .map_err(ConnectError::Connect)?;
        let (bytes, records) = read_answer(&mut sock, timeout).map_err(ConnectError::Answer)?;
        let answer =
            check_answer(&bytes, &records, key, &hello.random).map_err(ConnectError::Answer)?;
        Ok(TlsClient {
            sock,
            raw: Vec::new(),
            plain: Vec::new(),
            plain_at: 0,
            ccs_sent: false,
            records_in: Vec::new(),
            hello,
            answer,
        })
    }

    /// The socket (timeouts, shutdown, addresses).
    pub fn sock(&self) -> &TcpStream {
        &self.sock
    }

    /// Sends each payload as one AppData record (the CCS first if not sent yet), in one write.
    /// Payloads over [`MAX_PAYLOAD`] are sent as asked (tests of the proxy's bound).
    pub fn write_records(&mut self, payloads: &[&[u8]]) -> io::Result<()> {
        let mut wire = Vec::new();
        if !self.ccs_sent {
            wire.extend_from_slice(&CCS);
            self.ccs_sent = true;
        }
        for p in payloads {
            wire.extend_from_slice(&[CT_APPDATA, 3, 3]);
            wire.extend_from_slice(&(p.len() as u16).to_be_bytes());
            wire.extend_from_slice(p);
        }
        self.sock.write_all(&wire)
    }

    /// Writes `bytes` on the socket as they are (hand-made records).
    pub fn write_raw(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.sock.write_all(bytes)
    }

    /// Moves whole records from `raw` to `plain`; Err on a record we must not see.
    fn unwrap_records(&mut self) -> io::Result<()> {
        let mut at = 0;
        while self.raw.len() - at >= RECORD_HEADER {
            let h = &self.raw[at..at + RECORD_HEADER];
            let (ty, len) = (h[0], u16::from_be_bytes([h[3], h[4]]) as usize);
            if self.raw.len() - at - RECORD_HEADER < len {
                break;
            }
            self.records_in.push((ty, len));
            let body = at + RECORD_HEADER..at + RECORD_HEADER + len;
            match ty {
                CT_APPDATA if len <= MAX_RECORD_IN => self.plain.extend_from_slice(&self.raw[body]),
                CT_CCS => {}
                _ => {
                    return Err(io::Error::new(
                        io::ErrorKind::InvalidData,
                        format!("record type {ty:#04x}, {len} bytes"),
                    ))
                }
            }
            at += RECORD_HEADER + len;
        }
        self.raw.drain(..at);
        Ok(())
    }
}

impl Read for TlsClient {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        loop {
            if self.plain_at < self.plain.len() {
                let n = buf.len().min(self.plain.len() - self.plain_at);
                buf[..n].copy_from_slice(&self.plain[self.plain_at..self.plain_at + n]);
                self.plain_at += n;
                if self.plain_at == self.plain.len() {
                    self.plain.clear();
                    self.plain_at = 0;
                }
                return Ok(n);
            }
            let mut chunk = [0u8; 16 * 1024];
            let n = self.sock.read(&mut chunk)?;
            if n == 0 {
                return if self.raw.is_empty() {
                    Ok(0)
                } else {
                    Err(io::ErrorKind::UnexpectedEof.into())
                };
            }
            self.raw.extend_from_slice(&chunk[..n]);
            self.unwrap_records()?;
        }
    }
}

impl Write for TlsClient {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        let chunks: Vec<&[u8]> = buf.chunks(MAX_PAYLOAD).collect();
        self.write_records(&chunks)?;
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        self.sock.flush()
    }
}

/// Reads from `s` until EOF or an error, discarding, bounded by `timeout`; returns how it ended
/// (`"eof"`, `"reset"`, `"timeout"` or the error) and the bytes read.
pub fn read_to_end(s: &mut TcpStream, timeout: Duration) -> (String, Vec<u8>) {
    let deadline = Instant::now() + timeout;
    let mut got = Vec::new();
    let mut buf = [0u8; 4096];
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return ("timeout".into(), got);
        }
        let _ = s.set_read_timeout(Some(left));
        match s.read(&mut buf) {
            Ok(0) => return ("eof".into(), got),
            Ok(n) => got.extend_from_slice(&buf[..n]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                return ("timeout".into(), got)
            }
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::ConnectionReset | io::ErrorKind::ConnectionAborted
                ) =>
            {
                return ("reset".into(), got)
            }
            Err(e) => return (e.to_string(), got),
        }
    }
}
