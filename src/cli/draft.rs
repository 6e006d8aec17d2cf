//! The configuration under construction ([`Draft`]) and where each value came from
//! ([`Source`]): the state the option table's writers (`table`) fill and the driver (`parse`)
//! settles. Below both, so the table and the driver each import it and not each other.

use std::path::PathBuf;

use super::CliError;
use crate::config::Config;

/// Where an option's value came from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Source {
    /// The command line (short, long or alias).
    Flag,
    /// This environment variable.
    Env(&'static str),
    /// The `--config` file, at this 1-based line (a list's first line).
    File(usize),
}

impl Source {
    /// The variable, for [`CliError::env`].
    pub(super) fn env(self) -> Option<&'static str> {
        match self {
            Source::Flag => None,
            Source::Env(name) => Some(name),
            Source::File(_) => None,
        }
    }

    /// Precedence: a flag beats a variable, a variable beats the file.
    pub(super) fn rank(self) -> u8 {
        match self {
            Source::Flag => 2,
            Source::Env(_) => 1,
            Source::File(_) => 0,
        }
    }
}

/// The configuration under construction while the table's writers run, plus the few values
/// that are settled only once every flag is in ([`Draft::finish`]).
pub(crate) struct Draft {
    /// Starts as [`Config::with_secrets`] with no secrets and no WS fronts: `--dc-ip` items
    /// replace the default fronts, which `finish` restores when none was given.
    pub config: Config,
    /// `--secret-file`: read (or created) in `finish`, after every other check passed.
    pub secret_file: Option<PathBuf>,
    /// `--cf-priority`: Cloudflare tiers first, unless `--tier-order` was given.
    pub cf_priority: bool,
    /// `-v` count (flag occurrences, or 1/0 from `TG_VERBOSE`).
    pub verbose: u32,
    /// `-q` count (flag occurrences, or 1/0 from `TG_QUIET`).
    pub quiet: u32,
    /// Long name and source of every option that got a value, in table order.
    pub(super) given: Vec<(&'static str, Source)>,
    /// The `--config` file as shown in errors, if one was read.
    pub(super) config_file: Option<String>,
}

impl Draft {
    /// The defaults, before any option is applied.
    pub(super) fn new() -> Draft {
        let mut config = Config::with_secrets(Vec::new());
        config.ws_addrs.clear();
        Draft {
            config,
            secret_file: None,
            cf_priority: false,
            verbose: 0,
            quiet: 0,
            given: Vec::new(),
            config_file: None,
        }
    }

    /// The one-line error about option `long` whose value came from `source`: `--flag (TG_VAR):
    /// msg`, or `--config FILE line N: --flag: msg` for a value from the file.
    pub(super) fn error(&self, long: &'static str, source: Source, msg: String) -> CliError {
        match (source, &self.config_file) {
            (Source::File(line), Some(file)) => {
                CliError::plain(format!("{file} line {line}: {long}: {msg}"))
            }
            _ => CliError::new(long, source.env(), msg),
        }
    }
}
