//! The driver: turns a command line and the `TG_*` environment into a validated [`Config`] by
//! walking the option table (`table::RUN_OPTIONS`) — take every flag's occurrences out of the
//! arguments, fall back to its variable, hand the value to the entry's writer — and then
//! settles the rules that join several flags ([`Draft::finish`]).
//!
//! Owns precedence (a flag beats its variable, a variable beats the `--config` file; the first
//! set variable of an entry is used; a list from a flag or variable replaces the file's), the
//! order of checks (leftover arguments first, then the configuration file's lines, then values
//! in table order, the secret file and the `--socks5-auth` users last) and the error's flag/variable/file-line naming. It
//! knows no flag by value grammar: that lives in the table's writers.

use std::path::PathBuf;

use log::{Level, LevelFilter};
use pico_args::Arguments;

use super::config_file::{self, Entry, CONFIG_FLAG};
pub(crate) use super::draft::{Draft, Source};
use super::secret_file::{load_or_create_secret_file, load_socks5_users};
use super::table::{Kind, Opt, RUN_OPTIONS};
use super::values::{is_lan_or_loopback, parse_bool, parse_in_range};
use super::{pico_error, reject_leftovers, CliError, Env};
use crate::config::{self, Config, Tier};

/// The outcome of parsing `run`'s flags.
#[derive(Clone, Debug)]
pub struct RunArgs {
    /// The validated configuration.
    pub config: Config,
    /// `--host`/`TG_HOST` was given (else `config.listen` holds the default 127.0.0.1).
    pub host_given: bool,
    /// Things worth logging once the logger is up (secret file created, loose permissions).
    /// Never contains a secret.
    pub notes: Vec<Note>,
}

/// A line for the log once it is up: level and text (never a secret).
pub type Note = (Level, String);

/// Command-line occurrences of one option, taken out of the arguments before any is judged.
#[derive(Default)]
pub(super) struct Taken {
    /// Values, for kinds that take one: short and long in argument order, then each alias's.
    pub values: Vec<String>,
    /// Occurrences, for switches.
    pub count: u32,
}

/// What a parse does when the `--secret-file` it was given does not exist.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum MissingSecretFile {
    /// `run`'s first start: create it with a fresh secret.
    Create,
    /// A reload of a running proxy: an error (a reload never replaces the secret every phone
    /// link holds).
    RefuseReload,
    /// `link` (any applet that uses the secrets but is not `run`): an error naming the path,
    /// the applet, and the two ways a secret is made.
    Refuse,
    /// An applet that never uses the proxy's secrets (`check`, `firewall`): the secret file is
    /// neither read nor created, whether it exists or not.
    Ignore,
}

/// Parses every `run` flag (and its env fallback) from `args` into a validated [`Config`],
/// for an applet other than `run` that uses the secrets (named `applet` in messages): `link`.
/// An argument left over fails first (`unknown flag`, naming `applet` in the hint), before any
/// value is judged; then values are judged in table order and the first bad one is reported.
/// Never creates a file: a `--secret-file` that does not exist is an error naming the path
/// and saying that `run` creates it on first start or `genkey` makes one (a mistyped path must
/// not print a link to a secret nothing serves).
pub fn parse_run(args: Arguments, applet: &str, env: Env) -> Result<RunArgs, CliError> {
    parse_run_with(args, applet, env, MissingSecretFile::Refuse)
}

/// [`parse_run`] for applets that never use the proxy's secrets (`check`, `firewall`, which
/// hand a placeholder `TG_SECRET` through `env`): a `--secret-file` from any source (flag,
/// variable, `--config` line) is neither read nor created.
pub fn parse_run_without_secret_file(
    args: Arguments,
    applet: &str,
    env: Env,
) -> Result<RunArgs, CliError> {
    parse_run_with(args, applet, env, MissingSecretFile::Ignore)
}

