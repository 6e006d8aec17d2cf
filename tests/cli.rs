//! Black-box tests of the binary's flag handling: applet dispatch (argument and argv[0]),
//! help texts, one-line errors for bad flags and `TG_*` variables, `genkey`, `link`, secret
//! file creation, and (needs the reactor) that `run` never logs a secret.
//!
//! Every child gets the test's environment minus all `TG_*` variables, plus what the case sets.
//! No network use except `run` binding an ephemeral port on 127.0.0.1.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use tg_ws_proxy::mtproto::obfs2::{Secret, SecretKind};

const BIN: &str = env!("CARGO_BIN_EXE_tg-ws-proxy");
const KEY: &str = "0123456789abcdef0123456789abcdef";

fn command(bin: &Path, args: &[&str], env: &[(&str, &str)]) -> Command {
    let mut c = Command::new(bin);
    c.args(args);
    for (k, _) in std::env::vars_os() {
        if k.to_string_lossy().starts_with("TG_") {
            c.env_remove(k);
        }
    }
    c.envs(env.iter().copied());
    c
}

fn run_with(args: &[&str], env: &[(&str, &str)]) -> Output {
    command(Path::new(BIN), args, env)
        .output()
        .expect("spawn tg-ws-proxy")
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

/// A fresh empty directory for one test.
fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tgwp-clitest-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).expect("create temp dir");
    d
}

/// Asserts exit code 2 and exactly one stderr line starting with `tg-ws-proxy: <prefix>`.
fn assert_usage_error(args: &[&str], env: &[(&str, &str)], prefix: &str) {
    let o = run_with(args, env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(2), "{args:?} {env:?}: {err}");
    assert_eq!(
        err.lines().count(),
        1,
        "{args:?} {env:?}: not one line: {err}"
    );
    let want = format!("tg-ws-proxy: {prefix}");
    assert!(
        err.starts_with(&want),
        "{args:?} {env:?}: got {err:?}, want prefix {want:?}"
    );
    assert!(o.stdout.is_empty(), "{args:?}: stdout not empty");
}

#[test]
fn invalid_flags_and_env_values_give_one_line_naming_the_flag() {
    type Case = (
        &'static [&'static str],
        &'static [(&'static str, &'static str)],
        &'static str,
    );
    let s: &[(&str, &str)] = &[("TG_SECRET", KEY)];
    let cases: &[Case] = &[
        (&["run", "--port", "http"], s, "--port: "),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_PORT", "99999")],
            "--port (TG_PORT): ",
        ),
        (&["--port"], s, "--port: missing value"),
        (&["run", "--host", "example.com"], s, "--host: "),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_HOST", "1.2.3")],
            "--host (TG_HOST): ",
        ),
        (&["run", "--dc-ip", "2:2001:db8::1"], s, "--dc-ip: "),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_DC_IP", "9")],
            "--dc-ip (TG_DC_IP): ",
        ),
        (&["run", "--tcp-dc-ip", "2:1.2.3.4:0"], s, "--tcp-dc-ip: "),
        (&["run", "--tier-order", "ws,ws"], s, "--tier-order: "),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_TIER_ORDER", "cf")],
            "--tier-order (TG_TIER_ORDER): ",
        ),
        (
            &["run", "--ws-connect-timeout", "soon"],
            s,
            "--ws-connect-timeout: ",
        ),
        (
            &["run", "--tcp-fallback-timeout", "0"],
            s,
            "--tcp-connect-timeout: ",
        ),
        (
            &["run", "--handshake-timeout", "-1"],
            s,
            "--handshake-timeout: ",
        ),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_IDLE_TIMEOUT", "3d")],
            "--idle-timeout (TG_IDLE_TIMEOUT): ",
        ),
        (
            &["run", "--bad-client-drain", "1e3"],
            s,
            "--bad-client-drain: ",
        ),
        (&["run", "--stats-interval", "48h"], s, "--stats-interval: "),
        (&["run", "--max-connections", "0"], s, "--max-connections: "),
        (&["run", "--buf-kb", "3"], s, "--buf-kb: "),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_BUF_KB", "2000")],
            "--buf-kb (TG_BUF_KB): ",
        ),
        (
            &["run", "--ca-file", "/nonexistent/ca.pem"],
            s,
            "--ca-file: ",
        ),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_SKIP_TLS_VERIFY", "sure")],
            "--danger-accept-invalid-certs (TG_SKIP_TLS_VERIFY): ",
        ),
        (&["run", "--log-max-kb", "0"], s, "--log-max-kb: "),
        (&["run", "-v", "-q"], s, "--quiet: "),
        (
            &["run"],
            &[("TG_SECRET", KEY), ("TG_VERBOSE", "maybe")],
            "--verbose (TG_VERBOSE): ",
        ),
        (&["run", "--link-ip", "not a host"], s, "--link-ip: "),
        (&["run", "--secret", "abc"], &[], "--secret: invalid secret"),
        (
            &["run"],
            &[("TG_SECRET", "zz")],
            "--secret (TG_SECRET): invalid secret",
        ),
        (
            &["run", "--secret-file", "/nonexistent-dir/x"],
            &[],
            "--secret-file: cannot create",
        ),
        (&["run"], &[], "--secret: no secret configured"),
        (&["run", "--frobnicate"], s, "unknown flag '--frobnicate'"),
        (&["--frobnicate"], &[], "unknown flag '--frobnicate'"),
        (&["--port=1", "extra"], s, "unexpected argument 'extra'"),
        (&["nosuchapplet"], s, "unknown applet 'nosuchapplet'"),
        (&["check", "--count", "0"], s, "--count: "),
        (&["genkey", "--ee", "1.2.3.4"], &[], "--ee: "),
        (&["link", "--port", "0"], s, "--port: "),
        (&["link", "--server", "a b"], s, "--server: "),
    ];
    for (args, env, prefix) in cases {
        assert_usage_error(args, env, prefix);
    }
}

