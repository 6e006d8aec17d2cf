//! The SOCKS5 inbound's wire protocol (`--socks5`, issue 21 part 3, docs/protocol.md §1.10): a
//! sans-IO server core for RFC 1928 (method choice, CONNECT request, §6 replies) with RFC 1929
//! username/password authentication, and the user list of `--socks5-auth FILE` ([`Users`]).
//!
//! Owns only the bytes: [`Socks5::advance`] takes what the client sent and says what to write and
//! whether to go on, close, or decide a CONNECT. No sockets, no clock, no heap per session. The
//! session phase that reads the exchange and applies the deadline is the caller's (`conn`); which
//! destinations are allowed (the exact DC table, REP 02 otherwise) is the caller's too, as is the
//! success reply ([`reply`]) it sends before dialling. The outbound SOCKS5 client is a different
//! core (`net::outbound::socks5`).
//!
//! What is refused: any version but 5; a client offering no acceptable method (`05 FF`); with
//! users, method `00` is never chosen and wrong credentials get `01 01`; commands other than
//! CONNECT (REP 07); address types other than IPv4, IPv6 and a name that is an IP literal
//! (REP 08; a name that is not a literal gets REP 04 and is never resolved); a non-zero reserved
//! byte (REP 01). Every refusal closes the connection.

use std::fmt;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr};

/// The longest message a client sends in this exchange, bytes: the RFC 1929 request
/// `01 ULEN USER PLEN PASS` with 255-byte name and password (3 + 255 + 255). A caller that holds
/// this many unconsumed bytes always gets an answer other than [`Socks5Step::Need`].
pub const MAX_MESSAGE: usize = 3 + 255 + 255;

/// Longest user name or password, bytes (RFC 1929 §2: one length byte, 1 to 255).
pub const MAX_CREDENTIAL: usize = 255;

/// The users of `--socks5-auth FILE`: `user:password` per line. The password never appears in
/// `Debug` output.
#[derive(Clone, PartialEq, Eq)]
pub struct Users {
    /// `(user, password)` in file order; user names are unique.
    list: Vec<(String, String)>,
}

impl Users {
    /// Parses the file's text: one `user:password` per line (split at the first `:`, so a
    /// password may hold `:` and a name may not); blank lines and lines whose first non-blank
    /// character is `#` are skipped; a trailing CR is dropped. Each name and password is 1–255
    /// bytes (RFC 1929 §2), names are unique, and at least one user is required.
    ///
    /// Errors: `line N: …` naming the first bad line, or `no users` for a file without one.
    pub fn parse(text: &str) -> Result<Users, String> {
        let mut list: Vec<(String, String)> = Vec::new();
        let mut lines_of: Vec<usize> = Vec::new();
        for (i, raw) in text.split('\n').enumerate() {
            let n = i + 1;
            let line = raw.strip_suffix('\r').unwrap_or(raw);
            let lead = line.trim_start();
            if lead.is_empty() || lead.starts_with('#') {
                continue;
            }
            let Some((user, pass)) = line.split_once(':') else {
                return Err(format!("line {n}: expected user:password"));
            };
            for (what, v) in [("user name", user), ("password", pass)] {
                if v.is_empty() {
                    return Err(format!("line {n}: empty {what}"));
                }
                if v.len() > MAX_CREDENTIAL {
                    return Err(format!(
                        "line {n}: {what} is {} bytes, at most {MAX_CREDENTIAL} (RFC 1929)",
                        v.len()
                    ));
                }
            }
            if let Some(k) = list.iter().position(|(u, _)| u == user) {
                return Err(format!(
                    "line {n}: user {user:?} already given on line {}",
                    lines_of[k]
                ));
            }
            list.push((user.to_string(), pass.to_string()));
            lines_of.push(n);
        }
        if list.is_empty() {
            return Err("no users (expected user:password lines)".into());
        }
        Ok(Users { list })
    }

