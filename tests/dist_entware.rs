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

/// A stand-in proxy (a busybox sh script that logs its args and the signals it gets) and the
/// paths the S99 script is pointed at, in one scratch directory.
struct S99Rig {
    t: Scratch,
    events: std::path::PathBuf,
    prog: std::path::PathBuf,
    conf: std::path::PathBuf,
    pidfile: std::path::PathBuf,
}

impl S99Rig {
    /// `exit_on_term`: the stand-in exits at SIGTERM (a drain with no session left), or records
    /// it and runs on (a drain that never ends: only SIGKILL stops it).
    fn new(name: &str, exit_on_term: bool) -> S99Rig {
        let t = Scratch::new(name);
        let events = t.0.join("events");
        let prog = t.0.join("fake-proxy");
        write_exec(
            &prog,
            &format!(
                // The traps first: the test sends SIGHUP once it sees the `args:` line, and a
                // HUP before its trap would end the stand-in instead of being recorded.
                "#!/bin/sh\ntrap 'echo HUP >> {ev}' HUP\n\
                 trap 'echo TERM >> {ev}{exit}' TERM\n\
                 echo \"args: $*\" >> {ev}\n\
                 while :; do sleep 1 & wait $!; done\n",
                ev = events.display(),
                exit = if exit_on_term { "; exit 0" } else { "" }
            ),
        );
        let conf = t.0.join("tg-ws-proxy.conf");
        let pidfile = t.0.join("run/tg-ws-proxy.pid");
        S99Rig {
            t,
            events,
            prog,
            conf,
            pidfile,
        }
    }

    fn write_conf(&self, drain: &str) {
        fs::write(
            &self.conf,
            format!(
                "port 1443\ndrain-timeout {drain}\ncontrol-socket {}\n",
                self.t.0.join("run/ctl.sock").display()
            ),
        )
        .unwrap();
    }

    fn s99(&self, verb: &str) -> std::process::Output {
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
            .env("PATH", applet_path(&self.t.0))
            .env("TG_PROG", &self.prog)
            .env("TG_CONF", &self.conf)
            .env("TG_PIDFILE", &self.pidfile))
    }

    fn events(&self) -> String {
        fs::read_to_string(&self.events).unwrap_or_default()
    }

    /// `start`, then waits for the stand-in's `args:` line; returns its pid.
    fn start(&self) -> u32 {
        let out = self.s99("start");
        assert!(
            out.status.success(),
            "start: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        let pid: u32 = fs::read_to_string(&self.pidfile)
            .unwrap()
            .trim()
            .parse()
            .unwrap();
        assert!(common::wait_until(Duration::from_secs(5), || self
            .events()
            .contains("args: run --config")));
        pid
    }

    /// `stop`: it must succeed, say so, send SIGTERM and remove the pid file.
    fn stop(&self) {
        let out = self.s99("stop");
        assert!(
            out.status.success() && text(&out.stdout).contains("stopped"),
            "stop: {}{}",
            text(&out.stdout),
            text(&out.stderr)
        );
        assert!(
            text(&out.stderr).is_empty(),
            "stop wrote to stderr: {}",
            text(&out.stderr)
        );
        assert!(
            self.events().contains("TERM"),
            "stop sent no SIGTERM: {}",
            self.events()
        );
        assert!(!self.pidfile.exists(), "pid file left behind");
    }
}

/// The Entware script against a stand-in proxy, so start / status / reload / stop are checked
/// without the real `--config`.
#[test]
fn entware_s99_starts_reloads_and_stops() {
    let rig = S99Rig::new("s99", true);
    rig.write_conf("2s");
    let pid = rig.start();
    assert!(
        rig.events()
            .contains(&format!("args: run --config {}", rig.conf.display())),
        "{}",
        rig.events()
    );
    assert_eq!(
        mode(&rig.t.0.join("run")),
        0o700,
        "the control socket's directory is not 0700"
    );
    let out = rig.s99("status");
    assert!(out.status.success() && text(&out.stdout).contains(&format!("running (pid {pid})")));

    let out = rig.s99("reload");
    assert!(out.status.success(), "reload: {}", text(&out.stdout));
    assert!(
        common::wait_until(Duration::from_secs(5), || rig.events().contains("HUP")),
        "no SIGHUP reached the proxy: {}",
        rig.events()
    );
    assert!(
        Path::new(&format!("/proc/{pid}")).exists(),
        "reload stopped the proxy"
    );

    rig.stop();
    let out = rig.s99("status");
    assert!(!out.status.success() && text(&out.stdout).contains("not running"));
}

/// `stop` reads `drain-timeout` in every form of the duration grammar: `500ms` and `1.5m` made
/// the old integer-only arithmetic fail ("arithmetic syntax error"), so stop gave up after the
/// SIGTERM without waiting or removing the pid file.
#[test]
fn entware_s99_stop_reads_every_drain_timeout_form() {
    let rig = S99Rig::new("s99-drain", true);
    for drain in ["500ms", "1.5m", "0.25", "08", "0.0005h"] {
        rig.write_conf(drain);
        let _ = fs::remove_file(&rig.events);
        rig.start();
        rig.stop();
    }
}

/// A proxy still running after its drain is killed once the drain timeout (rounded up to whole
/// seconds) plus the script's 3 s of slack have passed: `1500ms` waits 2 + 3 = 5 one-second
/// rounds, not fewer (a misread value of 0 or 1 would kill it after 3 or 4).
#[test]
fn entware_s99_stop_kills_after_the_drain_timeout_plus_slack() {
    let rig = S99Rig::new("s99-kill", false);
    rig.write_conf("1500ms");
    rig.start();
    let t0 = std::time::Instant::now();
    let out = rig.s99("stop");
    let took = t0.elapsed();
    assert!(
        out.status.success() && text(&out.stdout).contains("killing pid"),
        "stop: {}{}",
        text(&out.stdout),
        text(&out.stderr)
    );
    assert!(rig.events().contains("TERM"), "{}", rig.events());
    assert!(
        took >= Duration::from_millis(4900) && took < Duration::from_secs(20),
        "killed after {took:?}, want the 5 s of a 1500ms drain + 3 s"
    );
    assert!(!rig.pidfile.exists(), "pid file left behind");
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
