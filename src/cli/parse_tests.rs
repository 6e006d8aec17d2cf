//! Unit tests of the driver (`parse`) without a configuration file: defaults, precedence of a
//! flag over its variable, lists, every setting, error lines, joined rules, the secret file.
//! (`config_tests` covers `--config`.) Owns nothing but tests.

use std::os::unix::fs::PermissionsExt;
use std::path::Path;
use std::time::Duration;

use super::*;

const KEY: &str = "0123456789abcdef0123456789abcdef";
type Pairs = &'static [(&'static str, &'static str)];
const S: Pairs = &[("TG_SECRET", KEY)];

fn env_of(pairs: Pairs) -> impl Fn(&str) -> Option<String> {
    move |name| {
        pairs
            .iter()
            .find(|(k, _)| *k == name)
            .map(|(_, v)| v.to_string())
    }
}

/// Parses a whitespace-separated command line (`{KEY}`-free strings use `KEY` via format!).
fn parse(cmd: &str, env: Pairs) -> Result<RunArgs, CliError> {
    parse_argv(&cmd.split_whitespace().collect::<Vec<_>>(), env)
}

fn parse_argv(v: &[&str], env: Pairs) -> Result<RunArgs, CliError> {
    let args = Arguments::from_vec(v.iter().map(|s| s.into()).collect());
    parse_run_start(args, &env_of(env))
}

fn err_line(cmd: &str, env: Pairs) -> String {
    parse(cmd, env).expect_err(cmd).to_string()
}

#[test]
fn defaults_with_env_secret() {
    let r = parse("", S).unwrap();
    let c = &r.config;
    assert_eq!(c.listen, "127.0.0.1:1443".parse().unwrap());
    assert!(!r.host_given);
    assert_eq!(c.secrets.len(), 1);
    assert_eq!(c.tier_order, Tier::ALL.to_vec());
    assert_eq!(c.ws_addrs.len(), 2);
    assert_eq!(c.log_level, LevelFilter::Info);
    assert_eq!(c.log_max_bytes, 1024 * 1024);
    assert!(!c.accept_invalid_certs);
    assert!(r.notes.is_empty());
}

#[test]
fn flag_wins_over_env() {
    let env: Pairs = &[
        ("TG_SECRET", "ffffffffffffffffffffffffffffffff"),
        ("TG_PORT", "1000"),
        ("TG_HOST", "0.0.0.0"),
        ("TG_DC_IP", "1:10.0.0.1"),
        ("TG_IDLE_TIMEOUT", "5"),
        ("TG_QUIET", "yes"),
    ];
    let r = parse(
        &format!("-p 2000 --host ::1 --secret {KEY} --dc-ip 2:10.0.0.2 -v"),
        env,
    );
    let c = r.unwrap().config;
    assert_eq!(c.listen, "[::1]:2000".parse().unwrap());
    assert_eq!(c.secrets.len(), 1);
    assert_eq!(c.secrets[0].key_hex(), KEY);
    assert_eq!(c.ws_addrs.keys().copied().collect::<Vec<_>>(), vec![2]);
    assert_eq!(
        c.idle_timeout,
        Duration::from_secs(5),
        "env used when no flag"
    );
    assert_eq!(c.log_level, LevelFilter::Debug, "-v flag beats TG_QUIET");
    let r = parse("", env).unwrap(); // env alone applies
    assert_eq!(r.config.listen, "0.0.0.0:1000".parse().unwrap());
    assert!(r.host_given);
    assert_eq!(r.config.ws_addrs[&1], "10.0.0.1:443".parse().unwrap());
    assert_eq!(r.config.log_level, LevelFilter::Warn);
    let both: Pairs = &[("TG_SECRET", KEY), ("TG_VERBOSE", "1")];
    assert_eq!(
        parse("-q", both).unwrap().config.log_level,
        LevelFilter::Warn
    );
}

