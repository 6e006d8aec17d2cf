//! The OpenWrt procd init script (cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.init), run for
//! real under Debian's `busybox sh` with the stand-ins in tests/data/openwrt/ (rc.common,
//! functions.sh with config_load and `uci get`, procd.sh recording every procd_* call), in a
//! temporary root (`TG_ROOT`) with only busybox's applets on PATH: what it writes (the
//! configuration file, the secret file), what it asks procd for (command, reload signal,
//! respawn, triggers) and what it refuses. Plus
//! `shellcheck -s sh` over the script. The shipped UCI file's check lives in openwrt_uci.rs.
//!
//! Needs `busybox` (Debian busybox-static) and `shellcheck`: without them every test here
//! FAILS saying which package to install (.ci/run installs both). The only address used is
//! 127.0.0.1 (the fake LAN address); nothing listens.

mod common;

use std::fs;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use common::{bin, data_path, temp_dir, wait_until};

/// Bound on one init script action (it runs `tg-ws-proxy link` once at most).
const ACTION_TIMEOUT: Duration = Duration::from_secs(20);

/// The init script under test.
fn init_script() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("cross/openwrt/tg-ws-proxy/files/tg-ws-proxy.init")
}

/// The path of `prog` on PATH, or a failure naming the Debian package that provides it.
pub fn need(prog: &str, package: &str) -> PathBuf {
    let path = std::env::var_os("PATH").unwrap_or_default();
    std::env::split_paths(&path)
        .map(|d| d.join(prog))
        .find(|p| p.is_file())
        .unwrap_or_else(|| {
            panic!(
                "{prog} not found on PATH: this test needs Debian's {package} \
                 (apt-get install {package}; .ci/run installs it)"
            )
        })
}

/// The user the script is told to run the proxy as, and its uid: `nobody` when the tests run
/// as root (chown works), else the current user (chown to oneself works).
fn service_user() -> (String, u32) {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    let passwd = fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    let want = |name: &str, id: Option<u32>| {
        passwd.lines().find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            let id_here: u32 = f.get(2)?.parse().ok()?;
            let hit = if uid == 0 {
                f[0] == name
            } else {
                Some(id_here) == id
            };
            hit.then(|| (f[0].to_string(), id_here))
        })
    };
    let found = if uid == 0 {
        want("nobody", None)
    } else {
        want("", Some(uid))
    };
    found.expect("the service user (nobody, or the current user) is in /etc/passwd")
}

/// Fills `dir` with a link to busybox per applet: the script's PATH, so it runs with the tools a
/// router has (busybox's chown, mkdir, tr, …), not the host's.
fn busybox_path(dir: &Path) {
    let busybox = need("busybox", "busybox-static");
    let list = Command::new(&busybox)
        .arg("--list")
        .output()
        .expect("busybox --list");
    assert!(list.status.success(), "busybox --list failed");
    fs::create_dir_all(dir).unwrap();
    for applet in String::from_utf8_lossy(&list.stdout).lines() {
        std::os::unix::fs::symlink(&busybox, dir.join(applet)).unwrap();
    }
}

/// One recorded procd_* call: the function name, then its arguments.
type Call = Vec<String>;

/// A fake router: a temporary root with /etc/config/{tg-ws-proxy,network} and the real binary
/// as /usr/bin/tg-ws-proxy.
struct Router {
    root: PathBuf,
    user: String,
    uid: u32,
}

/// What one init script action printed and returned.
struct Outcome {
    code: Option<i32>,
    stdout: String,
    stderr: String,
}

impl Router {
    /// A root whose UCI section `main` holds `enabled 1`, the service user and `body` (tab-
    /// indented `option`/`list` lines, UCI syntax).
    fn new(body: &str) -> Router {
        need("busybox", "busybox-static");
        let root = temp_dir();
        let (user, uid) = service_user();
        fs::create_dir_all(root.join("etc/config")).unwrap();
        fs::create_dir_all(root.join("usr/bin")).unwrap();
        std::os::unix::fs::symlink(bin(), root.join("usr/bin/tg-ws-proxy")).unwrap();
        busybox_path(&root.join("bb"));
        fs::write(
            root.join("etc/config/network"),
            "config interface 'lan'\n\toption proto 'static'\n\toption ipaddr '127.0.0.1'\n",
        )
        .unwrap();
        let r = Router { root, user, uid };
        r.set_uci(body);
        r
    }

