//! The `probe` applet: judges a proxy the way the Telegram app does — TCP connect, the fake-TLS
//! handshake for an `ee` secret, obfuscated2 init with the secret, one `req_pq_multi`, wait for
//! a `resPQ` echoing our nonce — timed, repeatable and optionally parallel, one line per
//! attempt and a summary.
//!
//! This file owns the applet's flags, `--help`, the worker threads and the printed lines. The
//! blocking MTProto client ([`MtClient`], in `client`; its fake-TLS wrapping in `tls`) and one
//! timed attempt with its outcome vocabulary ([`probe_once`], [`Summary`], in `attempt`) are
//! re-exported here for the black-box tests and the examples. Durations use the shared grammar
//! ([`cli::parse_duration`]).

mod attempt;
mod client;
mod tls;

use std::net::{SocketAddr, ToSocketAddrs};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use crate::cli::{self, parse_duration};
use crate::mtproto::obfs2::{Secret, SecretKind, Tag};
use crate::rng::Rng;

pub use attempt::{probe_once, Attempt, Outcome, Summary};
pub use client::{ClientOptions, MtClient};

use attempt::fmt_duration;

/// `tg-ws-proxy probe --help` before the duration grammar.
const HELP_HEAD: &str = "\
tg-ws-proxy probe: check a proxy the way the Telegram app does
(fake-TLS for ee secrets, obfuscated2 init, req_pq_multi -> resPQ), timed and repeatable.

USAGE: tg-ws-proxy probe [--server] HOST:PORT [--secret HEX] [OPTIONS]

  --server HOST:PORT   proxy to probe (or give it as the first positional argument)
  --port N             port, when --server is a bare host
  --secret HEX         proxy secret: 32 hex, dd+32 hex, or ee+32 hex+hex(domain) (fake-TLS:
                       a ClientHello with that SNI first, the server's answer checked);
                       first of a comma list is used; also TG_SECRET or --secret-file PATH
  --raw                no secret: send a raw relay init (talk to a DC directly)
  --dc N               DC number (default 2); --media for the media DC
  --tag T              abridged | intermediate | padded
                       (default: padded for dd and ee secrets, else intermediate)
  --count N            attempts (default 1)
  --interval D         between attempt starts, per worker (default 1s)
  --timeout D          bound on one whole attempt (default 3s)
  --parallel N         attempts running at a time (default 1)
  -q, --quiet          print only the summary
  -h, --help           this text
";

/// `tg-ws-proxy probe --help` after the duration grammar.
const HELP_TAIL: &str = "\
Outcomes: OK, TIMEOUT (connected, no resPQ in time), CLOSED (closed or reset before the
reply; with down=0B the init was answered by a close: a wrong secret, or a proxy with no route),
BAD_REPLY, CONNECT_FAILED (refused, not answering, or no route to that host), NETWORK_DOWN
(the OS refused to send: network unreachable, no local address). After the summary, a `diagnosis:` line says which of
these the failures were.

Exit status: 0 if every attempt got a resPQ, 1 otherwise, 2 on bad flags.
";

/// `tg-ws-proxy probe --help`: flags, the shared duration grammar, exit status.
pub fn help() -> String {
    format!("{HELP_HEAD}\n{}\n\n{HELP_TAIL}", cli::DURATION_HELP)
}

/// Parsed `probe` flags.
#[derive(Debug)]
struct ProbeArgs {
    client: ClientOptions,
    count: usize,
    interval: Duration,
    parallel: usize,
    quiet: bool,
}

fn flag<T>(
    args: &mut pico_args::Arguments,
    name: &'static str,
    parse: impl Fn(&str) -> Result<T, String>,
) -> Result<Option<T>, String> {
    let v: Option<String> = args.opt_value_from_str(name).map_err(|e| e.to_string())?;
    v.map(|s| parse(&s).map_err(|e| format!("{name}: {e}")))
        .transpose()
}

fn positive(s: &str) -> Result<usize, String> {
    match s.parse::<usize>() {
        Ok(n) if n > 0 => Ok(n),
        _ => Err(format!("expected a positive integer, got '{s}'")),
    }
}