#[test]
fn repeated_and_listed_values() {
    let cmd = format!(
        "-s {KEY} --secret dd{KEY},{KEY} --dc-ip 2:10.0.0.2,4:10.0.0.4:444 --dc-ip 2:10.0.0.9 \
         --port 1 --port 0 --tcp-fallback-timeout 1.5"
    );
    let c = parse(&cmd, &[]).unwrap().config;
    assert_eq!(c.secrets.len(), 2, "duplicate plain secret folded, dd kept");
    assert_eq!(
        c.ws_addrs[&2],
        "10.0.0.9:443".parse().unwrap(),
        "last DC entry wins"
    );
    assert_eq!(c.ws_addrs[&4], "10.0.0.4:444".parse().unwrap());
    assert_eq!(c.listen.port(), 0, "last --port wins");
    assert_eq!(c.tcp_connect_timeout, Duration::from_millis(1500));
    let r = parse("", &[("TG_SECRET", KEY), ("TG_TCP_FALLBACK_TIMEOUT", "3")]).unwrap();
    assert_eq!(r.config.tcp_connect_timeout, Duration::from_secs(3));
}

#[test]
fn every_setting_parses() {
    let cmd = "--tcp-dc-ip 2:10.1.1.1 --tier-order tcp --ws-connect-timeout 3 \
               --tcp-connect-timeout 4 --handshake-timeout 250ms --idle-timeout 1m \
               --bad-client-drain 0 --stats-interval 0 --max-connections 7 --buf-kb 4 \
               --danger-accept-invalid-certs --log-file /tmp/x.log --log-max-kb 2 \
               --link-ip router.lan -v -v";
    let c = parse(cmd, S).unwrap().config;
    assert_eq!(c.tcp_addrs[&2], "10.1.1.1:443".parse().unwrap());
    assert_eq!(c.tier_order, vec![Tier::Tcp]);
    assert_eq!(c.ws_connect_timeout, Duration::from_secs(3));
    assert_eq!(c.tcp_connect_timeout, Duration::from_secs(4));
    assert_eq!(c.handshake_timeout, Duration::from_millis(250));
    assert_eq!(c.idle_timeout, Duration::from_secs(60));
    assert_eq!(c.bad_client_drain, Duration::ZERO);
    assert_eq!(c.stats_interval, Duration::ZERO);
    assert_eq!(c.max_connections, 7);
    assert_eq!(c.buf_size, 4096);
    assert!(c.accept_invalid_certs);
    assert_eq!(c.log_file.as_deref(), Some(Path::new("/tmp/x.log")));
    assert_eq!(c.log_max_bytes, 2048);
    assert_eq!(c.link_ip.as_deref(), Some("router.lan"));
    assert_eq!(c.log_level, LevelFilter::Trace);
}

#[test]
fn errors_name_the_flag_and_the_env_var() {
    assert_eq!(
        err_line("--port x", S),
        "--port: not a port number (0-65535)"
    );
    let e = err_line("", &[("TG_SECRET", KEY), ("TG_PORT", "70000")]);
    assert_eq!(e, "--port (TG_PORT): not a port number (0-65535)");
    let cases: &[(&str, Pairs, &str)] = &[
        ("--port", S, "--port: missing value"),
        ("--bogus", S, "unknown flag '--bogus'"),
        ("--bogus", &[], "unknown flag '--bogus'"), // before the secret check
        ("--port x --bogus", S, "unknown flag"),    // before value checks
        ("stray", S, "unexpected argument 'stray'"),
        (
            "--idle-timeout 0",
            S,
            "--idle-timeout: must be greater than 0",
        ),
        (
            "",
            &[("TG_SECRET", KEY), ("TG_HANDSHAKE_TIMEOUT", "x")],
            "--handshake-timeout (TG_HANDSHAKE_TIMEOUT): ",
        ),
        ("--max-connections 0", S, "--max-connections: "),
        ("--buf-kb 2048", S, "--buf-kb: "),
        ("--tier-order ws,quic", S, "--tier-order: unknown tier"),
        ("--host localhost", S, "--host: "),
        ("--ca-file /nonexistent/ca.pem", S, "--ca-file: cannot read"),
        ("-v -q", S, "--quiet: cannot be combined"),
        (
            "",
            &[("TG_SECRET", KEY), ("TG_VERBOSE", "1"), ("TG_QUIET", "1")],
            "--quiet (TG_QUIET): ",
        ),
        (
            "",
            &[("TG_SECRET", KEY), ("TG_SKIP_TLS_VERIFY", "maybe")],
            "--danger-accept-invalid-certs (TG_SKIP_TLS_VERIFY): ",
        ),
        ("--link-ip bad_name!", S, "--link-ip: "),
        (
            "",
            &[("TG_SECRET", "0123456789abcdefXYZ")],
            "--secret (TG_SECRET): invalid secret",
        ),
        ("", &[], "--secret: no secret configured"),
    ];
    for (cmd, env, prefix) in cases {
        let e = err_line(cmd, env);
        assert!(
            e.starts_with(prefix),
            "{cmd:?}: {e:?} lacks prefix {prefix:?}"
        );
    }
    let e = parse_argv(&["--dc-ip", ""], S).unwrap_err().to_string();
    assert_eq!(e, "--dc-ip: empty value");
    assert!(!err_line(KEY, S).contains(KEY));
    assert!(!err_line("", &[("TG_SECRET", "0123456789abcdefXYZ")]).contains("0123456789"));
    let e = err_line("", &[]);
    assert!(
        e.contains("tg-ws-proxy genkey") && e.contains("--secret-file"),
        "{e}"
    );
}

