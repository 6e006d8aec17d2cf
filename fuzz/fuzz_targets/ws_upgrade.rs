//! The HTTP upgrade response (src/net/ws.rs): what Telegram's front, a CF-proxied domain or a
//! Worker answers to our `GET /apiws` — 101, 3xx, 429/503 with `Retry-After`, or anything.
//!
//! Input: `[mode, split seed, response…]`. The request is the proxy's own (`ws::request`; bit 0
//! of `mode` asks for the `binary` subprotocol) with a fixed `Sec-WebSocket-Key`, so a seed can
//! carry the right accept key. tungstenite's client handshake reads the response over an
//! in-memory stream in chunks (bit 1: end of stream after the last chunk, else "would block"),
//! and a failure goes through the proxy's `ws::classify`. Invariants: a success only after the
//! whole `101` head was read (up to its empty line; bare-LF line ends count, as httparse takes
//! them); a status failure has a 3-digit code other than 101.
#![no_main]

use std::io::{self, Read, Write};

use libfuzzer_sys::fuzz_target;
use tg_ws_proxy::net::ws::{self, UpgradeError};
use tg_ws_proxy_fuzz::{chunks, Input};
use tungstenite::handshake::client::ClientHandshake;
use tungstenite::handshake::HandshakeError;
use tungstenite::http::HeaderValue;

/// RFC 6455 §1.3's sample key; its accept value is `s3pPLMBiTxaQ9kYGzzhZRbK+xOo=`.
const KEY: &str = "dGhlIHNhbXBsZSBub25jZQ==";

struct Mem<'a> {
    chunks: Vec<&'a [u8]>,
    next: usize,
    /// Bytes of the current chunk already read.
    off: usize,
    eof: bool,
    read: usize,
}

impl Read for Mem<'_> {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        let Some(c) = self.chunks.get(self.next) else {
            return if self.eof {
                Ok(0)
            } else {
                Err(io::ErrorKind::WouldBlock.into())
            };
        };
        let n = (c.len() - self.off).min(buf.len());
        buf[..n].copy_from_slice(&c[self.off..self.off + n]);
        self.off += n;
        if self.off == c.len() {
            self.next += 1;
            self.off = 0;
        }
        self.read += n;
        Ok(n)
    }
}

impl Write for Mem<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        Ok(buf.len())
    }
    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

/// Where the response head ends: after the first empty line, lines ending in CRLF or a bare LF
/// (which tungstenite's parser, httparse, accepts as RFC 9112 §2.2 allows).
fn head_end(data: &[u8]) -> Option<usize> {
    (0..data.len()).find_map(|i| match &data[i..] {
        [b'\n', b'\n', ..] => Some(i + 2),
        [b'\n', b'\r', b'\n', ..] => Some(i + 3),
        _ => None,
    })
}

fuzz_target!(|raw: &[u8]| {
    let Some(inp) = Input::parse(raw) else { return };
    let Ok(mut req) = ws::request("kws2.web.telegram.org", "/apiws", inp.mode & 1 != 0, None)
    else {
        panic!("our own request does not build");
    };
    req.headers_mut()
        .insert("Sec-WebSocket-Key", HeaderValue::from_static(KEY));
    let mem = Mem {
        chunks: chunks(inp.data, inp.seed),
        next: 0,
        off: 0,
        eof: inp.mode & 2 != 0,
        read: 0,
    };
    let mut mid = match ClientHandshake::start(mem, req, None) {
        Ok(m) => m,
        Err(e) => panic!("handshake start failed: {e:?}"),
    };
    // Each round either reads more or ends; the bound only guards against a stuck machine.
    for _ in 0..=inp.data.len() + 2 {
        match mid.handshake() {
            Ok((ws, resp)) => {
                assert_eq!(resp.status().as_u16(), 101);
                assert!(
                    head_end(inp.data).is_some_and(|end| end <= ws.get_ref().read),
                    "upgraded before the end of the response head"
                );
                return;
            }
            Err(HandshakeError::Interrupted(m)) => {
                let done = {
                    let s = m.get_ref().get_ref();
                    s.next >= s.chunks.len()
                };
                if done {
                    return; // would block with nothing more to read
                }
                mid = m;
            }
            Err(HandshakeError::Failure(e)) => {
                if let UpgradeError::Status { code, .. } = ws::classify(e) {
                    assert!((100..=999).contains(&code) && code != 101, "status {code}");
                }
                return;
            }
        }
    }
    panic!("handshake neither finished nor failed");
});
