//! The `genkey` applet: print one fresh random secret (docs/protocol.md §1.5) on stdout.
//!
//! Owns the choice of secret form from `--dd` / `--ee DOMAIN` and writing that form around the
//! key ([`secret_text`]), which is then checked by parsing it back with
//! `mtproto::obfs2::Secret::parse`; the key comes from `Secret::generate` over `rng::Rng`.
//! With `--ee` it warns on stderr when the domain does not resolve (one blocking lookup through
//! `dns::oneshot`, the resolver's hosts file and resolv.conf rules). Writes no files.

use std::path::PathBuf;
use std::time::Duration;

use pico_args::Arguments;

use crate::cli::{self, CliError};
use crate::dns::oneshot;
use crate::mtproto::obfs2::Secret;
use crate::rng::Rng;

/// `tg-ws-proxy genkey --help`.
pub const HELP: &str = "\
tg-ws-proxy genkey: print a fresh random secret

Usage: tg-ws-proxy genkey [--dd | --ee DOMAIN [--hosts-file PATH] [--resolv-conf PATH]]

  (no flag)     32 hex digits: a plain secret for --secret, TG_SECRET or a secret file
      --dd      dd + 32 hex: clients must use padded intermediate
      --ee DOMAIN
                ee + 32 hex + hex(DOMAIN): fake-TLS, clients send DOMAIN as SNI; a
                warning on stderr when DOMAIN does not resolve (hellos that are not
                ours are handed to DOMAIN:443), the secret is printed anyway
      --hosts-file PATH    hosts file for that check (default /etc/hosts)
      --resolv-conf PATH   nameservers for that check (default /etc/resolv.conf)
      --resolve-timeout D  wait per nameserver (default 2s)
  -h, --help    this text

Example: umask 077; tg-ws-proxy genkey > /etc/tg-ws-proxy.secret
";

/// Prints the secret. Exit code 0, 1 if the OS has no randomness, 2 on bad usage.
pub fn main(mut args: Arguments) -> i32 {
    if args.contains(["-h", "--help"]) {
        print!("{HELP}");
        return 0;
    }
    let (form, check) = match parse_form(args) {
        Ok(f) => f,
        Err(e) => {
            eprintln!("tg-ws-proxy: {e}");
            return 2;
        }
    };
    let mut rng = match Rng::new() {
        Ok(r) => r,
        Err(e) => {
            eprintln!("tg-ws-proxy: no OS randomness: {e}");
            return 1;
        }
    };
    match secret_text(&Secret::generate(&mut rng).key_hex(), &form) {
        Ok(text) => {
            println!("{text}");
            if let Form::Ee(domain) = &form {
                if let Err(why) =
                    oneshot::resolve(&check.hosts, &check.resolv, domain, check.timeout)
                {
                    eprintln!(
                        "tg-ws-proxy: warning: --ee {domain} does not resolve ({why}); hellos \
                         that are not ours are handed to {domain}:443, so it must resolve where \
                         the proxy runs"
                    );
                }
            }
            0
        }
        Err(e) => {
            eprintln!("tg-ws-proxy: {e}");
            2
        }
    }
}

/// Requested secret form.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Form {
    /// 32 hex.
    Plain,
    /// `dd` + 32 hex.
    Dd,
    /// `ee` + 32 hex + hex(domain).
    Ee(String),
}

/// Where and how long `--ee`'s resolve check looks.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ResolveCheck {
    /// `--hosts-file` (default `/etc/hosts`).
    pub hosts: PathBuf,
    /// `--resolv-conf` (default `/etc/resolv.conf`).
    pub resolv: PathBuf,
    /// `--resolve-timeout` per nameserver (default 2 s).
    pub timeout: Duration,
}

fn parse_form(mut args: Arguments) -> Result<(Form, ResolveCheck), CliError> {
    let ee: Option<String> = args.opt_value_from_str("--ee").map_err(cli::pico_error)?;
    let dd = args.contains("--dd");
    let hosts: Option<PathBuf> = args
        .opt_value_from_str("--hosts-file")
        .map_err(cli::pico_error)?;
    let resolv: Option<PathBuf> = args
        .opt_value_from_str("--resolv-conf")
        .map_err(cli::pico_error)?;
    let timeout: Option<String> = args
        .opt_value_from_str("--resolve-timeout")
        .map_err(cli::pico_error)?;
    cli::reject_leftovers(args, "genkey")?;
    let timeout = match timeout {
        None => Duration::from_secs(2),
        Some(t) => match cli::parse_duration(&t) {
            Ok(d) if !d.is_zero() => d,
            Ok(_) => return Err(CliError::flag("--resolve-timeout", "must be > 0")),
            Err(e) => return Err(CliError::flag("--resolve-timeout", e)),
        },
    };
    let check = ResolveCheck {
        hosts: hosts.unwrap_or_else(|| PathBuf::from("/etc/hosts")),
        resolv: resolv.unwrap_or_else(|| PathBuf::from("/etc/resolv.conf")),
        timeout,
    };
    let form = form_of(dd, ee)?;
    Ok((form, check))
}

