//! The release installer, black-box: `cross/install.sh` on its own (no tarball next to it) run
//! under Debian's `busybox sh` against a local HTTP server on 127.0.0.1 that serves a `dist/`
//! tree (SHA256SUMS and the tarball `cross/dist.sh package` makes from the host-built binary),
//! in a temporary root with a fake /etc/openwrt_release. The service is a stand-in for procd
//! (`SERVICE_CMD`, written below) that really runs the installed binary in the background on
//! loopback with every upstream on a dead loopback port, so "the service runs" is a process.
//! Fresh install, upgrade (the previous binary kept), a corrupt download, a failed start rolled
//! back, uninstall, a tarball for another CPU, a full flash, the CPU → target choice (ARM soft
//! or hard float, MIPS byte order) and generic Linux's paths. State is asserted (files, exit
//! codes, the running process), wording only where the message is the feature.
//!
//! Needs /bin/busybox (busybox-static) and GNU tar/gzip/sha256sum: missing ones FAIL the test
//! (tests/dist/mod.rs). Nothing leaves the machine: the server listens on 127.0.0.1 only.

mod common;
mod dist;

use std::collections::BTreeMap;
use std::fs;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use dist::*;

/// A `dist/` tree: SHA256SUMS and one tarball for the host target, whose binary is `binary`
/// (the packaged host build unless a test swaps it). `corrupt` flips a byte of the tarball
/// after SHA256SUMS was written.
fn dist_tree(at: &Path, binary: Option<&[u8]>, corrupt: bool) -> PathBuf {
    let p = pkg();
    let top = format!("tg-ws-proxy-{VERSION}-{TARGET}");
    let stage = at.join("stage");
    let out = at.join("dist");
    fs::create_dir_all(&stage).unwrap();
    fs::create_dir_all(&out).unwrap();
    ok(Command::new("cp")
        .arg("-a")
        .arg(&p.dir)
        .arg(stage.join(&top)));
    if let Some(b) = binary {
        let f = stage.join(&top).join("tg-ws-proxy");
        fs::write(&f, b).unwrap();
        fs::set_permissions(&f, fs::Permissions::from_mode(0o755)).unwrap();
    }
    let tgz = out.join(tarball_name());
    ok(Command::new("tar")
        .arg("czf")
        .arg(&tgz)
        .arg("-C")
        .arg(&stage)
        .arg(&top));
    let sums = ok(Command::new("sha256sum")
        .arg(tarball_name())
        .current_dir(&out));
    fs::write(out.join("SHA256SUMS"), sums).unwrap();
    if corrupt {
        let mut b = fs::read(&tgz).unwrap();
        let i = b.len() / 2;
        b[i] ^= 0xff;
        fs::write(&tgz, b).unwrap();
    }
    out
}

/// The host binary with a trailing marker: another build that still runs.
fn newer_binary(tag: &str) -> Vec<u8> {
    let mut b = fs::read(pkg().dir.join("tg-ws-proxy")).unwrap();
    b.extend_from_slice(format!("\n{tag}\n").as_bytes());
    b
}

/// One router: a fake OpenWrt root, a PATH of busybox applets plus busybox wget (the
/// download), `install.sh` alone in a directory, and the procd stand-in.
struct Router {
    t: Scratch,
    root: PathBuf,
    path: PathBuf,
    installer: PathBuf,
    svc: PathBuf,
    svc_dir: PathBuf,
}

impl Router {
    fn new(tag: &str) -> Router {
        let t = Scratch::new(tag);
        let root = openwrt_root(&t.0);
        let path = applet_path(&t.0);
        std::os::unix::fs::symlink(busybox(), path.join("wget")).unwrap();
        let inst_dir = t.0.join("installer");
        fs::create_dir_all(&inst_dir).unwrap();
        let installer = inst_dir.join("install.sh");
        fs::copy(repo().join("cross/install.sh"), &installer).unwrap();
        let svc_dir = t.0.join("svc");
        fs::create_dir_all(&svc_dir).unwrap();
        let svc = svc_dir.join("service");
        write_exec(&svc, &service_script(&root, &svc_dir));
        Router {
            t,
            root,
            path,
            installer,
            svc,
            svc_dir,
        }
    }

