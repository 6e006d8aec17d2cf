//! Command line and `TG_*` environment → [`Config`] for `run` (and `link` and `check`, which
//! take the same flags), plus the value parsers other applets share ([`parse_duration`]).
//!
//! Owns flag names, their environment fallbacks (a flag always wins over its variable; an empty
//! variable counts as unset, so init scripts may export blanks), value syntax and range checks,
//! and the one-line error shape `--flag (TG_VAR): what is wrong`. The only I/O is reading
//! `--secret-file` (creating it with a fresh secret when missing, `secret_file`) and checking
//! that `--ca-file` is readable. It must not open sockets, install the logger or print: applets
//! do that. Help texts live with their applets (`applet::run::HELP` lists every flag parsed
//! here). Value grammars: `duration` and `values`.

mod duration;
mod secret_file;
mod values;

use std::collections::BTreeMap;
use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use log::{Level, LevelFilter};
use pico_args::Arguments;

use crate::config::{Config, Tier};
use crate::mtproto::obfs2::Secret;

pub use duration::{parse_duration, MAX_DURATION};
pub use secret_file::parse_secret_text;
pub use values::{
    parse_bool, parse_cf_endpoint, parse_dc_addr, parse_ip, parse_link_host, parse_tier_order,
};

use secret_file::load_or_create_secret_file;
use values::{check_readable_file, parse_in_range};

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

impl fmt::Display for CliError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match (self.flag, self.env) {
            (Some(flag), Some(env)) => write!(f, "{flag} ({env}): {}", self.msg),
            (Some(flag), None) => write!(f, "{flag}: {}", self.msg),
            (None, _) => f.write_str(&self.msg),
        }
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

/// One option: canonical long name, optional short form and alias, environment names (the
/// first is canonical; later ones are compatibility spellings).
struct Opt {
    long: &'static str,
    short: Option<&'static str>,
    alias: Option<&'static str>,
    env: &'static [&'static str],
}

const fn opt(long: &'static str, short: Option<&'static str>, env: &'static [&'static str]) -> Opt {
    Opt {
        long,
        short,
        alias: None,
        env,
    }
}

