//! The client's first TLS record: sniffing its header from the first bytes a client sends and
//! strictly parsing one whole ClientHello record (docs/protocol.md "Fake-TLS", §2.1).
//! Parsing only: the digest, SNI, timestamp and replay verdict is `gate`'s. Never panics on any
//! input; borrows the record, allocates nothing.

use std::fmt;

use super::{CT_HANDSHAKE, RANDOM_AT, RECORD_HEADER};

/// Largest ClientHello record we read, header included: 5 + 8192 bytes.
///
/// Real browsers and Telegram clients send 512–2000 byte hellos; Chrome's post-quantum key share
/// (X25519MLKEM768, 1216 bytes) brings it to about 1.8 KB. Twice the largest hello seen plus
/// headroom for a second post-quantum share keeps today's clients far inside the bound while a
/// connection still in its handshake holds at most 8 KB. A longer record is `Bad(TooLong)`
/// (the caller masks it like any other hello that is not ours). Below RFC 8446's 16384-byte
/// record limit, so one record always holds it.
pub const MAX_HELLO_RECORD: usize = RECORD_HEADER + 8192;

/// Smallest ClientHello record payload: handshake header (4), version (2), random (32),
/// session id length (1), cipher suites length (2) and one suite (2), compression length (1)
/// and one method (1).
pub const MIN_HELLO_PAYLOAD: usize = 4 + 2 + 32 + 1 + 2 + 2 + 1 + 1;

/// What the first bytes of a connection say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Sniff {
    /// The first byte is not 0x16 (handshake record): not a TLS client (an obfuscated2 init,
    /// HTTP, ...).
    NotTls,
    /// Starts like a handshake record; fewer than 5 bytes so far.
    NeedMore,
    /// A ClientHello record header: read `record_len` bytes in all (header included, ≤
    /// [`MAX_HELLO_RECORD`]) and hand them to [`parse`].
    Hello {
        /// Whole record length, header included.
        record_len: usize,
    },
    /// Starts like a handshake record but cannot be a hello we read (record version, length).
    /// A port that also serves obfuscated2 secrets may still try the bytes as an init (an init's
    /// first byte is 0x16 one time in 256).
    Bad(HelloError),
}

/// Classifies the first 1..=5 bytes a client sent (more are ignored): `16 03 01..=03` and a
/// big-endian record length in [`MIN_HELLO_PAYLOAD`] ..= [`MAX_HELLO_RECORD`] − 5. An empty
/// prefix is `NeedMore`.
pub fn sniff(prefix: &[u8]) -> Sniff {
    let Some(&ct) = prefix.first() else {
        return Sniff::NeedMore;
    };
    if ct != CT_HANDSHAKE {
        return Sniff::NotTls;
    }
    if prefix.len() >= 2 && prefix[1] != 0x03 {
        return Sniff::Bad(HelloError::RecordVersion);
    }
    if prefix.len() >= 3 && !(0x01..=0x03).contains(&prefix[2]) {
        return Sniff::Bad(HelloError::RecordVersion);
    }
    if prefix.len() < RECORD_HEADER {
        return Sniff::NeedMore;
    }
    let len = u16::from_be_bytes([prefix[3], prefix[4]]) as usize;
    if len < MIN_HELLO_PAYLOAD {
        return Sniff::Bad(HelloError::TooShort);
    }
    if len > MAX_HELLO_RECORD - RECORD_HEADER {
        return Sniff::Bad(HelloError::TooLong);
    }
    Sniff::Hello {
        record_len: RECORD_HEADER + len,
    }
}

/// A parsed ClientHello; borrows the record it came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ClientHello<'a> {
    /// The 32-byte client random (record bytes 11..43): the fake-TLS digest and timestamp.
    pub random: [u8; 32],
    /// The legacy session id, 0..=32 bytes (echoed in our ServerHello).
    pub session_id: &'a [u8],
    /// The server_name extension's host_name (RFC 6066 §3) as sent, if present.
    pub sni: Option<&'a [u8]>,
    /// The TLS 1.3 suite (0x1301..=0x1303) to answer with: see [`pick_cipher`].
    pub cipher: u16,
}

