//! The Cloudflare Worker look-alike behind [`FakeDc::start_worker`](super::FakeDc::start_worker):
//! TLS, one hand-parsed HTTP request (so non-upgrades get the Worker's 426), a 101 without a
//! subprotocol, then a byte pipe between WS messages and a TCP connection to `dst`
//! (docs/protocol.md §4.2). It does not decode MTProto: it only counts what it saw in the shared
//! [`State`](super::State). The pipe polls the WS side every millisecond, so bytes toward the
//! client wait at most ~1 ms. Part of fakedc.rs (loaded from it by `#[path]`); same rules: only
//! std, rustls, tungstenite and socket2, test code, loopback only.

use std::io::{self, Read, Write};
use std::net::{IpAddr, Shutdown, SocketAddr, TcpStream};
use std::sync::mpsc::{self, Receiver, RecvTimeoutError};
use std::sync::Arc;
use std::time::Duration;

use rustls::ServerConfig;
use tungstenite::protocol::{Role, WebSocketConfig};
use tungstenite::{Message, WebSocket};

use super::{close_tls, query_param, Fault, Shared, TlsStream, READ_CHUNK};

/// Longest request head accepted.
const MAX_HEAD: usize = 16 * 1024;
/// Read timeout on the client socket during the pipe: how often the loop looks at TCP data.
const POLL: Duration = Duration::from_millis(1);
/// Bound on the TCP connect to `dst`.
const DST_CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// The parts of the request the Worker looks at.
struct Head {
    path: String,
    query: String,
    host: Option<String>,
    upgrade: bool,
    key: Option<String>,
    protocol: Option<String>,
}

/// Serves one accepted connection (see `FakeDc::start_worker`).
pub(super) fn serve(shared: &Shared, sock: TcpStream, cfg: Arc<ServerConfig>, fault: Fault) {
    if matches!(fault, Fault::Refuse) {
        return;
    }
    let Some(mut tls) = super::accept_tls(shared, sock, cfg, "worker TLS handshake") else {
        return;
    };
    let Some((head, rest)) = read_head(&mut tls) else {
        return;
    };
    let dst = query_param(&head.query, "dst").map(str::to_string);
    {
        let mut s = shared.lock();
        s.requests += 1;
        s.hosts.push(head.host.clone().unwrap_or_default());
        s.paths.push(head.path.clone());
        s.protocols.push(head.protocol.clone());
        s.queries.push(head.query.clone());
        if let Some(d) = &dst {
            s.dsts.push(d.clone());
        }
    }
    let delay = shared.lock().delay;
    if !delay.is_zero() && !shared.pause(delay) {
        return;
    }
    if !head.upgrade {
        return refuse(&mut tls, 426, None);
    }
    if head.path != "/apiws" {
        return refuse(&mut tls, 404, None);
    }
    let (Some(key), Some(dst)) = (head.key.as_deref(), dst.as_deref().and_then(parse_dst)) else {
        return refuse(&mut tls, 400, None);
    };
    match fault {
        Fault::HttpStatus(code) => return refuse(&mut tls, code, None),
        Fault::HttpRetryAfter { status, secs } => return refuse(&mut tls, status, Some(secs)),
        _ => {}
    }
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    let resp = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Accept: {accept}\r\n\r\n"
    );
    // Counted before the 101 goes out, so a client that saw it also sees the count.
    shared.lock().upgrades += 1;
    if tls
        .write_all(resp.as_bytes())
        .and_then(|_| tls.flush())
        .is_err()
    {
        return;
    }
    if matches!(fault, Fault::CloseAfterUpgrade) {
        return close_tls(&mut tls);
    }
    let ws_cfg = WebSocketConfig::default()
        .max_frame_size(None)
        .max_message_size(Some(4 << 20));
    let mut ws = WebSocket::from_partially_read(tls, rest, Role::Server, Some(ws_cfg));
    if matches!(fault, Fault::SilentAfterUpgrade) {
        let _ = ws.get_ref().sock.set_read_timeout(None);
        while ws.read().is_ok() {}
        return close_tls(ws.get_mut());
    }
    if matches!(fault, Fault::Garbage) {
        return garbage(shared, &mut ws);
    }
    let tcp = match TcpStream::connect_timeout(&dst, DST_CONNECT_TIMEOUT) {
        Ok(t) => t,
        Err(_) => {
            let _ = ws.close(None);
            let _ = ws.flush();
            return close_tls(ws.get_mut());
        }
    };
    shared.lock().dst_connects += 1;
    pipe(shared, &mut ws, tcp, fault);
    let _ = ws.close(None);
    let _ = ws.flush();
    close_tls(ws.get_mut());
}

