//! The `firewall` applet: install, remove or show transparent mode's nftables table (`table inet
//! tg_ws_proxy`, rendered by `route::firewall`), from the same configuration as `run` (every
//! `run` flag, `TG_*` variables, `--config FILE`).
//!
//! Owns the verbs, running `nft` (`--nft PATH`: `nft -c -f -` first, then `nft -f -`, the script
//! on stdin; a refused check leaves the firewall as it was) and the exit codes. The ranges come
//! from `--tg-ranges FILE`, else the `--tg-ranges-cache` file when it exists and parses, else the
//! built-in list (`reactor::load_ranges`, the same choice `run` makes at start); a `--tg-ranges`
//! file that cannot be used is an error here, a cache that cannot is a note on stderr. Like `check`
//! it needs no secret: `TG_SECRET` reads as a placeholder and `--secret-file` is ignored.

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};

use pico_args::Arguments;

use crate::cli::{self, CliError};
use crate::config::Config;
use crate::route::firewall::{self, Spec, REMOVE_SCRIPT};

/// Placeholder secret handed to `parse_run` (which requires one); never used.
const PLACEHOLDER_SECRET: &str = "00000000000000000000000000000001";

/// `tg-ws-proxy firewall --help`.
pub const HELP: &str = "\
tg-ws-proxy firewall: install or remove transparent mode's nftables table

Usage: tg-ws-proxy firewall install|remove|show [--iptables] [RUN FLAGS]

  install      replace (or create) the table `inet tg_ws_proxy` in one nft transaction:
               `nft -c -f -` checks it first; if nft refuses, nothing changes and nft's
               message is printed (exit 1)
  remove       delete the table `inet tg_ws_proxy` (and nothing else); a missing table is
               not an error (said on stderr)
  show         print the nft script install would load; with --iptables the equivalent
               iptables/ip6tables commands instead (for routers without nftables; printed
               only, never run)

      --iptables       with show: iptables commands instead of the nft script
      --nft PATH       the nft binary (nft, looked up in PATH) [TG_NFT]
  -h, --help           this text

The table: sets tg4/tg6 (Telegram's ranges: --tg-ranges FILE, else the --tg-ranges-cache file
if it exists and parses, else the built-in list), skip4/skip6 (--transparent-skip: LAN hosts
that go direct), and a nat prerouting chain that redirects TCP arriving on the --lan-iface
interfaces toward those ranges to the --transparent port. Every other `tg-ws-proxy run` flag
is accepted, so the proxy's command line, environment and --config file work unchanged.

Exit status: 0 done; 1 nft failed or refused (its message on stderr); 2 bad usage or
configuration (install and show need --transparent).
";

/// The verbs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verb {
    /// Replace or create the table.
    Install,
    /// Delete the table.
    Remove,
    /// Print the script.
    Show,
}

/// Parsed `firewall` arguments.
#[derive(Clone, Debug)]
pub struct FirewallArgs {
    /// What to do.
    pub verb: Verb,
    /// `show --iptables`.
    pub iptables: bool,
    /// The `run` configuration.
    pub config: Config,
}

/// Runs the applet; returns the exit code (see [`HELP`]).
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{HELP}");
        return 0;
    }
    let parsed = match parse_args(args, &cli::process_env) {
        Ok(p) => p,
        Err(e) => {
            eprintln!("tg-ws-proxy: firewall: {e}");
            return 2;
        }
    };
    match parsed.verb {
        Verb::Remove => remove(&parsed.config.nft),
        Verb::Install | Verb::Show => {
            let (text, summary) = match render(&parsed.config, parsed.iptables) {
                Ok(x) => x,
                Err(e) => {
                    eprintln!("tg-ws-proxy: firewall: {e}");
                    return 2;
                }
            };
            if parsed.verb == Verb::Show {
                print!("{text}");
                return 0;
            }
            for name in missing_ifaces(&parsed.config) {
                eprintln!(
                    "tg-ws-proxy: firewall: warning: interface {name} does not exist now: nothing \
                     is redirected from it until it appears (br-lan is OpenWrt's LAN bridge; \
                     elsewhere give --lan-iface)"
                );
            }
            install(&parsed.config.nft, &text, &summary)
        }
    }
}

