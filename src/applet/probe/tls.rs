//! The probe's fake-TLS (`ee`) wrapping, blocking: the handshake over a `TcpStream` (our signed
//! ClientHello, the server's answer checked) and two small record helpers for the stream after
//! it (obfuscated2 bytes carried in application-data records both ways). The wire rules are
//! `mtproto::faketls` (client.rs) and docs/protocol.md §2.5; the proxy's own non-blocking
//! record layer is `mtproto::faketls::record` and `net::faketls_stream`, not this.

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use crate::mtproto::faketls::client::{check_server_hello, client_hello, ClientError, Shape};
use crate::mtproto::faketls::{
    CCS_RECORD, CT_ALERT, CT_APPDATA, CT_CCS, MAX_PAYLOAD, MAX_RECORD_IN, RECORD_HEADER,
};
use crate::rng::Rng;

/// Most bytes read while waiting for the server's answer: 20 records of the largest size.
const MAX_ANSWER: usize = 20 * (RECORD_HEADER + MAX_RECORD_IN);

/// Runs the client side of the fake-TLS handshake on `stream` (its read timeout is managed
/// here, bounded by `deadline`): sends a ClientHello for `key`/`domain` signed with the wall
/// clock, reads until the answer verifies. Returns the bytes read past the answer (the start of
/// the record stream), and the bytes written and read. Errors: `InvalidInput` for a domain the hello cannot carry,
/// `InvalidData` for an answer that is not ours (`ClientError` text), `TimedOut`,
/// `UnexpectedEof`, or the socket's error.
pub fn handshake(
    stream: &mut TcpStream,
    key: &[u8; 16],
    domain: &str,
    deadline: Instant,
    rng: &mut Rng,
) -> io::Result<(Vec<u8>, usize, usize)> {
    let wall_s = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    // the classic shape: the probe must also pass the official MTProxy's 512..=767 rule
    let Some((hello, random)) = client_hello(Shape::ChromeClassic, key, domain, wall_s, &mut |b| {
        rng.fill(b)
    }) else {
        return Err(io::Error::new(
            io::ErrorKind::InvalidInput,
            "ee secret domain too long for a ClientHello",
        ));
    };
    let n = hello.len();
    write_all(stream, &hello)?;
    let mut answer = Vec::new();
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        match check_server_hello(&answer, key, &random) {
            Ok(used) => {
                let read = answer.len();
                return Ok((answer.split_off(used), n, read));
            }
            Err(ClientError::NeedMore) if answer.len() < MAX_ANSWER => {}
            Err(ClientError::NeedMore) => {
                return Err(invalid(ClientError::TooManyRecords.to_string()))
            }
            Err(e) => return Err(invalid(format!("fake-TLS answer: {e}"))),
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(io::ErrorKind::TimedOut.into());
        }
        stream.set_read_timeout(Some(left))?;
        match stream.read(&mut buf) {
            Ok(0) => return Err(io::ErrorKind::UnexpectedEof.into()),
            Ok(k) => answer.extend_from_slice(&buf[..k]),
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                return Err(io::ErrorKind::TimedOut.into())
            }
            Err(e) => return Err(e),
        }
    }
}

/// Wraps `payload` in application-data records of ≤ `MAX_PAYLOAD` bytes each, after the dummy
/// CCS record when `first` (what a TLS 1.3 client sends before its first encrypted record, and
/// MTProxy requires). An empty payload gives no record (just the CCS when `first`).
pub fn wrap(payload: &[u8], first: bool) -> Vec<u8> {
    let records = payload.len().div_ceil(MAX_PAYLOAD);
    let mut out = Vec::with_capacity(payload.len() + records * RECORD_HEADER + CCS_RECORD.len());
    if first {
        out.extend_from_slice(&CCS_RECORD);
    }
    for chunk in payload.chunks(MAX_PAYLOAD) {
        out.extend_from_slice(&[CT_APPDATA, 0x03, 0x03]);
        out.extend_from_slice(&(chunk.len() as u16).to_be_bytes());
        out.extend_from_slice(chunk);
    }
    out
}

/// Streaming unwrapper of the server's records: application-data payloads out, CCS records
/// skipped; a record may be split across reads at any byte.
#[derive(Debug, Default)]
pub struct Unwrap {
    /// Header bytes of the next record seen so far.
    head: [u8; RECORD_HEADER],
    have: usize,
    /// Payload bytes left in the current record, and whether it is application data.
    left: usize,
    appdata: bool,
}