/// [`Fault::Garbage`]: well-formed binary frames of random bytes (64 of them, unless the
/// proxy hangs up first), then it stays, reading and dropping, until the proxy hangs up: like a
/// Worker that streams junk, it never ends the session itself.
fn garbage(shared: &Shared, ws: &mut WebSocket<TlsStream>) {
    shared.lock().garbage += 1;
    let mut rng = tg_ws_proxy::rng::Rng::from_seed([9; 48]);
    let _ = ws
        .get_ref()
        .sock
        .set_write_timeout(Some(Duration::from_secs(10)));
    for _ in 0..64 {
        let mut junk = vec![0u8; 4096];
        rng.fill(&mut junk);
        if ws.send(Message::binary(junk)).is_err() {
            return;
        }
    }
    let _ = ws.get_ref().sock.set_read_timeout(None);
    let mut sink = [0u8; 4096];
    while matches!(ws.get_mut().read(&mut sink), Ok(n) if n > 0) {}
}

/// `IP` (→ port 443) or `IP:PORT`; IPv6 as `[IP]:PORT` or bare.
fn parse_dst(v: &str) -> Option<SocketAddr> {
    if let Ok(a) = v.parse::<SocketAddr>() {
        return Some(a);
    }
    let ip = v.trim_start_matches('[').trim_end_matches(']');
    ip.parse::<IpAddr>().ok().map(|ip| SocketAddr::new(ip, 443))
}

/// Reads up to the blank line; returns the parsed head and any bytes read past it.
fn read_head(tls: &mut TlsStream) -> Option<(Head, Vec<u8>)> {
    let mut buf = Vec::new();
    let mut chunk = [0u8; 2048];
    let end = loop {
        if let Some(i) = buf.windows(4).position(|w| w == b"\r\n\r\n") {
            break i + 4;
        }
        if buf.len() > MAX_HEAD {
            return None;
        }
        match tls.read(&mut chunk) {
            Ok(0) | Err(_) => return None,
            Ok(n) => buf.extend_from_slice(&chunk[..n]),
        }
    };
    let text = String::from_utf8_lossy(&buf[..end]).into_owned();
    let mut lines = text.split("\r\n");
    let target = lines.next()?.split(' ').nth(1)?.to_string();
    let (path, query) = match target.split_once('?') {
        Some((p, q)) => (p.to_string(), q.to_string()),
        None => (target, String::new()),
    };
    let mut head = Head {
        path,
        query,
        host: None,
        upgrade: false,
        key: None,
        protocol: None,
    };
    for line in lines {
        let Some((name, value)) = line.split_once(':') else {
            continue;
        };
        let value = value.trim().to_string();
        match name.trim().to_ascii_lowercase().as_str() {
            "host" => head.host = Some(value),
            "upgrade" => head.upgrade = value.eq_ignore_ascii_case("websocket"),
            "sec-websocket-key" => head.key = Some(value),
            "sec-websocket-protocol" => head.protocol = Some(value),
            _ => {}
        }
    }
    Some((head, buf[end..].to_vec()))
}

