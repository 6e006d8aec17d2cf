//! The `ctl` applet: send one request to a running proxy's control socket
//! (`--control-socket`) and print the reply.
//!
//! Owns the command line (`ctl VERB [ARG] [--json] [--control-socket PATH] [--config FILE]
//! [--timeout D]`; the socket path from the flag, else `TG_CONTROL_SOCKET`, else the
//! `control-socket` line of `--config FILE` read with `run`'s reader, else [`DEFAULT_SOCKET`]),
//! the blocking client (a `socket2` socket whose send timeout bounds the connect, then a std
//! `UnixStream` with read/write timeouts) and the exit codes: 0 for an
//! `ok` reply (its body on stdout), 1 for an `error` reply or when the socket cannot be
//! reached (the reason on stderr), 2 for bad usage. The request is checked here with the
//! server's own parser (`control::request::parse`), so a typo never reaches the proxy.

use std::io::{self, Read, Write};
use std::os::fd::OwnedFd;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::time::Duration;

use pico_args::Arguments;
use socket2::{Domain, SockAddr, Socket, Type};

use crate::cli;
use crate::control::request;

/// Where the socket is unless `--control-socket` or `TG_CONTROL_SOCKET` says otherwise (the
/// OpenWrt service's path).
pub const DEFAULT_SOCKET: &str = "/var/run/tg-ws-proxy/ctl.sock";

/// The longest reply read, bytes (a status of thousands of routes fits; a peer that sends
/// more is not a proxy).
const MAX_REPLY: u64 = 4 << 20;

/// `tg-ws-proxy ctl --help`.
pub const HELP: &str = "\
tg-ws-proxy ctl: talk to a running proxy through its control socket

Usage: tg-ws-proxy ctl VERB [ARG] [--json] [--control-socket PATH | --config FILE] [--timeout D]

Verbs:
  status [--json]  every route (state, cooldown left, RTT p95, last failure and when,
                   probe, pool, sessions), sessions per tier, Worker budgets left,
                   zero-byte closes, fds used/limit, RSS, the stats counters;
                   a table, or one JSON object with --json
  metrics          the same counters in Prometheus text format (tgwsproxy_*)
  pin TIER|ROUTE   new sessions prefer this tier (ws, front, worker, cfproxy, mtproto,
                   cfproxy-ws, tcp) or route while it is usable; live sessions are
                   untouched, health still tracked
  unpin            new sessions follow the tier order again
  probe ROUTE      run a background probe of ROUTE now
  reload           re-read the configuration, like SIGHUP; prints what changed
  ROUTE is a route id as status shows it (#7 or 7) or TIER:DCn (ws:DC2, tcp:DC4m:
  every route of that tier toward that DC; m = media, t = test DC)

      --control-socket PATH  the proxy's socket [env TG_CONTROL_SOCKET]
                             (default /var/run/tg-ws-proxy/ctl.sock)
      --config FILE          the configuration file `run` reads: its control-socket
                             line names the socket (the flag and the variable win);
                             a file without one is an error
      --timeout D            give up on connecting, sending or a silent reply after D
                             (default 2s; D like 500ms, 2s, 1m)
  -h, --help                 this text

Exit status: 0 ok (the reply on stdout); 1 the proxy answered an error, or the socket
cannot be reached (why on stderr); 2 bad usage.
";

/// Runs one request. Returns the exit code (see [`HELP`]).
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{HELP}");
        return 0;
    }
    let (path, timeout, line) = match parse(args, &cli::process_env) {
        Ok(x) => x,
        Err(e) => {
            eprintln!("tg-ws-proxy: ctl: {e}");
            return 2;
        }
    };
    match exchange(&path, &line, timeout) {
        Ok(reply) => show(&reply),
        Err(e) => {
            eprintln!("tg-ws-proxy: ctl: {e}");
            1
        }
    }
}

/// (socket path, timeout, request line with its `\n`). Errors: the usage message, or what is
/// wrong with `--config FILE` (unreadable, a line `run` would refuse, no `control-socket`).
fn parse(mut args: Arguments, env: cli::Env) -> Result<(PathBuf, Duration, String), String> {
    let json = args.contains("--json");
    let socket: Option<PathBuf> = args
        .opt_value_from_str("--control-socket")
        .map_err(|e| cli::pico_error(e).to_string())?;
    let config: Option<PathBuf> = args
        .opt_value_from_str("--config")
        .map_err(|e| cli::pico_error(e).to_string())?;
    let timeout: Option<String> = args
        .opt_value_from_str("--timeout")
        .map_err(|e| cli::pico_error(e).to_string())?;
    let words: Vec<String> = args
        .finish()
        .into_iter()
        .map(|a| a.to_string_lossy().into_owned())
        .collect();
    if let Some(flag) = words.iter().find(|w| w.starts_with('-') && w.len() > 1) {
        return Err(format!("unknown flag {flag} (see tg-ws-proxy ctl --help)"));
    }
    if words.is_empty() {
        return Err(format!(
            "a VERB is needed ({}; see tg-ws-proxy ctl --help)",
            request::VERBS.join(", ")
        ));
    }
    let mut line = words.join(" ");
    if json {
        line.push_str(" --json");
    }
    line.push('\n');
    request::parse(line.as_bytes())?;
    let timeout = match timeout {
        None => Duration::from_secs(2),
        Some(t) => match cli::parse_duration(&t) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => return Err("--timeout: must be > 0".into()),
            Err(e) => return Err(format!("--timeout: {e}")),
        },
    };
    let path = match (
        socket.or_else(|| env("TG_CONTROL_SOCKET").map(PathBuf::from)),
        config,
    ) {
        (Some(p), _) => p,
        (None, Some(file)) => socket_from_file(&file)?,
        (None, None) => PathBuf::from(DEFAULT_SOCKET),
    };
    Ok((path, timeout, line))
}