    fn set_uci(&self, body: &str) {
        let text = format!(
            "config proxy 'main'\n\toption enabled '1'\n\toption user '{}'\n{body}",
            self.user
        );
        fs::write(self.root.join("etc/config/tg-ws-proxy"), text).unwrap();
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// `/etc/init.d/tg-ws-proxy ACTION`, through the rc.common stand-in.
    fn run(&self, action: &str) -> Outcome {
        let busybox = need("busybox", "busybox-static");
        let mut cmd = Command::new(busybox);
        for (k, _) in std::env::vars_os() {
            if k.to_string_lossy().starts_with("TG_") {
                cmd.env_remove(k);
            }
        }
        cmd.arg("sh")
            .arg(data_path("openwrt/rc.common"))
            .arg(init_script())
            .arg(action)
            .env("TG_ROOT", &self.root)
            .env("PATH", self.path("bb"))
            .env("STUB_DIR", data_path("openwrt"))
            .env("UCI_CONFIG_DIR", self.path("etc/config"))
            .env("PROCD_RECORD", self.path("procd.calls"))
            .env("LOGGER_RECORD", self.path("logger.calls"))
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped());
        let mut child = cmd.spawn().expect("spawn busybox sh");
        let out = child.stdout.take().unwrap();
        let err = child.stderr.take().unwrap();
        let out = std::thread::spawn(move || std::io::read_to_string(out).unwrap_or_default());
        let err = std::thread::spawn(move || std::io::read_to_string(err).unwrap_or_default());
        let mut status = None;
        if !wait_until(ACTION_TIMEOUT, || {
            status = child.try_wait().ok().flatten();
            status.is_some()
        }) {
            let _ = child.kill();
            let _ = child.wait();
        }
        Outcome {
            code: status.and_then(|s| s.code()),
            stdout: out.join().unwrap(),
            stderr: err.join().unwrap(),
        }
    }

    /// Every procd_* call recorded so far (and forgets them, so the next action starts afresh).
    fn take_calls(&self) -> Vec<Call> {
        let p = self.path("procd.calls");
        let text = fs::read_to_string(&p).unwrap_or_default();
        let _ = fs::remove_file(&p);
        text.lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    }

    /// Everything the script sent to logger.
    fn logged(&self) -> String {
        fs::read_to_string(self.path("logger.calls")).unwrap_or_default()
    }

    fn conf_path(&self) -> PathBuf {
        self.path("var/etc/tg-ws-proxy.conf")
    }

    /// The generated configuration file without its first (comment) line.
    fn conf_settings(&self) -> String {
        let text = fs::read_to_string(self.conf_path()).expect("the configuration file exists");
        assert!(text.starts_with("# "), "first line is a comment: {text}");
        text.split_once('\n')
            .map(|(_, rest)| rest.to_string())
            .unwrap()
    }

    /// The settings the script adds after the UCI ones, for a root with default paths.
    fn added_settings(&self) -> String {
        format!(
            "host 127.0.0.1\nsecret-file {}\nbind-retry 5s\ncontrol-socket {}\n\
             cf-domain-cache {}\n",
            self.path("etc/tg-ws-proxy/secret").display(),
            self.path("var/run/tg-ws-proxy/ctl.sock").display(),
            self.path("etc/tg-ws-proxy/cache/cf-domains").display()
        )
    }

    fn expect_started(&self, o: &Outcome) -> Vec<Call> {
        assert_eq!(o.code, Some(0), "start failed: {} {}", o.stdout, o.stderr);
        let calls = self.take_calls();
        assert!(has(&calls, &["procd_open_instance"]), "{calls:?}");
        calls
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = fs::remove_dir_all(&self.root);
    }
}

/// True when a call starts with exactly these words.
fn has(calls: &[Call], prefix: &[&str]) -> bool {
    calls
        .iter()
        .any(|c| c.len() >= prefix.len() && c.iter().zip(prefix).all(|(a, b)| a == b))
}