    /// `busybox sh install.sh ARGS` with ROOT, the applet PATH, the procd stand-in and short
    /// start waits, plus `env`.
    fn install_env(&self, args: &[&str], env: &[(&str, &str)]) -> Output {
        let tmp = self.t.0.join("tmp");
        fs::create_dir_all(&tmp).unwrap();
        let mut cmd = Command::new(busybox());
        cmd.arg("sh")
            .arg(&self.installer)
            .args(args)
            .env_clear()
            .env("PATH", &self.path)
            .env("ROOT", &self.root)
            .env("TMPDIR", &tmp)
            .env("SERVICE_CMD", &self.svc)
            .env("START_WAIT", "5")
            .env("START_SETTLE", "1");
        for (k, v) in env {
            cmd.env(k, v);
        }
        run(&mut cmd)
    }

    fn install(&self, args: &[&str]) -> Output {
        self.install_env(args, &[])
    }

    fn install_ok(&self, args: &[&str]) -> String {
        let out = self.install(args);
        let log = text(&out.stdout) + &text(&out.stderr);
        assert!(
            out.status.success(),
            "install.sh {args:?} failed ({}):\n{log}",
            out.status
        );
        log
    }

    fn bin(&self) -> PathBuf {
        self.root.join("usr/bin/tg-ws-proxy")
    }

    /// The running service's pid (the stand-in's answer), if any.
    fn pid(&self) -> Option<String> {
        let out = run(Command::new(busybox()).arg("sh").arg(&self.svc).arg("pids"));
        let p = text(&out.stdout).trim().to_string();
        (!p.is_empty()).then_some(p)
    }

    /// Every file under the root with its bytes and mode (the "nothing changed" check).
    fn snapshot(&self) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
        let mut m = BTreeMap::new();
        walk(&self.root, &self.root, &mut m);
        m
    }

    fn calls(&self) -> String {
        fs::read_to_string(self.svc_dir.join("calls")).unwrap_or_default()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = run(Command::new(busybox()).arg("sh").arg(&self.svc).arg("stop"));
    }
}

fn walk(base: &Path, dir: &Path, m: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>) {
    for e in fs::read_dir(dir).unwrap().flatten() {
        let p = e.path();
        let md = fs::symlink_metadata(&p).unwrap();
        if md.is_dir() {
            walk(base, &p, m);
        } else {
            let bytes = fs::read(&p).unwrap_or_default();
            m.insert(
                p.strip_prefix(base).unwrap().to_path_buf(),
                (bytes, md.permissions().mode()),
            );
        }
    }
}

/// The procd stand-in: `start`/`restart` run the installed binary in the background (on
/// 127.0.0.1, port 0, every upstream a dead loopback port, no fetches: the rig's run_args),
/// `stop` ends it, `pids` prints its pid while it lives (a zombie does not count), `enable` and
/// `disable` are recorded in `calls`.
fn service_script(root: &Path, dir: &Path) -> String {
    let resolv = dir.join("resolv.conf");
    fs::write(&resolv, "# none\n").unwrap();
    let args: Vec<String> = common::run_args()
        .iter()
        .map(|a| format!("'{a}'"))
        .collect();
    format!(
        r#"#!/bin/sh
R='{root}'
D='{dir}'
PIDF="$D/pid"
{procs}
echo "$1" >>"$D/calls"
case "$1" in
start | restart)
	stop
	"$R/usr/bin/tg-ws-proxy" {args} --resolv-conf '{resolv}' \
		--secret-file "$R/etc/tg-ws-proxy/secret" </dev/null >>"$D/log" 2>&1 &
	echo "$!" >"$PIDF"
	;;
stop) stop ;;
pids) alive && cat "$PIDF" ;;
enable | disable) ;;
*) exit 2 ;;
esac
exit 0
"#,
        root = root.display(),
        dir = dir.display(),
        args = args.join(" "),
        resolv = resolv.display(),
        procs = service_process_fns(100),
    )
}