const HOST: Opt = opt("--host", Some("-H"), &["TG_HOST"]);
const PORT: Opt = opt("--port", Some("-p"), &["TG_PORT"]);
const SECRET: Opt = opt("--secret", Some("-s"), &["TG_SECRET"]);
const SECRET_FILE: Opt = opt("--secret-file", None, &["TG_SECRET_FILE"]);
const DC_IP: Opt = opt("--dc-ip", None, &["TG_DC_IP"]);
const TCP_DC_IP: Opt = opt("--tcp-dc-ip", None, &["TG_TCP_DC_IP"]);
const TIER_ORDER: Opt = opt("--tier-order", None, &["TG_TIER_ORDER"]);
const WS_TIMEOUT: Opt = opt("--ws-connect-timeout", None, &["TG_WS_CONNECT_TIMEOUT"]);
const TCP_TIMEOUT: Opt = Opt {
    long: "--tcp-connect-timeout",
    short: None,
    alias: Some("--tcp-fallback-timeout"),
    env: &["TG_TCP_CONNECT_TIMEOUT", "TG_TCP_FALLBACK_TIMEOUT"],
};
const HANDSHAKE_TIMEOUT: Opt = opt("--handshake-timeout", None, &["TG_HANDSHAKE_TIMEOUT"]);
const IDLE_TIMEOUT: Opt = opt("--idle-timeout", None, &["TG_IDLE_TIMEOUT"]);
const DRAIN: Opt = opt("--bad-client-drain", None, &["TG_BAD_CLIENT_DRAIN"]);
const STATS: Opt = opt("--stats-interval", None, &["TG_STATS_INTERVAL"]);
const MAX_CONN: Opt = opt("--max-connections", None, &["TG_MAX_CONNECTIONS"]);
const BUF_KB: Opt = opt("--buf-kb", None, &["TG_BUF_KB"]);
const CA_FILE: Opt = opt("--ca-file", None, &["TG_CA_FILE"]);
const INSECURE: Opt = opt(
    "--danger-accept-invalid-certs",
    None,
    &["TG_SKIP_TLS_VERIFY"],
);
const LOG_FILE: Opt = opt("--log-file", None, &["TG_LOG_FILE"]);
const LOG_MAX_KB: Opt = opt("--log-max-kb", None, &["TG_LOG_MAX_KB"]);
const VERBOSE: Opt = opt("--verbose", Some("-v"), &["TG_VERBOSE"]);
const QUIET: Opt = opt("--quiet", Some("-q"), &["TG_QUIET"]);
const LINK_IP: Opt = opt("--link-ip", None, &["TG_LINK_IP"]);
const WORKER: Opt = Opt {
    long: "--cf-worker-domain",
    short: None,
    alias: Some("--cfproxy-worker-domain"),
    env: &["TG_CF_WORKER_DOMAIN"],
};
const CF_DOMAIN: Opt = opt("--cf-domain", None, &["TG_CF_DOMAIN"]);
const CF_PRIORITY: Opt = opt("--cf-priority", None, &["TG_CF_PRIORITY"]);
const CF_TIMEOUT: Opt = opt("--cf-connect-timeout", None, &["TG_CF_CONNECT_TIMEOUT"]);
const HEDGE: Opt = opt("--hedge-delay", None, &["TG_HEDGE_DELAY"]);
const BUDGET: Opt = opt("--connect-budget", None, &["TG_CONNECT_BUDGET"]);
const COOLDOWN: Opt = Opt {
    long: "--cooldown-base",
    short: None,
    alias: Some("--ip-fail-cooldown"),
    env: &["TG_COOLDOWN_BASE", "TG_IP_FAIL_COOLDOWN"],
};
const COOLDOWN_MAX: Opt = opt("--cooldown-max", None, &["TG_COOLDOWN_MAX"]);
const QUARANTINE: Opt = opt("--flap-quarantine", None, &["TG_FLAP_QUARANTINE"]);
const REDIRECT_TTL: Opt = Opt {
    long: "--redirect-ttl",
    short: None,
    alias: Some("--ws-redirect-cooldown"),
    env: &["TG_REDIRECT_TTL", "TG_WS_REDIRECT_COOLDOWN"],
};
const PROBE_INTERVAL: Opt = opt("--probe-interval", None, &["TG_PROBE_INTERVAL"]);
const PROBE_TIMEOUT: Opt = opt("--probe-timeout", None, &["TG_PROBE_TIMEOUT"]);
const WORKER_BUDGET: Opt = opt("--worker-budget", None, &["TG_WORKER_BUDGET"]);
const WS_PING: Opt = opt("--ws-ping-interval", None, &["TG_WS_PING_INTERVAL"]);
const CF_PING: Opt = opt("--cf-ping-interval", None, &["TG_CF_PING_INTERVAL"]);
const KEEPALIVE: Opt = opt("--tcp-keepalive", None, &["TG_TCP_KEEPALIVE"]);
const LINGER: Opt = opt("--close-linger", None, &["TG_CLOSE_LINGER"]);
const PACE: Opt = opt("--handshake-pace", None, &["TG_HANDSHAKE_PACE"]);
const POOL_SIZE: Opt = opt("--pool-size", None, &["TG_POOL_SIZE"]);
const POOL_AGE: Opt = opt("--pool-max-age", None, &["TG_POOL_MAX_AGE"]);
const HOSTS_FILE: Opt = opt("--hosts-file", None, &["TG_HOSTS_FILE"]);
const RESOLV_CONF: Opt = opt("--resolv-conf", None, &["TG_RESOLV_CONF"]);

