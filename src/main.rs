//! Binary entry: argv (and argv[0]) → applet → exit code. No sockets, no state.
//!
//! Busybox style: a symlink named after an applet (`probe` → `tg-ws-proxy`) runs that applet;
//! otherwise the first argument may name one, and with none `run` is used. This file owns only
//! that dispatch, the top-level `--help`/`--version`, and splitting `--flag=value` into two
//! arguments, and SIGPIPE's default for the printing applets; flags belong to the applets
//! (`tg_ws_proxy::applet`).

use std::ffi::OsString;
use std::path::Path;

use pico_args::Arguments;
use tg_ws_proxy::applet::{check, ctl, firewall, genkey, link, probe, run};

/// Applet names, in the order shown by `--help`.
const APPLETS: [&str; 7] = ["run", "probe", "link", "genkey", "check", "ctl", "firewall"];

const OVERVIEW: &str = "\
tg-ws-proxy: MTProto proxy for home routers (Telegram over WebSocket/TLS, with fallback tiers)

Usage: tg-ws-proxy [APPLET] [FLAGS]
       APPLET [FLAGS]            (through a symlink named after the applet)

Applets:
  run       serve Telegram clients (the default when no applet is named)
  probe     talk to a proxy like the Telegram app does and time the answer
  link      print tg:// and https://t.me/proxy links for the configured secrets
  genkey    print a fresh random secret
  check     probe every configured route and print a table
  ctl       ask a running proxy (--control-socket): status, metrics, pin, probe, reload
  firewall  install, remove or show transparent mode's nftables table

  tg-ws-proxy APPLET --help   flags of one applet (`tg-ws-proxy help APPLET` works too)
  -h, --help                  this overview
  -V, --version               print the version
";

fn main() {
    // Printing applets end quietly on a closed pipe (`tg-ws-proxy link | head -1`) as other
    // command-line tools do, instead of panicking on EPIPE: SIGPIPE back to its default here.
    // `run` ignores it again before it starts serving (a closed log pipe must not kill it).
    // SAFETY: signal() with SIG_DFL installs no handler; nothing runs concurrently yet.
    unsafe {
        libc::signal(libc::SIGPIPE, libc::SIG_DFL);
    }
    let mut argv = std::env::args_os();
    let argv0 = argv.next().unwrap_or_default();
    let rest: Vec<OsString> = argv.collect();
    std::process::exit(dispatch(&argv0, rest));
}

/// Chooses and runs the applet; returns the exit code.
fn dispatch(argv0: &OsString, mut rest: Vec<OsString>) -> i32 {
    let own_name = Path::new(argv0)
        .file_name()
        .and_then(|n| n.to_str())
        .unwrap_or("");
    let applet = if APPLETS.contains(&own_name) {
        own_name.to_string()
    } else {
        match rest.first().and_then(|a| a.to_str()) {
            Some("-h" | "--help") => {
                print!("{OVERVIEW}");
                return 0;
            }
            Some("-V" | "--version") => {
                println!("tg-ws-proxy {}", env!("CARGO_PKG_VERSION"));
                return 0;
            }
            Some("help") => {
                rest.remove(0);
                return help(rest.first().and_then(|a| a.to_str()));
            }
            Some(a) if APPLETS.contains(&a) => {
                let a = a.to_string();
                rest.remove(0);
                a
            }
            Some(a) if !a.starts_with('-') => {
                eprintln!(
                    "tg-ws-proxy: unknown applet '{a}' (known: {})",
                    APPLETS.join(", ")
                );
                return 2;
            }
            _ => "run".to_string(),
        }
    };
    let args = Arguments::from_vec(split_eq(rest));
    match applet.as_str() {
        "run" => run::main(args),
        "probe" => probe::main(args),
        "link" => link::main(args),
        "genkey" => genkey::main(args),
        "check" => check::main(args),
        "ctl" => ctl::main(args),
        "firewall" => firewall::main(args),
        _ => {
            eprintln!("tg-ws-proxy: {applet}: not yet implemented");
            2
        }
    }
}

/// `help [APPLET]`: the overview, or that applet's text.
fn help(applet: Option<&str>) -> i32 {
    let text = match applet {
        None => OVERVIEW.to_string(),
        Some("run") => run::help(),
        Some("probe") => probe::help(),
        Some("link") => link::HELP.to_string(),
        Some("genkey") => genkey::HELP.to_string(),
        Some("check") => check::HELP.to_string(),
        Some("ctl") => ctl::HELP.to_string(),
        Some("firewall") => firewall::HELP.to_string(),
        Some(other) => {
            eprintln!(
                "tg-ws-proxy: no help for '{other}' (known: {})",
                APPLETS.join(", ")
            );
            return 2;
        }
    };
    print!("{text}");
    0
}

/// `--flag=value` → `--flag`, `value` (pico-args is built without `=` support). Short flags and
/// anything after a bare `--` are left alone.
fn split_eq(args: Vec<OsString>) -> Vec<OsString> {
    let mut out = Vec::with_capacity(args.len());
    let mut literal = false;
    for a in args {
        match a.to_str() {
            Some("--") => {
                literal = true;
                out.push(a);
            }
            Some(s) if !literal && s.starts_with("--") => match s.split_once('=') {
                Some((flag, value)) => {
                    out.push(flag.into());
                    out.push(value.into());
                }
                None => out.push(a),
            },
            _ => out.push(a),
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn v(args: &[&str]) -> Vec<OsString> {
        args.iter().map(OsString::from).collect()
    }

    #[test]
    fn split_eq_only_touches_long_flags_before_double_dash() {
        let got = split_eq(v(&[
            "--port=1",
            "-p=2",
            "--dc-ip=2:1.2.3.4:443",
            "--v",
            "--",
            "--a=b",
        ]));
        let want = v(&[
            "--port",
            "1",
            "-p=2",
            "--dc-ip",
            "2:1.2.3.4:443",
            "--v",
            "--",
            "--a=b",
        ]);
        assert_eq!(got, want);
        assert_eq!(
            split_eq(v(&["--secret-file=a=b"])),
            v(&["--secret-file", "a=b"])
        );
    }
}
