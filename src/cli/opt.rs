//! The shape of one `run` flag in the option table ([`Opt`]): names, variables, default,
//! help section ([`Group`]), how it takes its value ([`Kind`]) and what a reload does with it
//! ([`Reload`]), plus the value checks the table's writers share (durations, ranges). Below
//! the table (`table`, `table_more`) and the driver (`parse`), which both import it.

use std::path::PathBuf;
use std::time::Duration;

use super::draft::Draft;
use super::duration::parse_duration;

/// Upper bound of `--max-connections` (the slab is allocated once at this size).
pub const MAX_CONNECTIONS_LIMIT: usize = 65_536;

/// A writer: stores one (trimmed) value or list item in the draft, or says what is wrong with
/// it (a message without the flag's name; the driver adds flag and variable).
pub(crate) type Write = fn(&mut Draft, &str) -> Result<(), String>;

/// How a flag takes its value, and how its environment variable is read.
#[derive(Clone, Copy)]
pub(crate) enum Kind {
    /// One value, trimmed: the last command-line occurrence wins, else the first set variable.
    Value(Write),
    /// One file path, taken verbatim (not trimmed); otherwise like `Value`.
    Path(fn(&mut Draft, PathBuf) -> Result<(), String>),
    /// Repeatable comma list: the writer sees every item (trimmed, blanks skipped) of every
    /// command-line occurrence in order, else of the first set variable. An occurrence with no
    /// item is an error (`empty value`).
    List(Write),
    /// On or off; the variable is a boolean (`1`/`true`/`yes`/`on`, `0`/`false`/`no`/`off`).
    Switch(fn(&mut Draft, bool)),
    /// Counted per occurrence (`-v -v` is 2); the variable is a boolean, counted 1 or 0.
    Count(fn(&mut Draft, u32)),
}

impl Kind {
    /// True for the kinds that take a value after the flag.
    pub(crate) fn takes_value(self) -> bool {
        matches!(self, Kind::Value(_) | Kind::Path(_) | Kind::List(_))
    }
}

/// The `run --help` section a flag is listed in; sections print in [`Group::ALL`] order, flags
/// in table order within their section.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Group {
    Listen,
    Upstream,
    Ladder,
    Clients,
    Logging,
}

impl Group {
    /// Every section, in help order.
    pub(crate) const ALL: [Group; 5] = [
        Group::Listen,
        Group::Upstream,
        Group::Ladder,
        Group::Clients,
        Group::Logging,
    ];

    /// The section's heading line.
    pub(crate) fn heading(self) -> &'static str {
        match self {
            Group::Listen => "Listening and secrets:",
            Group::Upstream => "Upstream:",
            Group::Ladder => {
                "Ladder (route health is learned in the background; clients never wait on a dead \
                 route):"
            }
            Group::Clients => "Clients and resources:",
            Group::Logging => "Logging:",
        }
    }

    /// A line printed after the section's flags, if any.
    pub(crate) fn note(self) -> Option<&'static str> {
        match self {
            Group::Listen => {
                Some("At least one secret is required (`tg-ws-proxy genkey` makes one).")
            }
            _ => None,
        }
    }
}

/// What a reload (SIGHUP, `ctl reload`) does with a changed value of a flag.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Reload {
    /// Applied to new sessions at once; "reload: applied (SETTING)" names it.
    Live,
    /// Sized or opened once at start: a reload keeps the old value and says "needs a restart:
    /// SETTING" (`reactor::reload::keep_restart_only`).
    Restart,
}

/// One `run` flag, declared once.
#[derive(Clone, Copy)]
pub(crate) struct Opt {
    /// What a reload does with a changed value (`--help` marks [`Reload::Restart`] flags).
    pub reload: Reload,
    /// Canonical long name (`--port`); errors name it.
    pub long: &'static str,
    /// Short form (`-p`), if any.
    pub short: Option<&'static str>,
    /// Older long spellings still accepted on the command line; their values count after the
    /// long name's (so with both given, the alias's last value wins).
    pub aliases: &'static [&'static str],
    /// Environment variables, canonical first (later ones are compatibility spellings); the
    /// first one set is used when the flag is absent.
    pub env: &'static [&'static str],
    /// The value's placeholder in help (`N`, `D`, `PATH`); empty for switches.
    pub meta: &'static str,
    /// The default exactly as `--help` and docs/flags.md show it: a value the writer accepts and that
    /// leaves the default config unchanged, or words (`none`, `off`, `detected`, …; the
    /// tests keep the list).
    pub default: &'static str,
    /// The help section.
    pub group: Group,
    /// What the flag does, for `--help` (which adds aliases, variables and the default).
    pub help: &'static str,
    /// How the value is taken and where it is stored.
    pub kind: Kind,
}

impl Opt {
    /// The setting this flag sets, as a reload's report names it (`reactor::reload`): the long
    /// name without `--`, except for flags that share one setting (`listen`, `secrets`,
    /// `cooldown`, `verbose`, `tier-order`) and `--config`, which is the source itself.
    pub(crate) fn setting(&self) -> &'static str {
        match self.long {
            "--host" | "--port" => "listen",
            "--secret" | "--secret-file" => "secrets",
            "--cooldown-base"
            | "--cooldown-max"
            | "--flap-quarantine"
            | "--redirect-ttl"
            | "--closed-after-reply-cooldown" => "cooldown",
            "--verbose" | "--quiet" => "verbose",
            "--cf-priority" => "tier-order",
            long => &long[2..],
        }
    }
}

/// Any duration, 0 included.
pub(super) fn duration(s: &str) -> Result<Duration, String> {
    parse_duration(s)
}

/// A duration above 0.
pub(super) fn positive(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.is_zero() => Err("must be greater than 0".into()),
        d => Ok(d),
    }
}

/// 0, or whole seconds of at least 1 (fake-TLS timestamps are whole seconds).
pub(super) fn tls_window(s: &str) -> Result<Duration, String> {
    match parse_duration(s)? {
        d if d.subsec_nanos() != 0 => Err("must be whole seconds".into()),
        d => Ok(d),
    }
}

/// A duration above 0, in whole milliseconds (the route health policy's unit).
pub(super) fn positive_ms(s: &str) -> Result<u64, String> {
    // At most MAX_DURATION (24 h), so the milliseconds fit in u64.
    positive(s).map(|d| d.as_millis() as u64)
}