#[test]
fn start_writes_every_uci_option_verbatim_mode_0600() {
    let r = Router::new(concat!(
        "\toption host ''\n",
        "\toption tier_order 'ws,tcp'\n",
        "\tlist cf_domain 'a.example.org'\n",
        "\tlist cf_domain 'b.example.org'\n",
        "\toption mask_host 'mask \"quoted\" host'\n",
        "\toption log_file '/tmp/with space/$HOME `x` ;.log'\n",
        "\toption link_ip 'it'\\''s'\n",
        "\toption verbose '2'\n",
        "\toption cf_priority '1'\n",
        "\toption ws_connect_timeout ''\n",
        "\tlist dc_ip '2:127.0.0.1:9'\n",
    ));
    r.expect_started(&r.run("start"));
    let want = concat!(
        "tier-order ws,tcp\n",
        "cf-domain a.example.org\n",
        "cf-domain b.example.org\n",
        "mask-host mask \"quoted\" host\n",
        "log-file /tmp/with space/$HOME `x` ;.log\n",
        "link-ip it's\n",
        "verbose 2\n",
        "cf-priority 1\n",
        "dc-ip 2:127.0.0.1:9\n",
    );
    assert_eq!(r.conf_settings(), format!("{want}{}", r.added_settings()));
    let meta = fs::metadata(r.conf_path()).unwrap();
    assert_eq!(
        meta.permissions().mode() & 0o777,
        0o600,
        "configuration file mode"
    );
    assert_eq!(meta.uid(), r.uid, "configuration file owner");
    let dir = fs::metadata(r.path("var/run/tg-ws-proxy")).unwrap();
    assert_eq!(
        dir.permissions().mode() & 0o777,
        0o700,
        "control socket dir mode"
    );
    assert_eq!(dir.uid(), r.uid, "control socket dir owner");
    let dir = fs::metadata(r.path("etc/tg-ws-proxy/cache")).unwrap();
    assert_eq!(dir.permissions().mode() & 0o777, 0o700, "cache dir mode");
    assert_eq!(dir.uid(), r.uid, "cache dir owner");
}

#[test]
fn start_runs_the_config_file_and_keeps_the_new_secret_out_of_argv_env_and_logs() {
    let r = Router::new("\toption port '1443'\n");
    let o = r.run("start");
    let calls = r.expect_started(&o);
    let prog = r.path("usr/bin/tg-ws-proxy").display().to_string();
    let conf = r.conf_path().display().to_string();
    let command: Vec<&Call> = calls
        .iter()
        .filter(|c| c.len() > 1 && c[0] == "procd_set_param" && c[1] == "command")
        .collect();
    assert_eq!(command.len(), 1, "{calls:?}");
    assert_eq!(
        command[0][2..],
        [prog.as_str(), "run", "--config", conf.as_str()]
    );
    assert!(
        !has(&calls, &["procd_set_param", "env"]),
        "no environment: {calls:?}"
    );
    assert!(
        !has(&calls, &["procd_append_param"]),
        "nothing appended: {calls:?}"
    );
    assert!(
        has(&calls, &["procd_set_param", "user", &r.user]),
        "{calls:?}"
    );

    // The secret file was created by the binary, 0600, owned by the service user ...
    let secret_file = r.path("etc/tg-ws-proxy/secret");
    let meta = fs::metadata(&secret_file).expect("the secret file was created");
    assert_eq!(meta.permissions().mode() & 0o777, 0o600, "secret file mode");
    assert_eq!(meta.uid(), r.uid, "secret file owner");
    // ... in the binary's format (it reads it back) ...
    let f = secret_file.display().to_string();
    let link = common::run_bin(
        &["link", "--secret-file", &f, "--host", "127.0.0.1"],
        &[],
        ACTION_TIMEOUT,
    );
    assert_eq!(link.code, Some(0), "{}", link.stderr);
    // The link shows `dd` + the file's 32 hex digits.
    let secret = link
        .stdout
        .split("secret=dd")
        .nth(1)
        .and_then(|s| s.get(..32))
        .expect("a link with a dd secret")
        .to_string();
    let file_text = fs::read_to_string(&secret_file).unwrap();
    assert!(
        file_text.contains(&secret),
        "the link's secret is the file's"
    );
    // ... and is nowhere but in that file.
    let recorded = fs::read_to_string(r.conf_path()).unwrap();
    for (what, text) in [
        ("procd calls", format!("{calls:?}")),
        ("logger", r.logged()),
        ("stdout", o.stdout),
        ("stderr", o.stderr),
        ("configuration file", recorded),
        (
            "UCI",
            fs::read_to_string(r.path("etc/config/tg-ws-proxy")).unwrap(),
        ),
    ] {
        assert!(
            !text.contains(&secret),
            "the secret shows in {what}: {text}"
        );
    }
    assert!(
        r.logged().contains("created the secret file"),
        "{}",
        r.logged()
    );
}

