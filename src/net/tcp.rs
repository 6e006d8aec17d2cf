//! Non-blocking TCP connects, with `TCP_NODELAY` set, and an accepted connection's destination
//! before a NAT rewrite ([`original_dst`], for the mask loop check).
//!
//! A connect is started with [`start`]; completion is observed on the first writable edge with
//! [`check_connected`]. Deadlines live in the caller's timer wheel, not here; TCP keepalive is
//! set by `net::upstream::set_keepalive`. The freeze watch's two socket operations are here too:
//! reading the kernel's view of a connection ([`view`], `TCP_INFO`) and arming the short
//! keepalive that puts a probe in flight while a client waits ([`arm_probe`], with a probe
//! count that outlasts the watch's bound).

use std::io;
use std::net::SocketAddr;

use mio::net::TcpStream;

/// The kernel's view of a TCP connection (`TCP_INFO`), as the freeze watch (`relay::stall`)
/// needs it.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct TcpView {
    /// RTO retransmissions of the oldest unacknowledged segment plus keepalive probes sent, both
    /// since the last ACK (`tcpi_retransmits + tcpi_probes`).
    pub unanswered: u8,
    /// Milliseconds since the last ACK came (`tcpi_last_ack_recv`).
    pub last_ack_ms: u64,
    /// Bytes of ours are still in the socket, sent and unacknowledged or not sent yet
    /// (`tcpi_unacked` segments or `tcpi_notsent_bytes`, Linux 4.6+; false on older kernels).
    pub queued: bool,
    /// Bytes of ours the peer acknowledged so far (`tcpi_bytes_acked`, Linux 4.1+; 0 before).
    pub acked: u64,
}

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

/// The destination a connection accepted on `s` had before a NAT rule on this host rewrote it
/// (conntrack's `SO_ORIGINAL_DST`: an nftables or iptables `redirect` / `dnat` toward our
/// port). For a connection no rule rewrote it is the socket's own address; `None` when the
/// kernel has no conntrack entry for it (no NAT in use) or on another OS.
pub fn original_dst(s: &TcpStream) -> Option<SocketAddr> {
    original_dst_of(s)
}

#[cfg(target_os = "linux")]
fn original_dst_of(s: &TcpStream) -> Option<SocketAddr> {
    use std::os::fd::AsRawFd;
    // linux/netfilter_ipv4.h SO_ORIGINAL_DST and linux/netfilter_ipv6/ip6_tables.h
    // IP6T_SO_ORIGINAL_DST: both 80.
    const ORIGINAL_DST: libc::c_int = 80;
    // A dual-stack socket carrying IPv4 (a mapped local address) has an IPv4 conntrack entry.
    let v6 = match s.local_addr().ok()?.ip() {
        std::net::IpAddr::V6(ip) => ip.to_ipv4_mapped().is_none(),
        std::net::IpAddr::V4(_) => false,
    };
    // SAFETY: a zeroed sockaddr_storage is a valid value, the kernel writes at most `len` bytes
    // into it, and the fd is owned by `s` for the duration of the call.
    unsafe {
        let mut ss: libc::sockaddr_storage = std::mem::zeroed();
        let mut len = std::mem::size_of::<libc::sockaddr_storage>() as libc::socklen_t;
        let level = if v6 { libc::SOL_IPV6 } else { libc::SOL_IP };
        let rc = libc::getsockopt(
            s.as_raw_fd(),
            level,
            ORIGINAL_DST,
            (&mut ss as *mut libc::sockaddr_storage).cast(),
            &mut len,
        );
        if rc != 0 {
            return None;
        }
        sockaddr_to_std(&ss)
    }
}

#[cfg(not(target_os = "linux"))]
fn original_dst_of(_: &TcpStream) -> Option<SocketAddr> {
    None
}

/// A `sockaddr_in` / `sockaddr_in6` the kernel filled in, as a std address.
#[cfg(target_os = "linux")]
fn sockaddr_to_std(ss: &libc::sockaddr_storage) -> Option<SocketAddr> {
    use std::net::{Ipv4Addr, Ipv6Addr};
    match libc::c_int::from(ss.ss_family) {
        libc::AF_INET => {
            // SAFETY: ss_family says the storage holds a sockaddr_in, which it is large and
            // aligned enough for.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in>() };
            let ip = Ipv4Addr::from(u32::from_be(a.sin_addr.s_addr));
            Some(SocketAddr::from((ip, u16::from_be(a.sin_port))))
        }
        libc::AF_INET6 => {
            // SAFETY: as above, for sockaddr_in6.
            let a = unsafe { &*(ss as *const libc::sockaddr_storage).cast::<libc::sockaddr_in6>() };
            let ip = Ipv6Addr::from(a.sin6_addr.s6_addr);
            Some(SocketAddr::from((ip, u16::from_be(a.sin6_port))))
        }
        _ => None,
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

/// The kernel's view of `s` for the freeze watch (`relay::stall`): unanswered transmissions
/// (`tcpi_retransmits + tcpi_probes`: RTO retransmissions of the oldest unacknowledged segment
/// and keepalive or zero-window probes, both reset by any ACK), the time since the last ACK
/// (`tcpi_last_ack_recv`, ms), and whether bytes of ours are still on their way and how many
/// the peer took so far (an upload still going out). Linux `getsockopt(TCP_INFO)` (tcp(7)); the fields read are in
/// the struct's first 104 bytes, there since Linux 2.6. `None` if the call fails.
pub fn view(s: &TcpStream) -> Option<TcpView> {
    use std::os::fd::AsRawFd;
    // SAFETY: tcp_info is plain old data; all-zero is a valid value.
    let mut info: libc::tcp_info = unsafe { std::mem::zeroed() };
    let mut len = std::mem::size_of::<libc::tcp_info>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `info`, which outlives the call; the kernel
    // writes at most `len` bytes and updates `len`.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_INFO,
            (&mut info as *mut libc::tcp_info).cast(),
            &mut len,
        )
    };
    // The last ACK field ends at byte 60, tcpi_bytes_acked at 128, tcpi_notsent_bytes at 148;
    // an older kernel fills fewer (the rest stays zero).
    if rc != 0 || (len as usize) < 60 {
        return None;
    }
    let notsent = if (len as usize) >= 148 {
        info.tcpi_notsent_bytes
    } else {
        0
    };
    Some(TcpView {
        unanswered: info.tcpi_retransmits.saturating_add(info.tcpi_probes),
        last_ack_ms: u64::from(info.tcpi_last_ack_recv),
        queued: (len as usize) >= 148 && (info.tcpi_unacked > 0 || notsent > 0),
        acked: if (len as usize) >= 128 {
            info.tcpi_bytes_acked
        } else {
            0
        },
    })
}