#[test]
fn errors_never_echo_a_secret() {
    let o = run_with(&["run", KEY], &[]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains(KEY), "{}", stderr(&o));
    let bad = "0123456789abcdef0123456789abcdeg";
    let o = run_with(&["run"], &[("TG_SECRET", bad)]);
    assert_eq!(o.status.code(), Some(2));
    assert!(!stderr(&o).contains(bad));
}

/// Issue 21: a SOCKS5 listener reachable from the internet without users never starts, and a
/// users file that cannot be read or parsed stops the start with the file and the line. Each
/// case fails while parsing: nothing is bound.
#[test]
fn socks5_exposure_and_a_bad_users_file_stop_the_start() {
    let env = [("TG_SECRET", KEY)];
    for addr in ["0.0.0.0:1080", "[::]:1080", "203.0.113.5:1080"] {
        let a: std::net::SocketAddr = addr.parse().unwrap();
        let prefix = format!("--socks5: {a} is not a loopback or private address");
        assert_usage_error(&["run", "--socks5", addr], &env, &prefix);
        assert_usage_error(&["link", "--socks5", addr], &env, &prefix);
    }
    let public = ["run", "--socks5", "0.0.0.0:1080", "--socks5-public"];
    assert_usage_error(
        &public,
        &env,
        "--socks5-public: requires --socks5-auth FILE",
    );
    let dir = temp_dir("socks5-users");
    let users = dir.join("users");
    let path = users.to_str().unwrap();
    let run = ["run", "--socks5", "127.0.0.1:1080", "--socks5-auth", path];
    assert_usage_error(&run, &env, &format!("--socks5-auth: cannot read {path}: "));
    std::fs::write(&users, "alice:s3cret\nbob\n").unwrap();
    let want = format!("--socks5-auth: {path}: line 2: expected user:password");
    assert_usage_error(&run, &env, &want);
    let o = run_with(&run, &env);
    assert!(!stderr(&o).contains("s3cret"), "{}", stderr(&o));
    let env_only = [
        ("TG_SECRET", KEY),
        ("TG_SOCKS5", "127.0.0.1:1080"),
        ("TG_SOCKS5_AUTH", path),
    ];
    assert_usage_error(&["run"], &env_only, "--socks5-auth (TG_SOCKS5_AUTH): ");
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn help_texts_exit_zero_and_list_their_flags() {
    let cases: &[(&[&str], &[&str])] = &[
        (
            &["--help"],
            &["run", "probe", "link", "genkey", "check", "ctl"],
        ),
        (&["-h"], &["Applets:"]),
        (&["help"], &["Applets:"]),
        (&["help", "genkey"], &["--dd", "--ee"]),
        (
            &["run", "--help"],
            &[
                "--host",
                "TG_HOST",
                "--port",
                "TG_PORT",
                "--secret",
                "TG_SECRET",
                "--secret-file",
                "TG_SECRET_FILE",
                "--dc-ip",
                "TG_DC_IP",
                "--tcp-dc-ip",
                "--tier-order",
                "--ws-connect-timeout",
                "--tcp-connect-timeout",
                "--tcp-fallback-timeout",
                "--handshake-timeout",
                "--idle-timeout",
                "--bad-client-drain",
                "--stats-interval",
                "--max-connections",
                "--buf-kb",
                "--ca-file",
                "--danger-accept-invalid-certs",
                "TG_SKIP_TLS_VERIFY",
                "--log-file",
                "--log-max-kb",
                "--verbose",
                "--quiet",
                "--link-ip",
                "TG_LINK_IP",
                "(1443)",
                "(127.0.0.1)",
            ],
        ),
        (&["--port", "5", "--help"], &["tg-ws-proxy run"]),
        (
            &["link", "-h"],
            &[
                "--server",
                "--link-ip",
                "--secret-file",
                "--port",
                "--socks5",
                "tg://socks",
            ],
        ),
        (&["genkey", "--help"], &["--dd", "--ee DOMAIN"]),
        (&["probe", "--help"], &["probe"]),
    ];
    for (args, wanted) in cases {
        let o = run_with(args, &[]);
        let out = stdout(&o);
        assert_eq!(o.status.code(), Some(0), "{args:?}: {}", stderr(&o));
        for w in *wanted {
            assert!(out.contains(w), "{args:?}: help lacks {w:?}");
        }
    }
    let o = run_with(&["--version"], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert_eq!(
        stdout(&o).trim(),
        format!("tg-ws-proxy {}", env!("CARGO_PKG_VERSION"))
    );
}

#[test]
fn genkey_prints_secrets_that_parse() {
    let o = run_with(&["genkey"], &[]);
    assert_eq!(o.status.code(), Some(0));
    let plain = stdout(&o).trim().to_string();
    let s = Secret::parse(&plain).expect("genkey output parses");
    assert_eq!(s.kind, SecretKind::Plain);
    assert_eq!(plain.len(), 32);
    let again = stdout(&run_with(&["genkey"], &[])).trim().to_string();
    assert_ne!(plain, again, "two genkey runs gave the same secret");

    let dd = stdout(&run_with(&["genkey", "--dd"], &[]))
        .trim()
        .to_string();
    assert_eq!(Secret::parse(&dd).expect("dd parses").kind, SecretKind::Dd);
    // The domain is in our own hosts file: the resolve check touches no DNS (tests/genkey.rs).
    let dir = temp_dir("genkey-ee");
    let hosts = dir.join("hosts");
    std::fs::write(&hosts, "127.0.0.1 example.com\n").expect("write hosts");
    let hosts = hosts.to_string_lossy().into_owned();
    let ee = stdout(&run_with(
        &["genkey", "--ee", "example.com", "--hosts-file", &hosts],
        &[],
    ))
    .trim()
    .to_string();
    let _ = std::fs::remove_dir_all(&dir);
    assert_eq!(
        Secret::parse(&ee).expect("ee parses").kind,
        SecretKind::Ee("example.com".into())
    );
}

#[test]
fn link_prints_both_url_forms_for_every_secret() {
    let o = run_with(
        &["link", "--server", "192.0.2.10", "--port", "8443"],
        &[("TG_SECRET", KEY)],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert_eq!(
        stdout(&o),
        format!(
            "tg://proxy?server=192.0.2.10&port=8443&secret=dd{KEY}\n\
             https://t.me/proxy?server=192.0.2.10&port=8443&secret=dd{KEY}\n"
        )
    );
    // An explicit --host is used; --flag=value works; ee secrets keep their domain.
    let ee = format!("ee{KEY}6578616d706c652e636f6d");
    let o = run_with(
        &["link", "--host=198.51.100.7", "-s", &format!("{KEY},{ee}")],
        &[],
    );
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let out = stdout(&o);
    let lines: Vec<&str> = out.lines().collect();
    assert_eq!(lines.len(), 4, "{out}");
    assert_eq!(
        lines[0],
        format!("tg://proxy?server=198.51.100.7&port=1443&secret=dd{KEY}")
    );
    assert_eq!(
        lines[2],
        format!("tg://proxy?server=198.51.100.7&port=1443&secret={ee}")
    );
    // TG_LINK_IP beats the listen address.
    let o = run_with(
        &["link", "--host", "0.0.0.0"],
        &[("TG_SECRET", KEY), ("TG_LINK_IP", "proxy.lan")],
    );
    assert!(
        stdout(&o).starts_with("tg://proxy?server=proxy.lan&port=1443&"),
        "{}",
        stdout(&o)
    );
    // No host at all: the guess (never a public address) is tested in tests/link.rs.
}

#[test]
fn argv0_symlink_selects_the_applet() {
    let dir = temp_dir("argv0");
    let genkey = dir.join("genkey");
    std::os::unix::fs::symlink(BIN, &genkey).expect("symlink");
    let o = command(&genkey, &[], &[])
        .output()
        .expect("spawn via symlink");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    let text = stdout(&o);
    assert_eq!(
        Secret::parse(text.trim()).expect("parses").kind,
        SecretKind::Plain
    );
    // A symlinked applet takes its own flags, and `run` is not the fallback.
    let link = dir.join("link");
    std::os::unix::fs::symlink(BIN, &link).expect("symlink");
    let o = command(&link, &["--server", "192.0.2.1"], &[("TG_SECRET", KEY)])
        .output()
        .expect("spawn");
    assert_eq!(o.status.code(), Some(0), "{}", stderr(&o));
    assert!(stdout(&o).starts_with("tg://proxy?server=192.0.2.1&port=1443&secret=dd"));
    let _ = std::fs::remove_dir_all(&dir);
}

/// Only `run` creates a missing secret file (on first start, mode 0600, the note naming the
/// path but not the secret); `link` refuses a missing one (issue 23) and reads the created one.
#[test]
fn secret_file_is_created_private_by_run_and_reused_by_link() {
    let dir = temp_dir("secretfile");
    let path = dir.join("proxy.secret");
    let p = path.to_str().expect("utf-8 temp path");
    let o = run_with(&["link", "--server", "192.0.2.1"], &[("TG_SECRET_FILE", p)]);
    assert_eq!(o.status.code(), Some(2), "{}", stderr(&o));
    assert!(stderr(&o).contains(p), "{}", stderr(&o));
    assert!(!path.exists(), "link created the secret file");
    let (lines, listening) = run_until_listening(&[], &[("TG_SECRET_FILE", p)]);
    let err = lines.join("\n");
    assert!(listening, "no `listening on` line:\n{err}");
    let mode = std::fs::metadata(&path)
        .expect("file created")
        .permissions()
        .mode()
        & 0o777;
    assert_eq!(mode, 0o600);
    let text = std::fs::read_to_string(&path).expect("read secret file");
    let lines: Vec<&str> = text
        .lines()
        .filter(|l| !l.starts_with('#') && !l.trim().is_empty())
        .collect();
    assert_eq!(lines.len(), 1, "{text}");
    let secret = Secret::parse(lines[0].trim()).expect("file content parses");
    assert!(err.contains(p), "creation note names the path: {err}");
    assert!(
        !err.contains(&secret.key_hex()),
        "creation note shows the secret: {err}"
    );
    // `link` reads it: same secret, no note, file untouched.
    let o = run_with(&["link", "--server", "192.0.2.1", "--secret-file", p], &[]);
    assert_eq!(o.status.code(), Some(0));
    assert!(stderr(&o).is_empty(), "{}", stderr(&o));
    assert!(stdout(&o).contains(&secret.link_hex()));
    assert_eq!(std::fs::read_to_string(&path).expect("read"), text);
    let _ = std::fs::remove_dir_all(&dir);
}

/// Starts `run --port 0 --host 127.0.0.1 --startup-probes off <extra>` (nothing leaves
/// loopback: no startup probes toward the built-in DC table, no fetch of the shared CF domain
/// list), reads its stderr until the `listening on` line (20 s at most), kills it. Returns the
/// lines read and whether that line came.
fn run_until_listening(extra: &[&str], env: &[(&str, &str)]) -> (Vec<String>, bool) {
    let mut args = vec![
        "run",
        "--port",
        "0",
        "--host",
        "127.0.0.1",
        "--startup-probes",
        "off",
    ];
    args.extend_from_slice(extra);
    let mut env = env.to_vec();
    env.push(("TG_CF_DOMAIN_LIST", "off"));
    let mut child = command(Path::new(BIN), &args, &env)
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn run");
    let err = child.stderr.take().expect("piped stderr");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(err).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    let deadline = Instant::now() + Duration::from_secs(20);
    let mut lines = Vec::new();
    let mut listening = false;
    while !listening {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(line) => {
                listening = line.contains("listening on");
                lines.push(line);
            }
            Err(_) => break,
        }
    }
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    lines.extend(rx.try_iter());
    (lines, listening)
}

/// Needs `reactor::run` (it prints `listening on ADDR`): starts the proxy with the secret in
/// `TG_SECRET`, waits for that line, stops it, and checks no log line shows the secret.
#[test]
fn run_with_env_secret_never_logs_it_needs_reactor() {
    let (lines, listening) = run_until_listening(&["-v"], &[("TG_SECRET", KEY)]);
    let all = lines.join("\n");
    assert!(listening, "no `listening on` line within 20 s:\n{all}");
    assert!(all.contains("startup probes off"), "{all}");
    assert!(all.contains("shared CF domain list: off"), "{all}");
    assert!(
        !all.contains("cf-domain-list:"),
        "the shared list was fetched:\n{all}"
    );
    assert!(!all.contains(KEY), "secret in log:\n{all}");
    assert!(
        !all.to_ascii_lowercase().contains(&KEY[4..28]),
        "secret fragment in log:\n{all}"
    );
    let masked = Secret::parse(KEY).expect("valid").masked();
    assert!(
        all.contains(&masked),
        "masked secret {masked} expected in the summary:\n{all}"
    );
}

/// Issue 23 trap: "address in use" / "permission denied" on the port came without a hint. The
/// port is taken by the test first; the start fails (non-zero) with one line naming the
/// address and the likely fix, for the proxy port and an extra way (`--socks5`) alike.
#[test]
fn a_taken_port_stops_the_start_naming_the_address_and_the_fix() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").expect("occupy a port");
    let addr = taken.local_addr().unwrap();
    let port = addr.port().to_string();
    let base = ["run", "--host", "127.0.0.1", "--startup-probes", "off"];
    let env = [("TG_SECRET", KEY), ("TG_CF_DOMAIN_LIST", "off")];
    let mut args = base.to_vec();
    args.extend(["--port", &port]);
    let o = run_with(&args, &env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    let line = err
        .lines()
        .find(|l| l.contains("cannot listen on"))
        .unwrap_or_else(|| panic!("no bind error line:\n{err}"));
    assert!(
        line.contains(&format!("cannot listen on {addr}: ")),
        "{line}"
    );
    assert!(
        line.contains("ctl status") && line.contains("another --port"),
        "{line}"
    );
    let socks = addr.to_string();
    let mut args = base.to_vec();
    args.extend(["--port", "0", "--socks5", &socks]);
    let o = run_with(&args, &env);
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains(&format!("cannot listen on {addr} (socks5): "))
            && err.contains("another --socks5"),
        "{err}"
    );
    drop(taken);
}

/// A port below 1024 as an unprivileged user (the child drops to nobody before exec): the
/// line says root or a port of 1024 and up. Skipped where unprivileged users may bind low
/// ports (`net.ipv4.ip_unprivileged_port_start` below 1024).
#[test]
fn a_low_port_without_root_says_root_or_a_higher_port() {
    use std::os::unix::process::CommandExt;
    let start = std::fs::read_to_string("/proc/sys/net/ipv4/ip_unprivileged_port_start")
        .ok()
        .and_then(|s| s.trim().parse::<u32>().ok())
        .unwrap_or(1024);
    if start < 1024 {
        eprintln!("SKIP: unprivileged users may bind ports from {start}");
        return;
    }
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        eprintln!("SKIP: needs root to drop to nobody");
        return;
    }
    let mut cmd = command(
        Path::new(BIN),
        &[
            "run",
            "--host",
            "127.0.0.1",
            "--port",
            "1023",
            "--startup-probes",
            "off",
        ],
        &[("TG_SECRET", KEY), ("TG_CF_DOMAIN_LIST", "off")],
    );
    // SAFETY: setgid/setuid are async-signal-safe; nothing else runs in the closure.
    unsafe {
        cmd.pre_exec(|| {
            if libc::setgid(65534) != 0 || libc::setuid(65534) != 0 {
                return Err(std::io::Error::last_os_error());
            }
            Ok(())
        });
    }
    let o = cmd.output().expect("spawn run as nobody");
    let err = stderr(&o);
    assert_eq!(o.status.code(), Some(1), "{err}");
    assert!(
        err.contains("cannot listen on 127.0.0.1:1023: ")
            && err.contains("below 1024")
            && err.contains("root"),
        "{err}"
    );
}
