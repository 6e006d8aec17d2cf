//! The only tungstenite user: the WebSocket upgrade (RFC 6455 §4) driven non-blockingly.
//!
//! [`Upgrade::start`] writes the HTTP upgrade request through a [`TlsStream`], with the
//! `Sec-WebSocket-Key` the caller made from its own generator ([`key`]);
//! [`Upgrade::advance`] is called on every readiness edge until the `101` is verified
//! (accept key, requested subprotocol echoed). After that the stream is handed back and the
//! relay speaks frames itself through `wslink` — tungstenite never holds a message in memory.

use std::io;

use tungstenite::client::IntoClientRequest;
use tungstenite::handshake::client::{ClientHandshake, Request};
use tungstenite::handshake::{HandshakeError, MidHandshake};
use tungstenite::http::HeaderValue;

use crate::net::outbound::http::base64;
use crate::net::tls::TlsStream;
use crate::rng::Rng;

/// How an upgrade failed. Keeps the failure classes the health logic needs apart.
#[derive(Debug)]
pub enum UpgradeError {
    /// The server answered with a non-101 HTTP status; `retry_after` is the `Retry-After`
    /// header in seconds when present and numeric.
    Status { code: u16, retry_after: Option<u32> },
    /// Socket or TLS failure (see `net::tls::is_tls_error`).
    Io(io::Error),
    /// The server answered 101 but broke the protocol (bad accept key, missing subprotocol…),
    /// or closed before a complete response.
    Protocol(String),
}

impl std::fmt::Display for UpgradeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            UpgradeError::Status { code, .. } => write!(f, "HTTP {code}"),
            UpgradeError::Io(e) => write!(f, "{e}"),
            UpgradeError::Protocol(s) => write!(f, "upgrade: {s}"),
        }
    }
}

/// Progress of an upgrade.
pub enum Step {
    /// Upgraded: the stream is ready for frames.
    Done(Box<TlsStream>),
    /// Waiting for the socket; call `advance` again on the next edge.
    Pending,
    /// Failed; the stream is dropped.
    Failed(UpgradeError),
}

/// An upgrade in progress (owns the TLS stream until it finishes).
pub struct Upgrade {
    mid: Option<MidHandshake<ClientHandshake<TlsStream>>>,
}

impl Upgrade {
    /// Starts `GET <path>` on `host` (used for the URI and `Host`), asking for the `binary`
    /// subprotocol when `subprotocol` is true (Telegram's front and CF-proxied domains want it;
    /// a Worker does not echo it). `origin` adds an `Origin` header. `key` is the
    /// `Sec-WebSocket-Key` ([`key`]); the `101` must carry its accept value.
    pub fn start(
        mut stream: TlsStream,
        host: &str,
        path: &str,
        subprotocol: bool,
        origin: Option<&str>,
        key: &str,
    ) -> Result<Upgrade, UpgradeError> {
        let mut req = request(host, path, subprotocol, origin)?;
        let key = HeaderValue::from_str(key)
            .map_err(|_| UpgradeError::Protocol(format!("bad key {key:?}")))?;
        req.headers_mut().insert("Sec-WebSocket-Key", key);
        // Bytes the front sends right after its 101 must reach the relay, not tungstenite's
        // read buffer (dropped with it by `into_inner`).
        stream.stop_at_head();
        let mid = ClientHandshake::start(stream, req, None)
            .map_err(|e| UpgradeError::Protocol(e.to_string()))?;
        Ok(Upgrade { mid: Some(mid) })
    }

    /// Drives the handshake as far as the socket allows.
    pub fn advance(&mut self) -> Step {
        let Some(mid) = self.mid.take() else {
            return Step::Failed(UpgradeError::Protocol("upgrade already finished".into()));
        };
        match mid.handshake() {
            Ok((ws, _response)) => Step::Done(Box::new(ws.into_inner())),
            Err(HandshakeError::Interrupted(mid)) => {
                self.mid = Some(mid);
                Step::Pending
            }
            Err(HandshakeError::Failure(e)) => Step::Failed(classify(e)),
        }
    }

    /// The socket, for readiness bookkeeping (`None` once finished).
    pub fn sock(&mut self) -> Option<&mut mio::net::TcpStream> {
        self.mid.as_mut().map(|m| &mut m.get_mut().get_mut().sock)
    }
}

/// A `Sec-WebSocket-Key` (RFC 6455 §4.1): 16 bytes of `rng`, base64-encoded (24 characters).
pub fn key(rng: &mut Rng) -> String {
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    base64(&nonce)
}

/// The upgrade request [`Upgrade::start`] sends (its key replaced there by the caller's) (public for the fuzz target that drives
/// tungstenite's response parsing over memory, fuzz/fuzz_targets/ws_upgrade.rs).
pub fn request(
    host: &str,
    path: &str,
    subprotocol: bool,
    origin: Option<&str>,
) -> Result<Request, UpgradeError> {
    let url = format!("wss://{host}{path}");
    let mut req = url
        .as_str()
        .into_client_request()
        .map_err(|e| UpgradeError::Protocol(format!("bad request {url}: {e}")))?;
    if subprotocol {
        req.headers_mut()
            .insert("Sec-WebSocket-Protocol", HeaderValue::from_static("binary"));
    }
    if let Some(o) = origin {
        if let Ok(v) = HeaderValue::from_str(o) {
            req.headers_mut().insert("Origin", v);
        }
    }
    Ok(req)
}

/// Sorts a failed handshake into the classes the health logic needs: a non-101 status (with a
/// numeric `Retry-After`), an I/O error, or a protocol violation (public for the fuzz target).
pub fn classify(e: tungstenite::Error) -> UpgradeError {
    match e {
        tungstenite::Error::Http(resp) => {
            let retry_after = resp
                .headers()
                .get("retry-after")
                .and_then(|v| v.to_str().ok())
                .and_then(|s| s.trim().parse::<u32>().ok());
            UpgradeError::Status {
                code: resp.status().as_u16(),
                retry_after,
            }
        }
        tungstenite::Error::Io(e) => UpgradeError::Io(e),
        other => UpgradeError::Protocol(other.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Issue 20: the WebSocket key comes from the caller's generator (RFC 6455 §4.1: 16 random
    /// bytes, base64), so a seeded one gives a known key and the upgrade request carries it.
    #[test]
    fn the_key_is_sixteen_bytes_of_the_generator_given() {
        let mut bytes = [0u8; 16];
        Rng::from_seed([5; 48]).fill(&mut bytes);
        let key = key(&mut Rng::from_seed([5; 48]));
        assert_eq!(key, base64(&bytes));
        assert_eq!(key.len(), 24);
        assert_ne!(key, super::key(&mut Rng::from_seed([6; 48])));
    }
}