/// Every `run` option, for the help-text consistency test.
#[cfg(test)]
#[rustfmt::skip]
const ALL_OPTS: [&Opt; 44] = [
    &HOST, &PORT, &SECRET, &SECRET_FILE, &DC_IP, &TCP_DC_IP, &TIER_ORDER, &WS_TIMEOUT,
    &TCP_TIMEOUT, &HANDSHAKE_TIMEOUT, &IDLE_TIMEOUT, &DRAIN, &STATS, &MAX_CONN, &BUF_KB,
    &CA_FILE, &INSECURE, &LOG_FILE, &LOG_MAX_KB, &VERBOSE, &QUIET, &LINK_IP, &WORKER,
    &CF_DOMAIN, &CF_PRIORITY, &CF_TIMEOUT, &HEDGE, &BUDGET, &COOLDOWN, &COOLDOWN_MAX,
    &QUARANTINE, &REDIRECT_TTL, &PROBE_INTERVAL, &PROBE_TIMEOUT, &WORKER_BUDGET, &WS_PING,
    &CF_PING, &KEEPALIVE, &LINGER, &HOSTS_FILE, &RESOLV_CONF, &POOL_SIZE, &POOL_AGE,
    &PACE,
];

/// Upper bound of `--max-connections` (the slab is allocated once at this size).
pub const MAX_CONNECTIONS_LIMIT: usize = 65_536;
/// A raw value with where it came from, for error messages.
struct Val {
    text: String,
    flag: &'static str,
    env: Option<&'static str>,
}

impl Val {
    fn new(text: String, flag: &'static str, env: Option<&'static str>) -> Val {
        Val { text, flag, env }
    }

    fn err(&self, msg: impl Into<String>) -> CliError {
        CliError::new(self.flag, self.env, msg)
    }

    fn parse<T>(&self, f: impl FnOnce(&str) -> Result<T, String>) -> Result<T, CliError> {
        f(self.text.trim()).map_err(|m| self.err(m))
    }
}

/// All command-line values of `o` in order (short, long, then alias), without env fallback.
fn flag_values(args: &mut Arguments, o: &Opt) -> Result<Vec<String>, CliError> {
    let mut out: Vec<String> = match o.short {
        Some(s) => args.values_from_str([s, o.long]),
        None => args.values_from_str(o.long),
    }
    .map_err(pico_error)?;
    if let Some(alias) = o.alias {
        out.extend(
            args.values_from_str::<_, String>(alias)
                .map_err(pico_error)?,
        );
    }
    Ok(out)
}

/// The value of a single-valued option: the last command-line occurrence, else the first set
/// environment variable, else `None`.
fn single(args: &mut Arguments, o: &Opt, env: Env) -> Result<Option<Val>, CliError> {
    if let Some(text) = flag_values(args, o)?.pop() {
        return Ok(Some(Val::new(text, o.long, None)));
    }
    Ok(env_value(o, env))
}

/// The first set environment variable of `o`.
fn env_value(o: &Opt, env: Env) -> Option<Val> {
    o.env
        .iter()
        .find_map(|&name| env(name).map(|text| Val::new(text, o.long, Some(name))))
}

/// Items of a repeatable, comma-separated option: all command-line occurrences if any, else
/// the environment variable's list. Blank items are skipped; a value with no item is an error.
fn list(args: &mut Arguments, o: &Opt, env: Env) -> Result<Vec<Val>, CliError> {
    let given = flag_values(args, o)?;
    let (texts, from_env) = if given.is_empty() {
        match env_value(o, env) {
            Some(v) => (vec![v.text], v.env),
            None => return Ok(Vec::new()),
        }
    } else {
        (given, None)
    };
    let mut out = Vec::new();
    for text in texts {
        let before = out.len();
        for item in text.split(',').map(str::trim).filter(|i| !i.is_empty()) {
            out.push(Val::new(item.to_string(), o.long, from_env));
        }
        if out.len() == before {
            return Err(CliError::new(o.long, from_env, "empty value"));
        }
    }
    Ok(out)
}