#[test]
fn joined_rules_cf_priority_cooldown_max_and_switch_order() {
    let order = |cmd: &str, env: Pairs| parse(cmd, env).unwrap().config.tier_order;
    // Cloudflare tiers first; the other tiers keep their place after them (none dropped: a
    // --fronting-domain or --mtproto-proxy still gets its tier).
    let cf_first = vec![
        Tier::Worker,
        Tier::CfProxy,
        Tier::Ws,
        Tier::Front,
        Tier::Mtproto,
        Tier::CfProxyWs,
        Tier::Tcp,
    ];
    assert_eq!(order("--cf-priority", S), cf_first);
    for t in Tier::ALL {
        assert!(
            cf_first.contains(&t),
            "--cf-priority drops tier {}",
            t.name()
        );
    }
    assert_eq!(order("--cf-priority --tier-order tcp", S), vec![Tier::Tcp]);
    let env: Pairs = &[("TG_SECRET", KEY), ("TG_CF_PRIORITY", "1")];
    assert_eq!(order("", env), cf_first);
    assert_eq!(order("--tier-order ws", env), vec![Tier::Ws]);
    let c = parse("--cooldown-base 20 --cooldown-max 5", S)
        .unwrap()
        .config;
    assert_eq!((c.health.base_ms, c.health.max_ms), (20_000, 20_000));
    // A value that looks like a switch belongs to its flag.
    let c = parse("--log-file -q", S).unwrap().config;
    assert_eq!(c.log_file.as_deref(), Some(Path::new("-q")));
    assert_eq!(c.log_level, LevelFilter::Info);
    // Paths are taken verbatim, other values trimmed.
    let env: Pairs = &[
        ("TG_SECRET", KEY),
        ("TG_HOSTS_FILE", " h "),
        ("TG_PORT", " 7 "),
    ];
    let c = parse("", env).unwrap().config;
    assert_eq!(
        (c.hosts_file.as_path(), c.listen.port()),
        (Path::new(" h "), 7)
    );
}

fn temp_dir(tag: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("tgwp-cli-{tag}-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&d);
    std::fs::create_dir_all(&d).unwrap();
    d
}

#[test]
fn secret_file_is_created_once_then_reused() {
    let dir = temp_dir("create");
    let path = dir.join("secret");
    let cmd = format!("--secret-file {}", path.display());
    let first = parse(&cmd, &[]).unwrap();
    let mode = std::fs::metadata(&path).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o600);
    assert_eq!(first.notes.len(), 1);
    assert!(first.notes[0].1.contains(&path.display().to_string()));
    let key = first.config.secrets[0].key_hex();
    assert!(
        !first.notes[0].1.contains(&key),
        "note must not show the secret"
    );
    let second = parse(&cmd, &[]).unwrap();
    assert_eq!(second.config.secrets[0].key_hex(), key);
    assert!(second.notes.is_empty());
    let _ = std::fs::remove_dir_all(&dir);
}

