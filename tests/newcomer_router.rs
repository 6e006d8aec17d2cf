//! Issue 23's newcomer path, end to end on an emulated MIPS router: the release a `make dist`
//! made (TG_DIST_DIR: the mips tarball and SHA256SUMS) is served over HTTP on 127.0.0.1; the
//! tarball's own `install.sh` (what README's quick start runs) is run under `busybox sh` in a
//! fake OpenWrt root (DISTRIB_ARCH mips_24kc, `uname -m` mips, a big-endian /bin/busybox) with
//! `--base http://127.0.0.1:PORT/`: it picks mips-unknown-linux-musl, checks the sha256 and
//! installs the binary, the procd init script, the UCI config and the secret. The service is
//! then started through the INSTALLED init script (run by tests/data/openwrt/rc.common with the
//! procd.sh stand-in recording its procd_* calls); the recorded command is launched as procd
//! would, the MIPS binary running under qemu-mips-static. The init script's own `link` (README
//! step 3) prints a tg://proxy link; a host client takes server, port and secret from that link
//! alone and gets a resPQ from a fake DC through the qemu-run proxy: a working link. Stop and
//! `install.sh --uninstall --purge` leave the root as it was before the install.
//!
//! What stands in for the router (and why):
//! * qemu-user instead of binfmt_misc: the init script runs `$TG_ROOT/usr/bin/tg-ws-proxy`;
//!   TG_ROOT is a view of the root (its etc/ is the root's, its var/ a fresh "tmpfs") whose
//!   usr/bin/tg-ws-proxy is a two-line shim `exec qemu-mips-static ROOT/usr/bin/tg-ws-proxy`.
//! * The LAN address is 127.0.0.1 (/etc/config/network), so the default `option host ''`
//!   gives a loopback listener and a loopback link.
//! * The owner's `uci set` step, done on the installed /etc/config/tg-ws-proxy before the first
//!   start (install.sh `--no-start`): a free port instead of 1443; every DC route to a closed
//!   loopback port except DC 2's, which is the fake DC; no pools, probes, list fetches or DNS.
//!   `secret_file` and `control_socket` are deleted: their shipped values are the init
//!   script's defaults, which it puts under TG_ROOT (the shipped absolute paths would be the
//!   host's /etc and /var).
//! * procd's `user nobody` is recorded, not applied: under ROOT install.sh changes no owner,
//!   so the 0700 secret directory stays root's (on a router install.sh chowns it).
//!
//! `#[ignore]`d: it needs a MIPS `make dist` and qemu-mips-static. .ci/run runs it right after
//! `make dist DIST_TARGETS=mips-unknown-linux-musl` with TG_DIST_DIR=dist and
//! `--include-ignored`. Run with --include-ignored but without TG_DIST_DIR it prints a loud
//! SKIPPED line; with TG_DIST_DIR set, a missing tarball, SHA256SUMS or qemu FAILS it.
//! Nothing leaves the machine: the HTTP server, the fake DC and the proxy are on 127.0.0.1.

mod common;
mod dist;

use std::collections::BTreeMap;
use std::fs;
use std::net::SocketAddr;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, data_path, free_port, LOOPBACK_DEAD_DCS, LOOPBACK_DEAD_TEST_DCS};
use dist::*;
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

const MIPS: &str = "mips-unknown-linux-musl";
/// Bound on the proxy (under qemu) coming up and answering.
const UP_WAIT: Duration = Duration::from_secs(30);

/// A 52-byte ELF32 header of a big-endian MIPS executable: the router's /bin/busybox as far as
/// install.sh looks (it reads the byte order of the system's busybox on a `mips` uname).
fn mips_busybox_header() -> Vec<u8> {
    let mut h = vec![0u8; 52];
    h[..7].copy_from_slice(b"\x7fELF\x01\x02\x01");
    h[17] = 2; // ET_EXEC, big-endian
    h[19] = 8; // EM_MIPS
    h[23] = 1; // EV_CURRENT
    h
}

