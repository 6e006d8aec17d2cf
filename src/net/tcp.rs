//! Non-blocking TCP connects, with `TCP_NODELAY` set.
//!
//! A connect is started with [`start`]; completion is observed on the first writable edge with
//! [`check_connected`]. Deadlines live in the caller's timer wheel, not here; TCP keepalive is
//! set by `net::dial::set_keepalive`.

use std::io;
use std::net::SocketAddr;

use mio::net::TcpStream;

/// Result of looking at a socket whose connect was started.
#[derive(Debug)]
pub enum ConnectState {
    /// The three-way handshake finished.
    Connected,
    /// Still in progress: wait for the next writable edge.
    Pending,
    /// The connect failed (refused, unreachable, reset…).
    Failed(io::Error),
}

/// Starts a non-blocking connect to `addr`, with `TCP_NODELAY` set.
///
/// Errors: the socket could not be created (e.g. `EMFILE`) or the address is unusable.
pub fn start(addr: SocketAddr) -> io::Result<TcpStream> {
    let s = TcpStream::connect(addr)?;
    // NODELAY on a connecting socket can fail on some kernels; it is retried after connect.
    let _ = s.set_nodelay(true);
    Ok(s)
}

/// Checks a connecting socket after a writable (or error) edge.
pub fn check_connected(s: &TcpStream) -> ConnectState {
    match s.take_error() {
        Ok(Some(e)) | Err(e) => return ConnectState::Failed(e),
        Ok(None) => {}
    }
    match s.peer_addr() {
        Ok(_) => {
            let _ = s.set_nodelay(true);
            ConnectState::Connected
        }
        Err(e) if e.kind() == io::ErrorKind::NotConnected => ConnectState::Pending,
        Err(e) if e.raw_os_error() == Some(libc_einprogress()) => ConnectState::Pending,
        Err(e) => ConnectState::Failed(e),
    }
}

/// `EINPROGRESS` is 115 on Linux for every architecture we ship except MIPS (150).
fn libc_einprogress() -> i32 {
    if cfg!(any(target_arch = "mips", target_arch = "mips64")) {
        150
    } else {
        115
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::time::{Duration, Instant};

    #[test]
    fn connect_to_loopback_listener_completes() {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let s = start(l.local_addr().unwrap()).unwrap();
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match check_connected(&s) {
                ConnectState::Connected => break,
                ConnectState::Pending => assert!(Instant::now() < deadline, "connect stuck"),
                ConnectState::Failed(e) => panic!("connect failed: {e}"),
            }
            std::thread::yield_now();
        }
    }

    #[test]
    fn connect_to_closed_port_fails() {
        let addr = {
            let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
            l.local_addr().unwrap()
        };
        let s = match start(addr) {
            Ok(s) => s,
            Err(_) => return, // refused synchronously: also a failure, as wanted
        };
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            match check_connected(&s) {
                ConnectState::Failed(_) => break,
                ConnectState::Pending => assert!(Instant::now() < deadline, "no failure seen"),
                ConnectState::Connected => panic!("connected to a closed port"),
            }
            std::thread::yield_now();
        }
    }
}
