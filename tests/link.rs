//! Black-box tests of the links: `link`'s server choice on this machine (never a public
//! address, the guess announced), `link --qr` drawing one QR code per secret, README's `link`
//! commands working on a secret file, and `run` printing the links on a terminal only.
//!
//! Loopback only: `run` binds 127.0.0.1, every upstream is a closed loopback port and no client
//! connects. The terminal is a pseudo-terminal opened here (`posix_openpt`).
mod common;

use std::ffi::CStr;
use std::fs::{File, OpenOptions};
use std::io::Read;
use std::net::IpAddr;
use std::os::fd::FromRawFd;
use std::os::unix::fs::OpenOptionsExt;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{run_bin, temp_dir, wait_until, Proxy, SECRET};
use tg_ws_proxy::applet::link::address::{choose_server, interface_addresses, Facts};
use tg_ws_proxy::applet::link::qr;
use tg_ws_proxy::cli::parse_secret_text;

const T: Duration = Duration::from_secs(10);

/// The `server=` value of the first link in `out`.
fn server_of(out: &str) -> &str {
    out.split("server=")
        .nth(1)
        .and_then(|r| r.split('&').next())
        .unwrap_or_else(|| panic!("no server= in {out:?}"))
}

/// RFC 1918, ULA or loopback: the only addresses a guess may give.
fn private_or_loopback(ip: IpAddr) -> bool {
    match ip {
        IpAddr::V4(a) => a.is_private() || a.is_loopback(),
        IpAddr::V6(a) => a.segments()[0] & 0xfe00 == 0xfc00 || a.is_loopback(),
    }
}

#[test]
fn link_guesses_only_private_addresses_and_says_so_or_asks_for_link_ip() {
    let addrs = interface_addresses();
    for (args, listen, host_given) in [
        (&["link"][..], "127.0.0.1", false),
        (&["link", "--host", "0.0.0.0"][..], "0.0.0.0", true),
        (&["link", "--host", "::"][..], "::", true),
    ] {
        let facts = Facts {
            explicit: None,
            listen: listen.parse().unwrap(),
            host_given,
            flag: "--host",
        };
        let r = run_bin(args, &[("TG_SECRET", SECRET)], T);
        match choose_server(facts, &addrs) {
            Ok((host, note)) => {
                assert_eq!(r.code, Some(0), "{args:?}: {r:?}");
                assert_eq!(server_of(&r.stdout), host, "{args:?}");
                let ip: IpAddr = host.parse().expect("a guess is an address");
                assert!(private_or_loopback(ip), "{args:?}: guessed {ip}");
                let note = note.expect("a guess always has a note");
                assert!(r.stderr.contains(&note), "{args:?}: {r:?}");
                assert!(r.stderr.contains("--link-ip"), "{r:?}");
            }
            Err(msg) => {
                assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
                assert!(r.stdout.is_empty(), "{r:?}");
                assert_eq!(r.stderr, format!("tg-ws-proxy: --link-ip: {msg}\n"));
                assert!(msg.contains("pass --link-ip HOST"), "{msg}");
            }
        }
        // --link-ip always settles it, even on a machine with only public addresses.
        let mut with_ip = args.to_vec();
        with_ip.extend(["--link-ip", "203.0.113.5"]);
        let r = run_bin(&with_ip, &[("TG_SECRET", SECRET)], T);
        assert_eq!(r.code, Some(0), "{r:?}");
        assert_eq!(server_of(&r.stdout), "203.0.113.5");
        assert!(r.stderr.is_empty(), "nothing guessed, nothing said: {r:?}");
    }
}

