//! `check`'s DNS over HTTPS (`--doh`): one blocking RFC 8484 GET per DoH try the resolver
//! queues, for the applet's own short-lived resolver loop (`resolve_all`). The applet blocks
//! anyway; the reactor never uses this (it runs DoH through `reactor::doh`). The request bytes,
//! the response parser and its limits are `route::cflist::http`'s, the query path and the
//! answer's check `dns::doh`'s (through the resolver); only the socket I/O is here.

use std::io::{self, Read, Write};
use std::net::{IpAddr, SocketAddr, TcpStream};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::config::Config;
use crate::dns::{doh, DohQuery};
use crate::route::cflist::http::{self, Outcome, Response};
use crate::route::cflist::Url;

/// The DoH servers of `cfg` with an address each: IP literals as is, names looked up once
/// over the plain resolver (`dns::oneshot`, the files `--hosts-file` / `--resolv-conf`); a name
/// that does not resolve keeps its reason (its tries then fail with it).
pub(super) fn servers(cfg: &Config) -> Vec<(Url, Result<IpAddr, String>)> {
    cfg.doh
        .iter()
        .take(crate::dns::MAX_DOH)
        .filter_map(|u| crate::route::cflist::parse_url(u).ok())
        .map(|u| {
            let ip = crate::dns::oneshot::resolve(
                &cfg.hosts_file,
                &cfg.resolv_conf,
                &u.host,
                cfg.doh_timeout,
            )
            .map_err(|e| format!("cannot resolve {}: {e}", u.host));
            (u.clone(), ip)
        })
        .collect()
}

/// Runs DoH try `q` against `server` (blocking, at most `timeout`): the `200` body of type
/// `application/dns-message`, or why not.
pub(super) fn exchange(
    server: &(Url, Result<IpAddr, String>),
    q: &DohQuery,
    tls: &Arc<rustls::ClientConfig>,
    timeout: Duration,
) -> Result<Vec<u8>, String> {
    let (base, ip) = server;
    let ip = ip.clone()?;
    let url = Url {
        path: doh::get_path(&base.path, &q.packet),
        ..base.clone()
    };
    let deadline = Instant::now() + timeout;
    let addr = SocketAddr::new(ip, url.port);
    let io = |e: io::Error| format!("{addr}: {e}");
    let sock = TcpStream::connect_timeout(&addr, timeout).map_err(io)?;
    let name = rustls::pki_types::ServerName::try_from(url.host.clone())
        .map_err(|e| format!("{}: {e}", url.host))?;
    let conn = rustls::ClientConnection::new(tls.clone(), name).map_err(|e| e.to_string())?;
    let mut tls = rustls::StreamOwned::new(conn, sock);
    let left = || deadline.saturating_duration_since(Instant::now());
    let step = |t: &mut rustls::StreamOwned<rustls::ClientConnection, TcpStream>| {
        let l = left().max(Duration::from_millis(1));
        t.sock
            .set_read_timeout(Some(l))
            .and_then(|_| t.sock.set_write_timeout(Some(l)))
    };
    step(&mut tls).map_err(io)?;
    tls.write_all(&http::request_accepting(&url, "", doh::MEDIA_TYPE))
        .map_err(io)?;
    tls.flush().map_err(io)?;
    let mut resp = Response::new(url.clone(), doh::MAX_BODY).requiring_type(doh::MEDIA_TYPE);
    let mut buf = [0u8; 4096];
    let outcome = loop {
        if left().is_zero() {
            return Err(format!(
                "no complete answer within {} ms",
                timeout.as_millis()
            ));
        }
        step(&mut tls).map_err(io)?;
        match tls.read(&mut buf) {
            Ok(0) => break resp.eof().map_err(|e| e.to_string())?,
            Ok(n) => {
                if let Some(o) = resp.feed(&buf[..n]).map_err(|e| e.to_string())? {
                    break o;
                }
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(io(e)),
        }
    };
    match outcome {
        Outcome::Body(b) => Ok(b),
        Outcome::Status(code) => Err(format!("{} answered HTTP {code}", url.host)),
        Outcome::Redirect(to) => Err(format!("redirect to {to} (not followed)")),
    }
}