/// Parses the verb, `--iptables` and every `run` flag (`env` is the `TG_*` lookup).
///
/// Errors: a missing or unknown verb, `--iptables` without `show`, and [`cli::parse_run`]'s.
pub fn parse_args(mut args: Arguments, env: cli::Env) -> Result<FirewallArgs, CliError> {
    let iptables = args.contains("--iptables");
    let _: Vec<String> = args
        .values_from_str("--secret-file")
        .map_err(cli::pico_error)?;
    let verb: Option<String> = args.subcommand().map_err(cli::pico_error)?;
    let verb = match verb.as_deref() {
        Some("install") => Verb::Install,
        Some("remove") => Verb::Remove,
        Some("show") => Verb::Show,
        Some(other) => {
            return Err(CliError::plain(format!(
                "unknown verb '{other}' (install, remove or show)"
            )))
        }
        None => return Err(CliError::plain("install, remove or show?")),
    };
    if iptables && verb != Verb::Show {
        return Err(CliError::flag("--iptables", "only with show"));
    }
    let no_secret = |name: &str| match name {
        "TG_SECRET" => Some(PLACEHOLDER_SECRET.to_string()),
        "TG_SECRET_FILE" => None,
        other => env(other),
    };
    let config = cli::parse_run_without_secret_file(args, "firewall", &no_secret)?.config;
    Ok(FirewallArgs {
        verb,
        iptables,
        config,
    })
}

/// The install script (or the iptables commands) for `cfg`, and a one-line summary. Errors:
/// no `--transparent`, and [`firewall::FwError`]'s.
pub fn render(cfg: &Config, iptables: bool) -> Result<(String, String), String> {
    let Some(listen) = cfg.transparent else {
        return Err("--transparent is not set: there is no port to redirect to".into());
    };
    let (ranges, source, problems) = crate::reactor::load_ranges(cfg);
    if cfg.tg_ranges_file.is_some() && !source.starts_with("file ") {
        // A list the user named and we cannot use: no table from another one.
        return Err(problems.join("; "));
    }
    for p in problems {
        eprintln!("tg-ws-proxy: firewall: {p}");
    }
    let spec = Spec {
        port: listen.port(),
        lan_ifaces: &cfg.lan_ifaces(),
        skip: &cfg.transparent_skip,
        ranges: &ranges,
    };
    let text = if iptables {
        firewall::iptables_script(&spec)
    } else {
        firewall::install_script(&spec)
    }
    .map_err(|e| e.to_string())?;
    let summary = format!(
        "{} IPv4 and {} IPv6 ranges ({source}) from {} redirected to port {}, {} source(s) \
         skipped",
        ranges.v4().len(),
        ranges.v6().len(),
        cfg.lan_ifaces().join(", "),
        listen.port(),
        cfg.transparent_skip.len()
    );
    Ok((text, summary))
}

/// Whether `nft` can be run at all (`--version`); the message says what to do when not.
fn nft_present(nft: &Path) -> Result<(), String> {
    match Command::new(nft)
        .arg("--version")
        .stdin(Stdio::null())
        .output()
    {
        Ok(_) => Ok(()),
        Err(e) => Err(format!(
            "{} not found or not runnable ({e}): install nftables, or give --nft PATH",
            nft.display()
        )),
    }
}

/// The LAN interfaces of `cfg` that do not exist now (`/sys/class/net/NAME`): the redirect
/// starts only when they appear, so `install` and `check` say so.
pub fn missing_ifaces(cfg: &Config) -> Vec<String> {
    cfg.lan_ifaces()
        .into_iter()
        .filter(|n| !Path::new("/sys/class/net").join(n).exists())
        .collect()
}

/// `nft -c -f -` then `nft -f -` with `script`.
fn install(nft: &Path, script: &str, summary: &str) -> i32 {
    if let Err(e) = nft_present(nft) {
        eprintln!("tg-ws-proxy: firewall: {e}; the firewall is unchanged");
        return 1;
    }
    if let Err(e) = run_nft(nft, &["-c", "-f", "-"], script) {
        eprintln!("tg-ws-proxy: firewall: nft refused the table; the firewall is unchanged:\n{e}");
        return 1;
    }
    if let Err(e) = run_nft(nft, &["-f", "-"], script) {
        eprintln!("tg-ws-proxy: firewall: nft -f failed; the firewall is unchanged:\n{e}");
        return 1;
    }
    println!(
        "tg-ws-proxy: firewall: table {} installed: {summary}",
        firewall::TABLE
    );
    0
}