/// Every file and directory under `base` (bytes and mode; directories with empty bytes).
fn snapshot(base: &Path) -> BTreeMap<PathBuf, (Vec<u8>, u32)> {
    fn walk(base: &Path, dir: &Path, m: &mut BTreeMap<PathBuf, (Vec<u8>, u32)>) {
        for e in fs::read_dir(dir).unwrap().flatten() {
            let p = e.path();
            let md = fs::symlink_metadata(&p).unwrap();
            let rel = p.strip_prefix(base).unwrap().to_path_buf();
            if md.is_dir() {
                m.insert(rel, (Vec::new(), md.permissions().mode()));
                walk(base, &p, m);
            } else {
                m.insert(
                    rel,
                    (fs::read(&p).unwrap_or_default(), md.permissions().mode()),
                );
            }
        }
    }
    let mut m = BTreeMap::new();
    walk(base, base, &mut m);
    m
}

/// The user the UCI config names: `nobody` as root (the init script's chown works), else the
/// current user (chown to oneself works).
fn service_user() -> String {
    // SAFETY: geteuid has no preconditions and cannot fail.
    let uid = unsafe { libc::geteuid() };
    if uid == 0 {
        return "nobody".to_string();
    }
    let passwd = fs::read_to_string("/etc/passwd").expect("read /etc/passwd");
    passwd
        .lines()
        .find_map(|l| {
            let f: Vec<&str> = l.split(':').collect();
            (f.get(2)?.parse::<u32>().ok()? == uid).then(|| f[0].to_string())
        })
        .expect("the current user is in /etc/passwd")
}

/// The owner's `uci set` / `uci delete` / `uci add_list` on section 'main' (the file's only
/// section, so appended lines belong to it): `del` removes every `option NAME` line, `add`
/// appends `option`/`list` lines.
fn uci_edit(conf: &Path, del: &[&str], add: &[String]) {
    let text = fs::read_to_string(conf).unwrap();
    assert!(
        text.matches("\nconfig ").count() + usize::from(text.starts_with("config ")) == 1,
        "the shipped UCI file has one section: {text}"
    );
    let mut out: String = text
        .lines()
        .filter(|l| {
            let w: Vec<&str> = l.split_whitespace().collect();
            !(w.len() >= 2 && w[0] == "option" && del.contains(&w[1]))
        })
        .map(|l| format!("{l}\n"))
        .collect();
    for a in add {
        out.push('\t');
        out.push_str(a);
        out.push('\n');
    }
    fs::write(conf, out).unwrap();
}

/// One tg://proxy link's server, port and secret.
fn parse_link(stdout: &str) -> (String, u16, String) {
    let link = stdout
        .split_whitespace()
        .find(|w| w.starts_with("tg://proxy?"))
        .unwrap_or_else(|| panic!("no tg://proxy link in:\n{stdout}"));
    let query = &link["tg://proxy?".len()..];
    let get = |k: &str| {
        query
            .split('&')
            .find_map(|kv| kv.strip_prefix(&format!("{k}=")))
            .unwrap_or_else(|| panic!("{k} missing in {link}"))
            .to_string()
    };
    let port = get("port")
        .parse()
        .unwrap_or_else(|e| panic!("port in {link}: {e}"));
    (get("server"), port, get("secret"))
}