/// Arms the freeze watch's keepalive on `s`: idle and interval one second (the kernel's
/// granularity), so a probe goes out at once when the socket has been quiet that long and every
/// second after; the kernel resets its count on any ACK. The socket's probe count
/// (`TCP_KEEPCNT`, the host's `net.ipv4.tcp_keepalive_probes` unless set) is raised to at least
/// `count`, so the kernel does not give the connection up (ETIMEDOUT) before the watch has
/// decided. Returns the count it had when it raised it (to give back with [`relax_probe`]).
/// Best effort.
pub fn arm_probe(s: &TcpStream, count: u32) -> Option<u32> {
    let ka = socket2::TcpKeepalive::new()
        .with_time(std::time::Duration::from_secs(1))
        .with_interval(std::time::Duration::from_secs(1));
    let _ = socket2::SockRef::from(s).set_tcp_keepalive(&ka);
    let had = keepalive_count(s)?;
    (had < count).then(|| {
        set_keepalive_count(s, count);
        had
    })
}

/// Undoes [`arm_probe`]: the configured keepalive (`idle`, as `net::upstream::set_keepalive`), or
/// none when `idle` is zero, and the probe count [`arm_probe`] raised (`count`: what the socket
/// had). Best effort.
pub fn relax_probe(s: &TcpStream, idle: std::time::Duration, count: Option<u32>) {
    if idle.is_zero() {
        let _ = socket2::SockRef::from(s).set_keepalive(false);
    } else {
        crate::net::upstream::set_keepalive(s, idle);
    }
    if let Some(n) = count {
        set_keepalive_count(s, n);
    }
}

/// `TCP_KEEPCNT` of `s` (the host's default while the socket sets none).
fn keepalive_count(s: &TcpStream) -> Option<u32> {
    use std::os::fd::AsRawFd;
    let mut v: libc::c_int = 0;
    let mut len = std::mem::size_of::<libc::c_int>() as libc::socklen_t;
    // SAFETY: the pointer and length describe `v`, which outlives the call.
    let rc = unsafe {
        libc::getsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT,
            (&mut v as *mut libc::c_int).cast(),
            &mut len,
        )
    };
    (rc == 0).then(|| u32::try_from(v).ok()).flatten()
}

/// Sets `TCP_KEEPCNT` of `s` to `n` (1..=127, the kernel's bounds). Best effort.
fn set_keepalive_count(s: &TcpStream, n: u32) {
    use std::os::fd::AsRawFd;
    let v = n.clamp(1, 127) as libc::c_int;
    // SAFETY: the pointer and length describe `v`, which outlives the call.
    unsafe {
        libc::setsockopt(
            s.as_raw_fd(),
            libc::IPPROTO_TCP,
            libc::TCP_KEEPCNT,
            (&v as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        );
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

    /// A connected pair on loopback.
    fn pair() -> (TcpStream, std::net::TcpStream) {
        let l = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let c = std::net::TcpStream::connect(l.local_addr().expect("addr")).expect("connect");
        let (s, _) = l.accept().expect("accept");
        (TcpStream::from_std(c), s)
    }

    #[test]
    fn a_live_connection_has_nothing_unanswered() {
        let (c, mut s) = pair();
        use std::io::{Read, Write};
        let mut c2 = c;
        c2.write_all(b"hello").expect("write");
        let mut b = [0u8; 5];
        s.read_exact(&mut b).expect("read");
        let v = view(&c2).expect("TCP_INFO on a TCP socket");
        assert_eq!(v.unanswered, 0);
        assert!(v.last_ack_ms < 5_000, "{v:?}");
        // The 5 bytes are acknowledged (the ACK may still be on its way on loopback); the
        // count includes the SYN.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(2);
        let mut v = v;
        while (v.queued || v.acked < 5) && std::time::Instant::now() < deadline {
            std::thread::yield_now();
            v = view(&c2).expect("TCP_INFO");
        }
        assert!(!v.queued && (5..=6).contains(&v.acked), "{v:?}");
        // The probe count is raised while armed and given back after.
        let had = keepalive_count(&c2).expect("TCP_KEEPCNT");
        assert_eq!(arm_probe(&c2, had + 5), Some(had));
        assert_eq!(keepalive_count(&c2), Some(had + 5));
        relax_probe(&c2, std::time::Duration::ZERO, Some(had));
        assert_eq!(keepalive_count(&c2), Some(had));
        assert_eq!(arm_probe(&c2, 1), None, "never lowered");
        assert_eq!(keepalive_count(&c2), Some(had));
        relax_probe(&c2, std::time::Duration::from_secs(30), None);
        assert_eq!(keepalive_count(&c2), Some(had));
    }
}