#[test]
fn procd_gets_hup_reload_files_respawn_drain_and_lan_trigger() {
    let r = Router::new("\toption drain_timeout '20s'\n");
    let calls = r.expect_started(&r.run("start"));
    let conf = r.conf_path().display().to_string();
    let secret = r.path("etc/tg-ws-proxy/secret").display().to_string();
    let want: [&[&str]; 7] = [
        &["procd_set_param", "reload_signal", "HUP"],
        &[
            "procd_set_param",
            "file",
            "/etc/config/tg-ws-proxy",
            &conf,
            &secret,
        ],
        &["procd_set_param", "respawn", "3600", "10", "0"],
        &["procd_set_param", "term_timeout", "25"],
        &["procd_add_reload_trigger", "tg-ws-proxy"],
        &["procd_add_reload_interface_trigger", "lan"],
        &["procd_close_service"],
    ];
    for w in want {
        assert!(has(&calls, w), "missing {w:?} in {calls:?}");
    }
}

/// procd's kill delay follows every form of the duration grammar: `09s` (a leading 0: octal
/// to sh's arithmetic, which failed) and `1.5m` (rounded to 2 minutes before) now give the
/// drain rounded up to whole seconds, plus 5.
#[test]
fn term_timeout_reads_every_drain_timeout_form() {
    for (drain, want) in [
        ("09s", "14"),
        ("1.5m", "95"),
        ("1500ms", "7"),
        ("0.25", "6"),
    ] {
        let r = Router::new(&format!("\toption drain_timeout '{drain}'\n"));
        let calls = r.expect_started(&r.run("start"));
        assert!(
            has(&calls, &["procd_set_param", "term_timeout", want]),
            "{drain}: {calls:?}"
        );
    }
}

#[test]
fn reload_rewrites_the_config_file_for_procd_to_send_sighup() {
    let r = Router::new("\toption tier_order 'ws,tcp'\n");
    r.expect_started(&r.run("start"));
    r.set_uci("\toption tier_order 'tcp'\n");
    let calls = r.expect_started(&r.run("reload"));
    assert!(
        has(&calls, &["procd_set_param", "reload_signal", "HUP"]),
        "{calls:?}"
    );
    assert!(has(&calls, &["procd_close_service"]), "{calls:?}");
    let want = format!("tier-order tcp\n{}", r.added_settings());
    assert_eq!(r.conf_settings(), want);
}

/// The default cache on flash only when the shared list is on and UCI names no other cache;
/// `cf_domain_cache 'none'` (or 'off') means no cache file at all.
#[test]
fn the_default_list_cache_is_left_out_when_the_list_is_off_or_the_cache_is_none() {
    for (body, want) in [
        ("\toption cf_domain_list 'off'\n", "cf-domain-list off\n"),
        ("\toption cf_domain_cache 'none'\n", ""),
        ("\toption cf_domain_cache 'OFF'\n", ""),
    ] {
        let r = Router::new(body);
        r.expect_started(&r.run("start"));
        let settings = r.conf_settings();
        assert!(!settings.contains("cf-domain-cache"), "{body}: {settings}");
        assert!(settings.starts_with(want), "{body}: {settings}");
        assert!(
            !r.path("etc/tg-ws-proxy/cache").exists(),
            "{body}: cache dir made"
        );
    }
}