/// Issue 23 trap: `link` (any applet but `run`'s start) with a mistyped `--secret-file` made a
/// new secret, and the link it printed matched nothing the proxy served.
#[test]
fn only_runs_start_creates_a_secret_file_other_applets_name_the_path() {
    let dir = temp_dir("nocreate");
    let path = dir.join("typo.secret");
    let argv = |v: &[&str]| Arguments::from_vec(v.iter().map(|s| s.into()).collect());
    let args = ["--secret-file", path.to_str().unwrap()];
    let e = parse_run(argv(&args), "link", &env_of(&[]))
        .expect_err("link")
        .to_string();
    let p = path.display().to_string();
    assert!(e.starts_with("--secret-file: "), "{e}");
    assert!(e.contains(&format!("{p} does not exist")), "{e}");
    assert!(e.contains("`link` never makes a secret"), "{e}");
    assert!(
        e.contains("`tg-ws-proxy run` creates") && e.contains("genkey"),
        "{e}"
    );
    assert!(!path.exists(), "link created the file");
    // `check` and `firewall` never use the secrets: the file is neither read nor created.
    let r = parse_run_without_secret_file(argv(&args), "check", &env_of(S)).unwrap();
    assert_eq!(r.config.secrets.len(), 1);
    assert!(!path.exists(), "check created the file");
    let e = parse_run_reload(argv(&args), &env_of(&[]))
        .expect_err("reload")
        .to_string();
    assert!(e.contains("a reload never makes a new secret"), "{e}");
    assert!(!path.exists(), "a reload created the file");
    let first = parse_run_start(argv(&args), &env_of(&[])).unwrap();
    assert!(path.exists() && first.notes.len() == 1);
    let again = parse_run(argv(&args), "link", &env_of(&[])).unwrap();
    assert_eq!(again.config.secrets, first.config.secrets);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn secret_file_errors() {
    let dir = temp_dir("errors");
    let e = err_line(&format!("--secret-file {}/no/dir/s", dir.display()), &[]);
    assert!(e.starts_with("--secret-file: cannot create"), "{e}");
    let path = dir.join("s");
    let cmd = format!("--secret-file {}", path.display());
    std::fs::write(&path, format!("# keys\n{KEY}\nnot-hex\n")).unwrap();
    assert!(err_line(&cmd, &[]).contains("line 3: invalid secret"));
    std::fs::write(&path, "# nothing\n\n").unwrap();
    assert!(err_line(&cmd, &[]).contains("contains no secret"));
    let text = format!("{KEY} # main\ndd{KEY}, ee{KEY}6578616d706c652e636f6d\n");
    std::fs::write(&path, text).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o644)).unwrap();
    let r = parse(&cmd, &[]).unwrap();
    assert_eq!(r.config.secrets.len(), 3);
    assert_eq!(r.notes[0].0, Level::Warn);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn socks5_listens_on_loopback_or_lan_unless_public_with_users() {
    for ok in [
        "127.0.0.1:1080",
        "192.168.1.1:1080",
        "[::1]:1080",
        "[fd00::1]:1080",
    ] {
        let c = parse(&format!("--socks5 {ok}"), S).unwrap().config;
        assert_eq!(c.socks5, Some(ok.parse().unwrap()));
        assert!(!c.socks5_public && c.socks5_users.is_none());
    }
    assert_eq!(parse("--socks5 off", S).unwrap().config.socks5, None);
    for public in [
        "0.0.0.0:1080",
        "[::]:1080",
        "203.0.113.5:1080",
        "100.64.0.1:1080",
    ] {
        let e = err_line(&format!("--socks5 {public}"), S);
        let a: std::net::SocketAddr = public.parse().unwrap();
        let want = format!("--socks5: {a} is not a loopback or private address");
        assert!(e.starts_with(&want), "{e}");
        assert!(e.contains("--socks5-public with --socks5-auth"), "{e}");
    }
    let env: Pairs = &[("TG_SECRET", KEY), ("TG_SOCKS5", "0.0.0.0:1080")];
    assert!(err_line("", env).starts_with("--socks5 (TG_SOCKS5): 0.0.0.0:1080 is not"));
    // --socks5-public needs users whenever --socks5 is on, public address or not; without a
    // listener it opens nothing.
    let want = "--socks5-public: requires --socks5-auth FILE: a public SOCKS5 port without \
                users is an open relay";
    assert_eq!(err_line("--socks5 0.0.0.0:1080 --socks5-public", S), want);
    assert_eq!(err_line("--socks5 127.0.0.1:1080 --socks5-public", S), want);
    assert!(parse("--socks5-public", S).unwrap().config.socks5_public);
    let env: Pairs = &[("TG_SECRET", KEY), ("TG_SOCKS5_PUBLIC", "1")];
    assert!(err_line("--socks5 0.0.0.0:1080", env)
        .starts_with("--socks5-public (TG_SOCKS5_PUBLIC): requires"));
    let dir = temp_dir("socks5-public");
    let users = dir.join("users");
    std::fs::write(&users, "alice:s3cret\n").unwrap();
    std::fs::set_permissions(&users, std::fs::Permissions::from_mode(0o600)).unwrap();
    let cmd = format!(
        "--socks5 0.0.0.0:1080 --socks5-public --socks5-auth {}",
        users.display()
    );
    let r = parse(&cmd, S).unwrap();
    assert_eq!(r.config.socks5, Some("0.0.0.0:1080".parse().unwrap()));
    assert_eq!(
        r.config.socks5_users.as_ref().and_then(|u| u.first()),
        Some(("alice", "s3cret"))
    );
    assert!(r.notes.is_empty(), "{:?}", r.notes);
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn socks5_users_are_read_at_start_and_at_reload_and_errors_name_the_line() {
    let dir = temp_dir("socks5-auth");
    let path = dir.join("users");
    let cmd = format!("--socks5 127.0.0.1:1080 --socks5-auth {}", path.display());
    let shown = path.display();
    let e = err_line(&cmd, S);
    assert!(
        e.starts_with(&format!("--socks5-auth: cannot read {shown}: ")),
        "{e}"
    );
    std::fs::write(&path, "# users\nalice:s3cret\nbob\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600)).unwrap();
    let e = err_line(&cmd, S);
    assert_eq!(
        e,
        format!("--socks5-auth: {shown}: line 3: expected user:password")
    );
    std::fs::write(&path, "alice:s3cret\n").unwrap();
    let r = parse(&cmd, S).unwrap();
    let users = r.config.socks5_users.clone().expect("users read");
    assert!(users.check(b"alice", b"s3cret"));
    assert!(r.notes.is_empty());
    // A reload reads the file again: a changed user list is a change of socks5-auth.
    std::fs::write(&path, "alice:n3w\n").unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o640)).unwrap();
    let argv: Vec<std::ffi::OsString> = cmd.split_whitespace().map(Into::into).collect();
    let reloaded = parse_run_reload(Arguments::from_vec(argv), &env_of(S)).unwrap();
    let new_users = reloaded.config.socks5_users.as_ref().unwrap();
    assert!(new_users.check(b"alice", b"n3w") && !new_users.check(b"alice", b"s3cret"));
    assert_eq!(r.config.changed(&reloaded.config), ["socks5-auth"]);
    // The mode is checked as the secret file's: a warning, not a refusal.
    assert_eq!(reloaded.notes.len(), 1);
    assert_eq!(reloaded.notes[0].0, Level::Warn);
    assert!(reloaded.notes[0]
        .1
        .contains("is readable by others (mode 640)"));
    assert!(!reloaded.notes[0].1.contains("n3w"));
    let _ = std::fs::remove_dir_all(&dir);
}