    /// True when `user` and `pass` match one configured user. Every entry is compared, each in
    /// time that depends on the stored lengths only, so the time taken does not tell which
    /// bytes or which user matched.
    pub fn check(&self, user: &[u8], pass: &[u8]) -> bool {
        let mut found = 0u8;
        for (u, p) in &self.list {
            found |= same(user, u.as_bytes()) & same(pass, p.as_bytes());
        }
        found == 1
    }

    /// The first user in file order, for `link`.
    pub fn first(&self) -> Option<(&str, &str)> {
        self.list.first().map(|(u, p)| (u.as_str(), p.as_str()))
    }

    /// Number of users.
    pub fn len(&self) -> usize {
        self.list.len()
    }

    /// Always false: [`Users::parse`] refuses a file without users.
    pub fn is_empty(&self) -> bool {
        self.list.is_empty()
    }
}

/// User names only.
impl fmt::Debug for Users {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list()
            .entries(self.list.iter().map(|(u, _)| u))
            .finish()
    }
}

/// 1 when `got` equals `want`, else 0; the loop runs over `want`'s length whatever `got` is.
fn same(got: &[u8], want: &[u8]) -> u8 {
    let mut diff = u32::from(got.len() != want.len());
    for (i, w) in want.iter().enumerate() {
        diff |= u32::from(got.get(i).copied().unwrap_or(!w) ^ w);
    }
    std::hint::black_box(u8::from(diff == 0))
}

/// RFC 1928 §6 reply codes (the `REP` byte).
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Rep {
    /// 00: succeeded.
    Succeeded = 0,
    /// 01: general SOCKS server failure.
    GeneralFailure = 1,
    /// 02: connection not allowed by ruleset (here: a destination outside the DC table).
    NotAllowed = 2,
    /// 03: network unreachable.
    NetUnreachable = 3,
    /// 04: host unreachable (here also: a name that is not an IP literal).
    HostUnreachable = 4,
    /// 05: connection refused.
    Refused = 5,
    /// 06: TTL expired.
    TtlExpired = 6,
    /// 07: command not supported (BIND, UDP ASSOCIATE, anything but CONNECT).
    CommandNotSupported = 7,
    /// 08: address type not supported.
    AddrTypeNotSupported = 8,
}

/// Bytes to write to the client: a method choice, an RFC 1929 status or an RFC 1928 §6 reply
/// (at most 22 bytes: an IPv6 bound address). Fixed size, no heap.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct Reply {
    bytes: [u8; 22],
    len: u8,
}

impl Reply {
    /// Nothing to write (a refusal that closes without an answer).
    pub const EMPTY: Reply = Reply {
        bytes: [0; 22],
        len: 0,
    };

    fn two(a: u8, b: u8) -> Reply {
        let mut r = Reply::EMPTY;
        r.bytes[0] = a;
        r.bytes[1] = b;
        r.len = 2;
        r
    }

    /// The bytes to write.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes[..usize::from(self.len)]
    }
}

impl fmt::Debug for Reply {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Reply({:02x?})", self.as_bytes())
    }
}

/// The RFC 1928 §6 reply `05 REP 00 ATYP BND.ADDR BND.PORT` (ATYP 1 with 4 address bytes or 4
/// with 16; port big-endian). `bound` is the address the server uses toward the destination
/// (the caller passes the client socket's local address, or `None`: `0.0.0.0:0`).
pub fn reply(rep: Rep, bound: Option<SocketAddr>) -> Reply {
    let bound = bound.unwrap_or(SocketAddr::new(Ipv4Addr::UNSPECIFIED.into(), 0));
    let mut r = Reply::EMPTY;
    r.bytes[..3].copy_from_slice(&[5, rep as u8, 0]);
    let at = match bound.ip() {
        IpAddr::V4(a) => {
            r.bytes[3] = ATYP_V4;
            r.bytes[4..8].copy_from_slice(&a.octets());
            8
        }
        IpAddr::V6(a) => {
            r.bytes[3] = ATYP_V6;
            r.bytes[4..20].copy_from_slice(&a.octets());
            20
        }
    };
    r.bytes[at..at + 2].copy_from_slice(&bound.port().to_be_bytes());
    r.len = (at + 2) as u8;
    r
}

