//! Plain-TCP pieces several black-box tests share: [`mask_server`], a fake mask host for one
//! connection that records what it got, and [`res_pq_after`], an MTProto session (init,
//! `req_pq_multi`, `resPQ` checked) on a socket after some leading bytes (a PROXY header,
//! nothing). Blocking, thread per connection (test code).

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::mpsc;
use std::thread;
use std::time::Duration;

use tg_ws_proxy::applet::probe::MtClient;
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::mtproto::packet;

use super::{client_opts, os_rng, SECRET};

/// A fake mask server for one connection: reads until the client's end of stream (10 s read
/// timeout), reports what it got, answers `reply` and closes.
pub fn mask_server(reply: &'static [u8]) -> (SocketAddr, mpsc::Receiver<Vec<u8>>) {
    let l = TcpListener::bind("127.0.0.1:0").expect("bind");
    let addr = l.local_addr().unwrap();
    let (tx, rx) = mpsc::channel();
    thread::spawn(move || {
        let (mut s, _) = l.accept().expect("accept");
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let mut got = Vec::new();
        let _ = s.read_to_end(&mut got);
        let _ = tx.send(got);
        let _ = s.write_all(reply);
    });
    (addr, rx)
}

/// Writes `prefix` on `s` (connected to the proxy at `proxy`), then runs an MTProto session for
/// [`SECRET`] on it: the init, a `req_pq_multi`, the `resPQ` checked. Returns the client, still
/// open; the error names the step that failed.
pub fn res_pq_after(
    mut s: TcpStream,
    proxy: SocketAddr,
    prefix: &[u8],
) -> Result<MtClient, String> {
    s.write_all(prefix).map_err(|e| e.to_string())?;
    let mut rng = os_rng();
    let opts = client_opts(proxy, SECRET, Tag::Intermediate, 2);
    let mut c = MtClient::handshake(s, &opts, &mut rng).map_err(|e| format!("init: {e}"))?;
    let mut nonce = [0u8; 16];
    rng.fill(&mut nonce);
    c.send_packet(&packet::req_pq_multi(
        &nonce,
        packet::msg_id(1_700_000_000_000),
    ))
    .map_err(|e| format!("send: {e}"))?;
    let reply = c.recv_packet().map_err(|e| format!("recv: {e}"))?;
    packet::parse_res_pq(&reply, &nonce).map_err(|e| format!("resPQ: {e:?}"))?;
    Ok(c)
}