/// Deletes our table if it is there.
fn remove(nft: &Path) -> i32 {
    if let Err(e) = nft_present(nft) {
        eprintln!("tg-ws-proxy: firewall: {e}");
        return 1;
    }
    let listed = match run_nft(nft, &["list", "tables"], "") {
        Ok(out) => out,
        Err(e) => {
            eprintln!("tg-ws-proxy: firewall: cannot list the tables:\n{e}");
            return 1;
        }
    };
    let ours = format!("table {}", firewall::TABLE);
    if !listed.lines().any(|l| l.trim() == ours) {
        eprintln!(
            "tg-ws-proxy: firewall: table {} is not installed; nothing to remove",
            firewall::TABLE
        );
        return 0;
    }
    match run_nft(nft, &["-f", "-"], REMOVE_SCRIPT) {
        Ok(_) => {
            println!("tg-ws-proxy: firewall: table {} removed", firewall::TABLE);
            0
        }
        Err(e) => {
            eprintln!("tg-ws-proxy: firewall: nft failed:\n{e}");
            1
        }
    }
}

/// Runs `nft ARGS` with `stdin`; its stdout, or a message: nft's stderr (or how it ended), or
/// the OS error starting it.
pub fn run_nft(nft: &Path, args: &[&str], stdin: &str) -> Result<String, String> {
    let mut child = Command::new(nft)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .map_err(|e| format!("cannot run {}: {e}", nft.display()))?;
    if let Some(mut pipe) = child.stdin.take() {
        // A refused write (nft ended early) shows in its status and message below.
        let _ = pipe.write_all(stdin.as_bytes());
    }
    let out = child
        .wait_with_output()
        .map_err(|e| format!("{}: {e}", nft.display()))?;
    if out.status.success() {
        return Ok(String::from_utf8_lossy(&out.stdout).into_owned());
    }
    let err = String::from_utf8_lossy(&out.stderr).trim_end().to_string();
    Err(if err.is_empty() {
        format!("{} {}: {}", nft.display(), args.join(" "), out.status)
    } else {
        err
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(a: &[&str]) -> Arguments {
        Arguments::from_vec(a.iter().map(|s| s.into()).collect())
    }

    fn no_env(_: &str) -> Option<String> {
        None
    }

    #[test]
    fn verbs_and_iptables_are_parsed_and_misuse_refused() {
        let p = parse_args(args(&["show", "--iptables"]), &no_env).unwrap();
        assert_eq!((p.verb, p.iptables), (Verb::Show, true));
        let p = parse_args(args(&["remove", "--nft", "/sbin/nft"]), &no_env).unwrap();
        assert_eq!(p.verb, Verb::Remove);
        assert_eq!(p.config.nft, Path::new("/sbin/nft"));
        assert!(parse_args(args(&["install", "--iptables"]), &no_env)
            .unwrap_err()
            .to_string()
            .contains("only with show"));
        assert!(parse_args(args(&["flush"]), &no_env).is_err());
        assert!(parse_args(args(&[]), &no_env).is_err());
        assert!(parse_args(args(&["install", "--no-such-flag"]), &no_env).is_err());
    }

    #[test]
    fn render_needs_transparent_and_takes_the_run_flags() {
        let p = parse_args(args(&["show"]), &no_env).unwrap();
        assert!(render(&p.config, false)
            .unwrap_err()
            .contains("--transparent"));
        let p = parse_args(
            args(&[
                "show",
                "--transparent",
                "0.0.0.0:1444",
                "--lan-iface",
                "lan0",
                "--lan-iface",
                "lan1",
                "--transparent-skip",
                "192.168.1.10",
                "--tg-ranges-url",
                "off",
            ]),
            &no_env,
        )
        .unwrap();
        let (text, summary) = render(&p.config, false).unwrap();
        assert!(
            text.contains("iifname != { \"lan0\", \"lan1\" } return"),
            "{text}"
        );
        assert!(text.contains("redirect to :1444"));
        assert!(text.contains("elements = { 192.168.1.10/32 }"));
        assert!(
            summary.contains("9 IPv4 and 5 IPv6 ranges (built-in)"),
            "{summary}"
        );
        let (ipt, _) = render(&p.config, true).unwrap();
        assert!(ipt.contains("-j REDIRECT --to-ports 1444"));
        let bad = std::env::temp_dir().join(format!("tg-fw-bad-{}", std::process::id()));
        std::fs::write(&bad, "<html>blocked</html>\n").unwrap();
        let p = parse_args(
            args(&[
                "show",
                "--transparent",
                "0.0.0.0:1444",
                "--tg-ranges",
                bad.to_str().unwrap(),
            ]),
            &no_env,
        )
        .unwrap();
        let e = render(&p.config, false).unwrap_err();
        assert!(e.contains("--tg-ranges") && e.contains("line 1"), "{e}");
        std::fs::remove_file(&bad).unwrap();
    }
}
