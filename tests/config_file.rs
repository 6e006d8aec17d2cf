//! Black-box tests of `--config FILE` / `TG_CONFIG`: `run` serves clients with secrets and
//! the tier order from the file (an inline `secret` line and a `secret-file` it names), a flag
//! (a list too) beats the file, and a bad file stops `run` with exit 2 and one line naming the
//! file and the line.
//! docs/setup.md's example configuration is accepted as written.
//!
//! Loopback only: fake DCs on 127.0.0.1, the proxy on an ephemeral 127.0.0.1 port.
mod common;

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::time::Duration;

use common::fakedc::{DcConfig, FakeDc};
use common::{client_opts, run_bin, temp_dir, Proxy};
use tg_ws_proxy::applet::probe::{probe_once, Outcome};
use tg_ws_proxy::mtproto::obfs2::Tag;
use tg_ws_proxy::rng::Rng;

const INLINE: &str = "00112233445566778899aabbccddeeff";
const IN_FILE: &str = "ffeeddccbbaa99887766554433221100";
const NOT_CONFIGURED: &str = "0123456789abcdef0123456789abcdef";

fn write_private(path: &Path, text: &str) {
    std::fs::write(path, text).expect("write test file");
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(0o600)).expect("chmod");
}

fn probe(proxy: &Proxy, secret: &str) -> Outcome {
    let mut rng = Rng::new().expect("rng");
    probe_once(
        &client_opts(proxy.addr(), secret, Tag::Intermediate, 2),
        &mut rng,
    )
    .outcome
}

#[test]
fn run_serves_clients_with_secrets_and_tier_order_from_the_config_file() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let dir = temp_dir();
    let secret_file = dir.join("secret");
    write_private(&secret_file, &format!("# made by hand\n{IN_FILE}\n"));
    let conf = dir.join("tg-ws-proxy.conf");
    // The rig's own `--tcp-dc-ip` flags (and the test's, for DC 2) replace the file's list:
    // the file's dead DC 2 route is never dialled.
    write_private(
        &conf,
        &format!(
            "# test configuration\n\nsecret {INLINE}\nsecret-file = {}\ntcp-dc-ip 2:127.0.0.1:9\n\
             tier-order tcp\nstats-interval 0\n",
            secret_file.display(),
        ),
    );
    let route = format!("2:{}", dc.addr());
    let conf_arg = conf.to_str().expect("utf-8 path");
    let proxy = Proxy::start(&["--config", conf_arg, "--tcp-dc-ip", &route]);
    assert_eq!(probe(&proxy, INLINE), Outcome::Ok, "{:#?}", proxy.logs());
    assert_eq!(probe(&proxy, IN_FILE), Outcome::Ok, "{:#?}", proxy.logs());
    assert_ne!(
        probe(&proxy, NOT_CONFIGURED),
        Outcome::Ok,
        "a secret in neither file is refused"
    );
    // Kept on the log: the startup line an operator reads, and that it never shows a secret.
    let logs = proxy.logs().join("\n");
    assert!(logs.contains("2 secret(s)"), "{logs}");
    assert!(!logs.contains(INLINE) && !logs.contains(IN_FILE), "{logs}");
}

#[test]
fn a_flag_beats_the_config_file() {
    let dc = FakeDc::start_tcp(DcConfig::default());
    let dir = temp_dir();
    let conf = dir.join("c.conf");
    // The file's tier order names only ws (to a dead port); the flag's tcp wins.
    write_private(
        &conf,
        &format!("secret {INLINE}\ntier-order ws\nws-connect-timeout 1\n"),
    );
    let route = format!("2:{}", dc.addr());
    let conf_arg = conf.to_str().expect("utf-8 path");
    let args = [
        "--config",
        conf_arg,
        "--tcp-dc-ip",
        &route,
        "--tier-order",
        "tcp",
    ];
    let proxy = Proxy::start(&args);
    assert_eq!(probe(&proxy, INLINE), Outcome::Ok, "{:#?}", proxy.logs());
    // The flag's tier carried the session, not the file's ws.
    let rec = proxy.wait_event("session", Duration::from_secs(5), |_| true);
    let rec = rec.unwrap_or_else(|| panic!("no session record\n{}", proxy.dump()));
    assert_eq!(rec["tier"], "tcp", "{rec}");
}