/// The host follows the address netifd reports for lan (a DHCP LAN has no
/// network.lan.ipaddr): the interface trigger's reload rewrites it when the lease changes.
#[test]
fn host_is_the_lan_address_netifd_reports_and_follows_a_new_lease() {
    let r = Router::new("");
    fs::create_dir_all(r.path("lib/functions")).unwrap();
    fs::copy(
        data_path("openwrt/network.sh"),
        r.path("lib/functions/network.sh"),
    )
    .unwrap();
    // No lease: UCI's static address is the fallback.
    r.expect_started(&r.run("start"));
    assert!(
        r.conf_settings().starts_with("host 127.0.0.1\n"),
        "{}",
        r.conf_settings()
    );
    // A DHCP LAN with no lease yet and no static address: not started, saying why.
    fs::write(
        r.path("etc/config/network"),
        "config interface 'lan'\n\toption proto 'dhcp'\n",
    )
    .unwrap();
    let o = r.run("start");
    assert!(
        o.stderr.contains("no address on the lan interface"),
        "{}",
        o.stderr
    );
    assert!(!has(&r.take_calls(), &["procd_open_instance"]));
    fs::create_dir_all(r.path("netifd")).unwrap();
    fs::write(r.path("netifd/lan"), "127.0.0.2").unwrap();
    r.expect_started(&r.run("start"));
    assert!(
        r.conf_settings().starts_with("host 127.0.0.2\n"),
        "{}",
        r.conf_settings()
    );
    // netifd's address wins over a static one in UCI.
    fs::write(
        r.path("etc/config/network"),
        "config interface 'lan'\n\toption proto 'static'\n\toption ipaddr '127.0.0.1'\n",
    )
    .unwrap();
    fs::write(r.path("netifd/lan"), "127.0.0.3").unwrap();
    let calls = r.expect_started(&r.run("reload"));
    assert!(
        has(&calls, &["procd_set_param", "reload_signal", "HUP"]),
        "{calls:?}"
    );
    assert!(
        r.conf_settings().starts_with("host 127.0.0.3\n"),
        "{}",
        r.conf_settings()
    );
}

#[test]
fn reload_with_a_secret_option_keeps_the_running_instance_and_its_file() {
    let r = Router::new("\toption tier_order 'ws,tcp'\n");
    r.expect_started(&r.run("start"));
    let before = fs::read_to_string(r.conf_path()).unwrap();
    r.set_uci("\toption secret '0123456789abcdef0123456789abcdef'\n");
    let o = r.run("reload");
    assert_ne!(o.code, Some(0), "reload of a refused configuration fails");
    let calls = r.take_calls();
    assert!(
        !has(&calls, &["procd_close_service"]),
        "procd must not get a new (empty) service: {calls:?}"
    );
    assert!(
        !has(&calls, &["procd_kill"]),
        "no restart after the failed reload: {calls:?}"
    );
    assert_eq!(fs::read_to_string(r.conf_path()).unwrap(), before);
    let secret_file = r.path("etc/tg-ws-proxy/secret").display().to_string();
    assert!(
        o.stderr.contains("option secret is not used"),
        "{}",
        o.stderr
    );
    assert!(
        o.stderr.contains(&secret_file),
        "names the secret file: {}",
        o.stderr
    );
    assert!(!r.logged().contains("0123456789abcdef"), "{}", r.logged());
}

#[test]
fn reload_with_the_secret_file_gone_makes_no_new_secret_and_keeps_the_instance() {
    let r = Router::new("\toption tier_order 'ws,tcp'\n");
    r.expect_started(&r.run("start"));
    let secret = r.path("etc/tg-ws-proxy/secret");
    fs::remove_file(&secret).expect("remove the secret file");
    let o = r.run("reload");
    assert_ne!(o.code, Some(0), "reload without the secret file fails");
    assert!(!secret.exists(), "the reload made a new secret file");
    let calls = r.take_calls();
    assert!(
        !has(&calls, &["procd_close_service"]) && !has(&calls, &["procd_kill"]),
        "the running instance is left alone: {calls:?}"
    );
    assert!(
        r.logged().contains("reload refused"),
        "says why: {}",
        r.logged()
    );
}

#[test]
fn secret_option_at_start_is_refused_naming_the_secret_file() {
    let r = Router::new("\toption secret '0123456789abcdef0123456789abcdef'\n");
    let o = r.run("start");
    assert_ne!(o.code, Some(0));
    let calls = r.take_calls();
    assert!(!has(&calls, &["procd_open_instance"]), "{calls:?}");
    assert!(
        has(&calls, &["procd_add_reload_trigger"]),
        "fixing UCI can start it: {calls:?}"
    );
    let logged = r.logged();
    assert!(logged.contains("option secret is not used"), "{logged}");
    assert!(logged.contains("etc/tg-ws-proxy/secret"), "{logged}");
    assert!(
        !logged.contains("0123456789abcdef"),
        "the refused secret is not logged: {logged}"
    );
    assert!(!r.conf_path().exists(), "no configuration file written");
}

