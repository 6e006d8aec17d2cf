//! Black-box tests of `genkey --ee DOMAIN`'s resolve check: the binary with its own hosts file
//! and resolv.conf (`--hosts-file`, `--resolv-conf`), never the system's and never real DNS.
//! The only sockets are on 127.0.0.1: a nameserver address where nothing listens, and a fake
//! nameserver we run.

#[path = "common/dnsreply.rs"]
mod dnsreply;

use std::net::UdpSocket;
use std::path::PathBuf;
use std::process::{Command, Output};

use tg_ws_proxy::mtproto::obfs2::{Secret, SecretKind};

const BIN: &str = env!("CARGO_BIN_EXE_tg-ws-proxy");

/// A fresh directory with `hosts` and a `resolv.conf` naming 127.0.0.1 on a port nothing
/// listens on (bound once to get a free port, then closed).
fn files(tag: &str, hosts: &str) -> (PathBuf, PathBuf, PathBuf) {
    let d = std::env::temp_dir().join(format!("tgwp-genkey-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    let port = UdpSocket::bind("127.0.0.1:0")
        .and_then(|s| s.local_addr())
        .expect("free udp port")
        .port();
    let h = d.join("hosts");
    let r = d.join("resolv.conf");
    std::fs::write(&h, hosts).expect("write hosts");
    std::fs::write(&r, format!("nameserver 127.0.0.1:{port}\n")).expect("write resolv.conf");
    (d, h, r)
}

/// A fake nameserver on 127.0.0.1:ephemeral answering one A query with 127.0.0.9; returns its
/// port and a handle yielding the name it was asked.
fn fake_nameserver() -> (u16, std::thread::JoinHandle<Vec<u8>>) {
    let sock = UdpSocket::bind("127.0.0.1:0").expect("bind fake nameserver");
    sock.set_read_timeout(Some(std::time::Duration::from_secs(10)))
        .expect("timeout");
    let port = sock.local_addr().expect("addr").port();
    let h = std::thread::spawn(move || {
        let mut q = [0u8; 512];
        let (n, from) = sock.recv_from(&mut q).expect("a query");
        let q = &q[..n];
        let r = dnsreply::reply(q, 0, Some(([127, 0, 0, 9], 60)));
        sock.send_to(&r, from).expect("answer");
        q[12..n - 4].to_vec()
    });
    (port, h)
}

fn genkey(domain: &str, hosts: &PathBuf, resolv: &PathBuf) -> Output {
    let mut c = Command::new(BIN);
    c.args(["genkey", "--ee", domain, "--resolve-timeout", "500ms"]);
    c.arg("--hosts-file")
        .arg(hosts)
        .arg("--resolv-conf")
        .arg(resolv);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TG_") {
            c.env_remove(k);
        }
    }
    c.output().expect("spawn tg-ws-proxy genkey")
}

fn secret_of(o: &Output) -> SecretKind {
    let text = String::from_utf8_lossy(&o.stdout).trim().to_string();
    Secret::parse(&text).expect("genkey prints a secret").kind
}

#[test]
fn genkey_ee_domain_in_the_hosts_file_gives_no_warning() {
    let (d, h, r) = files("hosts", "127.0.0.1 mask.example.test\n");
    let o = genkey("mask.example.test", &h, &r);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(err, "");
    assert_eq!(secret_of(&o), SecretKind::Ee("mask.example.test".into()));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn genkey_ee_unresolvable_domain_warns_exits_0_and_prints_the_secret() {
    let (d, h, r) = files("nons", "127.0.0.1 other.example.test\n");
    let o = genkey("mask.example.test", &h, &r);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert!(
        err.contains("warning: --ee mask.example.test does not resolve"),
        "{err}"
    );
    assert!(
        err.contains("127.0.0.1:"),
        "the nameserver tried is named: {err}"
    );
    assert_eq!(err.lines().count(), 1, "{err}");
    assert_eq!(secret_of(&o), SecretKind::Ee("mask.example.test".into()));
    let _ = std::fs::remove_dir_all(d);
}

#[test]
fn genkey_ee_domain_answered_by_the_nameserver_gives_no_warning() {
    let (d, h, r) = files("ns", "");
    let (port, ns) = fake_nameserver();
    std::fs::write(&r, format!("nameserver 127.0.0.1:{port}\n")).expect("write resolv.conf");
    let o = genkey("Mask.Example.Test", &h, &r);
    let err = String::from_utf8_lossy(&o.stderr).into_owned();
    assert_eq!(o.status.code(), Some(0), "{err}");
    assert_eq!(err, "");
    assert_eq!(
        ns.join().expect("nameserver"),
        b"\x04mask\x07example\x04test\x00"
    );
    let _ = std::fs::remove_dir_all(d);
}