/// The procd stand-in install.sh and the test drive (SERVICE_CMD): every action runs the
/// installed init script through tests/data/openwrt/rc.common; `start`/`restart` then launch
/// the command procd.sh recorded (procd_set_param command …) in the background, stdout and
/// stderr to `log`, as procd would; `stop` runs the script's stop, then ends that process;
/// `pids` prints its pid while it lives (a zombie does not count); `enable`/`disable` are only
/// recorded (rc.d links are rc.common's, not the script's); `link` is the script's `link`.
fn service_script(root: &Path, emu: &Path, dir: &Path) -> String {
    format!(
        r#"#!/bin/sh
R='{root}'
E='{emu}'
D='{dir}'
S='{stubs}'
BB='{busybox}'
PIDF="$D/pid"
TAB="$(printf '\t')"
rc() {{
	TG_ROOT="$E" STUB_DIR="$S" UCI_CONFIG_DIR="$R/etc/config" PROCD_RECORD="$D/procd.calls" \
		LOGGER_RECORD="$D/logger.calls" "$BB" sh "$S/rc.common" "$R/etc/init.d/tg-ws-proxy" "$@"
}}
{procs}
echo "$1" >>"$D/calls"
case "$1" in
start | restart)
	stop
	: >"$D/procd.calls"
	rc start || exit 1
	line="$(grep "^procd_set_param${{TAB}}command${{TAB}}" "$D/procd.calls" | tail -n 1)"
	[ -n "$line" ] || exit 0
	IFS="$TAB"
	set -- $line
	unset IFS
	shift 2
	"$@" </dev/null >>"$D/log" 2>&1 &
	echo "$!" >"$PIDF"
	;;
stop)
	rc stop
	stop
	;;
pids) alive && cat "$PIDF" ;;
enable | disable) ;;
link) rc link ;;
*) exit 2 ;;
esac
exit 0
"#,
        root = root.display(),
        emu = emu.display(),
        dir = dir.display(),
        stubs = data_path("openwrt").display(),
        busybox = busybox().display(),
        procs = service_process_fns(200),
    )
}

/// The emulated router: its root, the TG_ROOT view with the qemu shim, the applet PATH, the
/// installer alone in a directory and the procd stand-in. Dropping it stops the service.
struct Router {
    t: Scratch,
    root: PathBuf,
    emu: PathBuf,
    path: PathBuf,
    installer: PathBuf,
    svc: PathBuf,
    svc_dir: PathBuf,
}

impl Router {
    fn new(tgz: &Path, qemu: &Path) -> Router {
        let t = Scratch::new("newcomer");
        let root = openwrt_root(&t.0);
        fs::write(
            root.join("etc/openwrt_release"),
            "DISTRIB_ID='OpenWrt'\nDISTRIB_ARCH='mips_24kc'\n",
        )
        .unwrap();
        fs::write(root.join("bin/busybox"), mips_busybox_header()).unwrap();
        fs::write(
            root.join("etc/config/network"),
            "config interface 'loopback'\n\toption ipaddr '127.0.0.1'\n\n\
             config interface 'lan'\n\toption proto 'static'\n\toption ipaddr '127.0.0.1'\n",
        )
        .unwrap();
        // Directories every OpenWrt has, so "as before" can compare directories too.
        for d in ["usr/bin", "etc/init.d"] {
            fs::create_dir_all(root.join(d)).unwrap();
        }

        let path = applet_path(&t.0);
        std::os::unix::fs::symlink(busybox(), path.join("wget")).unwrap();

        // The tarball's install.sh, alone in a directory (as if downloaded on its own).
        let x = t.0.join("x");
        fs::create_dir_all(&x).unwrap();
        ok(Command::new("tar")
            .arg("xzf")
            .arg(tgz)
            .arg("-C")
            .arg(&x)
            .args(["--strip-components=1", "--wildcards", "*/install.sh"]));
        let inst_dir = t.0.join("installer");
        fs::create_dir_all(&inst_dir).unwrap();
        let installer = inst_dir.join("install.sh");
        fs::copy(x.join("install.sh"), &installer).unwrap();

        let emu = t.0.join("emu");
        fs::create_dir_all(emu.join("var")).unwrap();
        std::os::unix::fs::symlink(root.join("etc"), emu.join("etc")).unwrap();
        write_exec(
            &emu.join("usr/bin/tg-ws-proxy"),
            &format!(
                "#!/bin/sh\nexec '{}' '{}' \"$@\"\n",
                qemu.display(),
                root.join("usr/bin/tg-ws-proxy").display()
            ),
        );

        let svc_dir = t.0.join("svc");
        fs::create_dir_all(&svc_dir).unwrap();
        let svc = svc_dir.join("service");
        write_exec(&svc, &service_script(&root, &emu, &svc_dir));
        fs::create_dir_all(t.0.join("tmp")).unwrap();
        Router {
            t,
            root,
            emu,
            path,
            installer,
            svc,
            svc_dir,
        }
    }