/// Why a hello is malformed. `Display` is a short lowercase phrase.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum HelloError {
    /// Record content type is not handshake (0x16).
    NotHandshake,
    /// Record version is not 03 01..=03 03.
    RecordVersion,
    /// Record length below [`MIN_HELLO_PAYLOAD`].
    TooShort,
    /// Record longer than [`MAX_HELLO_RECORD`].
    TooLong,
    /// Fewer bytes than the record header says.
    Truncated,
    /// More bytes than the record header says (parse takes exactly one record).
    Trailing,
    /// Handshake message type is not client_hello (1).
    NotClientHello,
    /// The 24-bit handshake length differs from the record's payload minus 4.
    HandshakeLength,
    /// Client (legacy) version is not 03 01..=03 03.
    ClientVersion,
    /// Session id longer than 32 bytes or past the message.
    SessionId,
    /// Cipher suite list odd, empty or past the message.
    CipherSuites,
    /// Compression method list empty or past the message.
    Compression,
    /// Extensions block length differs from the bytes left, or bytes left without a block.
    ExtensionsLength,
    /// An extension's length runs past the extensions block.
    ExtensionLength,
    /// server_name extension malformed (list length, name type, host_name length).
    ServerName,
    /// server_name extension sent twice.
    DuplicateServerName,
}

impl fmt::Display for HelloError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            HelloError::NotHandshake => "not a handshake record",
            HelloError::RecordVersion => "bad record version",
            HelloError::TooShort => "record too short",
            HelloError::TooLong => "record too long",
            HelloError::Truncated => "record truncated",
            HelloError::Trailing => "bytes after the record",
            HelloError::NotClientHello => "not a client hello",
            HelloError::HandshakeLength => "bad handshake length",
            HelloError::ClientVersion => "bad client version",
            HelloError::SessionId => "bad session id",
            HelloError::CipherSuites => "bad cipher suites",
            HelloError::Compression => "bad compression methods",
            HelloError::ExtensionsLength => "bad extensions length",
            HelloError::ExtensionLength => "bad extension length",
            HelloError::ServerName => "bad server name",
            HelloError::DuplicateServerName => "duplicate server name",
        })
    }
}

impl std::error::Error for HelloError {}

/// Parses one whole record (header included, exactly one record): record header, handshake
/// header, client version, random, session id (≤ 32), cipher suites (even, ≥ 2 bytes),
/// compression methods (≥ 1), extensions (block length exact, each extension inside it), and
/// the server_name extension (type 0: list length exact, one entry of name type 0 with a
/// non-empty host_name exactly filling it; sent at most once). Other extensions are skipped.
/// Never panics.
pub fn parse(record: &[u8]) -> Result<ClientHello<'_>, HelloError> {
    if record.len() < RECORD_HEADER {
        return Err(HelloError::Truncated);
    }
    if record.len() > MAX_HELLO_RECORD {
        return Err(HelloError::TooLong);
    }
    match sniff(&record[..RECORD_HEADER]) {
        Sniff::Hello { record_len } if record_len == record.len() => {}
        Sniff::Hello { record_len } if record_len > record.len() => {
            return Err(HelloError::Truncated)
        }
        Sniff::Hello { .. } => return Err(HelloError::Trailing),
        Sniff::NotTls => return Err(HelloError::NotHandshake),
        Sniff::Bad(e) => return Err(e),
        Sniff::NeedMore => return Err(HelloError::Truncated),
    }
    let mut r = Reader::new(&record[RECORD_HEADER..]);
    if r.u8().ok_or(HelloError::Truncated)? != 1 {
        return Err(HelloError::NotClientHello);
    }
    let hs_len = r.u24().ok_or(HelloError::Truncated)? as usize;
    if hs_len != record.len() - RECORD_HEADER - 4 {
        return Err(HelloError::HandshakeLength);
    }
    let version = r.u16().ok_or(HelloError::Truncated)?;
    if !(0x0301..=0x0303).contains(&version) {
        return Err(HelloError::ClientVersion);
    }
    let mut random = [0u8; 32];
    random.copy_from_slice(r.take(32).ok_or(HelloError::Truncated)?);
    debug_assert_eq!(r.pos + RECORD_HEADER, RANDOM_AT + 32);
    let sid_len = r.u8().ok_or(HelloError::SessionId)? as usize;
    if sid_len > 32 {
        return Err(HelloError::SessionId);
    }
    let session_id = r.take(sid_len).ok_or(HelloError::SessionId)?;
    let cs_len = r.u16().ok_or(HelloError::CipherSuites)? as usize;
    if cs_len < 2 || cs_len % 2 != 0 {
        return Err(HelloError::CipherSuites);
    }
    let suites = r.take(cs_len).ok_or(HelloError::CipherSuites)?;
    let comp_len = r.u8().ok_or(HelloError::Compression)? as usize;
    if comp_len < 1 {
        return Err(HelloError::Compression);
    }
    r.take(comp_len).ok_or(HelloError::Compression)?;
    let mut sni = None;
    if r.left() > 0 {
        let ext_len = r.u16().ok_or(HelloError::ExtensionsLength)? as usize;
        if ext_len != r.left() {
            return Err(HelloError::ExtensionsLength);
        }
        while r.left() > 0 {
            let ty = r.u16().ok_or(HelloError::ExtensionLength)?;
            let len = r.u16().ok_or(HelloError::ExtensionLength)? as usize;
            let body = r.take(len).ok_or(HelloError::ExtensionLength)?;
            if ty == 0 {
                if sni.is_some() {
                    return Err(HelloError::DuplicateServerName);
                }
                sni = Some(server_name(body)?);
            }
        }
    }
    Ok(ClientHello {
        random,
        session_id,
        sni,
        cipher: pick_cipher(suites),
    })
}

