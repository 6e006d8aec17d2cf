//! Router packaging, black-box, Entware (Keenetic) side: the tarball's `install.sh` under
//! `busybox sh` in a temporary root with a fake Entware `/opt` (layout, `--uninstall`,
//! `--purge`), `S99tg-ws-proxy` start / status / reload / stop against a stand-in proxy, and
//! `shellcheck` over every packaging script. The shared rig: tests/dist/mod.rs.

mod common;
mod dist;

use std::fs;
use std::os::unix::process::CommandExt;
use std::path::Path;
use std::process::Command;
use std::time::Duration;

use dist::*;

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
    assert_installed_exec(&bin, &p.dir.join("tg-ws-proxy"));
    let s99 = root.join("opt/etc/init.d/S99tg-ws-proxy");
    assert_installed_exec(&s99, &p.dir.join("S99tg-ws-proxy"));
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
            // The traps first: the test sends SIGHUP once it sees the `args:` line, and a HUP
            // before its trap would end the stand-in instead of being recorded.
            "#!/bin/sh\ntrap 'echo HUP >> {ev}' HUP\n\
             trap 'echo TERM >> {ev}; exit 0' TERM\n\
             echo \"args: $*\" >> {ev}\n\
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
        let mut cmd = Command::new(busybox());
        // A shell cannot trap a signal that was ignored when it started (POSIX), and a test
        // run under `nohup` (as CI starts it) inherits SIGHUP ignored: the stand-in's HUP trap
        // would then never fire. Start the script with SIGHUP's default, as at a router's boot.
        // SAFETY: signal() between fork and exec, async-signal-safe, touches no memory.
        unsafe {
            cmd.pre_exec(|| {
                libc::signal(libc::SIGHUP, libc::SIG_DFL);
                Ok(())
            });
        }
        run(cmd
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