#[test]
fn fresh_install_downloads_checks_the_sum_and_starts() {
    let r = Router::new("rel-fresh");
    let d = Scratch::new("rel-fresh-dist");
    let dist = dist_tree(&d.0, None, false);
    let srv = Server::start(&dist);

    let log = r.install_ok(&["--base", &srv.url()]);
    assert_installed_exec(&r.bin(), &pkg().dir.join("tg-ws-proxy"));
    assert_installed_exec(
        &r.root.join("etc/init.d/tg-ws-proxy"),
        &pkg().dir.join("tg-ws-proxy.init"),
    );
    assert_eq!(
        fs::read(r.root.join("etc/config/tg-ws-proxy")).unwrap(),
        fs::read(pkg().dir.join("tg-ws-proxy.config")).unwrap()
    );
    assert_eq!(mode(&r.root.join("etc/tg-ws-proxy/secret")), 0o600);
    secret_in(&r.root.join("etc/tg-ws-proxy/secret"));
    assert!(
        !r.root.join("usr/bin/tg-ws-proxy.old").exists(),
        "an .old on a fresh install"
    );
    assert!(r.pid().is_some(), "the service does not run:\n{log}");
    let calls = r.calls();
    assert!(
        calls.contains("enable") && calls.contains("start"),
        "{calls}"
    );
    assert!(
        log.contains("tg://proxy?server=192.168.1.1&port=1443&secret="),
        "{log}"
    );
    // Nothing of the download is left in TMPDIR.
    assert_eq!(fs::read_dir(r.t.0.join("tmp")).unwrap().count(), 0);

    // A local directory and file:// work as the base too (a mirror on a USB stick).
    let r2 = Router::new("rel-fresh-dir");
    r2.install_ok(&["--base", dist.to_str().unwrap(), "--no-start"]);
    assert_installed_exec(&r2.bin(), &pkg().dir.join("tg-ws-proxy"));
    assert!(r2.pid().is_none(), "--no-start started it");
    let r3 = Router::new("rel-fresh-file");
    r3.install_ok(&[&format!("--base=file://{}", dist.display()), "--no-start"]);
    assert_installed_exec(&r3.bin(), &pkg().dir.join("tg-ws-proxy"));
}

#[test]
fn upgrade_keeps_the_previous_binary_and_restarts() {
    let r = Router::new("rel-upgrade");
    let d1 = Scratch::new("rel-upgrade-v1");
    let v1 = Server::start(&dist_tree(&d1.0, None, false));
    r.install_ok(&["--base", &v1.url()]);
    let pid1 = r.pid().expect("v1 runs");
    let secret = secret_in(&r.root.join("etc/tg-ws-proxy/secret"));

    let d2 = Scratch::new("rel-upgrade-v2");
    let newer = newer_binary("v2");
    let v2 = Server::start(&dist_tree(&d2.0, Some(&newer), false));
    let log = r.install_ok(&["--base", &v2.url()]);
    assert_eq!(
        fs::read(r.bin()).unwrap(),
        newer,
        "binary not replaced:\n{log}"
    );
    assert_eq!(
        fs::read(r.root.join("usr/bin/tg-ws-proxy.old")).unwrap(),
        fs::read(pkg().dir.join("tg-ws-proxy")).unwrap(),
        "the previous binary is not kept"
    );
    let pid2 = r.pid().expect("v2 runs");
    assert_ne!(pid1, pid2, "not restarted");
    assert!(r.calls().contains("restart"), "{}", r.calls());
    assert_eq!(secret_in(&r.root.join("etc/tg-ws-proxy/secret")), secret);
}

#[test]
fn a_checksum_mismatch_is_refused_with_nothing_changed() {
    let r = Router::new("rel-sum");
    let d1 = Scratch::new("rel-sum-v1");
    let v1 = Server::start(&dist_tree(&d1.0, None, false));
    r.install_ok(&["--base", &v1.url()]);
    let pid = r.pid().expect("v1 runs");
    let before = r.snapshot();

    let d2 = Scratch::new("rel-sum-bad");
    let bad = Server::start(&dist_tree(&d2.0, Some(&newer_binary("v2")), true));
    let out = r.install(&["--base", &bad.url()]);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "a corrupt download was installed");
    assert!(err.contains("checksum mismatch"), "{err}");
    assert!(err.contains("nothing was changed"), "{err}");
    assert!(r.snapshot() == before, "the root changed");
    assert_eq!(
        r.pid().as_deref(),
        Some(pid.as_str()),
        "the running service was touched"
    );
    assert_eq!(
        fs::read_dir(r.t.0.join("tmp")).unwrap().count(),
        0,
        "download left behind"
    );
}