/// [`parse_run`] for `run`'s start: a missing `--secret-file` is created with a fresh secret
/// (see `RunArgs::notes`); that happens last, after every other check passed.
pub fn parse_run_start(args: Arguments, env: Env) -> Result<RunArgs, CliError> {
    parse_run_with(args, "run", env, MissingSecretFile::Create)
}

/// [`parse_run`] for a reload of a running proxy: the same rules, except that a missing
/// `--secret-file` is an error (`… does not exist; a reload never makes a new secret`) instead
/// of being created — a reload must not silently replace the secret every phone link holds.
pub fn parse_run_reload(args: Arguments, env: Env) -> Result<RunArgs, CliError> {
    parse_run_with(args, "run", env, MissingSecretFile::RefuseReload)
}

fn parse_run_with(
    mut args: Arguments,
    applet: &str,
    env: Env,
    missing: MissingSecretFile,
) -> Result<RunArgs, CliError> {
    let mut taken: Vec<Taken> = RUN_OPTIONS.iter().map(|_| Taken::default()).collect();
    // Valued options first, switches last: a switch search must not eat a flag's value.
    for (o, t) in RUN_OPTIONS.iter().zip(&mut taken) {
        if o.kind.takes_value() {
            t.values = take_values(&mut args, o)?;
        }
    }
    for (o, t) in RUN_OPTIONS.iter().zip(&mut taken) {
        if !o.kind.takes_value() {
            t.count = take_count(&mut args, o);
        }
    }
    reject_leftovers(args, applet)?;
    let mut draft = Draft::new();
    let (entries, note) = load_config(&taken, env, &mut draft)?;
    for (i, (o, t)) in RUN_OPTIONS.iter().zip(taken).enumerate() {
        if o.long == CONFIG_FLAG {
            continue; // read above
        }
        let file: Vec<&Entry> = entries.iter().filter(|e| e.opt == i).collect();
        draft.apply_from(o, t, env, &file)?;
    }
    let mut parsed = draft.finish(missing, applet)?;
    parsed.notes.extend(note);
    Ok(parsed)
}

/// Reads and splits the `--config` file (the last `--config` value, else `TG_CONFIG`), if any;
/// records it in the draft for error lines. Returns its entries and the warning when it holds a
/// `secret` line and is readable by group or others.
fn load_config(
    taken: &[Taken],
    env: Env,
    draft: &mut Draft,
) -> Result<(Vec<Entry>, Option<Note>), CliError> {
    let Some(i) = RUN_OPTIONS.iter().position(|o| o.long == CONFIG_FLAG) else {
        return Ok((Vec::new(), None));
    };
    let o = &RUN_OPTIONS[i];
    let (path, var) = match taken[i].values.last() {
        Some(p) => (p.clone(), None),
        None => match o.env.iter().find_map(|&n| env(n).map(|v| (v, n))) {
            Some((p, n)) => (p, Some(n)),
            None => return Ok((Vec::new(), None)),
        },
    };
    let shown = match var {
        Some(n) => format!("{CONFIG_FLAG} ({n}) {path}"),
        None => format!("{CONFIG_FLAG} {path}"),
    };
    let loaded = config_file::read_file(std::path::Path::new(&path))
        .map_err(|m| CliError::plain(format!("{shown}: {m}")))?;
    let entries = config_file::parse_text(&loaded.text).map_err(|e| {
        let flag = e.flag.map_or(String::new(), |f| format!("{f}: "));
        CliError::plain(format!("{shown} line {}: {flag}{}", e.line, e.msg))
    })?;
    let note = (config_file::has_inline_secret(&entries) && loaded.mode & 0o077 != 0).then(|| {
        (
            Level::Warn,
            format!(
                "configuration file {path} holds a secret and is readable by others (mode {:o}); \
                 chmod 600 it",
                loaded.mode & 0o777
            ),
        )
    });
    draft.config_file = Some(shown);
    Ok((entries, note))
}