/// Why the exchange ended without a CONNECT (Display: a short phrase for the close line; `name`
/// a stable token).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Refusal {
    /// The greeting's or the request's version byte is not 5 (RFC 1928 §3, §4). Nothing is
    /// answered: the client does not speak our version.
    Version(u8),
    /// The greeting lists no method (`NMETHODS` = 0); answered `05 FF`.
    NoMethods,
    /// None of the offered methods is ours (`00` without users, `02` with); answered `05 FF`
    /// (RFC 1928 §3).
    NoAcceptableMethod,
    /// The RFC 1929 request's version byte is not 1; nothing answered.
    AuthVersion(u8),
    /// The user name and password match no configured user; answered `01 01` (RFC 1929 §2).
    Credentials,
    /// The request's reserved byte is not 0 (RFC 1928 §4); answered REP 01.
    Reserved(u8),
    /// A command other than CONNECT (2 BIND, 3 UDP ASSOCIATE, or undefined); answered REP 07.
    Command(u8),
    /// An address type other than 1, 3, 4; answered REP 08.
    AddressType(u8),
    /// A name (ATYP 3) that is not an IP literal: never resolved; answered REP 04.
    Name,
}

impl Refusal {
    /// Stable lower-case token for logs and records.
    pub fn name(self) -> &'static str {
        match self {
            Refusal::Version(_) => "version",
            Refusal::NoMethods => "no-methods",
            Refusal::NoAcceptableMethod => "no-acceptable-method",
            Refusal::AuthVersion(_) => "auth-version",
            Refusal::Credentials => "credentials",
            Refusal::Reserved(_) => "reserved-byte",
            Refusal::Command(_) => "command",
            Refusal::AddressType(_) => "address-type",
            Refusal::Name => "name",
        }
    }
}

impl fmt::Display for Refusal {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match *self {
            Refusal::Version(v) => write!(f, "SOCKS version {v}, not 5"),
            Refusal::NoMethods => write!(f, "SOCKS5 greeting lists no method"),
            Refusal::NoAcceptableMethod => write!(f, "no acceptable SOCKS5 method offered"),
            Refusal::AuthVersion(v) => write!(f, "RFC 1929 version {v}, not 1"),
            Refusal::Credentials => write!(f, "wrong SOCKS5 user or password"),
            Refusal::Reserved(v) => write!(f, "SOCKS5 reserved byte {v:#04x}, not 0"),
            Refusal::Command(2) => write!(f, "SOCKS5 BIND not supported"),
            Refusal::Command(3) => write!(f, "SOCKS5 UDP ASSOCIATE not supported"),
            Refusal::Command(c) => write!(f, "SOCKS5 command {c} not supported"),
            Refusal::AddressType(a) => write!(f, "SOCKS5 address type {a} not supported"),
            Refusal::Name => write!(f, "SOCKS5 name is not an IP literal (never resolved)"),
        }
    }
}

/// What to do after [`Socks5::advance`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Socks5Step {
    /// The current message is incomplete: read more and call again with everything unconsumed.
    Need,
    /// Write these bytes, then go on feeding (bytes already read may hold the next message).
    Send(Reply),
    /// A CONNECT to this destination (IPv4-mapped IPv6 given as IPv4). The caller decides and
    /// sends [`reply`]: REP 00 before dialling, or a refusal (REP 02 outside the DC table) and
    /// close. The exchange is over; bytes after the request are the client's payload.
    Connect(SocketAddr),
    /// Write these bytes (possibly none), then close.
    Refuse(Reply, Refusal),
}