/// A switch: how often it was given on the command line (`from_flag = true`), else 1/0 from
/// its boolean environment variable.
fn switch(args: &mut Arguments, o: &Opt, env: Env) -> Result<(u32, bool), CliError> {
    let mut n = 0;
    while match o.short {
        Some(s) => args.contains([s, o.long]),
        None => args.contains(o.long),
    } {
        n += 1;
    }
    if n > 0 {
        return Ok((n, true));
    }
    match env_value(o, env) {
        Some(v) => Ok((u32::from(v.parse(parse_bool)?), false)),
        None => Ok((0, false)),
    }
}

/// Parses every `run` flag (and its env fallback) from `args` into a validated [`Config`].
/// An argument left over fails first (`unknown flag`, naming `applet` in the hint), before any
/// value is judged. May create the `--secret-file` (see `RunArgs::notes`); that happens last,
/// after every other check passed.
pub fn parse_run(mut args: Arguments, applet: &str, env: Env) -> Result<RunArgs, CliError> {
    let args = &mut args;
    // Valued options first, switches last: a switch search must not eat a flag's value.
    let host = single(args, &HOST, env)?;
    let port = single(args, &PORT, env)?;
    let secrets = list(args, &SECRET, env)?;
    let secret_file = single(args, &SECRET_FILE, env)?;
    let dc_ip = list(args, &DC_IP, env)?;
    let tcp_dc_ip = list(args, &TCP_DC_IP, env)?;
    let tier_order = single(args, &TIER_ORDER, env)?;
    let ws_timeout = single(args, &WS_TIMEOUT, env)?;
    let tcp_timeout = single(args, &TCP_TIMEOUT, env)?;
    let handshake_timeout = single(args, &HANDSHAKE_TIMEOUT, env)?;
    let idle_timeout = single(args, &IDLE_TIMEOUT, env)?;
    let drain = single(args, &DRAIN, env)?;
    let stats = single(args, &STATS, env)?;
    let max_conn = single(args, &MAX_CONN, env)?;
    let buf_kb = single(args, &BUF_KB, env)?;
    let ca_file = single(args, &CA_FILE, env)?;
    let log_file = single(args, &LOG_FILE, env)?;
    let log_max_kb = single(args, &LOG_MAX_KB, env)?;
    let link_ip = single(args, &LINK_IP, env)?;
    let workers = list(args, &WORKER, env)?;
    let cf_domains = list(args, &CF_DOMAIN, env)?;
    let cf_timeout = single(args, &CF_TIMEOUT, env)?;
    let hedge = single(args, &HEDGE, env)?;
    let budget = single(args, &BUDGET, env)?;
    let cooldown = single(args, &COOLDOWN, env)?;
    let cooldown_max = single(args, &COOLDOWN_MAX, env)?;
    let quarantine = single(args, &QUARANTINE, env)?;
    let redirect_ttl = single(args, &REDIRECT_TTL, env)?;
    let probe_interval = single(args, &PROBE_INTERVAL, env)?;
    let probe_timeout = single(args, &PROBE_TIMEOUT, env)?;
    let worker_budget = single(args, &WORKER_BUDGET, env)?;
    let ws_ping = single(args, &WS_PING, env)?;
    let cf_ping = single(args, &CF_PING, env)?;
    let keepalive = single(args, &KEEPALIVE, env)?;
    let linger = single(args, &LINGER, env)?;
    let hosts_file = single(args, &HOSTS_FILE, env)?;
    let pool_size = single(args, &POOL_SIZE, env)?;
    let pace = single(args, &PACE, env)?;
    let pool_age = single(args, &POOL_AGE, env)?;
    let resolv_conf = single(args, &RESOLV_CONF, env)?;
    let (insecure, _) = switch(args, &INSECURE, env)?;
    let (cf_priority, _) = switch(args, &CF_PRIORITY, env)?;
    let verbose = switch(args, &VERBOSE, env)?;
    let quiet = switch(args, &QUIET, env)?;
    reject_leftovers(
        std::mem::replace(args, Arguments::from_vec(Vec::new())),
        applet,
    )?;

    let mut c = Config::with_secrets(Vec::new());
    if let Some(v) = &host {
        c.listen.set_ip(v.parse(parse_ip)?);
    }
    if let Some(v) = &port {
        c.listen.set_port(v.parse(|s| {
            s.parse::<u16>()
                .map_err(|_| "not a port number (0-65535)".into())
        })?);
    }
    if !dc_ip.is_empty() {
        c.ws_addrs = dc_map(&dc_ip)?;
    }
    c.tcp_addrs = dc_map(&tcp_dc_ip)?;
    if let Some(v) = &tier_order {
        c.tier_order = v.parse(parse_tier_order)?;
    }
    for v in &workers {
        c.worker_domains.push(v.parse(parse_cf_endpoint)?);
    }
    for v in &cf_domains {
        c.cf_domains.push(v.parse(parse_cf_endpoint)?);
    }
    if cf_priority > 0 && tier_order.is_none() {
        // Compatibility with the Rust port: Cloudflare tiers before the direct one.
        c.tier_order = vec![Tier::Worker, Tier::CfProxy, Tier::Ws, Tier::Tcp];
    }
    let mut policy_ms = [
        (&cooldown, c.health.base_ms),
        (&cooldown_max, c.health.max_ms),
        (&quarantine, c.health.quarantine_ms),
        (&redirect_ttl, c.health.redirect_ttl_ms),
    ];
    for (val, slot) in policy_ms.iter_mut() {
        if let Some(v) = val {
            let d = v.parse(parse_duration)?;
            if d.is_zero() {
                return Err(v.err("must be greater than 0"));
            }
            *slot = d.as_millis() as u64;
        }
    }
    c.health.base_ms = policy_ms[0].1;
    c.health.max_ms = policy_ms[1].1.max(c.health.base_ms);
    c.health.quarantine_ms = policy_ms[2].1;
    c.health.redirect_ttl_ms = policy_ms[3].1;
    if let Some(v) = &worker_budget {
        c.worker_budget = v.parse(|s| parse_in_range(s, 1, 100_000))? as u32;
    }
    if let Some(v) = &hosts_file {
        c.hosts_file = PathBuf::from(&v.text);
    }
    if let Some(v) = &pool_size {
        c.pool_size = v.parse(|s| parse_in_range(s, 0, 16))? as usize;
    }
    if let Some(v) = &resolv_conf {
        c.resolv_conf = PathBuf::from(&v.text);
    }
    let timeouts = [
        (&ws_timeout, &mut c.ws_connect_timeout, false),
        (&tcp_timeout, &mut c.tcp_connect_timeout, false),
        (&handshake_timeout, &mut c.handshake_timeout, false),
        (&idle_timeout, &mut c.idle_timeout, false),
        (&drain, &mut c.bad_client_drain, true),
        (&stats, &mut c.stats_interval, true),
        (&cf_timeout, &mut c.cf_connect_timeout, false),
        (&hedge, &mut c.hedge_delay, false),
        (&budget, &mut c.connect_budget, false),
        (&probe_interval, &mut c.probe_interval, false),
        (&probe_timeout, &mut c.probe_timeout, false),
        (&ws_ping, &mut c.ws_ping_interval, true),
        (&cf_ping, &mut c.cf_ping_interval, true),
        (&keepalive, &mut c.tcp_keepalive, true),
        (&linger, &mut c.close_linger, true),
        (&pool_age, &mut c.pool_max_age, false),
        (&pace, &mut c.handshake_pace, true),
    ];
    for (val, slot, zero_ok) in timeouts {
        if let Some(v) = val {
            let d = v.parse(parse_duration)?;
            if d.is_zero() && !zero_ok {
                return Err(v.err("must be greater than 0"));
            }
            *slot = d;
        }
    }
    if let Some(v) = &max_conn {
        c.max_connections =
            v.parse(|s| parse_in_range(s, 1, MAX_CONNECTIONS_LIMIT as u64))? as usize;
    }
    if let Some(v) = &buf_kb {
        c.buf_size = v.parse(|s| parse_in_range(s, 4, 1024))? as usize * 1024;
    }
    if let Some(v) = &ca_file {
        let path = PathBuf::from(&v.text);
        v.parse(|_| check_readable_file(&path))?;
        c.ca_file = Some(path);
    }
    c.accept_invalid_certs = insecure > 0;
    if let Some(v) = &log_file {
        c.log_file = Some(PathBuf::from(&v.text));
    }
    if let Some(v) = &log_max_kb {
        c.log_max_bytes = v.parse(|s| parse_in_range(s, 1, 4 * 1024 * 1024))? * 1024;
    }
    if let Some(v) = &link_ip {
        c.link_ip = Some(v.parse(parse_link_host)?);
    }
    c.log_level = log_level(verbose, quiet)?;

    // Secrets last: creating a secret file must not happen for a command line that fails.
    let mut notes = Vec::new();
    for v in &secrets {
        c.secrets
            .push(v.parse(|s| Secret::parse(s).map_err(|e| format!("invalid secret: {e}")))?);
    }
    if let Some(v) = &secret_file {
        let (file_secrets, note) =
            load_or_create_secret_file(Path::new(&v.text)).map_err(|m| v.err(m))?;
        c.secrets.extend(file_secrets);
        notes.extend(note);
    }
    if c.secrets.is_empty() {
        return Err(CliError::flag(
            "--secret",
            "no secret configured: set TG_SECRET, pass --secret-file PATH (created with a fresh \
             secret if missing), or make one with `tg-ws-proxy genkey`",
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
        config: c,
        host_given: host.is_some(),
        notes,
    })
}

/// `-v`/`-q` (counts, from_flag) → level. Command-line switches override the environment; the
/// two together from the same source are an error.
fn log_level(verbose: (u32, bool), quiet: (u32, bool)) -> Result<LevelFilter, CliError> {
    let ((v, v_flag), (q, q_flag)) = (verbose, quiet);
    let (v, q) = match (v_flag, q_flag) {
        (true, false) => (v, 0),
        (false, true) => (0, q),
        _ => (v, q),
    };
    if v > 0 && q > 0 {
        let env = (!v_flag).then_some("TG_QUIET");
        return Err(CliError::new(
            "--quiet",
            env,
            "cannot be combined with --verbose",
        ));
    }
    Ok(match (v, q) {
        (0, 0) => LevelFilter::Info,
        (0, _) => LevelFilter::Warn,
        (1, _) => LevelFilter::Debug,
        _ => LevelFilter::Trace,
    })
}

/// Items of a `DC:IP[:PORT]` list → map (a later item for the same DC wins).
fn dc_map(items: &[Val]) -> Result<BTreeMap<u16, SocketAddr>, CliError> {
    let mut map = BTreeMap::new();
    for v in items {
        let (dc, addr) = v.parse(parse_dc_addr)?;
        map.insert(dc, addr);
    }
    Ok(map)
}

#[cfg(test)]
mod tests {
    use std::os::unix::fs::PermissionsExt;
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
        parse_run(args, "run", &env_of(env))
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
    fn run_help_lists_every_flag_and_env_var() {
        let help = crate::applet::run::HELP;
        for o in ALL_OPTS {
            let names = [o.long].into_iter().chain(o.short).chain(o.alias);
            for name in names.chain(o.env.iter().copied()) {
                let found = help.match_indices(name).any(|(i, _)| {
                    let next = help[i + name.len()..].chars().next().unwrap_or(' ');
                    !(next.is_ascii_alphanumeric() || next == '-' || next == '_')
                });
                assert!(found, "{name} missing from run --help");
            }
        }
        for line in help.lines() {
            assert!(line.chars().count() <= 100, "help line too long: {line}");
        }
    }
}