#[test]
fn port_below_1024_with_a_non_root_user_is_refused_saying_why() {
    let r = Router::new("\toption port '80'\n");
    assert_ne!(
        r.user, "root",
        "the service user must not be root for this test"
    );
    let o = r.run("start");
    assert_ne!(o.code, Some(0));
    assert!(!has(&r.take_calls(), &["procd_open_instance"]));
    let want = "ports below 1024 need root; set option user root or use a port >= 1024";
    assert!(r.logged().contains(want), "{}", r.logged());
    assert!(o.stderr.contains(want), "{}", o.stderr);
}

#[test]
fn value_with_a_line_break_is_refused_not_split_into_two_settings() {
    let r = Router::new("\toption tier_order 'ws\nsecret 0123456789abcdef0123456789abcdef'\n");
    let o = r.run("start");
    assert_ne!(o.code, Some(0));
    assert!(!has(&r.take_calls(), &["procd_open_instance"]));
    assert!(
        o.stderr
            .contains("option tier_order: a value cannot hold a line break"),
        "{}",
        o.stderr
    );
    assert!(!r.conf_path().exists());
}

#[test]
fn old_extra_args_option_is_refused_pointing_to_one_option_per_flag() {
    let r = Router::new("\toption extra_args '--tier-order ws,tcp'\n");
    let o = r.run("start");
    assert_ne!(o.code, Some(0));
    assert!(!has(&r.take_calls(), &["procd_open_instance"]));
    let want = "option extra_args is gone: every flag is its own option now";
    assert!(o.stderr.contains(want), "{}", o.stderr);
    assert!(
        o.stderr
            .contains("uci set tg-ws-proxy.main.tier_order='ws,tcp'"),
        "{}",
        o.stderr
    );
}

#[test]
fn disabled_service_starts_no_instance_and_writes_nothing() {
    let r = Router::new("");
    fs::write(
        r.path("etc/config/tg-ws-proxy"),
        "config proxy 'main'\n\toption enabled '0'\n\toption port '80'\n",
    )
    .unwrap();
    let o = r.run("start");
    assert_eq!(o.code, Some(0), "{}", o.stderr);
    assert!(!has(&r.take_calls(), &["procd_open_instance"]));
    assert!(!r.conf_path().exists());
    assert!(!r.path("etc/tg-ws-proxy/secret").exists());
}

#[test]
fn shipped_uci_file_starts_the_service_with_only_its_set_options() {
    let r = Router::new("");
    let shipped = init_script().with_file_name("tg-ws-proxy.config");
    let secret = r.path("etc/tg-ws-proxy/secret").display().to_string();
    let ctl = r.path("var/run/tg-ws-proxy/ctl.sock").display().to_string();
    let text = fs::read_to_string(shipped)
        .unwrap()
        .replace("'/etc/tg-ws-proxy/secret'", &format!("'{secret}'"))
        .replace("'/var/run/tg-ws-proxy/ctl.sock'", &format!("'{ctl}'"))
        .replace("option user 'nobody'", &format!("option user '{}'", r.user));
    fs::write(r.path("etc/config/tg-ws-proxy"), text).unwrap();
    let calls = r.expect_started(&r.run("start"));
    assert!(
        has(&calls, &["procd_set_param", "user", &r.user]),
        "{calls:?}"
    );
    let cache = r.path("etc/tg-ws-proxy/cache/cf-domains");
    let cache = cache.display();
    let want = format!(
        "control-socket {ctl}\nhost 127.0.0.1\nsecret-file {secret}\nbind-retry 5s\n\
         cf-domain-cache {cache}\n"
    );
    assert_eq!(
        r.conf_settings(),
        want,
        "every other line of the shipped file is a comment"
    );
}

#[test]
fn init_script_passes_shellcheck() {
    let shellcheck = need("shellcheck", "shellcheck");
    let out = Command::new(shellcheck)
        .args(["-s", "sh"])
        .arg(init_script())
        .output()
        .expect("run shellcheck");
    assert!(
        out.status.success(),
        "shellcheck:\n{}{}",
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr)
    );
}