const METHOD_NONE: u8 = 0x00;
const METHOD_USERPASS: u8 = 0x02;
const NO_ACCEPTABLE: u8 = 0xFF;
const CMD_CONNECT: u8 = 1;
const ATYP_V4: u8 = 1;
const ATYP_NAME: u8 = 3;
const ATYP_V6: u8 = 4;

/// Where the exchange is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Phase {
    /// Waiting for `05 NMETHODS METHODS…`.
    Greeting,
    /// Waiting for `01 ULEN USER PLEN PASS` (method 02 chosen).
    Auth,
    /// Waiting for `05 CMD 00 ATYP DST.ADDR DST.PORT`.
    Request,
    /// A CONNECT was returned or the exchange was refused: nothing more is read.
    Over,
}

/// One client's SOCKS5 exchange (2 bytes; lives in the session's phase).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Socks5 {
    phase: Phase,
    auth: bool,
}

impl Socks5 {
    /// A fresh exchange. `auth`: users are configured (`--socks5-auth`), so method 02 (RFC 1929)
    /// is required and 00 is never chosen; without, only 00 is.
    pub fn new(auth: bool) -> Socks5 {
        Socks5 {
            phase: Phase::Greeting,
            auth,
        }
    }

    /// Feeds the bytes received so far that were not consumed yet. Returns how many bytes it
    /// consumed (a whole message, or none) and what to do. Bytes after a complete CONNECT
    /// request are not consumed (a client may pipeline its first MTProto bytes); nor is
    /// anything once the exchange is over (`Connect` or `Refuse` returned): later calls return
    /// `(0, Need)`. `users` is checked when `auth` was given; `None` then refuses every
    /// credential.
    pub fn advance(&mut self, input: &[u8], users: Option<&Users>) -> (usize, Socks5Step) {
        let (used, step) = match self.phase {
            Phase::Greeting => self.greeting(input),
            Phase::Auth => auth(input, users),
            Phase::Request => request(input),
            Phase::Over => return (0, Socks5Step::Need),
        };
        match step {
            Socks5Step::Need => {}
            Socks5Step::Send(_) => {
                self.phase = match self.phase {
                    Phase::Greeting if self.auth => Phase::Auth,
                    _ => Phase::Request,
                }
            }
            Socks5Step::Connect(_) | Socks5Step::Refuse(..) => self.phase = Phase::Over,
        }
        (used, step)
    }

    /// `05 NMETHODS METHODS…` (RFC 1928 §3) → `05 METHOD`.
    fn greeting(&self, input: &[u8]) -> (usize, Socks5Step) {
        let Some(&ver) = input.first() else {
            return (0, Socks5Step::Need);
        };
        if ver != 5 {
            return (1, refuse(Reply::EMPTY, Refusal::Version(ver)));
        }
        let Some(&n) = input.get(1) else {
            return (0, Socks5Step::Need);
        };
        if n == 0 {
            return (2, refuse(Reply::two(5, NO_ACCEPTABLE), Refusal::NoMethods));
        }
        let len = 2 + usize::from(n);
        let Some(methods) = input.get(2..len) else {
            return (0, Socks5Step::Need);
        };
        let want = if self.auth {
            METHOD_USERPASS
        } else {
            METHOD_NONE
        };
        if methods.contains(&want) {
            (len, Socks5Step::Send(Reply::two(5, want)))
        } else {
            let no = Reply::two(5, NO_ACCEPTABLE);
            (len, refuse(no, Refusal::NoAcceptableMethod))
        }
    }
}

fn refuse(reply: Reply, why: Refusal) -> Socks5Step {
    Socks5Step::Refuse(reply, why)
}