    /// `busybox sh install.sh ARGS` as a router owner runs it, with ROOT, the applet PATH,
    /// `uname -m` mips and the procd stand-in.
    fn install(&self, args: &[&str]) -> Output {
        run(Command::new(busybox())
            .arg("sh")
            .arg(&self.installer)
            .args(args)
            .env_clear()
            .env("PATH", &self.path)
            .env("ROOT", &self.root)
            .env("TMPDIR", self.t.0.join("tmp"))
            .env("SERVICE_CMD", &self.svc)
            .env("UNAME_M", "mips")
            .env("START_WAIT", "20")
            .env("START_SETTLE", "1"))
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

    /// `SERVICE_CMD ACTION` (what install.sh calls), under the applet PATH.
    fn svc(&self, action: &str) -> Output {
        run(Command::new(busybox())
            .arg("sh")
            .arg(&self.svc)
            .arg(action)
            .env_clear()
            .env("PATH", &self.path))
    }

    fn svc_ok(&self, action: &str) -> String {
        let out = self.svc(action);
        assert!(
            out.status.success(),
            "service {action} failed ({}):\n{}{}\nproxy log:\n{}",
            out.status,
            text(&out.stdout),
            text(&out.stderr),
            self.log()
        );
        text(&out.stdout)
    }

    fn pid(&self) -> Option<String> {
        let p = text(&self.svc("pids").stdout).trim().to_string();
        (!p.is_empty()).then_some(p)
    }

    fn read(&self, name: &str) -> String {
        fs::read_to_string(self.svc_dir.join(name)).unwrap_or_default()
    }

    fn log(&self) -> String {
        self.read("log")
    }

    /// The procd_* calls of the last start, each as its words.
    fn procd_calls(&self) -> Vec<Vec<String>> {
        self.read("procd.calls")
            .lines()
            .map(|l| l.split('\t').map(str::to_string).collect())
            .collect()
    }
}

impl Drop for Router {
    fn drop(&mut self) {
        let _ = self.svc("stop");
    }
}

/// The release in TG_DIST_DIR: its directory and the mips tarball's name from SHA256SUMS. None
/// (after a loud line) when TG_DIST_DIR is not set; a FAILURE when it is set but incomplete.
fn release() -> Option<(PathBuf, String)> {
    let Some(d) = std::env::var_os("TG_DIST_DIR") else {
        eprintln!(
            "\n######################################################################\n\
             SKIPPED newcomer_router: TG_DIST_DIR is not set. It needs a `make dist\n\
             DIST_TARGETS={MIPS}` directory and qemu-mips-static:\n\
             TG_DIST_DIR=dist cargo test --locked --test newcomer_router -- --include-ignored\n\
             ######################################################################\n"
        );
        return None;
    };
    let dir = repo().join(d);
    let sums = fs::read_to_string(dir.join("SHA256SUMS")).unwrap_or_else(|e| {
        panic!(
            "TG_DIST_DIR={}: no SHA256SUMS ({e}); run make dist DIST_TARGETS={MIPS}",
            dir.display()
        )
    });
    let tgz = sums
        .lines()
        .filter_map(|l| l.split_whitespace().nth(1))
        .map(|n| n.trim_start_matches('*'))
        .find(|n| n.starts_with("tg-ws-proxy-") && n.ends_with(&format!("-{MIPS}.tar.gz")))
        .unwrap_or_else(|| {
            panic!(
                "TG_DIST_DIR={}: SHA256SUMS lists no {MIPS} tarball:\n{sums}",
                dir.display()
            )
        })
        .to_string();
    assert!(
        dir.join(&tgz).is_file(),
        "{}: {tgz} is listed but missing",
        dir.display()
    );
    Some((dir, tgz))
}

/// Probes through the proxy until it answers (the listener under qemu takes a moment): only
/// "connection refused" is waited out; any other outcome is the answer.
fn probe_until_up(addr: SocketAddr, secret: &str) -> tg_ws_proxy::applet::probe::Attempt {
    let mut rng = Rng::new().expect("rng");
    let deadline = Instant::now() + UP_WAIT;
    loop {
        let a = probe_once(&client_opts(addr, secret, Tag::Intermediate, 2), &mut rng);
        if a.outcome != Outcome::ConnectFailed || Instant::now() >= deadline {
            return a;
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

#[test]
#[ignore = "needs TG_DIST_DIR (a make dist with the mips tarball) and qemu-mips-static; \
            .ci/run runs it after make dist"]
fn a_newcomer_installs_the_mips_release_on_a_router_and_the_link_works() {
    let Some((dist_dir, tgz)) = release() else {
        return;
    };
    let t0 = Instant::now();
    let qemu = need("qemu-mips-static", "qemu-user-static");
    need("tar", "tar");
    let dc = FakeDc::start_tcp(DcConfig::default());
    let srv = Server::start(&dist_dir);
    let r = Router::new(&dist_dir.join(&tgz), &qemu);
    let before = snapshot(&r.root);

    // 1-2. README's install: the tarball's install.sh downloads from the release, checks the
    // sum and installs. --no-start: the owner's `uci set` comes before the first start here.
    let base = format!("{}/", srv.url());
    r.install_ok(&["--base", &base, "--no-start"]);
    let x = r.t.0.join("x");
    ok(Command::new("tar")
        .arg("xzf")
        .arg(dist_dir.join(&tgz))
        .arg("-C")
        .arg(&x));
    let shipped = x.join(tgz.trim_end_matches(".tar.gz"));
    let bin = r.root.join("usr/bin/tg-ws-proxy");
    assert_installed_exec(&bin, &shipped.join("tg-ws-proxy"));
    let head = fs::read(&bin).unwrap();
    assert!(
        head.len() > 20 && head[..4] == *b"\x7fELF" && head[5] == 2 && head[19] == 8,
        "the installed binary is not a big-endian MIPS ELF"
    );
    let init = r.root.join("etc/init.d/tg-ws-proxy");
    assert_installed_exec(&init, &shipped.join("tg-ws-proxy.init"));
    let uci = r.root.join("etc/config/tg-ws-proxy");
    assert_eq!(
        fs::read(&uci).unwrap(),
        fs::read(shipped.join("tg-ws-proxy.config")).unwrap()
    );
    let secret_file = r.root.join("etc/tg-ws-proxy/secret");
    assert_eq!(mode(&secret_file), 0o600);
    let secret = secret_in(&secret_file);
    assert!(r.pid().is_none(), "--no-start started it");

    // The owner's uci set (see the file header).
    let port = free_port().port();
    let dcs: Vec<String> = LOOPBACK_DEAD_DCS
        .split(',')
        .map(|e| {
            if e.starts_with("2:") {
                format!("2:{}", dc.addr())
            } else {
                e.to_string()
            }
        })
        .collect();
    let resolv = r.t.0.join("resolv.conf");
    fs::write(&resolv, "# no nameserver\n").unwrap();
    uci_edit(
        &uci,
        &["secret_file", "control_socket", "user"],
        &[
            format!("option user '{}'", service_user()),
            format!("option port '{port}'"),
            "option tier_order 'tcp'".into(),
            format!("list tcp_dc_ip '{}'", dcs.join(",")),
            format!("list tcp_dc_ip '{LOOPBACK_DEAD_TEST_DCS}'"),
            format!("list dc_ip '{LOOPBACK_DEAD_DCS}'"),
            "option pool_size '0'".into(),
            "option startup_probes 'off'".into(),
            "option cf_domain_list 'off'".into(),
            "option tg_ranges_url 'off'".into(),
            format!("option resolv_conf '{}'", resolv.display()),
        ],
    );

    // 3. /etc/init.d/tg-ws-proxy enable && start (what --no-start says), through procd.
    r.svc_ok("enable");
    r.svc_ok("start");
    let calls = r.procd_calls();
    let prog = r.emu.join("usr/bin/tg-ws-proxy");
    let conf = r.emu.join("var/etc/tg-ws-proxy.conf");
    let want_cmd: Vec<String> = vec![
        "procd_set_param".into(),
        "command".into(),
        prog.display().to_string(),
        "run".into(),
        "--config".into(),
        conf.display().to_string(),
    ];
    assert!(calls.contains(&want_cmd), "{calls:?}");
    assert!(
        calls.contains(&vec![
            "procd_set_param".into(),
            "user".into(),
            service_user()
        ]),
        "{calls:?}"
    );
    let written = fs::read_to_string(&conf).expect("the init script wrote its configuration");
    assert!(written.contains("\nhost 127.0.0.1\n"), "{written}");
    let pid = r
        .pid()
        .unwrap_or_else(|| panic!("not running:\n{}", r.log()));
    // The service process is qemu running the installed MIPS binary (the shim exec'd).
    let exe = fs::read_link(format!("/proc/{pid}/exe")).unwrap();
    assert_eq!(exe, fs::canonicalize(&qemu).unwrap(), "pid {pid}");
    let cmdline = fs::read(format!("/proc/{pid}/cmdline")).unwrap();
    let argv: Vec<String> = cmdline
        .split(|&b| b == 0)
        .map(|a| String::from_utf8_lossy(a).into_owned())
        .collect();
    assert_eq!(argv.get(1), Some(&bin.display().to_string()), "{argv:?}");

    // 4. README step 3: /etc/init.d/tg-ws-proxy link (the MIPS binary under qemu).
    let out = r.svc_ok("link");
    let (server, link_port, link_secret) = parse_link(&out);
    assert_eq!(server, "127.0.0.1", "{out}");
    assert_eq!(link_port, port, "{out}");
    assert!(link_secret.contains(&secret), "{out}");
    // A phone with only the link: a resPQ from the fake DC through the qemu-run proxy.
    let addr: SocketAddr = format!("{server}:{link_port}").parse().unwrap();
    let a = probe_until_up(addr, &link_secret);
    assert_eq!(a.outcome, Outcome::Ok, "{a:?}\nproxy log:\n{}", r.log());
    assert_eq!(dc.init_dcs(), vec![(Tag::Intermediate, 2)], "{}", r.log());
    // A wrong secret is not let through (the link's secret is what worked).
    let mut rng = Rng::new().expect("rng");
    let wrong = probe_once(
        &client_opts(addr, common::SECRET, Tag::Intermediate, 2),
        &mut rng,
    );
    assert_ne!(wrong.outcome, Outcome::Ok, "{wrong:?}");

    // 5. Stop, then uninstall with --purge: nothing of it is left in the root.
    assert_eq!(
        r.pid().as_deref(),
        Some(pid.as_str()),
        "not the same process"
    );
    r.svc_ok("stop");
    assert!(r.pid().is_none(), "still running after stop");
    assert!(
        !Path::new(&format!("/proc/{pid}")).exists() || {
            let s = fs::read_to_string(format!("/proc/{pid}/stat")).unwrap_or_default();
            s.split_whitespace().nth(2) == Some("Z")
        },
        "process {pid} survived stop"
    );
    assert!(
        r.procd_calls()
            .iter()
            .any(|c| c.first().map(String::as_str) == Some("procd_kill")),
        "{:?}",
        r.procd_calls()
    );
    r.install_ok(&["--uninstall", "--purge"]);
    let calls = r.read("calls");
    assert!(calls.lines().any(|l| l == "disable"), "{calls}");
    assert!(r.pid().is_none());
    let after = snapshot(&r.root);
    let changed: Vec<&PathBuf> = before
        .keys()
        .chain(after.keys())
        .filter(|k| before.get(*k) != after.get(*k))
        .collect();
    assert!(changed.is_empty(), "the root is not as before: {changed:?}");
    assert_eq!(
        fs::read_dir(r.t.0.join("tmp")).unwrap().count(),
        0,
        "download left behind"
    );
    eprintln!(
        "newcomer_router: install, start, link, resPQ, uninstall in {:.1} s",
        t0.elapsed().as_secs_f64()
    );
}