/// Parses the flags (applet name already removed). `Ok(None)` = `--help`. `env_secret` is
/// `TG_SECRET`, passed in so tests do not touch the process environment.
fn parse_args(
    mut args: pico_args::Arguments,
    env_secret: Option<String>,
) -> Result<Option<ProbeArgs>, String> {
    if args.contains(["-h", "--help"]) {
        return Ok(None);
    }
    let quiet = args.contains(["-q", "--quiet"]);
    let raw = args.contains("--raw");
    let media = args.contains("--media");
    let server: Option<String> = flag(&mut args, "--server", |s| Ok(s.to_string()))?;
    let port = flag(&mut args, "--port", |s| {
        s.parse::<u16>()
            .map_err(|_| format!("expected a port number, got '{s}'"))
    })?;
    let secret_flag: Option<String> = flag(&mut args, "--secret", |s| Ok(s.to_string()))?;
    let secret_file = flag(&mut args, "--secret-file", |p| {
        std::fs::read_to_string(p).map_err(|e| format!("cannot read '{p}': {e}"))
    })?;
    let dc = flag(&mut args, "--dc", |s| match s.parse::<i16>() {
        Ok(n) if n != 0 => Ok(n),
        _ => Err(format!("expected a DC number, got '{s}'")),
    })?
    .unwrap_or(2);
    let tag = flag(&mut args, "--tag", parse_tag)?;
    let count = flag(&mut args, "--count", positive)?.unwrap_or(1);
    let interval = flag(&mut args, "--interval", parse_duration)?.unwrap_or(Duration::from_secs(1));
    let timeout = flag(&mut args, "--timeout", |s| {
        parse_duration(s).and_then(|d| {
            if d.is_zero() {
                Err("must be above 0".to_string())
            } else {
                Ok(d)
            }
        })
    })?
    .unwrap_or(Duration::from_secs(3));
    let parallel = flag(&mut args, "--parallel", positive)?.unwrap_or(1);
    let positional: Option<String> = args.opt_free_from_str().map_err(|e| e.to_string())?;
    let rest = args.finish();
    if let Some(extra) = rest.first() {
        return Err(format!("unexpected argument '{}'", extra.to_string_lossy()));
    }

    let server = match (server, positional) {
        (Some(_), Some(p)) => return Err(format!("unexpected argument '{p}' (--server given)")),
        (Some(s), None) | (None, Some(s)) => s,
        (None, None) => return Err("--server: missing (HOST:PORT)".to_string()),
    };
    let addr = resolve(&server, port).map_err(|e| format!("--server: {e}"))?;

    let secret = probe_secret(raw, secret_flag, secret_file, env_secret)?;
    let default_tag = match secret.as_ref().map(|s| &s.kind) {
        Some(SecretKind::Dd | SecretKind::Ee(_)) => Tag::PaddedIntermediate,
        _ => Tag::Intermediate,
    };
    let dc = if media { -dc.saturating_abs() } else { dc };
    Ok(Some(ProbeArgs {
        client: ClientOptions {
            addr,
            secret,
            tag: tag.unwrap_or(default_tag),
            dc,
            timeout,
        },
        count,
        interval,
        parallel,
        quiet,
    }))
}

/// `--tag`: the transport a probe speaks.
fn parse_tag(s: &str) -> Result<Tag, String> {
    match s {
        "abridged" => Ok(Tag::Abridged),
        "intermediate" => Ok(Tag::Intermediate),
        "padded" | "padded-intermediate" => Ok(Tag::PaddedIntermediate),
        _ => Err(format!(
            "expected abridged, intermediate or padded, got '{s}'"
        )),
    }
}

/// The probe's secret: from `--secret`, else `--secret-file` (its first secret), else
/// `TG_SECRET`; none with `--raw` (which conflicts with any of them). Errors name the source.
fn probe_secret(
    raw: bool,
    secret_flag: Option<String>,
    secret_file: Option<String>,
    env_secret: Option<String>,
) -> Result<Option<Secret>, String> {
    let (secret_src, secret_text) = match (secret_flag, secret_file, env_secret) {
        (Some(s), _, _) => ("--secret", Some(s)),
        (None, Some(s), _) => ("--secret-file", Some(s)),
        (None, None, Some(s)) => ("TG_SECRET", Some(s)),
        (None, None, None) => ("--secret", None),
    };
    let secret = match (raw, secret_text) {
        (true, Some(_)) => return Err(format!("--raw: conflicts with {secret_src}")),
        (true, None) => None,
        (false, None) => {
            return Err("--secret: missing (or TG_SECRET, --secret-file, --raw)".to_string())
        }
        // A secret file has `run`'s format (comment lines, several secrets): its first secret.
        (false, Some(text)) if secret_src == "--secret-file" => {
            let all =
                crate::cli::parse_secret_text(&text).map_err(|e| format!("{secret_src}: {e}"))?;
            let first = all.into_iter().next();
            Some(first.ok_or_else(|| format!("{secret_src}: the file holds no secret"))?)
        }
        (false, Some(text)) => {
            let first = text.split(',').next().unwrap_or("").trim();
            let s = Secret::parse(first).map_err(|e| format!("{secret_src}: {e}"))?;
            Some(s)
        }
    };
    Ok(secret)
}

