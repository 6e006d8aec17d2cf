//! A blocking one-shot A lookup for applets (`genkey --ee` checks that its domain resolves):
//! the same hosts file and resolv.conf rules as the reactor's resolver (`conf`), the same wire
//! code (`wire`), over a std UDP socket with a read timeout. Never used by the reactor (it
//! blocks); no cache, no retries beyond one try per nameserver.

use std::fs;
use std::io;
use std::net::{IpAddr, Ipv4Addr, Ipv6Addr, SocketAddr, UdpSocket};
use std::path::Path;
use std::time::{Duration, Instant};

use super::conf;
use super::wire::{self, RCODE_NOERROR, RCODE_NXDOMAIN, TYPE_A};
use crate::rng::Rng;

/// Datagrams read per nameserver while waiting for the answer (others are ignored).
const MAX_DATAGRAMS: usize = 16;

/// Resolves `name` once: an IP literal as is; else the hosts file at `hosts_path`; else one A
/// query to each nameserver of `resolv_path` in turn (127.0.0.1:53 when it names none), each
/// waiting at most `timeout`. Missing files count as empty, as in the resolver. Errors: a
/// one-line reason (invalid name, `NXDOMAIN`, `no A record`, every nameserver's failure).
pub fn resolve(
    hosts_path: &Path,
    resolv_path: &Path,
    name: &str,
    timeout: Duration,
) -> Result<IpAddr, String> {
    if let Ok(ip) = name
        .trim_start_matches('[')
        .trim_end_matches(']')
        .parse::<IpAddr>()
    {
        return Ok(ip);
    }
    let name = conf::canonical_name(name)?;
    let hosts = fs::read_to_string(hosts_path)
        .map(|t| conf::parse_hosts(&t))
        .unwrap_or_default();
    if let Some((_, ip)) = hosts.iter().find(|(n, _)| *n == name) {
        return Ok(*ip);
    }
    let mut servers = fs::read_to_string(resolv_path)
        .map(|t| conf::parse_resolv(&t))
        .unwrap_or_default();
    if servers.is_empty() {
        servers.push(SocketAddr::from((Ipv4Addr::LOCALHOST, 53)));
    }
    let mut rng = Rng::new().map_err(|e| format!("randomness: {e}"))?;
    let mut why = Vec::new();
    for server in servers {
        match ask(server, &name, timeout, &mut rng) {
            Ok(Some(ip)) => return Ok(ip),
            Ok(None) => return Err("no A record".into()),
            Err(e) if e == "NXDOMAIN" => return Err(e),
            Err(e) => why.push(format!("{server}: {e}")),
        }
    }
    Err(why.join("; "))
}

/// One query to `server`: `Ok(Some(ip))`, `Ok(None)` for an answer without an address,
/// `Err` for NXDOMAIN, another RCODE, a socket error or no answer within `timeout`.
fn ask(
    server: SocketAddr,
    name: &str,
    timeout: Duration,
    rng: &mut Rng,
) -> Result<Option<IpAddr>, String> {
    let bind = if server.is_ipv6() {
        SocketAddr::from((Ipv6Addr::UNSPECIFIED, 0))
    } else {
        SocketAddr::from((Ipv4Addr::UNSPECIFIED, 0))
    };
    let sock = UdpSocket::bind(bind).map_err(|e| e.to_string())?;
    sock.connect(server).map_err(|e| e.to_string())?;
    let id = rng.u32() as u16;
    let query = wire::encode_query(id, name, TYPE_A).map_err(|e| e.to_string())?;
    sock.send(&query).map_err(|e| e.to_string())?;
    let deadline = Instant::now() + timeout;
    let mut buf = [0u8; 1500];
    for _ in 0..MAX_DATAGRAMS {
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() {
            break;
        }
        sock.set_read_timeout(Some(left))
            .map_err(|e| e.to_string())?;
        let n = match sock.recv(&mut buf) {
            Ok(n) => n,
            Err(e)
                if matches!(
                    e.kind(),
                    io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
                ) =>
            {
                break
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e.to_string()),
        };
        let Ok(r) = wire::parse_response(&buf[..n]) else {
            continue;
        };
        if r.id != id || r.qname != name || r.qtype != TYPE_A {
            continue;
        }
        return match r.rcode {
            RCODE_NOERROR => Ok(r.addrs.first().copied()),
            RCODE_NXDOMAIN => Err("NXDOMAIN".into()),
            c => Err(format!("rcode {c}")),
        };
    }
    Err(format!("no answer within {} ms", timeout.as_millis()))
}
