//! Command line, `TG_*` environment and `--config` file → [`Config`](crate::config::Config) for
//! `run` (and for `link` and `check`, which take the same flags), plus the value parsers other
//! applets share ([`parse_duration`], [`parse_link_host`], …).
//!
//! Every `run` flag is declared once in `table` (names, variables, default, help, writer);
//! `parse` drives the arguments and the environment from it ([`parse_run`]) and `help` renders
//! the option list of `run --help` ([`run_options_help`]). Value grammars live in `values` and
//! `duration`, the configuration under construction in `draft` (below both the table and
//! `parse`), the secret file's format and creation in `secret_file`, the configuration file's
//! format and read in `config_file` ([`config_keys`] lists its names). This file owns the error
//! shape (`--flag (TG_VAR): what is wrong`, one line), the environment seam and the helpers
//! applets use for flags of their own. A flag always wins over its variable, a variable over
//! the file; an empty variable counts as unset, so init scripts may export blanks.
//!
//! The only I/O is reading `--config` and `--secret-file` (creating the latter with a fresh
//! secret when missing) and checking that `--ca-file` is readable. Nothing here opens sockets,
//! installs the logger or prints: applets do that.

mod config_file;
#[cfg(test)]
mod config_tests;
mod draft;
mod duration;
#[cfg(test)]
mod flags_doc;
mod help;
mod opt;
mod parse;
mod secret_file;
mod table;
mod table_more;
mod values;

use std::fmt;

use pico_args::Arguments;

pub use config_file::{setting_in_file, MAX_CONFIG_BYTES};
pub use duration::{parse_duration, DURATION_HELP, MAX_DURATION};
pub use help::{run_options_help, RESTART_MARK};
pub use parse::{
    parse_run, parse_run_reload, parse_run_start, parse_run_without_secret_file, Note, RunArgs,
};
pub use secret_file::parse_secret_text;
pub use table::MAX_CONNECTIONS_LIMIT;
pub use values::{
    parse_bool, parse_cf_endpoint, parse_dc_addr, parse_ip, parse_link_host, parse_tier_order,
};

/// Environment lookup: returns the variable's value, `None` when unset. Injected so tests never
/// touch the process environment.
pub type Env<'a> = &'a dyn Fn(&str) -> Option<String>;

/// The real environment; empty values count as unset, non-UTF-8 bytes are replaced (and then
/// fail validation with a message naming the variable).
pub fn process_env(name: &str) -> Option<String> {
    let v = std::env::var_os(name)?;
    let v = v.to_string_lossy().into_owned();
    (!v.is_empty()).then_some(v)
}

/// A usage or configuration error: printed as ONE line `tg-ws-proxy: <Display>`, exit code 2.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CliError {
    /// Canonical long flag the problem is about (`--port`), if any.
    pub flag: Option<&'static str>,
    /// Environment variable the bad value came from, if it came from one.
    pub env: Option<&'static str>,
    /// What is wrong; never contains a secret.
    pub msg: String,
}

impl CliError {
    /// An error about `flag`, whose value came from `env` if `Some`.
    pub fn new(flag: &'static str, env: Option<&'static str>, msg: impl Into<String>) -> CliError {
        CliError {
            flag: Some(flag),
            env,
            msg: msg.into(),
        }
    }

    /// An error not tied to one flag.
    pub fn plain(msg: impl Into<String>) -> CliError {
        CliError {
            flag: None,
            env: None,
            msg: msg.into(),
        }
    }

    /// An error about `flag` (given on the command line).
    pub fn flag(flag: &'static str, msg: impl Into<String>) -> CliError {
        CliError::new(flag, None, msg)
    }
}

/// The one-line shape `--flag (TG_VAR): what is wrong`. Control characters in the message
/// (echoed from a file, a variable or an argument: ESC, NUL, line breaks) are written escaped
/// (`\u{1b}`), so a bad value cannot split the line or drive the terminal or the log.
impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.flag, self.env) {
            (Some(flag), Some(env)) => write!(f, "{flag} ({env}): ")?,
            (Some(flag), None) => write!(f, "{flag}: ")?,
            (None, _) => {}
        }
        for c in self.msg.chars() {
            if c.is_control() {
                write!(f, "{}", c.escape_default())?;
            } else {
                write!(f, "{c}")?;
            }
        }
        Ok(())
    }
}

/// Maps a pico-args failure to our one-line shape.
pub fn pico_error(e: pico_args::Error) -> CliError {
    match e {
        pico_args::Error::OptionWithoutAValue(flag) => CliError::flag(flag, "missing value"),
        pico_args::Error::NonUtf8Argument => CliError::plain("an argument is not valid UTF-8"),
        other => CliError::plain(other.to_string()),
    }
}

/// Fails on the first argument no parser consumed (`unknown flag '--x'`). A leftover that
/// looks like a secret is not echoed.
pub fn reject_leftovers(args: Arguments, applet: &str) -> Result<(), CliError> {
    let rest = args.finish();
    let Some(first) = rest.first() else {
        return Ok(());
    };
    let s = first.to_string_lossy();
    let hint = format!("see `tg-ws-proxy {applet} --help`");
    let msg = if s.starts_with('-') && s.len() > 1 {
        format!("unknown flag '{s}' ({hint})")
    } else if s.len() >= 32 && s.bytes().all(|b| b.is_ascii_hexdigit()) {
        format!("unexpected argument that looks like a secret: pass it as --secret or TG_SECRET ({hint})")
    } else {
        format!("unexpected argument '{s}' ({hint})")
    };
    Err(CliError::plain(msg))
}

/// One `run` setting as the configuration file (and UCI) names it, for tests and packaging.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ConfigKey {
    /// The file's NAME: the long flag without `--` (`cf-domain`).
    pub name: &'static str,
    /// Repeatable: each line adds items (a UCI `list`).
    pub list: bool,
    /// On or off: `NAME 1|0` (also on|off, true|false, yes|no); a bare NAME means on.
    pub switch: bool,
    /// Counted (`verbose 2`); a bare NAME means 1.
    pub count: bool,
    /// The default as `run --help` shows it (a value, or words such as `none`, `off`).
    pub default: &'static str,
    /// The flag's help text.
    pub help: &'static str,
    /// A reload applies a changed value to new sessions; `false`: it needs a restart (the
    /// reload keeps the old value and names it).
    pub live: bool,
    /// The setting's name in `reload: applied (…)` and `needs a restart: …` (shared by flags
    /// that set one setting: `host` and `port` are `listen`).
    pub setting: &'static str,
}

/// Every `run` option a configuration file may set (all but `config` itself), in table order.
pub fn config_keys() -> Vec<ConfigKey> {
    table::RUN_OPTIONS
        .iter()
        .filter(|o| o.long != config_file::CONFIG_FLAG)
        .map(|o| ConfigKey {
            name: &o.long[2..],
            list: matches!(o.kind, table::Kind::List(_)),
            switch: matches!(o.kind, table::Kind::Switch(_)) || o.meta == "on|off",
            count: matches!(o.kind, table::Kind::Count(_)),
            default: o.default,
            help: o.help,
            live: o.reload == table::Reload::Live,
            setting: o.setting(),
        })
        .collect()
}