#[test]
fn a_failed_start_rolls_back_to_the_previous_binary() {
    let r = Router::new("rel-rollback");
    let d1 = Scratch::new("rel-rollback-v1");
    let v1 = Server::start(&dist_tree(&d1.0, None, false));
    r.install_ok(&["--base", &v1.url()]);
    r.pid().expect("v1 runs");

    // The "new version": an x86-64 ELF whose --version works but which exits at once when
    // started (coreutils' true): the service never stays up.
    let d2 = Scratch::new("rel-rollback-v2");
    let broken = fs::read(need("/bin/true", "coreutils")).unwrap();
    let v2 = Server::start(&dist_tree(&d2.0, Some(&broken), false));
    let out = r.install(&["--base", &v2.url()]);
    let log = text(&out.stdout) + &text(&out.stderr);
    assert!(
        !out.status.success(),
        "a version that does not start was kept:\n{log}"
    );
    assert!(log.contains("rolled back"), "{log}");
    let v1_bytes = fs::read(pkg().dir.join("tg-ws-proxy")).unwrap();
    assert_eq!(fs::read(r.bin()).unwrap(), v1_bytes, "not rolled back");
    assert_eq!(
        fs::read(r.root.join("usr/bin/tg-ws-proxy.old")).unwrap(),
        v1_bytes
    );
    assert!(
        r.pid().is_some(),
        "the previous version does not run again:\n{log}"
    );
}

#[test]
fn uninstall_removes_the_binaries_and_keeps_config_until_purge() {
    let r = Router::new("rel-uninstall");
    let d1 = Scratch::new("rel-uninstall-v1");
    let v1 = Server::start(&dist_tree(&d1.0, None, false));
    r.install_ok(&["--base", &v1.url()]);
    let d2 = Scratch::new("rel-uninstall-v2");
    let v2 = Server::start(&dist_tree(&d2.0, Some(&newer_binary("v2")), false));
    r.install_ok(&["--base", &v2.url()]);
    assert!(r.root.join("usr/bin/tg-ws-proxy.old").exists());

    r.install_ok(&["--uninstall"]);
    assert!(r.pid().is_none(), "still running after --uninstall");
    assert!(r.calls().contains("disable"), "{}", r.calls());
    for f in [
        "usr/bin/tg-ws-proxy",
        "usr/bin/tg-ws-proxy.old",
        "etc/init.d/tg-ws-proxy",
    ] {
        assert!(!r.root.join(f).exists(), "{f} left behind");
    }
    assert!(r.root.join("etc/config/tg-ws-proxy").exists());
    assert!(r.root.join("etc/tg-ws-proxy/secret").exists());

    r.install_ok(&["--uninstall", "--purge"]);
    assert!(!r.root.join("etc/config/tg-ws-proxy").exists());
    assert!(!r.root.join("etc/tg-ws-proxy").exists());
}

#[test]
fn a_tarball_for_another_cpu_is_refused_with_nothing_changed() {
    let r = Router::new("rel-arch");
    let d1 = Scratch::new("rel-arch-v1");
    let v1 = Server::start(&dist_tree(&d1.0, None, false));
    r.install_ok(&["--base", &v1.url()]);
    let pid = r.pid().expect("v1 runs");
    let before = r.snapshot();

    // A release whose x86-64 tarball holds an aarch64 binary (e_machine 0xb7): it cannot run.
    let mut b = newer_binary("arm64");
    b[18] = 0xb7;
    b[19] = 0;
    let d2 = Scratch::new("rel-arch-v2");
    let v2 = Server::start(&dist_tree(&d2.0, Some(&b), false));
    let out = r.install(&["--base", &v2.url()]);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "installed an aarch64 binary on x86-64"
    );
    assert!(
        err.contains("this tarball is for 64-bit ARM, but this machine is x86-64"),
        "{err}"
    );
    assert!(r.snapshot() == before, "the root changed");
    assert_eq!(r.pid().as_deref(), Some(pid.as_str()));

    // An x86-64 ELF that does not run as tg-ws-proxy (busybox: "applet not found", exit 127):
    // its --version fails before anything is written.
    let d3 = Scratch::new("rel-arch-v3");
    let bb = fs::read(busybox()).unwrap();
    let v3 = Server::start(&dist_tree(&d3.0, Some(&bb), false));
    let out = r.install(&["--base", &v3.url()]);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "installed a binary whose --version fails"
    );
    assert!(err.contains("--version failed"), "{err}");
    assert!(r.snapshot() == before, "the root changed");
    assert_eq!(r.pid().as_deref(), Some(pid.as_str()));
}

