//! Black-box: SIGHUP reloads the configuration for new sessions only. The secret file is the
//! configuration source here (`--secret-file` is read again on every reload; `--config` cases
//! come with the configuration file): a 64 MiB download running across a reload that changes
//! the secrets finishes byte-exact; a new secret is accepted and a removed one refused right
//! after the `reload: applied` line; an invalid file is rejected with one line and the old
//! secret is still served.
//!
//! Owns only this file; the rig lives in tests/common. Real sockets on 127.0.0.1, signals
//! through `kill(2)` on the child, no fixed sleeps.

mod common;

use std::io::{self, Read, Write};
use std::net::TcpStream;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use sha2::{Digest, Sha256};

use common::fakedc::{bulk_payload, bulk_request, DcConfig, FakeDc};
use common::{client_opts, temp_dir, Proxy};
use tg_ws_proxy::applet::probe::{probe_once, MtClient, Outcome};
use tg_ws_proxy::mtproto::framing::{self, Decoder};
use tg_ws_proxy::mtproto::obfs2::{Cipher, Tag};
use tg_ws_proxy::rng::Rng;

const OLD: &str = "0123456789abcdef0123456789abcdef";
const NEW: &str = "fedcba9876543210fedcba9876543210";

const MIB: usize = 1 << 20;

/// How long a reload or a log line may take to show up.
const LOG_WAIT: Duration = Duration::from_secs(10);