fn resolve(server: &str, port: Option<u16>) -> Result<SocketAddr, String> {
    let found = match port {
        Some(p) => (server.trim_matches(|c| c == '[' || c == ']'), p).to_socket_addrs(),
        None => server.to_socket_addrs(),
    };
    let mut addrs = found.map_err(|e| format!("cannot resolve '{server}': {e}"))?;
    addrs
        .next()
        .ok_or_else(|| format!("'{server}' resolves to no address"))
}

/// Runs the applet; returns the exit status (0 all OK, 1 any failure, 2 bad flags).
pub fn main(args: pico_args::Arguments) -> i32 {
    let opts = match parse_args(args, std::env::var("TG_SECRET").ok()) {
        Ok(Some(o)) => o,
        Ok(None) => {
            print!("{}", help());
            return 0;
        }
        Err(e) => {
            eprintln!("probe: {e}");
            return 2;
        }
    };
    let mut rng = match Rng::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("probe: no OS randomness: {e}");
            return 1;
        }
    };
    if !opts.quiet {
        let c = &opts.client;
        let secret = c.secret.as_ref().map_or("raw".to_string(), Secret::masked);
        println!(
            "probing {} dc {} ({}, secret {}), {} attempt(s), {} at a time, timeout {}",
            c.addr,
            c.dc,
            c.tag.name(),
            secret,
            opts.count,
            opts.parallel,
            fmt_duration(c.timeout)
        );
    }
    let attempts = run_attempts(&opts, &mut rng);
    let summary = Summary::from(&attempts);
    println!("{summary}");
    if let Some(line) = summary.diagnosis(&attempts) {
        println!("{line}");
    }
    if summary.ok == summary.count {
        0
    } else {
        1
    }
}

/// Runs `count` attempts on `parallel` worker threads, printing one line per attempt as it ends.
fn run_attempts(opts: &ProbeArgs, rng: &mut Rng) -> Vec<Attempt> {
    let start = Instant::now();
    let next = AtomicUsize::new(0);
    let (tx, rx) = mpsc::channel::<(usize, Instant, Attempt)>();
    let workers = opts.parallel.min(opts.count);
    let mut seeds = Vec::with_capacity(workers);
    for _ in 0..workers {
        let mut seed = [0u8; 48];
        rng.fill(&mut seed);
        seeds.push(seed);
    }
    let mut out = Vec::with_capacity(opts.count);
    std::thread::scope(|scope| {
        for seed in seeds {
            let tx = tx.clone();
            let next = &next;
            scope.spawn(move || {
                let mut rng = Rng::from_seed(seed);
                loop {
                    let n = next.fetch_add(1, Ordering::Relaxed);
                    if n >= opts.count {
                        break;
                    }
                    let began = Instant::now();
                    let a = probe_once(&opts.client, &mut rng);
                    if tx.send((n, began, a)).is_err() {
                        break;
                    }
                    if next.load(Ordering::Relaxed) < opts.count {
                        let wake = began + opts.interval;
                        std::thread::sleep(wake.saturating_duration_since(Instant::now()));
                    }
                }
            });
        }
        drop(tx);
        for (n, began, a) in rx {
            if !opts.quiet {
                println!("{}", attempt_line(n + 1, began.duration_since(start), &a));
            }
            out.push(a);
        }
    });
    out
}

/// `t+1.203s n=3 175ms OK up=44B down=104B` (+ ` (detail)` when there is one).
fn attempt_line(n: usize, since_start: Duration, a: &Attempt) -> String {
    let mut line = format!(
        "t+{}.{:03}s n={n} {}ms {} up={}B down={}B",
        since_start.as_secs(),
        since_start.subsec_millis(),
        a.ms,
        a.outcome,
        a.bytes_up,
        a.bytes_down
    );
    if !a.detail.is_empty() {
        line.push_str(&format!(" ({})", a.detail));
    }
    line
}

#[cfg(test)]
mod tests {
    use super::attempt::tests::attempt;
    use super::*;

    fn args(v: &[&str]) -> pico_args::Arguments {
        pico_args::Arguments::from_vec(v.iter().map(Into::into).collect())
    }

    const KEY: &str = "0123456789abcdef0123456789abcdef";

