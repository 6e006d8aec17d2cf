//! Unit tests of `--config` through the real driver ([`parse_run`]): every setting from the
//! file, precedence each way (flag > variable > file, lists replaced whole), counts, bare
//! switches, errors naming file and line, the secret warning, `TG_CONFIG`.
//!
//! The line grammar alone is tested in `config_file`; this file owns nothing but tests.

use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::time::Duration;

use log::{Level, LevelFilter};
use pico_args::Arguments;

use super::{parse_run_start, CliError, RunArgs};
use crate::config::Tier;

const KEY: &str = "0123456789abcdef0123456789abcdef";
const KEY2: &str = "ffffffffffffffffffffffffffffffff";

/// A config file holding `text` (mode 0600), unique per test tag.
fn file(tag: &str, text: &str) -> PathBuf {
    let p = std::env::temp_dir().join(format!("tgwp-cfgt-{tag}-{}", std::process::id()));
    std::fs::write(&p, text).unwrap();
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o600)).unwrap();
    p
}

fn parse(argv: &[&str], env: &[(&str, &str)]) -> Result<RunArgs, CliError> {
    let env: Vec<(String, String)> = env
        .iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let lookup = move |name: &str| env.iter().find(|(k, _)| k == name).map(|(_, v)| v.clone());
    let args = Arguments::from_vec(argv.iter().map(|s| s.into()).collect());
    parse_run_start(args, &lookup)
}

fn with_file(
    p: &std::path::Path,
    rest: &[&str],
    env: &[(&str, &str)],
) -> Result<RunArgs, CliError> {
    let mut argv = vec!["--config", p.to_str().unwrap()];
    argv.extend_from_slice(rest);
    parse(&argv, env)
}

#[test]
fn every_kind_of_setting_comes_from_the_file() {
    let p = file(
        "kinds",
        &format!(
            "# router\nhost 0.0.0.0\nport = 2443\nsecret {KEY}\ncf-domain a.example.org\n\
             cf-domain b.example.org, c.example.org\ntier-order ws,tcp\ncf-priority\n\
             startup-probes off\nidle-timeout 1m\nverbose 2\nlog-file /tmp/a b.log\n"
        ),
    );
    let r = with_file(&p, &[], &[]).unwrap();
    let c = &r.config;
    assert_eq!(c.listen, "0.0.0.0:2443".parse().unwrap());
    assert!(r.host_given, "a host from the file is a given host");
    assert_eq!(c.secrets[0].key_hex(), KEY);
    let domains: Vec<&str> = c.cf_domains.iter().map(|e| e.host.as_str()).collect();
    assert_eq!(domains, ["a.example.org", "b.example.org", "c.example.org"]);
    assert_eq!(
        c.tier_order,
        vec![Tier::Ws, Tier::Tcp],
        "tier-order wins over cf-priority from the same file"
    );
    assert!(!c.startup_probes);
    assert_eq!(c.idle_timeout, Duration::from_secs(60));
    assert_eq!(c.log_level, LevelFilter::Trace);
    assert_eq!(
        c.log_file.as_deref(),
        Some(std::path::Path::new("/tmp/a b.log"))
    );
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    let _ = std::fs::remove_file(p);
}