#[test]
fn link_prints_the_links_and_the_binary_accepts_the_generated_file() {
    let r = Router::new(concat!(
        "\toption port '2443'\n",
        "\toption tier_order 'ws,tcp'\n",
        "\tlist cf_domain 'a.example.org'\n",
        "\tlist dc_ip '2:127.0.0.1:9'\n",
        "\toption verbose '2'\n",
        "\toption cf_priority '1'\n",
        "\toption startup_probes 'off'\n",
        "\toption drain_timeout '1s'\n",
    ));
    let o = r.run("link");
    assert_eq!(o.code, Some(0), "link failed: {} {}", o.stdout, o.stderr);
    assert!(
        o.stdout
            .contains("tg://proxy?server=127.0.0.1&port=2443&secret="),
        "{}",
        o.stdout
    );
    assert!(o.stdout.contains("https://t.me/proxy?"), "{}", o.stdout);
    assert!(
        !r.logged().contains("secret="),
        "links are not logged: {}",
        r.logged()
    );
    // `start` writes the same settings; `link --config` parses them as `run` would.
    r.expect_started(&r.run("start"));
    let conf = r.conf_path().display().to_string();
    let check = common::run_bin(&["link", "--config", &conf], &[], ACTION_TIMEOUT);
    assert_eq!(
        check.code,
        Some(0),
        "the binary rejects the file: {}",
        check.stderr
    );
}

/// Transparent mode (issue 21): every start and reload installs our nftables table with
/// `tg-ws-proxy firewall install --config` (the default range cache under
/// /etc/tg-ws-proxy/cache written into the configuration), a reload that turns the mode off
/// removes it, and stop removes it so Telegram goes direct while we are not running. Inside a
/// network namespace of the test's own, with the real nft (the service user is root there: no
/// other uid is mapped in the namespace).
#[test]
fn transparent_mode_installs_the_firewall_on_start_and_removes_it_on_stop() {
    let nft = need("nft", "nftables");
    common::netns::run_inside(
        "transparent_mode_installs_the_firewall_on_start_and_removes_it_on_stop",
        || {
            let table = || {
                let out = Command::new("nft")
                    .args(["list", "table", "inet", "tg_ws_proxy"])
                    .output()
                    .unwrap();
                out.status
                    .success()
                    .then(|| String::from_utf8_lossy(&out.stdout).into_owned())
            };
            let body = format!(
                "\toption transparent '0.0.0.0:1445'\n\toption nft '{}'\n\
                 \toption tg_ranges_url 'off'\n\tlist lan_iface 'lan0'\n",
                nft.display()
            );
            let mut r = Router::new("");
            r.user = "root".into();
            r.set_uci(&body);
            r.expect_started(&r.run("start"));
            let cache = r.path("etc/tg-ws-proxy/cache/tg-ranges");
            let settings = r.conf_settings();
            assert!(
                settings.contains(&format!("tg-ranges-cache {}\n", cache.display())),
                "{settings}"
            );
            assert!(r.path("etc/tg-ws-proxy/cache").is_dir());
            let t = table().expect("table installed at start");
            assert!(t.contains("redirect to :1445") && t.contains("lan0"), "{t}");
            assert!(r.logged().contains("installed"), "{}", r.logged());

            // A reload with another port replaces the table.
            r.set_uci(&body.replace("1445", "1446"));
            r.expect_started(&r.run("reload"));
            let t = table().expect("table after reload");
            assert!(
                t.contains("redirect to :1446") && !t.contains(":1445"),
                "{t}"
            );

            // A reload that turns the mode off removes it.
            r.set_uci(&format!("\toption nft '{}'\n", nft.display()));
            r.expect_started(&r.run("reload"));
            assert!(
                table().is_none(),
                "table left after transparent was turned off"
            );

            // Back on, then stop: removed, and said.
            r.set_uci(&body);
            r.expect_started(&r.run("start"));
            assert!(table().is_some());
            let o = r.run("stop");
            assert_eq!(o.code, Some(0), "stop: {} {}", o.stdout, o.stderr);
            assert!(table().is_none(), "table left after stop");
            assert!(r.logged().contains("removed"), "{}", r.logged());
        },
    );
}