#[test]
fn link_qr_draws_one_code_per_secret_after_its_links() {
    let dd = format!("dd{SECRET}");
    let other = "ffeeddccbbaa99887766554433221100";
    let r = run_bin(
        &[
            "link",
            "--server",
            "192.0.2.1",
            "-s",
            &format!("{SECRET},{other}"),
            "--qr",
        ],
        &[],
        T,
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let https = format!("https://t.me/proxy?server=192.0.2.1&port=1443&secret={dd}");
    assert_eq!(lines[1], https);
    let code = qr::draw(&https).unwrap();
    assert!(
        code.len() > 10 && code[0].chars().all(|c| c == '█'),
        "{code:?}"
    );
    assert_eq!(lines[2..2 + code.len()], code[..], "{}", r.stdout);
    let second = &lines[2 + code.len()..];
    assert!(second[0].starts_with("tg://proxy?") && second[0].ends_with(&format!("dd{other}")));
    let code2 = qr::draw(second[1]).unwrap();
    assert_eq!(second[2..], code2[..], "{}", r.stdout);
    assert!(
        second[2..]
            .iter()
            .any(|l| l.contains('▀') && l.contains('▄')),
        "half blocks drawn"
    );
    // Without --qr: links only.
    let r = run_bin(&["link", "--server", "192.0.2.1", "-s", SECRET], &[], T);
    assert_eq!(r.stdout.lines().count(), 2, "{r:?}");
}

/// Issue 21: with `--socks5` the SOCKS5 pair follows the proxy links, its server chosen as for
/// them with the listener's address in place of `--host`, the first user of `--socks5-auth`
/// percent-encoded in it, and with `--qr` its QR code after it.
#[test]
fn link_prints_the_socks5_links_with_the_first_user_and_their_qr() {
    let dd = format!("dd{SECRET}");
    let base = ["link", "--host", "127.0.0.1", "-s", SECRET];
    let mut args = base.to_vec();
    args.extend(["--socks5", "127.0.0.2:1080"]);
    let r = run_bin(&args, &[], T);
    assert_eq!(r.code, Some(0), "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    assert_eq!(
        lines,
        [
            format!("tg://proxy?server=127.0.0.1&port=1443&secret={dd}"),
            format!("https://t.me/proxy?server=127.0.0.1&port=1443&secret={dd}"),
            "tg://socks?server=127.0.0.2&port=1080".to_string(),
            "https://t.me/socks?server=127.0.0.2&port=1080".to_string(),
        ]
    );
    // Without --socks5: no SOCKS5 links.
    let r = run_bin(&base, &[], T);
    assert!(!r.stdout.contains("socks"), "{r:?}");
    // With users: the first one, percent-encoded; --server settles both servers.
    let users = temp_dir().join("socks5.users");
    std::fs::write(&users, "# users\nal ice:p&s=s%#+\nbob:other\n").unwrap();
    let path = users.to_str().unwrap();
    let mut args = base.to_vec();
    args.extend(["--socks5", "[::1]:1080", "--socks5-auth", path]);
    args.extend(["--server", "192.0.2.1", "--qr"]);
    let r = run_bin(&args, &[], T);
    assert_eq!(r.code, Some(0), "{r:?}");
    let lines: Vec<&str> = r.stdout.lines().collect();
    let q = "server=192.0.2.1&port=1080&user=al%20ice&pass=p%26s%3Ds%25%23%2B";
    let https = format!("https://t.me/socks?{q}");
    let at = lines
        .iter()
        .position(|l| l.starts_with("tg://socks?"))
        .unwrap_or_else(|| panic!("no tg://socks link: {}", r.stdout));
    assert_eq!(lines[at], format!("tg://socks?{q}"));
    assert_eq!(lines[at + 1], https);
    let code = qr::draw(&https).unwrap();
    assert_eq!(lines[at + 2..], code[..], "{}", r.stdout);
    // The proxy pair and its QR code come first.
    let proxy_qr = qr::draw(lines[1]).unwrap();
    assert_eq!(at, 2 + proxy_qr.len());
    assert!(
        !r.stdout.contains("bob") && !r.stdout.contains("other"),
        "{r:?}"
    );
    // Port 0 cannot go in a link.
    let mut args = base.to_vec();
    args.extend(["--socks5", "127.0.0.1:0"]);
    let r = run_bin(&args, &[], T);
    assert_eq!(r.code, Some(2), "{r:?}");
    assert_eq!(
        r.stderr,
        "tg-ws-proxy: --socks5: port 0 (any free port) cannot be put in a link\n"
    );
}

/// The `tg-ws-proxy link …` commands of README's "By hand, on any Linux box" section.
fn readme_link_commands() -> Vec<Vec<String>> {
    let readme = include_str!("../README.md");
    let start = readme
        .find("### By hand, on any Linux box")
        .expect("README section \"By hand, on any Linux box\"");
    let block = &readme[start..];
    let end = block[3..].find("```\n").expect("a code block") + 3;
    block[..end]
        .lines()
        .filter(|l| l.starts_with("tg-ws-proxy link "))
        .map(|l| l.split_whitespace().skip(1).map(String::from).collect())
        .collect()
}

/// README's order: `run` creates the secret file on first start, then `link` prints links to
/// it. Before that file exists, `link` refuses (issue 23: it used to create a secret of its
/// own, so a mistyped path printed a link that worked with nothing).
#[test]
fn readme_link_commands_work_on_the_secret_file_run_created() {
    let cmds = readme_link_commands();
    assert!(
        !cmds.is_empty(),
        "README's router section has a link command"
    );
    let secret_file = temp_dir().join("tg-ws-proxy.secret");
    let path = secret_file.to_str().unwrap();
    let readme_args = |cmd: &Vec<String>| -> Vec<String> {
        cmd.iter()
            .map(|a| {
                if a == "/etc/tg-ws-proxy.secret" {
                    path.to_string()
                } else {
                    a.clone()
                }
            })
            .collect()
    };
    for cmd in &cmds {
        let args = readme_args(cmd);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        assert!(args.contains(&path), "{cmd:?} reads the secret file");
        let r = run_bin(&args, &[], T);
        assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
        assert!(r.stderr.contains(path), "{r:?}");
        assert!(!secret_file.exists(), "link created the secret file");
    }
    // `run` (on the test's loopback port, not README's address) creates it on first start.
    let mut p = Proxy::start(&["--secret-file", path]);
    p.terminate(T);
    for cmd in &cmds {
        let args = readme_args(cmd);
        let args: Vec<&str> = args.iter().map(String::as_str).collect();
        let r = run_bin(&args, &[], T);
        assert_eq!(r.code, Some(0), "{args:?}: {r:?}");
        let text = std::fs::read_to_string(&secret_file).expect("secret file exists");
        assert!(
            text.starts_with('#'),
            "the file starts with a comment: {text}"
        );
        let secret = &parse_secret_text(&text).expect("parses")[0];
        assert!(
            r.stdout.contains(&format!("secret={}", secret.link_hex())),
            "{r:?}"
        );
        assert_eq!(server_of(&r.stdout), "192.168.1.1");
    }
}

/// Issue 23 trap: `link` with a mistyped `--secret-file` (flag, variable or `--config` line)
/// silently created a new secret. Now: exit 2, one line naming the path and the two ways a
/// secret is made, and no file.
#[test]
fn link_with_a_missing_secret_file_names_it_and_creates_nothing() {
    let dir = temp_dir();
    let typo = dir.join("sercet");
    let t = typo.to_str().unwrap();
    let conf = dir.join("proxy.conf");
    std::fs::write(&conf, format!("port 1443\nsecret-file {t}\n")).unwrap();
    let c = conf.to_str().unwrap();
    type Env<'a> = &'a [(&'a str, &'a str)];
    let cases: [(&[&str], Env); 3] = [
        (&["link", "--server", "192.0.2.1", "--secret-file", t], &[]),
        (&["link", "--server", "192.0.2.1"], &[("TG_SECRET_FILE", t)]),
        (&["link", "--server", "192.0.2.1", "--config", c], &[]),
    ];
    for (args, env) in cases {
        let r = run_bin(args, env, T);
        assert_eq!(r.code, Some(2), "{args:?}: {r:?}");
        assert_eq!(r.stderr.lines().count(), 1, "{r:?}");
        assert!(r.stderr.contains(&format!("{t} does not exist")), "{r:?}");
        assert!(
            r.stderr.contains("run") && r.stderr.contains("genkey"),
            "{r:?}"
        );
        assert!(r.stdout.is_empty(), "{r:?}");
        assert!(!typo.exists(), "{args:?} created the secret file");
    }
}

/// A pseudo-terminal: (master, slave).
fn open_pty() -> (File, File) {
    // SAFETY: plain libc calls on a descriptor we own; ptsname_r writes into our buffer.
    unsafe {
        let m = libc::posix_openpt(libc::O_RDWR | libc::O_NOCTTY);
        assert!(m >= 0, "posix_openpt: {}", std::io::Error::last_os_error());
        let master = File::from_raw_fd(m);
        assert_eq!(libc::grantpt(m), 0, "grantpt");
        assert_eq!(libc::unlockpt(m), 0, "unlockpt");
        let mut name = [0 as libc::c_char; 128];
        assert_eq!(libc::ptsname_r(m, name.as_mut_ptr(), name.len()), 0);
        let name = CStr::from_ptr(name.as_ptr()).to_str().unwrap().to_string();
        let slave = OpenOptions::new()
            .read(true)
            .write(true)
            .custom_flags(libc::O_NOCTTY)
            .open(&name)
            .unwrap_or_else(|e| panic!("open {name}: {e}"));
        (master, slave)
    }
}

/// A port that was free a moment ago (links need a real port, not 0).
fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("bind 127.0.0.1:0")
        .port()
}