#[test]
fn flags_beat_variables_beat_the_file_and_lists_are_replaced_whole() {
    let p = file(
        "prec",
        &format!("port 1000\nidle-timeout 7\nsecret {KEY}\ncf-domain f.example.org\nquiet\n"),
    );
    let r = with_file(&p, &["--port", "3000"], &[("TG_PORT", "2000")]).unwrap();
    assert_eq!(r.config.listen.port(), 3000, "flag over variable and file");
    let r = with_file(&p, &[], &[("TG_PORT", "2000")]).unwrap();
    assert_eq!(r.config.listen.port(), 2000, "variable over file");
    assert_eq!(
        r.config.idle_timeout,
        Duration::from_secs(7),
        "file fills in"
    );
    let r = with_file(&p, &["--cf-domain", "x.example.org"], &[]).unwrap();
    let domains: Vec<&str> = r
        .config
        .cf_domains
        .iter()
        .map(|e| e.host.as_str())
        .collect();
    assert_eq!(
        domains,
        ["x.example.org"],
        "a flag's list replaces the file's"
    );
    let r = with_file(&p, &[], &[("TG_SECRET", KEY2)]).unwrap();
    assert_eq!(r.config.secrets.len(), 1);
    assert_eq!(
        r.config.secrets[0].key_hex(),
        KEY2,
        "TG_SECRET replaces the file's"
    );
    // Counts: the file's `quiet` yields to -v on the command line and to TG_VERBOSE.
    assert_eq!(
        with_file(&p, &[], &[]).unwrap().config.log_level,
        LevelFilter::Warn
    );
    let r = with_file(&p, &["-v"], &[]).unwrap();
    assert_eq!(r.config.log_level, LevelFilter::Debug);
    let r = with_file(&p, &[], &[("TG_VERBOSE", "1")]).unwrap();
    assert_eq!(r.config.log_level, LevelFilter::Debug);
    let _ = std::fs::remove_file(p);
}

#[test]
fn errors_name_the_file_the_line_and_the_flag() {
    let cases: &[(&str, &str)] = &[
        (
            "port 1\n\nport x\n",
            "line 3: --port: given twice (first on line 1)",
        ),
        (
            "# c\nport 70000\n",
            "line 2: --port: not a port number (0-65535)",
        ),
        ("prot 1\n", "line 1: --prot: unknown setting"),
        ("config /etc/x\n", "line 1: --config: not allowed"),
        ("port\n", "line 1: --port: missing value"),
        (
            "cf-domain a.org\ncf-domain ,\n",
            "line 2: --cf-domain: empty value",
        ),
        ("verbose lots\n", "line 1: --verbose: a count: "),
        (
            "cf-priority maybe\n",
            "line 1: --cf-priority: 'maybe' is not a boolean",
        ),
        (
            "verbose\nquiet\n",
            "line 2: --quiet: cannot be combined with --verbose",
        ),
        ("secret nothex\n", "line 1: --secret: invalid secret"),
    ];
    for (i, (text, want)) in cases.iter().enumerate() {
        let p = file(&format!("err{i}"), text);
        let e = with_file(&p, &[], &[]).expect_err(text).to_string();
        let head = format!("--config {} {want}", p.display());
        assert!(e.starts_with(&head), "{text:?}: {e:?} lacks {head:?}");
        assert!(!e.contains('\n'), "{e:?}");
        let _ = std::fs::remove_file(p);
    }
    // The bad value of a flag is still the flag's error, not the file's.
    let p = file("flagerr", "port 1\n");
    let e = with_file(&p, &["--port", "x"], &[("TG_SECRET", KEY)]).unwrap_err();
    assert_eq!(e.to_string(), "--port: not a port number (0-65535)");
    let _ = std::fs::remove_file(p);
}

#[test]
fn unreadable_big_and_non_utf8_files_are_refused() {
    let e = parse(&["--config", "/nonexistent/tg.conf"], &[]).unwrap_err();
    assert!(
        e.to_string()
            .starts_with("--config /nonexistent/tg.conf: cannot read: No such file"),
        "{e}"
    );
    let big = file("big", &"#".repeat(64 * 1024 + 1));
    let e = with_file(&big, &[], &[]).unwrap_err().to_string();
    assert!(
        e.ends_with("larger than 64 KiB: not a configuration file"),
        "{e}"
    );
    std::fs::write(&big, b"port 1\n\xfe\n").unwrap();
    let e = with_file(&big, &[], &[]).unwrap_err().to_string();
    assert!(e.ends_with("line 2: not valid UTF-8"), "{e}");
    let _ = std::fs::remove_file(big);
}

#[test]
fn tg_config_names_the_file_and_a_flag_beats_it() {
    let a = file("env-a", "port 1111\n");
    let b = file("env-b", "port 2222\n");
    let env = [("TG_SECRET", KEY), ("TG_CONFIG", a.to_str().unwrap())];
    assert_eq!(parse(&[], &env).unwrap().config.listen.port(), 1111);
    let r = with_file(&b, &[], &env).unwrap();
    assert_eq!(r.config.listen.port(), 2222, "--config beats TG_CONFIG");
    std::fs::write(&a, "port x\n").unwrap();
    let e = parse(&[], &env).unwrap_err().to_string();
    let want = format!("--config (TG_CONFIG) {} line 1: --port: ", a.display());
    assert!(e.starts_with(&want), "{e}");
    let _ = (std::fs::remove_file(a), std::fs::remove_file(b));
}