#[test]
fn a_full_flash_is_refused_with_nothing_changed() {
    let r = Router::new("rel-full");
    let d1 = Scratch::new("rel-full-v1");
    let v1 = Server::start(&dist_tree(&d1.0, None, false));
    r.install_ok(&["--base", &v1.url()]);
    let pid = r.pid().expect("v1 runs");
    let before = r.snapshot();

    // df says the overlay has 300 KiB free: less than the new binary. (DF names it: Debian's
    // busybox sh runs its own df applet before any on PATH.)
    let fake = r.t.0.join("fake-df");
    write_exec(
        &fake.join("df"),
        "#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n\
         echo 'overlayfs:/overlay 5000 4700 300 94% /'\n",
    );
    let d2 = Scratch::new("rel-full-v2");
    let v2 = Server::start(&dist_tree(&d2.0, Some(&newer_binary("v2")), false));
    let df = fake.join("df");
    let df_env = [("DF", df.to_str().unwrap())];
    let out = r.install_env(&["--base", &v2.url()], &df_env);
    let err = text(&out.stderr);
    assert!(!out.status.success(), "installed without room");
    assert!(err.contains("not enough free space"), "{err}");
    assert!(err.contains("300 KiB free"), "{err}");
    assert!(r.snapshot() == before, "the root changed");
    assert_eq!(r.pid().as_deref(), Some(pid.as_str()));

    // With room (df says 100 MB) the same release installs.
    write_exec(
        &fake.join("df"),
        "#!/bin/sh\necho 'Filesystem 1024-blocks Used Available Capacity Mounted on'\n\
         echo 'overlayfs:/overlay 200000 100000 100000 50% /'\n",
    );
    let out = r.install_env(&["--base", &v2.url()], &df_env);
    assert!(out.status.success(), "{}", text(&out.stderr));
}

/// The CPU → target choice, seen through the target install.sh looks for in SHA256SUMS (the
/// release here has only the x86-64 tarball, so every other CPU is refused naming its target).
#[test]
fn the_cpu_picks_the_target_arm_float_and_mips_byte_order() {
    let d = Scratch::new("rel-cpu-dist");
    let srv = Server::start(&dist_tree(&d.0, None, false));
    let r = Router::new("rel-cpu");
    let soft = r.t.0.join("cpuinfo-soft");
    fs::write(
        &soft,
        "processor\t: 0\nFeatures\t: half thumb fastmult edsp\n",
    )
    .unwrap();
    let hard = r.t.0.join("cpuinfo-hard");
    fs::write(
        &hard,
        "processor\t: 0\nFeatures\t: half thumb fastmult vfp edsp neon vfpv3 tls vfpv4\n",
    )
    .unwrap();
    let want = |uname: &str, cpuinfo: &Path, distrib: &str, target: &str| {
        fs::write(
            r.root.join("etc/openwrt_release"),
            format!("DISTRIB_ID='OpenWrt'\nDISTRIB_ARCH='{distrib}'\n"),
        )
        .unwrap();
        let out = r.install_env(
            &["--base", &srv.url()],
            &[("UNAME_M", uname), ("CPUINFO", cpuinfo.to_str().unwrap())],
        );
        let err = text(&out.stdout) + &text(&out.stderr);
        assert!(
            !out.status.success(),
            "{uname}: installed the x86-64 build:\n{err}"
        );
        assert!(
            err.contains(&format!("lists no tarball for {target}")),
            "{uname} {distrib}: want {target}:\n{err}"
        );
    };
    let none = r.t.0.join("no-cpuinfo");
    want(
        "armv7l",
        &soft,
        "arm_cortex-a9",
        "arm-unknown-linux-musleabi",
    );
    want(
        "armv7l",
        &hard,
        "arm_cortex-a7_neon-vfpv4",
        "armv7-unknown-linux-musleabihf",
    );
    // No /proc/cpuinfo Features: OpenWrt's DISTRIB_ARCH decides.
    want(
        "armv7l",
        &none,
        "arm_cortex-a9",
        "arm-unknown-linux-musleabi",
    );
    want(
        "armv7l",
        &none,
        "arm_cortex-a9_vfpv3-d16",
        "armv7-unknown-linux-musleabihf",
    );
    want(
        "armv6l",
        &hard,
        "arm_arm1176jzf-s_vfp",
        "arm-unknown-linux-musleabi",
    );
    want(
        "aarch64",
        &none,
        "aarch64_cortex-a53",
        "aarch64-unknown-linux-musl",
    );
    // MIPS: the byte order of the system's busybox (the root's is x86-64, little-endian).
    want("mips", &none, "mipsel_24kc", "mipsel-unknown-linux-musl");
    // ARMv5 has no build: refused before any download, saying so.
    let out = r.install_env(&["--base", &srv.url()], &[("UNAME_M", "armv5tel")]);
    assert!(!out.status.success());
    assert!(
        text(&out.stderr).contains("no build for this CPU"),
        "{}",
        text(&out.stderr)
    );
    assert!(!r.bin().exists(), "something was installed");
}

