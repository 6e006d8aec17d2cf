//! In-process cost baselines for the CPU target (docs/design.md §8): the AES-256-CTR work the proxy
//! cannot avoid (two obfuscated2 passes per relayed byte: the client-side cipher and the
//! relay-side cipher, over a 16 KiB buffer like the relay's), and, for the ws tier, the TLS
//! record work (one AEAD pass per relayed byte) measured on an in-memory rustls pair with the
//! proxy's own client config and the fake DC's certificate.
//!
//! The CTR baseline names `ctr::Ctr128BE<aes::Aes256>` (aes 0.8 + ctr 0.9) itself rather than
//! the proxy's `obfs2::Cipher`, so it is instantiated and optimised in this crate, at the
//! opt-level this driver was built with ([`OPT_LEVEL`]; `bench/run.sh` builds it at 3 in its own
//! target dir), whatever the product's profile does to its own cipher.
//!
//! CPU time is this thread's (`/proc/thread-self/schedstat`, ns), so other load on the machine
//! inflates it less than wall time. Bench code: setup failures are returned as text.

use std::hint::black_box;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use aes::Aes256;
use ctr::cipher::{KeyIvInit, StreamCipher};
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConnection, Connection, ServerConfig, ServerConnection};

use super::fakedc::{SERVER_KEY, SERVER_PEM};
use super::procfs::thread_cpu_ns;

/// The relay's buffer size (default `--buf-kb 16`).
pub const CHUNK: usize = 16 * 1024;

/// `CARGO_PROFILE_RELEASE_OPT_LEVEL` when this driver was compiled (`None`: the Cargo.toml
/// profile, `opt-level = "z"`). The report refuses to judge a target against any other than "3".
pub const OPT_LEVEL: Option<&str> = option_env!("CARGO_PROFILE_RELEASE_OPT_LEVEL");

/// Whether the baselines were compiled at `opt-level = 3`.
pub fn baseline_at_o3() -> bool {
    OPT_LEVEL == Some("3")
}

/// One baseline measurement.
#[derive(Debug, Clone, Copy, Default)]
pub struct Cost {
    /// Thread CPU nanoseconds.
    pub cpu_ns: u64,
    /// Wall nanoseconds.
    pub wall_ns: u64,
}

fn measure(f: impl FnOnce()) -> Cost {
    let c0 = thread_cpu_ns().unwrap_or(0);
    let t0 = Instant::now();
    f();
    let wall_ns = t0.elapsed().as_nanos() as u64;
    let cpu_ns = thread_cpu_ns().map_or(wall_ns, |c1| c1.saturating_sub(c0));
    Cost { cpu_ns, wall_ns }
}

/// Two AES-256-CTR passes (two independent `Ctr128BE<Aes256>`, the obfuscated2 cipher) over
/// `bytes` bytes, in [`CHUNK`]-sized pieces of one buffer.
pub fn ctr_two_pass(bytes: u64) -> Cost {
    let mut a = ctr::Ctr128BE::<Aes256>::new(&[0x11; 32].into(), &[0x22; 16].into());
    let mut b = ctr::Ctr128BE::<Aes256>::new(&[0x33; 32].into(), &[0x44; 16].into());
    let mut buf = vec![0x5au8; CHUNK];
    let rounds = bytes.div_ceil(CHUNK as u64);
    measure(|| {
        for _ in 0..rounds {
            a.apply_keystream(&mut buf);
            b.apply_keystream(&mut buf);
            black_box(&mut buf);
        }
    })
}

/// TLS record cost: `bytes` bytes written by a rustls server and read by a rustls client in
/// [`CHUNK`] pieces, entirely in memory. Returns the cost of both sides together and the
/// negotiated suite; one side (what the proxy does per byte) is about half.
pub fn tls_round(bytes: u64, ca: &Path) -> Result<(Cost, String), String> {
    let ccfg = tg_ws_proxy::net::tls::client_config(Some(ca), false)?;
    let name = ServerName::try_from("kws2.web.telegram.org").map_err(|e| e.to_string())?;
    let mut client: Connection = ClientConnection::new(ccfg, name)
        .map_err(|e| e.to_string())?
        .into();
    let mut server: Connection = ServerConnection::new(server_config()?)
        .map_err(|e| e.to_string())?
        .into();
    for _ in 0..10 {
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
        pass(&mut client, &mut server, &mut Vec::new())?;
        pass(&mut server, &mut client, &mut Vec::new())?;
    }
    if client.is_handshaking() || server.is_handshaking() {
        return Err("in-memory TLS handshake did not finish".into());
    }
    let suite = match &client {
        Connection::Client(c) => c
            .negotiated_cipher_suite()
            .map(|s| format!("{:?}", s.suite())),
        Connection::Server(_) => None,
    }
    .unwrap_or_else(|| "unknown".into());
    let chunk = vec![0xa5u8; CHUNK];
    let mut out = vec![0u8; CHUNK];
    let mut wire = Vec::with_capacity(2 * CHUNK);
    let rounds = bytes.div_ceil(CHUNK as u64);
    let mut err = None;
    let cost = measure(|| {
        for _ in 0..rounds {
            if let Err(e) = server.writer().write_all(&chunk) {
                err = Some(e.to_string());
                return;
            }
            wire.clear();
            if let Err(e) = pass(&mut server, &mut client, &mut wire) {
                err = Some(e);
                return;
            }
            let mut got = 0;
            while let Ok(n) = client.reader().read(&mut out) {
                if n == 0 {
                    break;
                }
                got += n;
            }
            if got != CHUNK {
                err = Some(format!("TLS loop read {got} of {CHUNK} bytes"));
                return;
            }
            black_box(&mut out);
        }
    });
    err.map_or(Ok((cost, suite)), Err)
}

/// Moves every queued TLS record from `from` to `to` through `wire` and processes it.
fn pass(from: &mut Connection, to: &mut Connection, wire: &mut Vec<u8>) -> Result<(), String> {
    while from.wants_write() {
        from.write_tls(wire).map_err(|e| e.to_string())?;
    }
    let mut rd: &[u8] = wire;
    while !rd.is_empty() {
        to.read_tls(&mut rd).map_err(|e| e.to_string())?;
        to.process_new_packets().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// The fake DC's server config (same certificate, provider and protocol versions).
fn server_config() -> Result<Arc<ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> = CertificateDer::pem_slice_iter(SERVER_PEM)
        .collect::<Result<_, _>>()
        .map_err(|e| e.to_string())?;
    let key = PrivateKeyDer::from_pem_slice(SERVER_KEY).map_err(|e| e.to_string())?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(cfg))
}
