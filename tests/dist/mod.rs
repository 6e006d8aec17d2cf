//! Shared rig of the router packaging tests (tests/dist_install.rs, tests/dist_entware.rs,
//! tests/release_install.rs, tests/newcomer_router.rs): `cross/dist.sh package` on the
//! host-built binary (once per test binary), the unpacked tarball, temporary roots (a fake
//! OpenWrt root; Entware roots are built by their tests), a PATH of busybox applets only,
//! running `install.sh` under `busybox sh`, and a tiny HTTP server on 127.0.0.1 for a `dist/`
//! tree (the release download).
//!
//! Needs /bin/busybox (busybox-static), shellcheck, GNU tar, gzip and sha256sum: a missing one
//! FAILS the test with the package to install (CI installs them in .ci/run), never a skip.
//! Temporary roots are removed when a test passes and kept (path in the message) when it fails.
//! Test code: panics on setup failure are the point. Used as `mod dist;` next to `mod common;`.
#![allow(dead_code)]

use std::fs;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

pub const TARGET: &str = "x86_64-unknown-linux-musl";
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Fixed archive mtime: two runs must give identical bytes.
pub const EPOCH: &str = "1764547200";
/// busybox applets that reach the network: left out of the test PATH, so install.sh cannot
/// use the network even by mistake.
pub const NETWORK_APPLETS: &[&str] = &[
    "wget",
    "nc",
    "telnet",
    "ftpget",
    "ftpput",
    "tftp",
    "udhcpc",
    "udhcpc6",
    "ntpd",
    "nslookup",
    "ping",
    "ping6",
    "traceroute",
    "traceroute6",
    "ssl_client",
    "arping",
    "ifup",
    "ifdown",
];

pub fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Debian program the test needs; FAILS (never skips) when it is missing.
pub fn need(path_or_name: &str, package: &str) -> PathBuf {
    let p = Path::new(path_or_name);
    if p.is_absolute() {
        assert!(
            p.exists(),
            "tests/dist_install.rs needs {path_or_name} (Debian package {package}; \
             apt-get install {package}; CI installs it in .ci/run)"
        );
        return p.to_path_buf();
    }
    let found = std::env::var_os("PATH").and_then(|path| {
        std::env::split_paths(&path)
            .map(|d| d.join(path_or_name))
            .find(|c| c.is_file())
    });
    found.unwrap_or_else(|| {
        panic!(
            "tests/dist_install.rs needs `{path_or_name}` on PATH (Debian package {package}; \
             apt-get install {package}; CI installs it in .ci/run)"
        )
    })
}

pub fn busybox() -> PathBuf {
    need("/bin/busybox", "busybox-static")
}

/// A temporary directory removed on drop unless the test is failing.
pub struct Scratch(pub PathBuf);

impl Scratch {
    pub fn new(tag: &str) -> Scratch {
        let d = crate::common::temp_dir().join(tag);
        fs::create_dir_all(&d).unwrap();
        Scratch(d)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("kept for inspection: {}", self.0.display());
        } else {
            let _ = fs::remove_dir_all(&self.0);
        }
    }
}

pub fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    out
}

pub fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