/// The `control-socket` of the configuration file at `file`. Errors: the file's own (read, a
/// bad line), or no such line (a proxy started with that file alone has no control socket).
fn socket_from_file(file: &Path) -> Result<PathBuf, String> {
    match cli::setting_in_file(file, "--control-socket")? {
        Some(p) => Ok(PathBuf::from(p)),
        None => Err(format!(
            "--config {}: no control-socket line (a proxy started with this file alone has no \
             control socket: add `control-socket PATH` to it, or pass --control-socket PATH)",
            file.display()
        )),
    }
}

/// Sends `line` to the socket at `path` and reads the whole reply. Errors say why, naming
/// the path: no socket there, nobody listening, no permission, timeouts, other OS errors.
fn exchange(path: &Path, line: &str, timeout: Duration) -> Result<Vec<u8>, String> {
    let p = path.display();
    let mut s = connect(path, timeout).map_err(|e| match e.kind() {
        io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut => format!(
            "cannot connect to {p}: not accepted within {timeout:?} (its backlog is full: is the proxy stuck?)"
        ),
        io::ErrorKind::NotFound => format!(
            "cannot connect to {p}: no such socket (is the proxy running with --control-socket {p}?)"
        ),
        io::ErrorKind::ConnectionRefused => format!(
            "cannot connect to {p}: connection refused (nobody listens there; a stale socket file?)"
        ),
        io::ErrorKind::PermissionDenied => format!(
            "cannot connect to {p}: permission denied (the socket is mode 0600: run ctl as the proxy's user or root)"
        ),
        _ => format!("cannot connect to {p}: {e}"),
    })?;
    let timed = |e: io::Error, what: &str| {
        if matches!(
            e.kind(),
            io::ErrorKind::WouldBlock | io::ErrorKind::TimedOut
        ) {
            format!("{p}: no {what} within {timeout:?}")
        } else {
            format!("{p}: {what}: {e}")
        }
    };
    s.set_read_timeout(Some(timeout))
        .and_then(|()| s.set_write_timeout(Some(timeout)))
        .map_err(|e| format!("{p}: {e}"))?;
    // A proxy that refuses the connection (`error busy`, over its connection cap) writes its
    // line and closes before reading: the send then fails with EPIPE, but the line is waiting
    // to be read, and it is the better message.
    let sent = s.write_all(line.as_bytes());
    let mut reply = Vec::new();
    let read = (&mut s).take(MAX_REPLY + 1).read_to_end(&mut reply);
    match (sent, read) {
        (Err(e), _) if reply.is_empty() => return Err(timed(e, "request sent")),
        (_, Err(e)) if reply.is_empty() => return Err(timed(e, "reply")),
        _ => {}
    }
    if reply.len() as u64 > MAX_REPLY {
        return Err(format!("{p}: reply longer than {MAX_REPLY} bytes"));
    }
    Ok(reply)
}

/// A blocking unix-stream connect to `path` that gives up after `timeout`. A blocking connect
/// to a listening unix socket whose backlog is full waits until the listener accepts (Linux
/// `unix_stream_connect`), bounded by the socket's send timeout (`SO_SNDTIMEO`), so that is
/// set before the connect; past it the connect fails with `EAGAIN` (`WouldBlock`). (A
/// non-blocking connect would not do: on a unix socket it fails at once with `EAGAIN` instead
/// of waiting.) Interrupted connects are retried.
fn connect(path: &Path, timeout: Duration) -> io::Result<UnixStream> {
    let addr = SockAddr::unix(path)?;
    let sock = Socket::new(Domain::UNIX, Type::STREAM, None)?;
    sock.set_write_timeout(Some(timeout))?;
    loop {
        match sock.connect(&addr) {
            Ok(()) => break,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(e) => return Err(e),
        }
    }
    Ok(UnixStream::from(OwnedFd::from(sock)))
}