/// All command-line values of `o`: short and long in argument order, then each alias's.
fn take_values(args: &mut Arguments, o: &Opt) -> Result<Vec<String>, CliError> {
    let mut out: Vec<String> = match o.short {
        Some(s) => args.values_from_str([s, o.long]),
        None => args.values_from_str(o.long),
    }
    .map_err(pico_error)?;
    for &alias in o.aliases {
        out.extend(
            args.values_from_str::<_, String>(alias)
                .map_err(pico_error)?,
        );
    }
    Ok(out)
}

/// The items of one comma-list occurrence: trimmed, blanks skipped.
fn list_items(text: &str) -> Vec<&str> {
    text.split(',')
        .map(str::trim)
        .filter(|i| !i.is_empty())
        .collect()
}

/// How often the switch `o` (any of its spellings) is on the command line.
fn take_count(args: &mut Arguments, o: &Opt) -> u32 {
    let mut n = 0;
    while match o.short {
        Some(s) => args.contains([s, o.long]),
        None => args.contains(o.long),
    } {
        n += 1;
    }
    for &alias in o.aliases {
        while args.contains(alias) {
            n += 1;
        }
    }
    n
}

impl Draft {
    /// Where the option named `long` got its value, `None` if it got none.
    pub(crate) fn source(&self, long: &str) -> Option<Source> {
        debug_assert!(
            RUN_OPTIONS.iter().any(|o| o.long == long),
            "{long} not in the table"
        );
        self.given.iter().find(|(l, _)| *l == long).map(|&(_, s)| s)
    }

    /// Runs `o`'s writer on its command-line values, else on its first set variable.
    #[cfg(test)]
    pub(super) fn apply(&mut self, o: &Opt, taken: Taken, env: Env) -> Result<(), CliError> {
        self.apply_from(o, taken, env, &[])
    }

    /// [`Draft::apply`] with `o`'s lines of the `--config` file as the last fallback.
    pub(super) fn apply_from(
        &mut self,
        o: &Opt,
        taken: Taken,
        env: Env,
        file: &[&Entry],
    ) -> Result<(), CliError> {
        let from_env = || {
            o.env
                .iter()
                .find_map(|&name| env(name).map(|text| (text, Source::Env(name))))
        };
        let (texts, source) = if !taken.values.is_empty() {
            (taken.values, Source::Flag)
        } else if taken.count > 0 {
            (Vec::new(), Source::Flag)
        } else {
            match from_env() {
                Some((text, source)) => (vec![text], source),
                None if file.is_empty() => return Ok(()),
                None => return self.apply_file(o, file),
            }
        };
        self.given.push((o.long, source));
        let err = |msg: String| CliError::new(o.long, source.env(), msg);
        match o.kind {
            Kind::Value(write) => {
                // Only the last occurrence counts (`texts` is never empty here).
                let text = texts.last().map_or("", |t| t.trim());
                write(self, text).map_err(err)
            }
            Kind::Path(write) => {
                let text = texts.last().cloned().unwrap_or_default();
                write(self, PathBuf::from(text)).map_err(err)
            }
            Kind::List(write) => {
                let lists: Vec<Vec<&str>> = texts.iter().map(|t| list_items(t)).collect();
                if lists.iter().any(Vec::is_empty) {
                    return Err(err("empty value".into()));
                }
                lists
                    .into_iter()
                    .flatten()
                    .try_for_each(|item| write(self, item))
                    .map_err(err)
            }
            Kind::Switch(write) => {
                let on = match source {
                    Source::Flag => true,
                    Source::Env(_) | Source::File(_) => parse_bool(&texts[0]).map_err(err)?,
                };
                write(self, on);
                Ok(())
            }
            Kind::Count(write) => {
                let n = match source {
                    Source::Flag => taken.count,
                    Source::Env(_) | Source::File(_) => {
                        u32::from(parse_bool(&texts[0]).map_err(err)?)
                    }
                };
                write(self, n);
                Ok(())
            }
        }
    }