/// Answers a refused request and closes.
fn refuse(tls: &mut TlsStream, code: u16, retry_after: Option<u32>) {
    let mut r = format!("HTTP/1.1 {code} Refused\r\nContent-Length: 0\r\nConnection: close\r\n");
    if let Some(secs) = retry_after {
        r.push_str(&format!("Retry-After: {secs}\r\n"));
    }
    if matches!(code, 301 | 302 | 303 | 307 | 308) {
        r.push_str("Location: https://workers.dev/\r\n");
    }
    r.push_str("\r\n");
    let _ = tls.write_all(r.as_bytes()).and_then(|_| tls.flush());
    close_tls(tls);
}

/// The tunnel: WS messages → `tcp`, `tcp` reads → WS messages, until either side ends.
/// A helper thread reads `tcp` into a channel; this thread polls the WS side.
fn pipe(shared: &Shared, ws: &mut WebSocket<TlsStream>, tcp: TcpStream, fault: Fault) {
    let _ = tcp.set_nodelay(true);
    let Ok(mut reader) = tcp.try_clone() else {
        return;
    };
    let mut writer = tcp;
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let pump = std::thread::spawn(move || {
        let mut buf = vec![0u8; READ_CHUNK];
        loop {
            match reader.read(&mut buf) {
                Ok(0) | Err(_) => return, // dropping `tx` tells the loop
                Ok(n) => {
                    if tx.send(buf[..n].to_vec()).is_err() {
                        return;
                    }
                }
            }
        }
    });
    let _ = ws.get_ref().sock.set_read_timeout(Some(POLL));
    let (mut bytes_in, mut bytes_out) = (0usize, 0usize);
    'run: loop {
        // TCP → WS: forward whatever the pump has.
        if !drain(shared, ws, &rx, &mut bytes_out, fault) {
            break;
        }
        // WS → TCP.
        match ws.read() {
            Ok(Message::Binary(b)) => {
                bytes_in += b.len();
                {
                    let mut s = shared.lock();
                    s.bytes_in += b.len() as u64;
                    s.raw_messages.push(b.len());
                }
                if writer.write_all(&b).is_err() {
                    break 'run;
                }
                if matches!(fault, Fault::CloseAfterBytes(n) if bytes_in >= n) {
                    break 'run;
                }
            }
            Ok(Message::Text(_)) => shared.violation("worker: text WS message".to_string()),
            Ok(Message::Ping(_)) => {
                shared.lock().pings += 1;
                if fault == Fault::CloseOnPing {
                    break 'run;
                }
            }
            Ok(Message::Close(_)) => break,
            Ok(_) => {}
            Err(tungstenite::Error::Io(e))
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) => {}
            Err(_) => break,
        }
    }
    let _ = writer.shutdown(Shutdown::Both);
    let _ = pump.join();
}

/// Sends every queued TCP chunk as one binary message; false = the pipe must end (TCP side
/// closed, a send failed, or `CloseAfterSent`).
fn drain(
    shared: &Shared,
    ws: &mut WebSocket<TlsStream>,
    rx: &Receiver<Vec<u8>>,
    bytes_out: &mut usize,
    fault: Fault,
) -> bool {
    loop {
        let chunk = match rx.recv_timeout(Duration::ZERO) {
            Ok(c) => c,
            Err(RecvTimeoutError::Timeout) => return true,
            Err(RecvTimeoutError::Disconnected) => return false,
        };
        let mut chunk = chunk;
        if let Fault::FreezeAfterBytes(limit) = fault {
            if *bytes_out >= limit {
                continue; // frozen: read and discard, never answer, never close
            }
            // The message that crosses the limit is cut there: a reply half-delivered.
            chunk.truncate(limit - *bytes_out);
        }
        let n = chunk.len();
        if matches!(fault, Fault::StallAfterSent(limit) if *bytes_out >= limit) {
            continue; // frozen: read and discard, never answer, never close
        }
        if ws.send(Message::binary(chunk)).is_err() {
            return false;
        }
        *bytes_out += n;
        shared.lock().bytes_out += n as u64;
        if matches!(fault, Fault::CloseAfterSent(limit) if *bytes_out >= limit) {
            return false;
        }
    }
}