pub fn ok(cmd: &mut Command) -> String {
    let out = run(cmd);
    assert!(
        out.status.success(),
        "{cmd:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout)
}

pub fn mode(p: &Path) -> u32 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `installed` holds the same bytes as the package's `shipped` file, with mode 0755.
pub fn assert_installed_exec(installed: &Path, shipped: &Path) {
    assert_eq!(fs::read(installed).unwrap(), fs::read(shipped).unwrap());
    assert_eq!(mode(installed), 0o755);
}

/// `cross/dist.sh package TARGET BIN OUT` with the fixed epoch.
pub fn package_into(out: &Path) {
    need("tar", "tar");
    need("gzip", "gzip");
    need("sha256sum", "coreutils");
    ok(Command::new("bash")
        .arg(repo().join("cross/dist.sh"))
        .args(["package", TARGET])
        .arg(crate::common::bin())
        .arg(out)
        .env("SOURCE_DATE_EPOCH", EPOCH));
}

/// The artifacts, packaged once per test binary, and the tarball unpacked.
pub struct Pkg {
    pub out: PathBuf,
    /// The unpacked tarball's top directory (`tg-ws-proxy-VERSION-TARGET/`).
    pub dir: PathBuf,
}

pub fn pkg() -> &'static Pkg {
    static PKG: OnceLock<Pkg> = OnceLock::new();
    PKG.get_or_init(|| {
        // Not a Scratch: shared by every test of this file; one copy per run, under target/.
        let base = repo()
            .join("target")
            .join(format!("{}-test", env!("CARGO_CRATE_NAME")));
        let _ = fs::remove_dir_all(&base);
        let out = base.join("out");
        package_into(&out);
        let x = base.join("x");
        fs::create_dir_all(&x).unwrap();
        ok(Command::new("tar")
            .arg("xzf")
            .arg(out.join(tarball_name()))
            .arg("-C")
            .arg(&x));
        Pkg {
            out,
            dir: x.join(format!("tg-ws-proxy-{VERSION}-{TARGET}")),
        }
    })
}

pub fn tarball_name() -> String {
    format!("tg-ws-proxy-{VERSION}-{TARGET}.tar.gz")
}

pub fn ipk_name() -> String {
    format!("tg-ws-proxy_{VERSION}_x86_64.ipk")
}

/// A directory of busybox applet symlinks minus the network ones: the whole PATH of a run.
pub fn applet_path(dir: &Path) -> PathBuf {
    let p = dir.join("path");
    fs::create_dir_all(&p).unwrap();
    ok(Command::new(busybox()).arg("--install").arg("-s").arg(&p));
    for a in NETWORK_APPLETS {
        let _ = fs::remove_file(p.join(a));
    }
    assert!(
        p.join("sh").exists() && p.join("hexdump").exists(),
        "busybox --install -s made no applets"
    );
    p
}

pub fn write_exec(path: &Path, body: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, body).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fake OpenWrt root: /etc/openwrt_release, the system's busybox at /bin/busybox, an opkg
/// stub (install.sh only checks that it exists) and a LAN address in /etc/config/network.
pub fn openwrt_root(dir: &Path) -> PathBuf {
    let r = dir.join("root");
    fs::create_dir_all(r.join("etc/config")).unwrap();
    fs::create_dir_all(r.join("bin")).unwrap();
    fs::copy(busybox(), r.join("bin/busybox")).unwrap();
    fs::write(
        r.join("etc/openwrt_release"),
        "DISTRIB_ID='OpenWrt'\nDISTRIB_ARCH='x86_64'\n",
    )
    .unwrap();
    write_exec(
        &r.join("bin/opkg"),
        "#!/bin/sh\necho \"opkg stub: $*\" >&2\nexit 1\n",
    );
    fs::write(
        r.join("etc/config/network"),
        "config interface 'loopback'\n\toption ipaddr '127.0.0.1'\n\n\
         config interface 'lan'\n\toption proto 'static'\n\toption ipaddr '192.168.1.1'\n",
    )
    .unwrap();
    r
}

/// `busybox sh DIR/install.sh ARGS` with ROOT=root and only `path` on PATH.
pub fn install(tarball_dir: &Path, root: &Path, path: &Path, args: &[&str]) -> Output {
    run(Command::new(busybox())
        .arg("sh")
        .arg(tarball_dir.join("install.sh"))
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("ROOT", root))
}

pub fn install_ok(tarball_dir: &Path, root: &Path, path: &Path, args: &[&str]) -> String {
    let out = install(tarball_dir, root, path, args);
    assert!(
        out.status.success(),
        "install.sh {args:?} failed ({}):\nstdout:\n{}\nstderr:\n{}",
        out.status,
        text(&out.stdout),
        text(&out.stderr)
    );
    text(&out.stdout) + &text(&out.stderr)
}