/// `01 ULEN UNAME PLEN PASSWD` (RFC 1929 §2) → `01 STATUS`.
fn auth(input: &[u8], users: Option<&Users>) -> (usize, Socks5Step) {
    let Some(&ver) = input.first() else {
        return (0, Socks5Step::Need);
    };
    if ver != 1 {
        return (1, refuse(Reply::EMPTY, Refusal::AuthVersion(ver)));
    }
    let Some(&ulen) = input.get(1) else {
        return (0, Socks5Step::Need);
    };
    let user_end = 2 + usize::from(ulen);
    let Some(&plen) = input.get(user_end) else {
        return (0, Socks5Step::Need);
    };
    let len = user_end + 1 + usize::from(plen);
    let Some(pass) = input.get(user_end + 1..len) else {
        return (0, Socks5Step::Need);
    };
    let user = &input[2..user_end];
    if users.is_some_and(|u| u.check(user, pass)) {
        (len, Socks5Step::Send(Reply::two(1, 0)))
    } else {
        (len, refuse(Reply::two(1, 1), Refusal::Credentials))
    }
}

/// `05 CMD 00 ATYP DST.ADDR DST.PORT` (RFC 1928 §4, §5). The command and address type are
/// judged from the 4-byte head, before the address is read.
fn request(input: &[u8]) -> (usize, Socks5Step) {
    let Some(head) = input.get(..4) else {
        if let Some(&ver) = input.first().filter(|&&v| v != 5) {
            return (1, refuse(Reply::EMPTY, Refusal::Version(ver)));
        }
        return (0, Socks5Step::Need);
    };
    let (ver, cmd, rsv, atyp) = (head[0], head[1], head[2], head[3]);
    if ver != 5 {
        return (1, refuse(Reply::EMPTY, Refusal::Version(ver)));
    }
    if rsv != 0 {
        let r = reply(Rep::GeneralFailure, None);
        return (4, refuse(r, Refusal::Reserved(rsv)));
    }
    if cmd != CMD_CONNECT {
        let r = reply(Rep::CommandNotSupported, None);
        return (4, refuse(r, Refusal::Command(cmd)));
    }
    let (addr_len, at) = match atyp {
        ATYP_V4 => (4, 4),
        ATYP_V6 => (16, 4),
        ATYP_NAME => match input.get(4) {
            Some(&n) => (usize::from(n), 5),
            None => return (0, Socks5Step::Need),
        },
        other => {
            let r = reply(Rep::AddrTypeNotSupported, None);
            return (4, refuse(r, Refusal::AddressType(other)));
        }
    };
    let len = at + addr_len + 2;
    let Some(body) = input.get(at..len) else {
        return (0, Socks5Step::Need);
    };
    let (addr, port) = body.split_at(addr_len);
    let port = u16::from_be_bytes([port[0], port[1]]);
    let ip = match atyp {
        ATYP_V4 => IpAddr::from(<[u8; 4]>::try_from(addr).unwrap_or_default()),
        ATYP_V6 => IpAddr::from(<[u8; 16]>::try_from(addr).unwrap_or_default()),
        _ => match ip_literal(addr) {
            Some(ip) => ip,
            None => {
                let r = reply(Rep::HostUnreachable, None);
                return (len, refuse(r, Refusal::Name));
            }
        },
    };
    (
        len,
        Socks5Step::Connect(SocketAddr::new(ip.to_canonical(), port)),
    )
}

/// An ATYP 3 name that is an IP literal: dotted-quad IPv4 (no leading zeros, as std parses it)
/// or IPv6, bare or in brackets. Anything else (host names, zone ids) is `None`.
fn ip_literal(name: &[u8]) -> Option<IpAddr> {
    let s = std::str::from_utf8(name).ok()?;
    if let Some(inner) = s.strip_prefix('[').and_then(|r| r.strip_suffix(']')) {
        return inner.parse::<Ipv6Addr>().ok().map(IpAddr::V6);
    }
    s.parse::<IpAddr>().ok()
}

#[cfg(test)]
mod tests;