#[test]
fn a_file_with_a_secret_readable_by_others_gets_a_warning() {
    let p = file("perm", &format!("secret {KEY}\n"));
    assert!(with_file(&p, &[], &[]).unwrap().notes.is_empty());
    std::fs::set_permissions(&p, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = with_file(&p, &[], &[]).unwrap();
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert_eq!(r.notes[0].0, Level::Warn);
    assert!(r.notes[0].1.contains("chmod 600") && !r.notes[0].1.contains(KEY));
    // No inline secret: a world-readable file is fine.
    std::fs::write(&p, "port 1\n").unwrap();
    assert!(with_file(&p, &[], &[("TG_SECRET", KEY)])
        .unwrap()
        .notes
        .is_empty());
    let _ = std::fs::remove_file(p);
}

#[test]
fn secret_file_named_by_the_config_file_is_read() {
    let dir = std::env::temp_dir().join(format!("tgwp-cfgt-sfdir-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&dir);
    std::fs::create_dir_all(&dir).unwrap();
    let secret = dir.join("secret");
    std::fs::write(&secret, format!("# keys\n{KEY2}\n")).unwrap();
    std::fs::set_permissions(&secret, std::fs::Permissions::from_mode(0o600)).unwrap();
    let p = file("sf", &format!("secret-file {}\n", secret.display()));
    let r = with_file(&p, &[], &[]).unwrap();
    assert_eq!(r.config.secrets[0].key_hex(), KEY2);
    std::fs::write(&secret, "nothex\n").unwrap();
    let e = with_file(&p, &[], &[]).unwrap_err().to_string();
    let want = format!("--config {} line 1: --secret-file: ", p.display());
    assert!(
        e.starts_with(&want) && e.contains("line 1: invalid secret"),
        "{e}"
    );
    let _ = (std::fs::remove_dir_all(dir), std::fs::remove_file(p));
}

#[test]
fn config_keys_cover_every_option_but_config() {
    let keys = super::config_keys();
    assert_eq!(keys.len(), super::table::RUN_OPTIONS.len() - 1);
    assert!(keys
        .iter()
        .all(|k| k.name != "config" && !k.name.starts_with('-')));
    let key = |n: &str| *keys.iter().find(|k| k.name == n).unwrap();
    assert!(key("cf-domain").list && !key("cf-domain").switch);
    assert!(key("cf-priority").switch && key("startup-probes").switch);
    assert!(key("verbose").count && !key("verbose").switch);
    assert_eq!(key("port").default, "1443");
    assert_eq!(keys[0].name, "host", "table order");
}

#[test]
fn control_characters_from_the_file_are_escaped_in_the_error_line() {
    // An unknown name and a bad value, each carrying ESC/NUL/BEL: the error line names them
    // escaped, so a junk file cannot clear the terminal, retitle it or cut the log line.
    for (tag, text, shown) in [
        (
            "ctl-name",
            "\u{1}\u{1b}[2Jjunk\0 x\n",
            "\\u{1}\\u{1b}[2Jjunk\\u{0}",
        ),
        (
            "ctl-value",
            "tier-order ws,\u{1b}]0;pwn\u{7}\n",
            "\\u{1b}]0;pwn\\u{7}",
        ),
    ] {
        let p = file(tag, text);
        let e = parse(&["--config", p.to_str().unwrap()], &[])
            .err()
            .unwrap_or_else(|| panic!("{tag}: accepted"))
            .to_string();
        assert!(e.contains("line 1"), "{tag}: {e}");
        assert!(e.contains(shown), "{tag}: {e:?}");
        assert!(!e.chars().any(char::is_control), "{tag}: {e:?}");
        let _ = std::fs::remove_file(p);
    }
}