impl Unwrap {
    /// Appends the application-data payload bytes in `input` to `out`. Errors (`InvalidData`):
    /// an alert or any type but CCS and application data, a version other than 03 03, a record
    /// over `MAX_RECORD_IN` bytes. Empty records are skipped.
    pub fn push(&mut self, mut input: &[u8], out: &mut Vec<u8>) -> io::Result<()> {
        while !input.is_empty() {
            if self.left == 0 {
                let k = (RECORD_HEADER - self.have).min(input.len());
                self.head[self.have..self.have + k].copy_from_slice(&input[..k]);
                self.have += k;
                input = &input[k..];
                if self.have < RECORD_HEADER {
                    return Ok(());
                }
                self.have = 0;
                let h = self.head;
                let len = u16::from_be_bytes([h[3], h[4]]) as usize;
                if h[1..3] != [0x03, 0x03] {
                    return Err(invalid("tls record version is not 03 03".into()));
                }
                match h[0] {
                    CT_APPDATA | CT_CCS => {}
                    CT_ALERT => return Err(invalid("tls alert from the server".into())),
                    t => return Err(invalid(format!("unexpected tls record type {t:#04x}"))),
                }
                if len > MAX_RECORD_IN {
                    return Err(invalid(format!("tls record of {len} bytes")));
                }
                self.left = len;
                self.appdata = h[0] == CT_APPDATA;
                continue;
            }
            let k = self.left.min(input.len());
            if self.appdata {
                out.extend_from_slice(&input[..k]);
            }
            self.left -= k;
            input = &input[k..];
        }
        Ok(())
    }
}

fn invalid(msg: String) -> io::Error {
    io::Error::new(io::ErrorKind::InvalidData, msg)
}