    /// Runs `o`'s writer on its lines of the configuration file (never empty): a list takes
    /// every item of every line, other kinds their one line; a bare name is `on` (1 for a
    /// count). Errors name the line of the bad value.
    fn apply_file(&mut self, o: &Opt, file: &[&Entry]) -> Result<(), CliError> {
        let first = file[0].line;
        self.given.push((o.long, Source::File(first)));
        let err = |d: &Draft, line: usize, msg: String| d.error(o.long, Source::File(line), msg);
        let text = |e: &Entry| e.value.clone().unwrap_or_else(|| "on".to_string());
        let e = file[0];
        match o.kind {
            Kind::Value(write) => write(self, text(e).trim()).map_err(|m| err(self, e.line, m)),
            Kind::Path(write) => {
                write(self, PathBuf::from(text(e))).map_err(|m| err(self, e.line, m))
            }
            Kind::List(write) => {
                for e in file {
                    let t = text(e);
                    let items = list_items(&t);
                    if items.is_empty() {
                        return Err(err(self, e.line, "empty value".into()));
                    }
                    for item in items {
                        write(self, item).map_err(|m| err(self, e.line, m))?;
                    }
                }
                Ok(())
            }
            Kind::Switch(write) => {
                let on = parse_bool(&text(e)).map_err(|m| err(self, e.line, m))?;
                write(self, on);
                Ok(())
            }
            Kind::Count(write) => {
                let n = match &e.value {
                    None => 1,
                    Some(t) => parse_in_range(t, 0, MAX_COUNT)
                        .map_err(|m| err(self, e.line, format!("a count: {m}")))?
                        as u32,
                };
                write(self, n);
                Ok(())
            }
        }
    }

    /// The rules that join several flags: default WS fronts when `--dc-ip` gave none,
    /// `--cf-priority` unless `--tier-order` was given, `--cooldown-max` at least the base,
    /// `--outbound-proxy-backoff-max` at least its base, two ways in on one address, the SOCKS5
    /// exposure rules ([`Draft::socks5_exposure`]), `-v` against `-q`.
    pub(super) fn settle(&mut self) -> Result<(), CliError> {
        let tier_order_given = self.source("--tier-order").is_some();
        let level = log_level(
            (self.verbose, self.source("--verbose")),
            (self.quiet, self.source("--quiet")),
        );
        let c = &mut self.config;
        if c.ws_addrs.is_empty() {
            c.ws_addrs = config::default_ws_addrs();
        }
        if self.cf_priority && !tier_order_given {
            // Compatibility with the Rust port: Cloudflare's TLS tiers before the direct one,
            // every other tier after them in the default order (plain `ws://` stays after
            // the TLS tiers).
            let (cf, rest): (Vec<Tier>, Vec<Tier>) = Tier::ALL
                .iter()
                .partition(|t| t.is_cloudflare() && !t.is_plain());
            c.tier_order = cf.into_iter().chain(rest).collect();
        }
        c.health.max_ms = c.health.max_ms.max(c.health.base_ms);
        c.outbound_proxy_backoff_max = c.outbound_proxy_backoff_max.max(c.outbound_proxy_backoff);
        if c.lan_ifaces == [config::DEFAULT_LAN_IFACE] {
            // Said or not, the default: one value, so a reload sees no change.
            c.lan_ifaces.clear();
        }
        if let Some(m) = listener_clash(c) {
            return Err(CliError::flag(m.0, m.1));
        }
        c.log_level = match level {
            Ok(l) => l,
            Err(source) => {
                let msg = "cannot be combined with --verbose".to_string();
                return Err(self.error("--quiet", source, msg));
            }
        };
        self.socks5_exposure()
    }