/// Runs `run --config FILE` expecting exit 2 and exactly one stderr line.
fn bad_config_line(text: &[u8]) -> (PathBuf, String) {
    let dir = temp_dir();
    let conf = dir.join("bad.conf");
    std::fs::write(&conf, text).expect("write");
    let conf_arg = conf.to_str().expect("utf-8 path").to_string();
    let r = run_bin(
        &["run", "--config", &conf_arg, "--port", "0"],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert_eq!(r.stderr.lines().count(), 1, "not one line: {r:?}");
    assert!(r.stdout.is_empty(), "{r:?}");
    (conf, r.stderr.trim_end().to_string())
}

/// Issue 23 trap: an inline `# comment` after a value became part of the value. Now a value
/// with a `#` after a blank is refused with its file and line, for `run` and `link` alike; a
/// `#` inside a word stays part of the value.
#[test]
fn an_inline_comment_is_refused_with_file_and_line() {
    let (conf, line) = bad_config_line(
        format!("secret {INLINE}\n# ok\nidle-timeout 30s  # half a minute\n").as_bytes(),
    );
    assert_eq!(
        line,
        format!(
            "tg-ws-proxy: --config {} line 3: --idle-timeout: a '#' after a blank in the value: \
             comments go on their own line (there are no inline comments, so it would be part \
             of the value)",
            conf.display()
        )
    );
    let c = conf.to_str().unwrap();
    let r = run_bin(
        &["link", "--config", c, "--server", "192.0.2.1"],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(r.stderr.contains(" line 3: --idle-timeout: a '#'"), "{r:?}");
    // Inside a word it is the value's: the link is printed.
    std::fs::write(
        &conf,
        format!(
            "secret {INLINE}\nlog-file {}/a#b.log\n",
            temp_dir().display()
        ),
    )
    .unwrap();
    let r = run_bin(
        &["link", "--config", c, "--server", "192.0.2.1"],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
}

#[test]
fn a_bad_config_file_exits_2_with_one_line_naming_file_and_line() {
    let (conf, line) =
        bad_config_line(format!("secret {INLINE}\n# ok\nidle-timeout soon\n").as_bytes());
    let want = format!(
        "tg-ws-proxy: --config {} line 3: --idle-timeout: ",
        conf.display()
    );
    assert!(line.starts_with(&want), "{line:?} lacks {want:?}");
    let (conf, line) = bad_config_line(b"port 1443\nport 1444\n");
    assert_eq!(
        line,
        format!(
            "tg-ws-proxy: --config {} line 2: --port: given twice (first on line 1)",
            conf.display()
        )
    );
    let (_, line) = bad_config_line(b"listen 0.0.0.0\n");
    assert!(
        line.contains(" line 1: --listen: unknown setting"),
        "{line}"
    );
    let (_, line) = bad_config_line(b"port 1\n\xff\n");
    assert!(line.ends_with("line 2: not valid UTF-8"), "{line}");
    let (_, line) = bad_config_line(format!("secret {INLINE}zz\n").as_bytes());
    assert!(line.contains("line 1: --secret: invalid secret"), "{line}");
    assert!(!line.contains(INLINE), "the secret is not echoed: {line}");
    let r = run_bin(
        &["run", "--config", "/nonexistent/tg-ws-proxy.conf"],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(2), "{r:?}");
    assert!(
        r.stderr
            .starts_with("tg-ws-proxy: --config /nonexistent/tg-ws-proxy.conf: cannot read: "),
        "{r:?}"
    );
}

#[test]
fn tg_config_names_the_file() {
    let dir = temp_dir();
    let conf = dir.join("env.conf");
    write_private(
        &conf,
        &format!("secret {INLINE}\nport 4321\nhost 192.168.77.1\n"),
    );
    let r = run_bin(
        &["link"],
        &[("TG_CONFIG", conf.to_str().expect("utf-8 path"))],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(0), "{r:?}");
    assert!(
        r.stdout.starts_with(&format!(
            "tg://proxy?server=192.168.77.1&port=4321&secret=dd{INLINE}\n"
        )),
        "{r:?}"
    );
}

/// The fenced example under docs/setup.md's "Configuration file" heading.
fn documented_example() -> String {
    let doc = include_str!("../docs/setup.md");
    let start = doc
        .find("\n## Configuration file")
        .expect("docs/setup.md has a Configuration file section");
    let section = &doc[start..];
    let open = section.find("```text\n").expect("an example block") + "```text\n".len();
    let len = section[open..].find("```").expect("closed block");
    section[open..open + len].to_string()
}

#[test]
fn documented_example_configuration_is_accepted_as_written() {
    let dir = temp_dir();
    let secret = dir.join("secret");
    // Only the secret file's path is changed: the example's lives under /etc.
    let text = documented_example().replace("/etc/tg-ws-proxy/secret", secret.to_str().unwrap());
    assert!(
        text.contains(secret.to_str().unwrap()),
        "example names the secret file:\n{text}"
    );
    let conf = dir.join("example.conf");
    write_private(&conf, &text);
    // `link` never creates the secret file (`run` does on first start): make one with genkey.
    let key = run_bin(&["genkey"], &[], Duration::from_secs(10));
    assert_eq!(key.code, Some(0), "{key:?}");
    write_private(&secret, &key.stdout);
    let r = run_bin(
        &["link", "--config", conf.to_str().unwrap()],
        &[],
        Duration::from_secs(10),
    );
    assert_eq!(r.code, Some(0), "{r:?}\n{text}");
    assert!(
        r.stdout
            .starts_with("tg://proxy?server=192.168.1.1&port=1443&secret=dd"),
        "{r:?}"
    );
}