/// Generic Linux (neither OpenWrt nor Entware): the paths of docs/setup.md, no /opt.
#[test]
fn generic_linux_uses_the_documented_paths() {
    let t = Scratch::new("rel-linux");
    let root = t.0.join("root");
    fs::create_dir_all(root.join("etc/systemd/system")).unwrap();
    fs::create_dir_all(root.join("bin")).unwrap();
    fs::copy(busybox(), root.join("bin/busybox")).unwrap();
    let path = applet_path(&t.0);
    let log = install_ok(&pkg().dir, &root, &path, &[]);
    assert_installed_exec(
        &root.join("usr/local/bin/tg-ws-proxy"),
        &pkg().dir.join("tg-ws-proxy"),
    );
    let conf = fs::read_to_string(root.join("etc/tg-ws-proxy.conf")).unwrap();
    assert!(
        conf.contains("\nsecret-file /etc/tg-ws-proxy.secret\n"),
        "{conf}"
    );
    assert!(!conf.contains("/opt"), "{conf}");
    let unit = fs::read_to_string(root.join("etc/systemd/system/tg-ws-proxy.service")).unwrap();
    assert!(
        unit.contains("ExecStart=/usr/local/bin/tg-ws-proxy run --config /etc/tg-ws-proxy.conf"),
        "{unit}"
    );
    assert_eq!(mode(&root.join("etc/tg-ws-proxy.secret")), 0o600);
    secret_in(&root.join("etc/tg-ws-proxy.secret"));
    assert!(!root.join("opt").exists(), "wrote under /opt");
    assert!(!log.contains("/opt"), "{log}");
    assert!(
        log.contains("tg://proxy?server=127.0.0.1&port=1443&secret="),
        "{log}"
    );
}

#[test]
fn shellcheck_passes_on_install_sh() {
    let sc = need("shellcheck", "shellcheck");
    ok(Command::new(&sc)
        .args(["-s", "sh"])
        .arg(repo().join("cross/install.sh")));
    ok(Command::new(busybox())
        .args(["sh", "-n"])
        .arg(repo().join("cross/install.sh")));
}

/// A 32-bit ARM ELF header (52 bytes) with the float ABI in e_flags (0x400 hard, 0x200 soft),
/// then a shell line: the kernel refuses it here, and install.sh must never start it.
fn arm_header(hard: bool) -> Vec<u8> {
    let mut h = vec![0u8; 52];
    h[..7].copy_from_slice(b"\x7fELF\x01\x01\x01");
    h[16] = 2; // ET_EXEC
    h[18] = 0x28; // EM_ARM
    h[20] = 1; // EV_CURRENT
    h[36..40].copy_from_slice(&(0x0500_0000u32 | if hard { 0x400 } else { 0x200 }).to_le_bytes());
    h.extend_from_slice(b"\n: >ran-as-script\n");
    h
}

