//! The pit bench's shared-pool scenario (issue 11): the direct tier and raw TCP both
//! black-holed, and only the shared Cloudflare domain list's domains work. The rig: a fake HTTPS
//! list server (tests/data/server.pem, name `list.example.com`) serving an encoded list of three
//! made-up pool domains, one fake CF front (tests/data/pool.pem) behind all three, a hosts file
//! mapping every name to 127.0.0.1, and a cache file already holding the list (a reboot with
//! the last list on disk: the routes exist from the first client on; the fetch then refreshes
//! it). Loopback only.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener};
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use tg_ws_proxy::route::cflist::{cache_text, encode_entry};

use crate::blackhole::BlackHole;
use crate::fakedc::{tls_config_for, DcConfig, FakeDc, SERVER_KEY, SERVER_PEM};

const LIST_HOST: &str = "list.example.com";
const POOL: [&str; 3] = [
    "pool-alpha-test.co.uk",
    "pool-bravo-test.co.uk",
    "pool-charlie-test.co.uk",
];

/// The scenario's peers, kept alive for its run.
pub struct PoolRig {
    /// The fake CF front every pool domain reaches.
    pub front: FakeDc,
    /// Raw TCP's black hole.
    pub tcp_hole: BlackHole,
    list_addr: SocketAddr,
    hosts: String,
    cache: String,
}

impl PoolRig {
    /// Starts the peers and writes the hosts and cache files into `dir`.
    pub fn start(dir: &Path) -> Result<PoolRig, String> {
        let front = FakeDc::start_tls_ws_with_cert(
            DcConfig::default(),
            include_bytes!("../../tests/data/pool.pem"),
            include_bytes!("../../tests/data/pool.key"),
        );
        let tcp_hole = BlackHole::try_new().map_err(|e| format!("black hole: {e}"))?;
        let list_addr = serve_list()?;
        let mut hosts = format!("127.0.0.1 {LIST_HOST}\n");
        for d in POOL {
            hosts.push_str(&format!("127.0.0.1 kws2.{d}\n"));
        }
        let hosts_path = dir.join("pool-hosts");
        let cache_path = dir.join("pool-cache.txt");
        let names: Vec<String> = POOL.iter().map(|s| s.to_string()).collect();
        std::fs::write(&hosts_path, hosts)
            .and_then(|()| std::fs::write(&cache_path, cache_text(&names)))
            .map_err(|e| format!("pool rig files: {e}"))?;
        Ok(PoolRig {
            front,
            tcp_hole,
            list_addr,
            hosts: hosts_path.display().to_string(),
            cache: cache_path.display().to_string(),
        })
    }

    /// Flags after the common ones (later flags win): ws → cfproxy → tcp, tcp black-holed, the
    /// list on the fake server, its cache, the pool on the front's port.
    pub fn args(&self) -> Vec<String> {
        [
            "--tier-order",
            "ws,cfproxy,tcp",
            "--tcp-dc-ip",
            &format!("2:{}", self.tcp_hole.addr()),
            "--hosts-file",
            &self.hosts,
            "--cf-domain-list",
            &format!("https://{LIST_HOST}:{}/cf.txt", self.list_addr.port()),
            "--cf-domain-cache",
            &self.cache,
            "--cf-domain-list-port",
            &self.front.port().to_string(),
        ]
        .iter()
        .map(|s| s.to_string())
        .collect()
    }
}

/// A thread answering every GET with the encoded pool list.
fn serve_list() -> Result<SocketAddr, String> {
    let l = TcpListener::bind("127.0.0.1:0").map_err(|e| format!("list server: {e}"))?;
    let addr = l.local_addr().map_err(|e| format!("list server: {e}"))?;
    let cfg = tls_config_for(SERVER_PEM, SERVER_KEY);
    let mut body = String::from("# made-up bench list\n");
    for d in POOL {
        body.push_str(&encode_entry(d).unwrap_or_default());
        body.push('\n');
    }
    let reply = format!(
        "HTTP/1.1 200 OK\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    std::thread::spawn(move || {
        for sock in l.incoming() {
            let Ok(sock) = sock else { break };
            let (cfg, reply) = (Arc::clone(&cfg), reply.clone());
            std::thread::spawn(move || {
                let _ = sock.set_read_timeout(Some(Duration::from_secs(10)));
                let Ok(conn) = rustls::ServerConnection::new(cfg) else {
                    return;
                };
                let mut tls = rustls::StreamOwned::new(conn, sock);
                let mut head = Vec::new();
                let mut b = [0u8; 1024];
                while !head.windows(4).any(|w| w == b"\r\n\r\n") {
                    match tls.read(&mut b) {
                        Ok(0) | Err(_) => return,
                        Ok(n) => head.extend_from_slice(&b[..n]),
                    }
                }
                let _ = tls.write_all(reply.as_bytes());
                tls.conn.send_close_notify();
                let _ = tls.flush();
            });
        }
    });
    Ok(addr)
}