#[test]
fn control_timeout_takes_a_duration_above_zero() {
    assert_eq!(
        parse("", S).unwrap().config.control_timeout,
        Duration::from_secs(2)
    );
    let r = parse("--control-timeout 250ms", S).unwrap();
    assert_eq!(r.config.control_timeout, Duration::from_millis(250));
    let line = err_line("--control-timeout 0", S);
    assert!(
        line.contains("--control-timeout") && line.contains("more than 0"),
        "{line}"
    );
    let line = err_line("--control-timeout soon", S);
    assert!(line.contains("--control-timeout"), "{line}");
}

/// Review (issue 22 part 4, an issue 23 trap): `--cfproxy-ws` with a `--tier-order` that does
/// not name the tier (one written before it existed) turned nothing on, silently. It is said as
/// a warning naming the order; the default order, or either order naming it, says nothing.
#[test]
fn cfproxy_ws_outside_every_tier_order_is_warned_about() {
    let r = parse("--cfproxy-ws --tier-order ws,cfproxy,tcp", S).unwrap();
    assert_eq!(r.notes.len(), 1, "{:?}", r.notes);
    assert_eq!(r.notes[0].0, Level::Warn);
    assert!(
        r.notes[0].1.contains("--cfproxy-ws") && r.notes[0].1.contains("ws,cfproxy,tcp"),
        "{:?}",
        r.notes
    );
    for quiet in [
        "--cfproxy-ws",
        "--cfproxy-ws --tier-order ws,cfproxy-ws,tcp",
        "--cfproxy-ws --tier-order ws,tcp --media-tier-order cfproxy-ws,tcp",
        "--tier-order ws,tcp",
    ] {
        let r = parse(quiet, S).unwrap();
        assert!(r.notes.is_empty(), "{quiet}: {:?}", r.notes);
    }
}