    /// The SOCKS5 listener is never open to the internet by mistake (issue 21): `--socks5` on
    /// an address that is not loopback or private ([`is_lan_or_loopback`]: `0.0.0.0` and `::`
    /// are not) needs `--socks5-public`, and with `--socks5` on, `--socks5-public` needs
    /// `--socks5-auth` (a public SOCKS5 port without users is the open relay not to repeat).
    /// Without `--socks5` the two switches open nothing and are not checked.
    fn socks5_exposure(&self) -> Result<(), CliError> {
        let c = &self.config;
        if let Some(a) = c
            .socks5
            .filter(|a| !is_lan_or_loopback(a.ip()) && !c.socks5_public)
        {
            let source = self.source("--socks5").unwrap_or(Source::Flag);
            let m = format!(
                "{a} is not a loopback or private address (0.0.0.0 and :: listen on every \
                 interface, the WAN side too): give the LAN address, or --socks5-public with \
                 --socks5-auth to listen there anyway"
            );
            return Err(self.error("--socks5", source, m));
        }
        if c.socks5.is_some() && c.socks5_public && c.socks5_auth.is_none() {
            let source = self.source("--socks5-public").unwrap_or(Source::Flag);
            let m = "requires --socks5-auth FILE: a public SOCKS5 port without users is an open \
                     relay"
                .to_string();
            return Err(self.error("--socks5-public", source, m));
        }
        Ok(())
    }

    /// [`Draft::settle`], then the secrets: the secret file is read (or created) only now,
    /// once every other value passed; at least one secret is required; duplicates are dropped.
    /// A missing secret file is created only under [`MissingSecretFile::Create`]; otherwise it
    /// is an error (`applet` names who refused). The
    /// `--socks5-auth` users are read here too, at start and at every reload (never created):
    /// an unreadable or malformed file is an error naming the file and the line.
    fn finish(mut self, missing: MissingSecretFile, applet: &str) -> Result<RunArgs, CliError> {
        self.settle()?;
        let secret_file_source = self.source("--secret-file").unwrap_or(Source::Flag);
        let host_given = self.source("--host").is_some();
        let mut notes = Vec::new();
        if missing == MissingSecretFile::Ignore {
            self.secret_file = None;
        }
        if let Some(path) = &self.secret_file {
            if let Some(m) = missing_secret_file(path, missing, applet) {
                return Err(self.error("--secret-file", secret_file_source, m));
            }
            let create = missing == MissingSecretFile::Create;
            let (file_secrets, note) = load_or_create_secret_file(path, create)
                .map_err(|m| self.error("--secret-file", secret_file_source, m))?;
            let c = &mut self.config;
            c.secrets.extend(file_secrets);
            notes.extend(note);
        }
        if let Some(path) = &self.config.socks5_auth {
            let source = self.source("--socks5-auth").unwrap_or(Source::Flag);
            let (users, note) =
                load_socks5_users(path).map_err(|m| self.error("--socks5-auth", source, m))?;
            self.config.socks5_users = Some(users);
            notes.extend(note);
        }
        notes.extend(way_in_notes(&self.config));
        notes.extend(tier_notes(&self.config));
        let c = &mut self.config;
        if c.secrets.is_empty() {
            return Err(CliError::flag(
                "--secret",
                "no secret configured: set TG_SECRET, pass --secret-file PATH (`run` creates it \
                 with a fresh secret if missing), or make one with `tg-ws-proxy genkey`",
            ));
        }
        let mut i = 0;
        while i < c.secrets.len() {
            if c.secrets[..i].contains(&c.secrets[i]) {
                c.secrets.remove(i);
            } else {
                i += 1;
            }
        }
        Ok(RunArgs {
            config: self.config,
            host_given,
            notes,
        })
    }
}

/// The error for a `--secret-file` at `path` that does not exist when the parse may not create
/// it; `None` when it exists or may be created. (A file that vanishes between this check and
/// the read is not created either: the read creates only under [`MissingSecretFile::Create`].)
fn missing_secret_file(
    path: &std::path::Path,
    missing: MissingSecretFile,
    applet: &str,
) -> Option<String> {
    if missing == MissingSecretFile::Create || path.symlink_metadata().is_ok() {
        return None;
    }
    let p = path.display();
    Some(match missing {
        MissingSecretFile::RefuseReload => format!(
            "{p} does not exist; a reload never makes a new secret (restore the file, or \
             restart to create one)"
        ),
        _ => format!(
            "{p} does not exist; `{applet}` never makes a secret: `tg-ws-proxy run` creates the \
             file on first start, or `umask 077; tg-ws-proxy genkey > {p}` makes one (a typo in \
             the path?)"
        ),
    })
}