fn write_all(stream: &mut TcpStream, bytes: &[u8]) -> io::Result<()> {
    stream.write_all(bytes).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock => io::ErrorKind::TimedOut.into(),
        _ => e,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The server side of one handshake (5 s read timeout on `s`): reads the ClientHello,
    /// accepts it with our gate for `key`/`domain`, returns our server hello (random bytes from
    /// `r`) for the caller to send.
    fn accept_and_answer(s: &mut TcpStream, key: [u8; 16], domain: &str, r: &mut Rng) -> Vec<u8> {
        use crate::mtproto::faketls::gate::{EeKey, Gate};
        use crate::mtproto::faketls::server_hello::{server_hello, MAX_SERVER_HELLO};

        s.set_read_timeout(Some(std::time::Duration::from_secs(5)))
            .unwrap();
        let mut head = [0u8; 5];
        s.read_exact(&mut head).unwrap();
        let mut hello = head.to_vec();
        hello.resize(5 + usize::from(u16::from_be_bytes([head[3], head[4]])), 0);
        s.read_exact(&mut hello[5..]).unwrap();
        let wall = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .unwrap()
            .as_secs();
        let keys = [EeKey {
            index: 0,
            key,
            domain: domain.into(),
        }];
        let acc = Gate::new(120, 16, wall, 0)
            .check(&hello, &keys, wall, 0)
            .unwrap();
        let mut out = vec![0u8; MAX_SERVER_HELLO];
        let n = server_hello(&mut out, &acc, &mut |b| r.fill(b));
        out.truncate(n);
        out
    }

    #[test]
    fn wrap_splits_at_max_payload_and_leads_with_ccs_once() {
        let data: Vec<u8> = (0..MAX_PAYLOAD * 2 + 10).map(|i| i as u8).collect();
        let w = wrap(&data, true);
        assert_eq!(&w[..6], &CCS_RECORD);
        assert_eq!(&w[6..11], &[0x17, 3, 3, 0x40, 0x00]);
        assert_eq!(w.len(), 6 + 3 * 5 + data.len());
        let last = 6 + 2 * (5 + MAX_PAYLOAD);
        assert_eq!(&w[last..last + 5], &[0x17, 3, 3, 0, 10]);
        assert_eq!(wrap(b"", false), Vec::<u8>::new());
        assert_eq!(wrap(b"ab", false), vec![0x17, 3, 3, 0, 2, b'a', b'b']);
    }

    #[test]
    fn unwrap_round_trips_any_split_and_skips_ccs_and_empty_records() {
        let data: Vec<u8> = (0..40_000u32).map(|i| (i * 7) as u8).collect();
        let mut wire = wrap(&data[..100], true);
        wire.extend_from_slice(&[0x17, 3, 3, 0, 0]);
        wire.extend_from_slice(&CCS_RECORD);
        wire.extend_from_slice(&wrap(&data[100..], false));
        for step in [1, 2, 5, 7, 4096, wire.len()] {
            let mut u = Unwrap::default();
            let mut out = Vec::new();
            for c in wire.chunks(step) {
                u.push(c, &mut out).unwrap();
            }
            assert_eq!(out, data, "step {step}");
        }
    }

    #[test]
    fn unwrap_refuses_alerts_other_types_versions_and_oversized_records() {
        let cases: [(&[u8], &str); 4] = [
            (&[0x15, 3, 3, 0, 2, 2, 40], "alert"),
            (&[0x16, 3, 3, 0, 1, 0], "type"),
            (&[0x17, 3, 1, 0, 1, 0], "version"),
            (&[0x17, 3, 3, 0x41, 0x01], "bytes"),
        ];
        for (wire, word) in cases {
            let e = Unwrap::default().push(wire, &mut Vec::new()).unwrap_err();
            assert_eq!(e.kind(), io::ErrorKind::InvalidData);
            assert!(e.to_string().contains(word), "{e}");
        }
        // exactly MAX_RECORD_IN is allowed
        let mut u = Unwrap::default();
        let len = (MAX_RECORD_IN as u16).to_be_bytes();
        u.push(&[0x17, 3, 3, len[0], len[1]], &mut Vec::new())
            .unwrap();
    }

    /// The whole client path against our own gate and server hello on loopback: the answer
    /// verifies, the bytes the server sends right after it come out of the unwrapper, and the
    /// client's first write is CCS + one application-data record.
    #[test]
    fn handshake_against_our_gate_and_server_hello_on_loopback() {
        use std::net::TcpListener;
        use std::time::Duration;

        let key = [5u8; 16];
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = Rng::from_seed([1; 48]);
            let mut out = accept_and_answer(&mut s, key, "example.com", &mut r);
            out.extend_from_slice(&wrap(b"early", false));
            s.write_all(&out).unwrap();
            let mut first = [0u8; 6 + 5 + 3];
            s.read_exact(&mut first).unwrap();
            first
        });
        let mut c = TcpStream::connect(addr).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        let mut rng = Rng::from_seed([2; 48]);
        let (rest, up, down) = handshake(&mut c, &key, "example.com", deadline, &mut rng).unwrap();
        assert_eq!(
            up, 517,
            "the classic shape: a 512-byte payload for a short name"
        );
        assert!(down >= rest.len() + 138 + 2048);
        let mut plain = Vec::new();
        let mut u = Unwrap::default();
        u.push(&rest, &mut plain).unwrap();
        // the early record may still be in flight
        while plain.len() < 5 {
            let mut b = [0u8; 64];
            let k = c.read(&mut b).unwrap();
            assert!(k > 0);
            u.push(&b[..k], &mut plain).unwrap();
        }
        assert_eq!(plain, b"early");
        c.write_all(&wrap(b"abc", true)).unwrap();
        let first = server.join().unwrap();
        assert_eq!(&first[..6], &CCS_RECORD);
        assert_eq!(&first[6..], &[0x17, 3, 3, 0, 3, b'a', b'b', b'c']);
    }

    /// MtClient with an `ee` secret end to end over loopback: the init arrives after the CCS in
    /// an application-data record and is accepted with the key; a packet each way passes the
    /// record layer (the server's reply is split over two records).
    #[test]
    fn mtclient_with_an_ee_secret_carries_obfuscated2_in_records() {
        use super::super::client::{ClientOptions, MtClient};
        use crate::mtproto::framing;
        use crate::mtproto::obfs2::{self, Secret, Tag};
        use std::net::TcpListener;
        use std::time::Duration;

        let secret = Secret::parse("ee0123456789abcdef0123456789abcdef612e696f").unwrap();
        let key = secret.key;
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let addr = listener.local_addr().unwrap();
        let server = std::thread::spawn(move || {
            let (mut s, _) = listener.accept().unwrap();
            let mut r = Rng::from_seed([3; 48]);
            let answer = accept_and_answer(&mut s, key, "a.io", &mut r);
            s.write_all(&answer).unwrap();
            // CCS, then records carrying the init and the client's packet
            let mut ccs = [0u8; 6];
            s.read_exact(&mut ccs).unwrap();
            assert_eq!(ccs, CCS_RECORD);
            let mut u = Unwrap::default();
            let mut plain = Vec::new();
            let mut buf = [0u8; 4096];
            while plain.len() < 64 + 4 + 8 {
                let k = s.read(&mut buf).unwrap();
                assert!(k > 0, "client closed early");
                u.push(&buf[..k], &mut plain).unwrap();
            }
            let init: [u8; 64] = plain[..64].try_into().unwrap();
            let mut a = obfs2::accept(&init, &[key]).unwrap();
            assert_eq!(a.tag, Tag::Intermediate);
            a.decrypt.apply(&mut plain[64..]);
            assert_eq!(&plain[64..], &[8, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8]);
            let mut reply = framing::encode(Tag::Intermediate, b"pong", &mut r);
            a.encrypt.apply(&mut reply);
            let mut wire = wrap(&reply[..3], false);
            wire.extend_from_slice(&CCS_RECORD);
            wire.extend_from_slice(&wrap(&reply[3..], false));
            s.write_all(&wire).unwrap();
        });
        let opts = ClientOptions {
            addr,
            secret: Some(secret),
            tag: Tag::Intermediate,
            dc: 2,
            timeout: Duration::from_secs(5),
        };
        let mut rng = Rng::from_seed([4; 48]);
        let mut c = MtClient::connect_with(&opts, &mut rng).unwrap();
        c.send_packet(&[1, 2, 3, 4, 5, 6, 7, 8]).unwrap();
        assert_eq!(c.recv_packet().unwrap(), b"pong");
        server.join().unwrap();
    }
}