/// The one secret in a secret file (comment lines skipped).
pub fn secret_in(path: &Path) -> String {
    let t = fs::read_to_string(path).unwrap();
    let lines: Vec<&str> = t
        .lines()
        .map(str::trim)
        .filter(|l| !l.is_empty() && !l.starts_with('#'))
        .collect();
    assert_eq!(
        lines.len(),
        1,
        "one secret expected in {}: {t:?}",
        path.display()
    );
    let s = lines[0].to_string();
    assert!(
        s.len() == 32 && s.chars().all(|c| c.is_ascii_hexdigit()),
        "not a secret: {s:?}"
    );
    s
}

pub fn tar_list(args: &[&str], file: &Path) -> Vec<String> {
    text(ok(Command::new("tar").args(args).arg(file)).as_bytes())
        .lines()
        .map(str::to_string)
        .collect()
}

/// A tiny HTTP/1.0 file server on 127.0.0.1 (GET only, no directory listings).
pub struct Server {
    pub port: u16,
    stop: Arc<AtomicBool>,
    thread: Option<JoinHandle<()>>,
}

impl Server {
    pub fn start(dir: &Path) -> Server {
        let l = TcpListener::bind("127.0.0.1:0").expect("bind 127.0.0.1:0");
        let port = l.local_addr().unwrap().port();
        let stop = Arc::new(AtomicBool::new(false));
        let (dir, flag) = (dir.to_path_buf(), stop.clone());
        let thread = std::thread::spawn(move || {
            for conn in l.incoming() {
                if flag.load(Ordering::SeqCst) {
                    break;
                }
                if let Ok(c) = conn {
                    serve_one(c, &dir);
                }
            }
        });
        Server {
            port,
            stop,
            thread: Some(thread),
        }
    }

    pub fn url(&self) -> String {
        format!("http://127.0.0.1:{}", self.port)
    }
}

impl Drop for Server {
    fn drop(&mut self) {
        self.stop.store(true, Ordering::SeqCst);
        let _ = TcpStream::connect(("127.0.0.1", self.port));
        if let Some(t) = self.thread.take() {
            let _ = t.join();
        }
    }
}

fn serve_one(mut c: TcpStream, dir: &Path) {
    let _ = c.set_read_timeout(Some(Duration::from_secs(5)));
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    while !req.windows(4).any(|w| w == b"\r\n\r\n") && req.len() < 16384 {
        match c.read(&mut buf) {
            Ok(0) | Err(_) => return,
            Ok(n) => req.extend_from_slice(&buf[..n]),
        }
    }
    let line = String::from_utf8_lossy(&req);
    let path = line.split_whitespace().nth(1).unwrap_or("/").to_string();
    let rel = path.trim_start_matches('/');
    let body = if rel.is_empty() || rel.contains("..") {
        None
    } else {
        fs::read(dir.join(rel)).ok()
    };
    let _ = match body {
        Some(b) => c
            .write_all(
                format!(
                    "HTTP/1.0 200 OK\r\nContent-Length: {}\r\nContent-Type: application/octet-stream\r\n\r\n",
                    b.len()
                )
                .as_bytes(),
            )
            .and_then(|_| c.write_all(&b)),
        None => c.write_all(b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n"),
    };
}

/// The shell functions of the procd stand-ins (tests/release_install.rs,
/// tests/newcomer_router.rs) that keep the service's process in `$PIDF`: `alive` — that pid
/// runs and is not a zombie; `stop` — ends it, waiting up to `wait_tenths` × 0.1 s, and
/// forgets it.
pub fn service_process_fns(wait_tenths: u32) -> String {
    format!(
        r#"alive() {{
	[ -s "$PIDF" ] || return 1
	p="$(cat "$PIDF")"
	[ -r "/proc/$p/stat" ] || return 1
	set -- $(cat "/proc/$p/stat")
	[ "$3" != Z ]
}}
stop() {{
	if [ -s "$PIDF" ]; then
		kill "$(cat "$PIDF")" 2>/dev/null
		i=0
		while alive && [ "$i" -lt {wait_tenths} ]; do sleep 0.1; i=$((i + 1)); done
	fi
	rm -f "$PIDF"
}}"#
    )
}
