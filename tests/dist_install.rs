//! Router packaging, black-box: `cross/dist.sh package` on the host-built binary (the .ipk, the
//! .tar.gz and SHA256SUMS), the tarball's `install.sh` run for real under Debian's
//! `busybox-static` (`busybox sh`, a PATH of busybox applets only, no network applets) in a
//! temporary root (ROOT=DIR with a fake /etc/openwrt_release or a fake Entware /opt), the
//! Entware script's start / reload / stop, and `shellcheck` over the shell scripts.
//!
//! Needs /bin/busybox (busybox-static), shellcheck, GNU tar, gzip and sha256sum: a missing one
//! FAILS the test with the package to install (CI installs them in .ci/run), never a skip.
//! Temporary roots are removed when a test passes and kept (path in the message) when it fails.

mod common;

use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::sync::OnceLock;
use std::time::Duration;

const TARGET: &str = "x86_64-unknown-linux-musl";
const VERSION: &str = env!("CARGO_PKG_VERSION");
/// Fixed archive mtime: two runs must give identical bytes.
const EPOCH: &str = "1764547200";
/// busybox applets that reach the network: left out of the test PATH, so install.sh cannot
/// use the network even by mistake.
const NETWORK_APPLETS: &[&str] = &[
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

fn repo() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// A Debian program the test needs; FAILS (never skips) when it is missing.
fn need(path_or_name: &str, package: &str) -> PathBuf {
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

fn busybox() -> PathBuf {
    need("/bin/busybox", "busybox-static")
}

/// A temporary directory removed on drop unless the test is failing.
struct Scratch(PathBuf);

impl Scratch {
    fn new(tag: &str) -> Scratch {
        let d = common::temp_dir().join(tag);
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

fn run(cmd: &mut Command) -> Output {
    let out = cmd
        .output()
        .unwrap_or_else(|e| panic!("cannot run {cmd:?}: {e}"));
    out
}

fn text(b: &[u8]) -> String {
    String::from_utf8_lossy(b).into_owned()
}

fn ok(cmd: &mut Command) -> String {
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

fn mode(p: &Path) -> u32 {
    fs::metadata(p)
        .unwrap_or_else(|e| panic!("{}: {e}", p.display()))
        .permissions()
        .mode()
        & 0o7777
}

/// `cross/dist.sh package TARGET BIN OUT` with the fixed epoch; returns OUT's file names.
fn package_into(out: &Path) {
    need("tar", "tar");
    need("gzip", "gzip");
    need("sha256sum", "coreutils");
    ok(Command::new("bash")
        .arg(repo().join("cross/dist.sh"))
        .args(["package", TARGET])
        .arg(common::bin())
        .arg(out)
        .env("SOURCE_DATE_EPOCH", EPOCH));
}

/// The artifacts, packaged once per test binary, and the tarball unpacked.
struct Pkg {
    out: PathBuf,
    /// The unpacked tarball's top directory (`tg-ws-proxy-VERSION-TARGET/`).
    dir: PathBuf,
}

fn pkg() -> &'static Pkg {
    static PKG: OnceLock<Pkg> = OnceLock::new();
    PKG.get_or_init(|| {
        // Not a Scratch: shared by every test of this file; one copy per run, under target/.
        let base = repo().join("target").join("dist-install-test");
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

fn tarball_name() -> String {
    format!("tg-ws-proxy-{VERSION}-{TARGET}.tar.gz")
}

fn ipk_name() -> String {
    format!("tg-ws-proxy_{VERSION}_x86_64.ipk")
}

/// A directory of busybox applet symlinks minus the network ones: the whole PATH of a run.
fn applet_path(dir: &Path) -> PathBuf {
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

fn write_exec(path: &Path, body: &str) {
    fs::create_dir_all(path.parent().unwrap()).unwrap();
    fs::write(path, body).unwrap();
    fs::set_permissions(path, fs::Permissions::from_mode(0o755)).unwrap();
}

/// A fake OpenWrt root: /etc/openwrt_release, the system's busybox at /bin/busybox, an opkg
/// stub (install.sh only checks that it exists) and a LAN address in /etc/config/network.
fn openwrt_root(dir: &Path) -> PathBuf {
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
fn install(tarball_dir: &Path, root: &Path, path: &Path, args: &[&str]) -> Output {
    run(Command::new(busybox())
        .arg("sh")
        .arg(tarball_dir.join("install.sh"))
        .args(args)
        .env_clear()
        .env("PATH", path)
        .env("ROOT", root))
}

fn install_ok(tarball_dir: &Path, root: &Path, path: &Path, args: &[&str]) -> String {
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
fn secret_in(path: &Path) -> String {
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

fn tar_list(args: &[&str], file: &Path) -> Vec<String> {
    text(ok(Command::new("tar").args(args).arg(file)).as_bytes())
        .lines()
        .map(str::to_string)
        .collect()
}

#[test]
fn tarball_and_ipk_have_the_documented_layout() {
    let p = pkg();
    let top = format!("tg-ws-proxy-{VERSION}-{TARGET}");

    // The tarball: one top directory with the contract's seven files, owned 0:0.
    let listing = tar_list(&["tzvf"], &p.out.join(tarball_name()));
    let mut names: Vec<String> = listing
        .iter()
        .map(|l| l.split_whitespace().last().unwrap().to_string())
        .collect();
    names.sort();
    let want: Vec<String> = [
        "",
        "README.txt",
        "S99tg-ws-proxy",
        "install.sh",
        "tg-ws-proxy",
        "tg-ws-proxy.conf.example",
        "tg-ws-proxy.config",
        "tg-ws-proxy.init",
    ]
    .iter()
    .map(|f| format!("{top}/{f}"))
    .collect();
    assert_eq!(names, want, "tarball listing:\n{}", listing.join("\n"));
    assert!(
        listing.iter().all(|l| l.contains(" 0/0 ")),
        "owners not 0/0:\n{}",
        listing.join("\n")
    );
    for exe in [
        "tg-ws-proxy",
        "install.sh",
        "tg-ws-proxy.init",
        "S99tg-ws-proxy",
    ] {
        assert_eq!(
            mode(&p.dir.join(exe)) & 0o111,
            0o111,
            "{exe} not executable"
        );
    }
    for (f, src) in [
        ("install.sh", "cross/install.sh"),
        (
            "tg-ws-proxy.init",
            "cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.init",
        ),
        (
            "tg-ws-proxy.config",
            "cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.config",
        ),
        ("S99tg-ws-proxy", "cross/entware/S99tg-ws-proxy"),
        ("tg-ws-proxy.conf.example", "cross/entware/tg-ws-proxy.conf"),
    ] {
        assert_eq!(
            fs::read(p.dir.join(f)).unwrap(),
            fs::read(repo().join(src)).unwrap(),
            "{f} != {src}"
        );
    }
    let readme = fs::read_to_string(p.dir.join("README.txt")).unwrap();
    assert!(
        readme.contains(TARGET) && readme.contains("install.sh"),
        "README.txt: {readme}"
    );
    assert_eq!(
        fs::read(p.dir.join("tg-ws-proxy")).unwrap(),
        fs::read(p.out.join(format!("tg-ws-proxy-{VERSION}-{TARGET}"))).unwrap(),
        "the tarball's binary is not the stripped binary artifact"
    );

    // The ipk: a gzipped tar of exactly ./debian-binary ./data.tar.gz ./control.tar.gz, in
    // ipkg-build's order.
    let ipk = p.out.join(ipk_name());
    assert_eq!(
        tar_list(&["tzf"], &ipk),
        ["./debian-binary", "./data.tar.gz", "./control.tar.gz"]
    );
    let x = Scratch::new("ipk");
    ok(Command::new("tar").arg("xzf").arg(&ipk).arg("-C").arg(&x.0));
    assert_eq!(
        fs::read_to_string(x.0.join("debian-binary")).unwrap(),
        "2.0\n"
    );
    let control_list = tar_list(&["tzf"], &x.0.join("control.tar.gz"));
    assert_eq!(
        control_list,
        ["./", "./conffiles", "./control", "./postinst", "./prerm"]
    );
    let data_list = tar_list(&["tzf"], &x.0.join("data.tar.gz"));
    assert_eq!(
        data_list,
        [
            "./",
            "./etc/",
            "./etc/config/",
            "./etc/config/tg-ws-proxy",
            "./etc/init.d/",
            "./etc/init.d/tg-ws-proxy",
            "./usr/",
            "./usr/bin/",
            "./usr/bin/tg-ws-proxy",
        ]
    );
    let c = x.0.join("c");
    let d = x.0.join("d");
    fs::create_dir_all(&c).unwrap();
    fs::create_dir_all(&d).unwrap();
    ok(Command::new("tar")
        .arg("xzf")
        .arg(x.0.join("control.tar.gz"))
        .arg("-C")
        .arg(&c));
    ok(Command::new("tar")
        .arg("xzf")
        .arg(x.0.join("data.tar.gz"))
        .arg("-C")
        .arg(&d));
    let control = fs::read_to_string(c.join("control")).unwrap();
    let field = |name: &str| -> Option<String> {
        control
            .lines()
            .find_map(|l| l.strip_prefix(&format!("{name}: ")).map(str::to_string))
    };
    assert_eq!(
        field("Package").as_deref(),
        Some("tg-ws-proxy"),
        "{control}"
    );
    assert_eq!(field("Version").as_deref(), Some(VERSION), "{control}");
    assert_eq!(
        field("Architecture").as_deref(),
        Some("x86_64"),
        "{control}"
    );
    assert!(
        field("Maintainer").is_some_and(|m| !m.is_empty()),
        "{control}"
    );
    assert!(
        field("Description").is_some_and(|m| !m.is_empty()),
        "{control}"
    );
    assert!(
        !control.contains("Depends"),
        "a static binary depends on nothing: {control}"
    );
    let data_bytes: u64 = [
        "usr/bin/tg-ws-proxy",
        "etc/init.d/tg-ws-proxy",
        "etc/config/tg-ws-proxy",
    ]
    .iter()
    .map(|f| fs::metadata(d.join(f)).unwrap().len())
    .sum();
    assert_eq!(
        field("Installed-Size"),
        Some(data_bytes.to_string()),
        "{control}"
    );
    assert_eq!(
        fs::read_to_string(c.join("conffiles")).unwrap(),
        "/etc/config/tg-ws-proxy\n"
    );
    for s in ["postinst", "prerm"] {
        assert_eq!(mode(&c.join(s)) & 0o111, 0o111, "{s} not executable");
        let body = fs::read_to_string(c.join(s)).unwrap();
        assert!(
            body.starts_with("#!/bin/sh\n") && body.contains("IPKG_INSTROOT"),
            "{s}: {body}"
        );
    }
    let postinst = fs::read_to_string(c.join("postinst")).unwrap();
    assert!(
        postinst.contains("d=/etc/tg-ws-proxy\nf=$d/secret")
            && postinst.contains("genkey")
            && postinst.contains("/etc/init.d/tg-ws-proxy enable"),
        "{postinst}"
    );
    let sc = need("shellcheck", "shellcheck");
    ok(Command::new(&sc)
        .args(["-s", "sh"])
        .arg(c.join("postinst"))
        .arg(c.join("prerm")));
    assert_eq!(mode(&d.join("usr/bin/tg-ws-proxy")), 0o755);
    assert_eq!(mode(&d.join("etc/init.d/tg-ws-proxy")), 0o755);
    assert_eq!(mode(&d.join("etc/config/tg-ws-proxy")), 0o644);

    // SHA256SUMS covers the three artifacts and verifies.
    let sums = fs::read_to_string(p.out.join("SHA256SUMS")).unwrap();
    let mut listed: Vec<&str> = sums
        .lines()
        .map(|l| l.split_whitespace().nth(1).unwrap())
        .collect();
    listed.sort();
    let mut want = vec![
        format!("tg-ws-proxy-{VERSION}-{TARGET}"),
        tarball_name(),
        ipk_name(),
    ];
    want.sort();
    assert_eq!(listed, want, "SHA256SUMS:\n{sums}");
    ok(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&p.out));

    // Byte-reproducible: a second run with the same epoch gives the same bytes.
    let again = Scratch::new("again");
    package_into(&again.0);
    assert_eq!(
        fs::read_to_string(again.0.join("SHA256SUMS")).unwrap(),
        sums,
        "two runs of cross/dist.sh package differ"
    );
}

#[test]
fn install_sh_under_busybox_in_a_temp_root() {
    let p = pkg();
    let t = Scratch::new("openwrt");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    let log = install_ok(&p.dir, &root, &path, &[]);

    let bin = root.join("usr/bin/tg-ws-proxy");
    assert_eq!(
        fs::read(&bin).unwrap(),
        fs::read(p.dir.join("tg-ws-proxy")).unwrap()
    );
    assert_eq!(mode(&bin), 0o755);
    let init = root.join("etc/init.d/tg-ws-proxy");
    assert_eq!(
        fs::read(&init).unwrap(),
        fs::read(p.dir.join("tg-ws-proxy.init")).unwrap()
    );
    assert_eq!(mode(&init), 0o755);
    let conf = root.join("etc/config/tg-ws-proxy");
    assert_eq!(
        fs::read(&conf).unwrap(),
        fs::read(p.dir.join("tg-ws-proxy.config")).unwrap()
    );
    assert!(
        !root.join("etc/config/tg-ws-proxy-opkg").exists(),
        "no -opkg file on a fresh install"
    );
    assert_eq!(mode(&root.join("etc/tg-ws-proxy")), 0o700);
    let secret_file = root.join("etc/tg-ws-proxy/secret");
    assert_eq!(mode(&secret_file), 0o600);
    let secret = secret_in(&secret_file);
    assert!(log.contains("skipped enabling and starting"), "{log}");
    // The link: the LAN address from /etc/config/network, the UCI port, the new secret.
    let link = log
        .lines()
        .find(|l| l.starts_with("tg://proxy?"))
        .unwrap_or_else(|| panic!("no tg:// link printed:\n{log}"));
    assert!(
        link.starts_with("tg://proxy?server=192.168.1.1&port=1443&secret="),
        "{link}"
    );
    assert!(
        link.ends_with(&secret),
        "the link does not carry the secret file's secret: {link}"
    );
    assert!(
        log.contains("https://t.me/proxy?server=192.168.1.1"),
        "{log}"
    );

    // A second run over the same install keeps the secret and says so.
    let log2 = install_ok(&p.dir, &root, &path, &[]);
    assert_eq!(
        secret_in(&secret_file),
        secret,
        "reinstall changed the secret"
    );
    assert!(log2.contains("kept /etc/tg-ws-proxy/secret"), "{log2}");
}

#[test]
fn upgrade_keeps_the_users_config() {
    let p = pkg();
    let t = Scratch::new("upgrade");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    install_ok(&p.dir, &root, &path, &[]);
    let conf = root.join("etc/config/tg-ws-proxy");
    let edited = fs::read_to_string(&conf).unwrap() + "\toption port '8443'\n";
    fs::write(&conf, &edited).unwrap();
    let secret = secret_in(&root.join("etc/tg-ws-proxy/secret"));

    // A "newer" tarball: another binary (trailing bytes change no ELF) and a new default config.
    let newer = t.0.join("newer");
    ok(Command::new("cp").arg("-a").arg(&p.dir).arg(&newer));
    let mut b = fs::read(newer.join("tg-ws-proxy")).unwrap();
    b.extend_from_slice(b"\nnewer build\n");
    fs::write(newer.join("tg-ws-proxy"), &b).unwrap();
    let new_default =
        fs::read_to_string(newer.join("tg-ws-proxy.config")).unwrap() + "# newer default\n";
    fs::write(newer.join("tg-ws-proxy.config"), &new_default).unwrap();

    let log = install_ok(&newer, &root, &path, &[]);
    assert_eq!(
        fs::read_to_string(&conf).unwrap(),
        edited,
        "the upgrade changed the user's config"
    );
    assert_eq!(
        fs::read(root.join("usr/bin/tg-ws-proxy")).unwrap(),
        b,
        "binary not replaced"
    );
    assert_eq!(
        fs::read_to_string(root.join("etc/config/tg-ws-proxy-opkg")).unwrap(),
        new_default,
        "the new default is not beside the config"
    );
    assert!(
        log.contains("kept your /etc/config/tg-ws-proxy") && log.contains("tg-ws-proxy-opkg"),
        "{log}"
    );
    assert_eq!(
        secret_in(&root.join("etc/tg-ws-proxy/secret")),
        secret,
        "the upgrade changed the secret"
    );
    assert!(
        log.contains("server=192.168.1.1&port=8443&"),
        "the link ignores the user's port:\n{log}"
    );
}

#[test]
fn an_old_plain_text_secret_moves_to_the_secret_file() {
    let p = pkg();
    let t = Scratch::new("migrate");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    let conf = root.join("etc/config/tg-ws-proxy");
    fs::write(
        &conf,
        "config proxy 'main'\n\toption enabled '1'\n\toption secret '0123456789abcdef0123456789abcdef'\n",
    )
    .unwrap();
    let log = install_ok(&p.dir, &root, &path, &[]);
    assert_eq!(
        secret_in(&root.join("etc/tg-ws-proxy/secret")),
        common::SECRET
    );
    assert_eq!(mode(&root.join("etc/tg-ws-proxy/secret")), 0o600);
    let after = fs::read_to_string(&conf).unwrap();
    assert!(
        !after.contains("secret '"),
        "the plain-text secret stayed in /etc/config: {after}"
    );
    assert!(
        after.contains("option enabled '1'"),
        "other options lost: {after}"
    );
    assert!(log.contains("moved the secret"), "{log}");
}

#[test]
fn a_tarball_for_another_cpu_is_refused() {
    let p = pkg();
    let t = Scratch::new("wrong-arch");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);

    // The tarball's binary says little-endian MIPS (e_machine 8) on this x86-64 machine.
    let other = t.0.join("other");
    ok(Command::new("cp").arg("-a").arg(&p.dir).arg(&other));
    let mut b = fs::read(other.join("tg-ws-proxy")).unwrap();
    assert_eq!(
        &b[..6],
        b"\x7fELF\x02\x01",
        "the host binary is not a 64-bit LSB ELF"
    );
    b[18] = 8;
    b[19] = 0;
    fs::write(other.join("tg-ws-proxy"), &b).unwrap();
    let out = install(&other, &root, &path, &[]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "installed a MIPS tarball on x86-64");
    assert!(
        err.contains(
            "this tarball is for little-endian MIPS32 (mipsel_24kc), but this router is x86-64"
        ),
        "{err}"
    );
    assert!(
        !root.join("usr/bin/tg-ws-proxy").exists(),
        "the binary was installed anyway"
    );

    // uname -m says mips (UNAME_M: Debian's busybox sh always runs its own uname applet); the
    // byte order comes from the system's busybox, byte 5 of its ELF header.
    let on_mips = |root: &Path| {
        run(Command::new(busybox())
            .arg("sh")
            .arg(p.dir.join("install.sh"))
            .env_clear()
            .env("PATH", &path)
            .env("ROOT", root)
            .env("UNAME_M", "mips"))
    };
    let out = on_mips(&root);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "installed a x86-64 tarball on a MIPS router"
    );
    assert!(
        err.contains("this tarball is for x86-64, but this router is little-endian MIPS32"),
        "{err}"
    );
    let mut bb = fs::read(root.join("bin/busybox")).unwrap();
    bb[5] = 2;
    fs::write(root.join("bin/busybox"), bb).unwrap();
    let out = on_mips(&root);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr)
            .contains("but this router is big-endian MIPS32 (mips_24kc) (uname -m: mips)"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        !root.join("usr/bin/tg-ws-proxy").exists(),
        "the binary was installed anyway"
    );
}

/// ROOT=DIR for another CPU (building an image): the binary cannot run here, so the secret
/// comes from /dev/urandom and the link is left for the router.
#[test]
fn a_root_for_another_cpu_gets_a_secret_without_running_the_binary() {
    let p = pkg();
    let t = Scratch::new("image");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    // A little-endian MIPS tarball (patched e_machine) for a root whose busybox is
    // little-endian, with UNAME_M=mips: the CPUs match, but the binary does not run here.
    let other = t.0.join("mipsel");
    ok(Command::new("cp").arg("-a").arg(&p.dir).arg(&other));
    let mut b = fs::read(other.join("tg-ws-proxy")).unwrap();
    b[18] = 8;
    b[19] = 0;
    fs::write(other.join("tg-ws-proxy"), &b).unwrap();
    let out = run(Command::new(busybox())
        .arg("sh")
        .arg(other.join("install.sh"))
        .env_clear()
        .env("PATH", &path)
        .env("ROOT", &root)
        .env("UNAME_M", "mips"));
    let log = text(&out.stdout) + &text(&out.stderr);
    assert!(out.status.success(), "{log}");
    assert!(
        log.contains("CPU: little-endian MIPS32 (mipsel_24kc), matches"),
        "{log}"
    );
    assert_eq!(fs::read(root.join("usr/bin/tg-ws-proxy")).unwrap(), b);
    let secret_file = root.join("etc/tg-ws-proxy/secret");
    assert_eq!(mode(&secret_file), 0o600);
    secret_in(&secret_file);
    assert!(log.contains("from /dev/urandom"), "{log}");
    assert!(log.contains("could not print the link here"), "{log}");
}

#[test]
fn an_unknown_system_is_refused() {
    let p = pkg();
    let t = Scratch::new("unknown");
    let root = t.0.join("root");
    fs::create_dir_all(root.join("etc")).unwrap();
    let path = applet_path(&t.0);
    let out = install(&p.dir, &root, &path, &[]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("neither OpenWrt"),
        "{}",
        text(&out.stderr)
    );
    assert!(
        fs::read_dir(&root).unwrap().count() == 1,
        "files were written"
    );
}

#[test]
fn entware_install_puts_the_s99_script_and_opt_files() {
    let p = pkg();
    let t = Scratch::new("entware");
    let root = t.0.join("root");
    fs::create_dir_all(root.join("opt/etc")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::copy(busybox(), root.join("bin/busybox")).unwrap();
    write_exec(&root.join("opt/bin/opkg"), "#!/bin/sh\nexit 1\n");
    let path = applet_path(&t.0);
    let log = install_ok(&p.dir, &root, &path, &[]);
    assert!(log.contains("system: entware"), "{log}");
    let bin = root.join("opt/sbin/tg-ws-proxy");
    assert_eq!(
        fs::read(&bin).unwrap(),
        fs::read(p.dir.join("tg-ws-proxy")).unwrap()
    );
    assert_eq!(mode(&bin), 0o755);
    let s99 = root.join("opt/etc/init.d/S99tg-ws-proxy");
    assert_eq!(
        fs::read(&s99).unwrap(),
        fs::read(p.dir.join("S99tg-ws-proxy")).unwrap()
    );
    assert_eq!(mode(&s99), 0o755);
    assert_eq!(
        fs::read(root.join("opt/etc/tg-ws-proxy.conf")).unwrap(),
        fs::read(p.dir.join("tg-ws-proxy.conf.example")).unwrap()
    );
    assert_eq!(mode(&root.join("opt/etc/tg-ws-proxy/secret")), 0o600);
    let secret = secret_in(&root.join("opt/etc/tg-ws-proxy/secret"));
    assert!(
        !root.join("etc/init.d").exists() && !root.join("usr").exists(),
        "OpenWrt paths on Entware"
    );
    assert!(
        log.contains("tg://proxy?server=192.168.1.1&port=1443&secret=") && log.contains(&secret),
        "{log}"
    );

    // Uninstall keeps config and secret; --purge removes them.
    let log = install_ok(&p.dir, &root, &path, &["--uninstall"]);
    assert!(!bin.exists() && !s99.exists(), "{log}");
    assert!(
        root.join("opt/etc/tg-ws-proxy.conf").exists()
            && root.join("opt/etc/tg-ws-proxy/secret").exists()
    );
    install_ok(&p.dir, &root, &path, &["--uninstall", "--purge"]);
    assert!(
        !root.join("opt/etc/tg-ws-proxy.conf").exists()
            && !root.join("opt/etc/tg-ws-proxy").exists()
    );
}

/// The Entware script against a stand-in proxy (a busybox sh script that logs the signals it
/// gets), so start / status / reload / stop are checked without the real `--config`.
#[test]
fn entware_s99_starts_reloads_and_stops() {
    let t = Scratch::new("s99");
    let path = applet_path(&t.0);
    let events = t.0.join("events");
    let prog = t.0.join("fake-proxy");
    write_exec(
        &prog,
        &format!(
            "#!/bin/sh\necho \"args: $*\" >> {ev}\n\
             trap 'echo HUP >> {ev}' HUP\n\
             trap 'echo TERM >> {ev}; exit 0' TERM\n\
             while :; do sleep 1 & wait $!; done\n",
            ev = events.display()
        ),
    );
    let conf = t.0.join("tg-ws-proxy.conf");
    fs::write(
        &conf,
        format!(
            "port 1443\ndrain-timeout 2s\ncontrol-socket {}\n",
            t.0.join("run/ctl.sock").display()
        ),
    )
    .unwrap();
    let pidfile = t.0.join("run/tg-ws-proxy.pid");
    let s99 = |verb: &str| {
        run(Command::new(busybox())
            .arg("sh")
            .arg(repo().join("cross/entware/S99tg-ws-proxy"))
            .arg(verb)
            .env_clear()
            .env("PATH", &path)
            .env("TG_PROG", &prog)
            .env("TG_CONF", &conf)
            .env("TG_PIDFILE", &pidfile))
    };
    let read_events = || fs::read_to_string(&events).unwrap_or_default();

    let out = s99("start");
    assert!(
        out.status.success(),
        "start: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    let pid: u32 = fs::read_to_string(&pidfile)
        .unwrap()
        .trim()
        .parse()
        .unwrap();
    assert!(common::wait_until(Duration::from_secs(5), || read_events()
        .contains("args: run --config")));
    assert!(
        read_events().contains(&format!("args: run --config {}", conf.display())),
        "{}",
        read_events()
    );
    assert_eq!(
        mode(&t.0.join("run")),
        0o700,
        "the control socket's directory is not 0700"
    );
    let out = s99("status");
    assert!(out.status.success() && text(&out.stdout).contains(&format!("running (pid {pid})")));

    let out = s99("reload");
    assert!(out.status.success(), "reload: {}", text(&out.stdout));
    assert!(
        common::wait_until(Duration::from_secs(5), || read_events().contains("HUP")),
        "no SIGHUP reached the proxy: {}",
        read_events()
    );
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "reload stopped the proxy"
    );

    let out = s99("stop");
    assert!(out.status.success(), "stop: {}", text(&out.stdout));
    assert!(
        read_events().contains("TERM"),
        "stop sent no SIGTERM: {}",
        read_events()
    );
    assert!(!pidfile.exists(), "pid file left behind");
    let out = s99("status");
    assert!(!out.status.success() && text(&out.stdout).contains("not running"));
}

#[test]
fn shellcheck_passes_on_the_packaging_scripts() {
    let sc = need("shellcheck", "shellcheck");
    for (shell, f) in [
        ("sh", "cross/install.sh"),
        ("sh", "cross/entware/S99tg-ws-proxy"),
        ("bash", "cross/dist.sh"),
    ] {
        ok(Command::new(&sc).args(["-s", shell]).arg(repo().join(f)));
        if shell == "sh" {
            ok(Command::new(busybox())
                .args(["sh", "-n"])
                .arg(repo().join(f)));
        }
    }
}