/// Prints a reply; returns the exit code.
fn show(reply: &[u8]) -> i32 {
    let text = String::from_utf8_lossy(reply);
    if let Some(body) = text.strip_prefix("ok\n") {
        print!("{body}");
        return 0;
    }
    if let Some(msg) = text.strip_prefix("error ") {
        eprintln!("tg-ws-proxy: ctl: {}", msg.trim_end());
        return 1;
    }
    if text.is_empty() {
        eprintln!("tg-ws-proxy: ctl: the proxy closed the connection without a reply");
    } else {
        let first: String = text.lines().next().unwrap_or("").chars().take(80).collect();
        eprintln!("tg-ws-proxy: ctl: not a control reply: {first:?}");
    }
    1
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::ffi::OsString;

    fn args(v: &[&str]) -> Arguments {
        Arguments::from_vec(v.iter().map(OsString::from).collect())
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    fn parse(a: Arguments) -> Result<(PathBuf, Duration, String), String> {
        super::parse(a, &no_env)
    }

    /// Issue 23 trap: `ctl` refused `--config`, so the socket path had to be repeated.
    #[test]
    fn the_socket_comes_from_the_flag_the_variable_the_config_file_or_the_default() {
        let dir = std::env::temp_dir().join(format!("tgwp-ctl-conf-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let conf = dir.join("proxy.conf");
        std::fs::write(&conf, "# x\nport 1443\ncontrol-socket /run/p/ctl.sock\n").unwrap();
        let c = conf.to_str().unwrap();
        let (path, ..) = parse(args(&["status", "--config", c])).unwrap();
        assert_eq!(path, PathBuf::from("/run/p/ctl.sock"));
        let (path, ..) = parse(args(&["status", "--config", c, "--control-socket", "/f"])).unwrap();
        assert_eq!(path, PathBuf::from("/f"), "the flag wins");
        let env = |n: &str| (n == "TG_CONTROL_SOCKET").then(|| "/e".to_string());
        let (path, ..) = super::parse(args(&["status", "--config", c]), &env).unwrap();
        assert_eq!(path, PathBuf::from("/e"), "the variable wins over the file");
        let (path, ..) = parse(args(&["status"])).unwrap();
        assert_eq!(
            path,
            PathBuf::from(DEFAULT_SOCKET),
            "no --config: as before"
        );
        std::fs::write(&conf, "port 1443\n").unwrap();
        let e = parse(args(&["status", "--config", c])).unwrap_err();
        assert!(e.contains(c) && e.contains("no control-socket line"), "{e}");
        std::fs::write(&conf, "port 1\nprot 2\n").unwrap();
        let e = parse(args(&["status", "--config", c])).unwrap_err();
        assert_eq!(
            e,
            format!(
                "--config {c} line 2: --prot: unknown setting (names are `run` flags without --)"
            )
        );
        let missing = dir.join("missing.conf");
        let e = parse(args(&["status", "--config", missing.to_str().unwrap()])).unwrap_err();
        assert!(e.contains("cannot read"), "{e}");
        let _ = std::fs::remove_dir_all(&dir);
    }

    /// Review (issue 22 part 4): `ctl --help` lists every tier `pin` takes.
    #[test]
    fn help_names_every_tier() {
        let pin = HELP.split("pin TIER|ROUTE").nth(1).expect("pin line");
        let pin = &pin[..pin.find("unpin").expect("unpin after pin")];
        for t in crate::config::Tier::ALL {
            assert!(pin.contains(t.name()), "{pin} misses {}", t.name());
        }
    }

    #[test]
    fn usage_builds_the_request_line_or_says_what_is_wrong() {
        let (path, timeout, line) = parse(args(&[
            "status",
            "--json",
            "--control-socket",
            "/tmp/x.sock",
        ]))
        .unwrap();
        assert_eq!(path, PathBuf::from("/tmp/x.sock"));
        assert_eq!(timeout, Duration::from_secs(2));
        assert_eq!(line, "status --json\n");
        let (_, t, line) = parse(args(&["--timeout", "500ms", "probe", "ws:DC2"])).unwrap();
        assert_eq!(
            (t, line.as_str()),
            (Duration::from_millis(500), "probe ws:DC2\n")
        );
        assert!(parse(args(&[])).unwrap_err().contains("a VERB is needed"));
        assert!(parse(args(&["frob"])).unwrap_err().contains("unknown verb"));
        assert!(parse(args(&["pin"])).unwrap_err().contains("pin needs"));
        assert!(parse(args(&["status", "--bogus"]))
            .unwrap_err()
            .contains("unknown flag --bogus"));
        assert!(parse(args(&["status", "--timeout", "0s"]))
            .unwrap_err()
            .contains("> 0"));
    }

    #[test]
    fn replies_map_to_exit_codes() {
        assert_eq!(show(b"ok\nfine\n"), 0);
        assert_eq!(show(b"error nope\n"), 1);
        assert_eq!(show(b""), 1);
        assert_eq!(show(b"HTTP/1.1 200 OK\r\n"), 1);
    }
}