/// Warnings about the ways in that parse but cannot work as meant: a transparent listener on
/// loopback (nftables' `redirect` delivers to the address the packet arrived at, never
/// loopback), and `--socks5-auth` without `--socks5` (nothing listens).
fn way_in_notes(c: &config::Config) -> Vec<Note> {
    let mut notes = Vec::new();
    if let Some(a) = c.transparent.filter(|a| a.ip().is_loopback()) {
        notes.push((
            Level::Warn,
            format!(
                "--transparent {a}: a loopback address never receives redirected connections \
                 (they arrive at the LAN address): listen on 0.0.0.0, [::] or the LAN address"
            ),
        ));
    }
    if c.socks5_auth.is_some() && c.socks5.is_none() {
        notes.push((
            Level::Warn,
            "--socks5-auth is set but --socks5 is not: no SOCKS5 listener runs".to_string(),
        ));
    }
    notes
}

/// Warnings about tier switches that parse but do nothing: `--cfproxy-ws` on while neither
/// `--tier-order` nor `--media-tier-order` names `cfproxy-ws` (an opt-in that is never tried,
/// e.g. a tier order written before the tier existed).
fn tier_notes(c: &config::Config) -> Vec<Note> {
    let listed = |order: &[Tier]| order.contains(&Tier::CfProxyWs);
    if !c.cfproxy_ws || listed(&c.tier_order) || c.media_tier_order.as_deref().is_some_and(listed) {
        return Vec::new();
    }
    let order: Vec<&str> = c.tier_order.iter().map(|t| t.name()).collect();
    vec![(
        Level::Warn,
        format!(
            "--cfproxy-ws is on but --tier-order ({}) does not name cfproxy-ws: the tier is never \
             tried; add cfproxy-ws to --tier-order (or --media-tier-order)",
            order.join(",")
        ),
    )]
}

/// Two ways in on one address (a fixed port; port 0 picks a free one each): the flag to blame
/// and why.
fn listener_clash(c: &config::Config) -> Option<(&'static str, String)> {
    use crate::config::WayIn;
    let mut seen: Vec<(WayIn, std::net::SocketAddr)> = Vec::new();
    for way in WayIn::ALL {
        let Some(a) = c.listen_of(way) else { continue };
        if a.port() != 0 {
            if let Some((other, _)) = seen.iter().find(|(_, b)| *b == a) {
                let flag = if way == WayIn::Socks5 {
                    "--socks5"
                } else {
                    "--transparent"
                };
                let m = format!("{a} is already the {} listener's address", other.name());
                return Some((flag, m));
            }
        }
        seen.push((way, a));
    }
    None
}

/// Largest count a `verbose N` / `quiet N` line takes (past 2 nothing changes).
const MAX_COUNT: u64 = 9;

/// `-v`/`-q` (counts, sources) → level. The higher source wins (flag > variable > file); the
/// two together from the same source are an error, returned as that source.
fn log_level(
    verbose: (u32, Option<Source>),
    quiet: (u32, Option<Source>),
) -> Result<LevelFilter, Source> {
    let ((v, v_src), (q, q_src)) = (verbose, quiet);
    let rank = |s: Option<Source>| s.map_or(0, |s| s.rank() + 1);
    let (v, q) = match rank(v_src).cmp(&rank(q_src)) {
        std::cmp::Ordering::Greater => (v, 0),
        std::cmp::Ordering::Less => (0, q),
        std::cmp::Ordering::Equal => (v, q),
    };
    if v > 0 && q > 0 {
        return Err(q_src.unwrap_or(Source::Flag));
    }
    Ok(match (v, q) {
        (0, 0) => LevelFilter::Info,
        (0, _) => LevelFilter::Warn,
        (1, _) => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    })
}

#[cfg(test)]
#[path = "parse_tests.rs"]
mod tests;