/// The tarball binary's float ABI (ELF e_flags) must fit the CPU: a hard-float build is refused
/// on an ARM without VFPv3, a soft-float build is taken on an ARM with one.
#[test]
fn an_arm_build_must_fit_the_fpu() {
    let t = Scratch::new("rel-armfloat");
    let root = openwrt_root(&t.0);
    let path = applet_path(&t.0);
    let soft_cpu = t.0.join("cpuinfo-soft");
    fs::write(&soft_cpu, "Features\t: half thumb fastmult edsp\n").unwrap();
    let hard_cpu = t.0.join("cpuinfo-hard");
    fs::write(
        &hard_cpu,
        "Features\t: half thumb vfp edsp neon vfpv3 tls\n",
    )
    .unwrap();
    let cwd = t.0.join("cwd");
    fs::create_dir_all(&cwd).unwrap();
    let with = |hard_build: bool, cpuinfo: &Path| {
        let dir = t.0.join(format!("tgz-{hard_build}"));
        if !dir.exists() {
            ok(Command::new("cp").arg("-a").arg(&pkg().dir).arg(&dir));
            fs::write(dir.join("tg-ws-proxy"), arm_header(hard_build)).unwrap();
        }
        run(Command::new(busybox())
            .current_dir(&cwd)
            .arg("sh")
            .arg(dir.join("install.sh"))
            .env_clear()
            .env("PATH", &path)
            .env("ROOT", &root)
            .env("UNAME_M", "armv7l")
            .env("CPUINFO", cpuinfo))
    };
    let out = with(true, &soft_cpu);
    let err = text(&out.stderr);
    assert!(
        !out.status.success(),
        "a hard-float build went onto an FPU-less ARM"
    );
    assert!(
        err.contains("for ARMv7 with FPU (hard float), but this machine is ARMv6+ without FPU"),
        "{err}"
    );
    assert!(!root.join("usr/bin/tg-ws-proxy").exists());

    let out = with(false, &hard_cpu);
    assert!(
        out.status.success(),
        "the soft-float build was refused on a hard-float ARM:\n{}",
        text(&out.stderr)
    );
    assert_eq!(
        fs::read(root.join("usr/bin/tg-ws-proxy")).unwrap(),
        arm_header(false)
    );
    assert_eq!(
        fs::read_dir(&cwd).unwrap().count(),
        0,
        "the ARM binary was run as a script"
    );
}

/// The release's own install.sh (`cross/dist.sh installer DIR BASE`, what the release workflow
/// publishes) downloads from BASE with no option; SHA256SUMS then covers it too. The source
/// tree's copy, with no address and no tarball next to it, says what to pass.
#[test]
fn the_published_install_sh_downloads_from_its_release() {
    let d = Scratch::new("rel-published-dist");
    let dist = dist_tree(&d.0, None, false);
    let srv = Server::start(&dist);
    ok(Command::new("bash")
        .arg(repo().join("cross/dist.sh"))
        .args(["installer"])
        .arg(&dist)
        .arg(srv.url()));
    let sums = fs::read_to_string(dist.join("SHA256SUMS")).unwrap();
    assert!(sums.lines().any(|l| l.ends_with("  install.sh")), "{sums}");
    ok(Command::new("sha256sum")
        .args(["-c", "SHA256SUMS"])
        .current_dir(&dist));

    let r = Router::new("rel-published");
    let out = r.install(&[]);
    assert!(
        !out.status.success(),
        "the source tree's install.sh found a release"
    );
    assert!(
        text(&out.stderr).contains("pass --base URL"),
        "{}",
        text(&out.stderr)
    );
    assert!(!r.bin().exists());

    fs::copy(dist.join("install.sh"), &r.installer).unwrap();
    r.install_ok(&[]);
    assert_installed_exec(&r.bin(), &pkg().dir.join("tg-ws-proxy"));
    assert!(r.pid().is_some(), "not started");
}
