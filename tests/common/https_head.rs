//! The server side of one HTTPS request in the rig's small fake web servers (the shared CF list
//! server, the DoH servers): the TLS accept over a blocking socket and the request head read
//! up to its blank line. Owns nothing else; each fake answers in its own way.

use std::io::Read;
use std::net::TcpStream;
use std::sync::Arc;
use std::time::Duration;

/// The TLS stream a fake web server answers on.
pub type Tls = rustls::StreamOwned<rustls::ServerConnection, TcpStream>;

/// Accepts TLS on `sock` with `cfg` (20 s read timeout) and reads the request head: the
/// stream and the head as text (request line and headers), or `None` if the peer closed or
/// failed first.
pub fn accept(sock: TcpStream, cfg: &Arc<rustls::ServerConfig>) -> Option<(Tls, String)> {
    let _ = sock.set_read_timeout(Some(Duration::from_secs(20)));
    let conn = rustls::ServerConnection::new(cfg.clone()).ok()?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let mut head = Vec::new();
    let mut b = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        match tls.read(&mut b) {
            Ok(0) | Err(_) => return None,
            Ok(n) => head.extend_from_slice(&b[..n]),
        }
    }
    Some((tls, String::from_utf8_lossy(&head).to_string()))
}