/// The host_name of a server_name extension body (RFC 6066 §3): list length (2) equal to the
/// rest, name type 0, host_name length (2) ≥ 1 filling the list exactly.
fn server_name(body: &[u8]) -> Result<&[u8], HelloError> {
    let mut r = Reader::new(body);
    let list = r.u16().ok_or(HelloError::ServerName)? as usize;
    if list != r.left() {
        return Err(HelloError::ServerName);
    }
    if r.u8() != Some(0) {
        return Err(HelloError::ServerName);
    }
    let len = r.u16().ok_or(HelloError::ServerName)? as usize;
    if len == 0 || len != r.left() {
        return Err(HelloError::ServerName);
    }
    r.take(len).ok_or(HelloError::ServerName)
}

/// True for a GREASE value (RFC 8701): 0x?A?A with both bytes equal.
pub fn is_grease(v: u16) -> bool {
    v & 0x0f0f == 0x0a0a && v >> 8 == v & 0xff
}

/// The cipher suite we answer with, from the client's list (`suites`: big-endian u16 pairs):
/// its first non-GREASE suite if that is 0x1301..=0x1303, else the first such suite anywhere in
/// its list, else 0x1301. Our ServerHello announces TLS 1.3 (supported_versions 03 04), and a
/// TLS 1.3 ServerHello naming a TLS 1.2 or GREASE suite is both invalid and a fingerprint
/// (docs/protocol.md §6 item 8); a real TLS 1.3 server picks from the client's TLS 1.3 suites,
/// normally the client's preferred one. A client offering none gets 0x1301, the suite every
/// TLS 1.3 implementation must support (RFC 8446 §9.1).
pub fn pick_cipher(suites: &[u8]) -> u16 {
    let tls13 = |s: u16| (0x1301..=0x1303).contains(&s);
    let mut iter = suites
        .chunks_exact(2)
        .map(|c| u16::from_be_bytes([c[0], c[1]]))
        .filter(|&s| !is_grease(s));
    match iter.next() {
        Some(s) if tls13(s) => s,
        Some(_) => iter.find(|&s| tls13(s)).unwrap_or(0x1301),
        None => 0x1301,
    }
}

/// Bounds-checked big-endian reader over a byte slice.
struct Reader<'a> {
    buf: &'a [u8],
    pos: usize,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8]) -> Reader<'a> {
        Reader { buf, pos: 0 }
    }

    fn left(&self) -> usize {
        self.buf.len() - self.pos
    }

    fn take(&mut self, n: usize) -> Option<&'a [u8]> {
        if n > self.left() {
            return None;
        }
        let s = &self.buf[self.pos..self.pos + n];
        self.pos += n;
        Some(s)
    }

    fn u8(&mut self) -> Option<u8> {
        self.take(1).map(|b| b[0])
    }

    fn u16(&mut self) -> Option<u16> {
        self.take(2).map(|b| u16::from_be_bytes([b[0], b[1]]))
    }

    fn u24(&mut self) -> Option<u32> {
        self.take(3)
            .map(|b| u32::from_be_bytes([0, b[0], b[1], b[2]]))
    }
}
