//! The crypto floor of one relayed byte, for `make cross-bench` (cross/bench.sh): built for the
//! router target at `opt-level = 3` whatever the release profile says (the script sets
//! `CARGO_PROFILE_RELEASE_OPT_LEVEL=3`) and run there, under qemu-user for MIPS, so the proxy
//! built the shipped way can be compared with the same work done at full speed on the same
//! target in the same run.
//!
//! Usage (from the repository root):
//! * `cross_crypto ctr MIB` — two AES-256-CTR passes (two `mtproto::obfs2::Cipher`s, aes 0.8 +
//!   ctr 0.9, what the relay applies to every byte) over MIB MiB in 16 KiB chunks.
//! * `cross_crypto tls aes-gcm|chacha20 MIB` — MIB MiB of 16 KiB records sealed by an in-memory
//!   rustls server and opened by a client with the proxy's own config (`--tls-cipher` as given,
//!   tests/data certificates): one seal and one open per byte, so one side is about half.
//!
//! Prints one line, e.g. `tls chacha20 TLS13_CHACHA20_POLY1305_SHA256 bytes=268435456
//! wall_s=3.210`; the caller measures the process's CPU time (qemu-user's own clock reading is
//! not trusted for that). Errors go to stderr with exit status 2. Bench code: no sockets.

use std::hint::black_box;
use std::io::{Read, Write};
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer, ServerName};
use rustls::{ClientConnection, Connection, ServerConfig, ServerConnection};
use tg_ws_proxy::mtproto::obfs2::Cipher;
use tg_ws_proxy::net::tls::{client_config_with, CipherPref};

const CHUNK: usize = 16 * 1024;
const MIB: u64 = 1 << 20;

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let res = match args.iter().map(String::as_str).collect::<Vec<_>>()[..] {
        ["ctr", mib] => mib_arg(mib).map(ctr),
        ["tls", pref, mib] => {
            CipherPref::parse(pref).and_then(|p| mib_arg(mib).and_then(|m| tls(p, m)))
        }
        _ => Err("usage: cross_crypto ctr MIB | cross_crypto tls aes-gcm|chacha20 MIB".into()),
    };
    match res {
        Ok(line) => println!("{line}"),
        Err(e) => {
            eprintln!("cross_crypto: {e}");
            std::process::exit(2);
        }
    }
}

fn mib_arg(s: &str) -> Result<u64, String> {
    match s.parse::<u64>() {
        Ok(m) if m > 0 => Ok(m),
        _ => Err(format!("MIB must be a positive integer, not {s:?}")),
    }
}

/// Two CTR passes over `mib` MiB.
fn ctr(mib: u64) -> String {
    let mut a = Cipher::new(&[0x11; 32], &[0x22; 16]);
    let mut b = Cipher::new(&[0x33; 32], &[0x44; 16]);
    let mut buf = vec![0x5au8; CHUNK];
    let t0 = Instant::now();
    for _ in 0..mib * MIB / CHUNK as u64 {
        a.apply(&mut buf);
        b.apply(&mut buf);
        black_box(&mut buf);
    }
    format!(
        "ctr bytes={} wall_s={:.3}",
        mib * MIB,
        t0.elapsed().as_secs_f64()
    )
}

/// Moves every queued record from `from` to `to`; errors as text.
fn pass(from: &mut Connection, to: &mut Connection, wire: &mut Vec<u8>) -> Result<(), String> {
    wire.clear();
    while from.wants_write() {
        from.write_tls(wire).map_err(|e| e.to_string())?;
    }
    let mut rest = &wire[..];
    while !rest.is_empty() {
        to.read_tls(&mut rest).map_err(|e| e.to_string())?;
        to.process_new_packets().map_err(|e| e.to_string())?;
    }
    Ok(())
}

/// `mib` MiB server → client over an in-memory pair.
fn tls(pref: CipherPref, mib: u64) -> Result<String, String> {
    let ccfg = client_config_with(Some(Path::new("tests/data/ca.pem")), false, pref)?;
    let name = ServerName::try_from("kws2.web.telegram.org").map_err(|e| e.to_string())?;
    let mut client: Connection = ClientConnection::new(ccfg, name)
        .map_err(|e| e.to_string())?
        .into();
    let mut server: Connection = ServerConnection::new(server_config()?)
        .map_err(|e| e.to_string())?
        .into();
    let mut wire = Vec::with_capacity(4 * CHUNK);
    for _ in 0..10 {
        if !client.is_handshaking() && !server.is_handshaking() {
            break;
        }
        pass(&mut client, &mut server, &mut wire)?;
        pass(&mut server, &mut client, &mut wire)?;
    }
    if client.is_handshaking() || server.is_handshaking() {
        return Err("in-memory handshake did not finish".into());
    }
    let suite = client
        .negotiated_cipher_suite()
        .and_then(|s| s.suite().as_str())
        .unwrap_or("unknown");
    let data = vec![0xa5u8; CHUNK];
    let mut out = vec![0u8; CHUNK];
    let t0 = Instant::now();
    for _ in 0..mib * MIB / CHUNK as u64 {
        server
            .writer()
            .write_all(&data)
            .map_err(|e| e.to_string())?;
        pass(&mut server, &mut client, &mut wire)?;
        let mut got = 0;
        while got < CHUNK {
            match client.reader().read(&mut out) {
                Ok(0) => return Err("client saw the end early".into()),
                Ok(n) => got += n,
                Err(e) => return Err(format!("client read: {e}")),
            }
        }
        black_box(&mut out);
    }
    Ok(format!(
        "tls {} {suite} bytes={} wall_s={:.3}",
        pref.name(),
        mib * MIB,
        t0.elapsed().as_secs_f64()
    ))
}

fn server_config() -> Result<Arc<ServerConfig>, String> {
    let certs: Vec<CertificateDer<'static>> =
        CertificateDer::pem_slice_iter(include_bytes!("../tests/data/server.pem"))
            .collect::<Result<_, _>>()
            .map_err(|e| format!("tests/data/server.pem: {e}"))?;
    let key = PrivateKeyDer::from_pem_slice(include_bytes!("../tests/data/server.key"))
        .map_err(|e| format!("tests/data/server.key: {e}"))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let cfg = ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| e.to_string())?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| e.to_string())?;
    Ok(Arc::new(cfg))
}