/// Writes `text` to the secret file at `path` (mode 0600).
fn write_secrets(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write secret file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

/// A secret file holding `OLD`, in a fresh temp dir.
fn secret_file() -> PathBuf {
    let path = temp_dir().join("secret");
    write_secrets(&path, "# test secret\n0123456789abcdef0123456789abcdef\n");
    path
}

fn sighup(proxy: &Proxy) {
    // SAFETY: kill(2) on our own child's pid; no memory is shared.
    let rc = unsafe { libc::kill(proxy.pid() as libc::pid_t, libc::SIGHUP) };
    assert_eq!(rc, 0, "kill -HUP: {}", io::Error::last_os_error());
}

/// Sends SIGHUP and waits for the `n`-th line containing `needle` (reload lines accumulate).
fn reload_and_wait(proxy: &Proxy, needle: &str, n: usize) {
    sighup(proxy);
    let ok = common::wait_until(LOG_WAIT, || proxy.count_log(needle) >= n);
    assert!(
        ok,
        "no {needle:?} #{n} after SIGHUP:\n{}",
        proxy.logs().join("\n")
    );
}

/// A ws-tier proxy in front of a fake DC, secrets from `secrets`.
fn setup(secrets: &Path) -> (FakeDc, Proxy) {
    let dc = FakeDc::start_tls_ws(DcConfig::default());
    let ws = format!("2:{}", dc.addr());
    let file = secrets.to_str().expect("utf-8 temp path");
    let proxy = Proxy::start(&[
        "--secret-file",
        file,
        "--dc-ip",
        &ws,
        "--tier-order",
        "ws",
        "--bad-client-drain",
        "100ms",
    ]);
    (dc, proxy)
}

/// One `req_pq_multi` → `resPQ` exchange with `secret`.
fn served(proxy: &Proxy, secret: &str) -> Outcome {
    let mut rng = Rng::new().expect("OS randomness");
    let mut opts = client_opts(proxy.addr(), secret, Tag::Intermediate, 2);
    opts.timeout = Duration::from_secs(3);
    probe_once(&opts, &mut rng).outcome
}

#[test]
fn new_secret_is_accepted_and_removed_one_refused_right_after_sighup() {
    let path = secret_file();
    let (_dc, proxy) = setup(&path);
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    assert_ne!(served(&proxy, NEW), Outcome::Ok, "not configured yet");
    write_secrets(&path, &format!("{NEW}\n"));
    reload_and_wait(&proxy, "reload: applied (secrets)", 1);
    assert_eq!(served(&proxy, NEW), Outcome::Ok, "{:#?}", proxy.logs());
    assert_ne!(
        served(&proxy, OLD),
        Outcome::Ok,
        "removed secret still served"
    );
    // The line names what changed and never a secret.
    let logs = proxy.logs().join("\n");
    assert!(!logs.contains(NEW) && !logs.contains(OLD), "{logs}");
}

#[test]
fn an_invalid_secret_file_is_rejected_and_the_old_secret_stays() {
    let path = secret_file();
    let (_dc, proxy) = setup(&path);
    write_secrets(&path, "not-a-secret\n");
    reload_and_wait(&proxy, "reload: rejected: ", 1);
    let line = proxy
        .logs()
        .into_iter()
        .find(|l| l.contains("reload: rejected: "))
        .unwrap_or_default();
    assert!(line.contains("line 1"), "says where: {line}");
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    // Unreadable (a directory where the file was): rejected too, old secret still served.
    std::fs::remove_file(&path).expect("rm secret file");
    std::fs::create_dir(&path).expect("mkdir in its place");
    reload_and_wait(&proxy, "reload: rejected: ", 2);
    assert_eq!(served(&proxy, OLD), Outcome::Ok, "{:#?}", proxy.logs());
    assert_eq!(proxy.count_log("reload: applied"), 0);
}

#[test]
fn a_reload_with_nothing_changed_says_so() {
    let path = secret_file();
    let (_dc, proxy) = setup(&path);
    reload_and_wait(&proxy, "reload: applied (no changes)", 1);
    assert_eq!(served(&proxy, OLD), Outcome::Ok);
}

/// The client's side of a download: decrypts and splits the stream into packets.
struct Reader {
    sock: TcpStream,
    dec: Cipher,
    decoder: Decoder,
    buf: Vec<u8>,
}

impl Reader {
    fn next(&mut self) -> io::Result<Vec<u8>> {
        loop {
            if let Some(p) = self
                .decoder
                .next()
                .map_err(|e| io::Error::new(io::ErrorKind::InvalidData, e.to_string()))?
            {
                return Ok(p);
            }
            let n = self.sock.read(&mut self.buf)?;
            if n == 0 {
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
            self.dec.apply(&mut self.buf[..n]);
            self.decoder.push(&self.buf[..n]);
        }
    }
}

#[test]
fn download_of_64_mib_survives_reload() {
    let path = secret_file();
    let (dc, proxy) = setup(&path);
    let tag = Tag::Intermediate;
    let mut rng = Rng::new().expect("OS randomness");
    let opts = client_opts(proxy.addr(), OLD, tag, 2);
    let (mut sock, mut enc, dec) = MtClient::connect_with(&opts, &mut rng)
        .expect("connect to proxy")
        .into_parts();
    sock.set_read_timeout(Some(Duration::from_secs(30)))
        .unwrap();
    let mut reader = Reader {
        sock: sock.try_clone().expect("clone socket"),
        dec,
        decoder: Decoder::new(tag),
        buf: vec![0u8; 256 * 1024],
    };
    let count = 64u32;
    let mut wire = framing::encode(tag, &bulk_request(count, MIB as u32), &mut rng);
    enc.apply(&mut wire);
    sock.write_all(&wire).expect("send BULK request");
    let (mut got, mut want) = (Sha256::new(), Sha256::new());
    let mut reloaded_at = None;
    for i in 0..count {
        let p = reader
            .next()
            .unwrap_or_else(|e| panic!("packet {i}/{count}: {e}\n{}", proxy.logs().join("\n")));
        assert!(
            p.len() >= MIB && p.len() < MIB + 16,
            "packet {i}: {} B",
            p.len()
        );
        got.update(&p[..MIB]);
        want.update(bulk_payload(i, MIB));
        if i == 4 {
            // Mid-download: the secret this session used is removed.
            write_secrets(&path, &format!("{NEW}\n"));
            reload_and_wait(&proxy, "reload: applied (secrets)", 1);
            reloaded_at = Some(dc.handle().bytes_out());
        }
    }
    assert_eq!(got.finalize(), want.finalize(), "payload differs");
    let sent_by_reload = reloaded_at.expect("reloaded");
    assert!(
        sent_by_reload < (count as u64) * MIB as u64,
        "the download was still running at the reload ({sent_by_reload} B sent)"
    );
    // The session was relaying all along and was not closed by the reload.
    assert_eq!(
        proxy.count_log("closed-by="),
        0,
        "{}",
        proxy.logs().join("\n")
    );
    assert_eq!(served(&proxy, NEW), Outcome::Ok);
}