#[test]
fn run_prints_the_links_on_a_terminal_once() {
    let port = free_port().to_string();
    let (mut master, slave) = open_pty();
    let mut args = common::run_args();
    args.extend(["--port", &port, "--secret", SECRET, "--stats-interval", "0"]);
    let mut child = common::command(&args)
        .stdout(Stdio::from(slave))
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn run");
    let seen = Arc::new(Mutex::new(String::new()));
    let reader = {
        let seen = seen.clone();
        std::thread::spawn(move || {
            let mut buf = [0u8; 4096];
            // Ends with EIO once the child (the last holder of the slave) exits.
            while let Ok(n) = master.read(&mut buf) {
                if n == 0 {
                    break;
                }
                seen.lock()
                    .unwrap()
                    .push_str(&String::from_utf8_lossy(&buf[..n]));
            }
        })
    };
    let tg = format!("tg://proxy?server=127.0.0.1&port={port}&secret=dd{SECRET}");
    let https = format!("https://t.me/proxy?server=127.0.0.1&port={port}&secret=dd{SECRET}");
    let printed = wait_until(T, || seen.lock().unwrap().contains(&https));
    let _ = child.kill();
    let _ = child.wait();
    let _ = reader.join();
    let out = seen.lock().unwrap().clone();
    assert!(printed, "no links on the terminal: {out:?}");
    assert_eq!(out.matches(&tg).count(), 1, "{out:?}");
    assert_eq!(out.matches(&https).count(), 1, "{out:?}");
}

#[test]
fn run_prints_no_links_into_a_pipe() {
    let port = free_port().to_string();
    let mut proxy = Proxy::start(&["--port", &port, "--secret", SECRET]);
    assert_eq!(proxy.port().to_string(), port);
    proxy.kill(); // joins the readers: every line is in
    let logs = proxy.logs();
    assert!(
        logs.iter()
            .all(|l| !l.contains("tg://") && !l.contains("t.me/proxy")),
        "{logs:#?}"
    );
    assert!(logs.iter().all(|l| !l.contains(SECRET)), "{logs:#?}");
}