    #[test]
    fn a_secret_file_in_runs_format_gives_its_first_secret() {
        let p = std::env::temp_dir().join(format!("probe-secret-{}", std::process::id()));
        let other = "fedcba9876543210fedcba9876543210";
        std::fs::write(&p, format!("# tg-ws-proxy secret file\n{KEY}, {other}\n")).unwrap();
        let path = p.to_str().unwrap();
        let a = parse_args(args(&["127.0.0.1:1443", "--secret-file", path]), None)
            .unwrap()
            .unwrap();
        assert_eq!(
            a.client.secret.as_ref().map(|s| s.key_hex()),
            Some(KEY.to_string())
        );
        std::fs::write(&p, "# only a comment\n").unwrap();
        let e = parse_args(args(&["127.0.0.1:1443", "--secret-file", path]), None).unwrap_err();
        assert!(e.contains("no secret"), "{e}");
        let _ = std::fs::remove_file(&p);
    }

    #[test]
    fn flags_defaults_and_tag_choice() {
        let a = parse_args(args(&["127.0.0.1:1443", "--secret", KEY]), None)
            .unwrap()
            .unwrap();
        assert_eq!(a.client.addr, "127.0.0.1:1443".parse().unwrap());
        assert_eq!((a.client.tag, a.client.dc), (Tag::Intermediate, 2));
        assert_eq!((a.count, a.parallel, a.quiet), (1, 1, false));
        assert_eq!(
            (a.interval, a.client.timeout),
            (Duration::from_secs(1), Duration::from_secs(3))
        );

        let dd = format!("dd{KEY}");
        let v = [
            "--server",
            "127.0.0.1:9",
            "--secret",
            &dd,
            "--dc",
            "4",
            "--media",
            "-q",
        ];
        let a = parse_args(args(&v), None).unwrap().unwrap();
        assert_eq!(
            (a.client.tag, a.client.dc, a.quiet),
            (Tag::PaddedIntermediate, -4, true)
        );

        let v = [
            "127.0.0.1:9",
            "--tag",
            "abridged",
            "--count",
            "5",
            "--timeout",
            "250ms",
        ];
        let a = parse_args(args(&v), Some(KEY.to_string()))
            .unwrap()
            .unwrap();
        assert_eq!((a.client.tag, a.count), (Tag::Abridged, 5));
        assert_eq!(a.client.timeout, Duration::from_millis(250));
        assert_eq!(a.client.secret.unwrap().key_hex(), KEY);

        let a = parse_args(args(&["127.0.0.1:9", "--raw"]), None)
            .unwrap()
            .unwrap();
        assert!(a.client.secret.is_none());
        assert!(parse_args(args(&["--help"]), None).unwrap().is_none());
    }

    #[test]
    fn bad_flags_name_the_flag() {
        let cases: [(&[&str], &str); 8] = [
            (&["127.0.0.1:9", "--secret", KEY, "--count", "0"], "--count"),
            (
                &["127.0.0.1:9", "--secret", KEY, "--timeout", "0"],
                "--timeout",
            ),
            (&["127.0.0.1:9", "--secret", KEY, "--tag", "xx"], "--tag"),
            (&["127.0.0.1:9", "--secret", "zz"], "--secret"),
            (&["127.0.0.1:9"], "--secret"),
            (&["--secret", KEY], "--server"),
            (&["127.0.0.1:9", "--secret", KEY, "--bogus"], "--bogus"),
            (
                &["127.0.0.1:9", "--secret", KEY, "--interval"],
                "--interval",
            ),
        ];
        for (v, name) in cases {
            let e = parse_args(args(v), None).unwrap_err();
            assert!(e.contains(name), "{v:?}: {e}");
        }
    }

    #[test]
    fn ee_secrets_are_accepted_with_the_padded_default_tag() {
        let ee = format!("ee{KEY}6578616d706c652e636f6d");
        let a = parse_args(args(&["127.0.0.1:9", "--secret", &ee]), None)
            .unwrap()
            .unwrap();
        let s = a.client.secret.unwrap();
        assert_eq!(s.kind, SecretKind::Ee("example.com".into()));
        assert_eq!(a.client.tag, Tag::PaddedIntermediate);
    }

    #[test]
    fn attempt_line_format() {
        let mut a = attempt(Outcome::Ok, 175);
        a.bytes_up = 44;
        a.bytes_down = 104;
        let l = attempt_line(3, Duration::from_millis(1203), &a);
        assert_eq!(l, "t+1.203s n=3 175ms OK up=44B down=104B");
        a.outcome = Outcome::Timeout;
        a.detail = "no resPQ within 3s".into();
        assert!(attempt_line(1, Duration::ZERO, &a)
            .ends_with("TIMEOUT up=44B down=104B (no resPQ within 3s)"));
    }
}
