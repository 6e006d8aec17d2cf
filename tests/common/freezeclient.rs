//! What real clients do while a download does not come (issue 19 §1), as one client connection
//! through the proxy: ask for 256 KiB ([`PACKETS`] × [`SIZE`]) and then wait, give up, or
//! re-ask, recording whether it all arrived and when the proxy ended the connection. Shared by
//! tests/freeze.rs and the `make bench-freeze` driver (examples/bench_freeze.rs includes this
//! file by path, beside its own copy of `fakedc`): only std and the `tg_ws_proxy` lib.
#![allow(dead_code)]

use std::io::ErrorKind;
use std::net::SocketAddr;
use std::time::{Duration, Instant};

use tg_ws_proxy::applet::probe::{ClientOptions, MtClient};
use tg_ws_proxy::mtproto::obfs2::{Secret, Tag};
use tg_ws_proxy::rng::Rng;

use super::fakedc::{bulk_request, BULK_KEY};

/// The download: packets × size (256 KiB, far past a 16 KiB freeze).
pub const PACKETS: u32 = 64;
pub const SIZE: u32 = 4096;

/// What a client does while its download does not come.
#[derive(Clone, Copy, Debug)]
pub enum Client {
    /// Asks once and waits up to this long.
    AskOnce(Duration),
    /// Asks once and closes after this long without the whole reply.
    GivesUp(Duration),
    /// Asks, then re-asks (a small request) every `0` while waiting, up to `1` in all.
    ReAsks(Duration, Duration),
}

/// What one client connection saw.
#[derive(Debug)]
pub struct Attempt {
    /// The whole download arrived.
    pub complete: bool,
    /// Download packets received.
    pub got: u32,
    /// When the last byte came (or the request went), and when the proxy ended the connection
    /// (if it did).
    pub last_byte: Instant,
    pub ended_by_proxy: Option<Instant>,
}

impl Attempt {
    /// Time from the last byte to the proxy's close, if it closed.
    pub fn close_after_last_byte(&self) -> Option<Duration> {
        self.ended_by_proxy.map(|t| t - self.last_byte)
    }
}

/// One client connection to the proxy at `proxy` (secret `secret`, DC 2, intermediate)
/// behaving as `how`. Errors: the connection or its request failed.
pub fn attempt(proxy: SocketAddr, secret: &str, how: Client) -> Result<Attempt, String> {
    let opts = ClientOptions {
        addr: proxy,
        secret: Some(Secret::parse(secret).map_err(|e| format!("secret: {e}"))?),
        tag: Tag::Intermediate,
        dc: 2,
        timeout: Duration::from_secs(5),
    };
    let mut rng = Rng::new().map_err(|e| format!("randomness: {e}"))?;
    let mut c = MtClient::connect_with(&opts, &mut rng).map_err(|e| format!("connect: {e}"))?;
    c.send_packet(&bulk_request(PACKETS, SIZE))
        .map_err(|e| format!("request: {e}"))?;
    let start = Instant::now();
    let (limit, every) = match how {
        Client::AskOnce(d) | Client::GivesUp(d) => (d, None),
        Client::ReAsks(every, d) => (d, Some(every)),
    };
    let mut a = Attempt {
        complete: false,
        got: 0,
        last_byte: start,
        ended_by_proxy: None,
    };
    let mut next_ask = every.map(|e| start + e);
    let end = start + limit;
    while Instant::now() < end {
        let until = next_ask.map_or(end, |t| t.min(end));
        match c.recv_packet_until(until) {
            Ok(pk) => {
                a.last_byte = Instant::now();
                // Re-asks are echoed when they get through; only download packets count.
                if pk.starts_with(&BULK_KEY) {
                    a.got += 1;
                }
                if a.got == PACKETS {
                    a.complete = true;
                    return Ok(a);
                }
            }
            Err(e) if e.kind() == ErrorKind::TimedOut => {
                if let (Some(t), Some(e)) = (next_ask, every) {
                    if Instant::now() >= t {
                        let mut ping = b"PINGPING".to_vec();
                        ping.extend_from_slice(&[0x42; 8]);
                        if c.send_packet(&ping).is_err() {
                            a.ended_by_proxy = Some(Instant::now());
                            return Ok(a);
                        }
                        next_ask = Some(t + e);
                    }
                }
            }
            Err(_) => {
                a.ended_by_proxy = Some(Instant::now());
                return Ok(a);
            }
        }
    }
    Ok(a)
}

/// `n` attempts `gap` apart (from one's end to the next's start), or until one completes when
/// `until_complete`. Errors: an attempt could not even start.
pub fn attempts(
    proxy: SocketAddr,
    secret: &str,
    how: Client,
    n: usize,
    gap: Duration,
    until_complete: bool,
) -> Result<Vec<Attempt>, String> {
    let mut out = Vec::new();
    for i in 0..n {
        if i > 0 {
            pace(gap);
        }
        let a = attempt(proxy, secret, how)?;
        let done = a.complete;
        out.push(a);
        if done && until_complete {
            break;
        }
    }
    Ok(out)
}

/// Lets `d` pass: the client's own rhythm, not a wait for a condition.
fn pace(d: Duration) {
    let end = Instant::now() + d;
    while Instant::now() < end {
        std::thread::sleep(end.saturating_duration_since(Instant::now()));
    }
}