fn form_of(dd: bool, ee: Option<String>) -> Result<Form, CliError> {
    match (dd, ee) {
        (true, Some(_)) => Err(CliError::flag("--ee", "cannot be combined with --dd")),
        (true, None) => Ok(Form::Dd),
        (false, None) => Ok(Form::Plain),
        (false, Some(domain)) => {
            let bad = |m: String| CliError::flag("--ee", m);
            let domain = cli::parse_link_host(&domain).map_err(bad)?;
            if cli::parse_ip(&domain).is_ok() {
                return Err(bad(format!(
                    "'{domain}' is an IP address; fake-TLS needs a domain name"
                )));
            }
            Ok(Form::Ee(domain))
        }
    }
}

/// The secret text of `form` around a 32-hex key, checked by `Secret::parse`.
pub fn secret_text(key_hex: &str, form: &Form) -> Result<String, CliError> {
    let text = match form {
        Form::Plain => key_hex.to_string(),
        Form::Dd => format!("dd{key_hex}"),
        Form::Ee(domain) => {
            let hex: String = domain.bytes().map(|b| format!("{b:02x}")).collect();
            format!("ee{key_hex}{hex}")
        }
    };
    match Secret::parse(&text) {
        Ok(_) => Ok(text),
        Err(e) => Err(CliError::flag("--ee", format!("unusable secret: {e}"))),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KEY: &str = "00112233445566778899aabbccddeeff";

    fn form(v: &[&str]) -> Result<Form, CliError> {
        parse_form(Arguments::from_vec(v.iter().map(|s| s.into()).collect())).map(|(f, _)| f)
    }

    #[test]
    fn resolve_check_flags_and_defaults() {
        let parse = |v: &[&str]| {
            parse_form(Arguments::from_vec(v.iter().map(|s| s.into()).collect())).map(|(_, c)| c)
        };
        let d = parse(&["--ee", "a.io"]).unwrap();
        assert_eq!(d.hosts, PathBuf::from("/etc/hosts"));
        assert_eq!(d.resolv, PathBuf::from("/etc/resolv.conf"));
        assert_eq!(d.timeout, Duration::from_secs(2));
        let c = parse(&[
            "--ee",
            "a.io",
            "--hosts-file",
            "/h",
            "--resolv-conf",
            "/r",
            "--resolve-timeout",
            "300ms",
        ])
        .unwrap();
        assert_eq!(
            (c.hosts, c.resolv),
            (PathBuf::from("/h"), PathBuf::from("/r"))
        );
        assert_eq!(c.timeout, Duration::from_millis(300));
        assert!(parse(&["--resolve-timeout", "0"]).is_err());
        assert!(parse(&["--resolve-timeout", "x"]).is_err());
    }

    #[test]
    fn forms() {
        assert_eq!(form(&[]), Ok(Form::Plain));
        assert_eq!(form(&["--dd"]), Ok(Form::Dd));
        assert_eq!(
            form(&["--ee", "example.com"]),
            Ok(Form::Ee("example.com".into()))
        );
        assert!(form(&["--dd", "--ee", "a.b"]).is_err());
        assert!(form(&["--ee", "1.2.3.4"]).is_err());
        assert!(form(&["--ee"]).is_err());
        assert!(form(&["--xx"]).is_err());
    }

    #[test]
    fn texts_parse_back() {
        assert_eq!(secret_text(KEY, &Form::Plain).unwrap(), KEY);
        assert_eq!(secret_text(KEY, &Form::Dd).unwrap(), format!("dd{KEY}"));
        let ee = secret_text(KEY, &Form::Ee("a.io".into())).unwrap();
        assert_eq!(ee, format!("ee{KEY}612e696f"));
        let s = Secret::parse(&ee).unwrap();
        assert_eq!(s.key_hex(), KEY);
        assert_eq!(s.link_hex(), ee);
    }
}
